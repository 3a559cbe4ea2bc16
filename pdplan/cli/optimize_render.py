"""What ``pdplan optimize`` prints: the answer, its verification and search, every fleet, the chosen
plan, its facts, KV links and node map; or, without an answer, the closest plan and what it misses."""

from __future__ import annotations

from collections import Counter

from rich.table import Table

from pdplan.cli.output import money, number, print_json, stderr, stdout
from pdplan.engines import pair_refusal
from pdplan.latency.accuracy import accuracy_lines
from pdplan.planner import PlanReport
from pdplan.planner.pipeline import unpairable
from pdplan.shape import shape_label
from pdplan.verify import MAX_RUN_REQUESTS
from pdplan.wording import counted


def render(report: PlanReport, doc: dict, explain: bool, as_json: bool) -> None:
    """The document as JSON; or the answer; or, without one, the closest plan and what it misses."""
    if as_json:
        print_json(doc)
    elif report.answer is None:
        render_miss(report, doc)
    else:
        _answer(report, doc, explain)


def _answer(report: PlanReport, doc: dict, explain: bool) -> None:
    target = doc["target_rps"]
    fleet = doc["fleet"] + (f" ({doc['fleet_alias']})" if doc["fleet_alias"] else "")
    decision = doc["decision"] + (" with a mixed pool" if doc["mixed"] else "") + (
        " with borrowing" if doc.get("borrow") else "")
    head = (f"{report.request.model.name}: {decision} on fleet {fleet}"
            + (f" at {target:.3g} req/s" if target else ""))
    stdout.print(f"[bold]{head}[/bold]  ({'; '.join(o.label for o in report.request.slo.objectives)})",
                 highlight=False)
    stdout.print(verification_line(doc["verification"]), markup=False, highlight=False)
    stdout.print(search_line(doc), markup=False, highlight=False)
    stdout.print(_profiles_line(doc), markup=False, highlight=False)
    for line in accuracy_lines(p["profile_accuracy"] for p in doc["pools"]):
        stdout.print(line, markup=False, highlight=False)
    _fleets_table(doc)
    _plan_table(doc)
    _facts_table(doc)
    _links_table(doc)
    nodes_table(doc)
    _mixed_line(doc)
    _borrowing_line(doc)
    if explain:
        _explain(report)


def _mixed_line(doc: dict) -> None:
    """With --mixed: the best verified plan with Splitwise's mixed pool against the plain P/D plan."""
    found = doc.get("mixed_pool")
    if found is None:
        return
    plain = _plain_line(found["baseline"])
    if not found["found"]:
        stdout.print(f"mixed pool: no plan with mixed machines is better and passes end to end; {plain}",
                     markup=False, highlight=False)
        return
    shape = found["mixed_shape"]
    j = found["verification"]["joint"]
    verdict = "the answer" if found["chosen"] else "not the answer (another mode or fleet is better)"
    stdout.print(f"mixed pool: {found['prefill']} prefill + {found['decode']} decode + {found['mixed']} mixed "
                 f"({label(shape, compact=True)}"
                 f", chunk {shape['chunk_tokens']}), {money(found['cost_per_hour'])} per hour, PASSES end to end "
                 f"(joint {j['mean']:.3f} [{j['low']:.3f}, {j['high']:.3f}]; spill above {found['spill_tokens']} "
                 f"queued prompt tokens), {verdict}; {plain}", markup=False, highlight=False)
    if found["chosen"]:
        stdout.print("  no router the exports deploy runs the spill rule this was verified under, so export refuses "
                     "a mixed pool: plan without --mixed to deploy", markup=False, highlight=False)


def _plain_line(base: dict | None) -> str:
    """The plain P/D plan a mixed pool or borrowing is compared with."""
    return "no plain P/D plan passes" if base is None else (
        f"plain P/D: {base['prefill']} prefill + {base['decode']} decode, {money(base['cost_per_hour'])} per hour")


def _borrowing_line(doc: dict) -> None:
    """With --borrow: the best verified plan whose machines may be lent, against the plain P/D plan."""
    found = doc.get("borrowing")
    if found is None:
        return
    plain = _plain_line(found["baseline"])
    if not found["found"]:
        stdout.print(f"borrowing: no plan with lent machines passes end to end; {plain}", markup=False,
                     highlight=False)
        return
    j = found["verification"]["joint"]
    lent = found["lent_work"] or {}
    verdict = "the answer" if found["chosen"] else "not the answer (another plan is as good or better)"
    stdout.print(f"borrowing: {found['prefill']} prefill + {found['decode']} decode, "
                 f"{money(found['cost_per_hour'])} per hour, PASSES end to end (joint {j['mean']:.3f} "
                 f"[{j['low']:.3f}, {j['high']:.3f}]; lent above {found['spill_tokens']} queued prompt tokens or at "
                 f"{found['kv_share']:.0%} of decode KV: {lent.get('whole_requests_on_decode', 0)} requests run whole "
                 f"on decode machines, {lent.get('whole_requests_on_prefill', 0)} whole and "
                 f"{lent.get('decodes_on_prefill', 0)} decodes on prefill machines), {verdict}; {plain}",
                 markup=False, highlight=False)
    if found["chosen"]:
        stdout.print("  no router the exports deploy lends machines between phases, so export refuses this plan: "
                     "plan without --borrow to deploy", markup=False, highlight=False)


