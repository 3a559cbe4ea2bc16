"""Decode instances: continuous batching, KV admission, and the closed-form fast-forward.

The compiled engine advances a batch whose membership does not change many steps at once; the
oracle in pdplan.sim.reference steps token by token. They must agree request by request.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.sim import simulate_decode_instance
from pdplan.sim.fast.latency import LatencyTable, decode_run_s, steps_to_reach
from tests.handbuilt import handbuilt_profile, latency_model_ms

#: two pieces that cross as the context grows, and a second batch segment
DECODE_MS = [(1, [[20.0, 0.5, 0.001], [30.0, 0.1, 0.0005]]), (6, [[25.0, 0.3, 0.002], [40.0, 0.0, 0.0]])]
TIMES = ("first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s", "admission_wait_s")


def decode_profile(kv_capacity_tokens=3000):
    return handbuilt_profile(prefill_ms=[(1, [[50.0, 0.1, 0.0]])], decode_ms=DECODE_MS,
                             kv_capacity_tokens=kv_capacity_tokens, max_prefill_batch_tokens=2048)


def random_trace(seed, n=40, rate_rps=20.0, max_prompt=1000, max_output=80):
    rng = np.random.default_rng(seed)
    return {"arrival_s": np.cumsum(rng.exponential(1 / rate_rps, n)),
            "prompt_tokens": rng.integers(1, max_prompt, n),
            "output_tokens": rng.integers(1, max_output, n)}


def assert_same_records(fast, reference):
    for column in TIMES:
        np.testing.assert_allclose(fast[column], reference[column], rtol=0, atol=1e-9, err_msg=column)
    for column in ("decode_instance", "prefill_instance", "rejected"):
        np.testing.assert_array_equal(fast[column], reference[column], err_msg=column)


def table_for(model):
    table = LatencyTable()
    table.index(model)
    return table.arrays()


@settings(max_examples=200, deadline=None)
@given(batch=st.integers(1, 12), context=st.integers(0, 30_000), steps=st.integers(1, 400))
def test_closed_form_run_time_equals_the_sum_of_steps(batch, context, steps):
    """Σ_j max_p(a_p + b_p·B + c_p·(S + j·B)) summed stretch by stretch equals step by step."""
    model = latency_model_ms(DECODE_MS)
    profile = decode_profile()
    brute = sum(profile.decode_step_s(batch, context + j * batch) for j in range(steps))
    assert decode_run_s(*table_for(model), 0, batch, float(context), steps) == pytest.approx(brute, rel=1e-12)


def test_steps_to_reach_finds_the_first_boundary_at_or_after_a_moment():
    """Constant 10 ms steps: 25 ms into a run the next boundary is after step 3."""
    table = table_for(latency_model_ms([(1, [[10.0, 0.0, 0.0]])]))
    assert [steps_to_reach(*table, 0, 1, 0.0, 100, t) for t in (0.0, 0.025, 0.030, 0.0301)] == [1, 3, 3, 4]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), capacity=st.sampled_from([1100, 3000, 100_000]))
def test_fast_forward_matches_token_by_token_stepping(seed, capacity):
    """Same first-token and finish times within 1e-9 s, with KV stalls (small capacity) and
    without, across piece crossovers and batch segments."""
    workload = random_trace(seed)
    profile = decode_profile(capacity)
    assert_same_records(simulate_decode_instance(workload, profile),
                        simulate_decode_instance(workload, profile, engine="reference"))


def test_a_request_waits_for_kv_memory_until_an_earlier_one_finishes():
    """Capacity 1000 holds one 600-token request (prompt + output): the second is admitted when
    the first finishes, and its wait is reported."""
    profile = handbuilt_profile(prefill_ms=[(1, [[1.0, 0, 0]])], decode_ms=[(1, [[10.0, 0, 0]])],
                                kv_capacity_tokens=1000, max_prefill_batch_tokens=2048)
    workload = {"arrival_s": np.array([0.0, 0.001]), "prompt_tokens": np.array([500, 500]),
                "output_tokens": np.array([100, 100])}
    result = simulate_decode_instance(workload, profile)
    assert result["finish_s"][0] == pytest.approx(99 * 0.010)
    assert result["first_token_s"][1] == pytest.approx(result["finish_s"][0])
    assert result["admission_wait_s"][1] == pytest.approx(99 * 0.010 - 0.001)


def test_a_request_joins_a_running_batch_at_the_next_step_boundary():
    """10 ms steps started at 0; a request arriving at 25 ms is admitted at 30 ms."""
    profile = handbuilt_profile(prefill_ms=[(1, [[1.0, 0, 0]])], decode_ms=[(1, [[10.0, 0, 0]])],
                                kv_capacity_tokens=10_000, max_prefill_batch_tokens=2048)
    workload = {"arrival_s": np.array([0.0, 0.025]), "prompt_tokens": np.array([10, 10]),
                "output_tokens": np.array([100, 3])}
    result = simulate_decode_instance(workload, profile)
    assert result["first_token_s"][1] == pytest.approx(0.030)
    assert result["finish_s"][1] == pytest.approx(0.050)


def test_kv_landing_at_the_same_instant_on_an_idle_instance_decodes_in_one_batch():
    profile = handbuilt_profile(prefill_ms=[(1, [[1.0, 0, 0]])], decode_ms=[(1, [[10.0, 1.0, 0]])],
                                kv_capacity_tokens=10_000, max_prefill_batch_tokens=2048)
    workload = {"arrival_s": [0.0, 0.0], "prompt_tokens": [10, 10], "output_tokens": [3, 3]}
    result = simulate_decode_instance(workload, profile)
    assert result["finish_s"].tolist() == pytest.approx([0.024, 0.024])  # 2 steps of 10 + 1·B ms


def test_tpot_divides_decode_time_by_output_minus_one():
    """Alone, 5 output tokens = first + 4 steps of 10 ms: TPOT 10 ms."""
    profile = handbuilt_profile(prefill_ms=[(1, [[1.0, 0, 0]])], decode_ms=[(1, [[10.0, 0, 0]])],
                                kv_capacity_tokens=10_000, max_prefill_batch_tokens=2048)
    result = simulate_decode_instance({"arrival_s": [0.0], "prompt_tokens": [10], "output_tokens": [5]},
                                      profile)
    assert result["tpot_s"][0] == pytest.approx(0.010)


def test_a_one_token_request_has_no_tpot_passes_the_tpot_clock_and_is_counted():
    profile = decode_profile()
    workload = {"arrival_s": [0.0, 0.1], "prompt_tokens": [10, 10], "output_tokens": [1, 50]}
    result = simulate_decode_instance(workload, profile)
    summary = result.summary(ttft_s=1.0, tpot_s=1e-6)
    assert np.isnan(result["tpot_s"][0])
    assert summary["single_token_requests"] == 1
    assert summary["attainment"]["tpot"] == 0.5  # the one-token request passes, the other fails


def test_a_request_larger_than_any_kv_capacity_is_rejected_and_fails_every_clock():
    profile = decode_profile(kv_capacity_tokens=500)
    workload = {"arrival_s": [0.0, 0.1], "prompt_tokens": [10, 600], "output_tokens": [5, 5]}
    result = simulate_decode_instance(workload, profile)
    summary = result.summary(ttft_s=100.0, tpot_s=100.0)
    assert result["rejected"].tolist() == [False, True]
    assert np.isnan(result["finish_s"][1])
    assert summary["rejected"] == 1
    assert summary["attainment"] == {"ttft": 0.5, "tpot": 0.5, "joint": 0.5}
