"""vLLM 0.33 launch scripts: one ``vllm serve`` per instance plus a ``vllm-router`` in front.

Also the vLLM argument builders that the pod formats (dynamo, llm-d, k8s) reuse.
"""

from __future__ import annotations

from pdplan.engines import DEEPEP_LOW_LATENCY_TOKENS
from pdplan.errors import PdplanError
from pdplan.manifest.document import prompt_budget
from pdplan.manifest.export import common, prerequisites, shell
from pdplan.vocabulary import Router

SERVE_PORT_BASE = 8100          # instance i listens on SERVE_PORT_BASE + i
NIXL_SIDE_CHANNEL_BASE = 5600   # instance i's NIXL side channel; distinct per instance
#: Mooncake prefill instance i's bootstrap server listens on MOONCAKE_BOOTSTRAP_BASE + i: vLLM's
#: default VLLM_MOONCAKE_BOOTSTRAP_PORT (vllm/envs.py, 0.33.0), one port per instance so that
#: several prefill instances share a node; vllm-router takes it as ``--prefill URL PORT``.
MOONCAKE_BOOTSTRAP_BASE = 8998
ROUTER_PORT = 8000
RAY_PORT = 6379
#: Instance i whose DP ranks span nodes reaches its leader's DP coordinator on DATA_PARALLEL_RPC_PORT_BASE + i:
#: vLLM's default ``--data-parallel-rpc-port`` (vllm/config/parallel.py ParallelConfig.data_parallel_rpc_port,
#: 0.33.0), one port per instance so that instances can share a leader node.
DATA_PARALLEL_RPC_PORT_BASE = 29550
#: Exit status of a multi-node script run with a NODE_RANK its instance does not have.
BAD_NODE_RANK = 2
#: The Python the scripts run: vLLM's image (vllm-project/vllm docker/Dockerfile, vllm-base stage)
#: installs ``python3`` through update-alternatives and no ``python``; so does vLLM's own LWS helper
#: (examples/online_serving/multi-node-serving.sh).
PYTHON = "python3"

#: vLLM's speculative method for a checkpoint's own multi-token prediction module: "mtp" (vLLM 0.33.0,
#: vllm/config/speculative.py: MTPModelTypes lists "deepseek_mtp" and the other per-model names, which
#: SpeculativeConfig.__post_init__ replaces with "mtp", logging them as deprecated).
MTP_METHOD = "mtp"

#: vLLM's ``--kv-cache-dtype`` per KV precision of the plan (vLLM 0.33.0, vllm/config/cache.py ``CacheDType``:
#: "fp8" is fp8_e4m3 on CUDA). Stated for bf16 too: "auto" is the model's dtype only when the checkpoint's
#: quantization_config names no KV quantization, else that (vllm/utils/torch_utils.py
#: ``resolve_kv_cache_dtype_string``), so a ModelOpt FP8 checkpoint would cache fp8 under a plan verified at bf16.
KV_CACHE_DTYPES = {"bf16": "bfloat16", "fp8": "fp8"}
#: vLLM's ``--quantization`` for a checkpoint quantized as it loads, by (checkpoint, plan) weight precision:
#: "fp8_per_tensor", FP8 weights with per-tensor scales on linear and MoE layers (vLLM 0.33.0,
#: vllm/config/quantization.py ``_ONLINE_SHORTHANDS``). Not "fp8": Fp8Config refuses a checkpoint that is not
#: fp8-serialized ("no longer supports online quantization. Please use `--quantization fp8_per_tensor`",
#: vllm/model_executor/layers/quantization/fp8.py). No fp4 or mxfp4: "nvfp4_per_token" quantizes the MoE
#: experts alone and "mxfp4" every linear layer, neither what pdplan's fp4 (every block matrix) or mxfp4
#: (experts only) timed.
LOAD_QUANTIZATION = {("bf16", "fp8"): "fp8_per_tensor"}

# Connectors vllm-router speaks (--kv-connector; it defaults to nixl); others need no flag.
ROUTER_CONNECTORS = ("nixl", "mooncake")

