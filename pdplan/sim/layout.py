"""What an engine reads: the requests as arrays and the plan flattened into instances.

Both engines (the compiled one in :mod:`pdplan.sim.fast` and the oracle in
:mod:`pdplan.sim.reference`) take a :class:`Requests` and a :class:`Layout` and agree on which
requests are rejected (:func:`rejected_mask`) and how large each decode instance's prefix cache
is (:func:`cache_capacities`); the modelling choices they share are listed in
:mod:`pdplan.sim.engine`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from pdplan.errors import PdplanError
from pdplan.handoff import request_kv_bytes_per_s
from pdplan.latency.profile import PhaseProfile
from pdplan.modelref import get_model
from pdplan.modelspec import ModelSpec
from pdplan.sim.plan import (
    CacheTier,
    Plan,
    batch_wait_tokens,
    lends,
    rank_router_rejection,
    receiving_phases,
    resolve_pools,
)
from pdplan.vocabulary import FirstToken, Handoff, RankRouter, Router
from pdplan.workload import rescaled_arrivals

# --- requests ------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, eq=False)
class Requests:
    """The per-request arrays an engine reads."""

    arrival_s: np.ndarray       #: float64, non-decreasing
    prompt_tokens: np.ndarray   #: int64 >= 1
    output_tokens: np.ndarray   #: int64 >= 1
    hash_values: np.ndarray | None = None   #: int64 CSR values (prefix-block ids)
    hash_offsets: np.ndarray | None = None  #: int64 CSR offsets, n + 1
    block_tokens: int | None = None         #: tokens per prefix block

    def __len__(self) -> int:
        return int(self.arrival_s.size)

    @property
    def has_hashes(self) -> bool:
        return self.hash_values is not None and self.hash_values.size > 0


def as_requests(workload: Any, *, rate_rps: float | None = None, closed_loop: bool = False) -> Requests:
    """Requests from a :class:`pdplan.workload.Workload` or a mapping of arrays with the same names.

    ``rate_rps`` rescales every inter-arrival gap by one factor so that the mean rate
    (n / (last − first arrival)) becomes ``rate_rps``, keeping burst shape
    (``pdplan.workload.rescale_rate``). A ``closed_loop`` ignores the arrival times (a
    lengths-only trace included): the engine writes them as clients send. A closed loop with
    ``rate_rps`` keeps them, rescaled and starting at 0, as the times each request is due: a
    client sends it then, or when it frees if later (``vllm bench serve --request-rate R
    --max-concurrency C``).
    """
    def get(name, default=None):
        if isinstance(workload, Mapping):
            return workload.get(name, default)
        return getattr(workload, name, default)

    paced = closed_loop and rate_rps is not None
    arrival = np.zeros(len(get("prompt_tokens"))) if closed_loop and not paced else get("arrival_s")
    source = get("source")
    if arrival is None:
        raise PdplanError("the workload has no arrival times (a lengths-only trace); give it an "
                          "arrival process first, e.g. --arrivals poisson --rate R", file=source)
    arrival = np.ascontiguousarray(arrival, dtype=np.float64)
    prompt = np.ascontiguousarray(get("prompt_tokens"), dtype=np.int64)
    output = np.ascontiguousarray(get("output_tokens"), dtype=np.int64)
    n = arrival.size
    if arrival.ndim != 1 or prompt.shape != (n,) or output.shape != (n,):
        raise PdplanError("arrival_s, prompt_tokens and output_tokens must be 1-D of one length", file=source,
                          field="prompt_tokens")
    if n and (not np.all(np.isfinite(arrival)) or np.any(np.diff(arrival) < 0)):
        raise PdplanError("arrival_s must be finite and non-decreasing", file=source, field="arrival_s")
    for name, tokens in (("prompt_tokens", prompt), ("output_tokens", output)):
        if np.any(tokens < 1):
            raise PdplanError(f"{name} must be >= 1, got {int(tokens.min())}", file=source, field=name)
    values, offsets = get("hash_values"), get("hash_offsets")
    block = get("block_tokens")
    if values is not None and offsets is not None and len(values):
        values = np.ascontiguousarray(values, dtype=np.int64)
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if offsets.shape != (n + 1,) or offsets[0] != 0 or offsets[-1] != values.size:
            raise PdplanError("hash_offsets must have n + 1 entries rising from 0 to len(hash_values)", file=source,
                              field="hash_offsets")
        if block is None:
            raise PdplanError("prefix hashes need block_tokens", file=source, field="block_tokens")
    else:
        values = offsets = None
    if rate_rps is not None:
        if not (isinstance(rate_rps, (int, float)) and np.isfinite(rate_rps) and rate_rps > 0):
            raise PdplanError(f"rate_rps must be a finite number > 0, got {rate_rps!r}", field="rate_rps")
        if not n or float(arrival[-1] - arrival[0]) <= 0:
            raise PdplanError(f"cannot rescale: all {n} arrivals fall at one instant", file=source,
                              field="arrival_s")
        arrival = rescaled_arrivals(arrival, rate_rps)
        if paced:  # the benchmark's clients start at 0
            arrival = arrival - arrival[0]
    return Requests(arrival_s=arrival, prompt_tokens=prompt, output_tokens=output,
                    hash_values=values, hash_offsets=offsets,
                    block_tokens=None if block is None else int(block))


# --- instances -----------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True, eq=False)
class Layout:
    """A plan flattened into integer-indexed instances (global ids in plan order)."""

    mode: str                               #: "disaggregated", "colocated", "prefill", "decode"
    labels: tuple[str, ...]                 #: "<pool>/<replica>" per instance
    phases: tuple[str, ...]
    profiles: tuple[PhaseProfile, ...]
    pool_slot: tuple[int, ...]              #: index of the instance's pool among its phase's pools
    policy: tuple[str | None, ...]          #: colocated policy per instance
    chunk_tokens: tuple[int, ...]           #: chunked budget per instance (0 if none)
    cache_blocks: tuple[int | None, ...]    #: prefix LRU capacity in HBM per instance (None: derive)
    #: per instance, its second prefix-cache tier (prefill instances only; None: none)
    cache_tier: tuple[CacheTier | None, ...] = ()
    batch_tokens: tuple[int, ...]           #: FCFS prefill batch cap per instance
    #: bytes/s of a request's KV [prefill pool slot, decode pool slot]: the link's share of the receiving DP rank
    #: (each rank has its own ingress), as much of it as the sending GPUs fill, over the copies the receiver's TP
    #: ranks take (:func:`pdplan.handoff.request_kv_bytes_per_s`)
    link_bandwidth: np.ndarray
    link_setup: np.ndarray                  #: seconds [prefill pool slot, decode pool slot]
    schedule: str = "request"
    layers: int = 1
    kv_bytes_per_token: int = 0
    block_tokens: int | None = None         #: the plan's stated block size, if any
    failure_rate: float = 0.0               #: probability that one KV transfer attempt fails
    failure_policy: str = "retry"           #: "retry" (resend the KV) or "recompute" (prefill again)
    route_s: float = 0.0                    #: the router's hop from prefill to decode
    #: per instance, the [from, until) intervals in which it takes new requests (None: always)
    availability: tuple[tuple[tuple[float, float], ...], ...] | None = None
    spill_tokens: int = 0                   #: mixed pool: prefill queue (pending tokens) above which arrivals spill
    kv_share: float = 1.0                   #: mixed pool: decode KV share above which decodes spill
    router: str = Router.LEAST_LOADED       #: how an arrival picks its prefill instance
    reject_ttft_s: float | None = None      #: early rejection: above this predicted TTFT (None: off)
    #: per instance, the requests one rank runs at once (0: no limit but its KV); empty: none anywhere
    max_running: tuple[int, ...] = ()
    #: per instance, the decode steps between receives of new requests (1: every iteration; SGLang
    #: --scheduler-recv-interval); empty: 1 everywhere
    recv_interval: tuple[int, ...] = ()
    #: per instance, TensorRT-LLM's batch waiting: (iterations it may hold prompts, the tokens that end
    #: it early; :func:`pdplan.sim.plan.batch_wait_tokens`), (0, 0) off; empty: off everywhere
    batch_wait: tuple[tuple[int, int], ...] = ()
    #: per instance, TensorRT-LLM's attention-DP balance: (timeout_iters, batching_wait_iters), (0, 0)
    #: off (:attr:`pdplan.sim.plan.Pool.adp_balance`); empty: off everywhere
    adp_balance: tuple[tuple[int, int], ...] = ()
    #: per instance, whether a prompt's prefill rank is its bootstrap room modulo DP (SGLang's P/D prefill,
    #: :class:`pdplan.vocabulary.RankRouter`) instead of the rank with the fewest outstanding requests;
    #: empty: nowhere
    room_ranks: tuple[bool, ...] = ()
    #: per instance, whether a decode or colocated instance puts its requests on its ranks in turn (SGLang's
    #: ``round_robin``, :class:`pdplan.vocabulary.RankRouter`) instead of on the fewest outstanding; empty: nowhere
    turn_ranks: tuple[bool, ...] = ()
    #: per instance, whether a decode instance pulls its requests' KV (:attr:`pdplan.vocabulary.Handoff.PULL`: it reads
    #: the KV from the iteration that takes a request in) instead of having it pushed; empty: nowhere
    pull: tuple[bool, ...] = ()
    #: per instance, whether a decode instance samples its requests' first token in the first step they run in
    #: (:attr:`pdplan.vocabulary.FirstToken.DECODE`) instead of streaming the prefill's as they join; empty: nowhere
    decode_first: tuple[bool, ...] = ()
    #: Splitwise's borrowing: dedicated machines are lent to the other phase past the spill thresholds
    borrow: bool = False
    borrow_chunk_tokens: int = 0            #: a lent machine's chunked budget per iteration
    #: per instance, its column in the link matrices as a receiver of KV: decode and mixed
    #: instances their pool's, prefill instances (with borrowing) their pool's after those; -1: none
    receiver_slot: tuple[int, ...] = ()

    def tier(self, i: int) -> CacheTier | None:
        """Instance i's second prefix-cache tier, if it has one."""
        return self.cache_tier[i] if self.cache_tier else None

    def running_cap(self, i: int) -> int:
        """The requests one rank of instance i runs at once (0: as many as its KV holds)."""
        return self.max_running[i] if self.max_running else 0

    def receive_every(self, i: int) -> int:
        """Instance i's decode steps between receives of new requests (1: every iteration)."""
        return self.recv_interval[i] if self.recv_interval else 1

    def waits(self, i: int) -> tuple[int, int]:
        """Instance i's batch waiting: (iterations it may hold prompts, tokens that end it early); (0, 0): off."""
        return self.batch_wait[i] if self.batch_wait else (0, 0)

    def balance(self, i: int) -> tuple[int, int]:
        """Instance i's attention-DP balance: (timeout_iters, batching_wait_iters); (0, 0): off."""
        return self.adp_balance[i] if self.adp_balance else (0, 0)

    def routes_by_room(self, i: int) -> bool:
        """Whether instance i prefills a prompt on the rank its bootstrap room names (room modulo DP)."""
        return bool(self.room_ranks) and self.room_ranks[i]

    def ranks_in_turn(self, i: int) -> bool:
        """Whether instance i puts its requests on its ranks in turn."""
        return bool(self.turn_ranks) and self.turn_ranks[i]

    def pulls(self, i: int) -> bool:
        """Whether decode instance i pulls its requests' KV (:attr:`pull`): a machine borrowing may lend runs
        Splitwise's scheduling, which takes its handoffs pushed, whatever its pool says."""
        return bool(self.pull) and self.pull[i] and not self.lendable(i)

    def samples_first_token(self, i: int) -> bool:
        """Whether decode instance i samples its requests' first token in their first step (:attr:`decode_first`); a
        machine borrowing may lend streams the prefill's, as Splitwise's scheduling does."""
        return bool(self.decode_first) and self.decode_first[i] and not self.lendable(i)

    def receiver(self, i: int) -> int:
        """Instance i's column in the link matrices as a receiver of KV."""
        return self.receiver_slot[i] if self.receiver_slot else self.pool_slot[i]

    def lendable(self, i: int) -> bool:
        """Whether instance i may be lent to the other phase: borrowing is on, it is a dedicated
        prefill or decode instance, and it has one rank (a lent machine batches as a mixed one)."""
        return self.borrow and lends(self.phases[i], self.profiles[i].dp)

    def receivers(self) -> np.ndarray:
        """The instances that may take a KV handoff, in the simulators' order: decode, then
        mixed, then (with borrowing) the prefill instances that may be lent to decode."""
        lent = [i for i in self.ids("prefill") if self.lendable(i)]
        return np.concatenate([self.ids("decode"), self.ids("mixed"), np.array(lent, np.int64)]).astype(np.int64)

    def ids(self, phase: str) -> np.ndarray:
        return np.array([i for i, p in enumerate(self.phases) if p == phase], dtype=np.int64)


