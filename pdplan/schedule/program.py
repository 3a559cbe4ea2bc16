"""The windowed integer program: per window a mode, one shape per phase of that mode and its
replicas, and a cost for every change between windows, minimised over the sum of the windows
(CP-SAT).

Variables, over the modes the request allows (disaggregated: a prefill and a decode shape;
colocated: one shape):

* z_{w,m} ∈ {0, 1}: window w runs mode m, Σ_m z_{w,m} = 1;
* y_{w,c} ∈ {0, 1}: window w runs shape c for its phase, Σ_{c of phase p} y_{w,c} = z_{w,mode(p)};
* n_{w,c} = Σ_k b_{w,c,k}, in order encoding (b_{w,c,k} = [n_{w,c} ≥ k], b_{w,c,k+1} ⇒ b_{w,c,k},
  b_{w,c,1} = y_{w,c}) with y_{w,c} ⇒ b_{w,c,k} for k ≤ need_c(w): replicas in window w, with
  need_c(w) = the fewest replicas whose pool capacity c(n) reaches the phase's requirement in w
  (its rate, raised after a verification miss) within what the cluster holds, and k up to
  max_w need_c(w) (more never pays: holding every window to that many cuts run time, changes and
  GPUs alike). The encoding keeps the program's relaxation tight: a day of 24 windows over 47
  shapes solves to proven optimality in about a second;
* j_{w,c} ≥ n_{w,c} − n_{w−1,c} and l_{w,c} ≥ n_{w−1,c} − n_{w,c}, both ≥ 0: instances that join
  the pool at the start of w (started, reshaped in, or flipped in from the other phase or mode)
  and that leave it (stopped, reshaped out, flipped out).

A reshape is a leave of every instance of the old shape and a join of every instance of the new
one, and a switch between colocated and P/D is the same for every pool, so both are priced by
the same change cost as a replica change. ``one_shape`` adds y_{w,c} = y_{0,c} (one mode and one
shape per phase for the whole day, the restriction pdplan had before shapes could change).

With ``--mixed`` a disaggregated schedule may also run Splitwise's mixed machines (0x08G): one
mixed shape for the day (per GPU type, the one with the most capacity per GPU), one shape per
phase for the day, and, per window, a count k ∈ {0, …, max} in order encoding
(b_{w,k} = [count ≥ k]). A mixed machine counts in both phases, so beside k of them a pool needs
only need_c(w, k) replicas, the fewest whose c(n) + c_M(k) reaches the requirement (at least
one): y_{w,c} ⇒ b_{w,c,k} ∨ [count ≥ m] for the fewest m beside which c needs fewer than k.
Mixed machines join and leave, and are priced, like any instance. The optimum is the cheapest of the program
without mixed machines (shapes free per window) and those with them.

Inventory, per window and physical GPU type: Σ gpus_c · n_{w,c} ≤ the cluster's GPUs of that
type (the placement then packs each window on the nodes and may refuse a fragmented one). A
reshape or a mode switch is made before it breaks: the instances of a shape new in window w load
on GPUs the window before leaves free, while its instances still serve, so every phase has an
instance taking requests through the change: Σ gpus_c · n_{w−1,c} + Σ_c gpus_c · a_{w,c} ≤ the
GPUs, with a_{w,c} ≥ n_{w,c} − max_w need_c(w) · y_{w−1,c} (the replicas of a shape that did not
run in w − 1). Replica changes of a running shape may still wait for a drain, as before.
Objective, in dollars: Σ_w hours_w · Σ_c $/h_c · n_{w,c} + Σ_{w≥1} Σ_c (j_{w,c} + l_{w,c}) · gpus_c
· (change-cost GPU-minutes / 60) · $/GPU-h_c: the GPU time the windows run, plus the GPU time each
instance that leaves a pool loses draining and each that joins loses loading weights (a flip
does both). A static plan is the same program with n_{w,c} = n_{0,c} for every w; a change cost
above what any change saves makes the windowed plan static too.

The same program over one window with no change cost plans that window alone: the sum over the
windows bounds every schedule of the program from below, what a free hand per window would cost.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from ortools.sat.python import cp_model

from pdplan.errors import InfeasibleError
from pdplan.hardware import Cluster, get_gpu
from pdplan.placement import Candidate, Fleet
from pdplan.placement.problem import money_units
from pdplan.placement.recall import solve_once
from pdplan.placement.solve import interruptible_solve

MODE_PHASES = {"disaggregated": ("prefill", "decode"), "colocated": ("colocated",)}
#: The modes a request's mode lets a window run.
MODES = {"disaggregated": ("disaggregated",), "colocated": ("colocated",), "auto": ("disaggregated", "colocated")}
#: What a schedule whose windows run different modes reports as its mode.
CHANGING = "changing"


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """Each window's mode, its shape per phase and their replicas."""

    modes: tuple[str, ...]                              #: per window: the mode it runs
    window_shapes: tuple[dict[str, Candidate], ...]     #: per window: phase → the shape it runs
    replicas: tuple[dict[str, int], ...]                #: per window: phase → replicas
    run_usd: float                            #: Σ_w hours_w × the window's $/h
    change_usd: float                         #: the change cost of every instance joining or leaving a pool
    gpu_hours: float                          #: Σ_w hours_w × GPUs in use
    #: per window: phase → instances joining at its start (the phases it and the window before run)
    joins: tuple[dict[str, int], ...]
    leaves: tuple[dict[str, int], ...]        #: per window: phase → instances leaving at its start
    status: str

    @property
    def usd(self) -> float:
        return self.run_usd + self.change_usd

    @property
    def mode(self) -> str:
        """The mode every window runs, or CHANGING when windows differ."""
        return self.modes[0] if len(set(self.modes)) == 1 else CHANGING

    @property
    def shapes(self) -> dict[str, Candidate]:
        """Phase → its shape, for each phase that runs one shape in every window it runs in."""
        seen: dict[str, set] = {}
        for shapes in self.window_shapes:
            for phase, c in shapes.items():
                seen.setdefault(phase, set()).add(c)
        return {phase: next(iter(cs)) for phase, cs in seen.items() if len(cs) == 1}

    @property
    def phases(self) -> tuple[str, ...]:
        """Every phase some window runs, in the order they first appear."""
        return tuple(dict.fromkeys(p for shapes in self.window_shapes for p in shapes))

    @property
    def reshapes(self) -> int:
        """Window boundaries at which a mode or a phase's shape changes."""
        return sum(a != b for a, b in zip(self.window_shapes, self.window_shapes[1:]))

    def counts(self, w: int) -> tuple[tuple[Candidate, int], ...]:
        """Window w's (shape, replicas), zero counts dropped."""
        return tuple((self.window_shapes[w][p], k) for p, k in self.replicas[w].items() if k > 0)

    def gpus(self, w: int) -> int:
        return sum(c.gpus * k for c, k in self.counts(w))


