"""Prefill-side prefix caching: hits skip compute, a second tier loads at its bandwidth, the routers."""

from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan.errors import PdplanError
from pdplan.sim import simulate
from pdplan.sim.plan import CacheTier, Plan
from pdplan.workload.formats import load_trace
from tests.test_sim_system import KV, MODEL, assert_same, link, pool, profile, random_trace

#: A prefill profile whose batch cap holds a 4,096-token prompt: max(60, 30 + 0.18·Σl + 1.15e-5·Σl²) ms.
PROFILES = {p.key: p for p in [profile("a100-80gb", cap=8192), profile("h100-80gb", pp=2, kv=30_000)]}


def plan(prefill=None, decode=None, router="least-loaded", replicas=1):
    return Plan(pools=(pool("p", "prefill", replicas=replicas, **(prefill or {})),
                       pool("d", "decode", **(decode or {}))),
                default_link=link(25), router=router)


def chains(*blocks_per_request, block_tokens=64, spacing_s=10.0):
    """One request per list of block ids, each prompt its blocks' tokens, ``spacing_s`` apart."""
    offsets = np.cumsum([0] + [len(b) for b in blocks_per_request])
    return {"arrival_s": np.arange(len(blocks_per_request)) * spacing_s,
            "prompt_tokens": np.array([len(b) * block_tokens for b in blocks_per_request]),
            "output_tokens": np.full(len(blocks_per_request), 5),
            "hash_values": np.concatenate([np.asarray(b) for b in blocks_per_request]),
            "hash_offsets": offsets, "block_tokens": block_tokens}


def prefill_s(result):
    return result["prefill_end_s"] - result["prefill_start_s"]


def closed_form_ms(sum_l, sum_l2):
    """The hand-built prefill profile, max(60, 30 + 0.18·Σl + 1.15e-5·Σl²) ms."""
    return max(60.0, 30.0 + 0.18 * sum_l + 1.15e-5 * sum_l2)


def test_a_shared_prefix_is_not_computed_again():
    """4,096-token prompts sharing their first 32 of 64 blocks: the second computes 2,048 tokens
    against the whole prompt, Σl = 2,048 and Σl² = 4,096² − 2,048²."""
    shared = list(range(32))
    result = simulate(chains(shared + list(range(100, 132)), shared + list(range(200, 232))), plan(), PROFILES,
                      model=MODEL)
    assert result["prefill_cached_tokens"].tolist() == [0, 2048]
    assert prefill_s(result)[0] * 1e3 == pytest.approx(closed_form_ms(4096, 4096**2))
    assert prefill_s(result)[1] * 1e3 == pytest.approx(closed_form_ms(2048, 4096**2 - 2048**2))


def test_a_whole_prompt_hit_still_computes_its_last_token():
    result = simulate(chains([1, 2], [1, 2]), plan(), PROFILES, model=MODEL)
    assert result["prefill_cached_tokens"].tolist() == [0, 127]


def test_a_hit_ends_at_the_first_block_the_cache_lacks():
    """Blocks 1 and 3 are cached but 2 is not: only block 1 counts (block 3's keys depend on 2)."""
    result = simulate(chains([1, 9, 3], [1, 2, 3]), plan(), PROFILES, model=MODEL)
    assert result["prefill_cached_tokens"].tolist() == [0, 64]


def test_a_prefix_evicted_from_hbm_is_computed_again():
    result = simulate(chains([1, 2], [3, 4], [1, 2]), plan({"prefix_cache_blocks": 2}), PROFILES, model=MODEL)
    assert result["prefill_cached_tokens"].tolist() == [0, 0, 0]


