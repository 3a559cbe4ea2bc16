"""Colocated instances (both phases on one instance, one iteration at a time), Splitwise's mixed
machines (colocated batching inside a disaggregated plan) and the colocated event loop.

Policies: prefill-first (vLLM's default: waiting prompts run as one FCFS batch while decodes
stall) and chunked (Sarathi-Serve: each iteration's token budget goes to the active decodes
first, then to prompt chunks).

With attention data parallelism each rank plans its own iteration (a prefill batch, a chunked
iteration, or one decode step) and the instance's iteration lasts the longest rank's; when no
rank has prompt work the ranks' decodes run as one synchronised stretch (:mod:`.batch`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pdplan.sim.events import ARRIVAL, BOUNDARY
from pdplan.sim.fast.batch import (
    activate,
    admits,
    advance,
    advance_rank,
    append,
    cut_at_hold_end,
    cut_at_receive,
    pick_rank,
    queue_and_wake,
    run_or_idle,
    take_if_fits,
)
from pdplan.sim.fast.clock import new_heap, next_event, push
from pdplan.sim.fast.fields import (
    ADP_BATCH,
    ADP_COUNT,
    ADP_RESET,
    D_ADP_BC,
    D_ADP_C,
    D_ADP_K,
    D_ADP_MODE,
    D_ADP_N,
    D_ADP_W,
    D_B,
    D_CHUNK,
    D_DP,
    D_INST,
    D_IT_FIRST,
    D_IT_KIND,
    D_IT_N,
    D_IT_TOKENS,
    D_K_HEAD,
    D_K_TAIL,
    D_LOAD,
    D_LRU_CAP,
    D_LRU_HEAD,
    D_M_GROUP_D,
    D_M_GROUP_P,
    D_M_PREFILL,
    D_MAX_RUN,
    D_MODE,
    D_MODEL,
    D_PENDING,
    D_PF_HEAD,
    D_PF_TAIL,
    D_POLICY,
    D_RECV_C,
    D_RECV_N,
    D_RUN_K,
    D_S,
    D_TOKEN_CAP,
    D_U_HEAD,
    D_U_TAIL,
    D_VERSION,
    D_W_HEAD,
    D_W_TAIL,
    D_WAIT_C,
    D_WAIT_J,
    D_WAIT_N,
    D_WAIT_TOK,
    DECODE_RUN,
    F_BUSY,
    F_IT_S,
    F_PROMPT_S,
    IT_CHUNKS,
    IT_NONE,
    IT_PREFILL,
    IT_STEP,
    ITERATION,
    POLICY_PREFILL_FIRST,
    R_CACHED,
    R_CHUNK,
    R_OUTPUT,
    R_P_INST,
    R_PF_DONE,
    R_PF_NEXT,
    R_PROMPT,
    R_W_NEXT,
    STARTING,
    T_P_END,
    T_P_START,
)
from pdplan.sim.fast.latency import iteration_group_s, latency_s, mixed_iteration_s
from pdplan.sim.fast.prefix import reuse
from pdplan.sim.fast.routing import least_outstanding


@njit(cache=True)
def colo_arrive(rq, di, df, tab_i, pieces, ht, hi, hs, c, r, t):
    """Request r (routed, its load counted) queues for its prompt at a rank of colocated or mixed
    instance c; a running stretch is cut only if a prompt could start there at its next step
    boundary."""
    i = pick_rank(di, c)
    di[D_PENDING, i] += rq[R_PROMPT, r] - rq[R_CACHED, r]
    if di[D_RECV_N, c] > 1 and di[D_MODE, c] == DECODE_RUN:  # taken in at the stretch's next receive
        first = di[D_U_HEAD, c] < 0
        append(rq, di, c, r, D_U_HEAD, D_U_TAIL, R_W_NEXT)
        if first:
            cut_at_receive(di, df, tab_i, pieces, ht, hi, hs, c, t)
        return
    if di[D_WAIT_N, c] > 0 and di[D_MODE, c] == DECODE_RUN:  # batch waiting holds it from the next boundary
        append(rq, di, c, r, D_W_HEAD, D_W_TAIL, R_W_NEXT)
        tokens = _prompt_tokens(rq, di, c)
        if tokens > 0:
            cut_at_hold_end(di, df, tab_i, pieces, ht, hi, hs, c, t, tokens)
        return
    room = di[D_POLICY, c] == POLICY_PREFILL_FIRST or di[D_CHUNK, c] > di[D_B, i]
    queue_and_wake(rq, di, df, tab_i, pieces, ht, hi, hs, c, i, r, t, np.int64(D_W_HEAD), np.int64(D_W_TAIL),
                   room)


@njit(cache=True)
def _prompt_tokens(rq, di, i):
    """The prompt tokens a chunked iteration of rank i would compute now, nothing admitted."""
    budget = di[D_CHUNK, i] - di[D_B, i]
    tokens = 0
    r = di[D_PF_HEAD, i]
    while r >= 0 and budget > 0:
        take = min(budget, rq[R_PROMPT, r] - rq[R_PF_DONE, r])
        tokens += take
        budget -= take
        r = rq[R_PF_NEXT, r]
    kv = 0
    slots = 0
    r = di[D_W_HEAD, i]
    while r >= 0 and budget > 0 and admits(rq, di, i, r, kv, slots):
        kv += rq[R_PROMPT, r] + rq[R_OUTPUT, r]
        slots += 1
        take = min(budget, rq[R_PROMPT, r] - rq[R_CACHED, r])
        tokens += take
        budget -= take
        r = rq[R_W_NEXT, r]
    return tokens


@njit(cache=True)
def _held(rq, di, i):
    """TensorRT-LLM's batch waiting (``PyExecutor._waiting_requests``) at an iteration of rank i with
    prompt work and decodes: the prompts are held, unless WAIT_N iterations held them already or their
    tokens plus one per decode reach WAIT_TOK (then the count restarts). A hold's iterations are
    counted when its stretch ends (:func:`_colo_boundary`)."""
    if di[D_WAIT_N, i] == 0 or di[D_B, i] == 0:
        return False
    tokens = _prompt_tokens(rq, di, i)
    if tokens == 0:
        return False
    if di[D_WAIT_C, i] >= di[D_WAIT_N, i] or tokens + di[D_B, i] >= di[D_WAIT_TOK, i]:
        di[D_WAIT_C, i] = 0
        return False
    return True


@njit(cache=True, inline="always")
def _balanced(di, c):
    """Whether colocated instance c runs TensorRT-LLM's attention-DP balance ((0, 0): it holds nothing)."""
    return di[D_ADP_N, c] > 0 or di[D_ADP_W, c] > 0