#: Instances of one shape a schedule may run when the cluster's node counts are unbounded (cloud).
UNBOUNDED_INSTANCES = 4096


def most_instances(cluster: Cluster, cand: Candidate) -> int:
    """Instances of ``cand`` the cluster's nodes hold (UNBOUNDED_INSTANCES for cloud capacity)."""
    held = cluster.instances_of(cand.gpu, cand.tp, cand.pp, cand.dp)
    return UNBOUNDED_INSTANCES if held is None else held


def solve_schedule(candidates: tuple[Candidate, ...], *, cluster: Cluster, fleet: Fleet, mode: str,
                   hours: list[float], requirements: list[dict[str, float]], change_gpu_minutes: float,
                   static: bool = False, one_shape: bool = False, mixed_max: int = 0, time_limit_s: float = 10.0,
                   seed: int = 0) -> Schedule:
    """The cheapest schedule over the windows (see the module docstring); InfeasibleError names
    the first window no shape can serve when there is none. ``mode`` "auto" lets each window run
    either mode (``requirements`` then name every phase of both).

    With ``mixed_max``, a disaggregated schedule may also run up to that many mixed machines of
    one shape in any window. The program without them is solved first; then, per mixed shape and
    pair of pool shapes whose bound (each window at its cheapest count, no change cost) could beat
    it, the program with those shapes fixed. The cheapest is the optimum over all of them."""
    day = Day(cluster=cluster, modes=MODES[mode], hours=hours, requirements=requirements,
              change_gpu_minutes=change_gpu_minutes, static=static, mixed_max=mixed_max,
              time_limit_s=time_limit_s, seed=seed)
    usable = {p: [c for c in candidates if c.phase == p and (fleet.allowed(p) is None or c.gpu in fleet.allowed(p))
                  and most_instances(cluster, c) > 0 and any(day.need(c, w) is not None for w in day.windows)]
              for p in day.phases}
    for w in day.windows:
        if not day.modes_of(w, usable):
            p = next(p for m in day.modes for p in MODE_PHASES[m] if not day.serving(w, usable[p]))
            raise InfeasibleError(f"no {p} shape serves every window within the cluster (window {w} needs "
                                  f"{requirements[w][p]:.3g} req/s)")
    best = _solve(day, usable, one_shape=one_shape)
    if "disaggregated" not in day.modes:
        return best
    for mixed in _mixers(candidates, cluster, fleet, mixed_max):
        whole_day = {p: [c for c in usable[p] if all(day.need(c, w) is not None for w in day.windows)]
                     for p in MODE_PHASES["disaggregated"]}
        for shapes in itertools.product(*whole_day.values()):
            if day.lower_bound(shapes, mixed) >= best.usd - 1e-9:
                continue  # even without changes these shapes cannot beat the best
            try:
                found = _solve(replace(day, modes=("disaggregated",)), {c.phase: [c] for c in shapes}, mixed=mixed,
                               one_shape=True)
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
    modes: tuple[str, ...]
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

    @property
    def phases(self) -> tuple[str, ...]:
        return tuple(p for m in self.modes for p in MODE_PHASES[m])

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

    def serving(self, w: int, shapes: list[Candidate]) -> list[Candidate]:
        """The shapes that can serve window w alone."""
        return [c for c in shapes if self.need(c, w) is not None]

    def modes_of(self, w: int, usable: dict[str, list[Candidate]]) -> list[str]:
        """The modes window w can run: those each of whose phases has a shape that serves it."""
        return [m for m in self.modes if all(self.serving(w, usable[p]) for p in MODE_PHASES[m])]

    def counts(self, mixed: Candidate) -> range:
        return range(1, min(self.mixed_max, most_instances(self.cluster, mixed)) + 1)

    def lower_bound(self, shapes, mixed: Candidate) -> float:
        """A bound on any schedule of these shapes and mixed machines: each window at its
        cheapest mixed count, with no change cost and no inventory."""
        price = {c: self.cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus for c in (*shapes, mixed)}
        return sum(self.hours[w] * min(sum(price[c] * self.need(c, w, mixed, k) for c in shapes) + price[mixed] * k
                                       for k in (0, *self.counts(mixed)))
                   for w in self.windows)