def test_a_hit_in_the_second_tier_loads_at_its_bandwidth_before_the_prefill():
    """HBM holds nothing (0 blocks), the host tier everything: the second request's 2,048 cached
    tokens load at 10 GB/s, 2,048 · KV bytes / 10 GB/s before its prefill."""
    tier = CacheTier(medium="host", blocks=1000, bandwidth_bytes_per_s=10e9)
    shared = list(range(32))
    trace = chains(shared + list(range(100, 132)), shared + list(range(200, 232)))
    result = simulate(trace, plan({"prefix_cache_blocks": 0, "cache_tier": tier}), PROFILES, model=MODEL)
    assert result["prefill_loaded_tokens"].tolist() == [0, 2048]
    expected = closed_form_ms(2048, 4096**2 - 2048**2) / 1e3 + 2048 * KV / 10e9
    assert prefill_s(result)[1] == pytest.approx(expected)


def test_traces_without_hashes_prefill_every_token():
    trace = {"arrival_s": [0.0, 10.0], "prompt_tokens": [4096, 4096], "output_tokens": [5, 5]}
    result = simulate(trace, plan(), PROFILES, model=MODEL)
    assert result["prefill_cached_tokens"].tolist() == [0, 0]
    assert prefill_s(result)[1] * 1e3 == pytest.approx(closed_form_ms(4096, 4096**2))


# --- routers -------------------------------------------------------------------------------------

#: A (prefix X) at 0; B (prefix Y) while A is queued; C (Y) and D (X) when both instances are idle.
ROUTED = chains(list(range(10, 42)), list(range(50, 82)), list(range(50, 82)) + [99], list(range(10, 42)) + [98])
ROUTED["arrival_s"] = np.array([0.0, 0.001, 10.0, 20.0])


@pytest.mark.parametrize("router, expected", [
    ("least-loaded", [0, 1, 0, 0]), ("round-robin", [0, 1, 0, 1]), ("cache-aware", [0, 1, 1, 0])])
def test_each_router_picks_the_prefill_instance_it_states(router, expected):
    """Least-loaded takes the fewest pending tokens (idle ties go to the lowest index), round-robin
    takes turns, cache-aware sends C and D to the instance that already holds their prefix."""
    result = simulate(ROUTED, plan(router=router, replicas=2), PROFILES, model=MODEL)
    assert result["prefill_instance"].tolist() == expected


def test_cache_aware_routing_weighs_the_queue_against_the_hit():
    """An instance holding the prefix but with more pending tokens than the hit saves loses: C's
    2,048-token hit at p/0 is worth less than the 4,096 tokens queued there."""
    trace = chains(list(range(10, 42)), list(range(60, 124)), list(range(10, 42)) + [98], spacing_s=0.0)
    trace["arrival_s"] = np.array([0.0, 10.0, 10.0])
    result = simulate(trace, plan(router="cache-aware", replicas=2), PROFILES, model=MODEL)
    assert result["prefill_instance"].tolist() == [0, 0, 1]


def test_a_cache_aware_router_without_hashes_routes_by_load():
    trace = {k: v for k, v in ROUTED.items() if k not in ("hash_values", "hash_offsets", "block_tokens")}
    aware = simulate(trace, plan(router="cache-aware", replicas=2), PROFILES, model=MODEL)
    loaded = simulate(trace, plan(router="least-loaded", replicas=2), PROFILES, model=MODEL)
    assert aware["prefill_instance"].tolist() == loaded["prefill_instance"].tolist()


def test_the_summary_reports_the_prefill_cache_hit_rate():
    shared = list(range(32))
    result = simulate(chains(shared + list(range(100, 132)), shared + list(range(200, 232))), plan(), PROFILES,
                      model=MODEL)
    assert result.summary()["prefix_cache"] == {"prompt_tokens": 8192, "cached_tokens": 2048, "loaded_tokens": 0,
                                                "hit_rate": 0.25}


def test_a_cache_tier_needs_a_positive_bandwidth():
    with pytest.raises(PdplanError, match="bandwidth"):
        CacheTier(medium="host", blocks=10, bandwidth_bytes_per_s=0)


# --- against the oracle and an LRU computed on the chains ---------------------------------------

@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), router=st.sampled_from(["least-loaded", "round-robin", "cache-aware"]),
       hbm=st.sampled_from([None, 0, 8]), tier=st.sampled_from([0, 16]), schedule=st.sampled_from(["request", "layer"]))
