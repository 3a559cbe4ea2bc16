"""The whole schedule simulated on the whole trace, every change between windows drained first.

At a window boundary t each change runs as a deployer would run it:

* **leave** (an instance stopped, or flipped out of its phase): routes to it stop at t; it
  finishes the requests it holds and, for prefill, hands their KV off; the simulated *drain*
  ends when its last request has left it (decode: finished; prefill: KV sent);
* **join** (an instance started, or flipped in): when the inventory has GPUs to spare during the
  change, it loads its weights before t and takes requests from t; otherwise it takes the GPUs
  of a leaving instance of the same hardware and rejoins at that instance's drain end plus the
  weight load time (weights per GPU / :data:`LOAD_BYTES_PER_S`).

A reshape (a phase's shape changes) or a switch between colocated and P/D is the same two kinds
of change for every instance of the old and the new pools, made before it breaks: the program
keeps GPUs spare for the new pools, which load before t and take requests from t while the old
ones drain. Each mode's windows are simulated as one plan of every pool its windows run (on the
requests arriving while that mode runs; an instance takes requests only in its intervals), so a
request that arrived before a switch finishes where it started.

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
from pdplan.sim import Plan, Pool, simulate
from pdplan.slo import attainment
from pdplan.verify import Interval, run_workloads
from pdplan.workload import Workload, window
from pdplan.workload.model import Rows
from pdplan.workload.reshape import replaced

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


def day_pools(result) -> tuple[Pool, ...]:
    """Every pool some window of ``result`` runs, at its largest replica count, in the order the
    windows first run them."""
    most: dict[str, Pool] = {}
    for check in result.checks:
        for pool in check.plan.pools:
            if pool.name not in most or pool.replicas > most[pool.name].replicas:
                most[pool.name] = pool
    return tuple(most.values())


def mode_plan(result, pools: tuple[Pool, ...], mode: str) -> Plan:
    """The pools of the windows that run ``mode``, at their largest replica counts, linked as those
    windows' placements link them: the links of the first window running every one of them, else
    each pair's from the first window running it, and a prefill and a decode pool that no window
    ran together get the slowest of those links (a safe assumption: they meet only in a reshape)."""
    plans = [c.plan for c, m in zip(result.checks, result.schedule.modes) if m == mode]
    names = {p.name for plan in plans for p in plan.pools}
    ours = tuple(p for p in pools if p.name in names)
    whole = next((plan for plan in plans if {p.name for p in plan.pools} == names), plans[0])
    named = whole.name.rsplit(",", 1)[0] + ", whole schedule"
    if whole.colocated:
        return replace(whole, pools=ours, name=named)
    links = {(link.from_pool, link.to_pool): link for link in whole.links}
    for plan in plans:
        for link in plan.links:
            links.setdefault((link.from_pool, link.to_pool), link)
    slowest = min(links.values(), key=lambda link: link.bandwidth_bytes_per_s)
    paired = tuple(links.get((src.name, dst.name)) or replace(slowest, from_pool=src.name, to_pool=dst.name)
                   for src in ours if src.phase == "prefill" for dst in ours if dst.phase in ("decode", "mixed"))
    return replace(whole, pools=ours, links=paired, name=named)


def simulate_timeline(result, request, profiles: dict) -> Timeline:
    """Simulate ``result``'s schedule (a :class:`~pdplan.schedule.search.VerifiedSchedule`) on the whole
    trace with drain-first changes and judge each window (see the module docstring)."""
    checks = result.checks
    pools = day_pools(result)
    modes = result.schedule.modes
    plans = {mode: mode_plan(result, pools, mode) for mode in dict.fromkeys(modes)}
    counts = [{pool.name: pool.replicas for pool in c.plan.pools} for c in checks]
    starts = [c.window.start_s for c in checks]
    bounds = starts[1:] + [math.inf]
    loads = {pool.name: load_time_s(request.model, pool.tp * pool.pp) for pool in pools}
    trace = window(request.workload, start_s=0.0)
    runs = run_workloads(trace, len(trace) / float(trace.arrival_s[-1]), runs=request.runs,
                         seed=request.seed, arrivals=request.settings.arrivals)
    spans = {mode: [(starts[w], bounds[w]) for w in range(len(starts)) if modes[w] == mode] for mode in plans}
    parts = [{mode: _arriving_in(run, spans[mode]) for mode in plans} for run in runs]
    drains: dict[tuple[str, int, int], float] = {}
    changes, passes = (), 0
    for passes in range(1, MAX_PASSES + 1):
        availability, changes = _availability(pools, counts, starts, drains, loads, request.cluster)
        measured = {}
        for mode, plan in plans.items():
            records = _simulate(parts[0][mode], plan, availability, profiles, request)
            if records is not None:
                measured.update(_drain_ends(plan, records, changes))
        settled = all(abs(measured.get(key, 0.0) - drains.get(key, 0.0)) < SETTLED_S for key in measured)
        drains = measured
        if settled:
            break
    availability, changes = _availability(pools, counts, starts, drains, loads, request.cluster)
    results = {mode: [_simulate(part[mode], plan, availability, profiles, request) for part in parts]
               for mode, plan in plans.items()}
    verdicts = tuple(_judge(results[modes[w]], starts + [math.inf], w, request) for w in range(len(starts)))
    return Timeline(changes=tuple(changes), windows=verdicts, passes=passes, load_s=loads)


def _arriving_in(workload: Workload, spans: list[tuple[float, float]]) -> Workload | None:
    """The requests of ``workload`` arriving inside one of ``spans``, at their own times (None: none)."""
    arrival = workload.arrival_s
    inside = np.zeros(arrival.size, bool)
    for start, end in spans:
        inside |= (arrival >= start) & (arrival < end)
    keep = np.flatnonzero(inside)
    if keep.size == 0:
        return None
    return replaced(workload, rows=Rows.of(workload).take(keep))


def _simulate(requests: Workload | None, plan: Plan, availability: dict, profiles: dict, request):
    """``plan`` on ``requests`` with its pools' availability (None when no request arrives)."""
    if requests is None:
        return None
    return simulate(requests, plan, profiles, model=request.model, seed=request.seed,
                    availability={pool.name: availability[pool.name] for pool in plan.pools})


