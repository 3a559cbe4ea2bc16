#!/usr/bin/env python3
"""The probes of ``check_consumers.py``: each hands one export to the real program that reads it, inside that
consumer's own environment, and says what the consumer made of it.

    python scripts/consumer_probes.py JOBS.json RESULTS.json

``check_consumers.py`` runs this file with each environment's Python. It imports only the standard library
at its top and the consumer inside each probe, so it runs where pdplan is not installed. Every job is
``{"consumer": ..., "payload": ...}``; each result adds ``result`` (pass or FAIL) and ``why``.
"""

from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

KUBERNETES_VERSION = "1.33.0"


def probe(jobs_path: str, results_path: str) -> int:
    jobs = json.loads(Path(jobs_path).read_text())
    results = []
    for item in jobs:
        try:
            why = PROBES[item["consumer"]](item["payload"])
            results.append({**item, "result": "pass", "why": why or ""})
        except SystemExit as stop:
            results.append({**item, "result": "FAIL", "why": f"argument parser exited {stop.code}"})
        except BaseException as error:  # noqa: BLE001 - every consumer error is a verdict
            frame = traceback.extract_tb(error.__traceback__)[-1]
            results.append({**item, "result": "FAIL",
                            "why": f"{type(error).__name__}: {str(error)[:200]} ({Path(frame.filename).name}:"
                                   f"{frame.lineno})"})
        results[-1].pop("payload", None)
    Path(results_path).write_text(json.dumps(results))
    return 0


def _vllm_platform() -> None:
    """Without a GPU vLLM's platform is unspecified and building its config defaults fails; pick the
    CPU platform first, as vLLM's own CLI does for ``vllm bench`` (vllm/entrypoints/cli/main.py)."""
    from vllm import platforms
    if platforms.current_platform.is_unspecified():
        from vllm.platforms.cpu import CpuPlatform
        platforms.current_platform = CpuPlatform()


def probe_vllm_serve(args: list[str]) -> str:
    _vllm_platform()
    from vllm.config import KVTransferConfig
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    serve = ServeSubcommand()
    serve.subparser_init(parser.add_subparsers(dest="subparser"))
    parsed = parser.parse_args(["serve", *args])
    if parsed.model_tag is not None:   # ServeSubcommand.cmd: the positional model wins
        parsed.model = parsed.model_tag
    serve.validate(parsed)
    engine = AsyncEngineArgs.from_cli_args(parsed)
    kv = ""
    if "--kv-transfer-config" in args:
        config = KVTransferConfig(**json.loads(args[args.index("--kv-transfer-config") + 1]))
        kv = f", {config.kv_connector} {config.kv_role}"
    budget = "" if engine.max_num_batched_tokens is None else \
        f", prompt tokens per rank's step {engine.max_num_batched_tokens}"
    return (f"TP{engine.tensor_parallel_size} PP{engine.pipeline_parallel_size}{vllm_parallel(engine, parsed)}{kv}, "
            f"{vllm_precision(engine)}{budget}")


