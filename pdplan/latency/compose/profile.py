"""Composed profiles: step times summed from measured operators, fitted into pdplan's format.

:class:`~pdplan.latency.compose.step.Step` gives the time of any prefill batch or decode step; the
simulator reads a :class:`~pdplan.latency.profile.PhaseProfile`. :func:`composed_profile` times a grid
of batches — prefill: 1–32 prompts of 64–16,384 tokens up to the batch cap; decode: 1–512
requests holding 64–32,768 tokens each, within the KV capacity — and fits them with the same
rules as measured points (:func:`pdplan.latency.fit.fit_profile`), so a composed profile reports
its held-out fit error like a measured one. Its provenance names the tables, engine versions and
any query outside the measured grids.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache

from pdplan.engines import DEFAULT_ENGINE
from pdplan.errors import PdplanError
from pdplan.experts import all_to_all_rejection
from pdplan.hardware import GPU
from pdplan.latency.compose import tables
from pdplan.latency.compose.step import Step
from pdplan.latency.eager import with_eager_prefill
from pdplan.latency.fit import ShapePoints, decode_point, fit_profile, prefill_point
from pdplan.latency.profile import PhaseProfile, group_grid, profile_from_dict, profile_to_dict
from pdplan.latency.roofline import DEFAULT_MAX_PREFILL_BATCH_TOKENS
from pdplan.modelspec import ModelSpec, expert_placement_rejection, kv_capacity_tokens, shape_rejection
from pdplan.shape import InstanceShape
from pdplan.vocabulary import AllToAll, MoeActivations

PREFILL_BATCHES = (1, 2, 4, 8, 16, 32)
PREFILL_LENGTHS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
DECODE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
DECODE_CONTEXTS = (64, 256, 1024, 2048, 4096, 8192, 16384, 32768)


def sample_points(step: Step, *, kv_capacity: int, max_batch_tokens: int) -> list:
    """Prefill and decode points of the composition grid that the instance can hold."""
    points = []
    for batch in PREFILL_BATCHES:
        for length in PREFILL_LENGTHS:
            if batch * length <= max_batch_tokens or batch == 1 and length <= kv_capacity:
                points.append(prefill_point(batch_size=batch, prompt_tokens=length,
                                            latency_s=step.prefill_s(batch, length), origin=f"{batch}x{length}"))
    for batch in DECODE_BATCHES:
        for context in DECODE_CONTEXTS:
            if batch * context <= kv_capacity:
                points.append(decode_point(batch_size=batch, context_tokens=batch * context,
                                           latency_s=step.decode_s(batch, context), origin=f"B{batch}x{context}"))
    return points


@cache
def composed_profile(model: ModelSpec, gpu: GPU, tp: int, pp: int, *, dp: int = 1, ep: int = 1,
                     engine: str = DEFAULT_ENGINE,
                     engine_version: str | None = None, memory_utilization: float = 0.9,
                     gpus_per_node: int | None = None,
                     max_prefill_batch_tokens: int = DEFAULT_MAX_PREFILL_BATCH_TOKENS,
                     expert_parallel: bool = False, redundant_experts: int = 0,
                     moe_activations: MoeActivations | None = None, moe_kernel: str | None = None,
                     all_to_all: AllToAll = AllToAll.DISPATCH) -> PhaseProfile:
    """The composed profile of one shape, or a PdplanError saying why none can be made.

    ``ep``: the GPUs routed experts are spread over as whole experts (1: split over TP); ``expert_parallel``
    is the older spelling of ep = TP. With ``dp`` attention data-parallel ranks (or an EP other than TP) the
    profile is ONE rank's, at the rank's own batch with every rank carrying the same, its KV capacity the
    rank's (:mod:`pdplan.latency.compose.wide`); ``redundant_experts`` copies rebalance the expert load (EPLB).
    ``gpus_per_node`` (default: the GPU's NVLink domain) is how far collectives and the all-to-all stay on NVLink.
    ``moe_activations``: the precision MXFP4 experts take their activations in (None: the engine's default).
    ``moe_kernel``: the one MoE kernel (the table's ``kernel_source``) the engine's backend runs (None: the fastest
    measured at each point). ``all_to_all``: how DP ranks with whole experts over TP × DP reach them (gathered:
    :mod:`pdplan.latency.compose.gathered`; dispatched: :mod:`pdplan.latency.compose.wide`)."""
    wrong = all_to_all_rejection(all_to_all, tp, dp, ep, redundant_experts)
    if wrong is not None:
        raise PdplanError(f"all_to_all {wrong}", field="all_to_all")
    if expert_parallel:
        ep = tp
    gpus_per_node = gpus_per_node or gpu.nvlink_domain  # collectives stay on NVLink that far
    reason = shape_rejection(model, gpu, tp, pp, gpus_per_node=gpus_per_node,
                             memory_utilization=memory_utilization, kv_reserve_tokens=1, ep=ep, dp=dp,
                             redundant_experts=redundant_experts)
    if reason is not None:
        placement = expert_placement_rejection(model, tp, ep, redundant_experts, dp)
        raise PdplanError(f"{model.name} {reason}", field=placement[0] if placement else "tp")
    if gpu.base is not None:
        raise PdplanError(f"no AIConfigurator operator data for {gpu.name} (a power-capped setting of "
                          f"{gpu.physical}; it measures uncapped GPUs)", field="gpu")
    step, capacity, cap = _composition(model, gpu, tp, pp, engine=engine, engine_version=engine_version,
                                       memory_utilization=memory_utilization, gpus_per_node=gpus_per_node,
                                       max_prefill_batch_tokens=max_prefill_batch_tokens, dp=dp, ep=ep,
                                       expert_parallel=expert_parallel, redundant_experts=redundant_experts,
                                       moe_activations=moe_activations, moe_kernel=moe_kernel,
                                       all_to_all=all_to_all)
    source = tables.source_text(step.system, engine, step.versions)
    points = tuple(sample_points(step, kv_capacity=capacity, max_batch_tokens=cap))
    group = group_points(step, dp * cap) if dp > 1 and step.wide else {}
    shape = ShapePoints(model=model.name, gpu=gpu.name, tp=tp, pp=pp, points=points,
                        source=source, notes=f"{source}; {_notes(step)}")
    profile = fit_profile(shape, kv_capacity_tokens=capacity, max_prefill_batch_tokens=cap, concave_decode=model.is_moe)
    prov = profile.provenance
    profile = replace(profile, provenance=replace(
        prov, source="composed", method=f"{engine}: operator sum, {prov.method}", file=None))
    profile = with_eager_prefill(profile, model)  # the operator tables time kernels, not their launches
    if dp > 1 or ep > 1 or redundant_experts:  # the key of the pools it times (EP = TP too) and its file's ep
        profile = replace(profile, dp=dp, ep=ep, all_to_all=all_to_all, redundant_experts=redundant_experts, **group)
    # At the written precision, so a composed profile read back from the cache is this very one.
    return profile_from_dict(profile_to_dict(profile), f"composed {profile.shape}")


def _composition(model: ModelSpec, gpu: GPU, tp: int, pp: int, *, engine: str, engine_version: str | None,
                 memory_utilization: float, gpus_per_node: int = 8,
                 max_prefill_batch_tokens: int = DEFAULT_MAX_PREFILL_BATCH_TOKENS,
                 dp: int = 1, ep: int = 1, expert_parallel: bool = False,
                 redundant_experts: int = 0, moe_activations: MoeActivations | None = None,
                 moe_kernel: str | None = None,
                 all_to_all: AllToAll = AllToAll.DISPATCH) -> tuple[Step, int, int]:
    """The shape's operator tables, its KV capacity (one DP rank's) and its prefill batch cap."""
    versions = tables.choose_versions(gpu.physical, engine, engine_version)
    # Whole experts over the TP ranks of one instance without attention DP: the MoE table's EP = TP rows.
    expert_parallel = expert_parallel or (dp == 1 and ep == tp and ep > 1 and not redundant_experts)
    shape = InstanceShape(gpu=gpu.physical, tp=tp, pp=pp, dp=dp, ep=1 if expert_parallel else ep)
    step = Step(model=model, shape=shape, engine=engine, versions=versions,
                gpus_per_node=gpus_per_node, engine_version=engine_version, expert_parallel=expert_parallel,
                redundant_experts=redundant_experts, moe_activations=moe_activations, moe_kernel=moe_kernel,
                all_to_all=all_to_all)
    capacity = kv_capacity_tokens(model, gpu, tp, pp, memory_utilization, ep=ep, dp=dp,
                                  redundant_experts=redundant_experts)
    return step, capacity, min(max_prefill_batch_tokens, capacity)


def group_points(step: Step, top_tokens: int) -> dict:
    """A DP rank's group part (:class:`~pdplan.latency.profile.PhaseProfile`), per phase: its MoE layers'
    time over the whole instance's tokens, at 1, 2, 4, ... tokens and ``top_tokens``. Below DP tokens (fewer
    than the balanced step ever reads: one per rank) it holds its DP-token value, a kernel's launch floor,
    where the tables' own edge would scale it down toward zero."""
    moe_layers, dp = step.model.moe_layers, step.shape.dp
    return {f"group_{phase}_points": tuple(
                (t, moe_layers * step.wide_experts.group_s(max(t, dp), phase == "prefill", step.log))
                for t in group_grid(top_tokens))
            for phase in ("prefill", "decode")}


def _notes(step: Step) -> str:
    parts = ["Composed, not measured end to end: per-step operator latencies (GEMM, attention, all-reduce) "
             "measured by AIConfigurator, summed per layer, plus its analytic element-wise and pipeline-hop "
             "formulas; no engine scheduling overhead between steps"]
    parts.extend(step.notes())
    outside = step.log.text()
    parts.append(f"outside the measured grids: {outside}" if outside else "every query inside the measured grids")
    return "; ".join(parts)


def composed_points(model: ModelSpec, gpu: GPU, tp: int, *, engine: str,
                    memory_utilization: float = 0.9, dp: int = 1, ep: int = 1) -> list:
    """The composition grid's step times of one shape as points (what a composed profile is
    fitted to; the per-engine roofline calibration fits to them too); with ``dp`` ranks, one rank's,
    its all-to-all on NVLink as far as the GPU's NVLink domain reaches (as :func:`composed_profile`)."""
    gpus_per_node = gpu.nvlink_domain if dp > 1 else 8
    step, capacity, cap = _composition(model, gpu, tp, 1, engine=engine, engine_version=None,
                                       memory_utilization=memory_utilization, gpus_per_node=gpus_per_node,
                                       dp=dp, ep=ep)
    return sample_points(step, kv_capacity=capacity, max_batch_tokens=cap)
