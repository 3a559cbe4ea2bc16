"""The closed sets of words pdplan speaks: phases, modes, affinities, policies and the other choices.

Each set is one :class:`enum.StrEnum`, used by the domain objects and as the CLI's choices. A member
is its string (``Mode.AUTO == "auto"``, ``f"{Mode.AUTO}"`` is ``auto``, ``json.dumps`` writes
``"auto"``), so documents and answers read the same words as before; :func:`pdplan.fileio.dump_yaml`
writes members as plain strings. Member order is the order each set is listed in where order
matters (the placement program sorts instances by :class:`Phase`).
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    """What a pool's instances run: one phase of a disaggregated plan, both (colocated), or either
    on demand (Splitwise's mixed pool)."""

    PREFILL = "prefill"
    DECODE = "decode"
    COLOCATED = "colocated"
    MIXED = "mixed"


#: The phases one instance runs alone, as ``pdplan goodput --phase`` measures it.
INSTANCE_PHASES = (Phase.PREFILL, Phase.DECODE, Phase.COLOCATED)


class Mode(StrEnum):
    """The mode ``pdplan optimize`` answers with: the better of both, or the one asked for."""

    AUTO = "auto"
    DISAGGREGATED = "disaggregated"
    COLOCATED = "colocated"


class SimMode(StrEnum):
    """What one simulation ran: a whole plan (disaggregated or colocated) or one phase's pool alone."""

    COLOCATED = "colocated"
    DECODE = "decode"
    DISAGGREGATED = "disaggregated"
    PREFILL = "prefill"


class Affinity(StrEnum):
    """Where KV handoffs go (DistServe): across nodes (high), within a node (low), or the better (auto)."""

    AUTO = "auto"
    HIGH = "high"
    LOW = "low"


class Policy(StrEnum):
    """How a colocated instance schedules prefill against decode."""

    CHUNKED = "chunked"
    PREFILL_FIRST = "prefill-first"


class FailurePolicy(StrEnum):
    """What a failed KV transfer costs: sending it again, or prefilling again."""

    RECOMPUTE = "recompute"
    RETRY = "retry"


class Router(StrEnum):
    """How the router picks a prefill instance: fewest pending prompt tokens (Splitwise's join the
    shortest queue), in turn, or by the queue and the recompute the instance's prefix cache saves
    (cache-aware: Mooncake's conductor, SGLang's router, llm-d's prefix scorer)."""

    CACHE_AWARE = "cache-aware"
    LEAST_LOADED = "least-loaded"
    ROUND_ROBIN = "round-robin"


class CacheMedium(StrEnum):
    """Where a prefill instance's second prefix-cache tier sits: the node's host memory (LMCache's
    CPU offload, vLLM's KV offloading) or a remote store (Mooncake Store, LMCache's remote backend)."""

    HOST = "host"
    REMOTE = "remote"


class TransferSchedule(StrEnum):
    """When KV moves: layer by layer as prefill runs, or the whole request after it."""

    LAYER = "layer"
    REQUEST = "request"


class Objective(StrEnum):
    """What the placement program minimises at the target rate (cost, gpus, power) or maximises (goodput)."""

    COST = "cost"
    GPUS = "gpus"
    POWER = "power"
    GOODPUT = "goodput"


class Redundancy(StrEnum):
    """What a plan must survive losing: nothing, any one instance of each pool, or any one node."""

    NONE = "none"
    INSTANCE = "instance"
    NODE = "node"


class PoolShapes(StrEnum):
    """One shape per phase and GPU type, as deployers run pools, or a mix the program chooses."""

    ONE = "one"
    MIXED = "mixed"


class Rule(StrEnum):
    """When a verified plan passes: each objective's 95% interval lower end, or its mean, meets the target."""

    LOWER = "lower"
    MEAN = "mean"


class Arrivals(StrEnum):
    """How a goodput probe reaches a rate: the trace rescaled (burst shape kept), or Poisson arrivals."""

    TRACE = "trace"
    POISSON = "poisson"


class Connector(StrEnum):
    """The KV connector a manifest names (vLLM's connectors, in the order the CLI lists them)."""

    NIXL = "nixl"
    MOONCAKE = "mooncake"
    LMCACHE = "lmcache"


class Executor(StrEnum):
    """Where a sensitivity grid runs its cells: local processes, or a Ray cluster."""

    LOCAL = "local"
    RAY = "ray"


class TraceArrivals(StrEnum):
    """The arrivals ``pdplan trace`` gives a trace: its own (rescaled), or new Poisson or gamma ones."""

    GAMMA = "gamma"
    POISSON = "poisson"
    TRACE = "trace"


class SpeculativeMethod(StrEnum):
    """Where speculative decoding's draft tokens come from: the model's own multi-token prediction
    module (DeepSeek-V3's MTP), or a separate, smaller draft model (Leviathan et al. 2023)."""

    MTP = "mtp"
    DRAFT = "draft"


class MoeActivations(StrEnum):
    """The precision an engine feeds MXFP4 experts their activations in: BF16 (the W4A16 kernels) or
    quantized to MXFP8 (W4A8: TensorRT-LLM's and SGLang's default on Blackwell, vLLM's when told,
    :func:`pdplan.latency.compose.moe.mxfp4_activations`)."""

    BF16 = "bf16"
    MXFP8 = "mxfp8"


class AllToAll(StrEnum):
    """How an instance of attention data parallelism with whole experts (EP = TP × DP) moves its tokens to the
    experts in every MoE layer: DISPATCH sends each token to the ranks of its routed experts and combines their
    results back (DeepEP's kernels in SGLang and vLLM, TensorRT-LLM's MoE all-to-all); GATHER all-gathers every
    rank's tokens onto every GPU, runs its experts over all of them and reduce-scatters the sums (SGLang's
    ``--moe-a2a-backend none``, vLLM's ``--all2all-backend allgather_reducescatter``)."""

    DISPATCH = "dispatch"
    GATHER = "gather"


class RankRouter(StrEnum):
    """How an instance with attention data parallelism picks the rank that takes a request: the rank with the fewest
    outstanding requests (vLLM's DP load balancer, SGLang's ``total_requests``, TensorRT-LLM's attention-DP request
    scheduling); on a prefill instance, the prompt's bootstrap room modulo DP (SGLang's prefill under P/D
    disaggregation, ``follow_bootstrap_room``, which its older ``round_robin`` also meant there: the router draws
    each request's room at random, so the rank is uniformly random whatever the ranks hold); or, on a decode or
    colocated instance, each rank in turn whatever it holds (SGLang's ``round_robin``, its default there)."""

    SHORTEST_QUEUE = "shortest-queue"
    BOOTSTRAP_ROOM = "bootstrap-room"
    ROUND_ROBIN = "round-robin"


class Handoff(StrEnum):
    """How a decode engine takes a prefilled request (:func:`pdplan.engines.handoff`). Push (SGLang): the prefill sends
    the KV as soon as its prefill ends. Pull (TensorRT-LLM, vLLM): the decode starts reading the KV in the iteration
    that takes the request in. Which token the user sees first is :class:`FirstToken`."""

    PUSH = "push"
    PULL = "pull"


class FirstToken(StrEnum):
    """Where a disaggregated request's first token comes from (:func:`pdplan.engines.first_token`). Prefill (SGLang,
    TensorRT-LLM): the decode streams the token the prefill sampled when the request joins its batch, before any step
    of its own. Decode (vLLM): the decode samples it again in the first step the request runs in."""

    PREFILL = "prefill"
    DECODE = "decode"
