"""The oracle: the serving model written plainly, one event per decode step, for tests only.

Same model as :mod:`pdplan.sim.fast` (see :mod:`pdplan.sim.engine` for the choices) but with
no closed forms and no arrays: every decode step is its own event whose time comes from
``PhaseProfile.decode_step_s`` at the current batch and context, per-layer transfers run the
0x08I recurrence layer by layer, and the prefix cache is an ``OrderedDict``. It is slow (pure
Python, O(tokens) events) and exists so tests can check the compiled engine request by request.

The pieces, one concept each: the records and an instance's ranks (:mod:`.ranks`: an instance with
attention data parallelism holds ``dp`` ranks, each with its own batch, KV and queue, stepping
together, the rank picked by :meth:`~pdplan.sim.reference.ranks.RankedInstance.take_rank`), the prefix cache
(:mod:`.prefix`), the colocated instance and Splitwise's mixed machines (:mod:`.colocated`), and the
disaggregated system (:mod:`.disaggregated`); this module feeds the arrivals, stops a settled run and
runs a layout.

Event priorities at equal times are the compiled engine's, from :mod:`pdplan.sim.events`.
"""

from __future__ import annotations

import numpy as np

from pdplan.sim.core import Environment
from pdplan.sim.events import ARRIVAL
from pdplan.sim.layout import Layout, Requests, cache_capacities, rejected_mask
from pdplan.sim.reference.colocated import ColocatedInstance
from pdplan.sim.reference.disaggregated import Disaggregated
from pdplan.sim.reference.prefix import PrefixCache, reuse
from pdplan.sim.reference.ranks import Records, takes


def _feed(env: Environment, rec: Records, req: Requests, rejected, arrive, concurrency: int) -> None:
    """Put the arrivals on the clock: all of them (open loop), or the first ``concurrency`` when due and each
    next one when a request leaves, or when it is due if later (closed loop: a request is due at its arrival
    time, 0 unless a rate paces the clients; a rejected request leaves at once)."""
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
            env.schedule(max(env.now, float(req.arrival_s[r])), ARRIVAL, enter, r)

    rec.released = release
    for r in range(min(concurrency, n)):
        env.schedule(float(req.arrival_s[r]), ARRIVAL, enter, r)



class _Stop:
    """Ends a run once its misses settle it (:class:`pdplan.sim.engine.MissStop`), judged before
    each arrival as :func:`pdplan.sim.fast.clock.settled` judges them."""

    def __init__(self, env: Environment, rec: Records, req: Requests, rejected, ends, stop):
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
                  stop=None, rooms: np.ndarray | None = None):
    """Same outputs as :func:`pdplan.sim.engine.run_fast`, computed token by token."""
    n = len(req)
    rejected = rejected_mask(layout, req)
    guard = None
    busy = np.zeros(len(layout.labels))
    links: dict[str, float] = {}
    if layout.mode == "colocated":
        env = Environment()
        rec = Records(n)
        ids = list(layout.ids("colocated"))
        cached = np.zeros(n, np.int64)
        inst = [ColocatedInstance(env, layout.profiles[i], req, rec, layout.policy[i],
                                   layout.chunk_tokens[i], layout.batch_tokens[i], cached, layout.running_cap(i),
                                   layout.receive_every(i), layout.waits(i), layout.balance(i),
                                   layout.ranks_in_turn(i))
                for i in ids]
        block = req.block_tokens or layout.block_tokens or 0
        caches = ([PrefixCache(cap) for cap in cache_capacities(layout, req, "colocated")]
                  if req.has_hashes and block else [PrefixCache(0)] * len(ids))

        def arrive(r):
            need = int(req.prompt_tokens[r] + req.output_tokens[r])
            fits = [k for k in range(len(inst)) if inst[k].capacity >= need]
            taking = [k for k in fits if takes(layout, ids[k], env.now)]
            c = min(taking or fits, key=lambda k: (inst[k].load, k))
            inst[c].load += need
            rec.prefill_instance[r] = rec.decode_instance[r] = ids[c]
            if caches[c].capacity[0]:
                blocks = req.hash_values[req.hash_offsets[r]:req.hash_offsets[r + 1]].tolist()
                cached[r], _ = reuse(caches[c], blocks, int(req.prompt_tokens[r]), block)
            inst[c].arrive(r)

        guard = _guard(env, rec, req, rejected, rec.first_token_s, stop)
        _feed(env, rec, req, rejected, arrive if guard is None else guard.guard(arrive), concurrency)
        env.run()
        busy[ids] = [c.busy_s for c in inst]
        loaded = refused = np.zeros(n, np.int64)
    else:
        sim = Disaggregated(layout, req, np.zeros(n, np.int64) if failures is None else failures, rooms)
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
            # an instance's ingress is its ranks', each 1/DP of it: their mean busy time
            links = {layout.labels[i]: sum(b) / len(b) for i, b in zip(dids, sim.link_busy)}
        cached, loaded, refused = sim.cached, sim.loaded, sim.refused
        rejected = rejected | sim.early
    raw = {
        "arrival_s": rec.arrival_s, "prompt_tokens": req.prompt_tokens,
        "output_tokens": req.output_tokens, "rejected": rejected,
        "prefill_instance": rec.prefill_instance, "decode_instance": rec.decode_instance,
        "prefill_start_s": rec.prefill_start_s, "prefill_end_s": rec.prefill_end_s,
        "transfer_start_s": rec.transfer_start_s, "transfer_end_s": rec.transfer_end_s,
        "transfer_bytes": rec.transfer_bytes, "first_token_s": rec.first_token_s,
        "join_s": rec.join_s,
        "finish_s": rec.finish_s,
    }
    raw["prefill_cached_tokens"], raw["prefill_loaded_tokens"] = cached, loaded
    raw["rejected_early"] = rejected & ~rejected_mask(layout, req)
    raw["handoffs_refused"] = refused
    return raw, busy, links, env.events, -1 if guard is None else guard.stopped


def _guard(env: Environment, rec: Records, req: Requests, rejected, ends, stop) -> _Stop | None:
    return None if stop is None else _Stop(env, rec, req, rejected, ends, stop)
