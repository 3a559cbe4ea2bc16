"""The event clock: a binary heap of pending events merged with the sorted arrival stream.

The heap orders events by (time, priority << 56 | seq) and carries two payload ints, so
equal-time events run in a fixed order (priorities from :mod:`pdplan.sim.events`, then
insertion order) and results are deterministic. Arrivals are not pushed on the heap: they are a
sorted stream merged with it (:func:`next_event`); in a closed loop (``cl[0]`` = C clients) the
stream is written as it is read: the first C requests arrive when due (at 0 unless a rate paces
them) and each finish (or rejection) releases the next request at that instant, or when it is due
if later (:func:`release`), as ``vllm bench serve --max-concurrency`` (with ``--request-rate``)
does; due times rise in trace order and releases come in time order, so it stays sorted.

A run may stop early (``cl``'s stop rows, :mod:`.fields`): before each arrival at t, once more
requests are known to have missed the TTFT or the TPOT threshold than that clock allows, the loop
ends there (:func:`settled`). What is known at t depends only on the events before the arrival
(finishes are counted as they happen), so both engines stop at the same arrival.

Heap arrays: ``ht[i]`` event time; ``hi[0, i]`` priority << 56 | seq, ``hi[1, i]`` and
``hi[2, i]`` payload; ``hs[0]`` size, ``hs[1]`` next sequence number.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pdplan.sim.events import ARRIVAL
from pdplan.sim.fast.fields import (
    CL_CLIENTS,
    CL_JUDGED,
    CL_NEXT,
    CL_STOPPED,
    CL_TPOT_ALLOWED,
    CL_TPOT_MISSED,
    CL_TPOT_S,
    CL_TTFT_ALLOWED,
    CL_TTFT_MISSED,
    CL_TTFT_ROW,
    CL_TTFT_S,
    R_OUTPUT,
    T_ARRIVAL,
    T_DUE,
    T_FIRST,
)

_SEQ_BITS = 56  # heap key: priority << 56 | sequence number


@njit(cache=True)
def new_heap(capacity):
    return np.empty(capacity), np.empty((3, capacity), np.int64), np.zeros(2, np.int64)


@njit(cache=True, inline="always")
def _before(ht, hi, i, j):
    return ht[i] < ht[j] or (ht[i] == ht[j] and hi[0, i] < hi[0, j])


@njit(cache=True, inline="always")
def _swap(ht, hi, i, j):
    ht[i], ht[j] = ht[j], ht[i]
    for f in range(3):
        hi[f, i], hi[f, j] = hi[f, j], hi[f, i]


@njit(cache=True)
def push(ht, hi, hs, t, priority, a, b):
    """Add event (t, priority, a, b)."""
    i = hs[0]
    if i >= ht.shape[0]:
        raise RuntimeError("event heap overflow (capacity bound violated)")
    ht[i] = t
    hi[0, i] = (priority << _SEQ_BITS) | hs[1]
    hi[1, i] = a
    hi[2, i] = b
    hs[0] += 1
    hs[1] += 1
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(ht, hi, i, parent):
            break
        _swap(ht, hi, i, parent)
        i = parent


@njit(cache=True)
def pop(ht, hi, hs):
    """Remove the earliest event; returns (time, priority, a, b)."""
    t, key, a, b = ht[0], hi[0, 0], hi[1, 0], hi[2, 0]
    hs[0] -= 1
    n = hs[0]
    if n > 0:
        ht[0] = ht[n]
        for f in range(3):
            hi[f, 0] = hi[f, n]
        i = 0
        while True:
            child = 2 * i + 1
            if child >= n:
                break
            if child + 1 < n and _before(ht, hi, child + 1, child):
                child += 1
            if not _before(ht, hi, child, i):
                break
            _swap(ht, hi, i, child)
            i = child
    return t, key >> _SEQ_BITS, a, b


@njit(cache=True)
def release(rt, cl, t):
    """Closed loop: a request left the system at t, so its client sends the next one, now or when it is
    due (a rate-limited benchmark holds each request to its schedule)."""
    following = np.int64(cl[CL_NEXT])
    if cl[CL_CLIENTS] > 0 and following < rt.shape[1]:
        rt[T_ARRIVAL, following] = max(t, rt[T_DUE, following])
        cl[CL_NEXT] += 1


@njit(cache=True)
def finished(rq, rt, cl, r, t):
    """Request r finished at t (after its first token; a one-token request has no TPOT): a TPOT
    above the stop's threshold is a known miss."""
    if (t - rt[T_FIRST, r]) / (rq[R_OUTPUT, r] - 1) > cl[CL_TPOT_S]:
        cl[CL_TPOT_MISSED] += 1
    release(rt, cl, t)


@njit(cache=True)
def settled(rt, rejected, cl, t):
    """Whether the misses known before an arrival at t settle the run. TTFT: the requests whose
    window closed (t − arrival > the threshold) are judged in arrival order; one that was
    rejected, has no TTFT end yet (it can only end after t) or ended past the threshold missed.
    TPOT: the requests that finished above the threshold, and the rejected ones, counted as
    they happened (:func:`finished`, :func:`next_event`)."""
    row = np.int64(cl[CL_TTFT_ROW])
    if row >= 0:
        threshold = cl[CL_TTFT_S]
        p = np.int64(cl[CL_JUDGED])
        while p < rt.shape[1]:
            arrival = rt[T_ARRIVAL, p]
            if not t - arrival > threshold:
                break
            end = rt[row, p]
            if rejected[p] or np.isnan(end) or end - arrival > threshold:
                cl[CL_TTFT_MISSED] += 1
            p += 1
        cl[CL_JUDGED] = p
    return cl[CL_TTFT_MISSED] > cl[CL_TTFT_ALLOWED] or cl[CL_TPOT_MISSED] > cl[CL_TPOT_ALLOWED]


@njit(cache=True)
def next_event(rt, rejected, cl, ht, hi, hs, cursor):
    """The loop head both event loops share: the earliest of the next arrival and the heap's top.

    Returns (time, priority, a, b): an arrival is (its time, ARRIVAL, request, -1), a heap event
    its own; priority -1 when nothing is left (no arrival released, nothing pending) or the
    run stopped on its misses (:func:`settled`; ``cl`` then names the arrival it stopped at).
    ``cursor`` is (next arrival, events processed), updated here. A rejected arrival is not an
    event: it leaves at once (releasing its client's next request) and the head looks again.
    """
    n = rt.shape[1]
    while True:
        r = cursor[0]
        arriving = r < n and rt[T_ARRIVAL, r] < np.inf
        if not arriving and hs[0] == 0:
            return 0.0, np.int64(-1), np.int64(-1), np.int64(-1)
        if arriving and (hs[0] == 0 or rt[T_ARRIVAL, r] <= ht[0]):
            cursor[0] = r + 1
            if rejected[r]:
                cl[CL_TPOT_MISSED] += 1  # a rejected request fails every clock
                release(rt, cl, rt[T_ARRIVAL, r])
                continue
            if settled(rt, rejected, cl, rt[T_ARRIVAL, r]):
                cl[CL_STOPPED] = r
                return 0.0, np.int64(-1), np.int64(-1), np.int64(-1)
            cursor[1] += 1
            return rt[T_ARRIVAL, r], np.int64(ARRIVAL), r, np.int64(-1)
        cursor[1] += 1
        return pop(ht, hi, hs)
