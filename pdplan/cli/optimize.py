"""`pdplan optimize`: colocated or disaggregated, which shapes, how many, on which nodes, verified."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pdplan.cache import ResultCache, default_cache_dir
from pdplan.candidates import DEFAULT_PPS, DEFAULT_TPS
from pdplan import limits
from pdplan.cli.options import (
    within,
    choice,
    AdmissionShareOpt,
    ArrivalsOpt,
    AttainmentOpt,
    DtypeOpt,
    KvDtypeOpt,
    FormatOpt,
    JsonOpt,
    ProfilesOpt,
    RequestsOpt,
    SeedOpt,
    SloFileOpt,
    ToleranceOpt,
    TpotOpt,
    TraceArg,
    TtftOpt,
    load_workload,
    profile_source,
    trace_rate_rps,
    ComposeOpt,
    EngineOpt,
    EngineVersionOpt,
    search_settings,
    slo_from_options,
)
from pdplan.cli.output import counted, money, number, print_json, stderr, stdout
from pdplan.errors import PdplanError
from pdplan.fileio import Outputs, dump_yaml
from pdplan.goodput import SearchSettings
from pdplan.hardware import MAX_GPUS_PER_NODE, default_cluster_path, load_cluster
from pdplan.modelspec import get_model, model_file
from pdplan.profiles import profile_inputs
from pdplan.placement import ALIASES, ANY, resolve_fleets
from pdplan.planner import PlanReport, PlanRequest, optimize as run_optimize, report_to_dict
from pdplan.planner.curves import cost_curves, goodput_per_gpu
from pdplan.planner.plans import Spill
from pdplan.cli.schedule import render as render_schedule, report_to_dict as schedule_document
from pdplan.report import plot_cost_vs_rate, plot_fleets, plot_goodput_per_gpu, plot_schedule
from pdplan.schedule import cut, plan_windows, window_starts
from pdplan.schedule.windows import windows_file
from pdplan.manifest import Identity, Inputs, Release, build_manifest
from pdplan.manifest.build import CONNECTORS, UNKNOWN
from pdplan.manifest.schedule import build_schedule
from pdplan.slo import DEFAULT_ATTAINMENT
from pdplan.vocabulary import Affinity, Mode, Objective, PoolShapes, Redundancy, Rule
from pdplan.workload import peak_rate_rps

DEFAULT_MODEL = "llama2-70b"


def optimize(
    trace: TraceArg,
    model: Annotated[str, typer.Option("--model", help="Model name from the catalog, or a model YAML.")] = DEFAULT_MODEL,
    dtype: DtypeOpt = None,
    kv_dtype: KvDtypeOpt = None,
    profiles: ProfilesOpt = None,
    engine: EngineOpt = None,
    engine_version: EngineVersionOpt = None,
    compose: ComposeOpt = True,
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", help=f"Cluster YAML; default the shipped example ({default_cluster_path()}).")] = None,
    ttft: TtftOpt = None,
    tpot: TpotOpt = None,
    attainment: AttainmentOpt = DEFAULT_ATTAINMENT,
    slo: SloFileOpt = None,
    target_rate: Annotated[float | None, typer.Option(
        "--target-rate", help="Rate the plan must serve (req/s); default the trace's mean rate.")] = None,
    peak: Annotated[bool, typer.Option("--peak", help="Plan for the trace's busiest minute (with --windows: each "
                                                      "window's).")] = False,
    windows: Annotated[str | None, typer.Option(
        "--windows", help="Plan each window of the trace at its own rate under one inventory: a length (1h, 30m, "
                          "900s) or a file of window starts in seconds, one per line.")] = None,
    change_cost: Annotated[float, typer.Option(
        "--change-cost", help="With --windows: GPU-minutes each GPU of an instance joining or leaving a pool "
                              "loses (draining on the way out, loading weights on the way in; a flip from one "
                              "phase to the other does both).")] = 5.0,
    fleet: Annotated[str, typer.Option(
        "--fleet", help="GPU types per pool: any (free choice), all (every prefill/decode GPU pair the "
                        "cluster holds, power-capped decode included), a pair PREFILL_GPU/DECODE_GPU, or "
                        f"Splitwise's {', '.join(ALIASES)}.")] = ANY.name,
    objective: Annotated[Objective, choice(
        "--objective", Objective, help="cost, gpus or power (minimised at the target rate), or goodput (maximised "
                                       "within --max-gpus/--max-cost/--max-power).")] = PlanRequest.objective,
    mode: Annotated[Mode, choice(
        "--mode", Mode, help="auto: the better of P/D and colocated; disaggregated or colocated: answer with that "
                             "mode (both are still verified, and the margin says what the other would "
                             "save).")] = PlanRequest.mode,
    affinity: Annotated[Affinity, choice(
        "--affinity", Affinity, help="KV path: high (handoffs cross nodes), low (prefill and decode stages share "
                                     "nodes, DistServe's low affinity) or auto (the better of "
                                     "both).")] = PlanRequest.affinity,
    tp: Annotated[list[int] | None, typer.Option(
        "--tp", help=f"Tensor-parallel degrees to consider (repeatable); default {', '.join(map(str, DEFAULT_TPS))}.",
        show_default=False)] = None,
    pp: Annotated[list[int] | None, typer.Option(
        "--pp", help=f"Pipeline-parallel degrees to consider (repeatable); default {', '.join(map(str, DEFAULT_PPS))}.",
        show_default=False)] = None,
    pool_shapes: Annotated[PoolShapes, choice(
        "--pool-shapes", PoolShapes, help="one: one shape per phase and GPU type, as deployers run pools; mixed: "
                                          "let the program mix shapes in a pool.")] = PlanRequest.pool_shapes,
    redundancy: Annotated[Redundancy, choice(
        "--redundancy", Redundancy, help="none, instance or node: the plan must also pass with any one instance "
                                         "(or node) of each pool lost, verified by "
                                         "simulation.")] = PlanRequest.redundancy,
    seeds: Annotated[int, typer.Option(
        "--seeds", help="Verification runs: the trace replayed at the target rate, then Poisson resamples "
                        "of it; each objective gets a 95% interval over the runs.")] = PlanRequest.runs,
    verify_rule: Annotated[Rule, choice(
        "--verify-rule", Rule, help="lower: a plan passes when each objective's interval lower end meets its "
                                    "target; mean: when its mean does.")] = PlanRequest.rule,
    max_gpus: Annotated[int | None, typer.Option("--max-gpus", help="GPU budget.")] = None,
    max_cost: Annotated[float | None, typer.Option("--max-cost", help="Budget in USD per hour.")] = None,
    max_power: Annotated[float | None, typer.Option("--max-power", help="Budget in watts (power limits).")] = None,
    link_headroom: Annotated[float, typer.Option(
        "--link-headroom", help="Share of a KV link's bandwidth the handoff may use.")] = PlanRequest.link_headroom,
    time_limit: Annotated[float, typer.Option(
        "--time-limit", help="CP-SAT time limit per solve, seconds.")] = PlanRequest.time_limit_s,
    max_rounds: Annotated[int, typer.Option(
        "--max-rounds", help="End-to-end checks per fleet, mode and node affinity: misses raise the failing "
                             "pool, passes try cheaper plans.")] = PlanRequest.max_checks,
    arrivals: ArrivalsOpt = SearchSettings.arrivals,
    requests_per_probe: RequestsOpt = SearchSettings.requests_per_probe,
    tolerance: ToleranceOpt = SearchSettings.tolerance_rel,
    admission_share: AdmissionShareOpt = PlanRequest.admission_share,
    seed: SeedOpt = SearchSettings.seed,
    format: FormatOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write the deployment manifest of the chosen plan (pdplan validate / diff / export read it, "
                      "and so does pdplan simulate --plan); only a verified plan is written. With --windows: the "
                      "schedule (each window's pools and node map, every change drained first; validate reads it).")] = None,
    checkpoint: Annotated[str, typer.Option("--checkpoint", help="Manifest identity: checkpoint id (e.g. a "
                                            "Hugging Face repo).")] = UNKNOWN,
    revision: Annotated[str, typer.Option("--revision", help="Manifest identity: checkpoint revision.")] = UNKNOWN,
    tokenizer: Annotated[str, typer.Option("--tokenizer", help="Manifest identity: tokenizer id and revision.")] = UNKNOWN,
    adapter: Annotated[str, typer.Option("--adapter", help="Manifest identity: LoRA adapter, or none.")] = UNKNOWN,
    position: Annotated[str, typer.Option("--position", help="Manifest identity: position/RoPE policy.")] = UNKNOWN,
    connector: Annotated[str, typer.Option(
        "--connector", help=f"KV connector the manifest names: {', '.join(CONNECTORS)}.")] = Release.connector,
    timestamp: Annotated[bool, typer.Option(
        "--timestamp", help="Record the creation time in the manifest (it is then no longer byte-identical "
                            "across runs).")] = False,
    mixed: Annotated[bool, typer.Option(
        "--mixed", help="Let P/D plans add Splitwise's mixed pool: machines that take either phase when it "
                        "is short, which the integer program counts in both phases and places on nodes. The "
                        "plan with mixed machines is searched and verified end to end like the others and is "
                        "the answer when it is the best; the plain P/D plan is reported beside it.")] = False,
    mixed_max: Annotated[int, typer.Option(
        "--mixed-max", help="Mixed pool: the most mixed instances a plan may add (Splitwise's mixed pool is a "
                            "buffer beside the prefill and decode pools).")] = PlanRequest.mixed_max,
    mixed_spill_tokens: Annotated[int, typer.Option(
        "--mixed-spill-tokens", help="Mixed pool: a request runs whole on a mixed machine when the shortest "
                                     "prefill queue holds more pending prompt tokens than this.")] = Spill().prefill_queue_tokens,
    mixed_kv_share: Annotated[float, typer.Option(
        "--mixed-kv-share", help="Mixed pool: a prefilled request decodes on a mixed machine when its decode "
                                 "instance's routed KV would pass this share of its capacity.")] = Spill().decode_kv_share,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="Folder for PNG plots: fleets.png (cost and power per fleet), goodput_per_gpu.png (each "
                       "shape's simulated goodput per GPU by phase), cost_vs_rate.png (the chosen fleet's cost "
                       "per rate, P/D beside colocated).")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="List rejected shapes and why.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Recompute every goodput and check.")] = False,
    cache_dir: Annotated[Path | None, typer.Option(
        "--cache-dir", help=f"Result cache folder; default {default_cache_dir()} "
                            "(or $PDPLAN_CACHE_DIR).")] = None,
    json: JsonOpt = False,
) -> None:
    """Find the cheapest plan that passes its own end-to-end simulation: colocated or P/D, shapes,
    replicas, nodes.

    Every candidate shape's goodput, alone and as a pool behind the router, is simulated on the
    trace (cached on disk); CP-SAT places replicas on the cluster's nodes per fleet, mode and node
    affinity; each proposal is simulated end to end (routing, KV transfer, admission) on several
    runs, misses raise the failing pool and passes try cheaper plans. Only a plan that passes is the
    answer; when none does, the closest is shown with what it misses, and the exit code is 1.
    Defaults: llama2-70b; each shape timed by its shipped measured profile, else composed from
    vLLM's measured operators (the optional extra pdplan\\[aic]), else by a roofline; the example
    A100 + H100 cluster; p90 TTFT <= 1 s and p90 TPOT <= 100 ms at the trace's mean rate.
    """
    if connector not in CONNECTORS:
        raise PdplanError(f"--connector must be one of {', '.join(CONNECTORS)}, got {connector!r}", field="connector")
    if peak and target_rate is not None:
        raise PdplanError("give --peak or --target-rate, not both", field="target_rate")
    if windows is not None:
        _check_windows(objective=objective, target_rate=target_rate, change_cost=change_cost, fleet=fleet,
                       affinity=affinity, redundancy=redundancy, budgets=(max_gpus, max_cost, max_power))
    within("--mixed-max", mixed_max, 1, limits.MAX_GPUS)
    within("--mixed-spill-tokens", mixed_spill_tokens, 0, limits.MAX_KV_TOKENS)
    within("--mixed-kv-share", mixed_kv_share, 0, 1, above=True)
    _check_numbers(objective=objective, target_rate=target_rate, peak=peak, max_gpus=max_gpus,
                   max_cost=max_cost, max_power=max_power, link_headroom=link_headroom, time_limit=time_limit,
                   seeds=seeds, max_rounds=max_rounds, tps=tp, pps=pp)
    outputs = Outputs(trace, cluster, *profile_inputs(profiles), slo, model_file(model), windows_file(windows))
    if out is not None:
        outputs.claim(out, "--out")
    if plot is not None:
        outputs.claim(plot, "--plot", folder=True)
    settings = search_settings(tolerance, requests_per_probe, arrivals, seed)
    workload = load_workload(trace, format)
    cut_windows = None
    if windows is not None:
        if not workload.has_arrivals:
            raise PdplanError("--windows needs a trace with arrival times", file=trace)
        cut_windows = cut(workload, window_starts(windows, float(workload.arrival_s[-1] - workload.arrival_s[0])),
                          peak=peak)
    if objective == "goodput":
        rate = None
    elif target_rate is not None:
        rate = target_rate
    elif peak and cut_windows is None:  # with windows, --peak is each window's busiest minute
        if not workload.has_arrivals:
            raise PdplanError("trace has no arrival times; give --target-rate", file=trace)
        rate = peak_rate_rps(workload.arrival_s)
    else:
        rate = trace_rate_rps(workload, trace)
    if rate is not None and not rate > 0:
        raise PdplanError(f"--target-rate must be > 0, got {rate!r}", field="target_rate")
    the_cluster = load_cluster(cluster or default_cluster_path())
    request = PlanRequest(
        workload=workload, model=get_model(model, dtype=dtype, kv_dtype=kv_dtype), cluster=the_cluster, profiles=profile_source(profiles, engine, engine_version, compose),
        slo=slo_from_options(ttft, tpot, attainment, slo), target_rps=rate, fleets=resolve_fleets(fleet, the_cluster),
        objective=objective, affinity=affinity, settings=settings, admission_share=admission_share,
        link_headroom=link_headroom, max_gpus=max_gpus, max_usd_per_hour=max_cost, max_power_w=max_power,
        time_limit_s=time_limit, max_checks=max_rounds, runs=seeds, rule=verify_rule, redundancy=redundancy,
        pool_shapes=pool_shapes, mode=mode, mixed=mixed, mixed_max=mixed_max,
        spill=Spill(prefill_queue_tokens=mixed_spill_tokens, decode_kv_share=mixed_kv_share), tps=tuple(sorted(set(tp))) if tp else DEFAULT_TPS,
        pps=tuple(sorted(set(pp))) if pp else DEFAULT_PPS)
    cache = ResultCache(cache_dir, enabled=not no_cache,
                        warn=lambda message: stderr.print(f"warning: {message}", markup=False, highlight=False))
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=True,
                  disable=json or not stderr.is_terminal) as progress:
        task = progress.add_task("measuring shapes", total=None)

        def advance(label: str, done: int, total: int) -> None:
            progress.update(task, description=label, completed=done, total=total)

        if cut_windows is not None:
            windowed = plan_windows(request, cut_windows, change_gpu_minutes=change_cost, cache=cache, progress=advance)
        else:
            report = run_optimize(request, cache=cache, progress=advance)
    if cut_windows is not None:
        if out is not None and windowed.chosen is not None:
            outputs.put(out, dump_yaml(build_schedule(
                windowed, Inputs(trace=trace, cluster=cluster, profiles=() if profiles is None else (profiles,),
                                 model=model_file(model)),
                seed=seed, timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds") if timestamp else None)))
        _windowed_output(windowed, outputs, plot, json)
        return
    document = report_to_dict(report)
    document["run"]["cache"]["dir"] = None if no_cache else str(cache.folder)
    if report.answer is not None:
        if out is not None:
            timed = replace(report.answer.plan, engine=engine, engine_version=engine_version, compose=compose)
            manifest = build_manifest(
                report, timed, Inputs(trace=trace, cluster=cluster, profiles=() if profiles is None else (profiles,),
                                      model=model_file(model)),
                identity=Identity(checkpoint=checkpoint, revision=revision, tokenizer=tokenizer, adapter=adapter,
                                  position=position),
                release=Release(connector=connector), seed=seed,
                timestamp=datetime.now(timezone.utc).isoformat(timespec="seconds") if timestamp else None)
            outputs.put(out, dump_yaml(manifest))
        if plot is not None:
            outputs.put(plot / "fleets.png", plot_fleets(document["fleets"], winner=document["fleet"]), "--plot")
            outputs.put(plot / "goodput_per_gpu.png", plot_goodput_per_gpu(goodput_per_gpu(report)), "--plot")
            if rate is not None:
                fleet = report.fleet
                verified = {r.mode: r.best.solution.usd_per_hour for r in (fleet.disaggregated, fleet.colocated)
                            if r.best is not None}
                outputs.put(plot / "cost_vs_rate.png", plot_cost_vs_rate(cost_curves(report), verified, rate),
                            "--plot")
        outputs.commit()
    if json:
        print_json(document)
    elif report.answer is None:
        _render_miss(report, document)
    else:
        _render(report, document, explain)
    if report.answer is None:
        raise typer.Exit(1)


def _windowed_output(windowed, outputs: Outputs, plot: Path | None, json: bool) -> None:
    """Write the schedule's plot, print it, and exit 1 when no schedule passes every window."""
    document = schedule_document(windowed)
    if windowed.chosen is not None:
        if plot is not None:
            outputs.put(plot / "schedule.png", plot_schedule(document), "--plot")
        outputs.commit()
    render_schedule(windowed, document, json)
    if windowed.chosen is None:
        raise typer.Exit(1)


