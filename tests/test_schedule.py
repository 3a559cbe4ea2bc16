"""Plans over time: windows cut from the trace, the windowed program against brute force, and the
whole `optimize --windows` on a synthetic day: fewer GPU-hours than the static peak plan, every
window verified alone and in the whole-schedule simulation with its changes drained first."""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import Cluster, NodeType, get_gpu
from pdplan.placement import ANY, Candidate
from pdplan.poolcap import PoolCurve
from pdplan.schedule import cut, solve_schedule, window_starts
from pdplan.schedule.program import most_instances
from pdplan.schedule.timeline import _availability
from pdplan.schedule.windows import merge_ragged
from pdplan.sim import Plan, Pool
from pdplan.workload import Workload, load_trace
from tests.conftest import ROOT
from tests.conftest import run_main as run

SMOKE = ROOT / "traces" / "smoke_uniform_200.csv"


# --- windows ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("text,starts", [("1h", [0, 3600, 7200]), ("90m", [0, 5400]), ("4000s", [0, 4000]),
                                         ("5000", [0, 5000])])
def test_a_length_cuts_equal_windows_from_the_first_arrival(text, starts):
    assert window_starts(text, span_s=7300.0) == starts


def test_a_windows_file_lists_starts_and_errors_name_the_line(tmp_path):
    good = tmp_path / "w.csv"
    good.write_text("start_s\n0\n60\n300\n")
    assert window_starts(str(good), span_s=1000) == [0, 60, 300]
    bad = tmp_path / "bad.csv"
    bad.write_text("0\n60\n30\n")
    with pytest.raises(PdplanError, match=r"bad.csv:3: start_s must be finite, >= 0 and rise"):
        window_starts(str(bad), span_s=1000)


def test_each_window_holds_its_requests_and_its_rate():
    workload = load_trace(SMOKE)
    span = float(workload.arrival_s[-1] - workload.arrival_s[0])
    windows = cut(workload, window_starts(str(span / 4), span), peak=False)
    assert sum(len(w.requests) for w in windows) == len(workload)
    for w in windows:
        assert w.rate_rps == pytest.approx(len(w.requests) / (w.end_s - w.start_s))
        assert w.requests.arrival_s.min() >= 0 and w.requests.arrival_s.max() < w.end_s - w.start_s
    peaks = cut(workload, window_starts(str(span / 4), span), peak=True)
    assert all(p.rate_rps == p.peak_rps >= p.mean_rps * 0.999 for p in peaks)


def test_a_window_without_two_requests_is_refused():
    with pytest.raises(PdplanError, match="window 1"):
        cut(load_trace(SMOKE), [0.0, 1e6], peak=False)


def ragged(arrivals):
    return Workload(arrival_s=np.array(arrivals, float), prompt_tokens=np.full(len(arrivals), 100),
                    output_tokens=np.full(len(arrivals), 10))


def test_a_last_window_too_sparse_for_a_rate_is_merged_into_the_one_before_with_a_notice():
    """Windows of 10 s over arrivals 0, 1, 2, 11, 12, 20: the last window [20, end) holds one
    request and joins [10, 20), which then ends at the trace's last arrival."""
    starts, notices = merge_ragged(ragged([0, 1, 2, 11, 12, 20]), [0.0, 10.0, 20.0])
    assert starts == [0.0, 10.0] and len(notices) == 1 and "last window [20 s" in notices[0]
    windows = cut(ragged([0, 1, 2, 11, 12, 20]), starts, peak=False)
    assert [len(w.requests) for w in windows] == [3, 3]


def test_a_first_window_too_sparse_for_a_rate_is_merged_into_the_one_after():
    starts, notices = merge_ragged(ragged([0, 11, 12, 13, 25, 26]), [0.0, 10.0, 20.0])
    assert starts == [0.0, 20.0] and "first window [0, 10) s held 1" in notices[0]


def test_windows_of_a_length_merge_a_ragged_end_and_say_so(tmp_path):
    from pdplan.planner.windowed import trace_windows

    told = []
    windows = trace_windows(ragged([0, 1, 2, 11, 12, 21]), tmp_path / "t.csv", "10s", peak=False, notify=told.append)
    assert len(windows) == 2 and len(told) == 1


def test_a_windows_file_keeps_its_boundaries_and_its_error(tmp_path):
    from pdplan.planner.windowed import trace_windows

    starts = tmp_path / "starts.csv"
    starts.write_text("start_s\n0\n10\n20\n")
    with pytest.raises(PdplanError, match="window 2"):
        trace_windows(ragged([0, 1, 2, 11, 12, 20]), tmp_path / "t.csv", str(starts), peak=False)


# --- the windowed program against brute force ------------------------------------------------------

NODE = NodeType(name="h", gpu=get_gpu("h100-80gb"), gpus_per_node=8, intra_node_bytes_per_s=4.5e11,
                inter_node_bytes_per_s=5e10, count=1)
CLUSTER = Cluster(nodes=(NODE,))
SHAPES = (
    Candidate(phase="prefill", gpu="h100-80gb", tp=2, pp=1, goodput_rps=1.0,
              curve=PoolCurve(samples=((1, 1.0), (2, 2.4)))),
    Candidate(phase="prefill", gpu="h100-80gb", tp=4, pp=1, goodput_rps=2.2),
    Candidate(phase="decode", gpu="h100-80gb", tp=2, pp=1, goodput_rps=1.5),
    Candidate(phase="decode", gpu="h100-80gb", tp=1, pp=1, goodput_rps=0.6),
)
HOURS = [1.0, 2.0, 1.0]
RATES = [0.5, 2.0, 1.0]