def layout_from_plan(plan: Plan, profiles: Mapping, model: ModelSpec | None) -> Layout:
    """Resolve each pool's profile and list its replicas as instances."""
    resolved = resolve_pools(plan, profiles)
    labels, phases, profs, slots, policies, chunks, caches, tiers, caps, running = ([] for _ in range(10))
    receive, waits, balance, rooms, turns, pulls, firsts = ([] for _ in range(7))
    receivers = plan.pools_of("decode") + plan.pools_of("mixed")  # a decode or mixed pool's slot
    slot_of = {"prefill": 0, "colocated": 0}
    for i, (pool, profile) in enumerate(zip(plan.pools, resolved)):
        if pool.phase == "mixed" and pool.dp > 1:
            raise PdplanError(f"pool {pool.name!r}: the simulator runs a Splitwise mixed pool without attention "
                              f"data parallelism (dp 1), got dp {pool.dp}", file=plan.source, field=f"pools[{i}].dp")
        if pool.phase in ("decode", "mixed"):
            slot = receivers.index(pool)
        else:
            slot = slot_of[pool.phase]
            slot_of[pool.phase] += 1
        for replica in range(pool.replicas):
            labels.append(f"{pool.name}/{replica}")
            phases.append(pool.phase)
            profs.append(profile)
            slots.append(slot)
            policies.append(pool.policy)
            chunks.append(pool.chunk_tokens or 0)
            caches.append(pool.prefix_cache_blocks)
            tiers.append(pool.cache_tier)
            caps.append(pool.max_prefill_batch_tokens or profile.max_prefill_batch_tokens)
            running.append(pool.max_running_requests or 0)
            receive.append(pool.recv_interval or 1)
            balance.append(pool.adp_balance)
            rooms.append(pool.rank_router == RankRouter.BOOTSTRAP_ROOM)
            turns.append(pool.rank_router == RankRouter.ROUND_ROBIN)
            pulls.append(pool.handoff == Handoff.PULL)
            firsts.append(pool.first_token == FirstToken.DECODE)
            waits.append((0, 0) if pool.batch_wait_timeout_iters is None else (
                pool.batch_wait_timeout_iters, batch_wait_tokens(pool.batch_wait_max_tokens_ratio, pool.chunk_tokens)))
    pre = plan.pools_of("prefill")
    # the link matrix's columns: decode, mixed, and (borrowing) prefill pools, whose lent instances receive KV
    dec = tuple(pool for phase in receiving_phases(plan.borrow) for pool in plan.pools_of(phase))
    receiver = [dec.index(pool) if pool in dec else -1 for pool in plan.pools for _ in range(pool.replicas)]
    if not plan.colocated and model is None:
        raise PdplanError("a disaggregated plan needs the model (KV bytes per token, layers)", file=plan.source,
                          field="model")
    bandwidth = np.ones((max(1, len(pre)), max(1, len(dec))))
    setup = np.zeros_like(bandwidth)
    for i, src in enumerate(pre):  # none in a colocated plan: a link only where the model is known
        for j, dst in enumerate(dec):
            link = plan.link(src.name, dst.name)
            bandwidth[i, j] = request_kv_bytes_per_s(model, link.bandwidth_bytes_per_s, src, dst)
            setup[i, j] = link.setup_s
    if model is not None:
        # a plan file may name the model as the catalog does or by its file (pdplan.sim.plan.plan_model)
        served = {name: name == model.name or get_model(name).name == model.name
                  for name in {pool.model for pool in plan.pools}}
        for i, pool in enumerate(plan.pools):
            if not served[pool.model]:
                raise PdplanError(f"pool {pool.name!r} serves model {pool.model!r} but the simulation "
                                  f"was given {model.name!r}", file=plan.source, field=f"pools[{i}].model")
    return Layout(mode="colocated" if plan.colocated else "disaggregated", labels=tuple(labels),
                  phases=tuple(phases), profiles=tuple(profs), pool_slot=tuple(slots),
                  policy=tuple(policies), chunk_tokens=tuple(chunks), cache_blocks=tuple(caches),
                  cache_tier=tuple(tiers), batch_tokens=tuple(caps), link_bandwidth=bandwidth, link_setup=setup,
                  schedule=plan.transfer_schedule,
                  layers=model.layers if model is not None else 1,
                  kv_bytes_per_token=model.kv_bytes_per_token if model is not None else 0,
                  block_tokens=plan.block_tokens, failure_rate=plan.failure_rate,
                  failure_policy=plan.failure_policy, route_s=plan.route_s, spill_tokens=plan.spill_tokens,
                  kv_share=plan.kv_share, router=plan.router, reject_ttft_s=plan.reject_ttft_s,
                  max_running=tuple(running), recv_interval=tuple(receive), batch_wait=tuple(waits),
                  adp_balance=tuple(balance), room_ranks=tuple(rooms) if any(rooms) else (),
                  turn_ranks=tuple(turns) if any(turns) else (),
                  pull=tuple(pulls) if any(pulls) else (), decode_first=tuple(firsts) if any(firsts) else (),
                  borrow=plan.borrow, borrow_chunk_tokens=plan.borrow_chunk_tokens,
                  receiver_slot=tuple(receiver))


