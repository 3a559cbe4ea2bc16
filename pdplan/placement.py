"""Placement as an integer program: replicas per shape, packed onto the cluster's nodes (CP-SAT).

Given per-instance goodputs of candidate shapes (from :mod:`pdplan.goodput`), the model chooses
how many instances of each (phase, GPU type, TP, PP) to run and on which node types, so that each
phase serves the target rate (system goodput is the minimum of the phases, 0x0A), every TP group
sits inside one node, node inventories hold, the fleet's GPU rules hold, every instance's KV
handoff fits its link (0x08D), and budgets hold — at the least cost, GPUs or power, or at the
highest goodput within a budget. Nodes of one type are identical, so packing is modelled with
node *patterns* (how many TP groups of each size one node holds), which keeps the model the same
size for 8 GPUs or 4,096; the patterns are expanded into a concrete node map afterwards.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace
from itertools import combinations_with_replacement

from ortools.sat.python import cp_model

from pdplan.errors import InfeasibleError, PdplanError
from pdplan.handoff import link_fits
from pdplan.hardware import Cluster, NodeType

PHASES = ("prefill", "decode", "colocated")
OBJECTIVES = ("cost", "gpus", "power", "goodput")

#: Splitwise's provisioning coordinates (0x08K): the GPU types each pool may use.
FLEETS: dict[str, dict[str, tuple[str, ...]]] = {
    "AA": {"prefill": ("a100-80gb",), "decode": ("a100-80gb",)},
    "HH": {"prefill": ("h100-80gb",), "decode": ("h100-80gb",)},
    "HA": {"prefill": ("h100-80gb",), "decode": ("a100-80gb",)},
    "HHcap": {"prefill": ("h100-80gb",), "decode": ("h100-80gb-pcap",)},
}
FLEET_CHOICES = (*FLEETS, "any")

UNBOUNDED_REPLICAS = 10**6
MAX_TIE_BREAK_NODES = 10**5  # beyond this the fewest-nodes tie-break could overflow the objective
MILLI = 1000  # CP-SAT needs integers: rates in milli-requests/s
MONEY_SCALE = 10_000  # and money in hundredths of a cent per hour


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One instance shape with its measured per-instance goodput."""

    phase: str
    gpu: str
    tp: int
    pp: int
    goodput_rps: float
    kv_bytes_per_request: float = 0.0   #: mean handoff bytes per request (disaggregated phases)
    chunk_tokens: int | None = None     #: colocated: the chunked-prefill budget goodput was measured at

    def __post_init__(self):
        if self.phase not in PHASES:
            raise ValueError(f"phase must be one of {', '.join(PHASES)}")
        if self.tp < 1 or self.pp < 1 or self.goodput_rps < 0:
            raise ValueError("tp, pp must be >= 1 and goodput_rps >= 0")

    @property
    def gpus(self) -> int:
        return self.tp * self.pp

    @property
    def label(self) -> str:
        return f"{self.phase} {self.gpu} TP{self.tp} PP{self.pp}"


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Everything the integer program needs; one instance per (mode, fleet)."""

    candidates: tuple[Candidate, ...]
    cluster: Cluster
    mode: str                         #: "disaggregated" or "colocated"
    target_rps: float | None          #: rate each phase must serve (None with objective goodput)
    fleet: str = "any"
    objective: str = "cost"
    link_headroom: float = 0.8        #: share of a link's bandwidth the KV handoff may use
    affinity: str = "high"            #: "high": handoffs cross nodes; "low": stage-local (0x08D)
    max_gpus: int | None = None
    max_usd_per_hour: float | None = None
    max_power_w: float | None = None
    time_limit_s: float = 10.0
    seed: int = 0
    phase_targets: dict[str, float] = field(default_factory=dict)  #: raised per-phase requirements

    def __post_init__(self):
        if self.mode not in ("disaggregated", "colocated"):
            raise ValueError("mode must be 'disaggregated' or 'colocated'")
        if self.fleet not in FLEET_CHOICES:
            raise ValueError(f"fleet must be one of {', '.join(FLEET_CHOICES)}")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(OBJECTIVES)}")
        if (self.target_rps is None) != (self.objective == "goodput"):
            raise ValueError("give target_rps exactly when the objective is not goodput")
        if self.affinity not in ("high", "low"):
            raise ValueError("affinity must be 'high' or 'low'")
        if self.affinity == "low" and self.mode != "disaggregated":
            raise ValueError("low node affinity pairs prefill and decode stages; it needs mode disaggregated")
        if not 0 < self.link_headroom <= 1:
            raise ValueError("link_headroom must be in (0, 1]")

    @property
    def phases(self) -> tuple[str, ...]:
        return ("prefill", "decode") if self.mode == "disaggregated" else ("colocated",)

    def required_rps(self, phase: str) -> float:
        """Capacity ``phase`` must provide: the target, or a raised one after an end-to-end miss.
        Low-affinity segments serve both phases at once ("system"): the larger requirement."""
        if phase == "system":
            return max([self.target_rps, *self.phase_targets.values()])
        return self.phase_targets.get(phase, self.target_rps)


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """A candidate (or a candidate on one node type) the model may not use, and why."""

    candidate: Candidate
    family: str       #: "fleet", "inventory" or "link"
    reason: str


@dataclass(frozen=True, kw_only=True)
class Instance:
    """One placed instance: which node holds each PP stage (a TP group inside that node)."""

    id: str
    candidate: Candidate
    node_type: str
    stage_nodes: tuple[str, ...]
    stage_gpus: tuple[tuple[int, ...], ...]   #: GPU indices inside each stage's node
    segment: int | None = None                #: low affinity: the segment shape it belongs to


@dataclass(frozen=True, kw_only=True)
class Solution:
    """The solved plan and the solver's own account of it."""

    replicas: dict[Candidate, int]
    instances: tuple[Instance, ...]
    gpus_total: int
    usd_per_hour: float
    power_w: float
    goodput_rps: float                 #: min over phases of Σ replicas × per-instance goodput
    phase_capacity_rps: dict[str, float]
    status: str                        #: "OPTIMAL" or "FEASIBLE"
    objective: float
    bound: float
    gap: float
    wall_s: float
    rejections: tuple[Rejection, ...] = field(default=(), compare=False)


