"""NVIDIA Dynamo: one ``DynamoGraphDeployment`` (``nvidia.com/v1beta1``) with a frontend
and one worker component per pool, of the engine the plan was verified for where Dynamo runs it (vLLM, SGLang or
TensorRT-LLM, the graph's ``backendFramework``; :func:`common.format_engine`), else vLLM.

In ``v1beta1`` a component's pod is its ``podTemplate`` (ai-dynamo/dynamo
``deploy/operator/config/crd/bases/nvidia.com_dynamographdeployments.yaml``): the worker's
container ``main`` carries the Hugging Face token from an optional Secret, the model cache mount
and CPU, memory and GPU requests; the pod spec its cache volume and node selection. Dynamo's own
recipes mount the cache at ``/root/.cache/huggingface`` and name the Secret ``hf-token-secret``
(``recipes/llama-3-70b/vllm/disagg-multi-node/deploy.yaml``), as vLLM's Kubernetes guide does. The operator
merges its own health probes into ``main`` and mounts a ``/dev/shm`` (``sharedMemorySize``, 8Gi by
default), so neither is written here.

A pool with attention data parallelism and expert parallelism (wide EP) keeps vLLM's own flags
(:func:`vllm.parallel_args`: ``--data-parallel-size``, ``--enable-expert-parallel``, EPLB for redundant experts);
an instance of it that spans nodes is a ``multinode`` component of ``nodeCount`` nodes, each pod with the GPUs
the instance uses on one node, and the operator adds the per-node flags itself (ai-dynamo/dynamo
``deploy/operator/internal/dynamo/backend_vllm.go`` @003d1ee5, ``injectDataParallelLaunchFlags``: when TP x PP x DP
exceeds the container's GPU limit it appends ``--data-parallel-hybrid-lb``, ``--data-parallel-size-local``
(the container's GPUs / TP x PP), ``--data-parallel-start-rank`` (node rank x local ranks),
``--data-parallel-address`` (the leader's hostname) and ``--data-parallel-rpc-port``, every node serving its own
ranks), so none of those is written here, as in Dynamo's recipe
``recipes/deepseek-r1/vllm/disagg/deploy_hopper_prefill_dep16_decode_dep16.yaml`` (``nodeCount: 2``, GPU limit 8,
``--tensor-parallel-size 1 --data-parallel-size 16 --enable-expert-parallel``).

An SGLang worker (``python3 -m dynamo.sglang``) takes SGLang's own flags, the launch scripts'
(:func:`sglang.engine_args`: ``--tp-size`` TP x DP, ``--ep-size``, DeepEP across nodes, ``--host 0.0.0.0`` for a
prefill's bootstrap server), attention DP spelled ``--dp-size N --enable-dp-attention`` for the SGLang 0.5.21 the
image runs, and ``--skip-tokenizer-init`` as Dynamo's SGLang recipes start theirs (the frontend tokenizes;
``recipes/deepseek-r1/sglang/disagg-16gpu/deploy.yaml``); Dynamo's worker picks a free bootstrap port itself when
none is given (ai-dynamo 1.6.1, ``dynamo/sglang/args.py`` ``parse_args``). A multinode SGLang component gets
``--dist-init-addr <leader>:29500 --nnodes N --node-rank R`` from the operator (``backend_sglang.go``,
``getMultinodeFlags``), so none of those is written here either.

A TensorRT-LLM worker (``python3 -m dynamo.trtllm``) takes the parallel sizes and batch limits as flags and the rest
of TensorRT-LLM's ``LlmArgs`` as ``--override-engine-args`` JSON (:mod:`pdplan.manifest.export.trtllm`); it publishes
the KV events the frontend's KV router reads only with ``--publish-kv-events`` (ai-dynamo 1.6.1
``dynamo/trtllm/backend_args.py``). A multinode TensorRT-LLM component is started by the operator as MPI ranks: its
leader pod runs ``mpirun`` over SSH into the others with ``trtllm-llmapi-launch`` wrapping the worker's command, the
keypair from the operator's MPI Secret (ai-dynamo/dynamo ``deploy/operator/internal/dynamo/backend_trtllm.go``
@015d780b, ``setupLeaderContainer``; the Helm value ``dynamo-operator.dynamo.mpiRun.secretName``,
``mpi-run-ssh-secret`` generated at install by default), so nothing per node is written here."""

