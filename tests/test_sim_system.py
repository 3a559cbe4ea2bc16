"""Whole disaggregated plans: routing, KV links, prefix reuse, clocks and determinism."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.latency.profile import shipped_profiles
from pdplan.modelref import get_model
from pdplan.sim import simulate
from pdplan.sim.plan import Link, Plan, Pool
from tests.handbuilt import handbuilt_profile

MODEL = get_model("llama2-70b")
KV = MODEL.kv_bytes_per_token  # 327,680 B


def profile(gpu, *, tp=4, pp=1, kv=200_000, cap=2048, prefill_ms=None, decode_ms=None):
    return handbuilt_profile(
        model="llama2-70b", gpu=gpu, tp=tp, pp=pp, kv_capacity_tokens=kv, max_prefill_batch_tokens=cap,
        prefill_ms=prefill_ms or [(1, [[60.0, 0.0, 0.0], [30.0, 0.18, 1.15e-5]])],
        decode_ms=decode_ms or [(1, [[41.0, 0.45, 4e-5], [30.0, 0.2, 2e-4]]), (16, [[50.0, 0.5, 5e-5]])])


def pool(name, phase, gpu="a100-80gb", **kw):
    return Pool(name=name, phase=phase, model="llama2-70b", gpu=gpu, tp=4, **kw)


def link(gb_s, setup_ms=0.5, src=None, dst=None):
    return Link(from_pool=src, to_pool=dst, bandwidth_bytes_per_s=gb_s * 1e9, setup_s=setup_ms / 1e3)


def two_by_two(gb_s=25.0, schedule="request", **kw):
    return Plan(pools=(pool("p", "prefill", replicas=2), pool("d", "decode", replicas=2)),
                default_link=link(gb_s), transfer_schedule=schedule, **kw)


PROFILES = {p.key: p for p in [profile("a100-80gb"), profile("h100-80gb", pp=2, kv=30_000)]}


def random_trace(seed, n=60, rate_rps=6.0, hashes=False, block_tokens=64):
    rng = np.random.default_rng(seed)
    trace = {"arrival_s": np.cumsum(rng.exponential(1 / rate_rps, n)),
             "prompt_tokens": rng.integers(1, 3000, n), "output_tokens": rng.integers(1, 120, n)}
    if hashes:  # a few shared conversation prefixes, then blocks of the request's own
        values, offsets = [], [0]
        for i, prompt in enumerate(trace["prompt_tokens"]):
            blocks = -(-int(prompt) // block_tokens)
            conversation = int(rng.integers(0, 4))
            shared = int(rng.integers(0, blocks + 1))
            values += [conversation * 10_000 + b for b in range(shared)]
            values += [10**6 + i * 1000 + b for b in range(blocks - shared)]
            offsets.append(len(values))
        trace.update(hash_values=np.array(values), hash_offsets=np.array(offsets), block_tokens=block_tokens)
    return trace


def assert_same(fast, ref):
    for column in ("prefill_start_s", "prefill_end_s", "transfer_start_s", "transfer_end_s",
                   "first_token_s", "finish_s"):
        np.testing.assert_allclose(fast[column], ref[column], rtol=0, atol=1e-9, err_msg=column)
    for column in ("prefill_instance", "decode_instance", "transfer_bytes", "rejected"):
        np.testing.assert_array_equal(fast[column], ref[column], err_msg=column)


HETEROGENEOUS = dict(
    pools=(pool("pa", "prefill"), pool("ph", "prefill", gpu="h100-80gb", pp=2),
           pool("da", "decode", replicas=2), pool("dh", "decode", gpu="h100-80gb", pp=2)),
    links=(link(5, 1.0, "pa", "da"), link(50, 0.2, "ph", "dh")), default_link=link(10, 0.5))


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), schedule=st.sampled_from(["request", "layer"]),
       hashes=st.booleans())
def test_compiled_engine_matches_the_token_by_token_oracle(seed, schedule, hashes):
    """Heterogeneous pools (a PP2 prefill, a small-KV decode), per-pair links, both transfer
    schedules, with and without prefix hashes: same records within 1e-9 s."""
    plan = Plan(transfer_schedule=schedule, **HETEROGENEOUS)
    trace = random_trace(seed, hashes=hashes)
    assert_same(simulate(trace, plan, PROFILES, model=MODEL),
                simulate(trace, plan, PROFILES, model=MODEL, engine="reference"))


def test_same_inputs_give_identical_records():
    plan = Plan(transfer_schedule="layer", **HETEROGENEOUS)
    trace = random_trace(3, n=300, hashes=True)
    a, b = (simulate(trace, plan, PROFILES, model=MODEL) for _ in range(2))
    for column in a.columns:
        np.testing.assert_array_equal(a[column], b[column])
    assert a.events == b.events


def test_prefill_routes_to_the_fewest_pending_prompt_tokens_ties_to_the_lowest_index():
    trace = {"arrival_s": [0.0, 0.001, 0.002], "prompt_tokens": [1000, 10, 10], "output_tokens": [2, 2, 2]}
    result = simulate(trace, two_by_two(), PROFILES, model=MODEL)
    assert result["prefill_instance"].tolist() == [0, 1, 1]


def test_decode_routes_to_the_least_kv_load():
    trace = {"arrival_s": [0.0, 0.5, 1.0], "prompt_tokens": [1000, 10, 10], "output_tokens": [500, 2, 2]}
    result = simulate(trace, two_by_two(), PROFILES, model=MODEL)
    assert result["decode_instance"].tolist() == [2, 3, 3]  # ids 2, 3 are d/0, d/1


def test_without_hashes_the_whole_prompt_is_sent():
    trace = {"arrival_s": [0.0], "prompt_tokens": [1000], "output_tokens": [5]}
    result = simulate(trace, two_by_two(), PROFILES, model=MODEL)
    assert result["transfer_bytes"][0] == 1000 * KV


def test_prefix_blocks_already_at_the_decode_instance_are_not_sent():
    """Second request shares 3 of its 4 blocks (64 tokens each) with the first, on the one decode
    instance: it sends 200 − 3·64 = 8 tokens."""
    plan = Plan(pools=(pool("p", "prefill"), pool("d", "decode")), default_link=link(25))
    trace = {"arrival_s": [0.0, 5.0], "prompt_tokens": [256, 200], "output_tokens": [5, 5],
             "hash_values": [1, 2, 3, 4, 1, 2, 3, 9], "hash_offsets": [0, 4, 8], "block_tokens": 64}
    result = simulate(trace, plan, PROFILES, model=MODEL)
    assert result["transfer_bytes"].tolist() == [256 * KV, 8 * KV]


def test_a_prefix_evicted_from_the_lru_is_sent_again():
    """An LRU of 2 blocks: after [1, 2] then [3, 4], blocks 1 and 2 are gone."""
    plan = Plan(pools=(pool("p", "prefill"), pool("d", "decode", prefix_cache_blocks=2)),
                default_link=link(25))
    trace = {"arrival_s": [0.0, 5.0, 10.0], "prompt_tokens": [128, 128, 128], "output_tokens": [5, 5, 5],
             "hash_values": [1, 2, 3, 4, 1, 2], "hash_offsets": [0, 2, 4, 6], "block_tokens": 64}
    result = simulate(trace, plan, PROFILES, model=MODEL)
    assert result["transfer_bytes"].tolist() == [128 * KV] * 3


def test_request_level_transfer_starts_at_prefill_end_and_takes_setup_plus_bytes_over_bandwidth():
    trace = {"arrival_s": [0.0], "prompt_tokens": [1000], "output_tokens": [5]}
    result = simulate(trace, two_by_two(gb_s=10.0), PROFILES, model=MODEL)
    assert result["transfer_start_s"][0] == result["prefill_end_s"][0]
    assert result["exposed_transfer_s"][0] == pytest.approx(0.0005 + 1000 * KV / 10e9)


def test_layer_streaming_hides_all_but_the_last_layer_when_the_link_keeps_up():
    """Fast link: KV is visible one layer's payload after the prefill ends."""
    trace = {"arrival_s": [0.0], "prompt_tokens": [1000], "output_tokens": [5]}
    result = simulate(trace, two_by_two(gb_s=100.0, schedule="layer"), PROFILES, model=MODEL)
    assert result["exposed_transfer_s"][0] == pytest.approx(1000 * KV / 100e9 / MODEL.layers)


