"""End-to-end verification: runs, intervals, the pass rule and which pool a miss points at."""

import numpy as np
import pytest

from pdplan.errors import InternalError
from pdplan.slo import Objective, slo_from_flags
from pdplan.verify import (
    MAX_RUN_REQUESTS,
    Interval,
    LossCheck,
    RunRecord,
    judge,
    run_copies,
    run_seconds,
    run_workloads,
    settled_by_first_run,
)
from pdplan.workload import Workload, poisson_resample, rescale_rate

SLO = slo_from_flags(1.0, 0.1, 0.9)


def record(ttft, tpot=1.0, excess=None):
    return RunRecord(objectives=(ttft, tpot), clocks={"ttft": ttft, "tpot": tpot, "joint": min(ttft, tpot)},
                     ttft_excess_s=excess or {"prefill_queue": 1.0, "transfer": 0.0, "admission": 0.0}, requests=100)


def test_the_interval_is_the_t_interval_over_runs():
    """0.90, 0.92, 0.94: mean 0.92, s = 0.02, t(0.975, 2) = 4.3027 → ± 0.04968."""
    interval = Interval.of([0.90, 0.92, 0.94])
    assert interval.mean == pytest.approx(0.92)
    assert (interval.low, interval.high) == (pytest.approx(0.92 - 0.049683, abs=1e-6),
                                             pytest.approx(0.92 + 0.049683, abs=1e-6))


def test_one_run_has_no_spread_and_intervals_stay_within_zero_and_one():
    assert Interval.of([0.8]) == Interval(mean=0.8, low=0.8, high=0.8)
    assert Interval.of([0.99, 1.0, 1.0]).high == 1.0


def test_the_lower_rule_fails_a_plan_whose_mean_passes_but_whose_interval_reaches_below():
    runs = [record(0.89), record(0.93), record(0.95)]
    assert judge(runs, SLO, rule="mean", rate_rps=1, seeds=(0, 1, 2), mode="disaggregated").passed
    lower = judge(runs, SLO, rule="lower", rate_rps=1, seeds=(0, 1, 2), mode="disaggregated")
    assert not lower.passed and not lower.clear_miss
    assert lower.per_objective[0].shortfall == pytest.approx(0.9 - lower.per_objective[0].interval.low)


def test_a_miss_on_the_mean_is_a_clear_miss():
    verdict = judge([record(0.85)] * 3, SLO, rule="lower", rate_rps=1, seeds=(0, 1, 2), mode="disaggregated")
    assert not verdict.passed and verdict.clear_miss


@pytest.mark.parametrize("excess,tpot,phase", [
    ({"prefill_queue": 3.0, "transfer": 1.0, "admission": 1.0}, 1.0, "prefill"),
    ({"prefill_queue": 1.0, "transfer": 0.5, "admission": 2.0}, 1.0, "decode"),
    ({"prefill_queue": 3.0, "transfer": 0.0, "admission": 0.0}, 0.5, "decode"),
])
def test_a_miss_points_at_the_pool_where_the_late_requests_waited(excess, tpot, phase):
    verdict = judge([record(0.8, tpot, excess)] * 3, SLO, rule="lower", rate_rps=1, seeds=(0, 1, 2),
                    mode="disaggregated")
    assert verdict.failing_phase == phase


def test_a_colocated_miss_points_at_its_one_pool():
    assert judge([record(0.5)] * 2, SLO, rule="lower", rate_rps=1, seeds=(0, 1), mode="colocated").failing_phase \
        == "colocated"


def test_a_plan_that_holds_whole_but_not_after_a_loss_misses_and_names_the_loss_s_pool():
    lost = LossCheck(lost="node n-0", passed=False, worst_shortfall=0.2, mean_shortfall=0.2, joint=None,
                     failing_phase="decode")
    verdict = judge([record(0.95)] * 3, SLO, rule="lower", rate_rps=1, seeds=(0, 1, 2), mode="disaggregated",
                    losses=(lost,))
    assert not verdict.passed and verdict.failing_phase == "decode" and verdict.worst_shortfall == 0.2


