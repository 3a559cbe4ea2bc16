"""Running a plan: flatten its pools into instances, feed requests to an engine, collect records.

Public entry points (re-exported by :mod:`pdplan.sim`):

* :func:`simulate` — a whole plan, disaggregated or colocated;
* :func:`simulate_prefill_instance`, :func:`simulate_decode_instance`,
  :func:`simulate_colocated_instance` — one instance judged alone, for per-phase goodput.

Every function is a pure function of its inputs and its seed: no wall clock is read, and the
random choices, which KV transfer attempts fail (when a plan states a failure rate) and each request's
bootstrap room (when a prefill pool routes prompts to its ranks by room), are drawn from ``seed``, so the
same inputs give the same records, bit for bit. Ties go to the lowest instance index.

Modelling choices, stated once:

* **Prefill batching** — FCFS under ``max_prefill_batch_tokens`` (the pool's, default the
  profile's) without reordering; a prompt longer than the cap runs alone. With PP = k, a batch
  passes k stages of latency/k each, one batch per stage at a time: up to k batches in flight
  and the first stage frees after latency/k (M/D/1 with service D/k, then D in the pipe: the
  inter-op formula of 0x08B for k = 2).
* **KV links** — each rank of a decode instance has its own ingress (its GPUs' share of the
  instance's link), which sends the transfers booked to it one at a time in booking order (FIFO),
  each at that share of the bandwidth and the setup of its (prefill pool, decode pool) link; a
  request is booked to the rank with the fewest outstanding requests as it is routed, and lands
  there. The request schedule books at prefill end and sends everything then; the layer
  schedule books when the prefill batch starts and streams layers as they are produced (0x08I
  recurrence with v_{-1} = when earlier bookings' bytes are sent, setup paid before the first
  layer). The ingress is work-conserving: it is busy only while it moves bytes, so a streamed
  request waiting for its next layer leaves the gap to later bookings (FIFO over bytes, not
  over time windows; otherwise one long prefill would block its destination's ingress).
* **Transfer failures** — each attempt fails with the plan's ``failure_rate``, found out when
  it lands. ``retry`` sends the whole cache again at once (setup + bytes/bw per failure, the
  ingress held until the last attempt lands); ``recompute`` drops it, the request joins the
  prefill pool again (fewest pending prompt tokens) and is prefilled, routed and sent anew.
  Blocks a failed attempt brought to the destination's prefix cache stay there.
* **Router hop** — the router hands a request to decode only after its prefill returns, so
  decode admission waits until max(KV visible, prefill end + ``route_s``); the KV stream itself
  is not delayed.
* **Prefix reuse** — with prefix hashes, prompt blocks cached at the destination decode
  instance (an LRU of ``prefix_cache_blocks`` blocks, default its KV capacity in blocks) are
  not sent. Each prefill and colocated instance keeps its own LRU (same default; a prefill pool
  may add a second tier, exclusive, loaded at its bandwidth): the run of leading blocks it holds
  when the request reaches it, at most prompt − 1 tokens, is not computed (the rest counts
  l − c tokens and l² − c² attention pairs), and then the prompt's blocks become its most
  recent (:mod:`pdplan.sim.fast.prefix`). KV reservations count the whole prompt.
* **Decode memory** — admission reserves prompt + output tokens of KV and stalls (head of line,
  FIFO) when they do not fit; nothing is ever preempted, so ``preemptions`` is always 0 and the
  closed-form fast path is exact. The KV waiting for admission is held outside the KV capacity
  (in the sender's memory or a staging buffer).
* **Rejection** — a request whose prompt + output exceeds the KV capacity of every instance
  that could serve it is rejected at arrival: no times, fails every clock, counted.
* **Starting work** — an idle instance forms its batch at a boundary event of the same instant,
  after every arrival (or KV landing) of that instant has queued, so simultaneous requests
  share a batch; a request reaching a running decode batch joins at its next step boundary.
* **Decode steps** — continuous batching: requests join and leave at step boundaries; a step
  of B requests costs the decode profile at (1, B, Σctx) with Σctx = Σ (prompt + tokens
  generated so far), so a request's first decode step counts prompt + 1 (the prefill's token
  is its input; the Splitwise importer's reading, step i at prompt + i). The first token comes
  from prefill and is visible at decode admission; output − 1 steps follow.
* **Colocated** — prefill-first (waiting prompts whose KV fits run as one FCFS batch under the
  cap while decodes stall) or chunked (each iteration: one token per active decode, the rest
  of ``chunk_tokens`` to prompt chunks FCFS). A mixed iteration costs decode_step(B, Σctx) +
  prefill(chunks) − shared, the weights read once (0x02B): shared is the prefill constant
  (prefill(empty batch)) less the profile's ``prompt_iteration_s`` (the part only an iteration with
  prompt work pays: an eager forward's launches beside a decode step replayed as a CUDA graph; 0 for
  composed profiles), and at most decode_step(B, 0), what the decode step pays without its
  attention: a mixture-of-experts decode of a few rows reads only the experts they route to, a
  prompt reads them all. A mixed iteration never takes less than its chunks alone; a chunk of c tokens after o
  contributes Σl = c and Σl² = (o + c)² − o², so its attention counts the causal pairs of
  the whole prompt across chunks. One iteration at a time (PP profiles are used as
  whole-instance latencies, without pipelining).
* **Instances joining and leaving** — with ``availability``, each instance takes new requests
  only inside its intervals; outside them it finishes what it holds (a drain) and the routers
  choose among the instances that do take requests (all of them, if none does).
* **Routing** — prefill: the plan's router, by default fewest pending prompt tokens to compute
  (Splitwise JSQ), else in turn, or cache-aware (pending tokens + the tokens its cache leaves to
  compute; :func:`pdplan.sim.fast.routing.pick_prefill`); decode: smallest
  (routed, unfinished KV tokens) / capacity; colocated: fewest outstanding tokens (prompt +
  output of routed, unfinished requests); ties → lowest index. No Splitwise mixed pool.
* **Attention data parallelism** — an instance whose profile has ``dp`` > 1 is dp ranks, each
  with its own batch, KV (the profile's capacity is one rank's) and queue, admission per rank.
  A request takes the rank with the fewest outstanding requests, ties → lowest, when it reaches
  the instance (prefill or colocated arrival, decode KV landing; :func:`pdplan.sim.reference.ranks.pick_rank`);
  a prefill pool that routes by bootstrap room (SGLang's P/D prefill) puts a prompt on rank room mod dp,
  whatever the ranks hold (:func:`bootstrap_rooms`). The routers above see the instance whole (decode
  capacity: dp × a rank's). Every step synchronises the ranks and lasts the longest rank's step at
  its own batch and context; an empty rank adds nothing (profiles define no batch-0 time). Prefill:
  each rank's FCFS batch under the cap; colocated: each rank's own iteration. A mixed pool refuses
  dp > 1.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from pdplan import limits
from pdplan.errors import InternalError, PdplanError
from pdplan.latency.profile import PhaseProfile
from pdplan.modelspec import ModelSpec
from pdplan.sim.fast import run_fast
from pdplan.sim.layout import (
    Layout,
    Requests,
    as_requests,
    instance_availability,
    layout_from_plan,
    layout_single,
    router_notice,
)
from pdplan.sim.plan import Plan
from pdplan.sim.reference import run_reference
from pdplan.sim.results import SimResult, derive_columns
from pdplan.vocabulary import RankRouter, Router


@dataclasses.dataclass(frozen=True)
class MissStop:
    """End a run at the first arrival by which more requests are known to have missed the TTFT
    threshold than ``ttft_misses``, or the TPOT threshold than ``tpot_misses`` (a rejected request
    misses every clock; None: that clock does not stop the run). A share objective on that
    threshold allowing no more misses is then settled as missed, whatever the rest of the run
    would do; the records keep what happened before that arrival."""

    ttft_s: float | None = None
    ttft_misses: int = 0
    tpot_s: float | None = None
    tpot_misses: int = 0

    def __post_init__(self):
        for threshold, misses in ((self.ttft_s, self.ttft_misses), (self.tpot_s, self.tpot_misses)):
            if threshold is not None and (not threshold >= 0 or misses < 0):
                raise InternalError("a stop needs thresholds >= 0 and misses >= 0")


#: The per-request times a stopped run forgets from its stop on (the stopping arrival's instant).
_TIMES = ("prefill_start_s", "prefill_end_s", "transfer_start_s", "transfer_end_s", "first_token_s", "finish_s",
          "join_s")


def _result(layout: Layout, requests: Requests, raw, busy, links, events, *, seed: int,
            rate_rps: float | None, engine: str, stopped: int) -> SimResult:
    stopped_s = None
    if stopped >= 0:  # both engines have run exactly the events before this arrival
        stopped_s = float(raw["arrival_s"][stopped])
        for name in _TIMES:
            raw[name] = np.where(raw[name] >= stopped_s, np.nan, raw[name])
    return SimResult(mode=layout.mode, columns=derive_columns(layout.mode, raw),
                     instances=layout.labels, instance_phase=layout.phases, busy_s=busy,
                     link_busy_s=links, events=events, seed=seed, rate_rps=rate_rps, engine=engine,
                     stopped_s=stopped_s, borrow=layout.borrow)


#: Failed attempts one transfer may have (a draw beyond it is cut, so a run always ends).
MAX_TRANSFER_FAILURES = 16


def transfer_failures(layout: Layout, n: int, seed: int) -> np.ndarray:
    """How many KV transfer attempts of each request fail: independent attempts, each failing
    with ``layout.failure_rate``, so the count is geometric (mean f / (1 − f)); drawn from
    ``seed``, the simulation's only random choice."""
    if layout.mode != "disaggregated" or layout.failure_rate <= 0:
        return np.zeros(n, np.int64)
    draws = np.random.default_rng(seed).geometric(1.0 - layout.failure_rate, size=n) - 1
    return np.minimum(draws, MAX_TRANSFER_FAILURES).astype(np.int64)


