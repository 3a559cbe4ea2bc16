"""Goodput: the highest request rate at which every SLO objective still holds (0x08C, 0x0A).

The search is separate from the simulation: :func:`find_goodput` bisects over any ``probe``
function that simulates one rate and reports attainment, so it can be tested against closed
forms and reused for prefill, decode and colocated instances alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from pdplan.slo import SLO, attainment


@dataclass(frozen=True, kw_only=True)
class Probe:
    """One simulated rate: attainment per clock, joint attainment, and the verdict."""

    rate_rps: float
    attainment_ttft: float | None   #: share meeting the tightest TTFT threshold (None: no TTFT objective)
    attainment_tpot: float | None
    attainment_joint: float         #: share meeting every clock's tightest threshold on the same request
    meets: bool                     #: every objective holds and the instance is not saturated
    saturated: bool = False         #: offered rate above what the instance can drain


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How hard to look: bisection tolerance, probe budget and probe size."""

    tolerance_rel: float = 0.02     #: stop when (hi − lo) ≤ tolerance_rel · hi
    max_probes: int = 40
    requests_per_probe: int = 2000
    arrivals: str = "trace"         #: "trace" (rescaled, burst shape kept) or "poisson"
    seed: int = 0

    def __post_init__(self):
        if not 0 < self.tolerance_rel < 1:
            raise ValueError("tolerance_rel must be in (0, 1)")
        if self.max_probes < 2 or self.requests_per_probe < 1:
            raise ValueError("max_probes must be >= 2 and requests_per_probe >= 1")
        if self.arrivals not in ("trace", "poisson"):
            raise ValueError("arrivals must be 'trace' or 'poisson'")


@dataclass(frozen=True, kw_only=True)
class Search:
    """The answer and every probe that led to it, sorted by rate (the attainment curve)."""

    goodput_rps: float
    probes: tuple[Probe, ...]


def probe_from_clocks(rate_rps: float, slo: SLO, clocks: dict[str, np.ndarray],
                      saturated: bool = False) -> Probe:
    """Judge per-request clocks (``{"ttft": s, "tpot": s, "e2e": s}``, NaN = no such clock)."""
    meets = not saturated and all(
        attainment(clocks[o.metric], o.threshold_s) >= o.attainment for o in slo.objectives)
    return Probe(
        rate_rps=rate_rps,
        attainment_ttft=_clock_attainment(slo, clocks, "ttft"),
        attainment_tpot=_clock_attainment(slo, clocks, "tpot"),
        attainment_joint=joint_attainment(slo, clocks),
        meets=meets,
        saturated=saturated,
    )


def _clock_attainment(slo: SLO, clocks: dict[str, np.ndarray], metric: str) -> float | None:
    threshold = slo.threshold_s(metric)
    return None if threshold is None else attainment(clocks[metric], threshold)


def joint_attainment(slo: SLO, clocks: dict[str, np.ndarray]) -> float:
    """Share of requests meeting every clock's tightest threshold at once (0x0A).

    Counted per request, never inferred from the marginals; it is at most their minimum.
    """
    ok = None
    for metric in ("ttft", "tpot", "e2e"):
        threshold = slo.threshold_s(metric)
        if threshold is None:
            continue
        values = np.asarray(clocks[metric], dtype=float)
        passed = np.isnan(values) | (values <= threshold)
        ok = passed if ok is None else ok & passed
    return float("nan") if ok is None or len(ok) == 0 else float(ok.mean())


def find_goodput(probe: Callable[[float], Probe], *, start_rps: float,
                 settings: SearchSettings) -> Search:
    """g = max{λ : a(λ) meets every objective} by expansion then bisection (0x08C).

    Starts at ``start_rps`` (the queueing bracket), doubles while the rate still meets the SLO,
    then bisects between the last rate that met it and the first that did not. The answer is
    always a rate that was simulated and met the SLO (0 when none did), so it never overstates.
    """
    if not start_rps > 0:
        raise ValueError("start_rps must be > 0")
    probes: dict[float, Probe] = {}

    def run(rate: float) -> Probe:
        if rate not in probes:
            probes[rate] = probe(rate)
        return probes[rate]

    lo, hi = 0.0, start_rps
    while run(hi).meets and len(probes) < settings.max_probes:
        lo, hi = hi, 2 * hi
    if run(hi).meets:  # probe budget spent while still meeting: report the best verified rate
        lo = hi
    while hi - lo > settings.tolerance_rel * hi and len(probes) < settings.max_probes:
        mid = (lo + hi) / 2
        if run(mid).meets:
            lo = mid
        else:
            hi = mid
    return Search(goodput_rps=lo, probes=tuple(probes[r] for r in sorted(probes)))


def system_goodput(prefill_rps: float, prefill_replicas: int, decode_rps: float,
                   decode_replicas: int) -> float:
    """``min(n_p · g_p, n_d · g_d)``: the smaller phase pool bottlenecks the system (0x08C)."""
    return min(prefill_replicas * prefill_rps, decode_replicas * decode_rps)


def replicas_for(target_rps: float, goodput_rps: float) -> int:
    """``n = ceil(R_target / g)`` replicas of one configuration (0x08C)."""
    if goodput_rps <= 0:
        raise ValueError("an instance with zero goodput cannot serve any target")
    return math.ceil(target_rps / goodput_rps - 1e-12)


def per_gpu(system_rps: float, gpus_total: int) -> float:
    """Goodput per GPU divides by all GPUs in both pools (0x0A)."""
    return system_rps / gpus_total


def mixed_pool_goodput(prompt_machines: int, prompt_rps: float, token_machines: int, token_rps: float,
                       borrowed: int, mixed_rps: float) -> float:
    """Splitwise mixed pool ``min((N_P − b)g_P + b·g_M, N_T·g_T + b·g_M)`` (0x08G).

    A borrowed prompt machine runs both phases of its own requests, so its mixed rate g_M counts
    once on each side; it is not a second machine (2×6, 2×4, b = 1, g_M = 4 → 10 rps, from 8).
    """
    if not 0 <= borrowed <= prompt_machines:
        raise ValueError("borrowed must be between 0 and the prompt machines")
    return min((prompt_machines - borrowed) * prompt_rps + borrowed * mixed_rps,
               token_machines * token_rps + borrowed * mixed_rps)