def test_a_streamed_transfer_does_not_hold_the_ingress_while_its_prefill_runs():
    """r0's 8000-token prefill (~2.4 s) streams into the one decode instance; r1's short prefill
    on the other prefill instance ends at ~0.16 s and its KV is not queued behind r0's window."""
    plan = Plan(pools=(pool("p", "prefill", replicas=2), pool("d", "decode")),
                default_link=link(25), transfer_schedule="layer")
    trace = {"arrival_s": [0.0, 0.1], "prompt_tokens": [8000, 100], "output_tokens": [5, 5]}
    result = simulate(trace, plan, PROFILES, model=MODEL)
    assert result["prefill_instance"].tolist() == [0, 1]
    assert result["transfer_end_s"][1] < 0.2 < 2.0 < result["prefill_end_s"][0]


def test_decode_admits_only_after_the_whole_kv_is_visible():
    result = simulate(random_trace(5, n=200), two_by_two(schedule="layer"), PROFILES, model=MODEL)
    assert np.all(result["first_token_s"] >= result["transfer_end_s"])


def test_ttft_is_prefill_queue_plus_prefill_plus_exposed_transfer_plus_admission_wait():
    r = simulate(random_trace(6, n=200), two_by_two(), PROFILES, model=MODEL)
    parts = (r["prefill_queue_s"] + (r["prefill_end_s"] - r["prefill_start_s"]) + r["exposed_transfer_s"]
             + r["admission_wait_s"])
    np.testing.assert_allclose(r["ttft_s"], parts, atol=1e-9)
    assert np.all(r["first_step_s"] == 0.0)  # a decode that hands the prefill's token over takes no step first
    assert "first_step_s_mean" not in r.summary()


