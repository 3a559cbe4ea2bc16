"""Goodput and pool capacity on traces with prefix hashes: probes keep the reuse, caches and the router count."""

import numpy as np
import pytest

from pdplan.goodput import SearchSettings, pool_goodput, probe_workload
from pdplan.latency.profile import shipped_profiles
from pdplan.sim import simulate_pool
from pdplan.slo import slo_from_flags
from pdplan.workload import load_trace

PROFILE = ("llama2-70b", "h100-80gb", 4, 1)


@pytest.fixture(scope="module")
def mooncake(shared_data):
    return load_trace(shared_data / "traces" / "mooncake_conversation_trace.jsonl")


def test_a_probe_of_a_trace_with_prefix_hashes_is_a_run_of_consecutive_requests(mooncake):
    """A subset would keep a conversation's later turns without the earlier turns they reuse."""
    probe = probe_workload(mooncake, 1.0, SearchSettings(requests_per_probe=500), seed=3)
    start = int(np.flatnonzero(mooncake.prompt_tokens == probe.prompt_tokens[0])[0])
    np.testing.assert_array_equal(probe.prompt_tokens, mooncake.prompt_tokens[start:start + 500])
    ends = mooncake.hash_offsets[start], mooncake.hash_offsets[start + 500]
    np.testing.assert_array_equal(probe.hash_values, mooncake.hash_values[ends[0]:ends[1]])


def test_prefill_pools_probe_with_their_prefix_caches(mooncake):
    """The same 2,000 consecutive Mooncake requests on two prefill instances: with the caches on,
    the instances compute fewer prompt tokens and finish sooner."""
    profile = shipped_profiles()[PROFILE]
    requests = probe_workload(mooncake, 1.0, SearchSettings(), 2, seed=0)
    cached, plain = (simulate_pool(requests, profile, phase="prefill", replicas=2, prefix_cache=on)
                     for on in (True, False))
    assert cached["prefill_cached_tokens"].sum() > 0.02 * requests.prompt_tokens.sum()
    assert plain["prefill_cached_tokens"].sum() == 0
    assert cached.busy_s.sum() < plain.busy_s.sum()


def test_a_cache_aware_prefill_pool_serves_more_of_mooncake_than_round_robin(mooncake):
    """Four H100 TP4 prefill instances, p90 TTFT within 20 s: routing conversations to the
    instance holding their prefix (priced against its queue) beats taking turns."""
    profile = shipped_profiles()[PROFILE]
    slo, settings = slo_from_flags(20.0, 0.1, 0.9), SearchSettings()
    rates = {router: pool_goodput(mooncake, profile, phase="prefill", slo=slo, settings=settings, start_rps=1.0,
                                  replicas=4, router=router).goodput_rps
             for router in ("round-robin", "cache-aware")}
    assert rates["cache-aware"] > 1.5 * rates["round-robin"] > 0
