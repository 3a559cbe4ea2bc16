"""InferenceX's published runs: reading them, which rows of silicon_sample.csv are those runs, and the
worker layout a disaggregated run states.

SemiAnalysisAI/InferenceX-app serves every InferenceMAX run through its API; its fixtures
(``packages/app/cypress/fixtures/api/benchmarks*.json``) are lists of runs, each with its GPU, framework,
lengths, concurrency, multi-token prediction, mean, median and p99 clocks in seconds and, for a disaggregated
run, each phase's TP, EP, attention DP, GPUs and workers (0 when unstated). At InferenceX-app
``3a600f1d9ce155536d52e2f58f744f27a301aac9`` the fixture holds 1,128 ``"disagg": true`` runs.

A row of silicon_sample.csv is a published run when it has the run's GPU, lengths and concurrency and both
its clocks equal the run's mean TTFT and mean TPOT within :data:`SAME_RUN_MS`. The collection's export holds
some runs several times (its two InferenceMAX exports and its database dump); 1,183 of its 1,328
disaggregated rows that do not say how many workers ran are runs of that fixture, each of exactly one.
"""

from __future__ import annotations

import json

import pandas as pd

#: how closely a row's clocks must equal a published run's means to be that run (ms)
SAME_RUN_MS = 0.01
PHASES = ("prefill", "decode")
#: each phase's layout as a run states it, under these names
LAYOUT = ("tp", "ep", "dp_attention", "gpus", "workers")


def read_runs(paths: list[str]) -> pd.DataFrame:
    """The published runs that state a mean TTFT and TPOT: each run's hardware, lengths, concurrency,
    multi-token prediction (``none`` unless stated), its TTFT mean, median and p99 and TPOT mean in ms and,
    for a disaggregated run, each phase's layout (``prefill_tp`` … ``decode_workers``; absent: NaN)."""
    runs = []
    for path in paths:
        try:
            with open(path) as f:
                published = json.load(f)
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not a JSON list of runs: {err}") from None
        for n, run in enumerate(published):
            try:
                clocks = run["metrics"]
                if "mean_ttft" in clocks and "mean_tpot" in clocks:
                    runs.append({"hardware": run["hardware"], "isl": run["isl"], "osl": run["osl"],
                                 "concurrency": run["conc"], "run_url": run.get("run_url"),
                                 "spec_method": run.get("spec_method") or "none",
                                 **{f"{name}_ms": clocks[name] * 1e3
                                    for name in ("mean_ttft", "median_ttft", "p99_ttft", "mean_tpot")},
                                 **_layout(run)})
            except (KeyError, TypeError) as err:
                raise ValueError(f"{path}: run {n}: no field {err}" if isinstance(err, KeyError)
                                 else f"{path}: run {n}: {err}") from None
    return pd.DataFrame(runs).drop_duplicates().reset_index(drop=True)


def _layout(run: dict) -> dict:
    """A disaggregated run's layout per phase, under :data:`LAYOUT` names; none for any other run."""
    if not run.get("disagg"):
        return {}
    return {f"{phase}_{name}": run.get(key) for phase in PHASES
            for name, key in zip(LAYOUT, (f"{phase}_tp", f"{phase}_ep", f"{phase}_dp_attention",
                                          f"num_{phase}_gpu", f"{phase}_num_workers"))}


def same_runs(rows: pd.DataFrame, runs: pd.DataFrame) -> pd.DataFrame:
    """Each row that is a published run, joined with that run (its index in ``runs`` as ``run``): same GPU
    (the row's ``gpu`` up to its first hyphen), lengths and concurrency, and both clocks within
    :data:`SAME_RUN_MS` of the run's means."""
    keys = ["hardware", "isl", "osl", "concurrency"]
    joined = rows.assign(hardware=rows["gpu"].str.split("-").str[0]).merge(
        runs.rename_axis("run").reset_index(), on=keys, suffixes=("", "_run"))
    same = ((joined["silicon_ttft_ms"] - joined["mean_ttft_ms"]).abs() < SAME_RUN_MS) & \
           ((joined["silicon_tpot_ms"] - joined["mean_tpot_ms"]).abs() < SAME_RUN_MS)
    return joined[same]


