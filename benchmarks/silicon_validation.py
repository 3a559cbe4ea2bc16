"""Validate pdplan's latency model against real deployments: AIConfigurator's silicon_sample.csv.

    python benchmarks/silicon_validation.py [--profiles composed,roofline-engine,roofline] [--rows N] [--csv OUT]
                                            [--mode agg|agg-dp|disagg] [--inferencex JSON ...]
                                            [--prompt-cost ENGINE=MS,...] [--prefill-scale ENGINE=FACTOR,...]
                                            [--decode-as-measured]

Every row of ``aiconfigurator_core/systems/silicon_sample.csv`` (TTFT and TPOT of a model served by
TensorRT-LLM, SGLang or vLLM at a fixed concurrency, measured by NVIDIA) whose model, GPU and precision
pdplan supports is replayed as its collection ran it (``silicon_rows.py`` says which rows, why the rest
are left out, and each row's deployment with its stated assumptions): the row's concurrency C as a closed
loop of C clients (``simulate --concurrency``) sending the requests its benchmark client sent, on one
instance of the row's shape for aggregated rows and on the row's prefill and decode pools for
disaggregated ones (a DP instance simulated as its ranks, each step the slowest rank's). Each profile
kind is run in turn — composed from the engine's measured operators; the roofline with the engine's
fitted efficiencies (``roofline_engine_fit.py``); the roofline with the Splitwise 2023 calibration, what
pdplan had before — and the script prints, per model, GPU, engine, mode and kind, the number of rows and
the median and p90 absolute percentage error of the mean TTFT and the mean TPOT. Nothing is fitted to
this file: it is how we know the model is right.

The InferenceMAX rows' TTFT and TPOT are the run's means over every request, the first wave's too:
64 DeepSeek-R1 rows (37 runs) equal, to 0.01 ms in both clocks, the ``mean_ttft`` and ``mean_tpot`` of a
run InferenceX published with the same GPU, lengths and concurrency (its app's API fixtures
``packages/app/cypress/fixtures/api/benchmarks*.json`` of SemiAnalysisAI/InferenceX-app, which hold each
run's median and p99 beside its mean). Their mean TTFT is 1.0 to 13.9 times their median (1.7 at the
median; DeepSeek-R1 FP4 on B200 under SGLang, 1k/8k, 32 clients: 7.9 s mean, 0.72 s median, 75 s p99),
so the table compares the simulated mean with the measured mean; ``--inferencex FILE ...`` also compares
the simulated median with the median of the rows that are such runs, per GPU, engine and precision, which
tells a miss in the body of a run's TTFTs from a miss in its tail. Every disaggregated InferenceMAX row is
such a run of the fixture's version at InferenceX-app ``3a600f1d9ce155536d52e2f58f744f27a301aac9`` (its
``"disagg": true`` runs; the file at that commit is the one to pass). A published disaggregated run also
states how many workers each phase ran, which most of the export's disaggregated rows do not: with
``--inferencex`` those rows are replayed with the workers their run states, each run once
(``inferencex.py``).

Three what-ifs answer questions about the misses, and are never accuracy (``--accuracy-out`` refuses them):
``--prompt-cost`` replaces, per engine, the cost of an iteration with prompt work every replayed profile states
(e.g. by the aggregated pilots' median, ``pilot_holdout.py``); ``--prefill-scale`` makes an engine's prefill steps
a factor as long (how much slower its prefill would have to run for the TTFT to match); ``--decode-as-measured``
scales each disaggregated row's decode steps to its measured TPOT, which tells what of a TTFT miss the closed loop
carries from the decode.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from functools import cache

import inferencex
import numpy as np
import pandas as pd
from inferencemax_recipes import TRT_MOE_KERNELS, disagg_recipe, moe_activations, moe_backend, speculative
from silicon_rows import MOE, arrivals, plan_for, recipe_coverage, requests, row_model, supported_rows

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency import accuracy
from pdplan.latency.calibration.fit import corrected
from pdplan.latency.compose import tables
from pdplan.latency.compose.profile import composed_profile
from pdplan.latency.compose.step import reads_moe_table
from pdplan.latency.profile import with_prompt_iteration
from pdplan.latency.roofline import DEFAULT_MAX_PREFILL_BATCH_TOKENS
from pdplan.latency.source import ProfileSource
from pdplan.modelspec import ModelSpec
from pdplan.sim import simulate
from pdplan.sim.plan import Plan, Pool
from pdplan.vocabulary import AllToAll, MoeActivations


@cache
def _profile(kind: str, engine: str, model: ModelSpec, gpu: str, tp: int, ep: int = 1, dp: int = 1,
             activations: MoeActivations | None = None, batch_tokens: int = DEFAULT_MAX_PREFILL_BATCH_TOKENS,
             moe_kernel: str | None = None, exchange: AllToAll = AllToAll.DISPATCH):
    """The profile of one shape timed by ``kind``; a composed one covers prompt batches of ``batch_tokens``
    (a recipe's budget above pdplan's default), times routed experts by ``moe_kernel`` (the recipe's backend;
    None: the fastest measured at each point) and reaches whole experts under DP by ``exchange``."""
    # whole experts, DP ranks (composed per rank), a larger prompt budget or one MoE kernel: composed directly
    if kind == "composed" and (ep > 1 or dp > 1 or batch_tokens > DEFAULT_MAX_PREFILL_BATCH_TOKENS or moe_kernel):
        physical = get_gpu(gpu)  # GPUs of one NVLink domain share a node (a GB200 NVL72 rack is one)
        return composed_profile(model, physical, tp, 1, dp=dp, ep=ep, engine=engine,
                                gpus_per_node=physical.nvlink_domain, moe_activations=activations,
                                max_prefill_batch_tokens=batch_tokens, moe_kernel=moe_kernel, all_to_all=exchange)
    if exchange == AllToAll.GATHER:
        raise PdplanError(f"{kind} profiles time DP ranks with whole experts by their dispatch only")
    source = ProfileSource({}, engine=None if kind == "roofline" else engine, compose=kind == "composed",
                           moe_activations=activations)
    # a roofline of DP ranks or EP beyond TP is the wide-EP roofline's, one rank's; a dense row's EP means nothing
    physical = get_gpu(gpu)
    profile = source.profile(model, physical, tp, 1, dp=dp, ep=ep if model.is_moe else 1,
                             gpus_per_node=physical.nvlink_domain)
    if kind == "composed" and profile.provenance.source != "composed":
        raise PdplanError(source.fallback_reason(model.name, gpu, tp, 1) or "not composed")
    return profile


def replay(row, kind: str) -> tuple[float, float]:
    """Simulated mean TTFT and mean TPOT (ms) of the row's run, its pools timed by ``kind``."""
    return replay_on(row, row_profiles(row, kind))


