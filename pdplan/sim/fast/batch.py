"""Decode batches, shared by decode, colocated and mixed instances: joining, stepping, leaving.

Without preemption a batch only ever loses its requests in FIN_STEP order, so the active set is
a min-heap on FIN_STEP with insert and delete-min: a pairing heap threaded through the
per-request CHILD / SIBLING fields (no per-instance storage, O(1) insert, O(log B) amortised
delete), which keeps a boundary O(log B) instead of a scan of the batch. A running batch plans
its next boundary where its first member finishes and is cut short when a waiting request
could join earlier.

An instance with attention data parallelism is several ranks (columns of ``di``, see
:mod:`.fields`), each with its own heap, KV and queue, stepping together: its stretch ends where
the first member of any rank finishes, and lasts the ranks' synchronised steps
(:func:`pdplan.sim.fast.latency.instance_run_s`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pdplan.sim.events import BOUNDARY
from pdplan.sim.fast.clock import finished, push, release
from pdplan.sim.fast.fields import (
    D_ADP_K,
    D_B,
    D_CAP,
    D_DECODE_FIRST,
    D_DP,
    D_JOIN_HEAD,
    D_LEAD,
    D_LOAD,
    D_MAX_RUN,
    D_MODE,
    D_NEXT_RANK,
    D_OUT,
    D_RECV_C,
    D_RECV_N,
    D_RESERVED,
    D_ROOT,
    D_RUN_K,
    D_RUNNING,
    D_S,
    D_STEPS,
    D_TURN,
    D_U_HEAD,
    D_VERSION,
    D_W_HEAD,
    D_W_TAIL,
    D_WAIT_C,
    D_WAIT_J,
    D_WAIT_N,
    D_WAIT_TOK,
    DECODE_RUN,
    F_BUSY,
    F_RUN_T0,
    IDLE,
    R_CHILD,
    R_FIN_STEP,
    R_OUTPUT,
    R_PROMPT,
    R_SIBLING,
    R_W_NEXT,
    STARTING,
    T_FINISH,
    T_FIRST,
    T_JOIN,
)
from pdplan.sim.fast.latency import instance_run_s, instance_steps_to_reach


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
def activate(rq, rt, di, i, r, t, cl):
    """Request r joins rank i's batch with its first token out at t (its KV reserved by the caller)."""
    rt[T_FIRST, r] = rt[T_JOIN, r] = t
    need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
    if rq[R_OUTPUT, r] == 1:  # the prefill's token was the only one
        rt[T_FINISH, r] = t
        release(rt, cl, t)
        _leave(di, i, need)
        return
    rq[R_FIN_STEP, r] = di[D_STEPS, i] + rq[R_OUTPUT, r] - 1
    rq[R_CHILD, r] = -1
    rq[R_SIBLING, r] = -1
    di[D_ROOT, i] = _meld(rq, di[D_ROOT, i], r)
    di[D_B, i] += 1
    di[D_S, i] += rq[R_PROMPT, r] + 1  # context at its first step: the prompt and the first token


@njit(cache=True)
def advance(rq, rt, di, df, d, t, k, cl):
    """Run k steps of instance d's ranks ending at t (its busy time from the stretch's start)."""
    if k <= 0:
        return
    df[F_BUSY, d] += t - df[F_RUN_T0, d]
    for i in range(d, d + di[D_DP, d]):
        advance_rank(rq, rt, di, i, t, k, cl)


@njit(cache=True)
def advance_rank(rq, rt, di, i, t, k, cl):
    """Run k steps of rank i's batch ending at t; requests at their last token leave and free KV."""
    di[D_STEPS, i] += k
    di[D_S, i] += di[D_B, i] * k
    while di[D_ROOT, i] >= 0 and rq[R_FIN_STEP, di[D_ROOT, i]] == di[D_STEPS, i]:
        r = di[D_ROOT, i]
        di[D_ROOT, i] = _delete_min(rq, r)
        rt[T_FINISH, r] = t
        finished(rq, rt, cl, r, t)
        need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
        di[D_S, i] -= need  # its context after the last step is prompt + output
        di[D_B, i] -= 1
        _leave(di, i, need)


@njit(cache=True, inline="always")
def _leave(di, i, need):
    """A finished request of ``need`` KV tokens leaves rank i: its KV, its running slot, its share
    of the instance's routed load and of the rank's outstanding requests are freed."""
    di[D_RESERVED, i] -= need
    di[D_RUNNING, i] -= 1
    di[D_LOAD, di[D_LEAD, i]] -= need
    di[D_OUT, i] -= 1


