"""The optimize pipeline: candidate shapes → per-instance goodput → placement → end-to-end check.

For each fleet, the disaggregated and the colocated optimum are solved under the same
constraints (0x0A–0x0C); the cheaper (or, for ``goodput``, the stronger) one wins and the margin
is reported. The winner is then simulated end to end on the trace at the target rate, routing
and KV transfer included; if it misses the SLO, the failing phase's requirement is raised and
the placement solved again, a bounded number of rounds (per-phase goodput ignores transfer and
routing, so the end-to-end simulation is the final judge).
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import reduce
from dataclasses import asdict, dataclass, field, replace
from typing import Callable


from pdplan.cache import ResultCache, cache_key
from pdplan.candidates import DEFAULT_CHUNKS, DEFAULT_PPS, DEFAULT_TPS, Rejected, Shape, enumerate_shapes
from pdplan.errors import InfeasibleError, PdplanError
from pdplan.goodput import (
    DEFAULT_ADMISSION_SHARE,
    InstanceGoodput,
    Probe,
    Search,
    SearchSettings,
    find_goodput,
    instance_goodput,
    joint_attainment,
    per_request_clocks,
)
from pdplan.hardware import Cluster
from pdplan.modelspec import ModelSpec
from pdplan.placement import FLEETS, Candidate, Problem, Solution, instance_link_bytes_per_s, solve
from pdplan.profiles import PhaseProfile, profile_to_dict
from pdplan.roofline import profile_for
from pdplan.sim import Link, Plan, Pool, simulate
from pdplan.slo import SLO, attainment
from pdplan.workload import Workload, replace_arrivals, rescale_rate

#: Requirement raise after an end-to-end miss, per round, on the failing phase.
RAISE_FACTOR = 1.15
#: KV link setup cost per transfer (RDMA registration and signalling), an assumption.
LINK_SETUP_S = 0.5e-3


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """Everything ``pdplan optimize`` decides from."""

    workload: Workload
    model: ModelSpec
    cluster: Cluster
    measured: dict                      #: (model, gpu, tp, pp) → PhaseProfile
    slo: SLO
    target_rps: float | None            #: None with objective goodput
    fleets: tuple[str, ...] = ("any",)
    objective: str = "cost"
    affinity: str = "auto"              #: "auto", "high" or "low"
    settings: SearchSettings = field(default_factory=lambda: SearchSettings(requests_per_probe=1000))
    admission_share: float = DEFAULT_ADMISSION_SHARE
    link_headroom: float = 0.8
    max_gpus: int | None = None
    max_usd_per_hour: float | None = None
    max_power_w: float | None = None
    time_limit_s: float = 10.0
    max_rounds: int = 3
    tps: tuple[int, ...] = DEFAULT_TPS
    pps: tuple[int, ...] = DEFAULT_PPS
    chunk_sizes: tuple[int, ...] = DEFAULT_CHUNKS
    transfer_schedule: str = "layer"

    def __post_init__(self):
        if self.affinity not in ("auto", "high", "low"):
            raise PdplanError(f"affinity must be one of auto, high, low, got {self.affinity!r}", field="affinity")
        if self.max_rounds < 1:
            raise PdplanError(f"max rounds must be >= 1, got {self.max_rounds!r}", field="max_rounds")


@dataclass(frozen=True, kw_only=True)
class Measured:
    """A candidate shape with its profile and its simulated per-instance goodput."""

    shape: Shape
    profile: PhaseProfile
    goodput: InstanceGoodput


@dataclass(frozen=True, kw_only=True)
class ModeResult:
    """The optimum of one mode (disaggregated or colocated) under one fleet, or why there is none."""

    mode: str
    fleet: str
    solution: Solution | None
    affinity: str | None
    reason: str | None = None
    attainment: dict[str, float] | None = None   #: end-to-end simulation of this solution's plan
    link_utilization: float | None = None        #: busiest KV link's demand / capacity


@dataclass(frozen=True, kw_only=True)
class Round:
    """One end-to-end check of a placement."""

    index: int
    phase_targets: dict[str, float]
    attainment: dict[str, float]
    meets: bool
    gpus_total: int


@dataclass(frozen=True, kw_only=True)
class FleetResult:
    """Both modes for one fleet and the mode that wins it."""

    fleet: str
    disaggregated: ModeResult
    colocated: ModeResult
    objective: str

    @property
    def best(self) -> ModeResult | None:
        """The better feasible mode (None when neither is feasible)."""
        if self.disaggregated.solution is None and self.colocated.solution is None:
            return None
        return _better(self.disaggregated, self.colocated, self.objective)


@dataclass(frozen=True, kw_only=True)
class PlanReport:
    """What ``pdplan optimize`` found, with the evidence behind every number."""

    request: PlanRequest
    measured: tuple[Measured, ...]
    rejected: tuple[Rejected, ...]
    fleets: tuple[FleetResult, ...]
    fleet: FleetResult                    #: the winning fleet, both modes as first solved
    chosen: ModeResult                    #: the winning mode after the end-to-end rounds
    plan: Plan
    rounds: tuple[Round, ...]
    summary: dict                         #: end-to-end simulation summary of the final plan
    end_to_end: Search                    #: the final plan's own goodput, simulated whole
    cache_hits: int
    cache_misses: int

    @property
    def baseline(self) -> ModeResult:
        """The colocated optimum of the winning fleet, the baseline P/D must beat."""
        return self.fleet.colocated

    @property
    def margin(self) -> float | None:
        """How much better the chosen mode is than the other mode of its fleet, as a fraction of
        the other's objective (cost, GPUs or power saved; goodput gained); None if only one exists."""
        other = self.fleet.colocated if self.chosen.mode == "disaggregated" else self.fleet.disaggregated
        if other.solution is None or not other.solution.objective:
            return None
        ours, theirs = self.chosen.solution.objective, other.solution.objective
        gain = ours - theirs if self.request.objective == "goodput" else theirs - ours
        return gain / theirs


