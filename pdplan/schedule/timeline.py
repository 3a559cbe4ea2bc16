"""The whole schedule simulated on the whole trace, every change between windows drained first.

At a window boundary t each change runs as a deployer would run it:

* **leave** (an instance stopped, or flipped out of its phase): routes to it stop at t; it
  finishes the requests it holds and, for prefill, hands their KV off; the simulated *drain*
  ends when its last request has left it (decode: finished; prefill: KV sent);
* **join** (an instance started, or flipped in): when the inventory has GPUs to spare during the
  change, it loads its weights before t and takes requests from t; otherwise it takes the GPUs
  of a leaving instance of the same hardware and rejoins at that instance's drain end plus the
  weight load time (weights per GPU / :data:`LOAD_BYTES_PER_S`).

Drain ends come from the simulation and the rejoin times depend on them, so the timeline is
simulated until the rejoin times settle (they move by under a millisecond), at most
:data:`MAX_PASSES` times. The verdict is per window: each window's requests, transitions
included, judged against the SLO over the verification's runs (run 0 the trace itself, the
others Poisson resamples that keep its rate over time), as a window's own check is judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from pdplan.goodput import joint_attainment, per_request_clocks
from pdplan.hardware import get_gpu
from pdplan.sim import Plan, simulate
from pdplan.slo import attainment
from pdplan.verify import Interval, run_workloads
from pdplan.workload import window

#: Weight loading bandwidth per GPU (local NVMe or host memory), an assumption.
LOAD_BYTES_PER_S = 2e9
#: Timeline simulations at most, while rejoin times settle.
MAX_PASSES = 4
SETTLED_S = 1e-3


@dataclass(frozen=True, kw_only=True)
class Change:
    """One instance joining or leaving a pool at a window boundary."""

    window: int
    pool: str
    replica: int
    kind: str                   #: "join" or "leave"
    at_s: float                 #: the boundary: routes stop (leave) or the window opens (join)
    ready_s: float | None       #: join: when it takes requests
    drain_s: float | None       #: leave: how long its drain took (simulated)
    took_gpus_of: str | None = None  #: join: the leaving instance whose GPUs it loads onto

    @property
    def steps(self) -> tuple[str, ...]:
        """What a deployer runs, in order (a join onto drained GPUs waits for that drain first)."""
        if self.kind == "leave":
            return ("STOP_NEW_ROUTES", "DRAIN_IN_FLIGHT_AND_KV", "RELEASE_GPUS")
        wait = ("WAIT_FOR_DRAIN",) if self.took_gpus_of else ()
        return (*wait, "LOAD_WEIGHTS", "START_ROUTES")


@dataclass(frozen=True, kw_only=True)
class WindowVerdict:
    window: int
    joint: Interval
    objectives: tuple[Interval, ...]
    passed: bool


@dataclass(frozen=True, kw_only=True)
class Timeline:
    changes: tuple[Change, ...]
    windows: tuple[WindowVerdict, ...]
    passes: int                 #: timeline simulations run until the rejoin times settled
    load_s: dict[str, float]    #: pool → weight load time of one of its instances

    @property
    def passed(self) -> bool:
        return all(w.passed for w in self.windows)


def load_time_s(model, gpus: int) -> float:
    """Seconds to load one instance's weights: its bytes per GPU over LOAD_BYTES_PER_S."""
    return weight_load_s(model.weight_bytes / gpus)


def weight_load_s(bytes_per_gpu: float) -> float:
    """Seconds for a GPU to load ``bytes_per_gpu`` of weights at LOAD_BYTES_PER_S (every GPU loads
    its share at once)."""
    return bytes_per_gpu / LOAD_BYTES_PER_S


def whole_day_plan(result) -> Plan:
    """The schedule's pools at their largest replica counts, linked as a window's placement links them."""
    plans = [c.plan for c in result.checks]
    most = {}
    for plan in plans:
        for pool in plan.pools:
            most[pool.name] = max(most.get(pool.name, 0), pool.replicas)
    base = next(p for p in plans if {q.name for q in p.pools} == set(most))
    return replace(base, pools=tuple(replace(p, replicas=most[p.name]) for p in base.pools),
                   name=base.name.rsplit(",", 1)[0] + ", whole schedule")


def simulate_timeline(result, request, profiles: dict) -> Timeline:
    """Simulate ``result``'s schedule (a :class:`~pdplan.schedule.search.VerifiedSchedule`) on the whole
    trace with drain-first changes and judge each window (see the module docstring)."""
    plan = whole_day_plan(result)
    checks = result.checks
    counts = [{pool.name: pool.replicas for pool in c.plan.pools} for c in checks]
    starts = [c.window.start_s for c in checks]
    loads = {pool.name: load_time_s(request.model, pool.tp * pool.pp) for pool in plan.pools}
    trace = window(request.workload, start_s=0.0)
    runs = run_workloads(trace, len(trace) / float(trace.arrival_s[-1]), runs=request.runs,
                         seed=request.seed, arrivals=request.settings.arrivals)
    drains: dict[tuple[str, int, int], float] = {}
    changes, passes = (), 0
    for passes in range(1, MAX_PASSES + 1):
        availability, changes = _availability(plan, counts, starts, drains, loads, request.cluster)
        records = simulate(runs[0], plan, profiles, model=request.model, seed=request.seed,
                           availability=availability)
        measured = _drain_ends(plan, records, changes, availability)
        settled = all(abs(measured.get(key, 0.0) - drains.get(key, 0.0)) < SETTLED_S for key in measured)
        drains = measured
        if settled:
            break
    availability, changes = _availability(plan, counts, starts, drains, loads, request.cluster)
    results = [simulate(run, plan, profiles, model=request.model, seed=request.seed,
                        availability=availability) for run in runs]
    verdicts = tuple(_judge(results, starts + [math.inf], w, request) for w in range(len(starts)))
    return Timeline(changes=tuple(changes), windows=verdicts, passes=passes, load_s=loads)


