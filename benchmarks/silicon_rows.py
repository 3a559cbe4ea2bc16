"""The measured deployments ``silicon_validation.py`` replays: which rows of AIConfigurator's
silicon_sample.csv pdplan can replay, and each row's deployment as its collection ran it — the model at its
precision, the plan of its pools and their recipe's settings, and the requests its benchmark client sent.

The requests each collection's client sent:

* ``2026-04-06.csv``, ``2026-03-25.csv`` and ``db-dump/2026-04-27`` are SemiAnalysis' InferenceMAX sweep
  (two exports of its results and a dump of its database) (its grid: ISL/OSL 1k/1k, 1k/8k, 8k/1k,
  concurrency 4 to 256, Llama-3.1-70B, DeepSeek-R1, gpt-oss-120b and Kimi-K2.5 on H100/H200/B200/GB200 under
  vLLM, SGLang and TensorRT-LLM). Its client is vLLM's old ``benchmark_serving.py`` run with
  ``--random-range-ratio 0.8 --num-prompts 10*C --max-concurrency C --ignore-eos``: each
  request's input and output lengths are drawn uniformly from the integers in [0.8·L, L] (its GB200 FP4
  TensorRT-LLM runs of December 2025, ai-dynamo's ``bench.sh``: 8·C prompts, ``srt_slurm.DYNAMO_TRTLLM``).
  ``kimi-k2.5-gap-analysis.csv`` is InferenceMAX's too: 29 of its 47 Kimi-K2.5 rows state the TTFT and TPOT of an
  InferenceMAX export's row of the same deployment and load to 0.1 ms (its numbers rounded to two decimals), so its
  runs are replayed with that client;
* every other collection (AIConfigurator's own gap-analysis runs): exactly the row's ISL and OSL,
  10 × C requests (at least 100, at most 2,000).

Stated assumptions, the same for every row:

* engine scheduling — vLLM: chunked prefill, 8,192 tokens per iteration (its default for the API
  server on 80 GB-class GPUs); TensorRT-LLM: in-flight batching, context and generation in one
  iteration of up to 8,192 tokens (its default max_num_tokens, or the recipe's below); SGLang: prefill batches of up to
  8,192 tokens run apart from decode (its default chunked_prefill_size, mixed chunks off);
* TensorRT-LLM's iteration budget — every InferenceMAX TensorRT-LLM recipe passes ``--max_num_tokens``:
  gpt-oss's 20,000; DeepSeek-R1's C + ISL + 64 rounded up to 64 (with MTP, (MTP + 1)·C + ISL + 64),
  at least 8,192 from 2026-01-21 (64af5a771, #258) for the recipes without MTP; Llama-3.1-70B's 16,384
  (below). Those rows are replayed with it as the chunked pool's budget (with attention DP, each
  rank's; the MTP recipes with attention DP count C over the ranks, which they also pass as
  ``--max_batch_size``, replayed as each rank's ``max_running_requests``). The recipes leave chunked
  prefill off, so the engine runs each context whole; pdplan's chunked pool may start a second prompt
  in the room the first leaves;
* precision — gemm_quant_mode fp8 / fp8_block is fp8 weights, nvfp4 is fp4, none is bf16; the KV
  cache is fp8 for quantized weights (pdplan's default), except on the aggregated InferenceMAX rows whose
  recipe left it to the engine, which keeps it at bf16 (``AUTO_KV_RECIPES``: SGLang's DeepSeek-R1 on H200,
  vLLM's gpt-oss on H100 and H200 and on B200 before 2025-12-05, TensorRT-LLM's gpt-oss on H200);
* MXFP4 experts' activations — each engine's default on the GPU (MXFP8 for TensorRT-LLM and SGLang on
  Blackwell, else BF16), except vLLM's gpt-oss on B200, whose recipe exports
  ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` (``gptoss_fp4_b200_docker.sh`` from 5e92867f4, 2025-09-24, before
  its first sweep here): replayed with MXFP8 activations (``MXFP8_RECIPES``), FlashInfer's kernel, which
  AIConfigurator measured in SGLang's table;
* operator tables — the newest measured for the engine on that GPU (the row's engine version
  may be older; the table's is printed);
* TensorRT-LLM's MoE backend — InferenceMAX's DeepSeek-R1 FP8 recipes on B200 set ``moe_config.backend``
  (``moe_backend``): DEEPGEMM, timed by TensorRT-LLM's own MoE table, or TRTLLM, the trtllm-gen kernel
  AIConfigurator measured in SGLang's table (``TRT_MOE_KERNELS``); srt-slurm's FP4 recipes run their DEP decodes on
  CUTLASS (their contexts and TEP decodes on TRTLLM, the trtllm-gen kernels TensorRT-LLM's table and SGLang's
  measure); every other row's routed experts take the fastest kernel measured at each point;
* disaggregated InferenceMAX rows' prefill workers — as the srt-slurm recipe that started them
  (``srt_slurm.DISAGG_RECIPES``: the recipe of the row's engine, GPU, precision, lengths, worker counts, decode
  attention DP, concurrency and sweep date) sets them: its coordinates, which stand where the export states
  others (:func:`disagg_recipe`), and what one rank batches: TensorRT-LLM's ``max_num_tokens`` and
  ``max_batch_size``; SGLang's ``--chunked-prefill-size`` and ``--max-running-requests`` over the DP ranks, and
  its ``--max-prefill-tokens``. A prompt runs whole: SGLang chunks one longer than its rank's chunk (4,096 tokens
  in the February B200 FP8 recipes with attention DP), which the replay runs in one batch. A budget beyond
  the composed profile's KV capacity is held to it. InferenceMAX's GB200 SGLang sweep of 2025-12-21 ran
  ai-dynamo's scripts, whose parallel sizes the export does not state (it states its config's placeholders):
  those rows replay both phases as srt-slurm's recipes of then transcribe the scripts (``srt_slurm.DECEMBER``),
  at ``req_rate`` inf. The rows without a known recipe (deployments no recipe read here matches, such as
  TensorRT-LLM's GB200 sweep of 2025-12-19; AIConfigurator's own runs) run at the row's coordinates with the
  engine's default batch (``SCHEDULING``);
* disaggregated InferenceMAX rows' decode workers — at the row's coordinates (December's GB200 SGLang rows at
  their script's), each rank running at most the requests its recipe lets it: TensorRT-LLM's decode
  ``max_batch_size``, SGLang's decode
  ``--max-running-requests`` over its DP ranks; the others wait, their KV sent, for a running request to end
  (a recipe of one request per decode worker, run by more clients than workers, queues them there);
* disaggregated rows — the KV lands on a decode rank over its GPUs' NICs (50 GB/s each, one 400 Gb/s NIC per
  GPU; under MLA each GPU takes the whole latent, so a prompt's KV moves at 50 GB/s per stage), as fast as the
  prefill GPUs holding it send (a DEP prefill into a TP8 decode sends all eight copies from one GPU), 0.5 ms
  per transfer, once the prompt's prefill ends, as the engines send it (SGLang each chunk after its forward,
  ``send_kv_chunk``; TensorRT-LLM a context request after it completes, its KV-cache transceiver); SGLang's
  prefill workers with attention DP put each prompt on the rank its random bootstrap room names
  (``rank_router``: ``bootstrap-room``), its decode workers each request on the next rank in turn
  (``round-robin``), every other worker on the rank with the fewest outstanding requests: the engines' defaults
  (:func:`pdplan.engines.default_rank_router`), which the recipes keep;
* SGLang's receive interval — InferenceMAX starts DeepSeek-R1 on B200 under SGLang with
  ``--scheduler-recv-interval`` 10 below 16 clients and 30 from 16 (fp8 at TP 4: always 10), so the
  scheduler takes in new requests only every N-th decode step (its ``dsr1_fp4_b200.sh`` and
  ``dsr1_fp8_b200.sh`` from 2025-09 through the 2026-03 runs); those rows are replayed with it
  (``recv_interval`` of the colocated pool), every other row receives at every iteration;
* TensorRT-LLM's batch waiting — InferenceMAX's recipes hold prompts while requests decode
  (``batch_wait_timeout_iters`` N, ``batch_wait_max_tokens_ratio`` r of ``max_num_tokens``) for
  Llama-3.1-70B at 1k/1k below TP 8 (N 20, r 0.9, its ``70b_*_trt_*.sh`` from 2025-09-18 until the
  model left the sweep on 2025-10-29) and for DeepSeek-R1 FP8 on B200 without MTP at 1k/1k from 64
  clients (N 40, r 0.8, ``dsr1_fp8_b200_trt.sh`` from its sweep of 2026-01-29, ``ec7bafaae``, on); those
  rows are replayed with it (``batch_wait``), and with the iteration budget those recipes pass as
  ``--max_num_tokens`` (above; Llama: 16,384 at every shape). TensorRT-LLM skips batch waiting under
  attention DP;
* TensorRT-LLM's attention-DP balance — InferenceMAX's TensorRT-LLM recipes with attention DP set
  ``attention_dp_config: enable_balance: true``: DeepSeek-R1's with ``timeout_iters`` 60 and
  ``batching_wait_iters`` 0 (``dsr1_*_trt*.sh`` from ``ec90f3fe7``, 2025-09-18), gpt-oss's with the
  engine's defaults, 50 and 10 (``gptoss_fp4_b200_trt*.sh`` from ``28e5a01ea``); those rows (mode
  ``agg-dp``) are replayed with it (``adp_balance``): prompts wait until every rank has some;
* multi-token prediction — an InferenceMAX row measured by a sweep that ran DeepSeek-R1 under its
  engine, GPU and precision only with MTP (``MTP_SWEEPS``: the merge's perf-changelog.yaml entry
  lists only ``-mtp`` configurations) is replayed with it: the recipes' ``num_nextn_predict_layers``
  3, or 1 with attention DP (``dsr1_*_trt_mtp.sh``), each draft accepted with probability 0.85, the
  lower end of the 85–90% DeepSeek-V3's report measured for its second-token prediction (arXiv:2412.19437,
  section 5.4.3). A sweep that ran the same engine, GPU and precision both with and without MTP
  (``MIXED_SWEEPS``) left rows the export does not tell apart; they are counted and not replayed.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import replace

import inferencex
import numpy as np
import pandas as pd
import srt_slurm

from pdplan import engines
from pdplan.engines import default_rank_router, first_token, handoff
from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.compose import tables
from pdplan.latency.speculative import SpeculativeDecoding
from pdplan.modelref import get_model
from pdplan.modelspec import ModelSpec
from pdplan.planner.plans import LINK_SETUP_S
from pdplan.sim.plan import Link, Plan, Pool
from pdplan.vocabulary import AllToAll, MoeActivations, SpeculativeMethod
from pdplan.workload.reshape import poisson_arrivals

MODELS = {"meta-llama/Llama-3.1-70B": "llama-3.1-70b", "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
          "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b", "Qwen/Qwen3-32B": "qwen3-32b",
          "nvidia/Qwen3-32B-NVFP4": "qwen3-32b",
          # mixture-of-experts models (aggregated rows whose instance is TP x PP on one node)
          "deepseek-ai/DeepSeek-R1": "deepseek-r1", "deepseek-ai/DeepSeek-V3": "deepseek-v3",
          "nvidia/DeepSeek-R1-NVFP4": "deepseek-r1", "openai/gpt-oss-120b": "gpt-oss-120b",
          "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b", "moonshotai/Kimi-K2.5": "kimi-k2.5",
          "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3"}
MOE = {"deepseek-r1", "deepseek-v3", "gpt-oss-120b", "qwen3-235b-a22b", "kimi-k2.5"}
#: Checkpoints whose FP8 weights are block-scaled although their catalog model's precision is not.
BLOCK_SCALED = {"Qwen/Qwen3-235B-A22B-FP8": 128}
GPUS = {system: gpu for gpu, system in tables.SYSTEMS.items()}
DTYPES = {"fp8": "fp8", "fp8_block": "fp8", "nvfp4": "fp4", "int4_wo": "int4"}
#: gpt-oss ships MXFP4 experts; the collection labels its runs nvfp4 (the 4-bit MoE mode), which on
#: Hopper, lacking FP4 tensor cores, can only be the checkpoint's MXFP4 weights.
CHECKPOINT_DTYPES = {"gpt-oss-120b": "mxfp4"}
SCHEDULING = {"vllm": ("chunked", 8192), "trtllm": ("chunked", 8192), "sglang": ("prefill-first", 8192)}
#: SemiAnalysis' InferenceMAX collections: two CSV exports and a dump of its results database, each row
#: naming the container image and measurement date; one benchmark client (module docstring).
INFERENCEMAX = ("2026-04-06.csv", "2026-03-25.csv", "db-dump/2026-04-27", "kimi-k2.5-gap-analysis.csv")
RANGE_RATIO = 0.8
DEEPSEEK = {"deepseek-r1", "deepseek-v3"}
#: InferenceMAX sweeps (engine, GPU, precision, UTC date of the merge that started them) that ran
#: DeepSeek-R1 only with multi-token prediction: the merge's entry in InferenceX's perf-changelog.yaml
#: names only ``-mtp`` configurations of that engine, GPU and precision.
MTP_SWEEPS = {("trtllm", "b200-180gb", "fp4", "2026-01-14"), ("trtllm", "b200-180gb", "fp8", "2026-01-14"),
              ("trtllm", "h200-141gb", "fp8", "2026-01-14"),  # bf3456727 (#392): the -trt-mtp configurations
              ("trtllm", "b200-180gb", "fp8", "2026-02-05"),  # 5d517074c: dsr1-fp8-b200-trt-mtp
              ("trtllm", "b200-180gb", "fp4", "2026-02-06")}  # 0aae52d4c: dsr1-fp4-b200-trt-mtp
#: Sweeps that ran the same engine, GPU and precision with and without MTP in one go.
MIXED_SWEEPS = {("trtllm", "h200-141gb", "fp8", "2026-01-28"),  # e28c038f8 (#587): -trt and -trt-mtp
                ("sglang", "b200-180gb", "fp8", "2026-03-25")}  # 12ba0ae07 (#943): -sglang and -sglang-mtp
MTP_ACCEPTANCE = 0.85
#: InferenceMAX's TensorRT-LLM recipes that ran batch waiting (module docstring): Llama-3.1-70B's from
#: 2025-09-18 (1b563c858) until it left the sweep (2025-10-29), DeepSeek-R1 FP8 B200's from ec7bafaae.
LLAMA_TRT_RECIPES = ("2025-09-18", "2025-10-29")
DEEPSEEK_DELAY_BATCHING = ("trtllm", "b200-180gb", "fp8", "2026-01-29")
#: The ``--max_num_tokens`` of InferenceMAX's gpt-oss TensorRT-LLM recipes (``gptoss_fp4_*_trt*.sh``, every
#: sweep); DeepSeek-R1's recipes floor theirs at 8,192 from 64af5a771 (#258), merged on this date.
GPT_OSS_TRT_BUDGET = 20000
DEEPSEEK_BUDGET_FLOOR = ("2026-01-21", 8192)
#: InferenceMAX's single-node recipes that leave the KV-cache precision to the engine ("auto": the
#: checkpoint's activation precision, bf16), by engine, GPU and model: SGLang's DeepSeek-R1 FP8 on H200
#: (``dsr1_fp8_h200*.sh``), vLLM's gpt-oss on H100 and H200 (``gptoss_fp4_h100*.sh``, ``gptoss_fp4_h200*.sh``)
#: and TensorRT-LLM's on H200 (``gptoss_fp4_h200_trt*.sh``: ``kv_cache_config.dtype: auto``); vLLM's gpt-oss
#: on B200 until its sweep of this date (25506e87c, #273, added ``kv-cache-dtype: fp8``). Every other
#: recipe sets fp8.
AUTO_KV_RECIPES = {("sglang", "h200-141gb", "deepseek-r1"), ("sglang", "h200-141gb", "deepseek-v3"),
                   ("vllm", "h100-80gb", "gpt-oss-120b"), ("vllm", "h200-141gb", "gpt-oss-120b"),
                   ("trtllm", "h200-141gb", "gpt-oss-120b")}
GPT_OSS_VLLM_B200_FP8_KV = "2025-12-05"
#: The attention-DP balance of InferenceMAX's TensorRT-LLM recipes with attention DP (``attention_dp_config``
#: with ``enable_balance``): (timeout_iters, batching_wait_iters, UTC date of the merge that set it).
#: DeepSeek-R1's 60 and 0 (``dsr1_*_trt*.sh``, ec90f3fe7, #22); gpt-oss's states no counts, so the engine's
#: defaults, 50 and 10 (``AttentionDpConfig`` in tensorrt_llm/llmapi/llm_args.py; ``gptoss_fp4_b200_trt*.sh``,
#: 28e5a01ea, #27).
ADP_BALANCE_RECIPES = {"deepseek-r1": (60, 0, "2025-09-18"), "deepseek-v3": (60, 0, "2025-09-18"),
                       "gpt-oss-120b": (50, 10, "2025-09-19")}
#: The MoE table's kernel that times each TensorRT-LLM MoE backend (``moe_config.backend``) a recipe names: for
#: DeepSeek-R1 FP8's block-scaled experts DEEPGEMM its own table's, TRTLLM the trtllm-gen kernel SGLang's table
#: measured (:data:`pdplan.latency.compose.moe.KERNEL_MEASURED_BY`); for NVFP4 experts CUTLASS its own table's.
TRT_MOE_KERNELS = {"DEEPGEMM": "deepgemm", "TRTLLM": "sglang_flashinfer_trtllm_moe",
                   "CUTLASS": "moe_torch_flow_cutlass"}
#: The sweep from which InferenceMAX's DeepSeek-R1 FP8 TensorRT-LLM recipe on B200 runs TRTLLM instead of DEEPGEMM,
#: by whether it is the MTP one: ``dsr1_fp8_b200_trt.sh`` from ec7bafaae (#594), keeping DEEPGEMM at 1k/8k from 256
#: clients; ``dsr1_fp8_b200_trt_mtp.sh`` from 5d517074c (#632), keeping DEEPGEMM with attention DP.
TRT_MOE_SWITCH = {False: "2026-01-29", True: "2026-02-05"}

#: InferenceMAX recipes that feed MXFP4 experts MXFP8 activations where their engine's default is BF16, with the
#: UTC date of the merge that made them: vLLM's gpt-oss on B200 exports ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``
#: (``gptoss_fp4_b200_docker.sh``, 5e92867f4, #48, kept until the model left the sweep).
MXFP8_RECIPES = {("vllm", "b200-180gb", "gpt-oss-120b"): "2025-09-24"}


def supported_rows(path, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows pdplan replays, with why the others are left out printed. With InferenceX's published runs
    (:func:`inferencex.read_runs`), a disaggregated row that does not say how many workers ran takes the layout
    its run states (:func:`inferencex.with_published_layouts`), and a run the export holds under several rows
    is replayed once: through the row that names its own workers, else the first by id."""
    rows = pd.read_csv(path)
    _say_unread(rows)
    rows = rows[rows["model_path"].isin(MODELS) & rows["system"].isin(GPUS)].copy()
    rows["model"] = rows["model_path"].map(MODELS)
    rows["gpu"] = rows["system"].map(GPUS)
    rows["dtype"] = rows["gemm_quant_mode"].map(DTYPES).fillna("bf16")
    for model, dtype in CHECKPOINT_DTYPES.items():
        rows.loc[rows["model"] == model, "dtype"] = dtype
    rows["ep"] = rows["moe_ep_size"].fillna(1).astype(int)
    rows["concurrency"] = [_concurrency(s, b) for s, b in zip(rows["silicon_data_source"], rows["batch_size"])]
    rows["harness"] = [_harness(s) for s in rows["silicon_data_source"]]
    # the UTC date of the run (InferenceMAX: of the merge whose sweep measured it); empty when unstated
    rows["measured"] = rows["silicon_data_source"].str.extract(r"measured=(\d{4}-\d{2}-\d{2})")[0].fillna("")
    moe = rows["model"].isin(MOE)
    # aggregated: TP x PP on one node, experts split over the TP group (EP 1) or whole over it (EP = TP)
    one_instance = ((rows["mode"] == "agg") & (rows["attention_dp_size"].fillna(1) == 1)
                    & (rows["tp_size"].fillna(1) <= 8) & (rows["pp_size"].fillna(1) == 1)
                    & (rows["ep"].eq(1) | rows["ep"].eq(rows["tp_size"])))
    # aggregated with attention DP (mode agg-dp): experts whole over the TP x DP GPUs or split over all of them
    dp = rows["attention_dp_size"].fillna(1)
    with_dp = ((rows["mode"] == "agg") & (dp > 1) & (rows["pp_size"].fillna(1) == 1)
               & (rows["ep"].eq(1) | rows["ep"].eq(rows["tp_size"].fillna(1) * dp)))
    rows.loc[with_dp, "mode"] = "agg-dp"
    # disaggregated: each phase's workers with their TP, attention DP and EP, when the row says how many
    disagg = rows["mode"] == "disagg"
    named = rows["prefill_num_workers"].notna() & rows["decode_num_workers"].notna()
    rows = inferencex.with_published_layouts(rows, runs)
    workers = rows["prefill_num_workers"].notna() & rows["decode_num_workers"].notna()
    mixed = pd.Series([_deepseek_sweep(row) in MIXED_SWEEPS for _, row in rows.iterrows()], index=rows.index,
                      dtype=bool)
    # a run the export holds under several rows replays once: through a row naming its workers, else the first by id
    runs_in_order = rows.assign(named=named, mixed=mixed).sort_values(
        ["mixed", "named", "id"], ascending=[True, False, True])["published_run"]
    repeated = (runs_in_order.notna() & runs_in_order.duplicated()).reindex(rows.index)
    for reason, left_out in (
            ("aggregated over nodes, with pipeline stages, or with experts split over some but not all GPUs "
             "(expert TP and EP both above 1)", moe & ~disagg & ~one_instance & ~with_dp),
            ("from a sweep that ran their engine, GPU and precision both with and without multi-token prediction "
             "(the export does not say which row is which)", mixed),
            ("disaggregated runs InferenceX published with multi-token prediction, without worker counts (no "
             "run states its draft depth)", moe & disagg & ~workers & rows["published_mtp"]),
            ("disaggregated without worker counts (the collection's export gives each phase's parallel "
             "coordinates but not how many prefill and decode workers ran)",
             moe & disagg & ~workers & ~rows["published_mtp"]),
            ("disaggregated runs InferenceX published that another row already replays", moe & disagg & repeated)):
        if left_out.any():
            print(f"{int(left_out.sum())} mixture-of-experts rows are {reason}; not replayed")
    rows = rows[(~moe | one_instance | with_dp | (disagg & workers)) & ~mixed & ~repeated]
    return rows[rows["concurrency"] > 0].reset_index(drop=True)


