"""Transformer geometry and what it implies: weight bytes, KV bytes, memory fit and phase work."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from pdplan.errors import InternalError, PdplanError
from pdplan.experts import DP_REPLICATES_DENSE, edge_matrices_under_dp, expert_placement_rejection, expert_tp
from pdplan.hardware import GIB, GPU
from pdplan.shape import shape_label, spans_nvlink

#: Bytes one weight takes per dtype. fp4 is NVFP4: 4-bit values plus one 8-bit (E4M3) scale per 16 of
#: them, (16·4 + 8)/16 = 4.5 bits. mxfp4 is the OCP Microscaling MXFP4 that gpt-oss ships: 4-bit (E2M1)
#: values plus one 8-bit (E8M0) scale per block of 32, (32·4 + 8)/32 = 4.25 bits = 0.53125 B (OCP
#: Microscaling Formats (MX) v1.0 specification, table 1; openai/gpt-oss model card, "MXFP4"). int4 is Kimi-K2.5's
#: W4A16 (compressed-tensors: 4-bit integers, one bf16 scale per group of 32), (32·4 + 16)/32 = 4.5 bits = 0.5625 B.
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625, "mxfp4": 0.53125, "int4": 0.5625}
#: Bytes one K or V scalar takes per dtype.
KV_BYTES = {"bf16": 2, "fp8": 1}
#: Bytes of one activation element (what TP all-reduces and PP sends move).
ACTIVATION_BYTES = 2
#: Bytes of one embedding or output-head weight: quantized checkpoints keep them in bf16.
EDGE_WEIGHT_BYTES = 2
#: Bytes of one weight a quantized checkpoint keeps unquantized (router, and under MXFP4 attention too).
BF16_WEIGHT_BYTES = 2
#: Bytes of the scale of one block of block-scaled FP8: DeepSeek-V3's checkpoint stores one float32
#: ``weight_scale_inv`` per ``weight_block`` × ``weight_block`` tile (config.json
#: ``quantization_config.weight_block_size: [128, 128]``), 4/128² = 0.00024 B per weight.
BLOCK_SCALE_BYTES = 4
#: Weight precisions whose checkpoints quantize the routed experts only: gpt-oss's MXFP4 config.json lists
#: ``modules_to_not_convert: [model.layers.*.self_attn, model.layers.*.mlp.router, model.embed_tokens,
#: lm_head]`` (AIConfigurator's model_configs/openai--gpt-oss-120b_config.json), so attention, router,
#: embedding and head stay bf16; Kimi-K2.5's int4 ``ignore`` list keeps attention, shared experts and dense MLPs
#: (its text_config). Every other precision quantizes all block matrices but the router.
EXPERTS_ONLY_DTYPES = ("mxfp4", "int4")
#: The precision the matrix products of a weight dtype run at, where it is not the weight's own: vLLM runs
#: MXFP4 experts with bf16 activations on any GPU from compute capability 8.0 (vllm-project/vllm
#: vllm/model_executor/layers/quantization/mxfp4.py: ``Mxfp4Config.get_min_capability`` 80,
#: ``get_supported_act_dtypes`` [bfloat16]; the Marlin and Triton backends dequantize to bf16); int4 is W4A16.
COMPUTE_DTYPE = {"mxfp4": "bf16", "int4": "bf16"}


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A decoder-only transformer's geometry, as its published config states it, and the
    precision it is served at: weights (bf16, fp8 or fp4) and KV cache (bf16 or fp8)."""

    name: str
    layers: int           #: L, transformer blocks
    hidden: int           #: d, model width
    q_heads: int          #: H_q, query heads
    kv_heads: int         #: H_kv, key/value heads (H_kv < H_q is grouped-query attention)
    head_dim: int         #: d_h
    ffn: int              #: d_ff, MLP inner width
    vocab: int            #: vocabulary size
    parameters: int       #: total parameter count as published
    weight_dtype: str = "bf16"  #: transformer-block weights (embeddings and the output head stay bf16)
    kv_dtype: str = "bf16"      #: K/V cache scalars
    #: The precision its published checkpoint stores the block weights at (a config.json's
    #: quantization_config; the catalog's ``checkpoint_dtype``): what it is served at unless told
    #: otherwise, and what an export must quantize from when the plan's precision is lower.
    checkpoint_dtype: str = "bf16"
    mlp_matrices: int = 3  #: 3 for gated (SwiGLU) MLPs, 2 for plain (ReLU/GELU) MLPs
    tied_embeddings: bool = False  #: input embedding and output head share one matrix
    source: str = ""
    hf_repo: str | None = None  #: its Hugging Face repository, ``owner/name``; None when no hub holds it
    hf_revision: str | None = None  #: the repository's commit its config was read from (a hub-cache snapshot)
    #: Its checkpoint's config or tokenizer is code kept in its repository (Kimi-K2's ``kimi_k2`` config and
    #: tokenization_kimi.py), which vLLM and SGLang load only with ``--trust-remote-code``.
    remote_code: bool = False
    # Mixture of experts (all 0 for a dense model): each MoE layer's MLP is ``experts`` routed
    # experts of width ``expert_ffn``, ``experts_per_token`` of them chosen per token, plus
    # ``shared_experts`` every token uses; the first ``dense_layers`` layers keep a dense MLP of width ``ffn``.
    experts: int = 0
    experts_per_token: int = 0
    shared_experts: int = 0
    expert_ffn: int = 0
    dense_layers: int = 0
    attention: str = "gqa"  #: "gqa" (multi-, grouped-query or multi-head) or "mla" (multi-head latent)
    # Multi-head latent attention (DeepSeek-V2/V3): the cache holds a latent of kv_lora_rank values
    # plus the shared rope key of qk_rope_head_dim values per layer per token.
    kv_lora_rank: int = 0
    q_lora_rank: int = 0  #: 0 when queries are projected directly from the hidden state
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0  #: tokens a sliding-window layer attends to (0: no such layers)
    sliding_layers: tuple[int, ...] = ()  #: 0-based indices of the sliding-window layers
    #: Block size of block-scaled FP8 weights (config.json ``quantization_config.weight_block_size``:
    #: 128 for DeepSeek-V3/R1 and Kimi-K2); 0 for per-tensor scales. Counted only at fp8 weights.
    weight_block: int = 0
    #: Multi-token-prediction modules the checkpoint ships (config.json ``num_nextn_predict_layers``:
    #: 1 for DeepSeek-V3/R1, 0 for Kimi-K2): what ``--speculative mtp`` drafts with.
    mtp_layers: int = 0

    def __post_init__(self):
        for name in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "vocab", "parameters"):
            if getattr(self, name) < 1:
                raise InternalError(f"model {self.name}: {name} must be >= 1")
        if (self.weight_dtype not in WEIGHT_BYTES or self.checkpoint_dtype not in WEIGHT_BYTES
                or self.kv_dtype not in KV_BYTES):
            raise InternalError(f"model {self.name}: weight and checkpoint dtypes must be one of "
                                f"{', '.join(WEIGHT_BYTES)} and KV "
                             f"dtype one of {', '.join(KV_BYTES)}")
        if self.q_heads % self.kv_heads:
            raise InternalError(f"model {self.name}: q_heads ({self.q_heads}) must be a multiple of "
                             f"kv_heads ({self.kv_heads})")
        if self.mlp_matrices not in (2, 3):
            raise InternalError(f"model {self.name}: mlp_matrices must be 2 or 3")
        if self.attention not in ATTENTION_KINDS:
            raise InternalError(f"model {self.name}: attention must be one of {', '.join(ATTENTION_KINDS)}")
        if self.experts and not (1 <= self.experts_per_token <= self.experts and self.expert_ffn >= 1
                                 and 0 <= self.dense_layers < self.layers):
            raise InternalError(f"model {self.name}: inconsistent mixture-of-experts geometry")
        if self.attention == "mla" and (self.kv_lora_rank < 1 or self.qk_rope_head_dim < 1 or self.v_head_dim < 1):
            raise InternalError(f"model {self.name}: multi-head latent attention needs its latent dims")
        if any(not 0 <= i < self.layers for i in self.sliding_layers) or bool(self.sliding_window) != bool(
                self.sliding_layers):
            raise InternalError(f"model {self.name}: sliding-window layers need a window and layers in range")
        if self.weight_block < 0:
            raise InternalError(f"model {self.name}: weight_block must be >= 0")

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def timing_refusal(self) -> str | None:
        """Why pdplan's memory and roofline models would give wrong numbers for this model; None when
        they hold. Mixture-of-experts, latent and sliding-window attention are modelled; MXFP4 and int4 only on
        the routed experts, as gpt-oss and Kimi-K2.5 ship them, so a model without routed experts at either is not."""
        if self.weight_dtype in EXPERTS_ONLY_DTYPES and not self.is_moe:
            return (f"{self.base_name}: {self.weight_dtype} quantizes only routed experts (as gpt-oss's MXFP4 and "
                    f"Kimi-K2.5's int4 checkpoints do) and this model has none: use --dtype fp4 or fp8")
        return None

    def require_timeable(self) -> None:
        """Refuse (exit 2) a model whose memory or step times pdplan's formulas would get wrong."""
        why = self.timing_refusal()
        if why is not None:
            raise PdplanError(why, field="model")

    @property
    def params_per_layer(self) -> int:
        """P_layer of 0x02A: Q, K/V, output projection and the MLP matrices of one dense block. A
        mixture-of-experts model has no one such number: compute uses :attr:`active_block_parameters`,
        weight traffic the experts a batch touches (:mod:`pdplan.work`)."""
        if self.is_moe:
            raise InternalError(f"model {self.name}: a mixture-of-experts model has no one P_layer")
        return self.attention_params_per_layer + self.mlp_matrices * self.hidden * self.ffn

    @property
    def active_block_parameters(self) -> int:
        """Block parameters one token multiplies by, over all layers: attention, dense MLPs, router,
        top-k and shared experts (``L · P_layer`` for a dense model); 2 FLOPs each per token."""
        return self._block_parameters(active=True)

    @property
    def qk_head_dim(self) -> int:
        """Dimensions a query and a key dot over per head: d_h, or qk_nope_head_dim + qk_rope_head_dim
        under MLA (DeepSeek-V2, arXiv:2405.04434, 2.1.3: d_h + d_h^R)."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim if self.attention == "mla" else self.head_dim

    @property
    def value_head_dim(self) -> int:
        """Dimensions of one head's value: d_h, or v_head_dim under MLA."""
        return self.v_head_dim if self.attention == "mla" else self.head_dim

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is routed experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    @property
    def expert_params(self) -> int:
        """Parameters of one routed (or shared) expert: ``mlp_matrices · d · expert_ffn``."""
        return self.mlp_matrices * self.hidden * self.expert_ffn

    @property
    def attention_params_per_layer(self) -> int:
        """Attention projections of one layer (biases and norms ignored).

        GQA: Q and O of H_q·d_h columns, K and V of H_kv·d_h. MLA, as Hugging Face transformers'
        ``DeepseekV3Attention`` builds it (models/deepseek_v3/modeling_deepseek_v3.py): q_a
        (d × q_lora_rank) and q_b (q_lora_rank × H·(nope+rope)), or one d × H·(nope+rope) when
        q_lora_rank is 0; kv_a (d × (kv_lora_rank+rope)); kv_b (kv_lora_rank × H·(nope+v)); o (H·v × d).
        """
        d, heads = self.hidden, self.q_heads
        if self.attention == "mla":
            qk = self.qk_nope_head_dim + self.qk_rope_head_dim
            q = (d * self.q_lora_rank + self.q_lora_rank * heads * qk) if self.q_lora_rank else d * heads * qk
            kv = d * (self.kv_lora_rank + self.qk_rope_head_dim) + self.kv_lora_rank * heads * (
                self.qk_nope_head_dim + self.v_head_dim)
            return q + kv + heads * self.v_head_dim * d
        q_width = heads * self.head_dim
        return 2 * d * q_width + 2 * d * self.kv_heads * self.head_dim

    def mlp_params_per_layer(self, layer: int, *, active: bool = False) -> int:
        """MLP parameters of layer ``layer`` (0-based): dense, or router + routed + shared experts
        of an MoE layer; ``active`` counts only the experts one token uses (top-k plus shared), as
        Mixtral (arXiv:2401.04088, 2.1) and DeepSeek-V3 (arXiv:2412.19437, 2.1.2) define them."""
        per_expert = self.mlp_matrices * self.hidden * self.expert_ffn
        if not self.is_moe or layer < self.dense_layers:
            return self.mlp_matrices * self.hidden * self.ffn
        routed = self.experts_per_token if active else self.experts
        return self.hidden * self.experts + (routed + self.shared_experts) * per_expert

    def _block_parameters(self, *, active: bool) -> int:
        """Attention of every layer, the dense MLPs of the leading dense layers, the MoE MLPs of the rest."""
        dense = self.dense_layers if self.is_moe else self.layers
        return (self.layers * self.attention_params_per_layer + dense * self.mlp_params_per_layer(0)
                + (self.layers - dense) * self.mlp_params_per_layer(self.layers - 1, active=active))

    @property
    def geometric_parameters(self) -> int:
        """Parameters implied by the geometry (blocks plus embeddings; norms and biases ignored)."""
        return self._block_parameters(active=False) + self.embedding_params

    @property
    def active_parameters(self) -> int:
        """Parameters one token uses: every attention and dense weight, the router, the top-k
        and shared experts of each MoE layer, the embedding and the output head (the convention
        of Mixtral's 12.9B and Qwen3-235B-A22B's 22B). Equal to the total for a dense model."""
        return self._block_parameters(active=True) + self.embedding_params

    @property
    def weight_bytes_per_param(self) -> float:
        """Bytes of one weight at the weight dtype, with its share of FP8 block scales when block-scaled."""
        scale = BLOCK_SCALE_BYTES / self.weight_block**2 if self.weight_dtype == "fp8" and self.weight_block else 0.0
        return WEIGHT_BYTES[self.weight_dtype] + scale

    @property
    def experts_only_quantized(self) -> bool:
        """True when only the routed experts are at the weight dtype (:data:`EXPERTS_ONLY_DTYPES`)."""
        return self.weight_dtype in EXPERTS_ONLY_DTYPES

    @property
    def unquantized_block_params(self) -> int:
        """Block parameters a quantized checkpoint keeps in bf16 (every layer's): the router always (gpt-oss
        ``mlp.router``, Qwen3 FP8 ``mlp.gate`` in modules_to_not_convert), and under MXFP4 attention too."""
        router = self.moe_layers * self.hidden * self.experts
        if not self.experts_only_quantized:
            return router
        dense = self.dense_layers if self.is_moe else self.layers
        return (router + self.layers * self.attention_params_per_layer + dense * self.mlp_params_per_layer(0)
                + self.moe_layers * self.shared_experts * self.expert_params)

    @property
    def kv_scalar_bytes(self) -> int:
        return KV_BYTES[self.kv_dtype]

    @property
    def embedding_params(self) -> int:
        """Input embedding and output head (one matrix when tied)."""
        return self.vocab * self.hidden * (1 if self.tied_embeddings else 2)

    def weight_bytes_of(self, block_params: float, edge_params: float, tp: int = 1) -> int:
        """Bytes of block and edge (embedding, head) parameters split over ``tp`` ranks: the
        blocks at the weight dtype, the edges in bf16."""
        return (math.ceil(block_params / tp * self.weight_bytes_per_param)
                + math.ceil(edge_params / tp) * EDGE_WEIGHT_BYTES)

    @property
    def weight_bytes(self) -> int:
        """All weights, as published (norms included in the blocks); the parts a quantized checkpoint keeps
        in bf16 (:attr:`unquantized_block_params`) at 2 bytes."""
        kept = self.unquantized_block_params if self.weight_dtype != "bf16" else 0
        return (self.weight_bytes_of(self.parameters - self.embedding_params - kept, self.embedding_params)
                + kept * BF16_WEIGHT_BYTES)

    @property
    def latent_kv_width(self) -> int:
        """Values an MLA layer caches per token (kv_lora_rank + qk_rope_head_dim); 0 for GQA."""
        return self.kv_lora_rank + self.qk_rope_head_dim if self.attention == "mla" else 0

    @property
    def kv_bytes_per_token(self) -> int:
        """KV bytes one token adds across all layers while every layer still holds it (0x06);
        sliding-window layers stop adding at their window: see :meth:`kv_bytes_for_context`."""
        return kv_bytes_per_token(self.layers, self.kv_heads, self.head_dim, self.kv_scalar_bytes,
                                  latent_width=self.latent_kv_width)

    def kv_bytes_for_context(self, tokens: int) -> int:
        """KV bytes of one sequence of ``tokens`` tokens: full-attention layers hold all of them,
        sliding-window layers at most ``sliding_window``. That is the cache's content; an engine
        holds a little more (vLLM's SlidingWindowSpec.max_memory_usage_bytes, vllm-project/vllm
        vllm/v1/kv_cache_interface.py at 001cabc: the last window − 1 tokens plus those scheduled,
        in whole blocks, plus one block)."""
        per_layer = self.kv_bytes_per_token // self.layers
        sliding = len(self.sliding_layers)
        return per_layer * ((self.layers - sliding) * tokens + sliding * min(tokens, self.sliding_window))

    @property
    def base_name(self) -> str:
        """The name without its precision suffix (the catalog entry it comes from)."""
        return self.name.split(PRECISION_MARK, 1)[0]

    def at_precision(self, weight_dtype: str | None = None, kv_dtype: str | None = None) -> "ModelSpec":
        """The same model served at another precision; its name says which
        (``llama-3.1-70b@fp8`` for fp8 weights and KV, ``…@fp8,kv=bf16`` when they differ), so
        profiles measured at one precision are never used for another."""
        weight = weight_dtype or self.weight_dtype
        # A quantized checkpoint quantizes its KV cache too unless told otherwise (fp8 KV).
        kv = kv_dtype or (default_kv_dtype(weight) if weight_dtype else self.kv_dtype)
        for label, value, known in (("--dtype", weight, WEIGHT_BYTES), ("--kv-dtype", kv, KV_BYTES)):
            if value not in known:
                raise PdplanError(f"{label} must be one of {', '.join(known)}, got {value!r}", field=label.lstrip("-"))
        return replace(self, name=self.base_name + precision_suffix(weight, kv, self.checkpoint_dtype),
                       weight_dtype=weight, kv_dtype=kv)


