"""Closed-form queueing estimates of TTFT (0x08B) that bracket and sanity-check simulation.

All rates are requests/s and times seconds. A formula returns ``inf`` at or beyond saturation,
where the queue grows without bound.
"""

from __future__ import annotations

import math

import numpy as np


def md1_ttft_s(rate_rps: float, service_s: float) -> float:
    """M/D/1 mean TTFT ``D + R·D² / (2(1 − R·D))`` (0x08B, DistServe's single-device form)."""
    rho = rate_rps * service_s
    if rho >= 1:
        return math.inf
    return service_s + rate_rps * service_s**2 / (2 * (1 - rho))


def mg1_ttft_s(rate_rps: float, mean_service_s: float, second_moment_s2: float) -> float:
    """M/G/1 mean TTFT by Pollaczek–Khinchine: ``E[S] + R·E[S²] / (2(1 − R·E[S]))`` (0x08B)."""
    rho = rate_rps * mean_service_s
    if rho >= 1:
        return math.inf
    return mean_service_s + rate_rps * second_moment_s2 / (2 * (1 - rho))


def inter_op_ttft_s(rate_rps: float, service_s: float) -> float:
    """Two-stage pipeline (inter-op) mean TTFT ``D + R·D² / (4(2 − R·D))`` (0x08B)."""
    if rate_rps * service_s >= 2:
        return math.inf
    return service_s + rate_rps * service_s**2 / (4 * (2 - rate_rps * service_s))


def intra_op_ttft_s(rate_rps: float, service_s: float, speedup: float) -> float:
    """Intra-op (tensor-parallel) mean TTFT with speedup K: ``D/K + R·D² / (2K(K − R·D))`` (0x08B)."""
    if rate_rps * service_s >= speedup:
        return math.inf
    return service_s / speedup + rate_rps * service_s**2 / (2 * speedup * (speedup - rate_rps * service_s))


def mg1_rate_for_mean_ttft(target_ttft_s: float, mean_service_s: float, second_moment_s2: float) -> float:
    """Largest Poisson rate whose P–K mean TTFT stays within ``target_ttft_s`` (0 if none).

    Solves ``E[S] + R·E[S²]/(2(1 − R·E[S])) = τ`` for R: with w = τ − E[S],
    ``R = 2w / (E[S²] + 2w·E[S])``. With E[S²] = D² it is the M/D/1 answer.
    """
    slack = target_ttft_s - mean_service_s
    if slack <= 0:
        return 0.0
    return 2 * slack / (second_moment_s2 + 2 * slack * mean_service_s)


def service_moments(service_times_s: np.ndarray) -> tuple[float, float]:
    """E[S] and E[S²] of a sample of service times (e.g. each prompt's prefill time)."""
    times = np.asarray(service_times_s, dtype=float)
    return float(times.mean()), float((times**2).mean())


def decode_saturation_rps(max_batch: int, step_time_s: float, mean_output_tokens: float) -> float:
    """Throughput of a decode instance kept at its largest batch: ``B / (step · (E[out] − 1))``.

    The first token comes from prefill, so a request spends ``E[out] − 1`` steps in decode; a
    request with one output token spends none (its rate is then unbounded by decode).
    """
    steps = mean_output_tokens - 1
    if steps <= 0:
        return math.inf
    return max_batch / (step_time_s * steps)