@njit(cache=True)
def _balance_holds(rq, di, c):
    """TensorRT-LLM's attention-DP balance (``PyExecutor._balance_adp_requests``) at an iteration of DP
    instance c: whether every rank's prompt work is held this iteration (the rule:
    :meth:`pdplan.sim.reference.colocated.ColocatedInstance._balance_holds`). It also sets how a decode
    stretch from here moves the counters (ADP_MODE) and, while it holds prompts, the steps after which
    the balance releases them (ADP_K)."""
    dp = di[D_DP, c]
    anyone = False
    every_prompt = True
    some_prompt = False
    free = True
    for i in range(c, c + dp):
        if di[D_B, i] > 0 or di[D_W_HEAD, i] >= 0 or di[D_PF_HEAD, i] >= 0:
            anyone = True
        if _prompt_tokens(rq, di, i) > 0:
            some_prompt = True
        else:
            every_prompt = False
        if di[D_B, i] >= di[D_MAX_RUN, i]:
            free = False
    decoding = True  # a rank with no request at all decodes a dummy while another rank has one
    for i in range(c, c + dp):
        if di[D_B, i] == 0 and (di[D_W_HEAD, i] >= 0 or di[D_PF_HEAD, i] >= 0 or not anyone):
            decoding = False
    if every_prompt and free:
        di[D_ADP_C, c] = 0
        if not decoding:
            return False
        if di[D_ADP_BC, c] < di[D_ADP_W, c]:
            di[D_ADP_BC, c] += 1
            di[D_ADP_MODE, c] = ADP_BATCH
            di[D_ADP_K, c] = di[D_ADP_W, c] - di[D_ADP_BC, c] + 1
            return True
        di[D_ADP_BC, c] = 0
        return False
    di[D_ADP_C, c] += 1
    if di[D_ADP_C, c] >= di[D_ADP_N, c] or not decoding:
        di[D_ADP_C, c] = 0
        di[D_ADP_MODE, c] = ADP_COUNT if decoding else ADP_RESET
        return False
    di[D_ADP_MODE, c] = ADP_COUNT
    if some_prompt:
        di[D_ADP_K, c] = di[D_ADP_N, c] - di[D_ADP_C, c]
    return some_prompt


