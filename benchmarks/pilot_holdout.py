"""What a pilot run buys: calibrate on two measured points of a deployment, predict the rest of it.

    python benchmarks/pilot_holdout.py [--mode agg|disagg] [--pilot two-lengths|one-length] [--csv OUT] [--jobs N]

The accuracy line of ``optimize`` advises a pilot run whenever the measured deployments like a plan's
were simulated a quarter or more off (``profile calibrate``). This checks that advice on the
measurements ``benchmarks/silicon_validation.py`` replays. For each InferenceMAX deployment (model,
GPU, precision, engine, sweep date, TP and EP) replayed as a plain aggregated instance, its composed
profile is calibrated (:func:`pdplan.latency.calibration.fit.calibrate`) on two of its rows, means
only, as the collection's client sent them:

* ``two-lengths`` (default): its lowest-concurrency row at 1k/1k and at 8k/1k, a pilot of the two
  prompt lengths the deployment serves;
* ``one-length``: its two lowest-concurrency rows at 1k/1k, which leave the prefill scale and the cost
  of an iteration with prompt work to trade off.

Every other row of the deployment is then replayed with the calibrated profile, and the script prints
the median and p90 absolute error of mean TTFT and TPOT on those held-out rows, per model family, ISL/OSL
and engine, beside the uncorrected profile's on the same rows, and the fitted factors. Nothing is fitted
to a row it scores. The pilot is replayed as its rows ran (``profile calibrate``'s receive interval,
batch waiting, iteration budget and MTP, from the row's recipe as the validation reads it; each pilot
row with its own, as the sweep restarted its server per configuration), and so is each held-out row.

``--mode disagg`` asks the same of the disaggregated deployments the validation replays (one configuration of the
collection's, ``config_id``, at one prompt and output length, measured at two or more concurrencies): the
deployment is calibrated end to end on its lowest-concurrency row alone (``profile calibrate --plan``: the four
factors correct its prefill and decode profiles together, :class:`pdplan.latency.calibration.fit.Deployment`), the
one benchmark a pilot of it would run, and its rows at higher concurrencies are held out. One run's two means
leave the four factors to trade off; what the held-out rows show is whether the correction a pilot finds carries
to the loads it did not see.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections import Counter

import pandas as pd
from inferencemax_recipes import INFERENCEMAX, client_rate, moe_activations, speculative
from silicon_rows import plan_for, requests, row_model, supported_rows
from silicon_validation import _profile, family, replay_on, row_profiles, within_profiles

from pdplan.errors import PdplanError
from pdplan.latency.calibration.bench import BenchRun
from pdplan.latency.calibration.fit import Deployment, EngineBatching, calibrate, corrected
from pdplan.latency.compose import tables

DEPLOYMENT = ["model", "gpu", "dtype", "backend", "measured", "tp_size", "ep"]


def pilot_rows(rows: pd.DataFrame, pilot: str) -> pd.DataFrame:
    """The deployment's rows a pilot measures (module docstring); empty when it has none such."""
    lowest = rows.sort_values("concurrency")
    chat = lowest[(lowest.isl == 1024) & (lowest.osl == 1024)]
    long_prompts = lowest[(lowest.isl == 8192) & (lowest.osl == 1024)]
    chosen = pd.concat([chat.head(1), long_prompts.head(1)]) if pilot == "two-lengths" else chat.head(2)
    return chosen if len(chosen) == 2 else chosen.iloc[0:0]


def schedule(row) -> EngineBatching:
    """How the row's engine batched (:func:`silicon_rows.plan_for`), as calibration replays it."""
    pool = plan_for(row).pools[0]
    return EngineBatching(policy=pool.policy, tokens=pool.chunk_tokens or pool.max_prefill_batch_tokens,
                          speculative=speculative(row),
                          recv_interval=pool.recv_interval, batch_wait_timeout_iters=pool.batch_wait_timeout_iters,
                          batch_wait_max_tokens_ratio=pool.batch_wait_max_tokens_ratio)