@njit(cache=True)
def _plan_run(rq, di, df, tab_i, pieces, ht, hi, hs, d, t):
    """Instance d's batches run unchanged from t until the first request of any rank finishes;
    schedule that boundary."""
    k = np.int64(-1)
    for i in range(d, d + di[D_DP, d]):
        if di[D_B, i] > 0 and (k < 0 or rq[R_FIN_STEP, di[D_ROOT, i]] - di[D_STEPS, i] < k):
            k = rq[R_FIN_STEP, di[D_ROOT, i]] - di[D_STEPS, i]
    if di[D_RECV_N, d] > 1 and di[D_U_HEAD, d] >= 0:  # requests wait to be received: stop at the receive
        k = min(k, di[D_RECV_N, d] - di[D_RECV_C, d])
    if di[D_WAIT_J, d] >= 0:  # its iterations hold prompts (batch waiting): stop where the hold ends
        k = min(k, di[D_WAIT_J, d] + di[D_WAIT_N, d] - di[D_WAIT_C, d])
    if di[D_ADP_K, d] >= 0:  # the attention-DP balance holds prompts: stop where it releases them
        k = min(k, di[D_ADP_K, d])
    df[F_RUN_T0, d] = t
    di[D_RUN_K, d] = k
    end = t + instance_run_s(tab_i, pieces, di, d, k)
    push(ht, hi, hs, end, np.int64(BOUNDARY), d, di[D_VERSION, d])


@njit(cache=True)
def _cut_run(di, df, tab_i, pieces, ht, hi, hs, d, t):
    """Stop instance d's planned stretch at the first step boundary at or after t."""
    _cut_run_at(di, df, tab_i, pieces, ht, hi, hs, d,
                instance_steps_to_reach(tab_i, pieces, di, d, di[D_RUN_K, d], t - df[F_RUN_T0, d]))


@njit(cache=True)
def cut_at_receive(di, df, tab_i, pieces, ht, hi, hs, d, t):
    """Stop instance d's planned stretch at its first receive at or after t: the first step boundary
    at which its decode steps since the last receive reach a multiple of RECV_N."""
    n = di[D_RECV_N, d]
    j = instance_steps_to_reach(tab_i, pieces, di, d, di[D_RUN_K, d], t - df[F_RUN_T0, d])
    _cut_run_at(di, df, tab_i, pieces, ht, hi, hs, d, j + (n - (di[D_RECV_C, d] + j) % n) % n)


@njit(cache=True)
def cut_at_hold_end(di, df, tab_i, pieces, ht, hi, hs, d, t, tokens):
    """Batch waiting, at an arrival during instance d's decode stretch that leaves ``tokens`` prompt
    tokens to run: from its next step boundary the stretch's iterations hold the prompts, and it is cut
    where the hold ends: at that boundary if the tokens plus one per decode reach WAIT_TOK, else once
    WAIT_N iterations held them (a hold already running keeps its end)."""
    j = instance_steps_to_reach(tab_i, pieces, di, d, di[D_RUN_K, d], t - df[F_RUN_T0, d])
    if tokens + di[D_B, d] >= di[D_WAIT_TOK, d]:
        end = j
    elif di[D_WAIT_J, d] < 0:
        end = j + max(0, di[D_WAIT_N, d] - di[D_WAIT_C, d])
    else:
        return
    if di[D_WAIT_J, d] < 0:
        di[D_WAIT_J, d] = j
    _cut_run_at(di, df, tab_i, pieces, ht, hi, hs, d, end)


@njit(cache=True)
def _cut_run_at(di, df, tab_i, pieces, ht, hi, hs, d, j):
    """Stop instance d's planned stretch after j steps, if it was to run longer."""
    if j < di[D_RUN_K, d]:
        di[D_VERSION, d] += 1
        di[D_RUN_K, d] = j
        end = df[F_RUN_T0, d] + instance_run_s(tab_i, pieces, di, d, j)
        push(ht, hi, hs, end, np.int64(BOUNDARY), d, di[D_VERSION, d])


@njit(cache=True)
def plan_start(di, ht, hi, hs, i, t):
    """Idle instance i plans a zero-step boundary at t: work starts once every event of this
    instant with a lower priority (arrivals, KV landing) has queued its request."""
    di[D_MODE, i] = STARTING
    di[D_RUN_K, i] = 0
    di[D_VERSION, i] += 1
    push(ht, hi, hs, t, np.int64(BOUNDARY), i, di[D_VERSION, i])


@njit(cache=True, inline="always")
def append(rq, di, i, r, head, tail, link):
    """Append request r to instance i's FIFO (head/tail rows of ``di``, a decode or a prefill
    instance table; link row of rq)."""
    rq[link, r] = -1
    if di[tail, i] >= 0:
        rq[link, di[tail, i]] = r
    else:
        di[head, i] = r
    di[tail, i] = r


@njit(cache=True, inline="always")
def admits(rq, di, i, r, taken_kv=0, taken_slots=0):
    """Whether rank i can admit request r now: its prompt + output fit the KV not reserved, and a
    running slot is free (the pool's max_running_requests); ``taken_kv`` and ``taken_slots``: what
    requests ahead of it would take first."""
    return di[D_RESERVED, i] + taken_kv + rq[R_PROMPT, r] + rq[R_OUTPUT, r] <= di[D_CAP, i] and \
        di[D_RUNNING, i] + taken_slots < di[D_MAX_RUN, i]


