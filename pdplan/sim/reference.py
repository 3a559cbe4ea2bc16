"""The oracle: the serving model written plainly, one event per decode step, for tests only.

Same model as :mod:`pdplan.sim.fast` (see :mod:`pdplan.sim.engine` for the choices) but with
no closed forms and no arrays: every decode step is its own event whose time comes from
``PhaseProfile.decode_step_s`` at the current batch and context, per-layer transfers run the
0x08I recurrence layer by layer, and the prefix cache is an ``OrderedDict``. It is slow (pure
Python, O(tokens) events) and exists so tests can check the compiled engine request by request.

An instance with attention data parallelism holds ``dp`` ranks (:class:`_Rank`), each with its
own batch, KV and queue, stepping together (:func:`_step_s`); the rank is picked by
:func:`pick_rank`.

Event priorities at equal times are the compiled engine's, from :mod:`pdplan.sim.events`.
"""

from __future__ import annotations

from collections import OrderedDict, deque

import numpy as np

from pdplan.latency.profile import iteration_group_s
from pdplan.sim.core import Environment
from pdplan.sim.events import ARRIVAL, BOUNDARY, KV_VISIBLE, PREFILL_DONE, PREFILL_FREE, TRANSFER_FAILED
from pdplan.sim.fast.routing import predicted_ttft_s
from pdplan.sim.layout import Layout, Requests, batch_drain_s, cache_capacities, rejected_mask
from pdplan.sim.transfer import layer_visibility, uniform_layer_ready_s


class _Records:
    """Per-request outputs, filled as the simulation goes."""

    def __init__(self, n: int):
        nan = lambda: np.full(n, np.nan)  # noqa: E731
        self.prefill_instance = np.full(n, -1, np.int64)
        self.decode_instance = np.full(n, -1, np.int64)
        self.prefill_start_s, self.prefill_end_s = nan(), nan()
        self.transfer_start_s, self.transfer_end_s = nan(), nan()
        self.transfer_bytes = np.zeros(n, np.int64)
        self.first_token_s, self.finish_s = nan(), nan()
        self.arrival_s = nan()
        self.released = lambda: None  # a request left the system (the closed loop's hook)


class _PrefixCache:
    """An instance's prefix blocks in LRU order: ``hbm`` blocks in HBM and ``tier`` more in a
    second tier, exclusive (HBM's least recent move to the tier's front; the tier's are dropped)."""

    def __init__(self, hbm: int, tier: int = 0):
        self.hbm, self.tier, self.capacity = OrderedDict(), OrderedDict(), (hbm, tier)

    def where(self, h: int) -> str | None:
        return "hbm" if h in self.hbm else "tier" if h in self.tier else None

    def touch(self, h: int) -> str | None:
        """Block h becomes the most recent in HBM; returns where it was."""
        where = self.where(h)
        if where == "tier":
            del self.tier[h]
        self.hbm[h] = True
        self.hbm.move_to_end(h)
        while len(self.hbm) > self.capacity[0]:
            old, _ = self.hbm.popitem(last=False)
            if self.capacity[1] > 0:
                self.tier[old] = True
        while len(self.tier) > self.capacity[1]:
            self.tier.popitem(last=False)
        return where

    def leading(self, blocks: list[int]) -> int:
        """How many leading blocks it holds in a row (a hit ends at the first miss)."""
        k = 0
        while k < len(blocks) and self.where(blocks[k]) is not None:
            k += 1
        return k


def _block_tokens(prompt: int, block: int, j: int, limit: int) -> int:
    """Tokens of a prompt's block j before ``limit``."""
    return max(0, min(block, min(prompt, limit) - j * block))


def _peek(cache: _PrefixCache, blocks: list[int], prompt: int, block: int) -> tuple[int, int]:
    """What ``cache`` would give a prompt: (cached, loaded), the tokens of the leading blocks it
    holds (at least one token is computed) and of those the ones in the second tier."""
    k = cache.leading(blocks)
    cached = min(k * block, prompt - 1)
    return cached, sum(_block_tokens(prompt, block, j, cached) for j in range(k) if cache.where(blocks[j]) == "tier")


def _reuse(cache: _PrefixCache, blocks: list[int], prompt: int, block: int) -> tuple[int, int]:
    """A prompt reaches an instance with ``cache``: :func:`_peek`'s answer; then its blocks
    become the most recent in HBM, in prompt order."""
    cached, loaded = _peek(cache, blocks, prompt, block)
    for h in blocks:
        cache.touch(h)
    return cached, loaded


class _Rank:
    """One attention data-parallel rank of an instance: its own batch and its own KV; one token
    per member per step. An instance without data parallelism has one rank."""

    def __init__(self, env: Environment, profile, req: Requests, rec: _Records, owner, max_running: int = 0):
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
        self.rec.first_token_s[r] = self.env.now
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


