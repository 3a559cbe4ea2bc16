"""Per-instance goodput against closed forms: service rates, the TTFT split, the decode rule."""

from dataclasses import replace

import numpy as np
import pytest

from pdplan.errors import PdplanError
from pdplan.goodput import (
    InstanceGoodput,
    SearchSettings,
    decode_saturation,
    instance_goodput,
    phase_slo,
    prefill_saturation,
    probe_workload,
)
from pdplan.slo import slo_from_flags
from pdplan.workload import Workload
from tests.handbuilt import handbuilt_profile

D_MS = 100.0  # constant prefill time of one prompt


def even_trace(n=400, prompt=100, output=20):
    """Evenly spaced arrivals: below the service rate nobody waits."""
    return Workload(arrival_s=np.arange(n, dtype=float), prompt_tokens=np.full(n, prompt),
                    output_tokens=np.full(n, output))


def constant_prefill(kv=10**9, cap=100):
    return handbuilt_profile(prefill_ms=[(1, [[D_MS, 0, 0]])], decode_ms=[(1, [[20.0, 0, 0]])],
                             kv_capacity_tokens=kv, max_prefill_batch_tokens=cap)


SETTINGS = SearchSettings(tolerance_rel=0.005, requests_per_probe=400)


def test_prefill_goodput_under_even_arrivals_is_the_service_rate():
    """TTFT = D exactly while λ < 1/D = 10 rps; beyond it the queue grows and p90 fails."""
    result = instance_goodput(even_trace(), constant_prefill(), phase="prefill",
                              slo=slo_from_flags(0.5, None, 0.9), settings=SETTINGS)
    assert result.goodput_rps == pytest.approx(10.0, rel=0.01)
    assert result.goodput_rps <= 10.0 * (1 + 1e-9)


def test_prefill_saturation_is_full_batches_over_their_time():
    """Cap 300 tokens, 100-token prompts: 3 per batch at 100 ms each → 30 rps."""
    assert prefill_saturation(even_trace(), constant_prefill(cap=300)) == pytest.approx(30.0)


def test_prefill_slower_than_its_ttft_share_has_zero_goodput():
    """D = 100 ms but the prefill share of a 105 ms TTFT is 94.5 ms: no rate meets it."""
    result = instance_goodput(even_trace(), constant_prefill(), phase="prefill",
                              slo=slo_from_flags(0.105, None, 0.9), settings=SETTINGS)
    assert result.goodput_rps == 0.0


def test_brackets_are_the_md1_rate_for_the_ttft_share():
    """M/D/1 mean TTFT = 0.9 s with D = 0.1 s: R = 2w/(D² + 2wD), w = 0.8 → 9.41 rps."""
    result = instance_goodput(even_trace(), constant_prefill(), phase="prefill",
                              slo=slo_from_flags(1.0, None, 0.9), settings=SETTINGS)
    assert result.md1_rps == pytest.approx(2 * 0.8 / (0.01 + 2 * 0.8 * 0.1))
    assert result.mg1_rps == pytest.approx(result.md1_rps)  # every prompt takes D


def test_decode_is_never_good_above_its_saturation_throughput():
    """KV for 4 requests of 120 tokens, 20 ms steps, 19 decode steps each: 4/(0.02·19) = 10.5 rps."""
    profile = constant_prefill(kv=480)
    workload = even_trace()
    assert decode_saturation(workload, profile) == pytest.approx(4 / (0.02 * 19))
    result = instance_goodput(workload, profile, phase="decode", slo=slo_from_flags(10.0, 10.0, 0.9),
                              settings=SETTINGS)
    assert result.goodput_rps <= result.saturation_rps
    assert any(p.saturated and not p.meets for p in result.probes)


def test_a_running_cap_below_the_kv_bounds_the_decode_batch_of_the_saturation():
    """KV for 4 requests, each rank held to 2 at once: 2/(0.02·19) = 5.3 rps, and the probes run at most that."""
    profile, workload = constant_prefill(kv=480), even_trace()
    assert decode_saturation(workload, profile, max_running_requests=2) == pytest.approx(2 / (0.02 * 19))
    assert decode_saturation(workload, profile, max_running_requests=8) == pytest.approx(4 / (0.02 * 19))
    result = instance_goodput(workload, profile, phase="decode", slo=slo_from_flags(10.0, 10.0, 0.9),
                              settings=SETTINGS, max_running_requests=2)
    assert result.max_running_requests == 2 and result.goodput_rps <= 2 / (0.02 * 19) * 1.0001
    assert InstanceGoodput.from_dict(result.to_dict()).max_running_requests == 2  # as the goodput cache keeps it


def test_decode_judges_admission_wait_against_its_share_of_ttft():
    slo = phase_slo(slo_from_flags(1.0, 0.1, 0.9), "decode", admission_share=0.1)
    assert [(o.metric, o.threshold_s) for o in slo.objectives] == [("ttft", pytest.approx(0.1)), ("tpot", 0.1)]


def test_prefill_keeps_the_rest_of_the_ttft_budget_and_ignores_tpot():
    slo = phase_slo(slo_from_flags(1.0, 0.1, 0.9), "prefill", admission_share=0.1)
    assert [(o.metric, o.threshold_s) for o in slo.objectives] == [("ttft", pytest.approx(0.9))]


