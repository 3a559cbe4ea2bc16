"""Wide expert parallelism without a table: one attention-DP rank's step from geometry and the datasheet.

AIConfigurator's wide-EP tables hold a few models at a few EPs (DeepSeek's 256 experts; not Kimi-K2's 384,
nor a config.json of the user's). A shape with attention data parallelism (DP) or expert parallelism
beyond TP that no table covers is timed here, as the TP-only roofline times a shape
(:mod:`pdplan.latency.roofline`: peak FLOP/s and HBM bandwidth, the engine's fitted efficiencies, a fixed
cost per layer) and split as the composition splits a wide rank's step (:mod:`pdplan.latency.compose.wide`):

    rank step = max(compute, memory) of the rank's own part + routed experts g(DP × the rank's tokens)
                + dispatch and combine + TP all-reduces + L · t_layer

* **its own part**: attention, dense MLPs, shared experts, router and vocabulary edges on the rank's TP
  GPUs (the weights :func:`pdplan.modelspec.rank_weight_bytes` places there, no routed expert), and its
  K/V ledger, as the TP-only roofline counts them;
* **routed experts** (the group part, over the T tokens of every rank): under uniform routing each of the
  TP × DP GPUs runs 1/(TP × DP) of the T · k expert rows and reads the experts those rows touch among its
  own, E(1 − (1 − k/E)^T) / (TP × DP) of them (:func:`pdplan.work.expected_experts_touched`): max(compute,
  memory) over the MoE layers, times the engine's fitted expert factor (below);
* **dispatch and combine** (each MoE layer): each GPU sends k copies of its rows (the rank's rows over its
  TP), FP8 out and BF16 back (:data:`pdplan.work.DISPATCH_BYTES`, DeepEP's DeepSeek setting), (EP − 1)/EP of
  them to other GPUs: those in its NVLink domain at the measured in-node send/recv rate, the rest at the
  cross-node one (:func:`pdplan.network.network_for`), the two paths at once, plus one latency each way.

Two terms the datasheet does not give are fitted per engine, as the roofline's efficiencies are, on the
step times composed from AIConfigurator's measured wide-EP operators of DeepSeek-V3 (every GPU and EP its
tables hold; ``benchmarks/roofline_engine_fit.py``, never the silicon validation's rows): the fixed cost of
dispatch and combine per MoE layer in the prefill and in the decode (DeepEP's normal and low-latency kernels),
and the expert factor, the routed experts' time over their balanced
roofline share (the load imbalance the tables measure, a power law, and the grouped GEMMs' lower efficiency
together). An engine without such tables keeps the measured send/recv latency and a factor of 1, and the
notes say so.

Every part is a linear form in the profile's features, so the profile is the step itself, a maximum of
linear forms per segment of the decode batch (the experts a decode touches follow chords between powers of
two, as in the TP-only roofline), and its group part is kept for the simulator's synchronised step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pdplan.errors import PdplanError
from pdplan.experts import edge_matrices_under_dp, expert_placement_rejection
from pdplan.hardware import GPU
from pdplan.latency.profile import (
    LatencyModel,
    PhaseProfile,
    Provenance,
    Segment,
    group_grid,
    profile_from_dict,
    profile_to_dict,
)
from pdplan.latency.roofline import (
    DEFAULT_MAX_PREFILL_BATCH_TOKENS,
    Efficiency,
    compute_slowdown,
    decode_expert_batches,
    efficiency_for,
    engine_fits,
    phase_terms,
    with_engine_host_time,
)
from pdplan.modelspec import COMPUTE_DTYPE, ModelSpec, kv_capacity_tokens, rank_weight_bytes, shape_rejection
from pdplan.network import network_for
from pdplan.work import COMBINE_BYTES, DISPATCH_BYTES, expected_experts_touched, routed_expert_flops


@dataclass(frozen=True)
class WideFit:
    """What a wide rank's step carries beyond the roofline's terms, fitted per engine (module docstring)."""

    a2a_prefill_s: float  #: fixed seconds of one MoE layer's dispatch and combine in a prefill (DeepEP normal)
    a2a_decode_s: float   #: the same in a decode step (DeepEP low latency)
    expert_factor: float  #: the routed experts' time over their balanced roofline share, >= 1


def wide_fit_for(engine: str | None) -> WideFit | None:
    """``engine``'s fitted wide-EP terms, None when none were fitted (no engine, or no wide-EP tables)."""
    fit = engine_fits()["engines"].get(engine, {}) if engine is not None else {}
    if "wide_expert_factor" not in fit:
        return None
    return WideFit(a2a_prefill_s=fit["wide_a2a_prefill_us"] * 1e-6, a2a_decode_s=fit["wide_a2a_decode_us"] * 1e-6,
                   expert_factor=fit["wide_expert_factor"])


