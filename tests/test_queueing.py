"""Closed forms of 0x08B, checked against hand arithmetic and against each other."""

import math

import pytest

from pdplan.queueing import (
    decode_saturation_rps,
    inter_op_ttft_s,
    intra_op_ttft_s,
    md1_ttft_s,
    mg1_rate_for_mean_ttft,
    mg1_ttft_s,
)


def test_md1_ttft_by_hand():
    """D = 0.1 s, R = 5 rps: ρ = 0.5, W_q = 5·0.01/(2·0.5) = 0.05 s."""
    assert md1_ttft_s(5, 0.1) == pytest.approx(0.15)


def test_md1_saturates_at_rho_one():
    assert md1_ttft_s(10, 0.1) == math.inf


def test_pk_with_deterministic_service_is_md1():
    assert mg1_ttft_s(5, 0.1, 0.01) == pytest.approx(md1_ttft_s(5, 0.1))


def test_pk_with_exponential_service_is_mm1():
    """E[S²] = 2E[S]² gives the M/M/1 mean sojourn 1/(μ − λ)."""
    assert mg1_ttft_s(5, 0.1, 0.02) == pytest.approx(1 / (10 - 5))


def test_inter_op_two_stage_by_hand():
    """D = 0.1, R = 10: 0.1 + 10·0.01/(4·(2 − 1)) = 0.125 s; M/D/1 would saturate."""
    assert inter_op_ttft_s(10, 0.1) == pytest.approx(0.125)
    assert md1_ttft_s(10, 0.1) == math.inf


def test_intra_op_with_speedup_one_is_md1():
    assert intra_op_ttft_s(4, 0.1, 1.0) == pytest.approx(md1_ttft_s(4, 0.1))


def test_intra_op_wins_at_low_rate_and_inter_op_near_capacity():
    """0x08B: low rate favours the shorter service (intra-op), high rate the pipeline."""
    d, k = 0.1, 1.5
    assert intra_op_ttft_s(1, d, k) < inter_op_ttft_s(1, d)
    assert inter_op_ttft_s(14, d) < intra_op_ttft_s(14, d, k)


def test_rate_for_mean_ttft_inverts_pk():
    rate = mg1_rate_for_mean_ttft(0.25, 0.1, 0.015)
    assert mg1_ttft_s(rate, 0.1, 0.015) == pytest.approx(0.25)


def test_no_rate_meets_a_target_below_the_service_time():
    assert mg1_rate_for_mean_ttft(0.05, 0.1, 0.01) == 0.0


def test_decode_saturation_counts_output_minus_one_steps():
    """Batch 32 at 50 ms per step, 101 output tokens: 32 / (0.05·100) = 6.4 rps."""
    assert decode_saturation_rps(32, 0.05, 101) == pytest.approx(6.4)