PRECISION_MARK = "@"
#: The model planned for when none is named (optimize, sensitivity grids).
DEFAULT_MODEL = "llama2-70b"


def default_kv_dtype(weight_dtype: str) -> str:
    """The KV precision that goes with a weight precision unless stated: fp8 for quantized weights."""
    return "fp8" if weight_dtype in ("fp8", "fp4", "mxfp4") else "bf16"


def precision_suffix(weight_dtype: str, kv_dtype: str, checkpoint_dtype: str = "bf16") -> str:
    """``""`` for bf16 weights and KV of a bf16 checkpoint, ``@fp8`` when the KV follows fp8 weights,
    else both named. A model whose checkpoint is quantized always names its precision (``deepseek-v3@fp8``,
    ``deepseek-v3@bf16``): its bare name means the checkpoint's precision, so the name of a model read
    back (:func:`pdplan.modelref.get_model`) is the model planned."""
    if (weight_dtype, kv_dtype) == ("bf16", "bf16") and checkpoint_dtype == "bf16":
        return ""
    if kv_dtype == default_kv_dtype(weight_dtype):
        return f"{PRECISION_MARK}{weight_dtype}"
    return f"{PRECISION_MARK}{weight_dtype},kv={kv_dtype}"


def parse_precision(suffix: str) -> tuple[str, str]:
    """(weight dtype, KV dtype) of a name suffix after ``@`` (``fp8``, ``fp4,kv=bf16`` …)."""
    weight, _, kv = suffix.partition(",kv=")
    return weight, kv or default_kv_dtype(weight)


