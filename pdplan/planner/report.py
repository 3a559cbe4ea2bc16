"""The ``pdplan optimize --json`` documents: the answer, its verification, every fleet, and where
each number comes from; with ``--windows``, the schedule, its windows and timeline."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pdplan.fileio import significant
from pdplan.handoff import handoff_copies
from pdplan.latency.accuracy import as_dict
from pdplan.placement import Candidate, Solution
from pdplan.planner.measure import mean_kv_bytes_per_request
from pdplan.planner.pipeline import FleetResult, PlanReport
from pdplan.planner.plans import link_path, pool_name
from pdplan.planner.request import PlanRequest
from pdplan.planner.search import SEARCH_FLOOR, Checked, SearchResult
from pdplan.shape import wide_slots
from pdplan.verify import Verification, run_copies, run_seconds
from pdplan.wording import counted

if TYPE_CHECKING:  # the schedule package builds on the planner: its types only annotate here
    from pdplan.schedule import VerifiedSchedule, WindowedReport
    from pdplan.schedule.timeline import Timeline


def wide_dict(shape) -> dict:
    """A wide shape's attention data-parallel size and expert-parallel size (nothing for TP x PP), with both above 1
    how its tokens reach the experts (:class:`pdplan.vocabulary.AllToAll`), and the requests a rank runs at most
    where its engine holds it below its KV (:func:`pdplan.engines.running_cap`)."""
    if not shape.is_wide:
        return {}
    exchange = {"all_to_all": str(shape.all_to_all)} if shape.exchanges_tokens else {}
    cap = shape.max_running_requests
    return {"dp": shape.dp, "ep": shape.ep, **exchange, **({} if cap is None else {"max_running_requests": cap})}


def shape_dict(cand: Candidate, replicas: int) -> dict:
    return {"gpu": cand.gpu, "tp": cand.tp, "pp": cand.pp, **wide_dict(cand), "replicas": replicas,
            "goodput_rps_per_instance": cand.goodput_rps, "capacity_rps": cand.capacity_rps(replicas)}


def phase_dict(solution: Solution | None, phase: str) -> dict | None:
    """A phase's pool: its main shape (most GPUs) and every shape with its replicas under
    ``shapes``; ``capacity_rps`` is the pool capacity the program counted."""
    if solution is None:
        return None
    shapes = sorted(((c, k) for c, k in solution.replicas.items() if c.phase == phase),
                    key=lambda ck: (-ck[0].gpus * ck[1], ck[0].gpu, ck[0].tp, ck[0].pp, ck[0].dp, ck[0].ep))
    if not shapes:
        return None
    cand, replicas = shapes[0]
    own = sum(c.capacity_rps(k) for c, k in shapes)  # a mixed pool's own capacity; it also counts in both phases
    return {"gpu": cand.gpu, "tp": cand.tp, "pp": cand.pp, **wide_dict(cand), "replicas": replicas,
            "goodput_rps_per_instance": cand.goodput_rps, "capacity_rps": solution.phase_capacity_rps.get(phase, own),
            "shapes": [shape_dict(c, k) for c, k in shapes]}


def profile_dict(report: PlanReport, phase: str, gpu: str, tp: int, pp: int, dp: int = 1, ep: int = 1) -> dict:
    """Where a shape's latencies came from (the profile its goodput was measured with): measured,
    composed or roofline, how, for a roofline why nothing better was available, and how far that
    source's clocks were from measured deployments like the pool (None where none were replayed)."""
    profile = next(m.profile for m in report.measured
                   if (m.shape.gpu, m.shape.tp, m.shape.pp, m.shape.dp, m.shape.ep) == (gpu, tp, pp, dp, ep))
    prov, request = profile.provenance, report.request
    return {"profile": prov.source, "profile_method": prov.method,
            "profile_fallback": request.profiles.fallback_reason(request.model.name, gpu, tp, pp, dp=dp, ep=ep),
            "profile_accuracy": as_dict(request.profiles.accuracy(profile, request.model, phase, dp))}