# --- goodput per candidate ----------------------------------------------------------------------

def profile_digest(profile: PhaseProfile) -> str:
    """sha256 of a profile's canonical content, for cache keys."""
    return hashlib.sha256(json.dumps(profile_to_dict(profile), sort_keys=True).encode()).hexdigest()


def measure(request: PlanRequest, cache: ResultCache,
            progress: Callable[[str, int, int], None] | None = None) -> tuple[list[Measured], list[Rejected]]:
    """Every candidate shape's per-instance goodput, from the cache where the inputs match."""
    largest = int((request.workload.prompt_tokens + request.workload.output_tokens).max())
    shapes, rejected = enumerate_shapes(request.model, request.cluster, largest_request_tokens=largest,
                                        tps=request.tps, pps=request.pps, chunk_sizes=request.chunk_sizes)
    digest = request.workload.digest()
    measured = []
    for i, shape in enumerate(shapes):
        if progress is not None:
            progress(shape.label, i, len(shapes))
        gpu = request.cluster.priced_gpu(shape.gpu)
        profile = profile_for(request.model, gpu, shape.tp, shape.pp, request.measured)
        key = cache_key({"trace": digest, "profile": profile_digest(profile), "slo": request.slo.to_dict(),
                         "phase": shape.phase, "policy": shape.policy, "chunk": shape.chunk_tokens,
                         "settings": asdict(request.settings), "admission_share": request.admission_share})
        cached = cache.get(key)
        if cached is not None:
            result = InstanceGoodput.from_dict(cached)
        else:
            result = instance_goodput(request.workload, profile, phase=shape.phase, slo=request.slo,
                                      settings=request.settings, policy=shape.policy,
                                      chunk_tokens=shape.chunk_tokens, admission_share=request.admission_share)
            cache.put(key, result.to_dict())
        measured.append(Measured(shape=shape, profile=profile, goodput=result))
    if progress is not None:
        progress("done", len(shapes), len(shapes))
    return measured, rejected


def mean_kv_bytes_per_request(workload: Workload, model: ModelSpec) -> float:
    """Mean handoff bytes per request: the whole prompt's KV (0x06; no destination reuse assumed,
    which is conservative for traces with prefix hashes)."""
    return float(workload.prompt_tokens.mean()) * model.kv_bytes_per_token