#: vllm-router's ``--prefill-policy`` (its policy for the prefill workers in P/D mode) per prefill router of
#: the plan: vllm-project/router src/main.rs @03e9af5c1982f7568d79021d80d812edecb2d702 (CliArgs.prefill_policy:
#: random, round_robin, cache_aware, power_of_two, consistent_hash, sticky_least_loaded, rendezvous_hash), the
#: PyPI launcher py_src/vllm_router/router_args.py @1700eefa945ba6b8e244ed4c1ce7207743c8a1ff the same names. A
#: least-loaded plan keeps what the export always wrote, no flag: the router's default --policy cache_aware,
#: which routes by load once the workers' loads pass its balance thresholds (--balance-abs-threshold 64,
#: --balance-rel-threshold 1.5).
ROUTER_POLICIES = {Router.CACHE_AWARE: "cache_aware", Router.ROUND_ROBIN: "round_robin"}
#: vLLM 0.33.0's switch for a pool whose plan turns its prefix cache off (vllm/engine/arg_utils.py
#: ``add_cli_args``: --enable-prefix-caching, negatable, default None, which vLLM V1 resolves to
#: ModelConfig.is_prefix_caching_supported, true for a decoder: vllm/config/model.py). On is the default: no flag.
NO_PREFIX_CACHING = "--no-enable-prefix-caching"
#: vLLM 0.33.0's ``--all2all-backend`` (vllm/config/parallel.py ``All2AllBackend``) per phase of a P/D pool it runs on
#: DeepEP across nodes, as its expert-parallel deployment guide pairs them (docs/serving/
#: expert_parallel_deployment.md: high throughput for multi-node prefill, low latency with CUDA graphs for multi-node
#: decode). vLLM turns CUDA graphs off under the high-throughput kernels (vllm/config/compilation.py), which a prefill
#: pool's steps do not use.
DEEPEP_BACKENDS = {"prefill": "deepep_high_throughput", "decode": "deepep_low_latency"}
#: The vLLM 0.33.0 option that would hold a prefill pool's second prefix-cache tier, named in a notice and not
#: started. Host memory: --kv-offloading-size GiB (vllm/config/cache.py kv_offloading_size, native CPU
#: offloading), which sets the instance's KV connector to its own OffloadingConnector
#: (vllm/config/vllm.py ``_post_init_kv_transfer_config``), so a P/D instance runs it beside the handoff connector
#: in a MultiConnector (vllm/distributed/kv_transfer/kv_connector/factory.py). A remote store: LMCache
#: (--kv-offloading-backend lmcache with --kv-offloading-size: its LMCacheMPConnector, the store the LMCache
#: server's).
TIER_OPTIONS = {"host": "vLLM's --kv-offloading-size (native CPU offloading), beside the KV handoff connector in a "
                        "MultiConnector",
                "remote": "vLLM's --kv-offloading-backend lmcache with --kv-offloading-size (an LMCache server's "
                          "store)"}


def engine_args(manifest: dict, pool: dict) -> list[str]:
    """vLLM arguments that follow from the plan and the pool: the checkpoint's revision and remote code, precision,
    parallelism, memory, the prompt budget, the requests a rank runs at once where the plan holds them
    (``--max-num-seqs``, vLLM 0.33.0's per engine core), a prefix cache the plan turns off, KV transfer, speculative
    decoding and the MoE kernels the plan was timed with."""
    args = [*common.checkpoint_args(manifest), *parallel_args(manifest, pool),
            "--gpu-memory-utilization", str(pool["memory"]["memory_utilization"]),
            *common.precision_args(manifest, "vLLM", KV_CACHE_DTYPES, LOAD_QUANTIZATION)]
    args += prompt_budget_args(pool) + all_to_all_args(manifest, pool)
    cap = common.running_cap(pool)
    if cap is not None:  # per DP rank: each rank's engine core schedules its own batch
        args += ["--max-num-seqs", str(cap)]
    if common.prefix_cache_off(pool):
        args.append(NO_PREFIX_CACHING)
    kv = common.kv_transfer_config(manifest, pool)
    if kv is not None:
        args += ["--kv-transfer-config", common.compact_json(kv)]
    drafting = speculative_config(manifest)
    if drafting is not None:
        args += ["--speculative-config", common.compact_json(drafting)]
    return args + kernel_args(manifest)


