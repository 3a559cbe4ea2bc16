"""The compiled event loop: prefill batching, KV links, decode and colocated batching over arrays.

This is the production engine behind :func:`pdplan.sim.simulate`. It is the same model as the
readable token-by-token oracle in :mod:`pdplan.sim.reference` (tests compare them request by
request) written for speed with numba:

* state lives in a few 2-D arrays, one row per field (``rq[R_PROMPT, r]``, ``di[D_B, i]``);
  numba reference-counts every array a function receives, so helpers take a handful of packed
  arrays instead of dozens of separate ones (that counting was half the run time);
* queues and the active decode set are threaded through per-request link fields;
* the event heap is a binary heap over (time, priority << 56 | seq) with two payload ints, so
  equal-time events run in a fixed order and results are deterministic;
* arrivals are not pushed on the heap: they are a sorted stream merged with it (priority 0);
  in a closed loop (``cl[0]`` = C clients) the stream is written as it is read: the first C
  requests arrive at 0 and each finish (or rejection) releases the next request at that
  instant, as ``vllm bench serve --max-concurrency`` does, so it stays sorted;
* a decode batch whose membership does not change is advanced many steps at once in closed
  form (:func:`decode_run_s`), so the number of events grows with requests, not with tokens.

Event priorities at equal times are those of :mod:`pdplan.sim.events`, which the oracle reads
too (numba compiles the imported integers in as constants).

Latency models are flattened into ``tab_i`` (rows: seg_ptr, seg_min, piece_ptr) and ``pieces``:
model m owns segments ``seg_ptr[m] .. seg_ptr[m+1]``, segment s starts at batch ``seg_min[s]``
and owns rows ``piece_ptr[s] .. piece_ptr[s+1]`` of ``pieces`` (seconds per unit of features
(1, x1, x2)); the latency is the largest piece of the segment in force.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pdplan.sim.events import BOUNDARY, KV_VISIBLE, PREFILL_DONE, PREFILL_FREE, TRANSFER_FAILED

# --- field rows ----------------------------------------------------------------------------------

# per-request integers rq[field, r]
(R_PROMPT, R_OUTPUT, R_Q_NEXT, R_W_NEXT, R_CHILD, R_SIBLING, R_FIN_STEP, R_P_INST, R_D_INST,
 R_XBYTES, R_PF_DONE, R_CHUNK, R_PF_NEXT, R_FAILS) = range(14)
RQ_FIELDS = 14
#   Q_NEXT: prefill queue link (kept after dequeue: a batch is a run of it); W_NEXT: waiting
#   queue link at decode / colocated; CHILD, SIBLING, FIN_STEP: the active-batch heap;
#   PF_DONE, CHUNK, PF_NEXT: chunked prefill progress, this iteration's chunk, prefilling list;
#   FAILS: KV transfer attempts of the request still to fail (drawn by the engine)

# per-request times rt[field, r]
T_ARRIVAL, T_P_START, T_P_END, T_X_START, T_X_END, T_FIRST, T_FINISH = range(7)
RT_FIELDS = 7

# prefill instances pi[field, p]; pf[p, 0] is busy seconds, pf[p, 1 + s] when stage s frees;
# FREE_PENDING: a "first stage free" event is on the heap
P_Q_HEAD, P_Q_TAIL, P_PENDING, P_MODEL, P_PP, P_CAP, P_POOL, P_FREE_PENDING = range(8)
PI_FIELDS = 8

# decode and colocated instances di[field, i]
(D_B, D_S, D_STEPS, D_RESERVED, D_CAP, D_LOAD, D_RUN_K, D_VERSION, D_ROOT, D_MODEL, D_POOL,
 D_W_HEAD, D_W_TAIL, D_MODE, D_M_PREFILL, D_POLICY, D_CHUNK, D_TOKEN_CAP, D_PF_HEAD, D_PF_TAIL,
 D_IT_FIRST, D_IT_N, D_LRU_HEAD, D_LRU_TAIL, D_LRU_COUNT, D_LRU_CAP, D_MIXED, D_K_HEAD, D_K_TAIL) = range(29)
DI_FIELDS = 29
#   B active requests, S context tokens they hold, STEPS run so far, RESERVED KV tokens, CAP KV
#   capacity, LOAD the router's view (prompt + output of routed, unfinished requests), RUN_K
#   steps planned for the current stretch, VERSION bumped to cancel a planned boundary, ROOT of
#   the active heap; MODE (idle, starting, running); colocated: prefill model, POLICY, CHUNK budget, TOKEN_CAP, the
#   prefilling list, the prefill-first batch (IT_FIRST, IT_N; IT_N = decode rows of a chunked
#   iteration); decode: prefix-LRU head, tail, count, capacity; MIXED: a Splitwise mixed machine
#   (colocated scheduling in a disaggregated plan), K_HEAD/K_TAIL its requests whose KV arrived

# decode and colocated instance floats df[field, i]
F_RUN_T0, F_BUSY, F_LINK_FREE, F_LINK_BUSY = range(4)
DF_FIELDS = 4

_SEQ_BITS = 56  # heap key: priority << 56 | sequence number

# what a failed KV transfer costs: resend the cache, or run the prefill again
FAILURE_RETRY = 0
FAILURE_RECOMPUTE = 1

# colocated policies and modes
POLICY_PREFILL_FIRST = 0
POLICY_CHUNKED = 1
# An idle instance does not start work the moment a request reaches it: it plans a boundary at
# the same time (priority 4), so that requests arriving at that same instant join the batch.
_IDLE = 0
_DECODE_RUN = 1
_ITERATION = 2
_STARTING = 3


# --- latency tables ------------------------------------------------------------------------------

@njit(cache=True)
def _segment(tab_i, m, batch):
    """The segment of model m in force at this batch size (largest min_batch <= batch)."""
    chosen = tab_i[0, m]
    for s in range(tab_i[0, m] + 1, tab_i[0, m + 1]):
        if batch >= tab_i[1, s]:
            chosen = s
    return chosen


@njit(cache=True)
def latency_s(tab_i, pieces, m, batch, x1, x2):
    """Seconds of model m at features (1, x1, x2) for a batch of ``batch`` requests."""
    s = _segment(tab_i, m, batch)
    best = -np.inf
    for p in range(tab_i[2, s], tab_i[2, s + 1]):
        v = pieces[p, 0] + pieces[p, 1] * x1 + pieces[p, 2] * x2
        if v > best:
            best = v
    return best


@njit(cache=True)
def decode_run_s(tab_i, pieces, m, batch, context, steps):
    """Seconds of ``steps`` decode steps of a fixed batch holding ``context`` tokens at the first.

    Step j costs ``max_p (a_p + b_p·B + c_p·(S + j·B))``: every piece is a line in j, so the
    sum over a stretch where one piece is the largest is an arithmetic series. The largest
    piece of a set of lines can only hand over to a steeper one as j grows (the maximum is
    convex), so we walk from j = 0, sum the current piece up to the first step at which a
    steeper piece overtakes it, and continue from there: at most one stretch per piece.
    """
    if steps <= 0:
        return 0.0
    s = _segment(tab_i, m, batch)
    p0 = tab_i[2, s]
    p1 = tab_i[2, s + 1]
    total = 0.0
    j = 0
    while j < steps:
        # the piece in force at step j: the largest value, ties to the steeper
        best_alpha = pieces[p0, 0] + pieces[p0, 1] * batch + pieces[p0, 2] * context
        best_gamma = pieces[p0, 2] * batch
        best_value = best_alpha + best_gamma * j
        for p in range(p0 + 1, p1):
            alpha = pieces[p, 0] + pieces[p, 1] * batch + pieces[p, 2] * context
            gamma = pieces[p, 2] * batch
            value = alpha + gamma * j
            if value > best_value or (value == best_value and gamma > best_gamma):
                best_alpha, best_gamma, best_value = alpha, gamma, value
        # the first step at which a steeper piece is strictly larger
        j_next = steps
        for p in range(p0, p1):
            gamma = pieces[p, 2] * batch
            if gamma > best_gamma:
                alpha = pieces[p, 0] + pieces[p, 1] * batch + pieces[p, 2] * context
                cross = (best_alpha - alpha) / (gamma - best_gamma)
                if cross < j_next:
                    jc = max(j + 1, int(math.floor(cross)) + 1)
                    if jc < j_next:
                        j_next = jc
        n = j_next - j
        total += n * best_alpha + best_gamma * (j + j_next - 1) * n * 0.5
        j = j_next
    return total


@njit(cache=True)
def steps_to_reach(tab_i, pieces, m, batch, context, max_steps, elapsed):
    """Fewest steps (1 .. max_steps) of a fixed batch whose run takes at least ``elapsed`` seconds.

    That is the index of the first step boundary at or after a moment ``elapsed`` into the
    run: where a request that arrives then can join the batch. Binary search over the closed form.
    """
    lo = 1
    hi = max_steps
    while lo < hi:
        mid = (lo + hi) // 2
        if decode_run_s(tab_i, pieces, m, batch, context, mid) >= elapsed:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def mixed_iteration_s(tab_i, pieces, m_prefill, m_decode, batch, context, chunks, sum_c, sum_c2):
    """One colocated iteration: B decode rows plus prefill chunks with features (Σc, Σc²-pairs).

    Mixed cost = decode step + (prefill chunk cost − prefill cost of an empty batch): the
    constant of the prefill model is the fixed per-iteration cost (weights read once, launch),
    which the decode step already pays (0x02B). Pure iterations are just the phase's model.
    """
    if chunks == 0:
        return latency_s(tab_i, pieces, m_decode, batch, float(batch), context)
    pre = latency_s(tab_i, pieces, m_prefill, chunks, sum_c, sum_c2)
    if batch == 0:
        return pre
    extra = pre - latency_s(tab_i, pieces, m_prefill, chunks, 0.0, 0.0)
    if extra < 0.0:
        extra = 0.0
    return latency_s(tab_i, pieces, m_decode, batch, float(batch), context) + extra


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


# --- event heap ----------------------------------------------------------------------------------
# ht[i] event time; hi[0, i] priority << 56 | seq, hi[1, i] and hi[2, i] payload;
# hs[0] size, hs[1] next sequence number.

@njit(cache=True)
def _new_heap(capacity):
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
def _push(ht, hi, hs, t, priority, a, b):
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
def _pop(ht, hi, hs):
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


# --- decode batches (shared by decode and colocated instances) -----------------------------------
#
# Without preemption a batch only ever loses its requests in FIN_STEP order, so the active set is
# a min-heap on FIN_STEP with insert and delete-min: a pairing heap threaded through the
# per-request CHILD / SIBLING fields (no per-instance storage, O(1) insert, O(log B) amortised
# delete), which keeps a boundary O(log B) instead of a scan of the batch.

@njit(cache=True, inline="always")
def _meld(rq, a, b):
    """Merge two heap-ordered trees; the root that finishes later becomes the other's child."""
    if a < 0:
        return b
    if b < 0:
        return a
    if rq[R_FIN_STEP, b] < rq[R_FIN_STEP, a] or (rq[R_FIN_STEP, b] == rq[R_FIN_STEP, a] and b < a):
        a, b = b, a
    rq[R_SIBLING, b] = rq[R_CHILD, a]
    rq[R_CHILD, a] = b
    return a