@njit(cache=True)
def _count_balance(di, c, steps):
    """A decode stretch of DP instance c ran ``steps`` steps after the one its balance was decided at:
    each was an iteration the balance counted (:func:`_balance_holds`)."""
    if di[D_ADP_MODE, c] == ADP_BATCH:
        di[D_ADP_BC, c] += steps
    elif di[D_ADP_MODE, c] == ADP_RESET or di[D_ADP_N, c] == 0:
        di[D_ADP_C, c] = 0
    else:
        di[D_ADP_C, c] = (di[D_ADP_C, c] + steps) % di[D_ADP_N, c]


@njit(cache=True)
def _plan_rank(rq, rt, di, df, tab_i, pieces, i, t):
    """Rank i's prompt work for the iteration starting at t, its prompts admitted: the seconds of
    its prefill batch or chunked iteration (``D_IT_KIND`` says which), or -1 when it has none.

    prefill-first (vLLM default): queued prompts whose KV fits run as one FCFS batch under the
    token cap while decodes stall. chunked (Sarathi-Serve): every active decode takes one token
    of the iteration's budget, the rest goes to prompt chunks in FCFS order, continuing a
    partly prefilled prompt first.
    """
    di[D_IT_KIND, i] = IT_NONE
    if di[D_POLICY, i] == POLICY_PREFILL_FIRST:
        n = 0
        tok = 0
        tok2 = 0.0
        first = di[D_W_HEAD, i]
        while di[D_W_HEAD, i] >= 0:
            r = di[D_W_HEAD, i]
            length = rq[R_PROMPT, r]
            new = length - rq[R_CACHED, r]  # a cached prefix is not computed again
            if n > 0 and tok + new > di[D_TOKEN_CAP, i]:
                break
            if take_if_fits(rq, di, i, np.int64(D_W_HEAD), np.int64(D_W_TAIL)) < 0:
                break
            rt[T_P_START, r] = t
            n += 1
            tok += new
            tok2 += float(length) * float(length) - float(rq[R_CACHED, r]) ** 2
        if n > 0:
            di[D_IT_KIND, i] = IT_PREFILL
            di[D_IT_FIRST, i] = first
            di[D_IT_N, i] = n
            di[D_IT_TOKENS, i] = tok
            return latency_s(tab_i, pieces, di[D_M_PREFILL, i], n, float(tok), tok2)
        return -1.0
    if _held(rq, di, i):  # one rank: its decode stretch holds the prompts from its first step
        di[D_WAIT_J, i] = 0
        return -1.0
    budget = di[D_CHUNK, i] - di[D_B, i]
    chunks = 0
    sum_c = 0
    sum_c2 = 0.0
    if budget > 0:
        # partly prefilled prompts first, in admission order
        r = di[D_PF_HEAD, i]
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
            r = take_if_fits(rq, di, i, np.int64(D_W_HEAD), np.int64(D_W_TAIL))
            if r < 0:
                break
            rt[T_P_START, r] = t
            o = rq[R_CACHED, r]  # a cached prefix counts as prefilled
            rq[R_PF_DONE, r] = o
            append(rq, di, i, r, D_PF_HEAD, D_PF_TAIL, R_PF_NEXT)
            take = min(budget, rq[R_PROMPT, r] - o)
            rq[R_CHUNK, r] = take
            budget -= take
            chunks += 1
            sum_c += take
            sum_c2 += float(o + take) * float(o + take) - float(o) * float(o)
    if chunks > 0:
        di[D_IT_KIND, i] = IT_CHUNKS
        di[D_IT_N, i] = di[D_B, i]  # decode rows riding along this iteration
        di[D_IT_TOKENS, i] = sum_c
        return mixed_iteration_s(tab_i, pieces, di[D_M_PREFILL, i], di[D_MODEL, i], di[D_B, i],
                                 float(di[D_S, i]), chunks, float(sum_c), sum_c2, df[F_PROMPT_S, i])
    return -1.0


