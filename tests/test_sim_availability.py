"""Instances that join and leave: out of its intervals an instance takes no new request and only
drains what it holds; the compiled engine matches the token-by-token oracle."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.sim import simulate
from pdplan.sim.plan import Plan
from tests.test_sim_system import HETEROGENEOUS, MODEL, PROFILES, assert_same, link, pool, random_trace

TWO_BY_TWO = Plan(pools=(pool("p", "prefill", replicas=2), pool("d", "decode", replicas=2)), default_link=link(25))
LATE = {"p": [[(-np.inf, np.inf)], [(5.0, np.inf)]], "d": [[(-np.inf, 4.0)], [(-np.inf, np.inf)]]}


def test_no_request_goes_to_an_instance_outside_its_intervals():
    trace = random_trace(2, n=120, rate_rps=10.0)
    result = simulate(trace, TWO_BY_TWO, PROFILES, model=MODEL, availability=LATE)
    arrival, prefill = result["arrival_s"], result["prefill_instance"]
    assert (prefill[arrival < 5.0] == 0).all() and (prefill[arrival >= 5.0] == 1).any()
    routed_after = result["prefill_end_s"] >= 4.0  # request schedule: routed to decode at prefill end
    assert (result["decode_instance"][routed_after] == 3).all()


def test_a_leaving_instance_drains_what_it_holds():
    trace = random_trace(4, n=120, rate_rps=10.0)
    result = simulate(trace, TWO_BY_TWO, PROFILES, model=MODEL, availability=LATE)
    held = result["decode_instance"] == 2
    assert held.any() and np.isfinite(result["finish_s"][held]).all()
    assert (result["finish_s"][held] > 4.0).any()  # still decoding after it stopped taking requests


def test_when_no_instance_takes_requests_the_router_still_places_them():
    none = {"p": [[(100.0, np.inf)], [(100.0, np.inf)]]}
    result = simulate(random_trace(5, n=30), TWO_BY_TWO, PROFILES, model=MODEL, availability=none)
    assert np.isfinite(result["finish_s"]).all()


def test_availability_names_one_list_per_replica():
    with pytest.raises(PdplanError, match="one list per replica"):
        simulate(random_trace(1, n=5), TWO_BY_TWO, PROFILES, model=MODEL, availability={"p": [[(0, 1)]]})


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), schedule=st.sampled_from(["request", "layer"]),
       cut=st.floats(0.5, 8.0))
def test_compiled_engine_matches_the_oracle_with_instances_joining_and_leaving(seed, schedule, cut):
    plan = Plan(transfer_schedule=schedule, **HETEROGENEOUS)
    availability = {"pa": [[(-np.inf, cut)]], "da": [[(cut, np.inf)], [(-np.inf, cut / 2), (cut, np.inf)]]}
    trace = random_trace(seed)
    assert_same(simulate(trace, plan, PROFILES, model=MODEL, availability=availability),
                simulate(trace, plan, PROFILES, model=MODEL, availability=availability, engine="reference"))


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10**6), cut=st.floats(0.5, 8.0))
def test_colocated_instances_joining_and_leaving_match_the_oracle(seed, cut):
    plan = Plan(pools=(pool("c", "colocated", replicas=3, policy="chunked", chunk_tokens=512),))
    availability = {"c": [[(-np.inf, np.inf)], [(cut, np.inf)], [(-np.inf, cut)]]}
    trace = random_trace(seed)
    fast = simulate(trace, plan, PROFILES, model=MODEL, availability=availability)
    slow = simulate(trace, plan, PROFILES, model=MODEL, availability=availability, engine="reference")
    for column in ("first_token_s", "finish_s"):
        np.testing.assert_allclose(fast[column], slow[column], rtol=0, atol=1e-9)
    np.testing.assert_array_equal(fast["prefill_instance"], slow["prefill_instance"])