def _check_windows(*, objective: str, target_rate: float | None, change_cost: float, fleet: str, affinity: str,
                   redundancy: str, budgets: tuple) -> None:
    """Flags a windowed schedule does not take, refused rather than ignored."""
    if objective != "cost":
        raise PdplanError("--windows minimises cost over the windows; drop --objective", field="objective")
    if target_rate is not None:
        raise PdplanError("--windows plans each window at its own rate; drop --target-rate", field="target_rate")
    if fleet == "all":
        raise PdplanError("--windows plans one fleet: name it (any, HH, a PREFILL_GPU/DECODE_GPU pair)", field="fleet")
    if affinity == "low":
        raise PdplanError("--windows places every window at high node affinity; drop --affinity low",
                          field="affinity")
    if redundancy != "none":
        raise PdplanError("--windows does not verify losses yet; drop --redundancy", field="redundancy")
    if any(b is not None for b in budgets):
        raise PdplanError("--windows plans within the cluster's inventory; drop --max-gpus, --max-cost and "
                          "--max-power", field="max_gpus")
    within("--change-cost", change_cost, 0, 24 * 60)


def _check_numbers(*, objective: str, target_rate: float | None, peak: bool, max_gpus: int | None,
                   max_cost: float | None, max_power: float | None, link_headroom: float,
                   time_limit: float, seeds: int, max_rounds: int, tps: list[int] | None,
                   pps: list[int] | None) -> None:
    """Flag values the planner cannot use, named by flag, before any work is done."""
    if objective == "goodput" and (target_rate is not None or peak):
        raise PdplanError("--objective goodput finds the highest rate itself; drop --target-rate/--peak",
                          field="target_rate")
    within("--target-rate", target_rate, 0, limits.MAX_RATE_RPS, above=True)
    within("--max-gpus", max_gpus, 1, limits.MAX_GPUS)  # a budget of nothing holds no plan: said before any work
    within("--max-cost", max_cost, 0, limits.MAX_USD_PER_HOUR, above=True)
    within("--max-power", max_power, 0, limits.MAX_WATTS, above=True)
    within("--link-headroom", link_headroom, 0, 1, above=True)
    within("--time-limit", time_limit, 0, limits.MAX_TIME_LIMIT_S, above=True)
    within("--seeds", seeds, 1, limits.MAX_RUNS)
    within("--max-rounds", max_rounds, 1, limits.MAX_CHECKS)
    for values, flag, high in ((tps, "--tp", MAX_GPUS_PER_NODE), (pps, "--pp", limits.MAX_PIPELINE_STAGES)):
        for value in values or ():
            within(flag, value, 1, high)


