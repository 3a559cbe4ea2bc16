"""SGLang launch scripts: one ``sglang.launch_server`` per instance plus an ``sglang_router``."""

from __future__ import annotations

from pdplan.engines import DEEPEP_LOW_LATENCY_TOKENS
from pdplan.errors import PdplanError
from pdplan.manifest.document import prompt_budget
from pdplan.manifest.export import common, prerequisites, shell
from pdplan.vocabulary import Router

SERVE_PORT_BASE = 30000       # instance i listens on SERVE_PORT_BASE + i
BOOTSTRAP_PORT_BASE = 8998    # prefill instance i's bootstrap server (SGLang's default is 8998)
DIST_INIT_PORT = 20000        # torch.distributed rendezvous of a multi-node instance
ROUTER_PORT = 8000

#: SGLang's algorithm for a checkpoint's own MTP module: EAGLE (NEXTN is its alias, resolved to EAGLE;
#: SGLang 0.5.23, python/sglang/srt/arg_groups/speculative_hook.py), drafting a chain (top-k 1) of
#: --speculative-num-steps tokens and verifying num_steps + 1 (the same file adjusts num_draft_tokens to
#: num_steps + 1 when topk is 1; its defaults for DeepseekV3ForCausalLM are 3 steps, top-k 1, 4 tokens).
MTP_ALGORITHM = "EAGLE"

#: SGLang's ``--kv-cache-dtype`` per KV precision of the plan (SGLang 0.5.23,
#: python/sglang/srt/arg_groups/fields/model.py ``kv_cache_dtype`` choices: auto, fp8_e5m2, fp8_e4m3, mxfp8,
#: bf16, bfloat16, nvfp4, fp4_mx_block16); bf16 stated too, not left to "auto" (the model's dtype).
KV_CACHE_DTYPES = {"bf16": "bfloat16", "fp8": "fp8_e4m3"}
#: SGLang's ``--quantization`` for a checkpoint quantized as it loads, by (checkpoint, plan) weight precision:
#: "fp8", "MOE + linear online quantization" (SGLang 0.5.23, python/sglang/srt/arg_groups/choices.py
#: QUANTIZATION_CHOICES; layers/quantization/fp8.py quantizes the weights after loading when the checkpoint is
#: not fp8-serialized). No fp4: "nvfp4_online" converts the MoE experts alone, dense layers keep the
#: checkpoint's precision (layers/quantization/nvfp4_online.py), not what pdplan's fp4 timed.
LOAD_QUANTIZATION = {("bf16", "fp8"): "fp8"}

#: The all-to-all an SGLang instance of expert parallelism across nodes dispatches its tokens with: DeepEP, as
#: SGLang's own large-scale P/D deployments run it (sgl-project/sglang
#: docs/references/multi_node_deployment/lws_pd/lws_pd_deploy.md @59e54757: ``--moe-a2a-backend deepep`` on
#: 2-node prefill and decode groups of ``--tp 16 --dp-size 16 --enable-dp-attention``; issue #6017, "Instruction
#: for Running DeepSeek with Large-scale PD and EP"). SGLang 0.5.23 then sets ep_size to tp_size itself
#: (python/sglang/srt/arg_groups/overrides.py ``_a2a_ep_size``, deepep in ``_A2A_EP_SPANNING_BACKENDS``), so the
#: plan's EP must be the instance's every GPU. An instance on one node keeps SGLang's default ("none": the MoE
#: layer's own EP over NVLink).
A2A_BACKEND = "deepep"
#: DeepEP's mode per disaggregation mode: "normal" kernels for prefill batches, "low_latency" for decode, as
#: issue #6017 starts its prefill and decode servers (``--deepep-mode normal`` / ``--deepep-mode low_latency``);
#: SGLang 0.5.23's "auto" picks the same per batch (python/sglang/srt/arg_groups/fields/exec_.py ``deepep_mode``),
#: so a colocated instance, whose batches are of both kinds, keeps it.
DEEPEP_MODES = {"prefill": "normal", "decode": "low_latency"}
#: The variable that sizes DeepEP's low-latency kernels in SGLang 0.5.23 (python/sglang/srt/environ.py; read in
#: layers/moe/token_dispatcher/deepep.py): the tokens one rank may dispatch per decode step.
DEEPEP_TOKENS_VARIABLE = "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK"