def vllm_parallel(engine, parsed) -> str:
    """Data and expert parallelism through vLLM's own ParallelConfig, built as EngineArgs.create_engine_config
    builds it for an internally balanced DP deployment (vllm/engine/arg_utils.py: the leader without a start
    rank, a --headless node from its --data-parallel-start-rank) or a hybrid one (every node an API server from
    its start rank, --data-parallel-hybrid-lb stated; vllm/config/parallel.py validates the local
    size against the DP size). create_engine_config itself needs the checkpoint's config (is_moe), so the MoE
    model is stated. EPLB is checked by its own rules (EPLBConfig, and ParallelConfig's "enable_expert_parallel
    must be True to use EPLB"), because ParallelConfig refuses EPLB on the CPU platform this probe runs on."""
    from vllm.config import ParallelConfig
    from vllm.config.parallel import EPLBConfig

    if engine.data_parallel_size == 1 and not engine.enable_expert_parallel:
        return ""
    hybrid = engine.data_parallel_hybrid_lb
    if engine.data_parallel_start_rank is not None and not parsed.headless and not hybrid:
        raise ValueError("a start rank without --headless makes vLLM run hybrid load balancing (one API server per "
                         "node), not the internal load balancing of one endpoint")
    if hybrid and parsed.headless:   # create_engine_config's own assertion
        raise ValueError("data_parallel_hybrid_lb is not applicable in headless mode")
    if hybrid and engine.data_parallel_size_local is None:
        raise ValueError("`--data-parallel-hybrid-lb` requires `--data-parallel-size-local`")
    if engine.enable_eplb:
        if not engine.enable_expert_parallel:
            raise ValueError("enable_expert_parallel must be True to use EPLB.")
        if not isinstance(engine.eplb_config, EPLBConfig):  # from_cli_args builds it from --eplb-config's JSON
            raise TypeError(f"--eplb-config gave {type(engine.eplb_config).__name__}, not an EPLBConfig")
    local = engine.data_parallel_size_local
    default = ParallelConfig()
    config = ParallelConfig(tensor_parallel_size=engine.tensor_parallel_size,
                            pipeline_parallel_size=engine.pipeline_parallel_size,
                            data_parallel_size=engine.data_parallel_size,
                            data_parallel_rank=engine.data_parallel_start_rank or 0,
                            data_parallel_size_local=engine.data_parallel_size if local is None else local,
                            data_parallel_master_ip=engine.data_parallel_address or default.data_parallel_master_ip,
                            data_parallel_rpc_port=engine.data_parallel_rpc_port or default.data_parallel_rpc_port,
                            is_moe_model=True, enable_expert_parallel=engine.enable_expert_parallel)
    redundant = engine.eplb_config.num_redundant_experts if engine.enable_eplb else 0
    role = "headless" if parsed.headless else "API server of its node's ranks" if hybrid else "API server"
    where = (f" on {config.data_parallel_master_ip}:{config.data_parallel_rpc_port}, {role} from DP rank "
             f"{config.data_parallel_rank}" if engine.data_parallel_address else "")
    ep = config.tensor_parallel_size * config.data_parallel_size
    return (f" DP{config.data_parallel_size} (local {config.data_parallel_size_local}{where})"
            f"{f' EP{ep}' if config.enable_expert_parallel else ''}"
            f"{f', EPLB with {redundant} redundant experts' if redundant else ''}")


def vllm_precision(engine) -> str:
    """The KV-cache dtype through CacheConfig's validator, and the quantization through the checks
    ModelConfig makes once it has the checkpoint's config (vllm/config/model.py _verify_quantization:
    a name in QUANTIZATION_METHODS; vllm/config/quantization.py resolve_quantization_config), which the
    parser alone does not make. A ``--quantization-config`` override of the MoE layers' activations, which
    EngineArgs resolves into its QuantizationConfigArgs, is named by its QUANT_KEY_NAMES key."""
    from vllm.config import CacheConfig
    from vllm.config.quantization import QUANT_KEY_NAMES, resolve_quantization_config
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    CacheConfig(cache_dtype=engine.kv_cache_dtype)
    if engine.quantization is not None:
        if engine.quantization not in QUANTIZATION_METHODS:
            raise ValueError(f"Unknown quantization method: {engine.quantization}")
        resolve_quantization_config(engine.quantization, engine.quantization_config)
    quantization = engine.quantization or "the checkpoint's"
    moe = getattr(engine.quantization_config, "moe", None)
    key = getattr(moe, "activation", None)
    activations = "" if key is None else \
        f", MoE activations {next(name for name, known in QUANT_KEY_NAMES.items() if known == key)}"
    return f"KV {engine.kv_cache_dtype}, quantization {quantization}{activations}"


def probe_sglang_server(args: list[str]) -> str:
    from sglang.srt.server_args import prepare_server_args

    server = prepare_server_args(args)
    quantization = server.quantization or "the checkpoint's"
    precision = server.flashinfer_mxfp4_moe_precision
    activations = "" if precision == "default" else f", MXFP4 MoE activations {precision}"
    budget = sglang_prompt_budget(server, args)
    return (f"TP{server.tp_size} PP{server.pp_size}{sglang_parallel(server)} {server.disaggregation_mode}, "
            f"KV {server.kv_cache_dtype}, quantization {quantization}{activations}{budget}; "
            f"ServerArgs.resolve_once not run (it loads the checkpoint's config from the hub)")


def sglang_prompt_budget(server, args: list[str]) -> str:
    """Each rank's prompt chunk and batch cap as SGLang 0.5.23 resolves them: the chunk divided among the
    attention-DP ranks (arg_groups/parallel_hook.py ``_handle_data_parallelism``, which resolve_once runs),
    max_prefill_tokens each rank's own; empty when the command states neither."""
    if "--chunked-prefill-size" not in args and "--max-prefill-tokens" not in args:
        return ""
    chunk = "" if server.chunked_prefill_size is None else \
        f", prompt chunk per rank {server.chunked_prefill_size // max(1, server.attn_dp_size)}"
    return f"{chunk}, prompt tokens per rank's batch {server.max_prefill_tokens}"