from __future__ import annotations

import hashlib
import re

from pdplan import names
from pdplan.errors import PdplanError
from pdplan.manifest.export import common, pods, sglang, trtllm, vllm
from pdplan.vocabulary import Router

API_VERSION = "nvidia.com/v1beta1"
# Admission needs the runtime version when the main image's tag is not a semantic version.
RUNTIME_VERSION = "1.6.1"
#: Dynamo's runtime image per engine, at :data:`RUNTIME_VERSION` (NGC ``nvcr.io/nvidia/ai-dynamo``; ai-dynamo 1.6.1
#: pins SGLang 0.5.21 in its ``sglang`` extra and tensorrt-llm 1.3.0rc29 in its ``trtllm`` one; its profiler's
#: TensorRT-LLM graph, ``dynamo/profiler/templates/dgd/trtllm/disagg.yaml``, runs ``tensorrtllm-runtime``).
DEFAULT_IMAGES = {"vllm": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{RUNTIME_VERSION}",
                  "sglang": f"nvcr.io/nvidia/ai-dynamo/sglang-runtime:{RUNTIME_VERSION}",
                  "trtllm": f"nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{RUNTIME_VERSION}"}
#: Why Dynamo's SGLang workers cannot run a disaggregated prefill pool with pipeline stages as it was verified: the
#: SGLang 0.5.21 its image runs admits such a prefill's requests over a consensus ring, the ready request IDs passed
#: from stage to stage, one stage per scheduler iteration, before the first stage may batch them
#: (python/sglang/srt/managers/scheduler_pp_mixin.py, ``_pp_pd_get_bootstrapped_ids`` in
#: ``event_loop_pp_disagg_prefill``), seconds of TTFT under load (sgl-project/sglang #34815 at PP8, #38206 at PP16),
#: which pdplan's simulation does not time; SGLang 0.5.23, which the sglang scripts start, decides on the first stage
#: (disaggregation/pp_consensus_store.py, ``PPConsensusStore``).
SGLANG_PP_PREFILL = ("Dynamo 1.6.1's SGLang 0.5.21 admits a pipelined prefill's requests over a consensus ring through "
                     "its stages, which the plan's simulation does not time (sgl-project/sglang #34815); SGLang 0.5.23 "
                     "does not: export --format sglang, or plan the prefill without PP")
#: The frontend pod's requests (an assumption: it tokenizes and routes, no GPU).
FRONTEND_RESOURCES = {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"memory": "4Gi"}}

#: The frontend's ``--router-mode`` per prefill router of the plan (ai-dynamo/dynamo
#: components/src/dynamo/common/configuration/groups/router_args.py @028cab441013740ff0b22859439ac321dc5d3776, and
#: the same choices in ai-dynamo 1.6.1, the pinned image's: round-robin, the default, random, power-of-two, kv,
#: direct, least-loaded, device-aware-weighted). kv is the KV-cache-aware router; with prefill workers registered
#: the frontend activates a prefill router of its own, and the workers publish the KV events it reads with no flag
#: of theirs (docs/pages/components/router/router-guide.md @0123a75088175cf3314ab4cc9ba299666ae517ea,
#: "Disaggregated Serving" and "Kubernetes Deployment"). A least-loaded plan keeps what the export always wrote, no
#: flag: the frontend's round-robin (its least-loaded counts active requests, not pending prompt tokens, and skips
#: the bootstrap path of disaggregated prefill, the option's help says).
ROUTER_MODES = {Router.CACHE_AWARE: "kv", Router.ROUND_ROBIN: "round-robin"}
#: What an SGLang worker publishes its KV cache's events with for the frontend's KV router: Dynamo's SGLang worker
#: subscribes only when ``--kv-events-config`` names a publisher (ai-dynamo 1.6.1 ``dynamo/sglang/args.py``:
#: ``use_kv_events`` is the config's ``publisher`` other than "null"), where vLLM's publish with no flag of theirs;
#: SGLang's ZMQ publisher on its default endpoint (``tcp://*:5557``, offset per attention-DP rank).
SGLANG_KV_EVENTS = {"publisher": "zmq", "topic": "kv-events"}