def _availability(plan: Plan, counts: list[dict], starts: list[float], drains: dict, loads: dict, cluster):
    """Each replica's intervals and the changes, from the counts per window and the drain ends
    known so far (a leave not yet simulated drains instantly)."""
    spans = {p.name: [[] for _ in range(p.replicas)] for p in plan.pools}
    opened = {(p.name, k): (-math.inf if k < counts[0].get(p.name, 0) else None)
              for p in plan.pools for k in range(p.replicas)}
    gpu = {p.name: (get_gpu(p.gpu).physical, p.tp * p.pp) for p in plan.pools}
    changes = []
    for w in range(1, len(starts)):
        t = starts[w]
        leaving = [(name, k) for name in spans for k in range(counts[w].get(name, 0), counts[w - 1].get(name, 0))]
        joining = [(name, k) for name in spans for k in range(counts[w - 1].get(name, 0), counts[w].get(name, 0))]
        spare = _spare_gpus(cluster, counts[w - 1], gpu)
        freed = []
        for name, k in leaving:
            spans[name][k].append((opened[name, k], t))
            opened[name, k] = None
            end = drains.get((name, k, w), t)
            freed.append((gpu[name], end, f"{name}/{k}"))
            changes.append(Change(window=w, pool=name, replica=k, kind="leave", at_s=t, ready_s=None,
                                  drain_s=end - t))
        freed.sort(key=lambda f: f[1])
        for name, k in joining:
            hardware, size = gpu[name]
            if spare.get(hardware, math.inf) >= size:
                spare[hardware] = spare.get(hardware, math.inf) - size
                ready, donor = t, None
            else:  # wait for a leaving instance of the same hardware to drain, then load
                match = next((f for f in freed if f[0][0] == hardware), None)
                if match is not None:
                    freed.remove(match)
                end = t if match is None else match[1]
                ready, donor = end + loads[name], None if match is None else match[2]
            opened[name, k] = ready
            changes.append(Change(window=w, pool=name, replica=k, kind="join", at_s=t, ready_s=ready,
                                  drain_s=None, took_gpus_of=donor))
    for (name, k), since in opened.items():
        if since is not None:
            spans[name][k].append((since, math.inf))
    return {name: [s or [(math.inf, math.inf)] for s in per] for name, per in spans.items()}, changes


def _spare_gpus(cluster, before: dict, gpu: dict) -> dict[str, float]:
    """GPUs of each hardware free as a change starts: the previous window's instances, the
    leaving ones included (they drain), still hold theirs (inf: unbounded node counts)."""
    spare = {}
    for hardware in {h for h, _ in gpu.values()}:
        owned = cluster.gpus_of(hardware)
        held = sum(before.get(name, 0) * size for name, (h, size) in gpu.items() if h == hardware)
        spare[hardware] = math.inf if owned is None else owned - held
    return spare


def _drain_ends(plan: Plan, result, changes, availability) -> dict[tuple[str, int, int], float]:
    """When each leaving instance held its last request: decode and colocated, its last finish;
    prefill, the last KV it handed off. Requests it took before routes stopped count."""
    index = {}
    for pool in plan.pools:
        for k in range(pool.replicas):
            index[pool.name, k] = len(index)
    ends = {}
    for change in changes:
        if change.kind != "leave":
            continue
        instance = index[change.pool, change.replica]
        phase = next(p.phase for p in plan.pools if p.name == change.pool)
        column = "prefill_instance" if phase == "prefill" else "decode_instance"
        taken = (result[column] == instance) & (result["arrival_s"] < change.at_s)
        last = result["transfer_end_s" if phase == "prefill" else "finish_s"][taken]
        last = last[np.isfinite(last)]
        ends[change.pool, change.replica, change.window] = max(change.at_s, float(last.max()) if last.size else 0.0)
    return ends


def _judge(results, bounds: list[float], w: int, request) -> WindowVerdict:
    """Window ``w``'s requests in every run, judged as a window's own check is."""
    slo = request.slo
    per_objective, joint = [[] for _ in slo.objectives], []
    for result in results:
        inside = (result["arrival_s"] >= bounds[w]) & (result["arrival_s"] < bounds[w + 1])
        clocks = {k: v[inside] for k, v in per_request_clocks(result).items()}
        for i, o in enumerate(slo.objectives):
            per_objective[i].append(attainment(clocks[o.metric], o.threshold_s))
        joint.append(joint_attainment(slo, clocks))
    intervals = tuple(Interval.of(v) for v in per_objective)
    passed = all(i.judged(request.rule) >= o.attainment for i, o in zip(intervals, slo.objectives))
    return WindowVerdict(window=w, joint=Interval.of(joint), objectives=intervals, passed=passed)
