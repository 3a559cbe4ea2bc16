"""AIConfigurator's own estimate of the deployments pdplan's silicon validation replays, side by side.

    python benchmarks/aiconfigurator_estimate.py [--mode agg|disagg] [--pdplan REPLAY.csv] [--csv OUT] [--every K]
                                                 [--jobs N]

NVIDIA's AIConfigurator ships the measurements (``silicon_sample.csv``) and an estimator of its own.
For every aggregated row ``benchmarks/silicon_validation.py`` replays, this asks that estimator for
the row's deployment the way AIConfigurator's command line does for one point (``cli_estimate`` with
``mode='agg'``, whose ``ctx_tokens`` defaults to the prompt length): ``build_model_config`` with the
row's TP, PP, attention DP, MoE TP and EP and its GEMM and MoE precisions, the model from the
Hugging Face configuration AIConfigurator ships, its newest perf database for the engine and GPU,
then ``run_agg`` at the row's concurrency. It prints the median and p90 absolute error and the
median signed error of its mean TTFT and TPOT per engine and model family; with ``--pdplan`` (a
``silicon_validation.py --profiles composed --csv`` file) it prints pdplan's errors on the same rows
beside them. AIConfigurator's TTFT carries terms fitted to this same file (a prefill queueing factor,
and vLLM's per-layer dispatch time: ``sdk/backends/base_backend.py`` and ``vllm_backend.py``), so its
errors here are in-sample; pdplan's are not.

With ``--mode disagg`` it asks for the disaggregated rows as ``cli_estimate`` with ``mode='disagg'`` does
(``estimate_disaggregated``): each phase's model at its own coordinates, the prefill's static time at the row's
prefill batch and the decode's static step at its decode batch (the file's ``prefill_batch_size`` and
``decode_batch_size``: the batches AIConfigurator's own InferenceX adapter derives, one prompt and the clients per
decode rank), with the correction and queueing factors its command line applies (``PREFILL_CORRECTION``,
``DECODE_CORRECTION``, ``TTFT_QUEUEING``), read in the aiconfigurator 0.12.0 package.

Stated choices:

* checkpoints AIConfigurator ships no configuration for are estimated with the shipped one of the same
  architecture (``SHIPPED``), with the KV cache their ModelOpt configuration declares;
* gpt-oss is estimated at the precisions AIConfigurator reads from its checkpoint (bf16 attention,
  MXFP4 experts): the file's labels for it name no other deployment;
* where AIConfigurator has no perf data for a row's precisions it is asked again with the
  checkpoint's (DeepSeek's fp8 rows: block-scaled FP8); a row it still cannot estimate is counted with
  its reason.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import multiprocessing
import sys
import warnings

import numpy as np
import pandas as pd
from silicon_rows import supported_rows
from silicon_validation import family

from pdplan.latency.compose import tables

#: Checkpoints without a configuration in aiconfigurator-core 0.12: the shipped one of the same
#: architecture, and the KV-cache precision the checkpoint's hf_quant_config declares (None: inferred).
SHIPPED = {"meta-llama/Llama-3.1-70B": ("meta-llama/Meta-Llama-3.1-70B", None),
           "meta-llama/Llama-3.1-8B-Instruct": ("meta-llama/Meta-Llama-3.1-8B", None),
           "nvidia/Llama-3.1-8B-Instruct-FP8": ("meta-llama/Meta-Llama-3.1-8B", "fp8"),
           "nvidia/Qwen3-32B-NVFP4": ("Qwen/Qwen3-32B", "fp8"),
           "nvidia/DeepSeek-R1-NVFP4": ("deepseek-ai/DeepSeek-R1", "fp8")}
CHECKPOINT_PRECISION = {"openai/gpt-oss-120b"}
PHASE_COLUMNS = ("tp_size", "pp_size", "attention_dp_size", "moe_tp_size", "moe_ep_size")
COLUMNS = ("id", "mode", "backend", "system", "model_path", "isl", "osl", "concurrency", "gemm_quant_mode",
           "moe_quant_mode", "prefill_batch_size", "decode_batch_size",
           *(f"{role}{column}" for role in ("", "prefill_", "decode_") for column in PHASE_COLUMNS))
#: What AIConfigurator's disaggregated estimate multiplies its static prefill and decode times by "for better
#: alignment with real system" (``DEFAULT_PREFILL_LATENCY_CORRECTION_SCALE`` and
#: ``DEFAULT_DECODE_LATENCY_CORRECTION_SCALE``, ``aiconfigurator/cli/api.py`` 0.12.0), and its TTFT then by for
#: "concurrent prefill queueing" (``_AUTOSCALE_TTFT_CORRECTION_FACTOR``, ``aiconfigurator/sdk/picking.py``): factors
#: it fitted to measurements, which the aiconfigurator package (not its core, which pdplan installs) carries.
PREFILL_CORRECTION, DECODE_CORRECTION, TTFT_QUEUEING = 1.1, 1.08, 1.8
WORDS = {"agg": "aggregated", "disagg": "disaggregated"}


def _quiet() -> None:
    logging.disable(logging.CRITICAL)
    warnings.filterwarnings("ignore")


def _size(value) -> int | None:
    return int(value) if pd.notna(value) and int(value) > 0 else None


def _precision(value) -> str | None:
    return str(value).strip() or None if pd.notna(value) else None


def _database(system: str, backend: str):
    from aiconfigurator_core.sdk import perf_database

    version = perf_database.get_latest_database_version(system, backend)
    return perf_database.get_database_view(system, backend, version, database_mode="SILICON")


def _model(row: dict, role: str, row_precision: bool, database):
    """AIConfigurator's model of the row's deployment (``role``: "" for an aggregated row, "prefill_" or "decode_"
    for one phase of a disaggregated one), built as its ``cli_estimate`` builds it."""
    from aiconfigurator_core.sdk.config_builders import build_model_config
    from aiconfigurator_core.sdk.models import check_is_moe, get_model
    from aiconfigurator_core.sdk.models.helpers import (
        resolve_context_fmha_by_data,
        resolve_dsv4_moe_arch,
        resolve_nvfp4_for_system,
    )

    path, kv = SHIPPED.get(row["model_path"], (row["model_path"], None))
    system, backend = row["system"], row["backend"]
    tp, dp = _size(row[f"{role}tp_size"]) or 1, _size(row[f"{role}attention_dp_size"]) or 1
    moe_tp, moe_ep = _size(row[f"{role}moe_tp_size"]), _size(row[f"{role}moe_ep_size"])
    if not check_is_moe(path):
        moe_tp, moe_ep = moe_tp or tp * dp, moe_ep or 1
    elif moe_tp is None and moe_ep is None:
        moe_ep = 1
    gemm, moe = ((_precision(row["gemm_quant_mode"]), _precision(row["moe_quant_mode"])) if row_precision
                 else (None, None))
    config = build_model_config(tp, _size(row[f"{role}pp_size"]) or 1, dp, moe_tp, moe_ep, gemm, kv, None, moe, None)
    resolve_context_fmha_by_data(config, path, database, backend, is_context_role=role != "decode_")
    resolve_dsv4_moe_arch(config, path, system_name=system, backend_name=backend)
    resolve_nvfp4_for_system(config, system, path)
    return get_model(path, config, backend)


def _checked(summary):
    if summary.check_oom():
        raise RuntimeError("does not fit in GPU memory by AIConfigurator's memory model")
    return summary


def estimate(row: dict, row_precision: bool = True) -> tuple[float, float]:
    """AIConfigurator's mean TTFT and TPOT (ms) of the row's deployment, as ``cli_estimate`` gives them."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import RuntimeConfig

    database = _database(row["system"], row["backend"])
    runtime = RuntimeConfig(isl=int(row["isl"]), osl=int(row["osl"]), batch_size=int(row["concurrency"]))
    # a backend per row: its result cache is keyed by the load alone, not by the model
    summary = get_backend(row["backend"]).run_agg(_model(row, "", row_precision, database), database, runtime,
                                                  ctx_tokens=int(row["isl"]), max_seq_len=None,
                                                  free_gpu_memory_fraction=None)
    result = _checked(summary).get_result_dict()
    return float(result["ttft"]), float(result["tpot"])