def candidates_from(measured: list[Measured], kv_bytes: float) -> tuple[Candidate, ...]:
    """Placement candidates: each measured shape with positive goodput; colocated shapes of one
    (GPU, TP, PP) keep only their best chunk size (the others cost the same and serve less)."""
    best: dict[tuple, Measured] = {}
    for m in measured:
        if m.goodput.goodput_rps <= 0:
            continue
        key = (m.shape.phase, m.shape.gpu, m.shape.tp, m.shape.pp)
        if key not in best or m.goodput.goodput_rps > best[key].goodput.goodput_rps:
            best[key] = m
    return tuple(Candidate(phase=m.shape.phase, gpu=m.shape.gpu, tp=m.shape.tp, pp=m.shape.pp,
                           goodput_rps=m.goodput.goodput_rps, chunk_tokens=m.shape.chunk_tokens,
                           kv_bytes_per_request=0.0 if m.shape.phase == "colocated" else kv_bytes)
                 for m in sorted(best.values(), key=lambda m: m.shape.label))


# --- placement per fleet and mode ----------------------------------------------------------------

def solve_mode(request: PlanRequest, candidates: tuple[Candidate, ...], fleet: str, mode: str,
               phase_targets: dict[str, float] | None = None) -> ModeResult:
    """The optimum of one mode under one fleet; ``auto`` affinity keeps the better of high and low."""
    affinities = ("high",) if mode == "colocated" or request.affinity == "high" else (
        ("low",) if request.affinity == "low" else ("high", "low"))
    best, reasons = None, []
    for affinity in affinities:
        problem = Problem(candidates=candidates, cluster=request.cluster, mode=mode, target_rps=request.target_rps,
                          fleet=fleet, objective=request.objective, link_headroom=request.link_headroom,
                          affinity=affinity, max_gpus=request.max_gpus, max_usd_per_hour=request.max_usd_per_hour,
                          max_power_w=request.max_power_w, time_limit_s=request.time_limit_s,
                          seed=request.settings.seed, phase_targets=dict(phase_targets or {}))
        try:
            found = ModeResult(mode=mode, fleet=fleet, solution=solve(problem), affinity=affinity)
        except InfeasibleError as err:
            reasons.append(str(err))
            continue
        best = found if best is None else _better(best, found, request.objective)
    return best or ModeResult(mode=mode, fleet=fleet, solution=None, affinity=None, reason=reasons[0])


def _better(a: ModeResult, b: ModeResult, objective: str) -> ModeResult:
    """The mode with the better objective (ties: fewer GPUs, then colocated, the simpler system)."""
    if a.solution is None:
        return b
    if b.solution is None:
        return a
    sign = -1 if objective == "goodput" else 1

    def key(m: ModeResult) -> tuple:
        return (sign * m.solution.objective, m.solution.gpus_total, m.mode != "colocated")

    return min((a, b), key=key)


# --- end-to-end check ----------------------------------------------------------------------------

def plan_of(request: PlanRequest, chosen: ModeResult) -> Plan:
    """The chosen placement as a simulator plan: one pool per shape, links at the path the
    placement implies (across nodes for high affinity, inside a node for low)."""
    solution = chosen.solution
    shapes = {}  # pool name → the candidate shape it runs
    for cand, replicas in sorted(solution.replicas.items(), key=lambda kv: (kv[0].phase, kv[0].gpu, kv[0].tp, kv[0].pp)):
        extra = {"policy": "chunked", "chunk_tokens": cand.chunk_tokens} if cand.phase == "colocated" else {}
        pool = Pool(name=f"{cand.phase}-{cand.gpu}-tp{cand.tp}-pp{cand.pp}", phase=cand.phase,
                    model=request.model.name, gpu=cand.gpu, tp=cand.tp, pp=cand.pp, replicas=replicas, **extra)
        shapes[pool] = cand
    pools = tuple(shapes)
    if chosen.mode == "colocated":
        return Plan(pools=pools, name=f"{request.model.name} colocated ({chosen.fleet})")
    links = [Link(from_pool=src.name, to_pool=dst.name, setup_s=LINK_SETUP_S,
                  bandwidth_bytes_per_s=_path_bytes_per_s(request, chosen, shapes[dst]))
             for src in pools if src.phase == "prefill" for dst in pools if dst.phase == "decode"]
    return Plan(pools=pools, links=tuple(links), transfer_schedule=request.transfer_schedule,
                name=f"{request.model.name} disaggregated ({chosen.fleet}, {chosen.affinity} affinity)")


