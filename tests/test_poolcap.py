"""Pool capacity c(n): the interpolation rules, and the pooling gain on a real trace."""

import math

import pytest

from pdplan.goodput import SearchSettings, instance_goodput, pool_goodput
from pdplan.latency.profile import shipped_profiles
from pdplan.poolcap import MAX_SAMPLED_REPLICAS, PoolCurve, build_curve, sample_sizes
from pdplan.sim import simulate_pool
from pdplan.slo import slo_from_flags
from pdplan.workload import head, load_trace

CURVE = PoolCurve(samples=((1, 2.0), (2, 5.0), (4, 12.0)), saturation_rps=3.5)


def test_capacity_of_no_replicas_is_zero_and_samples_are_kept():
    assert CURVE.capacity_rps(0) == 0
    assert [CURVE.capacity_rps(n) for n in (1, 2, 4)] == [2.0, 5.0, 12.0]


def test_between_samples_each_replica_serves_what_the_smaller_sample_measured():
    """n = 3 lies between 2 (2.5 per replica) and 4: 3 × 2.5 = 7.5, not an interpolation up to 12."""
    assert CURVE.capacity_rps(3) == pytest.approx(7.5)


def test_beyond_the_largest_sample_capacity_grows_at_its_per_replica_rate_within_saturation():
    assert CURVE.capacity_rps(6) == pytest.approx(min(6 * 3.0, 6 * 3.5))
    assert PoolCurve(samples=((1, 2.0), (2, 8.0)), saturation_rps=3.0).capacity_rps(5) == pytest.approx(15.0)


def test_capacity_never_falls_when_replicas_are_added():
    noisy = PoolCurve(samples=((1, 3.0), (2, 7.0), (4, 9.0), (8, 30.0)))
    values = [noisy.capacity_rps(n) for n in range(0, 20)]
    assert values == sorted(values)
    assert noisy.capacity_rps(3) <= 9.0  # never above a larger pool's measurement


def test_replicas_for_is_the_fewest_that_reach_the_rate():
    assert [CURVE.replicas_for(r, 100) for r in (0, 2.0, 2.1, 7.5, 7.6, 12.0, 13.0)] == [0, 1, 2, 3, 4, 4, 5]
    assert CURVE.replicas_for(100.0, 10) is None
    assert CURVE.replicas_for(math.inf, 10) is None


def test_the_linear_curve_is_distserve_s_replica_rule():
    assert [PoolCurve.linear(4.0).capacity_rps(n) for n in (1, 3)] == [4.0, 12.0]


def test_samples_double_up_to_what_is_needed():
    assert sample_sizes(1) == [] and sample_sizes(5) == [2, 4, 5] and sample_sizes(8) == [2, 4, 8]
    assert sample_sizes(10**6)[-1] == MAX_SAMPLED_REPLICAS


def test_sampling_stops_once_a_pool_reaches_the_wanted_rate():
    asked = []

    def sample(n, start):
        asked.append((n, start))
        return 3.0 * n

    curve = build_curve(2.0, None, wanted_rps=11.0, most_replicas=64, sample=sample)
    assert asked == [(2, 4.0), (4, 12.0)]
    assert [n for n, _ in curve.samples] == [1, 2, 4]


def test_a_pool_of_n_replicas_matches_the_reference_engine():
    workload = head(load_trace("traces/chat_poisson_2k.csv"), 300)
    profile = shipped_profiles()[("llama2-70b", "h100-80gb", 4, 1)]
    for phase, extra in (("prefill", {}), ("decode", {}), ("colocated", {"policy": "chunked", "chunk_tokens": 512})):
        fast = simulate_pool(workload, profile, phase=phase, replicas=3, rate_rps=20, **extra)
        slow = simulate_pool(workload, profile, phase=phase, replicas=3, rate_rps=20, engine="reference", **extra)
        for column in ("ttft_s", "prefill_instance", "decode_instance", "finish_s"):
            assert fast[column] == pytest.approx(slow[column], rel=1e-9, nan_ok=True), (phase, column)


