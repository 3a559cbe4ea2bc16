"""Instances with attention data parallelism: each rank its own batch and KV, the ranks stepping
together, so an instance's step lasts its slowest rank's (SGLang ``--enable-dp-attention``, vLLM
``--data-parallel-size`` with expert parallelism: the MoE layers' all-to-all joins every rank).

The closed forms use a linear profile: a decode step of B requests takes 10 + B ms and a prefill
batch of Σl prompt tokens 10 + 0.1·Σl ms, whatever the context.
"""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.fileio import atomic_write_text, dump_yaml
from pdplan.latency.profile import iteration_group_s
from pdplan.sim import Plan, simulate, simulate_pool
from pdplan.sim.fast import fields
from pdplan.sim.fast.latency import instance_run_s
from pdplan.sim.planfile import load_plan, plan_to_dict
from tests.conftest import ROOT
from tests.handbuilt import handbuilt_profile
from tests.test_sim_decode import DECODE_MS, assert_same_records, decode_profile, table_for
from tests.test_sim_decode import random_trace as decode_trace
from tests.test_sim_system import HETEROGENEOUS, MODEL, PROFILES, assert_same, link, pool, profile, random_trace


def linear(dp: int, kv: int = 100_000):
    """Decode 10 + B ms, prefill 10 + 0.1·Σl ms, ``kv`` tokens of KV per rank, ``dp`` ranks."""
    flat = handbuilt_profile(prefill_ms=[(1, [[10.0, 0.1, 0.0]])], decode_ms=[(1, [[10.0, 1.0, 0.0]])],
                             kv_capacity_tokens=kv, max_prefill_batch_tokens=2048)
    return wide(flat, dp)


def wide(base, dp):
    return dataclasses.replace(base, dp=dp)


def grouped(dp: int, kv: int = 100_000):
    """:func:`linear` whose MoE layers over all the ranks' tokens T take, of each step, 2 + 0.5·T ms in a
    decode step and 5 + 0.05·T ms in a prefill (the rank's own share at DP × its rows inside it)."""
    return dataclasses.replace(linear(dp, kv), group_decode_points=((1, 0.0025), (1001, 0.5025)),
                               group_prefill_points=((1, 0.00505), (1001, 0.05505)))


def at_zero(prompts, outputs, arrivals=None):
    n = len(prompts)
    return {"arrival_s": np.zeros(n) if arrivals is None else np.array(arrivals, float),
            "prompt_tokens": np.array(prompts), "output_tokens": np.array(outputs)}


