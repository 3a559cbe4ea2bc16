"""Arrival times rounded to a grid (Mooncake's 3 s ticks): found, spread over their intervals for replay."""

import json
from pathlib import Path

import numpy as np

from pdplan.workload import Workload, arrival_grid_s, interarrival_cv, load_trace, spread_over_grid, trace_stats

ROOT = Path(__file__).resolve().parent.parent
MOONCAKE = "traces/mooncake_conversation_trace.jsonl"


def _workload(arrival_s) -> Workload:
    arrival_s = np.asarray(arrival_s, dtype=np.float64)
    ones = np.ones(arrival_s.size, dtype=np.int64)
    return Workload(prompt_tokens=ones, output_tokens=ones, arrival_s=arrival_s)


def _floored_poisson(rate_rps: float, n: int, step_s: float, seed: int = 1) -> np.ndarray:
    arrivals = np.cumsum(np.random.default_rng(seed).exponential(1 / rate_rps, n))
    return np.floor(arrivals / step_s) * step_s


def test_mooncakes_conversation_trace_lies_on_a_three_second_grid(shared_data):
    assert arrival_grid_s(load_trace(shared_data / MOONCAKE).arrival_s) == 3.0


def test_continuous_arrival_times_lie_on_no_grid(shared_data):
    for path in (ROOT / "traces" / "chat_poisson_2k.csv", shared_data / "traces" / "AzureLLMInferenceTrace_conv.csv"):
        assert arrival_grid_s(load_trace(path).arrival_s) is None


def test_a_grid_needs_most_requests_to_share_their_time():
    whole_seconds = np.array([0.0, 1.0, 1.0, 3.0, 4.0, 6.0, 7.0, 9.0])  # a quarter of the requests tied
    assert arrival_grid_s(whole_seconds) is None
    assert arrival_grid_s(np.repeat(whole_seconds, 2)) == 1.0


def test_a_grid_needs_every_gap_to_be_whole_steps():
    assert arrival_grid_s(np.repeat([0.0, 3.0, 6.0, 7.3], 3)) is None
    assert arrival_grid_s(np.repeat([0.0, 2.999, 6.0, 15.001], 3)) == 3.0


def test_spreading_keeps_each_request_in_its_interval_and_in_order():
    given = np.array([0.0, 0.0, 0.0, 3.0, 3.0, 9.0, 9.0, 9.0, 9.0])
    spread = spread_over_grid(_workload(given), seed=7)
    assert spread.arrival_grid_s == 3.0
    assert np.all(spread.arrival_s >= given) and np.all(spread.arrival_s < given + 3.0)
    assert np.all(np.diff(spread.arrival_s) > 0)


def test_spreading_never_passes_the_next_time_of_a_grid_with_jitter():
    given = np.repeat([0.0, 3.0, 5.971, 9.0], 500)  # a short step, as Mooncake's millisecond stamps have (2,997 ms)
    spread = spread_over_grid(_workload(given), seed=3).arrival_s
    assert np.all(np.diff(spread) >= 0) and np.all(spread[500:1000] < 5.971)


def test_spreading_is_drawn_from_the_seed():
    given = _workload(np.repeat([0.0, 3.0, 6.0], 4))
    assert np.array_equal(spread_over_grid(given, 5).arrival_s, spread_over_grid(given, 5).arrival_s)
    assert not np.array_equal(spread_over_grid(given, 5).arrival_s, spread_over_grid(given, 6).arrival_s)


def test_a_trace_without_a_grid_is_replayed_as_written():
    given = _workload([0.0, 0.4, 1.3, 2.0])
    assert spread_over_grid(given, 0) is given


def test_spreading_a_rounded_poisson_process_gives_back_a_poisson_process():
    """Given k arrivals in an interval, a Poisson process places them as k independent uniform points:
    spread, the rounded trace's inter-arrival CV returns to 1 (exponential gaps), from about 3."""
    rounded = _floored_poisson(3.4, 20_000, 3.0)
    assert interarrival_cv(rounded) > 2.5
    assert abs(interarrival_cv(spread_over_grid(_workload(rounded), 0).arrival_s) - 1.0) < 0.03


def test_trace_stats_name_the_grid_and_say_the_cv_counts_ties_as_simultaneous(shared_data):
    stats = trace_stats(load_trace(shared_data / MOONCAKE))
    assert stats.arrival_grid_s == 3.0 and stats.interarrival_cv > 2.5
    assert any("3 s grid" in note for note in stats.notes)


def test_a_spread_workload_keeps_the_grid_it_was_spread_over(shared_data):
    stats = trace_stats(spread_over_grid(load_trace(shared_data / MOONCAKE), 0))
    assert stats.arrival_grid_s == 3.0 and abs(stats.interarrival_cv - 1.0) < 0.1
    assert not any("grid" in note for note in stats.notes)


def test_trace_stats_json_reports_the_grid(run_cli, shared_data):
    code, out, _ = run_cli("trace", "stats", shared_data / MOONCAKE, "--json")
    assert code == 0 and json.loads(out)["arrival_grid_s"] == 3.0
