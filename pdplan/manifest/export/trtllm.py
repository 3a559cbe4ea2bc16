"""TensorRT-LLM's engine arguments for a pool, as NVIDIA Dynamo's TensorRT-LLM worker takes them.

Dynamo's worker (``python3 -m dynamo.trtllm``, ai-dynamo 1.6.1 ``dynamo/trtllm/backend_args.py``, which pins
tensorrt-llm 1.3.0rc29) takes the parallel sizes and the batch limits as flags and builds TensorRT-LLM's
``LlmArgs`` from them, then deep-merges ``--override-engine-args``, a JSON object of ``LlmArgs`` fields, over them
(``dynamo/trtllm/workers/llm_worker.py``: ``deep_update(arg_map, overrides)``; the ``kv_cache_config`` it built
from ``--free-gpu-memory-fraction`` is an object, not a dict, so an override's ``kv_cache_config`` replaces it whole
and states its memory fraction itself). ``LlmArgs`` forbids unknown keys (``BaseLlmArgs``: ``extra="forbid"``,
NVIDIA/TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py``), so every key written here is one of its fields:
``kv_cache_config`` (``dtype``, ``free_gpu_memory_fraction``, ``max_tokens``, ``enable_block_reuse``),
``cache_transceiver_config`` (``backend``, ``max_tokens_in_buffer``), ``disable_overlap_scheduler``,
``enable_chunked_prefill``, ``speculative_config``, ``trust_remote_code`` and ``revision``, as Dynamo's own
TensorRT-LLM engine configs write them (ai-dynamo/dynamo ``examples/backends/trtllm/engine_configs``:
``deepseek-r1/disagg/wide_ep/wide_ep_prefill.yaml``, ``deepseek-r1/disagg/mtp/mtp_prefill.yaml``,
``qwen3/prefill.yaml`` @b6f88b1f).

TensorRT-LLM counts an instance's GPUs as ``tensor_parallel_size`` × ``pipeline_parallel_size``: with attention
data parallelism every one of the stage's GPUs is one DP rank (``enable_attention_dp``, which the search holds to TP
1: :data:`pdplan.engines.TRTLLM_ONE_GPU_RANKS`), and ``moe_expert_parallel_size`` spreads the experts over them, the
expert TP being the rest (``Mapping``: ``moe_tp_size × moe_ep_size = tp_size``). It quantizes no checkpoint as it
loads it, so a plan above its checkpoint's precision is refused; its KV handoff is its cache transceiver, over NIXL
for a plan whose KV moves over NIXL."""

from __future__ import annotations

from pdplan.errors import PdplanError
from pdplan.manifest.document import prompt_budget
from pdplan.manifest.export import common

#: TensorRT-LLM's ``kv_cache_config.dtype`` per KV precision: "fp8", as Dynamo's DeepSeek configs write it; "auto"
#: keeps the checkpoint's (its compute precision unless its quantization config quantizes the KV).
KV_CACHE_DTYPES = {"bf16": "auto", "fp8": "fp8"}
#: TensorRT-LLM's ``cache_transceiver_config.backend`` per KV connector of the plan (``CacheTransceiverConfig``:
#: "DEFAULT", "UCX", "NIXL", "MPI", and "MOONCAKE" only in later releases than 1.3.0rc29's).
TRANSCEIVER_BACKENDS = {"nixl": "NIXL"}
#: Where the plan's second prefix-cache tier would come from under TensorRT-LLM.
TIER_OPTIONS = {"host": "TensorRT-LLM's kv_cache_config.host_cache_size (host offloading of KV blocks)",
                "remote": "Dynamo's KV block manager (dynamo.trtllm --connector kvbm)"}


def worker_args(manifest: dict, pool: dict) -> list[str]:
    """The Dynamo TensorRT-LLM worker's arguments for one pool: the checkpoint, the parallel sizes, the batch limits
    the plan was verified at, the pool's disaggregation mode and the rest as ``--override-engine-args``."""
    shape = common.parallel(pool)
    args = ["--model", common.served_model(manifest),
            "--tensor-parallel-size", str(shape.tp * shape.dp), "--pipeline-parallel-size", str(shape.pp)]
    if shape.ep > 1:
        args += ["--expert-parallel-size", str(shape.ep)]
    if shape.dp > 1:
        args.append("--enable-attention-dp")
    chunk, _ = prompt_budget(pool)
    if chunk:
        args += ["--max-num-tokens", str(chunk)]
    cap = common.running_cap(pool)
    if cap is not None:  # per DP rank: each rank's executor schedules its own batch
        args += ["--max-batch-size", str(cap)]
    if pool["phase"] != "colocated":
        args += ["--disaggregation-mode", pool["phase"]]
    return args + ["--override-engine-args", common.compact_json(engine_config(manifest, pool))]