def _ranks(env: Environment, profile, req: Requests, rec: _Records, owner, max_running: int = 0) -> list[_Rank]:
    """The profile's ``dp`` ranks of one instance (one when it has no attention data parallelism),
    each running at most ``max_running`` requests at once (0: as many as its KV holds)."""
    return [_Rank(env, profile, req, rec, owner, max_running) for _ in range(profile.dp)]


def pick_rank(outstanding) -> int:
    """The rank that takes a request: fewest outstanding requests (queued or running), ties to the
    lowest rank. SGLang's DP controller with ``--load-balance-method shortest_queue`` sends each
    request to the rank with the fewest requests (``DPBudget.update_budget`` counts ``num_reqs``,
    waiting and running: sgl-project/sglang python/sglang/srt/managers/data_parallel_controller.py);
    vLLM's DP load balancer picks the smallest ``waiting * 4 + running`` (``DPLBAsyncMPClient.
    get_core_engine_for_request``, vllm/v1/engine/core_client.py). Here the counts are exact, not
    the engines' periodically reported ones."""
    best = 0
    for k in range(1, len(outstanding)):
        if outstanding[k] < outstanding[best]:
            best = k
    return best


def _step_s(parts, profile) -> float:
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


class _DecodeInstance:
    """A decode instance: its ranks step together; landed KV joins a rank at a step boundary."""

    epoch = 0  # its role epoch: a dedicated decode instance never gives up the decode role

    def __init__(self, env, profile, req, rec, index: int, max_running: int = 0):
        self.env, self.profile, self.req, self.index = env, profile, req, index
        self.ranks = _ranks(env, profile, req, rec, self, max_running)
        self.capacity = profile.kv_capacity_tokens   # KV one rank holds: the most one request may need
        self.router_capacity = profile.kv_capacity_tokens * profile.dp
        self.load = 0       # router's view: prompt + output of routed, unfinished requests
        self.busy_s = 0.0
        self.stepping = False  # a step is running or about to start

    def kv_visible(self, r: int) -> None:
        rank = self.ranks[pick_rank([k.outstanding for k in self.ranks])]
        rank.waiting.append(r)
        rank.outstanding += 1
        if not self.stepping:  # start at a boundary now, after all KV landing at this instant
            self.stepping = True
            self.env.schedule(self.env.now, BOUNDARY, self._boundary)

    def _boundary(self) -> None:
        for rank in self.ranks:
            while rank.waiting and rank.fits(rank.waiting[0]):
                rank.admit(rank.waiting.popleft())
        self.stepping = any(rank.generated for rank in self.ranks)
        if self.stepping:
            dt = _step_s([(rank.step_s(), len(rank.generated), 0) for rank in self.ranks if rank.generated],
                         self.profile)
            self.env.schedule(self.env.now + dt, BOUNDARY, self._step_done, dt)

    def _step_done(self, dt: float) -> None:
        self.busy_s += dt
        for rank in self.ranks:
            rank.emit_tokens()
        self._boundary()