@njit(cache=True)
def _delete_min(rq, root):
    """Remove ``root`` from its heap; returns the new root (two-pass pairing of its children)."""
    paired = -1  # first pass: meld children in pairs, left to right, onto a stack
    c = rq[R_CHILD, root]
    while c >= 0:
        a = c
        b = rq[R_SIBLING, a]
        rq[R_SIBLING, a] = -1
        if b >= 0:
            c = rq[R_SIBLING, b]
            rq[R_SIBLING, b] = -1
            a = _meld(rq, a, b)
        else:
            c = -1
        rq[R_SIBLING, a] = paired
        paired = a
    result = -1  # second pass: meld the stack, right to left
    while paired >= 0:
        nxt = rq[R_SIBLING, paired]
        rq[R_SIBLING, paired] = -1
        result = _meld(rq, result, paired)
        paired = nxt
    rq[R_CHILD, root] = -1
    return result


@njit(cache=True)
def _release(rt, cl, t):
    """Closed loop: a request left the system at t, so its client sends the next one now."""
    if cl[0] > 0 and cl[1] < rt.shape[1]:
        rt[T_ARRIVAL, cl[1]] = t
        cl[1] += 1


@njit(cache=True)
def _activate(rq, rt, di, i, r, t, cl):
    """Request r joins batch i with its first token out at t (its KV reserved by the caller)."""
    rt[T_FIRST, r] = t
    need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
    if rq[R_OUTPUT, r] == 1:  # the prefill's token was the only one
        rt[T_FINISH, r] = t
        _release(rt, cl, t)
        di[D_RESERVED, i] -= need
        di[D_LOAD, i] -= need
        return
    rq[R_FIN_STEP, r] = di[D_STEPS, i] + rq[R_OUTPUT, r] - 1
    rq[R_CHILD, r] = -1
    rq[R_SIBLING, r] = -1
    di[D_ROOT, i] = _meld(rq, di[D_ROOT, i], r)
    di[D_B, i] += 1
    di[D_S, i] += rq[R_PROMPT, r] + 1  # context at its first step: the prompt and the first token