def _availability(pools, counts: list[dict], starts: list[float], drains: dict, loads: dict, cluster):
    """Each replica's intervals and the changes, from the counts per window and the drain ends
    known so far (a leave not yet simulated drains instantly). The instances of a pool new in a
    window join first, on spare GPUs (the program keeps room for them: made before it breaks)."""
    spans = {p.name: [[] for _ in range(p.replicas)] for p in pools}
    opened = {(p.name, k): (-math.inf if k < counts[0].get(p.name, 0) else None)
              for p in pools for k in range(p.replicas)}
    gpu = {p.name: (get_gpu(p.gpu).physical, p.tp * p.pp) for p in pools}
    changes = []
    for w in range(1, len(starts)):
        t = starts[w]
        leaving = [(name, k) for name in spans for k in range(counts[w].get(name, 0), counts[w - 1].get(name, 0))]
        joining = sorted(((name, k) for name in spans
                          for k in range(counts[w - 1].get(name, 0), counts[w].get(name, 0))),
                         key=lambda joiner: counts[w - 1].get(joiner[0], 0) > 0)
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


def _drain_ends(plan: Plan, result, changes) -> dict[tuple[str, int, int], float]:
    """When each leaving instance of ``plan`` held its last request: decode and colocated, its last
    finish; prefill, the last KV it handed off. Requests it took before routes stopped count."""
    index = {}
    for pool in plan.pools:
        for k in range(pool.replicas):
            index[pool.name, k] = len(index)
    ends = {}
    for change in changes:
        if change.kind != "leave" or (change.pool, change.replica) not in index:
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
        if result is None:
            continue  # no request of this run arrived while the window's mode ran
        inside = (result["arrival_s"] >= bounds[w]) & (result["arrival_s"] < bounds[w + 1])
        clocks = {k: v[inside] for k, v in per_request_clocks(result).items()}
        for i, o in enumerate(slo.objectives):
            per_objective[i].append(attainment(clocks[o.metric], o.threshold_s))
        joint.append(joint_attainment(slo, clocks))
    intervals = tuple(Interval.of(v) for v in per_objective)
    passed = all(i.judged(request.rule) >= o.attainment for i, o in zip(intervals, slo.objectives))
    return WindowVerdict(window=w, joint=Interval.of(joint), objectives=intervals, passed=passed)