class _Disaggregated:
    def __init__(self, layout: Layout, req: Requests, failures: np.ndarray):
        self.layout, self.req = layout, req
        self.failures = failures.copy()  # attempts still to fail, per request
        self.env = Environment()
        self.rec = _Records(len(req))
        self.pids = list(layout.ids("prefill"))
        self.n_dec = len(layout.ids("decode"))
        self.dids = list(layout.receivers())  # decode, mixed, then prefill instances that may be lent
        self.pre = [{"queues": [deque() for _ in range(layout.profiles[i].dp)], "pending": 0,
                     "outstanding": [0] * layout.profiles[i].dp, "stage_free": [0.0] * layout.profiles[i].pp,
                     "busy_s": 0.0, "profile": layout.profiles[i], "cap": layout.batch_tokens[i],
                     "free_pending": False, "max_running": layout.running_cap(i), "lent": False}
                    for i in self.pids]
        self.dec = [self._receiver(k, i) for k, i in enumerate(self.dids)]
        self.column = {self.pids.index(i): k for k, i in enumerate(self.dids) if layout.phases[i] == "prefill"}
        self.link_free = [0.0] * len(self.dids)
        self.link_busy = [0.0] * len(self.dids)
        self.cache_caps = (cache_capacities(layout, req) + [0] * (len(self.dids) - self.n_dec)
                           if req.has_hashes and self.pids and self.dids else [0] * len(self.dids))
        self.caches = [_PrefixCache(cap) for cap in self.cache_caps]
        self.block = req.block_tokens or 0
        self.prefix = self._prefill_caches()
        self.load_s = [0.0 if t is None else layout.kv_bytes_per_token / t.bandwidth_bytes_per_s
                       for t in (layout.tier(i) for i in self.pids)]
        self.rr = 0  # the round-robin router's next instance
        self.early = np.zeros(len(req), bool)  # rejected at admission on a predicted TTFT miss
        self.batch_s = batch_drain_s(layout, req).tolist()
        self.cached = np.zeros(len(req), np.int64)  # prompt tokens the prefill cache held
        self.loaded = np.zeros(len(req), np.int64)  # of those, loaded from its second tier
        self.refused = np.zeros(len(req), np.int64)  # handoffs refused for a stale role epoch

    def _receiver(self, k: int, i: int):
        """The k-th instance that takes KV handoffs: global instance i as a decode instance, a mixed
        machine, or (borrowing) a dedicated machine that may be lent."""
        layout = self.layout
        args = (self.env, layout.profiles[i], self.req, self.rec)
        if layout.lendable(i):
            host = self.pre[self.pids.index(i)] if layout.phases[i] == "prefill" else None
            return _Lendable(*args, layout.borrow_chunk_tokens, layout.batch_tokens[i], layout.running_cap(i), host)
        if layout.phases[i] == "decode":
            return _DecodeInstance(*args, k, layout.running_cap(i))
        return _MixedInstance(*args, "chunked", layout.chunk_tokens[i], layout.batch_tokens[i],
                              max_running=layout.running_cap(i))

    # prefill ------------------------------------------------------------------------------------
    def arrive(self, r: int) -> None:
        if not self.pids:  # decode judged alone: KV visible on arrival
            d = self._route_decode(r)
            self.rec.decode_instance[r] = d
            self.env.schedule(self.env.now, KV_VISIBLE, self.dec[d].kv_visible, r)
            return
        p = self._pick_prefill(r)
        if self.pre[p]["pending"] > self.layout.spill_tokens:  # the queue it would join
            m = self._spill_column(r) if self.layout.borrow else self._least_outstanding_mixed(r)
            if m is not None:  # the whole request runs on a mixed (or lent) machine
                self.dec[m].load += int(self.req.prompt_tokens[r] + self.req.output_tokens[r])
                self.rec.decode_instance[r] = m
                self.dec[m].arrive(r)
                return
        if self.layout.reject_ttft_s is not None and self._rejects_early(r, p):
            self.early[r] = True
            self.rec.released()
            return
        self._queue_prefill(r, p)

    def _rejects_early(self, r: int, p: int) -> bool:
        """Mooncake's early rejection: r's predicted TTFT at p, with what p's cache would give it,
        is above the plan's threshold (:func:`pdplan.sim.fast.routing.predicted_ttft_s`)."""
        prompt, cache = int(self.req.prompt_tokens[r]), self.prefix[p]
        cached, loaded = (0, 0) if cache is None else _peek(cache, self._blocks(r), prompt, self.block)
        own = self.pre[p]["profile"].prefill_time_s([prompt], [cached]) + loaded * self.load_s[p]
        return predicted_ttft_s(self.pre[p]["pending"], self.pre[p]["cap"], self.batch_s[p], own) > \
            self.layout.reject_ttft_s

    def _spill_column(self, r: int) -> int | None:
        """Borrowing: the mixed or lent machine with the fewest prompt tokens to prefill, unless it
        has prompts queued and r would take it past the threshold; then a decode instance lent now
        (:func:`pdplan.sim.fast.borrowing.spill_column`)."""
        need, now = int(self.req.prompt_tokens[r] + self.req.output_tokens[r]), self.env.now
        both = [c for c in range(len(self.dec)) if self._takes_both(c) and self.dec[c].capacity >= need]
        taking = [c for c in both if _takes(self.layout, self.dids[c], now)]
        m = min(taking or both, key=lambda c: (self.dec[c].pending(), c), default=None)
        if m is not None and not (self.dec[m].ranks[0].waiting and
                                  self.dec[m].pending() + int(self.req.prompt_tokens[r]) > self.layout.spill_tokens):
            return m
        free = [d for d in range(self.n_dec) if isinstance(self.dec[d], _Lendable) and not self.dec[d].lent
                and self.dec[d].capacity >= need and _takes(self.layout, self.dids[d], now)]
        d = _least_by_load(self.dec, free)
        if d is None:
            return m
        self.dec[d].lent = True
        return d

    def _takes_both(self, c: int) -> bool:
        """Whether receiver c runs both phases now: a mixed machine of the plan's pool, or one lent."""
        return type(self.dec[c]) is _MixedInstance or (isinstance(self.dec[c], _Lendable) and self.dec[c].lent)

    def _decode_column(self, p: int, d: int | None, need: int, now: float) -> int | None:
        """Borrowing, when decode instance d would pass the KV share: the least loaded mixed or lent
        machine below the share (not p's own), else a prefill instance lent now, else the least
        loaded mixed machine, else d (:func:`pdplan.sim.fast.borrowing.decode_column`)."""
        both = [c for c in range(len(self.dec)) if c != self.column.get(p) and self._takes_both(c)
                and self.dec[c].capacity >= need]
        taking = [c for c in both if _takes(self.layout, self.dids[c], now)]
        m = _least_by_load(self.dec, taking or both)
        if m is not None and self.dec[m].load + need <= self.layout.kv_share * self.dec[m].capacity:
            return m
        b = self._lendable_prefill(p, need, now)
        if b is not None:
            self._lend_prefill(b)
            return self.column[b]
        return m if m is not None else d

    def _lendable_prefill(self, p: int, need: int, now: float) -> int | None:
        """The prefill instance to lend to decode: not p, not lent, able to hold ``need``, taking
        requests, fewest pending prompt tokens (ties → lowest); None when it would leave no prefill
        instance taking prompts."""
        home = [q for q in range(len(self.pre)) if not self.pre[q]["lent"]]
        fits = [q for q in home if q != p and q in self.column and self.dec[self.column[q]].capacity >= need
                and _takes(self.layout, self.pids[q], now)]
        return min(fits, key=lambda q: (self.pre[q]["pending"], q)) if len(home) > 1 and fits else None

    def _drained(self, p: int) -> bool:
        inst = self.pre[p]
        return not any(inst["queues"]) and inst["stage_free"][-1] <= self.env.now

    def _lend_prefill(self, p: int) -> None:
        """Prefill instance p takes up the decode role: no new prompts; its column is held until the
        prompts it holds are done."""
        self.pre[p]["lent"] = True
        column = self.dec[self.column[p]]
        column.lent = True
        column.epoch += 1
        column.held = not self._drained(p)

    def _release_held(self, p: int) -> None:
        column = self.dec[self.column[p]]
        if column.held and self._drained(p):
            column.held = False
            if column.ranks[0].ready or column.ranks[0].waiting:
                column._wake()

    def _least_outstanding_mixed(self, r: int) -> int | None:
        need = int(self.req.prompt_tokens[r] + self.req.output_tokens[r])
        fits = [m for m in range(self.n_dec, len(self.dec)) if self.dec[m].capacity >= need]
        taking = [m for m in fits if _takes(self.layout, self.dids[m], self.env.now)]
        return min(taking or fits, key=lambda m: (self.dec[m].load, m), default=None)

    def _prefill_caches(self) -> list[_PrefixCache | None]:
        """Each prefill instance's prefix cache (None: it has none, or the trace has no hashes)."""
        if not (self.req.has_hashes and self.block and self.pids):
            return [None] * len(self.pids)
        caps = cache_capacities(self.layout, self.req, "prefill")
        tiers = [self.layout.tier(i) for i in self.pids]
        return [_PrefixCache(c, 0 if t is None else t.blocks) if c or (t is not None and t.blocks) else None
                for c, t in zip(caps, tiers)]

    def _blocks(self, r: int) -> list[int]:
        return self.req.hash_values[self.req.hash_offsets[r]:self.req.hash_offsets[r + 1]].tolist()

    def _pick_prefill(self, r: int) -> int:
        """The router's prefill instance among those taking requests now (none taking: any):
        least-loaded (fewest pending prompt tokens), round-robin (the next in turn) or cache-aware
        (pending tokens + the prompt tokens its cache would leave to compute); ties → lowest."""
        home = [i for i in range(len(self.pre)) if not self.pre[i]["lent"]]  # one always stays
        among = [i for i in home if _takes(self.layout, self.pids[i], self.env.now)] or home
        if self.layout.router == "round-robin":
            p = next((i for i in sorted(among, key=lambda i: (i - self.rr) % len(self.pre))))
            self.rr = p + 1
            return p
        prompt = int(self.req.prompt_tokens[r])

        def cost(i):
            cache = self.prefix[i]
            if self.layout.router != "cache-aware" or cache is None:
                return self.pre[i]["pending"]
            return self.pre[i]["pending"] + prompt - min(cache.leading(self._blocks(r)) * self.block, prompt - 1)
        return min(among, key=lambda i: (cost(i), i))

    def _reuse(self, r: int, p: int) -> None:
        """Request r reaches prefill instance p: the leading blocks its cache holds are not computed
        (at least one token is), those in the second tier are loaded; its blocks become the most
        recent in HBM, in prompt order."""
        self.cached[r] = self.loaded[r] = 0
        if self.prefix[p] is not None:
            self.cached[r], self.loaded[r] = _reuse(self.prefix[p], self._blocks(r), int(self.req.prompt_tokens[r]),
                                                    self.block)

    def _queue_prefill(self, r: int, p: int) -> None:
        inst = self.pre[p]
        self._reuse(r, p)
        inst["pending"] += int(self.req.prompt_tokens[r] - self.cached[r])
        rank = pick_rank(inst["outstanding"])
        inst["queues"][rank].append(r)
        inst["outstanding"][rank] += 1
        self.rec.prefill_instance[r] = p
        if inst["stage_free"][0] <= self.env.now and not inst["free_pending"]:
            # form the batch once every arrival of this instant has queued
            inst["free_pending"] = True
            self.env.schedule(self.env.now, PREFILL_FREE, self._stage_free, p)

    def _stage_free(self, p: int) -> None:
        self.pre[p]["free_pending"] = False
        self._try_start(p)

    def _try_start(self, p: int) -> None:
        inst = self.pre[p]
        if not any(inst["queues"]) or inst["stage_free"][0] > self.env.now:
            return
        cap = inst["cap"]
        batch, parts = [], []  # every rank's batch, in rank order; each rank's (prefill time, 0, tokens)
        for k, queue in enumerate(inst["queues"]):
            own, tokens = [], 0
            while queue:
                length = int(self.req.prompt_tokens[queue[0]] - self.cached[queue[0]])
                if own and (tokens + length > cap or len(own) == inst["max_running"]):
                    break
                own.append(queue.popleft())
                tokens += length
            if own:
                load = self.loaded[own].sum() * self.load_s[p]  # second-tier hits load first
                parts.append((inst["profile"].prefill_time_s(self.req.prompt_tokens[own], self.cached[own]) + load,
                              0, tokens))
                batch += [(r, k) for r in own]
        duration = _step_s(parts, inst["profile"])
        stages = len(inst["stage_free"])
        clock = self.env.now
        for s in range(stages):
            clock = max(clock, inst["stage_free"][s]) + duration / stages
            inst["stage_free"][s] = clock
        start, end = self.env.now, clock
        inst["busy_s"] += duration / stages
        for r, _ in batch:
            self.rec.prefill_start_s[r], self.rec.prefill_end_s[r] = start, end
        self.env.schedule(end, PREFILL_DONE, self._prefill_done, p, batch, start)
        if stages > 1:
            inst["free_pending"] = True
            self.env.schedule(inst["stage_free"][0], PREFILL_FREE, self._stage_free, p)
        if self.layout.schedule == "layer" and self.dids:
            for r, _ in batch:
                self._book(r, p, start, end)

    def _prefill_done(self, p: int, batch: list[int], start: float) -> None:
        for r, k in batch:
            self.pre[p]["pending"] -= int(self.req.prompt_tokens[r] - self.cached[r])
            self.pre[p]["outstanding"][k] -= 1
            if not self.dids:  # a prefill instance alone: the request ends here
                self.rec.released()
            if self.layout.schedule == "request" and self.dids:
                self._book(r, p, start, self.env.now)
        if len(self.pre[p]["stage_free"]) == 1:
            self._try_start(p)
        if self.pre[p]["lent"]:
            self._release_held(p)

    # transfer -----------------------------------------------------------------------------------
    def _route_decode(self, r: int, now: float | None = None, p: int | None = None) -> int:
        """Least KV load per capacity among decode instances; a mixed machine when that one's
        routed KV would pass the plan's share of its capacity (borrowing: :meth:`_decode_column`
        for a request prefilled at p)."""
        need = int(self.req.prompt_tokens[r] + self.req.output_tokens[r])
        now = self.env.now if now is None else now
        d = self._least_loaded(need, now, range(self.n_dec))
        over = d is None or self.dec[d].load + need > self.layout.kv_share * self.dec[d].router_capacity
        if self.layout.borrow and over and p is not None:
            d = self._decode_column(p, d, need, now)
        elif self.n_dec < len(self.dec) and over:
            mixed = self._least_loaded(need, now, range(self.n_dec, len(self.dec)))
            d = d if mixed is None else mixed
        self.dec[d].load += need
        return d

    def _least_loaded(self, need: int, now: float, among: range) -> int | None:
        best = None
        for rule in ("taking", "any"):
            for d in among:
                inst = self.dec[d]
                if inst.capacity < need or (rule == "taking" and not _takes(self.layout, self.dids[d], now)):
                    continue
                if best is None or \
                        inst.load * self.dec[best].router_capacity < self.dec[best].load * inst.router_capacity:
                    best = d
            if best is not None:
                break
        return best

    def _missing_tokens(self, r: int, d: int) -> int:
        """Prompt tokens not cached at d (transfer set U \\ V_D); the prompt's blocks become MRU."""
        prompt = int(self.req.prompt_tokens[r])
        if self.cache_caps[d] == 0:
            return prompt
        missing = prompt
        for b, h in enumerate(self._blocks(r)):
            if self.caches[d].touch(h) is not None:
                missing -= _block_tokens(prompt, self.block, b, prompt)
        return missing

    def _book(self, r: int, p: int, start: float, end: float) -> None:
        d = self._route_decode(r, end if self.layout.schedule == "request" else start, p)
        epoch = self.dec[d].epoch
        nbytes = self._missing_tokens(r, d) * self.layout.kv_bytes_per_token
        i, j = self.layout.pool_slot[self.pids[p]], self.layout.receiver(self.dids[d])
        bandwidth, setup = self.layout.link_bandwidth[i, j], self.layout.link_setup[i, j]
        free = self.link_free[d]
        if self.layout.schedule == "request":
            begin = max(free, end)
            visible = begin + setup + nbytes / bandwidth
        else:
            layers = self.layout.layers
            ready = uniform_layer_ready_s(start, end, layers)
            x = np.full(layers, nbytes / bandwidth / layers)
            x[0] += setup
            visible = float(layer_visibility(ready, x, free)[-1])  # v_{-1}: earlier bookings' bytes
            begin = max(free, ready[0])
        # work-conserving ingress: free once this request's bytes are sent; gaps between its
        # layers go to later bookings
        attempt = setup + nbytes / bandwidth
        self.link_free[d] = begin + attempt
        self.link_busy[d] += attempt
        self.rec.decode_instance[r] = d
        self.rec.transfer_bytes[r] = nbytes
        fails = int(self.failures[r])
        if fails and self.layout.failure_policy == "recompute":  # dropped: prefill it again
            self.failures[r] -= 1
            self.rec.transfer_start_s[r], self.rec.transfer_end_s[r] = begin, visible
            self.env.schedule(visible, TRANSFER_FAILED, self._failed, d, r)
            return
        for _ in range(fails):  # retry: resend the whole cache once the failed attempt lands
            visible += attempt
            self.link_free[d] = visible
            self.link_busy[d] += attempt
        self.rec.transfer_start_s[r], self.rec.transfer_end_s[r] = begin, visible
        ready = max(visible, end + self.layout.route_s)  # the router hands it to decode after prefill
        self.env.schedule(ready, KV_VISIBLE, self._land, d, r, epoch)

    def _land(self, d: int, r: int, epoch: int) -> None:
        """r's KV lands at receiver d; booked under another role epoch (the machine went home since),
        it is refused and the router books it again from r's prefill instance."""
        if epoch == self.dec[d].epoch:
            self.dec[d].kv_visible(r)
            return
        self.dec[d].load -= int(self.req.prompt_tokens[r] + self.req.output_tokens[r])
        self.refused[r] += 1
        self._book(r, int(self.rec.prefill_instance[r]), self.env.now, self.env.now)

    def _failed(self, d: int, r: int) -> None:
        self.dec[d].load -= int(self.req.prompt_tokens[r] + self.req.output_tokens[r])
        self._queue_prefill(r, self._pick_prefill(r))