def prompt_budget_args(pool: dict) -> list[str]:
    """The prompt tokens each rank of the pool takes per iteration, as pdplan verified them
    (:func:`~pdplan.manifest.document.prompt_budget`: a chunked pool's chunk, a prefill pool's batch cap), as vLLM
    0.33.0's ``--max-num-batched-tokens``. vLLM's own default for its API server is 16,384 on GPUs of 160 GiB and more,
    8,192 from 70 GiB (not an A100) and 2,048 below (vllm/engine/arg_utils.py ``_set_default_args``), so a prefill pool
    verified at a 16,384-token cap would otherwise run in smaller steps. Each DP rank's engine core takes the budget
    whole. vLLM sizes its activation memory for it in its profiling run, out of the KV pool, which pdplan's memory plan
    leaves to the 1 − utilization margin. A manifest written before the cap was recorded starts a prefill pool with
    vLLM's default, as before."""
    chunk, _ = prompt_budget(pool)
    return ["--max-num-batched-tokens", str(chunk)] if chunk else []


def all_to_all_args(manifest: dict, pool: dict) -> list[str]:
    """The DeepEP all-to-all of a P/D pool of expert parallelism across nodes that was timed with a dispatch
    (:func:`common.starts_deepep`; a pool whose experts DeepEP cannot spread,
    :data:`pdplan.engines.DEEPEP_EVEN_EXPERTS`, was refused with the plan): ``--all2all-backend`` of
    :data:`DEEPEP_BACKENDS`, and for a decode
    pool the token budget DeepEP's low-latency buffers are sized for, ``--max-num-batched-tokens``
    :data:`pdplan.engines.DEEPEP_LOW_LATENCY_TOKENS` (vLLM's own default under batched DP MoE, stated). Every other
    pool keeps vLLM's default, which gathers (the header says so of a pool timed with a dispatch)."""
    if not starts_deepep(manifest, pool):
        return []
    args = ["--all2all-backend", DEEPEP_BACKENDS[pool["phase"]]]
    if common.starts_low_latency("vllm", pool, spans_nodes=True):
        args += ["--max-num-batched-tokens", str(DEEPEP_LOW_LATENCY_TOKENS["vllm"])]
    return args


def starts_deepep(manifest: dict, pool: dict) -> bool:
    """Whether the export starts DeepEP for the pool (:func:`common.starts_deepep`), the node map read only for a
    pool that would run it across nodes: a script per instance asks, and most pools never could."""
    return common.starts_deepep("vllm", pool, spans_nodes=True) and common.pool_spans_nodes(manifest, pool)


def parallel_args(manifest: dict, pool: dict) -> list[str]:
    """vLLM 0.33.0's parallel sizes of a pool (vllm/engine/arg_utils.py ``add_cli_args``, vllm/config/parallel.py):
    ``--tensor-parallel-size`` and ``--pipeline-parallel-size``; with attention data parallelism
    ``--data-parallel-size`` DP (one engine core per DP rank, each with its own batch and KV; docs/serving/
    data_parallel_deployment.md); with expert parallelism ``--enable-expert-parallel``, whose EP group is every
    TP x DP rank ("expert layers form a group of size DP x TP", the same page), so a plan's EP other than TP x DP
    cannot be started and is refused; with redundant experts ``--enable-eplb`` and ``--eplb-config
    {"num_redundant_experts": N}`` (ParallelConfig refuses num_redundant_experts without EPLB, and EPLB without
    expert parallelism)."""
    found = common.parallel(pool)
    args = ["--tensor-parallel-size", str(found.tp), "--pipeline-parallel-size", str(found.pp)]
    if found.dp > 1:
        args += ["--data-parallel-size", str(found.dp)]
    if found.ep > 1:
        if found.ep != found.tp * found.dp:
            raise PdplanError(f"pool {pool['name']} has EP {found.ep}, but vLLM's expert parallelism spans every "
                              f"TP x DP rank of an instance ({found.tp * found.dp} here): plan EP "
                              f"{found.tp * found.dp}, or serve it with SGLang", field=common.pool_field(manifest, pool,
                                                                                                     "ep"))
        args.append("--enable-expert-parallel")
    if found.redundant_experts:
        if found.ep == 1:
            raise PdplanError(f"pool {pool['name']} has {found.redundant_experts} redundant experts but no expert "
                              "parallelism (EP 1), and vLLM places redundant experts only by EPLB, which needs it",
                              field=common.pool_field(manifest, pool, "redundant_experts"))
        args += ["--enable-eplb", "--eplb-config", common.compact_json(
            {"num_redundant_experts": found.redundant_experts})]
    return args


