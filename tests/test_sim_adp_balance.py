"""A colocated pool's attention-DP balance (TensorRT-LLM's ``attention_dp_config`` with ``enable_balance``,
``timeout_iters`` N and ``batching_wait_iters`` W; ``PyExecutor._balance_adp_requests``): once per
iteration, prompts run when every rank has some, after W more iterations if every rank also decodes;
otherwise they wait while the iteration is counted, until the count reaches N or some rank has no
decode (a rank with no request at all decodes a dummy). The count runs on in iterations without
prompts, so a lone prompt waits for its next turn. Both engines agree request by request.

Two ranks and a constant profile: any iteration with prompt work takes 100 ms, a decode step 10 ms."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.sim.plan import Plan, Pool
from pdplan.sim.planfile import parse_plan, plan_to_dict
from tests.test_sim_colocated import both_engines, colo_profile, constant_profile, random_trace

P, D = 0.100, 0.010


def balanced(timeout=None, batching=None, dp=2, chunk=256, running=None) -> Plan:
    return Plan(pools=(Pool(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy="chunked",
                            chunk_tokens=chunk, dp=dp, ep=dp, attention_dp_timeout_iters=timeout,
                            attention_dp_batching_wait_iters=batching, max_running_requests=running),))


def ranks(profile, dp=2):
    return dataclasses.replace(profile, dp=dp, ep=dp)


def two_decoding_then(arrivals):
    """r0 and r1 run their prompts on ranks 0 and 1 over [0, 100 ms] and decode 50 tokens in 10 ms steps
    from there; then one 10-token request at each of ``arrivals`` (2 tokens out)."""
    n = 2 + len(arrivals)
    return {"arrival_s": [0.0, 0.0, *arrivals], "prompt_tokens": [10] * n,
            "output_tokens": [50, 50] + [2] * len(arrivals)}


def starts(trace, plan, profile=None):
    return both_engines(trace, plan, ranks(profile or constant_profile()))["prefill_start_s"]


def test_a_prompt_on_one_rank_waits_for_the_count_to_reach_timeout_iters():
    """The iterations from 100 ms are counted 1, 2, ...: r2 (115 ms, rank 0) is held at 120 and 130 ms
    (counts 3 and 4) and runs at 140 ms, where the count reaches 5; without the balance at 120 ms."""
    trace = two_decoding_then([P + 1.5 * D])
    assert starts(trace, balanced(5, 0))[2] == pytest.approx(P + 4 * D)
    assert starts(trace, balanced())[2] == pytest.approx(P + 2 * D)


def test_the_count_runs_on_through_iterations_without_prompts():
    """The count turns over at 140 ms (5) and stands at 1 at 150 ms: r2 arriving at 145 ms waits until
    it reaches 5 again, at 190 ms."""
    assert starts(two_decoding_then([P + 4.5 * D]), balanced(5, 0))[2] == pytest.approx(P + 9 * D)


def test_prompts_on_every_rank_run_at_once():
    """r2 and r3 arrive together and go to ranks 0 and 1: every rank has a prompt at 120 ms."""
    start = starts(two_decoding_then([P + 1.5 * D, P + 1.5 * D]), balanced(60, 0))
    assert start[2:].tolist() == pytest.approx([P + 2 * D] * 2)


def test_every_rank_with_prompts_and_decodes_waits_batching_wait_iters_more():
    """As above with W = 2: the iterations at 120 and 130 ms hold them, the one at 140 ms runs them."""
    start = starts(two_decoding_then([P + 1.5 * D, P + 1.5 * D]), balanced(60, 2))
    assert start[2:].tolist() == pytest.approx([P + 4 * D] * 2)


def test_a_rank_with_prompts_and_no_decode_releases_them():
    """Only r0 decodes (on rank 0); r1 reaches the empty rank 1 at 115 ms: that rank has a prompt and no
    decode, so nothing is held."""
    trace = {"arrival_s": [0.0, P + 1.5 * D], "prompt_tokens": [10, 10], "output_tokens": [50, 2]}
    assert starts(trace, balanced(60, 0))[1] == pytest.approx(P + 2 * D)


def test_a_rank_with_no_request_counts_as_decoding():
    """r2 reaches rank 0 at 105 ms; r1 finishes at 110 ms, leaving rank 1 empty: it decodes a dummy, so
    r2 is held as if rank 1 decoded (counts 2, 3, 4 at 110, 120, 130 ms) and runs at 140 ms."""
    trace = {"arrival_s": [0.0, 0.0, P + 0.5 * D], "prompt_tokens": [10] * 3, "output_tokens": [50, 2, 2]}
    assert starts(trace, balanced(5, 0))[2] == pytest.approx(P + 4 * D)


def test_an_idle_instance_runs_a_prompt_when_it_arrives():
    trace = {"arrival_s": [0.0, 1.0], "prompt_tokens": [10, 10], "output_tokens": [2, 2]}
    assert starts(trace, balanced(60, 10)).tolist() == pytest.approx([0.0, 1.0])


def test_holding_prompts_for_every_rank_shortens_tpot_and_lengthens_ttft_in_a_closed_loop():
    """Four ranks, 16 clients: a prompt iteration stalls every rank's decodes, and the balance makes the
    ranks take their prompts together, in fewer such iterations."""
    rng = np.random.default_rng(3)
    trace = {"arrival_s": np.zeros(400), "prompt_tokens": rng.integers(100, 1000, 400),
             "output_tokens": rng.integers(50, 200, 400)}
    profile = ranks(constant_profile(), dp=4)
    off, on = (both_engines(trace, plan, profile, concurrency=16) for plan in (balanced(dp=4), balanced(60, 0, dp=4)))
    assert np.mean(on["tpot_s"]) < np.mean(off["tpot_s"])
    assert np.mean(on["ttft_s"]) > np.mean(off["ttft_s"])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), timeout=st.sampled_from([0, 1, 5, 60]), batching=st.sampled_from([0, 2, 10]),
       dp=st.sampled_from([2, 4]), chunk=st.sampled_from([64, 256, 1024]), kv=st.sampled_from([1600, 100_000]),
       running=st.sampled_from([None, 2, 8]))
def test_both_engines_agree_request_by_request(seed, timeout, batching, dp, chunk, kv, running):
    """Running caps too: a rank whose decodes fill its cap sends the balance to its count even when every
    rank has prompts."""
    both_engines(random_trace(seed, n=60, rate_rps=25.0), balanced(timeout, batching, dp, chunk, running),
                 ranks(colo_profile(kv), dp))


@pytest.mark.parametrize("timeout, batching", [(60, 0), (5, 0), (50, 10), (0, 3)])
def test_both_engines_agree_in_a_closed_loop(timeout, batching):
    both_engines(random_trace(11, n=120, rate_rps=25.0), balanced(timeout, batching, dp=4), ranks(colo_profile(), 4),
                 concurrency=16)


def test_the_plan_file_reads_and_writes_the_balance():
    plan = parse_plan(plan_to_dict(balanced(60, 0)), "plan.yaml")
    assert plan.pools[0].adp_balance == (60, 0)
    assert "attention_dp_timeout_iters" not in plan_to_dict(balanced())["pools"][0]  # a plan without it reads as before


CHUNKED = dict(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy="chunked", chunk_tokens=256, dp=2, ep=2)


@pytest.mark.parametrize("pool, field", [
    (dict(CHUNKED, dp=1, ep=1, attention_dp_timeout_iters=60, attention_dp_batching_wait_iters=0),
     "attention_dp_timeout_iters"),
    (dict(CHUNKED, policy="prefill-first", chunk_tokens=None, attention_dp_timeout_iters=60,
          attention_dp_batching_wait_iters=0), "attention_dp_timeout_iters"),
    (dict(CHUNKED, phase="decode", policy=None, chunk_tokens=None, attention_dp_batching_wait_iters=0),
     "attention_dp_batching_wait_iters"),
    (dict(CHUNKED, attention_dp_timeout_iters=60), "attention_dp_batching_wait_iters"),
    (dict(CHUNKED, attention_dp_timeout_iters=-1, attention_dp_batching_wait_iters=0), "attention_dp_timeout_iters")])
def test_a_balance_off_a_chunked_colocated_dp_pool_is_refused_by_field(pool, field):
    with pytest.raises(PdplanError) as err:
        Pool(**pool)
    assert err.value.field == field


@pytest.mark.parametrize("extra, field, says", [
    ({"attention_dp_timeout_iters": 60}, "pools[0].attention_dp_batching_wait_iters", "go together"),
    ({"attention_dp_timeout_iters": 60, "attention_dp_batching_wait_iters": -1},
     "pools[0].attention_dp_batching_wait_iters", ">= 0"),
    ({"dp": 1, "ep": 1, "attention_dp_timeout_iters": 60, "attention_dp_batching_wait_iters": 0},
     "pools[0].attention_dp_timeout_iters", "attention data parallelism")])
def test_a_plan_file_with_a_broken_balance_names_the_field(extra, field, says):
    with pytest.raises(PdplanError) as err:
        parse_plan({"pdplan_plan": 1, "pools": [{**CHUNKED, **extra}]}, "plan.yaml")
    assert err.value.field == field and says in str(err.value)
