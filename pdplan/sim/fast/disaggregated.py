"""The disaggregated event loop: prefill instances feeding decode (and mixed) instances over KV links."""

from __future__ import annotations

import numpy as np
from numba import njit

from pdplan.sim.events import ARRIVAL, KV_VISIBLE, PREFILL_DONE, PREFILL_FREE, PULL, TRANSFER_FAILED
from pdplan.sim.fast.batch import append, decode_boundary, next_boundary, pick_rank, queue_and_wake
from pdplan.sim.fast.borrowing import give_back, release_held, spill_column, stale
from pdplan.sim.fast.clock import new_heap, next_event, push, release
from pdplan.sim.fast.colocated import colo_arrive, mixed_boundary
from pdplan.sim.fast.fields import (
    CL_TPOT_MISSED,
    D_K_HEAD,
    D_K_TAIL,
    D_LOAD,
    D_MIXED,
    D_OUT,
    D_RUN_K,
    D_VERSION,
    D_W_HEAD,
    D_W_TAIL,
    P_CAP,
    P_DP,
    P_FREE_PENDING,
    P_LENT,
    P_LRU_CAP,
    P_LRU_HEAD,
    P_M_GROUP,
    P_MAX_RUN,
    P_MODEL,
    P_PENDING,
    P_PP,
    P_RANK0,
    P_ROOM_RANK,
    P_TIER_CAP,
    P_TIER_HEAD,
    Q_HEAD,
    Q_OUT,
    Q_TAIL,
    R_CACHED,
    R_D_INST,
    R_D_RANK,
    R_FAILS,
    R_LOADED,
    R_OUTPUT,
    R_P_INST,
    R_PROMPT,
    R_Q_NEXT,
    R_RANK,
    R_REFUSED,
    R_ROOM,
    T_P_END,
    T_P_START,
)
from pdplan.sim.fast.latency import group_s, latency_s
from pdplan.sim.fast.links import book_transfer, start_pull
from pdplan.sim.fast.prefix import peek, reuse
from pdplan.sim.fast.routing import least_loaded, least_outstanding, pick_prefill, predicted_ttft_s


@njit(cache=True)
def _enqueue_prefill(rq, pi, pq, pf, plru, hash_vals, hash_ptr, n_hash, block_tokens, ht, hi, hs, r, t, p):
    """Queue request r at a rank of prefill instance p (fewest outstanding requests, ties to the
    lowest: :func:`pdplan.sim.fast.batch.pick_rank`'s rule; on an instance that routes by room, its
    bootstrap room modulo DP); an idle first stage forms its batch
    after every arrival at this instant. The instance's prefix cache is consulted as the request
    reaches it (:func:`.prefix.reuse`): its hit is not computed."""
    if n_hash > 0 and pi[P_LRU_CAP, p] + pi[P_TIER_CAP, p] > 0:
        cached, loaded = reuse(plru, p, pi, np.int64(P_LRU_HEAD), np.int64(P_TIER_HEAD), p, hash_vals, hash_ptr,
                               block_tokens, rq[R_PROMPT, r], r)
        rq[R_CACHED, r] = cached
        rq[R_LOADED, r] = loaded
    pi[P_PENDING, p] += rq[R_PROMPT, r] - rq[R_CACHED, r]
    rq[R_P_INST, r] = p
    k = pi[P_RANK0, p]
    if pi[P_ROOM_RANK, p]:
        k += rq[R_ROOM, r] % pi[P_DP, p]
    else:
        for j in range(k + 1, k + pi[P_DP, p]):
            if pq[Q_OUT, j] < pq[Q_OUT, k]:
                k = j
    pq[Q_OUT, k] += 1
    rq[R_RANK, r] = k
    append(rq, pq, k, r, Q_HEAD, Q_TAIL, R_Q_NEXT)
    if pf[p, 1] <= t and pi[P_FREE_PENDING, p] == 0:
        pi[P_FREE_PENDING, p] = 1
        push(ht, hi, hs, t, np.int64(PREFILL_FREE), p, np.int64(-1))


