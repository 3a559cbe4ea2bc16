"""Traces whose arrival times were rounded to a coarse grid, and how they are replayed.

Mooncake's published conversation trace (kvcache-ai/Mooncake, FAST '25 release) gives its 12,031
arrivals at 1,180 distinct times 3 s apart: every request shares its timestamp with about ten others.
Replayed as written, each grid point is a burst of simultaneous arrivals that the traffic never had
(the inter-arrival CV reads 3.0 where the traffic's is about 1), and a prefill instance is sized for
bursts of ten prompts at once. The trace only says in which 3 s interval a request came, so
:func:`spread_over_grid` places it uniformly at random within that interval: for Poisson traffic
this restores the arrival process exactly (given k arrivals in an interval, a Poisson process
places them as k independent uniform points in it), and for any traffic it keeps what the trace
does record, the number of requests per interval and their order.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from pdplan.workload.model import Workload

TIED_SHARE = 0.5
"""A grid is declared only when at least this share of the requests shares its arrival time with
another: a trace with continuous times (Azure's microseconds) has almost no ties, and a whole-second
trace at a low rate has too few for rounding to matter."""

GRID_TOLERANCE = 0.01
"""Every gap between distinct arrival times must be a whole number of grid steps within this share
of a step per step (Mooncake's 3 s steps run 2,997 to 3,003 ms)."""


def arrival_grid_s(arrival_s: np.ndarray | None) -> float | None:
    """The step of the grid the arrival times were rounded to, or None when they were not.

    The step is the median of the gaps between distinct times that are shorter than 1.5 times the
    shortest (the gaps of one step); a grid needs most requests to share their time
    (``TIED_SHARE``) and every gap to be whole steps (``GRID_TOLERANCE``)."""
    if arrival_s is None or arrival_s.size < 2:
        return None
    times, counts = np.unique(arrival_s, return_counts=True)
    if times.size < 2 or counts[counts > 1].sum() < TIED_SHARE * arrival_s.size:
        return None
    gaps = np.diff(times)
    step = float(np.median(gaps[gaps < 1.5 * gaps.min()]))
    steps = np.maximum(np.round(gaps / step), 1.0)
    if np.any(np.abs(gaps / step - steps) > GRID_TOLERANCE * steps):
        return None
    return step


def spread_over_grid(workload: Workload, seed: int) -> Workload:
    """``workload`` with each request moved to a uniformly random point of its grid interval
    [t, t + step) (cut at the next distinct time, so the order holds), the requests of one interval
    kept in trace order; the step is recorded as ``arrival_grid_s``. The same workload when its
    arrivals lie on no grid (:func:`arrival_grid_s`). ``seed`` draws the points."""
    step = arrival_grid_s(workload.arrival_s)
    if step is None:
        return workload
    arrival_s = workload.arrival_s
    times, group = np.unique(arrival_s, return_inverse=True)
    width = np.minimum(np.append(np.diff(times), step), step)[group]
    offsets = np.random.default_rng(seed).uniform(0.0, 1.0, arrival_s.size) * width
    # arrivals are non-decreasing, so each interval's requests are contiguous: sorting the offsets
    # within each interval keeps them in trace order
    spread = arrival_s + offsets[np.lexsort((offsets, group))]
    return replace(workload, arrival_s=spread, arrival_grid_s=step)