@dataclass
class WideRoofline:
    """The roofline step of one attention-DP rank of a TP × DP instance whose routed experts are spread
    over EP GPUs; every rank carries the same batch, as a composed wide profile assumes. Each part is a
    linear form in the profile's features (prefill (1, Σl, Σl²), decode (1, B, Σctx)), already divided by
    its efficiency, so the profile is exact: no fit."""

    model: ModelSpec
    gpu: GPU
    tp: int
    dp: int
    ep: int
    efficiency: Efficiency
    gpus_per_node: int
    fit: WideFit | None = None    #: the engine's wide-EP terms; None: send/recv latency, factor 1

    def __post_init__(self):
        m, gpu, e = self.model, self.gpu, self.efficiency
        split, whole = edge_matrices_under_dp(m, 0, 1)
        own = rank_weight_bytes(m, self.tp, range(m.layers), split, ep=self.ep, dp=self.dp, experts_read=0.0,
                                whole_edge_matrices=whole)
        prefill, decode = phase_terms(m, gpu, self.tp, 1, gpus_per_node=self.gpus_per_node, own_weight_bytes=own)
        # the rank's own part per phase: the linear pieces whose maximum it is (compute, memory), fixed costs in
        self._own = {True: np.array(prefill.pieces_s(e)), False: np.array(decode.pieces_s(e))}
        # one GPU's balanced share of the routed experts: per group token, per expert touched
        slowdown, _ = compute_slowdown(gpu)
        gemm = gpu.tensor_flops(COMPUTE_DTYPE.get(m.weight_dtype, m.weight_dtype)) / slowdown
        self._factor = 1.0 if self.fit is None else self.fit.expert_factor
        self._routed_per_token = routed_expert_flops(m, 1) / (self.tp * self.dp * gemm * e.compute)
        self._per_expert = m.moe_layers * m.expert_params * m.weight_bytes_per_param / (
            self.tp * self.dp * gpu.hbm_bytes_per_s * e.bandwidth)
        net = network_for(gpu)
        inside = net.fit_for("send_recv", 2, intra_node=True)
        across = net.fit_for("send_recv", 2, intra_node=False)
        near = min(self.ep, self.gpus_per_node)
        per_byte = max((near - 1) / self.ep / inside.beta_bytes_per_s,
                       (self.ep - near) / self.ep / across.beta_bytes_per_s)
        sent = m.experts_per_token * m.hidden * (DISPATCH_BYTES + COMBINE_BYTES) / self.tp   # per rank row, per GPU
        self._wire_row = m.moe_layers * sent * per_byte if self.ep > 1 else 0.0
        measured = 2 * (inside.alpha_s if self.ep <= self.gpus_per_node else across.alpha_s)
        per_layer = ((0.0, 0.0) if self.ep == 1 else (measured, measured) if self.fit is None
                     else (self.fit.a2a_prefill_s, self.fit.a2a_decode_s))
        self._a2a_layers = {True: m.moe_layers * per_layer[0], False: m.moe_layers * per_layer[1]}

    # --- the parts of a step --------------------------------------------------------------------------

    def balanced_group_s(self, tokens: float, prefill: bool) -> float:
        """Routed experts over ``tokens`` of the whole MoE group (every rank's), all MoE layers, one GPU's
        balanced share: max(compute, memory), a prefill reading every expert (as the TP-only roofline's),
        a decode step those its tokens touch."""
        touched = self.model.experts if prefill else expected_experts_touched(
            self.model.experts, self.model.experts_per_token, tokens)
        return max(tokens * self._routed_per_token, touched * self._per_expert)

    def group_s(self, tokens: float, prefill: bool) -> float:
        """The routed experts' time over ``tokens`` of the group: the balanced share times the expert factor."""
        return self._factor * self.balanced_group_s(tokens, prefill)

    def wire_s(self, rows: float) -> float:
        """Dispatch and combine bytes of the rank's ``rows`` in every MoE layer: each GPU sends its share's k
        copies; the fixed cost per layer apart (:meth:`all_to_all_s`)."""
        return rows * self._wire_row

    def all_to_all_s(self, rows: float, prefill: bool) -> float:
        """Dispatch and combine of the rank's ``rows`` in every MoE layer, the fixed cost per layer included."""
        return self.wire_s(rows) + self._a2a_layers[prefill]

    def _parts(self, x: np.ndarray, prefill: bool) -> tuple[float, float, float]:
        own = float((self._own[prefill] @ x).max())
        return own, self.balanced_group_s(self.dp * x[1], prefill), self.wire_s(x[1])

    def prefill_parts(self, batch: int, length: int) -> tuple[float, float, float]:
        """(own part, balanced routed experts, all-to-all bytes) of prefilling ``batch`` prompts of ``length``."""
        return self._parts(np.array([1.0, batch * length, batch * length * length]), prefill=True)

    def decode_parts(self, batch: int, context: int) -> tuple[float, float, float]:
        """(own part, balanced routed experts, all-to-all bytes) of a decode step of ``batch`` requests
        holding ``context`` tokens each."""
        return self._parts(np.array([1.0, batch, batch * context]), prefill=False)

    def _step_s(self, parts: tuple[float, float, float], prefill: bool) -> float:
        own, group, wire = parts
        return own + self._factor * group + wire + self._a2a_layers[prefill]

    def prefill_s(self, batch: int, length: int) -> float:
        """Seconds to prefill ``batch`` prompts of ``length`` tokens on the rank (every rank likewise)."""
        return self._step_s(self.prefill_parts(batch, length), prefill=True)

    def decode_s(self, batch: int, context: int) -> float:
        """Seconds for one decode step of ``batch`` requests holding ``context`` tokens each on the rank."""
        return self._step_s(self.decode_parts(batch, context), prefill=False)

    # --- the profile's latency models ------------------------------------------------------------------

    def _pieces(self, prefill: bool, touched: tuple[float, float]) -> tuple[tuple[float, float, float], ...]:
        """The linear forms whose maximum is the step, when the group touches ``a + b·B`` experts per MoE layer
        (``touched``): max(own compute, own memory) + factor · max(routed compute, routed memory) is the largest
        of the four sums."""
        routed_compute = self._factor * np.array([0.0, self._routed_per_token * self.dp, 0.0])
        a, b = touched
        routed_memory = self._factor * np.array([a * self._per_expert, b * self._per_expert, 0.0])
        a2a = np.array([self._a2a_layers[prefill], self._wire_row, 0.0])
        return tuple(tuple(float(v) for v in own + routed + a2a)
                     for own in self._own[prefill] for routed in (routed_compute, routed_memory))

    def prefill_model(self) -> LatencyModel:
        """The prefill step as a latency model, exact: a prefill reads every expert."""
        return LatencyModel(segments=(Segment(min_batch=1, pieces_s=self._pieces(True, (self.model.experts, 0.0))),))

    def decode_model(self) -> LatencyModel:
        """The decode step as a latency model: between consecutive batches of :func:`decode_expert_batches` (of
        the group's DP × B tokens) the experts touched follow the chord of their count, from the last one all."""
        m = self.model
        batches = decode_expert_batches(m, self.dp)
        touched = [expected_experts_touched(m.experts, m.experts_per_token, self.dp * b) for b in batches]
        segments = []
        for i, (lo, hi) in enumerate(zip(batches, batches[1:])):
            slope = (touched[i + 1] - touched[i]) / (hi - lo)
            segments.append(Segment(min_batch=lo, pieces_s=self._pieces(False, (touched[i] - slope * lo, slope))))
        segments.append(Segment(min_batch=batches[-1], pieces_s=self._pieces(False, (m.experts, 0.0))))
        return LatencyModel(segments=tuple(segments))

    def note(self) -> str:
        net = network_for(self.gpu)
        return (f"Wide expert parallelism without a table: one of {self.dp} attention data-parallel ranks at its own "
                f"batch, every rank carrying the same; its attention, dense and shared layers a TP {self.tp} roofline; "
                f"routed experts whole over EP {self.ep}, each GPU running 1/{self.tp * self.dp} of the group's "
                f"tokens' k expert rows and reading the experts they touch among its own (uniform routing; a "
                f"prefill reads them all); dispatch (FP8) and combine (BF16) of k copies per row in every MoE layer, "
                f"{min(self.ep, self.gpus_per_node) - 1} of the {self.ep - 1} other GPUs over NVLink and the rest "
                f"across nodes, at {net.system}'s measured send/recv rates ({net.note}); {self._fit_note()}")

    def _fit_note(self) -> str:
        if self.fit is None:
            return ("no wide-EP fit for this engine: the send/recv latency as each layer's fixed all-to-all cost, "
                    "the routed experts at their balanced share")
        fit = self.fit
        return (f"fitted on composed wide-EP steps of DeepSeek-V3: dispatch and combine {fit.a2a_prefill_s * 1e6:g} us "
                f"(prefill) and {fit.a2a_decode_s * 1e6:g} us (decode) per MoE layer, the routed experts at "
                f"{fit.expert_factor:g}x their balanced share")


