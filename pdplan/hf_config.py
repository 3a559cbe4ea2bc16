"""A model's geometry read from its Hugging Face ``config.json``: supported architectures only,
every field the geometry needs stated (or defaulted as the architecture's transformers config class
defaults it), nothing guessed.

The field names and their defaults are those of Hugging Face transformers' configuration classes
(src/transformers/models/<model>/configuration_<model>.py: LlamaConfig, MistralConfig, MixtralConfig,
Qwen2Config, Qwen3Config, Qwen3MoeConfig, DeepseekV3Config, GptOssConfig).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

from pdplan import names
from pdplan.errors import PdplanError
from pdplan.fileio import read_text
from pdplan.modelcatalog import MAX_WEIGHT_BLOCK, checked_model, kept_in
from pdplan.modelspec import ModelSpec, default_kv_dtype, precision_suffix

#: The file a Hugging Face model repository states its architecture in.
CONFIG_NAME = "config.json"
#: Where AIConfigurator (the aic extra) keeps its copies of Hugging Face configs: ``{owner}--{name}_config.json``.
SHIPPED_PACKAGE, SHIPPED_FOLDER = "aiconfigurator_core", "model_configs"
#: How huggingface_hub's cache names a model repository's folder (``file_download.repo_folder_name``:
#: ``models--{owner}--{name}``), whose ``snapshots/{commit}/`` hold the downloaded files.
HUB_CACHE_PREFIX = "models--"

#: The model_type of each architecture read, as transformers registers it (its CONFIG_MAPPING): a config of
#: another model_type whose auto_map names an AutoConfig is code kept in its repository (Kimi-K2: kimi_k2).
_NATIVE_TYPES = {"llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "deepseek_v3", "gpt_oss"}
#: Architectures read, by the family of fields they use.
_DENSE = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"}
_MOE = {"MixtralForCausalLM", "Qwen3MoeForCausalLM", "DeepseekV3ForCausalLM", "GptOssForCausalLM"}
#: Multimodal architectures whose language model a key of their config nests (Kimi-K2.5: a DeepSeek-V3 text
#: model, its ``text_config``, beside the MoonViT vision tower's ``vision_config``).
_MULTIMODAL = {"KimiK25ForConditionalGeneration": "text_config"}
#: Architectures whose configs do not state head_dim may derive it as hidden_size / heads
#: (LlamaConfig, MistralConfig, MixtralConfig, Qwen2Config); Qwen3's classes default it to 128 instead,
#: so for them it must be stated.
_HEAD_DIM_FROM_HIDDEN = {"LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "MixtralForCausalLM"}

#: Weight precision of a config's ``quantization_config``: ``quant_method`` fp8 (block-scaled FP8,
#: DeepSeek-V3's ``weight_block_size: [128, 128]``), mxfp4 (gpt-oss), or NVIDIA ModelOpt's
#: ``quant_algo`` (FP8, NVFP4).
_QUANT_METHOD = {"fp8": "fp8", "mxfp4": "mxfp4"}
_QUANT_ALGO = {"FP8": "fp8", "NVFP4": "fp4"}
#: Modules an MXFP4 config must leave unquantized (gpt-oss's modules_to_not_convert names each).
_MXFP4_KEPT = ("self_attn", "router", "embed_tokens", "lm_head")
#: Modules a compressed-tensors int4 config must leave unquantized (Kimi-K2.5's ``ignore`` names each: attention,
#: the shared experts and the dense layers' MLP projections), and the weights per scale it groups.
_INT4_KEPT = ("self_attn", "shared_experts", "mlp")
INT4_GROUP = 32


def config_path(name_or_path: str) -> Path | None:
    """The config.json ``--model`` names: a path ending in .json, or a folder holding a config.json;
    None for anything else (a catalog name or a model YAML)."""
    path = Path(name_or_path)
    if name_or_path.endswith(".json"):
        return path
    if (path / CONFIG_NAME).is_file():
        return path / CONFIG_NAME
    return None


def hub_cache() -> Path:
    """huggingface_hub's cache folder, found as it finds it (``constants.HF_HUB_CACHE``): ``$HF_HUB_CACHE``,
    else ``$HF_HOME/hub``, else ``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache`` by default)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    home = os.environ.get("HF_HOME") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "huggingface")
    return Path(os.path.expanduser(home)) / "hub"