COLOCATED = (
    Candidate(phase="colocated", gpu="h100-80gb", tp=2, pp=1, goodput_rps=0.45, chunk_tokens=512),
    Candidate(phase="colocated", gpu="h100-80gb", tp=4, pp=1, goodput_rps=1.3, chunk_tokens=512),
)


def window_options(shapes) -> list[dict]:
    """Every way one window can run: a mode, one shape per phase of it and their counts, within
    the node's 8 GPUs."""
    prefill, decode = [c for c in shapes if c.phase == "prefill"], [c for c in shapes if c.phase == "decode"]
    groups = [(p, d) for p in prefill for d in decode] + [(c,) for c in shapes if c.phase == "colocated"]
    options = []
    for group in groups:
        for counts in itertools.product(*[range(1, most_instances(CLUSTER, c) + 1) for c in group]):
            if sum(c.gpus * k for c, k in zip(group, counts)) <= 8:
                options.append(dict(zip(group, counts)))
    return options


def brute_force(change_minutes: float, static: bool = False, shapes=SHAPES, one_shape: bool = False) -> float:
    """The cheapest schedule by enumeration: every mode, shape and count per window (with
    ``one_shape``, the same mode and shapes in every window), a shape new in a window fitting
    beside the window before's pools."""
    price = {c: CLUSTER.priced_gpu(c.gpu).usd_per_hour * c.gpus for c in shapes}
    options = [o for o in window_options(shapes)]
    best = math.inf
    for plan in itertools.product(options, repeat=len(HOURS)):
        if static and any(o != plan[0] for o in plan) or one_shape and any(o.keys() != plan[0].keys() for o in plan):
            continue
        if any(c.capacity_rps(k) < r * (1 - 1e-12) for o, r in zip(plan, RATES) for c, k in o.items()):
            continue
        if any(sum(c.gpus * k for c, k in a.items()) + sum(c.gpus * k for c, k in b.items() if c not in a) > 8
               for a, b in zip(plan, plan[1:])):
            continue  # a new shape loads beside the old pools (made before it breaks)
        run = sum(h * sum(price[c] * k for c, k in o.items()) for h, o in zip(HOURS, plan))
        moves = sum(price[c] * abs(a.get(c, 0) - b.get(c, 0)) for a, b in zip(plan, plan[1:]) for c in shapes)
        best = min(best, run + change_minutes / 60 * moves)
    return best


def window_optima(shapes, *, cluster, fleet, mode, hours, requirements):
    """Each window planned alone: the program over that window, no change cost."""
    return [solve_schedule(shapes, cluster=cluster, fleet=fleet, mode=mode, hours=[h], requirements=[r],
                           change_gpu_minutes=0.0) for h, r in zip(hours, requirements)]


def requirements(mode: str) -> list[dict]:
    phases = {"disaggregated": ("prefill", "decode"), "colocated": ("colocated",),
              "auto": ("prefill", "decode", "colocated")}[mode]
    return [{p: r for p in phases} for r in RATES]


def solved(mode: str = "auto", shapes=SHAPES + COLOCATED, **options):
    return solve_schedule(shapes, cluster=CLUSTER, fleet=ANY, mode=mode, hours=HOURS,
                          requirements=requirements(mode), **{"change_gpu_minutes": 0.0, **options})


@pytest.mark.parametrize("change_minutes", [0.0, 30.0, 600.0])
def test_the_windowed_program_finds_the_brute_force_optimum(change_minutes):
    schedule = solved("disaggregated", SHAPES, change_gpu_minutes=change_minutes)
    assert schedule.usd == pytest.approx(brute_force(change_minutes), abs=1e-3)


def test_a_windowed_program_solved_in_a_runs_cache_is_read_back_identically_without_solving(tmp_path, monkeypatch):
    from pdplan.cache import ResultCache
    from pdplan.placement.recall import recalling, solve_once
    from pdplan.schedule import program

    solves = []

    def counted(solver, model, run):
        return solve_once(solver, model, lambda s, m: solves.append(1) or run(s, m))

    monkeypatch.setattr(program, "solve_once", counted)
    with recalling(ResultCache(tmp_path)):
        first, again = solved(change_gpu_minutes=30.0), solved(change_gpu_minutes=30.0)
    assert len(solves) == 1 and first.status == "OPTIMAL"
    assert (again.modes, again.window_shapes, again.replicas, again.joins, again.leaves, again.status) == \
        (first.modes, first.window_shapes, first.replicas, first.joins, first.leaves, first.status)
    assert again.usd == pytest.approx(first.usd)


@pytest.mark.parametrize("change_minutes", [0.0, 10.0, 30.0, 600.0])
def test_with_shapes_and_modes_free_per_window_the_program_finds_the_brute_force_optimum(change_minutes):
    schedule = solved(change_gpu_minutes=change_minutes)
    assert schedule.usd == pytest.approx(brute_force(change_minutes, shapes=SHAPES + COLOCATED), abs=1e-3)


#: One colocated GPU serves the quiet first window alone; its pool saturates below the busy one.
COLOCATED_SMALL = Candidate(phase="colocated", gpu="h100-80gb", tp=1, pp=1, goodput_rps=0.6, chunk_tokens=512,
                            curve=PoolCurve(samples=((1, 0.6), (2, 0.7), (4, 0.8), (8, 0.9))))