def _say_unread(rows: pd.DataFrame) -> None:
    """Print how many rows are of a model pdplan does not read (each with the reason its config reader gives) or on a
    GPU its catalog does not hold, which no replay can time."""
    unread = rows[~rows["model_path"].isin(MODELS)]
    for model_path, count in unread.groupby("model_path").size().items():
        print(f"{count} rows are of {model_path}, which pdplan does not read ({_unread_reason(model_path)}); "
              "not replayed")
    off = rows[rows["model_path"].isin(MODELS) & ~rows["system"].isin(GPUS)]
    for system, count in off.groupby("system").size().items():
        print(f"{count} rows are on {system}, a GPU pdplan's catalog does not hold; not replayed")


#: Rows naming a repository by an older organisation name: Zhipu AI publishes on Hugging Face as zai-org.
RENAMED = {"zhipuai/GLM-5": "zai-org/GLM-5"}


def _unread_reason(model_path: str) -> str:
    """Why ``model_path`` is not among the replayed models: what its config reader refuses it for, else that no
    row of it is mapped to a catalog model."""
    try:
        get_model(RENAMED.get(model_path, model_path))
    except PdplanError as refused:
        named = re.search(r"got '([^']+)'", refused.detail)
        if refused.field == "architectures" and named:
            return f"its architecture, {named.group(1)}"
        return "no config.json of it at hand: neither the hub's cache nor AIConfigurator's copies hold one"
    return "its rows are not mapped to a model here"