def hub_config(repo: str) -> Path | None:
    """The config.json of ``repo``'s main branch as the hub's cache holds it (``refs/main`` names the commit
    whose snapshot it is), else of its one snapshot; None when the cache has neither."""
    folder = hub_cache() / f"{HUB_CACHE_PREFIX}{repo.replace('/', '--')}"
    main = folder / "refs" / "main"
    if main.is_file():
        commit = read_text(main, what="hub cache ref", limit=1024).strip()
        snapshots = [folder / "snapshots" / commit] if names.revision(commit) is None else []
    else:
        snapshots = sorted(p for p in (folder / "snapshots").glob("*") if (p / CONFIG_NAME).is_file())
    found = [p / CONFIG_NAME for p in snapshots if (p / CONFIG_NAME).is_file()]
    return found[0] if len(found) == 1 else None


def shipped_config(repo: str, package: Path | None) -> Path | None:
    """AIConfigurator's copy of ``repo``'s config.json in the installed aiconfigurator_core ``package`` (None: the
    extra is not installed), None when it ships none."""
    if package is None:
        return None
    path = package / SHIPPED_FOLDER / f"{repo.replace('/', '--')}_{CONFIG_NAME}"
    return path if path.is_file() else None


def load_hf_config(path: str | Path) -> ModelSpec:
    """The ModelSpec a Hugging Face config.json describes, served at the precision its
    ``quantization_config`` states (bf16 when it states none)."""
    path = Path(path)
    text = read_text(path, what="model config")  # refuses FIFOs, devices, folders and oversize files
    return _Config(_json(text, path), path).model()