def test_a_switch_from_colocated_to_pd_happens_when_the_new_pools_load_beside_the_old():
    """On two nodes window 0 runs one colocated GPU and window 1 switches to P/D, as each window
    alone would; the colocated instance leaves as the P/D pools join."""
    cluster = Cluster(nodes=(replace(NODE, count=2),))
    schedule = solve_schedule(SHAPES + (COLOCATED_SMALL,), cluster=cluster, fleet=ANY, mode="auto", hours=HOURS,
                              requirements=requirements("auto"), change_gpu_minutes=0.0)
    assert schedule.modes[:2] == ("colocated", "disaggregated") and schedule.mode == "changing"
    assert schedule.leaves[1]["colocated"] == 1 and schedule.joins[1]["prefill"] >= 1
    alone = window_optima(SHAPES + (COLOCATED_SMALL,), cluster=cluster, fleet=ANY, mode="auto", hours=HOURS,
                          requirements=requirements("auto"))
    assert schedule.usd == pytest.approx(sum(s.usd for s in alone))


def test_a_switch_into_a_full_cluster_is_not_made_because_it_would_break_before_it_is_made():
    """On one 8-GPU node the busy window's P/D pools take all 8 GPUs, so they cannot load beside
    window 0's colocated GPU: the schedule stays P/D and costs more than the windows alone."""
    schedule = solve_schedule(SHAPES + (COLOCATED_SMALL,), cluster=CLUSTER, fleet=ANY, mode="auto", hours=HOURS,
                              requirements=requirements("auto"), change_gpu_minutes=0.0)
    assert schedule.modes == ("disaggregated",) * 3
    alone = window_optima(SHAPES + (COLOCATED_SMALL,), cluster=CLUSTER, fleet=ANY, mode="auto", hours=HOURS,
                          requirements=requirements("auto"))
    assert alone[0].modes == ("colocated",) and schedule.usd > sum(s.usd for s in alone) + 1


def test_one_shape_for_the_day_is_the_old_restriction_and_never_cheaper():
    fixed = solved(change_gpu_minutes=30.0, one_shape=True)
    assert fixed.usd == pytest.approx(brute_force(30.0, shapes=SHAPES + COLOCATED, one_shape=True), abs=1e-3)
    assert solved(change_gpu_minutes=30.0).usd <= fixed.usd + 1e-9 and fixed.reshapes == 0


def test_the_sum_of_window_optima_bounds_every_schedule_from_below():
    alone = window_optima(SHAPES + COLOCATED, cluster=CLUSTER, fleet=ANY, mode="auto", hours=HOURS,
                          requirements=requirements("auto"))
    bound = sum(s.usd for s in alone)
    assert bound == pytest.approx(brute_force(0.0, shapes=SHAPES + COLOCATED), abs=1e-3)
    assert all(solved(change_gpu_minutes=m).usd >= bound - 1e-9 for m in (0.0, 30.0, 600.0))


def test_a_change_cost_above_every_saving_makes_the_schedule_the_static_one():
    windowed = solved(change_gpu_minutes=1e5)
    static = solved(static=True)
    assert all(r == windowed.replicas[0] for r in windowed.replicas) and windowed.change_usd == 0
    assert windowed.reshapes == 0
    assert windowed.usd == pytest.approx(static.usd) == pytest.approx(
        brute_force(0, static=True, shapes=SHAPES + COLOCATED))


MIXED = Candidate(phase="mixed", gpu="h100-80gb", tp=2, pp=1, goodput_rps=0.9, chunk_tokens=512)


def brute_force_with_mixed(change_minutes: float, most_mixed: int) -> float:
    """The cheapest schedule by enumeration when each window may also run 0..most_mixed mixed
    machines, which count in both phases."""
    shapes = SHAPES + (MIXED,)
    price = {c: CLUSTER.priced_gpu(c.gpu).usd_per_hour * c.gpus for c in shapes}
    best = math.inf
    for pre, dec in itertools.product(SHAPES[:2], SHAPES[2:]):
        units = (pre, dec, MIXED)
        per_window = [counts for counts in itertools.product(range(1, 5), range(1, 9), range(most_mixed + 1))
                      if sum(c.gpus * k for c, k in zip(units, counts)) <= 8]
        for plan in itertools.product(per_window, repeat=len(HOURS)):
            if any(pre.capacity_rps(p) + MIXED.capacity_rps(m) < r * (1 - 1e-12)
                   or dec.capacity_rps(d) + MIXED.capacity_rps(m) < r * (1 - 1e-12)
                   for (p, d, m), r in zip(plan, RATES)):
                continue
            run = sum(h * sum(price[c] * k for c, k in zip(units, counts)) for h, counts in zip(HOURS, plan))
            moves = sum(price[c] * abs(a[i] - b[i]) for a, b in zip(plan, plan[1:]) for i, c in enumerate(units))
            best = min(best, run + change_minutes / 60 * moves)
    return best


@pytest.mark.parametrize("change_minutes", [0.0, 30.0])
def test_with_mixed_machines_the_windowed_program_finds_the_brute_force_optimum(change_minutes):
    schedule = solve_schedule(SHAPES + (MIXED,), cluster=CLUSTER, fleet=ANY, mode="disaggregated", hours=HOURS,
                              requirements=[{"prefill": r, "decode": r} for r in RATES],
                              change_gpu_minutes=change_minutes, mixed_max=2)
    assert schedule.usd == pytest.approx(brute_force_with_mixed(change_minutes, 2), abs=1e-3)
    assert schedule.usd <= solve_schedule(SHAPES, cluster=CLUSTER, fleet=ANY, mode="disaggregated", hours=HOURS,
                                          requirements=[{"prefill": r, "decode": r} for r in RATES],
                                          change_gpu_minutes=change_minutes).usd + 1e-9


def test_a_window_no_shape_can_serve_is_named():
    with pytest.raises(PdplanError, match="no prefill shape serves every window"):
        solve_schedule(SHAPES, cluster=CLUSTER, fleet=ANY, mode="disaggregated", hours=[1.0], requirements=[
            {"prefill": 100.0, "decode": 1.0}], change_gpu_minutes=0)


# --- changes drained first -------------------------------------------------------------------------