#: Attention kinds a model may state: heads of K and V in the cache, or one latent per token.
ATTENTION_KINDS = ("gqa", "mla")


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int, *, latent_width: int = 0) -> int:
    """KV bytes per token: ``L · 2 · H_kv · d_h · b`` for K/V heads (0x06: 32·2·8·128·2 = 131072 B), or
    ``L · (kv_lora_rank + qk_rope_head_dim) · b`` for multi-head latent attention, which caches the
    compressed latent and the shared rope key, when ``latent_width`` is given (DeepSeek-V2,
    arXiv:2405.04434, table 1; vLLM's MLAAttentionSpec, vllm/v1/kv_cache_interface.py at 001cabc: one
    head of kv_lora_rank + qk_rope_head_dim per layer. DeepSeek-V3 at bf16: 61·576·2 = 70272 B)."""
    if latent_width:
        return layers * latent_width * dtype_bytes
    return layers * 2 * kv_heads * head_dim * dtype_bytes


# --- sharding over tensor (TP), expert (EP) and pipeline (PP) parallelism --------------------------

def layers_on_largest_stage(model: ModelSpec, pp: int) -> int:
    """Layers on the busiest pipeline stage: an uneven split gives the first stages one extra."""
    return math.ceil(model.layers / pp)


def stage_layers(model: ModelSpec, pp: int) -> list[range]:
    """The layers of each of the ``pp`` stages, in order: whole layers, the first stages one extra."""
    base, extra = divmod(model.layers, pp)
    bounds = [0]
    for stage in range(pp):
        bounds.append(bounds[-1] + base + (1 if stage < extra else 0))
    return [range(a, b) for a, b in zip(bounds, bounds[1:])]


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """K/V heads each TP rank stores: H_kv/tp, or one replicated head when tp > H_kv. Under MLA every
    rank caches the one whole latent, as one head of kv_lora_rank + qk_rope_head_dim (vLLM's
    ``MLAAttentionSpec(num_kv_heads=1, …)``, vllm/model_executor/models/deepseek_v2.py at 002d607)."""
    if model.attention == "mla":
        return 1
    return math.ceil(model.kv_heads / tp)


