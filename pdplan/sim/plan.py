"""A serving plan: which instance pools exist, how KV moves between them, and how it is scheduled.

A plan is either **disaggregated** (at least one ``prefill`` pool and one ``decode`` pool, joined
by links) or **colocated** (only ``colocated`` pools, each instance running both phases). It
names instance shapes, not latencies: :func:`resolve_pools` looks each pool's
(model, gpu, tp, pp) up in a profile dictionary the caller passes.

The plan file (its format, reading and writing) is :mod:`pdplan.sim.planfile`. Units here are
bytes/s and seconds; the file's GB/s and ms are converted once there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from pdplan import limits
from pdplan.engines import prompt_pages
from pdplan.errors import PdplanError
from pdplan.experts import all_to_all_rejection
from pdplan.hardware import get_gpu, gpu_catalog
from pdplan.latency.profile import PhaseProfile
from pdplan.latency.speculative import SpeculativeDecoding
from pdplan.modelref import get_model
from pdplan.modelspec import ModelSpec, expert_placement_rejection
from pdplan.shape import InstanceShape, shape_key, shape_label
from pdplan.vocabulary import (
    AllToAll,
    CacheMedium,
    FailurePolicy,
    FirstToken,
    Handoff,
    MoeActivations,
    Phase,
    Policy,
    RankRouter,
    Router,
    TransferSchedule,
)

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
RANK_ROUTERS = tuple(RankRouter)
HANDOFFS = tuple(Handoff)
FIRST_TOKENS = tuple(FirstToken)
#: Highest transfer failure rate a plan may state: beyond it, failures are the plan, not a fault.
MAX_FAILURE_RATE = 0.5
#: Longest router hop a plan may state, in seconds.
MAX_ROUTE_S = 10.0


BATCH_WAIT_POOLS = ("chunked colocated pools without attention data parallelism (TensorRT-LLM's in-flight "
                    "batching skips batch waiting under attention DP)")
BATCH_WAIT_BOTH = ("batch_wait_timeout_iters and batch_wait_max_tokens_ratio go together: with either at 0 "
                   "TensorRT-LLM's check passes at once and nothing waits")


ADP_BALANCE_POOLS = "chunked colocated pools with attention data parallelism (dp above 1)"
ADP_BALANCE_BOTH = ("attention_dp_timeout_iters and attention_dp_batching_wait_iters go together: TensorRT-LLM's "
                    "attention_dp_config with enable_balance states both (its defaults are 50 and 10)")


def rank_router_rejection(rank_router: str, phase: str, dp: int) -> str | None:
    """Why ``rank_router`` cannot place the requests of an instance of ``phase`` with ``dp`` attention-DP ranks (by
    bootstrap room only a prefill instance with ranks, in turn only a decode or colocated one); None when it can."""
    if rank_router not in RANK_ROUTERS:
        return f"must be one of {', '.join(RANK_ROUTERS)}"
    if rank_router == RankRouter.BOOTSTRAP_ROOM and (phase != "prefill" or dp < 2):
        return "bootstrap-room applies only to prefill pools with attention data parallelism (dp above 1)"
    if rank_router == RankRouter.ROUND_ROBIN and (phase not in ("decode", "colocated") or dp < 2):
        return "round-robin applies only to decode and colocated pools with attention data parallelism (dp above 1)"
    return None


def first_token_of(handoff: str) -> FirstToken:
    """The first token of a decode pool that states only its handoff, as such a pool was verified when the handoff
    alone said it: a pulling decode samples its own in its first step, a pushed-to one streams the prefill's."""
    return FirstToken.DECODE if handoff == Handoff.PULL else FirstToken.PREFILL


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
    #: chunked colocated with attention DP: TensorRT-LLM's attention-DP balance (``attention_dp_config``
    #: with ``enable_balance``: its ``timeout_iters`` and ``batching_wait_iters``), both or neither
    attention_dp_timeout_iters: int | None = None
    attention_dp_batching_wait_iters: int | None = None
    #: attention DP: how a request picks its rank (:class:`pdplan.vocabulary.RankRouter`)
    rank_router: str = RankRouter.SHORTEST_QUEUE
    #: attention DP with whole experts (EP = TP × DP): how tokens reach them (:class:`pdplan.vocabulary.AllToAll`)
    all_to_all: str = AllToAll.DISPATCH
    #: decode: how its engine takes a prefilled request, push or pull (:class:`pdplan.vocabulary.Handoff`)
    handoff: str = Handoff.PUSH
    #: decode: where a request's first token comes from (:class:`pdplan.vocabulary.FirstToken`); None: as a pool of
    #: its handoff was first verified, the decode's own for a pull, the prefill's for a push (:func:`first_token_of`)
    first_token: str | None = None

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
        if (self.attention_dp_timeout_iters, self.attention_dp_batching_wait_iters) != (None, None):
            self._check_adp_balance(fail)
        wrong = rank_router_rejection(self.rank_router, self.phase, self.dp)
        if wrong is not None:
            raise fail("rank_router", f"rank_router {wrong}")
        wrong = all_to_all_rejection(self.all_to_all, self.tp, self.dp, self.ep, self.redundant_experts)
        if wrong is not None:
            raise fail("all_to_all", f"all_to_all {wrong}")
        if self.handoff not in HANDOFFS:
            raise fail("handoff", f"handoff must be one of {', '.join(HANDOFFS)}")
        if self.handoff != Handoff.PUSH and self.phase != "decode":
            raise fail("handoff", "handoff applies to decode pools (how their engine takes a prefilled request)")
        if self.first_token is None:
            object.__setattr__(self, "first_token", first_token_of(self.handoff))
        if self.first_token not in FIRST_TOKENS:
            raise fail("first_token", f"first_token must be one of {', '.join(FIRST_TOKENS)}")
        if self.first_token != FirstToken.PREFILL and self.phase != "decode":
            raise fail("first_token", "first_token applies to decode pools (where a request's first token comes from)")

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

    def _check_adp_balance(self, fail) -> None:
        timeout, batching = self.attention_dp_timeout_iters, self.attention_dp_batching_wait_iters
        if self.phase != "colocated" or self.policy != "chunked" or self.dp < 2:
            raise fail("attention_dp_timeout_iters" if timeout is not None else "attention_dp_batching_wait_iters",
                       f"attention-DP balance applies to {ADP_BALANCE_POOLS}")
        if timeout is None or batching is None:
            raise fail("attention_dp_batching_wait_iters" if batching is None else "attention_dp_timeout_iters",
                       ADP_BALANCE_BOTH)
        if timeout < 0 or batching < 0:
            raise fail("attention_dp_timeout_iters" if timeout < 0 else "attention_dp_batching_wait_iters",
                       "attention_dp_timeout_iters and attention_dp_batching_wait_iters must be >= 0")

    @property
    def adp_balance(self) -> tuple[int, int]:
        """TensorRT-LLM's attention-DP balance: (timeout_iters, batching_wait_iters); (0, 0) holds nothing,
        as the engine's check then releases every iteration's prompts (off)."""
        return (self.attention_dp_timeout_iters or 0, self.attention_dp_batching_wait_iters or 0)

    @property
    def shape(self) -> tuple:
        """The profile key (:func:`pdplan.shape.shape_key`): (model, gpu, tp, pp), with (dp, ep) for a
        wide instance."""
        return shape_key(self.model, self.gpu, self.tp, self.pp, dp=self.dp, ep=self.ep,
                         all_to_all=self.all_to_all)


