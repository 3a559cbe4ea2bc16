"""The integer program's inputs and outputs: candidate shapes, the problem, the solved plan."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pdplan.errors import InternalError
from pdplan.hardware import Cluster, NodeType
from pdplan.placement.fleets import ANY, Fleet
from pdplan.poolcap import PoolCurve
from pdplan.shape import InstanceShape, shape_label
from pdplan.vocabulary import AllToAll, Objective, Phase, PoolShapes, Redundancy

PHASES = tuple(Phase)
OBJECTIVES = tuple(Objective)
POOL_SHAPES = tuple(PoolShapes)
REDUNDANCY = tuple(Redundancy)

MILLI = 1000  # CP-SAT needs integers: rates in milli-requests/s
MONEY_SCALE = 10_000  # and money in hundredths of a cent per hour


def serves(cand_phase: str, phase: str) -> bool:
    """Whether a shape of ``cand_phase`` adds capacity to ``phase``: its own phase, and a mixed
    machine (Splitwise's mixed pool, 0x08G) to both prefill and decode, since the requests it
    takes run both phases on it."""
    return cand_phase == phase or (cand_phase == "mixed" and phase in ("prefill", "decode"))


def milli_rps(rate: float, *, round_up: bool) -> int:
    """Rates as integer milli-requests/s; capacities round down and targets up, so the integer
    model never claims more than the real numbers give."""
    scaled = rate * MILLI
    return math.ceil(scaled - 1e-9) if round_up else math.floor(scaled + 1e-9)


def money_units(usd: float) -> int:
    """Dollars per hour as integer hundredths of a cent, the unit the model minimises."""
    return round(usd * MONEY_SCALE)


@dataclass(frozen=True, kw_only=True)
class Candidate(InstanceShape):
    """One instance shape with its measured goodput and pool capacity curve c(n)."""

    phase: str
    goodput_rps: float                  #: one instance alone, c(1)
    #: mean handoff bytes per request its GPUs ship (prefill) or take (decode, mixed): the request's KV times
    #: the copies its TP ranks hold (:func:`pdplan.handoff.handoff_copies`); disaggregated phases only
    kv_bytes_per_request: float = 0.0
    #: mean bytes per request the MoE all-to-all sends across nodes, each way, on an instance spanning
    #: nodes (:func:`pdplan.work.cross_node_all_to_all_bytes_per_token` × the tokens it runs)
    all_to_all_bytes_per_request: float = 0.0
    chunk_tokens: int | None = None     #: colocated: the chunked-prefill budget goodput was measured at
    curve: PoolCurve | None = None      #: c(n) behind the router; None: n · goodput (no pooling gain)
    #: attention DP with whole experts: how its tokens reach them, as measured (:class:`pdplan.vocabulary.AllToAll`)
    all_to_all: str = AllToAll.DISPATCH
    #: requests one rank runs at once where the engine holds it below its KV, as measured (None: its KV's worth)
    max_running_requests: int | None = None

    def __post_init__(self):
        if self.phase not in PHASES:
            raise InternalError(f"phase must be one of {', '.join(PHASES)}")
        if self.tp < 1 or self.pp < 1 or self.goodput_rps < 0:
            raise InternalError("tp, pp must be >= 1 and goodput_rps >= 0")

    @property
    def label(self) -> str:
        return f"{self.phase} {self.shape_label()}"

    @property
    def sort_key(self) -> tuple:
        """Where it stands among the units of a plan's counts (candidates before segments)."""
        return (0, self.phase, self.gpu, self.tp, self.pp, self.goodput_rps, self.kv_bytes_per_request,
                self.chunk_tokens or 0, self.dp, self.ep)

    @property
    def pool_curve(self) -> PoolCurve:
        return self.curve if self.curve is not None else PoolCurve.linear(self.goodput_rps)

    def capacity_rps(self, replicas: int) -> float:
        """c(replicas): what that many instances of this shape serve behind the router."""
        return self.pool_curve.capacity_rps(replicas)

    @property
    def peak_rps_per_instance(self) -> float:
        """The most one instance carries in any pool size sampled: what its KV link must carry."""
        curve = self.pool_curve
        peak = max(c / n for n, c in curve.samples)
        return peak if curve.saturation_rps is None else min(peak, curve.saturation_rps)


#: A plan as counts: (candidate, replicas) at high affinity, (segment, copies) at low affinity.
Counts = tuple[tuple[object, int], ...]


def counts_of(mapping: dict) -> Counts:
    """A hashable, ordered form of {unit: count} with the zero counts dropped."""
    return tuple(sorted(((k, v) for k, v in mapping.items() if v), key=lambda kv: kv[0].sort_key))


def dominated(counts: dict, by: Counts) -> bool:
    """Whether every count of ``counts`` is at most the count in ``by`` (a plan no larger
    anywhere than a plan that missed misses too, when adding replicas never hurts)."""
    bound = dict(by)
    return all(v <= bound.get(k, 0) for k, v in counts.items())


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Everything the integer program needs; one instance per (mode, fleet, affinity)."""

    candidates: tuple[Candidate, ...]
    cluster: Cluster
    mode: str                         #: "disaggregated" or "colocated"
    target_rps: float | None          #: rate each phase must serve (None with objective goodput)
    fleet: Fleet = ANY
    objective: str = "cost"
    link_headroom: float = 0.8        #: share of a link's bandwidth the KV handoff may use
    affinity: str = "high"            #: "high": handoffs cross nodes; "low": stage-local (0x08D)
    max_gpus: int | None = None
    max_usd_per_hour: float | None = None
    max_power_w: float | None = None
    time_limit_s: float = 10.0
    seed: int = 0
    phase_targets: dict[str, float] = field(default_factory=dict)  #: per-phase requirements that replace the target
    pool_shapes: str = "mixed"        #: "one": at most one shape per (phase, GPU type)
    redundancy: str = "none"          #: capacity must survive losing any one instance or node
    excluded: tuple[Counts, ...] = ()  #: plans that missed clearly: no answer may be dominated by one
    excluded_exactly: tuple[Counts, ...] = ()  #: plans that missed narrowly: only they are excluded
    fixed: Counts | None = None       #: place exactly these counts (capacity is not required)
    below: float | None = None        #: the primary objective must be strictly below this value
    strongest: bool = False           #: under ``below``, the plan whose weakest phase is strongest
    mixed: bool = False               #: mixed candidates may run: Splitwise's mixed pool as a third capacity
    max_mixed: int | None = None      #: mixed instances a plan may run at most (None: as many as fit)
    apart: tuple[tuple[Candidate, Candidate], ...] = ()  #: shape pairs the engine cannot run in one plan

    def __post_init__(self):
        if self.mode not in ("disaggregated", "colocated"):
            raise InternalError("mode must be 'disaggregated' or 'colocated'")
        if self.objective not in OBJECTIVES:
            raise InternalError(f"objective must be one of {', '.join(OBJECTIVES)}")
        if (self.target_rps is None) != (self.objective == "goodput"):
            raise InternalError("give target_rps exactly when the objective is not goodput")
        if self.affinity not in ("high", "low"):
            raise InternalError("affinity must be 'high' or 'low'")
        if self.affinity == "low" and self.mode != "disaggregated":
            raise InternalError("low node affinity pairs prefill and decode stages; it needs mode disaggregated")
        if not 0 < self.link_headroom <= 1:
            raise InternalError("link_headroom must be in (0, 1]")
        if self.pool_shapes not in POOL_SHAPES:
            raise InternalError(f"pool_shapes must be one of {', '.join(POOL_SHAPES)}")
        if self.redundancy not in REDUNDANCY:
            raise InternalError(f"redundancy must be one of {', '.join(REDUNDANCY)}")
        if self.below is not None and self.objective == "goodput":
            raise InternalError("a ceiling (below) needs a cost, gpus or power objective")
        if self.strongest and self.below is None:
            raise InternalError("strongest needs a ceiling (below)")
        if self.max_mixed is not None and self.max_mixed < 0:
            raise InternalError("max_mixed must be >= 0")
        if self.mixed and (self.mode, self.affinity) != ("disaggregated", "high"):
            raise InternalError("a mixed pool joins a disaggregated plan at high node affinity")

    @property
    def phases(self) -> tuple[str, ...]:
        return ("prefill", "decode") if self.mode == "disaggregated" else ("colocated",)

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of instance the plan may run: its phases, and mixed machines when allowed."""
        return self.phases + (("mixed",) if self.mixed else ())

    def required_rps(self, phase: str) -> float:
        """Capacity ``phase`` must provide: the target, or the phase's own requirement.
        Low-affinity segments and mixed machines serve both phases at once: the larger requirement."""
        if phase in ("system", "mixed"):
            return max(self.phase_targets.get(p, self.target_rps) for p in self.phases)
        return self.phase_targets.get(phase, self.target_rps)


@dataclass(frozen=True, kw_only=True)
class Rejection:
    """A candidate (or a candidate on one node type) the model may not use, and why."""

    candidate: Candidate
    family: str       #: "fleet", "inventory" or "link"
    reason: str


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
    def sort_key(self) -> tuple:
        """Where it stands among the units of a plan's counts (after every candidate)."""
        return (1, self.node.name, self.prefill.sort_key, self.decode.sort_key, self.a, self.b)

    @property
    def capacity_rps(self) -> float:
        return min(self.prefill.capacity_rps(self.a), self.decode.capacity_rps(self.b))

    @property
    def capacity_milli(self) -> int:
        return min(milli_rps(self.prefill.capacity_rps(self.a), round_up=False),
                   milli_rps(self.decode.capacity_rps(self.b), round_up=False))

    def capacity_after_loss_milli(self, redundancy: str) -> int:
        """Capacity left when the worst instance (or, for ``node``, any node: the whole segment,
        since each node holds a stage of every instance) is lost."""
        if redundancy == "node":
            return 0
        prefill = [milli_rps(self.prefill.capacity_rps(k), round_up=False) for k in (self.a - 1, self.a)]
        decode = [milli_rps(self.decode.capacity_rps(k), round_up=False) for k in (self.b - 1, self.b)]
        return min(min(prefill[0], decode[1]), min(prefill[1], decode[0]))

    @property
    def label(self) -> str:
        # One stage of each shape (the segment's PP is shared, so it is said once).
        prefill = shape_label(self.prefill.gpu, self.prefill.tp, 1, compact=True)
        decode = shape_label(self.decode.gpu, self.decode.tp, 1, compact=True)
        return f"segment {self.node.name}: {self.a}x {prefill} + {self.b}x {decode}, PP{self.prefill.pp}"


@dataclass(frozen=True, kw_only=True)
class Instance:
    """One placed instance: which node holds each PP stage (a TP group inside that node), or which
    nodes, with the instance's node ranks, when a stage's DP ranks spread over several."""

    id: str
    candidate: Candidate
    node_type: str
    stage_nodes: tuple[str, ...]              #: per stage (and node rank, when a stage spans nodes)
    stage_gpus: tuple[tuple[int, ...], ...]   #: GPU indices inside each of those nodes
    segment: int | None = None                #: low affinity: the segment copy it belongs to
    nodes_per_stage: int = 1                  #: nodes one stage spans (its ranks spread evenly)

    def parts(self) -> tuple[tuple[int, int, str, tuple[int, ...]], ...]:
        """(stage, node rank, node, GPU indices) of every node the instance uses, stage by stage."""
        return tuple((i // self.nodes_per_stage, i % self.nodes_per_stage, node, gpus)
                     for i, (node, gpus) in enumerate(zip(self.stage_nodes, self.stage_gpus)))


@dataclass(frozen=True, kw_only=True)
class Solution:
    """The solved plan and the solver's own account of it."""

    replicas: dict[Candidate, int]
    instances: tuple[Instance, ...]
    gpus_total: int
    usd_per_hour: float
    power_w: float
    goodput_rps: float                 #: min over phases of the pool capacities (sum of segments at low affinity)
    phase_capacity_rps: dict[str, float]
    status: str                        #: "OPTIMAL" or "FEASIBLE"
    objective: float
    bound: float
    gap: float
    wall_s: float
    counts: Counts = ()                #: what a cut or a fixed re-solve names: candidates or segments
    rejections: tuple[Rejection, ...] = field(default=(), compare=False)

    @property
    def mixed(self) -> bool:
        """Whether the plan runs Splitwise's mixed machines."""
        return any(c.phase == "mixed" for c in self.replicas)

    def objective_value(self, objective: str) -> float:
        """This plan's value of a primary objective (cost $/h, GPUs, watts, goodput req/s)."""
        return {"cost": self.usd_per_hour, "gpus": self.gpus_total, "power": self.power_w,
                "goodput": self.goodput_rps}[objective]