def _check_placement(model: ModelSpec, tp: int, ep: int, redundant_experts: int, dp: int = 1) -> None:
    found = expert_placement_rejection(model, tp, ep, redundant_experts, dp)
    if found is not None:
        raise PdplanError(f"{model.name}: {found[1]}", field=found[0])


def rank_weight_bytes(model: ModelSpec, tp: int, layers: range, edge_matrices: int, *, ep: int = 1,
                      redundant_experts: int = 0, experts_read: float | None = None, dp: int = 1,
                      whole_edge_matrices: int = 0) -> int:
    """Weight bytes one GPU holds for ``layers`` plus ``edge_matrices`` vocabulary matrices split over TP and
    ``whole_edge_matrices`` whole ones (or, given ``experts_read``, reads when each MoE layer touches that
    many routed experts).

    Split over (attention) TP: Q and O, K and V while tp ≤ H_kv (past it each rank holds one replicated
    head, vLLM's QKVParallelLinear), MLA's q_b, kv_b and o projections, dense MLPs and shared experts,
    routed experts without EP; the embedding and head by vocabulary rows. Replicated on every rank: MLA's
    q_a and kv_a down-projections (vLLM's DeepseekV2MLAAttention builds them unsplit, a ``ReplicatedLinear``
    or ``disable_tp=True``, vllm/model_executor/models/deepseek_v2.py at 002d607) and the router
    (``ReplicatedLinear``, unquantized). Under EP the fullest GPU holds ⌈(E + R)/EP⌉ whole experts per
    MoE layer, each split over expert TP (:func:`expert_placement_rejection`, :func:`expert_tp`).

    With attention data parallelism (dp > 1) every DP rank holds the attention of its own TP group, and
    the routed experts are spread over all tp × dp GPUs (:func:`expert_tp`). The dense MLPs and shared
    experts of a model with routed experts are whole on every GPU (:data:`DP_REPLICATES_DENSE`); a model
    without them runs its DP ranks as replicas split over their TP. Matrices at the weight dtype,
    with block scales, are rounded up once; the parts kept in bf16
    (:attr:`ModelSpec.unquantized_block_params`) and the edges (bf16) once each.
    """
    m, d = model, model.hidden
    quant_split = quant_rank = bf16_split = bf16_rank = 0
    dense_whole = dp > 1 and m.is_moe and DP_REPLICATES_DENSE
    experts_split = expert_tp(tp, ep, dp)
    for layer in layers:
        attention_split, attention_rank = m.attention_params_per_layer, 0
        if m.attention == "mla":
            attention_rank = d * m.q_lora_rank + d * (m.kv_lora_rank + m.qk_rope_head_dim)
            attention_split -= attention_rank
        elif tp > m.kv_heads:
            attention_rank = 2 * d * m.head_dim * kv_heads_per_gpu(m, tp)
            attention_split = 2 * d * m.q_heads * m.head_dim
        moe = m.is_moe and layer >= m.dense_layers
        dense_split = m.mlp_params_per_layer(layer) if not moe else m.shared_experts * m.expert_params
        dense_rank = 0
        if dense_whole:
            dense_split, dense_rank = 0, dense_split
        if m.experts_only_quantized:
            bf16_split += attention_split + dense_split
            bf16_rank += attention_rank + dense_rank
        else:
            quant_split += attention_split + dense_split
            quant_rank += attention_rank + dense_rank
        if moe:
            bf16_rank += d * m.experts
            if experts_read is not None:
                quant_split += experts_read * m.expert_params  # EP spreads the touched experts as TP does
            elif ep > 1 and experts_split == 1:
                quant_rank += math.ceil((m.experts + redundant_experts) / ep) * m.expert_params
            elif ep > 1:
                quant_rank += math.ceil((m.experts + redundant_experts) / ep) * m.expert_params / experts_split
            elif dp > 1:
                quant_rank += m.experts * m.expert_params / experts_split
            else:
                quant_split += m.experts * m.expert_params
    edges = math.ceil(edge_matrices * m.vocab * d / tp)
    if whole_edge_matrices:
        edges = math.ceil(edge_matrices * m.vocab * d / tp + whole_edge_matrices * m.vocab * d)
    return (math.ceil((quant_split / tp + quant_rank) * m.weight_bytes_per_param)
            + math.ceil((bf16_split / tp + bf16_rank) * BF16_WEIGHT_BYTES)
            + edges * EDGE_WEIGHT_BYTES)