def _profiles_line(doc: dict) -> str:
    """Which evidence timed the chosen plan's shapes, and why a shape fell back to the roofline."""
    parts = []
    for p in doc["pools"]:
        text = f"{label(p)} {p['profile']}"
        if p["profile_fallback"]:
            text += f" ({p['profile_fallback']})"
        if text not in parts:
            parts.append(text)
    return (f"profiles: {'; '.join(parts)} — {doc['provenance']['profile_sources']}; shapes held to "
            f"{doc['serving_engine']}'s start-up rules")


def render_miss(report: PlanReport, doc: dict) -> None:
    """No plan passed: say so, show the fleets and the closest plan with what it misses."""
    stderr.print(f"No plan passes the end-to-end simulation within {counted(report.request.max_checks, 'check')} "
                 "per fleet, mode and affinity; nothing was written.", markup=False, highlight=False)
    _fleets_table(doc)
    closest = doc["closest"]
    if closest is None:
        return
    table = Table(title="Closest plan (it MISSES the SLO)")
    for name in ("phase", "GPU", "TP", "PP", "replicas"):
        table.add_column(name, justify="right")
    for p in closest["pools"]:
        table.add_row(p["phase"], p["gpu"], tp_cell(p), str(p["pp"]), str(p["replicas"]))
    stdout.print(table)
    stdout.print(f"{closest['gpus_total']} GPUs, {money(closest['cost_per_hour'])} per hour", highlight=False)
    stdout.print(verification_line(closest["verification"]), markup=False, highlight=False)
    for miss in closest["misses"]:
        stdout.print(f"  misses {miss}", markup=False, highlight=False)


def verification_line(v: dict) -> str:
    runs = len(v["seeds"])
    rule = ("each objective's 95% interval lower end meets its target" if v["rule"] == "lower"
            else "each objective's mean meets its target")
    objectives = "; ".join(f"{o['metric'].upper()} <= {o['threshold_s'] * 1e3:g} ms: {o['mean']:.3f} "
                           f"[{o['low']:.3f}, {o['high']:.3f}] vs {o['target']:g}" for o in v["per_objective"])
    j = v["joint"]
    verdict = "PASSES" if v["passed"] else "MISSES"
    losses = (f"; survives {counted(len(v['losses']), 'distinct loss', 'distinct losses')}"
              if v["losses"] and v["passed"] else "")
    return (f"verification: {verdict} at {v['rate_rps']:.3g} req/s on {counted(runs, 'run')} × "
            f"{v['requests'][0]:,} requests{run_length(v)} (seeds {', '.join(map(str, v['seeds']))}; rule: {rule}): "
            f"{objectives}; joint {j['mean']:.3f} [{j['low']:.3f}, {j['high']:.3f}]{losses}")


def run_length(v: dict) -> str:
    """How a verification's trace was stretched to its runs: repeated back to back to last the duration asked,
    or, where a run's most requests cut it (``run_s`` short of ``min_run_s``), as long as they hold."""
    copies = v.get("trace_copies", 1)
    held = v.get("run_s")  # absent from documents written before it was recorded
    repeated = f"the trace {copies}× back to back" if copies > 1 else "the trace once"
    if held is not None and held < v["min_run_s"] - 1e-6:
        return (f", {repeated}: {held:.0f} s of arrivals a run, short of the {v['min_run_s']:g} s asked "
                f"({MAX_RUN_REQUESTS:,} requests a run at most)")
    return f", {repeated} so a run lasts at least {v['min_run_s']:g} s" if copies > 1 else ""


def search_line(doc: dict) -> str:
    s = doc["search"]
    name = doc["solver"]["objective_name"]
    if s["program_estimate"] is None or s["verified"] is None:
        return f"search: {counted(s['checks'], 'end-to-end check')}"
    proof = ("no cheaper plan above the search floor passes" if s["proven"]
             else "the check budget ran out before cheaper plans were ruled out")
    gap = "" if s["gap"] is None else f", gap {s['gap']:+.1%}"
    if s["gap"] is not None and round(s["gap"], 3) < 0:  # a gap that prints as -0.0% is rounding
        gap += ", the simulation passed a plan the program counts short"
    return (f"search: integer-program estimate {objective_text(s['program_estimate'], name)} (from pool capacities, "
            f"not a bound), "
            f"verified {objective_text(s['verified'], name)}{gap} "
            f"({counted(s['checks'], 'check')}, "
            f"{counted(doc['run']['end_to_end_simulations'], 'end-to-end simulation')} run; {proof})")