def fallback_missing(report: PlanReport) -> str:
    """Why a P/D answer has no colocated plan to register as its rollback's fallback: its fleet's colocated search
    found none at the target, and none passes at any lower rate either (:func:`pdplan.planner.pipeline.
    reduced_fallback`)."""
    return report.fleet.colocated.reason or "no colocated plan passed"


def pools(solution: Solution, report: PlanReport) -> list[dict]:
    """Each pool of the plan: its shape, cost, power and profile, and the redundant expert slots a wide one holds."""
    cluster, redundant = report.request.cluster, report.request.redundant_experts
    return [{"phase": c.phase, **shape_dict(c, k),
             **({"redundant_experts": slots} if (slots := wide_slots(c.dp, redundant)) else {}),
             "chunk_tokens": c.chunk_tokens,
             "usd_per_hour": cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus * k,
             "power_w": cluster.priced_gpu(c.gpu).tdp_w * c.gpus * k,
             **profile_dict(report, c.phase, c.gpu, c.tp, c.pp, c.dp, c.ep)}
            for c, k in sorted(solution.replicas.items(),
                               key=lambda ck: (ck[0].phase, ck[0].gpu, ck[0].tp, ck[0].pp, ck[0].dp, ck[0].ep))]


def links_dict(request: PlanRequest, checked: Checked, affinity: str) -> list[dict]:
    """KV demand and capacity per (prefill pool, decoding pool) link of a disaggregated plan.

    Demand: the checked rate's KV bytes (mean prompt × KV bytes per token, 0x08D, times the copies the decoding
    pool's TP ranks each take, :func:`pdplan.handoff.handoff_copies`) split over decode pools by their capacity
    share; a mixed pool takes decodes only when they spill, so its link is charged the most it could take, its own
    capacity's worth, while the decode pools keep the whole demand. Capacity: the pool's ingress on the path the
    placement uses (``plans.link_path``). ``*_gbps`` are gigabits per second (network units), ``*_gb_s`` gigabytes
    per second.
    """
    plan, solution = checked.plan, checked.solution
    if plan.colocated:
        return []
    rate = checked.verification.rate_rps
    kv_bytes = mean_kv_bytes_per_request(request.workload, request.model)
    decoding = {p.name: p for p in plan.pools if p.phase in ("decode", "mixed")}
    prefill = [p for p in plan.pools if p.phase == "prefill"]
    capacity_rps = {pool_name(c): c.capacity_rps(k) for c, k in solution.replicas.items()}
    shapes = {pool_name(c): c for c in solution.replicas}
    decode_rps = sum(capacity_rps[name] for name, p in decoding.items() if p.phase == "decode")
    prefill_share = {p.name: p.replicas / sum(q.replicas for q in prefill) for p in prefill}
    out = []
    for link in plan.links:
        if decoding[link.to_pool].phase == "mixed":
            carried = min(rate, capacity_rps[link.to_pool])
        else:
            carried = rate * capacity_rps[link.to_pool] / decode_rps
        copies = handoff_copies(request.model, decoding[link.to_pool].tp)
        demand = carried * kv_bytes * copies * prefill_share[link.from_pool]
        capacity = link.bandwidth_bytes_per_s * decoding[link.to_pool].replicas
        out.append({"from": link.from_pool, "to": link.to_pool,
                    "demand_gbps": demand * 8 / 1e9, "capacity_gbps": capacity * 8 / 1e9,
                    "demand_gb_s": demand / 1e9, "capacity_gb_s": capacity / 1e9, "kv_copies": copies,
                    "utilization": demand / capacity,
                    "path": link_path(solution, affinity, shapes[link.from_pool], shapes[link.to_pool])})
    return out


def plan_summary(request: PlanRequest, checked: Checked, affinity: str) -> dict:
    """A checked plan's totals and verdict, as fleet rows and alternatives show it."""
    solution, verification = checked.solution, checked.verification
    links = links_dict(request, checked, affinity)
    return {"gpus_total": solution.gpus_total, "cost_per_hour": solution.usd_per_hour, "power_w": solution.power_w,
            "goodput_rps": solution.goodput_rps, "goodput_per_gpu": solution.goodput_rps / solution.gpus_total,
            "prefill": phase_dict(solution, "prefill"), "decode": phase_dict(solution, "decode"),
            "colocated": phase_dict(solution, "colocated"), "mixed": phase_dict(solution, "mixed"),
            "attainment": {k: v.mean for k, v in verification.clocks.items()},
            "meets_slo": verification.passed, "worst_shortfall": max(0.0, verification.worst_shortfall),
            "link_utilization": max((link["utilization"] for link in links), default=None)}


