"""The plan file: reading (validated once, each broken rule named by file, line and field) and
writing a :class:`pdplan.sim.plan.Plan`.

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
      moe_activations: mxfp8       # optional: MXFP4 experts' activations, bf16 | mxfp8 (Blackwell);
                                   # default the engine's on each GPU
    default_link:                  # optional; used by prefill→decode pairs without a link entry
      bandwidth_gb_s: 25           # GB/s (10^9 bytes/s) a decode instance takes in, one direction; each
                                   # of its dp ranks has 1/dp of it, and a request lands on one rank; under
                                   # MLA a request's KV lands once per decode TP rank and leaves from the
                                   # prefill GPUs holding it (pdplan.handoff.request_kv_bytes_per_s)
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
        # is tp × dp × pp GPUs, as the engines count them. all_to_all (dp above 1 with ep = tp × dp):
        # dispatch (each token sent to its experts' ranks: DeepEP, TensorRT-LLM's; default) or gather
        # (every rank's tokens gathered onto every GPU: SGLang's --moe-a2a-backend none, vLLM's
        # --all2all-backend allgather_reducescatter).
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
        attention_dp_timeout_iters: 60     # optional, chunked colocated with dp, with the next (both
        attention_dp_batching_wait_iters: 0  # or neither): TensorRT-LLM's attention-DP balance
                                   # (attention_dp_config with enable_balance, the options of the
                                   # same names): prompts wait for every rank to have some; default off
        rank_router: bootstrap-room  # optional, with dp: how a request picks its rank:
                                   # shortest-queue (fewest outstanding requests; default),
                                   # bootstrap-room (prefill: its random bootstrap room modulo dp:
                                   # SGLang's P/D prefill, --load-balance-method follow_bootstrap_room)
                                   # or round-robin (decode, colocated: each rank in turn, SGLang's
                                   # default there, --load-balance-method round_robin)
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
        handoff: pull              # optional, decode: how its engine takes a prefilled request:
                                   # push (the prefill sends the KV once its prefill ends: SGLang;
                                   # default) or pull (the decode reads the KV from the iteration
                                   # that takes the request in: TensorRT-LLM, vLLM)
        first_token: prefill       # optional, decode: where a request's first token comes from:
                                   # prefill (the decode streams the prefill's token when the
                                   # request joins a batch: SGLang, TensorRT-LLM) or decode (it
                                   # samples it again in the first step the request runs in: vLLM);
                                   # default decode with handoff pull, else prefill
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

The file states GB/s and ms; the dataclasses hold bytes/s and seconds, converted once here.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path

from pdplan import limits
from pdplan.engines import ENGINES
from pdplan.experts import read_all_to_all
from pdplan.fileio import load_yaml
from pdplan.hardware import GB
from pdplan.latency.speculative import speculative_from_fields
from pdplan.schema import Fields
from pdplan.sim.plan import (
    ADP_BALANCE_BOTH,
    ADP_BALANCE_POOLS,
    BATCH_WAIT_BOTH,
    BATCH_WAIT_POOLS,
    DEFAULT_BORROW_CHUNK_TOKENS,
    DEFAULT_KV_SHARE,
    DEFAULT_SPILL_TOKENS,
    FAILURE_POLICIES,
    MAX_FAILURE_RATE,
    MAX_ROUTE_S,
    PHASES,
    POLICIES,
    ROUTERS,
    SCHEDULES,
    CacheTier,
    Link,
    Plan,
    Pool,
    first_token_of,
    rank_router_rejection,
    receiving_phases,
)
from pdplan.vocabulary import AllToAll, CacheMedium, FirstToken, Handoff, MoeActivations, RankRouter, Router

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
#: Iterations the attention-DP balance may hold prompts: a bound on input (TensorRT-LLM's default is 50).
MAX_ADP_BALANCE_ITERS = 2**31 - 1

_TOP_FIELDS = {"pdplan_plan", "name", "transfer", "default_link", "links", "pools", "profiles", "mixed", "router",
               "early_rejection"}
_PROFILE_FIELDS = {"engine", "engine_version", "compose", "speculative", "moe_activations"}
_POOL_FIELDS = {"name", "phase", "model", "gpu", "tp", "pp", "dp", "ep", "redundant_experts", "replicas", "policy",
                "chunk_tokens", "prefix_cache_blocks", "cache_tier", "max_prefill_batch_tokens", "max_running_requests",
                "recv_interval", "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio",
                "attention_dp_timeout_iters", "attention_dp_batching_wait_iters", "rank_router", "all_to_all",
                "handoff", "first_token"}
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
    tp = spec.integer("tp", 1, minimum=1, maximum=limits.MAX_GPUS_PER_INSTANCE_STAGE)
    ep = spec.integer("ep", 1, minimum=1, maximum=limits.MAX_GPUS)
    redundant = spec.integer("redundant_experts", 0, minimum=0, maximum=limits.MAX_GPUS)
    return Pool(name=spec.string("name"), phase=phase, model=spec.string("model"), gpu=spec.string("gpu"), tp=tp,
                pp=spec.integer("pp", 1, minimum=1, maximum=limits.MAX_PIPELINE_STAGES),
                dp=dp, ep=ep, redundant_experts=redundant, all_to_all=read_all_to_all(spec, tp, dp, ep, redundant),
                replicas=spec.integer("replicas", 1, minimum=1, maximum=MAX_REPLICAS),
                policy=policy, chunk_tokens=chunk, prefix_cache_blocks=cache_blocks, cache_tier=tier,
                max_prefill_batch_tokens=batch_cap,
                max_running_requests=spec.integer("max_running_requests", minimum=1, maximum=MAX_RUNNING_REQUESTS)
                if spec.has("max_running_requests") else None,
                recv_interval=_recv_interval(spec, phase, dp), **_batch_wait(spec, phase, policy, dp),
                **_adp_balance(spec, phase, policy, dp), rank_router=_rank_router(spec, phase, dp),
                handoff=_decode_setting(spec, phase, "handoff", Handoff, Handoff.PUSH),
                first_token=_decode_setting(spec, phase, "first_token", FirstToken, None))


def _rank_router(spec: Fields, phase: str, dp: int) -> str:
    """The pool's ``rank_router``, held to :func:`pdplan.sim.plan.rank_router_rejection`."""
    router = spec.string("rank_router", str(RankRouter.SHORTEST_QUEUE), choices=list(RankRouter))
    wrong = rank_router_rejection(router, phase, dp)
    if wrong is not None:
        raise spec.fail("rank_router", wrong, router)
    return router