@njit(cache=True)
def _iteration_s(di, df, tab_i, pieces, c):
    """Seconds of instance c's iteration once every rank planned its prompt work: the ranks with
    decodes and none take one decode step; it lasts the longest rank's, each rank's less its own
    group share (g at DP × its rows), plus the group share of all the ranks' rows."""
    dp = di[D_DP, c]
    gp = di[D_M_GROUP_P, c]
    gd = di[D_M_GROUP_D, c]
    duration = 0.0
    found = False
    rows = np.int64(0)
    tokens = np.int64(0)
    for i in range(c, c + dp):
        kind = di[D_IT_KIND, i]
        if kind == IT_NONE and di[D_B, i] > 0:
            di[D_IT_KIND, i] = IT_STEP
            kind = IT_STEP
        if kind == IT_NONE:
            continue
        if kind == IT_STEP:
            x = mixed_iteration_s(tab_i, pieces, di[D_M_PREFILL, i], di[D_MODEL, i], di[D_B, i],
                                  float(di[D_S, i]), np.int64(0), 0.0, 0.0, 0.0)
        else:
            x = df[F_IT_S, i]
        own_rows = 0 if kind == IT_PREFILL else di[D_B, i]
        own_tokens = 0 if kind == IT_STEP else di[D_IT_TOKENS, i]
        x -= iteration_group_s(tab_i, pieces, gp, gd, dp * own_rows, dp * own_tokens)  # 0 without one
        rows += own_rows
        tokens += own_tokens
        if not found or x > duration:
            duration = x
            found = True
    return duration + iteration_group_s(tab_i, pieces, gp, gd, rows, tokens)


@njit(cache=True)
def _colo_schedule(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t):
    """Choose what colocated instance c runs from t: an iteration in which some rank has prompt
    work (the others with decodes take one decode step), lasting the longest rank's; else a
    stretch of decode-only steps (advanced in closed form), or nothing. With a group part each
    rank's time drops by its own share of it and the iteration adds the share of all the ranks'
    tokens (:func:`_iteration_s`). Under the attention-DP balance no rank plans prompt work in an
    iteration the balance holds (:func:`_balance_holds`)."""
    di[D_VERSION, c] += 1
    di[D_ADP_K, c] = -1
    held = _balanced(di, c) and _balance_holds(rq, di, c)
    prompt = False
    for i in range(c, c + di[D_DP, c]):
        if held:
            di[D_IT_KIND, i] = IT_NONE
            df[F_IT_S, i] = -1.0
            continue
        df[F_IT_S, i] = _plan_rank(rq, rt, di, df, tab_i, pieces, i, t)
        if df[F_IT_S, i] >= 0.0:
            prompt = True
    if prompt:
        duration = _iteration_s(di, df, tab_i, pieces, c)
        di[D_MODE, c] = ITERATION
        df[F_BUSY, c] += duration
        push(ht, hi, hs, t + duration, np.int64(BOUNDARY), c, di[D_VERSION, c])
        return
    run_or_idle(rq, di, df, tab_i, pieces, ht, hi, hs, c, t)


@njit(cache=True)
def _colo_finish(rq, rt, di, df, c, t, cl):
    """What colocated (or mixed) instance c was running completes at t."""
    if di[D_MODE, c] == DECODE_RUN:
        advance(rq, rt, di, df, c, t, di[D_RUN_K, c], cl)
        return
    if di[D_MODE, c] == STARTING:
        return
    for i in range(c, c + di[D_DP, c]):
        kind = di[D_IT_KIND, i]
        di[D_IT_KIND, i] = IT_NONE
        if kind == IT_STEP:
            advance_rank(rq, rt, di, i, t, np.int64(1), cl)
        elif kind == IT_PREFILL:
            # the whole batch completes its prompts; each gets its first token now (decodes stalled)
            r = di[D_IT_FIRST, i]
            for _ in range(di[D_IT_N, i]):
                nxt = rq[R_W_NEXT, r]
                di[D_PENDING, i] -= rq[R_PROMPT, r] - rq[R_CACHED, r]
                rt[T_P_END, r] = t
                activate(rq, rt, di, i, r, t, cl)
                r = nxt
        elif kind == IT_CHUNKS:
            if di[D_IT_N, i] > 0:  # the decode rows took one step; the iteration's time is in busy
                advance_rank(rq, rt, di, i, t, np.int64(1), cl)
            r = di[D_PF_HEAD, i]
            while r >= 0 and rq[R_CHUNK, r] > 0:
                nxt = rq[R_PF_NEXT, r]
                rq[R_PF_DONE, r] += rq[R_CHUNK, r]
                di[D_PENDING, i] -= rq[R_CHUNK, r]
                rq[R_CHUNK, r] = 0
                if rq[R_PF_DONE, r] == rq[R_PROMPT, r]:
                    di[D_PF_HEAD, i] = nxt
                    if nxt < 0:
                        di[D_PF_TAIL, i] = -1
                    rt[T_P_END, r] = t
                    activate(rq, rt, di, i, r, t, cl)
                r = nxt