#: The stream of ``seed`` the bootstrap rooms are drawn from, apart from the transfer failures' draws.
ROOM_STREAM = 1


def bootstrap_rooms(layout: Layout, n: int, seed: int) -> np.ndarray | None:
    """Each request's bootstrap room, which names its prefill rank (room modulo DP) on the instances that route by
    room (:class:`pdplan.vocabulary.RankRouter`): uniform integers below 2**62, as SGLang's router draws a random
    room per request, from their own stream of ``seed``; None when no instance routes by room."""
    if not layout.room_ranks:
        return None
    return np.random.default_rng([seed, ROOM_STREAM]).integers(0, 2**62, size=n, dtype=np.int64)


def run(layout: Layout, requests: Requests, *, seed: int = 0, rate_rps: float | None = None,
        engine: str = "fast", concurrency: int | None = None, stop: MissStop | None = None) -> SimResult:
    """Run ``layout`` on ``requests`` with the compiled engine or the reference oracle; with
    ``concurrency`` C, as a closed loop of C clients; with ``stop``, until it settles."""
    if concurrency is not None and not (isinstance(concurrency, int) and 1 <= concurrency <= limits.MAX_CONCURRENCY):
        raise PdplanError(f"concurrency must be an integer in [1, {limits.MAX_CONCURRENCY:,}], got {concurrency!r}",
                          field="concurrency")
    # A whole plan routes ahead of time, and a closed loop's finish releases an arrival at its own
    # instant: neither has records that end cleanly before the stopping arrival.
    if stop is not None and (layout.mode == "disaggregated" or concurrency is not None):
        raise InternalError("a stop ends open-loop runs of one pool (its probes), not whole plans or closed loops")
    failures, rooms = transfer_failures(layout, len(requests), seed), bootstrap_rooms(layout, len(requests), seed)
    if engine == "fast":
        raw, busy, links, events, stopped = run_fast(layout, requests, concurrency or 0, failures, stop, rooms)
    elif engine == "reference":
        raw, busy, links, events, stopped = run_reference(layout, requests, concurrency or 0, failures, stop, rooms)
    else:
        raise PdplanError(f"engine must be 'fast' or 'reference', got {engine!r}", field="engine")
    # no handoff, no failure: rejected, never decoded, or run whole on one mixed machine
    moved = ~raw["rejected"] & (raw["decode_instance"] >= 0) & (raw["prefill_instance"] != raw["decode_instance"])
    raw["transfer_failures"] = np.where(moved, failures, 0)
    result = _result(layout, requests, raw, busy, links, events, seed=seed, rate_rps=rate_rps,
                     engine=engine, stopped=stopped)
    notice = router_notice(layout, requests)
    if notice is not None:
        result.notes["router"] = notice
    return result