@njit(cache=True)
def _advance(rq, rt, di, df, i, t, k, cl):
    """Run k steps of batch i ending at t; requests at their last token leave and free KV."""
    if k <= 0:
        return
    df[F_BUSY, i] += t - df[F_RUN_T0, i]
    di[D_STEPS, i] += k
    di[D_S, i] += di[D_B, i] * k
    while di[D_ROOT, i] >= 0 and rq[R_FIN_STEP, di[D_ROOT, i]] == di[D_STEPS, i]:
        r = di[D_ROOT, i]
        di[D_ROOT, i] = _delete_min(rq, r)
        rt[T_FINISH, r] = t
        _release(rt, cl, t)
        need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
        di[D_S, i] -= need  # its context after the last step is prompt + output
        di[D_B, i] -= 1
        di[D_RESERVED, i] -= need
        di[D_LOAD, i] -= need


@njit(cache=True)
def _plan_run(rq, di, df, tab_i, pieces, ht, hi, hs, i, t, model):
    """Batch i runs unchanged from t until its first request finishes; schedule that boundary."""
    k = rq[R_FIN_STEP, di[D_ROOT, i]] - di[D_STEPS, i]
    df[F_RUN_T0, i] = t
    di[D_RUN_K, i] = k
    end = t + decode_run_s(tab_i, pieces, model, di[D_B, i], float(di[D_S, i]), k)
    _push(ht, hi, hs, end, np.int64(BOUNDARY), i, di[D_VERSION, i])


@njit(cache=True)
def _cut_run(di, df, tab_i, pieces, ht, hi, hs, i, t, model):
    """Stop batch i's planned stretch at the first step boundary at or after t."""
    j = steps_to_reach(tab_i, pieces, model, di[D_B, i], float(di[D_S, i]), di[D_RUN_K, i],
                       t - df[F_RUN_T0, i])
    if j < di[D_RUN_K, i]:
        di[D_VERSION, i] += 1
        di[D_RUN_K, i] = j
        end = df[F_RUN_T0, i] + decode_run_s(tab_i, pieces, model, di[D_B, i], float(di[D_S, i]), j)
        _push(ht, hi, hs, end, np.int64(BOUNDARY), i, di[D_VERSION, i])


@njit(cache=True)
def _plan_start(di, ht, hi, hs, i, t):
    """Idle instance i plans a zero-step boundary at t: work starts once every event of this
    instant with a lower priority (arrivals, KV landing) has queued its request."""
    di[D_MODE, i] = _STARTING
    di[D_RUN_K, i] = 0
    di[D_VERSION, i] += 1
    _push(ht, hi, hs, t, np.int64(BOUNDARY), i, di[D_VERSION, i])


@njit(cache=True, inline="always")
def _append(rq, di, i, r, head, tail, link):
    """Append request r to instance i's FIFO (head/tail rows of ``di``, a decode or a prefill
    instance table; link row of rq)."""
    rq[link, r] = -1
    if di[tail, i] >= 0:
        rq[link, di[tail, i]] = r
    else:
        di[head, i] = r
    di[tail, i] = r