def spans_by_data_parallel(pool: dict, spans_nodes: bool) -> bool:
    """An instance of the pool that spans nodes runs its DP ranks on them (vLLM's multi-node data
    parallelism, one ``vllm serve`` per node), not its pipeline stages through Ray: a pool with DP > 1."""
    return spans_nodes and common.parallel(pool).dp > 1


def speculative_config(manifest: dict) -> dict | None:
    """vLLM's ``--speculative-config`` (JSON, vllm/engine/arg_utils.py reads it with json.loads into
    SpeculativeConfig) for a deployment that drafts with MTP; None for one that does not. Every pool
    gets it, prefill too: NixlConnector's handshake refuses a prefill and a decode instance whose
    EAGLE/MTP setups differ (vLLM 0.33.0, vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py,
    compatibility version 6; vllm-project/vllm#49230)."""
    found = common.speculative(manifest)
    if found is None:
        return None
    return {"method": MTP_METHOD, "num_speculative_tokens": found["draft_tokens"]}


def serve_command(manifest: dict, pool: dict, port: int, *, ray: bool) -> list[str]:
    """The full ``vllm serve`` command of one instance; ``ray`` when its stages span nodes."""
    command = ["vllm", "serve", common.served_model(manifest), *engine_args(manifest, pool), "--port", str(port)]
    return command + (["--distributed-executor-backend", "ray"] if ray else [])


#: How long a multi-node leader waits for its workers to join its Ray cluster, and how often it looks:
#: vLLM's own LeaderWorkerSet helper, examples/online_serving/multi-node-serving.sh (vllm-project/vllm
#: @2584e94bc2b500b84af054a71559f04e60c4aec2), ``ray_init_timeout=300`` polled every 5 s.
RAY_WAIT_SECONDS = 300
RAY_POLL_SECONDS = 5
#: Exit status of a leader whose workers did not all join in time.
RAY_WAIT_FAILED = 1
#: Succeeds once the Ray cluster this node belongs to has argv[1] live nodes and argv[2] GPUs; prints
#: what it has. The same count as vLLM's helper above (``sum(node["Alive"] for node in ray.nodes())``),
#: plus the GPUs, which vLLM's placement group needs one per TP×PP rank
#: (vllm/v1/executor/ray_utils.py ``initialize_ray_cluster``: a bundle of one GPU per rank).
_RAY_READY = ('import sys, ray; ray.init(address="auto", logging_level="ERROR"); '
              'nodes = sum(1 for n in ray.nodes() if n["Alive"]); gpus = ray.cluster_resources().get("GPU", 0); '
              'print(f"ray cluster: {nodes} nodes, {gpus:g} GPUs"); '
              'sys.exit(0 if nodes >= int(sys.argv[1]) and gpus >= int(sys.argv[2]) else 1)')


def ray_launch(serve: list[str], *, rank: shell.Var, leader: shell.Word, nodes: int, gpus: int) -> list[str]:
    """Shell lines for a multi-node instance: rank 0 starts the Ray head, waits until all ``nodes``
    with ``gpus`` GPUs have joined (or gives up after RAY_WAIT_SECONDS with a clear error), then
    starts vLLM, which places its pipeline stages (or a TP group over trays NVLink joins) through Ray; the other
    nodes join the head's cluster and block. vLLM alone would wait 1800 s for its placement group and then fail with a
    resource error (ray_utils.py ``_wait_until_pg_ready``, ``PG_WAIT_TIMEOUT``)."""
    late = (f"pdplan: the Ray cluster of this instance has not reached {nodes} nodes and {gpus} GPUs after "
            f"{RAY_WAIT_SECONDS} s: its other nodes have not all joined (each runs this instance with its rank; "
            f"see ray status); vLLM was not started")
    return [f"if [ {shell.word(rank)} = 0 ]; then",
            "  " + shell.line(["ray", "start", "--head", f"--port={RAY_PORT}"]),
            "  waited=0",
            "  until " + shell.line([PYTHON, "-c", _RAY_READY, str(nodes), str(gpus)]) + "; do",
            f'    if [ "$waited" -ge {RAY_WAIT_SECONDS} ]; then {shell.fail(late, RAY_WAIT_FAILED)}; fi',
            f"    sleep {RAY_POLL_SECONDS}",
            f"    waited=$((waited + {RAY_POLL_SECONDS}))",
            "  done",
            "  " + shell.command(serve),
            "fi",
            "exec " + shell.line(["ray", "start", ("--address=", leader, f":{RAY_PORT}"), "--block"])]