def objective_text(value: float, name: str, signed: bool = False) -> str:
    """A value of the objective ``name``: dollars per hour for cost, else the number."""
    if name != "cost":
        return f"{value:{'+' if signed else ''}.4g}"
    return ("-" if value < 0 else "+" if signed else "") + money(abs(value))


def shapes_text(pool: dict | None) -> str:
    """Every shape of a pool with its replicas: ``h100-80gb TP4×2 + a100-80gb TP8 PP2×1``."""
    if pool is None:
        return "—"
    return " + ".join(f"{label(s, compact=True)}×{s['replicas']}"
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


def label(shape: dict, *, compact: bool = False) -> str:
    """A JSON shape's label, with its DP and EP when it has them (:func:`pdplan.shape.shape_label`)."""
    return shape_label(shape["gpu"], shape["tp"], shape["pp"], dp=shape.get("dp", 1), ep=shape.get("ep", 1),
                       compact=compact)


def tp_cell(shape: dict) -> str:
    """The TP column of a JSON shape: its TP, and a wide shape's attention DP and EP beside it, with the redundant
    expert slots EPLB spreads over the EP ranks."""
    slots = f" +{shape['redundant_experts']} slots" if shape.get("redundant_experts") else ""
    return str(shape["tp"]) + (f" DP{shape['dp']} EP{shape['ep']}{slots}" if "dp" in shape else "")


def _plan_table(doc: dict) -> None:
    table = Table(title=f"Chosen plan ({doc['decision']}, {doc['affinity'] or 'high'} node affinity)")
    for name in ("phase", "GPU", "TP", "PP", "replicas", "goodput/instance", "pool capacity", "$/h", "kW", "profile"):
        table.add_column(name, justify="right")
    for p in doc["pools"]:
        phase = p["phase"] + (f" (chunk {p['chunk_tokens']})" if p["chunk_tokens"] else "")
        table.add_row(phase, p["gpu"], tp_cell(p), str(p["pp"]), str(p["replicas"]),
                      f"{p['goodput_rps_per_instance']:.3g} req/s", f"{p['capacity_rps']:.3g} req/s",
                      money(p["usd_per_hour"]), f"{p['power_w'] / 1e3:.2f}", p["profile"])
    base = doc["colocated_baseline"]
    if base is not None and doc["decision"] == "disaggregated":
        for s in base["shapes"]:
            table.add_row("colocated baseline", s["gpu"], tp_cell(s), str(s["pp"]), str(s["replicas"]),
                          f"{s['goodput_rps_per_instance']:.3g} req/s", f"{s['capacity_rps']:.3g} req/s", "", "")
        table.add_row("colocated baseline total", "", "", "", "", "", "", money(base["cost_per_hour"]),
                      f"{base['power_w'] / 1e3:.2f}")
    stdout.print(table)
    stdout.print("  pool capacity: the goodput of all its replicas behind the router, simulated; it can exceed "
                 "replicas × goodput/instance, since pooled replicas absorb each other's bursts",
                 markup=False, highlight=False)


def tp_only_text(doc: dict) -> str:
    """The best TP x PP plan beside a wide answer, in one cell."""
    base = doc["tp_only_baseline"]
    if not base["found"]:
        return f"no plan passes: {base['reason']}"
    shapes = " + ".join(f"{s['replicas']} × {label(s, compact=True)}" for phase in ("prefill", "decode", "colocated")
                        if base[phase] is not None for s in base[phase]["shapes"])
    name = doc["solver"]["objective_name"]
    saves = "" if base["wide_saves"] is None else f"; going wide saves {base['wide_saves']:.1%} ({name})"
    return (f"{base['decision']}: {shapes}, {base['gpus_total']} GPUs, {money(base['cost_per_hour'])} per hour, "
            f"verified{saves}")


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
        table.add_row(f"margin over {other['decision']}",
                      f"{doc['margin']:+.1%} ({doc['solver']['objective_name']}, both verified; "
                      f"the best {other['decision']} plan, on {fleet})")
    reduced = doc.get("colocated_fallback")
    if reduced is not None:
        table.add_row("colocated fallback (rollback)",
                      f"no colocated plan meets the target on this cluster; the strongest serves "
                      f"{reduced['rate_rps']:.4g} req/s ({reduced['rate_rps'] / doc['target_rps']:.0%} of the "
                      f"target) on {reduced['gpus_total']} GPUs, verified; the manifest registers it")
    if doc.get("colocated_fallback_missing") is not None:
        table.add_row("colocated fallback (rollback)",
                      f"none: {doc['colocated_fallback_missing']}; the manifest registers no fallback, so validate and "
                      "export refuse it until one can be (a looser SLO, other GPUs)")
    if doc.get("tp_only_baseline") is not None:
        table.add_row("without attention DP / EP", tp_only_text(doc))
    headroom = "" if doc["headroom"] is None else f" ({doc['headroom']:+.0%} over the target)"
    table.add_row("end-to-end goodput", f"{doc['end_to_end_goodput_rps']:.3g} req/s{headroom}, the whole plan verified")
    run = doc.get("simulation") or {}
    if "prefix_cache" in run:
        table.add_row("prefill prefix cache", f"{run['prefix_cache']['hit_rate']:.1%} of prompt tokens hit "
                                              f"(the first verification run)")
    if run.get("rejected_early"):
        table.add_row("rejected early", f"{run['rejected_early']:,} of {run['requests']:,} requests (predicted TTFT "
                                        f"miss; counted as misses)")
    red = doc["redundancy"]
    if red["mode"] != "none":
        worst = red.get("worst_case")
        text = ("—" if worst is None
                else f"worst loss: {worst['lost']} (short by {max(0.0, worst['worst_shortfall']):.3f})")
        if "redundancy_costs" in red:
            name, free = doc["solver"]["objective_name"], red["without_redundancy"]
            text += (f"; redundancy costs {objective_text(red['redundancy_costs'], name, signed=True)} ({name}) "
                     f"over the answer without it ({free['gpus_total']} GPUs, {objective_text(free['value'], name)})")
        table.add_row(f"redundancy ({red['mode']})", text)
    s = doc["solver"]
    table.add_row("solver", f"{s['status']}, objective {s['objective']:.6g}, bound {s['bound']:.6g}, "
                            f"gap {s['gap']:.2%}")
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


def nodes_table(doc: dict) -> None:
    table = Table(title="Node map")
    for name in ("node", "instances (GPU indices on the node)"):
        table.add_column(name)
    nodes: dict[str, list[str]] = {}
    for inst in doc["nodes"]:
        for stage, placed in enumerate(inst["stages"]):
            label = f"{inst['instance']}" + (f" stage {stage}" if inst["pp"] > 1 else "")
            nodes.setdefault(placed["node"], []).append(f"{label} ({_gpu_indices(placed['gpus'])})")
    for node in sorted(nodes, key=lambda n: (n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1]))):
        table.add_row(node, ", ".join(nodes[node]))
    stdout.print(table)