@njit(cache=True)
def _available(av_ptr, av_t, i, t):
    """Whether instance i takes new requests at t: t lies in one of its intervals [from, until)."""
    for k in range(av_ptr[i], av_ptr[i + 1]):
        if av_t[0, k] <= t < av_t[1, k]:
            return True
    return False


@njit(cache=True)
def _least_loaded(di, need, av_ptr, av_t, t, lo, hi):
    """Instance in [lo, hi) (hi < 0: to the end) with the smallest load/capacity among those
    taking requests at t that can hold ``need`` (ties → lowest); when none takes requests, among
    all that can hold it; -1 when none can."""
    best = -1
    end = di.shape[1] if hi < 0 else hi
    for rule in range(2):
        for i in range(lo, end):
            if di[D_CAP, i] < need or (rule == 0 and not _available(av_ptr, av_t, i, t)):
                continue
            if best < 0 or di[D_LOAD, i] * di[D_CAP, best] < di[D_LOAD, best] * di[D_CAP, i]:
                best = i
        if best >= 0:
            return best
    return best


# --- disaggregated: prefill instances, ingress links, decode instances ----------------------------

@njit(cache=True)
def _start_prefill(rq, rt, pi, pf, bi, bt, tab_i, pieces, ht, hi, hs, p, t, b):
    """Start batch number b on prefill instance p at t if its first stage is free and work is
    queued; returns True if it did.

    FCFS under the token cap without reordering: take queued prompts while the total stays
    within the cap; a first prompt longer than the cap runs alone. With PP = k the batch passes
    k stages of latency/k each, one batch per stage at a time, so up to k batches are in flight.
    """
    if pi[P_Q_HEAD, p] < 0 or pf[p, 1] > t:
        return False
    cap = pi[P_CAP, p]
    first = pi[P_Q_HEAD, p]
    r = first
    n = 0
    tok = 0
    tok2 = 0.0
    while r >= 0:
        length = rq[R_PROMPT, r]
        if n > 0 and tok + length > cap:
            break
        n += 1
        tok += length
        tok2 += float(length) * float(length)
        r = rq[R_Q_NEXT, r]
    pi[P_Q_HEAD, p] = r
    if r < 0:
        pi[P_Q_TAIL, p] = -1
    duration = latency_s(tab_i, pieces, pi[P_MODEL, p], n, float(tok), tok2)
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
    _push(ht, hi, hs, c, np.int64(PREFILL_DONE), p, b)
    if stages > 1:
        pi[P_FREE_PENDING, p] = 1
        _push(ht, hi, hs, pf[p, 1], np.int64(PREFILL_FREE), p, np.int64(-1))
    return True


@njit(cache=True)
def _transfer_tokens(rq, di, lru, hash_vals, hash_ptr, n_hash, block_tokens, d, r):
    """Prompt tokens decode instance d does not hold yet; the prompt's blocks become MRU there.

    A block already cached at the destination is not sent (0x01A: transfer set U \\ V_D). Blocks
    are inserted at booking time: transfers into one instance complete in booking order, so a
    later request on the same ingress finds them visible by the time its own KV is.
    ``lru`` rows: previous, next, present, over d·n_hash + block.
    """
    tokens = rq[R_PROMPT, r]
    if n_hash == 0 or di[D_LRU_CAP, d] == 0:
        return tokens
    base = d * n_hash
    for b in range(hash_ptr[r], hash_ptr[r + 1]):
        h = hash_vals[b]
        x = base + h
        if lru[2, x]:
            lo = (b - hash_ptr[r]) * block_tokens
            if lo < rq[R_PROMPT, r]:
                tokens -= min(block_tokens, rq[R_PROMPT, r] - lo)
            if di[D_LRU_HEAD, d] != h:  # unlink, then move to the front
                p = lru[0, x]
                q = lru[1, x]
                lru[1, base + p] = q
                if q >= 0:
                    lru[0, base + q] = p
                else:
                    di[D_LRU_TAIL, d] = p
                lru[0, x] = -1
                lru[1, x] = di[D_LRU_HEAD, d]
                lru[0, base + di[D_LRU_HEAD, d]] = h
                di[D_LRU_HEAD, d] = h
            continue
        lru[2, x] = 1
        lru[0, x] = -1
        lru[1, x] = di[D_LRU_HEAD, d]
        if di[D_LRU_HEAD, d] >= 0:
            lru[0, base + di[D_LRU_HEAD, d]] = h
        else:
            di[D_LRU_TAIL, d] = h
        di[D_LRU_HEAD, d] = h
        di[D_LRU_COUNT, d] += 1
        if di[D_LRU_COUNT, d] > di[D_LRU_CAP, d]:  # evict the least recently used
            old = base + di[D_LRU_TAIL, d]
            di[D_LRU_TAIL, d] = lru[0, old]
            lru[1, base + di[D_LRU_TAIL, d]] = -1
            lru[2, old] = 0
            di[D_LRU_COUNT, d] -= 1
    return tokens


