"""KV transfer failures (retry or recompute) and the router's hop, in both engines: a lone
request's clocks against closed forms, and the compiled engine against the token-by-token oracle."""

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.sim import simulate
from pdplan.sim.engine import transfer_failures
from pdplan.sim.layout import layout_from_plan
from pdplan.sim.plan import Plan
from pdplan.sim.planfile import load_plan, plan_to_dict
from tests.test_sim_system import HETEROGENEOUS, KV, MODEL, PROFILES, assert_same, link, pool, random_trace

PREFILL = PROFILES[("llama2-70b", "a100-80gb", 4, 1)]
PROMPT = 1500
GB_S = 2.0


def lone_plan(**faults) -> Plan:
    return Plan(pools=(pool("p", "prefill"), pool("d", "decode")), default_link=link(GB_S), **faults)


def lone_request(plan: Plan, seed: int = 0):
    trace = {"arrival_s": np.array([0.0]), "prompt_tokens": np.array([PROMPT]), "output_tokens": np.array([1])}
    return simulate(trace, plan, PROFILES, model=MODEL, seed=seed)


def seed_with_failures(plan: Plan, at_least: int) -> int:
    """The first seed whose draw fails the lone request's transfer ``at_least`` times."""
    layout = layout_from_plan(plan, PROFILES, MODEL)
    return next(s for s in range(500) if transfer_failures(layout, 1, s)[0] >= at_least)


PREFILL_S = PREFILL.prefill_time_s(np.array([PROMPT]))
ATTEMPT_S = 0.5e-3 + PROMPT * KV / (GB_S * 1e9)


def test_without_faults_the_first_token_follows_prefill_and_one_transfer():
    result = lone_request(lone_plan())
    assert result["ttft_s"][0] == pytest.approx(PREFILL_S + ATTEMPT_S)
    assert result["transfer_failures"][0] == 0


def test_a_retried_transfer_costs_one_whole_attempt_per_failure():
    plan = lone_plan(failure_rate=0.5, failure_policy="retry")
    result = lone_request(plan, seed=seed_with_failures(plan, 2))
    failures = int(result["transfer_failures"][0])
    assert failures >= 2
    assert result["ttft_s"][0] == pytest.approx(PREFILL_S + (1 + failures) * ATTEMPT_S)
    assert result["exposed_transfer_s"][0] == pytest.approx((1 + failures) * ATTEMPT_S)


def test_a_recomputed_transfer_runs_the_prefill_again_per_failure():
    plan = lone_plan(failure_rate=0.5, failure_policy="recompute")
    result = lone_request(plan, seed=seed_with_failures(plan, 2))
    failures = int(result["transfer_failures"][0])
    assert failures >= 2
    assert result["ttft_s"][0] == pytest.approx((1 + failures) * (PREFILL_S + ATTEMPT_S))
    assert result["exposed_transfer_s"][0] == pytest.approx(ATTEMPT_S)  # the last attempt's


def test_the_router_hop_delays_decode_only_when_it_outlasts_the_transfer():
    slow_hop = lone_request(lone_plan(route_s=1.0))
    assert slow_hop["ttft_s"][0] == pytest.approx(PREFILL_S + 1.0)
    quick_hop = lone_request(lone_plan(route_s=ATTEMPT_S / 2))
    assert quick_hop["ttft_s"][0] == pytest.approx(PREFILL_S + ATTEMPT_S)


def test_failures_per_request_are_geometric_with_the_stated_rate():
    """Mean failed attempts f / (1 − f): 0.25 at f = 0.2, within sampling error on 200,000 draws."""
    plan = lone_plan(failure_rate=0.2)
    draws = transfer_failures(layout_from_plan(plan, PROFILES, MODEL), 200_000, seed=7)
    assert draws.mean() == pytest.approx(0.25, abs=0.005)
    assert draws.min() == 0


def test_a_colocated_plan_draws_no_failures():
    plan = Plan(pools=(pool("c", "colocated", policy="chunked", chunk_tokens=512),))
    assert not transfer_failures(layout_from_plan(plan, PROFILES, MODEL), 100, seed=0).any()


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), schedule=st.sampled_from(["request", "layer"]),
       policy=st.sampled_from(["retry", "recompute"]), route_ms=st.sampled_from([0.0, 5.0, 400.0]))
def test_compiled_engine_matches_the_oracle_with_faults_and_a_router_hop(seed, schedule, policy, route_ms):
    plan = Plan(transfer_schedule=schedule, failure_rate=0.3, failure_policy=policy, route_s=route_ms / 1e3,
                **HETEROGENEOUS)
    trace = random_trace(seed, hashes=True)
    fast = simulate(trace, plan, PROFILES, model=MODEL, seed=seed)
    assert_same(fast, simulate(trace, plan, PROFILES, model=MODEL, seed=seed, engine="reference"))
    assert fast["transfer_failures"].sum() > 0


def test_more_failures_never_make_requests_faster():
    """Same arrivals, failure rate 0 → 0.1 → 0.3 (nested draws are not guaranteed, so the mean)."""
    trace = random_trace(11, n=300, rate_rps=4.0)
    means = [np.nanmean(simulate(trace, Plan(failure_rate=f, **HETEROGENEOUS), PROFILES, model=MODEL)["ttft_s"])
             for f in (0.0, 0.1, 0.3)]
    assert means == sorted(means)


def test_a_plan_file_round_trips_its_faults(tmp_path):
    plan = lone_plan(failure_rate=0.05, failure_policy="recompute", route_s=0.002)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(plan_to_dict(plan)))
    loaded = load_plan(path)
    assert loaded.failure_policy == "recompute"
    assert loaded.failure_rate == pytest.approx(0.05)
    assert loaded.route_s == pytest.approx(0.002)


@pytest.mark.parametrize("field,value", [("failure_rate", 0.9), ("failure_rate", "often"),
                                         ("failure_policy", "pray"), ("route_ms", -1)])
def test_a_bad_fault_setting_names_its_field(tmp_path, field, value):
    doc = plan_to_dict(lone_plan())
    doc["transfer"][field] = value
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(PdplanError, match=f"transfer.{field}"):
        load_plan(path)
