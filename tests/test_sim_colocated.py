"""Colocated instances: prefill-first (vLLM) and chunked prefill (Sarathi-Serve) on one worker."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.latency.profile import shipped_profiles
from pdplan.sim import simulate, simulate_colocated_instance
from pdplan.sim.plan import Plan, Pool
from tests.handbuilt import handbuilt_profile

PREFILL_MS = [(1, [[20.0, 0.0, 0.0], [10.0, 0.05, 1e-5]]), (3, [[15.0, 0.06, 1e-5]])]
DECODE_MS = [(1, [[20.0, 0.5, 0.001], [30.0, 0.1, 0.0005]]), (6, [[25.0, 0.3, 0.002]])]


def colo_profile(kv=4000, cap=2048):
    return handbuilt_profile(prefill_ms=PREFILL_MS, decode_ms=DECODE_MS, kv_capacity_tokens=kv,
                             max_prefill_batch_tokens=cap)


def constant_profile(prefill_ms=100.0, decode_ms=10.0):
    return handbuilt_profile(prefill_ms=[(1, [[prefill_ms, 0, 0]])], decode_ms=[(1, [[decode_ms, 0, 0]])],
                             kv_capacity_tokens=100_000, max_prefill_batch_tokens=4096)


def both_engines(trace, plan, profile, concurrency=None):
    """The compiled engine's run of a one-profile plan, after checking that the oracle's matches it
    request by request."""
    fast = simulate(trace, plan, {profile.key: profile}, concurrency=concurrency)
    ref = simulate(trace, plan, {profile.key: profile}, engine="reference", concurrency=concurrency)
    for column in ("prefill_start_s", "prefill_end_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(fast[column], ref[column], rtol=0, atol=1e-9, err_msg=column)
    return fast


def random_trace(seed, n=40, rate_rps=15.0):
    rng = np.random.default_rng(seed)
    return {"arrival_s": np.cumsum(rng.exponential(1 / rate_rps, n)),
            "prompt_tokens": rng.integers(1, 1500, n), "output_tokens": rng.integers(1, 60, n)}


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10**6), policy=st.sampled_from(["prefill-first", "chunked"]),
       chunk=st.sampled_from([64, 256, 1024]), kv=st.sampled_from([1600, 4000, 100_000]))
def test_compiled_engine_matches_the_oracle_iteration_by_iteration(seed, policy, chunk, kv):
    workload, profile = random_trace(seed), colo_profile(kv)
    chunk_tokens = chunk if policy == "chunked" else None
    fast = simulate_colocated_instance(workload, profile, policy=policy, chunk_tokens=chunk_tokens)
    ref = simulate_colocated_instance(workload, profile, policy=policy, chunk_tokens=chunk_tokens,
                                      engine="reference")
    for column in ("prefill_start_s", "prefill_end_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(fast[column], ref[column], rtol=0, atol=1e-9, err_msg=column)


def test_two_instances_route_by_least_outstanding_tokens_and_match_the_oracle():
    plan = Plan(pools=(Pool(name="c", phase="colocated", model="toy", gpu="toy-gpu", replicas=2,
                            policy="chunked", chunk_tokens=256),))
    profile = colo_profile()
    fast = simulate(random_trace(4, n=80, rate_rps=30), plan, {profile.key: profile})
    ref = simulate(random_trace(4, n=80, rate_rps=30), plan, {profile.key: profile}, engine="reference")
    np.testing.assert_array_equal(fast["prefill_instance"], ref["prefill_instance"])
    np.testing.assert_allclose(fast["finish_s"], ref["finish_s"], rtol=0, atol=1e-9)
    assert set(fast["prefill_instance"].tolist()) == {0, 1}


def test_prefill_first_stalls_decodes_while_a_prompt_runs():
    """r0 decodes 10 ms tokens from 100 ms; r1's 100 ms prefill arrives at 105 ms and runs at the
    110 ms boundary, so r0's tokens after the first step come 100 ms late: 110, 220, ..., 250."""
    workload = {"arrival_s": [0.0, 0.105], "prompt_tokens": [10, 10], "output_tokens": [6, 1]}
    result = simulate_colocated_instance(workload, constant_profile(), policy="prefill-first")
    assert result["first_token_s"].tolist() == pytest.approx([0.100, 0.210])
    assert result["finish_s"][0] == pytest.approx(0.250)


