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

Inventory, per window and physical GPU type: Σ gpus_c · n_{w,c} ≤ the cluster's GPUs of that
type (the placement then packs each window on the nodes and may refuse a fragmented one).
Objective, in dollars: Σ_w hours_w · Σ_c $/h_c · n_{w,c} + Σ_{w≥1} Σ_c (j_{w,c} + l_{w,c}) · gpus_c
· (change-cost GPU-minutes / 60) · $/GPU-h_c: the GPU time the windows run, plus the GPU time each
instance that leaves a pool loses draining and each that joins loses loading weights (a flip
does both). A static plan is the same program with n_{w,c} = n_{0,c} for every w; a change cost
above what any change saves makes the windowed plan static too.
"""

from __future__ import annotations

from dataclasses import dataclass

from ortools.sat.python import cp_model

from pdplan.errors import InfeasibleError
from pdplan.hardware import Cluster, get_gpu
from pdplan.placement import Candidate, Fleet
from pdplan.placement.problem import money_units

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
    held = cluster.instances_of(cand.gpu, cand.tp, cand.pp)
    return UNBOUNDED_INSTANCES if held is None else held


def solve_schedule(candidates: tuple[Candidate, ...], *, cluster: Cluster, fleet: Fleet, mode: str,
                   hours: list[float], requirements: list[dict[str, float]], change_gpu_minutes: float,
                   static: bool = False, time_limit_s: float = 10.0, seed: int = 0) -> Schedule:
    """The cheapest schedule over the windows (see the module docstring); InfeasibleError names
    the first window no shape can serve when there is none."""
    phases = MODE_PHASES[mode]
    windows = range(len(hours))
    usable = {p: [c for c in candidates if c.phase == p and (fleet.allowed(p) is None or c.gpu in fleet.allowed(p))
                  and most_instances(cluster, c) > 0] for p in phases}
    needs = {c: [c.pool_curve.replicas_for(requirements[w][c.phase], most_instances(cluster, c)) for w in windows]
             for p in phases for c in usable[p]}
    for p in phases:
        usable[p] = [c for c in usable[p] if all(k is not None for k in needs[c])]
        if not usable[p]:
            raise InfeasibleError(f"no {p} shape serves every window within the cluster (the busiest needs "
                                  f"{max(r[p] for r in requirements):.3g} req/s)")
    model = cp_model.CpModel()
    chosen, n, joins, leaves = {}, {}, {}, {}
    for p in phases:
        for c in usable[p]:
            chosen[c] = model.new_bool_var("")
            top = most_instances(cluster, c)
            for w in windows:
                n[w, c] = model.new_int_var(0, top, "")
                model.add(n[w, c] >= needs[c][w] * chosen[c])
                model.add(n[w, c] <= top * chosen[c])
                if static and w > 0:
                    model.add(n[w, c] == n[0, c])
                if w > 0:
                    joins[w, c], leaves[w, c] = model.new_int_var(0, top, ""), model.new_int_var(0, top, "")
                    model.add(joins[w, c] >= n[w, c] - n[w - 1, c])
                    model.add(leaves[w, c] >= n[w - 1, c] - n[w, c])
        model.add_exactly_one(chosen[c] for c in usable[p])
    every = [c for p in phases for c in usable[p]]
    for hardware in sorted({get_gpu(c.gpu).physical for c in every}):
        owned = cluster.gpus_of(hardware)
        if owned is None:
            continue  # as many nodes as needed
        on = [c for c in every if get_gpu(c.gpu).physical == hardware]
        for w in windows:
            model.add(sum(c.gpus * n[w, c] for c in on) <= owned)
    price = {c: cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus for c in every}
    model.minimize(sum(money_units(hours[w] * price[c]) * n[w, c] for w in windows for c in every)
                   + sum(money_units(change_gpu_minutes / 60 * price[c]) * (joins[w, c] + leaves[w, c])
                         for w in windows if w > 0 for c in every))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = 1  # the chosen optimum among ties is identical run to run
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise InfeasibleError("the cluster cannot hold every window's pools at once (GPU inventory)")
    shapes = {p: next(c for c in usable[p] if solver.value(chosen[c])) for p in phases}
    replicas = tuple({p: solver.value(n[w, shapes[p]]) for p in phases} for w in windows)
    joined = tuple({p: max(0, replicas[w][p] - replicas[w - 1][p]) if w else 0 for p in phases} for w in windows)
    left = tuple({p: max(0, replicas[w - 1][p] - replicas[w][p]) if w else 0 for p in phases} for w in windows)
    run = sum(hours[w] * price[shapes[p]] * replicas[w][p] for w in windows for p in phases)
    change = sum(change_gpu_minutes / 60 * price[shapes[p]] * (joined[w][p] + left[w][p])
                 for w in windows for p in phases)
    gpu_hours = sum(hours[w] * shapes[p].gpus * replicas[w][p] for w in windows for p in phases)
    return Schedule(mode=mode, shapes=shapes, replicas=replicas, run_usd=run, change_usd=change,
                    gpu_hours=gpu_hours, joins=joined, leaves=left, status=solver.status_name(status))
