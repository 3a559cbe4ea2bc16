"""What a trace looks like: lengths, rates, burstiness, prefix reuse."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from pdplan.workload.model import NO_ARRIVALS_HINT, Workload
from pdplan.workload.ticks import arrival_grid_s

PEAK_WINDOW_S = 60.0
"""Width of the sliding window behind ``TraceStats.peak_rate_rps``."""


@dataclass(frozen=True, kw_only=True)
class LengthStats:
    """Summary of a token-count column."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: int

    @classmethod
    def of(cls, tokens: np.ndarray) -> LengthStats:
        """Percentiles use numpy's default linear interpolation."""
        p50, p90, p99 = np.percentile(tokens, [50, 90, 99])
        return cls(mean=float(tokens.mean()), p50=float(p50), p90=float(p90), p99=float(p99),
                   max=int(tokens.max()))


@dataclass(frozen=True, kw_only=True)
class TraceStats:
    """What a trace looks like; arrival-based fields are None for a lengths-only trace.

    Definitions (n requests, arrivals a_0 <= ... <= a_{n-1}):

    - ``duration_s`` = a_{n-1} - a_0.
    - ``mean_rate_rps`` = n / duration_s (None when duration_s is 0).
    - ``peak_rate_rps``: the largest number of arrivals in any half-open window [t, t + 60 s),
      divided by 60 s.  A trace shorter than the window has no full window; then it is
      n / duration_s, the same as ``mean_rate_rps``.
    - ``interarrival_cv``: population standard deviation over mean of the n - 1 gaps
      a_{i+1} - a_i (None with fewer than 2 gaps or a zero mean gap).
    - ``arrival_grid_s``: the step of the grid the source's arrival times were rounded to
      (:func:`pdplan.workload.ticks.arrival_grid_s`: Mooncake's 3 s), recorded on a workload whose
      requests were spread over it; None for continuous times.
    - ``prefix_reuse_fraction``: a prefix block is reused when its hash id appeared in an
      earlier request (earlier in file order; repeats inside one request do not count);
      reused blocks / all blocks.  None without prefix hashes.
    """

    requests: int
    duration_s: float | None
    mean_rate_rps: float | None
    peak_rate_rps: float | None
    interarrival_cv: float | None
    prompt_tokens: LengthStats
    output_tokens: LengthStats
    prefix_reuse_fraction: float | None
    failed_requests: int
    format: str
    source: str | None
    has_arrivals: bool
    digest: str
    notes: tuple[str, ...] = field(default=())
    """Plain-language reasons for every None above, and other caveats."""
    arrival_grid_s: float | None = None
    """See the definitions above (the last key of ``to_dict``, added after the others)."""

    def to_dict(self) -> dict:
        """Plain dict for ``--json``; keys in the documented order."""
        result = asdict(self)
        result["notes"] = list(self.notes)
        return result


def trace_stats(workload: Workload) -> TraceStats:
    """Summarise a workload; see ``TraceStats`` for the exact definitions."""
    notes = []
    duration_s = mean_rate = peak_rate = cv = None
    grid = workload.arrival_grid_s or arrival_grid_s(workload.arrival_s)
    if workload.arrival_s is None:
        notes.append("no arrival times (lengths-only trace): duration_s, mean_rate_rps, "
                     f"peak_rate_rps and interarrival_cv are null; {NO_ARRIVALS_HINT}")
    else:
        arrival_s = workload.arrival_s
        duration_s = float(arrival_s[-1] - arrival_s[0])
        cv = interarrival_cv(arrival_s)
        if duration_s > 0:
            mean_rate = len(workload) / duration_s
            peak_rate = peak_rate_rps(arrival_s)
            if duration_s < PEAK_WINDOW_S:
                notes.append(f"trace spans {duration_s:.3g} s, shorter than the {PEAK_WINDOW_S:g} s "
                             "peak window: peak_rate_rps is requests / duration_s")
        else:
            notes.append("all arrivals fall at one instant: mean_rate_rps and peak_rate_rps are null")
        if cv is None:
            notes.append("fewer than 2 inter-arrival gaps or a zero mean gap: interarrival_cv is null")
        if grid is not None and workload.arrival_grid_s is None:
            notes.append(f"arrival times lie on a {grid:g} s grid, so interarrival_cv counts the requests that share "
                         "a time as simultaneous; replays spread each over its interval")
    reuse = prefix_reuse_fraction(workload)
    if workload.hash_values is None:
        notes.append("no prefix hashes: prefix_reuse_fraction is null")
    if workload.failed_requests:
        notes.append(f"{workload.failed_requests} failed requests (0 response tokens) in the source "
                     "were excluded from the workload")
    return TraceStats(
        requests=len(workload), duration_s=duration_s, mean_rate_rps=mean_rate,
        peak_rate_rps=peak_rate, interarrival_cv=cv, arrival_grid_s=grid,
        prompt_tokens=LengthStats.of(workload.prompt_tokens),
        output_tokens=LengthStats.of(workload.output_tokens),
        prefix_reuse_fraction=reuse, failed_requests=workload.failed_requests,
        format=workload.format, source=workload.source, has_arrivals=workload.has_arrivals,
        digest=workload.digest(), notes=tuple(notes))


def peak_rate_rps(arrival_s: np.ndarray, window_s: float = PEAK_WINDOW_S) -> float | None:
    """Most arrivals in any half-open window [t, t + window_s), per second.

    The busiest window can always start at an arrival, so it is max_i #{j : a_i <= a_j <
    a_i + window_s} / window_s.  For a trace shorter than the window: n / duration (None if 0).
    """
    duration_s = float(arrival_s[-1] - arrival_s[0])
    if duration_s < window_s:
        return arrival_s.size / duration_s if duration_s > 0 else None
    ends = np.searchsorted(arrival_s, arrival_s + window_s, side="left")
    return int((ends - np.arange(arrival_s.size)).max()) / window_s


def interarrival_cv(arrival_s: np.ndarray) -> float | None:
    """Population std / mean of the gaps between consecutive arrivals."""
    gaps = np.diff(arrival_s)
    if gaps.size < 2 or gaps.mean() <= 0:
        return None
    return float(gaps.std() / gaps.mean())


def prefix_reuse_fraction(workload: Workload) -> float | None:
    """Share of prefix blocks whose hash id appeared in an earlier request."""
    if workload.hash_values is None or workload.hash_values.size == 0:
        return None
    owner = np.repeat(np.arange(len(workload)), np.diff(workload.hash_offsets))
    _, first, inverse = np.unique(workload.hash_values, return_index=True, return_inverse=True)
    reused = owner[first][inverse] < owner
    return float(reused.mean())
