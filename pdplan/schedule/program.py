"""The windowed integer program: one shape per phase for the whole day, replicas per window, and
a cost for every change between windows, minimised over the sum of the windows (CP-SAT).

Variables, per mode (disaggregated: a prefill and a decode shape; colocated: one shape):

* x_c ∈ {0, 1}: shape c runs its phase all day, Σ_{c of a phase} x_c = 1;
* n_{w,c} ∈ [need_c(w)·x_c, N_c·x_c]: replicas in window w, with need_c(w) = the fewest replicas
  whose pool capacity c(n) reaches the phase's requirement in w (its rate, raised after a
  verification miss) and N_c the most the cluster holds;
* j_{w,c} ≥ n_{w,c} − n_{w−1,c} and l_{w,c} ≥ n_{w−1,c} − n_{w,c}, both ≥ 0: instances that join
  the pool at the start of w (started, or flipped in from the other phase) and that leave it
  (stopped, or flipped out).

With ``--mixed`` a disaggregated schedule may also run Splitwise's mixed machines (0x08G): one
mixed shape for the day (per GPU type, the one with the most capacity per GPU) and, per window,
a count k ∈ {0, …, max} in order encoding (b_{w,k} = [count ≥ k]). A mixed machine counts in
both phases, so beside k of them a pool needs only need_c(w, k) replicas, the fewest whose
c(n) + c_M(k) reaches the requirement (at least one):
x_c ⇒ n_{w,c} ≥ need_c(w) − Σ_k (need_c(w, k−1) − need_c(w, k))·b_{w,k}. Mixed machines join
and leave, and are priced, like any instance.

Inventory, per window and physical GPU type: Σ gpus_c · n_{w,c} ≤ the cluster's GPUs of that
type (the placement then packs each window on the nodes and may refuse a fragmented one).
Objective, in dollars: Σ_w hours_w · Σ_c $/h_c · n_{w,c} + Σ_{w≥1} Σ_c (j_{w,c} + l_{w,c}) · gpus_c
· (change-cost GPU-minutes / 60) · $/GPU-h_c: the GPU time the windows run, plus the GPU time each
instance that leaves a pool loses draining and each that joins loses loading weights (a flip
does both). A static plan is the same program with n_{w,c} = n_{0,c} for every w; a change cost
above what any change saves makes the windowed plan static too.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from ortools.sat.python import cp_model

from pdplan.errors import InfeasibleError
from pdplan.hardware import Cluster, get_gpu
from pdplan.placement import Candidate, Fleet
from pdplan.placement.problem import money_units
from pdplan.placement.solve import interruptible_solve

MODE_PHASES = {"disaggregated": ("prefill", "decode"), "colocated": ("colocated",)}


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """One shape per phase and its replicas in each window."""

    mode: str
    shapes: dict[str, Candidate]              #: phase → the shape it runs all day
    replicas: tuple[dict[str, int], ...]      #: per window: phase → replicas
    run_usd: float                            #: Σ_w hours_w × the window's $/h
    change_usd: float                         #: the change cost of every instance joining a pool
    gpu_hours: float                          #: Σ_w hours_w × GPUs in use
    joins: tuple[dict[str, int], ...]         #: per window: phase → instances joining at its start
    leaves: tuple[dict[str, int], ...]        #: per window: phase → instances leaving at its start
    status: str

    @property
    def usd(self) -> float:
        return self.run_usd + self.change_usd

    def gpus(self, w: int) -> int:
        return sum(self.shapes[p].gpus * k for p, k in self.replicas[w].items())


#: Instances of one shape a schedule may run when the cluster's node counts are unbounded (cloud).
UNBOUNDED_INSTANCES = 4096


def most_instances(cluster: Cluster, cand: Candidate) -> int:
    """Instances of ``cand`` the cluster's nodes hold (UNBOUNDED_INSTANCES for cloud capacity)."""
    held = cluster.instances_of(cand.gpu, cand.tp, cand.pp, cand.dp)
    return UNBOUNDED_INSTANCES if held is None else held