_COMPONENT_TYPES = {"prefill": "prefill", "decode": "decode", "colocated": "worker"}
#: The annotation a renamed component's pods carry with their pool's name (:func:`component_name`).
POOL_ANNOTATION = "pdplan.dev/pool"
_SEMVER_TAG = re.compile(r":v?\d+\.\d+\.\d+$")


def export(manifest: dict, options: pods.PodOptions = pods.PodOptions()) -> dict[str, str]:
    """``dynamo/<name>.yaml``."""
    common.require_pool_engines(manifest, "dynamo")
    engine = common.format_engine(manifest, "dynamo")
    image = options.image or DEFAULT_IMAGES[engine]
    components = [_frontend(manifest, image), *(_worker(manifest, pool, image, options, engine)
                                                for pool in common.pools(manifest))]
    name = manifest["metadata"]["name"]
    for component in components:
        _check_object_name(name, component["name"])
    document = {
        "apiVersion": API_VERSION,
        "kind": "DynamoGraphDeployment",
        "metadata": {"name": name, "labels": common.manifest_labels(manifest),
                     "annotations": common.manifest_annotations(manifest)},
        "spec": {"backendFramework": engine, "components": components},
    }
    budgets = "\n".join(pods.budget_comment(pool) for pool in common.pools(manifest))
    renamed = [f"Component {component_name(name, pool)} runs pool {pool['name']}, whose own name would make the "
               f"operator's object names longer than a DNS label (its pods carry it as {POOL_ANNOTATION})."
               for pool in common.pools(manifest) if component_name(name, pool) != pool["name"]]
    header = "\n".join([f"{common.header(manifest, 'dynamo')}\nCreate the Secret {options.hf_token_secret} (key "
                        f"{pods.HF_TOKEN_KEY}) for a gated model.\n{budgets}", *renamed])
    tiers = {"vllm": vllm.TIER_OPTIONS, "sglang": sglang.TIER_OPTIONS, "trtllm": trtllm.TIER_OPTIONS}[engine]
    header = "\n".join([header, *common.cache_tier_notes(common.pools(manifest), tiers)])
    return {f"dynamo/{name}.yaml": common.dump_yaml(document, header=header)}


def component_name(graph: str, pool: dict) -> str:
    """The component a pool runs as: the pool's own name, or where the operator's object names ``<graph>-<pool>``
    would pass a DNS label (a wide pool's long name under a long model name), its phase and eight hex digits of its
    name's sha256, stable across exports and distinct between pools."""
    if len(f"{graph}-{pool['name'].lower()}") <= names.DNS_LABEL_MAX:
        return pool["name"]
    return f"{pool['phase']}-{hashlib.sha256(pool['name'].encode()).hexdigest()[:8]}"


def _check_object_name(graph: str, component: str) -> None:
    """The operator names a component's objects ``<graph>-<component>`` (lowercased; its
    GetDynamoComponentName), a Service among them, whose name is a DNS label of at most 63 characters."""
    name = f"{graph}-{component.lower()}"
    if len(name) > names.DNS_LABEL_MAX:
        raise PdplanError(f"the Dynamo operator would name component {component}'s objects {name}, {len(name)} "
                          f"characters, over the {names.DNS_LABEL_MAX} of a DNS-1123 label; shorten the manifest's "
                          "name or the pool's", field="metadata.name")


def _frontend(manifest: dict, image: str) -> dict:
    """The frontend, routing as the plan's prefill router does (:data:`ROUTER_MODES`)."""
    mode = common.router_policy(manifest, ROUTER_MODES)
    args = [] if mode is None else ["--router-mode", mode]
    container = _container(image, ["python3", "-m", "dynamo.frontend"], args)
    container["resources"] = FRONTEND_RESOURCES
    return _component("Frontend", "frontend", 1, container)


