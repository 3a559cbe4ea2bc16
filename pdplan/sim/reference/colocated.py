"""The oracle's colocated instance, both phases on one instance one iteration at a time, and the
Splitwise mixed machines built on it: a mixed pool's, and a machine lent between the phases."""

from __future__ import annotations

from collections import deque

import numpy as np

from pdplan.sim.events import BOUNDARY
from pdplan.sim.reference.ranks import Rank, RankedInstance, instance_step_s, make_ranks


class ColocatedInstance(RankedInstance):
    """Both phases on one instance, one iteration at a time; with data parallelism each rank
    plans its own iteration (a prefill batch, a chunked iteration or a decode step) and the
    instance's iteration lasts the longest rank's."""

    def __init__(self, env, profile, req, rec, policy: str, chunk_tokens: int, batch_tokens: int,
                 cached: np.ndarray | None = None, max_running: int = 0, recv_interval: int = 1,
                 batch_wait: tuple[int, int] = (0, 0), adp_balance: tuple[int, int] = (0, 0), in_turn: bool = False):
        self.env, self.profile, self.req, self.rec = env, profile, req, rec
        # TensorRT-LLM's attention-DP balance: (timeout_iters, batching_wait_iters) and its two counters
        (self.adp_timeout, self.adp_batching), self.adp_waited, self.adp_batched = adp_balance, 0, 0
        # TensorRT-LLM's batch waiting: (iterations it may hold prompts, tokens that end it early) and
        # the iterations it has held them since it last let them run
        (self.wait_iters, self.wait_tokens), self.waited = batch_wait, 0
        # SGLang's receive skipper: arrivals during a decode step wait in ``unreceived`` until a receive
        self.recv_interval, self.since_recv, self.unreceived, self.decoding = recv_interval, 0, deque(), False
        # prompt tokens the instance's prefix cache held, per request (none on a mixed machine)
        self.cached = np.zeros(len(req), np.int64) if cached is None else cached
        self.policy, self.chunk_tokens, self.batch_tokens = policy, chunk_tokens, batch_tokens
        self.ranks = make_ranks(env, profile, req, rec, self, max_running)
        self.in_turn = in_turn
        self.capacity = profile.kv_capacity_tokens  # KV one rank holds: the most one request may need
        self.router_capacity = profile.kv_capacity_tokens * profile.dp
        self.load = 0       # router's view: prompt + output of routed, unfinished requests
        self.busy_s = 0.0
        self.running = False

    def arrive(self, r: int) -> None:
        rank = self.ranks[self.take_rank()]
        if self.recv_interval > 1 and self.decoding:  # taken in at the next receive
            self.unreceived.append(r)
            return
        rank.waiting.append(r)
        self._wake()

    def _wake(self) -> None:
        if not self.running:  # start at a boundary now, after all arrivals of this instant
            self.running = True
            self.since_recv = 0
            self.env.schedule(self.env.now, BOUNDARY, self._next)

    def _receive(self, decoded: bool) -> None:
        """SGLang's receive skipper (``scheduler_recv_skipper.py``) at a boundary: after prompt work, or
        with nothing left to run, take in the requests that arrived; after a decode step, only when
        the decode steps since the last receive reach the interval."""
        rank = self.ranks[0]
        if decoded:
            self.since_recv = (self.since_recv + 1) % self.recv_interval
            idle = not rank.generated and not rank.waiting and not rank.prefilling
            if self.since_recv and not idle:
                return
        self.since_recv = 0
        rank.waiting.extend(self.unreceived)
        self.unreceived.clear()

    def _admit_prefill(self, rank: Rank, r: int) -> None:
        rank.waiting.popleft()
        rank.reserved += rank.need(r)
        rank.running += 1
        self.rec.prefill_start_s[r] = self.env.now

    def _prompt_done(self, rank: Rank, r: int) -> None:
        self.rec.prefill_end_s[r] = self.env.now
        rank.reserved -= rank.need(r)  # admit() reserves again, and takes the running slot again
        rank.running -= 1
        rank.admit(r)

    def _next(self) -> None:
        """Pick the next iteration of every rank at a boundary."""
        self.running = True
        held = self._balance_holds()
        plans = [self._plan(rank, held) for rank in self.ranks]
        parts = [(plan[2], *self._rows_tokens(rank, plan)) for rank, plan in zip(self.ranks, plans)
                 if plan is not None]
        if not parts:
            self.running = self.decoding = False
            return
        self.decoding = all(plan is None or plan[0] == "step" for plan in plans)
        dt = instance_step_s(parts, self.profile)
        self.env.schedule(self.env.now + dt, BOUNDARY, self._done, plans, dt)

    def _rows_tokens(self, rank: Rank, plan) -> tuple[int, int]:
        """A rank's iteration as its MoE layers see it: (decode rows, prompt tokens computed). A
        prefill batch stalls the rank's decodes; a mixed iteration carries both."""
        kind, work, _ = plan
        if kind == "prefill":
            return 0, int((self.req.prompt_tokens[work] - self.cached[work]).sum())
        if kind == "mixed":
            return len(rank.generated), int(sum(work.values()))
        return len(rank.generated), 0

    def _held(self, rank: Rank) -> bool:
        """TensorRT-LLM's batch waiting (``PyExecutor._waiting_requests``), checked at an iteration with
        prompt work and decodes: the prompts are held this iteration, unless they were held
        ``wait_iters`` iterations already or their tokens plus one per decode reach ``wait_tokens``."""
        if not (self.wait_iters and rank.generated):
            return False
        tokens = self._prompt_tokens(rank)
        if not tokens:
            return False
        if self.waited >= self.wait_iters or tokens + len(rank.generated) >= self.wait_tokens:
            self.waited = 0
            return False
        self.waited += 1
        return True

    def _balance_holds(self) -> bool:
        """TensorRT-LLM's attention-DP balance (``PyExecutor._balance_adp_requests``), once per iteration:
        whether every rank's prompt work is held this iteration. Prompts run when every rank has some
        (and no rank's decodes fill its batch), after ``adp_batching`` more iterations if every rank also
        decodes; otherwise they wait, the iteration counted, until ``adp_timeout`` iterations were
        counted or some rank has no decode. A rank with no request at all counts as decoding (the
        engine pads it with a dummy decode) while another rank has one. The count runs on in
        iterations with no prompt anywhere, so a lone prompt waits for the count's next turn."""
        if not (self.adp_timeout or self.adp_batching):
            return False
        active = [bool(rank.generated or rank.waiting or rank.prefilling) for rank in self.ranks]
        decoding = [bool(rank.generated) or (not mine and any(active)) for rank, mine in zip(self.ranks, active)]
        if all(self._prompt_tokens(rank) for rank in self.ranks) and all(
                not rank.max_running or len(rank.generated) < rank.max_running for rank in self.ranks):
            self.adp_waited = 0
            if not all(decoding):
                return False
            if self.adp_batched < self.adp_batching:
                self.adp_batched += 1
                return True
            self.adp_batched = 0
            return False
        self.adp_waited += 1
        if self.adp_waited >= self.adp_timeout or not all(decoding):
            self.adp_waited = 0
            return False
        return True

    def _prompt_tokens(self, rank: Rank) -> int:
        """The prompt tokens a chunked iteration of the rank would compute now, nothing admitted."""
        budget = self.chunk_tokens - len(rank.generated)
        tokens = 0
        for r, done in rank.prefilling.items():
            if budget <= 0:
                break
            take = min(budget, int(self.req.prompt_tokens[r]) - done)
            tokens, budget = tokens + take, budget - take
        taken = (0, 0)
        for r in rank.waiting:
            if budget <= 0 or not rank.fits(r, taken):
                break
            taken = (taken[0] + rank.need(r), taken[1] + 1)
            take = min(budget, int(self.req.prompt_tokens[r] - self.cached[r]))
            tokens, budget = tokens + take, budget - take
        return tokens

    def _plan(self, rank: Rank, held: bool = False):
        """A rank's next iteration, its prompts admitted: (kind, chunks or batch, seconds), or None;
        ``held``: the attention-DP balance holds its prompts this iteration."""
        if held:
            return ("step", None, rank.step_s()) if rank.generated else None
        if self._held(rank):
            return "step", None, rank.step_s()
        if self.policy == "prefill-first":
            batch, tokens = [], 0
            while rank.waiting:
                r = rank.waiting[0]
                length = int(self.req.prompt_tokens[r] - self.cached[r])
                if batch and tokens + length > self.batch_tokens:
                    break
                if not rank.fits(r):
                    break
                self._admit_prefill(rank, r)
                batch.append(r)
                tokens += length
            if batch:
                return "prefill", batch, self.profile.prefill_time_s(self.req.prompt_tokens[batch], self.cached[batch])
        else:
            budget = self.chunk_tokens - len(rank.generated)
            chunks: dict[int, int] = {}
            if budget > 0:
                for r, done in rank.prefilling.items():
                    if budget <= 0:
                        break
                    chunks[r] = min(budget, int(self.req.prompt_tokens[r]) - done)
                    budget -= chunks[r]
                while budget > 0 and rank.waiting and rank.fits(rank.waiting[0]):
                    r = rank.waiting[0]
                    self._admit_prefill(rank, r)
                    rank.prefilling[r] = int(self.cached[r])
                    chunks[r] = min(budget, int(self.req.prompt_tokens[r] - self.cached[r]))
                    budget -= chunks[r]
            if chunks:
                return "mixed", chunks, self._mixed_s(rank, chunks)
        if rank.generated:
            return "step", None, rank.step_s()
        return None

    def _mixed_s(self, rank: Rank, chunks: dict[int, int]) -> float:
        """Decode step + prefill of the chunks − what both pay (weights read once): the prefill of an
        empty batch less the profile's ``prompt_iteration_s`` (which only an iteration with prompt
        work pays), at most the decode step without its attention."""
        n = len(chunks)
        sum_c = float(sum(chunks.values()))
        pairs = float(sum((rank.prefilling[r] + c) ** 2 - rank.prefilling[r] ** 2 for r, c in chunks.items()))
        prefill = self.profile.prefill.evaluate(np.array([[1.0, sum_c, pairs]]), np.array([n]))[0]
        if not rank.generated:
            return float(prefill)
        empty = self.profile.prefill.evaluate(np.array([[1.0, 0.0, 0.0]]), np.array([n]))[0]
        shared = max(0.0, min(float(empty) - self.profile.prompt_iteration_s,
                              self.profile.decode_step_s(len(rank.generated), 0)))
        return rank.step_s() + max(0.0, float(prefill) - shared)

    def _done(self, plans, dt: float) -> None:
        self.busy_s += dt
        for rank, plan in zip(self.ranks, plans):
            if plan is None:
                continue
            kind, work, _ = plan
            if kind == "prefill":  # the batch's prompts are done; its decodes stalled
                for r in work:
                    self._prompt_done(rank, r)
                continue
            if rank.generated:
                rank.emit_tokens()
            if kind == "mixed":
                for r, c in work.items():
                    rank.prefilling[r] += c
                    if rank.prefilling[r] == self.req.prompt_tokens[r]:
                        del rank.prefilling[r]
                        self._prompt_done(rank, r)
        if self.recv_interval > 1:
            self._receive(self.decoding)
        self._next()


