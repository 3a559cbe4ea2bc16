"""Exports start the engines at the precision the plan was made and verified at: the KV-cache dtype of
its KV-cache ABI, and the checkpoint quantized at load when the plan's weights are below it. Flags are
compared with the engines' own lists of accepted values, quoted from their sources."""

import copy

import pytest

from pdplan.errors import PdplanError
from pdplan.manifest.build import kv_cache_abi
from pdplan.manifest.document import schema_errors
from pdplan.manifest.export import FORMATS, export_manifest
from pdplan.modelref import get_model
from tests.test_manifest_export import _tokens

#: vLLM 0.33.0, vllm/config/cache.py ``CacheDType`` (the values of --kv-cache-dtype; excerpt).
VLLM_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")
#: vLLM 0.33.0, vllm/config/quantization.py ``_ONLINE_SHORTHANDS``: --quantization names that quantize
#: a checkpoint as it loads; fp8_per_tensor, fp8_per_block and fp8_per_channel cover linear and MoE layers.
VLLM_ONLINE_FP8 = ("fp8_per_tensor", "fp8_per_block", "fp8_per_channel")
#: SGLang 0.5.23, python/sglang/srt/arg_groups/fields/model.py: the choices of --kv-cache-dtype.
SGLANG_KV_CACHE_DTYPES = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
#: SGLang 0.5.23, python/sglang/srt/arg_groups/choices.py QUANTIZATION_CHOICES: "fp8", "MOE + linear
#: online quantization".
SGLANG_ONLINE_FP8 = "fp8"


def planned(manifest: dict, model: str, *, checkpoint: str | None, checkpoint_dtype: str | None = None) -> dict:
    """``manifest`` as if planned for catalog ``model`` (a name with its precision); its checkpoint
    ``checkpoint`` at ``checkpoint_dtype`` (None: a manifest written before it was recorded)."""
    spec = get_model(model)
    edited = copy.deepcopy(manifest)
    identity = edited["identity"]
    identity.update(model=spec.name, weights_dtype=spec.weight_dtype, kv_cache=kv_cache_abi(spec),
                    kv_bytes_per_token=spec.kv_bytes_per_token)
    identity["checkpoint"] = {"id": checkpoint or spec.hf_repo, "revision": "unknown"}
    if checkpoint_dtype is not None:
        identity["checkpoint"]["dtype"] = checkpoint_dtype
    for pool in edited["pools"]:
        pool["model"] = spec.name
    return edited


def flag_values(files: dict[str, str], flag: str) -> list[str]:
    """The value after ``flag`` in every command of an export that starts an engine."""
    return [tokens[i + 1] for tokens in _tokens(files) for i, token in enumerate(tokens) if token == flag]


def engine_commands(files: dict[str, str]) -> int:
    return sum(1 for tokens in _tokens(files) if "--tensor-parallel-size" in tokens or "--tp-size" in tokens)


@pytest.mark.parametrize("fmt", FORMATS)
def test_an_fp8_kv_plan_starts_every_engine_with_an_fp8_kv_cache(colocated, fmt):
    files = export_manifest(planned(colocated, "llama2-70b@fp8", checkpoint=None, checkpoint_dtype="bf16"), fmt)
    values = flag_values(files, "--kv-cache-dtype")
    assert len(values) == engine_commands(files) >= 1
    if fmt == "sglang":
        assert set(values) == {"fp8_e4m3"} and "fp8_e4m3" in SGLANG_KV_CACHE_DTYPES
    else:
        assert set(values) == {"fp8"} and "fp8" in VLLM_KV_CACHE_DTYPES