def _concurrency(source: str, batch) -> int:
    found = re.search(r"silicon_concurrency=(\d+)", str(source))
    if found:
        return int(found.group(1))
    return int(batch) if pd.notna(batch) else 0


def _harness(source: str) -> str:
    """Which collection a row comes from: its source file's folder or name (runs of one
    collection share a benchmark client and its settings)."""
    found = re.search(r"source_file=([^;]+)", str(source)) or re.match(r"(db-dump/[^;]+)", str(source))
    path = found.group(1).strip() if found else "unknown"
    if path.startswith("db-dump/"):
        return path
    return "gap-analysis" if "aic-auto-gap-analysis" in path else path.rsplit("/", 1)[-1]


def _int(value, default: int = 1) -> int:
    return int(value) if pd.notna(value) else default


def row_model(row) -> ModelSpec:
    """The row's model at its precision; the Qwen3-235B-A22B-FP8 checkpoint is block-scaled like
    DeepSeek's (its config.json: weight_block_size [128, 128])."""
    model = get_model(row["model"], dtype=row["dtype"], kv_dtype=kv_dtype(row))
    return replace(model, weight_block=BLOCK_SCALED.get(row["model_path"], model.weight_block))


def kv_dtype(row) -> str | None:
    """The KV-cache precision an aggregated InferenceMAX row's recipe ran (``AUTO_KV_RECIPES``); None for
    pdplan's default (fp8 for quantized weights), which every other recipe set."""
    if row["harness"] not in INFERENCEMAX or row["mode"] not in ("agg", "agg-dp") or not row["measured"]:
        return None
    key = (row["backend"], row["gpu"], row["model"])
    if key in AUTO_KV_RECIPES or (key == ("vllm", "b200-180gb", "gpt-oss-120b")
                                  and row["measured"] < GPT_OSS_VLLM_B200_FP8_KV):
        return "bf16"
    return None