class _ColocatedInstance:
    """Both phases on one instance, one iteration at a time; with data parallelism each rank
    plans its own iteration (a prefill batch, a chunked iteration or a decode step) and the
    instance's iteration lasts the longest rank's."""

    def __init__(self, env, profile, req, rec, policy: str, chunk_tokens: int, batch_tokens: int,
                 cached: np.ndarray | None = None, max_running: int = 0, recv_interval: int = 1,
                 batch_wait: tuple[int, int] = (0, 0)):
        self.env, self.profile, self.req, self.rec = env, profile, req, rec
        # TensorRT-LLM's batch waiting: (iterations it may hold prompts, tokens that end it early) and
        # the iterations it has held them since it last let them run
        (self.wait_iters, self.wait_tokens), self.waited = batch_wait, 0
        # SGLang's receive skipper: arrivals during a decode step wait in ``unreceived`` until a receive
        self.recv_interval, self.since_recv, self.unreceived, self.decoding = recv_interval, 0, deque(), False
        # prompt tokens the instance's prefix cache held, per request (none on a mixed machine)
        self.cached = np.zeros(len(req), np.int64) if cached is None else cached
        self.policy, self.chunk_tokens, self.batch_tokens = policy, chunk_tokens, batch_tokens
        self.ranks = _ranks(env, profile, req, rec, self, max_running)
        self.capacity = profile.kv_capacity_tokens  # KV one rank holds: the most one request may need
        self.router_capacity = profile.kv_capacity_tokens * profile.dp
        self.load = 0       # router's view: prompt + output of routed, unfinished requests
        self.busy_s = 0.0
        self.running = False

    def arrive(self, r: int) -> None:
        rank = self.ranks[pick_rank([k.outstanding for k in self.ranks])]
        rank.outstanding += 1
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

    def _admit_prefill(self, rank: _Rank, r: int) -> None:
        rank.waiting.popleft()
        rank.reserved += rank.need(r)
        rank.running += 1
        self.rec.prefill_start_s[r] = self.env.now

    def _prompt_done(self, rank: _Rank, r: int) -> None:
        self.rec.prefill_end_s[r] = self.env.now
        rank.reserved -= rank.need(r)  # admit() reserves again, and takes the running slot again
        rank.running -= 1
        rank.admit(r)

    def _next(self) -> None:
        """Pick the next iteration of every rank at a boundary."""
        self.running = True
        plans = [self._plan(rank) for rank in self.ranks]
        parts = [(plan[2], *self._rows_tokens(rank, plan)) for rank, plan in zip(self.ranks, plans)
                 if plan is not None]
        if not parts:
            self.running = self.decoding = False
            return
        self.decoding = all(plan is None or plan[0] == "step" for plan in plans)
        dt = _step_s(parts, self.profile)
        self.env.schedule(self.env.now + dt, BOUNDARY, self._done, plans, dt)

    def _rows_tokens(self, rank: _Rank, plan) -> tuple[int, int]:
        """A rank's iteration as its MoE layers see it: (decode rows, prompt tokens computed). A
        prefill batch stalls the rank's decodes; a mixed iteration carries both."""
        kind, work, _ = plan
        if kind == "prefill":
            return 0, int((self.req.prompt_tokens[work] - self.cached[work]).sum())
        if kind == "mixed":
            return len(rank.generated), int(sum(work.values()))
        return len(rank.generated), 0

    def _held(self, rank: _Rank) -> bool:
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

    def _prompt_tokens(self, rank: _Rank) -> int:
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

    def _plan(self, rank: _Rank):
        """A rank's next iteration, its prompts admitted: (kind, chunks or batch, seconds), or None."""
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

    def _mixed_s(self, rank: _Rank, chunks: dict[int, int]) -> float:
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