def export(manifest: dict, *, image: str | None = None) -> dict[str, str]:
    """``vllm/<instance>.sh`` per instance and ``vllm/router.sh``; ``image`` is unused."""
    files = {}
    workers: dict[str, list[list[str]]] = {}
    # Ports of the KV connectors, spaced so that the instances' DP ranks never share one: a NIXL rank listens
    # on its instance's port + its DP rank (nixl/base_scheduler.py), a Mooncake rank on the instance's
    # bootstrap port + its DP rank x TP (mooncake/mooncake_connector.py get_mooncake_side_channel_port).
    side_channel, mooncake = NIXL_SIDE_CHANNEL_BASE, MOONCAKE_BOOTSTRAP_BASE
    for index, inst in enumerate(common.instances(manifest)):
        port = SERVE_PORT_BASE + index
        found = common.parallel(inst.pool)
        bootstrap = mooncake if has_bootstrap(manifest, inst.pool) else None
        files[common.script_name("vllm", inst)] = _instance_script(manifest, inst, port, side_channel, bootstrap,
                                                                   DATA_PARALLEL_RPC_PORT_BASE + index)
        side_channel += found.dp
        mooncake += (found.dp - 1) * found.tp + 1
        url = f"http://{inst.nodes[0]}:{port}"
        workers.setdefault(inst.pool["phase"], []).append([url] if bootstrap is None else [url, str(bootstrap)])
    files["vllm/router.sh"] = _router_script(manifest, workers)
    return files


def has_bootstrap(manifest: dict, pool: dict) -> bool:
    """A Mooncake prefill instance serves its KV through a bootstrap server (vLLM's MooncakeConnector)."""
    return manifest["transfer"]["connector"] == "mooncake" and pool["phase"] == "prefill"


def _instance_script(manifest: dict, inst: common.Instance, port: int, side_channel: int,
                     bootstrap: int | None, rpc_port: int) -> str:
    """An instance's script. Its NIXL side channel listens on its own node: the leader's for one whose
    pipeline stages span nodes, as before; each node's own for one whose DP ranks do (the ranks of a node
    listen on that node, vLLM 0.33.0 nixl/base_scheduler.py: VLLM_NIXL_SIDE_CHANNEL_PORT + the DP rank),
    which also sees only its own GPUs of the node map."""
    pool = inst.pool
    by_dp = spans_by_data_parallel(pool, inst.spans_nodes)
    lines = common.instance_preamble(manifest, "vllm", inst)
    lines += [shell.comment(note) for note in common.cache_tier_notes([pool], TIER_OPTIONS)]
    connector = manifest["transfer"]["connector"] if pool["phase"] != "colocated" else None
    lines += prerequisites.lines(prerequisites.instance("vllm", connector, spans_nodes=inst.spans_nodes and not by_dp,
                                                        deepep=starts_deepep(manifest, pool)),
                                 f"instance {inst.name}", PYTHON)
    nixl = manifest["transfer"]["connector"] == "nixl" and pool["phase"] != "colocated"
    if nixl and not by_dp:
        lines.append(shell.export("VLLM_NIXL_SIDE_CHANNEL_HOST", inst.nodes[0]))
    if nixl:
        lines.append(shell.export("VLLM_NIXL_SIDE_CHANNEL_PORT", str(side_channel)))
    if bootstrap is not None:
        lines.append(shell.export("VLLM_MOONCAKE_BOOTSTRAP_PORT", str(bootstrap)))
    serve = serve_command(manifest, pool, port, ray=inst.spans_nodes and not by_dp)
    if by_dp:
        node_env = [[shell.export("CUDA_VISIBLE_DEVICES", ",".join(map(str, gpus)))]
                    + ([shell.export("VLLM_NIXL_SIDE_CHANNEL_HOST", node)] if nixl else [])
                    for node, gpus in zip(inst.nodes, inst.node_gpu_indices)]
        lines += data_parallel_launch(manifest, pool, serve, rank=common.NODE_RANK, leader=inst.nodes[0],
                                      nodes=len(inst.nodes), rpc_port=rpc_port, node_env=node_env)
    elif inst.spans_nodes:
        lines += ray_launch(serve, rank=common.NODE_RANK, leader=inst.nodes[0], nodes=len(inst.nodes),
                            gpus=pool["tp"] * pool["pp"])
    else:
        lines.append(shell.command(serve))
    return "\n".join(lines) + "\n"


