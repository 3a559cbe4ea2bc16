"""How a prefill instance with attention data parallelism puts a prompt on a rank: the rank with the fewest
outstanding requests, or (SGLang's prefill under P/D disaggregation) the rank its bootstrap room names, the
room a random number the router draws per request, so the rank is uniformly random whatever the ranks hold.

The closed forms use the linear profile of ``test_sim_data_parallel``: a prefill batch of Σl prompt tokens takes
10 + 0.1·Σl ms on its rank, and the instance's step lasts its slowest rank's batch.
"""

import dataclasses
from collections import Counter
from math import factorial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.fileio import atomic_write_text, dump_yaml
from pdplan.goodput import SearchSettings, instance_goodput
from pdplan.planner.measure import goodput_key_parts
from pdplan.sim import Plan, simulate, simulate_pool
from pdplan.sim.planfile import load_plan, plan_to_dict
from pdplan.slo import slo_from_flags
from pdplan.vocabulary import RankRouter
from pdplan.workload import Workload
from tests.conftest import ROOT
from tests.handbuilt import handbuilt_profile
from tests.test_sim_data_parallel import wide
from tests.test_sim_system import HETEROGENEOUS, MODEL, PROFILES, assert_same, pool, profile, random_trace

#: how a prefill instance's prompts may take its ranks
PREFILL_ROUTERS = (RankRouter.SHORTEST_QUEUE, RankRouter.BOOTSTRAP_ROOM)

RANKS = 8


def one_prefill_instance(router: str) -> tuple[Plan, dict]:
    """One prefill instance of :data:`RANKS` ranks with the linear prefill (batches up to 8,192 tokens), and
    one decode instance."""
    prefill = wide(profile("a100-80gb", prefill_ms=[(1, [[10.0, 0.1, 0.0]])], cap=8192), RANKS)
    decode = profile("a100-80gb")
    plan = Plan(pools=(pool("p", "prefill", dp=RANKS, rank_router=router), pool("d", "decode")),
                default_link=HETEROGENEOUS["default_link"])
    return plan, {prefill.key: prefill, decode.key: decode}


def eight_prompts_at_once(seed: int, router: str, engine: str = "fast") -> np.ndarray:
    """The prefill end of 8 prompts of 1,000 tokens arriving together."""
    plan, profiles = one_prefill_instance(router)
    workload = {"arrival_s": np.zeros(RANKS), "prompt_tokens": np.full(RANKS, 1000), "output_tokens": np.full(RANKS, 2)}
    return simulate(workload, plan, profiles, model=MODEL, seed=seed, engine=engine)["prefill_end_s"]


def max_load_distribution(balls: int, bins: int) -> dict[int, float]:
    """P(the fullest of ``bins`` bins holds m) when ``balls`` balls fall uniformly at random, by enumerating the
    occupancy vectors (each with its multinomial count of placements)."""
    distribution = Counter()

    def fill(left: int, bins_left: int, fullest: int, ways: int) -> None:
        if bins_left == 0:
            if left == 0:
                distribution[fullest] += ways
            return
        for c in range(left + 1):
            fill(left - c, bins_left - 1, max(fullest, c), ways // factorial(c))

    fill(balls, bins, 0, factorial(balls))
    return {m: ways / bins ** balls for m, ways in distribution.items()}


def test_prompts_on_the_fewest_outstanding_ranks_spread_one_per_rank():
    """Eight prompts on eight ranks: one each, the step 10 + 100 = 110 ms."""
    np.testing.assert_allclose(eight_prompts_at_once(0, RankRouter.SHORTEST_QUEUE), 0.110, atol=1e-12)


def test_prompts_routed_by_bootstrap_room_pile_up_as_random_placements_do():
    """By room, the eight prompts land as eight balls in eight bins: the step is 10 + 100·m ms for the fullest
    rank's m prompts, and over 300 seeds m follows the exact max-load distribution (its mean within three
    standard errors; every m seen is a possible one)."""
    exact = max_load_distribution(RANKS, RANKS)
    mean = sum(m * p for m, p in exact.items())
    sd = sum((m - mean) ** 2 * p for m, p in exact.items()) ** 0.5
    loads = []
    for seed in range(300):
        ends = eight_prompts_at_once(seed, RankRouter.BOOTSTRAP_ROOM)
        assert np.ptp(ends) == pytest.approx(0.0, abs=1e-12)  # the ranks step together
        m = (ends[0] - 0.010) / 0.100
        assert m == pytest.approx(round(m), abs=1e-9) and round(m) in exact
        loads.append(round(m))
    assert abs(np.mean(loads) - mean) < 3 * sd / len(loads) ** 0.5


def test_the_same_seed_draws_the_same_rooms_in_both_engines():
    for seed in range(5):
        np.testing.assert_allclose(eight_prompts_at_once(seed, RankRouter.BOOTSTRAP_ROOM),
                                   eight_prompts_at_once(seed, RankRouter.BOOTSTRAP_ROOM, "reference"),
                                   rtol=0, atol=1e-9)


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), schedule=st.sampled_from(["request", "layer"]), hashes=st.booleans(),
       failure=st.sampled_from([(0.0, "retry"), (0.3, "recompute")]))