#: How SGLang's DP controller puts a request on a rank of a P/D decode or colocated instance with attention DP, as
#: pdplan simulates it there (:func:`pdplan.engines.rank_router`: the rank with the fewest outstanding requests):
#: ``total_requests``, the rank with the fewest running and waiting requests (SGLang 0.5.23 and 0.5.21,
#: python/sglang/srt/managers/data_parallel_controller.py ``DPBudget.dispatch``). Without it such a server runs in
#: turn (:func:`pdplan.engines.default_rank_router`); a P/D prefill keeps its default, ``follow_bootstrap_room``,
#: which pdplan simulates there.
LOAD_BALANCE_METHOD = "total_requests"

# SGLang's --disaggregation-transfer-backend values among the manifest's connectors (LMCache is not one).
TRANSFER_BACKENDS = ("nixl", "mooncake")

#: The SGLang router's ``--prefill-policy`` (its policy for the prefill workers in P/D mode) per prefill router
#: of the plan: sglang-router 0.3.2, sglang_router/router_args.py, and sgl-project/sglang
#: sgl-model-gateway/bindings/python/src/sglang_router/router_args.py @05e589ad6f75127e5302a250d9e83a881fbb3a3b:
#: random, round_robin, cache_aware, power_of_two, manual, bucket. A least-loaded plan keeps what the export
#: always wrote, no flag: the router's default --policy cache_aware, which routes by load once the workers' loads
#: pass its balance thresholds.
ROUTER_POLICIES = {Router.CACHE_AWARE: "cache_aware", Router.ROUND_ROBIN: "round_robin"}
#: SGLang 0.5.23's switch for a prefill pool whose plan turns its prefix cache off (python/sglang/srt/arg_groups/
#: fields/memory.py ``disable_radix_cache``: "Disable RadixAttention for prefix caching"; on by default). A decode
#: server already runs without it unless --disaggregation-decode-enable-radix-cache is given
#: (arg_groups/pd_disaggregation_hook.py), so a decode pool gets no flag.
NO_RADIX_CACHE = "--disable-radix-cache"
#: The SGLang 0.5.23 option that would hold a prefill pool's second prefix-cache tier, named in a notice and not
#: started: HiCache, --enable-hierarchical-cache (python/sglang/srt/arg_groups/fields/memory.py) with a host pool
#: of --hicache-size GB, and for a remote store a --hicache-storage-backend (its choices include mooncake).
TIER_OPTIONS = {"host": "SGLang's --enable-hierarchical-cache with --hicache-size GB (HiCache's host pool)",
                "remote": "SGLang's --enable-hierarchical-cache with --hicache-storage-backend (e.g. mooncake)"}


def export(manifest: dict, *, image: str | None = None) -> dict[str, str]:
    """``sglang/<instance>.sh`` per instance and ``sglang/router.sh``; ``image`` is unused."""
    backend = transfer_backend(manifest)
    files = {}
    workers: dict[str, list[list[str]]] = {}
    for index, inst in enumerate(common.instances(manifest)):
        port = SERVE_PORT_BASE + index
        bootstrap = BOOTSTRAP_PORT_BASE + index if serves_bootstrap(inst.pool) else None
        files[common.script_name("sglang", inst)] = _instance_script(manifest, inst, port, backend, bootstrap)
        url = f"http://{inst.nodes[0]}:{port}"
        workers.setdefault(inst.pool["phase"], []).append([url] if bootstrap is None else [url, str(bootstrap)])
    files["sglang/router.sh"] = _router_script(manifest, workers)
    return files


def serves_bootstrap(pool: dict) -> bool:
    """Whether the pool's instances serve SGLang's bootstrap server, which a P/D decode reaches to take a prompt's
    KV: a prefill pool's (there is one only in a P/D plan)."""
    return pool["phase"] == "prefill"


def transfer_backend(manifest: dict) -> str | None:
    """The SGLang transfer backend of a P/D plan; None for a colocated plan."""
    if not common.is_disaggregated(manifest):
        return None
    connector = manifest["transfer"]["connector"]
    if connector not in TRANSFER_BACKENDS:
        raise PdplanError(f"SGLang has no {connector!r} disaggregation transfer backend "
                          f"(it supports {', '.join(TRANSFER_BACKENDS)})", field="transfer.connector")
    return connector


