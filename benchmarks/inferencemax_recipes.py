"""What SemiAnalysis' InferenceMAX recipes set, row by row, for the deployments ``silicon_rows.py`` replays:
each rule reads the row's engine, GPU, precision, model and the date of the sweep that measured it, and says what
the recipe of that sweep passed the engine.

* TensorRT-LLM's iteration budget — every InferenceMAX TensorRT-LLM recipe passes ``--max_num_tokens``:
  gpt-oss's 20,000; DeepSeek-R1's C + ISL + 64 rounded up to 64 (with MTP, (MTP + 1)·C + ISL + 64),
  at least 8,192 from 2026-01-21 (64af5a771, #258) for the recipes without MTP; Llama-3.1-70B's 16,384
  (below). Those rows are replayed with it as the chunked pool's budget (with attention DP, each
  rank's; the MTP recipes with attention DP count C over the ranks, which they also pass as
  ``--max_batch_size``, replayed as each rank's ``max_running_requests``). The recipes leave chunked
  prefill off, so the engine runs each context whole; pdplan's chunked pool may start a second prompt
  in the room the first leaves;
* MXFP4 experts' activations — each engine's default on the GPU (MXFP8 for TensorRT-LLM and SGLang on
  Blackwell, else BF16), except vLLM's gpt-oss on B200, whose recipe exports
  ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1`` (``gptoss_fp4_b200_docker.sh`` from 5e92867f4, 2025-09-24, before
  its first sweep here): replayed with MXFP8 activations (``MXFP8_RECIPES``), FlashInfer's kernel, which
  AIConfigurator measured in SGLang's table;
* TensorRT-LLM's MoE backend — InferenceMAX's DeepSeek-R1 FP8 recipes on B200 set ``moe_config.backend``
  (``moe_backend``): DEEPGEMM, timed by TensorRT-LLM's own MoE table, or TRTLLM, the trtllm-gen kernel
  AIConfigurator measured in SGLang's table (``TRT_MOE_KERNELS``); srt-slurm's FP4 recipes run their DEP decodes on
  CUTLASS (their contexts and TEP decodes on TRTLLM, the trtllm-gen kernels TensorRT-LLM's table and SGLang's
  measure); every other row's routed experts take the fastest kernel measured at each point;
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

import pandas as pd
import srt_slurm

from pdplan import engines
from pdplan.hardware import get_gpu
from pdplan.latency.speculative import SpeculativeDecoding
from pdplan.modelref import get_model
from pdplan.sim.plan import Pool
from pdplan.vocabulary import AllToAll, MoeActivations, SpeculativeMethod

#: SemiAnalysis' InferenceMAX collections: two CSV exports and a dump of its results database, each row
#: naming the container image and measurement date; one benchmark client (``silicon_rows.py``).
INFERENCEMAX = ("2026-04-06.csv", "2026-03-25.csv", "db-dump/2026-04-27", "kimi-k2.5-gap-analysis.csv")
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


def stated_int(value, default: int = 1) -> int:
    """A count the row states, ``default`` where its field is empty."""
    return int(value) if pd.notna(value) else default


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


def recv_interval(row) -> int | None:
    """The ``--scheduler-recv-interval`` the row's server ran with (module docstring), None for 1."""
    if not (row["harness"] in INFERENCEMAX and row["backend"] == "sglang" and row["gpu"] == "b200-180gb"
            and row["model"] in DEEPSEEK):
        return None
    if row["dtype"] == "fp8" and stated_int(row["tp_size"]) == 4:
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
    return max(1, int(row["concurrency"]) // stated_int(row["attention_dp_size"]))


def batch_wait(row) -> dict | None:
    """The TensorRT-LLM batch waiting of an aggregated row's recipe (module docstring) as pool fields;
    None where the recipe ran none."""
    if not _trt_recipe(row) or _trt_dp_recipe(row):  # TensorRT-LLM skips batch waiting under attention DP
        return None
    chat, clients = (int(row["isl"]), int(row["osl"])) == (1024, 1024), int(row["concurrency"])
    if _llama_trt_recipe(row):
        return {"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9} \
            if chat and stated_int(row["tp_size"]) < 8 else None
    sweep = deepseek_sweep(row)
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


def deepseek_sweep(row) -> tuple[str, str, str, str] | None:
    """The engine, GPU, precision and UTC date of the InferenceMAX sweep that measured a DeepSeek row
    (the keys of ``MTP_SWEEPS`` and ``MIXED_SWEEPS``); None for any other row."""
    if row["harness"] not in INFERENCEMAX or row["model"] not in DEEPSEEK or not row["measured"]:
        return None
    return row["backend"], row["gpu"], row["dtype"], row["measured"]


def speculative(row) -> SpeculativeDecoding | None:
    """The multi-token prediction the row's server ran (module docstring), its draft cost resolved for the
    row's model; None for none."""
    if deepseek_sweep(row) not in MTP_SWEEPS:
        return None
    drafts = 1 if row["mode"] == "agg-dp" else 3
    return SpeculativeDecoding(method=SpeculativeMethod.MTP, acceptance=MTP_ACCEPTANCE,
                               draft_tokens=drafts).resolved(get_model(row["model"]).layers)


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
                  stated_int(row["prefill_num_workers"]), stated_int(row["decode_num_workers"]),
                  stated_int(row["decode_attention_dp_size"]) > 1)
    return srt_slurm.recipe_for(deployment, int(row["concurrency"]), row["measured"], coordinates(row, "prefill"))


def coordinates(row, phase: str) -> dict:
    """A disaggregated row's worker of ``phase`` as pdplan's coordinates: attention TP per DP rank, the
    DP ranks and EP (the collection's tp_size is the attention TP; moe_tp x moe_ep = tp x dp GPUs)."""
    dp = stated_int(row[f"{phase}_attention_dp_size"])
    ep = stated_int(row[f"{phase}_moe_ep_size"]) or 1
    return {"tp": stated_int(row[f"{phase}_tp_size"]), "dp": dp, "ep": ep}


def client_rate(row) -> float | None:
    """The finite rate the row's benchmark clients were paced at (:attr:`srt_slurm.DisaggRecipe.request_rate`), None
    for ``req_rate: inf`` or where no recipe is known."""
    recipe = disagg_recipe(row)
    return None if recipe is None else recipe.request_rate