def test_a_slow_link_shows_exposed_transfer_and_lowers_ttft_attainment():
    """At 0.5 GB/s a 1500-token prompt's 490 MB take ~1 s to move; at 50 GB/s ~10 ms."""
    trace = random_trace(8, n=400, rate_rps=4.0)
    fast_link = simulate(trace, two_by_two(gb_s=50.0), PROFILES, model=MODEL).summary(ttft_s=1.0, tpot_s=0.2)
    slow_link = simulate(trace, two_by_two(gb_s=0.5), PROFILES, model=MODEL).summary(ttft_s=1.0, tpot_s=0.2)
    assert slow_link["transfer"]["exposed_s_mean"] > 0.5 > 0.05 > fast_link["transfer"]["exposed_s_mean"]
    assert slow_link["attainment"]["ttft"] < fast_link["attainment"]["ttft"] - 0.2


def test_rate_rps_rescales_the_arrivals_to_that_mean_rate():
    trace = random_trace(9, n=100, rate_rps=2.0)
    result = simulate(trace, two_by_two(), PROFILES, model=MODEL, rate_rps=8.0)
    arrival = result["arrival_s"]
    assert len(arrival) / (arrival[-1] - arrival[0]) == pytest.approx(8.0)
    assert result.rate_rps == 8.0


def test_summary_has_the_documented_shape():
    summary = simulate(random_trace(10), two_by_two(), PROFILES, model=MODEL).summary(ttft_s=1.0, tpot_s=0.1)
    assert {"requests", "served", "rejected", "single_token_requests", "ttft", "tpot", "e2e", "slo",
            "attainment", "throughput_rps", "span_s", "utilization", "transfer", "preemptions",
            "events", "events_per_request"} <= set(summary)
    assert set(summary["ttft"]) == {"p50", "p90", "p99", "mean"}
    assert set(summary["attainment"]) == {"ttft", "tpot", "joint"}
    assert set(summary["transfer"]) >= {"bytes_total", "exposed_s_mean"}
    assert set(summary["utilization"]["instances"]) == {"p/0", "p/1", "d/0", "d/1"}
    assert set(summary["utilization"]["links"]) == {"d/0", "d/1"}
    assert summary["preemptions"] == 0


def test_requests_dataframe_has_one_row_per_request():
    result = simulate(random_trace(11, n=50), two_by_two(), PROFILES, model=MODEL)
    frame = result.requests
    assert len(frame) == 50 and {"ttft_s", "tpot_s", "e2e_s", "prefill_instance", "decode_instance",
                                 "transfer_start_s", "transfer_end_s", "preemptions"} <= set(frame.columns)


@pytest.mark.slow
def test_joint_attainment_on_the_azure_conversation_trace_is_at_most_either_marginal(shared_data):
    from pdplan.workload import load_trace
    workload = load_trace(shared_data / "traces" / "AzureLLMInferenceTrace_conv.csv")
    plan = Plan(pools=(pool("p", "prefill", replicas=2, max_prefill_batch_tokens=2048),
                       pool("d", "decode", replicas=2)),
                default_link=link(25), transfer_schedule="layer")
    result = simulate(workload, plan, shipped_profiles(), model=MODEL)
    attainment = result.summary(ttft_s=1.0, tpot_s=0.1)["attainment"]
    assert 0 < attainment["joint"] <= min(attainment["ttft"], attainment["tpot"])
    masks = result.attainment_masks(1.0, 0.1)
    assert attainment["joint"] == pytest.approx((masks["ttft"] & masks["tpot"]).mean())


def test_a_workload_without_arrival_times_is_refused():
    from pdplan.errors import PdplanError
    with pytest.raises(PdplanError, match="no arrival times"):
        simulate({"prompt_tokens": [10], "output_tokens": [2]}, two_by_two(), PROFILES, model=MODEL)


def test_a_non_positive_rate_is_refused():
    from pdplan.errors import PdplanError
    with pytest.raises(PdplanError, match="rate_rps must be a finite number > 0, got 0"):
        simulate(random_trace(1), two_by_two(), PROFILES, model=MODEL, rate_rps=0)
