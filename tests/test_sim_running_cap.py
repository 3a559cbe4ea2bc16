"""A pool's running cap (vLLM --max-num-seqs, SGLang --max-running-requests): no rank runs more
requests at once, in either engine, whatever the phase; without it the KV pool is the only limit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.sim import simulate
from pdplan.sim.plan import Plan, Pool
from pdplan.sim.planfile import parse_plan, plan_to_dict
from tests.test_sim_colocated import colo_profile
from tests.test_sim_colocated import random_trace as colocated_trace
from tests.test_sim_system import HETEROGENEOUS, MODEL, PROFILES, assert_same, link, pool, random_trace


def most_at_once(starts, ends) -> int:
    """The most intervals [start, end) open at one time (an end before a start at the same time)."""
    events = sorted([(float(t), 1) for t in starts] + [(float(t), -1) for t in ends], key=lambda e: (e[0], e[1]))
    open_now = most = 0
    for _, step in events:
        open_now += step
        most = max(most, open_now)
    return most


def both(trace, plan, profiles, model=None):
    fast = simulate(trace, plan, profiles, model=model)
    assert_same(fast, simulate(trace, plan, profiles, model=model, engine="reference"))
    return fast


def burst(n, prompt=512, output=40):
    return {"arrival_s": np.zeros(n), "prompt_tokens": np.full(n, prompt), "output_tokens": np.full(n, output)}


def test_a_decode_rank_runs_at_most_its_cap_and_the_next_joins_as_one_finishes():
    plan = Plan(pools=(pool("p", "prefill"), pool("d", "decode", max_running_requests=2)), default_link=link(25))
    result = both(burst(3), plan, PROFILES, MODEL)
    first, finish = result["first_token_s"], result["finish_s"]
    assert most_at_once(first, finish) == 2
    assert first[2] == pytest.approx(min(finish[:2]))  # it joins at the step boundary where a slot frees


def test_without_a_cap_the_same_burst_decodes_together():
    plan = Plan(pools=(pool("p", "prefill"), pool("d", "decode")), default_link=link(25))
    result = both(burst(3), plan, PROFILES, MODEL)
    assert most_at_once(result["first_token_s"], result["finish_s"]) == 3


def test_a_prefill_batch_takes_at_most_the_cap_of_prompts():
    plan = Plan(pools=(pool("p", "prefill", max_running_requests=2), pool("d", "decode")), default_link=link(25))
    result = both(burst(4, prompt=256), plan, PROFILES, MODEL)
    starts = result["prefill_start_s"]
    assert starts[0] == starts[1] == 0.0
    assert starts[2] == pytest.approx(starts[3]) and starts[3] == pytest.approx(result["prefill_end_s"][0])


@pytest.mark.parametrize("policy, chunk", [("prefill-first", None), ("chunked", 256)])
def test_a_colocated_rank_holds_at_most_its_cap_prefilling_or_decoding(policy, chunk):
    plan = Plan(pools=(Pool(name="c", phase="colocated", model="toy", gpu="toy-gpu", policy=policy,
                            chunk_tokens=chunk, max_running_requests=3),))
    profile = colo_profile(kv=100_000)
    result = both(colocated_trace(2, n=40, rate_rps=40), plan, {profile.key: profile})
    assert most_at_once(result["prefill_start_s"], result["finish_s"]) == 3


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), prefill_cap=st.sampled_from([None, 1, 3]), decode_cap=st.sampled_from([None, 2, 5]),
       schedule=st.sampled_from(["request", "layer"]))
def test_with_caps_the_compiled_engine_matches_the_oracle(seed, prefill_cap, decode_cap, schedule):
    pools = tuple(Pool(**{**p.__dict__, "max_running_requests": prefill_cap if p.phase == "prefill" else decode_cap})
                  for p in HETEROGENEOUS["pools"])
    plan = Plan(**{**HETEROGENEOUS, "pools": pools}, transfer_schedule=schedule)
    both(random_trace(seed, rate_rps=12.0), plan, PROFILES, MODEL)


def test_a_plan_file_states_the_cap_and_reads_back_the_same():
    doc = plan_to_dict(Plan(pools=(pool("p", "prefill"), pool("d", "decode", max_running_requests=128)),
                            default_link=link(25)))
    assert doc["pools"][1]["max_running_requests"] == 128 and "max_running_requests" not in doc["pools"][0]
    assert parse_plan(doc, "plan.yaml").pools[1].max_running_requests == 128


@pytest.mark.parametrize("value", [0, -3, 2.5, "many"])
def test_a_cap_that_is_not_a_positive_integer_is_refused_by_name(value):
    doc = plan_to_dict(Plan(pools=(pool("p", "prefill"), pool("d", "decode")), default_link=link(25)))
    doc["pools"][1]["max_running_requests"] = value
    with pytest.raises(PdplanError) as err:
        parse_plan(doc, "plan.yaml")
    assert "max_running_requests" in str(err.value) and "plan.yaml" in str(err.value)