def local_data_parallel(manifest: dict, pool: dict, nodes: int) -> int:
    """DP ranks each node runs of an instance of the pool over ``nodes`` nodes (vLLM's
    ``--data-parallel-size-local``): DP / nodes. Each node's ranks are whole (TP x PP GPUs of a node), so a DP
    that the nodes do not share evenly is refused."""
    found = common.parallel(pool)
    if found.dp % nodes:
        raise PdplanError(f"pool {pool['name']} runs DP {found.dp} over {nodes} nodes, which vLLM cannot split "
                          f"evenly: each node runs --data-parallel-size-local whole ranks of TP x PP GPUs",
                          field=common.pool_field(manifest, pool, "dp"))
    return found.dp // nodes


def data_parallel_launch(manifest: dict, pool: dict, serve: list[str], *, rank: shell.Var, leader: shell.Word,
                         nodes: int, rpc_port: int, node_env: list[list[str]] | None = None,
                         hybrid: bool = False) -> list[str]:
    """Shell lines that start one node's share of an instance whose DP ranks span ``nodes`` nodes, as vLLM's
    data-parallel deployment guide runs it (vllm-project/vllm docs/serving/data_parallel_deployment.md): every
    node runs ``vllm serve`` with the instance's ``--data-parallel-size``, its own ``--data-parallel-size-local``
    ranks (:func:`local_data_parallel`), and the leader's ``--data-parallel-address`` and
    ``--data-parallel-rpc-port``.

    - "Internal Load Balancing" (the default): the leader serves the HTTP API, the others run ``--headless`` from
      ``--data-parallel-start-rank`` (node rank x local ranks). The leader gets no start rank: vLLM 0.33.0 takes a
      start rank without --headless for hybrid load balancing (vllm/engine/arg_utils.py ``create_engine_config``).
    - ``hybrid`` load balancing: every node serves the HTTP API over its own ranks, ``--data-parallel-hybrid-lb``
      from its ``--data-parallel-start-rank`` (0 on the leader), and a balancer in front spreads requests over the
      nodes; for pods that are all endpoints (one pod template for a whole group, one pod per node), as llm-d's
      wide-EP deployments run vLLM (llm-d.ai docs/guides/wide-ep-lws/experimental-dp-aware: "we have primarily
      been using vLLM's hybrid DP-load balancing"). With one rank per node vLLM 0.33.0 runs it as external load
      balancing, each rank its own API server (``create_engine_config``: "data_parallel_hybrid_lb is not eligible
      when data_parallel_size_local = 1")."""
    local = local_data_parallel(manifest, pool, nodes)
    shared = ["--data-parallel-size-local", str(local), "--data-parallel-address", leader,
              "--data-parallel-rpc-port", str(rpc_port)]
    lines = [f"case {shell.word(rank)} in"]
    for node in range(nodes):
        if hybrid:
            role = ["--data-parallel-hybrid-lb", "--data-parallel-start-rank", str(node * local)]
        else:
            role = [] if node == 0 else ["--headless", "--data-parallel-start-rank", str(node * local)]
        env = node_env[node] if node_env else []
        lines += [f"  {node})", *(f"    {line}" for line in env), "    " + shell.command(serve + role + shared),
                  "    ;;"]
    wrong = f"pdplan: this instance runs on {nodes} nodes: give its node rank, 0 to {nodes - 1} (0 on the leader)"
    return lines + ["  *)", "    " + shell.fail(wrong, BAD_NODE_RANK), "    ;;", "esac"]