class _MixedInstance(_ColocatedInstance):
    """A Splitwise mixed machine: colocated batching, plus decodes whose KV another instance
    prefilled, admitted at its boundaries (FIFO, while they fit). One rank: a mixed pool refuses
    data parallelism (:func:`pdplan.sim.layout.layout_from_plan`)."""

    epoch = 0  # its role epoch: a mixed machine never gives up the decode role

    def kv_visible(self, r: int) -> None:
        rank = self.ranks[0]
        rank.ready.append(r)
        rank.outstanding += 1
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


class _Lendable(_MixedInstance):
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


def _least_by_load(instances, among) -> int | None:
    """The instance among ``among`` with the smallest routed load per KV capacity, ties → the first."""
    best = None
    for c in among:
        if best is None or instances[c].load * instances[best].capacity < instances[best].load * instances[c].capacity:
            best = c
    return best


def _feed(env: Environment, rec: _Records, req: Requests, rejected, arrive, concurrency: int) -> None:
    """Put the arrivals on the clock: all of them (open loop), or the first ``concurrency`` at 0
    and each next one when a request leaves (closed loop; a rejected request leaves at once)."""
    n = len(req)

    def enter(r):
        rec.arrival_s[r] = env.now
        if rejected[r]:
            rec.released()
        else:
            arrive(r)

    if not concurrency:
        rec.arrival_s[:] = req.arrival_s
        for r in range(n):
            if not rejected[r]:
                env.schedule(float(req.arrival_s[r]), ARRIVAL, arrive, r)
        return
    following = iter(range(concurrency, n))

    def release():
        r = next(following, None)
        if r is not None:
            env.schedule(env.now, ARRIVAL, enter, r)

    rec.released = release
    for r in range(min(concurrency, n)):
        env.schedule(0.0, ARRIVAL, enter, r)