def test_admission_share_zero_judges_prefill_on_the_whole_ttft_and_decode_on_tpot_alone():
    slo = slo_from_flags(1.0, 0.1, 0.9)
    assert [(o.metric, o.threshold_s) for o in phase_slo(slo, "prefill", admission_share=0).objectives] == [
        ("ttft", pytest.approx(1.0))]
    assert [(o.metric, o.threshold_s) for o in phase_slo(slo, "decode", admission_share=0).objectives] == [
        ("tpot", 0.1)]


@pytest.mark.parametrize("share", [-0.1, 1.0, float("nan")])
def test_admission_share_outside_zero_to_one_is_an_input_error(share):
    with pytest.raises(PdplanError, match=r"--admission-share must be in \[0, 1\)"):
        phase_slo(slo_from_flags(1.0, 0.1, 0.9), "prefill", admission_share=share)


def test_probe_workload_draws_from_the_whole_trace_in_order_at_the_probe_rate():
    """A trace whose second half arrives ten times faster: a probe of a tenth of it keeps that swing."""
    arrivals = np.concatenate([np.arange(500) * 1.0, 500 + np.arange(500) * 0.1])
    workload = Workload(arrival_s=arrivals, prompt_tokens=np.arange(1, 1001), output_tokens=np.full(1000, 2))
    probe = probe_workload(workload, 5.0, SearchSettings(requests_per_probe=100))
    assert len(probe) == 100
    assert np.all(np.diff(probe.prompt_tokens) > 0)  # trace order
    assert (len(probe) / (probe.arrival_s[-1] - probe.arrival_s[0])) == pytest.approx(5.0)
    slow = probe.prompt_tokens <= 500
    assert 30 < slow.sum() < 70  # drawn from both halves, not the head
    assert np.diff(probe.arrival_s)[slow[1:]].mean() > 5 * np.diff(probe.arrival_s)[~slow[1:]].mean()


def test_a_probe_draws_its_requests_from_the_run_seed_alone():
    workload = Workload(arrival_s=np.arange(1000) * 0.5, prompt_tokens=np.arange(1, 1001),
                        output_tokens=np.full(1000, 2))
    settings = SearchSettings(requests_per_probe=100)
    drawn = {seed: probe_workload(workload, 5.0, settings, seed=seed).prompt_tokens for seed in (1, 1, 2)}
    again = probe_workload(workload, 5.0, settings, seed=1).prompt_tokens
    assert np.array_equal(drawn[1], again)
    assert not np.array_equal(drawn[1], drawn[2])


def test_a_pool_probe_carries_requests_per_probe_for_each_replica():
    workload = even_trace(n=1000)
    assert len(probe_workload(workload, 5.0, SearchSettings(requests_per_probe=100), replicas=4)) == 400
    # a prefill pool's probe takes a trace shorter than it whole
    assert len(probe_workload(workload, 5.0, SearchSettings(requests_per_probe=400), replicas=4)) == 1000


def test_a_decode_pool_probe_longer_than_the_trace_replays_it_so_the_pool_runs_as_long_as_one_instance():
    workload = even_trace(n=1000)
    settings = SearchSettings(requests_per_probe=400)
    pool = probe_workload(workload, 20.0, settings, replicas=4, replay=True)  # 1,600 requests from 1,000
    alone = probe_workload(workload, 5.0, settings)
    assert len(pool) == 1600
    assert np.all(np.diff(pool.arrival_s) > 0)
    span = pool.arrival_s[-1] - pool.arrival_s[0]
    assert span == pytest.approx(alone.arrival_s[-1] - alone.arrival_s[0], rel=0.01)  # 80 s each


def test_result_round_trips_through_its_json_form():
    result = instance_goodput(even_trace(), constant_prefill(), phase="prefill",
                              slo=slo_from_flags(0.5, None, 0.9), settings=SETTINGS)
    assert InstanceGoodput.from_dict(result.to_dict()) == result


def test_a_wide_result_keeps_its_ranks_through_its_json_form_and_an_old_one_reads_as_one_rank():
    wide = replace(instance_goodput(even_trace(), constant_prefill(), phase="prefill",
                                    slo=slo_from_flags(0.5, None, 0.9), settings=SETTINGS), dp=4, ep=4)
    assert InstanceGoodput.from_dict(wide.to_dict()) == wide
    old = {k: v for k, v in wide.to_dict().items() if k not in ("dp", "ep")}
    assert (InstanceGoodput.from_dict(old).dp, InstanceGoodput.from_dict(old).ep) == (1, 1)


def test_result_keeps_every_search_setting_through_its_json_form():
    settings = SearchSettings(tolerance_rel=0.005, requests_per_probe=400, max_probes=12, grid_points=2)
    result = instance_goodput(even_trace(), constant_prefill(), phase="prefill",
                              slo=slo_from_flags(0.5, None, 0.9), settings=settings)
    assert InstanceGoodput.from_dict(result.to_dict()).settings == settings


def test_an_instance_of_dp_ranks_saturates_at_dp_times_one_rank():
    """Each rank batches and holds KV on its own: 4 ranks of the 30 rps prefill above serve 120 rps,
    and decode's KV-limited throughput is 4 times one rank's."""
    rank = constant_prefill(cap=300, kv=2400)
    wide = replace(rank, dp=4, ep=4)
    assert prefill_saturation(even_trace(), wide) == pytest.approx(4 * 30.0)
    assert decode_saturation(even_trace(), wide) == pytest.approx(4 * decode_saturation(even_trace(), rank))