def test_compiled_engine_matches_the_oracle_with_prefill_caches(seed, router, hbm, tier, schedule):
    """Two prefill pools (one PP2), caches of every kind, each router: same records within 1e-9 s."""
    second = None if tier == 0 else CacheTier(medium="remote", blocks=tier, bandwidth_bytes_per_s=5e9)
    caches = {"prefix_cache_blocks": hbm, "cache_tier": second}
    plan_ = Plan(pools=(pool("pa", "prefill", replicas=2, **caches), pool("ph", "prefill", gpu="h100-80gb", pp=2,
                                                                          **caches),
                        pool("da", "decode", replicas=2)), default_link=link(10), router=router,
                 transfer_schedule=schedule)
    trace = random_trace(seed, n=80, rate_rps=8.0, hashes=True)
    fast, ref = (simulate(trace, plan_, PROFILES, model=MODEL, engine=e) for e in ("fast", "reference"))
    assert_same(fast, ref)
    for column in ("prefill_cached_tokens", "prefill_loaded_tokens"):
        np.testing.assert_array_equal(fast[column], ref[column], err_msg=column)


def lru_on_chains(trace, instance, hbm, tier, n_instances):
    """Per request, the tokens an LRU cache of hbm + tier blocks per instance holds of its leading
    blocks (capped at the prompt − 1) and the tokens of those beyond the hbm most recent blocks:
    a two-level exclusive LRU is one LRU whose most recent ``hbm`` blocks sit in HBM."""
    caches = [OrderedDict() for _ in range(n_instances)]
    block = trace["block_tokens"]
    cached, loaded = [], []
    for r, p in enumerate(instance):
        blocks = trace["hash_values"][trace["hash_offsets"][r]:trace["hash_offsets"][r + 1]].tolist()
        recency = {h: rank for rank, h in enumerate(reversed(caches[p]))}  # 0: most recent
        k = next((j for j, h in enumerate(blocks) if h not in recency), len(blocks))
        prompt = int(trace["prompt_tokens"][r])
        hit = min(k * block, prompt - 1)
        cached.append(hit)
        loaded.append(sum(max(0, min(block, hit - j * block)) for j in range(k) if recency[blocks[j]] >= hbm))
        for h in blocks:
            caches[p][h] = True
            caches[p].move_to_end(h)
            if len(caches[p]) > hbm + tier:
                caches[p].popitem(last=False)
    return np.array(cached), np.array(loaded)


@pytest.mark.parametrize("router", ["least-loaded", "cache-aware"])
def test_prefill_tokens_per_instance_equal_an_lru_computed_on_the_mooncake_chains(shared_data, router):
    """The first 600 requests of Mooncake's conversation trace on three prefill instances with
    small caches (200 blocks in HBM, 300 in a host tier), routed as the simulator routed them:
    each request's cached and loaded tokens (so each instance's computed prefill tokens, the
    prompt tokens less the cached ones) equal those of an LRU computed directly on the hash chains."""
    workload = load_trace(shared_data / "traces" / "mooncake_conversation_trace.jsonl")
    n = 600
    end = int(workload.hash_offsets[n])
    trace = {"arrival_s": workload.arrival_s[:n], "prompt_tokens": workload.prompt_tokens[:n],
             "output_tokens": workload.output_tokens[:n], "hash_values": workload.hash_values[:end],
             "hash_offsets": workload.hash_offsets[:n + 1], "block_tokens": workload.block_tokens}
    tier = CacheTier(medium="host", blocks=300, bandwidth_bytes_per_s=20e9)
    plan_ = plan({"prefix_cache_blocks": 200, "cache_tier": tier}, router=router, replicas=3)
    big = profile("a100-80gb", kv=400_000, cap=200_000)
    result = simulate(trace, plan_, {big.key: big}, model=MODEL)
    cached, loaded = lru_on_chains(trace, result["prefill_instance"], 200, 300, 3)
    assert cached.sum() > 0 and loaded.sum() > 0  # the check covers both tiers
    np.testing.assert_array_equal(result["prefill_cached_tokens"], cached)
    np.testing.assert_array_equal(result["prefill_loaded_tokens"], loaded)