# --- rendering ----------------------------------------------------------------------------------

def _render(report: PlanReport, doc: dict, explain: bool) -> None:
    target = doc["target_rps"]
    fleet = doc["fleet"] + (f" ({doc['fleet_alias']})" if doc["fleet_alias"] else "")
    decision = doc["decision"] + (" with a mixed pool" if doc["mixed"] else "")
    head = (f"{report.request.model.name}: {decision} on fleet {fleet}"
            + (f" at {target:.3g} req/s" if target else ""))
    stdout.print(f"[bold]{head}[/bold]  ({'; '.join(o.label for o in report.request.slo.objectives)})",
                 highlight=False)
    stdout.print(_verification_line(doc["verification"]), markup=False, highlight=False)
    stdout.print(_search_line(doc), markup=False, highlight=False)
    stdout.print(_profiles_line(doc), markup=False, highlight=False)
    _fleets_table(doc)
    _plan_table(doc)
    _facts_table(doc)
    _links_table(doc)
    _nodes_table(doc)
    _mixed_line(doc)
    if explain:
        _explain(report)


def _mixed_line(doc: dict) -> None:
    """With --mixed: the best verified plan with Splitwise's mixed pool against the plain P/D plan."""
    found = doc.get("mixed_pool")
    if found is None:
        return
    base = found["baseline"]
    plain = "no plain P/D plan passes" if base is None else (
        f"plain P/D: {base['prefill']} prefill + {base['decode']} decode, {money(base['cost_per_hour'])} per hour")
    if not found["found"]:
        stdout.print(f"mixed pool: no plan with mixed machines is better and passes end to end; {plain}",
                     markup=False, highlight=False)
        return
    shape = found["mixed_shape"]
    j = found["verification"]["joint"]
    verdict = "the answer" if found["chosen"] else "not the answer (another mode or fleet is better)"
    stdout.print(f"mixed pool: {found['prefill']} prefill + {found['decode']} decode + {found['mixed']} mixed "
                 f"({shape['gpu']} TP{shape['tp']}" + (f" PP{shape['pp']}" if shape["pp"] > 1 else "")
                 + f", chunk {shape['chunk_tokens']}), {money(found['cost_per_hour'])} per hour, PASSES end to end "
                 f"(joint {j['mean']:.3f} [{j['low']:.3f}, {j['high']:.3f}]; spill above {found['spill_tokens']} "
                 f"queued prompt tokens), {verdict}; {plain}", markup=False, highlight=False)