def _path_bytes_per_s(request: PlanRequest, chosen: ModeResult, decode: Candidate) -> float:
    """Ingress bandwidth of one decode instance of this shape on the path the placement gave it:
    the slowest among the node types its instances landed on (the sim has one link per pool)."""
    landed = {i.node_type for i in chosen.solution.instances if i.candidate == decode}
    nodes = [n for n in request.cluster.nodes if n.name in landed]
    if chosen.affinity == "low":
        return min(decode.gpus * n.intra_node_bytes_per_s for n in nodes)
    return min(instance_link_bytes_per_s(n, decode.gpus) for n in nodes)


def check(request: PlanRequest, plan: Plan, profiles: dict, rate_rps: float) -> tuple[dict, dict[str, float], bool]:
    """Simulate the whole trace on ``plan`` at ``rate_rps``; attainment per clock and joint."""
    workload = request.workload
    if workload.has_arrivals:
        workload = rescale_rate(workload, rate_rps)
    else:
        workload = replace_arrivals(workload, rate_rps=rate_rps, rng=request.settings.seed)
    result = simulate(workload, plan, profiles, model=request.model, seed=request.settings.seed)
    clocks = per_request_clocks(result)
    ttft, tpot = request.slo.threshold_s("ttft"), request.slo.threshold_s("tpot")
    summary = result.summary(ttft, tpot)
    shares = {"ttft": attainment(clocks["ttft"], ttft) if ttft else 1.0,
              "tpot": attainment(clocks["tpot"], tpot) if tpot else 1.0,
              "joint": joint_attainment(request.slo, clocks)}
    meets = all(attainment(clocks[o.metric], o.threshold_s) >= o.attainment for o in request.slo.objectives)
    return summary, shares, meets


# --- the pipeline --------------------------------------------------------------------------------

def optimize(request: PlanRequest, *, cache: ResultCache,
             progress: Callable[[str, int, int], None] | None = None) -> PlanReport:
    """Run the whole pipeline; infeasible everywhere raises InfeasibleError naming why."""
    measured, rejected = measure(request, cache, progress)
    candidates = candidates_from(measured, mean_kv_bytes_per_request(request.workload, request.model))
    profiles = {m.profile.key: m.profile for m in measured}
    simulated: dict[tuple[Plan, float], tuple] = {}

    def run(plan: Plan, rate: float) -> tuple[dict, dict[str, float], bool]:
        """check(), once per (plan, rate): fleets, rounds and the headroom search share plans."""
        if (plan, rate) not in simulated:
            simulated[plan, rate] = check(request, plan, profiles, rate)
        return simulated[plan, rate]

    fleets = tuple(FleetResult(fleet=f, objective=request.objective,
                               disaggregated=evaluate(request, solve_mode(request, candidates, f, "disaggregated"), run),
                               colocated=solve_mode(request, candidates, f, "colocated"))
                   for f in request.fleets)
    feasible = [f for f in fleets if f.best is not None]
    if not feasible:
        reasons = "; ".join(f"{f.fleet}: {f.disaggregated.reason}" for f in fleets)
        raise InfeasibleError(f"no fleet can serve the target: {reasons}")
    chosen = reduce(lambda a, b: _better(a, b, request.objective), (f.best for f in feasible))
    winner = next(f for f in feasible if f.fleet == chosen.fleet)
    rounds, targets = [], {}
    while True:
        plan = plan_of(request, chosen)
        rate = _check_rate(request, chosen)
        summary, shares, meets = run(plan, rate)
        rounds.append(Round(index=len(rounds) + 1, phase_targets=dict(targets), attainment=shares, meets=meets,
                            gpus_total=chosen.solution.gpus_total))
        if meets or len(rounds) >= request.max_rounds or request.target_rps is None:
            break
        again = _raise_until_changed(request, candidates, chosen, targets,
                                     _failing_phase(chosen.mode, shares, request.slo))
        if again is None:
            break
        chosen = again
    if len(rounds) > 1:  # the winning fleet's row shows the plan the rounds settled on
        winner = replace(winner, **{chosen.mode: evaluate(request, chosen, run)})
        fleets = tuple(winner if f.fleet == winner.fleet else f for f in fleets)
    # Start from the rate the last round verified, so the answer is never below a rate that met.
    start = rate if rounds[-1].meets else chosen.solution.goodput_rps
    verified = end_to_end_goodput(request, plan, run, start_rps=start)
    return PlanReport(request=request, measured=tuple(measured), rejected=tuple(rejected), fleets=fleets,
                      fleet=winner, chosen=chosen, plan=plan, rounds=tuple(rounds), summary=summary,
                      end_to_end=verified, cache_hits=cache.hits, cache_misses=cache.misses)