def misses(checked: Checked) -> list[str]:
    """What a plan misses, one phrase per objective (and per loss it does not survive)."""
    out = []
    verification = checked.verification
    how = "the first run, which settles the miss" if verification.settled_early else verification.rule
    for o in verification.per_objective:
        if not o.passed:
            out.append(f"{o.objective.label}: {o.judged:.3f} ({how}) against "
                       f"{o.objective.attainment:g}, short by {o.shortfall:.3f}")
    out += [f"with {loss.lost} lost: short by {loss.worst_shortfall:.3f}"
            for loss in verification.losses if not loss.passed]
    return out


def search_dict(result: SearchResult, objective: str) -> dict:
    estimate = None if result.first is None else result.first.bound
    return {"lower_bound": estimate, "program_estimate": estimate, "is_bound": False,
            "verified": None if result.best is None else result.best.value(objective),
            "gap": result.gap(objective), "checks": len(result.tried), "proven": result.proven,
            "floor": SEARCH_FLOOR}


def fleet_row(fleet: FleetResult, request: PlanRequest) -> dict:
    """A fleet is a P/D provisioning coordinate (0x08K): its disaggregated verified optimum (or
    the plan that missed least, or why it has none), and the colocated plan on the same GPUs."""
    disagg, colocated = fleet.disaggregated, fleet.colocated
    shown = disagg.best or disagg.closest
    row = {"fleet": fleet.fleet.name, "alias": fleet.fleet.alias,
           "feasible": disagg.first is not None or disagg.best is not None,
           "verified": disagg.best is not None, "affinity": disagg.affinity if shown else None}
    if shown is not None:
        row.update(plan_summary(request, shown, disagg.affinity))
    else:
        row.update({key: None for key in ("gpus_total", "cost_per_hour", "power_w", "goodput_rps", "goodput_per_gpu",
                                          "prefill", "decode", "attainment", "meets_slo", "link_utilization")})
    row["reason"] = _why_none(disagg)

    row["search"] = search_dict(disagg, request.objective)
    row["colocated_reason"] = _why_none(colocated)
    best_colocated = colocated.best
    row["colocated_cost_per_hour"] = None if best_colocated is None else best_colocated.solution.usd_per_hour
    row["colocated_gpus_total"] = None if best_colocated is None else best_colocated.solution.gpus_total
    row["colocated_pool"] = None if best_colocated is None else phase_dict(best_colocated.solution, "colocated")
    row["best_mode"] = None if fleet.best is None else fleet.best.mode
    mixed = None if fleet.mixed is None else fleet.mixed.best
    row["mixed_cost_per_hour"] = None if mixed is None else mixed.solution.usd_per_hour
    row["mixed_gpus_total"] = None if mixed is None else mixed.solution.gpus_total
    lent = None if fleet.borrowing is None else fleet.borrowing.best
    row["borrowing_cost_per_hour"] = None if lent is None else lent.solution.usd_per_hour
    row["borrowing_gpus_total"] = None if lent is None else lent.solution.gpus_total
    return row


def _why_none(result: SearchResult) -> str | None:
    """Why a search has no verified plan: the program's reason, and how close the plans tried came."""
    if result.best is not None:
        return None
    closest = result.closest
    checks = counted(len(result.tried), "end-to-end check")
    tried = "" if closest is None else (f"no {result.mode} plan passed in {checks}; "
                                        f"closest: " + "; ".join(misses(closest)))
    return "; ".join(part for part in (result.reason, tried) if part)