def test_a_join_without_spare_gpus_waits_for_a_drain_and_the_weight_load():
    """Two 8-GPU nodes hold 2 prefill + 2 decode TP4 instances; a flip of one prefill to decode
    must wait for the prefill's drain (40 s) and then load weights (30 s)."""
    plan = Plan(pools=(Pool(name="p", phase="prefill", model="llama2-70b", gpu="h100-80gb", tp=4, replicas=2),
                       Pool(name="d", phase="decode", model="llama2-70b", gpu="h100-80gb", tp=4, replicas=3)),
)
    counts = [{"p": 2, "d": 2}, {"p": 1, "d": 3}]
    spans, changes = _availability(plan.pools, counts, [0.0, 100.0], {("p", 1, 1): 140.0}, {"p": 30.0, "d": 30.0},
                                   CLUSTER)
    join = next(c for c in changes if c.kind == "join")
    leave = next(c for c in changes if c.kind == "leave")
    assert (leave.pool, leave.drain_s) == ("p", pytest.approx(40.0))
    assert (join.pool, join.ready_s, join.took_gpus_of) == ("d", pytest.approx(170.0), "p/1")
    assert spans["p"][1] == [(-math.inf, 100.0)] and spans["d"][2] == [(170.0, math.inf)]


# --- the whole command on a synthetic day ----------------------------------------------------------

def _verified(kind: str, mode: str, usd: float, passed: bool = True):
    """A one-window schedule of ``mode`` costing ``usd`` whose window passes or misses, as the report sees it."""
    from types import SimpleNamespace

    from pdplan.schedule.program import Schedule
    from pdplan.schedule.search import VerifiedSchedule
    schedule = Schedule(modes=(mode,), window_shapes=({},), replicas=({},), run_usd=usd, change_usd=0.0,
                        gpu_hours=0.0, joins=(), leaves=(), status="OPTIMAL")
    check = SimpleNamespace(window=SimpleNamespace(index=0), verification=SimpleNamespace(passed=passed))
    return VerifiedSchedule(kind=kind, schedule=schedule, checks=(check,), rounds=1)


@pytest.mark.parametrize(("peak_usd", "answer"), [(4.43, "static peak"), (5.75, "static peak"), (6.0, "windowed")])
def test_the_static_peak_plan_is_the_answer_when_it_passes_for_no_more_than_every_windowed_schedule(peak_usd, answer):
    """The static plan is a schedule of the windowed program's too; the windowed search, raising a window at a time,
    may stop above it or short of passing (here: P/D at $5.75, colocated still missing a window)."""
    from pdplan.schedule.search import WindowedReport
    windowed = {"disaggregated": _verified("windowed", "disaggregated", 5.75),
                "colocated": _verified("windowed", "colocated", 4.38, passed=False)}
    report = WindowedReport(request=None, windows=(), change_gpu_minutes=5.0, schedules=windowed, reasons={},
                            static_peak=_verified("static peak", "colocated", peak_usd), static_mean=None)
    assert report.chosen.kind == answer
    missing = replace(report, static_peak=_verified("static peak", "colocated", 4.0, passed=False))
    assert missing.chosen is windowed["disaggregated"]


class _Counted:
    """A stand-in schedule: each window runs ceil(requirement / 1.5) colocated instances of a shape that serves 1.5
    req/s each."""

    shape = type("Shape", (), {"pool_curve": PoolCurve.linear(1.5)})()

    def __init__(self, requirements):
        self.modes = ("colocated",) * len(requirements)
        self.replicas = [{"colocated": math.ceil(r["colocated"] / 1.5)} for r in requirements]
        self.window_shapes = [{"colocated": self.shape}] * len(requirements)

    def counts(self, w):
        return (("colocated", self.replicas[w]["colocated"]),)


@pytest.mark.parametrize(("static", "raised", "programs"), [(False, [1.5, 1.0], 1), (True, [1.15**3, 1.15**3], 3)])
def test_a_missed_window_is_raised_until_the_program_changes_what_it_runs(static, raised, programs):
    """A 15% raise (1.15 req/s) would leave the window on its one instance of 1.5 req/s and verify the same schedule
    again. A windowed schedule's raise goes just past that instance, and one program gives the window a second; a
    static plan's rises in 15% steps (1.15, 1.32, 1.52), in every window at once, until the third does."""
    from pdplan.schedule.search import _raised_until_changed
    solved = []
    requirements = [{"colocated": 1.0}, {"colocated": 1.0}]
    changed = _raised_until_changed(lambda r: solved.append(r) or _Counted(r), requirements, _Counted(requirements),
                                    {0: ("colocated",)}, [1.0, 1.0], static=static)
    assert changed.counts(0) == (("colocated", 2),) and len(solved) == programs
    assert [r["colocated"] for r in requirements] == pytest.approx(raised)


def test_a_raise_nothing_serves_differently_stops_at_the_optimizers_bound():
    from pdplan.planner.search import MAX_RAISE
    from pdplan.schedule.search import _raised_until_changed
    requirements = [{"colocated": 1.0}]
    missed = _Counted(requirements)
    assert _raised_until_changed(lambda r: missed, requirements, missed, {0: ("colocated",)}, [1.0],
                                 static=False) is None
    assert MAX_RAISE < requirements[0]["colocated"] <= MAX_RAISE * 1.15


