"""Candidate instance shapes per phase: which (GPU type, TP, PP, policy) could serve the model.

A shape is kept when its TP group fits a node (or whole nodes of one NVLink domain), TP divides the KV heads (or
replicates them), PP is at most the layer count, the weights plus the KV of the largest request fit memory, and the
engine the plan is for can run it in its phase, spread the model's experts over its EP, give each DP rank its GPUs
and start its colocated chunk
(:mod:`pdplan.engines`). For a mixture-of-experts model, each attention data-parallel size DP above 1 adds wide
shapes: TP × DP GPUs in one stage, every routed expert whole on one of them (EP = TP × DP, the wide-EP deployments
of DeepSeek, SGLang and Dynamo), on one node or spread evenly over whole nodes, its tokens moved to the experts as
the engine runs it (:func:`pdplan.engines.all_to_all`: gathered on one node under SGLang and vLLM, by a colocated
vLLM instance across nodes and by TensorRT-LLM off an NVLink domain spanning nodes, dispatched otherwise). Every
rejected shape comes back with its reason, for ``--explain``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from pdplan.engines import (
    DEFAULT_ENGINE,
    ENGINE_NAMES,
    chunk_refusal,
    experts_refusal,
    rank_refusal,
    rank_span_refusal,
    running_cap,
    shape_refusal,
    starts_deepep,
)
from pdplan.engines import all_to_all as engine_all_to_all
from pdplan.hardware import Cluster, gpu_catalog
from pdplan.modelspec import ModelSpec, shape_rejection
from pdplan.shape import InstanceShape, wide_ep, wide_slots
from pdplan.vocabulary import AllToAll

DEFAULT_TPS = (1, 2, 4, 8)
DEFAULT_PPS = (1, 2, 4)
DEFAULT_DPS = (1,)
DEFAULT_CHUNKS = (512, 2048)


@dataclass(frozen=True, kw_only=True)
class Shape(InstanceShape):
    """One instance configuration for one phase."""

    phase: str                    #: "prefill", "decode" or "colocated"
    policy: str | None = None     #: colocated only: "chunked" or "prefill-first"
    chunk_tokens: int | None = None
    #: attention DP with whole experts: how the plan's engine moves tokens to them (:func:`pdplan.engines.all_to_all`)
    all_to_all: AllToAll = AllToAll.DISPATCH
    #: requests one rank may run at once where the engine holds it below its KV (:func:`pdplan.engines.running_cap`)
    max_running_requests: int | None = None

    @property
    def label(self) -> str:
        extra = f" {self.policy}" + (f" {self.chunk_tokens}" if self.chunk_tokens else "") if self.policy else ""
        return f"{self.phase} {self.shape_label()}{extra}"


@dataclass(frozen=True, kw_only=True)
class Rejected:
    shape: Shape
    reason: str


def gpu_types_for(cluster: Cluster, phase: str) -> tuple[str, ...]:
    """GPU types a phase may run on in this cluster: the nodes' types, plus power-capped
    settings of them for decode (Splitwise's HHcap token machines)."""
    present = set(cluster.gpu_types)
    types = set(present)
    if phase == "decode":
        types |= {g.name for g in gpu_catalog().values() if g.base in present}
    return tuple(sorted(types))


def enumerate_shapes(model: ModelSpec, cluster: Cluster, *, largest_request_tokens: int,
                     phases: tuple[str, ...] = ("prefill", "decode", "colocated"),
                     tps: tuple[int, ...] = DEFAULT_TPS, pps: tuple[int, ...] = DEFAULT_PPS,
                     chunk_sizes: tuple[int, ...] = DEFAULT_CHUNKS, dps: tuple[int, ...] = DEFAULT_DPS,
                     memory_utilization: float = 0.9, engine: str | None = None,
                     connector: str | None = None, draft_tokens: int = 0,
                     redundant_experts: int = 0) -> tuple[list[Shape], list[Rejected]]:
    """Every shape worth measuring, and every rejected one with its one-sentence reason.

    ``largest_request_tokens`` (prompt + output of the trace's largest request) is the KV
    reserve: an instance that cannot hold that request can never serve the whole trace (a wide
    shape's rank must hold it). ``dps`` above 1 add a mixture-of-experts model's wide shapes (one
    stage, EP = TP × DP). ``engine`` with its KV ``connector`` keeps only the shapes that engine
    runs (None: every one); a shape whose ranks that engine holds to fewer requests than their KV may take
    (``draft_tokens`` drafted per request under speculative decoding; vLLM's default requests per rank) carries the
    cap (:func:`pdplan.engines.running_cap`). Every wide shape holds ``redundant_experts`` expert slots beyond the
    model's (EPLB's), which its memory must hold and its EP spread evenly.
    """
    kept, rejected = [], []
    serving = engine or DEFAULT_ENGINE
    for phase in phases:
        for gpu_name in gpu_types_for(cluster, phase):
            nodes = cluster.nodes_for(gpu_name)
            per_node = max(n.gpus_per_node for n in nodes)
            per_host = max(n.host_gpus for n in nodes)  # an engine's process group: beyond it, the ranks span hosts
            gpu = cluster.priced_gpu(gpu_name)
            for tp, pp, dp in _splits(model, tps, pps, dps):
                ep, slots = wide_ep(tp, dp), wide_slots(dp, redundant_experts)
                reason = shape_rejection(model, gpu, tp, pp, gpus_per_node=per_node, dp=dp, ep=ep,
                                         memory_utilization=memory_utilization,
                                         kv_reserve_tokens=largest_request_tokens, redundant_experts=slots)
                split = InstanceShape(gpu=gpu_name, tp=tp, pp=pp, dp=dp, ep=ep)
                exchange = engine_all_to_all(serving, phase, split, per_host, fabric=gpu.nvlink_fabric)
                deepep = starts_deepep(serving, phase, split, exchange, split.stage_gpus > per_host)
                reason = reason or experts_refusal(engine, phase, ep, model.experts + slots, deepep=deepep) \
                    or rank_refusal(engine, tp, dp) or _slots_refusal(serving, split, exchange, slots, per_host)
                for shape in _variants(phase, split, exchange, chunk_sizes):
                    cap = running_cap(serving, phase, split, exchange, per_host, draft_tokens, gpu=gpu,
                                      chunk_tokens=shape.chunk_tokens)
                    shape = replace(shape, max_running_requests=cap)
                    why = reason or _spread_refusal(shape, nodes) or shape_refusal(engine, connector, shape) \
                        or rank_span_refusal(engine, shape, per_node) \
                        or chunk_refusal(engine, phase, shape.chunk_tokens, gpu.blackwell)
                    if why is None:
                        kept.append(shape)
                    else:
                        rejected.append(Rejected(shape=shape, reason=why))
    return kept, rejected


def _splits(model: ModelSpec, tps: tuple[int, ...], pps: tuple[int, ...], dps: tuple[int, ...]):
    """(tp, pp, dp) to consider: every TP × PP, and for a mixture-of-experts model every TP × DP
    with DP above 1 in one stage (pipelines are not combined with attention data parallelism)."""
    for tp in tps:
        for pp in pps:
            yield tp, pp, 1
        if model.is_moe:
            for dp in dps:
                if dp > 1:
                    yield tp, 1, dp


def _slots_refusal(engine: str, shape: InstanceShape, exchange: AllToAll, slots: int, per_host: int) -> str | None:
    """Why a wide shape cannot hold the search's redundant expert slots: ``engine`` gathers its tokens, and EPLB
    rebalances the load of a dispatch, the only all-to-all the tables time slots behind; None when it can."""
    if not slots or exchange != AllToAll.GATHER:
        return None
    gathers, instead = (("TensorRT-LLM gathers its tokens with NCCL off an NVLink fabric", "")
                        if engine == "trtllm" else
                        (f"{ENGINE_NAMES[engine]} gathers the tokens of an instance within one host of {per_host} GPUs "
                         "(its default all-to-all there)", "a DP past one host dispatches, or "))
    return (f"{shape.shape_label()}: {slots} redundant expert slots rebalance a dispatch (EPLB over DeepEP), but "
            f"{gathers}; {instead}search without --redundant-experts")


def _spread_refusal(shape: Shape, nodes) -> str | None:
    """Why no node type holds a shape wider than a node (its ranks' TP inside a node or over whole nodes of one
    NVLink domain, a wider stage evenly over whole nodes of one type, as many of them as that type has); None
    when one does."""
    if shape.stage_gpus <= min(n.gpus_per_node for n in nodes):
        return None
    spans = [(n, n.stage_nodes(shape)) for n in nodes]
    if not any(k for _, k in spans):
        return (f"{shape.shape_label()}: {shape.stage_gpus} GPUs per stage do not spread evenly over whole nodes "
                f"of {', '.join(sorted({str(n.gpus_per_node) for n in nodes}))} GPUs")
    if not any(k and (n.count is None or k * shape.pp <= n.count) for n, k in spans):
        return (f"{shape.shape_label()}: an instance spans more nodes than one node type holds "
                f"({max(k for _, k in spans) * shape.pp} > {max(n.count for n, _ in spans)})")
    return None


def _variants(phase: str, split: InstanceShape, all_to_all: AllToAll, chunk_sizes: tuple[int, ...]) -> list[Shape]:
    """Colocated shapes come once per chunked-prefill budget; the phases once each."""
    common = {**asdict(split), "phase": phase, "all_to_all": all_to_all}
    if phase != "colocated":
        return [Shape(**common)]
    return [Shape(**common, policy="chunked", chunk_tokens=c) for c in chunk_sizes]
