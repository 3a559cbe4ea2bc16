"""The ``pdplan optimize --json`` document: the answer, its verification, every fleet, and where
each number comes from."""

from __future__ import annotations

from pdplan.fileio import significant
from pdplan.placement import Candidate, Solution
from pdplan.planner.measure import mean_kv_bytes_per_request
from pdplan.planner.pipeline import FleetResult, PlanReport
from pdplan.planner.plans import pool_name
from pdplan.planner.request import PlanRequest
from pdplan.planner.search import SEARCH_FLOOR, Checked, SearchResult


def shape_dict(cand: Candidate, replicas: int) -> dict:
    return {"gpu": cand.gpu, "tp": cand.tp, "pp": cand.pp, "replicas": replicas,
            "goodput_rps_per_instance": cand.goodput_rps, "capacity_rps": cand.capacity_rps(replicas)}


def phase_dict(solution: Solution | None, phase: str) -> dict | None:
    """A phase's pool: its main shape (most GPUs) and every shape with its replicas under
    ``shapes``; ``capacity_rps`` is the pool capacity the program counted."""
    if solution is None:
        return None
    shapes = sorted(((c, k) for c, k in solution.replicas.items() if c.phase == phase),
                    key=lambda ck: (-ck[0].gpus * ck[1], ck[0].gpu, ck[0].tp, ck[0].pp))
    if not shapes:
        return None
    cand, replicas = shapes[0]
    return {"gpu": cand.gpu, "tp": cand.tp, "pp": cand.pp, "replicas": replicas,
            "goodput_rps_per_instance": cand.goodput_rps, "capacity_rps": solution.phase_capacity_rps[phase],
            "shapes": [shape_dict(c, k) for c, k in shapes]}


def profile_dict(report: PlanReport, gpu: str, tp: int, pp: int) -> dict:
    """Where a shape's latencies came from (the profile its goodput was measured with): measured,
    composed or roofline, how, and for a roofline why nothing better was available."""
    prov = next(m.profile for m in report.measured
                if (m.shape.gpu, m.shape.tp, m.shape.pp) == (gpu, tp, pp)).provenance
    request = report.request
    return {"profile": prov.source, "profile_method": prov.method,
            "profile_fallback": request.profiles.fallback_reason(request.model.name, gpu, tp, pp)}


def pools(solution: Solution, report: PlanReport) -> list[dict]:
    cluster = report.request.cluster
    return [{"phase": c.phase, **shape_dict(c, k), "chunk_tokens": c.chunk_tokens,
             "usd_per_hour": cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus * k,
             "power_w": cluster.priced_gpu(c.gpu).tdp_w * c.gpus * k, **profile_dict(report, c.gpu, c.tp, c.pp)}
            for c, k in sorted(solution.replicas.items(), key=lambda ck: (ck[0].phase, ck[0].gpu, ck[0].tp, ck[0].pp))]


def links_dict(request: PlanRequest, checked: Checked, affinity: str) -> list[dict]:
    """KV demand and capacity per (prefill pool, decode pool) link of a disaggregated plan.

    Demand: the checked rate's KV bytes (mean prompt × KV bytes per token, 0x08D) split over
    decode pools by their capacity share; capacity: the pool's ingress on the path the placement
    uses. ``*_gbps`` are gigabits per second (network units), ``*_gb_s`` gigabytes per second.
    """
    plan, solution = checked.plan, checked.solution
    if plan.colocated:
        return []
    total = checked.verification.rate_rps * mean_kv_bytes_per_request(request.workload, request.model)
    decode = {p.name: p for p in plan.pools if p.phase == "decode"}
    prefill = [p for p in plan.pools if p.phase == "prefill"]
    capacity_rps = {pool_name(c): c.capacity_rps(k) for c, k in solution.replicas.items() if c.phase == "decode"}
    prefill_share = {p.name: p.replicas / sum(q.replicas for q in prefill) for p in prefill}
    out = []
    for link in plan.links:
        share = capacity_rps[link.to_pool] / sum(capacity_rps.values()) * prefill_share[link.from_pool]
        demand = total * share
        capacity = link.bandwidth_bytes_per_s * decode[link.to_pool].replicas
        out.append({"from": link.from_pool, "to": link.to_pool,
                    "demand_gbps": demand * 8 / 1e9, "capacity_gbps": capacity * 8 / 1e9,
                    "demand_gb_s": demand / 1e9, "capacity_gb_s": capacity / 1e9,
                    "utilization": demand / capacity, "path": "intra-node" if affinity == "low" else "inter-node"})
    return out


