"""The oracle's disaggregated system: prefill instances, KV transfers layer by layer, decode
instances, and the mixed machines and borrowing of Splitwise's policies."""

from __future__ import annotations

from collections import deque

import numpy as np

from pdplan.sim.core import Environment
from pdplan.sim.events import BOUNDARY, KV_VISIBLE, PREFILL_DONE, PREFILL_FREE, PULL, TRANSFER_FAILED
from pdplan.sim.fast.routing import predicted_ttft_s
from pdplan.sim.layout import Layout, Requests, batch_drain_s, cache_capacities
from pdplan.sim.reference.colocated import Lendable, MixedInstance
from pdplan.sim.reference.prefix import PrefixCache, block_tokens, peek, reuse
from pdplan.sim.reference.ranks import RankedInstance, Records, instance_step_s, make_ranks, pick_rank, takes
from pdplan.sim.transfer import layer_visibility, uniform_layer_ready_s


class DecodeInstance(RankedInstance):
    """A decode instance: its ranks step together; landed KV joins a rank at a step boundary."""

    epoch = 0  # its role epoch: a dedicated decode instance never gives up the decode role

    def __init__(self, env, profile, req, rec, index: int, max_running: int = 0, samples_first: bool = False,
                 in_turn: bool = False):
        self.env, self.profile, self.req, self.rec, self.index = env, profile, req, rec, index
        self.samples_first = samples_first  # it samples its requests' first token again, in their first step
        self.ranks = make_ranks(env, profile, req, rec, self, max_running)
        self.in_turn = in_turn
        self.capacity = profile.kv_capacity_tokens   # KV one rank holds: the most one request may need
        self.router_capacity = profile.kv_capacity_tokens * profile.dp
        self.load = 0       # router's view: prompt + output of routed, unfinished requests
        self.busy_s = 0.0
        self.stepping = False  # a step is running or about to start
        self.boundary_s: float | None = None  # when its running or planned step ends (None: idle)

    def kv_visible(self, r: int, k: int) -> None:
        rank = self.ranks[k]
        rank.waiting.append(r)
        if not self.stepping:  # start at a boundary now, after all KV landing at this instant
            self.stepping = True
            self.boundary_s = self.env.now
            self.env.schedule(self.env.now, BOUNDARY, self._boundary)

    def next_boundary(self, t: float) -> float:
        """Its first iteration boundary at or after t: the end of the step it runs, or t when it is idle."""
        return t if self.boundary_s is None else max(self.boundary_s, t)

    def _boundary(self) -> None:
        joined = []
        for rank in self.ranks:
            while rank.waiting and rank.fits(rank.waiting[0]):
                joined.append(rank.waiting.popleft())
                rank.admit(joined[-1])
        self.stepping = any(rank.generated for rank in self.ranks)
        self.boundary_s = None
        if self.stepping:
            dt = instance_step_s([(rank.step_s(), len(rank.generated), 0) for rank in self.ranks if rank.generated],
                         self.profile)
            self.boundary_s = self.env.now + dt
            if self.samples_first:  # their first token comes with this step (a one-token request finished on joining)
                for r in joined:
                    if self.req.output_tokens[r] > 1:
                        self.rec.first_token_s[r] = self.env.now + dt
            self.env.schedule(self.env.now + dt, BOUNDARY, self._step_done, dt)

    def _step_done(self, dt: float) -> None:
        self.busy_s += dt
        for rank in self.ranks:
            rank.emit_tokens()
        self._boundary()