def stage_edge_matrices(model: ModelSpec, stage: int, pp: int) -> int:
    """Vocabulary matrices on a stage: the embedding on the first, the head on the last (one matrix when
    they are tied and share a stage)."""
    if pp == 1:
        return 1 if model.tied_embeddings else 2
    return int(stage == 0) + int(stage == pp - 1)


def stage_weight_bytes(model: ModelSpec, tp: int, pp: int, *, ep: int = 1, redundant_experts: int = 0,
                       dp: int = 1) -> list[int]:
    """Weight bytes on one GPU of each pipeline stage (:func:`rank_weight_bytes`)."""
    model.require_timeable()
    _check_placement(model, tp, ep, redundant_experts, dp)
    stages = []
    for stage, layers in enumerate(stage_layers(model, pp)):
        split, whole = (edge_matrices_under_dp(model, stage, pp) if dp > 1 and model.is_moe
                        else (stage_edge_matrices(model, stage, pp), 0))
        stages.append(rank_weight_bytes(model, tp, layers, split, ep=ep, redundant_experts=redundant_experts,
                                        dp=dp, whole_edge_matrices=whole))
    return stages


def weight_bytes_per_gpu(model: ModelSpec, tp: int, pp: int, *, ep: int = 1, redundant_experts: int = 0,
                         dp: int = 1) -> int:
    """Weight bytes on the fullest GPU of a (tp, pp) instance with ``dp`` attention data-parallel ranks:
    experts split over the tp × dp GPUs (ep = 1) or whole over EP groups with ``redundant_experts`` extra
    (:func:`rank_weight_bytes`).

    Blocks split by whole layers over PP stages, the first stages one extra; the embedding and the
    output head are vocabulary-parallel over TP and sit on the first and last stage (both on one stage
    when pp = 1, shared when tied; with attention DP the embedding is whole, :func:`edge_matrices_under_dp`).
    Experts that cannot be placed are refused (exit 2) naming the field.
    """
    return max(stage_weight_bytes(model, tp, pp, ep=ep, redundant_experts=redundant_experts, dp=dp))