def _raise_until_changed(request: PlanRequest, candidates: tuple[Candidate, ...], chosen: ModeResult,
                         targets: dict[str, float], phase: str) -> ModeResult | None:
    """Raise ``phase``'s requirement by RAISE_FACTOR steps (in ``targets``) until the optimum
    changes: re-checking the same plan would only repeat its miss. None when nothing serves it."""
    while True:
        targets[phase] = targets.get(phase, request.target_rps) * RAISE_FACTOR
        again = solve_mode(request, candidates, chosen.fleet, chosen.mode, targets)
        if again.solution is None:
            return None
        if again.solution.replicas != chosen.solution.replicas:
            return again


def _check_rate(request: PlanRequest, mode: ModeResult) -> float:
    """The rate a plan is judged at: the target, or (objective goodput) the goodput it claims."""
    return request.target_rps if request.target_rps is not None else mode.solution.goodput_rps


def end_to_end_goodput(request: PlanRequest, plan: Plan, run: Callable, *, start_rps: float) -> Search:
    """The highest rate at which the whole plan — routing, KV transfer and both phases together —
    still meets the SLO on the trace: the number that says how much headroom the plan has (or,
    for objective goodput, what it really sustains). ``run(plan, rate)`` is :func:`check`."""
    def probe(rate: float) -> Probe:
        _, shares, meets = run(plan, rate)
        return Probe(rate_rps=rate, attainment_ttft=shares["ttft"], attainment_tpot=shares["tpot"],
                     attainment_joint=shares["joint"], meets=meets)

    return find_goodput(probe, start_rps=max(start_rps, 1e-3), settings=replace(request.settings, grid_points=0))


def evaluate(request: PlanRequest, mode: ModeResult, run: Callable) -> ModeResult:
    """A mode's optimum with its end-to-end attainment and busiest KV link filled in."""
    if mode.solution is None:
        return mode
    plan = plan_of(request, mode)
    _, shares, _ = run(plan, _check_rate(request, mode))
    links = links_dict(request, mode, plan)
    return replace(mode, attainment=shares,
                   link_utilization=max((link["utilization"] for link in links), default=None))


def _failing_phase(mode: str, shares: dict[str, float], slo: SLO) -> str:
    """The phase to strengthen after a miss: TTFT misses point at prefill, TPOT misses at decode."""
    if mode == "colocated":
        return "colocated"
    ttft_gap = min((shares["ttft"] - o.attainment for o in slo.for_metric("ttft")), default=math.inf)
    tpot_gap = min((shares["tpot"] - o.attainment for o in slo.for_metric("tpot")), default=math.inf)
    return "prefill" if ttft_gap <= tpot_gap else "decode"


def fleet_names(choice: str) -> tuple[str, ...]:
    """``all`` compares every Splitwise fleet; any other choice is itself."""
    return tuple(FLEETS) if choice == "all" else (choice,)


# --- the report as data --------------------------------------------------------------------------

