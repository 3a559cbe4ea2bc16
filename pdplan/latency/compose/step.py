"""One engine step of a dense decoder, summed from measured operators.

A step is the operator list AIConfigurator's LLaMA model runs, per layer: add+norm, the QKV
GEMM, attention, the output projection, add+norm, the gate/up GEMM, the activation, the down
GEMM and two TP all-reduces; once per step the embedding (and its all-reduce) and the logits
GEMM; and pp − 1 pipeline hops. GEMMs, attention and all-reduces come from the measured tables
(:mod:`pdplan.latency.compose.tables`); the memory-bound element-wise kernels and the pipeline hops use
AIConfigurator's analytic formulas with its system constants (bytes / (bandwidth × its
empirical factor) + its constant latency). A PP instance is timed as one batch through every
stage, like the roofline: each layer counted once, plus the hops.

Prefill runs ``batch`` prompts of ``length`` tokens (m = batch × length rows in every GEMM; only
the last row of each prompt reaches the logits, as vLLM, SGLang and TensorRT-LLM do); decode runs
``batch`` requests holding ``context`` tokens each, one row per request.

A model with routed experts, latent attention or sliding-window layers runs the operator list of
AIConfigurator's MoE and DeepSeek models instead (:meth:`Step._mixed_layers`, tables read by
:mod:`pdplan.latency.compose.moe`): per layer add+norm, the attention block (QKV GEMM, attention —
the window's kernel on a sliding-window layer — and the output projection; or the latent-attention
module), add+norm, then the MLP: a dense one on the leading dense layers; on an MoE layer the bf16
router GEMM, the shared experts' gate/up GEMM, activation and down GEMM, and the routed experts
(the MoE table); and the two TP all-reduces. In a decode step the shared experts run beside the
routed ones (AIConfigurator's ``generation_moe_overlap``: the longer of the two counts).
AIConfigurator counts DeepSeek's three dense layers as MoE layers and, on vLLM, a second pair of
all-reduces beside its MoE dispatch pair; here the dense layers run a dense MLP and every layer two
all-reduces, as vLLM's DeepSeek layer does (o_proj's RowParallelLinear and the FusedMoE reduce once
each, the shared experts with ``reduce_results=False``: vllm/model_executor/models/deepseek_v2.py
at 002d607).

One attention data-parallel rank's step under wide expert parallelism (``Step.wide``: DP > 1, an EP
other than TP, or redundant experts) times the same layers with the MoE layer of
:mod:`pdplan.latency.compose.wide` (router, whole shared experts, dispatch, routed experts at DP × the
rank's tokens, combine), dense MLPs whole on every GPU, and on SGLang the wide-EP latent-attention rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.compose import gathered, moe, tables, wide
from pdplan.latency.compose.tables import Extrapolated
from pdplan.latency.roofline import pipeline_hops
from pdplan.modelspec import ACTIVATION_BYTES, ModelSpec, kv_heads_per_gpu
from pdplan.shape import InstanceShape
from pdplan.vocabulary import AllToAll, MoeActivations


def reads_moe_table(tp: int, dp: int, ep: int, redundant_experts: int = 0,
                    all_to_all: AllToAll = AllToAll.DISPATCH) -> bool:
    """Whether a mixture-of-experts step of these coordinates times its routed experts from the MoE table, whose
    kernels can be chosen (``Step.moe_kernel``): experts split over the GPUs (EP 1, with attention DP over TP × DP:
    :mod:`pdplan.latency.compose.gathered`), whole over TP without DP, or whole over TP × DP reached by a gather.
    Whole experts under attention DP reached by a dispatch, another EP or redundant experts read the wide-EP
    tables (:mod:`pdplan.latency.compose.wide`)."""
    gathered = all_to_all == AllToAll.GATHER and ep == tp * dp
    return not redundant_experts and (ep == 1 or (dp == 1 and ep == tp) or gathered)


@dataclass
class Step:
    """The operator tables of one (model, shape, engine, version) and the step times they give."""

    model: ModelSpec
    shape: InstanceShape        #: on the physical GPU the tables measured
    engine: str
    versions: dict[str, str]
    gpus_per_node: int = 8
    log: Extrapolated = field(default_factory=Extrapolated)
    #: The engine version asked for (None: newest); the MoE and MLA tables pick theirs at or below it.
    engine_version: str | None = None
    #: Expert load measured by the MoE table: balanced or power-law; None: AIConfigurator's default
    #: for the model's family (:func:`pdplan.latency.compose.moe.default_distribution`).
    distribution: str | None = None
    #: Routed experts split whole over the TP ranks (moe_ep_size = TP) instead of each expert's width.
    expert_parallel: bool = False
    #: Redundant expert copies EPLB rebalances the load over (wide expert parallelism only).
    redundant_experts: int = 0
    #: The precision MXFP4 experts take their activations in; None: the engine's default on the GPU
    #: (:func:`pdplan.latency.compose.moe.mxfp4_activations`; what may be asked: ``moe.asked_activations``).
    moe_activations: MoeActivations | None = None
    #: The one MoE kernel to time routed experts with (the MoE table's ``kernel_source``, the engine's backend);
    #: None: the fastest measured at each point (:func:`pdplan.latency.compose.moe.moe_grid`).
    moe_kernel: str | None = None
    #: How attention DP ranks with whole experts (EP = TP × DP) reach them: dispatched (the wide-EP tables) or
    #: gathered (the MoE table, :mod:`pdplan.latency.compose.gathered`).
    all_to_all: AllToAll = AllToAll.DISPATCH

    def __post_init__(self):
        system = tables.system_for(self.shape.gpu)
        self.system, self.spec = system, tables.system_spec(system)
        self.mixed = self.model.is_moe or self.model.attention == "mla" or bool(self.model.sliding_layers)
        moe.asked_activations(self.model, get_gpu(self.shape.gpu), self.moe_activations)
        if self.mixed:
            self._mixed_tables(system)
        else:
            self.gemm = tables.gemm_grid(system, self.engine, self.versions["gemm"], self.model.weight_dtype)
            self.context = tables.attention_lines(system, self.engine, self.versions["context_attention"],
                                                  "context", self.model.head_dim, self.model.kv_dtype)
            self.generation = tables.attention_lines(system, self.engine, self.versions["generation_attention"],
                                                     "generation", self.model.head_dim, self.model.kv_dtype)
        self.bf16_gemm = tables.gemm_grid(system, self.engine, self.versions["gemm"], "bf16")
        self.all_reduce = None
        if self.shape.tp > 1:
            self.all_reduce = self._tp_all_reduce(system)
        m = self.model
        self.q_heads = m.q_heads // self.shape.tp
        self.kv_heads = kv_heads_per_gpu(m, self.shape.tp)
        if m.q_heads % self.shape.tp:
            raise PdplanError(f"TP {self.shape.tp} does not divide {m.q_heads} query heads", field="tp")

    # --- operators --------------------------------------------------------------------------------
    def _gemm(self, rows: float, n: int, k: int, grid=None) -> float:
        return (grid or self.gemm)((rows, n, k), self.log)

    def _memory(self, nbytes: float) -> float:
        """AIConfigurator's memory-bound kernel time: bytes / (bandwidth × factor) + constant."""
        return nbytes / (self.spec.mem_bw * self.spec.mem_scale) + self.spec.mem_latency_s

    def _tp_all_reduce(self, system: str) -> tables.Collective:
        """The TP group's all-reduce (:func:`pdplan.latency.compose.tables.all_reduce`), its table named in the
        versions."""
        version = self.versions.get("all_reduce")
        found = tables.all_reduce(system, self.engine, version, self.shape.tp, get_gpu(self.shape.gpu).nvlink_domain)
        if found is None:
            if version is None:
                raise PdplanError(f"no {self.engine} all-reduce measurements on {self.shape.gpu} "
                                  f"for TP {self.shape.tp}", field="tp")
            sizes = tables.all_reduce_sizes(system, self.engine, version)
            raise PdplanError(f"no {self.engine} all-reduce measured over {self.shape.tp} GPUs on {self.shape.gpu} "
                              f"(measured: {', '.join(map(str, sizes))})", field="tp")
        self.versions = {**self.versions, found.table: found.version}
        return found

    def _all_reduce(self, rows: float) -> float:
        if self.all_reduce is None:
            return 0.0
        return self.all_reduce(rows * self.model.hidden, self.log)

    def _hops(self, rows: float) -> float:
        inside, across = pipeline_hops(self.shape.tp, self.shape.pp, self.gpus_per_node)
        nbytes = rows * self.model.hidden * ACTIVATION_BYTES
        return (inside * (nbytes / self.spec.intra_node_bw + self.spec.p2p_latency_s)
                + across * (nbytes / self.spec.inter_node_bw + self.spec.p2p_latency_s))

    def _layers(self, rows: float, attention: float) -> float:
        """Every layer's operators for ``rows`` token rows, attention given."""
        m, tp = self.model, self.shape.tp
        h, d = m.hidden, m.head_dim
        ffn = m.ffn // tp
        up = 2 * ffn if m.mlp_matrices == 3 else ffn
        per_layer = (2 * self._memory(rows * 4 * h * ACTIVATION_BYTES)                       # add + norm, twice
                     + self._gemm(rows, (self.q_heads + 2 * self.kv_heads) * d, h)           # QKV
                     + attention
                     + self._gemm(rows, h, self.q_heads * d)                                 # output projection
                     + self._gemm(rows, up, h)                                               # gate/up
                     + self._memory(rows * (up + ffn) * ACTIVATION_BYTES)                    # activation
                     + self._gemm(rows, h, ffn)                                              # down
                     + 2 * self._all_reduce(rows))
        return m.layers * per_layer

    def _edges(self, rows: float, logit_rows: float) -> float:
        """Embedding gather and its all-reduce, the logits GEMM (bf16), the pipeline hops."""
        m = self.model
        return (self._memory(rows * m.hidden * ACTIVATION_BYTES) + self._all_reduce(rows)
                + self._gemm(logit_rows, -(-m.vocab // self.shape.tp), m.hidden, self.bf16_gemm)
                + self._hops(rows))

    # --- phases -----------------------------------------------------------------------------------
    def prefill_s(self, batch: int, length: int) -> float:
        """Seconds to prefill ``batch`` prompts of ``length`` tokens in one step."""
        rows = batch * length
        if self.mixed:
            return self._mixed_layers(rows, batch, length, prefill=True) + self._edges(rows, batch)
        attention = tables.attention_s(self.context, self.q_heads, self.kv_heads, batch, length, self.log)
        return self._layers(rows, attention) + self._edges(rows, batch)

    def decode_s(self, batch: int, context: int) -> float:
        """Seconds for one decode step of ``batch`` requests holding ``context`` tokens each."""
        if self.mixed:
            return self._mixed_layers(batch, batch, context, prefill=False) + self._edges(batch, batch)
        attention = tables.attention_s(self.generation, self.q_heads, self.kv_heads, batch, context, self.log)
        return self._layers(batch, attention) + self._edges(batch, batch)

    @property
    def wide(self) -> bool:
        """Whether the step is one attention data-parallel rank's, or its experts spread over an EP other than
        TP: the MoE layers then read the wide-EP tables (:mod:`pdplan.latency.compose.wide`), or at EP 1 the MoE
        table over the gathered ranks' tokens (:mod:`pdplan.latency.compose.gathered`)."""
        return self.model.is_moe and (self.shape.dp > 1 or self.shape.ep not in (1, self.shape.tp)
                                      or self.redundant_experts > 0)

    def notes(self) -> list[str]:
        """What the provenance states beyond the tables: the expert load and split of an MoE step."""
        if not self.model.is_moe:
            return []
        if self.wide:
            return [self.wide_experts.note()]
        tp = self.shape.tp
        split = ("every expert on the one GPU" if tp == 1
                 else f"experts split whole over {tp} GPUs (expert parallelism)" if self.expert_parallel
                 else f"every expert split {tp} ways (tensor parallelism)")
        return [f"routed experts from AIConfigurator's MoE table ({self.moe_config.dtype}, "
                f"{moe.kernel_label(self.moe_kernels)}) at a "
                f"{moe.load_label(self.moe_config.distribution)} expert load, {split}"]

    # --- mixture of experts, latent attention, sliding windows ---------------------------------------
    def _mixed_tables(self, system: str) -> None:
        m, engine, tp = self.model, self.engine, self.shape.tp
        versions = dict(self.versions)
        self.gemm = tables.gemm_grid_of(system, engine, versions["gemm"], moe.gemm_dtype(m))
        if self.gemm is None:
            raise PdplanError(f"no {moe.gemm_dtype(m)} GEMM measurements for {engine} {versions['gemm']} on "
                              f"{system}", field="dtype")
        self.latent = self.wide_mla = None
        if m.attention == "mla":
            if self.wide:
                self.wide_mla = self._wide_latent(system, versions)
            if self.wide_mla is None:
                self.latent = moe.LatentAttention(system, engine, self.engine_version, m, tp)
                versions.update(self.latent.versions)
        else:
            windows = sorted({m.sliding_window} if m.sliding_layers else set()) + [0]
            self.context = {w: tables.attention_lines(system, engine, versions["context_attention"], "context",
                                                      m.head_dim, m.kv_dtype, w) for w in windows}
            self.generation = {w: tables.attention_lines(system, engine, versions["generation_attention"],
                                                         "generation", m.head_dim, m.kv_dtype, w) for w in windows}
        if m.is_moe:
            if m.mlp_matrices != 3:
                raise PdplanError(f"{m.base_name}: the MoE tables measure gated (SwiGLU) experts only", field="model")
            distribution = self.distribution or moe.default_distribution(m)
            if distribution not in moe.DISTRIBUTIONS:
                raise PdplanError(f"unknown expert load {distribution!r} (measured: {', '.join(moe.DISTRIBUTIONS)})",
                                  field="distribution")
            self.moe_config = moe.MoeConfig(hidden=m.hidden, inter=m.expert_ffn, topk=m.experts_per_token,
                                            experts=m.experts, distribution=distribution,
                                            dtype=moe.moe_dtype(m, engine, self.spec.sm_version, self.moe_activations),
                                            kernel=self.moe_kernel)
            if self.wide:
                self._wide_tables(system, versions)
            else:
                self.moe_grid, versions["moe"], self.moe_kernels = moe.moe_grid(
                    system, engine, self.engine_version, self.moe_config, self.expert_parallel)
                self.moe_width = (m.experts / tp) if self.expert_parallel else (m.expert_ffn / tp)
        self.versions = versions

    def _wide_tables(self, system: str, versions: dict[str, str]) -> None:
        """The wide-EP tables of one DP rank's MoE layers, and SGLang's wide-EP latent attention."""
        m, shape = self.model, self.shape
        if reads_moe_table(shape.tp, shape.dp, shape.ep, self.redundant_experts, self.all_to_all):   # gathered
            self.wide_experts = gathered.GatheredExperts(system, self.engine, self.engine_version, m, self.moe_config,
                                                         shape.tp, shape.dp, versions.get("all_reduce"), shape.ep,
                                                         get_gpu(shape.gpu).nvlink_domain)
        else:
            if self.moe_kernel is not None:
                raise PdplanError(f"MoE kernel {self.moe_kernel}: a kernel is chosen in the MoE table, which whole "
                                  "experts under attention data parallelism do not read", field="moe_kernel")
            self.wide_experts = wide.WideExperts(system, self.engine, self.engine_version, m, self.moe_config,
                                                 shape.tp, shape.dp, shape.ep, self.gpus_per_node,
                                                 self.redundant_experts, get_gpu(shape.gpu).nvlink_fabric)
        versions.update(self.wide_experts.versions)

    def _wide_latent(self, system: str, versions: dict[str, str]) -> dict | None:
        """SGLang's wide-EP latent-attention grids per phase (DeepSeek-V3's geometry), None where unmeasured."""
        m = self.model
        if moe.module_fits(m) is not None:
            return None
        found = {phase: wide.wide_mla_grid(system, self.engine, self.engine_version, phase, moe.gemm_dtype(m),
                                           m.kv_dtype) for phase in wide.PHASES}
        if not all(found.values()):
            return None
        versions.update({f"wideep_{phase}_mla": version for phase, (_, version) in found.items()})
        return {phase: grid for phase, (grid, _) in found.items()}

    def _attention(self, rows: float, batch: float, length: float, prefill: bool) -> float:
        """Every layer's attention block, summed over the layers."""
        m = self.model
        if self.wide_mla is not None:   # the fused q_a/kv_a GEMM, then the measured rest of the block
            down = (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim
            grid = self.wide_mla["context" if prefill else "generation"]
            heads = m.q_heads / self.shape.tp
            return m.layers * (self._gemm(rows, down, m.hidden) + grid((batch, length, heads), self.log))
        if self.latent is not None:
            one = (self.latent.prefill_s if prefill else self.latent.decode_s)(batch, length, self._gemm, self.log)
            return m.layers * one
        d, lines = m.head_dim, self.context if prefill else self.generation
        projections = (self._gemm(rows, (self.q_heads + 2 * self.kv_heads) * d, m.hidden)     # QKV
                       + self._gemm(rows, m.hidden, self.q_heads * d))                        # output projection
        sliding = len(m.sliding_layers)
        total = m.layers * projections
        for window, count in ((0, m.layers - sliding), (m.sliding_window, sliding)):
            if count:
                total += count * tables.attention_s(lines[window], self.q_heads, self.kv_heads, batch, length,
                                                    self.log)
        return total

    def _dense_mlp(self, rows: float, width: int, split: int | None = None) -> float:
        """Gate/up GEMM, activation and down GEMM of a gated MLP ``width`` wide, split over TP (or ``split``)."""
        per_gpu = width // (self.shape.tp if split is None else split)
        up = 2 * per_gpu if self.model.mlp_matrices == 3 else per_gpu
        return (self._gemm(rows, up, self.model.hidden) + self._memory(rows * (up + per_gpu) * ACTIVATION_BYTES)
                + self._gemm(rows, self.model.hidden, per_gpu))

    def _moe_mlp(self, rows: float, prefill: bool) -> float:
        """Router, shared experts and routed experts of one MoE layer."""
        m = self.model
        if self.wide:
            return self._wide_moe_mlp(rows, prefill)
        router = self._gemm(rows, m.experts, m.hidden, self.bf16_gemm)
        routed = self.moe_grid((rows, self.moe_width), self.log)
        shared = self._dense_mlp(rows, m.shared_experts * m.expert_ffn) if m.shared_experts else 0.0
        return router + routed + shared if prefill else max(router + routed, shared)

    def _wide_moe_mlp(self, rows: float, prefill: bool) -> float:
        """One DP rank's MoE layer: router, whole shared experts, dispatch, routed experts, combine
        (:class:`pdplan.latency.compose.wide.WideExperts`)."""
        m, experts = self.model, self.wide_experts
        ffn_rows = experts.ffn_rows(rows, prefill)
        router = self._gemm(ffn_rows, m.experts, m.hidden, self.bf16_gemm)
        shared = 0.0
        if m.shared_experts:
            shared = experts.shared_s(ffn_rows, prefill, self.log)
            if shared is None:
                shared = self._dense_mlp(ffn_rows, m.shared_experts * m.expert_ffn, split=1)
        routed = router + experts.routed_s(rows, prefill, self.log)
        return max(routed, shared) if self.overlaps_shared(prefill) else routed + shared

    def overlaps_shared(self, prefill: bool) -> bool:
        """Whether an attention-DP rank runs its shared experts beside the routed path: TensorRT-LLM's decode
        does, on an auxiliary stream (AIConfigurator's ``OverlapOp``)."""
        return self.engine == "trtllm" and not prefill

    def _mixed_layers(self, rows: float, batch: float, length: float, prefill: bool) -> float:
        m = self.model
        moe_layers = m.layers - m.dense_layers if m.is_moe else 0
        if moe_layers == m.layers:
            dense = 0.0
        elif self.wide:   # dense MLPs whole on every GPU (pdplan.experts.DP_REPLICATES_DENSE)
            dense = self._dense_mlp(self.wide_experts.ffn_rows(rows, prefill), m.ffn, split=1)
        else:
            dense = self._dense_mlp(rows, m.ffn) if moe_layers < m.layers else 0.0
        mlp = (m.layers - moe_layers) * dense if moe_layers < m.layers else 0.0
        if moe_layers:
            mlp += moe_layers * self._moe_mlp(rows, prefill)
        norms = m.layers * 2 * self._memory(rows * 4 * m.hidden * ACTIVATION_BYTES)
        return norms + self._attention(rows, batch, length, prefill) + mlp + m.layers * 2 * self._all_reduce(rows)