def kv_layer_bytes_per_rank(model: ModelSpec, tp: int) -> int:
    """KV bytes one token occupies in one layer on one TP rank: ``2 · ⌈H_kv/tp⌉ · d_h · b``, or the
    whole latent ``(kv_lora_rank + qk_rope_head_dim) · b`` under MLA, which TP does not split."""
    return kv_bytes_per_token(1, kv_heads_per_gpu(model, tp), model.head_dim, model.kv_scalar_bytes,
                              latent_width=model.latent_kv_width)


def full_attention_layers(model: ModelSpec, layers: range) -> int:
    """Layers among ``layers`` whose KV grows with the context: those that do not slide, or every one
    when every layer of the model slides (then no saving is claimed)."""
    if len(model.sliding_layers) == model.layers:
        return len(layers)
    return sum(1 for layer in layers if layer not in model.sliding_layers)


def kv_bytes_per_token_per_gpu(model: ModelSpec, tp: int, pp: int) -> int:
    """KV bytes one more token of context occupies on the fullest GPU of a (tp, pp) instance: its
    full-attention layers' (a sliding-window layer's share is bounded by the window instead,
    :func:`sliding_window_reserve_bytes`)."""
    per_layer = kv_layer_bytes_per_rank(model, tp)
    return max(full_attention_layers(model, layers) for layers in stage_layers(model, pp)) * per_layer