def estimate_disaggregated(row: dict, row_precision: bool = True) -> tuple[float, float]:
    """AIConfigurator's mean TTFT and TPOT (ms) of the row's disaggregated deployment, as ``cli_estimate`` with
    ``mode='disagg'`` gives them (``DisaggInferenceSession.run_disagg`` in aiconfigurator 0.12.0): the prefill's
    static time at the row's prefill batch times :data:`PREFILL_CORRECTION` and the queueing factor
    :data:`TTFT_QUEUEING`, the decode's static step at the row's decode batch times :data:`DECODE_CORRECTION`."""
    from aiconfigurator_core.sdk.backends.factory import get_backend
    from aiconfigurator_core.sdk.config import RuntimeConfig

    database = _database(row["system"], row["backend"])
    phases = {}
    for role, mode, correction in (("prefill_", "static_ctx", PREFILL_CORRECTION),
                                   ("decode_", "static_gen", DECODE_CORRECTION)):
        runtime = RuntimeConfig(isl=int(row["isl"]), osl=int(row["osl"]),
                                batch_size=_size(row[f"{role}batch_size"]) or 1)
        summary = get_backend(row["backend"]).run_static(_model(row, role, row_precision, database), database,
                                                         runtime, mode, 32, correction)
        phases[role] = _checked(summary).get_summary_df().iloc[0]
    return float(phases["prefill_"]["ttft"]) * TTFT_QUEUEING, float(phases["decode_"]["tpot"])