def _takes(layout: Layout, instance: int, t: float) -> bool:
    """Whether global instance ``instance`` takes new requests at ``t``."""
    if layout.availability is None:
        return True
    return any(start <= t < end for start, end in layout.availability[instance])


class _Stop:
    """Ends a run once its misses settle it (:class:`pdplan.sim.engine.MissStop`), judged before
    each arrival as :func:`pdplan.sim.fast.clock.settled` judges them."""

    def __init__(self, env: Environment, rec: _Records, req: Requests, rejected, ends, stop):
        self.env, self.rec, self.req, self.rejected, self.ends, self.stop = env, rec, req, rejected, ends, stop
        self.judged = self.ttft_missed = 0
        self.stopped = -1

    def guard(self, arrive):
        """``arrive``, unless the misses so far settle the run: then nothing more runs."""
        def arriving(r):
            if self._settled(r):
                self.stopped = r
                self.env.stop()  # nothing runs after this arrival, which is not taken either
            else:
                arrive(r)
        return arriving

    def _settled(self, r: int) -> bool:
        stop, t, arrival = self.stop, self.env.now, self.rec.arrival_s
        if stop.ttft_s is not None:
            while self.judged < len(arrival) and t - arrival[self.judged] > stop.ttft_s:
                p = self.judged
                end = self.ends[p]
                if self.rejected[p] or np.isnan(end) or end - arrival[p] > stop.ttft_s:
                    self.ttft_missed += 1
                self.judged += 1
            if self.ttft_missed > stop.ttft_misses:
                return True
        if stop.tpot_s is None:
            return False
        # finished so far (a finish is recorded as it happens), and every rejected request before r
        output = self.req.output_tokens
        done = ~np.isnan(self.rec.finish_s) & (output > 1)
        tpot = (self.rec.finish_s[done] - self.rec.first_token_s[done]) / (output[done] - 1)
        return int(np.sum(tpot > stop.tpot_s)) + int(self.rejected[:r].sum()) > stop.tpot_misses