def _worker(manifest: dict, pool: dict, image: str, options: pods.PodOptions, engine: str) -> dict:
    nodes = common.pods_per_instance(manifest, pool)
    if engine == "sglang":
        command, args, env = _sglang_worker(manifest, pool, nodes > 1)
    elif engine == "trtllm":
        command, args, env = _trtllm_worker(manifest, pool)
    else:
        command, args, env = _vllm_worker(manifest, pool)
    container = _container(image, command, args)
    volume, mount = pods.cache_volume(pool)
    container.update({"env": pods.hf_env(options) + env, "resources": pods.resources(manifest, pool),
                      "volumeMounts": [mount]})
    name = component_name(manifest["metadata"]["name"], pool)
    component = _component(name, _COMPONENT_TYPES[pool["phase"]], pool["replicas"], container)
    component["podTemplate"]["spec"].update({**pods.node_selection(manifest, pool), "volumes": [volume]})
    if name != pool["name"]:  # the pool stays findable on its pods
        component["podTemplate"]["metadata"] = {"annotations": {POOL_ANNOTATION: pool["name"]}}
    if nodes > 1:  # GPUs per instance = nodeCount × the container's GPU limit
        if engine == "vllm" and common.parallel(pool).dp > 1:
            # the operator's --data-parallel-size-local is the container's GPUs / TP x PP: whole ranks per node
            vllm.local_data_parallel(manifest, pool, nodes)
        component["multinode"] = {"nodeCount": nodes}
    return component


def _vllm_worker(manifest: dict, pool: dict) -> tuple[list[str], list[str], list[dict]]:
    """Command, args and extra env of a vLLM worker: vLLM's own flags, --no-enable-prefix-caching of a pool whose
    prefix cache the plan turns off included: the worker parses them with vLLM's AsyncEngineArgs and turns prefix
    caching on only when neither spelling is given (ai-dynamo/dynamo components/src/dynamo/vllm/args.py
    @000a36a7399ab3fa8e27d9537d8b1f5020e34db4, parse_args and update_engine_config_with_dynamo)."""
    args = ["--model", common.served_model(manifest), *vllm.engine_args(manifest, pool)]
    if pool["phase"] != "colocated":
        args += ["--disaggregation-mode", pool["phase"]]
    return ["python3", "-m", "dynamo.vllm"], args, []


def _sglang_worker(manifest: dict, pool: dict, spans_nodes: bool) -> tuple[list[str], list[str], list[dict]]:
    """Command, args and extra env of an SGLang worker (see the module's docstring): the DeepEP low-latency budget
    its decode steps were verified within, in the container's env, as the launch scripts export it. A P/D prefill
    pool with pipeline stages is refused (:data:`SGLANG_PP_PREFILL`)."""
    if pool["phase"] == "prefill" and common.parallel(pool).pp > 1:
        raise PdplanError(f"pool {pool['name']} prefills with PP {common.parallel(pool).pp}: {SGLANG_PP_PREFILL}",
                          field=common.pool_field(manifest, pool, "pp"))
    args = [*sglang.engine_args(manifest, pool, spans_nodes=spans_nodes, backend=sglang.transfer_backend(manifest),
                                legacy_dp_attention=True),
            "--skip-tokenizer-init"]
    if common.router_policy(manifest, ROUTER_MODES) == "kv":
        args += ["--kv-events-config", common.compact_json(SGLANG_KV_EVENTS)]
    env = [{"name": name, "value": value} for name, value in sglang.deepep_environment(pool, spans_nodes).items()]
    return ["python3", "-m", "dynamo.sglang"], args, env


def _trtllm_worker(manifest: dict, pool: dict) -> tuple[list[str], list[str], list[dict]]:
    """Command, args and extra env of a TensorRT-LLM worker (see the module's docstring)."""
    args = trtllm.worker_args(manifest, pool)
    if common.router_policy(manifest, ROUTER_MODES) == "kv":
        args.append("--publish-kv-events")
    return ["python3", "-m", "dynamo.trtllm"], args, []


def _component(name: str, kind: str, replicas: int, container: dict) -> dict:
    component = {"name": name, "type": kind, "replicas": replicas, "podTemplate": {"spec": {"containers": [container]}}}
    if not _SEMVER_TAG.search(container["image"]):
        component["runtimeVersionOverride"] = RUNTIME_VERSION
    return component


def _container(image: str, command: list[str], args: list[str]) -> dict:
    """The operator merges its defaults into the container named ``main``."""
    container = {"name": "main", "image": image, "command": command}
    return container | ({"args": args} if args else {})
