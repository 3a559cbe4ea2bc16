"""Stopping a run once its misses settle it: both engines stop at the same arrival, at the one a
count over the whole run names, and a goodput search that stops its probes finds what one that
runs them to the end finds."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pdplan.goodput as goodput
from pdplan.errors import InternalError
from pdplan.goodput import Probe, SearchSettings, instance_goodput, miss_stop, per_request_clocks
from pdplan.sim import MissStop, simulate_pool
from pdplan.sim.engine import run as run_layout
from pdplan.sim.layout import as_requests, layout_from_plan
from pdplan.slo import SLO, Objective, attainment, miss_budget
from pdplan.workload import Workload
from tests.test_sim_system import MODEL, PROFILES, assert_same, profile, random_trace, two_by_two

POOL = profile("a100-80gb", kv=60_000)
KINDS = [("prefill", None, None), ("decode", None, None), ("colocated", "prefill-first", None),
         ("colocated", "chunked", 256)]


@pytest.fixture(scope="module")
def workload() -> Workload:
    trace = random_trace(21, n=3000, rate_rps=1.0)
    return Workload(arrival_s=trace["arrival_s"], prompt_tokens=trace["prompt_tokens"],
                    output_tokens=trace["output_tokens"])


def run(trace, phase, policy, chunk, stop=None, engine="fast", replicas=2):
    return simulate_pool(trace, POOL, phase=phase, replicas=replicas, policy=policy, chunk_tokens=chunk, stop=stop,
                         engine=engine)


def stop_named_by_the_whole_run(full, stop: MissStop) -> float | None:
    """The first arrival before which more requests are known to have missed than allowed, counted
    on the records of the run that went to the end: TTFT misses whose window closed before it,
    TPOT misses that finished before it, rejected requests that came before it."""
    arrival, rejected = np.asarray(full["arrival_s"]), np.asarray(full["rejected"])
    ttft, tpot, finish = np.asarray(full["ttft_s"]), np.asarray(full["tpot_s"]), np.asarray(full["finish_s"])
    for r in np.flatnonzero(~rejected):
        t = arrival[r]
        closed = t - arrival > stop.ttft_s
        ttft_missed = np.sum(closed & (rejected | np.isnan(ttft) | (ttft > stop.ttft_s)))
        tpot_missed = np.sum((finish < t) & (tpot > stop.tpot_s)) + np.sum(rejected[:r])
        if ttft_missed > stop.ttft_misses or tpot_missed > stop.tpot_misses:
            return float(t)
    return None


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), allowed=st.integers(0, 30),
       rate=st.sampled_from([2.0, 8.0, 30.0]))
def test_both_engines_stop_at_the_same_arrival_with_the_same_records(seed, kind, allowed, rate):
    trace = random_trace(seed, n=150, rate_rps=rate)
    stop = MissStop(ttft_s=1.5, ttft_misses=allowed, tpot_s=0.08, tpot_misses=allowed)
    fast, reference = (run(trace, *kind, stop=stop, engine=engine) for engine in ("fast", "reference"))
    assert fast.stopped_s == reference.stopped_s
    assert_same(fast, reference)


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), kind=st.sampled_from(KINDS), allowed=st.integers(0, 40),
       rate=st.sampled_from([1.0, 6.0, 40.0]))
def test_the_run_stops_at_the_arrival_a_count_over_the_whole_run_names(seed, kind, allowed, rate):
    trace = random_trace(seed, n=200, rate_rps=rate)
    stop = MissStop(ttft_s=1.0, ttft_misses=allowed, tpot_s=0.06, tpot_misses=allowed + 5)
    full = run(trace, *kind)
    assert run(trace, *kind, stop=stop).stopped_s == stop_named_by_the_whole_run(full, stop)


def test_a_stopped_run_keeps_what_happened_before_its_stop_and_nothing_after():
    trace = random_trace(3, n=300, rate_rps=40.0)
    full = run(trace, "colocated", "prefill-first", None)
    stopped = run(trace, "colocated", "prefill-first", None, stop=MissStop(ttft_s=0.5, ttft_misses=10))
    assert stopped.stopped_s is not None
    before = np.asarray(full["finish_s"]) < stopped.stopped_s
    np.testing.assert_array_equal(np.asarray(stopped["finish_s"])[before], np.asarray(full["finish_s"])[before])
    assert np.all(np.isnan(np.asarray(stopped["finish_s"])[~before]))


@pytest.mark.parametrize("metric", ["ttft", "tpot"])
def test_a_stopped_runs_shares_bound_the_whole_runs_from_above_and_miss_the_target(metric):
    trace = random_trace(8, n=400, rate_rps=20.0)  # arrivals long enough for TPOT misses to finish among them
    slo = SLO(objectives=(Objective(metric=metric, threshold_s=1.0 if metric == "ttft" else 0.06, attainment=0.9),))
    stop = miss_stop(slo, len(trace["arrival_s"]))
    full, stopped = run(trace, "colocated", "chunked", 256), run(trace, "colocated", "chunked", 256, stop=stop)
    assert stopped.stopped_s is not None
    threshold = slo.objectives[0].threshold_s
    whole = attainment(per_request_clocks(full)[metric], threshold)
    bound = attainment(per_request_clocks(stopped)[metric], threshold)
    assert whole <= bound < 0.9


@pytest.mark.parametrize("n", [1, 2, 7, 10, 99, 100, 2000, 19366])
@pytest.mark.parametrize("share", [0.5, 0.9, 0.95, 0.99, 0.999, 1.0])
def test_the_miss_budget_is_the_most_misses_whose_share_still_reaches_the_target(n, share):
    def reaches(misses):
        return attainment(np.r_[np.zeros(n - misses), np.ones(misses)], 0.5) >= share
    budget = miss_budget(n, share)
    assert reaches(budget) and (budget == n or not reaches(budget + 1))


def test_a_stop_on_each_clock_takes_the_objective_allowing_the_fewest_misses():
    slo = SLO(objectives=(Objective(metric="ttft", threshold_s=2.0, attainment=0.9),
                          Objective(metric="ttft", threshold_s=0.5, attainment=0.5),
                          Objective(metric="e2e", threshold_s=9.0, attainment=0.99)))
    assert miss_stop(slo, 1000) == MissStop(ttft_s=2.0, ttft_misses=100)
    assert miss_stop(SLO(objectives=(Objective(metric="e2e", threshold_s=9.0, attainment=0.9),)), 1000) is None


def test_a_whole_plan_is_never_stopped_early():
    layout = layout_from_plan(two_by_two(), PROFILES, MODEL)
    with pytest.raises(InternalError, match="one pool"):
        run_layout(layout, as_requests(random_trace(1)), stop=MissStop(ttft_s=1.0, ttft_misses=0))


def test_a_closed_loop_is_never_stopped_early():
    with pytest.raises(InternalError, match="closed loops"):
        simulate_pool(random_trace(1), POOL, phase="prefill", concurrency=4, stop=MissStop(ttft_s=1.0, ttft_misses=0))


def test_a_stop_with_a_negative_allowance_is_refused():
    with pytest.raises(InternalError):
        MissStop(ttft_s=1.0, ttft_misses=-1)


@pytest.mark.parametrize("phase,policy,chunk", [("prefill", None, None), ("decode", None, None),
                                                ("colocated", "chunked", 512)])
def test_a_goodput_search_that_stops_its_probes_finds_the_rate_one_that_runs_them_whole_finds(
        monkeypatch, workload, phase, policy, chunk):
    slo = SLO(objectives=(Objective(metric="ttft", threshold_s=1.0, attainment=0.9),
                          Objective(metric="tpot", threshold_s=0.06, attainment=0.9)))
    settings_ = SearchSettings(requests_per_probe=600)

    def search():
        return instance_goodput(workload, POOL, phase=phase, slo=slo, settings=settings_, policy=policy,
                                chunk_tokens=chunk)

    stopping = search()
    monkeypatch.setattr(goodput, "miss_stop", lambda *args: None)
    whole = search()
    assert any(p.stopped_early for p in stopping.probes)
    assert stopping.goodput_rps == whole.goodput_rps
    assert [p.meets for p in stopping.probes] == [p.meets for p in whole.probes]
    for early, full in zip(stopping.probes, whole.probes):
        assert early.attainment_joint >= full.attainment_joint


def test_a_curve_written_before_probes_could_stop_reads_as_run_whole(workload):
    found = instance_goodput(workload, POOL, phase="prefill", slo=SLO(objectives=(
        Objective(metric="ttft", threshold_s=1.0, attainment=0.9),)), settings=SearchSettings(requests_per_probe=300))
    data = found.to_dict()
    for point in data["curve"]:
        point.pop("stopped_early")
    assert all(isinstance(p, Probe) and not p.stopped_early for p in type(found).from_dict(data).probes)