@pytest.mark.slow
def test_on_the_bursty_code_trace_the_answer_never_costs_more_than_the_static_peak_plan(run_cli, tmp_path):
    code, out, _ = run_cli("optimize", ROOT / "traces" / "code_bursty_2k.csv", "--windows", "120s", "--fleet", "HH",
                           "--cache-dir", tmp_path, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["schedule"]["passed"] and doc["static_peak"]["passed"]
    assert doc["schedule"]["usd"] <= doc["static_peak"]["usd"] + 1e-9
    assert doc["decision"] == doc["schedule"]["mode"]


@pytest.fixture(scope="module")
def day(tmp_path_factory):
    """A two-hour synthetic day (peak 6× the trough), 24 windows of 5 minutes, on H100s."""
    folder = tmp_path_factory.mktemp("day")
    trace = folder / "day.csv"
    code, _ = run("trace", "synth", "--requests", "28800", "--rate", "4", "--diurnal", "6", "--period", "7200",
                  "--prompt", "lognormal:1500:0.8", "--output", "lognormal:200:0.7", "--seed", "1", "-o", trace)
    assert code in (0, None)
    code, out = run("optimize", trace, "--windows", "5m", "--fleet", "HH", "--cache-dir", folder / "cache",
                    "--plot", folder / "plots", "--out", folder / "schedule.yaml", "--json")
    assert code in (0, None)
    return {"doc": json.loads(out), "trace": trace, "folder": folder}


@pytest.mark.slow
def test_the_windowed_plan_saves_a_quarter_of_the_static_peak_gpu_hours(day):
    doc = day["doc"]
    assert len(doc["windows"]) == 24
    assert doc["schedule"]["gpu_hours"] <= 0.75 * doc["static_peak"]["gpu_hours"]


@pytest.mark.slow
def test_every_window_passes_alone_and_in_the_whole_schedule(day):
    doc = day["doc"]
    assert doc["schedule"]["passed"] and not doc["schedule"]["missed_windows"]
    assert all(w["passed"] for w in doc["schedule"]["windows"])
    assert doc["timeline"]["passed"] and len(doc["timeline"]["windows"]) == 24


@pytest.mark.slow
def test_the_schedule_costs_at_most_a_tenth_more_than_each_window_planned_alone_plus_its_changes(day):
    schedule, bounds = day["doc"]["schedule"], day["doc"]["bounds"]
    assert all(w["passed"] for w in bounds["windows_alone"]) and len(bounds["windows_alone"]) == 24
    assert bounds["window_optima_usd"] <= bounds["windows_alone_usd"] + 1e-9  # the program's bound is below
    assert schedule["usd"] <= 1.10 * (bounds["windows_alone_usd"] + schedule["change_usd"])
    assert schedule["usd"] <= bounds["one_shape_usd"] * 1.25  # raised for misses at most, never reshaped for worse


@pytest.mark.slow
def test_every_change_is_drained_before_its_gpus_are_reused(day):
    changes = day["doc"]["timeline"]["changes"]
    assert changes
    for change in changes:
        if change["kind"] == "leave":
            assert change["drain_s"] >= 0
        elif change["took_gpus_of"] is not None:
            donor = next(c for c in changes if c["kind"] == "leave" and c["window"] == change["window"]
                         and f"{c['pool']}/{c['replica']}" == change["took_gpus_of"])
            assert change["ready_s"] >= change["at_s"] + donor["drain_s"]


@pytest.mark.slow
def test_the_static_mean_plan_misses_the_busy_windows(day):
    mean = day["doc"]["static_mean"]
    assert mean["missed_windows"] and not mean["passed"]


@pytest.mark.slow
def test_a_large_change_cost_gives_the_static_peak_plan(day):
    code, out = run("optimize", day["trace"], "--windows", "5m", "--fleet", "HH", "--change-cost", "1440",
                    "--cache-dir", day["folder"] / "cache", "--json")
    assert code in (0, None)
    doc = json.loads(out)
    replicas = {json.dumps(w["replicas"], sort_keys=True) for w in doc["schedule"]["windows"]}
    assert len(replicas) == 1
    assert doc["schedule"]["gpu_hours"] == pytest.approx(doc["static_peak"]["gpu_hours"])


@pytest.mark.slow
def test_the_schedule_plot_is_a_png_of_the_stated_size(day):
    data = (day["folder"] / "plots" / "schedule.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert (int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")) == (1080, 720)


def test_the_schedule_plot_shades_the_windows_the_static_mean_plan_misses():
    from pdplan.plots import static_mean_misses

    doc = {"windows": [{"start_s": 0.0, "end_s": 1800.0}, {"start_s": 1800.0, "end_s": 3600.0},
                       {"start_s": 3600.0, "end_s": 5400.0}],
           "static_mean": {"windows": [{"passed": True}, {"passed": False}, {"passed": False}]}}
    assert static_mean_misses(doc) == [(0.5, 1.0), (1.0, 1.5)]
    assert static_mean_misses({**doc, "static_mean": None}) == []


@pytest.mark.parametrize("flags,named", [(("--target-rate", "2"), "target_rate"),
                                         (("--objective", "goodput"), "objective"),
                                         (("--change-cost", "-1"), "change-cost"), (("--fleet", "all"), "fleet"),
                                         (("--affinity", "low"), "affinity"), (("--redundancy", "node"), "redundancy"),
                                         (("--max-gpus", "4"), "max-gpus"), (("--borrow",), "borrow")])
def test_windows_refuse_flags_that_do_not_apply(run_cli, tmp_path, flags, named):
    code, _, err = run_cli("optimize", SMOKE, "--windows", "1m", *flags)
    assert code == 2 and named.replace("_", "-") in err.replace("_", "-")


# --- the schedule document -------------------------------------------------------------------------

def resealed(day, edit) -> dict:
    """The written schedule with ``edit`` applied and sealed again (so only consistency can fail)."""
    from pdplan.manifest.document import load_manifest, seal

    doc = load_manifest(day["folder"] / "schedule.yaml", schedules=True)
    edit(doc)
    del doc["provenance"]["sections"], doc["provenance"]["content_hash"]
    return seal(doc)


