"""A colocated pool's batch waiting (TensorRT-LLM's batch_wait_timeout_iters N and
batch_wait_max_tokens_ratio): at an iteration with prompt work and decodes, the prompts are held
unless N iterations held them already or their tokens plus one per decode reach the ratio of the
iteration's token budget; the count restarts only when a check lets them run. Both engines agree
request by request."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.sim.plan import Plan, Pool, batch_wait_tokens
from pdplan.sim.planfile import parse_plan, plan_to_dict
from tests.test_sim_colocated import both_engines, colo_profile, constant_profile, random_trace

P, D = 0.100, 0.010  # constant_profile: a 100 ms prompt iteration alone, a 10 ms iteration with decodes


def colocated(iters=None, ratio=None, chunk=256, replicas=1) -> Plan:
    return Plan(pools=(Pool(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy="chunked",
                            chunk_tokens=chunk, replicas=replicas, batch_wait_timeout_iters=iters,
                            batch_wait_max_tokens_ratio=ratio),))


def test_a_prompt_arriving_mid_decode_is_held_n_iterations():
    """r0 runs its prompt alone [0, 100 ms], then decodes 10 ms steps; r1 arrives at 115 ms. The
    iterations from 120 ms hold it: with N = 5 those at 120..160 ms, so it starts at 170 ms; without
    batch waiting at 120 ms."""
    trace = {"arrival_s": [0.0, P + 1.5 * D], "prompt_tokens": [10, 10], "output_tokens": [50, 2]}
    held = both_engines(trace, colocated(5, 1.0), constant_profile())
    assert held["prefill_start_s"][1] == pytest.approx(P + 7 * D)
    free = both_engines(trace, colocated(), constant_profile())
    assert free["prefill_start_s"][1] == pytest.approx(P + 2 * D)


@pytest.mark.parametrize("prompt, start", [(30, P + 2 * D), (10, P + 7 * D)])
def test_enough_tokens_end_the_hold_at_once(prompt, start):
    """Ratio 0.1 of 256 tokens: 26. A 30-token prompt and one decode pass it at the first check; a
    10-token one does not, and waits its 5 iterations."""
    assert batch_wait_tokens(0.1, 256) == 26
    trace = {"arrival_s": [0.0, P + 1.5 * D], "prompt_tokens": [10, prompt], "output_tokens": [50, 2]}
    assert both_engines(trace, colocated(5, 0.1), constant_profile())["prefill_start_s"][1] == pytest.approx(start)


def test_prompts_run_at_once_when_no_request_decodes():
    """r0's 3 tokens are out at 120 ms, one held iteration into r1's wait: with nothing decoding
    there is no check, and r1 runs."""
    trace = {"arrival_s": [0.0, P + 0.5 * D], "prompt_tokens": [10, 10], "output_tokens": [3, 2]}
    assert both_engines(trace, colocated(5, 1.0), constant_profile())["prefill_start_s"][1] == pytest.approx(P + 2 * D)


def test_the_count_runs_on_until_a_check_lets_prompts_run():
    """As above, r1 (50 tokens) runs at 120 ms after one held iteration, its prompt alone until 220 ms.
    r2 arrives at 225 ms: the count stands at 1, so 4 more iterations hold it (230..260 ms) and it
    starts at 270 ms."""
    trace = {"arrival_s": [0.0, P + 0.5 * D, 2 * P + 2.5 * D], "prompt_tokens": [10, 10, 10],
             "output_tokens": [3, 50, 2]}
    start = both_engines(trace, colocated(5, 1.0), constant_profile())["prefill_start_s"]
    assert start[2] == pytest.approx(2 * P + 7 * D)


def test_an_idle_instance_runs_a_prompt_when_it_arrives():
    trace = {"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 10], "output_tokens": [2, 2]}
    start = both_engines(trace, colocated(20, 0.9), constant_profile())["prefill_start_s"]
    assert start.tolist() == pytest.approx([0.0, 1.0])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), iters=st.sampled_from([1, 3, 20]), ratio=st.sampled_from([0.05, 0.5, 1.0]),
       chunk=st.sampled_from([64, 256, 1024]), kv=st.sampled_from([1600, 100_000]))
def test_both_engines_agree_request_by_request(seed, iters, ratio, chunk, kv):
    both_engines(random_trace(seed, n=60, rate_rps=25.0), colocated(iters, ratio, chunk, replicas=2), colo_profile(kv))


@pytest.mark.parametrize("iters, ratio", [(3, 1.0), (20, 0.9), (40, 0.05)])
def test_both_engines_agree_in_a_closed_loop_where_a_client_sends_as_a_step_begins(iters, ratio):
    both_engines(random_trace(11, n=120, rate_rps=25.0), colocated(iters, ratio), colo_profile(), concurrency=8)


def test_holding_prompts_lengthens_the_mean_ttft_of_a_lightly_loaded_instance():
    """Two clients: each prompt is held by the other's decodes for up to 20 iterations."""
    trace, profile = random_trace(7, n=80, rate_rps=20.0), colo_profile(100_000)
    ttft = [np.mean(both_engines(trace, plan, profile, concurrency=2)["ttft_s"])
            for plan in (colocated(), colocated(20, 0.9))]
    assert ttft[1] > ttft[0]


