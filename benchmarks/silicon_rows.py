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
* precision — gemm_quant_mode fp8 / fp8_block is fp8 weights, nvfp4 is fp4, none is bf16; the KV
  cache is fp8 for quantized weights (pdplan's default), except on the aggregated InferenceMAX rows whose
  recipe left it to the engine, which keeps it at bf16 (``inferencemax_recipes.AUTO_KV_RECIPES``: SGLang's
  DeepSeek-R1 on H200, vLLM's gpt-oss on H100 and H200 and on B200 before 2025-12-05, TensorRT-LLM's gpt-oss on
  H200);
* operator tables — the newest measured for the engine on that GPU (the row's engine version
  may be older; the table's is printed);
* disaggregated InferenceMAX rows' prefill workers — as the srt-slurm recipe that started them
  (``srt_slurm.DISAGG_RECIPES``: the recipe of the row's engine, GPU, precision, lengths, worker counts, decode
  attention DP, concurrency and sweep date) sets them: its coordinates, which stand where the export states others
  (:func:`inferencemax_recipes.disagg_recipe`), and what one rank batches: TensorRT-LLM's ``max_num_tokens`` and
  ``max_batch_size``; SGLang's ``--chunked-prefill-size`` and ``--max-running-requests`` over the DP ranks, and
  its ``--max-prefill-tokens``. A prompt runs whole: SGLang chunks one longer than its rank's chunk (4,096 tokens
  in the February B200 FP8 recipes with attention DP), which the replay runs in one batch. A budget beyond the
  composed profile's KV capacity is held to it. InferenceMAX's GB200 SGLang sweep of 2025-12-21 ran ai-dynamo's
  scripts, whose parallel sizes the export does not state (it states its config's placeholders): those rows replay
  both phases as srt-slurm's recipes of then transcribe the scripts (``srt_slurm.DECEMBER``), at ``req_rate`` inf.
  The rows without a known recipe (deployments no recipe read here matches, such as TensorRT-LLM's GB200 sweep of
  2025-12-19; AIConfigurator's own runs) run at the row's coordinates with the engine's default batch
  (``SCHEDULING``);
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
* what InferenceMAX's recipes set beyond that, row by row (``inferencemax_recipes.py``): TensorRT-LLM's
  iteration budget, MoE backend, batch waiting and attention-DP balance, MXFP4 experts' activations, the
  KV-cache precision of the recipes that leave it to the engine, SGLang's receive interval, and multi-token
  prediction.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import replace

import inferencex
import numpy as np
import pandas as pd
import srt_slurm
from inferencemax_recipes import (
    INFERENCEMAX,
    MIXED_SWEEPS,
    adp_balance,
    all_to_all,
    batch_wait,
    client_rate,
    coordinates,
    deepseek_sweep,
    disagg_recipe,
    iteration_budget,
    kv_dtype,
    mtp_batch_size,
    recv_interval,
    stated_int,
)

from pdplan.engines import default_rank_router, first_token, handoff
from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.compose import tables
from pdplan.modelref import get_model
from pdplan.modelspec import ModelSpec
from pdplan.planner.plans import LINK_SETUP_S
from pdplan.sim.plan import Link, Plan, Pool
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
RANGE_RATIO = 0.8


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
    mixed = pd.Series([deepseek_sweep(row) in MIXED_SWEEPS for _, row in rows.iterrows()], index=rows.index,
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


def row_model(row) -> ModelSpec:
    """The row's model at its precision; the Qwen3-235B-A22B-FP8 checkpoint is block-scaled like
    DeepSeek's (its config.json: weight_block_size [128, 128])."""
    model = get_model(row["model"], dtype=row["dtype"], kv_dtype=kv_dtype(row))
    return replace(model, weight_block=BLOCK_SCALED.get(row["model_path"], model.weight_block))


def plan_for(row) -> Plan:
    model = row_model(row).name
    if row["mode"] in ("agg", "agg-dp"):
        policy, tokens = SCHEDULING[row["backend"]]
        tokens = iteration_budget(row) or tokens
        waiting = batch_wait(row)
        chunk = tokens if policy == "chunked" else None
        cap = None if policy == "chunked" else tokens
        ranks = {"dp": stated_int(row["attention_dp_size"]), "ep": int(row["ep"])} if row["mode"] == "agg-dp" else {}
        pool = Pool(name="agg", phase="colocated", model=model, gpu=row["gpu"], tp=stated_int(row["tp_size"]),
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
    return Pool(name="p", phase="prefill", model=model, gpu=row["gpu"], replicas=stated_int(row["prefill_num_workers"]),
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
                replicas=stated_int(row["decode_num_workers"]), max_running_requests=recipe and recipe.decode_batch,
                handoff=handoff(row["backend"], "decode"), first_token=first_token(row["backend"], "decode"),
                rank_router=default_rank_router(row["backend"], "decode", shape["dp"]))


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