def _profiles_line(doc: dict) -> str:
    """Which evidence timed the chosen plan's shapes, and why a shape fell back to the roofline."""
    parts = []
    for p in doc["pools"]:
        text = f"{p['gpu']} TP{p['tp']} PP{p['pp']} {p['profile']}"
        if p["profile_fallback"]:
            text += f" ({p['profile_fallback']})"
        if text not in parts:
            parts.append(text)
    return f"profiles: {'; '.join(parts)} — {doc['provenance']['profile_sources']}"


def _render_miss(report: PlanReport, doc: dict) -> None:
    """No plan passed: say so, show the fleets and the closest plan with what it misses."""
    stderr.print(f"No plan passes the end-to-end simulation within {counted(report.request.max_checks, 'check')} per fleet, "
                 "mode and affinity; nothing was written.", markup=False, highlight=False)
    _fleets_table(doc)
    closest = doc["closest"]
    if closest is None:
        return
    table = Table(title="Closest plan (it MISSES the SLO)")
    for name in ("phase", "GPU", "TP", "PP", "replicas"):
        table.add_column(name, justify="right")
    for p in closest["pools"]:
        table.add_row(p["phase"], p["gpu"], str(p["tp"]), str(p["pp"]), str(p["replicas"]))
    stdout.print(table)
    stdout.print(f"{closest['gpus_total']} GPUs, {money(closest['cost_per_hour'])} per hour", highlight=False)
    stdout.print(_verification_line(closest["verification"]), markup=False, highlight=False)
    for miss in closest["misses"]:
        stdout.print(f"  misses {miss}", markup=False, highlight=False)