@dataclass(frozen=True, kw_only=True)
class Link:
    """The KV path from a prefill pool to a decode pool: bandwidth and a fixed cost per transfer.

    The bandwidth is the bytes a decode instance takes in a second, over all its GPUs; each of its attention-DP
    ranks has its share (1/DP) as its own ingress, and the transfers booked to one rank run one at a time, in the
    order they were booked (FIFO). A request's KV lands on one rank, once for each of its TP ranks under MLA (or
    replicated heads), and leaves only from the prefill GPUs holding it, so it moves at the share of the rank's
    bandwidth those fill over those copies (:func:`pdplan.handoff.request_kv_bytes_per_s`).
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
    #: the precision MXFP4 experts were composed at (:class:`pdplan.vocabulary.MoeActivations`); None: the
    #: engine's default on each GPU
    moe_activations: str | None = None
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
        if self.moe_activations is not None and self.moe_activations not in tuple(MoeActivations):
            raise fail("profiles.moe_activations", f"moe_activations must be one of {', '.join(MoeActivations)}")
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
                              f"its profile ({profile.shape}) allows {profile.max_prefill_batch_tokens}"
                              f"{_paged(plan.engine, pool.gpu, cap, profile.max_prefill_batch_tokens)}",
                              file=plan.source, field=f"pools[{i}].max_prefill_batch_tokens")
        found.append(profile)
    return tuple(found)


def _paged(engine: str | None, gpu: str, asked: int, allowed: int) -> str:
    """Why a profile allows a prefill cap ``allowed`` just below the ``asked`` one: the engine takes a rank's chunk in
    whole KV pages on this GPU, and ``allowed`` is ``asked``'s whole pages (:func:`pdplan.engines.prompt_pages`, which
    ``ProfileSource`` cuts the cap to); nothing when the two differ for another reason."""
    known = gpu_catalog().get(gpu)
    pages = prompt_pages(engine, known is not None and known.blackwell)
    if pages == 1 or asked // pages * pages != allowed:
        return ""
    return f", whole KV pages of {pages} tokens as {engine} takes a rank's chunk on {gpu}"


def plan_model(plan: Plan) -> ModelSpec:
    """The one model every pool serves (a plan serves one model, which pools may name as a catalog name
    with or without its default precision, ``deepseek-v3`` or ``deepseek-v3@fp8``, or as its model file's
    path, also at a precision: ``mine.yaml@fp8``), each pool's routed experts placeable on its instances
    as the engines place them (:func:`pdplan.modelspec.expert_placement_rejection`: EP 1 or dividing
    TP × DP, the experts plus the redundant ones spread evenly); a pool that breaks a rule names the plan
    file, the pool and its field."""
    models = {}
    for i, pool in enumerate(plan.pools):
        if pool.model not in models:
            try:
                models[pool.model] = get_model(pool.model)
            except PdplanError as err:
                if err.file is not None:  # a model file of the user's names itself and its key
                    raise
                raise PdplanError(err.detail, file=plan.source, field=f"pools[{i}].model") from None
    names = sorted({model.name for model in models.values()})
    if len(names) > 1:
        raise PdplanError(f"pools serve different models ({', '.join(names)}); a plan serves one model",
                          file=plan.source, field="pools")
    model = models[plan.pools[0].model]
    for i, pool in enumerate(plan.pools):
        found = expert_placement_rejection(model, pool.tp, pool.ep, pool.redundant_experts, dp=pool.dp)
        if found is not None:
            raise PdplanError(f"pools[{i}].{found[0]} of pool {pool.name!r} ({pool.shape_label()}): {found[1]}",
                              file=plan.source, field=f"pools[{i}].{found[0]}")
    return model


def unmatched_profiles(given: dict[str, PhaseProfile], pools: Sequence[Pool]) -> list[str]:
    """What to say of the profiles a user gave (by file) that time none of ``pools``, though one runs their model
    on their GPU at their TP and PP: a profile times only pools of its own attention DP, EP and all-to-all
    (:attr:`pdplan.latency.profile.PhaseProfile.key`) and of its redundant expert slots, so such a pool is timed by
    another source. (A profile file of EP = TP written before pdplan recorded that EP reads as experts split over
    TP.)"""
    said, timed = [], {(pool.shape, pool.redundant_experts) for pool in pools}
    for file, profile in given.items():
        near = [pool for pool in pools if pool.shape[:4] == profile.key[:4]]
        if near and (profile.key, profile.redundant_experts) not in timed:
            names = ", ".join(f"{pool.name} ({pool.shape_label()})" for pool in near)
            said.append(f"{file}: times {profile.shape}, which no pool here runs; of its model, GPU, TP and PP "
                        f"{names} runs other coordinates, timed otherwise (a profile times only its own attention DP, "
                        "EP and expert slots)")
    return said


def plan_profiles(plan: Plan, source) -> dict[ProfileKey, PhaseProfile]:
    """A profile for every pool from ``source`` (a :class:`pdplan.latency.source.ProfileSource`:
    measured, else composed, else roofline). A shape that cannot hold the model names the plan
    file and the pool.
    """
    found, slots = {}, {}
    for i, pool in enumerate(plan.pools):
        if pool.shape in found:
            if slots[pool.shape] != pool.redundant_experts:  # the simulator times a shape by one profile
                raise PdplanError(f"pool {pool.name!r} has {pool.redundant_experts} redundant experts and another "
                                  f"pool of its shape {slots[pool.shape]}; one profile times a shape",
                                  file=plan.source, field=f"pools[{i}].redundant_experts")
            continue
        slots[pool.shape] = pool.redundant_experts
        try:
            found[pool.shape] = source.profile(get_model(pool.model), get_gpu(pool.gpu), pool.tp, pool.pp,
                                               dp=pool.dp, ep=pool.ep, all_to_all=pool.all_to_all,
                                               redundant_experts=pool.redundant_experts)
        except PdplanError as err:
            raise PdplanError(f"pool {pool.name!r}: {err.detail}", file=plan.source, field=f"pools[{i}]") from None
    return found