def test_the_plan_file_reads_and_writes_batch_waiting():
    plan = parse_plan(plan_to_dict(colocated(20, 0.9)), "plan.yaml")
    assert (plan.pools[0].batch_wait_timeout_iters, plan.pools[0].batch_wait_max_tokens_ratio) == (20, 0.9)
    assert "batch_wait_timeout_iters" not in plan_to_dict(colocated())["pools"][0]  # a plan without it reads as before


CHUNKED = dict(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy="chunked", chunk_tokens=256)


@pytest.mark.parametrize("pool, field", [
    (dict(CHUNKED, phase="decode", policy=None, chunk_tokens=None, batch_wait_timeout_iters=20,
          batch_wait_max_tokens_ratio=0.9), "batch_wait_timeout_iters"),
    (dict(CHUNKED, policy="prefill-first", chunk_tokens=None, batch_wait_timeout_iters=20,
          batch_wait_max_tokens_ratio=0.9), "batch_wait_timeout_iters"),
    (dict(CHUNKED, dp=2, ep=2, batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9),
     "batch_wait_timeout_iters"),
    (dict(CHUNKED, batch_wait_timeout_iters=20), "batch_wait_max_tokens_ratio"),
    (dict(CHUNKED, batch_wait_timeout_iters=0, batch_wait_max_tokens_ratio=0.9), "batch_wait_timeout_iters"),
    (dict(CHUNKED, batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=1.5), "batch_wait_max_tokens_ratio"),
    (dict(CHUNKED, batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9, recv_interval=10), "recv_interval")])
def test_batch_waiting_off_a_one_rank_chunked_colocated_pool_is_refused_by_field(pool, field):
    with pytest.raises(PdplanError) as err:
        Pool(**pool)
    assert err.value.field == field


@pytest.mark.parametrize("extra, field, says", [
    ({"batch_wait_timeout_iters": 20}, "pools[0].batch_wait_max_tokens_ratio", "go together"),
    ({"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0}, "pools[0].batch_wait_max_tokens_ratio",
     "must be > 0"),
    ({"batch_wait_timeout_iters": 20, "batch_wait_max_tokens_ratio": 0.9, "recv_interval": 10},
     "pools[0].recv_interval", "SGLang's"),
    ({"policy": "prefill-first", "chunk_tokens": None, "batch_wait_timeout_iters": 20,
      "batch_wait_max_tokens_ratio": 0.9}, "pools[0].batch_wait_timeout_iters", "chunked colocated")])
def test_a_plan_file_with_broken_batch_waiting_names_the_field(extra, field, says):
    pool = {k: v for k, v in {**CHUNKED, **extra}.items() if v is not None}
    with pytest.raises(PdplanError) as err:
        parse_plan({"pdplan_plan": 1, "pools": [pool]}, "plan.yaml")
    assert err.value.field == field and says in str(err.value)