def _redundancy(report: PlanReport) -> dict:
    request, answer = report.request, report.answer
    doc = {"mode": request.redundancy}
    if request.redundancy == "none":
        return doc
    losses = answer.verification.losses
    worst = max(losses, key=lambda loss: loss.worst_shortfall, default=None)
    doc["losses"] = [loss.to_dict() for loss in losses]
    doc["worst_case"] = None if worst is None else worst.to_dict()
    free = report.without_redundancy
    if free is not None and free.best is not None:
        ours, theirs = answer.value(request.objective), free.best.value(request.objective)
        doc["without_redundancy"] = {"value": theirs, "gpus_total": free.best.solution.gpus_total,
                                     "fleet": free.fleet.name, "decision": free.mode}
        doc["redundancy_costs"] = ours - theirs
    return doc


def tp_only_dict(report: PlanReport) -> dict | None:
    """The best plan without attention DP or expert parallelism, beside a wide answer: its shapes,
    totals and verdict, and how much more it costs by the objective (None: the answer is not wide)."""
    found = report.tp_only
    if found is None:
        return None
    if found.best is None:
        closest = found.closest
        reason = found.reason or "no plan of TP x PP shapes passed end to end"
        if closest is not None:
            reason = (f"the closest plan of TP x PP shapes ({found.mode}, {closest.solution.gpus_total} GPUs) misses "
                      f"{'; '.join(misses(closest))}")
        return {"found": False, "reason": reason}
    objective = report.request.objective
    ours, theirs = report.answer.value(objective), found.best.value(objective)
    saving = (ours - theirs if objective == "goodput" else theirs - ours) / theirs if theirs else None
    return {"found": True, "decision": found.mode, "fleet": found.fleet.name,
            **plan_summary(report.request, found.best, found.affinity), "wide_saves": saving}


def verification_dict(request: PlanRequest, verification: Verification) -> dict:
    """A verdict with how long its runs were made: the least duration asked, how many times the
    trace repeats back to back to last it, and the seconds of arrivals a run then holds (``run_s``,
    short of the duration asked where a run's most requests cut the repeats)."""
    requests, rate = len(request.workload), verification.rate_rps
    return verification.to_dict() | {
        "min_run_s": request.min_run_s, "trace_copies": run_copies(requests, rate, request.min_run_s),
        "run_s": run_seconds(requests, rate, request.min_run_s)}