def _router_script(manifest: dict, workers: dict[str, list[list[str]]]) -> str:
    """P/D: vllm-router in P/D mode over the prefill and decode instances. Colocated: the same
    router over plain workers, so both plans are fronted the same way (any OpenAI-compatible load
    balancer would also do)."""
    lines = common.script_preamble(manifest, "vllm", "router in front of every instance")
    lines += prerequisites.lines(prerequisites.router("vllm"), "the router", PYTHON)
    command = ["vllm-router", "--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    if common.is_disaggregated(manifest):
        command.append("--vllm-pd-disaggregation")
        connector = manifest["transfer"]["connector"]
        if connector in ROUTER_CONNECTORS:
            command += ["--kv-connector", connector]
        command += common.prefill_policy_args(manifest, ROUTER_POLICIES)
        for worker in workers.get("prefill", []):  # with Mooncake: URL and bootstrap port
            command += ["--prefill", *worker]
        for url, in workers.get("decode", []):
            command += ["--decode", url]
    else:
        command += ["--worker-urls", *(url for url, in workers["colocated"])]
    lines.append(shell.command(command))
    return "\n".join(lines) + "\n"


def pod_command(manifest: dict, pool: dict, port: int, *, spans_nodes: bool,
                hybrid: bool = False) -> tuple[list[str], list[str]]:
    """Container command and args of a pool's pods. A pod of a multi-node LeaderWorkerSet
    group learns its rank and leader from the variables LWS injects; ``hybrid``: every pod of a group whose
    DP ranks span nodes serves the API (:func:`data_parallel_launch`)."""
    by_dp = spans_by_data_parallel(pool, spans_nodes)
    serve = serve_command(manifest, pool, port, ray=spans_nodes and not by_dp)
    if not spans_nodes:
        return serve[:2], serve[2:]
    rank, leader = shell.Var("LWS_WORKER_INDEX"), shell.Var("LWS_LEADER_ADDRESS")
    if by_dp:
        script = data_parallel_launch(manifest, pool, serve, rank=rank, leader=leader,
                                      nodes=common.pods_per_instance(manifest, pool),
                                      rpc_port=DATA_PARALLEL_RPC_PORT_BASE, hybrid=hybrid)
    else:
        script = ray_launch(serve, rank=rank, leader=leader, nodes=common.pods_per_instance(manifest, pool),
                            gpus=pool["tp"] * pool["pp"])
    return ["/bin/bash", "-c"], ["\n".join(script)]


def kernel_args(manifest: dict) -> list[str]:
    """vLLM 0.33.0's arguments that start its kernels as the plan timed them: MXFP4 experts with MXFP8 activations
    when the plan was composed so (``provenance.profiles.moe_activations``), ``--quantization-config
    {"moe":{"activation":"mxfp8"}}``. For a pre-quantized checkpoint that is the base method's activation override
    (vllm/config/quantization.py ``resolve_quantization_config``, ``QUANT_KEY_NAMES["mxfp8"]``), with which
    ``select_mxfp4_moe_backend`` (vllm/model_executor/layers/fused_moe/oracle/mxfp4.py) picks FlashInfer's
    ``FLASHINFER_TRTLLM_MXFP4_MXFP8`` on Blackwell instead of its BF16 variant, the default. vLLM no longer reads
    the ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8`` of its earlier releases."""
    if manifest["provenance"]["profiles"].get("moe_activations") == "mxfp8":
        return ["--quantization-config", common.compact_json({"moe": {"activation": "mxfp8"}})]
    return []


def pod_env(manifest: dict, pool: dict) -> list[dict]:
    """Container env of a pool's pods: the NIXL side channel listens on the pod's own IP."""
    if manifest["transfer"]["connector"] != "nixl" or pool["phase"] == "colocated":
        return []
    return [{"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "VLLM_NIXL_SIDE_CHANNEL_PORT", "value": str(NIXL_SIDE_CHANNEL_BASE)}]


def pod_ports(manifest: dict, pool: dict, port: int) -> list[dict]:
    ports = [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    if pod_env(manifest, pool):
        ports.append({"name": "nixl", "containerPort": NIXL_SIDE_CHANNEL_BASE, "protocol": "TCP"})
    return ports
