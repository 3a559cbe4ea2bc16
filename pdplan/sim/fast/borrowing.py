"""Borrowing: dedicated machines lent to the other phase while its queue is past its threshold.

Splitwise's policy (Patel et al., ISCA'24, section 4.2; ``MixedPoolScheduler`` in
Mutinifni/splitwise-sim scheduler.py), with mixed as a reversible state of a dedicated machine
instead of a fourth kind of hardware:

* **Prompts.** An arrival whose prefill queue holds more than ``spill_tokens`` pending prompt tokens
  runs whole on a mixed machine (the plan's mixed pool, or a machine lent now): the one with the
  fewest prompt tokens still to prefill, unless it has prompts queued and this one would take it
  past ``spill_tokens`` too. Then the router borrows the least loaded decode instance: it keeps
  its decodes and runs its new prompts in chunked iterations, and returns to decode alone when
  those prompts are done.
* **Decodes.** A prefilled request whose decode instance's routed KV would pass ``kv_share`` of its
  capacity decodes on a mixed machine below that share (never its own prefill instance); else the
  router borrows the prefill instance with the fewest pending prompt tokens (one always stays).
  That instance takes no new prompts, drains its queue (its column is HELD meanwhile), then
  decodes what is sent to it, and returns to prefill once it holds no work at all.
* **Role epochs.** A machine's epoch counts the times it took up or gave up the decode role. A
  machine decides its return from what it holds, not from what the router has sent its way, so a
  KV handoff may land after its machine went home: each handoff carries the epoch it was booked
  under and is refused when it lands in another, and the router books it again from its prefill
  instance (Splitwise's simulator would run it on the machine's new role). Handoffs already landed
  move with a machine when it changes role, and are admitted under the new epoch.

Borrowing applies to instances without data parallelism (a lent machine batches as Splitwise's
mixed machines do, one rank). The reference engine (:mod:`pdplan.sim.reference`) runs the same
rules.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from pdplan.sim.fast.batch import plan_start
from pdplan.sim.fast.fields import (
    D_CAP,
    D_DP,
    D_EPOCH,
    D_HOME,
    D_HOST,
    D_K_HEAD,
    D_K_TAIL,
    D_LENT,
    D_LOAD,
    D_MIXED,
    D_MODE,
    D_PENDING,
    D_PF_HEAD,
    D_W_HEAD,
    D_W_TAIL,
    HELD,
    HOME_DECODE,
    HOME_MIXED,
    HOME_PREFILL,
    IDLE,
    P_COL,
    P_DP,
    P_LENT,
    P_PENDING,
    P_PP,
    P_RANK0,
    Q_HEAD,
    R_EPOCH,
    R_OUTPUT,
    R_PROMPT,
)
from pdplan.sim.fast.routing import available


@njit(cache=True)
def _takes_both(di, c):
    """Whether column c runs both phases now: a mixed machine of the plan's pool, or one lent."""
    return di[D_HOME, c] == HOME_MIXED or di[D_LENT, c] == 1


@njit(cache=True)
def spill_column(rq, di, av_ptr, av_t, t, r, n_dec, spill_tokens):
    """The column request r runs whole on when its prefill queue is past ``spill_tokens``: a mixed
    machine with room, else a decode instance lent now; -1 when there is neither."""
    need = rq[R_PROMPT, r] + rq[R_OUTPUT, r]
    m = -1
    for rule in range(2):
        for c in range(di.shape[1]):
            if not _takes_both(di, c) or di[D_CAP, c] < need or (rule == 0 and not available(av_ptr, av_t, c, t)):
                continue
            if m < 0 or di[D_PENDING, c] < di[D_PENDING, m]:
                m = c
        if m >= 0:
            break
    if m >= 0 and not (di[D_W_HEAD, m] >= 0 and di[D_PENDING, m] + rq[R_PROMPT, r] > spill_tokens):
        return m
    d = np.int64(-1)
    for c in range(n_dec):
        if di[D_LENT, c] == 1 or di[D_DP, c] != 1 or di[D_CAP, c] < need or not available(av_ptr, av_t, c, t):
            continue
        if d < 0 or di[D_LOAD, c] * di[D_CAP, d] < di[D_LOAD, d] * di[D_CAP, c]:
            d = c
    if d < 0:
        return m
    _lend_decode(di, d, np.int64(1))
    return d


