"""The model catalog and model YAML files: the embedded models and a user's model YAML, each read into
a :class:`~pdplan.modelspec.ModelSpec` at the precision it is served at (a Hugging Face config.json:
:mod:`pdplan.hf_config`; what ``--model`` names: :mod:`pdplan.modelref`)."""

from __future__ import annotations

from dataclasses import MISSING, fields
from functools import cache
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

from pdplan import names
from pdplan.fileio import load_yaml
from pdplan.modelspec import (
    ATTENTION_KINDS,
    KV_BYTES,
    PRECISION_MARK,
    WEIGHT_BYTES,
    ModelSpec,
    default_kv_dtype,
    precision_suffix,
)
from pdplan.schema import Fields, shown

_MODEL_FIELDS = {"name", "layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "vocab",
                 "parameters", "dtype_bytes", "weight_dtype", "kv_dtype", "checkpoint_dtype", "mlp_matrices",
                 "tied_embeddings", "source", "hf_repo", "remote_code",
                 "experts", "experts_per_token", "shared_experts", "expert_ffn",
                 "dense_layers", "attention", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim",
                 "v_head_dim", "sliding_window", "sliding_layers", "weight_block", "mtp_layers"}
#: Optional geometry of mixture-of-experts and latent attention, with the largest value a file may state.
#: Most multi-token-prediction modules a model may state (DeepSeek-V3 ships one).
MAX_MTP_LAYERS = 64
_EXTRA_LIMITS = {"experts": 2**16, "experts_per_token": 2**16, "shared_experts": 2**16, "expert_ffn": 2**22,
                 "dense_layers": 10_000, "kv_lora_rank": 2**16, "q_lora_rank": 2**16, "qk_rope_head_dim": 2**14,
                 "qk_nope_head_dim": 2**14, "v_head_dim": 2**14, "sliding_window": 10_000_000}
#: Largest FP8 scale block a model may state (DeepSeek-V3's is 128).
MAX_WEIGHT_BLOCK = 4096
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
    Hugging Face repository (``hf_repo``) is optional and must be a repository id; so is the precision
    its checkpoint stores the weights at (``checkpoint_dtype``, bf16 when not stated), which the model
    is served at unless ``weight_dtype`` says otherwise."""
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
    checkpoint = spec.string("checkpoint_dtype", "bf16", choices=list(WEIGHT_BYTES))
    # Served at its checkpoint's precision unless the file says otherwise (as a config.json's
    # quantization_config does, pdplan.hf_config).
    weight = spec.string("weight_dtype", legacy if spec.has("dtype_bytes") else checkpoint, choices=list(WEIGHT_BYTES))
    stated = spec.has("weight_dtype") or spec.has("checkpoint_dtype")
    kv = spec.string("kv_dtype", default_kv_dtype(weight) if stated else legacy, choices=list(KV_BYTES))
    model = checked_model(dict(
        name=name + precision_suffix(weight, kv, checkpoint),
        weight_dtype=weight,
        kv_dtype=kv,
        checkpoint_dtype=checkpoint,
        mlp_matrices=spec.integer("mlp_matrices", 3, minimum=2, maximum=3),
        tied_embeddings=tied,
        source=str(spec.data.get("source", "")),
        hf_repo=hf_repo,
        remote_code=spec.boolean("remote_code", False),
        attention=spec.string("attention", "gqa", choices=list(ATTENTION_KINDS)),
        sliding_layers=_layer_list(spec, "sliding_layers", ints["layers"]),
        weight_block=spec.integer("weight_block", 0, minimum=0, maximum=MAX_WEIGHT_BLOCK),
        mtp_layers=spec.integer("mtp_layers", 0, minimum=0, maximum=MAX_MTP_LAYERS),
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
    """The embedded models, by name without precision (each at its checkpoint's precision)."""
    folder = resources.files("pdplan") / "catalog" / "models"
    models = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".yaml"):
            with resources.as_file(entry) as path:
                model = load_model(path)
            models[model.base_name] = model
    return models


def kept_in(repo: str) -> str | None:
    """The name of the catalog model whose Hugging Face repository ``repo`` is (``moonshotai/Kimi-K2-Instruct``
    → ``kimi-k2``), or None."""
    return next((name for name, model in model_catalog().items() if model.hf_repo == repo), None)


def geometry(model: ModelSpec) -> tuple:
    """What a model's latencies depend on: two models with the same name must agree on it."""
    return (model.layers, model.hidden, model.q_heads, model.kv_heads, model.head_dim, model.ffn,
            model.vocab, model.mlp_matrices, *(getattr(model, k) for k in _EXTRA_LIMITS), model.attention,
            model.sliding_layers)