def _verification_line(v: dict) -> str:
    runs = len(v["seeds"])
    rule = ("each objective's 95% interval lower end meets its target" if v["rule"] == "lower"
            else "each objective's mean meets its target")
    objectives = "; ".join(f"{o['metric'].upper()} <= {o['threshold_s'] * 1e3:g} ms: {o['mean']:.3f} "
                           f"[{o['low']:.3f}, {o['high']:.3f}] vs {o['target']:g}" for o in v["per_objective"])
    j = v["joint"]
    verdict = "PASSES" if v["passed"] else "MISSES"
    losses = f"; survives {counted(len(v['losses']), 'distinct loss', 'distinct losses')}" if v["losses"] and v["passed"] else ""
    return (f"verification: {verdict} at {v['rate_rps']:.3g} req/s on {counted(runs, 'run')} × "
            f"{v['requests'][0]:,} requests (seeds {', '.join(map(str, v['seeds']))}; rule: {rule}): {objectives}; "
            f"joint {j['mean']:.3f} [{j['low']:.3f}, {j['high']:.3f}]{losses}")


def _search_line(doc: dict) -> str:
    s = doc["search"]
    name = doc["solver"]["objective_name"]
    if s["program_estimate"] is None or s["verified"] is None:
        return f"search: {counted(s['checks'], 'end-to-end check')}"
    proof = ("no cheaper plan above the search floor passes" if s["proven"]
             else "the check budget ran out before cheaper plans were ruled out")
    gap = "" if s["gap"] is None else f", gap {s['gap']:+.1%}"
    if s["gap"] is not None and s["gap"] < 0:
        gap += ", the simulation passed a plan the program counts short"
    return (f"search: integer-program estimate {objective_text(s['program_estimate'], name)} (from pool capacities, "
            f"not a bound), "
            f"verified {objective_text(s['verified'], name)}{gap} "
            f"({counted(s['checks'], 'check')}, {counted(doc['run']['end_to_end_simulations'], 'end-to-end simulation')} "
            f"run; {proof})")