def sliding_window_sequences(gpu: GPU) -> int:
    """Sequences whose sliding windows pdplan reserves KV room for: vLLM's default ``max_num_seqs`` for
    its OpenAI server, 1024 on GPUs of 70 GiB or more other than the A100, 256 below
    (vllm-project/vllm vllm/engine/arg_utils.py, ``EngineArgs.get_batch_defaults``)."""
    return 1024 if gpu.memory_bytes >= 70 * GIB and not gpu.physical.startswith("a100") else 256


def sliding_window_reserve_bytes(model: ModelSpec, gpu: GPU, tp: int, layers: range) -> int:
    """KV bytes one GPU sets aside for the sliding-window layers among ``layers``: each holds at most the
    window per sequence (vLLM's SlidingWindowSpec frees blocks behind it; its hybrid KV cache manager,
    vllm/v1/core/kv_cache_manager.py, shares one block pool between full and sliding layers), reserved
    for :func:`sliding_window_sequences` sequences."""
    sliding = len(layers) - full_attention_layers(model, layers)
    return sliding * model.sliding_window * kv_layer_bytes_per_rank(model, tp) * sliding_window_sequences(gpu)


def kv_capacity_tokens(model: ModelSpec, gpu: GPU, tp: int, pp: int, memory_utilization: float = 0.9, *,
                       ep: int = 1, redundant_experts: int = 0, dp: int = 1) -> int:
    """Tokens of KV an instance can hold (with attention DP: ONE DP rank, each rank holding its own): on
    each stage's GPU, (utilised HBM − weights − sliding-window reserve) / KV bytes per token of its
    full-attention layers; the least over the stages.

    ``memory_utilization`` is the fraction of HBM the engine may use (vLLM's
    ``gpu_memory_utilization``); the rest covers activations, CUDA graphs and fragmentation.
    Returns 0 when the weights alone do not fit.
    """
    if not 0 < memory_utilization <= 1:
        raise InternalError("memory_utilization must be in (0, 1]")
    usable = int(gpu.memory_bytes * memory_utilization)
    per_layer = kv_layer_bytes_per_rank(model, tp)
    weights = stage_weight_bytes(model, tp, pp, ep=ep, redundant_experts=redundant_experts, dp=dp)
    capacities = []
    for weight, layers in zip(weights, stage_layers(model, pp)):
        free = usable - weight - sliding_window_reserve_bytes(model, gpu, tp, layers)
        full = full_attention_layers(model, layers)
        if free < 0 or full:  # a stage of sliding layers only bounds nothing per token once its windows fit
            capacities.append(free // (full * per_layer) if full else 0)
    return max(0, min(capacities))


def shape_rejection(model: ModelSpec, gpu: GPU, tp: int, pp: int, *, gpus_per_node: int | None = None,
                    memory_utilization: float = 0.9, kv_reserve_tokens: int = 0, ep: int = 1,
                    redundant_experts: int = 0, dp: int = 1) -> str | None:
    """Why (tp, pp, dp, ep) on ``gpu`` cannot serve ``model``, in one sentence; None when it can.

    Rules: the GPU runs the weight precision's matrix products (:data:`COMPUTE_DTYPE`); a TP group (with
    attention DP, each DP rank's: SGLang's attention TP group, vLLM's per-rank TP) stays inside one node, or
    takes whole nodes that the GPU's NVLink fabric joins (:func:`pdplan.shape.spans_nvlink`: two GB200 trays);
    TP divides the K/V heads or is a multiple of them (then heads are replicated), or under MLA divides
    the attention heads (vLLM: ``assert num_heads % tp_size == 0``); the experts can be placed
    (:func:`expert_placement_rejection`: EP divides tp × dp, redundant experts spread evenly, no EP group
    without experts); PP is at most the layer count (uneven splits are allowed); the weights plus a reserve
    of ``kv_reserve_tokens`` of KV (per DP rank) fit the utilised memory.
    """
    model.require_timeable()
    # An EP = TP instance without attention DP reads as it always has (its experts' memory is its label's).
    shape = shape_label(gpu.name, tp, pp, dp=dp, ep=ep if dp > 1 or ep not in (1, tp) else 1)
    if tp < 1 or pp < 1 or dp < 1 or ep < 1:
        return f"{shape}: TP, PP, DP and EP must be >= 1"
    if COMPUTE_DTYPE.get(model.weight_dtype, model.weight_dtype) not in gpu.dtypes:
        return f"{shape}: {gpu.name} has no {model.weight_dtype} tensor cores (it runs {', '.join(gpu.dtypes)})"
    if gpus_per_node is not None and tp > gpus_per_node and not spans_nvlink(tp, gpus_per_node, gpu.fabric_gpus):
        why = f"{shape}: TP {tp} > {gpus_per_node} GPUs per node"
        if dp > 1:
            why += ": each DP rank's attention TP group must sit inside one node"
        if gpu.fabric_gpus:
            why += (f", and a wider one takes whole nodes of its NVLink fabric (a multiple of {gpus_per_node}, at "
                    f"most {gpu.fabric_gpus} GPUs)")
        return why
    if model.attention == "mla":
        if model.q_heads % tp:
            return f"{shape}: TP {tp} does not divide {model.q_heads} attention heads"
    elif model.kv_heads % tp and tp % model.kv_heads:
        return f"{shape}: TP {tp} neither divides nor is a multiple of {model.kv_heads} KV heads"
    placement = expert_placement_rejection(model, tp, ep, redundant_experts, dp)
    if placement is not None:
        return f"{shape}: {placement[1]}"
    if pp > model.layers:
        return f"{shape}: PP {pp} > {model.layers} layers"
    weights = weight_bytes_per_gpu(model, tp, pp, ep=ep, redundant_experts=redundant_experts, dp=dp)
    usable = int(gpu.memory_bytes * memory_utilization)
    if weights >= usable:
        return (f"{shape}: weights {weights / GIB:.1f} GiB per GPU > {usable / GIB:.1f} GiB usable "
                f"({memory_utilization:.0%} of {gpu.memory_bytes / GIB:.0f} GiB)")
    capacity = kv_capacity_tokens(model, gpu, tp, pp, memory_utilization, ep=ep, redundant_experts=redundant_experts,
                                  dp=dp)
    if capacity < kv_reserve_tokens:
        per = " per DP rank" if dp > 1 else ""
        return f"{shape}: KV room for {capacity} tokens{per} < reserve of {kv_reserve_tokens} tokens"
    return None