class MixedInstance(ColocatedInstance):
    """A Splitwise mixed machine: colocated batching, plus decodes whose KV another instance
    prefilled, admitted at its boundaries (FIFO, while they fit). One rank: a mixed pool refuses
    data parallelism (:func:`pdplan.sim.layout.layout_from_plan`)."""

    epoch = 0  # its role epoch: a mixed machine never gives up the decode role

    def kv_visible(self, r: int, k: int) -> None:
        self.ranks[k].ready.append(r)
        self._wake()

    def _next(self) -> None:
        rank = self.ranks[0]
        while rank.ready and rank.fits(rank.ready[0]):
            rank.admit(rank.ready.popleft())
        super()._next()

    def pending(self) -> int:
        """Prompt tokens it has still to prefill: queued prompts and the rest of partly done ones."""
        rank = self.ranks[0]
        return (sum(int(self.req.prompt_tokens[r]) for r in rank.waiting)
                + sum(int(self.req.prompt_tokens[r]) - done for r, done in rank.prefilling.items()))


class Lendable(MixedInstance):
    """A dedicated machine that may be lent to the other phase (borrowing, :mod:`pdplan.sim.fast.borrowing`):
    a one-rank mixed machine that is sent prompts (a decode instance's) or decodes (a prefill
    instance's, ``host`` its prefill state) only while ``lent``. A lent decode instance returns once
    its prompts are done; a lent prefill instance once it holds nothing, which ends its epoch. A lent
    prefill instance's column is ``held`` while its own prompts drain."""

    def __init__(self, env, profile, req, rec, chunk_tokens: int, batch_tokens: int, max_running: int, host):
        super().__init__(env, profile, req, rec, "chunked", chunk_tokens, batch_tokens, max_running=max_running)
        self.host, self.lent, self.held, self.epoch = host, False, False, 0

    def _wake(self) -> None:
        if not self.held:
            super()._wake()

    def _next(self) -> None:
        super()._next()
        rank = self.ranks[0]
        if not self.lent or rank.waiting or rank.prefilling:
            return
        if self.host is None:
            self.lent = False
        elif not self.running and not rank.ready:
            self.lent, self.host["lent"] = False, False
            self.epoch += 1