def objective_text(value: float, name: str, signed: bool = False) -> str:
    """A value of the objective ``name``: dollars per hour for cost, else the number."""
    if name != "cost":
        return f"{value:{'+' if signed else ''}.4g}"
    return ("-" if value < 0 else "+" if signed else "") + money(abs(value))


def shapes_text(pool: dict | None) -> str:
    """Every shape of a pool with its replicas: ``h100-80gb TP4×2 + a100-80gb TP8 PP2×1``."""
    if pool is None:
        return "—"
    return " + ".join(f"{s['gpu']} TP{s['tp']}" + (f" PP{s['pp']}" if s["pp"] > 1 else "") + f"×{s['replicas']}"
                      for s in pool["shapes"])


def _fleets_table(doc: dict) -> None:
    table = Table(title="Fleets (each fleet's disaggregated plan, verified end to end; the colocated plan "
                        "on the same GPUs beside it)")
    table.add_column("fleet", no_wrap=True)
    for name in ("prefill", "decode", "GPUs", "$/h", "kW", "capacity", "req/s/GPU", "KV link", "joint",
                 "verdict", "colocated $/h", "best"):
        table.add_column(name, justify="right")
    notes = []
    for f in doc["fleets"]:
        name = f["fleet"] + (f" ({f['alias']})" if f["alias"] else "")
        joint = None if f["attainment"] is None else f["attainment"]["joint"]
        verdict = "infeasible" if not f["feasible"] else ("passes" if f["verified"] else "MISSES")
        notes += [f"{name}: {reason}" for reason in (f["reason"], f["colocated_reason"]) if reason]
        best = f["best_mode"] or "—"
        if f["fleet"] == doc.get("fleet") and best == doc.get("decision"):
            best = f"{best} (chosen)"
        table.add_row(name, shapes_text(f["prefill"]), shapes_text(f["decode"]), number(f["gpus_total"], "d"),
                      money(f["cost_per_hour"]), number(None if f["power_w"] is None else f["power_w"] / 1e3, ".2f"),
                      number(f["goodput_rps"]), number(f["goodput_per_gpu"]), number(f["link_utilization"], ".1%"),
                      number(joint, ".3f"), verdict, money(f["colocated_cost_per_hour"]), best)
    stdout.print(table)
    for note in dict.fromkeys(notes):
        stdout.print(f"  {note}", markup=False, highlight=False)