@njit(cache=True)
def _book_transfer(rq, rt, pi, di, df, lru, hash_vals, hash_ptr, link, ht, hi, hs, n_hash, block_tokens,
                   schedule, layers, kv_bytes, failure, route, dav_ptr, dav_t, n_dec, kv_share, r, p, start, end):
    """Route request r to a decode instance and queue its KV on that instance's ingress link.

    Request schedule (0x08I): C = max(link free, prefill end) + setup + bytes/bw.
    Layer schedule: :func:`layer_schedule_end`. ``link`` is [bandwidth, setup] × prefill pool ×
    decode pool. The ingress sends booked bytes in booking order as soon as they are ready and
    is free again once they are sent: a streamed request leaves the gaps between its layers to
    later bookings, so the link's backlog clears at max(free, first layer ready) + setup + bytes/bw.

    A failing attempt is found out when it lands. Retry: the whole cache is sent again at once,
    ``setup + bytes/bw`` per failure, holding the ingress. Recompute: the attempt is dropped and
    the request goes back to the prefill pool (a TRANSFER_FAILED event when it lands). The decode
    side takes the request no earlier than ``route`` after its prefill ends (the router's hop).

    Decode instances are ``di``'s first ``n_dec``; the rest are mixed machines, which take the
    decode when the chosen decode instance's routed KV would pass ``kv_share`` of its capacity.
    """
    need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
    now = end if schedule == 0 else start  # routed as it books
    d = _least_loaded(di, need, dav_ptr, dav_t, now, 0, n_dec)
    if n_dec < di.shape[1] and (d < 0 or di[D_LOAD, d] + need > kv_share * di[D_CAP, d]):
        m = _least_loaded(di, need, dav_ptr, dav_t, now, n_dec, -1)
        if m >= 0:
            d = m
    di[D_LOAD, d] += need
    nbytes = _transfer_tokens(rq, di, lru, hash_vals, hash_ptr, n_hash, block_tokens, d, r) * kv_bytes
    bandwidth = link[0, pi[P_POOL, p], di[D_POOL, d]]
    setup = link[1, pi[P_POOL, p], di[D_POOL, d]]
    attempt = setup + nbytes / bandwidth
    free = df[F_LINK_FREE, d]
    if schedule == 0:
        begin = max(free, end)
        visible = begin + attempt
    else:
        begin = max(free, start + (end - start) / layers)
        visible = layer_schedule_end(free, start, end, setup, nbytes / bandwidth, layers)
    # the ingress is work-conserving: its booked bytes are done by begin + setup + payload; a
    # streamed request does not hold it while its last layers are still being computed
    df[F_LINK_FREE, d] = begin + attempt
    df[F_LINK_BUSY, d] += attempt
    rt[T_X_START, r] = begin
    rq[R_XBYTES, r] = nbytes
    rq[R_D_INST, r] = d
    fails = rq[R_FAILS, r]
    if fails > 0 and failure == FAILURE_RECOMPUTE:
        rq[R_FAILS, r] = fails - 1
        rt[T_X_END, r] = visible
        _push(ht, hi, hs, visible, np.int64(TRANSFER_FAILED), d, r)
        return
    if fails > 0:  # retry: each resend starts when the failed attempt has landed
        visible += fails * attempt
        df[F_LINK_FREE, d] = visible
        df[F_LINK_BUSY, d] += fails * attempt
    rt[T_X_END, r] = visible
    _push(ht, hi, hs, max(visible, end + route), np.int64(KV_VISIBLE), d, r)


@njit(cache=True)
def _pick_prefill(pi, pav_ptr, pav_t, t):
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
def _enqueue_prefill(rq, pi, pf, ht, hi, hs, r, t, p):
    """Queue request r at prefill instance p; an idle first stage forms its batch after every
    arrival at this instant."""
    pi[P_PENDING, p] += rq[R_PROMPT, r]
    rq[R_P_INST, r] = p
    _append(rq, pi, p, r, P_Q_HEAD, P_Q_TAIL, R_Q_NEXT)
    if pf[p, 1] <= t and pi[P_FREE_PENDING, p] == 0:
        pi[P_FREE_PENDING, p] = 1
        _push(ht, hi, hs, t, np.int64(PREFILL_FREE), p, np.int64(-1))


@njit(cache=True)
def _take_if_fits(rq, di, i, head, tail):
    """The head of instance i's FIFO (head/tail rows, linked by W_NEXT) with its prompt + output
    reserved, if they fit the KV not reserved; else -1: the head stalls and nothing behind it
    overtakes."""
    r = di[head, i]
    if r < 0 or di[D_RESERVED, i] + rq[R_PROMPT, r] + rq[R_OUTPUT, r] > di[D_CAP, i]:
        return -1
    di[head, i] = rq[R_W_NEXT, r]
    if di[head, i] < 0:
        di[tail, i] = -1
    di[D_RESERVED, i] += rq[R_PROMPT, r] + rq[R_OUTPUT, r]
    return r


@njit(cache=True)
def _decode_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, d, t, k, cl):
    """Batch d reaches a step boundary at t after k steps: finishes leave, waiting KV joins (FIFO,
    while its prompt + output tokens fit the KV not reserved), and the next stretch is planned."""
    _advance(rq, rt, di, df, d, t, k, cl)
    r = _take_if_fits(rq, di, d, D_W_HEAD, D_W_TAIL)
    while r >= 0:
        _activate(rq, rt, di, d, r, t, cl)
        r = _take_if_fits(rq, di, d, D_W_HEAD, D_W_TAIL)
    di[D_VERSION, d] += 1
    _run_or_idle(rq, di, df, tab_i, pieces, ht, hi, hs, d, t)