def run_layout(run, phase: str) -> dict | None:
    """One phase's workers as a disaggregated run states them, in silicon_sample.csv's coordinates: each
    worker's attention TP, attention DP ranks and EP, and how many workers ran; None when the run does not
    say how many workers its attention-DP phase ran.

    A worker holds the phase's GPUs over its workers (a phase without attention DP that states no worker
    count: one worker per TP group). With attention DP every GPU of a worker is a rank (TP 1, DP = its GPUs);
    without, the worker is one TP group. EP is the run's. On the 235 disaggregated rows of silicon_sample.csv
    that state their workers and are runs of the fixture at InferenceX-app ``3a600f1d``, this is the export's
    own layout in all 470 phases."""
    if any(pd.isna(run[f"{phase}_{name}"]) for name in ("tp", "ep", "dp_attention", "gpus")):
        return None
    gpus, tp, attention_dp = int(run[f"{phase}_gpus"]), int(run[f"{phase}_tp"]), bool(run[f"{phase}_dp_attention"])
    stated = run[f"{phase}_workers"]
    workers = 0 if pd.isna(stated) else int(stated)
    if workers <= 0 and not attention_dp and gpus % tp == 0:
        workers = gpus // tp
    if workers <= 0 or gpus % workers:
        return None
    per_worker = gpus // workers
    tp, dp = (1, per_worker) if attention_dp else (per_worker, 1)
    return {"tp": tp, "dp": dp, "ep": int(run[f"{phase}_ep"]), "workers": workers}


def with_published_layouts(rows: pd.DataFrame, runs: pd.DataFrame | None) -> pd.DataFrame:
    """The rows, each disaggregated one that is a published run marked with it (``published_run``: its index
    in ``runs``; ``published_mtp``: whether it ran multi-token prediction), and those that do not say how
    many workers ran given the layout their run states (:func:`run_layout`) in the export's columns
    (``published_layout``), unless it ran multi-token prediction (no run states its draft depth) or leaves a
    phase's workers unstated. Without runs (None) no row is a published run."""
    rows = rows.assign(published_run=pd.NA, published_mtp=False, published_layout=False)
    disagg = rows[(rows["mode"] == "disagg") & rows["gpu"].notna()]
    if runs is None or runs.empty or disagg.empty or "prefill_gpus" not in runs:
        return rows.astype({"published_mtp": bool, "published_layout": bool})
    matched = same_runs(disagg.reset_index(names="row"), runs)
    for _, match in matched.drop_duplicates("row").iterrows():
        i = match["row"]
        rows.loc[i, ["published_run", "published_mtp"]] = [match["run"], match["spec_method"] != "none"]
        named = pd.notna(rows.loc[i, "prefill_num_workers"]) and pd.notna(rows.loc[i, "decode_num_workers"])
        layouts = [run_layout(match, phase) for phase in PHASES]
        if named or match["spec_method"] != "none" or None in layouts:
            continue
        for phase, layout in zip(PHASES, layouts):
            rows.loc[i, [f"{phase}_tp_size", f"{phase}_attention_dp_size", f"{phase}_moe_ep_size",
                         f"{phase}_moe_tp_size", f"{phase}_num_workers"]] = \
                [layout["tp"], layout["dp"], layout["ep"], layout["tp"] * layout["dp"] // layout["ep"],
                 layout["workers"]]
        rows.loc[i, "published_layout"] = True
    return rows.astype({"published_mtp": bool, "published_layout": bool})


def stated_layouts_agree(rows: pd.DataFrame, runs: pd.DataFrame) -> tuple[int, int]:
    """Of the phases of the rows that name their own workers and are published runs, how many the export lays
    out as the run states (:func:`run_layout`), and how many there are: the check on the rule that gives the
    other rows their run's layout."""
    own = rows[rows["published_run"].notna() & ~rows["published_layout"]]
    agree = total = 0
    for _, row in own.iterrows():
        run = runs.loc[row["published_run"]]
        for phase in PHASES:
            stated = {"tp": row[f"{phase}_tp_size"], "dp": row[f"{phase}_attention_dp_size"],
                      "ep": row[f"{phase}_moe_ep_size"], "workers": row[f"{phase}_num_workers"]}
            total += 1
            agree += run_layout(run, phase) == {k: 1 if pd.isna(v) else int(v) for k, v in stated.items()}
    return agree, total
