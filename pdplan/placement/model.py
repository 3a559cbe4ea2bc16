"""The CP-SAT model: replicas per shape, packed onto node types, with pool capacity c(n).

Variables, per usable candidate shape c: ``n[c]`` instances and ``cap[c] ≤ c(n[c])`` in
milli-req/s, piecewise linear over the stretches of the shape's pool curve (so the program sees
the pooling gain of n replicas behind one router, :mod:`pdplan.poolcap`). Each phase's capacity is the sum over its
shapes and must reach the phase's requirement (system goodput is the minimum of the phases,
0x0A). Packing uses node *patterns* (how many TP groups of each size one node holds), which
keeps the model the same size for 8 GPUs or 4,096; an instance whose stage is wider than a node
(attention DP ranks and experts spread over several nodes) takes that many whole nodes of one
node type, so its ranks share one scale-out fabric. Low node affinity replicates whole segments
instead. Mixed machines (Splitwise's mixed pool, 0x08G), when allowed, are a third kind of
capacity that counts in both phases, G_mixed = min(c_P + c_M, c_D + c_M), because each request
one takes runs both phases on it. Optional families: one shape per (phase, GPU type); capacity that survives losing any
one instance or node; cuts that exclude every plan dominated by a plan that missed end to end;
a fixed plan to place; a ceiling on the objective.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from ortools.sat.python import cp_model

from pdplan.errors import PdplanError
from pdplan.handoff import link_fits
from pdplan.hardware import NodeType
from pdplan.placement.fleets import ANY
from pdplan.placement.problem import (
    MONEY_SCALE,
    Candidate,
    Problem,
    Rejection,
    Segment,
    milli_rps,
    money_units,
    serves,
)

UNBOUNDED_REPLICAS = 10**6
MAX_TIE_BREAK_NODES = 10**5  # beyond this the fewest-nodes tie-break could overflow the objective


# --- candidate screening (families that act on single candidates) ------------------------------

def instance_link_bytes_per_s(node: NodeType, gpus: int) -> float:
    """KV bandwidth an instance of ``gpus`` GPUs has across nodes: each GPU ships (or takes) the part of the KV it
    caches over its own NIC (one RDMA NIC per GPU, as on DGX nodes; :func:`pdplan.handoff.handoff_copies`)."""
    return gpus * node.inter_node_bytes_per_s


def screen(problem: Problem) -> tuple[dict[Candidate, tuple[NodeType, ...]], list[Rejection]]:
    """Node types each usable candidate may go on, and every rejection with its family.

    Link rule (high node affinity: handoffs cross nodes): an instance at the highest per-replica
    rate its pool curve reaches must push (prefill) or pull (decode) its KV within
    ``link_headroom`` of its NIC bandwidth, together with the expert all-to-all an instance spanning
    nodes sends over the same NICs.
    """
    usable: dict[Candidate, tuple[NodeType, ...]] = {}
    rejections = []
    for cand in problem.candidates:
        if cand.phase not in problem.kinds or milli_rps(cand.goodput_rps, round_up=False) <= 0:
            continue  # below 1 milli-rps a shape adds no capacity, only an unbounded replica count
        allowed = problem.fleet.allowed(cand.phase)
        if allowed is not None and cand.gpu not in allowed:
            rejections.append(Rejection(candidate=cand, family="fleet",
                                        reason=f"{cand.label}: fleet {problem.fleet.label} puts {cand.phase} on "
                                               f"{', '.join(allowed)}"))
            continue
        nodes = [n for n in problem.cluster.nodes_for(cand.gpu) if n.stage_nodes(cand)]
        if not nodes:
            rejections.append(Rejection(candidate=cand, family="inventory",
                                        reason=f"{cand.label}: {_unplaceable(cand)}"))
            continue
        crosses = cand.phase != "colocated" and problem.affinity == "high"
        if crosses or cand.all_to_all_bytes_per_request:
            rate = cand.peak_rps_per_instance
            handoff = rate * cand.kv_bytes_per_request if crosses else 0.0
            demand = handoff + rate * cand.all_to_all_bytes_per_request
            fitting = [n for n in nodes
                       if link_fits(demand, instance_link_bytes_per_s(n, cand.gpus), problem.link_headroom)]
            if not fitting:
                best = max(instance_link_bytes_per_s(n, cand.gpus) for n in nodes)
                what = (f"KV handoff {handoff / 1e9:.2f} GB/s" if not cand.all_to_all_bytes_per_request else
                        f"KV handoff {handoff / 1e9:.2f} GB/s + expert all-to-all {(demand - handoff) / 1e9:.2f} GB/s")
                rejections.append(Rejection(
                    candidate=cand, family="link",
                    reason=f"{cand.label}: {what} at {rate:.3g} rps "
                           f"> {problem.link_headroom:.0%} of {best / 1e9:.1f} GB/s across nodes"))
                continue
            nodes = fitting
        usable[cand] = tuple(nodes)
    return usable, rejections


def _unplaceable(cand: Candidate) -> str:
    """Why no node type holds a shape: a DP rank's TP group must sit inside one node (or over whole nodes of one
    NVLink domain), and a stage wider than a node must spread over whole nodes with the same number of ranks on
    each."""
    if cand.stage_gpus == cand.tp:
        return f"no node type with {cand.tp}+ {cand.gpu} GPUs in one node or NVLink domain"
    return (f"no node type of {cand.gpu} holds a TP{cand.tp} rank in one node and spreads {cand.stage_gpus} GPUs "
            "per stage evenly over whole nodes")


# --- node patterns ------------------------------------------------------------------------------

def node_patterns(gpus_per_node: int, sizes: tuple[int, ...]) -> list[dict[int, int]]:
    """Every maximal way to fill one node with TP groups of the given sizes ({size: count}).

    Only maximal patterns are needed: a pattern with room for one more group is dominated by
    the same pattern with that group added, since supplying extra slots is never infeasible.
    """
    sizes = tuple(sorted(set(s for s in sizes if s <= gpus_per_node)))
    if not sizes:
        return []
    found: list[tuple[int, ...]] = []

    def fill(i: int, room: int, counts: tuple[int, ...]) -> None:
        # Largest size first, each count from the most that fits down; only what fits is ever built,
        # so a 72-GPU NVL72 node with groups of 1 to 72 GPUs takes thousands of steps, not billions.
        if i < 0:
            if room < sizes[0] and any(counts):
                found.append(counts)
            return
        for k in range(room // sizes[i], -1, -1):
            fill(i - 1, room - k * sizes[i], (k, *counts))

    fill(len(sizes) - 1, gpus_per_node, ())
    # In the order of the fewest groups first, then by the groups in ascending size: the order in which
    # the patterns become the program's variables, kept as it has always been.
    found.sort(key=lambda c: (sum(c), [s for s, k in zip(sizes, c) for _ in range(k)]))
    return [dict(zip(sizes, counts)) for counts in found]


# --- segments (low node affinity) ---------------------------------------------------------------

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
            if p.stage_gpus > node.gpus_per_node or d.stage_gpus > node.gpus_per_node:
                continue  # a segment is one node per stage: an instance spanning nodes is not one
            for a in range(1, node.gpus_per_node // p.stage_gpus + 1):
                for b in range(1, (node.gpus_per_node - a * p.stage_gpus) // d.stage_gpus + 1):
                    seg = Segment(node=node, prefill=p, decode=d, a=a, b=b)
                    demand = seg.capacity_rps * d.kv_bytes_per_request / p.pp  # what lands on the decode
                    path = min(a * p.stage_gpus, b * d.stage_gpus) * node.intra_node_bytes_per_s
                    if link_fits(demand, path, problem.link_headroom):
                        found.append(seg)
                    else:
                        rejections.append(Rejection(candidate=p, family="link", reason=(
                            f"{p.label} with {d.label} on {node.name}: intra-node handoff "
                            f"{demand / 1e9:.2f} GB/s > {problem.link_headroom:.0%} of {path / 1e9:.1f} GB/s")))
    found.sort(key=lambda s: (s.node.name, s.prefill.label, s.decode.label, s.a, s.b))
    return found, rejections


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
    use: dict = field(default_factory=dict)  #: unit (candidate or segment index) → in use
    bounds: dict = field(default_factory=dict)  #: candidate → most instances worth running
    nodes_weight: int = 1   #: the objective is primary × nodes_weight ± nodes used (tie-break)
    node_bounds: dict = field(default_factory=dict)  #: most nodes each node type (or segment) may use


def replica_bound(problem: Problem, cand: Candidate, relax: frozenset[str] = frozenset()) -> int:
    """Most instances of one shape worth running: enough alone for the requirement (more only
    adds cost; one node's worth more under redundancy; one more than a plan that missed had), or
    what the cluster or the GPU budget can hold."""
    nodes = problem.cluster.nodes_for(cand.gpu)
    if "inventory" in relax or any(n.count is None for n in nodes):
        by_inventory = math.inf
    else:
        by_inventory = problem.cluster.instances_of(cand.gpu, cand.tp, cand.pp, cand.dp)
    bounds = [by_inventory]
    if problem.fixed is not None:
        bounds.append(dict(problem.fixed).get(cand, 0))
    elif problem.below is not None:  # the ceiling bounds every count; capacity needs no more
        bounds.append(objective_units(problem.objective, problem.below) // max(1, instance_units(problem, cand)))
    elif problem.target_rps is not None and "capacity" not in relax:
        limit = by_inventory if by_inventory < math.inf else UNBOUNDED_REPLICAS
        needed = cand.pool_curve.replicas_for(problem.required_rps(cand.phase), int(limit))
        needed = limit if needed is None else needed + lost_per_failure(problem, cand)
        # a plan that missed may need one more of any shape it had, whatever the curve says
        bounds.append(max([needed, *(dict(missed).get(cand, 0) + 1
                                     for missed in problem.excluded + problem.excluded_exactly)]))
    if problem.max_gpus is not None and "budget" not in relax:
        bounds.append(problem.max_gpus // cand.gpus)
    if cand.phase == "mixed" and problem.max_mixed is not None:
        bounds.append(problem.max_mixed)
    bound = min(bounds)
    if bound == math.inf and relax:
        return UNBOUNDED_REPLICAS  # a diagnostic re-solve; any finite bound will do
    if bound == math.inf:
        raise PdplanError("objective goodput with unbounded node counts needs a budget "
                          "(--max-gpus, --max-cost or --max-power)", field="objective")
    return int(bound)


def instance_units(problem: Problem, cand: Candidate) -> int:
    """One instance's share of the primary objective, in the model's integer units."""
    gpu = problem.cluster.priced_gpu(cand.gpu)
    return {"cost": money_units(gpu.usd_per_hour * cand.gpus), "gpus": cand.gpus,
            "power": round(gpu.tdp_w * cand.gpus)}[problem.objective]


def lost_per_failure(problem: Problem, cand: Candidate) -> int:
    """Instances of ``cand`` one failure takes: one instance, or as many as fill one node."""
    if problem.redundancy == "instance":
        return 1
    if problem.redundancy == "node":
        return max(n.gpus_per_node // cand.node_slot(n.gpus_per_node) for n in problem.cluster.nodes_for(cand.gpu)
                   if n.stage_nodes(cand))
    return 0


def _capacity(model: cp_model.CpModel, cand: Candidate, count, bound: int):
    """An expression at most c(count) in milli-rps, tight while the per-replica rate grows: one
    line through the origin per stretch of the pool curve, the stretch chosen by a boolean
    (the disjunctive piecewise-linear form, whose LP relaxation is the convex hull)."""
    pieces = cand.pool_curve.segments(bound)
    if len(pieces) == 1:
        return milli_rps(pieces[0][2], round_up=False) * count
    chosen, parts, capacity = [], [], 0
    for first, last, rate in pieces:
        on = model.new_bool_var("")
        part = model.new_int_var(0, last, "")
        model.add(part >= first * on)
        model.add(part <= last * on)
        chosen.append(on)
        parts.append(part)
        capacity += milli_rps(rate, round_up=False) * part
    model.add(sum(chosen) <= 1)
    model.add(sum(parts) == count)
    return capacity


def build_model(problem: Problem, *, relax: frozenset[str] = frozenset()) -> Model:
    """Build the CP-SAT model; ``relax`` drops constraint families to diagnose infeasibility."""
    screened = replace(problem, fleet=ANY) if "fleet" in relax else problem
    if "link" in relax:
        screened = replace(screened, candidates=tuple(replace(c, kv_bytes_per_request=0.0)
                                                      for c in problem.candidates))
    usable, rejections = screen(screened)
    model = cp_model.CpModel()

    # n[c] = instances of candidate shape c.
    bounds = {c: replica_bound(problem, c, relax) for c in usable}
    n = {c: model.new_int_var(0, bounds[c], f"n_{i}") for i, c in enumerate(usable)}
    built = Model(cp=model, usable=usable, rejections=rejections, n=n, m={}, z={}, patterns={},
                  units=(), u={}, goodput_milli=None, bounds=bounds)
    if problem.affinity == "high":
        capacity = _pack_instances(built, problem, relax)
    else:
        capacity = _pack_segments(built, screened, relax)
    if problem.pool_shapes == "one":
        _one_shape_per_gpu_type(built)
    _keep_apart(built, problem.apart)
    if problem.fixed is not None:
        _fix(built, problem)

    for phase in problem.phases:  # a plan runs every phase, whatever its requirement
        model.add(sum(n[c] for c in usable if c.phase == phase) >= 1)
    if problem.max_mixed is not None:  # Splitwise's mixed pool is a buffer beside the two pools
        model.add(sum(n[c] for c in usable if c.phase == "mixed") <= problem.max_mixed)
    # Each phase serves its requirement (system = min of phases, 0x0A); survives a loss if asked.
    if problem.objective == "goodput":
        if not relax:  # a diagnosis asks only whether a plan exists (see below)
            top = sum(milli_rps(c.capacity_rps(bounds[c]), round_up=False) for c in usable)
            built.goodput_milli = model.new_int_var(0, max(top, 0), "goodput_milli")
            for total, _ in capacity.values():
                model.add(built.goodput_milli <= total)
    elif "capacity" not in relax and problem.fixed is None:
        for phase, (total, after_loss) in capacity.items():
            required = milli_rps(problem.required_rps(phase), round_up=True)
            model.add(total >= required)
            for survivor in after_loss:
                model.add(survivor >= required)

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
    for missed in problem.excluded:
        _exclude_dominated(built, missed)
    for missed in problem.excluded_exactly:
        _exclude_exactly(built, missed)

    if relax:  # a diagnosis asks only whether a plan exists: no objective, whose range a relaxed
        return built  # family can leave unbounded (goodput over node counts lifted overflows int64)

    # Objective: minimise cost, GPUs or power, or maximise goodput within the budgets.
    # Among equally good plans, prefer the one on the fewest nodes (primary × W ± nodes, W > nodes).
    nodes, most_nodes = _nodes_used(built, problem)
    if most_nodes > MAX_TIE_BREAK_NODES:  # keep the tie-break within int64
        nodes, most_nodes = 0, 0
    built.nodes_weight = most_nodes + 1
    if problem.objective == "goodput":
        model.maximize(built.goodput_milli * built.nodes_weight - nodes)
    else:
        primary = {"cost": money, "gpus": gpus, "power": watts}[problem.objective]
        if problem.below is not None:
            ceiling = objective_units(problem.objective, problem.below) - 1
            model.add(primary <= ceiling)
        if problem.strongest:  # the weakest phase as strong as can be, then the cheapest such plan
            top = sum(milli_rps(c.capacity_rps(bounds[c]), round_up=False) for c in usable)
            weakest = model.new_int_var(0, max(top, 0), "weakest_milli")
            for total, _ in capacity.values():
                model.add(weakest <= total)
            model.maximize(weakest * (max(ceiling, 0) + 1) - primary)
        else:
            model.minimize(primary * built.nodes_weight + nodes)
    if problem.affinity == "high" and problem.fixed is None:
        _add_greedy_hint(built, problem)
    return built


def objective_units(objective: str, value: float) -> int:
    """A primary objective value in the model's integer units."""
    return {"cost": money_units, "gpus": round, "power": round}[objective](value)


def objective_step(objective: str) -> float:
    """The smallest change of a primary objective the model tells apart (one integer unit)."""
    return 1 / objective_scale(objective)


def whole_cluster(problem: Problem) -> float | None:
    """The objective of running every GPU the cluster holds (None when a node count is unbounded)."""
    if any(n.count is None for n in problem.cluster.nodes):
        return None
    value = {"cost": lambda n: n.count * n.gpus_per_node * problem.cluster.priced_gpu(n.gpu.name).usd_per_hour,
             "gpus": lambda n: n.count * n.gpus_per_node,
             "power": lambda n: n.count * n.gpus_per_node * n.gpu.tdp_w}[problem.objective]
    return sum(value(n) for n in problem.cluster.nodes) + objective_step(problem.objective)


def objective_scale(objective: str) -> int:
    return {"cost": MONEY_SCALE, "gpus": 1, "power": 1, "goodput": 1000}[objective]


def _pack_instances(built: Model, problem: Problem, relax: frozenset[str]) -> dict:
    """High node affinity: instances go anywhere; TP groups are packed into node patterns.

    Returns, per phase, the capacity expression in milli-rps and the capacities left after
    each possible loss (empty without redundancy).
    """
    model, usable, n = built.cp, built.usable, built.n
    # m[c, t] = instances of c placed on node type t.
    for i, (cand, nodes) in enumerate(usable.items()):
        for node in nodes:
            built.m[cand, node.name] = model.new_int_var(0, built.bounds[cand], f"m_{i}_{node.name}")
        model.add(sum(built.m[cand, node.name] for node in nodes) == n[cand])

    # z[t, p] = nodes of type t filled with pattern p; TP groups of each size fit the patterns.
    for node in problem.cluster.nodes:
        placed = [c for c in usable if (c, node.name) in built.m]
        slot = {c: c.node_slot(node.gpus_per_node) for c in placed}
        parts = {c: c.pp * node.stage_nodes(c) for c in placed}  # slots one instance takes
        patterns = built.patterns[node.name] = node_patterns(node.gpus_per_node, tuple(slot.values()))
        if not placed:
            continue
        if node.count is None or "inventory" in relax:
            node_bound = sum(built.bounds[c] * parts[c] for c in placed)
        else:
            node_bound = node.count
        built.node_bounds[node.name] = node_bound
        for k in range(len(patterns)):
            built.z[node.name, k] = model.new_int_var(0, node_bound, f"z_{node.name}_{k}")
        model.add(sum(built.z[node.name, k] for k in range(len(patterns))) <= node_bound)
        for size in sorted(set(slot.values())):
            supply = sum(p.get(size, 0) * built.z[node.name, k] for k, p in enumerate(patterns))
            demand = sum(parts[c] * built.m[c, node.name] for c in placed if slot[c] == size)
            model.add(supply >= demand)

    # cap[c] = c(n[c]); a loss leaves c(n[c] − lost) of that shape and the rest of the phase whole.
    cap, after = {}, {}
    for i, cand in enumerate(usable):
        bound = built.bounds[cand]
        built.use[cand] = _in_use(model, n[cand], f"use_{i}")
        cap[cand] = _capacity(model, cand, n[cand], bound)
        lost = lost_per_failure(problem, cand)
        if lost:
            left = model.new_int_var(0, bound, f"left_{i}")
            model.add_max_equality(left, [n[cand] - lost, 0])
            after[cand] = _capacity(model, cand, left, bound)
    out = {}
    for phase in problem.phases:
        members = [c for c in usable if serves(c.phase, phase)]
        total = sum(cap[c] for c in members)
        out[phase] = (total, [total - cap[c] + after[c] for c in members if c in after])
    return out


def _pack_segments(built: Model, problem: Problem, relax: frozenset[str]) -> dict:
    """Low node affinity: whole segments are replicated; returns the system capacity in milli-rps
    and what is left after each possible loss."""
    model, n = built.cp, built.n
    found, rejections = segments(problem, built.usable)
    built.rejections.extend(rejections)
    built.units = tuple(found)
    fixed = dict(problem.fixed or ())
    # u[k] = copies of segment k; each copy takes pp whole nodes of its type.
    for k, seg in enumerate(found):
        if problem.fixed is not None:
            bound = fixed.get(seg, 0)
        elif seg.node.count is None or "inventory" in relax:
            bound = UNBOUNDED_REPLICAS if problem.target_rps is None else (
                math.ceil(problem.required_rps("system") * 1000 / max(seg.capacity_milli, 1))
                + (problem.redundancy != "none"))
        else:
            bound = seg.node.count // seg.prefill.pp
        built.u[k] = model.new_int_var(0, bound, f"u_{k}")
        built.use[k] = _in_use(model, built.u[k], f"useg_{k}")
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
    total = sum(seg.capacity_milli * built.u[k] for k, seg in enumerate(found))
    after = []
    if problem.redundancy != "none":
        after = [total - (seg.capacity_milli - seg.capacity_after_loss_milli(problem.redundancy)) * built.use[k]
                 for k, seg in enumerate(found)]
    return {"system": (total, after)}


def _one_shape_per_gpu_type(built: Model) -> None:
    """Deployers run one shape per pool: at most one candidate per (phase, GPU type) in use."""
    groups: dict[tuple[str, str], list] = {}
    for cand in built.usable:
        groups.setdefault((cand.phase, cand.gpu), []).append(_used(built, cand))
    for members in groups.values():
        if len(members) > 1:
            built.cp.add(sum(members) <= 1)


def _keep_apart(built: Model, pairs: tuple[tuple[Candidate, Candidate], ...]) -> None:
    """Shapes the plan's engine cannot run together (:func:`pdplan.engines.pair_refusal`): at most
    one of each pair in use."""
    for a, b in pairs:
        if a in built.usable and b in built.usable:
            built.cp.add(_used(built, a) + _used(built, b) <= 1)


def _used(built: Model, cand: Candidate):
    """The boolean "candidate in use", made once (low affinity: true when any of its segments is)."""
    if cand not in built.use:
        built.use[cand] = _in_use(built.cp, built.n[cand], f"usec_{list(built.usable).index(cand)}")
    return built.use[cand]


def _in_use(model: cp_model.CpModel, count, name: str):
    """A boolean that is true exactly when ``count`` >= 1."""
    used = model.new_bool_var(name)
    model.add(count >= 1).only_enforce_if(used)
    model.add(count == 0).only_enforce_if(~used)
    return used


def _unit_vars(built: Model) -> dict:
    """The counts a plan is named by: n per candidate (high affinity), u per segment (low)."""
    if built.units:
        return {seg: built.u[k] for k, seg in enumerate(built.units)}
    return dict(built.n)


def _fix(built: Model, problem: Problem) -> None:
    """Place exactly the given counts; a unit the model cannot use makes the problem infeasible."""
    wanted = dict(problem.fixed)
    units = _unit_vars(built)
    for unit, var in units.items():
        built.cp.add(var == wanted.get(unit, 0))
    if any(unit not in units for unit, count in wanted.items() if count):
        built.cp.add_bool_or([])  # a shape the fleet, links or nodes rule out: infeasible


def _exclude_dominated(built: Model, missed) -> None:
    """No plan whose every count is at most ``missed``'s: at least one count must exceed it."""
    bound = dict(missed)
    above = []
    for i, (unit, var) in enumerate(_unit_vars(built).items()):
        more = built.cp.new_bool_var("")
        built.cp.add(var >= bound.get(unit, 0) + 1).only_enforce_if(more)
        above.append(more)
    built.cp.add_bool_or(above)


def _exclude_exactly(built: Model, missed) -> None:
    """Not this very plan: at least one count must differ from ``missed``'s."""
    bound = dict(missed)
    differs = []
    for unit, var in _unit_vars(built).items():
        above, below = built.cp.new_bool_var(""), built.cp.new_bool_var("")
        built.cp.add(var >= bound.get(unit, 0) + 1).only_enforce_if(above)
        built.cp.add(var <= bound.get(unit, 0) - 1).only_enforce_if(below)
        differs += [above, below]
    built.cp.add_bool_or(differs)


def _nodes_used(built: Model, problem: Problem):
    """Nodes the plan occupies (an expression) and an upper bound on it."""
    if problem.affinity == "low":
        used = sum(seg.prefill.pp * built.u[k] for k, seg in enumerate(built.units))
    else:
        used = sum(built.z.values())
    return used, sum(built.node_bounds.values())


def _add_greedy_hint(built: Model, problem: Problem) -> None:
    """Hint: per phase, the shape with the best capacity per GPU, replicated to the requirement."""
    if problem.target_rps is None:
        return
    for phase in problem.phases:
        pool = [c for c in built.n if c.phase == phase]
        if not pool:
            continue
        best = max(pool, key=lambda c: (c.goodput_rps / c.gpus, -c.gpus))
        for cand in pool:
            want = 0
            if cand == best:
                want = (best.pool_curve.replicas_for(problem.required_rps(phase), built.bounds[best]) or 0
                        ) + lost_per_failure(problem, best)
            built.cp.add_hint(built.n[cand], min(want, built.bounds[cand]))