def _pool_dict(solution: Solution | None, phase: str) -> dict | None:
    """The phase's main shape (most GPUs) and its replicas; every shape is listed under ``pools``."""
    if solution is None:
        return None
    shapes = [(c, k) for c, k in solution.replicas.items() if c.phase == phase]
    if not shapes:
        return None
    cand, replicas = max(shapes, key=lambda ck: (ck[0].gpus * ck[1], ck[0].gpu, ck[0].tp))
    return {"gpu": cand.gpu, "tp": cand.tp, "pp": cand.pp, "replicas": replicas,
            "goodput_rps_per_instance": cand.goodput_rps}


def _pools(solution: Solution, cluster: Cluster) -> list[dict]:
    return [{"phase": c.phase, "gpu": c.gpu, "tp": c.tp, "pp": c.pp, "replicas": k,
             "chunk_tokens": c.chunk_tokens, "goodput_rps_per_instance": c.goodput_rps,
             "usd_per_hour": cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus * k,
             "power_w": cluster.priced_gpu(c.gpu).tdp_w * c.gpus * k}
            for c, k in sorted(solution.replicas.items(), key=lambda ck: (ck[0].phase, ck[0].gpu, ck[0].tp, ck[0].pp))]


def links_dict(request: PlanRequest, mode: ModeResult, plan: Plan) -> list[dict]:
    """KV demand and capacity per (prefill pool, decode pool) link of a disaggregated plan.

    Demand: the target rate's KV bytes (mean prompt × KV bytes per token, 0x08D) split over decode
    pools by their capacity share; capacity: the pool's ingress on the path the placement uses.
    ``*_gbps`` are gigabits per second (network units), ``*_gb_s`` gigabytes per second.
    """
    if mode.mode != "disaggregated":
        return []
    rate = request.target_rps or mode.solution.goodput_rps
    total = rate * mean_kv_bytes_per_request(request.workload, request.model)
    decode = {p.name: p for p in plan.pools if p.phase == "decode"}
    prefill = [p for p in plan.pools if p.phase == "prefill"]
    goodputs = {(c.gpu, c.tp, c.pp): c.goodput_rps for c in mode.solution.replicas if c.phase == "decode"}
    capacity_rps = {name: goodputs[(p.gpu, p.tp, p.pp)] * p.replicas for name, p in decode.items()}
    prefill_share = {p.name: p.replicas / sum(q.replicas for q in prefill) for p in prefill}
    out = []
    for link in plan.links:
        share = capacity_rps[link.to_pool] / sum(capacity_rps.values()) * prefill_share[link.from_pool]
        demand = total * share
        capacity = link.bandwidth_bytes_per_s * decode[link.to_pool].replicas
        out.append({"from": link.from_pool, "to": link.to_pool,
                    "demand_gbps": demand * 8 / 1e9, "capacity_gbps": capacity * 8 / 1e9,
                    "demand_gb_s": demand / 1e9, "capacity_gb_s": capacity / 1e9,
                    "utilization": demand / capacity, "path": "intra-node" if mode.affinity == "low"
                    else "inter-node"})
    return out