def burst_trace(n=2000):
    """A quiet first half and a second half ten times as fast; lengths count up."""
    arrivals = np.concatenate([np.arange(n // 2) * 1.0, n // 2 + np.arange(n // 2) * 0.1])
    return Workload(arrival_s=arrivals, prompt_tokens=np.arange(1, n + 1), output_tokens=np.full(n, 5))


def test_run_zero_replays_the_trace_and_the_others_resample_it():
    workload = burst_trace()
    runs = run_workloads(workload, 50.0, runs=3, seed=7, arrivals="trace")
    np.testing.assert_array_equal(runs[0].arrival_s, rescale_rate(workload, 50.0).arrival_s)
    for run in runs[1:]:
        np.testing.assert_array_equal(run.prompt_tokens, workload.prompt_tokens)
        assert not np.array_equal(run.arrival_s, runs[0].arrival_s)
    assert not np.array_equal(runs[1].arrival_s, runs[2].arrival_s)
    again = run_workloads(workload, 50.0, runs=3, seed=7, arrivals="trace")
    np.testing.assert_array_equal(again[2].arrival_s, runs[2].arrival_s)


def test_a_poisson_resample_keeps_the_trace_s_rate_swings():
    workload = burst_trace()
    resampled = poisson_resample(workload, rng=1)
    assert len(resampled) == len(workload) and np.all(np.diff(resampled.arrival_s) >= 0)
    quiet = np.sum(resampled.arrival_s < 1000)
    assert 900 < quiet < 1100  # about half the requests still arrive in the quiet first 1000 s
    assert resampled.arrival_s[0] >= 0 and resampled.arrival_s[-1] <= workload.arrival_s[-1]


def test_poisson_arrivals_resample_lengths_and_draw_new_arrivals_every_run():
    runs = run_workloads(burst_trace(), 20.0, runs=2, seed=0, arrivals="poisson")
    assert len(runs) == 2 and not np.array_equal(runs[0].prompt_tokens, runs[1].prompt_tokens)
    assert len(runs[0]) / (runs[0].arrival_s[-1] - runs[0].arrival_s[0]) == pytest.approx(20.0, rel=0.1)


def test_an_objective_check_reports_its_runs():
    verdict = judge([record(0.91), record(0.93)], SLO, rule="mean", rate_rps=2.5, seeds=(3, 4), mode="disaggregated")
    doc = verdict.to_dict()
    assert doc["seeds"] == [3, 4] and doc["requests"] == [100, 100] and doc["rate_rps"] == 2.5
    assert doc["per_objective"][0]["runs"] == [0.91, 0.93]
    assert isinstance(verdict.per_objective[0].objective, Objective)


def test_a_trace_too_short_for_the_run_is_repeated_back_to_back_at_the_same_rate():
    workload = burst_trace()  # 2,000 requests: 40 s at 50 req/s
    run = run_workloads(workload, 50.0, runs=1, seed=0, arrivals="trace", min_run_s=100.0)[0]
    assert len(run) == 3 * len(workload)  # ceil(100 s × 50 req/s / 2,000)
    np.testing.assert_array_equal(run.prompt_tokens, np.tile(workload.prompt_tokens, 3))
    assert np.all(np.diff(run.arrival_s) > 0)
    assert len(run) / (run.arrival_s[-1] - run.arrival_s[0]) == pytest.approx(50.0, rel=0.01)
    assert run.arrival_s[-1] - run.arrival_s[0] >= 100.0 - 0.1


def test_a_trace_long_enough_is_replayed_once():
    workload = burst_trace()
    runs = run_workloads(workload, 5.0, runs=2, seed=3, arrivals="trace", min_run_s=300.0)  # 400 s already
    assert [len(r) for r in runs] == [len(workload)] * 2


def test_poisson_runs_draw_enough_requests_to_last_the_run():
    run = run_workloads(burst_trace(), 50.0, runs=1, seed=0, arrivals="poisson", min_run_s=100.0)[0]
    assert len(run) == 3 * 2000


def test_repeats_stop_at_the_most_requests_a_run_holds():
    assert run_copies(2000, 1e6, 300.0) == MAX_RUN_REQUESTS // 2000
    assert run_copies(MAX_RUN_REQUESTS + 5, 1e6, 300.0) == 1
    assert run_copies(2000, 50.0, 0.0) == 1


def test_a_run_holds_its_requests_over_the_rate_in_seconds_of_arrivals():
    assert run_seconds(2000, 50.0, 100.0) == pytest.approx(3 * 2000 / 50.0)  # three copies: 120 s
    assert run_seconds(2000, 5.0, 300.0) == pytest.approx(400.0)  # the trace once lasts long enough


def test_a_run_whose_repeats_the_most_requests_cut_is_shorter_than_asked():
    copies = MAX_RUN_REQUESTS // 19_366  # an hour of Azure conversations at 10,000 req/s
    assert run_seconds(19_366, 10_000.0, 300.0) == pytest.approx(copies * 19_366 / 10_000.0)
    assert run_seconds(19_366, 10_000.0, 300.0) < 300.0
    assert run_seconds(MAX_RUN_REQUESTS + 5, 1e4, 300.0) == pytest.approx(MAX_RUN_REQUESTS / 1e4)


def test_five_minutes_of_an_hours_trace_at_thousands_of_requests_per_second_fit_in_a_run():
    # 4,800 req/s on the Azure conversation trace: 75 copies, 1,452,450 requests, 303 s
    assert run_copies(19_366, 4800.0, 300.0) == 75
    assert run_seconds(19_366, 4800.0, 300.0) >= 300.0


@pytest.mark.parametrize("first,runs,settled", [(0.69, 3, True), (0.71, 3, False), (0.0, 1, False), (0.79, 2, True),
                                                (0.81, 2, False)])
def test_a_first_run_settles_a_miss_when_perfect_further_runs_could_not_lift_the_mean_to_the_target(
        first, runs, settled):
    """Target 0.9: the mean over R runs reaches it only if run 0 attains R·0.9 − (R − 1) (0.7 of 3, 0.8 of 2)."""
    assert settled_by_first_run(record(first), SLO, runs) is settled


def test_a_first_run_exactly_on_the_bound_is_not_settled():
    """0.7 with two perfect runs is a mean of exactly 0.9, which the mean rule passes."""
    assert not settled_by_first_run(record(0.7), SLO, 3)
    assert judge([record(0.7), record(1.0), record(1.0)], SLO, rule="mean", rate_rps=1, seeds=(0, 1, 2),
                 mode="disaggregated").passed


def test_a_verdict_on_the_first_run_alone_is_a_clear_miss_on_that_run_s_seed():
    verdict = judge([record(0.5)], SLO, rule="lower", rate_rps=1, seeds=(0, 1, 2), mode="disaggregated")
    assert not verdict.passed and verdict.clear_miss and verdict.settled_early
    assert verdict.seeds == (0,) and verdict.worst_shortfall == pytest.approx(0.4)
    assert verdict.to_dict()["settled_by_first_run"] is True


def test_fewer_runs_than_seeds_are_refused_unless_the_first_run_settled_a_miss():
    with pytest.raises(InternalError):
        judge([record(0.8)], SLO, rule="lower", rate_rps=1, seeds=(0, 1, 2), mode="disaggregated")