def bench_run(row) -> BenchRun:
    prompts, outputs = requests(row)
    return BenchRun(file=str(row["id"]), format="silicon_sample", concurrency=int(row["concurrency"]),
                    rate_rps=client_rate(row),
                    prompt_tokens=prompts, output_tokens=outputs,
                    reported={"ttft": {"mean": row["silicon_ttft_ms"] / 1e3},
                              "tpot": {"mean": row["silicon_tpot_ms"] / 1e3}})


def holdout(rows: pd.DataFrame, pilot: str) -> tuple[pd.DataFrame, Counter]:
    records, left_out = [], Counter()
    for key, deployment in rows.groupby(DEPLOYMENT, sort=True):
        chosen = pilot_rows(deployment, pilot)
        if chosen.empty or len(deployment) <= 2:
            left_out["without the pilot's rows or rows to predict"] += 1
            continue
        ran = [schedule(row) for _, row in chosen.iterrows()]   # each run's server as its recipe started it
        first = chosen.iloc[0]
        base = _profile("composed", first["backend"], row_model(first), first["gpu"], int(first["tp_size"]),
                        int(first["ep"]), activations=moe_activations(first))
        fit = calibrate(base, [bench_run(row) for _, row in chosen.iterrows()], ran)
        fixed = corrected(base, fit.prefill_scale, fit.decode_scale, fit.iteration_s, fit.prompt_iteration_s)
        for _, row in deployment.drop(chosen.index).iterrows():
            shape = plan_for(row).pools[0].shape
            ttft, tpot = replay_on(row, {shape: fixed})
            raw_ttft, raw_tpot = replay_on(row, {shape: base})
            records.append({**dict(zip(DEPLOYMENT, key)), "isl": row["isl"], "osl": row["osl"],
                            "concurrency": row["concurrency"], "prefill_scale": fit.prefill_scale,
                            "decode_scale": fit.decode_scale, "iteration_ms": fit.iteration_s * 1e3,
                            "prompt_iteration_ms": fit.prompt_iteration_s * 1e3,
                            "ttft_signed": ttft / row["silicon_ttft_ms"] - 1,
                            "tpot_signed": tpot / row["silicon_tpot_ms"] - 1,
                            "raw_ttft_signed": raw_ttft / row["silicon_ttft_ms"] - 1,
                            "raw_tpot_signed": raw_tpot / row["silicon_tpot_ms"] - 1})
        print(f"  {' '.join(map(str, key))}: prefill x{fit.prefill_scale:.3g}, decode x{fit.decode_scale:.3g}, "
              f"+{fit.iteration_s * 1e3:.3g} ms per iteration, +{fit.prompt_iteration_s * 1e3:.3g} ms per prompt "
              f"iteration; {len(deployment) - 2} rows held out", flush=True)
    return pd.DataFrame(records), left_out


def disaggregated_deployment(rows: pd.DataFrame) -> list[dict]:
    """One disaggregated deployment's held-out rows, its profiles calibrated on its lowest-concurrency row
    (module docstring); empty when its composed profiles cannot be had."""
    ordered = rows.sort_values("concurrency")
    pilot = ordered.iloc[0]
    try:
        profiles = row_profiles(pilot, "composed")
    except PdplanError:
        return []
    plan = within_profiles(plan_for(pilot), profiles)
    prefill, decode = (profiles[pool.shape] for pool in plan.pools)
    fit = calibrate(prefill, [bench_run(pilot)], deployment=Deployment.of(plan, row_model(pilot), prefill, decode))
    factors = (fit.prefill_scale, fit.decode_scale, fit.iteration_s, fit.prompt_iteration_s)
    fixed = {shape: corrected(profile, *factors) for shape, profile in profiles.items()}
    records = []
    for _, row in ordered.iloc[1:].iterrows():
        ttft, tpot = replay_on(row, fixed)
        raw_ttft, raw_tpot = replay_on(row, profiles)
        records.append({"config": row["config"], "model": row["model"], "gpu": row["gpu"], "dtype": row["dtype"],
                        "backend": row["backend"], "isl": row["isl"], "osl": row["osl"],
                        "pilot_concurrency": pilot["concurrency"], "concurrency": row["concurrency"],
                        "prefill_scale": fit.prefill_scale, "decode_scale": fit.decode_scale,
                        "iteration_ms": fit.iteration_s * 1e3, "prompt_iteration_ms": fit.prompt_iteration_s * 1e3,
                        "ttft_signed": ttft / row["silicon_ttft_ms"] - 1,
                        "tpot_signed": tpot / row["silicon_tpot_ms"] - 1,
                        "raw_ttft_signed": raw_ttft / row["silicon_ttft_ms"] - 1,
                        "raw_tpot_signed": raw_tpot / row["silicon_tpot_ms"] - 1})
    return records