def run_reference(layout: Layout, req: Requests, concurrency: int = 0, failures: np.ndarray | None = None,
                  stop=None):
    """Same outputs as :func:`pdplan.sim.engine.run_fast`, computed token by token."""
    n = len(req)
    rejected = rejected_mask(layout, req)
    guard = None
    busy = np.zeros(len(layout.labels))
    links: dict[str, float] = {}
    if layout.mode == "colocated":
        env = Environment()
        rec = _Records(n)
        ids = list(layout.ids("colocated"))
        cached = np.zeros(n, np.int64)
        inst = [_ColocatedInstance(env, layout.profiles[i], req, rec, layout.policy[i],
                                   layout.chunk_tokens[i], layout.batch_tokens[i], cached, layout.running_cap(i),
                                   layout.receive_every(i), layout.waits(i))
                for i in ids]
        block = req.block_tokens or layout.block_tokens or 0
        caches = ([_PrefixCache(cap) for cap in cache_capacities(layout, req, "colocated")]
                  if req.has_hashes and block else [_PrefixCache(0)] * len(ids))

        def arrive(r):
            need = int(req.prompt_tokens[r] + req.output_tokens[r])
            fits = [k for k in range(len(inst)) if inst[k].capacity >= need]
            taking = [k for k in fits if _takes(layout, ids[k], env.now)]
            c = min(taking or fits, key=lambda k: (inst[k].load, k))
            inst[c].load += need
            rec.prefill_instance[r] = rec.decode_instance[r] = ids[c]
            if caches[c].capacity[0]:
                blocks = req.hash_values[req.hash_offsets[r]:req.hash_offsets[r + 1]].tolist()
                cached[r], _ = _reuse(caches[c], blocks, int(req.prompt_tokens[r]), block)
            inst[c].arrive(r)

        guard = _guard(env, rec, req, rejected, rec.first_token_s, stop)
        _feed(env, rec, req, rejected, arrive if guard is None else guard.guard(arrive), concurrency)
        env.run()
        busy[ids] = [c.busy_s for c in inst]
        loaded = refused = np.zeros(n, np.int64)
    else:
        sim = _Disaggregated(layout, req, np.zeros(n, np.int64) if failures is None else failures)
        env, rec = sim.env, sim.rec
        ends = rec.prefill_end_s if layout.mode == "prefill" else rec.first_token_s
        guard = _guard(env, rec, req, rejected, ends, stop)
        _feed(env, rec, req, rejected, sim.arrive if guard is None else guard.guard(sim.arrive), concurrency)
        env.run()
        pids, dids = np.array(sim.pids, np.int64), np.array(sim.dids, np.int64)
        rec.prefill_instance = np.where(rec.prefill_instance >= 0,
                                        pids[np.maximum(rec.prefill_instance, 0)] if len(pids) else -1, -1)
        whole = (rec.prefill_instance < 0) & (rec.decode_instance >= 0) & (len(pids) > 0)  # on a mixed or lent one
        rec.decode_instance = np.where(rec.decode_instance >= 0,
                                       dids[np.maximum(rec.decode_instance, 0)] if len(dids) else -1, -1)
        rec.prefill_instance = np.where(whole, rec.decode_instance, rec.prefill_instance)
        busy[pids] = [p["busy_s"] for p in sim.pre]
        busy[dids] += [d.busy_s for d in sim.dec]  # a lent prefill instance's decoding adds to its prefills
        if len(pids) and len(dids):
            links = {layout.labels[i]: b for i, b in zip(dids, sim.link_busy)}
        cached, loaded, refused = sim.cached, sim.loaded, sim.refused
        rejected = rejected | sim.early
    raw = {
        "arrival_s": rec.arrival_s, "prompt_tokens": req.prompt_tokens,
        "output_tokens": req.output_tokens, "rejected": rejected,
        "prefill_instance": rec.prefill_instance, "decode_instance": rec.decode_instance,
        "prefill_start_s": rec.prefill_start_s, "prefill_end_s": rec.prefill_end_s,
        "transfer_start_s": rec.transfer_start_s, "transfer_end_s": rec.transfer_end_s,
        "transfer_bytes": rec.transfer_bytes, "first_token_s": rec.first_token_s,
        "finish_s": rec.finish_s,
    }
    raw["prefill_cached_tokens"], raw["prefill_loaded_tokens"] = cached, loaded
    raw["rejected_early"] = rejected & ~rejected_mask(layout, req)
    raw["handoffs_refused"] = refused
    return raw, busy, links, env.events, -1 if guard is None else guard.stopped


def _guard(env: Environment, rec: _Records, req: Requests, rejected, ends, stop) -> _Stop | None:
    return None if stop is None else _Stop(env, rec, req, rejected, ends, stop)
