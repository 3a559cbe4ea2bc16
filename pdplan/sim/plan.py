"""A serving plan: which instance pools exist, how KV moves between them, and how it is scheduled.

A plan is either **disaggregated** (at least one ``prefill`` pool and one ``decode`` pool, joined
by links) or **colocated** (only ``colocated`` pools, each instance running both phases). It
names instance shapes, not latencies: :func:`resolve_pools` looks each pool's
(model, gpu, tp, pp) up in a profile dictionary the caller passes.

File format (``examples/plan_disagg.yaml``, ``examples/plan_colocated.yaml``)::

    pdplan_plan: 1                 # format version
    name: llama2-70b 2P+2D         # optional label
    router: least-loaded           # optional, how arrivals pick a prefill instance: least-loaded
                                   # (fewest pending prompt tokens; default) | round-robin |
                                   # cache-aware (queue + the prefill its prefix cache leaves)
    early_rejection:               # optional (Mooncake): reject an arrival at admission when its
      ttft_ms: 2000                # predicted TTFT at its prefill instance is above this
    transfer:                      # optional; disaggregated plans only
      schedule: request            # request (after the whole prefill) | layer (per-layer streaming)
      block_tokens: 512            # optional: prefix-hash block size; must match the workload's
      failure_rate: 0.01           # optional: probability that one KV transfer attempt fails
      failure_policy: retry        # retry (resend the KV) | recompute (prefill again); default retry
      route_ms: 1.0                # optional: the router's hop from prefill to decode (default 0)
    profiles:                      # optional: how the shapes are timed (optimize writes what it used)
      engine: vllm                 # engine whose operators compose unmeasured shapes
                                   # (engine_version: their version; default the newest measured)
      compose: true                # false: measured, else roofline
      speculative:                 # optional: the deployment runs speculative decoding
        method: mtp                # mtp (the model's MTP module) | draft (a draft model)
        acceptance: 0.8            # probability that each draft token is accepted, in [0, 1)
        draft_tokens: 1            # draft tokens per verify step (default 1)
        draft_cost: 0.0125         # one draft token / one decode step; default for mtp 1/L
    default_link:                  # optional; used by prefill→decode pairs without a link entry
      bandwidth_gb_s: 25           # GB/s (10^9 bytes/s), one direction
      setup_ms: 0.5                # fixed cost per transfer
    links:                         # optional; one entry per (prefill pool, decode pool) pair
      - {from: prefill, to: decode, bandwidth_gb_s: 25, setup_ms: 0.5}
    pools:
      - name: prefill
        phase: prefill             # prefill | decode | colocated
        model: llama2-70b
        gpu: a100-80gb
        tp: 4                      # default 1
        pp: 1                      # default 1
        replicas: 2                # default 1
        # optional, wide expert parallelism: dp (attention data-parallel ranks, each with its own batch
        # and KV; default 1), ep (expert-parallel size: 1, or dividing tp × dp; default 1) and
        # redundant_experts (extra expert replicas spread over the EP ranks; default 0). An instance
        # is tp × dp × pp GPUs, as the engines count them.
        max_prefill_batch_tokens: 2048   # optional (prefill, prefill-first): FCFS batch cap in
                                   # prompt tokens; default and upper bound: the profile's
        max_running_requests: 128  # optional, every phase: requests one rank runs at once (a
                                   # prefill batch, or prompts being prefilled plus decodes): vLLM
                                   # --max-num-seqs, SGLang --max-running-requests; default none
                                   # (the KV pool is the only limit)
        recv_interval: 30          # optional, colocated without dp: the scheduler takes in new
                                   # requests only after a prompt iteration or every N-th decode
                                   # step (SGLang --scheduler-recv-interval); default 1
        batch_wait_timeout_iters: 20     # optional, chunked colocated without dp, with the next
        batch_wait_max_tokens_ratio: 0.9 # (both or neither): while requests decode, prompts are held
                                   # until this many iterations held them or their tokens plus the
                                   # decodes reach this share of chunk_tokens (TensorRT-LLM's
                                   # batch waiting, the options of the same names); default off
        prefix_cache_blocks: 8192  # optional: the instance's prefix cache in HBM (LRU of prefix
                                   # blocks; a hit skips their prefill; colocated pools too); default
                                   # its KV capacity in blocks; 0 turns it off
        cache_tier:                # optional, prefill only: a second tier under HBM
          medium: host             # host (host memory) | remote (a store across the network)
          blocks: 65536            # its capacity in prefix blocks
          bandwidth_gb_s: 50       # GB/s a hit there loads at (required)
      - name: decode
        phase: decode
        model: llama2-70b
        gpu: a100-80gb
        tp: 4
        replicas: 2
        prefix_cache_blocks: 4096  # optional: LRU of prefix blocks seen (a block held is not
                                   # sent); default kv_capacity_tokens // block_tokens; 0: off
      # colocated pools add:  policy: prefill-first | chunked;  chunk_tokens: 512 (chunked only)
      # mixed pools (Splitwise's: machines that take both phases in a disaggregated plan) add
      # policy: chunked and chunk_tokens, and the plan may say when work spills to them:
    mixed:                         # optional; disaggregated plans with a mixed pool or borrowing
      prefill_queue_tokens: 2048   # arrivals spill (run whole on a mixed machine) above this many
                                   # pending prompt tokens in the shortest prefill queue
      decode_kv_share: 1.0         # prefilled requests decode on one when their decode instance's
                                   # routed KV would pass this share of its capacity
      borrow: true                 # optional (default false): past those thresholds, and with no
                                   # mixed machine free, a decode instance is lent to prefill or a
                                   # prefill instance to decode; it returns when that work drains
                                   # (Splitwise's policy; instances with dp 1). Links may then name
                                   # prefill pools as their `to` (else default_link carries the KV)
      borrow_chunk_tokens: 2048    # optional: a lent machine's chunked budget per iteration

Units in the dataclasses are bytes/s and seconds; the file's GB/s and ms are converted once here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from pdplan import limits
from pdplan.engines import ENGINES
from pdplan.errors import PdplanError
from pdplan.fileio import load_yaml
from pdplan.hardware import GB, get_gpu
from pdplan.latency.profile import PhaseProfile
from pdplan.latency.speculative import SpeculativeDecoding, speculative_from_fields
from pdplan.modelcatalog import get_model
from pdplan.modelspec import ModelSpec, expert_placement_rejection
from pdplan.schema import Fields
from pdplan.shape import InstanceShape, shape_key, shape_label
from pdplan.vocabulary import CacheMedium, FailurePolicy, Phase, Policy, Router, TransferSchedule

FORMAT_VERSION = 1
#: Replicas one pool may have: more instances than the largest fleets run (a 4,096-GPU cluster
#: holds at most 4,096), and each costs simulator memory.
MAX_REPLICAS = 10_000
#: Attention data-parallel ranks one instance may have: several times the widest published unit
#: (DeepSeek's decode instances of 18 nodes, EP144; issue 22), and each rank costs simulator memory.
MAX_DP_RANKS = 1_024
#: Prefix blocks one cache tier may hold (the simulator's block ids are 32-bit).
MAX_CACHE_BLOCKS = 2**31 - 1
MAX_RUNNING_REQUESTS = 2**31 - 1
#: Decode steps between two receives of new requests: a bound on input (SGLang's default is 1).
MAX_RECV_INTERVAL = 2**31 - 1
#: Iterations batch waiting may hold prompts: a bound on input (TensorRT-LLM's default is 0, off).
MAX_BATCH_WAIT_ITERS = 2**31 - 1
PHASES = tuple(sorted(Phase))
#: Splitwise's mixed pool: arrivals spill to it above this many pending prompt tokens in the
#: shortest prefill queue (Splitwise's prompt batching threshold)...
DEFAULT_SPILL_TOKENS = 2048
#: ...and decodes when their decode instance's routed KV would pass this share of its capacity.
DEFAULT_KV_SHARE = 1.0
#: A machine lent to the other phase batches both phases in chunked iterations of this many tokens:
#: Splitwise's ``max_batch_tokens`` (Mutinifni/splitwise-sim configs/start_state/splitwise.yaml).
DEFAULT_BORROW_CHUNK_TOKENS = 2048
POLICIES = tuple(Policy)
SCHEDULES = tuple(TransferSchedule)
FAILURE_POLICIES = tuple(FailurePolicy)
ROUTERS = tuple(Router)
#: Highest transfer failure rate a plan may state: beyond it, failures are the plan, not a fault.
MAX_FAILURE_RATE = 0.5
#: Longest router hop a plan may state, in seconds.
MAX_ROUTE_S = 10.0


BATCH_WAIT_POOLS = ("chunked colocated pools without attention data parallelism (TensorRT-LLM's in-flight "
                    "batching skips batch waiting under attention DP)")
BATCH_WAIT_BOTH = ("batch_wait_timeout_iters and batch_wait_max_tokens_ratio go together: with either at 0 "
                   "TensorRT-LLM's check passes at once and nothing waits")


def batch_wait_tokens(ratio: float, chunk_tokens: int) -> int:
    """The fewest tokens (prompt tokens the iteration would compute plus one per decode row) that end
    TensorRT-LLM's batch waiting early: its ``PyExecutor._waiting_requests`` stops holding prompts once
    ``num_scheduled_tokens >= batch_wait_max_tokens_ratio * max_num_tokens`` (pdplan's chunk_tokens), or
    once it has held them ``batch_wait_timeout_iters`` iterations."""
    return math.ceil(ratio * chunk_tokens)


def lends(phase: str, dp: int) -> bool:
    """Whether borrowing may lend a machine of this phase and attention DP: a dedicated prefill or decode
    machine of one rank (borrowing lends one-rank machines, as Splitwise's mixed machines batch)."""
    return phase in ("prefill", "decode") and dp == 1


def lendable(pools) -> bool:
    """Whether borrowing has a machine to lend among ``pools`` (:func:`lends`)."""
    return any(lends(p.phase, p.dp) for p in pools)


def receiving_phases(borrow: bool) -> tuple[str, ...]:
    """The phases of the pools a KV handoff may go to: decode and mixed, and prefill when the plan
    borrows (a prefill instance lent to decode)."""
    return ("decode", "mixed", "prefill") if borrow else ("decode", "mixed")


@dataclass(frozen=True, kw_only=True)
class CacheTier:
    """A prefill instance's second prefix-cache tier, under its HBM: blocks evicted from HBM move
    here (most recent first) and a hit here is loaded back at ``bandwidth_bytes_per_s`` before the
    prefill runs; what this tier evicts is gone (an exclusive two-level LRU, as LMCache's CPU
    offload and Mooncake Store keep blocks)."""

    medium: str                         #: "host" or "remote"
    blocks: int                         #: capacity in prefix blocks
    bandwidth_bytes_per_s: float        #: how fast a hit loads into HBM

    def __post_init__(self):
        if self.medium not in tuple(CacheMedium):
            raise PdplanError(f"cache tier medium must be one of {', '.join(CacheMedium)}", field="cache_tier.medium")
        if self.blocks < 0:
            raise PdplanError("cache tier blocks must be >= 0", field="cache_tier.blocks")
        if not self.bandwidth_bytes_per_s > 0:
            raise PdplanError("cache tier bandwidth must be > 0", field="cache_tier.bandwidth_gb_s")


@dataclass(frozen=True, kw_only=True)
class Pool(InstanceShape):
    """``replicas`` identical instances of one (model, gpu, tp, pp) shape serving one phase
    (a prefill instance keeps PP batches in flight)."""

    name: str
    phase: str                          #: "prefill", "decode" or "colocated"
    model: str                          #: model name, as in the model catalog and the profiles
    replicas: int = 1                   #: identical instances
    policy: str | None = None           #: colocated only: "prefill-first" or "chunked"
    chunk_tokens: int | None = None     #: chunked only: tokens per iteration (decodes count one each)
    prefix_cache_blocks: int | None = None  #: prefix-LRU size in HBM (not on mixed pools); None = derived
    cache_tier: CacheTier | None = None     #: prefill only: a second prefix-cache tier
    max_prefill_batch_tokens: int | None = None  #: prefill / prefill-first batch cap; None = the
    #: profile's (a plan may lower it, e.g. to Splitwise's 2048, never raise it)
    redundant_experts: int = 0          #: extra routed-expert replicas over the EP ranks (SGLang
    #: ``--ep-num-redundant-experts``, vLLM EPLB's ``num_redundant_experts``); 0 without EP
    max_running_requests: int | None = None  #: requests one rank runs at once (vLLM ``--max-num-seqs``,
    #: SGLang ``--max-running-requests``); None: only the KV pool limits the batch
    recv_interval: int | None = None    #: colocated, one rank: new requests are taken in only after a
    #: prompt iteration or every N-th decode step (SGLang ``--scheduler-recv-interval``); None: every iteration
    #: chunked colocated, one rank: TensorRT-LLM's batch waiting (:func:`batch_wait_tokens`), both or neither
    batch_wait_timeout_iters: int | None = None
    batch_wait_max_tokens_ratio: float | None = None

    def __post_init__(self):
        def fail(field: str, rule: str) -> PdplanError:
            return PdplanError(f"pool {self.name}: {rule}", field=field)

        if self.phase not in PHASES:
            raise fail("phase", f"phase must be one of {', '.join(PHASES)}")
        if self.tp < 1 or self.pp < 1 or self.replicas < 1:
            raise fail("tp", "tp, pp and replicas must be >= 1")
        if self.dp < 1 or self.ep < 1:
            raise fail("dp" if self.dp < 1 else "ep", "dp and ep must be >= 1")
        if self.redundant_experts < 0:
            raise fail("redundant_experts", "redundant_experts must be >= 0")
        if self.phase == "mixed" and self.policy != "chunked":
            raise fail("policy", "a mixed pool batches both phases: policy chunked")
        if self.phase in ("colocated", "mixed"):
            if self.policy not in POLICIES:
                raise fail("policy", f"policy must be one of {', '.join(POLICIES)}")
            if (self.policy == "chunked") != (self.chunk_tokens is not None):
                raise fail("chunk_tokens", "chunk_tokens is required by, and only by, the chunked policy")
            if self.chunk_tokens is not None and self.chunk_tokens < 1:
                raise fail("chunk_tokens", "chunk_tokens must be >= 1")
        elif self.policy is not None or self.chunk_tokens is not None:
            raise fail("policy", "policy and chunk_tokens apply to colocated and mixed pools")
        if self.max_prefill_batch_tokens is not None:
            if self.phase == "decode" or self.policy == "chunked":
                raise fail("max_prefill_batch_tokens",
                           "max_prefill_batch_tokens applies to prefill and prefill-first pools")
            if self.max_prefill_batch_tokens < 1:
                raise fail("max_prefill_batch_tokens", "max_prefill_batch_tokens must be >= 1")
        if self.prefix_cache_blocks is not None:
            if self.phase == "mixed":
                raise fail("prefix_cache_blocks", "prefix_cache_blocks applies to prefill, decode and colocated pools")
            if self.prefix_cache_blocks < 0:
                raise fail("prefix_cache_blocks", "prefix_cache_blocks must be >= 0")
        if self.cache_tier is not None and self.phase != "prefill":
            raise fail("cache_tier", "cache_tier applies to prefill pools")
        if self.max_running_requests is not None and self.max_running_requests < 1:
            raise fail("max_running_requests", "max_running_requests must be >= 1")
        if self.recv_interval is not None:
            if self.phase != "colocated" or self.dp > 1:
                raise fail("recv_interval", "recv_interval applies to colocated pools without attention data "
                                            "parallelism (SGLang's receive skipper refuses --enable-dp-attention)")
            if self.recv_interval < 1:
                raise fail("recv_interval", "recv_interval must be >= 1")
        if (self.batch_wait_timeout_iters, self.batch_wait_max_tokens_ratio) != (None, None):
            self._check_batch_wait(fail)

    def _check_batch_wait(self, fail) -> None:
        iters, ratio = self.batch_wait_timeout_iters, self.batch_wait_max_tokens_ratio
        if self.phase != "colocated" or self.policy != "chunked" or self.dp > 1:
            raise fail("batch_wait_timeout_iters" if iters is not None else "batch_wait_max_tokens_ratio",
                       f"batch waiting applies to {BATCH_WAIT_POOLS}")
        if iters is None or ratio is None:
            raise fail("batch_wait_max_tokens_ratio" if ratio is None else "batch_wait_timeout_iters", BATCH_WAIT_BOTH)
        if iters < 1:
            raise fail("batch_wait_timeout_iters", "batch_wait_timeout_iters must be >= 1")
        if not 0 < ratio <= 1:
            raise fail("batch_wait_max_tokens_ratio", "batch_wait_max_tokens_ratio must be in (0, 1]")
        if self.recv_interval is not None:
            raise fail("recv_interval", "recv_interval (SGLang's) and batch waiting (TensorRT-LLM's) belong to two "
                                        "engines' schedulers: a pool states one")

    @property
    def shape(self) -> tuple:
        """The profile key (:func:`pdplan.shape.shape_key`): (model, gpu, tp, pp), with (dp, ep) for a
        wide instance."""
        return shape_key(self.model, self.gpu, self.tp, self.pp, dp=self.dp, ep=self.ep)


@dataclass(frozen=True, kw_only=True)
class Link:
    """The KV path from a prefill pool to a decode pool: bandwidth and a fixed cost per transfer.

    Transfers into one decode instance share that instance's ingress and run one at a time, in
    the order they were booked (FIFO); a transfer's speed comes from the link of its pool pair.
    """

    from_pool: str | None              #: prefill pool name; None on the plan's default link
    to_pool: str | None                #: decode pool name; None on the plan's default link
    bandwidth_bytes_per_s: float
    setup_s: float = 0.0

    def __post_init__(self):
        if not self.bandwidth_bytes_per_s > 0:
            raise PdplanError("link bandwidth must be > 0", field="bandwidth_bytes_per_s")
        if self.setup_s < 0:
            raise PdplanError("link setup must be >= 0", field="setup_s")


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Pools, links and the KV transfer schedule of one deployment."""

    pools: tuple[Pool, ...]
    links: tuple[Link, ...] = ()
    default_link: Link | None = None
    transfer_schedule: str = "request"  #: "request" (after the whole prefill) or "layer"
    block_tokens: int | None = None     #: prefix-hash block size, when the plan states it
    name: str = ""
    source: str | None = None           #: file the plan was read from, for error messages
    #: How the plan's shapes were timed when it was made, so `simulate` times them the same way:
    #: the engine whose operators compose unmeasured shapes, its version, and whether to compose.
    engine: str | None = None
    engine_version: str | None = None
    compose: bool = True
    speculative: SpeculativeDecoding | None = None  #: the deployment's speculative decoding, when it runs one
    failure_rate: float = 0.0           #: probability that one KV transfer attempt fails
    failure_policy: str = "retry"       #: "retry" (resend the KV) or "recompute" (prefill again)
    route_s: float = 0.0                #: the router's hop from prefill to decode
    spill_tokens: int = DEFAULT_SPILL_TOKENS  #: mixed pool: prefill queue above which arrivals spill to it
    kv_share: float = DEFAULT_KV_SHARE        #: mixed pool: decode KV share above which decodes spill
    #: Splitwise's borrowing: past those thresholds, dedicated machines are lent to the other phase
    borrow: bool = False
    borrow_chunk_tokens: int = DEFAULT_BORROW_CHUNK_TOKENS  #: a lent machine's chunked budget
    router: str = Router.LEAST_LOADED   #: how an arrival picks its prefill instance
    #: Mooncake's early rejection: an arrival whose predicted TTFT is above this is rejected at
    #: admission (None: off)
    reject_ttft_s: float | None = None

    def __post_init__(self):
        def fail(field: str, rule: str) -> PdplanError:
            return PdplanError(rule, file=self.source, field=field)

        if not self.pools:
            raise fail("pools", "a plan needs at least one pool")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise fail("pools", "pool names must be unique")
        if self.transfer_schedule not in SCHEDULES:
            raise fail("transfer_schedule", f"transfer_schedule must be one of {', '.join(SCHEDULES)}")
        phases = {p.phase for p in self.pools}
        if "colocated" in phases and phases != {"colocated"}:
            raise fail("pools", "a plan is either colocated or disaggregated, not both")
        if phases != {"colocated"} and phases - {"mixed"} != {"prefill", "decode"}:
            raise fail("pools", "a disaggregated plan needs at least one prefill and one decode pool")
        by_name = {p.name: p for p in self.pools}
        receiving = receiving_phases(self.borrow)
        for link in self.links:
            if by_name.get(link.from_pool, None) is None or by_name[link.from_pool].phase != "prefill":
                raise fail("links", f"link from {link.from_pool!r}: not a prefill pool")
            if by_name.get(link.to_pool, None) is None or by_name[link.to_pool].phase not in receiving:
                raise fail("links", f"link to {link.to_pool!r}: not a {' or '.join(receiving)} pool")
        if self.block_tokens is not None and self.block_tokens < 1:
            raise fail("block_tokens", "block_tokens must be >= 1")
        if not 0 <= self.failure_rate <= MAX_FAILURE_RATE:
            raise fail("failure_rate", f"failure_rate must be in [0, {MAX_FAILURE_RATE}]")
        if self.failure_policy not in FAILURE_POLICIES:
            raise fail("failure_policy", f"failure_policy must be one of {', '.join(FAILURE_POLICIES)}")
        if not 0 <= self.route_s <= MAX_ROUTE_S:
            raise fail("route_s", f"route_s must be in [0, {MAX_ROUTE_S}]")
        if self.spill_tokens < 0:
            raise fail("spill_tokens", "spill_tokens must be >= 0")
        if not 0 < self.kv_share <= 1:
            raise fail("kv_share", "kv_share must be in (0, 1]")
        if self.borrow and "colocated" in phases:
            raise fail("mixed.borrow", "mixed.borrow lends dedicated prefill and decode machines: a colocated "
                       "plan has none")
        if self.borrow and not lendable(self.pools):
            raise fail("mixed.borrow", "mixed.borrow needs a prefill or decode pool of dp 1 (borrowing lends "
                       "one-rank machines, as Splitwise's mixed machines batch)")
        if not 1 <= self.borrow_chunk_tokens <= limits.MAX_KV_TOKENS:
            raise fail("mixed.borrow_chunk_tokens", f"borrow_chunk_tokens must be in [1, {limits.MAX_KV_TOKENS}]")
        if self.router not in ROUTERS:
            raise fail("router", f"router must be one of {', '.join(ROUTERS)}")
        if self.reject_ttft_s is not None and not 0 < self.reject_ttft_s <= limits.MAX_LATENCY_MS / 1e3:
            raise fail("early_rejection.ttft_ms", "early_rejection.ttft_ms must be > 0 and at most "
                       f"{limits.MAX_LATENCY_MS:g}")

    @property
    def colocated(self) -> bool:
        return self.pools[0].phase == "colocated"

    def pools_of(self, phase: str) -> tuple[Pool, ...]:
        return tuple(p for p in self.pools if p.phase == phase)

    def link(self, from_pool: str, to_pool: str) -> Link:
        """The link a transfer from ``from_pool`` to ``to_pool`` uses."""
        for link in self.links:
            if link.from_pool == from_pool and link.to_pool == to_pool:
                return link
        if self.default_link is None:
            raise PdplanError(f"no link from pool {from_pool!r} to pool {to_pool!r} and no "
                              "default_link", file=self.source, field="links")
        return self.default_link

    @property
    def gpus(self) -> int:
        """GPUs in all pools."""
        return sum(p.gpus * p.replicas for p in self.pools)


# --- profiles ------------------------------------------------------------------------------------

ProfileKey = tuple[str, str, int, int]


def resolve_pools(plan: Plan, profiles: Mapping[ProfileKey, PhaseProfile]) -> tuple[PhaseProfile, ...]:
    """Each pool's profile, in pool order; a missing shape names the plan file and the pool."""
    found = []
    for i, pool in enumerate(plan.pools):
        profile = profiles.get(pool.shape)
        if profile is None:
            known = ", ".join(sorted(f"{k[0]} {shape_label(*k[1:4], **dict(zip(('dp', 'ep'), k[4:])))}"
                                     for k in profiles)) or "none"
            raise PdplanError(f"pool {pool.name!r} needs a profile for {pool.model} {pool.shape_label()}, "
                              f"which is not loaded (loaded: {known})", file=plan.source,
                              field=f"pools[{i}]")
        cap = pool.max_prefill_batch_tokens
        if cap is not None and cap > profile.max_prefill_batch_tokens:
            raise PdplanError(f"pool {pool.name!r} asks for prefill batches of up to {cap} tokens but "
                              f"its profile ({profile.shape}) allows {profile.max_prefill_batch_tokens}",
                              file=plan.source, field=f"pools[{i}].max_prefill_batch_tokens")
        found.append(profile)
    return tuple(found)


def plan_model(plan: Plan) -> ModelSpec:
    """The one model every pool serves (a plan serves one model), each pool's routed experts placeable on
    its instances as the engines place them (:func:`pdplan.modelspec.expert_placement_rejection`: EP 1 or
    dividing TP × DP, the experts plus the redundant ones spread evenly); a pool that breaks a rule names
    the plan file, the pool and its field."""
    names = sorted({p.model for p in plan.pools})
    if len(names) > 1:
        raise PdplanError(f"pools serve different models ({', '.join(names)}); a plan serves one model",
                          file=plan.source, field="pools")
    model = get_model(names[0])
    for i, pool in enumerate(plan.pools):
        found = expert_placement_rejection(model, pool.tp, pool.ep, pool.redundant_experts, dp=pool.dp)
        if found is not None:
            raise PdplanError(f"pools[{i}].{found[0]} of pool {pool.name!r} ({pool.shape_label()}): {found[1]}",
                              file=plan.source, field=f"pools[{i}].{found[0]}")
    return model


def plan_profiles(plan: Plan, source) -> dict[ProfileKey, PhaseProfile]:
    """A profile for every pool from ``source`` (a :class:`pdplan.latency.source.ProfileSource`:
    measured, else composed, else roofline). A shape that cannot hold the model names the plan
    file and the pool.
    """
    found = {}
    for i, pool in enumerate(plan.pools):
        if pool.shape in found:
            continue
        try:
            found[pool.shape] = source.profile(get_model(pool.model), get_gpu(pool.gpu), pool.tp, pool.pp,
                                               dp=pool.dp, ep=pool.ep)
        except PdplanError as err:
            raise PdplanError(f"pool {pool.name!r}: {err.detail}", file=plan.source, field=f"pools[{i}]") from None
    return found


# --- file ----------------------------------------------------------------------------------------

_TOP_FIELDS = {"pdplan_plan", "name", "transfer", "default_link", "links", "pools", "profiles", "mixed", "router",
               "early_rejection"}
_PROFILE_FIELDS = {"engine", "engine_version", "compose", "speculative"}
_POOL_FIELDS = {"name", "phase", "model", "gpu", "tp", "pp", "dp", "ep", "redundant_experts", "replicas", "policy",
                "chunk_tokens", "prefix_cache_blocks", "cache_tier", "max_prefill_batch_tokens", "max_running_requests",
                "recv_interval", "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio"}
_TIER_FIELDS = {"medium", "blocks", "bandwidth_gb_s"}
_LINK_FIELDS = {"from", "to", "bandwidth_gb_s", "setup_ms"}


def _link(spec: Fields, from_pool: str | None, to_pool: str | None) -> Link:
    return Link(from_pool=from_pool, to_pool=to_pool,
                bandwidth_bytes_per_s=spec.bandwidth_gb_s("bandwidth_gb_s") * GB,
                setup_s=spec.number("setup_ms", 0.0, minimum=0, maximum=limits.MAX_LATENCY_MS) / 1e3)


def _pool(spec: Fields) -> Pool:
    spec.reject_unknown(_POOL_FIELDS)
    phase = spec.string("phase", choices=list(PHASES))
    policy = chunk = cache_blocks = None
    if phase in ("colocated", "mixed"):
        policy = spec.string("policy", choices=["chunked"] if phase == "mixed" else list(POLICIES))
        if policy == "chunked":
            chunk = spec.integer("chunk_tokens", minimum=1, maximum=limits.MAX_KV_TOKENS)
        elif spec.has("chunk_tokens"):
            raise spec.fail("chunk_tokens", "applies only to policy chunked", spec.data["chunk_tokens"])
    else:
        for key in ("policy", "chunk_tokens"):
            if spec.has(key):
                raise spec.fail(key, "applies only to colocated and mixed pools", spec.data[key])
    if spec.has("prefix_cache_blocks"):
        if phase == "mixed":
            raise spec.fail("prefix_cache_blocks", "applies only to prefill, decode and colocated pools",
                            spec.data["prefix_cache_blocks"])
        cache_blocks = spec.integer("prefix_cache_blocks", minimum=0, maximum=MAX_CACHE_BLOCKS)
    tier = None
    if spec.has("cache_tier"):
        if phase != "prefill":
            raise spec.fail("cache_tier", "applies only to prefill pools", show_value=False)
        tier = _cache_tier(spec.mapping("cache_tier"))
    batch_cap = None
    if spec.has("max_prefill_batch_tokens"):
        if phase == "decode" or policy == "chunked":
            raise spec.fail("max_prefill_batch_tokens", "applies only to prefill and prefill-first "
                            "colocated pools (chunked pools use chunk_tokens)",
                            spec.data["max_prefill_batch_tokens"])
        batch_cap = spec.integer("max_prefill_batch_tokens", minimum=1, maximum=limits.MAX_KV_TOKENS)
    dp = spec.integer("dp", 1, minimum=1, maximum=MAX_DP_RANKS)
    return Pool(name=spec.string("name"), phase=phase, model=spec.string("model"),
                gpu=spec.string("gpu"), tp=spec.integer("tp", 1, minimum=1, maximum=limits.MAX_GPUS_PER_INSTANCE_STAGE),
                pp=spec.integer("pp", 1, minimum=1, maximum=limits.MAX_PIPELINE_STAGES),
                dp=dp, ep=spec.integer("ep", 1, minimum=1, maximum=limits.MAX_GPUS),
                redundant_experts=spec.integer("redundant_experts", 0, minimum=0, maximum=limits.MAX_GPUS),
                replicas=spec.integer("replicas", 1, minimum=1, maximum=MAX_REPLICAS),
                policy=policy, chunk_tokens=chunk, prefix_cache_blocks=cache_blocks, cache_tier=tier,
                max_prefill_batch_tokens=batch_cap,
                max_running_requests=spec.integer("max_running_requests", minimum=1, maximum=MAX_RUNNING_REQUESTS)
                if spec.has("max_running_requests") else None,
                recv_interval=_recv_interval(spec, phase, dp), **_batch_wait(spec, phase, policy, dp))


def _recv_interval(spec: Fields, phase: str, dp: int) -> int | None:
    if not spec.has("recv_interval"):
        return None
    if phase != "colocated" or dp > 1:
        raise spec.fail("recv_interval", "applies only to colocated pools without attention data parallelism "
                        "(SGLang's receive skipper refuses --enable-dp-attention)", spec.data["recv_interval"])
    return spec.integer("recv_interval", minimum=1, maximum=MAX_RECV_INTERVAL)


def _batch_wait(spec: Fields, phase: str, policy: str | None, dp: int) -> dict:
    keys = ("batch_wait_timeout_iters", "batch_wait_max_tokens_ratio")
    stated = [key for key in keys if spec.has(key)]
    if not stated:
        return {}
    if phase != "colocated" or policy != "chunked" or dp > 1:
        raise spec.fail(stated[0], f"applies only to {BATCH_WAIT_POOLS}", spec.data[stated[0]])
    if len(stated) == 1:
        missing = keys[1 - keys.index(stated[0])]
        raise spec.fail(missing, f"is missing: {BATCH_WAIT_BOTH}", show_value=False)
    if spec.has("recv_interval"):
        raise spec.fail("recv_interval", f"is SGLang's scheduler and {stated[0]} TensorRT-LLM's: a pool states one",
                        spec.data["recv_interval"])
    return {keys[0]: spec.integer(keys[0], minimum=1, maximum=MAX_BATCH_WAIT_ITERS),
            keys[1]: spec.number(keys[1], minimum=0, exclusive=True, maximum=1)}


def _cache_tier(spec: Fields) -> CacheTier:
    spec.reject_unknown(_TIER_FIELDS)
    return CacheTier(medium=spec.string("medium", choices=list(CacheMedium)),
                     blocks=spec.integer("blocks", minimum=0, maximum=MAX_CACHE_BLOCKS),
                     bandwidth_bytes_per_s=spec.bandwidth_gb_s("bandwidth_gb_s") * GB)


def load_plan(path: str | Path) -> Plan:
    """Read and validate a plan YAML; any broken rule raises PdplanError naming file:line and field."""
    return parse_plan(load_yaml(path, what="plan file"), path)


def parse_plan(data, path: str | Path) -> Plan:
    """A plan from its file's parsed content (or a manifest's, rebuilt as one)."""
    top = Fields(data, path)
    top.reject_unknown(_TOP_FIELDS)
    top.integer("pdplan_plan", minimum=FORMAT_VERSION, maximum=FORMAT_VERSION)

    pools, names = [], set()
    for spec in top.items("pools"):
        pool = _pool(spec)
        if pool.name in names:
            raise spec.fail("name", "must be unique across pools", pool.name)
        names.add(pool.name)
        pools.append(pool)
    phases = {p.phase for p in pools}
    if "colocated" in phases and phases != {"colocated"}:
        raise top.fail("pools", "must be all colocated or a mix of prefill and decode, not both",
                       sorted(phases))
    if phases != {"colocated"} and phases - {"mixed"} != {"prefill", "decode"}:
        raise top.fail("pools", "of a disaggregated plan need at least one prefill and one decode pool",
                       sorted(phases))
    colocated = phases == {"colocated"}

    schedule, block_tokens, faults = "request", None, {}
    if top.has("transfer"):
        transfer = top.mapping("transfer")
        transfer.reject_unknown({"schedule", "block_tokens", "failure_rate", "failure_policy", "route_ms"})
        schedule = transfer.string("schedule", "request", choices=list(SCHEDULES))
        if transfer.has("block_tokens"):
            block_tokens = transfer.integer("block_tokens", minimum=1)
        if transfer.has("failure_rate"):
            faults["failure_rate"] = transfer.number("failure_rate", minimum=0, maximum=MAX_FAILURE_RATE)
        if transfer.has("failure_policy"):
            faults["failure_policy"] = transfer.string("failure_policy", choices=list(FAILURE_POLICIES))
        if transfer.has("route_ms"):
            faults["route_s"] = transfer.number("route_ms", minimum=0, maximum=MAX_ROUTE_S * 1e3) / 1e3

    borrow = False
    if top.has("mixed"):
        spec = top.mapping("mixed")
        spec.reject_unknown({"prefill_queue_tokens", "decode_kv_share", "borrow", "borrow_chunk_tokens"})
        borrow = spec.boolean("borrow", False)
        if "mixed" not in phases and not borrow:
            raise top.fail("mixed", "applies only to plans with a mixed pool or borrowing (borrow: true)",
                           show_value=False)
        if colocated:
            raise top.fail("mixed", "applies only to disaggregated plans", show_value=False)
        faults["spill_tokens"] = spec.integer("prefill_queue_tokens", DEFAULT_SPILL_TOKENS, minimum=0,
                                              maximum=limits.MAX_KV_TOKENS)
        faults["kv_share"] = spec.number("decode_kv_share", DEFAULT_KV_SHARE, minimum=0, exclusive=True, maximum=1)
        faults["borrow"] = borrow
        faults["borrow_chunk_tokens"] = spec.integer("borrow_chunk_tokens", DEFAULT_BORROW_CHUNK_TOKENS, minimum=1,
                                                     maximum=limits.MAX_KV_TOKENS)
    receiving = receiving_phases(borrow)

    default_link = None
    if top.has("default_link"):
        spec = top.mapping("default_link")
        spec.reject_unknown(_LINK_FIELDS - {"from", "to"})
        default_link = _link(spec, None, None)
    links, pairs = [], set()
    if top.has("links"):
        phase_of = {p.name: p.phase for p in pools}
        for spec in top.items("links"):
            spec.reject_unknown(_LINK_FIELDS)
            src, dst = spec.string("from"), spec.string("to")
            if phase_of.get(src) != "prefill":
                raise spec.fail("from", "must name a prefill pool of this plan", src)
            if phase_of.get(dst) not in receiving:
                raise spec.fail("to", f"must name a {' or '.join(receiving)} pool of this plan", dst)
            if (src, dst) in pairs:
                raise spec.fail("to", f"repeats the link from {src!r}", dst)
            pairs.add((src, dst))
            links.append(_link(spec, src, dst))
    if colocated:
        for key in ("links", "default_link", "transfer"):
            if top.has(key):
                raise top.fail(key, "applies only to disaggregated plans (a colocated plan moves no KV)",
                               show_value=False)
    else:
        for src in (p.name for p in pools if p.phase == "prefill"):
            for dst in (p.name for p in pools if p.phase in receiving):
                if (src, dst) not in pairs and default_link is None:
                    raise top.fail("links", f"has no link from {src!r} to {dst!r} and there is no "
                                   "default_link", show_value=False)

    name = top.data.get("name", "")
    if not isinstance(name, str):
        raise top.fail("name", "must be a string", name)
    timing = {}
    if top.has("profiles"):
        spec = top.mapping("profiles")
        spec.reject_unknown(_PROFILE_FIELDS)
        if spec.has("engine"):
            timing["engine"] = spec.string("engine", choices=list(ENGINES))
        if spec.has("engine_version"):
            timing["engine_version"] = spec.string("engine_version")
        if spec.has("compose"):
            timing["compose"] = spec.boolean("compose")
        if spec.data.get("speculative") is not None:
            timing["speculative"] = speculative_from_fields(spec.mapping("speculative"))
    if top.has("router"):
        if colocated:
            raise top.fail("router", "applies only to disaggregated plans (it picks a prefill instance)",
                           show_value=False)
        faults["router"] = top.string("router", choices=list(ROUTERS))
    if top.has("early_rejection"):
        if colocated:
            raise top.fail("early_rejection", "applies only to disaggregated plans (it rejects at a prefill "
                           "instance)", show_value=False)
        spec = top.mapping("early_rejection")
        spec.reject_unknown({"ttft_ms"})
        faults["reject_ttft_s"] = spec.number("ttft_ms", minimum=0, exclusive=True,
                                              maximum=limits.MAX_LATENCY_MS) / 1e3
    return Plan(pools=tuple(pools), links=tuple(links), default_link=default_link,
                transfer_schedule=schedule, block_tokens=block_tokens, name=name, source=str(path), **faults,
                **timing)


def plan_to_dict(plan: Plan) -> dict:
    """The plan file's content, readable by :func:`load_plan` (GB/s and ms, as people read them)."""
    def link(entry: Link) -> dict:
        out = {} if entry.from_pool is None else {"from": entry.from_pool, "to": entry.to_pool}
        return {**out, "bandwidth_gb_s": entry.bandwidth_bytes_per_s / GB, "setup_ms": entry.setup_s * 1e3}

    doc: dict = {"pdplan_plan": FORMAT_VERSION}
    if plan.name:
        doc["name"] = plan.name
    timing = {"engine": plan.engine, "engine_version": plan.engine_version}
    timing = {k: v for k, v in timing.items() if v is not None} | ({} if plan.compose else {"compose": False})
    if plan.speculative is not None:
        timing["speculative"] = {k: v for k, v in plan.speculative.to_dict().items() if v is not None}
    if timing:
        doc["profiles"] = timing
    if not plan.colocated:
        doc["transfer"] = {"schedule": plan.transfer_schedule}
        if plan.block_tokens is not None:
            doc["transfer"]["block_tokens"] = plan.block_tokens
        if plan.failure_rate > 0:  # stated only when set, so plans without faults read as before
            doc["transfer"] |= {"failure_rate": plan.failure_rate, "failure_policy": plan.failure_policy}
        if plan.route_s > 0:
            doc["transfer"]["route_ms"] = plan.route_s * 1e3
        if plan.router != Router.LEAST_LOADED:
            doc["router"] = plan.router
        if plan.reject_ttft_s is not None:
            doc["early_rejection"] = {"ttft_ms": plan.reject_ttft_s * 1e3}
        if plan.pools_of("mixed") or plan.borrow:
            doc["mixed"] = {"prefill_queue_tokens": plan.spill_tokens, "decode_kv_share": plan.kv_share}
        if plan.borrow:
            doc["mixed"] |= {"borrow": True, "borrow_chunk_tokens": plan.borrow_chunk_tokens}
        if plan.default_link is not None:
            doc["default_link"] = link(plan.default_link)
        if plan.links:
            doc["links"] = [link(entry) for entry in plan.links]
    optional = ("policy", "chunk_tokens", "prefix_cache_blocks", "max_prefill_batch_tokens", "max_running_requests",
                "recv_interval", "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio")
    doc["pools"] = [{"name": p.name, "phase": p.phase, "model": p.model, "gpu": p.gpu, "tp": p.tp, "pp": p.pp,
                     **wide_fields(p.dp, p.ep, p.redundant_experts), "replicas": p.replicas,
                     **{k: getattr(p, k) for k in optional if getattr(p, k) is not None},
                     **({} if p.cache_tier is None else {"cache_tier": {
                         "medium": p.cache_tier.medium, "blocks": p.cache_tier.blocks,
                         "bandwidth_gb_s": p.cache_tier.bandwidth_bytes_per_s / GB}})}
                    for p in plan.pools]
    return doc


def wide_fields(dp: int, ep: int, redundant_experts: int) -> dict:
    """A pool's dp, ep and redundant_experts as a plan file states them: only those away from their
    defaults, so the plan of a TP × PP deployment reads as it always has."""
    fields = {"dp": dp, "ep": ep, "redundant_experts": redundant_experts}
    return {k: v for k, v in fields.items() if v != (0 if k == "redundant_experts" else 1)}