def simulate_decode_instance_of(profile, workload, engine="fast"):
    """A decode instance alone: each request's KV is visible at its arrival."""
    return simulate_pool(workload, profile, phase="decode", engine=engine)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_two_ranks_with_unequal_batches_step_at_the_longer_ranks_time(engine):
    """Three requests at 0 on two ranks: r0 and r2 on rank 0 (B = 2, 12 ms), r1 on rank 1
    (B = 1, 11 ms). Both steps last 12 ms, so r0 and r2 (2 decode steps) finish at 24 ms; r1 then
    steps alone at 11 ms and its 4 steps end at 24 + 22 = 46 ms (44 ms on its own instance)."""
    result = simulate_decode_instance_of(linear(dp=2), at_zero([100, 100, 100], [3, 5, 3]), engine)
    np.testing.assert_allclose(result["first_token_s"], [0.0, 0.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(result["finish_s"], [0.024, 0.046, 0.024], atol=1e-12)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_the_moe_layers_of_unequal_ranks_see_the_tokens_they_hold_not_dp_times_the_largest(engine):
    """:func:`grouped` on two ranks, as in the test above: a rank's step of B rows holds g(2B) = 2 + B ms
    of MoE time, so its own part is 8 ms whatever B. With B = 2 and 1 the step is 8 + g(3) = 11.5 ms
    (not 12): r0 and r2 finish after two at 23 ms; r1 then steps alone at 8 + g(1) = 10.5 ms, and
    its last two steps end at 23 + 21 = 44 ms."""
    result = simulate_decode_instance_of(grouped(dp=2), at_zero([100, 100, 100], [3, 5, 3]), engine)
    np.testing.assert_allclose(result["finish_s"], [0.023, 0.044, 0.023], atol=1e-12)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_one_rank_carries_its_own_tokens_so_a_group_part_changes_nothing(engine):
    """A profile file may keep group points at DP 1 (an old one-rank file); one rank's MoE layers already
    see just its tokens, so both engines time it exactly as without them."""
    workload = at_zero([100, 300, 50], [3, 5, 2])
    for phase in ("decode", "prefill"):
        with_points = simulate_pool(workload, grouped(dp=1), phase=phase, engine=engine)
        without = simulate_pool(workload, linear(dp=1), phase=phase, engine=engine)
        np.testing.assert_array_equal(with_points["finish_s"], without["finish_s"])
        np.testing.assert_array_equal(with_points["prefill_end_s"], without["prefill_end_s"])


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_prefill_of_unequal_ranks_times_its_moe_layers_at_the_tokens_summed(engine):
    """:func:`grouped` prefill ranks of 1,100 and 200 tokens (120 and 30 ms, holding g(2,200) = 115 and
    g(400) = 25 ms): both own parts are 5 ms, so the batch lasts 5 + g(1,300) = 75 ms."""
    result = simulate_pool(at_zero([1000, 200, 100], [1, 1, 1]), grouped(dp=2), phase="prefill", engine=engine)
    np.testing.assert_allclose(result["prefill_end_s"], [0.075, 0.075, 0.075], atol=1e-12)


def test_an_iterations_moe_layers_share_no_more_of_the_prompts_constant_than_the_decode_rows_pay():
    """The group part of an iteration with d decode rows and T prompt tokens is g_d(d) + g_p(T) less the
    part of the prompt's constant g_p(1) = 5.05 ms that the decode rows pay too, at most g_d(d). With
    :func:`grouped`: 10 decode rows (7 ms) pay all of it, 7 + 10 − 5.05 ms for 100 prompt tokens; 2 rows
    (3 ms) pay only their 3 ms, so the iteration takes the prompt tokens' own 10 ms."""
    profile = grouped(2)
    assert iteration_group_s(profile, 10, 100) == pytest.approx(0.007 + 0.010 - 0.00505)
    assert iteration_group_s(profile, 2, 100) == pytest.approx(0.010)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_request_goes_to_the_rank_with_fewer_outstanding_requests(engine):
    """Ranks of 1,000 KV tokens. r0 (800 tokens, 100 outputs) takes rank 0, r1 (2 decode steps of
    11 ms) rank 1 and leaves at 22 ms. r2 (702 tokens) lands at 30 ms: rank 1 holds nothing, so
    it joins there at the 33 ms boundary and its one step ends at 44 ms; on rank 0, beside r0, its
    KV would not fit until r0 finished, a hundred steps later."""
    workload = at_zero([700, 50, 700], [100, 3, 2], arrivals=[0.0, 0.0, 0.030])
    result = simulate_decode_instance_of(linear(dp=2, kv=1000), workload, engine)
    assert result["first_token_s"][2] == pytest.approx(0.033, abs=1e-12)
    assert result["finish_s"][2] == pytest.approx(0.044, abs=1e-12)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_kv_capacity_is_per_rank(engine):
    """Ranks of 1,000 KV tokens, three requests of 600 at 0: r0 takes rank 0, r1 rank 1 and r2
    rank 0 (a tie goes to the lower rank), where it does not fit beside r0 although the
    instance's 2,000 tokens would hold all three. It is admitted when r0 leaves after two 11 ms
    steps (22 ms) and its one step ends at 33 ms."""
    result = simulate_decode_instance_of(linear(dp=2, kv=1000), at_zero([597, 595, 598], [3, 5, 2]), engine)
    assert result["first_token_s"][2] == pytest.approx(0.022, abs=1e-12)
    assert result["finish_s"][2] == pytest.approx(0.033, abs=1e-12)


def test_a_request_larger_than_one_ranks_kv_is_rejected():
    """A request must fit one rank's KV: 1,500 tokens do not fit a rank of 1,000, whatever the
    instance holds in all."""
    result = simulate_decode_instance_of(linear(dp=4, kv=1000), at_zero([1400, 100], [100, 10]))
    assert result["rejected"].tolist() == [True, False]


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_each_prefill_rank_forms_its_own_batch_and_the_step_lasts_the_longest(engine):
    """Prompts of 1,000, 200 and 100 tokens at 0 on two prefill ranks: rank 0 takes the first and
    the third (a tie goes to the lower rank), 1,100 tokens, 120 ms; rank 1 the second, 30 ms. The
    step ends for all three at 120 ms."""
    result = simulate_pool(at_zero([1000, 200, 100], [1, 1, 1]), linear(dp=2), phase="prefill", engine=engine)
    np.testing.assert_allclose(result["prefill_end_s"], [0.120, 0.120, 0.120], atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(ranks=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 30_000)), min_size=2, max_size=6),
       steps=st.integers(1, 300))