@pytest.mark.parametrize("fmt, dtype", [("vllm", "bfloat16"), ("sglang", "bfloat16")])
def test_a_bf16_kv_plan_states_bf16_rather_than_the_engines_auto(colocated, fmt, dtype):
    """vLLM's "auto" follows the checkpoint's KV quantization where it states one
    (vllm/utils/torch_utils.py resolve_kv_cache_dtype_string), so bf16 is stated."""
    values = flag_values(export_manifest(colocated, fmt), "--kv-cache-dtype")
    assert values and set(values) == {dtype}
    assert dtype in (SGLANG_KV_CACHE_DTYPES if fmt == "sglang" else VLLM_KV_CACHE_DTYPES)


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_an_fp8_plan_of_a_bf16_checkpoint_quantizes_it_as_it_loads(colocated, fmt):
    files = export_manifest(planned(colocated, "llama2-70b@fp8", checkpoint=None, checkpoint_dtype="bf16"), fmt)
    values = flag_values(files, "--quantization")
    assert len(values) == engine_commands(files)
    if fmt == "sglang":
        assert set(values) == {SGLANG_ONLINE_FP8}
    else:
        assert len(set(values)) == 1 and values[0] in VLLM_ONLINE_FP8


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_checkpoint_at_the_plans_precision_is_loaded_as_it_is(colocated, fmt):
    """DeepSeek-V3 ships block-scaled FP8: the engine reads its quantization_config, no flag."""
    files = export_manifest(planned(colocated, "deepseek-v3@fp8", checkpoint=None, checkpoint_dtype="fp8"), fmt)
    assert flag_values(files, "--quantization") == []


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_a_manifest_without_the_checkpoints_precision_takes_the_catalogs(colocated, fmt):
    fp8_repo = planned(colocated, "deepseek-v3@fp8", checkpoint=None)
    assert flag_values(export_manifest(fp8_repo, fmt), "--quantization") == []
    bf16_repo = planned(colocated, "llama2-70b@fp8", checkpoint=None)
    assert len(flag_values(export_manifest(bf16_repo, fmt), "--quantization")) >= 1


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_plan_above_its_checkpoints_precision_is_refused_naming_the_way_out(colocated, fmt):
    manifest = planned(colocated, "deepseek-v3@bf16", checkpoint=None, checkpoint_dtype="fp8")
    with pytest.raises(PdplanError, match=r"at bf16 weights, but its checkpoint deepseek-ai/DeepSeek-V3 stores them "
                                          r"at fp8.*plan at fp8 \(--dtype fp8\)") as error:
        export_manifest(manifest, fmt)
    assert error.value.field == "identity.weights_dtype" and "\n" not in str(error.value)


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_fp4_of_a_bf16_checkpoint_is_refused_for_want_of_a_load_time_quantization_of_every_matrix(colocated, fmt):
    """vLLM's nvfp4_per_token and SGLang's nvfp4_online quantize the MoE experts alone."""
    manifest = planned(colocated, "llama2-70b@fp4", checkpoint=None, checkpoint_dtype="bf16")
    with pytest.raises(PdplanError, match=r"serve a fp4 checkpoint \(plan with --model its config.json"):
        export_manifest(manifest, fmt)


def test_a_checkpoint_precision_the_schema_does_not_name_is_refused(colocated):
    manifest = planned(colocated, "llama2-70b@fp8", checkpoint=None, checkpoint_dtype="int8")
    assert [field for field, _ in schema_errors(manifest)] == ["identity.checkpoint.dtype"]


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_an_int4_checkpoint_served_at_int4_is_loaded_as_it_is_with_its_code_and_a_bf16_kv_cache(colocated, fmt):
    """Kimi-K2.5 ships compressed-tensors int4 experts, which the engines read from its config, and no KV scheme."""
    files = export_manifest(planned(colocated, "kimi-k2.5", checkpoint=None, checkpoint_dtype="int4"), fmt)
    assert flag_values(files, "--quantization") == []
    assert set(flag_values(files, "--kv-cache-dtype")) == {"bfloat16"}
    assert all("--trust-remote-code" in tokens for tokens in _tokens(files)
               if "--tensor-parallel-size" in tokens or "--tp-size" in tokens)


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_fp4_of_an_int4_checkpoint_is_refused_for_want_of_a_load_time_quantization(colocated, fmt):
    with pytest.raises(PdplanError, match="stores them at int4") as error:
        export_manifest(planned(colocated, "kimi-k2.5@fp4", checkpoint=None, checkpoint_dtype="int4"), fmt)
    assert error.value.field == "identity.weights_dtype"