def disaggregated_holdout(rows: pd.DataFrame, jobs: int) -> tuple[pd.DataFrame, Counter]:
    """Every disaggregated deployment measured at two or more concurrencies, calibrated and held out."""
    rows = rows.assign(config=rows["silicon_data_source"].str.extract(r"config_id=(\d+)")[0])
    left_out = Counter()
    left_out["without a configuration id"] = rows["config"].isna().sum()
    groups = [group for _, group in rows.dropna(subset=["config"]).groupby(["config", "isl", "osl"], sort=True)]
    left_out["measured at one concurrency only"] = sum(len(group) < 2 for group in groups)
    groups = [group for group in groups if len(group) >= 2]
    with multiprocessing.get_context("fork").Pool(jobs) as pool:
        found = pool.map(disaggregated_deployment, groups, chunksize=1)
    left_out["whose composed profiles cannot be had"] = sum(not records for records in found)
    return pd.DataFrame([record for records in found for record in records]), left_out


def summary(results: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    grouped = results.groupby(keys, sort=True)
    absolute = lambda column, q: grouped[column].apply(lambda x: x.abs().quantile(q))  # noqa: E731
    return pd.DataFrame({
        "rows": grouped.size(), "ttft_median": absolute("ttft_signed", 0.5), "ttft_p90": absolute("ttft_signed", 0.9),
        "tpot_median": absolute("tpot_signed", 0.5), "uncorrected_ttft": absolute("raw_ttft_signed", 0.5),
        "uncorrected_tpot": absolute("raw_tpot_signed", 0.5),
        "prompt_iteration_ms": grouped["prompt_iteration_ms"].median()}).reset_index()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=("agg", "disagg"), default="agg",
                        help="the aggregated deployments (default) or the disaggregated ones")
    parser.add_argument("--pilot", choices=("two-lengths", "one-length"), default="two-lengths",
                        help="the aggregated deployments' pilot rows")
    parser.add_argument("--csv", default=None, help="write every held-out row here")
    parser.add_argument("--jobs", type=int, default=2, help="processes (disaggregated deployments)")
    args = parser.parse_args(argv)
    rows = supported_rows(tables.package_root() / "systems" / "silicon_sample.csv")
    if args.mode == "disagg":
        rows = rows[rows["mode"] == "disagg"].copy()
        results, left_out = disaggregated_holdout(rows, args.jobs)
        print(f"pilot: each disaggregated deployment's lowest-concurrency row; {results['config'].nunique()} "
              f"deployments, {len(results)} rows held out")
        keys = (["family"], ["family", "backend"], ["family", "backend", "gpu"])
    else:
        rows = rows[(rows["mode"] == "agg") & rows["harness"].isin(INFERENCEMAX)].copy()
        # the exports repeat some runs: one row per measured point
        rows = rows.drop_duplicates([*DEPLOYMENT, "isl", "osl", "concurrency"])
        print(f"pilot {args.pilot}: {rows.groupby(DEPLOYMENT).ngroups} deployments, {len(rows)} rows")
        results, left_out = holdout(rows, args.pilot)
        keys = (["family"], ["family", "isl", "osl"], ["family", "backend"])
    results["family"] = family(results["model"])
    if args.csv:
        results.to_csv(args.csv, index=False, float_format="%.6g")
    pd.set_option("display.width", 200)
    percent = lambda x: f"{x:.1%}"  # noqa: E731
    for by in keys:
        table = summary(results, by)
        print(table.to_string(index=False, formatters={c: percent for c in table.columns if "ttft" in c or "tpot" in c},
                              float_format=lambda x: f"{x:.3g}"))
        print()
    for reason, count in sorted(left_out.items()):
        print(f"  {count} deployments left out: {reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