def row_profiles(row, kind: str) -> dict:
    """The profiles (by shape) of the row's pools, timed by ``kind``."""
    plan, model, activations = plan_for(row), row_model(row), moe_activations(row)
    if row["mode"] == "agg":
        kernel = TRT_MOE_KERNELS.get(moe_backend(row))
        return {pool.shape: _profile(kind, row["backend"], model, pool.gpu, pool.tp, int(row["ep"]),
                                     activations=activations, moe_kernel=kernel)
                for pool in plan.pools}
    budgets = {}  # a shape's prompt budget: the largest of its pools' (a prefill pool's recipe may pass more)
    for pool in plan.pools:
        budgets[pool.shape] = max(budgets.get(pool.shape, DEFAULT_MAX_PREFILL_BATCH_TOKENS),
                                  pool.max_prefill_batch_tokens or DEFAULT_MAX_PREFILL_BATCH_TOKENS)
    return {pool.shape: _profile(kind, row["backend"], model, pool.gpu, pool.tp, pool.ep, pool.dp, activations,
                                 budgets[pool.shape], pool_kernel(row, pool), pool.all_to_all)
            for pool in plan.pools}


def pool_kernel(row, pool: Pool) -> str | None:
    """The one MoE kernel a disaggregated row's pool times its routed experts by: its phase's recipe backend's, where
    the pool reads the MoE table; None (the fastest measured) elsewhere."""
    if not reads_moe_table(pool.tp, pool.dp, pool.ep, all_to_all=pool.all_to_all):
        return None
    return TRT_MOE_KERNELS.get(moe_backend(row, pool.phase))


def replay_on(row, profiles: dict) -> tuple[float, float]:
    """Simulated mean TTFT and mean TPOT (ms) of the row's run on these profiles (by shape)."""
    ttft, tpot = replayed(row, profiles)
    return float(np.nanmean(ttft) * 1e3), float(np.nanmean(tpot) * 1e3)