# --- colocated instances cache prefixes too ------------------------------------------------------

def colocated_plan(policy, **cache):
    extra = {"policy": policy} | ({"chunk_tokens": 512} if policy == "chunked" else {})
    return Plan(pools=(pool("c", "colocated", replicas=2, **extra, **cache),))


def test_a_colocated_instance_does_not_prefill_a_prefix_it_holds():
    """Prefill-first: the second 4,096-token prompt computes its last 2,048 tokens only."""
    shared = list(range(32))
    trace = chains(shared + list(range(100, 132)), shared + list(range(200, 232)))
    result = simulate(trace, Plan(pools=(pool("c", "colocated", policy="prefill-first"),)), PROFILES)
    assert result["prefill_cached_tokens"].tolist() == [0, 2048]
    assert prefill_s(result)[1] * 1e3 == pytest.approx(closed_form_ms(2048, 4096**2 - 2048**2))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), policy=st.sampled_from(["prefill-first", "chunked"]),
       hbm=st.sampled_from([None, 0, 8]))
def test_compiled_engine_matches_the_oracle_on_colocated_plans_with_prefix_caches(seed, policy, hbm):
    plan_ = colocated_plan(policy, prefix_cache_blocks=hbm)
    trace = random_trace(seed, n=80, rate_rps=4.0, hashes=True)
    fast, ref = (simulate(trace, plan_, PROFILES, engine=e) for e in ("fast", "reference"))
    for column in ("prefill_start_s", "prefill_end_s", "first_token_s", "finish_s"):
        np.testing.assert_allclose(fast[column], ref[column], rtol=0, atol=1e-9, err_msg=column)
    np.testing.assert_array_equal(fast["prefill_cached_tokens"], ref["prefill_cached_tokens"])
    assert hbm is not None or fast["prefill_cached_tokens"].sum() > 0  # the derived cache holds the shared prefixes


# --- early rejection (Mooncake) ------------------------------------------------------------------

def test_an_arrival_predicted_to_miss_its_ttft_is_rejected_at_admission():
    """A 4,096-token prompt is being prefilled when a 2,048-token one arrives: the predictor sees
    4,096 pending tokens (two full 2,048-token batches of the trace's mean 3,072-token prompts,
    capped at the batch) ahead of its own prefill, about 1.5 s, above a 1 s threshold."""
    trace = {"arrival_s": [0.0, 0.01, 20.0], "prompt_tokens": [4096, 2048, 3072], "output_tokens": [5, 5, 5]}
    plan_ = Plan(pools=(pool("p", "prefill"), pool("d", "decode")), default_link=link(25), reject_ttft_s=1.0)
    result = simulate(trace, plan_, {p.key: p for p in [profile("a100-80gb", cap=2048)]}, model=MODEL)
    assert result["rejected_early"].tolist() == [False, True, False]
    assert result["rejected"].tolist() == [False, True, False]
    summary = result.summary(ttft_s=5.0)
    assert (summary["rejected"], summary["rejected_early"]) == (1, 1)
    assert summary["attainment"]["ttft"] == pytest.approx(2 / 3)  # it never met its SLO


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), threshold=st.sampled_from([0.3, 1.0, 3.0]),
       router=st.sampled_from(["least-loaded", "cache-aware"]))
def test_compiled_engine_matches_the_oracle_with_early_rejection(seed, threshold, router):
    plan_ = Plan(pools=(pool("pa", "prefill", replicas=2), pool("da", "decode", replicas=2)), default_link=link(10),
                 router=router, reject_ttft_s=threshold)
    trace = random_trace(seed, n=80, rate_rps=12.0, hashes=True)
    fast, ref = (simulate(trace, plan_, PROFILES, model=MODEL, engine=e) for e in ("fast", "reference"))
    assert_same(fast, ref)
    np.testing.assert_array_equal(fast["rejected_early"], ref["rejected_early"])