def test_closed_form_run_of_synchronised_ranks_equals_the_sum_of_the_slowest_ranks_steps(ranks, steps):
    """Σ_j max over ranks holding requests of the rank's step at (B_k, S_k + j·B_k), summed
    stretch by stretch over every rank's pieces at once, equals the sum step by step."""
    profile = decode_profile()
    busy = [(b, s) for b, s in ranks if b > 0]
    brute = sum(max((profile.decode_step_s(b, s + j * b) for b, s in busy), default=0.0) for j in range(steps))
    di = np.zeros((fields.DI_FIELDS, len(ranks)), np.int64)
    di[fields.D_B], di[fields.D_S] = zip(*ranks)
    di[fields.D_DP, 0] = len(ranks)
    di[fields.D_M_GROUP_D] = -1  # no group part
    assert instance_run_s(*table_for(profile.decode), di, 0, steps) == pytest.approx(brute, rel=1e-12, abs=1e-12)


@settings(max_examples=16, deadline=None)
@given(seed=st.integers(0, 10**6), phase=st.sampled_from(["decode", "prefill", "prefill-first", "chunked"]),
       capacity=st.sampled_from([1100, 3000]), group=st.booleans())
def test_compiled_engine_matches_the_oracle_with_four_ranks(seed, phase, capacity, group):
    """Two instances of four ranks, pieces that cross and a second batch segment, KV stalls, with and
    without a group part (three points, the MoE layers' time bending at 16 and 512 tokens):
    same records within 1e-9 s for decode, prefill and both colocated policies."""
    base = handbuilt_profile(prefill_ms=[(1, [[50.0, 0.1, 0.0]]), (3, [[20.0, 0.15, 1e-5]])],
                             decode_ms=DECODE_MS, kv_capacity_tokens=capacity, max_prefill_batch_tokens=2048)
    if group:
        base = dataclasses.replace(base, group_decode_points=((1, 0.004), (16, 0.006), (512, 0.010)),
                                   group_prefill_points=((1, 0.005), (512, 0.02), (8192, 0.09)))
    kw = {"phase": phase, "replicas": 2}
    if phase in ("prefill-first", "chunked"):
        kw = {"phase": "colocated", "replicas": 2, "policy": phase, "chunk_tokens": 256 if phase == "chunked" else None}
    workload = decode_trace(seed, n=80, rate_rps=30.0)
    assert_same_records(simulate_pool(workload, wide(base, 4), **kw),
                        simulate_pool(workload, wide(base, 4), engine="reference", **kw))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10**6), schedule=st.sampled_from(["request", "layer"]), hashes=st.booleans(),
       failure=st.sampled_from([(0.0, "retry"), (0.3, "retry"), (0.3, "recompute")]))
def test_compiled_engine_matches_the_oracle_on_a_plan_with_wide_pools(seed, schedule, hashes, failure):
    """Prefill instances of two ranks and decode instances of four beside TP-only pools, a mixed
    pool, per-pair links, both schedules, prefix hashes and failed transfers."""
    prefill2, decode4 = wide(profile("a100-80gb"), 2), wide(profile("a100-80gb", kv=6000), 4)
    profiles = {**PROFILES, prefill2.key: prefill2, decode4.key: decode4}
    pools = (pool("pw", "prefill", dp=2, replicas=2), pool("dw", "decode", dp=4, replicas=2),
             *HETEROGENEOUS["pools"], pool("mx", "mixed", policy="chunked", chunk_tokens=512))
    plan = Plan(pools=pools, default_link=HETEROGENEOUS["default_link"], transfer_schedule=schedule,
                failure_rate=failure[0], failure_policy=failure[1], spill_tokens=4000, kv_share=0.5)
    trace = random_trace(seed, n=100, rate_rps=12.0, hashes=hashes)
    assert_same(simulate(trace, plan, profiles, model=MODEL, seed=seed),
                simulate(trace, plan, profiles, model=MODEL, seed=seed, engine="reference"))