@pytest.mark.slow
def test_the_written_schedule_validates_against_its_trace(day, run_cli):
    code, out, err = run_cli("validate", day["folder"] / "schedule.yaml", "--trace", day["trace"])
    assert code == 0, out + err
    assert "valid" in out


def test_a_schedule_of_wide_instances_records_their_gpus_and_validates(run_cli, tmp_path):
    """DeepSeek-R1 under SGLang on GB200 trays, DEP8 pools over two trays each: every shape states its DP and EP and
    the 8 GPUs an instance holds, so the written schedule validates (it used to write 1 GPU and fail its node map)."""
    import yaml

    trace, out_file = ROOT / "traces" / "code_bursty_2k.csv", tmp_path / "schedule.yaml"
    code, _, err = run_cli("optimize", trace, "--model", "deepseek-r1", "--dtype", "fp8", "--cluster",
                           ROOT / "examples" / "cluster_gb200.yaml", "--engine", "sglang", "--tp", "1", "--pp", "1",
                           "--dp", "8", "--windows", "120s", "--ttft", "2s", "--tpot", "50ms", "--cache-dir",
                           tmp_path / "cache", "--out", out_file)
    assert code == 0, err
    shapes = yaml.safe_load(out_file.read_text())["shapes"]
    assert {(s["dp"], s["ep"], s["gpus_per_instance"]) for s in shapes} == {(8, 8, 8)}
    code, out, err = run_cli("validate", out_file, "--trace", trace)
    assert code == 0, out + err


@pytest.mark.slow
def test_a_hand_edit_of_a_window_is_named(day, run_cli, tmp_path):
    import yaml

    doc = yaml.safe_load((day["folder"] / "schedule.yaml").read_text())
    doc["windows"][3]["replicas"] = {k: v + 1 for k, v in doc["windows"][3]["replicas"].items()}
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(doc, sort_keys=False))
    code, out, _ = run_cli("validate", edited, "--json")
    assert code == 1
    fields = [v["field"] for v in json.loads(out)["violations"]]
    assert "windows[3]" in fields


@pytest.mark.slow
def test_a_window_beyond_the_inventory_is_refused(day):
    from pdplan.manifest.schedule import check_schedule

    def shrink(doc):
        for node in doc["inventory"]:
            node["count"] = 0 if node["gpu"] != "h100-80gb" else 1
    found = check_schedule(resealed(day, shrink))
    assert any("the inventory holds 8" in v.message for v in found)
    assert any("is not a node of the inventory" in v.message for v in found)


@pytest.mark.slow
def test_a_gpu_held_twice_in_a_window_is_refused(day):
    from pdplan.manifest.schedule import check_schedule

    def double(doc):
        nodes = doc["windows"][-1]["nodes"]
        nodes[0]["instances"].append(dict(nodes[0]["instances"][0], instance="extra"))
    found = check_schedule(resealed(day, double))
    assert any("is held twice" in v.message for v in found)


def _node_gpu(doc):
    doc["windows"][0]["nodes"][0]["gpu"] = "a100-80gb"


def _stage_beyond_pp(doc):
    doc["windows"][0]["nodes"][0]["instances"][0]["stage"] = 5


def _gpus_per_instance(doc):
    doc["shapes"][0]["gpus_per_instance"] += 1


def _change_of_no_pool(doc):
    doc["changes"].append(dict(doc["changes"][0], pool="zzz", window=50))


def _mode_not_its_pools(doc):
    window = doc["windows"][2]
    window["mode"] = "disaggregated" if window["mode"] == "colocated" else "colocated"


def _day_mode_not_the_windows(doc):
    doc["workload"]["mode"] = "changing"


@pytest.mark.slow
@pytest.mark.parametrize("edit,named", [(_node_gpu, "windows[0].nodes[0].gpu"),
                                        (_stage_beyond_pp, "windows[0].nodes[0].instances[0].stage"),
                                        (_gpus_per_instance, "shapes[0].gpus_per_instance"),
                                        (_change_of_no_pool, "changes["),
                                        (_mode_not_its_pools, "windows[2].mode"),
                                        (_day_mode_not_the_windows, "workload.mode")])
def test_a_window_placement_the_manifest_would_refuse_is_refused(day, edit, named):
    from pdplan.manifest.schedule import check_schedule

    assert any(v.field.startswith(named) for v in check_schedule(resealed(day, edit)))


@pytest.mark.slow
def test_a_schedule_written_before_windows_had_modes_still_validates(day):
    from pdplan.manifest.schedule import check_schedule

    def strip(doc):
        for window in doc["windows"]:
            del window["mode"]

    assert check_schedule(resealed(day, strip)) == []


@pytest.mark.slow
def test_changes_must_match_the_replicas_and_leaves_drain_first(day):
    from pdplan.manifest.schedule import check_schedule

    changes = day["doc"]["timeline"]["changes"]
    leave = next(i for i, c in enumerate(changes) if c["kind"] == "leave")

    def reorder(doc):
        doc["changes"][leave]["steps"] = ["RELEASE_GPUS", "STOP_NEW_ROUTES", "DRAIN_IN_FLIGHT_AND_KV"]
        doc["changes"].append(dict(doc["changes"][leave], kind="join", replica=99, steps=["WAIT_FOR_DRAIN",
                              "LOAD_WEIGHTS", "START_ROUTES"], drain_s=None,
                              ready_s=doc["changes"][leave]["at_s"],
                              took_gpus_of=f"{doc['changes'][leave]['pool']}/{doc['changes'][leave]['replica']}"))
        doc["changes"][leave]["drain_s"] = 30.0
    messages = [v.message for v in check_schedule(resealed(day, reorder))]
    assert any("a leave runs STOP_NEW_ROUTES" in m for m in messages)
    assert any("before its drain ends (drain first)" in m for m in messages)
    assert any("lists 1 joins and 1 leaves" in m for m in messages)