def report_to_dict(report: PlanReport) -> dict:
    """The ``pdplan optimize --json`` document; every number says how it was obtained in
    ``provenance``. Without an answer, ``decision`` is null and ``closest`` is the plan that
    missed least."""
    request = report.request
    model = request.model
    doc = {"decision": None, "model": model.name,
           "precision": {"weights": model.weight_dtype, "kv_cache": model.kv_dtype},
           "engine": request.profiles.engine, "serving_engine": request.profiles.serving_engine,
           "target_rps": request.target_rps, "slo": request.slo.to_dict(),
           "fleets": [fleet_row(f, request) for f in report.fleets]}
    if report.answer is None:
        closest = report.closest
        doc["closest"] = None if closest is None else {
            **plan_summary(request, closest, "high"), "pools": pools(closest.solution, report),
            "verification": verification_dict(request, closest.verification), "misses": misses(closest)}
        doc.update(provenance=_provenance(report), run=_run(report))
        return doc
    chosen, answer = report.chosen, report.answer
    solution, verification = answer.solution, answer.verification
    fleet = report.fleet
    alternative = fleet.disaggregated.best if chosen.mode == "colocated" else None
    baseline = fleet.colocated.best
    doc.update({
        "decision": chosen.mode,
        "fleet": chosen.fleet.name,
        "fleet_alias": chosen.fleet.alias,
        "affinity": chosen.affinity,
        "prefill": phase_dict(solution, "prefill"),
        "decode": phase_dict(solution, "decode"),
        "mixed": phase_dict(solution, "mixed"),
        "borrow": answer.plan.borrow,
        "disaggregated_alternative": None if alternative is None else plan_summary(
            request, alternative, fleet.disaggregated.affinity),
        "colocated_baseline": None if baseline is None else {
            **phase_dict(baseline.solution, "colocated"), **plan_summary(request, baseline, "high")},
        "tp_only_baseline": tp_only_dict(report),
        "colocated_fallback": None if report.fallback is None else {
            **plan_summary(request, report.fallback.best, "high"),
            "rate_rps": report.fallback.best.verification.rate_rps},
        **({} if report.rollback is not None else {"colocated_fallback_missing": fallback_missing(report)}),
        "pools": pools(solution, report),
        "gpus_total": solution.gpus_total,
        "cost_per_hour": solution.usd_per_hour,
        "power_w": solution.power_w,
        "goodput_rps": solution.goodput_rps,
        "goodput_per_gpu": solution.goodput_rps / solution.gpus_total,
        "margin": report.margin,
        "margin_over": None if report.margin is None else {
            "decision": report.rival.mode, "fleet": report.rival.fleet.name, "fleet_alias": report.rival.fleet.alias,
            "value": report.rival.best.value(request.objective)},
        "attainment": {k: v.mean for k, v in verification.clocks.items()},
        "meets_slo": verification.passed,
        "verification": verification_dict(request, verification),
        "search": search_dict(chosen, request.objective),
        "end_to_end_goodput_rps": report.end_to_end.goodput_rps,
        "headroom": (None if not request.target_rps else report.end_to_end.goodput_rps / request.target_rps - 1),
        "redundancy": _redundancy(report),
        "links": links_dict(request, answer, chosen.affinity),
        "solver": {"status": solution.status, "objective": solution.objective, "bound": solution.bound,
                   "gap": solution.gap, "objective_name": request.objective},
        "rounds": [{"round": i + 1,
                    "pools": [shape_dict(c, k) | {"phase": c.phase}
                              for c, k in sorted(c.solution.replicas.items(), key=lambda ck: ck[0].label)],
                    "gpus_total": c.solution.gpus_total, "value": c.value(request.objective),
                    "attainment": {k: v.mean for k, v in c.verification.clocks.items()},
                    "meets": c.verification.passed}
                   for i, c in enumerate(chosen.tried)],
        "nodes": [{"instance": i.id, "phase": i.candidate.phase, "gpu": i.candidate.gpu, "tp": i.candidate.tp,
                   "pp": i.candidate.pp, **wide_dict(i.candidate), "stages": [{"node": n, "gpus": list(g),
                                                    **({"node_rank": r} if i.nodes_per_stage > 1 else {})}
                                                   for _, r, n, g in i.parts()]}
                  for i in solution.instances],
        "simulation": verification.summary,
        "mixed_pool": _mixed(report),
        "borrowing": _borrowing(report),
        "provenance": _provenance(report),
        "run": _run(report),
    })
    return doc


def _mixed(report: PlanReport) -> dict | None:
    """With --mixed, on the answer's fleet: the best verified plan that may add Splitwise's mixed
    machines, whether it is the answer, and the plain P/D plan it is compared with."""
    if not report.request.mixed:
        return None
    search = report.fleet.mixed
    doc = _beside_plain(report, search)
    found = search.best
    if found is None or not found.solution.mixed:  # the search's best may need no mixed machine at all
        return doc
    pool = found.plan.pools_of("mixed")[0]
    return doc | _counts(found) | {
        "found": True, "chosen": report.answer is found,
        "mixed_shape": {"gpu": pool.gpu, "tp": pool.tp, "pp": pool.pp, "chunk_tokens": pool.chunk_tokens},
        "spill_tokens": found.plan.spill_tokens, "kv_share": found.plan.kv_share,
        "max_mixed": report.request.mixed_max, "gpus_total": found.solution.gpus_total,
        "cost_per_hour": found.solution.usd_per_hour, "ledger_rps": found.solution.goodput_rps,
        "verification": verification_dict(report.request, found.verification), "checks": len(search.tried)}


def _borrowing(report: PlanReport) -> dict | None:
    """With --borrow, on the answer's fleet: the best verified plan whose dedicated machines may be
    lent to the other phase, whether it is the answer, and the plain P/D plan it is compared with."""
    if not report.request.borrow:
        return None
    search = report.fleet.borrowing
    doc = _beside_plain(report, search)
    found = search.best
    if found is None:
        return doc
    lent = found.verification.summary.get("borrowing", {})
    return doc | _counts(found) | {
        "found": True, "chosen": report.answer is found,
        "spill_tokens": found.plan.spill_tokens, "kv_share": found.plan.kv_share,
        "borrow_chunk_tokens": found.plan.borrow_chunk_tokens, "gpus_total": found.solution.gpus_total,
        "cost_per_hour": found.solution.usd_per_hour, "ledger_rps": found.solution.goodput_rps,
        "lent_work": lent or None,
        "verification": verification_dict(report.request, found.verification), "checks": len(search.tried)}


