"""`pdplan optimize`: colocated or disaggregated, which shapes, how many, on which nodes."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from pdplan.cache import ResultCache, default_cache_dir
from pdplan.cli.options import (
    AdmissionShareOpt,
    ArrivalsOpt,
    AttainmentOpt,
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
    measured_profiles,
    search_settings,
    slo_from_options,
)
from pdplan.cli.output import print_json, stderr, stdout
from pdplan.errors import PdplanError
from pdplan.fileio import atomic_write_text, dump_yaml
from pdplan.goodput import DEFAULT_ADMISSION_SHARE
from pdplan.hardware import default_cluster_path, load_cluster
from pdplan.modelspec import get_model
from pdplan.placement import FLEET_CHOICES, OBJECTIVES
from pdplan.planner import PlanReport, PlanRequest, fleet_names, optimize as run_optimize, report_to_dict
from pdplan.report import plot_fleets
from pdplan.sim.plan import plan_to_dict
from pdplan.workload import peak_rate_rps

DEFAULT_MODEL = "llama2-70b"


def optimize(
    trace: TraceArg,
    model: Annotated[str, typer.Option("--model", help="Model name from the catalog, or a model YAML.")] = DEFAULT_MODEL,
    profiles: ProfilesOpt = None,
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", help=f"Cluster YAML; default the shipped example ({default_cluster_path()}).")] = None,
    ttft: TtftOpt = None,
    tpot: TpotOpt = None,
    attainment: AttainmentOpt = 0.9,
    slo: SloFileOpt = None,
    target_rate: Annotated[float | None, typer.Option(
        "--target-rate", help="Rate every phase must serve (req/s); default the trace's mean rate.")] = None,
    peak: Annotated[bool, typer.Option("--peak", help="Plan for the trace's busiest minute.")] = False,
    fleet: Annotated[str, typer.Option(
        "--fleet", help="GPU types per pool: AA, HH, HA, HHcap (Splitwise), any (free choice) or all "
                        "(compare the four).")] = "any",
    objective: Annotated[str, typer.Option(
        "--objective", help="cost, gpus or power (minimised at the target rate), or goodput (maximised "
                            "within --max-gpus/--max-cost/--max-power).")] = "cost",
    affinity: Annotated[str, typer.Option(
        "--affinity", help="KV path: high (handoffs cross nodes), low (prefill and decode stages share "
                           "nodes, DistServe's low affinity) or auto (the better of both).")] = "auto",
    max_gpus: Annotated[int | None, typer.Option("--max-gpus", help="GPU budget.")] = None,
    max_cost: Annotated[float | None, typer.Option("--max-cost", help="Budget in USD per hour.")] = None,
    max_power: Annotated[float | None, typer.Option("--max-power", help="Budget in watts (power limits).")] = None,
    link_headroom: Annotated[float, typer.Option(
        "--link-headroom", help="Share of a KV link's bandwidth the handoff may use.")] = 0.8,
    time_limit: Annotated[float, typer.Option("--time-limit", help="CP-SAT time limit per solve, seconds.")] = 10.0,
    max_rounds: Annotated[int, typer.Option(
        "--max-rounds", help="End-to-end checks; after a miss the failing phase's requirement rises 15%.")] = 3,
    arrivals: ArrivalsOpt = "trace",
    requests_per_probe: RequestsOpt = 1000,
    tolerance: ToleranceOpt = 0.02,
    admission_share: AdmissionShareOpt = DEFAULT_ADMISSION_SHARE,
    seed: SeedOpt = 0,
    format: FormatOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--out", help="Write the chosen plan (readable by pdplan simulate --plan).")] = None,
    plot: Annotated[Path | None, typer.Option("--plot", help="Folder for PNG plots (fleets.png).")] = None,
    explain: Annotated[bool, typer.Option("--explain", help="List rejected shapes and why.")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="Recompute every goodput.")] = False,
    cache_dir: Annotated[Path | None, typer.Option(
        "--cache-dir", help=f"Goodput cache folder; default {default_cache_dir()} "
                            "(or $PDPLAN_CACHE_DIR).")] = None,
    json: JsonOpt = False,
) -> None:
    """Find the cheapest plan that meets the SLO: colocated or P/D, shapes, replicas, nodes.

    Every candidate shape's per-instance goodput is simulated on the trace (cached on disk);
    CP-SAT places replicas on the cluster's nodes per fleet and mode, proving optimality; the
    winner is simulated end to end, routing and KV transfer included. Defaults: llama2-70b, the
    shipped profiles (rooflines for unmeasured shapes), the example A100 + H100 cluster, p90 TTFT
    <= 1 s and p90 TPOT <= 100 ms at the trace's mean rate.
    """
    _check_choices(fleet, objective, affinity)
    if peak and target_rate is not None:
        raise PdplanError("give --peak or --target-rate, not both", field="target_rate")
    _check_numbers(objective=objective, target_rate=target_rate, peak=peak, max_gpus=max_gpus,
                   max_cost=max_cost, max_power=max_power, link_headroom=link_headroom, time_limit=time_limit)
    if plot is not None and plot.exists() and not plot.is_dir():
        raise PdplanError("--plot must name a folder, got a file", file=plot, field="plot")
    workload = load_workload(trace, format)
    if objective == "goodput":
        rate = None
    elif target_rate is not None:
        rate = target_rate
    elif not workload.has_arrivals:
        raise PdplanError("trace has no arrival times; give --target-rate", file=trace)
    else:
        rate = peak_rate_rps(workload.arrival_s) if peak else len(workload) / _duration(workload)
    if rate is not None and not rate > 0:
        raise PdplanError(f"--target-rate must be > 0, got {rate!r}", field="target_rate")
    request = PlanRequest(
        workload=workload, model=get_model(model), cluster=load_cluster(cluster or default_cluster_path()),
        measured=measured_profiles(profiles), slo=slo_from_options(ttft, tpot, attainment, slo),
        target_rps=rate, fleets=fleet_names(fleet), objective=objective, affinity=affinity,
        settings=search_settings(tolerance, requests_per_probe, arrivals, seed), admission_share=admission_share,
        link_headroom=link_headroom, max_gpus=max_gpus, max_usd_per_hour=max_cost, max_power_w=max_power,
        time_limit_s=time_limit, max_rounds=max_rounds)
    cache = ResultCache(cache_dir, enabled=not no_cache)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=stderr, transient=True,
                  disable=json or not stderr.is_terminal) as progress:
        task = progress.add_task("goodput curves", total=None)

        def advance(label: str, done: int, total: int) -> None:
            progress.update(task, description=f"goodput {label}", completed=done, total=total)

        report = run_optimize(request, cache=cache, progress=advance)
    document = report_to_dict(report)
    document["cache"]["dir"] = None if no_cache else str(cache.folder)
    if out is not None:
        atomic_write_text(out, dump_yaml(plan_to_dict(report.plan)))
    if plot is not None:
        plot_fleets(document["fleets"], plot / "fleets.png")
    if json:
        print_json(document)
        return
    _render(report, document, explain)


def _duration(workload) -> float:
    duration = float(workload.arrival_s[-1] - workload.arrival_s[0])
    if duration <= 0:
        raise PdplanError("all arrivals fall at one instant; give --target-rate", file=workload.source)
    return duration


def _check_numbers(*, objective: str, target_rate: float | None, peak: bool, max_gpus: int | None,
                   max_cost: float | None, max_power: float | None, link_headroom: float,
                   time_limit: float) -> None:
    """Flag values the planner cannot use, named by flag, before any work is done."""
    if objective == "goodput" and (target_rate is not None or peak):
        raise PdplanError("--objective goodput finds the highest rate itself; drop --target-rate/--peak",
                          field="target_rate")
    if target_rate is not None and math.isinf(target_rate):
        raise PdplanError(f"--target-rate must be a finite number, got {target_rate!r}", field="target_rate")
    if max_gpus is not None and max_gpus < 0:
        raise PdplanError(f"--max-gpus must be >= 0, got {max_gpus!r}", field="max_gpus")
    for flag, value in (("--max-cost", max_cost), ("--max-power", max_power)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise PdplanError(f"{flag} must be a finite number >= 0, got {value!r}", field=flag.lstrip("-"))
    if not 0 < link_headroom <= 1:
        raise PdplanError(f"--link-headroom must be in (0, 1], got {link_headroom!r}", field="link_headroom")
    if not (math.isfinite(time_limit) and time_limit > 0):
        raise PdplanError(f"--time-limit must be a finite number of seconds > 0, got {time_limit!r}",
                          field="time_limit")


def _check_choices(fleet: str, objective: str, affinity: str) -> None:
    for flag, value, choices in (("--fleet", fleet, (*FLEET_CHOICES, "all")), ("--objective", objective, OBJECTIVES),
                                 ("--affinity", affinity, ("auto", "high", "low"))):
        if value not in choices:
            raise PdplanError(f"{flag} must be one of {', '.join(sorted(choices))}, got {value!r}",
                              field=flag.lstrip("-"))


# --- rendering ----------------------------------------------------------------------------------

def _render(report: PlanReport, doc: dict, explain: bool) -> None:
    target = doc["target_rps"]
    head = (f"{report.request.model.name}: {doc['decision']} on fleet {doc['fleet']}"
            + (f" at {target:.3g} req/s" if target else ""))
    stdout.print(f"[bold]{head}[/bold]  ({'; '.join(o.label for o in report.request.slo.objectives)})")
    _fleets_table(doc)
    _plan_table(doc)
    _facts_table(report, doc)
    _links_table(doc)
    _nodes_table(doc)
    if explain:
        _explain(report)


def _money(value: float | None) -> str:
    return "—" if value is None else f"${value:,.2f}"


def _num(value: float | None, fmt: str = ".3g") -> str:
    return "—" if value is None else format(value, fmt)


def _fleets_table(doc: dict) -> None:
    table = Table(title="Fleets (disaggregated optimum; colocated on the same GPU types beside it)")
    for name in ("fleet", "prefill", "decode", "GPUs", "$/h", "kW", "goodput", "req/s/GPU", "KV link",
                 "joint", "colocated $/h", "best"):
        table.add_column(name, justify="right")
    for f in doc["fleets"]:
        joint = None if f["attainment"] is None else f["attainment"]["joint"]
        table.add_row(f["fleet"], _shape(f["prefill"]), _shape(f["decode"]), _num(f["gpus_total"], "d"),
                      _money(f["cost_per_hour"]), _num(None if f["power_w"] is None else f["power_w"] / 1e3, ".2f"),
                      _num(f["goodput_rps"]), _num(f["goodput_per_gpu"]),
                      _num(f["link_utilization"], ".1%"), _num(joint, ".3f"),
                      _money(f["colocated_cost_per_hour"]), f["best_mode"] or "infeasible")
    stdout.print(table)


def _shape(pool: dict | None) -> str:
    """``h100 TP2×3``: GPU family, TP (and PP when > 1), replicas."""
    if pool is None:
        return "—"
    pp = f" PP{pool['pp']}" if pool["pp"] > 1 else ""
    return f"{pool['gpu'].split('-80gb')[0]} TP{pool['tp']}{pp}×{pool['replicas']}"


def _plan_table(doc: dict) -> None:
    table = Table(title=f"Chosen plan ({doc['decision']}, {doc['affinity'] or 'high'} node affinity)")
    for name in ("phase", "GPU", "TP", "PP", "replicas", "goodput/instance", "$/h", "kW"):
        table.add_column(name, justify="right")
    for p in doc["pools"]:
        phase = p["phase"] + (f" (chunk {p['chunk_tokens']})" if p["chunk_tokens"] else "")
        table.add_row(phase, p["gpu"], str(p["tp"]), str(p["pp"]), str(p["replicas"]),
                      f"{p['goodput_rps_per_instance']:.3g} req/s", _money(p["usd_per_hour"]), f"{p['power_w'] / 1e3:.2f}")
    base = doc["colocated_baseline"]
    if base is not None and doc["decision"] == "disaggregated":
        table.add_row("colocated baseline", base["gpu"], str(base["tp"]), str(base["pp"]), str(base["replicas"]),
                      f"{base['goodput_rps_per_instance']:.3g} req/s", _money(base["cost_per_hour"]),
                      f"{base['power_w'] / 1e3:.2f}")
    stdout.print(table)


def _facts_table(report: PlanReport, doc: dict) -> None:
    table = Table(show_header=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("GPUs / cost / power", f"{doc['gpus_total']} / {_money(doc['cost_per_hour'])} per hour / "
                                         f"{doc['power_w'] / 1e3:.2f} kW")
    table.add_row("goodput (min over phases)", f"{doc['goodput_rps']:.3g} req/s, {doc['goodput_per_gpu']:.3g} per GPU")
    if doc["margin"] is not None:
        other = "colocated" if doc["decision"] == "disaggregated" else "disaggregated"
        table.add_row(f"margin over {other}", f"{doc['margin']:+.1%} ({doc['solver']['objective_name']})")
    a = doc["attainment"]
    table.add_row("end-to-end attainment", f"TTFT {a['ttft']:.3f}, TPOT {a['tpot']:.3f}, joint {a['joint']:.3f} "
                                           f"({'meets' if doc['meets_slo'] else 'MISSES'} the SLO)")
    headroom = "" if doc["headroom"] is None else f" ({doc['headroom']:+.0%} over the target)"
    table.add_row("end-to-end goodput", f"{doc['end_to_end_goodput_rps']:.3g} req/s{headroom}, the whole plan simulated")
    table.add_row("end-to-end rounds", str(len(doc["rounds"])))
    s = doc["solver"]
    table.add_row("solver", f"{s['status']}, objective {s['objective']:.6g}, bound {s['bound']:.6g}, "
                            f"gap {s['gap']:.2%}, {s['wall_s'] * 1e3:.0f} ms")
    table.add_row("goodput cache", f"{doc['cache']['hits']} hits, {doc['cache']['misses']} computed")
    stdout.print(table)


def _links_table(doc: dict) -> None:
    if not doc["links"]:
        return
    table = Table(title="KV links (demand at the target rate vs the placed path)")
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
            nodes.setdefault(placed["node"], []).append(f"{label} ({gpus[0]}-{gpus[-1]})")
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
        for mode in (fleet.disaggregated, fleet.colocated):
            rejections = () if mode.solution is None else mode.solution.rejections
            lines += [f"{rej.candidate.label}: {rej.reason}" for rej in rejections if rej.family != "fleet"]
    for line in dict.fromkeys(lines):
        stdout.print(f"  {line}", markup=False, highlight=False)