# --- public API ----------------------------------------------------------------------------------

def simulate(workload: Any, plan: Plan, profiles: Mapping, *, model: ModelSpec | None = None,
             seed: int = 0, rate_rps: float | None = None, engine: str = "fast",
             concurrency: int | None = None, availability: Mapping | None = None) -> SimResult:
    """Simulate ``plan`` serving ``workload``.

    ``workload`` is a :class:`pdplan.workload.Workload` or a mapping with ``arrival_s``,
    ``prompt_tokens``, ``output_tokens`` and optionally ``hash_values``, ``hash_offsets``,
    ``block_tokens``. ``profiles`` maps (model, gpu, tp, pp) to :class:`PhaseProfile`
    (e.g. ``pdplan.latency.profile.shipped_profiles()``); a pool without one raises PdplanError
    naming the plan file and the pool. ``model`` (required for disaggregated plans) gives KV
    bytes per token and the layer count; every pool must serve it. ``rate_rps`` rescales the
    arrivals to that mean rate first (same burst shape). ``seed`` draws the plan's KV transfer
    failures (when its failure rate is above 0; otherwise nothing is random) and is recorded.
    ``engine="reference"`` runs the slow token-by-token oracle.
    ``concurrency`` C runs a closed loop instead: C clients, each sending its next request (in
    trace order) the moment its previous one finishes, as ``vllm bench serve
    --max-concurrency``, genai-perf and AIPerf do; the trace's arrival times are ignored. With
    ``rate_rps`` too, the clients are paced: each request is due at its arrival time rescaled to
    that rate (the first at 0) and is sent then, or when a client frees if later, as ``vllm bench
    serve --request-rate R --max-concurrency C`` sends a request scheduled by the rate once a slot is free.
    ``availability`` (pool name → per replica, the [from, until) intervals in which it takes new
    requests) runs a pool whose instances join and leave: out of its intervals an instance only
    drains the work it holds; the routers pick among the instances taking requests.
    """
    requests = as_requests(workload, rate_rps=rate_rps, closed_loop=concurrency is not None)
    layout = layout_from_plan(plan, profiles, model)
    if availability is not None:
        layout = dataclasses.replace(layout, availability=instance_availability(plan, availability))
    return run(layout, requests, seed=seed, rate_rps=rate_rps, engine=engine, concurrency=concurrency)