def solve_schedule(candidates: tuple[Candidate, ...], *, cluster: Cluster, fleet: Fleet, mode: str,
                   hours: list[float], requirements: list[dict[str, float]], change_gpu_minutes: float,
                   static: bool = False, mixed_max: int = 0, time_limit_s: float = 10.0, seed: int = 0) -> Schedule:
    """The cheapest schedule over the windows (see the module docstring); InfeasibleError names
    the first window no shape can serve when there is none.

    With ``mixed_max``, a disaggregated schedule may also run up to that many mixed machines of
    one shape in any window. The program without them is solved first; then, per mixed shape and
    pair of pool shapes whose bound (each window at its cheapest count, no change cost) could beat
    it, the program with those shapes fixed. The cheapest is the optimum over all of them."""
    day = Day(cluster=cluster, phases=MODE_PHASES[mode], hours=hours, requirements=requirements,
              change_gpu_minutes=change_gpu_minutes, static=static, mixed_max=mixed_max,
              time_limit_s=time_limit_s, seed=seed)
    usable = {p: [c for c in candidates if c.phase == p and (fleet.allowed(p) is None or c.gpu in fleet.allowed(p))
                  and most_instances(cluster, c) > 0] for p in day.phases}
    for p in day.phases:
        usable[p] = [c for c in usable[p] if all(day.need(c, w) is not None for w in day.windows)]
        if not usable[p]:
            raise InfeasibleError(f"no {p} shape serves every window within the cluster (the busiest needs "
                                  f"{max(r[p] for r in requirements):.3g} req/s)")
    best = _solve(day, usable, mode)
    for mixed in _mixers(candidates, cluster, fleet, mode, mixed_max):
        for shapes in itertools.product(*(usable[p] for p in day.phases)):
            if day.lower_bound(shapes, mixed) >= best.usd - 1e-9:
                continue  # even without changes these shapes cannot beat the best
            try:
                found = _solve(day, {c.phase: [c] for c in shapes}, mode, mixed)
            except InfeasibleError:
                continue
            if found.usd < best.usd - 1e-9:
                best = replace(found, status=max(best.status, found.status, key=STATUS_ORDER.index))
    return best


#: Solver statuses, best first: a schedule is as proven as its least proven solve.
STATUS_ORDER = ("OPTIMAL", "FEASIBLE")


@dataclass(frozen=True, kw_only=True)
class Day:
    """The windowed program's inputs that do not depend on the shapes."""

    cluster: Cluster
    phases: tuple[str, ...]
    hours: list[float]
    requirements: list[dict[str, float]]
    change_gpu_minutes: float
    static: bool
    mixed_max: int
    time_limit_s: float
    seed: int
    _needs: dict = field(default_factory=dict, compare=False, repr=False)  #: need() by its arguments

    @property
    def windows(self) -> range:
        return range(len(self.hours))

    def need(self, c: Candidate, w: int, mixed: Candidate | None = None, k: int = 0) -> int | None:
        """Replicas of ``c`` window w needs beside k mixed machines: the fewest whose c(n) + c_M(k)
        reaches the requirement (0x08G: a mixed machine counts in both phases), at least one;
        None when the cluster cannot hold enough."""
        key = (c, w, mixed, k)
        if key not in self._needs:
            rest = self.requirements[w][c.phase] - (0.0 if mixed is None else mixed.capacity_rps(k))
            self._needs[key] = 1 if mixed is not None and rest <= 0 else c.pool_curve.replicas_for(
                rest, most_instances(self.cluster, c))
        return self._needs[key]

    def counts(self, mixed: Candidate) -> range:
        return range(1, min(self.mixed_max, most_instances(self.cluster, mixed)) + 1)

    def lower_bound(self, shapes, mixed: Candidate) -> float:
        """A bound on any schedule of these shapes and mixed machines: each window at its
        cheapest mixed count, with no change cost and no inventory."""
        price = {c: self.cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus for c in (*shapes, mixed)}
        return sum(self.hours[w] * min(sum(price[c] * self.need(c, w, mixed, k) for c in shapes) + price[mixed] * k
                                       for k in (0, *self.counts(mixed)))
                   for w in self.windows)