def layout_single(phase: str, profile: PhaseProfile, *, policy: str | None = None,
                  chunk_tokens: int | None = None, max_prefill_batch_tokens: int | None = None,
                  replicas: int = 1, prefix_cache: bool = True, router: str = Router.LEAST_LOADED,
                  rank_router: str = RankRouter.SHORTEST_QUEUE, max_running_requests: int | None = None) -> Layout:
    """``replicas`` instances of ``phase`` ("prefill", "decode" or "colocated") behind the router,
    with no other phase: one instance alone, or one pool judged alone. With ``prefix_cache``, a
    prefill or colocated instance keeps its derived prefix cache (a decode instance alone moves no
    KV, so its cache would save nothing); ``rank_router`` is how an instance with attention DP puts a request on
    a rank; ``max_running_requests`` what one rank runs at once (None: its KV's worth)."""
    cap = max_prefill_batch_tokens or profile.max_prefill_batch_tokens
    if not 1 <= cap <= profile.max_prefill_batch_tokens:
        raise PdplanError(f"max_prefill_batch_tokens must be in [1, {profile.max_prefill_batch_tokens}], got {cap}",
                          field="max_prefill_batch_tokens")
    if replicas < 1:
        raise PdplanError(f"replicas must be >= 1, got {replicas}", field="replicas")
    if max_running_requests is not None and max_running_requests < 1:
        raise PdplanError(f"max_running_requests must be >= 1, got {max_running_requests}",
                          field="max_running_requests")
    wrong = rank_router_rejection(rank_router, phase, profile.dp)
    if wrong is not None:
        raise PdplanError(f"rank_router {wrong}", field="rank_router")
    return Layout(mode="colocated" if phase == "colocated" else phase,
                  labels=tuple(f"{phase}/{i}" for i in range(replicas)), phases=(phase,) * replicas,
                  profiles=(profile,) * replicas, pool_slot=(0,) * replicas, policy=(policy,) * replicas,
                  chunk_tokens=(chunk_tokens or 0,) * replicas,
                  cache_blocks=(None if prefix_cache and phase != "decode" else 0,) * replicas,
                  batch_tokens=(cap,) * replicas, link_bandwidth=np.ones((1, 1)), link_setup=np.zeros((1, 1)),
                  router=router, room_ranks=(True,) * replicas if rank_router == RankRouter.BOOTSTRAP_ROOM else (),
                  turn_ranks=(True,) * replicas if rank_router == RankRouter.ROUND_ROBIN else (),
                  max_running=() if max_running_requests is None else (max_running_requests,) * replicas)