@njit(cache=True)
def take_if_fits(rq, di, i, head, tail):
    """The head of instance i's FIFO (head/tail rows, linked by W_NEXT) with its prompt + output
    reserved and a running slot taken, if they fit the KV not reserved and a slot is free; else -1:
    the head stalls and nothing behind it overtakes."""
    r = di[head, i]
    if r < 0 or not admits(rq, di, i, r):
        return -1
    di[head, i] = rq[R_W_NEXT, r]
    if di[head, i] < 0:
        di[tail, i] = -1
    di[D_RESERVED, i] += rq[R_PROMPT, r] + rq[R_OUTPUT, r]
    di[D_RUNNING, i] += 1
    return r


@njit(cache=True)
def pick_rank(di, d):
    """The rank of instance d that takes a request, now counted there: fewest outstanding requests
    (queued or running), ties to the lowest rank (:func:`pdplan.sim.reference.ranks.pick_rank` states
    the rule and its sources); on an instance whose requests take its ranks in turn (TURN), the next."""
    if di[D_TURN, d] == 1:
        best = d + di[D_NEXT_RANK, d]
        di[D_NEXT_RANK, d] = (di[D_NEXT_RANK, d] + 1) % di[D_DP, d]
    else:
        best = d
        for i in range(d + 1, d + di[D_DP, d]):
            if di[D_OUT, i] < di[D_OUT, best]:
                best = i
    di[D_OUT, best] += 1
    return best


@njit(cache=True)
def queue_and_wake(rq, di, df, tab_i, pieces, ht, hi, hs, d, i, r, t, head, tail, may_cut):
    """Queue request r on rank i's FIFO (head/tail rows) of instance d. An idle instance plans a
    boundary now (with everything else landing now); a decode stretch is cut at its next step
    boundary when r heads its rank's queue and fits there (and ``may_cut``), so it joins there
    instead of the planned one."""
    was_empty = di[head, i] < 0
    append(rq, di, i, r, head, tail, R_W_NEXT)
    if di[D_MODE, d] == IDLE:
        plan_start(di, ht, hi, hs, d, t)
    elif di[D_MODE, d] == DECODE_RUN and was_empty and may_cut and admits(rq, di, i, r):
        _cut_run(di, df, tab_i, pieces, ht, hi, hs, d, t)


@njit(cache=True)
def decode_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, d, t, k, cl):
    """Instance d reaches a step boundary at t after k steps: finishes leave, waiting KV joins each
    rank (FIFO, while its prompt + output tokens fit the rank's KV not reserved), and the next
    stretch is planned."""
    advance(rq, rt, di, df, d, t, k, cl)
    for i in range(d, d + di[D_DP, d]):
        if di[D_DECODE_FIRST, d]:  # where this boundary's joiners start, to give them their first token later
            di[D_JOIN_HEAD, i] = di[D_W_HEAD, i]
        r = take_if_fits(rq, di, i, np.int64(D_W_HEAD), np.int64(D_W_TAIL))
        while r >= 0:
            activate(rq, rt, di, i, r, t, cl)
            r = take_if_fits(rq, di, i, np.int64(D_W_HEAD), np.int64(D_W_TAIL))
    if di[D_DECODE_FIRST, d]:
        _first_tokens_with_step(rq, rt, di, tab_i, pieces, d, t)
    di[D_VERSION, d] += 1
    run_or_idle(rq, di, df, tab_i, pieces, ht, hi, hs, d, t)


@njit(cache=True)
def _first_tokens_with_step(rq, rt, di, tab_i, pieces, d, t):
    """The requests that joined instance d's ranks at t get their first token with the first step they run in:
    its end, the step of the batches they joined (a request whose prefill's token was its only one finished at t,
    leaving no batch to step if it was alone). Each rank's joiners run along its waiting queue's links (W_NEXT)
    from its head before the joins (JOIN_HEAD) to its head after them."""
    step = -1.0
    for i in range(d, d + di[D_DP, d]):
        r = di[D_JOIN_HEAD, i]
        while r >= 0 and r != di[D_W_HEAD, i]:
            if rq[R_OUTPUT, r] > 1:
                if step < 0:
                    step = instance_run_s(tab_i, pieces, di, d, np.int64(1))
                rt[T_FIRST, r] = t + step
            r = rq[R_W_NEXT, r]


@njit(cache=True)
def next_boundary(tab_i, pieces, di, df, d, t):
    """Instance d's first iteration boundary at or after t: the end of the step its planned stretch is in at t, or
    t when it is not running one (idle, or starting at t)."""
    if di[D_MODE, d] != DECODE_RUN:
        return t
    t0 = df[F_RUN_T0, d]
    steps = instance_steps_to_reach(tab_i, pieces, di, d, di[D_RUN_K, d], t - t0)
    return t0 + instance_run_s(tab_i, pieces, di, d, steps)


@njit(cache=True)
def run_or_idle(rq, di, df, tab_i, pieces, ht, hi, hs, d, t):
    """Instance d runs its decode batches from t on (until the next boundary), or idles when empty."""
    for i in range(d, d + di[D_DP, d]):
        if di[D_B, i] > 0:
            di[D_MODE, d] = DECODE_RUN
            _plan_run(rq, di, df, tab_i, pieces, ht, hi, hs, d, t)
            return
    di[D_MODE, d] = IDLE