def simulate_pool(workload: Any, profile: PhaseProfile, *, phase: str, replicas: int = 1,
                  policy: str | None = None, chunk_tokens: int | None = None,
                  max_prefill_batch_tokens: int | None = None, seed: int = 0,
                  rate_rps: float | None = None, engine: str = "fast",
                  concurrency: int | None = None, stop: MissStop | None = None, prefix_cache: bool = True,
                  router: str = Router.LEAST_LOADED, rank_router: str = RankRouter.SHORTEST_QUEUE,
                  max_running_requests: int | None = None) -> SimResult:
    """``replicas`` identical instances of one phase behind the router, with no other phase
    (``concurrency``: a closed loop of that many clients, as in :func:`simulate`; ``stop``: end
    the run once its misses settle, :class:`MissStop`). With prefix hashes in the workload and
    ``prefix_cache``, prefill and colocated instances keep a prefix cache as in a plan (its
    capacity derived); ``router`` picks the prefill instance, ``rank_router`` a prefill instance's rank; each rank
    runs at most ``max_running_requests`` requests at once (None: as many as its KV holds).

    The clocks are those of one instance alone (below), per request; routing is the plan's
    (prefill: ``router``, by default fewest pending prompt tokens; decode: least KV load; colocated: fewest outstanding
    tokens), so a pool of n replicas shows the pooling gain that n separate instances do not.
    """
    if phase == "colocated":
        if policy not in ("prefill-first", "chunked"):
            raise PdplanError(f"policy must be 'prefill-first' or 'chunked', got {policy!r}", field="policy")
        if (policy == "chunked") != (chunk_tokens is not None):
            raise PdplanError("chunk_tokens is required by, and only by, the chunked policy", field="chunk_tokens")
        if chunk_tokens is not None and chunk_tokens < 1:
            # 0 would mean "no chunking" in the layout
            raise PdplanError(f"chunk_tokens must be >= 1, got {chunk_tokens}", field="chunk_tokens")
    elif phase not in ("prefill", "decode"):
        raise PdplanError(f"phase must be prefill, decode or colocated, got {phase!r}", field="phase")
    layout = layout_single(phase, profile, policy=policy, chunk_tokens=chunk_tokens,
                           max_prefill_batch_tokens=max_prefill_batch_tokens, replicas=replicas,
                           prefix_cache=prefix_cache, router=router, rank_router=rank_router,
                           max_running_requests=max_running_requests)
    requests = as_requests(workload, rate_rps=rate_rps, closed_loop=concurrency is not None)
    return run(layout, requests, seed=seed, rate_rps=rate_rps, engine=engine, concurrency=concurrency, stop=stop)


