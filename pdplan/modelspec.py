"""Transformer geometry and what it implies: weight bytes, KV bytes, memory fit and phase work."""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, fields, replace
from functools import cache
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

from pdplan import names
from pdplan.errors import InternalError, PdplanError
from pdplan.fileio import load_yaml
from pdplan.hardware import GIB, GPU
from pdplan.schema import Fields, shown
from pdplan.shape import shape_label

#: Bytes one weight takes per dtype. fp4 is NVFP4: 4-bit values plus one 8-bit (E4M3) scale per 16 of
#: them, (16·4 + 8)/16 = 4.5 bits. mxfp4 is the OCP Microscaling MXFP4 that gpt-oss ships: 4-bit (E2M1)
#: values plus one 8-bit (E8M0) scale per block of 32, (32·4 + 8)/32 = 4.25 bits = 0.53125 B (OCP
#: Microscaling Formats (MX) v1.0 specification, table 1; openai/gpt-oss model card, "MXFP4").
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5625, "mxfp4": 0.53125}
#: Bytes one K or V scalar takes per dtype.
KV_BYTES = {"bf16": 2, "fp8": 1}
#: Bytes of one activation element (what TP all-reduces and PP sends move).
ACTIVATION_BYTES = 2
#: Bytes of one embedding or output-head weight: quantized checkpoints keep them in bf16.
EDGE_WEIGHT_BYTES = 2


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
    mlp_matrices: int = 3  #: 3 for gated (SwiGLU) MLPs, 2 for plain (ReLU/GELU) MLPs
    tied_embeddings: bool = False  #: input embedding and output head share one matrix
    source: str = ""
    hf_repo: str | None = None  #: its Hugging Face repository, ``owner/name``; None when no hub holds it
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

    def __post_init__(self):
        for name in ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "vocab", "parameters"):
            if getattr(self, name) < 1:
                raise InternalError(f"model {self.name}: {name} must be >= 1")
        if self.weight_dtype not in WEIGHT_BYTES or self.kv_dtype not in KV_BYTES:
            raise InternalError(f"model {self.name}: weight dtype must be one of {', '.join(WEIGHT_BYTES)} and KV "
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

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    def timing_refusal(self) -> str | None:
        """Why pdplan's step-time and memory models (dense decoders: every weight used by every
        token, K and V heads in the cache, every layer's KV growing with the context) would give
        wrong numbers for this model; None when they hold."""
        if self.is_moe:
            return (f"{self.base_name}: step times and memory of mixture-of-experts models are not modelled yet "
                    f"({self.experts} routed experts, {self.experts_per_token} per token)")
        if self.attention != "gqa":
            return (f"{self.base_name}: step times and memory of multi-head latent attention are not modelled yet "
                    f"(cache of kv_lora_rank {self.kv_lora_rank} + qk_rope_head_dim {self.qk_rope_head_dim})")
        if self.sliding_layers:
            return (f"{self.base_name}: step times and memory of sliding-window attention are not modelled yet "
                    f"({len(self.sliding_layers)} layers with a {self.sliding_window}-token window)")
        if self.weight_dtype == "mxfp4":
            return f"{self.base_name}: step times of MXFP4 weights are not modelled yet (use --dtype fp4 or fp8)"
        return None

    def require_timeable(self) -> None:
        """Refuse (exit 2) a model whose step times or memory the dense formulas would get wrong."""
        why = self.timing_refusal()
        if why is not None:
            raise PdplanError(why, field="model")

    @property
    def params_per_layer(self) -> int:
        """P_layer of 0x02A: Q, K/V, output projection and the MLP matrices of one dense block
        (the step-time formulas' term; refused for models they do not describe)."""
        self.require_timeable()
        return self.attention_params_per_layer + self.mlp_matrices * self.hidden * self.ffn

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
        return WEIGHT_BYTES[self.weight_dtype]

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
        """All weights, as published (norms included in the blocks)."""
        return self.weight_bytes_of(self.parameters - self.embedding_params, self.embedding_params)

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
        return replace(self, name=self.base_name + precision_suffix(weight, kv), weight_dtype=weight, kv_dtype=kv)


PRECISION_MARK = "@"
#: The model planned for when none is named (optimize, sensitivity grids).
DEFAULT_MODEL = "llama2-70b"


def default_kv_dtype(weight_dtype: str) -> str:
    """The KV precision that goes with a weight precision unless stated: fp8 for quantized weights."""
    return "fp8" if weight_dtype in ("fp8", "fp4", "mxfp4") else "bf16"


def precision_suffix(weight_dtype: str, kv_dtype: str) -> str:
    """``""`` for bf16 weights and KV, ``@fp8`` when the KV follows fp8 weights, else both named."""
    if (weight_dtype, kv_dtype) == ("bf16", "bf16"):
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


# --- sharding over tensor (TP) and pipeline (PP) parallelism -------------------------------------

def layers_on_largest_stage(model: ModelSpec, pp: int) -> int:
    """Layers on the busiest pipeline stage: an uneven split gives the first stages one extra."""
    return math.ceil(model.layers / pp)


def kv_heads_per_gpu(model: ModelSpec, tp: int) -> int:
    """K/V heads each TP rank stores: H_kv/tp, or one replicated head when tp > H_kv."""
    model.require_timeable()
    return math.ceil(model.kv_heads / tp)


def weight_bytes_per_gpu(model: ModelSpec, tp: int, pp: int) -> int:
    """Weight bytes on the fullest GPU of a (tp, pp) instance.

    Blocks split evenly over TP ranks and by whole layers over PP stages; the embedding and the
    output head are vocabulary-parallel over TP and sit on the first and last stage (both on one
    stage when pp = 1, shared when tied).
    """
    if pp == 1:
        edge_matrices = 1 if model.tied_embeddings else 2
    else:
        edge_matrices = 1
    block_params = layers_on_largest_stage(model, pp) * model.params_per_layer
    edge_params = edge_matrices * model.vocab * model.hidden
    return model.weight_bytes_of(block_params, edge_params, tp)


def kv_bytes_per_token_per_gpu(model: ModelSpec, tp: int, pp: int) -> int:
    """KV bytes one token occupies on the fullest GPU of a (tp, pp) instance."""
    return kv_bytes_per_token(layers_on_largest_stage(model, pp), kv_heads_per_gpu(model, tp),
                              model.head_dim, model.kv_scalar_bytes)


def kv_capacity_tokens(model: ModelSpec, gpu: GPU, tp: int, pp: int,
                       memory_utilization: float = 0.9) -> int:
    """Tokens of KV an instance can hold: (utilised HBM − weights) / KV bytes per token, per GPU.

    ``memory_utilization`` is the fraction of HBM the engine may use (vLLM's
    ``gpu_memory_utilization``); the rest covers activations, CUDA graphs and fragmentation.
    Returns 0 when the weights alone do not fit.
    """
    if not 0 < memory_utilization <= 1:
        raise InternalError("memory_utilization must be in (0, 1]")
    free = int(gpu.memory_bytes * memory_utilization) - weight_bytes_per_gpu(model, tp, pp)
    return max(0, free // kv_bytes_per_token_per_gpu(model, tp, pp))


def shape_rejection(model: ModelSpec, gpu: GPU, tp: int, pp: int, *, gpus_per_node: int | None = None,
                    memory_utilization: float = 0.9, kv_reserve_tokens: int = 0) -> str | None:
    """Why (tp, pp) on ``gpu`` cannot serve ``model``, in one sentence; None when it can.

    Rules: the GPU runs the weight precision; a TP group stays inside one node; TP divides the K/V heads
    or is a multiple of them (then heads are replicated); PP is at most the layer count (uneven splits
    are allowed); the weights plus a reserve of ``kv_reserve_tokens`` of KV fit the utilised memory.
    """
    model.require_timeable()
    shape = shape_label(gpu.name, tp, pp)
    if tp < 1 or pp < 1:
        return f"{shape}: TP and PP must be >= 1"
    if model.weight_dtype not in gpu.dtypes:
        return f"{shape}: {gpu.name} has no {model.weight_dtype} tensor cores (it runs {', '.join(gpu.dtypes)})"
    if gpus_per_node is not None and tp > gpus_per_node:
        return f"{shape}: TP {tp} > {gpus_per_node} GPUs per node"
    if model.kv_heads % tp and tp % model.kv_heads:
        return f"{shape}: TP {tp} neither divides nor is a multiple of {model.kv_heads} KV heads"
    if pp > model.layers:
        return f"{shape}: PP {pp} > {model.layers} layers"
    weights = weight_bytes_per_gpu(model, tp, pp)
    usable = int(gpu.memory_bytes * memory_utilization)
    if weights >= usable:
        return (f"{shape}: weights {weights / GIB:.1f} GiB per GPU > {usable / GIB:.1f} GiB usable "
                f"({memory_utilization:.0%} of {gpu.memory_bytes / GIB:.0f} GiB)")
    capacity = kv_capacity_tokens(model, gpu, tp, pp, memory_utilization)
    if capacity < kv_reserve_tokens:
        return f"{shape}: KV room for {capacity} tokens < reserve of {kv_reserve_tokens} tokens"
    return None


# --- catalog -------------------------------------------------------------------------------------

_MODEL_FIELDS = {"name", "layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "vocab",
                 "parameters", "dtype_bytes", "weight_dtype", "kv_dtype", "mlp_matrices", "tied_embeddings",
                 "source", "hf_repo", "experts", "experts_per_token", "shared_experts", "expert_ffn",
                 "dense_layers", "attention", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                 "v_head_dim", "sliding_window", "sliding_layers"}
#: Optional geometry of mixture-of-experts and latent attention, with the largest value a file may state.
_EXTRA_LIMITS = {"experts": 2**16, "experts_per_token": 2**16, "shared_experts": 2**16, "expert_ffn": 2**22,
                 "dense_layers": 10_000, "kv_lora_rank": 2**16, "q_lora_rank": 2**16, "qk_rope_head_dim": 2**14,
                 "qk_nope_head_dim": 2**14, "v_head_dim": 2**14, "sliding_window": 10_000_000}
#: The first model format's ``dtype_bytes`` (one size for weights and KV) as dtypes.
_DTYPE_OF_BYTES = {2: "bf16", 1: "fp8"}

#: Largest value of each geometry field a model file may state (beyond any model built).
GEOMETRY_LIMITS = {"layers": 10_000, "hidden": 2**20, "q_heads": 2**16, "kv_heads": 2**16, "head_dim": 2**14,
                   "ffn": 2**22, "vocab": 2**24, "parameters": 10**14}

#: KV bytes one token may occupy (any model built holds a few MiB): with at most 10,000,000
#: tokens per request, every byte count the simulator forms stays an int64.
MAX_KV_BYTES_PER_TOKEN = 2**32

#: A model file's parameter count may differ from its geometry by this much (norms, biases).
PARAMETER_TOLERANCE = 0.02


def load_model(path: str | Path) -> ModelSpec:
    """Read and validate one model YAML; the geometry must agree with the parameter count. Its
    Hugging Face repository (``hf_repo``) is optional and must be a repository id."""
    spec = Fields(load_yaml(path, what="model file"), path)
    spec.reject_unknown(_MODEL_FIELDS)
    ints = {key: spec.integer(key, minimum=1, maximum=GEOMETRY_LIMITS[key]) for key in GEOMETRY_LIMITS}
    tied = spec.data.get("tied_embeddings", False)
    if not isinstance(tied, bool):
        raise spec.fail("tied_embeddings", "must be true or false", tied)
    if ints["q_heads"] % ints["kv_heads"]:
        raise spec.fail("kv_heads", f"must divide q_heads ({ints['q_heads']})", ints["kv_heads"])
    name = spec.string("name")
    if PRECISION_MARK in name:
        raise spec.fail("name", f"may not hold {PRECISION_MARK!r}: pdplan adds the precision to the name itself", name)
    if names.model_name(name):
        raise spec.fail("name", names.model_name(name), name)
    hf_repo = spec.string("hf_repo") if spec.has("hf_repo") else None
    if hf_repo is not None and names.hf_repo(hf_repo):
        raise spec.fail("hf_repo", names.hf_repo(hf_repo), shown(hf_repo))
    legacy = _DTYPE_OF_BYTES[spec.integer("dtype_bytes", 2, minimum=1, maximum=2)]
    weight = spec.string("weight_dtype", legacy, choices=list(WEIGHT_BYTES))
    kv = spec.string("kv_dtype", default_kv_dtype(weight) if spec.has("weight_dtype") else legacy,
                     choices=list(KV_BYTES))
    model = checked_model(dict(
        name=name + precision_suffix(weight, kv),
        weight_dtype=weight,
        kv_dtype=kv,
        mlp_matrices=spec.integer("mlp_matrices", 3, minimum=2, maximum=3),
        tied_embeddings=tied,
        source=str(spec.data.get("source", "")),
        hf_repo=hf_repo,
        attention=spec.string("attention", "gqa", choices=list(ATTENTION_KINDS)),
        sliding_layers=_layer_list(spec, "sliding_layers", ints["layers"]),
        **{key: spec.integer(key, 0, minimum=0, maximum=top) for key, top in _EXTRA_LIMITS.items()},
        **ints,
    ), lambda key, rule, value: spec.fail(key, rule, value))
    mismatch = model.geometric_parameters / model.parameters - 1
    if abs(mismatch) > PARAMETER_TOLERANCE:
        raise spec.fail("parameters", f"disagrees with the geometry ({model.geometric_parameters:,} "
                        f"parameters, {mismatch:+.1%})", model.parameters)
    return model


_OPTIONAL_DEFAULTS = {f.name: f.default for f in fields(ModelSpec) if f.default is not MISSING}


def _layer_list(spec: Fields, key: str, layers: int) -> tuple[int, ...]:
    value = spec.data.get(key, [])
    if not isinstance(value, list) or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < layers
                                          for i in value) or len(set(value)) != len(value):
        raise spec.fail(key, f"must be a list of distinct layer indices in [0, {layers})", shown(value))
    return tuple(sorted(value))


def checked_model(values: dict, fail) -> ModelSpec:
    """The ModelSpec of ``values`` when its optional geometry agrees with itself; else
    ``fail(key, rule, value)``, the PdplanError naming the file and key that states it (a model
    YAML or a config.json)."""
    model = SimpleNamespace(**{**_OPTIONAL_DEFAULTS, **values})
    if model.experts:
        if not 1 <= model.experts_per_token <= model.experts:
            raise fail("experts_per_token", f"must be in [1, experts = {model.experts}]", model.experts_per_token)
        if model.expert_ffn < 1:
            raise fail("expert_ffn", "must be >= 1 for a mixture-of-experts model", model.expert_ffn)
        if model.dense_layers >= model.layers:
            raise fail("dense_layers", f"must be < layers ({model.layers})", model.dense_layers)
    else:
        for key in ("experts_per_token", "shared_experts", "expert_ffn", "dense_layers"):
            if getattr(model, key):
                raise fail(key, "needs routed experts (experts >= 1)", getattr(model, key))
    if model.attention == "mla":
        for key in ("kv_lora_rank", "qk_rope_head_dim", "v_head_dim"):
            if getattr(model, key) < 1:
                raise fail(key, "must be >= 1 for multi-head latent attention", getattr(model, key))
    if bool(model.sliding_window) != bool(model.sliding_layers):
        raise fail("sliding_window" if model.sliding_layers else "sliding_layers",
                   "and the sliding-window layers are stated together", model.sliding_window or [])
    model = ModelSpec(**values)
    if model.kv_bytes_per_token > MAX_KV_BYTES_PER_TOKEN:  # keeps every KV byte count an int64
        raise fail("kv_heads", f"gives {model.kv_bytes_per_token:,} KV bytes per token, more than the "
                   f"{MAX_KV_BYTES_PER_TOKEN:,} pdplan plans for", model.kv_heads)
    return model


@cache
def model_catalog() -> dict[str, ModelSpec]:
    """The embedded models, by name."""
    folder = resources.files("pdplan") / "catalog" / "models"
    models = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            with resources.as_file(entry) as path:
                model = load_model(path)
            models[model.name] = model
    return models


def _geometry(model: ModelSpec) -> tuple:
    return (model.layers, model.hidden, model.q_heads, model.kv_heads, model.head_dim, model.ffn,
            model.vocab, model.mlp_matrices, *(getattr(model, k) for k in _EXTRA_LIMITS), model.attention,
            model.sliding_layers)


def model_file(name_or_path: str | None) -> Path | None:
    """The model file ``--model`` names, or None for a catalog name: a name ending in .yaml or
    .yml is a model YAML, one ending in .json (or a folder holding config.json) a Hugging Face
    config (commands check their outputs against it)."""
    if name_or_path is None:
        return None
    if name_or_path.endswith((".yaml", ".yml")):
        return Path(name_or_path)
    from pdplan.hf_config import config_path  # reads ModelSpec: imported here, not at the top
    return config_path(name_or_path)


def get_model(name_or_path: str, *, dtype: str | None = None, kv_dtype: str | None = None) -> ModelSpec:
    """An embedded model by name (``llama-3.1-70b``, or at a precision: ``llama-3.1-70b@fp8``), a
    user's model YAML by path, or a Hugging Face config.json (or a folder holding one) by path, at the
    precision its quantization_config states; ``dtype``/``kv_dtype`` set the precision it is served at."""
    catalog = model_catalog()
    path = model_file(name_or_path)
    if path is not None:
        if path.suffix == ".json":
            from pdplan.hf_config import load_hf_config
            model = load_hf_config(path)
        else:
            model = load_model(path)
        known = catalog.get(model.base_name)
        if known is not None and _geometry(known) != _geometry(model):
            # Profiles are matched by model name: a different model under a catalog name would
            # silently borrow the catalog model's measured latencies.
            raise PdplanError(f"name {model.base_name!r} is a catalog model with a different geometry; give "
                              "your model its own name", file=path, field="name")
    else:
        base, _, suffix = name_or_path.partition(PRECISION_MARK)
        if base not in catalog:
            raise PdplanError(f"unknown model {base!r} (known: {', '.join(sorted(catalog))}; "
                              "or pass a model YAML, or a Hugging Face config.json or its folder)", field="model")
        model = catalog[base]
        if suffix:
            weight, kv = parse_precision(suffix)
            model = model.at_precision(weight, kv)
    return model if dtype is None and kv_dtype is None else model.at_precision(dtype, kv_dtype)