@njit(cache=True)
def _run_or_idle(rq, di, df, tab_i, pieces, ht, hi, hs, d, t):
    """Instance d runs its decode batch from t on (until the next boundary), or idles when empty."""
    if di[D_B, d] > 0:
        di[D_MODE, d] = _DECODE_RUN
        _plan_run(rq, di, df, tab_i, pieces, ht, hi, hs, d, t, di[D_MODEL, d])
    else:
        di[D_MODE, d] = _IDLE


@njit(cache=True)
def run_disaggregated(rq, rt, rejected, tab_i, pieces, pi, pf, di, df, lru, hash_vals, hash_ptr,
                      n_hash, block_tokens, schedule, layers, kv_bytes, link, failure, route,
                      pav_ptr, pav_t, dav_ptr, dav_t, n_dec, spill_tokens, kv_share, heap_capacity, cl):
    """Simulate prefill instances feeding decode instances over ingress links, in place on the
    state arrays; returns the number of events processed.

    With no prefill instances, requests reach decode with their KV visible at arrival (a
    decode instance judged alone). With no decode instances, requests end at prefill (a
    prefill instance judged alone). ``cl`` is (clients, next request to release): 0 clients is
    the open loop. ``failure`` is FAILURE_RETRY or FAILURE_RECOMPUTE (what a failed transfer
    costs; ``rq[R_FAILS]`` says how many of each request's attempts fail) and ``route`` the
    router's hop to decode, in seconds. ``pav_*``/``dav_*`` give each prefill and decode instance
    the intervals in which it takes new requests (CSR: pointers, then [from, until) rows); out of
    them it only finishes the work it holds (a drain).

    Splitwise's mixed pool: ``di``'s instances past the first ``n_dec`` are mixed machines. A
    request arriving while the shortest prefill queue holds more than ``spill_tokens`` pending
    prompt tokens runs whole on the least loaded mixed machine (chunked, as colocated); a
    prefilled request whose decode instance would pass ``kv_share`` of its KV capacity decodes
    on one (its KV sent there).
    """
    n = rq.shape[1]
    n_p = pi.shape[1]
    n_d = di.shape[1]
    ht, hi, hs = _new_heap(heap_capacity)
    most = max(n + rq[R_FAILS].sum(), 1)     # batches: each prefill (recomputed ones too) at most one
    bi = np.empty((2, most), np.int64)       # batch: first request, size
    bt = np.empty(most)                      # batch start
    n_batches = 0
    events = 0
    nxt = 0  # next arrival
    while nxt < n and rt[T_ARRIVAL, nxt] < np.inf or hs[0] > 0:
        start_p = -1  # a prefill instance that may start a batch now
        # merge the arrival stream (priority 0) with the heap
        if nxt < n and (hs[0] == 0 or rt[T_ARRIVAL, nxt] <= ht[0]):
            r = nxt
            nxt += 1
            if rejected[r]:
                _release(rt, cl, rt[T_ARRIVAL, r])
                continue
            events += 1
            t = rt[T_ARRIVAL, r]
            spill = -1
            p = _pick_prefill(pi, pav_ptr, pav_t, t) if n_p > 0 else -1
            if p >= 0 and n_dec < n_d and pi[P_PENDING, p] > spill_tokens:  # the queue it would join
                spill = _least_outstanding(di, rq[R_PROMPT, r] + rq[R_OUTPUT, r], dav_ptr, dav_t, t, n_dec)
            if spill >= 0:  # the whole request runs on a mixed machine
                di[D_LOAD, spill] += rq[R_PROMPT, r] + rq[R_OUTPUT, r]
                rq[R_D_INST, r] = spill
                _colo_arrive(rq, di, df, tab_i, pieces, ht, hi, hs, spill, r, t)
            elif n_p > 0:
                _enqueue_prefill(rq, pi, pf, ht, hi, hs, r, t, p)
            else:
                # decode alone: the KV is visible at arrival; route now
                need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
                d = _least_loaded(di, need, dav_ptr, dav_t, t, 0, n_dec)
                di[D_LOAD, d] += need
                rq[R_D_INST, r] = d
                _push(ht, hi, hs, t, np.int64(KV_VISIBLE), d, r)
        else:
            t, priority, a, b = _pop(ht, hi, hs)
            events += 1
            if priority == PREFILL_DONE:
                r = bi[0, b]
                for _ in range(bi[1, b]):
                    pi[P_PENDING, a] -= rq[R_PROMPT, r]
                    if n_d == 0:  # a prefill instance alone: the request ends here
                        _release(rt, cl, t)
                    if n_d > 0 and schedule == 0:
                        _book_transfer(rq, rt, pi, di, df, lru, hash_vals, hash_ptr, link, ht, hi, hs,
                                       n_hash, block_tokens, schedule, layers, kv_bytes, failure, route,
                                       dav_ptr, dav_t, n_dec, kv_share, r, a, bt[b], t)
                    r = rq[R_Q_NEXT, r]
                if pi[P_PP, a] == 1:
                    start_p = a
            elif priority == PREFILL_FREE:
                pi[P_FREE_PENDING, a] = 0
                start_p = a
            elif priority == KV_VISIBLE:  # a mixed machine keeps arrived KV apart from its prompts
                head, tail = (D_K_HEAD, D_K_TAIL) if di[D_MIXED, a] == 1 else (D_W_HEAD, D_W_TAIL)
                _queue_and_wake(rq, di, df, tab_i, pieces, ht, hi, hs, a, b, t, head, tail, True)
            elif priority == TRANSFER_FAILED:  # recompute: back to the prefill pool
                d, r = a, b
                di[D_LOAD, d] -= rq[R_PROMPT, r] + rq[R_OUTPUT, r]
                _enqueue_prefill(rq, pi, pf, ht, hi, hs, r, t, _pick_prefill(pi, pav_ptr, pav_t, t))
            elif b == di[D_VERSION, a] and di[D_MIXED, a] == 1:
                _mixed_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, a, t, cl)
            elif b == di[D_VERSION, a]:  # a boundary that was not cancelled by a cut
                _decode_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, a, t, di[D_RUN_K, a], cl)
        if start_p >= 0 and _start_prefill(rq, rt, pi, pf, bi, bt, tab_i, pieces, ht, hi, hs,
                                           start_p, t, n_batches):
            b = n_batches
            n_batches += 1
            if n_d > 0 and schedule == 1:  # per-layer streaming books the link as the batch starts
                r = bi[0, b]
                for _ in range(bi[1, b]):
                    _book_transfer(rq, rt, pi, di, df, lru, hash_vals, hash_ptr, link, ht, hi, hs,
                                   n_hash, block_tokens, schedule, layers, kv_bytes, failure, route,
                                   dav_ptr, dav_t, n_dec, kv_share, r, start_p, t, rt[T_P_END, r])
                    r = rq[R_Q_NEXT, r]
    return events