def _solve(day: Day, usable: dict[str, list[Candidate]], mixed: Candidate | None = None,
           one_shape: bool = False) -> Schedule:
    """The program over ``usable`` shapes (per window, one mode and one shape per phase of it; with
    ``one_shape``, the same for every window), with up to ``day.mixed_max`` machines of the
    ``mixed`` shape in any window."""
    windows, cluster = day.windows, day.cluster
    model = cp_model.CpModel()
    runs, n, joins, leaves = {}, {}, {}, {}
    at_least = {}  # window → b_k = [mixed count ≥ k], k = 1, 2, … (order encoding)
    if mixed is not None:
        for w in windows:
            at_least[w] = [model.new_bool_var("") for _ in day.counts(mixed)]
            for lower, higher in zip(at_least[w], at_least[w][1:]):
                model.add_implication(higher, lower)
            n[w, mixed] = sum(at_least[w])
    for w in windows:
        allowed = day.modes_of(w, usable)
        picked = {m: model.new_bool_var("") for m in day.modes}
        model.add_exactly_one(picked.values())
        for m in day.modes:
            if m not in allowed:
                model.add(picked[m] == 0)
            for p in MODE_PHASES[m]:
                for c in usable[p]:
                    runs[w, c] = model.new_bool_var("")
                    if day.need(c, w) is None:
                        model.add(runs[w, c] == 0)
                model.add(sum(runs[w, c] for c in usable[p]) == picked[m])
    top = {c: max(day.need(c, w) or 0 for w in windows) or 1 for p in day.phases for c in usable[p]}
    for p in day.phases:
        for c in usable[p]:
            for w in windows:
                # b_k = [replicas ≥ k], k = 1 … top_c (order encoding); b_1 is "c runs in w"
                units = [runs[w, c], *(model.new_bool_var("") for _ in range(top[c] - 1))]
                for lower, higher in zip(units, units[1:]):
                    model.add_implication(higher, lower)
                n[w, c] = sum(units)
                for k, enough in enumerate(_floor(day, c, w, mixed, at_least.get(w, ())), start=1):
                    model.add_bool_or([runs[w, c].Not(), units[k - 1], *enough])
                if (one_shape or day.static) and w > 0:
                    model.add(runs[w, c] == runs[0, c])
    if mixed is not None:
        top[mixed] = len(day.counts(mixed))
    every = [c for p in day.phases for c in usable[p]] + ([] if mixed is None else [mixed])
    for c in every:
        for w in windows:
            if day.static and w > 0:
                model.add(n[w, c] == n[0, c])
            if w > 0:
                joins[w, c], leaves[w, c] = model.new_int_var(0, top[c], ""), model.new_int_var(0, top[c], "")
                model.add(joins[w, c] >= n[w, c] - n[w - 1, c])
                model.add(leaves[w, c] >= n[w - 1, c] - n[w, c])
    for hardware in sorted({get_gpu(c.gpu).physical for c in every}):
        owned = cluster.gpus_of(hardware)
        if owned is None:
            continue  # as many nodes as needed
        on = [c for c in every if get_gpu(c.gpu).physical == hardware]
        for w in windows:
            model.add(sum(c.gpus * n[w, c] for c in on) <= owned)
            if w > 0 and not (one_shape or day.static):
                model.add(sum(c.gpus * n[w - 1, c] for c in on)
                          + sum(c.gpus * _arriving(model, runs, n, w, c, top[c]) for c in on if c is not mixed)
                          <= owned)
    price = {c: cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus for c in every}
    change_hours = day.change_gpu_minutes / 60
    model.minimize(sum(money_units(day.hours[w] * price[c]) * n[w, c] for w in windows for c in every)
                   + sum(money_units(change_hours * price[c]) * (joins[w, c] + leaves[w, c])
                         for w in windows if w > 0 for c in every))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = day.time_limit_s
    solver.parameters.random_seed = day.seed
    solver.parameters.num_workers = 1  # the chosen optimum among ties is identical run to run
    status, solver, _ = solve_once(solver, model, interruptible_solve)  # a run's cache may hold it
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise InfeasibleError("the cluster cannot hold every window's pools at once (GPU inventory)")
    value = {(w, c): solver.value(n[w, c]) for w in windows for c in every}
    running = [{p: c for p in day.phases for c in usable[p] if solver.value(runs[w, c])} for w in windows]
    if mixed is not None and any(value[w, mixed] for w in windows):
        running = [{**shapes, "mixed": mixed} for shapes in running]
    replicas = tuple({p: value[w, c] for p, c in shapes.items()} for w, shapes in enumerate(running))
    moved = {(w, c): (max(0, value[w, c] - value[w - 1, c]), max(0, value[w - 1, c] - value[w, c]))
             for w in windows if w > 0 for c in every}
    touched = [dict.fromkeys([*(running[w - 1] if w else ()), *running[w]]) for w in windows]
    joined = tuple({p: sum(moved[w, c][0] for c in every if c.phase == p) if w else 0 for p in touched[w]}
                   for w in windows)
    left = tuple({p: sum(moved[w, c][1] for c in every if c.phase == p) if w else 0 for p in touched[w]}
                 for w in windows)
    run = sum(day.hours[w] * price[c] * value[w, c] for w in windows for c in every)
    change = sum(change_hours * price[c] * sum(moved[w, c]) for w in windows if w > 0 for c in every)
    gpu_hours = sum(day.hours[w] * c.gpus * value[w, c] for w in windows for c in every)
    modes = tuple(next(m for m in day.modes if set(MODE_PHASES[m]) <= set(shapes)) for shapes in running)
    return Schedule(modes=modes, window_shapes=tuple(running), replicas=replicas, run_usd=run, change_usd=change,
                    gpu_hours=gpu_hours, joins=joined, leaves=left, status=status.name)