class Disaggregated:
    def __init__(self, layout: Layout, req: Requests, failures: np.ndarray, rooms: np.ndarray | None = None):
        self.layout, self.req = layout, req
        self.failures = failures.copy()  # attempts still to fail, per request
        self.rooms = rooms  # bootstrap rooms, for the prefill instances that route by room
        self.env = Environment()
        self.rec = Records(len(req))
        self.pids = list(layout.ids("prefill"))
        self.n_dec = len(layout.ids("decode"))
        self.dids = list(layout.receivers())  # decode, mixed, then prefill instances that may be lent
        self.pre = [{"queues": [deque() for _ in range(layout.profiles[i].dp)], "pending": 0,
                     "outstanding": [0] * layout.profiles[i].dp, "stage_free": [0.0] * layout.profiles[i].pp,
                     "busy_s": 0.0, "profile": layout.profiles[i], "cap": layout.batch_tokens[i],
                     "free_pending": False, "max_running": layout.running_cap(i), "lent": False,
                     "by_room": layout.routes_by_room(i)}
                    for i in self.pids]
        self.dec = [self._receiver(k, i) for k, i in enumerate(self.dids)]
        self.column = {self.pids.index(i): k for k, i in enumerate(self.dids) if layout.phases[i] == "prefill"}
        # each receiver's ranks' ingress: when it is free, the seconds it moved KV
        self.link_free = [[0.0] * len(inst.ranks) for inst in self.dec]
        self.link_busy = [[0.0] * len(inst.ranks) for inst in self.dec]
        self.cache_caps = (cache_capacities(layout, req) + [0] * (len(self.dids) - self.n_dec)
                           if req.has_hashes and self.pids and self.dids else [0] * len(self.dids))
        self.caches = [PrefixCache(cap) for cap in self.cache_caps]
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
            return Lendable(*args, layout.borrow_chunk_tokens, layout.batch_tokens[i], layout.running_cap(i), host)
        if layout.phases[i] == "decode":
            return DecodeInstance(*args, k, layout.running_cap(i), layout.samples_first_token(i),
                                  layout.ranks_in_turn(i))
        return MixedInstance(*args, "chunked", layout.chunk_tokens[i], layout.batch_tokens[i],
                              max_running=layout.running_cap(i))

    # prefill ------------------------------------------------------------------------------------
    def arrive(self, r: int) -> None:
        if not self.pids:  # decode judged alone: KV visible on arrival
            d = self._route_decode(r)
            self.rec.decode_instance[r] = d
            self.env.schedule(self.env.now, KV_VISIBLE, self.dec[d].kv_visible, r, self.dec[d].take_rank())
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
        cached, loaded = (0, 0) if cache is None else peek(cache, self._blocks(r), prompt, self.block)
        own = self.pre[p]["profile"].prefill_time_s([prompt], [cached]) + loaded * self.load_s[p]
        return predicted_ttft_s(self.pre[p]["pending"], self.pre[p]["cap"], self.batch_s[p], own) > \
            self.layout.reject_ttft_s

    def _spill_column(self, r: int) -> int | None:
        """Borrowing: the mixed or lent machine with the fewest prompt tokens to prefill, unless it
        has prompts queued and r would take it past the threshold; then a decode instance lent now
        (:func:`pdplan.sim.fast.borrowing.spill_column`)."""
        need, now = int(self.req.prompt_tokens[r] + self.req.output_tokens[r]), self.env.now
        both = [c for c in range(len(self.dec)) if self._takes_both(c) and self.dec[c].capacity >= need]
        taking = [c for c in both if takes(self.layout, self.dids[c], now)]
        m = min(taking or both, key=lambda c: (self.dec[c].pending(), c), default=None)
        if m is not None and not (self.dec[m].ranks[0].waiting and
                                  self.dec[m].pending() + int(self.req.prompt_tokens[r]) > self.layout.spill_tokens):
            return m
        free = [d for d in range(self.n_dec) if isinstance(self.dec[d], Lendable) and not self.dec[d].lent
                and self.dec[d].capacity >= need and takes(self.layout, self.dids[d], now)]
        d = _least_by_load(self.dec, free)
        if d is None:
            return m
        self.dec[d].lent = True
        return d

    def _takes_both(self, c: int) -> bool:
        """Whether receiver c runs both phases now: a mixed machine of the plan's pool, or one lent."""
        return type(self.dec[c]) is MixedInstance or (isinstance(self.dec[c], Lendable) and self.dec[c].lent)

    def _decode_column(self, p: int, d: int | None, need: int, now: float) -> int | None:
        """Borrowing, when decode instance d would pass the KV share: the least loaded mixed or lent
        machine below the share (not p's own), else a prefill instance lent now, else the least
        loaded mixed machine, else d (:func:`pdplan.sim.fast.borrowing.decode_column`)."""
        both = [c for c in range(len(self.dec)) if c != self.column.get(p) and self._takes_both(c)
                and self.dec[c].capacity >= need]
        taking = [c for c in both if takes(self.layout, self.dids[c], now)]
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
                and takes(self.layout, self.pids[q], now)]
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
        taking = [m for m in fits if takes(self.layout, self.dids[m], self.env.now)]
        return min(taking or fits, key=lambda m: (self.dec[m].load, m), default=None)

    def _prefill_caches(self) -> list[PrefixCache | None]:
        """Each prefill instance's prefix cache (None: it has none, or the trace has no hashes)."""
        if not (self.req.has_hashes and self.block and self.pids):
            return [None] * len(self.pids)
        caps = cache_capacities(self.layout, self.req, "prefill")
        tiers = [self.layout.tier(i) for i in self.pids]
        return [PrefixCache(c, 0 if t is None else t.blocks) if c or (t is not None and t.blocks) else None
                for c, t in zip(caps, tiers)]

    def _blocks(self, r: int) -> list[int]:
        return self.req.hash_values[self.req.hash_offsets[r]:self.req.hash_offsets[r + 1]].tolist()

    def _pick_prefill(self, r: int) -> int:
        """The router's prefill instance among those taking requests now (none taking: any):
        least-loaded (fewest pending prompt tokens), round-robin (the next in turn) or cache-aware
        (pending tokens + the prompt tokens its cache would leave to compute); ties → lowest."""
        home = [i for i in range(len(self.pre)) if not self.pre[i]["lent"]]  # one always stays
        among = [i for i in home if takes(self.layout, self.pids[i], self.env.now)] or home
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
            self.cached[r], self.loaded[r] = reuse(self.prefix[p], self._blocks(r), int(self.req.prompt_tokens[r]),
                                                    self.block)

    def _queue_prefill(self, r: int, p: int) -> None:
        inst = self.pre[p]
        self._reuse(r, p)
        inst["pending"] += int(self.req.prompt_tokens[r] - self.cached[r])
        dp = len(inst["outstanding"])
        rank = int(self.rooms[r] % dp) if inst["by_room"] else pick_rank(inst["outstanding"])
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
        duration = instance_step_s(parts, inst["profile"])
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
                if inst.capacity < need or (rule == "taking" and not takes(self.layout, self.dids[d], now)):
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
                missing -= block_tokens(prompt, self.block, b, prompt)
        return missing

    def _book(self, r: int, p: int, start: float, end: float) -> None:
        """Route r to a decode instance, book it to one of its ranks and send its KV over that rank's ingress: at
        once, or (a decode that pulls) once the request reaches it, ``route_s`` after its prefill ends, whatever the
        schedule (:meth:`_pull`)."""
        d = self._route_decode(r, end if self.layout.schedule == "request" else start, p)
        k = self.dec[d].take_rank()
        epoch = self.dec[d].epoch
        nbytes = self._missing_tokens(r, d) * self.layout.kv_bytes_per_token
        i, j = self.layout.pool_slot[self.pids[p]], self.layout.receiver(self.dids[d])
        bandwidth, setup = self.layout.link_bandwidth[i, j], self.layout.link_setup[i, j]
        attempt = setup + nbytes / bandwidth
        self.rec.decode_instance[r] = d
        self.rec.transfer_bytes[r] = nbytes
        if self.layout.pulls(self.dids[d]):
            self.env.schedule(end + self.layout.route_s, PULL, self._pull, d, k, r, epoch, attempt)
            return
        free = self.link_free[d][k]
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
        self._send(d, k, r, epoch, begin, visible, attempt, end + self.layout.route_s)

    def _pull(self, d: int, k: int, r: int, epoch: int, attempt: float) -> None:
        """r reaches decode instance d, which takes it in at its next iteration boundary and reads its KV from
        there, behind what the ingress of its rank k has booked."""
        begin = max(self.link_free[d][k], self.dec[d].next_boundary(self.env.now))
        self._send(d, k, r, epoch, begin, begin + attempt, attempt, self.env.now)

    def _send(self, d: int, k: int, r: int, epoch: int, begin: float, visible: float, attempt: float,
              reached: float) -> None:
        """r's KV goes over the ingress of d's rank k from ``begin``, visible at ``visible`` unless an attempt fails;
        d takes it no earlier than ``reached``, when the router handed it on."""
        # work-conserving ingress: free once this request's bytes are sent; gaps between its
        # layers go to later bookings
        self.link_free[d][k] = begin + attempt
        self.link_busy[d][k] += attempt
        fails = int(self.failures[r])
        if fails and self.layout.failure_policy == "recompute":  # dropped: prefill it again
            self.failures[r] -= 1
            self.rec.transfer_start_s[r], self.rec.transfer_end_s[r] = begin, visible
            self.env.schedule(visible, TRANSFER_FAILED, self._failed, d, k, r)
            return
        for _ in range(fails):  # retry: resend the whole cache once the failed attempt lands
            visible += attempt
            self.link_free[d][k] = visible
            self.link_busy[d][k] += attempt
        self.rec.transfer_start_s[r], self.rec.transfer_end_s[r] = begin, visible
        self.env.schedule(max(visible, reached), KV_VISIBLE, self._land, d, k, r, epoch)

    def _land(self, d: int, k: int, r: int, epoch: int) -> None:
        """r's KV lands at rank k of receiver d; booked under another role epoch (the machine went home since),
        it is refused and the router books it again from r's prefill instance."""
        if epoch == self.dec[d].epoch:
            self.dec[d].kv_visible(r, k)
            return
        self.dec[d].load -= int(self.req.prompt_tokens[r] + self.req.output_tokens[r])
        self.dec[d].unbook(k)
        self.refused[r] += 1
        self._book(r, int(self.rec.prefill_instance[r]), self.env.now, self.env.now)

    def _failed(self, d: int, k: int, r: int) -> None:
        self.dec[d].load -= int(self.req.prompt_tokens[r] + self.req.output_tokens[r])
        self.dec[d].unbook(k)
        self._queue_prefill(r, self._pick_prefill(r))



def _least_by_load(instances, among) -> int | None:
    """The instance among ``among`` with the smallest routed load per KV capacity, ties → the first."""
    best = None
    for c in among:
        if best is None or instances[c].load * instances[best].capacity < instances[best].load * instances[c].capacity:
            best = c
    return best
