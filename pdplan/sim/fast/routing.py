"""The routers: which instance takes a request, among those taking new requests now.

Prefill: the plan's router (:func:`pick_prefill`); decode: smallest routed KV load per
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

from pdplan.sim.fast.fields import (
    D_CAP,
    D_DP,
    D_LEAD,
    D_LOAD,
    P_LENT,
    P_LRU_CAP,
    P_PENDING,
    P_TIER_CAP,
    R_PROMPT,
    ROUTER_CACHE_AWARE,
    ROUTER_ROUND_ROBIN,
)
from pdplan.sim.fast.prefix import leading_blocks


@njit(cache=True)
def available(av_ptr, av_t, i, t):
    """Whether instance i takes new requests at t: t lies in one of its intervals [from, until)."""
    for k in range(av_ptr[i], av_ptr[i + 1]):
        if av_t[0, k] <= t < av_t[1, k]:
            return True
    return False


@njit(cache=True)
def pick_prefill(pi, pav_ptr, pav_t, t, router, rr, plru, hash_vals, hash_ptr, n_hash, block_tokens, rq, r):
    """The prefill instance request r goes to, among those taking requests at t (none taking
    requests: any), by the plan's router: least loaded (fewest pending prompt tokens), round robin
    (the next in turn after ``rr[0]``, which advances), or cache-aware (fewest pending tokens plus
    the prompt tokens its prefix cache would leave to compute: the queue and the recompute of the
    cache-aware cost, both in prompt tokens; loads from a second tier are not priced). Ties go to
    the lowest index. An instance lent to decode (:mod:`.borrowing`) takes no prompts; one always
    stays."""
    n_p = pi.shape[1]
    prompt = rq[R_PROMPT, r]
    p = -1
    for rule in range(2):
        best = 0
        for step in range(n_p):
            i = (rr[0] + step) % n_p if router == ROUTER_ROUND_ROBIN else step
            if pi[P_LENT, i] == 1 or (rule == 0 and not available(pav_ptr, pav_t, i, t)):
                continue
            if router == ROUTER_ROUND_ROBIN:
                p = i
                break
            cost = pi[P_PENDING, i]
            if router == ROUTER_CACHE_AWARE and n_hash > 0 and pi[P_LRU_CAP, i] + pi[P_TIER_CAP, i] > 0:
                k = leading_blocks(plru, i, hash_vals, hash_ptr, r)
                cost += prompt - min(k * block_tokens, prompt - 1)
            if p < 0 or cost < best:
                p = i
                best = cost
        if p >= 0:
            break
    if router == ROUTER_ROUND_ROBIN:
        rr[0] = p + 1
    return p


@njit(cache=True)
def predicted_ttft_s(pending, cap, batch_s, own_s):
    """Mooncake's early-rejection test predicts a request's TTFT at admission from the queue it
    joins (article 0x09I: reject when the predicted TTFT misses the SLO, before spending prompt
    compute). The predictor here: the ``pending`` prompt tokens ahead drain ``cap`` tokens per
    ``batch_s`` (:func:`pdplan.sim.layout.batch_drain_s`), then its own prefill of ``own_s``."""
    return pending / cap * batch_s + own_s


@njit(cache=True)
def least_loaded(di, need, av_ptr, av_t, t, lo, hi):
    """Instance in [lo, hi) (hi < 0: to the end) with the smallest load/capacity among those
    taking requests at t that can hold ``need`` (ties → lowest); when none takes requests, among
    all that can hold it; -1 when none can."""
    best = -1
    end = di.shape[1] if hi < 0 else hi
    for rule in range(2):
        for i in range(lo, end):
            if di[D_LEAD, i] != i or di[D_CAP, i] < need or (rule == 0 and not available(av_ptr, av_t, i, t)):
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
            if di[D_LEAD, i] == i and di[D_CAP, i] >= need and (rule == 1 or available(av_ptr, av_t, i, t)) and \
                    (c < 0 or di[D_LOAD, i] < di[D_LOAD, c]):
                c = i
        if c >= 0:
            break
    return c