@pytest.mark.slow
def test_a_schedule_is_not_a_plan_to_export_or_simulate(day, run_cli, tmp_path):
    code, _, err = run_cli("export", day["folder"] / "schedule.yaml", "--format", "vllm", "--out", tmp_path / "x")
    assert code == 2 and "a schedule" in err
    code, _, err = run_cli("simulate", day["trace"], "--plan", day["folder"] / "schedule.yaml")
    assert code == 2


@pytest.mark.slow
def test_the_written_schedule_meets_the_schema_pdplan_schema_prints(day, run_cli):
    import yaml
    from jsonschema import Draft202012Validator

    code, out, _ = run_cli("schema", "--schedule")
    assert code == 0
    schema = json.loads(out)
    assert schema["title"] == "pdplan DeploymentSchedule"
    Draft202012Validator(schema).validate(yaml.safe_load((day["folder"] / "schedule.yaml").read_text()))


# --- Splitwise's mixed pool over time --------------------------------------------------------------

def on_two_a100_nodes(tmp_path, *, rate: float, target: float, slo, tp: int, **extra):
    """The chat trace's first 600 requests at ``rate`` on two 8-GPU A100 nodes, its shapes measured
    up to ``target``: (request, candidates, profiles, cache)."""
    from pdplan.cache import ResultCache
    from pdplan.goodput import SearchSettings
    from pdplan.latency.profile import shipped_profiles
    from pdplan.latency.source import ProfileSource
    from pdplan.modelref import get_model
    from pdplan.planner import PlanRequest
    from pdplan.planner.measure import measure, pool_candidates
    from pdplan.workload import head, rescale_rate

    workload = rescale_rate(head(load_trace(ROOT / "traces" / "chat_poisson_2k.csv"), 600), rate)
    cluster = Cluster(nodes=(NodeType(name="a100", gpu=get_gpu("a100-80gb"), gpus_per_node=8,
                                      intra_node_bytes_per_s=3e11, inter_node_bytes_per_s=2.5e10, count=2),))
    request = PlanRequest(workload=workload, model=get_model("llama2-70b"), cluster=cluster,
                          profiles=ProfileSource(shipped_profiles(), compose=False), slo=slo, target_rps=target,
                          affinity="high", settings=SearchSettings(requests_per_probe=300), tps=(tp,), pps=(1,),
                          **extra)
    cache = ResultCache(tmp_path)
    measured, _ = measure(request, cache)
    return request, pool_candidates(request, measured, cache), {m.profile.key: m.profile for m in measured}, cache


def test_mixed_machines_join_and_drain_first_in_the_whole_schedule_simulation(tmp_path):
    """A hand-made schedule adds two mixed machines in window 1 and drops one in window 2: each
    window is placed with its mixed pool and verified with the spill thresholds, and the whole
    run joins and drains the mixed instances like any other (at a p90 TTFT of 1.2 s, which these
    replicas meet with vLLM's decodes pulling the KV)."""
    from pdplan.planner.plans import Spill
    from pdplan.schedule.program import Schedule
    from pdplan.schedule.search import VerifiedSchedule, WindowChecker
    from pdplan.schedule.timeline import simulate_timeline
    from pdplan.slo import slo_from_flags

    request, candidates, profiles, cache = on_two_a100_nodes(tmp_path, rate=2.0, target=4.0,
                                                             slo=slo_from_flags(1.2, 0.1, 0.9), tp=2, mixed=True,
                                                             spill=Spill(prefill_queue_tokens=0))
    workload = request.workload
    shapes = {kind: next(c for c in candidates if c.phase == kind) for kind in ("prefill", "decode", "mixed")}
    span = float(workload.arrival_s[-1] - workload.arrival_s[0])
    windows = cut(workload, window_starts(str(span / 3), span), peak=False)[:3]
    replicas = ({"prefill": 3, "decode": 2, "mixed": 0}, {"prefill": 3, "decode": 2, "mixed": 2},
                {"prefill": 3, "decode": 2, "mixed": 1})
    schedule = Schedule(modes=("disaggregated",) * 3, window_shapes=(shapes,) * 3, replicas=replicas, run_usd=0.0,
                        change_usd=0.0, gpu_hours=0.0, joins=(), leaves=(), status="OPTIMAL")
    checker = WindowChecker(request, windows, candidates, profiles, cache)
    checks = tuple(checker.check(schedule, w) for w in windows)
    assert [sum(p.replicas for p in c.plan.pools_of("mixed")) for c in checks] == [0, 2, 1]
    assert checks[1].plan.spill_tokens == 0
    assert sum(i.candidate.phase == "mixed" for i in checks[1].solution.instances) == 2
    timeline = simulate_timeline(VerifiedSchedule(kind="windowed", schedule=schedule, checks=checks, rounds=1),
                                 request, profiles)
    mixed = [c for c in timeline.changes if c.pool.startswith("mixed")]
    assert sorted((c.window, c.kind) for c in mixed) == [(1, "join"), (1, "join"), (2, "leave")]
    leave = next(c for c in mixed if c.kind == "leave")
    assert leave.drain_s >= 0
    assert checks[1].verification.summary["mixed"]["whole_requests"] > 0  # spill 0: the mixed pool takes work
    assert len(timeline.windows) == 3

    # The schedule document records the mixed pool and its spill thresholds, and checks them.
    from dataclasses import replace

    from pdplan.manifest.document import seal
    from pdplan.manifest.schedule import build_schedule, check_schedule
    from pdplan.planner.request import Inputs
    from pdplan.schedule.search import WindowedReport

    verified = VerifiedSchedule(kind="windowed", schedule=schedule, checks=checks, rounds=1, timeline=timeline)
    assert verified.passed, verified.missed
    trace = tmp_path / "trace.csv"
    trace.write_text("request\n")
    report = WindowedReport(request=replace(request, inputs=Inputs(trace=trace)), windows=tuple(windows),
                            change_gpu_minutes=5.0, schedules={"disaggregated": verified}, reasons={},
                            static_peak=None, static_mean=None)
    doc = build_schedule(report)
    assert doc["spill"] == {"prefill_queue_tokens": 0, "decode_kv_share": 1.0}
    assert "mixed" in {shape["phase"] for shape in doc["shapes"]}
    assert check_schedule(doc) == []
    del doc["spill"]
    assert [v.field for v in check_schedule(seal(doc))] == ["spill"]