def _beside_plain(report: PlanReport, search: SearchResult) -> dict:
    """A search beside the plain P/D plan of the answer's fleet (mixed pool, borrowing), before
    anything it found: its search record, why it found nothing, and the plain plan."""
    plain = report.fleet.disaggregated.best
    return {"found": False, "chosen": False, "search": search_dict(search, report.request.objective),
            "reason": _why_none(search), "baseline": None if plain is None else _counts(plain) | {
                "gpus_total": plain.solution.gpus_total, "cost_per_hour": plain.solution.usd_per_hour}}


def _counts(checked: Checked) -> dict:
    """Instances per kind (prefill, decode, mixed) of a disaggregated plan."""
    return {kind: sum(k for c, k in checked.solution.replicas.items() if c.phase == kind)
            for kind in ("prefill", "decode", "mixed")}


def _run(report: PlanReport) -> dict:
    """What differs between two runs on the same inputs and seed (the cache and the clock), kept
    apart so that the rest of the document is byte-identical."""
    return {"cache": {"hits": report.cache_hits, "misses": report.cache_misses, "dir": report.cache_dir},
            "end_to_end_simulations": report.simulations,
            "solver_wall_s": None if report.answer is None else significant(report.answer.solution.wall_s, 2)}


def _provenance(report: PlanReport) -> dict:
    drafting = report.request.profiles.speculative_for(report.request.model)  # decode timed per emitted token
    return {
        "goodput_rps_per_instance": "simulated: bisection over the trace at each probed rate, one instance, "
                                    "the phase judged alone (DistServe's per-phase goodput)",
        "capacity_rps": "simulated: the same bisection for a pool of n replicas behind the router, sampled at "
                        "n = 1, 2, 4, ... and interpolated (never above a measured per-replica rate)",
        "gpus_total, cost_per_hour, power_w": "derived: replicas × shape GPUs × cluster price / power limit",
        "goodput_rps": "derived: min over phases of the pool capacities (the program's estimate)",
        "attainment, verification": "simulated: the whole plan, routing, KV transfer and admission included, on "
                                    "the trace replayed at the target rate and on Poisson resamples of it; "
                                    "95% t-intervals over the runs",
        "search.program_estimate (and search.lower_bound, its old name)": (
            "solved: the integer program's optimum at the target (CP-SAT) over pool capacities measured by "
            "simulation; an estimate, not a lower bound: the whole plan simulated may pass a plan the program "
            "counts short (gap below 0)"),
        "end_to_end_goodput_rps": "simulated: bisection over verified rates of the whole plan",
        "links": "derived: verified rate × mean prompt KV bytes vs the ingress of the placed path",
        "pools[].profile_accuracy": "derived: median and p90 of |simulated / measured − 1| and the median signed "
                                    "error of mean TTFT and TPOT over the rows of NVIDIA's silicon_sample.csv that "
                                    "benchmarks/silicon_validation.py replayed with the pool's source, engine, model "
                                    "family and layout (pdplan/data/silicon_accuracy.json); reported, never applied",
        "profiles": {m.shape.shape_label(): m.profile.provenance.source
                     for m in report.measured},
        "profile_sources": report.request.profiles.describe(),
        "speculative": None if drafting is None else drafting.to_dict(),
        "moe_activations": report.request.profiles.moe_activations,
    }


