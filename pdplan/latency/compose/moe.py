"""Mixture-of-experts and multi-head latent attention operators, from AIConfigurator's tables.

The composed step of a model with routed experts, latent attention (MLA) or sliding-window layers
(:class:`~pdplan.latency.compose.step.Step`) reads, beside the dense tables of
:mod:`pdplan.latency.compose.tables`:

* ``moe/<engine>/<version>/moe_perf.parquet`` — one MoE layer's routed experts (routing, both
  expert GEMMs, activation; the fastest kernel per point), measured per model configuration
  (hidden size, full expert width ``inter_size``, top-k, experts), per split (``moe_tp_size`` ×
  ``moe_ep_size``), weight format (``moe_dtype``) and expert-load distribution, over the step's
  token count. AIConfigurator queries it with the full expert width and the split
  (``MoE(..., hidden_size, moe_inter_size, topk, num_experts, moe_tp_size, moe_ep_size, quant,
  distribution)`` in ``sdk/models/moe.py`` and ``sdk/models/deepseek.py`` of aiconfigurator-core
  0.12.0; the Rust ``MoeOp.query`` passes ``num_tokens``, the tokens of the step, unchanged when
  attention is not data-parallel).
* ``mla/<engine>/<version>/mla_{context,generation}_module_perf.parquet`` — vLLM's and TensorRT-LLM's
  whole latent-attention block of DeepSeek-V3 (``DeepseekV2MLAAttention.forward``: the fused q_a/kv_a
  down-projection, q_b, the key/value up-projection or its absorbed BMMs, attention and o_proj;
  AIConfigurator's collector/vllm/collect_mla_module.py), measured per local head count;
* ``mla/<engine>/<version>/{context,generation}_mla_perf.parquet`` and ``mla_bmm/…`` — the bare MLA
  attention kernels and the absorbed BMMs, which SGLang has instead of the module: the block is then
  summed from its GEMMs as AIConfigurator's granular fallback does (``context_mla_granular`` and
  ``generation_mla_granular`` in ``sdk/models/deepseek.py``).

Routed experts are split like vLLM's and SGLang's default without expert parallelism: each of the
TP ranks holds every expert at 1/TP of its width (``moe_tp_size`` = TP, ``moe_ep_size`` = 1).
Expert parallelism (``moe_ep_size`` = TP: whole experts, 1/TP of them per rank) is a Step option.
Within one model's table line the step interpolates linearly in the token count and in the expert
width per GPU (inter_size / moe_tp_size; experts per GPU under expert parallelism), the work of a
rank being proportional to it at a fixed token count; beyond the measured splits it scales
linearly in that width, counted in the provenance like every query outside a grid.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import pandas as pd

from pdplan.errors import PdplanError
from pdplan.latency.compose import tables
from pdplan.latency.compose.tables import Extrapolated, Grid
from pdplan.vocabulary import MoeActivations

#: Expert-load distributions the MoE tables measure (tokens per expert: equal, or power-law skewed).
DISTRIBUTIONS = ("balanced", "power_law_1.01", "power_law_1.2")


def default_distribution(model) -> str:
    """AIConfigurator's default expert load for the model's family: ``power_law`` with α = 1.2 for
    Mixtral, Qwen3-MoE and gpt-oss (``MOEModel.__init__``: ``self._power_law_alpha = 1.2``,
    sdk/models/moe.py) and α = 1.01 for DeepSeek-V3/R1 and Kimi-K2 (``DeepSeekModel.__init__``:
    ``self._power_law_alpha = 1.01``, sdk/models/deepseek.py), with ``workload_distribution =
    "power_law"`` the config default (sdk/config.py), aiconfigurator-core 0.12.0. The DeepSeek
    family is the one with latent attention."""
    return "power_law_1.01" if model.attention == "mla" else "power_law_1.2"


def load_label(distribution: str) -> str:
    """``balanced`` or ``power-law (α = 1.2)``, for the provenance."""
    alpha = distribution.removeprefix("power_law_")
    return distribution if alpha == distribution else f"power-law (α = {alpha})"


def kernel_label(kernels: tuple[str, ...]) -> str:
    """The measured kernels a MoE grid reads, for the provenance: the one, or each, the faster per point."""
    if not kernels:
        return "kernel unnamed"
    if len(kernels) == 1:
        return f"kernel {kernels[0]}"
    return f"kernels {', '.join(kernels)}, the faster at each point"


def moe_dtype(model, engine: str = "", sm_version: int = 0, activations: MoeActivations | None = None) -> str:
    """The MoE table's ``moe_dtype`` for the model's expert weights, as AIConfigurator maps a
    checkpoint's quantization (``_infer_quant_modes_from_raw_config`` in sdk/models/helpers.py, aiconfigurator-core
    0.12.0): block-scaled FP8 (DeepSeek-V3's 128×128 blocks, ``weight_block`` > 0) is ``fp8_block``,
    per-tensor FP8 ``fp8``, NVFP4 ``nvfp4``, MXFP4 (gpt-oss) by the precision of the experts' activations
    (:func:`mxfp4_activations`): ``w4a16_mxfp4`` in BF16, ``w4a8_mxfp4_mxfp8`` quantized to MXFP8; W4A16 int4
    (Kimi-K2.5's compressed-tensors experts) ``int4_wo``, the weight-only int4 AIConfigurator measures for it."""
    if model.weight_dtype == "fp8":
        return "fp8_block" if getattr(model, "weight_block", 0) > 0 else "fp8"
    if model.weight_dtype == "mxfp4":
        mxfp8 = mxfp4_activations(engine, sm_version, activations) == MoeActivations.MXFP8
        return "w4a8_mxfp4_mxfp8" if mxfp8 else "w4a16_mxfp4"
    return {"bf16": "bfloat16", "fp4": "nvfp4", "int4": "int4_wo"}[model.weight_dtype]


def mxfp4_activations(engine: str, sm_version: int, asked: MoeActivations | None = None) -> MoeActivations:
    """The precision of MXFP4 experts' activations: the one ``asked``, else the engine's default on the GPU.

    * TensorRT-LLM quantizes them to MXFP8 on SM 100 and later (``ModelConfig.get_mxfp4_quant_algo`` in
      tensorrt_llm/_torch/model_config.py: ``W4A8_MXFP4_MXFP8`` with its default TRTLLM MoE backend on Blackwell,
      ``W4A16_MXFP4`` below SM 100);
    * SGLang does too: on SM 100 it picks the ``flashinfer_mxfp4`` MoE runner for an MXFP4 checkpoint
      (SGLang 0.5.23 ``arg_groups/model_overrides/gpt_oss.py``), whose ``--flashinfer-mxfp4-moe-precision default``
      quantizes the routed input to MXFP8 before FlashInfer's kernel (``layers/quantization/
      mxfp4_flashinfer_trtllm_moe.py``; ``bf16`` keeps them; ``arg_groups/fields/exec_.py`` for the choices);
    * vLLM keeps them in BF16 unless told MXFP8: ``select_mxfp4_moe_backend`` in
      vllm/model_executor/layers/fused_moe/oracle/mxfp4.py tries FlashInfer's BF16 variant first, the MXFP8 one
      when the activation override asks for it (0.33.0: ``--quantization-config {"moe":{"activation":"mxfp8"}}``;
      its earlier releases: ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1``, ``get_mxfp4_backend`` in
      layers/quantization/mxfp4.py: ``SM100_FI_MXFP4_BF16`` by default, ``SM100_FI_MXFP4_MXFP8_TRTLLM`` with it).

    What may be asked for is :func:`asked_activations`'s rule."""
    if asked is not None:
        return asked
    return MoeActivations.MXFP8 if engine in ("trtllm", "sglang") and sm_version >= 100 else MoeActivations.BF16


def asked_activations(model, gpu, asked: MoeActivations | None) -> MoeActivations | None:
    """The activation precision asked for ``model``'s experts on ``gpu`` (None: the engine's default). Refused for a
    model without MXFP4 experts, whose kernels take no such choice, and MXFP8 on a GPU without FP4 tensor cores:
    every engine's MXFP8 path is Blackwell's FlashInfer/TRTLLM-gen kernel, and elsewhere none runs it (vLLM 0.33.0
    falls back to BF16 with a warning), so a plan timed with it would be timed for kernels it does not get."""
    if asked is None:
        return None
    if not (model.is_moe and model.weight_dtype == "mxfp4"):
        raise PdplanError(f"--moe-activations applies to MXFP4 experts only; {model.name} has {model.weight_dtype} "
                          "weights", field="moe_activations")
    if asked == MoeActivations.MXFP8 and not gpu.blackwell:
        raise PdplanError(f"--moe-activations mxfp8: MXFP8 activations for MXFP4 experts run on Blackwell only (FP4 "
                          f"tensor cores), and {gpu.name} has none", field="moe_activations")
    return asked


def gemm_dtype(model) -> str:
    """The GEMM table's ``gemm_dtype`` for the model's attention, shared-expert and dense-layer
    weights. An MXFP4 checkpoint keeps every weight but the experts in bf16 (gpt-oss's
    quantization_config leaves attention, router, embedding and head unquantized; AIConfigurator sets
    ``gemm_quant_mode = bfloat16`` for ``quant_algo == "mxfp4"``, sdk/models/helpers.py), and so does an int4 one
    (Kimi-K2.5's ``ignore`` list, :data:`pdplan.modelspec.EXPERTS_ONLY_DTYPES`)."""
    if model.weight_dtype == "fp8":
        return "fp8_block" if getattr(model, "weight_block", 0) > 0 else "fp8"
    return {"bf16": "bfloat16", "fp4": "nvfp4", "mxfp4": "bfloat16", "int4": "bfloat16"}[model.weight_dtype]


def newest_not_above(system: str, engine: str, table: str, ceiling: str | None) -> list[str]:
    """The versions of ``table`` a request for ``ceiling`` may use, newest first (None: all)."""
    return tables.not_above(tables.versions_with(system, engine, table), ceiling)[::-1]


# --- routed experts ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class MoeConfig:
    """One model's MoE layer as the table keys it."""

    hidden: int
    inter: int          #: full expert width (the table's inter_size)
    topk: int
    experts: int
    dtype: str          #: moe_dtype
    distribution: str
    kernel: str | None = None   #: the one ``kernel_source`` to read (None: the fastest measured per point)

    def text(self) -> str:
        return (f"{self.experts} experts of {self.hidden}×{self.inter}, top-{self.topk}, {self.dtype}, "
                f"{self.distribution}")


@cache
def _moe_frame(system: str, engine: str, version: str):
    return tables._read(system, engine, "moe", version,
                        ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts",
                         "moe_tp_size", "moe_ep_size", "distribution", "kernel_source", "latency"])


def _model_rows(frame, config: MoeConfig):
    return frame[(frame.hidden_size == config.hidden) & (frame.inter_size == config.inter)
                 & (frame.topk == config.topk) & (frame.num_experts == config.experts)
                 & (frame.moe_dtype == config.dtype)]


#: MoE kernels an engine runs whose measurement lies in another engine's table: (engine, weight format) → (the
#: other engine, that kernel's ``kernel_source`` there; None: every kernel it measured at the format). The grid of
#: such an engine holds the other's rows of the kernel beside its own (:func:`moe_grid`).
#:
#: * vLLM's ``SM100_FI_MXFP4_MXFP8_TRTLLM`` backend and SGLang's ``flashinfer_mxfp4`` runner both call FlashInfer's
#:   ``trtllm_fp4_block_scale_moe`` with MXFP8 activations (:func:`mxfp4_activations`); AIConfigurator measured that
#:   for SGLang, and for vLLM only the kernel's BF16-activation form, whose rows on B200 agree with SGLang's for
#:   gpt-oss's experts within 4% (the median ratio per split, vLLM 0.24.0 against SGLang 0.5.14).
#: * TensorRT-LLM's ``moe_config.backend: TRTLLM`` runs FP8 block-scaled experts on the trtllm-gen fused MoE
#:   (``TRTLLMGenFusedMoE``, ``torch.ops.trtllm.fp8_block_scale_moe_runner``). FlashInfer ships the same kernels as
#:   ``trtllm_fp8_block_scale_moe`` (its csrc/trtllm_fused_moe_kernel_launcher.cu runs TensorRT-LLM's
#:   ``trtllmGenFp8BlockScaleMoe``), SGLang's ``flashinfer_trtllm`` MoE runner calls it, and AIConfigurator measured
#:   it there (``sglang_flashinfer_trtllm_moe``); its TensorRT-LLM table holds the DEEPGEMM backend alone.
#: * The same backend runs NVFP4 experts on trtllm-gen's FP4 fused MoE
#:   (``torch.ops.trtllm.fp4_block_scale_moe_runner``), which FlashInfer ships as ``trtllm_fp4_block_scale_moe`` and
#:   SGLang's ``flashinfer_trtllm`` runner calls for ModelOpt NVFP4 checkpoints. TensorRT-LLM's own table measures
#:   it (``moe_torch_flow_min_latency``) for 256 experts but not for Kimi-K2.5's 384, where it holds CUTLASS alone
#:   (GB200, EP 8: 0.038 ms at one token against trtllm-gen's 0.019 in SGLang's table), which srt-slurm's Kimi-K2.5
#:   TEP decodes do not run (``moe_config.backend: TRTLLM``).
KERNEL_MEASURED_BY = {("vllm", "w4a8_mxfp4_mxfp8"): ("sglang", None),
                      ("trtllm", "fp8_block"): ("sglang", "sglang_flashinfer_trtllm_moe"),
                      ("trtllm", "nvfp4"): ("sglang", "sglang_flashinfer_trtllm_moe")}


@cache
def moe_grid(system: str, engine: str, ceiling: str | None, config: MoeConfig,
             expert_parallel: bool) -> tuple[Grid, str, tuple[str, ...]]:
    """The model's MoE latency grid over (tokens, width per GPU), the version measuring it and the kernels it
    measured: the fastest kernel per point of the engine's own table (:func:`engine_moe_rows`) and of the kernel
    another engine's table measured for it (:data:`KERNEL_MEASURED_BY`), the version then naming that table too;
    ``config.kernel`` keeps that one kernel alone."""
    parts = []   # (version, rows)
    other, kernel = KERNEL_MEASURED_BY.get((engine, config.dtype), (None, None))
    own = other is None or _measures(system, engine, ceiling, config)
    if own:   # raises the engine's own reason where its table cannot give the grid
        parts.append(engine_moe_rows(system, engine, ceiling, config, expert_parallel))
    if other is not None:
        try:
            version, rows = engine_moe_rows(system, other, None, config, expert_parallel)
        except PdplanError:
            if not own:
                raise
        else:
            rows = rows if kernel is None else rows[rows.kernel_source == kernel]
            if not rows.empty:
                parts.append((f"{version} ({other}'s table, the same kernel)", rows))
    rows = pd.concat([part for _, part in parts])
    if config.kernel is not None:
        rows = rows[rows.kernel_source == config.kernel]
        if rows.empty:
            measured = sorted({k for _, part in parts for k in part.kernel_source if k})
            raise PdplanError(f"no {config.kernel} MoE kernel measured on {system} for {engine}'s {config.text()} "
                              f"(measured: {', '.join(measured) or 'none'})", field="moe_kernel")
    kernels = tuple(sorted(k for k in set(rows.kernel_source) if k))
    versions = [version for version, part in parts if part.kernel_source.isin(rows.kernel_source).any()]
    column = "experts per GPU" if expert_parallel else "expert width per GPU"
    grid = Grid.from_frame(rows.loc[:, ["num_tokens", "width", "latency"]], ("num_tokens", "width"), "MoE")
    grid.columns = ("tokens", column)
    return grid, " + ".join(versions), kernels


def _measures(system: str, engine: str, ceiling: str | None, config: MoeConfig) -> bool:
    """Whether a MoE table of the engine not above ``ceiling`` holds the model at its weight format."""
    return any(not _model_rows(_moe_frame(system, engine, version), config).empty
               for version in newest_not_above(system, engine, "moe", ceiling))


@cache
def engine_moe_rows(system: str, engine: str, ceiling: str | None, config: MoeConfig,
                    expert_parallel: bool) -> tuple[str, pd.DataFrame]:
    """The model's MoE rows in the engine's own tables at the split, each with its ``width`` per GPU, and the
    version measuring them: the newest version not above ``ceiling`` whose table holds the model (tables are
    collected per release and a model is measured once, so an older table stands in for one not re-measured)."""
    versions = newest_not_above(system, engine, "moe", ceiling)
    if not versions:
        raise PdplanError(f"no {engine} MoE measurements on {system}", field="engine")
    other_split = None   # (version, rows) of the model measured only under the other split
    for version in versions:
        rows = _model_rows(_moe_frame(system, engine, version), config)
        rows = rows[rows.distribution == config.distribution] if not rows.empty else rows
        split = rows[rows.moe_tp_size == 1] if expert_parallel else rows[rows.moe_ep_size == 1]
        if split.empty:
            if other_split is None and not rows.empty:
                other_split = (version, rows)
            continue
        if expert_parallel:   # whole experts, experts / moe_ep_size of them per GPU
            return version, split.assign(width=split.num_experts / split.moe_ep_size)
        return version, split.assign(width=split.inter_size / split.moe_tp_size)  # 1/moe_tp_size of every expert
    if other_split is not None:
        version, rows = other_split
        if expert_parallel:
            measured = ", ".join(str(int(t)) for t in sorted(set(rows.moe_tp_size)))
            raise PdplanError(f"{engine} {version} on {system} measures {config.text()} only with each expert split "
                              f"over TP {measured}, never whole per GPU: compose with EP 1", field="ep")
        measured = ", ".join(str(int(e)) for e in sorted(set(rows[rows.moe_tp_size == 1].moe_ep_size)))
        raise PdplanError(f"{engine} {version} on {system} measures {config.text()} only with whole experts per GPU "
                          f"(EP {measured}), never split over TP: compose with EP = TP", field="ep")
    newest = _moe_frame(system, engine, versions[0])
    same_dtype = newest[newest.moe_dtype == config.dtype]
    models = sorted({f"{h}×{i} top-{k}/{e}" for h, i, k, e in
                     same_dtype[["hidden_size", "inter_size", "topk", "num_experts"]].itertuples(index=False)})
    raise PdplanError(f"no {engine} MoE measurement on {system} for {config.text()} "
                      f"({config.dtype} models measured: {', '.join(models) or 'none'})", field="model")


def moe_s(grid: Grid, tokens: float, width: float, log: Extrapolated) -> float:
    return grid((tokens, width), log)


# --- latent attention -------------------------------------------------------------------------------

#: The latent-attention geometry the module tables measure: DeepSeek-V3's (AIConfigurator's
#: model_configs/deepseek-ai--DeepSeek-V3_config.json; the tables' ``model`` column), per local head count.
MODULE_GEOMETRY = {"hidden": 7168, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
                   "qk_nope_head_dim": 128, "v_head_dim": 128}


def module_fits(model) -> str | None:
    """Why the DeepSeek-V3 module tables do not describe the model's attention block (None: they do)."""
    for key, value in MODULE_GEOMETRY.items():
        if getattr(model, key) != value:
            return f"{key} {getattr(model, key)} (the module tables measure DeepSeek-V3's {value})"
    return None


@cache
def mla_module_grid(system: str, engine: str, version: str, phase: str, gemm_type: str, kv_dtype: str) -> Grid:
    """The MLA module's latency over (batch, length, local heads): prompt length for context (in
    its square, attention's causal pairs growing so), KV length for generation."""
    length = "isl" if phase == "context" else "step"
    frame = tables._read(system, engine, f"mla_{phase}_module", version,
                         ["gemm_type", "kv_cache_dtype", "num_heads", "batch_size", length, "latency"])
    frame = frame[(frame.gemm_type == gemm_type) & (frame.kv_cache_dtype == tables.KV_DTYPES[kv_dtype])]
    if frame.empty:
        raise PdplanError(f"no {engine} {version} MLA {phase} module measured with {gemm_type} GEMMs and a "
                          f"{kv_dtype} KV cache on {system}", field="model")
    transforms = ("square" if phase == "context" else None, None)
    grid = Grid.from_frame(frame.loc[:, ["batch_size", length, "num_heads", "latency"]],
                           ("batch_size", length, "num_heads"), f"MLA {phase} module", (None, *transforms))
    return grid


@cache
def mla_kernel_grid(system: str, engine: str, version: str, phase: str, kv_dtype: str) -> Grid:
    """The bare MLA attention kernel over (batch, length, local heads)."""
    length = "isl" if phase == "context" else "step"
    frame = tables._read(system, engine, f"{phase}_mla", version,
                         ["kv_cache_dtype", "num_heads", "batch_size", length, "latency"])
    frame = frame[frame.kv_cache_dtype == tables.KV_DTYPES[kv_dtype]]
    if frame.empty:
        raise PdplanError(f"no {engine} {version} MLA {phase} kernel measured with a {kv_dtype} KV cache on "
                          f"{system}", field="model")
    transforms = (None, "square" if phase == "context" else None, None)
    return Grid.from_frame(frame.loc[:, ["batch_size", length, "num_heads", "latency"]],
                           ("batch_size", length, "num_heads"), f"MLA {phase} attention", transforms)


@cache
def mla_bmm_grid(system: str, engine: str, version: str, which: str, dtype: str) -> Grid:
    """The absorbed key (``pre``) or value (``post``) BMM over (tokens, local heads)."""
    frame = tables._read(system, engine, "mla_bmm", version, ["op_name", "bmm_dtype", "num_tokens", "num_heads",
                                                               "latency"])
    part = frame[(frame.op_name == f"mla_gen_{which}") & (frame.bmm_dtype == dtype)]
    if part.empty:
        part = frame[(frame.op_name == f"mla_gen_{which}") & (frame.bmm_dtype == "bfloat16")]
    return Grid.from_frame(part.loc[:, ["num_tokens", "num_heads", "latency"]], ("num_tokens", "num_heads"),
                           f"MLA {which} BMM")


def reads_module(gemm_type: str, *, granular: bool) -> bool:
    """Whether the latent-attention block is read from the measured module rather than summed from its operators:
    at bf16 and block-scaled fp8 projections always, at NVFP4 where the engine has no granular MLA tables to sum
    (vLLM, whose module table measures NVFP4 projections; the engines with both keep summing theirs at NVFP4)."""
    return gemm_type in ("bfloat16", "fp8_block") or (gemm_type == "nvfp4" and not granular)


@dataclass
class LatentAttention:
    """One latent-attention block per layer: the measured module, else its granular operators."""

    system: str
    engine: str
    ceiling: str | None
    model: object
    tp: int

    def __post_init__(self):
        m, system, engine = self.model, self.system, self.engine
        self.heads = m.q_heads / self.tp
        self.versions: dict[str, str] = {}
        self.module = self.granular = None
        gemm_type = gemm_dtype(m)
        misfit = module_fits(m)
        module_versions = newest_not_above(system, engine, "mla_context_module", self.ceiling)
        kernel_versions = newest_not_above(system, engine, "context_mla", self.ceiling)
        bmm_versions = newest_not_above(system, engine, "mla_bmm", self.ceiling)
        granular = bool(kernel_versions and bmm_versions)
        if module_versions and misfit is None and reads_module(gemm_type, granular=granular):
            version = module_versions[0]
            self.module = {phase: mla_module_grid(system, engine, version, phase, gemm_type, m.kv_dtype)
                           for phase in ("context", "generation")}
            self.versions["mla_module"] = version
        elif granular:
            version = kernel_versions[0]
            bmm_dtype = "bfloat16" if gemm_type == "bfloat16" else "fp8"
            self.granular = {phase: mla_kernel_grid(system, engine, version, phase, m.kv_dtype)
                             for phase in ("context", "generation")}
            self.bmm = {which: mla_bmm_grid(system, engine, bmm_versions[0], which, bmm_dtype)
                        for which in ("pre", "post")}
            self.versions["mla_attention"] = version
            self.versions["mla_bmm"] = bmm_versions[0]
        else:
            why = misfit or (f"its {gemm_type} projections" if module_versions else "no MLA module table")
            raise PdplanError(f"no {engine} latent-attention measurement on {system} for {m.base_name}: {why}",
                              field="model")

    def prefill_s(self, batch: float, length: float, gemm, log: Extrapolated) -> float:
        if self.module is not None:
            return self.module["context"]((batch, length, self.heads), log)
        rows = batch * length
        return (self._projections(rows, gemm)
                + gemm(rows, self.heads * (self.model.qk_nope_head_dim + self.model.v_head_dim),
                       self.model.kv_lora_rank)                                                  # kv_b
                + self.granular["context"]((batch, length, self.heads), log))

    def decode_s(self, batch: float, context: float, gemm, log: Extrapolated) -> float:
        if self.module is not None:
            return self.module["generation"]((batch, context, self.heads), log)
        return (self._projections(batch, gemm)
                + self.bmm["pre"]((batch, self.heads), log) + self.bmm["post"]((batch, self.heads), log)
                + self.granular["generation"]((batch, context, self.heads), log))

    def _projections(self, rows: float, gemm) -> float:
        """The fused q_a/kv_a down-projection (replicated on every rank), q_b and o_proj (TP-split)."""
        m = self.model
        down = (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim
        q_width = self.heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)
        q = gemm(rows, q_width, m.q_lora_rank) if m.q_lora_rank else 0.0
        return (gemm(rows, down if m.q_lora_rank else m.kv_lora_rank + m.qk_rope_head_dim, m.hidden)
                + (q if m.q_lora_rank else gemm(rows, q_width, m.hidden))
                + gemm(rows, m.hidden, self.heads * m.v_head_dim))