def _plan_table(doc: dict) -> None:
    table = Table(title=f"Chosen plan ({doc['decision']}, {doc['affinity'] or 'high'} node affinity)")
    for name in ("phase", "GPU", "TP", "PP", "replicas", "goodput/instance", "pool capacity", "$/h", "kW", "profile"):
        table.add_column(name, justify="right")
    for p in doc["pools"]:
        phase = p["phase"] + (f" (chunk {p['chunk_tokens']})" if p["chunk_tokens"] else "")
        table.add_row(phase, p["gpu"], str(p["tp"]), str(p["pp"]), str(p["replicas"]),
                      f"{p['goodput_rps_per_instance']:.3g} req/s", f"{p['capacity_rps']:.3g} req/s",
                      money(p["usd_per_hour"]), f"{p['power_w'] / 1e3:.2f}", p["profile"])
    base = doc["colocated_baseline"]
    if base is not None and doc["decision"] == "disaggregated":
        for s in base["shapes"]:
            table.add_row("colocated baseline", s["gpu"], str(s["tp"]), str(s["pp"]), str(s["replicas"]),
                          f"{s['goodput_rps_per_instance']:.3g} req/s", f"{s['capacity_rps']:.3g} req/s", "", "")
        table.add_row("colocated baseline total", "", "", "", "", "", "", money(base["cost_per_hour"]),
                      f"{base['power_w'] / 1e3:.2f}")
    stdout.print(table)
    stdout.print("  pool capacity: the goodput of all its replicas behind the router, simulated; it can exceed "
                 "replicas × goodput/instance, since pooled replicas absorb each other's bursts",
                 markup=False, highlight=False)