def _estimated(row: dict) -> dict:
    from aiconfigurator_core.sdk.errors import PerfDataNotAvailableError

    estimator = estimate if row["mode"] == "agg" else estimate_disaggregated
    try:
        try:
            ttft, tpot = estimator(row, row_precision=row["model_path"] not in CHECKPOINT_PRECISION)
        except PerfDataNotAvailableError:
            ttft, tpot = estimator(row, row_precision=False)
        return {"id": row["id"], "aic_ttft_ms": ttft, "aic_tpot_ms": tpot, "reason": ""}
    except Exception as err:  # noqa: BLE001 - a row AIConfigurator refuses is counted, not fatal
        reason = " ".join(f"{type(err).__name__}: {err}".split())
        return {"id": row["id"], "aic_ttft_ms": np.nan, "aic_tpot_ms": np.nan, "reason": reason[:160]}


def errors(part: pd.DataFrame, prefix: str) -> str:
    """Median and p90 absolute error and median signed error of a part's TTFT and TPOT."""
    text = []
    for clock in ("ttft", "tpot"):
        signed = part[f"{prefix}{clock}_ms"] / part[f"silicon_{clock}_ms"] - 1
        text.append(f"{clock.upper()} {signed.abs().median():6.1%} / {signed.abs().quantile(0.9):6.1%} "
                    f"({signed.median():+.1%})")
    return "   ".join(text)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdplan", default=None, help="pdplan's replay (silicon_validation.py --csv) to compare")
    parser.add_argument("--csv", default=None, help="write each row's estimate here")
    parser.add_argument("--mode", choices=("agg", "disagg"), default="agg",
                        help="the aggregated rows (default) or the disaggregated ones")
    parser.add_argument("--every", type=int, default=1, help="estimate every K-th row only")
    parser.add_argument("--jobs", type=int, default=2, help="processes")
    args = parser.parse_args(argv)
    with contextlib.redirect_stdout(io.StringIO()):
        rows = supported_rows(tables.package_root() / "systems" / "silicon_sample.csv")
    rows = rows[rows["mode"] == args.mode].iloc[::args.every]
    work = [{k: row[k] for k in COLUMNS} for _, row in rows.iterrows()]
    with multiprocessing.get_context("fork").Pool(args.jobs, initializer=_quiet) as pool:
        found = pd.DataFrame(pool.map(_estimated, work, chunksize=25))
    rows = rows.merge(found, on="id")
    if args.csv:
        rows[["id", "model", "gpu", "backend", "isl", "osl", "concurrency", "silicon_ttft_ms", "silicon_tpot_ms",
              "aic_ttft_ms", "aic_tpot_ms", "reason"]].to_csv(args.csv, index=False, float_format="%.6g")
    failed = rows[rows["reason"] != ""]
    print(f"{len(rows)} {WORDS[args.mode]} rows; AIConfigurator {tables.package_version()} estimated "
          f"{len(rows) - len(failed)}")
    for reason, count in failed["reason"].str.replace(r"\d+", "#", regex=True).str[:100].value_counts().items():
        print(f"  {count:4d} not estimated: {reason}")
    rows = rows[rows["reason"] == ""].assign(family=lambda r: family(r["model"]))
    if args.pdplan:
        ours = pd.read_csv(args.pdplan)
        ours = ours[ours["kind"] == "composed"][["id", "ttft_ms", "tpot_ms"]]
        rows = rows.merge(ours.rename(columns={"ttft_ms": "pdplan_ttft_ms", "tpot_ms": "pdplan_tpot_ms"}), on="id")
    print("\nmedian / p90 absolute error (median signed error) of the mean TTFT and TPOT:")
    for (engine, kind), part in [*rows.groupby(["backend", "family"]), *(
            (("all", kind), part) for kind, part in rows.groupby("family"))]:
        print(f"  {engine:7s} {kind:5s} rows {len(part):4d}  AIConfigurator  {errors(part, 'aic_')}")
        if args.pdplan:
            print(f"  {'':7s} {'':5s} {'':9s}  pdplan          {errors(part, 'pdplan_')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