@njit(cache=True)
def _lend_decode(di, d, lent):
    """Decode instance d is lent to prefill (``lent`` 1: it takes prompts too) or back to decode
    alone (0). Its landed KV moves with it: a lent one keeps it in the queue a mixed machine keeps
    apart from its prompts (K), a decode instance in its W queue."""
    head, tail, to_head, to_tail = (D_W_HEAD, D_W_TAIL, D_K_HEAD, D_K_TAIL) if lent else \
        (D_K_HEAD, D_K_TAIL, D_W_HEAD, D_W_TAIL)
    di[D_LENT, d] = lent
    di[D_MIXED, d] = lent
    di[to_head, d] = di[head, d]
    di[to_tail, d] = di[tail, d]
    di[head, d] = -1
    di[tail, d] = -1


@njit(cache=True)
def decode_column(pi, pq, pf, di, av_ptr, av_t, t, p, d, need, kv_share):
    """Where a request of ``need`` KV tokens prefilled at instance p decodes when decode instance d
    (-1: none fits) would pass ``kv_share``: the least loaded mixed machine below that share, not
    p's own column; else a prefill instance lent now; else the least loaded mixed machine, else d."""
    own = pi[P_COL, p]
    m = -1
    for rule in range(2):
        for c in range(di.shape[1]):
            if c == own or not _takes_both(di, c) or di[D_CAP, c] < need or \
                    (rule == 0 and not available(av_ptr, av_t, c, t)):
                continue
            if m < 0 or di[D_LOAD, c] * di[D_CAP, m] < di[D_LOAD, m] * di[D_CAP, c]:
                m = c
        if m >= 0:
            break
    if m >= 0 and di[D_LOAD, m] + need <= kv_share * di[D_CAP, m]:
        return m
    b = _lendable_prefill(pi, di, av_ptr, av_t, t, p, need)
    if b >= 0:
        _lend_prefill(pi, pq, pf, di, b, t)
        return pi[P_COL, b]
    return m if m >= 0 else d


@njit(cache=True)
def _lendable_prefill(pi, di, av_ptr, av_t, t, p, need):
    """The prefill instance to lend to decode: not p, not lent, able to hold ``need``, taking
    requests, the fewest pending prompt tokens (ties → lowest); -1 when none, or when it would
    leave no prefill instance taking prompts."""
    home = 0
    b = -1
    for q in range(pi.shape[1]):
        if pi[P_LENT, q] == 1:
            continue
        home += 1
        c = pi[P_COL, q]
        if q == p or c < 0 or di[D_CAP, c] < need or not available(av_ptr, av_t, c, t):
            continue
        if b < 0 or pi[P_PENDING, q] < pi[P_PENDING, b]:
            b = q
    return b if home > 1 else -1


@njit(cache=True)
def _drained(pi, pq, pf, p, t):
    """Prefill instance p holds no prompts: its queues are empty and its last stage is free."""
    for k in range(pi[P_RANK0, p], pi[P_RANK0, p] + pi[P_DP, p]):
        if pq[Q_HEAD, k] >= 0:
            return False
    return pf[p, pi[P_PP, p]] <= t


@njit(cache=True)
def _lend_prefill(pi, pq, pf, di, p, t):
    """Prefill instance p takes up the decode role: no new prompts; its column waits (HELD) until
    the prompts it holds are done."""
    c = pi[P_COL, p]
    pi[P_LENT, p] = 1
    di[D_LENT, c] = 1
    di[D_EPOCH, c] += 1
    if not _drained(pi, pq, pf, p, t):
        di[D_MODE, c] = HELD


@njit(cache=True)
def release_held(pi, pq, pf, di, ht, hi, hs, p, t):
    """Prefill instance p's prompts may be done: its held column starts on the decodes sent to it."""
    c = pi[P_COL, p]
    if c >= 0 and di[D_MODE, c] == HELD and _drained(pi, pq, pf, p, t):
        di[D_MODE, c] = IDLE
        if di[D_K_HEAD, c] >= 0 or di[D_W_HEAD, c] >= 0:  # else the first work to reach it starts it
            plan_start(di, ht, hi, hs, c, t)


@njit(cache=True)
def give_back(pi, di, c):
    """A lent machine returns to its own role once the other phase's work on it is done: a decode
    instance when no prompt is queued or partly prefilled, a prefill instance when it holds nothing."""
    if di[D_LENT, c] == 0 or di[D_W_HEAD, c] >= 0 or di[D_PF_HEAD, c] >= 0:
        return
    if di[D_HOME, c] == HOME_DECODE:
        _lend_decode(di, c, np.int64(0))
    elif di[D_HOME, c] == HOME_PREFILL and di[D_MODE, c] == IDLE and di[D_K_HEAD, c] < 0:
        di[D_LENT, c] = 0
        di[D_EPOCH, c] += 1
        pi[P_LENT, di[D_HOST, c]] = 0


@njit(cache=True)
def stale(rq, di, c, r):
    """Request r's KV was booked to column c under another role epoch: the handoff is refused."""
    return rq[R_EPOCH, r] != di[D_EPOCH, c]