def simulate_prefill_instance(workload: Any, profile: PhaseProfile, *,
                              max_prefill_batch_tokens: int | None = None, seed: int = 0,
                              rate_rps: float | None = None, engine: str = "fast") -> SimResult:
    """One prefill instance alone: ``ttft_s`` is its TTFT contribution, prefill end − arrival
    (queue + batch time); no transfer and no decode (TPOT not measured). The batch cap defaults
    to the profile's, as in a plan's pool."""
    return simulate_pool(workload, profile, phase="prefill", max_prefill_batch_tokens=max_prefill_batch_tokens,
                         seed=seed, rate_rps=rate_rps, engine=engine)


def simulate_decode_instance(workload: Any, profile: PhaseProfile, *, seed: int = 0,
                             rate_rps: float | None = None, engine: str = "fast") -> SimResult:
    """One decode instance alone: requests arrive with their KV visible (and first token made);
    ``admission_wait_s`` (= ``ttft_s``) is the wait for KV memory, ``tpot_s`` the cadence."""
    return simulate_pool(workload, profile, phase="decode", seed=seed, rate_rps=rate_rps, engine=engine)


def simulate_colocated_instance(workload: Any, profile: PhaseProfile, *, policy: str = "prefill-first",
                                chunk_tokens: int | None = None,
                                max_prefill_batch_tokens: int | None = None, seed: int = 0,
                                rate_rps: float | None = None, engine: str = "fast") -> SimResult:
    """One colocated instance alone with ``policy`` "prefill-first" (batch cap defaults to the
    profile's) or "chunked" (needs ``chunk_tokens``)."""
    return simulate_pool(workload, profile, phase="colocated", policy=policy, chunk_tokens=chunk_tokens,
                         max_prefill_batch_tokens=max_prefill_batch_tokens, seed=seed, rate_rps=rate_rps,
                         engine=engine)
