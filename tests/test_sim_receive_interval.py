"""A colocated pool's receive interval (SGLang --scheduler-recv-interval N): while it decodes, the
scheduler takes in new requests only every N-th decode step, and at once after a prompt iteration or
when it has nothing left to run; both engines agree request by request."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.sim.plan import Plan, Pool
from pdplan.sim.planfile import parse_plan, plan_to_dict
from tests.test_sim_colocated import both_engines, colo_profile, constant_profile, random_trace

P, D = 0.100, 0.010  # constant_profile: a 100 ms prefill batch, a 10 ms decode step


def colocated(recv_interval=None, policy="prefill-first", chunk=None, replicas=1) -> Plan:
    return Plan(pools=(Pool(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy=policy,
                            chunk_tokens=chunk, replicas=replicas, recv_interval=recv_interval),))


def test_a_request_arriving_mid_decode_is_taken_in_at_the_next_multiple_of_n_steps():
    """r0 prefills [0, 100 ms] (a receive follows), then decodes 10 ms steps; r1 arrives at 115 ms.
    With N = 4 the receives fall after steps 4, 8, ...: at 140 ms, where r1's prefill starts; with
    N = 1 it starts at the next step boundary, 120 ms."""
    trace = {"arrival_s": [0.0, P + 1.5 * D], "prompt_tokens": [10, 10], "output_tokens": [50, 2]}
    skipping = both_engines(trace, colocated(4), constant_profile())
    assert skipping["prefill_start_s"][1] == pytest.approx(P + 4 * D)
    every = both_engines(trace, colocated(), constant_profile())
    assert every["prefill_start_s"][1] == pytest.approx(P + 2 * D)


def test_the_count_runs_on_from_the_last_receive_not_from_the_arrival():
    """r1 arrives after step 5 of r0's decode: N = 4 takes it in after step 8, at 180 ms."""
    trace = {"arrival_s": [0.0, P + 5.5 * D], "prompt_tokens": [10, 10], "output_tokens": [50, 2]}
    assert both_engines(trace, colocated(4), constant_profile())["prefill_start_s"][1] == pytest.approx(P + 8 * D)


def test_an_instance_with_nothing_left_to_run_takes_a_request_in_at_once():
    """r0 finishes its 3 tokens at 120 ms, before any receive: its idle loop takes r1 in at once."""
    trace = {"arrival_s": [0.0, P + 1.5 * D], "prompt_tokens": [10, 10], "output_tokens": [3, 2]}
    result = both_engines(trace, colocated(30), constant_profile())
    assert result["prefill_start_s"][1] == pytest.approx(P + 2 * D)


def test_an_idle_instance_takes_a_request_in_when_it_arrives():
    trace = {"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 10], "output_tokens": [2, 2]}
    result = both_engines(trace, colocated(30), constant_profile())
    assert result["prefill_start_s"].tolist() == pytest.approx([0.0, 1.0])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), interval=st.sampled_from([2, 3, 10, 30]),
       policy=st.sampled_from(["prefill-first", "chunked"]), kv=st.sampled_from([1600, 100_000]))
def test_both_engines_agree_request_by_request(seed, interval, policy, kv):
    plan = colocated(interval, policy, 256 if policy == "chunked" else None, replicas=2)
    both_engines(random_trace(seed, n=60, rate_rps=25.0), plan, colo_profile(kv))


@pytest.mark.parametrize("interval", [3, 30])
@pytest.mark.parametrize("policy, chunk", [("prefill-first", None), ("chunked", 256)])
def test_both_engines_agree_in_a_closed_loop_where_a_client_sends_as_a_step_begins(interval, policy, chunk):
    """A finishing request's client sends its next one at the boundary where the next stretch starts:
    it waits a whole count of N steps, the receive at that boundary having come before it."""
    both_engines(random_trace(11, n=120, rate_rps=25.0), colocated(interval, policy, chunk), colo_profile(),
                 concurrency=8)


def test_waiting_for_receives_lengthens_the_mean_ttft_of_a_busy_instance():
    """Not request by request (a later start can batch better), but on the whole."""
    trace, profile = random_trace(7, n=80, rate_rps=20.0), colo_profile()
    ttft = [np.mean(both_engines(trace, colocated(n), profile)["ttft_s"]) for n in (1, 10)]
    assert ttft[1] > ttft[0]


def test_the_plan_file_reads_and_writes_the_interval():
    plan = parse_plan(plan_to_dict(colocated(30)), "plan.yaml")
    assert plan.pools[0].recv_interval == 30
    assert "recv_interval" not in plan_to_dict(colocated())["pools"][0]  # a plan without it reads as before


@pytest.mark.parametrize("pool, field", [
    (dict(name="d", phase="decode", model="toy", gpu="toy-gpu", recv_interval=10), "recv_interval"),
    (dict(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy="prefill-first", dp=2, ep=2,
          recv_interval=10), "recv_interval"),
    (dict(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy="prefill-first", recv_interval=0),
     "recv_interval")])
def test_a_receive_interval_off_a_one_rank_colocated_pool_is_refused_by_field(pool, field):
    with pytest.raises(PdplanError) as err:
        Pool(**pool)
    assert err.value.field == field


def test_a_plan_file_with_an_interval_on_a_decode_pool_names_the_field():
    doc = {"pdplan_plan": 1, "pools": [{"name": "p", "phase": "prefill", "model": "toy", "gpu": "toy-gpu"},
                                       {"name": "d", "phase": "decode", "model": "toy", "gpu": "toy-gpu",
                                        "recv_interval": 10}]}
    with pytest.raises(PdplanError) as err:
        parse_plan(doc, "plan.yaml")
    assert err.value.field == "pools[1].recv_interval" and "colocated" in str(err.value)
