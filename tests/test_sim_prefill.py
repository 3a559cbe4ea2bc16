"""Prefill instances: FCFS batching under a token cap, pipeline parallelism, M/D/1 queueing."""

import numpy as np
import pytest

from pdplan.queueing import inter_op_ttft_s, md1_ttft_s
from pdplan.sim import simulate_prefill_instance
from tests.handbuilt import handbuilt_profile


def constant_prefill(service_s: float, *, cap: int = 1, pp: int = 1):
    """Every batch takes ``service_s``; with cap 1 every batch holds one request."""
    return handbuilt_profile(prefill_ms=[(1, [[service_s * 1e3, 0, 0]])], decode_ms=[(1, [[10, 0, 0]])],
                             kv_capacity_tokens=10**6, max_prefill_batch_tokens=cap, pp=pp)


def trace(arrival_s, prompt_tokens):
    n = len(arrival_s)
    return {"arrival_s": np.asarray(arrival_s, float), "prompt_tokens": np.asarray(prompt_tokens),
            "output_tokens": np.ones(n, np.int64)}


def poisson(n, rate_rps, seed):
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate_rps, n))


def test_fcfs_batch_of_1000_700_600_under_2048_takes_the_first_two():
    """While a first batch runs, 1000, 700, 600 queue; the next batch is [1000, 700] (1700 tokens)
    and 600 waits for the one after, although it would fit the 348 left: no reordering."""
    profile = constant_prefill(1.0, cap=2048)
    result = simulate_prefill_instance(trace([0, 0.1, 0.2, 0.3], [10, 1000, 700, 600]), profile)
    assert result["prefill_start_s"].tolist() == [0.0, 1.0, 1.0, 2.0]


def test_requests_arriving_at_the_same_instant_share_a_batch():
    """An idle instance forms its batch after every arrival of that instant has queued."""
    profile = constant_prefill(1.0, cap=2048)
    result = simulate_prefill_instance(trace([0, 0, 0], [1000, 700, 600]), profile)
    assert result["prefill_start_s"].tolist() == [0.0, 0.0, 1.0]


def test_a_prompt_longer_than_the_cap_runs_alone():
    profile = constant_prefill(1.0, cap=2048)
    result = simulate_prefill_instance(trace([0, 0.1, 0.2], [10, 5000, 10]), profile)
    assert result["prefill_start_s"].tolist() == [0.0, 1.0, 2.0]


def test_pp2_starts_the_next_batch_after_half_the_latency():
    """PP=k: a batch holds the first stage for latency/k, so two batches overlap."""
    profile = constant_prefill(1.0, pp=2)
    result = simulate_prefill_instance(trace([0, 0, 0], [1, 1, 1]), profile)
    assert result["prefill_start_s"].tolist() == [0.0, 0.5, 1.0]
    assert result["prefill_end_s"].tolist() == [1.0, 1.5, 2.0]


@pytest.mark.parametrize("rho, seed", [(0.3, 11), (0.6, 12), (0.85, 13)])
def test_md1_mean_ttft_within_3_percent_of_closed_form(rho, seed):
    """One instance, one request per batch, constant D, Poisson arrivals: mean TTFT (queue +
    service) → D + λD²/(2(1 − λD)) (0x08B); 1M requests."""
    service = 0.1
    rate = rho / service
    n = 1_000_000
    result = simulate_prefill_instance(trace(poisson(n, rate, seed), np.ones(n, np.int64)),
                                       constant_prefill(service))
    assert result["ttft_s"].mean() == pytest.approx(md1_ttft_s(rate, service), rel=0.03)


def test_pp2_pipeline_mean_ttft_matches_the_inter_op_formula():
    """Two stages of D/2 each: mean TTFT = D + λD²/(4(2 − λD)) (0x08B inter-op) at λD = 1.5."""
    service, rate, n = 0.1, 15.0, 1_000_000
    result = simulate_prefill_instance(trace(poisson(n, rate, 21), np.ones(n, np.int64)),
                                       constant_prefill(service, pp=2))
    assert result["ttft_s"].mean() == pytest.approx(inter_op_ttft_s(rate, service), rel=0.03)


def test_batch_time_comes_from_the_profile_at_the_batch_features():
    """Two prompts of 100 and 200 batched: 10 + 0.01·300 + 1e-4·(100² + 200²) ms = 18 ms."""
    profile = handbuilt_profile(prefill_ms=[(1, [[10, 0.01, 1e-4]])], decode_ms=[(1, [[10, 0, 0]])],
                                kv_capacity_tokens=10**6, max_prefill_batch_tokens=4096)
    result = simulate_prefill_instance(trace([0, 0.001, 0.002], [1, 100, 200]), profile)
    first = 10 + 0.01 + 1e-4
    assert result["prefill_end_s"][1:] == pytest.approx([first / 1e3 + 0.018] * 2)