# --- candidate screening (families that act on single candidates) ------------------------------

def allowed_gpus(fleet: str, phase: str) -> tuple[str, ...] | None:
    """GPU types a pool may use under ``fleet``; None means any. Colocated pools may use either
    pool's uncapped types (capping is a decode-machine setting)."""
    if fleet == "any":
        return None
    rule = FLEETS[fleet]
    if phase == "colocated":
        return tuple(sorted({g for g in rule["prefill"] + rule["decode"] if not g.endswith("-pcap")}))
    return rule[phase]


def instance_link_bytes_per_s(node: NodeType, gpus: int) -> float:
    """KV bandwidth an instance of ``gpus`` GPUs has across nodes: each GPU ships its own KV
    shard over its own NIC (one RDMA NIC per GPU, as on DGX nodes)."""
    return gpus * node.inter_node_bytes_per_s


def screen(problem: Problem) -> tuple[dict[Candidate, tuple[NodeType, ...]], list[Rejection]]:
    """Node types each usable candidate may go on, and every rejection with its family.

    Link rule (high node affinity: handoffs cross nodes): an instance running at its own goodput
    must push (prefill) or pull (decode) its KV within ``link_headroom`` of its NIC bandwidth.
    """
    usable: dict[Candidate, tuple[NodeType, ...]] = {}
    rejections = []
    for cand in problem.candidates:
        if cand.phase not in problem.phases or milli_rps(cand.goodput_rps, round_up=False) <= 0:
            continue  # below 1 milli-rps a shape adds no capacity, only an unbounded replica count
        allowed = allowed_gpus(problem.fleet, cand.phase)
        if allowed is not None and cand.gpu not in allowed:
            rejections.append(Rejection(candidate=cand, family="fleet",
                                        reason=f"{cand.label}: fleet {problem.fleet} puts {cand.phase} on "
                                               f"{', '.join(allowed)}"))
            continue
        nodes = [n for n in problem.cluster.nodes_for(cand.gpu) if n.gpus_per_node >= cand.tp]
        if not nodes:
            rejections.append(Rejection(candidate=cand, family="inventory",
                                        reason=f"{cand.label}: no node type with {cand.tp}+ {cand.gpu} GPUs"))
            continue
        if cand.phase != "colocated" and problem.affinity == "high":
            demand = cand.goodput_rps * cand.kv_bytes_per_request
            fitting = [n for n in nodes
                       if link_fits(demand, instance_link_bytes_per_s(n, cand.gpus), problem.link_headroom)]
            if not fitting:
                best = max(instance_link_bytes_per_s(n, cand.gpus) for n in nodes)
                rejections.append(Rejection(
                    candidate=cand, family="link",
                    reason=f"{cand.label}: KV handoff {demand / 1e9:.2f} GB/s at {cand.goodput_rps:.3g} rps "
                           f"> {problem.link_headroom:.0%} of {best / 1e9:.1f} GB/s across nodes"))
                continue
            nodes = fitting
        usable[cand] = tuple(nodes)
    return usable, rejections