def test_a_mixed_pool_with_data_parallel_ranks_is_refused_naming_its_field():
    mixed = wide(profile("a100-80gb"), 2)
    plan = Plan(pools=(pool("p", "prefill"), pool("d", "decode"),
                       pool("mx", "mixed", policy="chunked", chunk_tokens=512, dp=2)),
                default_link=HETEROGENEOUS["default_link"])
    with pytest.raises(PdplanError) as err:
        simulate(random_trace(0, n=5), plan, {**PROFILES, mixed.key: mixed}, model=MODEL)
    assert err.value.field == "pools[2].dp"


def test_a_plan_file_states_a_pools_ranks_and_round_trips_them(tmp_path):
    """``dp`` and ``ep`` are optional pool fields (default 1), written back only when above 1, so
    a plan without them reads and writes as before."""
    text = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    old = load_plan(ROOT / "examples" / "plan_disagg.yaml")
    assert all(p.dp == 1 and p.ep == 1 for p in old.pools)
    assert all("dp" not in p and "ep" not in p for p in plan_to_dict(old)["pools"])
    path = tmp_path / "wide.yaml"
    path.write_text(text.replace("replicas: 2", "dp: 4\n    ep: 4\n    replicas: 2", 1))
    wide_plan = load_plan(path)
    assert (wide_plan.pools[0].dp, wide_plan.pools[0].ep) == (4, 4)
    atomic_write_text(tmp_path / "again.yaml", dump_yaml(plan_to_dict(wide_plan)))
    assert load_plan(tmp_path / "again.yaml").pools == wide_plan.pools


def test_a_pool_with_zero_ranks_names_its_field(tmp_path):
    path = tmp_path / "plan.yaml"
    text = (ROOT / "examples" / "plan_disagg.yaml").read_text()
    path.write_text(text.replace("replicas: 2", "dp: 0\n    replicas: 2", 1))
    with pytest.raises(PdplanError, match=r"pools\[0\]\.dp must be >= 1"):
        load_plan(path)


def _into_ranks(dp: int, prompts, engine: str):
    """Prompts at 0 prefilled on one TP4 instance, their KV sent over a link of 10 GB/s (0.5 ms setup)
    into one decode instance of ``dp`` TP4 ranks (llama2-70b: 327,680 B per token, one copy per rank)."""
    decode = wide(profile("a100-80gb", kv=60_000), dp)
    plan = Plan(pools=(pool("p", "prefill"), pool("d", "decode", dp=dp)), default_link=link(10, 0.5))
    workload = at_zero(prompts, [5] * len(prompts))
    return simulate(workload, plan, {**PROFILES, decode.key: decode}, model=MODEL, engine=engine)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_a_request_lands_on_one_decode_rank_over_that_ranks_share_of_the_instances_link(engine):
    """The link is the instance's ingress, its four ranks' NICs; one request's 1,000 tokens (327.68 MB) land on
    one rank, over a quarter of it: 0.5 ms + 327.68 MB / 2.5 GB/s = 131.572 ms, not the 33.268 ms of the
    whole link."""
    result = _into_ranks(4, [1000], engine)
    took = result["transfer_end_s"] - result["transfer_start_s"]
    assert took[0] == pytest.approx(0.131572, abs=1e-9)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_transfers_to_two_ranks_run_at_once_and_to_one_rank_one_after_the_other(engine):
    """Two prompts of 1,000 tokens prefilled together: into two ranks each goes over its rank's half of the
    link at once (0.5 + 65.536 ms both); into one rank of the whole link one after the other (0.5 + 32.768 ms,
    then as much again). The instance's ingress was busy as long in both but for one setup: each of the two ranks
    66.036 ms, the one rank twice 33.268 ms."""
    spread, queued = _into_ranks(2, [1000, 1000], engine), _into_ranks(1, [1000, 1000], engine)
    start = spread["transfer_start_s"][0]
    np.testing.assert_allclose(spread["transfer_end_s"] - start, [0.066036, 0.066036], atol=1e-9)
    np.testing.assert_allclose(queued["transfer_end_s"] - start, [0.033268, 0.066536], atol=1e-9)
    assert spread.link_busy_s == pytest.approx({"d/0": 0.066036})
    assert queued.link_busy_s == pytest.approx({"d/0": 2 * 0.033268})
