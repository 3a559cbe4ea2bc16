"""The goodput search against closed forms, and the 0x08C replica fixture."""

from dataclasses import replace

import numpy as np
import pytest

from pdplan.goodput import (
    Probe,
    SearchSettings,
    find_goodput,
    joint_attainment,
    probe_from_clocks,
    replicas_for,
)
from pdplan.queueing import md1_ttft_s
from pdplan.slo import slo_from_flags


def threshold_probe(capacity):
    return lambda rate: Probe(rate_rps=rate, attainment_ttft=1.0, attainment_tpot=None,
                              attainment_joint=1.0, meets=rate <= capacity)


def test_search_lands_within_tolerance_below_the_true_goodput():
    search = find_goodput(threshold_probe(7.3), start_rps=1.0, settings=SearchSettings(tolerance_rel=0.01))
    assert 7.3 * 0.99 <= search.goodput_rps <= 7.3


def test_search_never_reports_a_rate_that_failed():
    search = find_goodput(threshold_probe(7.3), start_rps=50.0, settings=SearchSettings())
    assert all(p.meets for p in search.probes if p.rate_rps <= search.goodput_rps)
    assert any(p.rate_rps == search.goodput_rps and p.meets for p in search.probes)


def test_goodput_is_zero_when_no_rate_meets_the_slo():
    assert find_goodput(threshold_probe(0.0), start_rps=1.0, settings=SearchSettings()).goodput_rps == 0.0


def test_search_recovers_the_md1_mean_ttft_rate():
    """Mean TTFT ≤ 0.25 s with D = 0.1 s: closed form R = 2w/(D² + 2wD), w = 0.15 → 7.5 rps."""
    def probe(rate):
        ok = md1_ttft_s(rate, 0.1) <= 0.25
        return Probe(rate_rps=rate, attainment_ttft=float(ok), attainment_tpot=None,
                     attainment_joint=float(ok), meets=ok)

    search = find_goodput(probe, start_rps=1.0, settings=SearchSettings(tolerance_rel=0.001))
    assert search.goodput_rps == pytest.approx(7.5, rel=1e-3)


@pytest.mark.parametrize("capacity", [3.04, 3.5, 2.5, 0.4, 40.0])
def test_a_search_from_a_close_guess_lands_as_the_doubling_search_does(capacity):
    """From a start near the answer (3.0) the small first step finds the same goodput, within the
    tolerance, whichever side of the start it lies, far below or far above it."""
    settings = SearchSettings(tolerance_rel=0.02)
    near = find_goodput(threshold_probe(capacity), start_rps=3.0, settings=settings, first_step=0.1)
    assert capacity * 0.98 <= near.goodput_rps <= capacity
    assert all(p.meets == (p.rate_rps <= capacity) for p in near.probes)


def test_a_close_guess_takes_fewer_probes_than_doubling_from_it():
    settings = SearchSettings(tolerance_rel=0.02)
    doubling = find_goodput(threshold_probe(3.1), start_rps=3.0, settings=settings)
    near = find_goodput(threshold_probe(3.1), start_rps=3.0, settings=settings, first_step=0.1)
    assert len(near.probes) <= len(doubling.probes) - 3


def test_no_rate_meeting_the_slo_from_a_close_guess_is_zero():
    assert find_goodput(threshold_probe(0.0), start_rps=1.0, settings=SearchSettings(),
                        first_step=0.1).goodput_rps == 0.0


def test_probes_come_back_sorted_by_rate():
    rates = [p.rate_rps for p in find_goodput(threshold_probe(5), start_rps=3, settings=SearchSettings()).probes]
    assert rates == sorted(rates)


def test_joint_attainment_counts_requests_meeting_both_clocks():
    """Marginals 0.5 and 0.5 but no request meets both: joint is 0, not 0.25 or 0.5."""
    slo = slo_from_flags(0.25, 0.1, 0.5)
    clocks = {"ttft": np.array([0.1, 0.9]), "tpot": np.array([0.9, 0.01]), "e2e": np.array([1.0, 1.0])}
    assert joint_attainment(slo, clocks) == 0.0


def test_saturated_probe_never_meets():
    slo = slo_from_flags(0.25, 0.1, 0.9)
    clocks = {"ttft": np.array([0.1]), "tpot": np.array([0.01]), "e2e": np.array([1.0])}
    assert not probe_from_clocks(3.0, slo, clocks, saturated=True).meets


def test_article_fixture_two_prefill_one_decode():
    """0x08C: 10 rps target, prefill 8 rps on 2 GPUs, decode 12 rps on 2 GPUs."""
    n_p, n_d = replicas_for(10, 8), replicas_for(10, 12)
    assert (n_p, n_d) == (2, 1)


def test_replicas_for_an_exact_multiple_is_not_rounded_up():
    assert replicas_for(12, 4) == 3


def test_grid_points_fill_the_curve_up_to_one_and_a_half_times_goodput():
    search = find_goodput(threshold_probe(4.0), start_rps=1.0,
                          settings=SearchSettings(tolerance_rel=0.01, grid_points=3))
    rates = {round(p.rate_rps, 9) for p in search.probes}
    g = search.goodput_rps
    assert {round(1.5 * g * k / 3, 9) for k in (1, 2, 3)} <= rates


def test_grid_points_never_move_the_goodput():
    settings = SearchSettings(tolerance_rel=0.01, grid_points=3)
    with_grid = find_goodput(threshold_probe(3.3), start_rps=1.0, settings=settings)
    without = find_goodput(threshold_probe(3.3), start_rps=1.0, settings=replace(settings, grid_points=0))
    assert len(with_grid.probes) > len(without.probes)
    assert with_grid.goodput_rps == pytest.approx(without.goodput_rps, rel=1e-12)