def router_notice(layout: Layout, requests: Requests) -> str | None:
    """What a user should know about the router the run used, if anything (:func:`routing_notice`)."""
    return routing_notice(layout.router, requests.has_hashes) if len(layout.ids("prefill")) else None


def routing_notice(router: str, has_hashes: bool) -> str | None:
    """A cache-aware router on a trace without prefix hashes sees no cache and routes by load."""
    if router == Router.CACHE_AWARE and not has_hashes:
        return ("the cache-aware router needs prefix hashes, which the trace does not have: it routes by load "
                "(fewest pending prompt tokens)")
    return None


def batch_drain_s(layout: Layout, requests: Requests) -> np.ndarray:
    """Per prefill instance, in layout order, the seconds it takes to drain its batch cap of
    queued tokens, for the early-rejection predictor (:func:`pdplan.sim.fast.routing.predicted_ttft_s`):
    one full batch of prompts of the requests' mean length, over its DP ranks (each runs its own
    batch beside the others) and its PP stages (a new batch starts every stage time). Zeros when
    the layout rejects nothing early: nothing reads them then."""
    ids = layout.ids("prefill")
    if layout.reject_ttft_s is None or not len(requests):
        return np.zeros(len(ids))
    mean = max(1.0, float(np.mean(requests.prompt_tokens)))
    drains = []
    for i in ids:
        profile, cap = layout.profiles[i], layout.batch_tokens[i]
        per = min(float(cap), mean)
        full = profile.prefill.evaluate(np.array([[1.0, float(cap), cap * per]]), np.array([max(1, round(cap / per))]))
        drains.append(float(full[0]) / (profile.dp * profile.pp))
    return np.array(drains)