def _json(text: str, path: Path):
    """The JSON value of ``text``; malformed, too deep or over-long numbers are input errors."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise PdplanError(f"is not JSON ({exc.msg} at line {exc.lineno})", file=path, line=exc.lineno,
                          field="model") from None
    except (ValueError, RecursionError):  # an integer of thousands of digits, nesting past the stack
        raise PdplanError("is not JSON pdplan can read (nested too deep or a number too long)", file=path,
                          field="model") from None


class _Config:
    """One config.json under reading (or the language model's part of a multimodal one, ``within`` its key):
    each failure names the file and the key."""

    def __init__(self, data, path: Path, within: str = ""):
        if not isinstance(data, dict):
            raise PdplanError(f"{within or 'top level'} must be a JSON object", file=path, field=within or "model")
        self.data, self.path, self.within = data, path, within

    def fail(self, key: str, rule: str, value=None) -> PdplanError:
        got = "" if value is None else f", got {value!r}"
        key = f"{self.within}.{key}" if self.within else key
        return PdplanError(f"{key} {rule}{got}", file=self.path, field=key)

    def integer(self, key: str, default: int | None = None, *, minimum: int = 1) -> int:
        value = self.data.get(key, default)
        if value is None:
            raise self.fail(key, "is missing: pdplan needs it for the model's geometry")
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"must be an integer >= {minimum}", value)
        return value

    def architecture(self) -> str:
        arch = self.data.get("architectures")
        if not isinstance(arch, list) or len(arch) != 1 or not isinstance(arch[0], str):
            raise self.fail("architectures", "must list one architecture", arch)
        read = _DENSE | _MOE | (set() if self.within else set(_MULTIMODAL))
        if arch[0] not in read:
            raise self.fail("architectures", f"names an architecture pdplan does not read (it reads: "
                            f"{', '.join(sorted(read))})", arch[0])
        return arch[0]

    def model(self) -> ModelSpec:
        arch = self.architecture()
        if arch in _MULTIMODAL:
            return self.language_model(arch)
        layers, hidden = self.integer("num_hidden_layers"), self.integer("hidden_size")
        heads = self.integer("num_attention_heads")
        # Every class turns an explicit null into multi-head attention; LlamaConfig's default is that
        # null, the others default to a number of their own (Qwen3Config: 32), so there it must be stated.
        if "num_key_value_heads" not in self.data and arch != "LlamaForCausalLM":
            self.integer("num_key_value_heads")  # refused as missing
        kv_heads = heads if self.data.get("num_key_value_heads") is None else self.integer("num_key_value_heads")
        if heads % kv_heads:
            raise self.fail("num_key_value_heads", f"must divide num_attention_heads ({heads})", kv_heads)
        values = {"layers": layers, "hidden": hidden, "q_heads": heads, "kv_heads": kv_heads,
                  "head_dim": self.head_dim(arch, hidden, heads), "ffn": self.integer("intermediate_size"),
                  "vocab": self.integer("vocab_size"), "tied_embeddings": self.tied(),
                  **self.experts(arch), **self.latent(arch), **self.sliding(arch, layers)}
        if values.get("attention") == "mla":
            values["kv_heads"] = heads  # each head's K and V are expanded from the one latent
        weight = self.weight_dtype()
        values["weight_block"] = self.weight_block(weight)
        if self.data.get("num_nextn_predict_layers") is not None:  # DeepSeek-V3's multi-token prediction
            values["mtp_layers"] = self.integer("num_nextn_predict_layers", minimum=0)
        kv = default_kv_dtype(weight)
        repo, commit = self.hub_snapshot() or self.shipped_copy() or (None, None)
        # a snapshot is named after its repository: the catalog model kept there, else the repository's name
        name = self.name() if repo is None else self.checked_name(kept_in(repo) or repo.split("/")[1].lower())
        probe = checked_model({**values, "name": name, "parameters": 1, "weight_dtype": weight, "kv_dtype": kv},
                              self._fail_mapped)
        return checked_model({**values, "name": name + precision_suffix(weight, kv, weight),
                              "parameters": probe.geometric_parameters, "weight_dtype": weight, "kv_dtype": kv,
                              "checkpoint_dtype": weight, "hf_repo": repo, "hf_revision": commit,
                              "remote_code": self.remote_code(),
                              "source": f"{self.path.name} ({arch})"}, self._fail_mapped)

    def language_model(self, arch: str) -> ModelSpec:
        """A multimodal checkpoint planned for its text requests: the language model its config nests
        (:data:`_MULTIMODAL`), with the quantization the top level states for the whole checkpoint when the
        nested config states none (NVIDIA's NVFP4 Kimi-K2.5). The vision tower's weights are not counted."""
        key = _MULTIMODAL[arch]
        nested = self.data.get(key)
        text = dict(nested) if isinstance(nested, dict) else nested
        if isinstance(text, dict) and "quantization_config" not in text and "quantization_config" in self.data:
            text["quantization_config"] = self.data["quantization_config"]
        inner = _Config(text, self.path, within=key)
        model = inner.model()
        note = f"{self.path.name} ({arch}: its {key}, {inner.architecture()}; the vision tower not counted)"
        return replace(model, remote_code=model.remote_code or self.remote_code(), source=note)

    def _fail_mapped(self, key: str, rule: str, value) -> PdplanError:
        return self.fail(_CONFIG_KEY.get(key, key), rule, value)

    def head_dim(self, arch: str, hidden: int, heads: int) -> int:
        if arch == "DeepseekV3ForCausalLM":
            return self.integer("qk_nope_head_dim") + self.integer("qk_rope_head_dim")
        if self.data.get("head_dim") is not None or arch not in _HEAD_DIM_FROM_HIDDEN:
            return self.integer("head_dim")
        if hidden % heads:
            raise self.fail("num_attention_heads", f"must divide hidden_size ({hidden}) when head_dim is not "
                            "stated", heads)
        return hidden // heads

    def remote_code(self) -> bool:
        """The config is code in the repository: its auto_map names an AutoConfig for a model_type
        transformers does not register, which the engines load only with --trust-remote-code."""
        auto_map = self.data.get("auto_map")
        return (isinstance(auto_map, dict) and "AutoConfig" in auto_map
                and self.data.get("model_type") not in _NATIVE_TYPES)

    def tied(self) -> bool:
        value = self.data.get("tie_word_embeddings", False)  # False in every class read here
        if not isinstance(value, bool):
            raise self.fail("tie_word_embeddings", "must be true or false", value)
        return value

    def experts(self, arch: str) -> dict:
        if arch in _DENSE:
            return {}
        if arch == "DeepseekV3ForCausalLM":
            if self.integer("moe_layer_freq", 1) != 1:
                raise self.fail("moe_layer_freq", "other than 1 (MoE layers interleaved with dense ones) is not read",
                                self.data["moe_layer_freq"])
            self.expert_groups()
            return {"experts": self.integer("n_routed_experts"),
                    "experts_per_token": self.integer("num_experts_per_tok"),
                    "shared_experts": self.integer("n_shared_experts", 0, minimum=0),
                    "expert_ffn": self.integer("moe_intermediate_size"),
                    "dense_layers": self.integer("first_k_dense_replace", 0, minimum=0)}
        if arch == "Qwen3MoeForCausalLM":
            if self.integer("decoder_sparse_step", 1) != 1:
                raise self.fail("decoder_sparse_step", "other than 1 (MoE on every n-th layer) is not read",
                                self.data["decoder_sparse_step"])
            if self.data.get("mlp_only_layers"):
                raise self.fail("mlp_only_layers", "(dense layers among MoE ones) is not read",
                                self.data["mlp_only_layers"])
            return {"experts": self.integer("num_experts"), "experts_per_token": self.integer("num_experts_per_tok"),
                    "expert_ffn": self.integer("moe_intermediate_size")}
        # Mixtral and gpt-oss: every layer's MLP is num_local_experts experts of intermediate_size.
        per_token = self.integer("num_experts_per_tok")
        if arch == "GptOssForCausalLM" and self.data.get("experts_per_token", per_token) != per_token:
            raise self.fail("experts_per_token", f"contradicts num_experts_per_tok ({per_token})",
                            self.data["experts_per_token"])
        return {"experts": self.integer("num_local_experts"), "experts_per_token": per_token,
                "expert_ffn": self.integer("intermediate_size")}

    def expert_groups(self) -> None:
        """DeepSeek-V3's group-limited routing (DeepseekV3Config ``n_group`` 8, ``topk_group`` 4 by default;
        DeepSeek-V3, arXiv:2412.19437, 2.1.2): the experts split into n_group equal groups, a token's k
        experts come from its topk_group best groups, so the groups must divide the experts and hold k."""
        experts, per_token = self.integer("n_routed_experts"), self.integer("num_experts_per_tok")
        groups, chosen = self.integer("n_group", 8), self.integer("topk_group", 4)
        if experts % groups:
            raise self.fail("n_group", f"must divide n_routed_experts ({experts})", groups)
        if chosen > groups:
            raise self.fail("topk_group", f"must be <= n_group ({groups})", chosen)
        if per_token > chosen * (experts // groups):
            raise self.fail("num_experts_per_tok", f"exceeds the {chosen * (experts // groups)} experts of "
                            f"topk_group ({chosen}) groups", per_token)

    def latent(self, arch: str) -> dict:
        if arch != "DeepseekV3ForCausalLM":
            return {}
        return {"attention": "mla", "kv_lora_rank": self.integer("kv_lora_rank"),
                "q_lora_rank": self.integer("q_lora_rank", 0, minimum=0),
                "qk_rope_head_dim": self.integer("qk_rope_head_dim"),
                "qk_nope_head_dim": self.integer("qk_nope_head_dim"), "v_head_dim": self.integer("v_head_dim")}

    def sliding(self, arch: str, layers: int) -> dict:
        """Sliding-window layers: gpt-oss names each layer's kind in ``layer_types``; Mistral and
        Mixtral apply ``sliding_window`` (when not null) to every layer; Qwen2/Qwen3 with
        ``use_sliding_window`` (its ``max_window_layers`` split) are refused."""
        if arch == "GptOssForCausalLM":
            kinds = self.data.get("layer_types")
            if not isinstance(kinds, list) or len(kinds) != layers:
                raise self.fail("layer_types", f"must list the kind of each of the {layers} layers", kinds)
            unknown = sorted({k for k in kinds if k not in ("sliding_attention", "full_attention")}, key=str)
            if unknown:
                raise self.fail("layer_types", "holds an attention kind pdplan does not read (it reads "
                                "sliding_attention, full_attention)", unknown[0])
            sliding = tuple(i for i, kind in enumerate(kinds) if kind == "sliding_attention")
            return {"sliding_window": self.integer("sliding_window"), "sliding_layers": sliding} if sliding else {}
        if self.data.get("use_sliding_window"):
            raise self.fail("use_sliding_window", "true (sliding window on some layers) is not read", True)
        if arch in ("MistralForCausalLM", "MixtralForCausalLM") and self.data.get("sliding_window") is not None:
            return {"sliding_window": self.integer("sliding_window"), "sliding_layers": tuple(range(layers))}
        return {}

    def weight_dtype(self) -> str:
        quant = self.data.get("quantization_config")
        if quant is None:
            return self.modelopt_dtype()

        if not isinstance(quant, dict):
            raise self.fail("quantization_config", "must be an object", quant)
        method, algo = quant.get("quant_method"), quant.get("quant_algo")
        if method in _QUANT_METHOD:
            return _QUANT_METHOD[method]
        if method == "compressed-tensors":
            return self.compressed_tensors_dtype(quant)
        if method in (None, "modelopt") and algo in _QUANT_ALGO:
            return _QUANT_ALGO[algo]
        if method in (None, "modelopt"):
            raise self.fail("quantization_config.quant_algo", f"is a quantization pdplan does not read (it reads "
                            f"{', '.join(_QUANT_ALGO)})", algo)
        raise self.fail("quantization_config.quant_method", f"is a quantization pdplan does not read (it reads "
                        f"{', '.join([*_QUANT_METHOD, 'modelopt', 'compressed-tensors'])})", method)

    def compressed_tensors_dtype(self, quant: dict) -> str:
        """int4 for the one compressed-tensors scheme pdplan reads, Kimi-K2.5's W4A16: one config group of
        symmetric 4-bit integer weights in groups of :data:`INT4_GROUP` (one bf16 scale each, the bytes
        :data:`pdplan.modelspec.WEIGHT_BYTES` counts), activations left in 16 bits, and ``ignore`` keeping
        attention, shared experts and dense MLPs whole: pdplan models int4 on the routed experts only
        (:data:`pdplan.modelspec.EXPERTS_ONLY_DTYPES`). Any other scheme is refused naming its key."""
        groups = quant.get("config_groups")
        if not isinstance(groups, dict) or len(groups) != 1 or not isinstance(next(iter(groups.values())), dict):
            raise self.fail("quantization_config.config_groups", "must hold one group (pdplan reads "
                            "compressed-tensors' W4A16 int4 scheme only)", groups)
        name, group = next(iter(groups.items()))
        weights, where = group.get("weights"), f"quantization_config.config_groups.{name}"
        wanted = {"type": "int", "num_bits": 4, "strategy": "group", "group_size": INT4_GROUP, "symmetric": True}
        if not isinstance(weights, dict) or any(weights.get(k) != v for k, v in wanted.items()):
            raise self.fail(f"{where}.weights", "must be symmetric 4-bit integers in groups of "
                            f"{INT4_GROUP} (pdplan reads compressed-tensors' W4A16 int4 scheme only)", weights)
        if group.get("input_activations") is not None:
            raise self.fail(f"{where}.input_activations", "must be null: pdplan reads W4A16 (activations in 16 bits) "
                            "only", group.get("input_activations"))
        ignored = quant.get("ignore")
        if not isinstance(ignored, list) or not all(isinstance(k, str) for k in ignored):
            raise self.fail("quantization_config.ignore", "must list the modules int4 leaves unquantized", ignored)
        missing = [part for part in _INT4_KEPT if not any(part in k for k in ignored)]
        if missing:
            raise self.fail("quantization_config.ignore", f"must keep {', '.join(missing)} unquantized: pdplan models "
                            "int4 on the routed experts only", ignored)
        return "int4"

    def weight_block(self, weight: str) -> int:
        """Block size of block-scaled FP8 (``quantization_config.weight_block_size``, square blocks, as
        DeepSeek-V3's [128, 128]); 0 for per-tensor scales or another precision. An MXFP4 config must keep
        attention, router, embedding and head unquantized, as gpt-oss's ``modules_to_not_convert`` does:
        pdplan models MXFP4 on the routed experts only (:data:`pdplan.modelspec.EXPERTS_ONLY_DTYPES`)."""
        quant = self.data.get("quantization_config")
        if not isinstance(quant, dict):
            return 0
        if weight == "mxfp4":
            kept = quant.get("modules_to_not_convert")
            if not isinstance(kept, list) or not all(isinstance(k, str) for k in kept):
                raise self.fail("quantization_config.modules_to_not_convert", "must list the modules MXFP4 leaves "
                                "unquantized", kept)
            missing = [part for part in _MXFP4_KEPT if not any(part in k for k in kept)]
            if missing:
                raise self.fail("quantization_config.modules_to_not_convert", f"must keep {', '.join(missing)} "
                                "unquantized: pdplan models MXFP4 on the routed experts only", kept)
            return 0
        block = quant.get("weight_block_size")
        if weight != "fp8" or block is None:
            return 0
        if (not isinstance(block, list) or len(block) != 2 or block[0] != block[1]
                or any(isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_WEIGHT_BLOCK
                       for b in block)):
            raise self.fail("quantization_config.weight_block_size", f"must be two equal block sides in "
                            f"[1, {MAX_WEIGHT_BLOCK}]", block)
        return block[0]

    def modelopt_dtype(self) -> str:
        """The precision NVIDIA ModelOpt checkpoints state beside config.json, in
        hf_quant_config.json's ``quantization.quant_algo``; bf16 (an unquantized checkpoint is served
        in 16 bits) when there is no such file."""
        sibling = self.path.with_name(self.path.name[: -len(CONFIG_NAME)] + "hf_quant_config.json")
        if not self.path.name.endswith(CONFIG_NAME) or not sibling.is_file():
            return "bf16"
        top = _json(read_text(sibling, what="quantization config"), sibling)
        quant = top.get("quantization") if isinstance(top, dict) else None
        algo = quant.get("quant_algo") if isinstance(quant, dict) else None
        if algo not in _QUANT_ALGO:
            raise PdplanError(f"quantization.quant_algo is a quantization pdplan does not read (it reads "
                              f"{', '.join(_QUANT_ALGO)}), got {algo!r}", file=sibling, field="quantization.quant_algo")
        return _QUANT_ALGO[algo]

    def name(self) -> str:
        """The model's name: the folder holding a config.json, or the file's stem without a
        ``_config`` suffix (``deepseek-ai--DeepSeek-V3_config.json`` → ``deepseek-ai--deepseek-v3``)."""
        stem = self.path.parent.name if self.path.name == CONFIG_NAME else re.sub(r"[_-]?config$", "", self.path.stem)
        return self.checked_name(stem.lower())

    def checked_name(self, name: str) -> str:
        problem = names.model_name(name)
        if problem:
            raise PdplanError(f"the model name taken from the file name, {name!r}, {problem}; rename the file or "
                              "its folder", file=self.path, field="model")
        return name

    def shipped_copy(self) -> tuple[str, None] | None:
        """The Hugging Face repository whose config.json this is when it is AIConfigurator's copy of it (the aic
        extra ships them as ``aiconfigurator_core/model_configs/{owner}--{name}_config.json``), at no known commit;
        else None. As for a hub snapshot, the repository names the model and is the checkpoint the engines load."""
        parent = Path(os.path.abspath(self.path.parent))
        if parent.name != SHIPPED_FOLDER or parent.parent.name != SHIPPED_PACKAGE:
            return None
        if not self.path.name.endswith(f"_{CONFIG_NAME}"):
            return None
        owner, separator, name = self.path.name.removesuffix(f"_{CONFIG_NAME}").partition("--")
        repo = f"{owner}/{name}"
        return None if not separator or names.hf_repo(repo) is not None else (repo, None)

    def hub_snapshot(self) -> tuple[str, str] | None:
        """The Hugging Face repository and commit whose downloaded snapshot holds this config.json
        (``…/models--Qwen--Qwen3-235B-A22B/snapshots/<commit>/config.json`` → ``Qwen/Qwen3-235B-A22B``),
        else None. The repository names the model (not the commit's folder) and is the checkpoint the
        engines load, at that commit."""
        if self.path.name != CONFIG_NAME:
            return None
        # the folders as named, not resolved: the cache links each file to a blob elsewhere
        folders = Path(os.path.abspath(self.path.parent)).parts
        if len(folders) < 3 or folders[-2] != "snapshots" or not folders[-3].startswith(HUB_CACHE_PREFIX):
            return None
        owner, separator, name = folders[-3][len(HUB_CACHE_PREFIX):].partition("--")
        repo, commit = f"{owner}/{name}", folders[-1]
        if not separator or names.hf_repo(repo) is not None or names.revision(commit) is not None:
            return None
        return repo, commit


#: ModelSpec field → the config.json key that states it (for errors found by the shared checks).
_CONFIG_KEY = {"layers": "num_hidden_layers", "hidden": "hidden_size", "q_heads": "num_attention_heads",
               "kv_heads": "num_key_value_heads", "ffn": "intermediate_size", "vocab": "vocab_size",
               "experts_per_token": "num_experts_per_tok", "shared_experts": "n_shared_experts",
               "dense_layers": "first_k_dense_replace", "sliding_window": "sliding_window",
               "sliding_layers": "layer_types"}