def engine_config(manifest: dict, pool: dict) -> dict:
    """The ``LlmArgs`` fields of a pool that no flag of Dynamo's worker sets (module docstring)."""
    config = {"kv_cache_config": kv_cache_config(manifest, pool)}
    if pool["phase"] != "colocated":
        config["cache_transceiver_config"] = cache_transceiver_config(manifest)
    if pool["phase"] == "prefill":  # Dynamo's prefill configs: the overlap scheduler is not supported there
        config["disable_overlap_scheduler"] = True
    if pool["phase"] != "decode":  # a prompt longer than the iteration budget runs in chunks, as verified
        config["enable_chunked_prefill"] = True
    drafting = common.speculative(manifest)
    if drafting is not None:  # every pool, prefill too, as Dynamo's MTP configs run it
        config["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": drafting["draft_tokens"]}
    if common.runs_remote_code(manifest):
        config["trust_remote_code"] = True
    revision = common.revision_args(manifest)
    if revision:
        config["revision"] = revision[1]
    return config


def kv_cache_config(manifest: dict, pool: dict) -> dict:
    """The KV pool the plan was verified with: its precision (the checkpoint at the plan's weights, which TensorRT-LLM
    does not quantize as it loads), at most its tokens per DP rank (``max_tokens``, each rank's executor holding its
    own) within the memory fraction of :func:`kv_memory_fraction` (TensorRT-LLM takes the smaller), and block reuse
    off where the plan turns the prefix cache off."""
    found = common.precision(manifest)
    common.load_quantization(manifest, found, "TensorRT-LLM", {})  # it has no method: refused when one is needed
    config = {"dtype": KV_CACHE_DTYPES[found.kv], "free_gpu_memory_fraction": kv_memory_fraction(pool),
              "max_tokens": pool["memory"]["kv_capacity_tokens_per_instance"] // common.parallel(pool).dp}
    if common.prefix_cache_off(pool):
        config["enable_block_reuse"] = False
    return config


def kv_memory_fraction(pool: dict) -> float:
    """TensorRT-LLM's ``free_gpu_memory_fraction`` for the KV pool pdplan planned: the fraction of the memory left
    after the weights that the plan gives the KV, (u·G − W) / (G − W), for a GPU of G GiB, the plan's memory
    utilization u and W GiB of weights per GPU (pdplan's capacity: u·G − W, :func:`pdplan.modelspec.
    kv_capacity_tokens`). TensorRT-LLM applies it to what is free after its own activations A, so its KV is at most
    the planned one and the GPU's memory at most u·G + A, within G while A fits the 1 − u the plan leaves for
    activations, as vLLM's ``--gpu-memory-utilization`` assumes. Positive in a manifest that validates, whose KV
    capacity is."""
    memory = pool["memory"]
    total, weights = memory["gpu_memory_gib"], memory["weights_gib_per_gpu"]
    return round((memory["memory_utilization"] * total - weights) / (total - weights), 4)


def cache_transceiver_config(manifest: dict) -> dict:
    """How a P/D pool hands its KV over: TensorRT-LLM's cache transceiver on the plan's connector
    (:data:`TRANSCEIVER_BACKENDS`), its buffer one token more than the trace's largest prompt, as Dynamo's configs
    size it ("must exceed max ISL to avoid transfer failures and perf degradation")."""
    connector = manifest["transfer"]["connector"]
    if connector not in TRANSCEIVER_BACKENDS:
        raise PdplanError(f"TensorRT-LLM's cache transceiver has no {connector!r} backend (pdplan exports it over "
                          f"{', '.join(TRANSCEIVER_BACKENDS)})", field="transfer.connector")
    return {"backend": TRANSCEIVER_BACKENDS[connector],
            "max_tokens_in_buffer": int(manifest["workload"]["trace"]["prompt_tokens"]["max"]) + 1}