@pytest.mark.slow
def test_eight_prefill_replicas_behind_the_router_serve_more_than_eight_alone(shared_data):
    """The pooling gain on the Azure conversation trace: H100 TP4 prefill, p90 TTFT <= 1 s."""
    workload = load_trace(shared_data / "traces" / "AzureLLMInferenceTrace_conv.csv")
    profile = shipped_profiles()[("llama2-70b", "h100-80gb", 4, 1)]
    slo, settings = slo_from_flags(1.0, 0.1, 0.9), SearchSettings()
    one = instance_goodput(workload, profile, phase="prefill", slo=slo, settings=settings).goodput_rps
    eight = pool_goodput(workload, profile, phase="prefill", slo=slo, settings=settings, start_rps=8 * one,
                         replicas=8).goodput_rps
    assert one > 0 and eight > 8 * one * 1.1


def test_a_decode_pool_on_a_trace_shorter_than_its_probes_is_not_credited_for_probing_less():
    """300 requests, 300 a replica: a pool of 8 replays the trace eight times, so it runs as long as one
    instance does; taken once, its probe lasted an eighth as long, the pool did not fill and it claimed
    2.3 times one instance's rate per replica."""
    workload = head(load_trace("traces/chat_poisson_2k.csv"), 300)
    profile = shipped_profiles()[("llama2-70b", "h100-80gb", 4, 1)]
    slo, settings = slo_from_flags(None, 0.05, 0.9), SearchSettings(requests_per_probe=300)
    one = instance_goodput(workload, profile, phase="decode", slo=slo, settings=settings).goodput_rps
    eight = pool_goodput(workload, profile, phase="decode", slo=slo, settings=settings, start_rps=8 * one,
                         replicas=8).goodput_rps
    assert one > 0 and one <= eight / 8 < 1.5 * one


def test_sampling_stops_once_the_rate_per_replica_reaches_saturation():
    rates = {2: 2.5, 4: 3.0, 8: 3.95, 16: 4.0}  # per replica; one instance saturates at 4 req/s
    asked = []

    def sample(n, start):
        asked.append(n)
        return rates[n] * n

    curve = build_curve(2.0, 4.0, wanted_rps=100.0, most_replicas=64, sample=sample, resolution=0.02)
    assert asked == [2, 4, 8]
    assert curve.capacity_rps(20) == pytest.approx(20 * 3.95)


def test_a_doubling_that_gains_nothing_does_not_stop_the_sampling():
    """On a bursty trace the pooling gain stalls and then resumes (bloom-176b prefill on the Azure
    code trace, per replica at n = 2 … 32), so a flat doubling below saturation is sampled past."""
    rates = {2: 0.565, 4: 0.562, 8: 0.703, 16: 0.953, 32: 1.453}
    asked = []

    def sample(n, start):
        asked.append(n)
        return rates[n] * n

    curve = build_curve(0.348, 4.0, wanted_rps=87.5, most_replicas=10**6, sample=sample, resolution=0.02)
    assert asked == [2, 4, 8, 16, 32]
    assert curve.capacity_rps(43) == pytest.approx(43 * 1.453)


def test_a_colocated_dp_pool_stops_sampling_after_two_doublings_without_gain():
    """DeepSeek-R1 TP1 DP16 colocated on the Azure conversation trace: its prompt chunks stall every
    rank's decodes whatever the pool, so the rate per replica stays flat and larger pools are not
    simulated; they extrapolate at the last sample's rate."""
    rates = {2: 2.42, 4: 2.42, 8: 2.50, 16: 2.54, 32: 2.65}
    asked = []

    def sample(n, start):
        asked.append(n)
        return rates[n] * n

    curve = build_curve(2.46, None, wanted_rps=1500.0, most_replicas=32, sample=sample, resolution=0.02,
                        stop_when_flat=True)
    assert asked == [2, 4]
    assert curve.capacity_rps(32) == pytest.approx(32 * 2.42)


def test_a_flat_sample_then_a_gain_resets_the_count():
    rates = {2: 2.0, 4: 2.5, 8: 2.5, 16: 3.0, 32: 3.0}
    asked = []

    def sample(n, start):
        asked.append(n)
        return rates[n] * n

    build_curve(2.0, None, wanted_rps=1500.0, most_replicas=32, sample=sample, resolution=0.02, stop_when_flat=True)
    assert asked == [2, 4, 8, 16, 32]