def plan_for(row) -> Plan:
    model = row_model(row).name
    if row["mode"] in ("agg", "agg-dp"):
        policy, tokens = SCHEDULING[row["backend"]]
        tokens = iteration_budget(row) or tokens
        waiting = batch_wait(row)
        chunk = tokens if policy == "chunked" else None
        cap = None if policy == "chunked" else tokens
        ranks = {"dp": _int(row["attention_dp_size"]), "ep": int(row["ep"])} if row["mode"] == "agg-dp" else {}
        pool = Pool(name="agg", phase="colocated", model=model, gpu=row["gpu"], tp=_int(row["tp_size"]),
                    policy=policy, chunk_tokens=chunk, max_prefill_batch_tokens=cap,
                    recv_interval=None if ranks else recv_interval(row), **ranks, **(waiting or {}),
                    max_running_requests=mtp_batch_size(row), **adp_balance(row))
        return Plan(pools=(replace(pool, all_to_all=all_to_all(row, pool)),))
    recipe = disagg_recipe(row)
    pools = (prefill_pool(row, model, recipe), decode_pool(row, model, recipe))
    return Plan(pools=tuple(replace(pool, all_to_all=all_to_all(row, pool)) for pool in pools),
                default_link=kv_link(pools[1]), transfer_schedule="request")