def _launch_command(manifest: dict, inst: common.Instance, port: int, backend: str | None,
                    bootstrap: int | None) -> list[str]:
    command = ["python", "-m", "sglang.launch_server",
               *engine_args(manifest, inst.pool, spans_nodes=inst.spans_nodes, backend=backend, port=port)]
    if bootstrap is not None:
        command += ["--disaggregation-bootstrap-port", str(bootstrap)]
    if inst.spans_nodes:
        command += rendezvous_args(len(inst.nodes), inst.nodes[0])
    return command


def engine_args(manifest: dict, pool: dict, *, spans_nodes: bool, backend: str | None,
                port: int | None = None, legacy_dp_attention: bool = False) -> list[str]:
    """SGLang's own flags for an instance of the pool (``spans_nodes``: over several nodes), as the launch scripts and
    Dynamo's SGLang workers start it: the model, the parallel coordinates, the memory, precision, budgets and kernels
    the plan was verified with and, for a P/D plan, the disaggregation mode over ``backend``. Listening on every
    address (``--host 0.0.0.0``): a prefill's bootstrap server binds there too (SGLang 0.5.23,
    python/sglang/srt/managers/disagg_service.py), and a decode on another node must reach it. The HTTP ``port``
    where the instance serves one; not its nodes and rendezvous, which the caller states. ``legacy_dp_attention``:
    attention DP in the spelling SGLang releases before ``--attn-dp-size`` read (:func:`wide_args`)."""
    found = common.parallel(pool)
    args = ["--model-path", common.served_model(manifest), *common.checkpoint_args(manifest),
            # SGLang's tp_size counts the instance's GPUs per pipeline stage: attention TP x DP ranks.
            "--tp-size", str(found.tp * found.dp), "--pp-size", str(found.pp),
            *wide_args(manifest, pool, spans_nodes, legacy_dp_attention=legacy_dp_attention),
            "--host", "0.0.0.0", *([] if port is None else ["--port", str(port)]),
            # SGLang's static memory fraction (weights + KV pool) stands in for vLLM's utilization.
            "--mem-fraction-static", str(pool["memory"]["memory_utilization"])]
    args += common.precision_args(manifest, "SGLang", KV_CACHE_DTYPES, LOAD_QUANTIZATION)
    args += prompt_budget_args(pool) + running_args(pool)
    if pool["phase"] == "prefill" and common.prefix_cache_off(pool):
        args.append(NO_RADIX_CACHE)
    args += speculative_args(manifest) + kernel_args(manifest)
    if backend is not None:
        args += ["--disaggregation-mode", pool["phase"], "--disaggregation-transfer-backend", backend]
    return args


def prompt_budget_args(pool: dict) -> list[str]:
    """The prompt tokens each rank of the pool takes per iteration, as pdplan verified them
    (:func:`~pdplan.manifest.document.prompt_budget`), in SGLang 0.5.23's flags: ``--chunked-prefill-size``, the chunk
    (SGLang's own default is 8,192 on an H200 and 16,384 on a B200, arg_groups/memory_hook.py; on Blackwell whole KV
    pages, :data:`pdplan.engines.SGLANG_PAGE_CHUNK`), and ``--max-prefill-tokens``, the cap. With attention DP SGLang
    hands each rank ``chunked_prefill_size // attn_dp_size`` (arg_groups/parallel_hook.py ``_handle_data_parallelism``),
    so the flag states the rank's chunk times DP; ``--max-prefill-tokens`` is each rank's scheduler's own budget (its
    PrefillAdder) and is not divided."""
    chunk, cap = prompt_budget(pool)
    args = ["--chunked-prefill-size", str(chunk * common.parallel(pool).dp)] if chunk else []
    return args + (["--max-prefill-tokens", str(cap)] if cap else [])


def running_args(pool: dict) -> list[str]:
    """The requests each rank of the pool runs at once as pdplan verified them (:func:`common.running_cap`), as SGLang
    0.5.23's ``--max-running-requests``, which counts the instance's and hands each attention-DP rank its share
    (``max_running_requests // attn_dp_size``, model_executor/pool_configurator.py); the decode CUDA graphs it
    captures stop at that share too (model_executor/runner/base_cuda_graph_runner.py clamps them to the rank's
    request pool). None for a pool without a cap."""
    cap = common.running_cap(pool)
    return [] if cap is None else ["--max-running-requests", str(cap * common.parallel(pool).dp)]