@njit(cache=True)
def _colo_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t, cl):
    """Colocated instance c finishes what it was running at t (nothing, if it was starting), takes in
    the requests that arrived meanwhile if it receives now, then plans what comes next."""
    mode = di[D_MODE, c]
    steps = di[D_RUN_K, c]
    _colo_finish(rq, rt, di, df, c, t, cl)
    if di[D_WAIT_J, c] >= 0:  # the stretch's steps from WAIT_J on held prompts
        di[D_WAIT_C, c] += steps - di[D_WAIT_J, c]
        di[D_WAIT_J, c] = -1
    if mode == DECODE_RUN and steps > 1 and _balanced(di, c):
        _count_balance(di, c, steps - 1)
    if di[D_RECV_N, c] > 1:
        _receive(rq, di, c, mode == DECODE_RUN, steps)
    _colo_schedule(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t)


@njit(cache=True)
def _receive(rq, di, c, decoded, steps):
    """SGLang's receive skipper (``scheduler_recv_skipper.py``: a decode step weighs 1, a prompt
    iteration more than any interval, an idle loop 1) at a boundary of colocated instance c (one
    rank): after prompt work, or when nothing is left to run (its idle loop counts to the interval at
    once), it takes in the requests that arrived; after ``steps`` decode steps, only when its decode
    steps since the last receive reach a multiple of RECV_N."""
    if decoded:
        di[D_RECV_C, c] = (di[D_RECV_C, c] + steps) % di[D_RECV_N, c]
        idle = di[D_B, c] == 0 and di[D_W_HEAD, c] < 0 and di[D_PF_HEAD, c] < 0
        if di[D_RECV_C, c] != 0 and not idle:
            return
    di[D_RECV_C, c] = 0
    if di[D_U_HEAD, c] < 0:
        return
    if di[D_W_TAIL, c] >= 0:
        rq[R_W_NEXT, di[D_W_TAIL, c]] = di[D_U_HEAD, c]
    else:
        di[D_W_HEAD, c] = di[D_U_HEAD, c]
    di[D_W_TAIL, c] = di[D_U_TAIL, c]
    di[D_U_HEAD, c] = -1
    di[D_U_TAIL, c] = -1


@njit(cache=True)
def mixed_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t, cl):
    """Mixed machine c finishes what it ran, admits requests whose KV arrived (FIFO, while their
    prompt + output fit the KV not reserved), then plans what comes next."""
    _colo_finish(rq, rt, di, df, c, t, cl)
    r = take_if_fits(rq, di, c, np.int64(D_K_HEAD), np.int64(D_K_TAIL))
    while r >= 0:
        activate(rq, rt, di, c, r, t, cl)
        r = take_if_fits(rq, di, c, np.int64(D_K_HEAD), np.int64(D_K_TAIL))
    _colo_schedule(rq, rt, di, df, tab_i, pieces, ht, hi, hs, c, t)


@njit(cache=True)
def run_colocated(rq, rt, rejected, tab_i, pieces, di, df, lru, hash_vals, hash_ptr, n_hash, block_tokens,
                  av_ptr, av_t, heap_capacity, cl):
    """Simulate colocated instances in place on the state arrays; routing by least outstanding
    tokens (prompt + output of requests routed and not finished) among the instances taking
    requests (``av_ptr``/``av_t``: each instance's intervals), ties → lowest index; a request's
    leading blocks held in its instance's prefix cache (``lru``, :mod:`.prefix`) are not
    computed. Returns the number of events processed."""
    ht, hi, hs = new_heap(heap_capacity)
    cursor = np.zeros(2, np.int64)  # next arrival, events processed
    while True:
        t, priority, a, b = next_event(rt, rejected, cl, ht, hi, hs, cursor)
        if priority < 0:
            return cursor[1]
        if priority == ARRIVAL:  # a is the request
            need = rq[R_PROMPT, a] + rq[R_OUTPUT, a]
            c = least_outstanding(di, need, av_ptr, av_t, t, np.int64(0))
            di[D_LOAD, c] += need
            rq[R_P_INST, a] = c
            if n_hash > 0 and di[D_LRU_CAP, c] > 0:
                cached, _ = reuse(lru, di[D_INST, c], di, np.int64(D_LRU_HEAD), np.int64(-1), c, hash_vals, hash_ptr,
                                  block_tokens, rq[R_PROMPT, a], a)
                rq[R_CACHED, a] = cached
            colo_arrive(rq, di, df, tab_i, pieces, ht, hi, hs, c, a, t)
        elif b == di[D_VERSION, a]:  # instance a's boundary, not cancelled by a cut
            _colo_boundary(rq, rt, di, df, tab_i, pieces, ht, hi, hs, a, t, cl)
