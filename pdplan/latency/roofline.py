"""Roofline phase profiles: prefill and decode latency derived from geometry and GPU specs.

For shapes nobody measured, each phase's time is the 0x02B lower bound made realistic by
stated efficiency factors, plus the communication tensor and pipeline parallelism add:

    t = max(F / (tp · C · e_c), B_state / (R · e_b)) + t_comm + L · t_layer
      = max(compute piece, memory piece), each piece carrying t_comm + L · t_layer

F is 0x02A's work (``2·L·N·P_layer`` for the matrices, ``4·L·H_q·d_h·A`` for attention), B_state
the bytes one TP rank streams (its share of the weights plus the K/V it reads and writes), C and
R the GPU's peak FLOP/s and HBM bytes/s, e_c and e_b the fractions of them a real engine reaches,
and t_layer a fixed cost per layer per iteration (kernel launches, norms, the runtime's step
overhead) that no roofline term carries. All three are calibrated once against Splitwise's
measured llama2-70b prompt and token times (:data:`DEFAULT_EFFICIENCY`). t_comm is two TP
all-reduces per layer plus pp − 1 pipeline hops, from :mod:`pdplan.network`.

Both phases are linear in their profile features, prefill in ``(1, Σl, Σl²)`` and decode in
``(1, B, Σctx)``, so a roofline is a :class:`~pdplan.latency.profile.LatencyModel` of two pieces. A
PP > 1 roofline is one batch through every stage: the sum of the stage times, which counts each
layer, each weight and each all-reduce once, plus the hops between stages.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from pdplan.errors import PdplanError
from pdplan.fileio import load_yaml
from pdplan.hardware import GPU
from pdplan.latency.eager import with_eager_prefill
from pdplan.latency.profile import LatencyModel, PhaseProfile, Provenance, Segment
from pdplan.modelspec import (
    ACTIVATION_BYTES,
    COMPUTE_DTYPE,
    ModelSpec,
    full_attention_layers,
    kv_capacity_tokens,
    kv_layer_bytes_per_rank,
    rank_weight_bytes,
    shape_rejection,
)
from pdplan.network import network_for
from pdplan.work import attention_flops_per_pair, expected_experts_touched, linear_flops, routed_expert_flops


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """How far a real engine sits from the hardware roofline."""

    compute: float           #: fraction of peak dense tensor FLOP/s reached, in (0, 1]
    bandwidth: float         #: fraction of peak HBM bandwidth reached, in (0, 1]
    layer_overhead_s: float  #: fixed seconds per layer per iteration, >= 0

    def __post_init__(self):
        for name in ("compute", "bandwidth"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise PdplanError(f"{name} efficiency must be in (0, 1], got {value!r}",
                                  field=f"{name}_efficiency")
        if not self.layer_overhead_s >= 0:
            raise PdplanError(f"layer overhead must be >= 0 s, got {self.layer_overhead_s!r}",
                              field="layer_overhead")


#: The calibrated defaults: the grid point (steps of 0.01 and 10 µs) minimising the mean of the
#: prefill and decode MAPE of llama2-70b on a100-80gb and h100-80gb, TP 2/4/8, against Splitwise's
#: measurements (``benchmarks/roofline_fit.py`` reruns the search; :data:`CALIBRATION` records it).
#: The bandwidth factor sits on its bound: measured decode times fall far less than 1/TP with
#: TP, and the fixed per-layer cost carries the rest.
DEFAULT_EFFICIENCY = Efficiency(compute=0.54, bandwidth=1.0, layer_overhead_s=260e-6)

#: Where :data:`DEFAULT_EFFICIENCY` comes from and how well it holds on the points it was fitted to.
CALIBRATION = {
    "file": "profiles/splitwise_perf_model.csv",
    "origin": "Mutinifni/splitwise-sim data/perf_model.csv (MIT)",
    "sha256": "dbbe505d1d64fc4bd1ec03c50edf944643586de4f68a81e94cbd55dd5bdfbf41",
    "shapes": "llama2-70b on a100-80gb and h100-80gb, TP 2/4/8, PP 1",
    "points_prefill": 76,
    "points_decode": 112,
    "mape_prefill": 0.180,
    "mape_decode": 0.129,
    "max_error_prefill": 0.507,
    "max_error_decode": 0.456,
    "pure_roofline": ("with the per-layer cost fixed at 0 the best factors are compute 0.49, "
                      "bandwidth 0.46: MAPE prefill 21.8%, decode 28.9%"),
}

#: The 2023 calibration's name among the roofline fits.
SPLITWISE_2023 = "splitwise-2023"


@cache
def engine_fits() -> dict:
    """Per-engine efficiencies fitted on composed step times (``benchmarks/roofline_engine_fit.py``)."""
    with resources.as_file(resources.files("pdplan") / "catalog" / "roofline_engines.yaml") as path:
        return load_yaml(path, what="roofline engine fits")


def efficiency_for(engine: str | None) -> Efficiency:
    """The roofline's factors for an engine: its own fit, or the Splitwise 2023 calibration when
    no engine is named (the A100/H100 2023 case)."""
    if engine is None or engine == SPLITWISE_2023:
        return DEFAULT_EFFICIENCY
    fits = engine_fits()["engines"]
    if engine not in fits:
        raise PdplanError(f"no roofline fit for engine {engine!r} (known: {', '.join([SPLITWISE_2023, *fits])})",
                          field="engine")
    fit = fits[engine]
    return Efficiency(compute=fit["compute_efficiency"], bandwidth=fit["bandwidth_efficiency"],
                      layer_overhead_s=fit["layer_overhead_us"] * 1e-6)


#: Compute-throughput slowdown of power-capped GPU types, measured as the ratio of prompt times.
MEASURED_COMPUTE_SLOWDOWN = {"h100-80gb-pcap": 1.30}
SLOWDOWN_SOURCE = (
    "splitwise_perf_model.csv (sha256 dbbe505d…bfbf41): every one of the 76 matched "
    "(model, TP, prompt, batch, tokens) points has h100-80gb-pcap prompt time = 1.300 x "
    "h100-80gb, and equal token times; decode is left unslowed")

#: Largest prefill batch a roofline profile admits, unless the caller says otherwise: the largest
#: batch Splitwise measured (32 prompts of 512 tokens). KV capacity may lower it further.
DEFAULT_MAX_PREFILL_BATCH_TOKENS = 16384


def compute_slowdown(gpu: GPU) -> tuple[float, str]:
    """Factor by which ``gpu``'s compute is slower than its base's, and where the factor comes from.

    Uncapped types: 1. Capped types: the measured prompt-time ratio when one exists, else the
    assumption that throughput falls in proportion to the power allowed (``1/power_cap_fraction``).
    """
    if gpu.base is None and gpu.power_cap_fraction == 1.0:
        return 1.0, ""
    if gpu.name in MEASURED_COMPUTE_SLOWDOWN:
        return MEASURED_COMPUTE_SLOWDOWN[gpu.name], SLOWDOWN_SOURCE
    factor = 1.0 / gpu.power_cap_fraction
    return factor, (f"no measured slowdown for {gpu.name}: assumed 1/power_cap_fraction = "
                    f"{factor:.3g}")


# --- the formulas --------------------------------------------------------------------------------

def _attention_coefficients(model: ModelSpec, *, decode: bool) -> tuple[float, float]:
    """(FLOPs per query-key pair summed over the full-attention layers, the same over the sliding-window
    layers), from :func:`pdplan.work.attention_flops_per_pair` (4·L·H_q·d_h and 0 for a dense GQA model)."""
    full = full_attention_layers(model, range(model.layers))
    per_pair = attention_flops_per_pair(model, decode=decode)
    return per_pair * full, per_pair * (model.layers - full)


def prefill_flops_coefficients(model: ModelSpec) -> tuple[float, float]:
    """FLOPs of one prefill batch per Σl and per Σl² (0x02A, no prior context).

    ``F = 2·L·P_layer·Σl + 4·L·H_q·d_h·Σ l(l+1)/2``, so the coefficient of Σl is
    ``2·L·P_layer + 2·L·H_q·d_h`` and that of Σl² is ``2·L·H_q·d_h``. P_layer is the active one of a
    mixture-of-experts model (:func:`pdplan.work.linear_flops`); a sliding-window layer's row sees at most
    W keys, counted as W·Σl (exact for prompts past the window, an upper bound below it).
    """
    attention, sliding = _attention_coefficients(model, decode=False)
    linear = linear_flops(model, 1)
    return linear + attention / 2 + sliding * model.sliding_window, attention / 2


def decode_flops_coefficients(model: ModelSpec) -> tuple[float, float]:
    """FLOPs of one decode step per request B and per context token Σctx (0x02A).

    Σctx is the context the B requests hold before the step (pdplan's decode feature); each
    request sees its context plus its new row, so 0x02A's ``A_D = Σ s_i = Σctx + B`` and
    ``F = 2·L·P_layer·B + 4·L·H_q·d_h·(Σctx + B)``; a sliding-window layer's request sees at most W
    keys, counted as W per request.
    """
    attention, sliding = _attention_coefficients(model, decode=True)
    return linear_flops(model, 1) + attention + sliding * model.sliding_window, attention


def streamed_weight_bytes_per_gpu(model: ModelSpec, tp: int, experts_read: float | None = None) -> int:
    """Weight bytes one TP rank reads per iteration, summed over pipeline stages.

    Every block matrix and the output head are read once; the input embedding is a gather of
    the batch's rows, not a full read, so it is left out (0x02B's B_weights, plus the head the
    toy ledger omits). A mixture-of-experts layer reads the experts its rows touch, ``experts_read``
    of them (all when None), split over TP (:func:`pdplan.modelspec.rank_weight_bytes`).
    """
    return rank_weight_bytes(model, tp, range(model.layers), 1, experts_read=experts_read)


def kv_bytes_per_token_per_rank(model: ModelSpec, tp: int) -> tuple[int, int]:
    """K/V bytes one token occupies on one TP rank, summed over (full-attention, sliding-window) layers
    (0x06 per rank; MLA's latent is whole on every rank)."""
    full = full_attention_layers(model, range(model.layers))
    per_layer = kv_layer_bytes_per_rank(model, tp)
    return full * per_layer, (model.layers - full) * per_layer


#: Largest decode batch whose touched experts the roofline tracks: from there each MoE layer is taken
#: to read every expert (the expected untouched fraction, (1 − k/E)^B, is below this).
UNTOUCHED_FLOOR = 1e-3


def decode_expert_batches(model: ModelSpec, ranks: int = 1) -> list[int]:
    """Batch sizes at which the decode roofline restates the experts read: powers of two from 1 until
    all but :data:`UNTOUCHED_FLOOR` of the experts are touched by the batch's rows on each of ``ranks``
    attention-DP ranks; ``[1]`` for a dense model."""
    if not model.is_moe:
        return [1]
    batches = [1]
    while (1 - model.experts_per_token / model.experts) ** (batches[-1] * ranks) > UNTOUCHED_FLOOR:
        batches.append(batches[-1] * 2)
    return batches


def tp_all_reduce_s(model: ModelSpec, gpu: GPU, tp: int) -> tuple[float, float]:
    """Tensor-parallel communication per iteration: (seconds, seconds per token row).

    Megatron-style TP all-reduces the ``N × hidden`` activations twice per layer (after the
    attention output projection and after the MLP down projection), inside one node:
    ``2L · (α_tp + 2(tp−1)/tp · N·hidden·b / β_tp)``.
    """
    if tp == 1:
        return 0.0, 0.0
    fit = network_for(gpu).fit_for("all_reduce", tp, intra_node=True)
    row_bytes = model.hidden * ACTIVATION_BYTES
    count = 2 * model.layers
    return count * fit.alpha_s, count * (fit.time_s(row_bytes, tp) - fit.alpha_s)


def pipeline_hops(tp: int, pp: int, gpus_per_node: int) -> tuple[int, int]:
    """(hops inside a node, hops across nodes) between pp stages of tp GPUs packed from a node start."""
    inside = across = 0
    for stage in range(pp - 1):
        last = (stage + 1) * tp - 1          # last GPU of this stage
        first = (stage + 1) * tp             # first GPU of the next
        if last // gpus_per_node == first // gpus_per_node:
            inside += 1
        else:
            across += 1
    return inside, across


def pp_send_recv_s(model: ModelSpec, gpu: GPU, tp: int, pp: int,
                   gpus_per_node: int) -> tuple[float, float]:
    """Pipeline communication per iteration: (seconds, seconds per token row).

    Each of the pp − 1 stage boundaries sends the ``N × hidden`` activations once:
    ``Σ_hops (α + N·hidden·b / β)``, with the in-node or across-node constants as the hop lies.
    """
    inside, across = pipeline_hops(tp, pp, gpus_per_node)
    row_bytes = model.hidden * ACTIVATION_BYTES
    fixed = per_row = 0.0
    for hops, intra in ((inside, True), (across, False)):
        if hops:
            fit = network_for(gpu).fit_for("send_recv", 2, intra_node=intra)
            fixed += hops * fit.alpha_s
            per_row += hops * row_bytes / fit.beta_bytes_per_s
    return fixed, per_row


@dataclass(frozen=True, kw_only=True)
class PhaseTerms:
    """One phase's roofline terms, per unit of its three features, before any efficiency.

    ``t(x) = max(compute_s·x / e_c, memory_s·x / e_b) + comm_s·x + layers · t_layer``.
    """

    compute_s: tuple[float, float, float]   #: at the GPU's peak FLOP/s (power cap applied)
    memory_s: tuple[float, float, float]    #: at the GPU's peak HBM bandwidth
    comm_s: tuple[float, float, float]      #: TP all-reduces and PP hops
    layers: int

    def pieces_s(self, efficiency: Efficiency) -> tuple[tuple[float, float, float], ...]:
        """The two linear pieces of ``max(compute, memory) + comm + overhead``."""
        fixed = np.array(self.comm_s) + np.array([self.layers * efficiency.layer_overhead_s, 0, 0])
        compute = np.array(self.compute_s) / efficiency.compute + fixed
        memory = np.array(self.memory_s) / efficiency.bandwidth + fixed
        return tuple(float(c) for c in compute), tuple(float(c) for c in memory)

    def time_s(self, features: np.ndarray, efficiency: Efficiency) -> np.ndarray:
        """Seconds for rows of features (n, 3)."""
        features = np.atleast_2d(np.asarray(features, dtype=float))
        compute, memory = self.pieces_s(efficiency)
        return np.maximum(features @ np.array(compute), features @ np.array(memory))


def phase_terms(model: ModelSpec, gpu: GPU, tp: int, pp: int, *, gpus_per_node: int = 8,
                own_weight_bytes: int | None = None) -> tuple[PhaseTerms, PhaseTerms]:
    """(prefill, decode) roofline terms of a (tp, pp) instance of ``model`` on ``gpu``.

    Prefill features (1, Σl, Σl²): compute from :func:`prefill_flops_coefficients`; memory the
    streamed weights (every expert: a prefill's rows touch them all) plus the K/V the prompts write.
    Decode features (1, B, Σctx): compute from :func:`decode_flops_coefficients`; memory the weights plus
    0x02A's K/V ledger, reading the ``Σ s_i = Σctx + B`` visible tokens and writing the B new ones,
    ``(Σctx + 2B)`` tokens of the full-attention layers, and each request's window of the sliding ones.
    Both carry TP all-reduces and PP hops over N rows (N = Σl or B). The decode terms are those of a
    batch that touches every expert; :func:`decode_segment_terms` gives the smaller batches theirs.
    ``own_weight_bytes``: the terms of a wide rank's own part, its routed experts timed apart
    (:mod:`pdplan.latency.wide_roofline`).
    """
    return _phase_terms(model, gpu, tp, pp, gpus_per_node=gpus_per_node, own_weight_bytes=own_weight_bytes)


def _phase_terms(model: ModelSpec, gpu: GPU, tp: int, pp: int, *, gpus_per_node: int = 8,
                 experts_read: tuple[float, float] | None = None,
                 own_weight_bytes: int | None = None) -> tuple[PhaseTerms, PhaseTerms]:
    """:func:`phase_terms`, the decode weights read when a batch of B touches ``a + b·B`` experts per MoE
    layer given ``experts_read = (a, b)`` (every expert when None). ``own_weight_bytes``: the terms of a
    wide rank's own part, whose routed experts are timed apart (:mod:`pdplan.latency.wide_roofline`):
    those weights streamed, and no routed expert's FLOPs."""
    slowdown, _ = compute_slowdown(gpu)
    # Matrix products run at the weight precision's tensor rate (fp8 weights: W8A8 GEMMs; MXFP4 experts
    # with bf16 activations), attention at bf16; a precision the GPU lacks is refused here, naming the
    # ones it has.
    gemm = tp * gpu.tensor_flops(COMPUTE_DTYPE.get(model.weight_dtype, model.weight_dtype)) / slowdown
    attn = tp * gpu.flops_per_s / slowdown
    weights = (streamed_weight_bytes_per_gpu(model, tp) if own_weight_bytes is None
               else own_weight_bytes) / gpu.hbm_bytes_per_s
    decode_weights = (weights, 0.0)
    if experts_read is not None:
        base = streamed_weight_bytes_per_gpu(model, tp, experts_read=0.0)
        one = streamed_weight_bytes_per_gpu(model, tp, experts_read=1.0) - base
        a, b = experts_read
        decode_weights = ((base + a * one) / gpu.hbm_bytes_per_s, b * one / gpu.hbm_bytes_per_s)
    kv_full, kv_sliding = (b / gpu.hbm_bytes_per_s for b in kv_bytes_per_token_per_rank(model, tp))
    ar_fixed, ar_row = tp_all_reduce_s(model, gpu, tp)
    pp_fixed, pp_row = pp_send_recv_s(model, gpu, tp, pp, gpus_per_node)
    comm = (ar_fixed + pp_fixed, ar_row + pp_row, 0.0)
    linear = linear_flops(model, 1)
    matrices = linear - (0.0 if own_weight_bytes is None else routed_expert_flops(model, 1))
    p1, p2 = prefill_flops_coefficients(model)
    d1, d2 = decode_flops_coefficients(model)
    window_reads = kv_sliding * (1 + model.sliding_window)  # each request's window read, its new row written
    prefill = PhaseTerms(compute_s=(0.0, matrices / gemm + (p1 - linear) / attn, p2 / attn),
                         memory_s=(weights, kv_full + kv_sliding, 0.0), comm_s=comm, layers=model.layers)
    decode = PhaseTerms(compute_s=(0.0, matrices / gemm + (d1 - linear) / attn, d2 / attn),
                        memory_s=(decode_weights[0], 2 * kv_full + window_reads + decode_weights[1], kv_full),
                        comm_s=comm, layers=model.layers)
    return prefill, decode


def decode_segment_terms(model: ModelSpec, gpu: GPU, tp: int, pp: int, *,
                         gpus_per_node: int = 8) -> list[tuple[int, PhaseTerms]]:
    """(first batch size, decode terms) per segment of the decode roofline.

    A dense model has one segment. A mixture-of-experts decode step of B requests reads, per MoE layer,
    the experts its B rows touch, :func:`pdplan.work.expected_experts_touched` (uniform routing): between
    consecutive :func:`decode_expert_batches` the count is the chord through its values there (concave in
    B, so the chord is within it), and from the last one every expert.
    """
    batches = decode_expert_batches(model)
    if len(batches) == 1:
        return [(1, phase_terms(model, gpu, tp, pp, gpus_per_node=gpus_per_node)[1])]
    touched = [expected_experts_touched(model.experts, model.experts_per_token, b) for b in batches]
    segments = []
    for i, (lo, hi) in enumerate(zip(batches, batches[1:])):
        slope = (touched[i + 1] - touched[i]) / (hi - lo)
        terms = _phase_terms(model, gpu, tp, pp, gpus_per_node=gpus_per_node,
                             experts_read=(touched[i] - slope * lo, slope))[1]
        segments.append((lo, terms))
    segments.append((batches[-1], phase_terms(model, gpu, tp, pp, gpus_per_node=gpus_per_node)[1]))
    return segments


def roofline_profile(model: ModelSpec, gpu: GPU, tp: int, pp: int, *,
                     engine: str | None = None,
                     compute_efficiency: float | None = None,
                     bandwidth_efficiency: float | None = None,
                     layer_overhead_s: float | None = None,
                     memory_utilization: float = 0.9,
                     max_prefill_batch_tokens: int = DEFAULT_MAX_PREFILL_BATCH_TOKENS,
                     gpus_per_node: int = 8) -> PhaseProfile:
    """A roofline :class:`PhaseProfile` for a (tp, pp) instance of ``model`` on ``gpu``.

    The efficiencies are ``engine``'s fit (:func:`efficiency_for`; the Splitwise 2023
    calibration without one), each overridable. Raises :class:`PdplanError` with
    :func:`~pdplan.modelspec.shape_rejection`'s sentence when the shape cannot hold the model, or
    when an argument is out of range.
    """
    fitted = efficiency_for(engine)
    efficiency = Efficiency(
        compute=fitted.compute if compute_efficiency is None else compute_efficiency,
        bandwidth=fitted.bandwidth if bandwidth_efficiency is None else bandwidth_efficiency,
        layer_overhead_s=fitted.layer_overhead_s if layer_overhead_s is None else layer_overhead_s)
    if not 0 < memory_utilization <= 1:
        raise PdplanError(f"memory utilization must be in (0, 1], got {memory_utilization!r}",
                          field="memory_utilization")
    if max_prefill_batch_tokens < 1:
        raise PdplanError(f"max prefill batch tokens must be >= 1, got {max_prefill_batch_tokens!r}",
                          field="max_prefill_batch_tokens")
    reason = shape_rejection(model, gpu, tp, pp, gpus_per_node=gpus_per_node,
                             memory_utilization=memory_utilization, kv_reserve_tokens=1)
    if reason is not None:
        raise PdplanError(f"{model.name} {reason}", field="tp")
    prefill, _ = phase_terms(model, gpu, tp, pp, gpus_per_node=gpus_per_node)
    decode = decode_segment_terms(model, gpu, tp, pp, gpus_per_node=gpus_per_node)
    capacity = kv_capacity_tokens(model, gpu, tp, pp, memory_utilization)
    profile = PhaseProfile(
        model=model.name, gpu=gpu.name, tp=tp, pp=pp,
        prefill=LatencyModel(segments=(Segment(min_batch=1, pieces_s=prefill.pieces_s(efficiency)),)),
        decode=LatencyModel(segments=tuple(Segment(min_batch=batch, pieces_s=terms.pieces_s(efficiency))
                                           for batch, terms in decode)),
        kv_capacity_tokens=capacity,
        max_prefill_batch_tokens=min(max_prefill_batch_tokens, capacity),
        provenance=Provenance(
            source="roofline",
            method=(f"roofline max(compute, memory) + comm + L*overhead; compute_efficiency="
                    f"{efficiency.compute:g}, bandwidth_efficiency={efficiency.bandwidth:g}, "
                    f"layer_overhead_us={efficiency.layer_overhead_s * 1e6:g}"),
            notes=_notes(model, gpu, tp, pp, efficiency, memory_utilization, gpus_per_node, engine),
        ),
    )
    return with_engine_host_time(profile, model, engine)


def with_engine_host_time(profile: PhaseProfile, model: ModelSpec, engine: str | None) -> PhaseProfile:
    """A roofline profile with the eager prefill's host time when its efficiencies are ``engine``'s: they
    are fitted to compositions, which time kernels, not their launches. The Splitwise 2023 calibration
    (no engine) was measured end to end, launches included."""
    return profile if engine is None else with_eager_prefill(profile, model)


def _efficiency_note(efficiency: Efficiency, engine: str | None) -> str:
    cal = CALIBRATION
    if efficiency == DEFAULT_EFFICIENCY:
        return (f"Efficiency defaults calibrated on {cal['shapes']} (Splitwise, {cal['file']}): MAPE "
                f"prefill {cal['mape_prefill']:.0%}, decode {cal['mape_decode']:.0%}; other models and GPUs are "
                "extrapolation.")
    if engine not in (None, SPLITWISE_2023) and efficiency == efficiency_for(engine):
        fits = engine_fits()
        fit = fits["engines"][engine]
        return (f"Efficiencies fitted for {engine} on step times composed from {fits['origin']} ({fits['shapes']}): "
                f"MAPE prefill {fit['mape_prefill']:.0%}, decode {fit['mape_decode']:.0%}.")
    return "Efficiencies set by the caller, not a fitted set."


def _notes(model: ModelSpec, gpu: GPU, tp: int, pp: int, efficiency: Efficiency,
           memory_utilization: float, gpus_per_node: int, engine: str | None = None) -> str:
    parts = [
        "Derived, not measured: transformer FLOPs (linear layers and causal attention pairs) and state bytes "
        "(weights + output head read once per iteration, K/V read and written) over the GPU catalog's peak "
        f"{model.weight_dtype} FLOP/s for matrix products, bf16 for attention, and its HBM bandwidth.",
        _efficiency_note(efficiency, engine),
        f"Decode context Σctx is the tokens the batch holds before the step (each request also "
        f"attends to its new token); KV capacity at {memory_utilization:.0%} of HBM.",
    ]
    if model.is_moe:
        parts.append(f"Mixture of experts: compute counts the active parameters ({model.experts_per_token} of "
                     f"{model.experts} routed experts plus shared ones); a decode step of B requests reads, per MoE "
                     f"layer, the experts uniform routing touches, E(1 - (1 - k/E)^B), a prefill reads them all; "
                     f"experts split over TP.")
    if model.attention == "mla":
        parts.append("Multi-head latent attention: every TP rank caches the whole latent; prefill attends over "
                     "qk_nope + qk_rope and v head dims, decode over the latent (W_UK, W_UV absorbed).")
    if model.sliding_layers:
        parts.append(f"{len(model.sliding_layers)} sliding-window layers: each request reads at most its "
                     f"{model.sliding_window}-token window there; KV capacity counts the full-attention layers "
                     "per token, windows reserved apart.")
    if tp > 1 or pp > 1:
        net = network_for(gpu)
        parts.append(f"Communication constants from {net.system} ({net.note}).")
    if tp > 1:
        parts.append(f"TP: 2 all-reduces per layer of N x hidden x {ACTIVATION_BYTES} B, in one node.")
    if pp > 1:
        inside, across = pipeline_hops(tp, pp, gpus_per_node)
        parts.append(f"PP: latency of one batch through all {pp} stages (sum of stage times) plus "
                     f"{inside} in-node and {across} cross-node hops, stages packed on "
                     f"{gpus_per_node}-GPU nodes; up to {pp} batches may be in flight.")
    slowdown, source = compute_slowdown(gpu)
    if slowdown != 1.0:
        parts.append(f"Power cap: compute throughput / {slowdown:g} ({source}).")
    return " ".join(parts)