def rejected_mask(layout: Layout, requests: Requests) -> np.ndarray:
    """Requests whose prompt + output exceed the KV capacity of every instance that holds KV."""
    if layout.mode == "prefill":
        return np.zeros(len(requests), dtype=bool)
    holders = ("colocated",) if layout.mode == "colocated" else ("decode", "mixed")
    capacity = max(p.kv_capacity_tokens for p, ph in zip(layout.profiles, layout.phases) if ph in holders)
    return (requests.prompt_tokens + requests.output_tokens) > capacity


def prefix_block_tokens(layout: Layout, requests: Requests) -> int:
    """Tokens per prefix block: the workload's, which must agree with the plan's when both state one."""
    if layout.block_tokens is not None and requests.block_tokens is not None \
            and layout.block_tokens != requests.block_tokens:
        raise PdplanError(f"the plan's block_tokens ({layout.block_tokens}) differs from the "
                          f"workload's prefix-hash block size ({requests.block_tokens})",
                          field="transfer.block_tokens")
    return requests.block_tokens or layout.block_tokens or 0


def cache_capacities(layout: Layout, requests: Requests, phase: str = "decode") -> list[int]:
    """Prefix-LRU capacity in HBM (blocks) of each instance of ``phase`` (prefill, decode or
    colocated), in layout order: the stated one, else the instance's KV capacity in blocks (an engine's prefix
    cache is the free part of its KV pool: vLLM's automatic prefix caching and SGLang's radix cache
    keep finished requests' blocks there until the space is needed)."""
    block = prefix_block_tokens(layout, requests)
    caps = []
    for i in layout.ids(phase):
        stated = layout.cache_blocks[i]
        if stated is not None:
            caps.append(stated)
        else:
            # the instance's cache spans its ranks' KV (the rank is chosen when the KV lands)
            profile = layout.profiles[i]
            caps.append(profile.kv_capacity_tokens * profile.dp // block if block else 0)
    return caps



def instance_availability(plan: Plan, availability: Mapping) -> tuple[tuple[tuple[float, float], ...], ...]:
    """Per instance, in layout order, its intervals from ``availability`` (pool name → one list of
    [from, until) intervals per replica; a pool it does not name takes requests always)."""
    found = []
    for pool in plan.pools:
        spans = availability.get(pool.name)
        if spans is not None and len(spans) != pool.replicas:
            raise PdplanError(f"availability of pool {pool.name!r} needs one list per replica ({pool.replicas}), "
                              f"got {len(spans)}", field="availability")
        for replica in range(pool.replicas):
            found.append(((-np.inf, np.inf),) if spans is None else tuple(map(tuple, spans[replica])))
    return tuple(found)