def report_to_dict(report: PlanReport) -> dict:
    """The ``pdplan optimize --json`` document; every number says how it was obtained in
    ``provenance``."""
    chosen = report.chosen.solution
    cluster = report.request.cluster
    fleet = report.fleet
    base = fleet.colocated.solution
    disagg = fleet.disaggregated.solution
    return {
        "decision": report.chosen.mode,
        "fleet": fleet.fleet,
        "affinity": report.chosen.affinity,
        "prefill": _pool_dict(chosen, "prefill"),
        "decode": _pool_dict(chosen, "decode"),
        "disaggregated_alternative": None if disagg is None or report.chosen.mode == "disaggregated" else {
            "prefill": _pool_dict(disagg, "prefill"), "decode": _pool_dict(disagg, "decode"),
            "gpus_total": disagg.gpus_total, "cost_per_hour": disagg.usd_per_hour, "power_w": disagg.power_w,
            "goodput_rps": disagg.goodput_rps},
        "colocated_baseline": None if base is None else {
            **_pool_dict(base, "colocated"), "gpus_total": base.gpus_total, "cost_per_hour": base.usd_per_hour,
            "power_w": base.power_w, "goodput_rps": base.goodput_rps},
        "pools": _pools(chosen, cluster),
        "gpus_total": chosen.gpus_total,
        "cost_per_hour": chosen.usd_per_hour,
        "power_w": chosen.power_w,
        "goodput_rps": chosen.goodput_rps,
        "goodput_per_gpu": chosen.goodput_rps / chosen.gpus_total,
        "target_rps": report.request.target_rps,
        "margin": report.margin,
        "attainment": report.rounds[-1].attainment,
        "meets_slo": report.rounds[-1].meets,
        "end_to_end_goodput_rps": report.end_to_end.goodput_rps,
        "headroom": (None if not report.request.target_rps
                     else report.end_to_end.goodput_rps / report.request.target_rps - 1),
        "slo": report.request.slo.to_dict(),
        "links": links_dict(report.request, report.chosen, report.plan),
        "solver": {"status": chosen.status, "objective": chosen.objective, "bound": chosen.bound,
                   "gap": chosen.gap, "wall_s": chosen.wall_s, "objective_name": report.request.objective},
        "fleets": [_fleet_dict(f) for f in report.fleets],
        "rounds": [{"round": r.index, "phase_targets_rps": r.phase_targets, "attainment": r.attainment,
                    "meets": r.meets, "gpus_total": r.gpus_total} for r in report.rounds],
        "nodes": [{"instance": i.id, "phase": i.candidate.phase, "gpu": i.candidate.gpu, "tp": i.candidate.tp,
                   "pp": i.candidate.pp, "stages": [{"node": n, "gpus": list(g)} for n, g in
                                                   zip(i.stage_nodes, i.stage_gpus)]}
                  for i in chosen.instances],
        "simulation": report.summary,
        "cache": {"hits": report.cache_hits, "misses": report.cache_misses},
        "provenance": {
            "goodput_rps_per_instance": "simulated: bisection over the trace at each probed rate (0x08C)",
            "gpus_total, cost_per_hour, power_w": "derived: CP-SAT replicas × shape GPUs × cluster price / power limit",
            "goodput_rps": "derived: min over phases of replicas × per-instance goodput (0x0A)",
            "attainment": "simulated: the whole trace on the chosen plan at the target rate, routing and KV transfer included",
            "end_to_end_goodput_rps": "simulated: bisection over the whole plan on the trace (0x08C applied to the system)",
            "links": "derived: target rate × mean prompt KV bytes (0x08D) vs the ingress of the placed path",
            "profiles": {f"{m.shape.gpu} TP{m.shape.tp} PP{m.shape.pp}": m.profile.provenance.source
                         for m in report.measured},
        },
    }


def _fleet_dict(fleet: FleetResult) -> dict:
    """A fleet is a P/D provisioning coordinate (0x08K): its disaggregated optimum, and the colocated
    optimum on the same GPU types beside it."""
    disagg, colocated = fleet.disaggregated.solution, fleet.colocated.solution
    return {
        "fleet": fleet.fleet,
        "feasible": disagg is not None,
        "gpus_total": None if disagg is None else disagg.gpus_total,
        "cost_per_hour": None if disagg is None else disagg.usd_per_hour,
        "power_w": None if disagg is None else disagg.power_w,
        "goodput_rps": None if disagg is None else disagg.goodput_rps,
        "goodput_per_gpu": None if disagg is None else disagg.goodput_rps / disagg.gpus_total,
        "reason": fleet.disaggregated.reason,
        "prefill": _pool_dict(disagg, "prefill"),
        "decode": _pool_dict(disagg, "decode"),
        "link_utilization": fleet.disaggregated.link_utilization,
        "attainment": fleet.disaggregated.attainment,
        "colocated_cost_per_hour": None if colocated is None else colocated.usd_per_hour,
        "colocated_gpus_total": None if colocated is None else colocated.gpus_total,
        "best_mode": None if fleet.best is None else fleet.best.mode,
    }
