"""Latency models as flat arrays, and the step times the kernels read from them.

Latency models are flattened into ``tab_i`` (rows: seg_ptr, seg_min, piece_ptr) and ``pieces``:
model m owns segments ``seg_ptr[m] .. seg_ptr[m+1]``, segment s starts at batch ``seg_min[s]``
and owns rows ``piece_ptr[s] .. piece_ptr[s+1]`` of ``pieces`` (seconds per unit of features
(1, x1, x2)); the latency is the largest piece of the segment in force. A decode batch whose
membership does not change is advanced many steps at once in closed form
(:func:`decode_run_s`), so the number of events grows with requests, not with tokens.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from pdplan.latency.profile import LatencyModel
from pdplan.sim.fast.fields import D_B, D_DP, D_M_GROUP_D, D_MODEL, D_S


class LatencyTable:
    """LatencyModels flattened for the kernels; ``index(model)`` gives a model's number."""

    def __init__(self):
        self.models: list[LatencyModel] = []

    def index(self, model: LatencyModel) -> int:
        for i, known in enumerate(self.models):
            if known is model:
                return i
        self.models.append(model)
        return len(self.models) - 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(tab_i, pieces): rows seg_ptr, seg_min, piece_ptr of tab_i; pieces (n, 3) in seconds."""
        seg_ptr, seg_min, piece_ptr, pieces = [0], [], [0], []
        for model in self.models:
            for segment in model.segments:
                seg_min.append(segment.min_batch)
                pieces.extend(segment.pieces_s)
                piece_ptr.append(len(pieces))
            seg_ptr.append(len(seg_min))
        width = max(len(seg_ptr), len(piece_ptr))
        tab_i = np.zeros((3, width), np.int64)
        for row, values in enumerate((seg_ptr, seg_min, piece_ptr)):
            tab_i[row, :len(values)] = values
        return tab_i, np.array(pieces, np.float64).reshape(-1, 3)


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
def group_s(tab_i, pieces, g, tokens):
    """Seconds of a DP instance's group part g over ``tokens`` of all its ranks (0 when g is -1):
    :meth:`pdplan.latency.profile.PhaseProfile.group_s`."""
    if g < 0:
        return 0.0
    t = tokens if tokens >= 1 else 1
    return latency_s(tab_i, pieces, g, t, float(t), 0.0)


@njit(cache=True)
def iteration_group_s(tab_i, pieces, gp, gd, decode_rows, prompt_tokens):
    """The group part of an iteration whose MoE layers see ``decode_rows`` decode rows and
    ``prompt_tokens`` prompt tokens, composed as :func:`mixed_iteration_s` composes a step:
    :func:`pdplan.latency.profile.iteration_group_s`."""
    if prompt_tokens == 0:
        if decode_rows == 0:
            return 0.0
        return group_s(tab_i, pieces, gd, decode_rows)
    pre = group_s(tab_i, pieces, gp, prompt_tokens)
    if decode_rows == 0:
        return pre
    decode = group_s(tab_i, pieces, gd, decode_rows)
    extra = pre - min(group_s(tab_i, pieces, gp, np.int64(0)), decode)
    if extra < 0.0:
        extra = 0.0
    return decode + extra


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
    j = np.int64(0)
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
                j_next = _crossing(best_alpha, best_gamma, alpha, gamma, j, j_next)
        n = j_next - j
        total += n * best_alpha + best_gamma * (j + j_next - 1) * n * 0.5
        j = j_next
    return total


@njit(cache=True)
def _crossing(best_alpha, best_gamma, alpha, gamma, j, j_next):
    """The first step after ``j`` at which the steeper line (alpha, gamma) overtakes the largest one
    (best_alpha, best_gamma), when that comes before ``j_next``; else ``j_next``."""
    cross = (best_alpha - alpha) / (gamma - best_gamma)
    if cross < j_next:
        jc = max(j + 1, int(math.floor(cross)) + 1)
        if jc < j_next:
            return jc
    return j_next


@njit(cache=True)
def _ranks_run_s(tab_i, pieces, di, d, steps):
    """Seconds of ``steps`` synchronised steps of instance d's ranks (columns d .. d + DP), each
    with a fixed batch: step j lasts the longest rank's, ``max_{rank, p}(a_p + b_p·B_k + c_p·(S_k +
    j·B_k))`` over the ranks holding requests (an empty rank adds nothing). That is again the
    largest of a set of lines in j, so :func:`decode_run_s`'s walk applies to all the ranks'
    pieces at once. With a group part g each rank's lines drop by g(DP × its batch) and every step
    adds g(the ranks' batches summed): the MoE layers see the tokens the ranks really hold."""
    g = di[D_M_GROUP_D, d]
    dp = di[D_DP, d]
    rows = np.int64(0)
    for i in range(d, d + dp):
        rows += di[D_B, i]
    total = steps * group_s(tab_i, pieces, g, rows)
    j = np.int64(0)
    while j < steps:
        found = False
        best_alpha = 0.0
        best_gamma = 0.0
        best_value = 0.0
        for i in range(d, d + dp):
            batch = di[D_B, i]
            if batch == 0:
                continue
            s = _segment(tab_i, di[D_MODEL, i], batch)
            own = group_s(tab_i, pieces, g, dp * batch) if g >= 0 else 0.0
            for p in range(tab_i[2, s], tab_i[2, s + 1]):
                alpha = pieces[p, 0] + pieces[p, 1] * batch + pieces[p, 2] * float(di[D_S, i]) - own
                gamma = pieces[p, 2] * batch
                value = alpha + gamma * j
                if not found or value > best_value or (value == best_value and gamma > best_gamma):
                    best_alpha, best_gamma, best_value = alpha, gamma, value
                    found = True
        if not found:
            return 0.0
        j_next = steps
        for i in range(d, d + dp):
            batch = di[D_B, i]
            if batch == 0:
                continue
            s = _segment(tab_i, di[D_MODEL, i], batch)
            own = group_s(tab_i, pieces, g, dp * batch) if g >= 0 else 0.0
            for p in range(tab_i[2, s], tab_i[2, s + 1]):
                gamma = pieces[p, 2] * batch
                if gamma > best_gamma:
                    alpha = pieces[p, 0] + pieces[p, 1] * batch + pieces[p, 2] * float(di[D_S, i]) - own
                    j_next = _crossing(best_alpha, best_gamma, alpha, gamma, j, j_next)
        n = j_next - j
        total += n * best_alpha + best_gamma * (j + j_next - 1) * n * 0.5
        j = j_next
    return total


@njit(cache=True)
def instance_run_s(tab_i, pieces, di, d, steps):
    """Seconds of ``steps`` decode steps of instance d (its lead column) with fixed batches: one
    rank's :func:`decode_run_s`, or the ranks' synchronised steps (:func:`_ranks_run_s`)."""
    if di[D_DP, d] == 1:
        return decode_run_s(tab_i, pieces, di[D_MODEL, d], di[D_B, d], float(di[D_S, d]), steps)
    return _ranks_run_s(tab_i, pieces, di, d, steps)


@njit(cache=True)
def instance_steps_to_reach(tab_i, pieces, di, d, max_steps, elapsed):
    """:func:`steps_to_reach` for instance d's synchronised ranks."""
    if di[D_DP, d] == 1:
        return steps_to_reach(tab_i, pieces, di[D_MODEL, d], di[D_B, d], float(di[D_S, d]), max_steps, elapsed)
    lo = 1
    hi = max_steps
    while lo < hi:
        mid = (lo + hi) // 2
        if _ranks_run_s(tab_i, pieces, di, d, mid) >= elapsed:
            hi = mid
        else:
            lo = mid + 1
    return lo


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
def mixed_iteration_s(tab_i, pieces, m_prefill, m_decode, batch, context, chunks, sum_c, sum_c2, prompt_s):
    """One colocated iteration: B decode rows plus prefill chunks with features (Σc, Σc²-pairs).

    Mixed cost = decode step + prefill chunks − what both pay (Sarathi-Serve's hybrid batch: the
    weights are read once). That shared part is the prefill model's constant (its empty batch:
    weights read, launch) less ``prompt_s``, the part only an iteration with prompt work pays (the
    profile's ``prompt_iteration_s``: an eager forward's launches beside a decode step replayed as a
    CUDA graph), and at most the decode step without its attention, decode(B, 0): a mixture-of-experts
    decode of a few rows reads only the experts they route to, so it shares little of a prompt's
    constant, which reads them all. So the iteration never takes less than its chunks alone. Pure
    iterations are just the phase's model.
    """
    if chunks == 0:
        return latency_s(tab_i, pieces, m_decode, batch, float(batch), context)
    pre = latency_s(tab_i, pieces, m_prefill, chunks, sum_c, sum_c2)
    if batch == 0:
        return pre
    shared = min(latency_s(tab_i, pieces, m_prefill, chunks, 0.0, 0.0) - prompt_s,
                 latency_s(tab_i, pieces, m_decode, batch, float(batch), 0.0))
    if shared < 0.0:
        shared = 0.0
    extra = pre - shared
    if extra < 0.0:
        extra = 0.0
    return latency_s(tab_i, pieces, m_decode, batch, float(batch), context) + extra
