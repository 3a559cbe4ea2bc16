"""The oracle's records and an instance's ranks: each rank its own batch, KV and queue, the
ranks stepping together (:func:`instance_step_s`), a request's rank picked by
:meth:`RankedInstance.take_rank`."""

from __future__ import annotations

from collections import deque

import numpy as np

from pdplan.latency.profile import iteration_group_s
from pdplan.sim.core import Environment
from pdplan.sim.layout import Layout, Requests


class Records:
    """Per-request outputs, filled as the simulation goes."""

    def __init__(self, n: int):
        nan = lambda: np.full(n, np.nan)  # noqa: E731
        self.prefill_instance = np.full(n, -1, np.int64)
        self.decode_instance = np.full(n, -1, np.int64)
        self.prefill_start_s, self.prefill_end_s = nan(), nan()
        self.transfer_start_s, self.transfer_end_s = nan(), nan()
        self.transfer_bytes = np.zeros(n, np.int64)
        self.first_token_s, self.finish_s = nan(), nan()
        self.join_s = nan()  # when it joined its decode batch
        self.arrival_s = nan()
        self.released = lambda: None  # a request left the system (the closed loop's hook)



class Rank:
    """One attention data-parallel rank of an instance: its own batch and its own KV; one token
    per member per step. An instance without data parallelism has one rank."""

    def __init__(self, env: Environment, profile, req: Requests, rec: Records, owner, max_running: int = 0):
        self.env, self.profile, self.capacity, self.req, self.rec = env, profile, profile.kv_capacity_tokens, req, rec
        self.owner = owner  # the instance: its router load falls when a request here finishes
        self.max_running = max_running  # requests it runs at once (0: as many as its KV holds)
        self.running = 0      # requests admitted here and not finished: prefilling or decoding
        self.generated: dict[int, int] = {}  # active request -> tokens it has produced
        self.reserved = 0     # KV tokens reserved: prompt + output of each admitted request
        self.outstanding = 0  # requests queued or running here: the rank router's view
        self.waiting: deque[int] = deque()  # prompts (colocated) or landed KV (decode) not admitted yet
        self.prefilling: dict[int, int] = {}  # colocated: admitted, partly prefilled request -> tokens done
        self.ready: deque[int] = deque()  # a mixed machine: requests whose KV another instance prefilled

    def need(self, r: int) -> int:
        return int(self.req.prompt_tokens[r] + self.req.output_tokens[r])

    def fits(self, r: int, taken: tuple[int, int] = (0, 0)) -> bool:
        """r's prompt + output fit the KV not reserved, and a running slot is free (``taken``: KV tokens
        and slots that requests ahead of it would take first)."""
        return (self.reserved + taken[0] + self.need(r) <= self.capacity
                and not (self.max_running and self.running + taken[1] >= self.max_running))

    def admit(self, r: int) -> None:
        """r's first token is out now; it decodes the rest here (memory reserved up front)."""
        self.reserved += self.need(r)
        self.running += 1
        self.rec.first_token_s[r] = self.rec.join_s[r] = self.env.now
        self.generated[r] = 1
        if self.req.output_tokens[r] == 1:
            self._finish(r)

    def _finish(self, r: int) -> None:
        self.rec.finish_s[r] = self.env.now
        self.rec.released()
        del self.generated[r]
        self.reserved -= self.need(r)
        self.running -= 1
        self.outstanding -= 1
        self.owner.load -= self.need(r)

    def step_s(self) -> float:
        context = sum(int(self.req.prompt_tokens[r]) + g for r, g in self.generated.items())
        return self.profile.decode_step_s(len(self.generated), context)

    def emit_tokens(self) -> None:
        """Every active request produced one token; those at their output length leave."""
        for r in list(self.generated):
            self.generated[r] += 1
            if self.generated[r] == self.req.output_tokens[r]:
                self._finish(r)


def make_ranks(env: Environment, profile, req: Requests, rec: Records, owner, max_running: int = 0) -> list[Rank]:
    """The profile's ``dp`` ranks of one instance (one when it has no attention data parallelism),
    each running at most ``max_running`` requests at once (0: as many as its KV holds)."""
    return [Rank(env, profile, req, rec, owner, max_running) for _ in range(profile.dp)]


def pick_rank(outstanding) -> int:
    """The rank that takes a request: fewest outstanding requests (queued or running), ties to the
    lowest rank. SGLang's DP controller with ``--load-balance-method total_requests`` (which pdplan's exports
    pass) sends each request to the rank with the fewest requests (``DPBudget.dispatch``; ``update_budget``
    counts the running and the waiting: sgl-project/sglang python/sglang/srt/managers/data_parallel_controller.py);
    vLLM's DP load balancer picks the smallest ``waiting * 4 + running`` (``DPLBAsyncMPClient.
    get_core_engine_for_request``, vllm/v1/engine/core_client.py). Here the counts are exact, not
    the engines' periodically reported ones."""
    best = 0
    for k in range(1, len(outstanding)):
        if outstanding[k] < outstanding[best]:
            best = k
    return best


class RankedInstance:
    """An instance of ``ranks`` that takes requests: how a request takes one of them (:meth:`take_rank`), and, for
    one that takes handoffs, a request booked to a rank given back (:meth:`unbook`)."""

    in_turn = False  #: its requests take its ranks in turn (SGLang's ``round_robin``), not by load
    next_rank = 0    #: the next in turn

    def take_rank(self) -> int:
        """The rank that takes a request, counted there from now (a handoff's KV goes over its ingress): the next in
        turn where requests take the ranks so (``in_turn``: SGLang's DP controller's ``round_robin``,
        ``DataParallelController.round_robin_scheduler``), else the fewest outstanding (:func:`pick_rank`)."""
        if self.in_turn:
            k = self.next_rank
            self.next_rank = (k + 1) % len(self.ranks)
        else:
            k = pick_rank([rank.outstanding for rank in self.ranks])
        self.ranks[k].outstanding += 1
        return k

    def unbook(self, k: int) -> None:
        """A request booked to rank k will not land (its transfer failed, or it was refused)."""
        self.ranks[k].outstanding -= 1


def instance_step_s(parts, profile) -> float:
    """One synchronised step of an instance from its working ranks' (seconds, decode rows, prompt
    tokens): every rank waits for the slowest (the MoE layers' all-to-all runs across all of them;
    SGLang gathers every rank's batch before each forward pass and runs an idle batch on a rank
    without work, ``Scheduler.prepare_mlp_sync_batch`` and ``get_idle_batch`` in sgl-project/sglang
    python/sglang/srt/managers/scheduler.py), so the step lasts the longest rank's time. An empty
    rank adds nothing: profiles start at batch 1 and define no idle-batch time. A profile with a
    group part (``PhaseProfile.group_s``) times each rank's step as if every rank carried its rows:
    each rank's time drops by that share, at DP × its rows, and the step adds the share of all the
    ranks' rows."""
    if profile.group_prefill is None and profile.group_decode is None:
        return max(seconds for seconds, _, _ in parts)
    dp = profile.dp
    longest = max(seconds - iteration_group_s(profile, dp * rows, dp * tokens) for seconds, rows, tokens in parts)
    return longest + iteration_group_s(profile, sum(rows for _, rows, _ in parts),
                                       sum(tokens for _, _, tokens in parts))



def takes(layout: Layout, instance: int, t: float) -> bool:
    """Whether global instance ``instance`` takes new requests at ``t``."""
    if layout.availability is None:
        return True
    return any(start <= t < end for start, end in layout.availability[instance])