@njit(cache=True)
def _rejects_early(rq, pi, pload, pbatch, plru, hash_vals, hash_ptr, n_hash, block_tokens, tab_i, pieces, r, p,
                   reject_s):
    """Whether request r, routed to prefill instance p, is rejected at admission: its predicted
    TTFT (:func:`.routing.predicted_ttft_s`, with what p's prefix cache would give it) is above
    ``reject_s``."""
    prompt = rq[R_PROMPT, r]
    cached, loaded = 0, 0
    if n_hash > 0 and pi[P_LRU_CAP, p] + pi[P_TIER_CAP, p] > 0:
        cached, loaded = peek(plru, p, hash_vals, hash_ptr, block_tokens, prompt, r)
    own = latency_s(tab_i, pieces, pi[P_MODEL, p], np.int64(1), float(prompt - cached),
                    float(prompt) ** 2 - float(cached) ** 2) + loaded * pload[p]
    return predicted_ttft_s(pi[P_PENDING, p], pi[P_CAP, p], pbatch[p], own) > reject_s


@njit(cache=True)
def _start_prefill(rq, rt, pi, pq, pf, pload, bi, bt, tab_i, pieces, ht, hi, hs, p, t, b):
    """Start batch number b on prefill instance p at t if its first stage is free and work is
    queued; returns True if it did.

    FCFS under the token cap without reordering: each rank takes its queued prompts while the
    tokens to compute stay within the cap; a first prompt longer than the cap runs alone. A prompt
    whose leading c tokens were cached computes the rest against them: its l − c tokens count
    toward the batch and its attention the (l² − c²) pairs of the whole prompt it adds (as a
    chunk after c); tokens hit in the second tier are loaded first, ``pload`` seconds each. The ranks run
    together and the batch lasts the longest rank's prefill; its requests are the ranks' runs
    chained in rank order. With PP = k the batch passes k stages of latency/k each, one batch per
    stage at a time, so up to k batches are in flight. With a group part g each rank's prefill drops
    by g(DP × its tokens) and the batch adds g(the ranks' tokens summed).
    """
    if pf[p, 1] > t:
        return False
    cap = pi[P_CAP, p]
    g = pi[P_M_GROUP, p]
    dp = pi[P_DP, p]
    first = -1
    last = -1
    n = 0
    tokens = np.int64(0)
    found = False
    duration = -1.0
    for k in range(pi[P_RANK0, p], pi[P_RANK0, p] + pi[P_DP, p]):
        head = pq[Q_HEAD, k]
        if head < 0:
            continue
        r = head
        taken = head
        own = 0
        tok = 0
        tok2 = 0.0
        loaded = 0
        while r >= 0:
            length = rq[R_PROMPT, r] - rq[R_CACHED, r]
            if own > 0 and (tok + length > cap or own == pi[P_MAX_RUN, p]):
                break
            own += 1
            tok += length
            tok2 += float(rq[R_PROMPT, r]) ** 2 - float(rq[R_CACHED, r]) ** 2
            loaded += rq[R_LOADED, r]
            taken = r
            r = rq[R_Q_NEXT, r]
        pq[Q_HEAD, k] = r
        if r < 0:
            pq[Q_TAIL, k] = -1
        x = latency_s(tab_i, pieces, pi[P_MODEL, p], own, float(tok), tok2) + loaded * pload[p]
        x -= group_s(tab_i, pieces, g, dp * tok)  # 0 without a group part
        tokens += tok
        if not found or x > duration:
            duration = x
            found = True
        if first < 0:
            first = head
        else:  # the previous rank's run continues with this one (its link past the run is unused)
            rq[R_Q_NEXT, last] = head
        last = taken
        n += own
    if n == 0:
        return False
    duration += group_s(tab_i, pieces, g, tokens)
    stages = pi[P_PP, p]
    c = t
    for s in range(stages):
        c = max(c, pf[p, 1 + s]) + duration / stages
        pf[p, 1 + s] = c
    pf[p, 0] += duration / stages
    bi[0, b] = first
    bi[1, b] = n
    bt[b] = t
    r = first
    for _ in range(n):
        rt[T_P_START, r] = t
        rt[T_P_END, r] = c
        r = rq[R_Q_NEXT, r]
    push(ht, hi, hs, c, np.int64(PREFILL_DONE), p, b)
    if stages > 1:
        pi[P_FREE_PENDING, p] = 1
        push(ht, hi, hs, pf[p, 1], np.int64(PREFILL_FREE), p, np.int64(-1))
    return True