def kv_link(decode: Pool) -> Link:
    """The KV path into a decode instance: every GPU's NIC as the GPU catalog rates it, and the planner's cost per
    transfer. The simulator gives each attention-DP rank its GPUs' share, of which a request's KV fills what its
    sending GPUs can (:func:`pdplan.handoff.request_kv_bytes_per_s`: under MLA one NIC's rate per stage)."""
    nics = get_gpu(decode.gpu).network_bytes_per_s * decode.gpus
    return Link(from_pool=None, to_pool=None, bandwidth_bytes_per_s=nics, setup_s=LINK_SETUP_S)


def prefill_pool(row, model: str, recipe: srt_slurm.DisaggRecipe | None) -> Pool:
    """A disaggregated row's prefill workers: as their recipe starts them (:func:`disagg_recipe`), else at
    the row's coordinates batching as the engine's default (``SCHEDULING``)."""
    if recipe is None:
        shape, batch = coordinates(row, "prefill"), {"max_prefill_batch_tokens": SCHEDULING[row["backend"]][1]}
    else:
        shape = recipe.coordinates
        batch = {"max_prefill_batch_tokens": recipe.batch_tokens, "max_running_requests": recipe.batch_prompts}
    return Pool(name="p", phase="prefill", model=model, gpu=row["gpu"], replicas=_int(row["prefill_num_workers"]),
                rank_router=default_rank_router(row["backend"], "prefill", shape["dp"]), **shape, **batch)