def test_chunked_policy_refuses_a_zero_token_budget():
    with pytest.raises(PdplanError, match="chunk_tokens must be >= 1"):
        simulate_colocated_instance(random_trace(0), colo_profile(), policy="chunked", chunk_tokens=0)


def test_chunked_iteration_gives_decodes_one_token_each_and_prompts_the_rest():
    """Budget 64 with one decode running: the 100-token prompt takes chunks of 63 then 37."""
    profile = handbuilt_profile(prefill_ms=[(1, [[10.0, 1.0, 0.0]])], decode_ms=[(1, [[10.0, 0, 0]])],
                                kv_capacity_tokens=100_000, max_prefill_batch_tokens=4096)
    workload = {"arrival_s": [0.0, 0.0001], "prompt_tokens": [1, 100], "output_tokens": [50, 2]}
    result = simulate_colocated_instance(workload, profile, policy="chunked", chunk_tokens=64)
    # r0 alone: 10 + 1 = 11 ms; then mixed (decode 10 + 63 chunk) 73 ms; mixed 10 + 37 = 47 ms
    assert result["first_token_s"].tolist() == pytest.approx([0.011, 0.011 + 0.073 + 0.047])


def test_mixed_iteration_cost_counts_the_causal_pairs_of_a_chunk():
    """A chunk of c after o tokens adds Σl² = (o + c)² − o²: two chunks of 50 cost the same
    attention as one prompt of 100. Σl² term 1e-3 ms: 10 + 2.5 ms, then 10 + 7.5 ms."""
    profile = handbuilt_profile(prefill_ms=[(1, [[10.0, 0.0, 1e-3]])], decode_ms=[(1, [[10.0, 0, 0]])],
                                kv_capacity_tokens=100_000, max_prefill_batch_tokens=4096)
    workload = {"arrival_s": [0.0], "prompt_tokens": [100], "output_tokens": [1]}
    result = simulate_colocated_instance(workload, profile, policy="chunked", chunk_tokens=50)
    assert result["first_token_s"][0] == pytest.approx(0.0125 + 0.0175)



def test_a_mixed_iteration_takes_at_least_its_prompt_chunks_alone():
    """A decode step cheaper than the prompt's constant (a mixture-of-experts decode of one request
    reads only the experts it routes to; a prompt reads them all) shares no more than itself. r0's
    prompt runs alone [0, 100 ms] and its decode steps take 10 ms; r1 arrives at 115 ms and its
    prompt rides the iteration from 120 ms: 10 + 100 − 10 = 100 ms, so its first token is out at
    220 ms, not at the 130 ms that sharing the whole 100 ms constant would give."""
    trace = {"arrival_s": [0.0, 0.115], "prompt_tokens": [10, 10], "output_tokens": [50, 2]}
    plan = Plan(pools=(Pool(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy="chunked",
                            chunk_tokens=256),))
    result = both_engines(trace, plan, constant_profile(prefill_ms=100.0, decode_ms=10.0))
    assert result["first_token_s"].tolist() == pytest.approx([0.100, 0.220])

@pytest.mark.slow
def test_chunked_prefill_gives_lower_p99_tpot_than_prefill_first_on_the_azure_code_trace(shared_data):
    from pdplan.workload import load_trace
    workload = load_trace(shared_data / "traces" / "AzureLLMInferenceTrace_code.csv")
    p99 = {}
    for policy, chunk in (("prefill-first", None), ("chunked", 512)):
        plan = Plan(pools=(Pool(name="c", phase="colocated", model="llama2-70b", gpu="a100-80gb", tp=4,
                                replicas=4, policy=policy, chunk_tokens=chunk),))
        p99[policy] = simulate(workload, plan, shipped_profiles()).summary()["tpot"]["p99"]
    assert p99["chunked"] < p99["prefill-first"] / 10