@njit(cache=True)
def run_disaggregated(rq, rt, rejected, tab_i, pieces, pi, pq, pf, pload, plru, router, reject_s, pbatch, di, df,
                      lru, hash_vals, hash_ptr, n_hash, block_tokens, schedule, layers, kv_bytes, link, failure,
                      route, pav_ptr, pav_t, dav_ptr, dav_t, n_dec, spill_tokens, kv_share, borrow, heap_capacity, cl):
    """Simulate prefill instances feeding decode instances over ingress links, in place on the
    state arrays; returns the number of events processed.

    With no prefill instances, requests reach decode with their KV visible at arrival (a
    decode instance judged alone). With no decode instances, requests end at prefill (a
    prefill instance judged alone). ``cl`` is (clients, next request to release): 0 clients is
    the open loop. ``failure`` is FAILURE_RETRY or FAILURE_RECOMPUTE (what a failed transfer
    costs; ``rq[R_FAILS]`` says how many of each request's attempts fail) and ``route`` the
    router's hop to decode, in seconds. ``pav_*``/``dav_*`` give each prefill instance and each
    decode rank (column of ``di``) the intervals in which it takes new requests (CSR: pointers,
    then [from, until) rows); out of them it only finishes the work it holds (a drain). ``pq``
    holds the prefill instances' ranks (their queues); ``di``'s columns are decode ranks.
    ``plru`` and ``lru`` hold the prefill and decode instances' prefix caches (:mod:`.prefix`),
    ``pload`` each prefill instance's seconds to load one token from its second tier, ``router``
    the prefill router (:func:`.routing.pick_prefill`). An arrival whose predicted TTFT at its
    prefill instance is above ``reject_s`` (inf: never) is rejected there (``rejected`` marks it,
    it releases its client, and it misses every clock); ``pbatch`` holds each prefill instance's
    seconds to drain a batch, for the prediction (:func:`_rejects_early`).

    Splitwise's mixed pool: ``di``'s columns past the first ``n_dec`` are mixed machines. A
    request arriving while the shortest prefill queue holds more than ``spill_tokens`` pending
    prompt tokens runs whole on the least loaded mixed machine (chunked, as colocated); a
    prefilled request whose decode instance would pass ``kv_share`` of its KV capacity decodes
    on one (its KV sent there). With ``borrow`` 1, dedicated machines are lent to the other phase
    as well (:mod:`.borrowing`): ``di``'s last columns are then the prefill instances' own, used
    while they are lent to decode.
    """
    n = rq.shape[1]
    n_p = pi.shape[1]
    n_d = di.shape[1]
    ht, hi, hs = new_heap(heap_capacity)
    most = max(n + rq[R_FAILS].sum(), 1)     # batches: each prefill (recomputed ones too) at most one
    bi = np.empty((2, most), np.int64)       # batch: first request, size
    bt = np.empty(most)                      # batch start
    n_batches = np.int64(0)
    cursor = np.zeros(2, np.int64)           # next arrival, events processed
    rr = np.zeros(1, np.int64)               # the round-robin router's next instance
    while True:
        t, priority, a, b = next_event(rt, rejected, cl, ht, hi, hs, cursor)
        if priority < 0:
            return cursor[1]
        start_p = -1  # a prefill instance that may start a batch now
        if priority == ARRIVAL:
            r = a
            spill = -1
            p = pick_prefill(pi, pav_ptr, pav_t, t, router, rr, plru, hash_vals, hash_ptr, n_hash, block_tokens,
                             rq, r) if n_p > 0 else -1
            if p >= 0 and pi[P_PENDING, p] > spill_tokens:  # the queue it would join
                if borrow == 1:
                    spill = spill_column(rq, di, dav_ptr, dav_t, t, r, n_dec, spill_tokens)
                elif n_dec < n_d:
                    spill = least_outstanding(di, rq[R_PROMPT, r] + rq[R_OUTPUT, r], dav_ptr, dav_t, t, n_dec)
            if spill >= 0:  # the whole request runs on a mixed machine
                di[D_LOAD, spill] += rq[R_PROMPT, r] + rq[R_OUTPUT, r]
                rq[R_D_INST, r] = spill
                colo_arrive(rq, di, df, tab_i, pieces, ht, hi, hs, spill, r, t)
            elif n_p > 0 and reject_s < np.inf and _rejects_early(
                    rq, pi, pload, pbatch, plru, hash_vals, hash_ptr, n_hash, block_tokens, tab_i, pieces, r, p,
                    reject_s):
                rejected[r] = True
                cl[CL_TPOT_MISSED] += 1  # a rejected request fails every clock
                release(rt, cl, t)
            elif n_p > 0:
                _enqueue_prefill(rq, pi, pq, pf, plru, hash_vals, hash_ptr, n_hash, block_tokens, ht, hi, hs, r, t, p)
            else:
                # decode alone: the KV is visible at arrival; route now
                need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
                d = least_loaded(di, need, dav_ptr, dav_t, t, np.int64(0), n_dec)
                di[D_LOAD, d] += need
                rq[R_D_INST, r] = d
                rq[R_D_RANK, r] = pick_rank(di, d)
                push(ht, hi, hs, t, np.int64(KV_VISIBLE), d, r)
        elif priority == PREFILL_DONE:
            r = bi[0, b]
            for _ in range(bi[1, b]):
                pi[P_PENDING, a] -= rq[R_PROMPT, r] - rq[R_CACHED, r]
                pq[Q_OUT, rq[R_RANK, r]] -= 1
                if n_d == 0:  # a prefill instance alone: the request ends here
                    release(rt, cl, t)
                if n_d > 0 and schedule == 0:
                    book_transfer(rq, rt, pi, pq, pf, di, df, lru, hash_vals, hash_ptr, link, ht, hi, hs,
                                  n_hash, block_tokens, schedule, layers, kv_bytes, failure, route,
                                  dav_ptr, dav_t, n_dec, kv_share, borrow, r, a, bt[b], t)
                r = rq[R_Q_NEXT, r]
            if pi[P_PP, a] == 1:
                start_p = a
        elif priority == PREFILL_FREE:
            pi[P_FREE_PENDING, a] = 0
            start_p = a
        elif priority == KV_VISIBLE and borrow == 1 and stale(rq, di, a, b):  # refused: book it again
            di[D_LOAD, a] -= rq[R_PROMPT, b] + rq[R_OUTPUT, b]
            di[D_OUT, rq[R_D_RANK, b]] -= 1
            rq[R_REFUSED, b] += 1
            book_transfer(rq, rt, pi, pq, pf, di, df, lru, hash_vals, hash_ptr, link, ht, hi, hs,
                          n_hash, block_tokens, schedule, layers, kv_bytes, failure, route,
                          dav_ptr, dav_t, n_dec, kv_share, borrow, b, rq[R_P_INST, b], t, t)
        elif priority == KV_VISIBLE:  # a mixed machine keeps arrived KV apart from its prompts
            head, tail = (D_K_HEAD, D_K_TAIL) if di[D_MIXED, a] == 1 else (D_W_HEAD, D_W_TAIL)
            queue_and_wake(rq, di, df, tab_i, pieces, ht, hi, hs, a, rq[R_D_RANK, b], b, t, head, tail, np.bool_(True))
        elif priority == PULL:  # a prefilled request reaches a decode instance that reads its KV itself
            start_pull(rq, rt, pi, di, df, link, ht, hi, hs, failure, a, b, t,
                       next_boundary(tab_i, pieces, di, df, a, t))
        elif priority == TRANSFER_FAILED:  # recompute: back to the prefill pool
            d, r = a, b
            di[D_LOAD, d] -= rq[R_PROMPT, r] + rq[R_OUTPUT, r]
            di[D_OUT, rq[R_D_RANK, r]] -= 1
            p = pick_prefill(pi, pav_ptr, pav_t, t, router, rr, plru, hash_vals, hash_ptr, n_hash, block_tokens, rq, r)
            rq[R_CACHED, r] = 0
            rq[R_LOADED, r] = 0
            _enqueue_prefill(rq, pi, pq, pf, plru, hash_vals, hash_ptr, n_hash, block_tokens, ht, hi, hs, r, t, p)
        elif b == di[D_VERSION, a] and di[D_MIXED, a] == 1:
            mixed_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, a, t, cl)
            if borrow == 1:
                give_back(pi, di, a)
        elif b == di[D_VERSION, a]:  # a boundary that was not cancelled by a cut
            decode_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, a, t, di[D_RUN_K, a], cl)
        if start_p >= 0 and _start_prefill(rq, rt, pi, pq, pf, pload, bi, bt, tab_i, pieces, ht, hi, hs,
                                           start_p, t, n_batches):
            b = n_batches
            n_batches += 1
            if n_d > 0 and schedule == 1:  # per-layer streaming books the link as the batch starts
                r = bi[0, b]
                for _ in range(bi[1, b]):
                    book_transfer(rq, rt, pi, pq, pf, di, df, lru, hash_vals, hash_ptr, link, ht, hi, hs,
                                  n_hash, block_tokens, schedule, layers, kv_bytes, failure, route,
                                  dav_ptr, dav_t, n_dec, kv_share, borrow, r, start_p, t, rt[T_P_END, r])
                    r = rq[R_Q_NEXT, r]
        if borrow == 1 and priority == PREFILL_DONE and pi[P_LENT, a] == 1:
            release_held(pi, pq, pf, di, ht, hi, hs, a, t)