def decode_pool(row, model: str, recipe: srt_slurm.DisaggRecipe | None) -> Pool:
    """A disaggregated row's decode workers at the row's coordinates (or its recipe's, where the export's are not
    what ran), each rank running at most the requests its recipe lets it (:func:`disagg_recipe`; without one, as
    many as its KV holds), taking a prefilled request and answering its first token as the row's engine does
    (:func:`pdplan.engines.handoff`, :func:`pdplan.engines.first_token`), its ranks taking requests as the engine's
    defaults put them (:func:`pdplan.engines.default_rank_router`): no recipe sets a decode's
    ``--load-balance-method`` (srt-slurm's set ``round_robin`` on the prefill alone, the bootstrap room there)."""
    shape = (recipe and recipe.decode_coordinates) or coordinates(row, "decode")
    return Pool(name="d", phase="decode", model=model, gpu=row["gpu"], **shape,
                replicas=_int(row["decode_num_workers"]), max_running_requests=recipe and recipe.decode_batch,
                handoff=handoff(row["backend"], "decode"), first_token=first_token(row["backend"], "decode"),
                rank_router=default_rank_router(row["backend"], "decode", shape["dp"]))


def recv_interval(row) -> int | None:
    """The ``--scheduler-recv-interval`` the row's server ran with (module docstring), None for 1."""
    if not (row["harness"] in INFERENCEMAX and row["backend"] == "sglang" and row["gpu"] == "b200-180gb"
            and row["model"] in DEEPSEEK):
        return None
    if row["dtype"] == "fp8" and _int(row["tp_size"]) == 4:
        return 10
    return 30 if int(row["concurrency"]) >= 16 else 10


def _trt_recipe(row) -> bool:
    """Whether the row is an aggregated InferenceMAX TensorRT-LLM run (with attention DP or without) whose
    recipe's date is known."""
    return row["harness"] in INFERENCEMAX and row["backend"] == "trtllm" and row["mode"] in ("agg", "agg-dp") \
        and bool(row["measured"])


def _trt_dp_recipe(row) -> bool:
    """Whether the row is an InferenceMAX TensorRT-LLM run with attention DP whose recipe's date is known."""
    return _trt_recipe(row) and row["mode"] == "agg-dp"


def _llama_trt_recipe(row) -> bool:
    """Whether the row ran Llama-3.1-70B's TensorRT-LLM recipe of ``LLAMA_TRT_RECIPES``."""
    return _trt_recipe(row) and row["model"] == "llama-3.1-70b" \
        and LLAMA_TRT_RECIPES[0] <= row["measured"] <= LLAMA_TRT_RECIPES[1]


def iteration_budget(row) -> int | None:
    """The ``--max_num_tokens`` an aggregated TensorRT-LLM row's recipe passed (module docstring); None
    where the row is not InferenceMAX's or its recipe passed none."""
    if not _trt_recipe(row):
        return None
    if _llama_trt_recipe(row):
        return 16384
    if row["model"] == "gpt-oss-120b":
        return GPT_OSS_TRT_BUDGET
    if row["model"] not in DEEPSEEK:
        return None
    drafting = speculative(row)   # an MTP recipe counts every request's drafts: (MTP + 1)·C + ISL + 64
    rows = (mtp_batch_size(row) or int(row["concurrency"])) * (1 + (drafting.draft_tokens if drafting else 0))
    budget = (rows + int(row["isl"]) + 64 + 63) // 64 * 64
    floored = drafting is None and row["measured"] >= DEEPSEEK_BUDGET_FLOOR[0]
    return max(budget, DEEPSEEK_BUDGET_FLOOR[1]) if floored else budget