def sglang_parallel(server) -> str:
    """Attention DP, EP and nodes through the rules SGLang 0.5.23 applies at start-up that need no checkpoint,
    with its own width derivation (python/sglang/srt/runtime_context.py ``derive_parallel_widths``):
    arg_groups/validation_hook.py ``check_server_args`` (tp_size x pp_size divisible by nnodes; no --dp-size
    replicas across nodes), arg_groups/parallel_hook.py (--attn-dp-size positive and not with --dp-size
    replicas; tp_size divisible by attn_dp_size), arg_groups/overrides.py ``_a2a_ep_size`` (an all-to-all
    backend such as deepep sets ep_size to tp_size: an EP the flags state otherwise would be overridden), and
    eplb/expert_location.py (EP divides the experts plus the redundant ones; the expert count is the
    checkpoint's, so that one is not checked here)."""
    from sglang.srt.runtime_context import derive_parallel_widths

    if server.attn_dp_size == 1 and server.ep_size == 1 and server.nnodes == 1:
        return ""
    if (server.tp_size * server.pp_size) % server.nnodes:
        raise AssertionError("tp_size must be divisible by number of nodes")
    if server.dp_size > 1 and server.nnodes != 1:
        raise AssertionError("multi-node data-parallel replicas are not supported; use attention DP")
    if server.attn_dp_size < 1 or (server.attn_dp_size > 1 and server.dp_size > 1):
        raise ValueError("--attn-dp-size must be positive and not combined with --dp-size replicas")
    if server.tp_size % server.attn_dp_size:
        raise AssertionError("tp_size must be divisible by attn_dp_size")
    if not 0 <= server.node_rank < server.nnodes:
        raise ValueError(f"--node-rank {server.node_rank} is not one of the {server.nnodes} nodes")
    if server.nnodes > 1 and not server.dist_init_addr:
        raise ValueError("an instance over several nodes needs --dist-init-addr")
    if server.moe_a2a_backend not in (None, "none") and server.ep_size != server.tp_size:
        raise ValueError(f"--moe-a2a-backend {server.moe_a2a_backend} sets ep_size to tp_size {server.tp_size}, "
                         f"not the --ep-size {server.ep_size} given")
    if server.tp_size % server.ep_size:
        raise ValueError(f"--ep-size {server.ep_size} does not divide tp_size {server.tp_size}")
    widths = derive_parallel_widths(tp_size=server.tp_size, attn_cp_size=server.attn_cp_size,
                                    attn_dp_size=server.attn_dp_size, moe_ep_size=server.ep_size,
                                    moe_dp_size=server.moe_dp_size, dcp_size=server.dcp_size,
                                    dcp_enabled=server.dcp_size > 1)
    a2a = "" if server.moe_a2a_backend in (None, "none") else f", {server.moe_a2a_backend} {server.deepep_mode}"
    nodes = f", node {server.node_rank} of {server.nnodes} at {server.dist_init_addr}" if server.nnodes > 1 else ""
    redundant = (f", {server.ep_num_redundant_experts} redundant experts"
                 if server.ep_num_redundant_experts else "")
    return (f" attention DP{widths['attn_dp_size']} x TP{widths['attn_tp_size']}, EP{widths['moe_ep_size']} x "
            f"expert TP{widths['moe_tp_size']}{a2a}{redundant}{nodes}")


def probe_vllm_router(args: list[str]) -> str:
    from vllm_router.launch_router import parse_router_args

    router = parse_router_args(args)
    router._validate_router_args()
    return f"{len(router.prefill_urls)} prefill, {len(router.decode_urls)} decode, {len(router.worker_urls)} workers"


def probe_sglang_router(args: list[str]) -> str:
    from sglang_router.launch_router import parse_router_args

    router = parse_router_args(args)
    router._validate_router_args()
    return f"{len(router.prefill_urls)} prefill, {len(router.decode_urls)} decode, {len(router.worker_urls)} workers"


def probe_dynamo_vllm(args: list[str]) -> str:
    _vllm_platform()
    from dynamo.vllm.args import parse_args

    config = parse_args(args)
    engine = config.engine_args
    kv = engine.kv_transfer_config
    return (f"TP{engine.tensor_parallel_size} PP{engine.pipeline_parallel_size}"
            f"{vllm_parallel(engine, config)}" + (f" {kv.kv_role}" if kv else ""))


