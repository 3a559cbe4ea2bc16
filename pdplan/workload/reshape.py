"""Arrival transforms: rescaling, subsets, windows and new arrival processes for a trace.

Randomness always comes from an explicit ``numpy.random.Generator`` (or an int seed for
``numpy.random.default_rng``); nothing here touches global random state.
"""

from __future__ import annotations

import math

import numpy as np

from pdplan.errors import InternalError, PdplanError
from pdplan.workload.model import Rows, Workload, require_arrivals


def generator(rng: np.random.Generator | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if rng < 0:
            raise PdplanError(f"seed must be an integer >= 0, got {int(rng)}", field="seed")
        return np.random.default_rng(int(rng))
    raise InternalError("rng must be a numpy.random.Generator or an int seed")


def positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise PdplanError(f"{name} must be a finite number > 0, got {value!r}", field=name)
    return float(value)


def rescale_rate(workload: Workload, rate_rps: float) -> Workload:
    """Scale every inter-arrival gap by one factor so that ``mean_rate_rps`` becomes ``rate_rps``.

    The burst shape (inter-arrival CV, relative order) is kept; the first arrival stays put.
    """
    rate_rps = positive("rate_rps", rate_rps)
    arrival_s = require_arrivals(workload, "rescale arrivals")
    if float(arrival_s[-1] - arrival_s[0]) <= 0:
        raise PdplanError(f"cannot rescale: all {len(workload)} arrivals fall at one instant",
                          file=workload.source, field="arrival_s")
    return replaced(workload, arrival_s=rescaled_arrivals(arrival_s, rate_rps))


def rescaled_arrivals(arrival_s: np.ndarray, rate_rps: float) -> np.ndarray:
    """Arrivals with every gap scaled by one factor so the mean rate n / (last − first) becomes
    ``rate_rps``; the first arrival stays put. Needs at least two distinct arrival times."""
    factor = arrival_s.size / (rate_rps * float(arrival_s[-1] - arrival_s[0]))
    return arrival_s[0] + (arrival_s - arrival_s[0]) * factor


def replaced(workload: Workload, *, rows: Rows | None = None, **fields: object) -> Workload:
    """A new workload with ``rows`` (default: the same requests) and ``fields`` changed."""
    rows = Rows.of(workload) if rows is None else rows
    base = {"source": workload.source, "format": workload.format,
            "block_tokens": workload.block_tokens}
    merged = {**rows.__dict__, **base, **fields}
    return Workload(**merged)


def head(workload: Workload, n: int) -> Workload:
    """The first ``n`` requests, in trace order (all of them when the trace is shorter)."""
    if n >= len(workload):
        return workload
    return replaced(workload, rows=Rows.of(workload).take(np.arange(n)))


def repeat(workload: Workload, times: int) -> Workload:
    """The trace ``times`` times back to back, so a short trace can stand for a longer stretch
    of the same traffic. Copy k arrives k × (span + one mean gap) later, which keeps the trace's
    mean rate and burst shape across the seams. Request ids get a ``#k`` suffix (k ≥ 1). Prefix-hash
    ids are renumbered per copy: a repeat must not invent prefix reuse the trace never had."""
    if not (isinstance(times, int) and times >= 1):
        raise InternalError("times must be an integer >= 1")
    if times == 1:
        return workload
    rows = Rows.of(workload).take(np.tile(np.arange(len(workload)), times))
    copy = np.repeat(np.arange(times), len(workload))
    fields = {}
    if workload.arrival_s is not None:
        arrival_s = workload.arrival_s
        period = float(arrival_s[-1] - arrival_s[0]) * len(workload) / max(len(workload) - 1, 1)
        fields["arrival_s"] = rows.arrival_s + copy * period
    if workload.request_id is not None:
        fields["request_id"] = np.array([rid if k == 0 else f"{rid}#{k}" for rid, k in zip(rows.request_id, copy)],
                                        dtype=object)
    if workload.hash_values is not None:
        distinct, dense = np.unique(workload.hash_values, return_inverse=True)
        per_block = np.repeat(copy, np.diff(rows.hash_offsets))
        fields["hash_values"] = np.tile(dense.astype(np.int64), times) + per_block * distinct.size
    return replaced(workload, rows=rows, **fields)


def thin(workload: Workload, n: int, *, rng: np.random.Generator | int) -> Workload:
    """``n`` requests drawn uniformly without replacement, kept in trace order (all of them when
    the trace is shorter): the trace's rate over time survives, at 1/k of its density."""
    if n >= len(workload):
        return workload
    keep = np.sort(generator(rng).choice(len(workload), size=n, replace=False))
    return replaced(workload, rows=Rows.of(workload).take(keep))


def stretch(workload: Workload, n: int, *, rng: np.random.Generator | int) -> Workload:
    """``n`` consecutive requests from a start drawn uniformly (all of them when the trace is
    shorter): the trace's reuse between nearby requests survives, which :func:`thin` dilutes."""
    if n >= len(workload):
        return workload
    start = int(generator(rng).integers(0, len(workload) - n + 1))
    return replaced(workload, rows=Rows.of(workload).take(np.arange(start, start + n)))


def poisson_resample(workload: Workload, *, rng: np.random.Generator | int, window: int = 16) -> Workload:
    """The trace's requests on new Poisson arrivals that follow the trace's own rate over time.

    The arrivals are cut into windows of ``window`` consecutive requests. Each request lands in a
    window with probability proportional to the window's count and at a uniform time inside it:
    a Poisson process whose rate is the trace's windowed rate, conditioned on the same total.
    Bursts longer than a window survive; the order inside one is redrawn. Lengths (and prefix
    hashes) stay in trace order; the span and mean rate are the trace's.
    """
    arrival_s = require_arrivals(workload, "resample arrivals")
    n = len(workload)
    edges_at = np.unique(np.append(np.arange(0, n, window), n - 1))
    edges = arrival_s[edges_at]
    counts = np.diff(edges_at).astype(float)
    counts[-1] += 1  # the last window also holds the last arrival
    draw = generator(rng)
    which = draw.choice(len(counts), size=n, p=counts / counts.sum()) if len(counts) else np.zeros(n, int)
    width = np.diff(edges) if len(edges) > 1 else np.zeros(1)
    times = np.sort(edges[which] + draw.random(n) * width[which])
    return replaced(workload, arrival_s=times)


def window(workload: Workload, *, start_s: float = 0.0, duration_s: float = math.inf) -> Workload:
    """Requests arriving in [start_s, start_s + duration_s), both measured from the first arrival.

    Arrivals are shifted so that the window opens at 0.
    """
    if not (math.isfinite(start_s) and start_s >= 0):
        raise PdplanError(f"start_s must be a finite number >= 0, got {start_s!r}", field="start_s")
    if not duration_s > 0:
        raise PdplanError(f"duration_s must be > 0, got {duration_s!r}", field="duration_s")
    arrival_s = require_arrivals(workload, "select a time window")
    offset = arrival_s - arrival_s[0]
    keep = np.flatnonzero((offset >= start_s) & (offset < start_s + duration_s))
    if keep.size == 0:
        raise PdplanError(f"window [{start_s:g}, {start_s + duration_s:g}) s holds no requests; the "
                          f"trace spans {offset[-1]:g} s", file=workload.source)
    rows = Rows.of(workload).take(keep)
    return replaced(workload, rows=rows, arrival_s=offset[keep] - start_s)


def gamma_arrivals(n: int, *, rate_rps: float, cv: float, rng: np.random.Generator | int) -> np.ndarray:
    """n arrival times starting at 0 with i.i.d. Gamma gaps of mean 1/rate_rps and the given CV.

    Gamma shape 1/cv**2, scale cv**2/rate_rps; cv = 1 is a Poisson process.  Times are
    rounded to whole microseconds (rounding keeps them non-decreasing), so written traces stay
    short and reload exactly.
    """
    if not (isinstance(n, int) and n >= 1):
        raise PdplanError(f"number of requests must be an integer >= 1, got {n!r}", field="n")
    rate_rps, cv = positive("rate_rps", rate_rps), positive("cv", cv)
    gaps = generator(rng).gamma(shape=1.0 / cv**2, scale=cv**2 / rate_rps, size=n - 1)
    times = np.zeros(n, dtype=np.float64)
    np.cumsum(gaps, out=times[1:])
    return np.round(times, 6)


def diurnal_arrivals(n: int, *, rate_rps: float, swing: float, period_s: float, cv: float = 1.0,
                     rng: np.random.Generator | int) -> np.ndarray:
    """n arrivals whose rate follows a day curve: λ(t) = mean · (1 − a·cos(2πt / period)), lowest at
    t = 0 (night), highest half a period later, with a = (swing − 1)/(swing + 1) so that the peak
    is ``swing`` times the trough. Gamma(cv) arrivals of unit rate are mapped through the inverse
    of the cumulative rate Λ(t) (time rescaling), so burstiness within the curve is ``cv``'s."""
    if not (math.isfinite(swing) and swing >= 1):
        raise PdplanError(f"swing (peak over trough) must be a finite number >= 1, got {swing!r}", field="swing")
    rate_rps, period_s = positive("rate_rps", rate_rps), positive("period_s", period_s)
    unit = gamma_arrivals(n, rate_rps=1.0, cv=cv, rng=rng)
    a = (swing - 1) / (swing + 1)
    span = unit[-1] / rate_rps + period_s  # Λ grows at least (1 − a)·mean, so this reaches the last arrival
    grid = np.linspace(0.0, span / (1 - a), 1 + int(4096 * span / period_s) + 1024)
    cumulative = rate_rps * (grid - a * period_s / (2 * math.pi) * np.sin(2 * math.pi * grid / period_s))
    return np.round(np.interp(unit, cumulative, grid), 6)


def poisson_arrivals(n: int, *, rate_rps: float, rng: np.random.Generator | int) -> np.ndarray:
    """n Poisson arrival times at ``rate_rps`` starting at 0 (Gamma gaps with CV 1 are exponential)."""
    return gamma_arrivals(n, rate_rps=rate_rps, cv=1.0, rng=rng)


def replace_arrivals(workload: Workload, *, rate_rps: float, cv: float = 1.0, n_requests: int | None = None,
                     rng: np.random.Generator | int) -> Workload:
    """A new arrival process (Poisson for cv = 1, else Gamma) with lengths from the trace.

    Draws ``n_requests`` (default: as many as the trace) rows with replacement, then the
    arrival gaps, both from ``rng``.  Prefix hashes travel with their rows; request ids are
    dropped because resampled rows repeat.  Works on lengths-only traces.
    """
    rng = generator(rng)
    n = len(workload) if n_requests is None else n_requests
    if not (isinstance(n, int) and n >= 1):
        raise PdplanError(f"n_requests must be an integer >= 1, got {n!r}", field="n_requests")
    rows = Rows.of(workload).take(rng.integers(0, len(workload), size=n))
    rows = Rows(**{**rows.__dict__, "request_id": None})
    return replaced(workload, rows=rows, arrival_s=gamma_arrivals(n, rate_rps=rate_rps, cv=cv, rng=rng))