def plan_summary(request: PlanRequest, checked: Checked, affinity: str) -> dict:
    """A checked plan's totals and verdict, as fleet rows and alternatives show it."""
    solution, verification = checked.solution, checked.verification
    links = links_dict(request, checked, affinity)
    return {"gpus_total": solution.gpus_total, "cost_per_hour": solution.usd_per_hour, "power_w": solution.power_w,
            "goodput_rps": solution.goodput_rps, "goodput_per_gpu": solution.goodput_rps / solution.gpus_total,
            "prefill": phase_dict(solution, "prefill"), "decode": phase_dict(solution, "decode"),
            "colocated": phase_dict(solution, "colocated"),
            "attainment": {k: v.mean for k, v in verification.clocks.items()},
            "meets_slo": verification.passed, "worst_shortfall": max(0.0, verification.worst_shortfall),
            "link_utilization": max((link["utilization"] for link in links), default=None)}


def misses(checked: Checked) -> list[str]:
    """What a plan misses, one phrase per objective (and per loss it does not survive)."""
    out = []
    for o in checked.verification.per_objective:
        if not o.passed:
            out.append(f"{o.objective.label}: {o.judged:.3f} ({checked.verification.rule}) against "
                       f"{o.objective.attainment:g}, short by {o.shortfall:.3f}")
    out += [f"with {loss.lost} lost: short by {loss.worst_shortfall:.3f}"
            for loss in checked.verification.losses if not loss.passed]
    return out