def _arriving(model: cp_model.CpModel, runs: dict, n: dict, w: int, c: Candidate, top: int):
    """Replicas of ``c`` in window w if the shape is new there (it did not run in w − 1), else 0:
    a reshape or a mode switch is made before it breaks, so these load on GPUs the window before
    leaves free while its instances still serve."""
    arriving = model.new_int_var(0, top, "")
    model.add(arriving >= n[w, c] - top * runs[w - 1, c])
    return arriving


def _floor(day: Day, c: Candidate, w: int, mixed: Candidate | None, at_least: list):
    """For k = 1 … need_c(w): the literals any one of which lets c run fewer than k replicas in
    window w — none without mixed machines, else [mixed count ≥ m] for the fewest m beside which
    c needs fewer than k."""
    need = day.need(c, w)
    for k in range(1, (need or 0) + 1):
        freeing = next((b for m, b in zip(day.counts(mixed), at_least) if day.need(c, w, mixed, m) < k), None) \
            if mixed is not None else None
        yield () if freeing is None else (freeing,)


def _mixers(candidates, cluster: Cluster, fleet: Fleet, mixed_max: int) -> list[Candidate]:
    """The mixed shapes a disaggregated schedule may run (none without ``mixed_max``): per GPU
    type the one with the most capacity per GPU, which keeps the day's program small."""
    if mixed_max <= 0:
        return []
    allowed = fleet.allowed("mixed")
    best: dict[str, Candidate] = {}
    for c in candidates:
        if c.phase == "mixed" and (allowed is None or c.gpu in allowed) and most_instances(cluster, c) > 0:
            if c.gpu not in best or c.goodput_rps / c.gpus > best[c.gpu].goodput_rps / best[c.gpu].gpus:
                best[c.gpu] = c
    return [best[gpu] for gpu in sorted(best)]