def probe_dynamo_sglang(payload: dict) -> str:
    """Dynamo's SGLang worker's own ``parse_args`` (ai-dynamo 1.6.1, dynamo/sglang/args.py), which builds SGLang's
    ``ServerArgs`` from the flags and so runs its start-up rules; the checkpoint's config (``payload["config"]``) in a
    local folder stands in for the hub, which the worker would download it from."""
    import asyncio
    import tempfile
    from unittest import mock

    import dynamo.sglang.args as worker

    args = list(payload["args"])
    with tempfile.TemporaryDirectory() as folder:
        if payload.get("config") is not None:
            Path(folder, "config.json").write_text(json.dumps(payload["config"]))
            args[args.index("--model-path") + 1] = folder
        with mock.patch.object(worker, "should_fetch_model", return_value=False):
            server = asyncio.run(worker.parse_args(args)).server_args
    dp = f" attention DP{server.dp_size}" if server.enable_dp_attention else ""
    a2a = "" if server.moe_a2a_backend in (None, "none") else f", {server.moe_a2a_backend} {server.deepep_mode}"
    nodes = f", node {server.node_rank} of {server.nnodes} at {server.dist_init_addr}" if server.nnodes > 1 else ""
    return (f"TP{server.tp_size} PP{server.pp_size}{dp} EP{server.ep_size}{a2a} {server.disaggregation_mode}"
            f"{nodes}, KV {server.kv_cache_dtype}")


def probe_dynamo_trtllm(args: list[str]) -> str:
    """Dynamo's TensorRT-LLM worker's own ``parse_args`` (ai-dynamo 1.6.1, dynamo/trtllm/args.py), its
    ``--override-engine-args`` decoded as the worker decodes it (``json.loads``). TensorRT-LLM's wheels are published
    on NVIDIA's index only, so where it is not installed its ``BuildConfig``, of which the worker's argument group
    reads only the defaults of four fields (dynamo/trtllm/backend_args.py), stands in with TensorRT-LLM's defaults."""
    try:
        import tensorrt_llm.llmapi  # noqa: F401
    except ImportError:
        import types

        class BuildConfig:  # tensorrt_llm.llmapi.BuildConfig's defaults
            model_fields = {name: types.SimpleNamespace(default=value) for name, value in
                            {"max_batch_size": 2048, "max_num_tokens": 8192, "max_seq_len": None,
                             "max_beam_width": 1}.items()}

        sys.modules["tensorrt_llm"] = types.ModuleType("tensorrt_llm")
        sys.modules["tensorrt_llm.llmapi"] = types.SimpleNamespace(BuildConfig=BuildConfig)
    from dynamo.trtllm.args import parse_args

    config = parse_args(args)
    overrides = json.loads(config.override_engine_args or "{}")
    dp = " attention DP" if config.enable_attention_dp else ""
    return (f"TP{config.tensor_parallel_size} PP{config.pipeline_parallel_size}{dp} EP{config.expert_parallel_size} "
            f"{config.disaggregation_mode.value}, engine args {', '.join(sorted(overrides))}")


def probe_dynamo_frontend(args: list[str]) -> str:
    from dynamo.frontend import main as frontend

    sys.argv = ["dynamo.frontend", *args]
    frontend.parse_args()
    return ""


def probe_kubernetes(doc: dict) -> str:
    import kubernetes_validate

    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
    return f"Kubernetes {KUBERNETES_VERSION}"


def probe_vllm_rule(_payload) -> str:
    """pdplan's nixl-decode-pp rule (pdplan/engines.py) against the installed vLLM's source: the
    NIXL worker still raises NotImplementedError for a kv_consumer with pipeline_parallel_size > 1.
    Raising it for real needs NIXL and a GPU (the worker registers GPU memory first)."""
    import vllm

    source = Path(vllm.__file__).parent / "distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py"
    text = source.read_text()
    said = '"NixlPushConnector consumer (decode) does not support "\n                    "pipeline_parallel_size > 1."'
    if 'kv_role == "kv_consumer"' not in text or said not in text:
        raise AssertionError(f"vLLM {vllm.__version__} no longer raises for a PP decode in {source.name}: "
                             "review pdplan's nixl-decode-pp rule")
    return f"vLLM {vllm.__version__} {source.name} raises NotImplementedError for a kv_consumer with PP > 1"


PROBES = {"vllm serve": probe_vllm_serve, "sglang server": probe_sglang_server, "vllm-router": probe_vllm_router,
          "sglang-router": probe_sglang_router, "dynamo.vllm": probe_dynamo_vllm,
          "dynamo.frontend": probe_dynamo_frontend, "dynamo.sglang": probe_dynamo_sglang,
          "dynamo.trtllm": probe_dynamo_trtllm,
          "kubernetes-validate strict": probe_kubernetes,
          "vllm rule source": probe_vllm_rule}


if __name__ == "__main__":
    sys.exit(probe(sys.argv[1], sys.argv[2]))