# --- colocated: both phases on one instance ------------------------------------------------------

@njit(cache=True)
def _colo_schedule(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t):
    """Choose what colocated instance c runs from t: a prefill batch, a mixed chunk iteration,
    a stretch of decode-only steps, or nothing.

    prefill-first (vLLM default): queued prompts whose KV fits run as one FCFS batch under the
    token cap while decodes stall. chunked (Sarathi-Serve): every active decode takes one token
    of the iteration's budget, the rest goes to prompt chunks in FCFS order, continuing a
    partly prefilled prompt first. Decode-only stretches advance in closed form.
    """
    di[D_VERSION, c] += 1
    if di[D_POLICY, c] == POLICY_PREFILL_FIRST:
        n = 0
        tok = 0
        tok2 = 0.0
        first = di[D_W_HEAD, c]
        while di[D_W_HEAD, c] >= 0:
            r = di[D_W_HEAD, c]
            length = rq[R_PROMPT, r]
            if n > 0 and tok + length > di[D_TOKEN_CAP, c]:
                break
            if di[D_RESERVED, c] + length + rq[R_OUTPUT, r] > di[D_CAP, c]:
                break
            di[D_W_HEAD, c] = rq[R_W_NEXT, r]
            if di[D_W_HEAD, c] < 0:
                di[D_W_TAIL, c] = -1
            di[D_RESERVED, c] += length + rq[R_OUTPUT, r]
            rt[T_P_START, r] = t
            n += 1
            tok += length
            tok2 += float(length) * float(length)
        if n > 0:
            duration = latency_s(tab_i, pieces, di[D_M_PREFILL, c], n, float(tok), tok2)
            di[D_MODE, c] = _ITERATION
            di[D_IT_FIRST, c] = first
            di[D_IT_N, c] = n
            df[F_BUSY, c] += duration
            _push(ht, hi, hs, t + duration, np.int64(BOUNDARY), c, di[D_VERSION, c])
            return
    else:
        budget = di[D_CHUNK, c] - di[D_B, c]
        chunks = 0
        sum_c = 0
        sum_c2 = 0.0
        if budget > 0:
            # partly prefilled prompts first, in admission order
            r = di[D_PF_HEAD, c]
            while r >= 0 and budget > 0:
                take = min(budget, rq[R_PROMPT, r] - rq[R_PF_DONE, r])
                rq[R_CHUNK, r] = take
                budget -= take
                chunks += 1
                sum_c += take
                o = float(rq[R_PF_DONE, r])
                sum_c2 += (o + take) * (o + take) - o * o
                r = rq[R_PF_NEXT, r]
            # then new prompts whose KV fits
            while budget > 0:
                r = _take_if_fits(rq, di, c, D_W_HEAD, D_W_TAIL)
                if r < 0:
                    break
                rt[T_P_START, r] = t
                rq[R_PF_DONE, r] = 0
                _append(rq, di, c, r, D_PF_HEAD, D_PF_TAIL, R_PF_NEXT)
                take = min(budget, rq[R_PROMPT, r])
                rq[R_CHUNK, r] = take
                budget -= take
                chunks += 1
                sum_c += take
                sum_c2 += float(take) * float(take)
        if chunks > 0:
            duration = mixed_iteration_s(tab_i, pieces, di[D_M_PREFILL, c], di[D_MODEL, c], di[D_B, c],
                                         float(di[D_S, c]), chunks, float(sum_c), sum_c2)
            di[D_MODE, c] = _ITERATION
            di[D_IT_N, c] = di[D_B, c]  # decode rows riding along this iteration
            df[F_BUSY, c] += duration
            _push(ht, hi, hs, t + duration, np.int64(BOUNDARY), c, di[D_VERSION, c])
            return
    _run_or_idle(rq, di, df, tab_i, pieces, ht, hi, hs, c, t)


@njit(cache=True)
def _colo_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t, cl):
    """Colocated instance c finishes what it was running at t (nothing, if it was starting),
    then plans what comes next."""
    _colo_finish(rq, rt, di, df, c, t, cl)
    _colo_schedule(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t)