def _solve(day: Day, usable: dict[str, list[Candidate]], mode: str, mixed: Candidate | None = None) -> Schedule:
    """The program over ``usable`` shapes (one per phase is chosen), with up to ``day.mixed_max``
    machines of the ``mixed`` shape in any window."""
    phases, windows, cluster = day.phases, day.windows, day.cluster
    model = cp_model.CpModel()
    chosen, n, joins, leaves = {}, {}, {}, {}
    at_least = {}  # window → b_k = [mixed count ≥ k], k = 1, 2, … (order encoding)
    if mixed is not None:
        for w in windows:
            at_least[w] = [model.new_bool_var("") for _ in day.counts(mixed)]
            for lower, higher in zip(at_least[w], at_least[w][1:]):
                model.add_implication(higher, lower)
            n[w, mixed] = sum(at_least[w])
    for p in phases:
        for c in usable[p]:
            chosen[c] = model.new_bool_var("")
            top = most_instances(cluster, c)
            for w in windows:
                n[w, c] = model.new_int_var(0, top, "")
                model.add(n[w, c] <= top * chosen[c])
                model.add(n[w, c] >= day.need(c, w) - sum(
                    fewer * b for b, fewer in zip(at_least.get(w, ()), _fewer(day, c, w, mixed)))
                          ).only_enforce_if(chosen[c])
        model.add_exactly_one(chosen[c] for c in usable[p])
    every = [c for p in phases for c in usable[p]] + ([] if mixed is None else [mixed])
    for c in every:
        top = most_instances(cluster, c)
        for w in windows:
            if day.static and w > 0:
                model.add(n[w, c] == n[0, c])
            if w > 0:
                joins[w, c], leaves[w, c] = model.new_int_var(0, top, ""), model.new_int_var(0, top, "")
                model.add(joins[w, c] >= n[w, c] - n[w - 1, c])
                model.add(leaves[w, c] >= n[w - 1, c] - n[w, c])
    for hardware in sorted({get_gpu(c.gpu).physical for c in every}):
        owned = cluster.gpus_of(hardware)
        if owned is None:
            continue  # as many nodes as needed
        on = [c for c in every if get_gpu(c.gpu).physical == hardware]
        for w in windows:
            model.add(sum(c.gpus * n[w, c] for c in on) <= owned)
    price = {c: cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus for c in every}
    change_hours = day.change_gpu_minutes / 60
    model.minimize(sum(money_units(day.hours[w] * price[c]) * n[w, c] for w in windows for c in every)
                   + sum(money_units(change_hours * price[c]) * (joins[w, c] + leaves[w, c])
                         for w in windows if w > 0 for c in every))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = day.time_limit_s
    solver.parameters.random_seed = day.seed
    solver.parameters.num_workers = 1  # the chosen optimum among ties is identical run to run
    status = interruptible_solve(solver, model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise InfeasibleError("the cluster cannot hold every window's pools at once (GPU inventory)")
    shapes = {p: next(c for c in usable[p] if solver.value(chosen[c])) for p in phases}
    if mixed is not None and any(solver.value(n[w, mixed]) for w in windows):
        shapes["mixed"] = mixed
    kinds = tuple(shapes)
    replicas = tuple({p: solver.value(n[w, shapes[p]]) for p in kinds} for w in windows)
    joined = tuple({p: max(0, replicas[w][p] - replicas[w - 1][p]) if w else 0 for p in kinds} for w in windows)
    left = tuple({p: max(0, replicas[w - 1][p] - replicas[w][p]) if w else 0 for p in kinds} for w in windows)
    run = sum(day.hours[w] * price[shapes[p]] * replicas[w][p] for w in windows for p in kinds)
    change = sum(change_hours * price[shapes[p]] * (joined[w][p] + left[w][p]) for w in windows for p in kinds)
    gpu_hours = sum(day.hours[w] * shapes[p].gpus * replicas[w][p] for w in windows for p in kinds)
    return Schedule(mode=mode, shapes=shapes, replicas=replicas, run_usd=run, change_usd=change,
                    gpu_hours=gpu_hours, joins=joined, leaves=left, status=solver.status_name(status))


def _mixers(candidates, cluster: Cluster, fleet: Fleet, mode: str, mixed_max: int) -> list[Candidate]:
    """The mixed shapes a disaggregated schedule may run (none without ``mixed_max``): per GPU
    type the one with the most capacity per GPU, which keeps the day's program small."""
    if mode != "disaggregated" or mixed_max <= 0:
        return []
    allowed = fleet.allowed("mixed")
    best: dict[str, Candidate] = {}
    for c in candidates:
        if c.phase == "mixed" and (allowed is None or c.gpu in allowed) and most_instances(cluster, c) > 0:
            if c.gpu not in best or c.goodput_rps / c.gpus > best[c.gpu].goodput_rps / best[c.gpu].gpus:
                best[c.gpu] = c
    return [best[gpu] for gpu in sorted(best)]


def _fewer(day: Day, c: Candidate, w: int, mixed: Candidate | None):
    """For k = 1, 2, …: how many fewer replicas of ``c`` window w needs with k mixed machines
    than with k − 1."""
    if mixed is None:
        return
    before = day.need(c, w)
    for k in day.counts(mixed):
        left = day.need(c, w, mixed, k)
        yield before - left
        before = left