def _facts_table(doc: dict) -> None:
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("GPUs / cost / power", f"{doc['gpus_total']} / {money(doc['cost_per_hour'])} per hour / "
                                         f"{doc['power_w'] / 1e3:.2f} kW")
    table.add_row("pool capacity (min over phases)", f"{doc['goodput_rps']:.3g} req/s, "
                                                     f"{doc['goodput_per_gpu']:.3g} per GPU (integer program)")
    if doc["margin"] is not None:
        other = doc["margin_over"]
        fleet = other["fleet"] + (f" ({other['fleet_alias']})" if other["fleet_alias"] else "")
        table.add_row(f"margin over {other['decision']}", f"{doc['margin']:+.1%} ({doc['solver']['objective_name']}, "
                                                         f"both verified; the best {other['decision']} plan, on {fleet})")
    headroom = "" if doc["headroom"] is None else f" ({doc['headroom']:+.0%} over the target)"
    table.add_row("end-to-end goodput", f"{doc['end_to_end_goodput_rps']:.3g} req/s{headroom}, the whole plan verified")
    red = doc["redundancy"]
    if red["mode"] != "none":
        worst = red.get("worst_case")
        text = "—" if worst is None else f"worst loss: {worst['lost']} (short by {max(0.0, worst['worst_shortfall']):.3f})"
        if "redundancy_costs" in red:
            name, free = doc["solver"]["objective_name"], red["without_redundancy"]
            text += (f"; redundancy costs {objective_text(red['redundancy_costs'], name, signed=True)} ({name}) "
                     f"over the answer without it ({free['gpus_total']} GPUs, {objective_text(free['value'], name)})")
        table.add_row(f"redundancy ({red['mode']})", text)
    s = doc["solver"]
    table.add_row("solver", f"{s['status']}, objective {s['objective']:.6g}, bound {s['bound']:.6g}, gap {s['gap']:.2%}")
    table.add_row("cache", f"{doc['run']['cache']['hits']} hits, {doc['run']['cache']['misses']} computed")
    stdout.print(table)


def _links_table(doc: dict) -> None:
    if not doc["links"]:
        return
    table = Table(title="KV links (demand at the verified rate vs the placed path)")
    for name in ("from", "to", "path", "demand GB/s", "capacity GB/s", "use"):
        table.add_column(name, justify="right")
    for link in doc["links"]:
        table.add_row(link["from"], link["to"], link["path"], f"{link['demand_gb_s']:.2f}",
                      f"{link['capacity_gb_s']:.1f}", f"{link['utilization']:.1%}")
    stdout.print(table)


def _nodes_table(doc: dict) -> None:
    table = Table(title="Node map")
    for name in ("node", "instances (GPUs)"):
        table.add_column(name)
    nodes: dict[str, list[str]] = {}
    for inst in doc["nodes"]:
        for stage, placed in enumerate(inst["stages"]):
            gpus = placed["gpus"]
            label = f"{inst['instance']}" + (f" stage {stage}" if inst["pp"] > 1 else "")
            nodes.setdefault(placed["node"], []).append(f"{label} ({gpus[0]}" + (f"-{gpus[-1]})" if len(gpus) > 1 else ")"))
    for node in sorted(nodes, key=lambda n: (n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1]))):
        table.add_row(node, ", ".join(nodes[node]))
    stdout.print(table)


def _explain(report: PlanReport) -> None:
    """One line per unused shape, so reasons are never cut or wrapped into a cell."""
    stdout.print("[bold]Shapes not used, and why[/bold]")
    lines = [f"{r.shape.label}: {r.reason}" for r in report.rejected]
    lines += [f"{m.shape.label}: no rate meets the SLO on one instance (goodput 0)"
              for m in report.measured if m.goodput.goodput_rps <= 0]
    for fleet in report.fleets:  # fleet rules are the user's choice; list links and inventory only
        for result in (fleet.disaggregated, fleet.colocated):
            rejections = () if result.first is None else result.first.rejections
            lines += [f"{rej.candidate.label}: {rej.reason}" for rej in rejections if rej.family != "fleet"]
    for line in dict.fromkeys(lines):
        stdout.print(f"  {line}", markup=False, highlight=False)