@njit(cache=True)
def _mixed_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t, cl):
    """Mixed machine c finishes what it ran, admits requests whose KV arrived (FIFO, while their
    prompt + output fit the KV not reserved), then plans what comes next."""
    _colo_finish(rq, rt, di, df, c, t, cl)
    r = _take_if_fits(rq, di, c, D_K_HEAD, D_K_TAIL)
    while r >= 0:
        _activate(rq, rt, di, c, r, t, cl)
        r = _take_if_fits(rq, di, c, D_K_HEAD, D_K_TAIL)
    _colo_schedule(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t)


@njit(cache=True)
def _colo_finish(rq, rt, di, df, c, t, cl):
    """What colocated (or mixed) instance c was running completes at t."""
    if di[D_MODE, c] == _DECODE_RUN:
        _advance(rq, rt, di, df, c, t, di[D_RUN_K, c], cl)
    elif di[D_MODE, c] == _STARTING:
        pass
    elif di[D_POLICY, c] == POLICY_PREFILL_FIRST:
        # the whole batch completes its prompts; each gets its first token now (decodes stalled)
        r = di[D_IT_FIRST, c]
        for _ in range(di[D_IT_N, c]):
            nxt = rq[R_W_NEXT, r]
            rt[T_P_END, r] = t
            _activate(rq, rt, di, c, r, t, cl)
            r = nxt
    else:
        if di[D_IT_N, c] > 0:
            # the decode rows took one step; the iteration's time is already in busy
            df[F_RUN_T0, c] = t
            _advance(rq, rt, di, df, c, t, np.int64(1), cl)
        r = di[D_PF_HEAD, c]
        while r >= 0 and rq[R_CHUNK, r] > 0:
            nxt = rq[R_PF_NEXT, r]
            rq[R_PF_DONE, r] += rq[R_CHUNK, r]
            rq[R_CHUNK, r] = 0
            if rq[R_PF_DONE, r] == rq[R_PROMPT, r]:
                di[D_PF_HEAD, c] = nxt
                if nxt < 0:
                    di[D_PF_TAIL, c] = -1
                rt[T_P_END, r] = t
                _activate(rq, rt, di, c, r, t, cl)
            r = nxt


@njit(cache=True)
def _colo_arrive(rq, di, df, tab_i, pieces, ht, hi, hs, c, r, t):
    """Request r (routed, its load counted) queues for its prompt at colocated or mixed instance c;
    a running stretch is cut only if a prompt could start at its next step boundary."""
    room = di[D_POLICY, c] == POLICY_PREFILL_FIRST or di[D_CHUNK, c] > di[D_B, c]
    _queue_and_wake(rq, di, df, tab_i, pieces, ht, hi, hs, c, r, t, D_W_HEAD, D_W_TAIL, room)


@njit(cache=True)
def _queue_and_wake(rq, di, df, tab_i, pieces, ht, hi, hs, i, r, t, head, tail, may_cut):
    """Queue request r on instance i's FIFO (head/tail rows). An idle instance plans a boundary
    now (with everything else landing now); a decode stretch is cut at its next step boundary when
    r heads the queue and fits (and ``may_cut``), so it joins there instead of the planned one."""
    was_empty = di[head, i] < 0
    _append(rq, di, i, r, head, tail, R_W_NEXT)
    if di[D_MODE, i] == _IDLE:
        _plan_start(di, ht, hi, hs, i, t)
    elif di[D_MODE, i] == _DECODE_RUN and was_empty and may_cut and \
            di[D_RESERVED, i] + rq[R_PROMPT, r] + rq[R_OUTPUT, r] <= di[D_CAP, i]:
        _cut_run(di, df, tab_i, pieces, ht, hi, hs, i, t, di[D_MODEL, i])


@njit(cache=True)
def _least_outstanding(di, need, av_ptr, av_t, t, lo):
    """Colocated routing over instances [lo, end): fewest outstanding tokens among those taking
    requests that can hold ``need`` (ties → lowest); when none takes requests, among all."""
    c = -1
    for rule in range(2):
        for i in range(lo, di.shape[1]):
            if di[D_CAP, i] >= need and (rule == 1 or _available(av_ptr, av_t, i, t)) and \
                    (c < 0 or di[D_LOAD, i] < di[D_LOAD, c]):
                c = i
        if c >= 0:
            break
    return c


@njit(cache=True)
def run_colocated(rq, rt, rejected, tab_i, pieces, di, df, av_ptr, av_t, heap_capacity, cl):
    """Simulate colocated instances in place on the state arrays; routing by least outstanding
    tokens (prompt + output of requests routed and not finished) among the instances taking
    requests (``av_ptr``/``av_t``: each instance's intervals), ties → lowest index. Returns the
    number of events processed."""
    n = rq.shape[1]
    ht, hi, hs = _new_heap(heap_capacity)
    events = 0
    nxt = 0
    while nxt < n and rt[T_ARRIVAL, nxt] < np.inf or hs[0] > 0:
        if nxt < n and (hs[0] == 0 or rt[T_ARRIVAL, nxt] <= ht[0]):
            r = nxt
            nxt += 1
            if rejected[r]:
                _release(rt, cl, rt[T_ARRIVAL, r])
                continue
            events += 1
            t = rt[T_ARRIVAL, r]
            need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
            c = _least_outstanding(di, need, av_ptr, av_t, t, 0)
            di[D_LOAD, c] += need
            rq[R_P_INST, r] = c
            _colo_arrive(rq, di, df, tab_i, pieces, ht, hi, hs, c, r, t)
            continue
        t, priority, c, version = _pop(ht, hi, hs)
        events += 1
        if version == di[D_VERSION, c]:
            _colo_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t, cl)
    return events