def _decode_setting(spec: Fields, phase: str, name: str, choices: type[StrEnum], default: str | None) -> str | None:
    """A decode pool's ``name`` (``handoff``, ``first_token``), one of ``choices``; ``default`` when unstated;
    refused on any other pool."""
    if not spec.has(name):
        return default
    if phase != "decode":
        raise spec.fail(name, "applies only to decode pools", spec.data[name])
    return spec.string(name, choices=list(choices))


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


def _adp_balance(spec: Fields, phase: str, policy: str | None, dp: int) -> dict:
    keys = ("attention_dp_timeout_iters", "attention_dp_batching_wait_iters")
    stated = [key for key in keys if spec.has(key)]
    if not stated:
        return {}
    if phase != "colocated" or policy != "chunked" or dp < 2:
        raise spec.fail(stated[0], f"applies only to {ADP_BALANCE_POOLS}", spec.data[stated[0]])
    if len(stated) == 1:
        missing = keys[1 - keys.index(stated[0])]
        raise spec.fail(missing, f"is missing: {ADP_BALANCE_BOTH}", show_value=False)
    return {key: spec.integer(key, minimum=0, maximum=MAX_ADP_BALANCE_ITERS) for key in keys}


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
        if spec.has("moe_activations"):
            timing["moe_activations"] = spec.string("moe_activations", choices=list(MoeActivations))
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
    if plan.moe_activations is not None:
        timing["moe_activations"] = str(plan.moe_activations)
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
                "recv_interval", "batch_wait_timeout_iters", "batch_wait_max_tokens_ratio",
                "attention_dp_timeout_iters", "attention_dp_batching_wait_iters")
    doc["pools"] = [{"name": p.name, "phase": p.phase, "model": p.model, "gpu": p.gpu, "tp": p.tp, "pp": p.pp,
                     **wide_fields(p.dp, p.ep, p.redundant_experts, p.all_to_all), "replicas": p.replicas,
                     **{k: getattr(p, k) for k in optional if getattr(p, k) is not None},
                     **({} if p.rank_router == RankRouter.SHORTEST_QUEUE else {"rank_router": str(p.rank_router)}),
                     **({} if p.handoff == Handoff.PUSH else {"handoff": str(p.handoff)}),
                     **({} if p.first_token == first_token_of(p.handoff) else {"first_token": str(p.first_token)}),
                     **({} if p.cache_tier is None else {"cache_tier": {
                         "medium": p.cache_tier.medium, "blocks": p.cache_tier.blocks,
                         "bandwidth_gb_s": p.cache_tier.bandwidth_bytes_per_s / GB}})}
                    for p in plan.pools]
    return doc


def wide_fields(dp: int, ep: int, redundant_experts: int, all_to_all: str = AllToAll.DISPATCH) -> dict:
    """A pool's dp, ep, redundant_experts and all_to_all as a plan file states them: only those away from
    their defaults, so the plan of a TP × PP deployment reads as it always has."""
    fields = {"dp": dp, "ep": ep, "redundant_experts": redundant_experts}
    stated = {k: v for k, v in fields.items() if v != (0 if k == "redundant_experts" else 1)}
    return stated | ({"all_to_all": str(all_to_all)} if all_to_all != AllToAll.DISPATCH else {})