def search_dict(result: SearchResult, objective: str) -> dict:
    return {"lower_bound": None if result.first is None else result.first.bound,
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
    return row


def _why_none(result: SearchResult) -> str | None:
    """Why a search has no verified plan: the program's reason, and how close the plans tried came."""
    if result.best is not None:
        return None
    closest = result.closest
    tried = "" if closest is None else (f"no {result.mode} plan passed in {len(result.tried)} end-to-end checks; "
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
        doc["without_redundancy"] = {"value": theirs, "gpus_total": free.best.solution.gpus_total}
        doc["redundancy_costs"] = ours - theirs
    return doc


def report_to_dict(report: PlanReport) -> dict:
    """The ``pdplan optimize --json`` document; every number says how it was obtained in
    ``provenance``. Without an answer, ``decision`` is null and ``closest`` is the plan that
    missed least."""
    request = report.request
    model = request.model
    doc = {"decision": None, "model": model.name,
           "precision": {"weights": model.weight_dtype, "kv_cache": model.kv_dtype},
           "engine": request.profiles.engine, "target_rps": request.target_rps, "slo": request.slo.to_dict(),
           "fleets": [fleet_row(f, request) for f in report.fleets]}
    if report.answer is None:
        closest = report.closest
        doc["closest"] = None if closest is None else {
            **plan_summary(request, closest, "high"), "pools": pools(closest.solution, report),
            "verification": closest.verification.to_dict(), "misses": misses(closest)}
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
        "disaggregated_alternative": None if alternative is None else plan_summary(
            request, alternative, fleet.disaggregated.affinity),
        "colocated_baseline": None if baseline is None else {
            **phase_dict(baseline.solution, "colocated"), **plan_summary(request, baseline, "high")},
        "pools": pools(solution, report),
        "gpus_total": solution.gpus_total,
        "cost_per_hour": solution.usd_per_hour,
        "power_w": solution.power_w,
        "goodput_rps": solution.goodput_rps,
        "goodput_per_gpu": solution.goodput_rps / solution.gpus_total,
        "margin": report.margin,
        "attainment": {k: v.mean for k, v in verification.clocks.items()},
        "meets_slo": verification.passed,
        "verification": verification.to_dict(),
        "search": search_dict(chosen, request.objective),
        "end_to_end_goodput_rps": report.end_to_end.goodput_rps,
        "headroom": (None if not request.target_rps else report.end_to_end.goodput_rps / request.target_rps - 1),
        "redundancy": _redundancy(report),
        "links": links_dict(request, answer, chosen.affinity),
        "solver": {"status": solution.status, "objective": solution.objective, "bound": solution.bound,
                   "gap": solution.gap, "objective_name": request.objective},
        "rounds": [{"round": i + 1, "pools": [shape_dict(c, k) | {"phase": c.phase}
                                              for c, k in sorted(c.solution.replicas.items(), key=lambda ck: ck[0].label)],
                    "gpus_total": c.solution.gpus_total, "value": c.value(request.objective),
                    "attainment": {k: v.mean for k, v in c.verification.clocks.items()},
                    "meets": c.verification.passed}
                   for i, c in enumerate(chosen.tried)],
        "nodes": [{"instance": i.id, "phase": i.candidate.phase, "gpu": i.candidate.gpu, "tp": i.candidate.tp,
                   "pp": i.candidate.pp, "stages": [{"node": n, "gpus": list(g)} for n, g in
                                                   zip(i.stage_nodes, i.stage_gpus)]}
                  for i in solution.instances],
        "simulation": verification.summary,
        "mixed_pool": _mixed(report),
        "provenance": _provenance(report),
        "run": _run(report),
    })
    return doc


def _mixed(report: PlanReport) -> dict | None:
    """With --mixed: the verified plan with Splitwise's mixed pool below the P/D plan, or why none."""
    if not report.request.mixed:
        return None
    found = report.mixed
    if found is None:
        return {"found": False}
    pools = {pool.phase: pool for pool in found.plan.pools}
    return {"found": True, "prefill": found.counts[0], "decode": found.counts[1], "mixed": found.counts[2],
            "mixed_shape": {"gpu": pools["mixed"].gpu, "tp": pools["mixed"].tp, "pp": pools["mixed"].pp,
                            "chunk_tokens": pools["mixed"].chunk_tokens},
            "spill_tokens": found.plan.spill_tokens, "kv_share": found.plan.kv_share,
            "gpus_total": found.gpus, "cost_per_hour": found.usd_per_hour, "ledger_rps": found.ledger_rps,
            "baseline": {"prefill": found.baseline_counts[0], "decode": found.baseline_counts[1],
                         "cost_per_hour": found.baseline_usd_per_hour},
            "verification": found.verification.to_dict(), "checks": found.checks}


def _run(report: PlanReport) -> dict:
    """What differs between two runs on the same inputs and seed (the cache and the clock), kept
    apart so that the rest of the document is byte-identical."""
    return {"cache": {"hits": report.cache_hits, "misses": report.cache_misses},
            "end_to_end_simulations": report.simulations,
            "solver_wall_s": None if report.answer is None else significant(report.answer.solution.wall_s, 2)}


def _provenance(report: PlanReport) -> dict:
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
        "search.lower_bound": "solved: the integer program's proven optimum at the target (CP-SAT)",
        "end_to_end_goodput_rps": "simulated: bisection over verified rates of the whole plan",
        "links": "derived: verified rate × mean prompt KV bytes vs the ingress of the placed path",
        "profiles": {f"{m.shape.gpu} TP{m.shape.tp} PP{m.shape.pp}": m.profile.provenance.source
                     for m in report.measured},
        "profile_sources": report.request.profiles.describe(),
    }
