"""The routers: which instance takes a request, among those taking new requests now.

Prefill: fewest pending prompt tokens (Splitwise JSQ); decode: smallest routed KV load per
capacity; colocated and mixed: fewest outstanding tokens; ties go to the lowest index. An
instance takes new requests inside its availability intervals (CSR: pointers, then
[from, until) rows); when none does, the router chooses among all.

Decode and colocated instances are the lead columns of ``di`` (see :mod:`.fields`): the router
sees an instance's load (its ranks' and what is on its way to them) against its ranks' KV
together, and a request fits an instance when it fits one rank. Inside an instance the rank is
picked by :func:`pdplan.sim.fast.batch.pick_rank`.
"""

from __future__ import annotations

from numba import njit

from pdplan.sim.fast.fields import D_CAP, D_DP, D_LEAD, D_LOAD, P_PENDING


@njit(cache=True)
def _available(av_ptr, av_t, i, t):
    """Whether instance i takes new requests at t: t lies in one of its intervals [from, until)."""
    for k in range(av_ptr[i], av_ptr[i + 1]):
        if av_t[0, k] <= t < av_t[1, k]:
            return True
    return False


@njit(cache=True)
def pick_prefill(pi, pav_ptr, pav_t, t):
    """The prefill instance taking requests at t with the fewest pending prompt tokens (ties →
    lowest; none taking requests: any)."""
    p = -1
    for rule in range(2):
        for i in range(pi.shape[1]):
            if (rule == 1 or _available(pav_ptr, pav_t, i, t)) and (p < 0 or pi[P_PENDING, i] < pi[P_PENDING, p]):
                p = i
        if p >= 0:
            break
    return p


@njit(cache=True)
def least_loaded(di, need, av_ptr, av_t, t, lo, hi):
    """Instance in [lo, hi) (hi < 0: to the end) with the smallest load/capacity among those
    taking requests at t that can hold ``need`` (ties → lowest); when none takes requests, among
    all that can hold it; -1 when none can."""
    best = -1
    end = di.shape[1] if hi < 0 else hi
    for rule in range(2):
        for i in range(lo, end):
            if di[D_LEAD, i] != i or di[D_CAP, i] < need or (rule == 0 and not _available(av_ptr, av_t, i, t)):
                continue
            if best < 0 or di[D_LOAD, i] * (di[D_CAP, best] * di[D_DP, best]) < \
                    di[D_LOAD, best] * (di[D_CAP, i] * di[D_DP, i]):
                best = i
        if best >= 0:
            return best
    return best


@njit(cache=True)
def least_outstanding(di, need, av_ptr, av_t, t, lo):
    """Colocated routing over instances [lo, end): fewest outstanding tokens among those taking
    requests that can hold ``need`` (ties → lowest); when none takes requests, among all."""
    c = -1
    for rule in range(2):
        for i in range(lo, di.shape[1]):
            if di[D_LEAD, i] == i and di[D_CAP, i] >= need and (rule == 1 or _available(av_ptr, av_t, i, t)) and \
                    (c < 0 or di[D_LOAD, i] < di[D_LOAD, c]):
                c = i
        if c >= 0:
            break
    return c