def deepep_environment(pool: dict, spans_nodes: bool) -> dict[str, str]:
    """The DeepEP low-latency budget an instance's decode steps were verified within
    (:data:`pdplan.engines.DEEPEP_LOW_LATENCY_TOKENS`), stated for every instance the export starts on those kernels
    (:func:`common.starts_low_latency`), so that no inherited value of :data:`DEEPEP_TOKENS_VARIABLE` runs it
    otherwise: variable -> value (none for another instance)."""
    if not common.starts_low_latency("sglang", pool, spans_nodes):
        return {}
    return {DEEPEP_TOKENS_VARIABLE: str(DEEPEP_LOW_LATENCY_TOKENS["sglang"])}


def wide_args(manifest: dict, pool: dict, spans_nodes: bool, *, legacy_dp_attention: bool = False) -> list[str]:
    """SGLang 0.5.23's flags for attention data parallelism and expert parallelism (none for a TP x PP
    instance), read in python/sglang/srt/arg_groups/fields/parallel.py and exec_.py:

    - ``--attn-dp-size`` DP: DP attention groups inside the ``--tp-size`` ranks, each with its own
      scheduler, batch and KV. Not ``--dp-size N --enable-dp-attention``: 0.5.23 keeps that spelling as a
      deprecated alias it rewrites to ``--attn-dp-size N`` (server_args.py, ``add_cli_args``;
      arg_groups/parallel_hook.py ``handle_deprecated_dp_attention``), and ``--dp-size`` alone is data-parallel
      replicas, which SGLang refuses across nodes (arg_groups/validation_hook.py ``check_server_args``). With
      ``legacy_dp_attention`` that alias, for SGLang 0.5.21 (the release ai-dynamo 1.6.1 pins), whose parser has no
      ``--attn-dp-size`` (it came with sgl-project/sglang #41818) and reads ``--dp-size N --enable-dp-attention`` as
      N attention-DP ranks.
    - ``--load-balance-method`` :data:`LOAD_BALANCE_METHOD` on a decode or colocated instance with DP: its ranks take
      requests by load, as simulated, not in turn.
    - ``--ep-size`` EP: the MoE layer's expert-parallel group; its expert TP is tp_size / ep_size
      (runtime_context.py ``derive_parallel_widths``), so EP must divide TP x DP.
    - across nodes, for a pool timed with a dispatch, ``--moe-a2a-backend`` :data:`A2A_BACKEND` and, for a P/D
      pool, its :data:`DEEPEP_MODES` mode (a pool timed with a gather keeps SGLang's default, which gathers).
    - ``--ep-num-redundant-experts``: extra physical expert slots, with ``--enable-eplb``. SGLang would start
      without it (eplb/expert_location.py only asserts that the experts plus the redundant ones divide over the EP
      ranks, and srt-slurm's GB200 recipes pass the slots alone), but its slots then hold a trivial placement, no
      rebalancing (``server_args._handle_eplb_and_dispatch``: the load recorder and the static dispatch come with
      ``enable_eplb`` or an ``--init-expert-location``), while pdplan times redundant slots at the load EPLB
      rebalances (AIConfigurator's reading, :func:`pdplan.latency.compose.wide.eplb_distribution`): the flag starts
      what was timed, as SGLang's own EPLB tests run it (``--enable-eplb --ep-num-redundant-experts N``)."""
    found = common.parallel(pool)
    args = []
    if found.dp > 1:
        args += (["--dp-size", str(found.dp), "--enable-dp-attention"] if legacy_dp_attention
                 else ["--attn-dp-size", str(found.dp)])
        if pool["phase"] != "prefill":
            args += ["--load-balance-method", LOAD_BALANCE_METHOD]
    if found.ep > 1:
        if (found.tp * found.dp) % found.ep:
            raise PdplanError(f"pool {pool['name']} has EP {found.ep}, which does not divide its TP x DP "
                              f"{found.tp * found.dp} (SGLang's --tp-size): SGLang splits each expert over "
                              f"tp_size / ep_size GPUs", field=common.pool_field(manifest, pool, "ep"))
        args += ["--ep-size", str(found.ep)]
        if common.starts_deepep("sglang", pool, spans_nodes):
            if found.ep != found.tp * found.dp:
                raise PdplanError(f"pool {pool['name']} runs EP {found.ep} across nodes, where SGLang dispatches "
                                  f"tokens with DeepEP, which sets EP to the instance's TP x DP "
                                  f"{found.tp * found.dp}: plan EP {found.tp * found.dp} or keep the instance "
                                  f"on one node", field=common.pool_field(manifest, pool, "ep"))
            args += ["--moe-a2a-backend", A2A_BACKEND]
            if pool["phase"] in DEEPEP_MODES:
                args += ["--deepep-mode", DEEPEP_MODES[pool["phase"]]]
    if found.redundant_experts:
        args += ["--enable-eplb", "--ep-num-redundant-experts", str(found.redundant_experts)]
    return args


