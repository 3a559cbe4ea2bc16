"""Closed loop: C clients, each sending its next request when its previous one ends, as
`vllm bench serve --max-concurrency`, genai-perf and AIPerf drive a server."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.sim import simulate, simulate_pool
from pdplan.sim.plan import Plan
from tests.test_sim_system import HETEROGENEOUS, MODEL, PROFILES, assert_same, profile, random_trace

COLOCATED = profile("a100-80gb")


def assert_same_closed(fast, reference):
    assert_same(fast, reference)
    np.testing.assert_allclose(fast["arrival_s"], reference["arrival_s"], rtol=0, atol=1e-9)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), clients=st.integers(1, 12), schedule=st.sampled_from(["request", "layer"]))
def test_compiled_closed_loop_matches_the_token_by_token_oracle(seed, clients, schedule):
    plan = Plan(transfer_schedule=schedule, **HETEROGENEOUS)
    trace = random_trace(seed, n=80)
    assert_same_closed(simulate(trace, plan, PROFILES, model=MODEL, concurrency=clients),
                       simulate(trace, plan, PROFILES, model=MODEL, concurrency=clients, engine="reference"))


@pytest.mark.parametrize("phase,policy,chunk", [("colocated", "prefill-first", None), ("colocated", "chunked", 512),
                                                ("prefill", None, None), ("decode", None, None)])
def test_closed_loop_of_one_pool_matches_the_oracle(phase, policy, chunk):
    trace = random_trace(5, n=120)
    runs = [simulate_pool(trace, COLOCATED, phase=phase, replicas=2, policy=policy, chunk_tokens=chunk,
                          concurrency=6, engine=engine) for engine in ("fast", "reference")]
    assert_same_closed(*runs)


@pytest.mark.parametrize("clients", [1, 4, 16])
def test_each_request_after_the_first_c_arrives_as_an_earlier_one_finishes(clients):
    trace = random_trace(11, n=150)
    result = simulate(trace, Plan(**HETEROGENEOUS), PROFILES, model=MODEL, concurrency=clients)
    arrival, finish = np.asarray(result["arrival_s"]), np.asarray(result["finish_s"])
    assert np.all(arrival[:clients] == 0)
    # the k-th release is the k-th finish in time: arrivals are the sorted finish times, shifted by C
    np.testing.assert_array_equal(arrival[clients:], np.sort(finish)[: len(finish) - clients])
    # never more than C requests in the system
    events = sorted([(t, 1) for t in arrival] + [(t, -1) for t in finish])
    in_system = np.cumsum([d for _, d in events])
    assert in_system.max() <= clients


def test_one_client_runs_requests_back_to_back_at_the_profile_s_latency():
    """C = 1 is serial, so each request's TTFT is its prefill alone and its TPOT the decode step
    at batch 1 over its growing context: a closed form of the profile."""
    trace = {"arrival_s": np.arange(4.0), "prompt_tokens": np.array([900, 100, 2500, 40]),
             "output_tokens": np.array([5, 30, 1, 12])}
    result = simulate_pool(trace, COLOCATED, phase="colocated", policy="prefill-first", concurrency=1)
    start = 0.0
    for i, (prompt, output) in enumerate(zip(trace["prompt_tokens"], trace["output_tokens"])):
        prefill = COLOCATED.prefill_time_s([prompt])
        steps = sum(COLOCATED.decode_step_s(1, prompt + 1 + k) for k in range(output - 1))
        assert result["arrival_s"][i] == pytest.approx(start, abs=1e-9)
        assert result["finish_s"][i] == pytest.approx(start + prefill + steps, abs=1e-9)
        start += prefill + steps


def test_a_rejected_request_frees_its_client_at_once():
    small = profile("a100-80gb", kv=1_000)
    trace = {"arrival_s": np.zeros(3), "prompt_tokens": np.array([400, 5000, 300]),
             "output_tokens": np.array([10, 10, 10])}
    result = simulate_pool(trace, small, phase="colocated", policy="prefill-first", concurrency=1)
    assert bool(result["rejected"][1])
    assert result["arrival_s"][1] == result["finish_s"][0] == result["arrival_s"][2]


def test_closed_loop_ignores_a_lengths_only_trace_s_missing_arrivals():
    trace = {"prompt_tokens": np.full(20, 500), "output_tokens": np.full(20, 20)}
    result = simulate_pool(trace, COLOCATED, phase="decode", concurrency=5)
    assert np.isfinite(np.asarray(result["finish_s"])).all()


@pytest.mark.parametrize("clients", [0, -3, 2.5])
def test_concurrency_must_be_a_positive_integer(clients):
    with pytest.raises(PdplanError, match="concurrency must be an integer"):
        simulate_pool(random_trace(1, n=10), COLOCATED, phase="decode", concurrency=clients)


# --- paced: a rate beside the clients -----------------------------------------------------------------

def due_times(trace: dict, rate: float) -> np.ndarray:
    """When each request of ``trace`` is due under ``rate``: its arrivals with every gap scaled so n requests span
    n / rate seconds, the first at 0."""
    arrival = np.asarray(trace["arrival_s"], dtype=float)
    return (arrival - arrival[0]) * len(arrival) / (rate * (arrival[-1] - arrival[0]))


@pytest.mark.parametrize(("clients", "rate"), [(1, 0.5), (4, 3.0), (16, 40.0)])
def test_a_paced_request_is_sent_when_due_or_when_a_client_frees_whichever_is_later(clients, rate):
    """vllm bench serve --request-rate R --max-concurrency C: the first C requests go when due, and each next one
    when the k-th request finishes (the k-th finish in time) or when it is due, if later."""
    trace = random_trace(11, n=150)
    result = simulate(trace, Plan(**HETEROGENEOUS), PROFILES, model=MODEL, concurrency=clients, rate_rps=rate)
    arrival, finish, due = np.asarray(result["arrival_s"]), np.asarray(result["finish_s"]), due_times(trace, rate)
    np.testing.assert_allclose(arrival[:clients], due[:clients], rtol=0, atol=1e-9)
    released = np.sort(finish)[: len(finish) - clients]
    np.testing.assert_allclose(arrival[clients:], np.maximum(due[clients:], released), rtol=0, atol=1e-9)


def test_a_rate_slow_enough_for_every_request_to_finish_first_sends_each_when_due():
    """One client at 0.5 req/s, due every 2 s, on requests that end within 2 s: the paced loop is the open loop at
    that rate."""
    trace = random_trace(3, n=40)
    trace["arrival_s"], trace["output_tokens"] = np.arange(40.0), np.minimum(trace["output_tokens"], 20)
    paced = simulate(trace, Plan(**HETEROGENEOUS), PROFILES, model=MODEL, concurrency=1, rate_rps=0.5)
    open_loop = simulate({**trace, "arrival_s": due_times(trace, 0.5)}, Plan(**HETEROGENEOUS), PROFILES, model=MODEL)
    np.testing.assert_allclose(paced["ttft_s"], open_loop["ttft_s"], rtol=0, atol=1e-9)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), clients=st.integers(1, 12), rate=st.floats(0.5, 50.0))
def test_compiled_paced_closed_loop_matches_the_token_by_token_oracle(seed, clients, rate):
    plan = Plan(**HETEROGENEOUS)
    trace = random_trace(seed, n=80)
    assert_same_closed(simulate(trace, plan, PROFILES, model=MODEL, concurrency=clients, rate_rps=rate),
                       simulate(trace, plan, PROFILES, model=MODEL, concurrency=clients, rate_rps=rate,
                                engine="reference"))