def schedule_to_dict(result: VerifiedSchedule | None) -> dict | None:
    """A verified schedule as JSON: shapes, totals and every window's replicas and verdict."""
    if result is None:
        return None
    s = result.schedule
    return {"kind": result.kind, "mode": s.mode, "passed": result.passed, "rounds": result.rounds,
            "shapes": {p: _shape(c) for p, c in s.shapes.items()}, "reshapes": s.reshapes,
            "usd": s.usd, "run_usd": s.run_usd, "change_usd": s.change_usd, "gpu_hours": s.gpu_hours,
            "solver_status": s.status, "missed_windows": list(result.missed),
            "windows": [{"window": c.window.index, "mode": s.modes[c.window.index],
                         "shapes": {p: _shape(shape) for p, shape in s.window_shapes[c.window.index].items()},
                         "replicas": s.replicas[c.window.index],
                         "joining": s.joins[c.window.index], "leaving": s.leaves[c.window.index],
                         "gpus": s.gpus(c.window.index),
                         "passed": c.verification.passed, "joint": c.verification.joint.mean,
                         "joint_low": c.verification.joint.low} for c in result.checks]}


def _shape(c) -> dict:
    return {"gpu": c.gpu, "tp": c.tp, "pp": c.pp, "chunk_tokens": c.chunk_tokens}


def bounds_to_dict(report: WindowedReport) -> dict | None:
    """What the schedule is judged against: each window planned alone and verified (as optimize
    would plan it), the program's own bound (each window alone at its rate, unverified), and the
    program held to one shape per phase all day."""
    if not report.window_optima:
        return None
    one = report.one_shape
    return {"windows_alone_usd": report.windows_alone_usd,
            "windows_alone": [{"window": v.checks[0].window.index, "mode": v.schedule.mode, "usd": v.schedule.usd,
                               "gpus": v.schedule.gpus(0), "rounds": v.rounds, "passed": v.passed,
                               "shapes": {p: _shape(c) for p, c in v.schedule.window_shapes[0].items()},
                               "replicas": v.schedule.replicas[0]}
                              for v in report.windows_alone],
            "window_optima_usd": report.window_optima_usd,
            "one_shape_usd": None if one is None else one.usd,
            "one_shape_mode": None if one is None else one.mode,
            "source": {"windows_alone": "solved and simulated: the windowed program over one window, its failing "
                                        "phase raised until the window passes end to end",
                       "window_optima_usd, one_shape_usd": "solved: the windowed program (CP-SAT) at each window's "
                                                           "rate over pool capacities measured by simulation; not "
                                                           "verified end to end"}}


def timeline_to_dict(timeline: Timeline | None) -> dict | None:
    """The whole schedule simulated with its changes drained first: every change and each window's verdict."""
    if timeline is None:
        return None
    return {"passed": timeline.passed, "passes": timeline.passes, "load_s": timeline.load_s,
            "changes": [{"window": c.window, "pool": c.pool, "replica": c.replica, "kind": c.kind, "at_s": c.at_s,
                         "ready_s": c.ready_s, "drain_s": c.drain_s, "took_gpus_of": c.took_gpus_of,
                         "steps": list(c.steps)} for c in timeline.changes],
            "windows": [{"window": v.window, "passed": v.passed, "joint": v.joint.mean, "joint_low": v.joint.low,
                         "objectives": [i.to_dict() for i in v.objectives]} for v in timeline.windows]}


def windowed_to_dict(report: WindowedReport) -> dict:
    """The ``pdplan optimize --windows --json`` document: the windows, the chosen schedule, each mode's,
    the static plans it is judged against, and the whole-schedule timeline."""
    chosen = report.chosen
    return {"decision": None if chosen is None else chosen.schedule.mode,
            "change_cost_gpu_minutes": report.change_gpu_minutes,
            "windows": [{"window": w.index, "start_s": w.start_s, "end_s": w.end_s, "requests": len(w.requests),
                         "mean_rps": w.mean_rps, "peak_rps": w.peak_rps, "rate_rps": w.rate_rps}
                        for w in report.windows],
            "schedule": schedule_to_dict(chosen),
            "by_mode": {mode: schedule_to_dict(s) for mode, s in report.schedules.items()},
            "reasons": report.reasons,
            "static_peak": schedule_to_dict(report.static_peak),
            "static_mean": schedule_to_dict(report.static_mean),
            "bounds": bounds_to_dict(report),
            "timeline": None if chosen is None else timeline_to_dict(chosen.timeline),
            "seeds": list(next(iter(c.verification.seeds for c in chosen.checks))) if chosen else []}