def mtp_batch_size(row) -> int | None:
    """The ``--max_batch_size`` an InferenceMAX TensorRT-LLM MTP recipe with attention DP passed, C over the
    ranks, at least 1 (``dsr1_*_trt_mtp*.sh``: ``MAX_BATCH_SIZE=$((CONC/TP))``, which also counts in its
    ``--max_num_tokens``); None for every other row (without attention DP those recipes pass C, which C
    clients never exceed)."""
    if not (_trt_dp_recipe(row) and speculative(row) is not None):
        return None
    return max(1, int(row["concurrency"]) // _int(row["attention_dp_size"]))


def batch_wait(row) -> dict | None:
    """The TensorRT-LLM batch waiting of an aggregated row's recipe (module docstring) as pool fields;
    None where the recipe ran none."""
    if not _trt_recipe(row) or _trt_dp_recipe(row):  # TensorRT-LLM skips batch waiting under attention DP
        return None
    chat, clients = (int(row["isl"]), int(row["osl"])) == (1024, 1024), int(row["concurrency"])
    if _llama_trt_recipe(row):
        return {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9} \
            if chat and _int(row["tp_size"]) < 8 else None
    sweep = _deepseek_sweep(row)
    if sweep is None or sweep[:3] != DEEPSEEK_DELAY_BATCHING[:3] or sweep[3] < DEEPSEEK_DELAY_BATCHING[3] \
            or sweep in MTP_SWEEPS:
        return None
    return {"batch_wait_timeout_iters": 40, "batch_wait_max_tokens_ratio": 0.8} if chat and clients >= 64 else None


def adp_balance(row) -> dict:
    """The attention-DP balance of an InferenceMAX TensorRT-LLM row with attention DP (module docstring) as
    pool fields; none for every other row, and for a model whose recipe ``ADP_BALANCE_RECIPES`` does not
    hold."""
    recipe = ADP_BALANCE_RECIPES.get(row["model"]) if _trt_dp_recipe(row) else None
    if recipe is None or row["measured"] < recipe[2]:  # a recipe not read, or from before it set the balance
        return {}
    timeout, batching, _ = recipe
    return {"attention_dp_timeout_iters": timeout, "attention_dp_batching_wait_iters": batching}


def moe_activations(row) -> MoeActivations | None:
    """The precision the row's recipe fed MXFP4 experts their activations in (``MXFP8_RECIPES``); None for the
    engine's default."""
    since = MXFP8_RECIPES.get((row["backend"], row["gpu"], row["model"]))
    if since is None or row["harness"] not in INFERENCEMAX or not row["measured"] or row["measured"] < since:
        return None
    return MoeActivations.MXFP8


def moe_backend(row, phase: str | None = None) -> str | None:
    """The MoE backend InferenceMAX's recipe ran the row's ``phase`` with under TensorRT-LLM: DeepSeek-R1 FP8's on
    B200 (``TRT_MOE_SWITCH``; a disaggregated recipe's on both phases, :attr:`srt_slurm.DisaggRecipe.moe_backend`:
    TRTLLM at 8k-token prompts, DEEPGEMM at 1k), and a disaggregated recipe's decode's own where it differs
    (:attr:`srt_slurm.DisaggRecipe.decode_moe_backend`: the FP4 DEP decodes' CUTLASS); None for every other row and
    phase, whose experts are timed by the fastest kernel measured at each point."""
    if row["mode"] == "disagg":
        recipe = disagg_recipe(row)
        if recipe is None:
            return None
        return (recipe.decode_moe_backend or recipe.moe_backend) if phase == "decode" else recipe.moe_backend
    engine = (row["backend"], row["gpu"], row["dtype"])
    if not (row["harness"] in INFERENCEMAX and engine == ("trtllm", "b200-180gb", "fp8") and row["model"] in DEEPSEEK
            and row["measured"]):
        return None
    mtp = speculative(row) is not None
    if row["measured"] < TRT_MOE_SWITCH[mtp]:
        return "DEEPGEMM"
    if mtp:
        return "DEEPGEMM" if row["mode"] == "agg-dp" else "TRTLLM"
    long_outputs = (int(row["isl"]), int(row["osl"])) == (1024, 8192) and int(row["concurrency"]) >= 256
    return "DEEPGEMM" if long_outputs else "TRTLLM"


#: The deployments whose recipes force TensorRT-LLM's DeepEP all-to-all (``TRTLLM_FORCE_ALLTOALL_METHOD: DeepEP``):
#: srt-slurm's H100 FP8 recipes, all 31 of them at 5063eb43, which run DeepSeek-R1 over two nodes.
FORCED_DEEPEP = {("trtllm", "h100-80gb")}


def all_to_all(row, pool: Pool) -> AllToAll:
    """How a pool's DP ranks with whole experts (EP = TP × DP) reach them: as the engine runs them by default on
    the collection's hosts (:func:`pdplan.engines.all_to_all`; srt-slurm's ``gpus_per_node``, a GB200 compute tray's 4
    on GB200, :attr:`pdplan.hardware.GPU.gpus_per_host`), or as a recipe forces it (:data:`FORCED_DEEPEP`).
    SGLang's srt-slurm recipes set ``moe-a2a-backend: deepep`` on every such instance spanning nodes and none on one
    node, where SGLang runs its default "none" and gathers the ranks' tokens. TensorRT-LLM's other recipes and
    InferenceMAX's aggregated scripts ask for no all-to-all, so it gathers on HGX nodes and dispatches on GB200's
    NVLink domain."""
    if (row["backend"], row["gpu"]) in FORCED_DEEPEP:
        return AllToAll.DISPATCH
    gpu = get_gpu(row["gpu"])
    return engines.all_to_all(row["backend"], pool.phase, pool, gpu.gpus_per_host, fabric=gpu.nvlink_fabric)


def _deepseek_sweep(row) -> tuple[str, str, str, str] | None:
    """The engine, GPU, precision and UTC date of the InferenceMAX sweep that measured a DeepSeek row
    (the keys of ``MTP_SWEEPS`` and ``MIXED_SWEEPS``); None for any other row."""
    if row["harness"] not in INFERENCEMAX or row["model"] not in DEEPSEEK or not row["measured"]:
        return None
    return row["backend"], row["gpu"], row["dtype"], row["measured"]


def speculative(row) -> SpeculativeDecoding | None:
    """The multi-token prediction the row's server ran (module docstring), its draft cost resolved for the
    row's model; None for none."""
    if _deepseek_sweep(row) not in MTP_SWEEPS:
        return None
    drafts = 1 if row["mode"] == "agg-dp" else 3
    return SpeculativeDecoding(method=SpeculativeMethod.MTP, acceptance=MTP_ACCEPTANCE,
                               draft_tokens=drafts).resolved(row_model(row).layers)


def disagg_recipe(row) -> srt_slurm.DisaggRecipe | None:
    """The recipe that started a disaggregated InferenceMAX row's deployment (:func:`srt_slurm.recipe_for`): the one
    whose deployment is the row's, whose benchmark ran the row's concurrency, in a sweep of the row's date; of two
    such, the one whose prefill coordinates are the row's. None where none is known.

    The recipe's coordinates stand where the row's differ: the export states some sweeps' prefill coordinates
    unlike the recipe it names (TensorRT-LLM's H200 sweep of 2026-02-14, its B200 sweep of 2026-02-12), and
    those rows measured what the later sweep, whose coordinates agree, measured at the same recipe and concurrency
    (the 8k-token rows within 3%, the 1k-token ones within 23%)."""
    if row["harness"] not in INFERENCEMAX or row["mode"] != "disagg" or not row["measured"]:
        return None
    deployment = (row["backend"], row["gpu"], row["dtype"], int(row["isl"]), int(row["osl"]),
                  _int(row["prefill_num_workers"]), _int(row["decode_num_workers"]),
                  _int(row["decode_attention_dp_size"]) > 1)
    return srt_slurm.recipe_for(deployment, int(row["concurrency"]), row["measured"], coordinates(row, "prefill"))


def recipe_coverage(rows: pd.DataFrame) -> str:
    """How many of the disaggregated rows replay their recipe's prefill workers, at how many of them the
    recipe's coordinates are not the export's, and what the rest replay."""
    disaggregated = rows[rows["mode"] == "disagg"]
    found = [(disagg_recipe(row), coordinates(row, "prefill")) for _, row in disaggregated.iterrows()]
    known = [(recipe, own) for recipe, own in found if recipe is not None]
    moved = sum(recipe.coordinates != own for recipe, own in known)
    return (f"{len(known)} of {len(found)} disaggregated rows replay the prefill workers their recipe "
            f"started ({moved} at coordinates the export states otherwise); the other {len(found) - len(known)} "
            f"the export's coordinates with the engine's default batch")


def coordinates(row, phase: str) -> dict:
    """A disaggregated row's worker of ``phase`` as pdplan's coordinates: attention TP per DP rank, the
    DP ranks and EP (the collection's tp_size is the attention TP; moe_tp x moe_ep = tp x dp GPUs)."""
    dp = _int(row[f"{phase}_attention_dp_size"])
    ep = _int(row[f"{phase}_moe_ep_size"]) or 1
    return {"tp": _int(row[f"{phase}_tp_size"]), "dp": dp, "ep": ep}


def client_rate(row) -> float | None:
    """The finite rate the row's benchmark clients were paced at (:attr:`srt_slurm.DisaggRecipe.request_rate`), None
    for ``req_rate: inf`` or where no recipe is known."""
    recipe = disagg_recipe(row)
    return None if recipe is None else recipe.request_rate


def arrivals(row, n: int) -> tuple[np.ndarray, float | None]:
    """When the row's benchmark client schedules its ``n`` requests, and the rate that paces its clients: all at 0
    and None (``req_rate: inf``, each slot refilled the moment it frees), or where the recipe states a finite
    rate (:attr:`srt_slurm.DisaggRecipe.request_rate`), Poisson times at it, drawn with the row's own seed, as
    benchmark_serving.py draws its intervals (burstiness 1: exponential gaps)."""
    rate = client_rate(row)
    if rate is None:
        return np.zeros(n), None
    return poisson_arrivals(n, rate_rps=rate, rng=zlib.crc32(str(row["id"]).encode())), rate


def requests(row) -> tuple[np.ndarray, np.ndarray]:
    """The input and output lengths of the requests the row's benchmark client sent (module
    docstring), drawn with a seed of the row's own (its id's CRC-32: the same whichever rows are replayed)."""
    isl, osl, clients = int(row["isl"]), int(row["osl"]), int(row["concurrency"])
    if row["harness"] not in INFERENCEMAX:
        n = min(2000, max(100, 10 * clients))
        return np.full(n, isl), np.full(n, osl)
    rng = np.random.default_rng(zlib.crc32(str(row["id"]).encode()))
    recipe = disagg_recipe(row)
    n = clients * (recipe.prompts_per_client if recipe else 10)
    # benchmark_serving.py: np.random.randint(int(L * range_ratio), L + 1, size=num_prompts)
    draw = lambda L: rng.integers(int(L * RANGE_RATIO), L + 1, n)  # noqa: E731
    return draw(isl), draw(osl)