def replayed(row, profiles: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each served request's TTFT and TPOT (s) in the row's run on these profiles (by shape), with the
    multi-token prediction it ran, its clients paced by the rate its recipe's benchmark ran at, if finite."""
    drafting = speculative(row)
    if drafting is not None:
        profiles = {shape: drafting.apply(profile) for shape, profile in profiles.items()}
    prompts, outputs = requests(row)
    scheduled, rate = arrivals(row, len(prompts))
    workload = {"arrival_s": scheduled, "prompt_tokens": prompts, "output_tokens": outputs}
    plan = within_profiles(plan_for(row), profiles)
    result = simulate(workload, plan, profiles, model=row_model(row), concurrency=int(row["concurrency"]),
                      rate_rps=rate)
    served = ~np.asarray(result["rejected"])
    return np.asarray(result["ttft_s"])[served], np.asarray(result["tpot_s"])[served]


def within_profiles(plan: Plan, profiles: dict) -> Plan:
    """The plan with each pool's prompt budget at most its profile's largest prompt batch (a composed profile
    covers the recipe's budget up to its KV capacity; a roofline one 16,384 tokens), which the simulator holds
    a plan to."""
    def within(pool: Pool) -> Pool:
        cap = pool.max_prefill_batch_tokens
        return pool if cap is None else replace(
            pool, max_prefill_batch_tokens=min(cap, profiles[pool.shape].max_prefill_batch_tokens))
    return replace(plan, pools=tuple(within(pool) for pool in plan.pools))


def per_engine(text: str, flag: str, unit: str, low: float, high: float) -> dict[str, float]:
    """A what-if flag's ENGINE=VALUE pairs, comma-separated, each VALUE (in ``unit``) from ``low`` to below ``high``;
    ValueError names the flag and what is wrong."""
    values = {}
    for pair in text.split(","):
        engine, _, number = pair.partition("=")
        if engine.strip() not in tables.ENGINES:
            raise ValueError(f"{flag}: {engine.strip()!r} is not an engine ({', '.join(tables.ENGINES)})")
        try:
            value = float(number)
        except ValueError:
            raise ValueError(f"{flag}: {pair!r} is not ENGINE={unit.upper()}") from None
        if not low <= value < high:
            raise ValueError(f"{flag}: {pair!r}: {unit} from {low:g} to {high:,g}")
        values[engine.strip()] = value
    return values


def prompt_costs(text: str) -> dict[str, float]:
    """``--prompt-cost``'s ENGINE=MS pairs as seconds per engine."""
    return {engine: ms / 1e3 for engine, ms in per_engine(text, "--prompt-cost", "ms", 0, 60_000).items()}


def prefill_scales(text: str) -> dict[str, float]:
    """``--prefill-scale``'s ENGINE=FACTOR pairs: how many times as long each engine's prefill steps take."""
    return per_engine(text, "--prefill-scale", "factor", 0.1, 10)


def with_prompt_cost(profiles: dict, seconds: float) -> dict:
    """What-if: every profile's cost of an iteration with prompt work is ``seconds``, in place of what its source
    states (a composed profile's eager prefill host time, :mod:`pdplan.latency.eager`)."""
    return {shape: with_prompt_iteration(profile, seconds - profile.prompt_iteration_s)
            for shape, profile in profiles.items()}


def with_prefill_scale(profiles: dict, factor: float) -> dict:
    """What-if: every profile's prefill steps, the cost of an iteration with prompt work included, ``factor`` times
    as long; its decode steps as they were."""
    return {shape: corrected(profile, factor, 1.0, 0.0, profile.prompt_iteration_s * factor)
            for shape, profile in profiles.items()}


def decode_as_measured(row, profiles: dict) -> dict:
    """What-if: the disaggregated row's decode-only profiles with their steps scaled by the measured TPOT over the
    one these profiles replay (the row replayed once more), so the decode is as fast as it ran and what the TTFT
    still misses is not carried from the decode through the closed loop."""
    _, tpot = replayed(row, profiles)
    scale = row["silicon_tpot_ms"] / (np.nanmean(tpot) * 1e3)
    pools = plan_for(row).pools
    prefill = {pool.shape for pool in pools if pool.phase != "decode"}
    decode = {pool.shape for pool in pools if pool.phase == "decode"} - prefill
    return {shape: corrected(profile, 1.0, scale, 0.0, profile.prompt_iteration_s) if shape in decode else profile
            for shape, profile in profiles.items()}


def published_medians(results: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """The replayed rows that are runs InferenceX published (:func:`inferencex.same_runs`), each with the run's
    median and p99 TTFT."""
    return inferencex.same_runs(results, runs).drop_duplicates(subset=["id", "kind"])


def print_medians(matched: pd.DataFrame) -> None:
    """The simulated median TTFT against the published run's median, beside mean against mean: overall, then
    per GPU, engine and precision."""
    spread = matched["mean_ttft_ms"] / matched["median_ttft_ms"]
    print(f"\nruns InferenceX published (--inferencex): {matched['id'].nunique()} rows are runs it published with "
          f"their median TTFT; their mean TTFT is {spread.min():.1f}-{spread.max():.1f}x their median:")
    for (mode, kind), part in matched.groupby(["mode", "kind"], sort=True):
        signed = median_signed(part)
        print(f"  {mode:7s} {kind:15s} rows {len(part):4d}  median TTFT against the run's median "
              f"{signed.abs().median():6.1%} ({signed.median():+.1%});  mean against mean "
              f"{part['ttft_ape'].median():6.1%}")
    print("\nper GPU, engine and precision (a miss against the median is the body of the run's TTFTs; a miss of the "
          "mean alone is its tail):")
    print(median_table(matched).to_string(index=False, float_format=lambda x: f"{x:.2f}"))


def median_signed(matched: pd.DataFrame) -> pd.Series:
    """Each published run's simulated median TTFT against its measured median, signed."""
    return matched["ttft_median_ms"] / matched["median_ttft_ms"] - 1


def median_table(matched: pd.DataFrame) -> pd.DataFrame:
    """Per mode, profile kind, GPU, engine and precision of the published runs: rows, the median absolute and
    signed error of the simulated median TTFT against the run's median, how many rows are within 30%, the
    median absolute error of mean against mean, and the runs' median ratio of mean to median TTFT."""
    rows = matched.assign(median_signed=median_signed(matched),
                          spread=matched["mean_ttft_ms"] / matched["median_ttft_ms"])
    grouped = rows.groupby(["mode", "kind", "gpu", "backend", "dtype"], sort=True)
    return pd.DataFrame({
        "rows": grouped.size(),
        "median_vs_median": grouped["median_signed"].apply(lambda s: s.abs().median()),
        "signed": grouped["median_signed"].median(),
        "within_30%": grouped["median_signed"].apply(lambda s: int((s.abs() <= 0.3).sum())),
        "mean_vs_mean": grouped["ttft_ape"].median(),
        "mean/median": grouped["spread"].median(),
    }).reset_index()


#: Clients up to which a closed loop's prefill seldom queues, so a TTFT miss there is a time per prompt
LOW_LOAD_CLIENTS = 16


def low_load_gaps(results: pd.DataFrame) -> pd.DataFrame:
    """Per profile kind, engine, GPU, precision and prompt length, over the disaggregated rows of at most
    :data:`LOW_LOAD_CLIENTS` clients: how many, and the median, least and most measured minus simulated mean TTFT
    (ms), the time each prompt takes that the replay does not."""
    rows = results[(results["mode"] == "disagg") & (results["concurrency"] <= LOW_LOAD_CLIENTS)]
    gap = (rows["silicon_ttft_ms"] - rows["ttft_ms"]).rename("gap")
    grouped = rows.assign(gap=gap).groupby(["kind", "backend", "gpu", "dtype", "isl"], sort=True)["gap"]
    return pd.DataFrame({"rows": grouped.size(), "gap_ms_median": grouped.median(), "gap_ms_min": grouped.min(),
                         "gap_ms_max": grouped.max()}).reset_index()


def summarise(results: pd.DataFrame) -> pd.DataFrame:
    keys = ["model", "gpu", "dtype", "backend", "mode", "kind"]
    grouped = results.groupby(keys, sort=True)
    return pd.DataFrame({
        "rows": grouped.size(),
        "ttft_median": grouped["ttft_ape"].median(), "ttft_p90": grouped["ttft_ape"].quantile(0.9),
        "tpot_median": grouped["tpot_ape"].median(), "tpot_p90": grouped["tpot_ape"].quantile(0.9),
        "tpot_bias": grouped["tpot_signed"].median(), "ttft_bias": grouped["ttft_signed"].median(),
    }).reset_index()


#: the profile kinds replayed: composed from operator tables, rooflines with the engine's efficiencies, and
#: with the Splitwise 2023 calibration
KINDS = ("composed", "roofline-engine", "roofline")
#: the order of a group's rows in the accuracy file, after its key
ROW_ORDER = ("model", "gpu", "dtype", "harness", "isl", "osl", "concurrency")


def family(models: pd.Series) -> np.ndarray:
    """Each catalog model's family as the accuracy groups name it: ``moe`` or ``dense``."""
    return np.where(models.isin(MOE), "moe", "dense")


def write_accuracy(results: pd.DataFrame, path: str) -> None:
    """Each replayed row's signed errors grouped as :mod:`pdplan.latency.accuracy` reads them (source,
    engine, model family, layout), one group per line, rows in a fixed order so that a rerun on the same
    tables writes the same file."""
    rows = results.assign(source=results["kind"], engine=results["backend"],
                          family=family(results["model"]), layout=results["mode"])
    rows = rows.sort_values([*accuracy.KEY, *ROW_ORDER], kind="stable")
    groups = [json.dumps({**dict(zip(accuracy.KEY, key)),
                          **{f"{clock}_error": [float(f"{x:.4g}") for x in part[f"{clock}_signed"]]
                             for clock in ("ttft", "tpot")}}, separators=(",", ":"))
              for key, part in rows.groupby(list(accuracy.KEY), sort=True)]
    header = json.dumps({"written_by": "benchmarks/silicon_validation.py --accuracy-out",
                         "measurements": f"aiconfigurator-core {tables.package_version()} systems/silicon_sample.csv"},
                        indent=1)[:-2]
    with open(path, "w") as out:
        out.write(f'{header},\n "groups": [\n' + ",\n".join(groups) + "\n ]\n}\n")


def print_skipped(skipped: dict) -> None:
    """How many rows of each profile kind could not be replayed, and why."""
    for (kind, reason), count in sorted(skipped.items()):
        print(f"  skipped {count} {kind} rows: {reason}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profiles", default=",".join(KINDS))
    parser.add_argument("--rows", type=int, default=None, help="validate only the first N supported rows")
    parser.add_argument("--csv", default=None,
                        help="write every replayed row here, with the srt-slurm recipe its prefill workers ran")
    parser.add_argument("--accuracy-out", default=None,
                        help="write each replayed row's signed errors here, the file pdplan ships as "
                             "pdplan/data/silicon_accuracy.json (pdplan.latency.accuracy)")
    parser.add_argument("--models", default=None, help="only these catalog models (comma-separated), e.g. the MoE ones")
    parser.add_argument("--inferencex", nargs="+", default=None, metavar="JSON",
                        help="InferenceX's published runs (its app's API fixtures, "
                             "packages/app/cypress/fixtures/api/benchmarks*.json of SemiAnalysisAI/InferenceX-app): "
                             "also replay the disaggregated rows that are those runs with the workers each run states, "
                             "once per run, and compare the simulated median TTFT with the median of the rows that are "
                             "those runs")
    parser.add_argument("--prompt-cost", default=None, metavar="ENGINE=MS,...",
                        help="what-if, not accuracy: every replayed profile of these engines costs MS milliseconds per "
                             "iteration with prompt work in place of what its source states (e.g. the aggregated "
                             "pilots' median fitted cost, pilot_holdout.py --csv)")
    parser.add_argument("--prefill-scale", default=None, metavar="ENGINE=FACTOR,...",
                        help="what-if, not accuracy: every replayed profile of these engines takes FACTOR times as "
                             "long for its prefill steps (e.g. sglang=1.3), its decode steps as they were")
    parser.add_argument("--decode-as-measured", action="store_true",
                        help="what-if, not accuracy: each disaggregated row's decode steps scaled so its TPOT is the "
                             "measured one (the row replayed twice), to see what of the TTFT miss the closed loop "
                             "carries from the decode")
    parser.add_argument("--mode", choices=("agg", "agg-dp", "disagg"), default=None,
                        help="only aggregated rows of one instance of TP x PP, aggregated rows with attention data "
                             "parallelism, or disaggregated rows")
    args = parser.parse_args(argv)
    if args.accuracy_out and (args.rows or args.models or args.mode or args.inferencex or args.prompt_cost
                              or args.prefill_scale or args.decode_as_measured
                              or set(args.profiles.split(",")) != set(KINDS)):
        parser.error("--accuracy-out writes the file pdplan ships: every row of every mode, model and profile kind, "
                     "from the package alone: without --rows, --models, --mode, --profiles, --inferencex or a what-if")
    try:
        runs = inferencex.read_runs(args.inferencex) if args.inferencex else None
        costs = prompt_costs(args.prompt_cost) if args.prompt_cost else {}
        scales = prefill_scales(args.prefill_scale) if args.prefill_scale else {}
    except ValueError as err:
        parser.error(str(err))
    rows = supported_rows(tables.package_root() / "systems" / "silicon_sample.csv", runs)
    if args.models:
        rows = rows[rows["model"].isin(args.models.split(","))]
    if args.mode:
        rows = rows[rows["mode"] == args.mode]
    if args.rows:
        rows = rows.head(args.rows)
    print(f"{len(rows)} supported rows of silicon_sample.csv (aiconfigurator-core {tables.package_version()})")
    for engine, seconds in sorted(costs.items()):
        print(f"what-if, not accuracy: {engine}'s profiles cost {seconds * 1e3:g} ms per iteration with prompt work")
    for engine, factor in sorted(scales.items()):
        print(f"what-if, not accuracy: {engine}'s profiles take {factor:g} times as long for their prefill steps")
    if args.decode_as_measured:
        print("what-if, not accuracy: every disaggregated row's decode steps are scaled to its measured TPOT")
    if (rows["mode"] == "disagg").any():
        print(recipe_coverage(rows))
    if runs is not None:
        agree, total = inferencex.stated_layouts_agree(rows, runs)
        print(f"the workers InferenceX states for its runs are the export's own in {agree} of the {total} phases of "
              f"the rows that name theirs")
    records, skipped = [], {}
    for kind in args.profiles.split(","):
        for _, row in rows.iterrows():
            try:
                profiles = row_profiles(row, kind)
                if row["backend"] in costs:
                    profiles = with_prompt_cost(profiles, costs[row["backend"]])
                if row["backend"] in scales:
                    profiles = with_prefill_scale(profiles, scales[row["backend"]])
                if args.decode_as_measured and row["mode"] == "disagg":
                    profiles = decode_as_measured(row, profiles)
                ttft, tpot = replayed(row, profiles)
            except PdplanError as err:
                skipped[(kind, err.detail)] = skipped.get((kind, err.detail), 0) + 1
                continue
            records.append({**{k: row[k] for k in ("id", "model", "gpu", "dtype", "backend", "mode", "isl", "osl",
                                                    "concurrency", "harness")},
                            "kind": kind, "ttft_ms": np.nanmean(ttft) * 1e3, "tpot_ms": np.nanmean(tpot) * 1e3,
                            "ttft_median_ms": np.nanmedian(ttft) * 1e3,
                            "silicon_ttft_ms": row["silicon_ttft_ms"], "silicon_tpot_ms": row["silicon_tpot_ms"],
                            "prefill_recipe": getattr(disagg_recipe(row), "recipe", "")})
    if not records:
        print_skipped(skipped)
        print("no row could be replayed")
        return 1
    results = pd.DataFrame(records)
    for clock in ("ttft", "tpot"):
        signed = results[f"{clock}_ms"] / results[f"silicon_{clock}_ms"] - 1
        results[f"{clock}_signed"], results[f"{clock}_ape"] = signed, signed.abs()
    if args.csv:
        results.to_csv(args.csv, index=False, float_format="%.6g")
    if args.accuracy_out:
        write_accuracy(results, args.accuracy_out)
    table = summarise(results)
    pd.set_option("display.width", 200)
    print(table.to_string(index=False, float_format=lambda x: f"{x:.1%}"))
    print("\noverall (median / p90 absolute error, median signed error):")
    for (mode, kind), part in results.groupby(["mode", "kind"], sort=True):
        print(f"  {mode:7s} {kind:9s} rows {len(part):4d}  TTFT {part.ttft_ape.median():6.1%} / "
              f"{part.ttft_ape.quantile(0.9):6.1%} ({part.ttft_signed.median():+.1%})   "
              f"TPOT {part.tpot_ape.median():6.1%} / "
              f"{part.tpot_ape.quantile(0.9):6.1%} ({part.tpot_signed.median():+.1%})")
    print("\nby measurement collection (median absolute error, median signed error):")
    for (harness, kind), part in results.groupby(["harness", "kind"], sort=True):
        print(f"  {harness:16s} {kind:15s} rows {len(part):4d}  TTFT {part.ttft_ape.median():6.1%} "
              f"({part.ttft_signed.median():+.1%})   "
              f"TPOT {part.tpot_ape.median():6.1%} ({part.tpot_signed.median():+.1%})")
    gaps = low_load_gaps(results)
    if not gaps.empty:
        print(f"\nat up to {LOW_LOAD_CLIENTS} clients, disaggregated (measured minus simulated mean TTFT, ms):")
        print(gaps.to_string(index=False, float_format=lambda x: f"{x:.0f}"))
    print_skipped(skipped)
    if args.inferencex:
        print_medians(published_medians(results, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