# --- node patterns ------------------------------------------------------------------------------

def node_patterns(gpus_per_node: int, sizes: tuple[int, ...]) -> list[dict[int, int]]:
    """Every maximal way to fill one node with TP groups of the given sizes ({size: count}).

    Only maximal patterns are needed: a pattern with room for one more group is dominated by
    the same pattern with that group added, since supplying extra slots is never infeasible.
    """
    sizes = tuple(sorted(set(s for s in sizes if s <= gpus_per_node)))
    if not sizes:
        return []
    patterns = []
    for total_groups in range(1, gpus_per_node // sizes[0] + 1):
        for combo in combinations_with_replacement(sizes, total_groups):
            used = sum(combo)
            if used <= gpus_per_node and gpus_per_node - used < sizes[0]:
                patterns.append({s: combo.count(s) for s in sizes})
    return patterns


# --- the model ----------------------------------------------------------------------------------

@dataclass
class Model:
    """A built CP-SAT model and its variables, so tests can inspect it before solving."""

    cp: cp_model.CpModel
    usable: dict[Candidate, tuple[NodeType, ...]]
    rejections: list[Rejection]
    n: dict[Candidate, cp_model.IntVar]
    m: dict[tuple[Candidate, str], cp_model.IntVar]
    z: dict[tuple[str, int], cp_model.IntVar]
    patterns: dict[str, list[dict[int, int]]]
    units: tuple           #: low affinity: the segment shapes u counts
    u: dict[int, cp_model.IntVar]
    goodput_milli: cp_model.IntVar | None
    nodes_weight: int = 1   #: the objective is primary × nodes_weight ± nodes used (tie-break)
    node_bounds: dict = field(default_factory=dict)  #: most nodes each node type (or segment) may use


def milli_rps(rate: float, *, round_up: bool) -> int:
    """Rates as integer milli-requests/s; capacities round down and targets up, so the integer
    model never claims more than the real numbers give."""
    scaled = rate * MILLI
    return math.ceil(scaled - 1e-9) if round_up else math.floor(scaled + 1e-9)


def money_units(usd: float) -> int:
    """Dollars per hour as integer hundredths of a cent, the unit the model minimises."""
    return round(usd * MONEY_SCALE)


def _replica_bound(problem: Problem, cand: Candidate, relax: frozenset[str] = frozenset()) -> int:
    """Most instances of one shape worth running: enough alone for the target (more only adds
    cost), or what the cluster or the GPU budget can hold."""
    nodes = problem.cluster.nodes_for(cand.gpu)
    if "inventory" in relax or any(n.count is None for n in nodes):
        by_inventory = math.inf
    else:
        by_inventory = sum((n.gpus_per_node // cand.tp) * n.count for n in nodes) // cand.pp
    bounds = [by_inventory]
    if problem.target_rps is not None and "capacity" not in relax:
        bounds.append(math.ceil(problem.required_rps(cand.phase) / cand.goodput_rps))
    if problem.max_gpus is not None and "budget" not in relax:
        bounds.append(problem.max_gpus // cand.gpus)
    bound = min(bounds)
    if bound == math.inf and relax:
        return UNBOUNDED_REPLICAS  # a diagnostic re-solve; any finite bound will do
    if bound == math.inf:
        raise PdplanError("objective goodput with unbounded node counts needs a budget "
                          "(--max-gpus, --max-cost or --max-power)", field="objective")
    return int(bound)


def build_model(problem: Problem, *, relax: frozenset[str] = frozenset()) -> Model:
    """Build the CP-SAT model; ``relax`` drops constraint families to diagnose infeasibility."""
    screened = replace(problem, fleet="any") if "fleet" in relax else problem
    if "link" in relax:
        screened = replace(screened, candidates=tuple(replace(c, kv_bytes_per_request=0.0)
                                                      for c in problem.candidates))
    usable, rejections = screen(screened)
    model = cp_model.CpModel()

    # n[c] = instances of candidate shape c.
    n = {c: model.new_int_var(0, _replica_bound(problem, c, relax), f"n_{i}") for i, c in enumerate(usable)}
    built = Model(cp=model, usable=usable, rejections=rejections, n=n, m={}, z={}, patterns={},
                  units=(), u={}, goodput_milli=None)
    if problem.affinity == "high":
        capacity = _pack_instances(built, problem, relax)
    else:
        capacity = _pack_segments(built, screened, relax)

    # Each phase serves the target: Σ milli_g · instances ≥ milli_R (system = min of phases, 0x0A).
    if problem.objective == "goodput":
        top = sum(milli_rps(c.goodput_rps, round_up=False) * _replica_bound(problem, c, relax) for c in usable)
        built.goodput_milli = model.new_int_var(0, max(top, 0), "goodput_milli")
        for phase_capacity in capacity.values():
            model.add(built.goodput_milli <= phase_capacity)
    elif "capacity" not in relax:
        for phase, phase_capacity in capacity.items():
            model.add(phase_capacity >= milli_rps(problem.required_rps(phase), round_up=True))

    # Budgets on GPUs, money and power.
    gpus = sum(c.gpus * n[c] for c in usable)
    money = sum(money_units(problem.cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus) * n[c] for c in usable)
    watts = sum(round(problem.cluster.priced_gpu(c.gpu).tdp_w * c.gpus) * n[c] for c in usable)
    if "budget" not in relax:
        if problem.max_gpus is not None:
            model.add(gpus <= problem.max_gpus)
        if problem.max_usd_per_hour is not None:
            model.add(money <= money_units(problem.max_usd_per_hour))
        if problem.max_power_w is not None:
            model.add(watts <= round(problem.max_power_w))

    # Objective: minimise cost, GPUs or power, or maximise goodput within the budgets.
    # Among equally good plans, prefer the one on the fewest nodes (primary × W ± nodes, W > nodes).
    nodes, most_nodes = _nodes_used(built, problem, relax)
    if relax or most_nodes > MAX_TIE_BREAK_NODES:  # diagnosis needs no tie-break; keep within int64
        nodes, most_nodes = 0, 0
    built.nodes_weight = most_nodes + 1
    if problem.objective == "goodput":
        model.maximize(built.goodput_milli * built.nodes_weight - nodes)
    else:
        primary = {"cost": money, "gpus": gpus, "power": watts}[problem.objective]
        model.minimize(primary * built.nodes_weight + nodes)
    if problem.affinity == "high":
        _add_greedy_hint(model, problem, n, relax)
    return built


def _pack_instances(built: Model, problem: Problem, relax: frozenset[str]) -> dict:
    """High node affinity: instances go anywhere; TP groups are packed into node patterns.

    Returns each phase's capacity expression in milli-rps.
    """
    model, usable, n = built.cp, built.usable, built.n
    # m[c, t] = instances of c placed on node type t.
    for i, (cand, nodes) in enumerate(usable.items()):
        for node in nodes:
            built.m[cand, node.name] = model.new_int_var(0, _replica_bound(problem, cand, relax),
                                                         f"m_{i}_{node.name}")
        model.add(sum(built.m[cand, node.name] for node in nodes) == n[cand])

    # z[t, p] = nodes of type t filled with pattern p; TP groups of each size fit the patterns.
    for node in problem.cluster.nodes:
        placed = [c for c in usable if (c, node.name) in built.m]
        patterns = built.patterns[node.name] = node_patterns(node.gpus_per_node, tuple(c.tp for c in placed))
        if not placed:
            continue
        if node.count is None or "inventory" in relax:
            node_bound = sum(_replica_bound(problem, c, relax) * c.pp for c in placed)
        else:
            node_bound = node.count
        built.node_bounds[node.name] = node_bound
        for k in range(len(patterns)):
            built.z[node.name, k] = model.new_int_var(0, node_bound, f"z_{node.name}_{k}")
        model.add(sum(built.z[node.name, k] for k in range(len(patterns))) <= node_bound)
        for size in sorted({c.tp for c in placed}):
            supply = sum(p.get(size, 0) * built.z[node.name, k] for k, p in enumerate(patterns))
            demand = sum(c.pp * built.m[c, node.name] for c in placed if c.tp == size)
            model.add(supply >= demand)
    return {phase: sum(milli_rps(c.goodput_rps, round_up=False) * n[c] for c in usable if c.phase == phase)
            for phase in problem.phases}


@dataclass(frozen=True, kw_only=True)
class Segment:
    """Low node affinity (DistServe's Algorithm 2, 0x08D): ``pp`` nodes of one type, node j holding
    stage j of ``a`` prefill and ``b`` decode instances with the same PP split, so every KV handoff
    stays inside a node. Requests routed into a segment stay in it."""

    node: NodeType
    prefill: Candidate
    decode: Candidate
    a: int
    b: int

    @property
    def capacity_rps(self) -> float:
        return min(self.a * self.prefill.goodput_rps, self.b * self.decode.goodput_rps)

    @property
    def capacity_milli(self) -> int:
        return min(self.a * milli_rps(self.prefill.goodput_rps, round_up=False),
                   self.b * milli_rps(self.decode.goodput_rps, round_up=False))


def segments(problem: Problem, usable: dict[Candidate, tuple[NodeType, ...]]) -> tuple[list[Segment], list[Rejection]]:
    """Every segment shape that fits a node and whose intra-node handoff fits NVLink.

    Each stage carries 1/pp of the layers' KV; it moves GPU to GPU inside the node, in parallel
    over the smaller side's GPUs.
    """
    found, rejections = [], []
    prefills = [c for c in usable if c.phase == "prefill"]
    decodes = [c for c in usable if c.phase == "decode"]
    for p, d in itertools.product(prefills, decodes):
        if p.pp != d.pp:
            continue
        for node in set(usable[p]) & set(usable[d]):
            for a in range(1, node.gpus_per_node // p.tp + 1):
                for b in range(1, (node.gpus_per_node - a * p.tp) // d.tp + 1):
                    seg = Segment(node=node, prefill=p, decode=d, a=a, b=b)
                    demand = seg.capacity_rps * p.kv_bytes_per_request / p.pp
                    path = min(a * p.tp, b * d.tp) * node.intra_node_bytes_per_s
                    if link_fits(demand, path, problem.link_headroom):
                        found.append(seg)
                    else:
                        rejections.append(Rejection(candidate=p, family="link", reason=(
                            f"{p.label} with {d.label} on {node.name}: intra-node handoff "
                            f"{demand / 1e9:.2f} GB/s > {problem.link_headroom:.0%} of {path / 1e9:.1f} GB/s")))
    found.sort(key=lambda s: (s.node.name, s.prefill.label, s.decode.label, s.a, s.b))
    return found, rejections


def _pack_segments(built: Model, problem: Problem, relax: frozenset[str]) -> dict:
    """Low node affinity: whole segments are replicated; returns the system capacity in milli-rps."""
    model, n = built.cp, built.n
    found, rejections = segments(problem, built.usable)
    built.rejections.extend(rejections)
    built.units = tuple(found)
    # u[k] = copies of segment k; each copy takes pp whole nodes of its type.
    for k, seg in enumerate(found):
        if seg.node.count is None or "inventory" in relax:
            bound = UNBOUNDED_REPLICAS if problem.target_rps is None else (
                math.ceil(problem.required_rps("system") * MILLI / max(seg.capacity_milli, 1)))
        else:
            bound = seg.node.count // seg.prefill.pp
        built.u[k] = model.new_int_var(0, bound, f"u_{k}")
        built.node_bounds[k] = bound * seg.prefill.pp
    for cand, var in n.items():
        side = "a" if cand.phase == "prefill" else "b"
        model.add(var == sum(getattr(seg, side) * built.u[k] for k, seg in enumerate(found)
                             if cand in (seg.prefill, seg.decode)))
    if "inventory" not in relax:
        for node in problem.cluster.nodes:
            if node.count is not None:
                model.add(sum(seg.prefill.pp * built.u[k] for k, seg in enumerate(found) if seg.node is node)
                          <= node.count)
    return {"system": sum(seg.capacity_milli * built.u[k] for k, seg in enumerate(found))}


def _nodes_used(built: Model, problem: Problem, relax: frozenset[str]):
    """Nodes the plan occupies (an expression) and an upper bound on it."""
    if problem.affinity == "low":
        used = sum(seg.prefill.pp * built.u[k] for k, seg in enumerate(built.units))
    else:
        used = sum(built.z.values())
    return used, sum(built.node_bounds.values())


def _add_greedy_hint(model: cp_model.CpModel, problem: Problem, n, relax: frozenset[str]) -> None:
    """Hint: per phase, the shape with the best goodput per GPU, replicated to the target."""
    if problem.target_rps is None:
        return
    for phase in problem.phases:
        pool = [c for c in n if c.phase == phase]
        if not pool:
            continue
        best = max(pool, key=lambda c: (c.goodput_rps / c.gpus, -c.gpus))
        for cand in pool:
            want = math.ceil(problem.required_rps(phase) / best.goodput_rps) if cand == best else 0
            model.add_hint(n[cand], min(want, _replica_bound(problem, cand, relax)))


# --- solving ------------------------------------------------------------------------------------

def solve(problem: Problem) -> Solution:
    """Solve to proven optimality within the time limit; infeasible problems name what binds."""
    built = build_model(problem)
    if not any(c.phase == phase for c in built.usable for phase in problem.phases) or any(
            not any(c.phase == phase for c in built.usable) for phase in problem.phases):
        raise InfeasibleError(_explain_no_candidates(problem, built))
    solver = _solver(problem)
    started = time.perf_counter()
    status = solver.solve(built.cp)
    wall = time.perf_counter() - started
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _solution(problem, built, solver, status, wall)
    if status == cp_model.INFEASIBLE:
        raise InfeasibleError(diagnose(problem))
    raise InfeasibleError(f"the solver found no plan within {problem.time_limit_s:g} s "
                          f"(status {solver.status_name(status)}); raise --time-limit")


def _solver(problem: Problem) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = problem.time_limit_s
    solver.parameters.random_seed = problem.seed
    # One worker keeps the search, and so the chosen optimum among ties, identical run to run.
    solver.parameters.num_workers = 1
    return solver


FAMILY_SENTENCES = {
    "capacity": "no mix of candidate shapes reaches {target} rps in every phase",
    "inventory": "the cluster's node counts cannot hold enough instances",
    "budget": "the GPU, cost or power budget is too small",
    "link": "the KV handoff does not fit the links between nodes",
    "fleet": "fleet {fleet} rules out the shapes that could serve the target",
}


def diagnose(problem: Problem) -> str:
    """Re-solve with one constraint family relaxed at a time; name the first whose relaxation
    makes the problem feasible (or say that several bind together)."""
    for family in ("budget", "inventory", "link", "fleet", "capacity"):
        built = build_model(problem, relax=frozenset({family}))
        solver = _solver(problem)
        if solver.solve(built.cp) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            sentence = FAMILY_SENTENCES[family].format(target=f"{problem.target_rps:g}", fleet=problem.fleet)
            return f"no {problem.mode} plan ({problem.fleet}): {sentence}"
    return (f"no {problem.mode} plan ({problem.fleet}): several constraints bind together "
            "(capacity, inventory, budget, link, fleet); relaxing any one alone is not enough")


def _explain_no_candidates(problem: Problem, built: Model) -> str:
    missing = [p for p in problem.phases if not any(c.phase == p for c in built.usable)]
    reasons = [r.reason for r in built.rejections if r.candidate.phase in missing]
    detail = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    families = sorted({r.family for r in built.rejections if r.candidate.phase in missing})
    which = " and ".join(families) if families else "goodput"
    return (f"no {problem.mode} plan ({problem.fleet}): no usable {'/'.join(missing)} shape "
            f"({which} rules them out{': ' + detail if detail else '; no shape meets the SLO on its own even at a low rate, so relax the SLO or allow larger shapes'})")


def _solution(problem: Problem, built: Model, solver: cp_model.CpSolver, status: int, wall: float) -> Solution:
    replicas = {c: solver.value(v) for c, v in built.n.items() if solver.value(v) > 0}
    capacity = {phase: sum(c.goodput_rps * k for c, k in replicas.items() if c.phase == phase)
                for phase in problem.phases}
    system = min(capacity.values())
    if problem.affinity == "low":  # requests stay inside their segment: sum of segment minima
        system = sum(seg.capacity_rps * solver.value(built.u[k]) for k, seg in enumerate(built.units))
    # Report the primary objective: strip the node tie-break (|nodes| < weight).
    weight = built.nodes_weight
    if problem.objective == "goodput":
        objective = math.ceil(solver.objective_value / weight)
        bound = math.ceil(solver.best_objective_bound / weight)
    else:
        objective = math.floor(solver.objective_value / weight)
        bound = math.floor(solver.best_objective_bound / weight)
    scale = {"cost": MONEY_SCALE, "gpus": 1, "power": 1, "goodput": MILLI}[problem.objective]
    gap = abs(bound - objective) / max(abs(objective), 1e-9) if objective else 0.0
    return Solution(
        replicas=replicas,
        instances=expand(problem, built, solver),
        gpus_total=sum(c.gpus * k for c, k in replicas.items()),
        usd_per_hour=sum(problem.cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus * k for c, k in replicas.items()),
        power_w=sum(problem.cluster.priced_gpu(c.gpu).tdp_w * c.gpus * k for c, k in replicas.items()),
        goodput_rps=system,
        phase_capacity_rps=capacity,
        status="OPTIMAL" if status == cp_model.OPTIMAL else "FEASIBLE",
        objective=objective / scale,
        bound=bound / scale,
        gap=gap,
        wall_s=wall,
        rejections=tuple(built.rejections),
    )


def expand(problem: Problem, built: Model, solver: cp_model.CpSolver) -> tuple[Instance, ...]:
    """The node map of a solution: every instance, its node per stage and its GPUs there."""
    if problem.affinity == "low":
        return _expand_segments(problem, built, solver)
    return _expand_patterns(problem, built, solver)


def _expand_segments(problem: Problem, built: Model, solver: cp_model.CpSolver) -> tuple[Instance, ...]:
    """Each segment copy takes pp fresh nodes; on node j, prefill groups first, then decode."""
    instances, next_node = [], {}
    for k, seg in enumerate(built.units):
        for _ in range(solver.value(built.u[k])):
            first = next_node.get(seg.node.name, 0)
            next_node[seg.node.name] = first + seg.prefill.pp
            nodes = tuple(f"{seg.node.name}-{first + j}" for j in range(seg.prefill.pp))
            offset = 0
            for cand, copies in ((seg.prefill, seg.a), (seg.decode, seg.b)):
                for _ in range(copies):
                    gpus = tuple(range(offset, offset + cand.tp))
                    offset += cand.tp
                    instances.append(Instance(
                        id=f"{cand.phase}-{len(instances)}", candidate=cand, node_type=seg.node.name,
                        stage_nodes=nodes, stage_gpus=(gpus,) * cand.pp, segment=k))
    return tuple(instances)


def _expand_patterns(problem: Problem, built: Model, solver: cp_model.CpSolver) -> tuple[Instance, ...]:
    """Turn pattern counts into a node map: node ids, and for every stage its node and GPUs.

    Nodes are filled in pattern order; TP groups of one size go to slots in the order of
    (phase, GPU, TP, PP) so the same solution always yields the same map.
    """
    instances = []
    for node in problem.cluster.nodes:
        slots: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
        index = 0
        for k, pattern in enumerate(built.patterns[node.name]):
            for _ in range(solver.value(built.z[node.name, k]) if (node.name, k) in built.z else 0):
                name, first = f"{node.name}-{index}", 0
                for size in sorted(pattern, reverse=True):  # big groups from GPU 0
                    for _ in range(pattern[size]):
                        slots.setdefault(size, []).append((name, tuple(range(first, first + size))))
                        first += size
                index += 1
        order = sorted((c for c in built.usable if (c, node.name) in built.m),
                       key=lambda c: (PHASES.index(c.phase), c.gpu, c.tp, c.pp))
        taken: dict[int, int] = {}
        for cand in order:
            for _ in range(solver.value(built.m[cand, node.name])):
                stages = []
                for _ in range(cand.pp):
                    stages.append(slots[cand.tp][taken.get(cand.tp, 0)])
                    taken[cand.tp] = taken.get(cand.tp, 0) + 1
                instances.append(Instance(
                    id=f"{cand.phase}-{len(instances)}", candidate=cand, node_type=node.name,
                    stage_nodes=tuple(s[0] for s in stages), stage_gpus=tuple(s[1] for s in stages)))
    return tuple(instances)