def _gpu_indices(gpus: list[int]) -> str:
    """``GPU 4``, ``GPUs 0-3`` for a run of indices, ``GPUs 5,7`` for any other set."""
    if len(gpus) == 1:
        return f"GPU {gpus[0]}"
    if gpus == list(range(gpus[0], gpus[-1] + 1)):
        return f"GPUs {gpus[0]}-{gpus[-1]}"
    return "GPUs " + ",".join(map(str, gpus))


def _kept_apart(report: PlanReport) -> list[str]:
    """One line per engine rule that keeps prefill and decode shapes out of one plan, with how many
    pairs it keeps apart (a pair each would be hundreds of lines)."""
    request = report.request
    pairs = Counter(pair_refusal(request.profiles.serving_engine, request.connector, p, d).rsplit(" (", 1)[0]
                    for p, d in unpairable(request, report.candidates))
    return [f"{counted(n, 'prefill and decode pair')} kept apart: {why}" for why, n in sorted(pairs.items())]


def _explain(report: PlanReport) -> None:
    """One line per unused shape, and per prefill and decode pair the engine cannot run together, so
    reasons are never cut or wrapped into a cell."""
    stdout.print("[bold]Shapes not used, and why[/bold]")
    lines = [f"{r.shape.label}: {r.reason}" for r in report.rejected]
    lines += [f"{m.shape.label}: no rate meets the SLO on one instance (goodput 0)"
              for m in report.measured if m.goodput.goodput_rps <= 0]
    for fleet in report.fleets:  # fleet rules are the user's choice; list links and inventory only
        for result in (fleet.disaggregated, fleet.colocated):
            rejections = () if result.first is None else result.first.rejections
            lines += [f"{rej.candidate.label}: {rej.reason}" for rej in rejections if rej.family != "fleet"]
    lines += _kept_apart(report)
    for line in dict.fromkeys(lines):
        stdout.print(f"  {line}", markup=False, highlight=False)