def wide_roofline_profile(model: ModelSpec, gpu: GPU, tp: int, pp: int, *, dp: int, ep: int,
                          engine: str | None = None, gpus_per_node: int | None = None,
                          memory_utilization: float = 0.9,
                          max_prefill_batch_tokens: int = DEFAULT_MAX_PREFILL_BATCH_TOKENS,
                          redundant_experts: int = 0) -> PhaseProfile:
    """One DP rank's roofline profile of a TP × DP (× EP) instance; the efficiencies are ``engine``'s fit
    (:func:`pdplan.latency.roofline.efficiency_for`), the wide-EP terms too (:func:`wide_fit_for`). A shape
    that cannot hold or place the model (with ``redundant_experts`` more expert slots in its memory), or PP above 1,
    is refused with the reason. The routed experts keep the fitted imbalance: the roofline knows no EPLB."""
    gpus_per_node = gpus_per_node or gpu.nvlink_domain
    if pp != 1:
        raise PdplanError(f"{model.name}: the wide expert-parallel roofline times one pipeline stage (PP 1), "
                          f"got PP {pp}", field="pp")
    reason = shape_rejection(model, gpu, tp, pp, gpus_per_node=gpus_per_node, memory_utilization=memory_utilization,
                             kv_reserve_tokens=1, ep=ep, dp=dp, redundant_experts=redundant_experts)
    if reason is not None:
        placement = expert_placement_rejection(model, tp, ep, redundant_experts, dp)
        raise PdplanError(f"{model.name} {reason}", field=placement[0] if placement else "tp")
    efficiency = efficiency_for(engine)
    step = WideRoofline(model=model, gpu=gpu, tp=tp, dp=dp, ep=ep, efficiency=efficiency,
                        gpus_per_node=gpus_per_node, fit=wide_fit_for(engine))
    capacity = kv_capacity_tokens(model, gpu, tp, pp, memory_utilization, ep=ep, dp=dp,
                                  redundant_experts=redundant_experts)
    cap = min(max_prefill_batch_tokens, capacity)
    label = "Splitwise 2023 calibration" if engine is None else f"efficiencies fitted for {engine}"
    groups = {f"group_{phase}_points": tuple((t, step.group_s(max(t, dp), phase == "prefill"))
                                             for t in group_grid(dp * cap))
              for phase in ("prefill", "decode")}
    profile = PhaseProfile(
        model=model.name, gpu=gpu.name, tp=tp, pp=pp, dp=dp, ep=ep, redundant_experts=redundant_experts,
        prefill=step.prefill_model(), decode=step.decode_model(),
        kv_capacity_tokens=capacity, max_prefill_batch_tokens=cap,
        provenance=Provenance(
            source="roofline",
            method=(f"wide-EP roofline ({label}: compute {efficiency.compute:g}, bandwidth {efficiency.bandwidth:g}, "
                    f"{efficiency.layer_overhead_s * 1e6:g} us per layer)"),
            notes=step.note()),
        **groups)
    profile = with_engine_host_time(profile, model, engine)
    return profile_from_dict(profile_to_dict(profile), f"roofline {profile.shape}")