def kernel_args(manifest: dict) -> list[str]:
    """The flags that start SGLang's kernels as the plan timed them: MXFP4 experts with BF16 activations when the
    plan was composed so (``provenance.profiles.moe_activations``), ``--flashinfer-mxfp4-moe-precision bf16``
    (SGLang 0.5.23 ``arg_groups/fields/exec_.py``: default, bf16 or fp8); its ``default`` quantizes them to MXFP8
    in the ``flashinfer_mxfp4`` runner it picks on Blackwell, and no other runner reads the flag."""
    if manifest["provenance"]["profiles"].get("moe_activations") == "bf16":
        return ["--flashinfer-mxfp4-moe-precision", "bf16"]
    return []


def speculative_args(manifest: dict) -> list[str]:
    """SGLang's MTP flags for a deployment that drafts (none for one that does not), on every instance:
    a P/D prefill instance drafts the first tokens it hands to decode (SGLang 0.5.23,
    python/sglang/srt/speculative/eagle_disaggregation.py)."""
    found = common.speculative(manifest)
    if found is None:
        return []
    steps = found["draft_tokens"]
    return ["--speculative-algorithm", MTP_ALGORITHM, "--speculative-num-steps", str(steps),
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)]


def _instance_script(manifest: dict, inst: common.Instance, port: int, backend: str | None,
                     bootstrap: int | None) -> str:
    lines = common.instance_preamble(manifest, "sglang", inst)
    lines += [shell.comment(note) for note in common.cache_tier_notes([inst.pool], TIER_OPTIONS)]
    lines += prerequisites.lines(prerequisites.instance("sglang", backend, spans_nodes=inst.spans_nodes,
                                                        deepep=common.starts_deepep("sglang", inst.pool,
                                                                                    inst.spans_nodes)),
                                 f"instance {inst.name}", "python")
    lines += [shell.export(name, value) for name, value in deepep_environment(inst.pool, inst.spans_nodes).items()]
    command: list[shell.Word] = _launch_command(manifest, inst, port, backend, bootstrap)
    if inst.spans_nodes:
        # Node 0 needs no wait of its own: every node's scheduler joins the torch.distributed
        # rendezvous at --dist-init-addr, which blocks until all TP×PP ranks are there (SGLang 0.5.23,
        # python/sglang/srt/distributed/bootstrap.py passes tcp://<dist-init-addr> to
        # parallel_state.init_distributed_environment -> torch.distributed.init_process_group, with
        # --dist-timeout, default torch's).
        command += ["--node-rank", common.NODE_RANK]
    lines.append(shell.command(command))
    return "\n".join(lines) + "\n"


def rendezvous_args(nodes: int, leader: str) -> list[str]:
    """The torch.distributed rendezvous of an instance over ``nodes`` nodes led by host ``leader`` (an address the
    caller knows: a node's name, or LeaderWorkerSet's ``$(LWS_LEADER_ADDRESS)``), on :data:`DIST_INIT_PORT`."""
    return ["--nnodes", str(nodes), "--dist-init-addr", f"{leader}:{DIST_INIT_PORT}"]


def _router_script(manifest: dict, workers: dict[str, list[list[str]]]) -> str:
    """P/D: the router in P/D mode, each prefill with its bootstrap port given explicitly.
    Colocated: the same router over plain workers."""
    lines = common.script_preamble(manifest, "sglang", "router in front of every instance")
    lines += prerequisites.lines(prerequisites.router("sglang"), "the router", "python")
    command = ["python", "-m", "sglang_router.launch_router", "--host", "0.0.0.0", "--port", str(ROUTER_PORT)]
    if common.is_disaggregated(manifest):
        command += ["--pd-disaggregation", *common.prefill_policy_args(manifest, ROUTER_POLICIES)]
        for worker in workers.get("prefill", []):
            command += ["--prefill", *worker]
        for worker in workers.get("decode", []):
            command += ["--decode", *worker]
    else:
        command += ["--worker-urls", *(url for url, in workers["colocated"])]
    lines.append(shell.command(command))
    return "\n".join(lines) + "\n"
