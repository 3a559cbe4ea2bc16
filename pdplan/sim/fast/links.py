"""KV links: routing a prefilled request to decode and booking its transfer on the ingress.

Each rank of a decode instance has its own ingress (its GPUs' NICs, or their NVLink share), which
sends the transfers booked to it one at a time in booking order; a request is booked to a rank of its
decode instance as it is routed (:func:`pdplan.sim.fast.batch.pick_rank`), and its KV lands there.
A prompt block already in the destination's prefix LRU is not sent.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pdplan.sim.events import KV_VISIBLE, PULL, TRANSFER_FAILED
from pdplan.sim.fast.batch import pick_rank
from pdplan.sim.fast.borrowing import decode_column
from pdplan.sim.fast.clock import push
from pdplan.sim.fast.fields import (
    ABSENT,
    D_CAP,
    D_DP,
    D_EPOCH,
    D_INST,
    D_LOAD,
    D_LRU_CAP,
    D_LRU_HEAD,
    D_POOL,
    D_PULL,
    F_LINK_BUSY,
    F_LINK_FREE,
    FAILURE_RECOMPUTE,
    P_POOL,
    R_D_INST,
    R_D_RANK,
    R_EPOCH,
    R_FAILS,
    R_OUTPUT,
    R_P_INST,
    R_PROMPT,
    R_XBYTES,
    T_X_END,
    T_X_START,
)
from pdplan.sim.fast.prefix import block_tokens_in, touch
from pdplan.sim.fast.routing import least_loaded


@njit(cache=True)
def layer_schedule_end(free, start, end, setup, payload, layers):
    """When the last layer of a per-layer streamed transfer is visible (0x08I, closed form).

    Layer l is ready at r_l = start + (l+1)/L·(end − start) and v_l = max(r_l, v_{l−1}) + x_l
    with v_{−1} = ``free`` (the ingress is busy until then), x_0 = setup + x and x_l = x =
    payload/L. Unrolled, v_{L−1} = max(free + Σx, max_j (r_j + Σ_{i≥j} x_i)); the j-terms are
    linear in j for j ≥ 1, so only j = 0, 1 and L−1 can win, and j = 1 beats j = 0 only when
    the layers come slower than they are sent, in which case j = L−1 beats both. Hence
    v_{L−1} = max(free + setup + payload, r_0 + setup + payload, end + x)
    (tests check it against the recurrence).
    """
    ready0 = start + (end - start) / layers
    return max(max(free, ready0) + setup + payload, end + payload / layers)


@njit(cache=True)
def _transfer_tokens(rq, di, lru, hash_vals, hash_ptr, n_hash, block_tokens, d, r):
    """Prompt tokens decode instance d does not hold yet; the prompt's blocks become MRU there.

    A block already cached at the destination is not sent (0x01A: transfer set U \\ V_D). Blocks
    are inserted at booking time: transfers into one instance complete in booking order, so a
    later request on the same ingress finds them visible by the time its own KV is.
    ``lru``: the decode instances' caches (:mod:`.prefix`), d's table at its instance number.
    """
    tokens = rq[R_PROMPT, r]
    if n_hash == 0 or di[D_LRU_CAP, d] == 0:
        return tokens
    for b in range(hash_ptr[r], hash_ptr[r + 1]):
        if touch(lru, di[D_INST, d], di, np.int64(D_LRU_HEAD), np.int64(-1), d, hash_vals[b]) != ABSENT:
            tokens -= block_tokens_in(rq[R_PROMPT, r], block_tokens, b - hash_ptr[r], rq[R_PROMPT, r])
    return tokens


@njit(cache=True)
def book_transfer(rq, rt, pi, pq, pf, di, df, lru, hash_vals, hash_ptr, link, ht, hi, hs, n_hash, block_tokens,
                  schedule, layers, kv_bytes, failure, route, dav_ptr, dav_t, n_dec, kv_share, borrow, r, p, start,
                  end):
    """Route request r to a decode instance, book it to one of its ranks (fewest outstanding requests:
    :func:`pdplan.sim.fast.batch.pick_rank`, counted there from now) and queue its KV on that rank's ingress.

    Request schedule (0x08I): C = max(link free, prefill end) + setup + bytes/bw.
    Layer schedule: :func:`layer_schedule_end`. ``link`` is [bandwidth, setup] × prefill pool ×
    decode pool, the bandwidth one rank's. The ingress sends booked bytes in booking order as soon as they are
    ready and is free again once they are sent: a streamed request leaves the gaps between its layers to
    later bookings, so the link's backlog clears at max(free, first layer ready) + setup + bytes/bw.

    A failing attempt is found out when it lands. Retry: the whole cache is sent again at once,
    ``setup + bytes/bw`` per failure, holding the ingress. Recompute: the attempt is dropped and
    the request goes back to the prefill pool (a TRANSFER_FAILED event when it lands). The decode
    side takes the request no earlier than ``route`` after its prefill ends (the router's hop).

    Decode instances are ``di``'s first ``n_dec``; the rest are mixed machines, which take the
    decode when the chosen decode instance's routed KV would pass ``kv_share`` of its capacity;
    with ``borrow`` 1, :func:`.borrowing.decode_column` chooses then, and may lend a prefill
    instance. The handoff carries the role epoch of the instance it is booked to.

    A decode instance that pulls (D_PULL, :class:`pdplan.vocabulary.Handoff`) is routed to and its prefix cache
    consulted here, but its read is booked when the request reaches it, ``route`` after the prefill ends (a PULL
    event, :func:`start_pull`), whatever the schedule: it reads the whole KV once the prefill is done.
    """
    need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
    now = end if schedule == 0 else start  # routed as it books
    d = least_loaded(di, need, dav_ptr, dav_t, now, np.int64(0), n_dec)
    over = d < 0 or di[D_LOAD, d] + need > kv_share * (di[D_CAP, d] * di[D_DP, d])
    if borrow == 1 and over:
        d = decode_column(pi, pq, pf, di, dav_ptr, dav_t, now, p, d, need, kv_share)
    elif n_dec < di.shape[1] and over:
        m = least_loaded(di, need, dav_ptr, dav_t, now, n_dec, np.int64(-1))
        if m >= 0:
            d = m
    di[D_LOAD, d] += need
    rq[R_EPOCH, r] = di[D_EPOCH, d]
    nbytes = _transfer_tokens(rq, di, lru, hash_vals, hash_ptr, n_hash, block_tokens, d, r) * kv_bytes
    rq[R_XBYTES, r] = nbytes
    rq[R_D_INST, r] = d
    k = pick_rank(di, d)
    rq[R_D_RANK, r] = k
    if di[D_PULL, d] == 1:
        push(ht, hi, hs, end + route, np.int64(PULL), d, r)
        return
    bandwidth = link[0, pi[P_POOL, p], di[D_POOL, d]]
    setup = link[1, pi[P_POOL, p], di[D_POOL, d]]
    attempt = _attempt_s(link, pi, di, p, d, nbytes)
    free = df[F_LINK_FREE, k]
    if schedule == 0:
        begin = max(free, end)
        visible = begin + attempt
    else:
        begin = max(free, start + (end - start) / layers)
        visible = layer_schedule_end(free, start, end, setup, nbytes / bandwidth, layers)
    send(rq, rt, df, ht, hi, hs, failure, d, r, begin, visible, attempt, end + route)


@njit(cache=True)
def start_pull(rq, rt, pi, di, df, link, ht, hi, hs, failure, d, r, t, boundary):
    """Request r, prefilled and routed to decode instance d (:func:`book_transfer`), reaches it at t: the instance
    takes it in at its next iteration ``boundary`` (at or after t) and starts reading its KV there, behind what the
    ingress of the rank it is booked to has booked: C = max(link free, boundary) + setup + bytes/bw."""
    attempt = _attempt_s(link, pi, di, rq[R_P_INST, r], d, rq[R_XBYTES, r])
    begin = max(df[F_LINK_FREE, rq[R_D_RANK, r]], boundary)
    send(rq, rt, df, ht, hi, hs, failure, d, r, begin, begin + attempt, attempt, t)


@njit(cache=True, inline="always")
def _attempt_s(link, pi, di, p, d, nbytes):
    """Seconds one attempt holds a rank's ingress of decode instance d for ``nbytes`` from prefill instance p: the
    link's setup plus the bytes at its bandwidth (``link`` is [bandwidth, setup] × prefill pool × decode pool)."""
    return link[1, pi[P_POOL, p], di[D_POOL, d]] + nbytes / link[0, pi[P_POOL, p], di[D_POOL, d]]


@njit(cache=True)
def send(rq, rt, df, ht, hi, hs, failure, d, r, begin, visible, attempt, reached):
    """Request r's KV goes over the ingress of the rank of decode instance d it is booked to from ``begin``,
    visible at ``visible`` unless an attempt fails; the instance takes it no earlier than ``reached`` (when the
    router handed it on)."""
    # the ingress is work-conserving: its booked bytes are done by begin + setup + payload; a
    # streamed request does not hold it while its last layers are still being computed
    k = rq[R_D_RANK, r]
    df[F_LINK_FREE, k] = begin + attempt
    df[F_LINK_BUSY, k] += attempt
    rt[T_X_START, r] = begin
    fails = rq[R_FAILS, r]
    if fails > 0 and failure == FAILURE_RECOMPUTE:
        rq[R_FAILS, r] = fails - 1
        rt[T_X_END, r] = visible
        push(ht, hi, hs, visible, np.int64(TRANSFER_FAILED), d, r)
        return
    if fails > 0:  # retry: each resend starts when the failed attempt has landed
        visible += fails * attempt
        df[F_LINK_FREE, k] = visible
        df[F_LINK_BUSY, k] += fails * attempt
    rt[T_X_END, r] = visible
    push(ht, hi, hs, max(visible, reached), np.int64(KV_VISIBLE), d, r)