def test_a_schedule_missing_its_sections_is_listed_not_a_traceback_even_with_a_trace(run_cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: pdplan/v1\nkind: DeploymentSchedule\n")
    code, out, err = run_cli("validate", bad, "--trace", SMOKE, "--json")
    assert code == 1 and "Traceback" not in err
    assert "(top level)" in {v["field"] for v in json.loads(out)["violations"]}


def test_a_switch_from_colocated_to_pd_runs_in_the_whole_schedule_with_each_request_where_it_started(tmp_path):
    """A hand-made schedule runs window 0 colocated and windows 1-2 P/D on two A100 nodes: the
    colocated instance leaves as window 1 opens and drains what it holds, the P/D instances load
    beside it and take requests from the boundary (made before it breaks), and every window is
    judged on the plan of its own mode."""
    from pdplan.schedule.program import Schedule
    from pdplan.schedule.search import VerifiedSchedule, WindowChecker
    from pdplan.schedule.timeline import simulate_timeline
    from pdplan.slo import slo_from_flags

    request, candidates, profiles, cache = on_two_a100_nodes(tmp_path, rate=1.0, target=1.0,
                                                             slo=slo_from_flags(2.0, 0.15, 0.9), tp=4)
    workload = request.workload
    shape = {kind: next(c for c in candidates if c.phase == kind) for kind in ("prefill", "decode", "colocated")}
    span = float(workload.arrival_s[-1] - workload.arrival_s[0])
    windows = cut(workload, window_starts(str(span / 3), span), peak=False)[:3]
    pd = {"prefill": shape["prefill"], "decode": shape["decode"]}
    schedule = Schedule(modes=("colocated", "disaggregated", "disaggregated"),
                        window_shapes=({"colocated": shape["colocated"]}, pd, pd),
                        replicas=({"colocated": 2}, {"prefill": 1, "decode": 1}, {"prefill": 1, "decode": 1}),
                        run_usd=0.0, change_usd=0.0, gpu_hours=0.0, status="OPTIMAL",
                        joins=({"colocated": 0}, {"colocated": 0, "prefill": 1, "decode": 1},
                               {"prefill": 0, "decode": 0}),
                        leaves=({"colocated": 0}, {"colocated": 2, "prefill": 0, "decode": 0},
                                {"prefill": 0, "decode": 0}))
    checker = WindowChecker(request, windows, candidates, profiles, cache)
    checks = tuple(checker.check(schedule, w) for w in windows)
    assert [c.plan.colocated for c in checks] == [True, False, False]
    timeline = simulate_timeline(VerifiedSchedule(kind="windowed", schedule=schedule, checks=checks, rounds=1),
                                 request, profiles)
    boundary = windows[1].start_s
    leaves = [c for c in timeline.changes if c.kind == "leave"]
    joins = [c for c in timeline.changes if c.kind == "join"]
    assert {c.pool for c in leaves} == {checks[0].plan.pools[0].name} and len(leaves) == 2
    assert all(c.window == 1 and c.drain_s > 0 for c in leaves)  # the colocated instances held requests
    assert sorted(c.pool for c in joins) == sorted(p.name for p in checks[1].plan.pools)
    assert all(c.ready_s == pytest.approx(boundary) and c.took_gpus_of is None for c in joins)
    assert [v.window for v in timeline.windows] == [0, 1, 2]

    # The JSON, the table, the plot and the sealed schedule say which mode each window runs.
    from dataclasses import replace as replaced

    from pdplan.cli.schedule_render import render
    from pdplan.manifest.schedule import build_schedule, check_schedule
    from pdplan.planner.report import windowed_to_dict
    from pdplan.planner.request import Inputs
    from pdplan.plots import plot_schedule
    from pdplan.schedule.search import WindowedReport

    verified = VerifiedSchedule(kind="windowed", schedule=schedule, checks=checks, rounds=1, timeline=timeline)
    trace = tmp_path / "trace.csv"
    trace.write_text("request\n")
    report = WindowedReport(request=replaced(request, inputs=Inputs(trace=trace)), windows=tuple(windows),
                            change_gpu_minutes=5.0, schedules={"changing": verified}, reasons={}, static_peak=None,
                            static_mean=None)
    doc = windowed_to_dict(report)
    assert doc["schedule"]["mode"] == "changing" and doc["schedule"]["reshapes"] == 1
    assert [w["mode"] for w in doc["schedule"]["windows"]] == list(schedule.modes)
    assert set(doc["schedule"]["shapes"]) == {"colocated", "prefill", "decode"}
    render(report, doc, as_json=False)
    assert plot_schedule(doc)[:8] == b"\x89PNG\r\n\x1a\n"
    assert verified.passed, verified.missed
    written = build_schedule(report)
    assert written["workload"]["mode"] == "changing"
    assert [w["mode"] for w in written["windows"]] == list(schedule.modes)
    assert check_schedule(written) == []