def test_compiled_engine_matches_the_oracle_when_prefill_ranks_follow_the_room(seed, schedule, hashes, failure):
    """Prefill instances of four ranks routed by room beside TP-only pools and decode instances of four ranks,
    both schedules, prefix hashes and failed transfers (a recomputed prompt keeps its room, so its rank)."""
    prefill4, decode4 = wide(profile("a100-80gb"), 4), wide(profile("a100-80gb", kv=6000), 4)
    pools = (pool("pw", "prefill", dp=4, replicas=2, rank_router=RankRouter.BOOTSTRAP_ROOM),
             pool("dw", "decode", dp=4, replicas=2), *HETEROGENEOUS["pools"])
    plan = Plan(pools=pools, default_link=HETEROGENEOUS["default_link"], transfer_schedule=schedule,
                failure_rate=failure[0], failure_policy=failure[1])
    trace = random_trace(seed, n=100, rate_rps=12.0, hashes=hashes)
    profiles = {**PROFILES, prefill4.key: prefill4, decode4.key: decode4}
    assert_same(simulate(trace, plan, profiles, model=MODEL, seed=seed),
                simulate(trace, plan, profiles, model=MODEL, seed=seed, engine="reference"))


@pytest.mark.parametrize(("phase", "dp"), [("prefill", 1), ("decode", 4)])
def test_routing_by_room_on_a_pool_without_prefill_ranks_is_refused_naming_its_field(phase, dp):
    with pytest.raises(PdplanError, match="prefill pools with attention data parallelism") as refused:
        pool("p", phase, dp=dp, rank_router=RankRouter.BOOTSTRAP_ROOM)
    assert refused.value.field == "rank_router"


@pytest.mark.parametrize(("phase", "ranks"), [("prefill", 1), ("decode", RANKS)])
def test_one_pool_alone_refuses_routing_by_room_without_prefill_ranks_as_a_plan_does(phase, ranks):
    """simulate_pool, as goodput probes one instance, holds the rank router to the plan's rule."""
    alone = wide(profile("a100-80gb", prefill_ms=[(1, [[10.0, 0.1, 0.0]])], cap=8192), ranks) if ranks > 1 \
        else profile("a100-80gb")
    workload = {"arrival_s": np.zeros(2), "prompt_tokens": np.full(2, 100), "output_tokens": np.full(2, 2)}
    with pytest.raises(PdplanError, match="prefill pools with attention data parallelism") as refused:
        simulate_pool(workload, alone, phase=phase, rank_router=RankRouter.BOOTSTRAP_ROOM)
    assert refused.value.field == "rank_router"


def test_a_plan_file_states_the_rank_router_and_round_trips_it(tmp_path):
    """``rank_router`` is optional (default shortest-queue) and written back only when it routes by room."""
    path = tmp_path / "wide.yaml"
    text = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    stated = "dp: 4\n    ep: 4\n    rank_router: bootstrap-room\n    replicas: 2"
    path.write_text(text.replace("replicas: 2", stated, 1))
    plan = load_plan(path)
    assert plan.pools[0].rank_router == RankRouter.BOOTSTRAP_ROOM
    assert plan_to_dict(plan)["pools"][0]["rank_router"] == "bootstrap-room"
    atomic_write_text(tmp_path / "again.yaml", dump_yaml(plan_to_dict(plan)))
    assert load_plan(tmp_path / "again.yaml").pools == plan.pools
    assert "rank_router" not in plan_to_dict(load_plan(ROOT / "examples" / "plan_disagg.yaml"))["pools"][0]


@pytest.mark.parametrize(("field", "rule"), [("dp: 4\n    rank_router: random", "must be one of"),
                                             ("rank_router: bootstrap-room",
                                              "bootstrap-room applies only to prefill pools with attention"),
                                             ("dp: 4\n    rank_router: round-robin",
                                              "round-robin applies only to decode and colocated pools")])
def test_a_rank_router_the_pool_cannot_take_names_the_file_and_field(tmp_path, field, rule):
    path = tmp_path / "plan.yaml"
    text = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    path.write_text(text.replace("replicas: 2", f"{field}\n    replicas: 2", 1))
    with pytest.raises(PdplanError, match=rf"pools\[0\]\.rank_router {rule}"):
        load_plan(path)


def test_a_prefill_instance_whose_prompts_land_by_room_serves_less_than_one_balanced_by_load():
    """Four ranks of a constant 100 ms prefill (one prompt per batch) under evenly spaced arrivals: balanced by
    load the instance serves four ranks' worth, 40 req/s, within a p90 TTFT of 0.5 s; by room some ranks queue
    while others idle, so it meets that TTFT at a lower rate, and its probes are the engine's own (``rank_router``
    reaches the per-instance goodput)."""
    ranks = dataclasses.replace(handbuilt_profile(prefill_ms=[(1, [[100.0, 0, 0]])], decode_ms=[(1, [[20.0, 0, 0]])],
                                                  kv_capacity_tokens=10**9, max_prefill_batch_tokens=100), dp=4)
    trace = Workload(arrival_s=np.arange(800, dtype=float), prompt_tokens=np.full(800, 100),
                     output_tokens=np.full(800, 20))
    settings = SearchSettings(tolerance_rel=0.005, requests_per_probe=200)
    slo = slo_from_flags(0.5, None, 0.9)
    goodput = {router: instance_goodput(trace, ranks, phase="prefill", slo=slo, settings=settings,
                                        rank_router=router).goodput_rps for router in PREFILL_ROUTERS}
    assert goodput[RankRouter.SHORTEST_QUEUE] == pytest.approx(40.0, rel=0.02)
    assert goodput[RankRouter.BOOTSTRAP_ROOM] < 0.9 * goodput[RankRouter.SHORTEST_QUEUE]


def test_a_goodput_cache_key_names_the_rank_router_only_when_prompts_land_by_room():
    """Every key written before the rank router existed stays the same; routing by room keys apart."""
    workload = Workload(arrival_s=np.arange(4.0), prompt_tokens=np.full(4, 100), output_tokens=np.full(4, 20))
    ranks = wide(profile("a100-80gb"), 4)
    parts = {router: goodput_key_parts(workload, ranks, phase="prefill", slo=slo_from_flags(0.5, None, 0.9),
                                       settings=SearchSettings(), seed=0, policy=None, chunk_tokens=None,
                                       admission_share=0.5, rank_router=router) for router in PREFILL_ROUTERS}
    assert "rank_router" not in parts[RankRouter.SHORTEST_QUEUE]
    assert {k: v for k, v in parts[RankRouter.BOOTSTRAP_ROOM].items() if k != "rank_router"} == \
        parts[RankRouter.SHORTEST_QUEUE]


def _in_turn_or_by_load(rank_router, engine):
    """A decode instance alone of two ranks of 1,000 KV tokens (decode 10 + B ms a step): r0 (800 tokens with its
    outputs) and r1 (53) at 0, r2 (704) at 30 ms, when r1 has left rank 1."""
    from tests.test_sim_data_parallel import at_zero, linear
    workload = at_zero([700, 50, 700], [100, 3, 2], arrivals=[0.0, 0.0, 0.030])
    return simulate_pool(workload, linear(dp=2, kv=1000), phase="decode", engine=engine, rank_router=rank_router)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_decode_instance_whose_ranks_take_requests_in_turn_queues_one_where_its_turn_falls(engine):
    """By load r2 takes empty rank 1 and joins at the 33 ms boundary; in turn (SGLang's round_robin) it is rank 0's,
    r0's, where its KV does not fit beside r0's until r0 leaves, a hundred steps later."""
    by_load = _in_turn_or_by_load(RankRouter.SHORTEST_QUEUE, engine)
    in_turn = _in_turn_or_by_load(RankRouter.ROUND_ROBIN, engine)
    assert by_load["first_token_s"][2] == pytest.approx(0.033, abs=1e-12)
    assert in_turn["first_token_s"][2] >= in_turn["finish_s"][0] - 1e-12 > 1.0


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), phase=st.sampled_from(["decode", "prefill-first", "chunked"]))
def test_compiled_engine_matches_the_oracle_when_ranks_take_requests_in_turn(seed, phase):
    """Two instances of four ranks taking their requests in turn: decode alone and both colocated policies."""
    base = wide(profile("a100-80gb", kv=3000), 4)
    kw = {"phase": phase} if phase == "decode" else {
        "phase": "colocated", "policy": phase, "chunk_tokens": 256 if phase == "chunked" else None}
    workload = random_trace(seed, n=80, rate_rps=20.0)
    fast, oracle = (simulate_pool(workload, base, replicas=2, rank_router=RankRouter.ROUND_ROBIN, engine=engine, **kw)
                    for engine in ("fast", "reference"))
    assert_same(fast, oracle)


def test_a_plan_file_puts_a_decode_pools_requests_on_its_ranks_in_turn_and_round_trips_it(tmp_path):
    path = tmp_path / "wide.yaml"
    text = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    head, tail = text.split("phase: decode", 1)
    stated = "dp: 4\n    ep: 4\n    rank_router: round-robin\n    replicas:"
    path.write_text(head + "phase: decode" + tail.replace("replicas:", stated, 1))
    plan = load_plan(path)
    assert [p.rank_router for p in plan.pools] == [RankRouter.SHORTEST_QUEUE, RankRouter.ROUND_ROBIN]
    assert plan_to_dict(plan)["pools"][1]["rank_router"] == "round-robin"
