"""Model geometry: the article's worked numbers and the memory-fit rules."""

import json
from pathlib import Path

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.modelcatalog import load_model, model_catalog
from pdplan.modelref import get_model, model_file
from pdplan.modelspec import (
    ModelSpec,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    kv_capacity_tokens,
    shape_rejection,
    weight_bytes_per_gpu,
)
from pdplan.work import decode_work, lower_bound_s, mixed_work, prefill_work

# The 0x02A executable fixture. The article states the geometry and the three results but not the
# rows; these rows are derived from the stated results and reproduce all three to the printed digit:
# prefill N_P = 16 new rows after T_0 = 8 visible rows; decode B = 3 requests with Σ s_i = 147.
TOY = ModelSpec(name="toy-0x02A", layers=4, hidden=64, q_heads=8, kv_heads=2, head_dim=8, ffn=160,
                vocab=1, parameters=163_904, mlp_matrices=3)
C_FLOPS, R_BYTES = 1e12, 1e11


def test_kv_bytes_per_token_matches_the_article_running_configuration():
    """0x06: L=32, H_kv=8, d_h=128, b=2 → 131072 bytes (128 KiB) per token."""
    assert kv_bytes_per_token(32, 8, 128, 2) == 131072


def test_llama_3_1_8b_uses_the_running_configuration():
    assert get_model("llama-3.1-8b").kv_bytes_per_token == 131072


def test_toy_layer_has_the_swiglu_parameter_count():
    """P_layer = d·H_q·d_h + 2·d·H_kv·d_h + H_q·d_h·d + 3·d·d_ff = 4096+2048+4096+30720."""
    assert TOY.params_per_layer == 40960


def test_toy_prefill_lower_bound_is_compute_bound_5_513_us():
    work = prefill_work(TOY, new_rows=16, visible_before=8)
    assert work.flops / C_FLOPS > work.state_bytes / R_BYTES
    assert lower_bound_s(work, C_FLOPS, R_BYTES) * 1e6 == pytest.approx(5.513, abs=5e-4)


def test_toy_decode_lower_bound_is_bandwidth_bound_3_661_us():
    work = decode_work(TOY, [48, 49, 50])
    assert work.state_bytes / R_BYTES > work.flops / C_FLOPS
    assert lower_bound_s(work, C_FLOPS, R_BYTES) * 1e6 == pytest.approx(3.661, abs=5e-4)


def test_toy_mixed_slot_is_6_647_us_and_1_816_times_the_decode_slot():
    """0x02B: one mixed iteration reads the weights once and releases decode rows at its end."""
    prefill = prefill_work(TOY, new_rows=16, visible_before=8)
    decode = decode_work(TOY, [48, 49, 50])
    mixed = lower_bound_s(mixed_work(prefill, decode), C_FLOPS, R_BYTES)
    assert mixed * 1e6 == pytest.approx(6.647, abs=5e-4)
    assert mixed / lower_bound_s(decode, C_FLOPS, R_BYTES) == pytest.approx(1.816, abs=5e-4)


def test_prefill_causal_pairs_count_prefix_and_triangle():
    """A_P = N_P·T_0 + N_P(N_P+1)/2."""
    assert prefill_work(TOY, new_rows=16, visible_before=8).pairs == 16 * 8 + 16 * 17 / 2


def test_every_embedded_model_agrees_with_its_parameter_count():
    for model in model_catalog().values():
        assert model.geometric_parameters == pytest.approx(model.parameters, rel=0.01), model.name


def test_catalog_has_the_models_the_planner_needs():
    assert {"llama2-70b", "llama-3.1-8b", "llama-3.1-70b", "opt-13b", "opt-66b", "opt-175b",
            "bloom-176b", "qwen3-32b"} <= set(model_catalog())


def test_llama2_70b_does_not_fit_one_a100():
    reason = shape_rejection(get_model("llama2-70b"), get_gpu("a100-80gb"), 1, 1)
    assert reason.startswith("a100-80gb TP1 PP1: weights 128.5 GiB per GPU > 72.0 GiB usable")


def test_tensor_parallelism_splits_weights_and_kv_heads():
    model = get_model("llama2-70b")
    assert weight_bytes_per_gpu(model, 4, 1) * 4 == pytest.approx(model.weight_bytes, rel=1e-3)
    assert kv_bytes_per_token_per_gpu(model, 4, 1) * 4 == model.kv_bytes_per_token


def test_tp_beyond_kv_heads_replicates_one_head_per_gpu():
    model = get_model("llama-3.1-8b")  # 8 KV heads
    assert kv_bytes_per_token_per_gpu(model, 16, 1) == kv_bytes_per_token_per_gpu(model, 8, 1)


def test_tp_that_neither_divides_nor_multiplies_kv_heads_is_rejected():
    reason = shape_rejection(get_model("llama2-70b"), get_gpu("h100-80gb"), 3, 1)
    assert "neither divides nor is a multiple of 8 KV heads" in reason


def test_tp_group_must_fit_inside_a_node():
    reason = shape_rejection(get_model("llama2-70b"), get_gpu("h100-80gb"), 16, 1, gpus_per_node=8)
    assert reason.endswith("TP 16 > 8 GPUs per node")


def test_uneven_pipeline_split_sizes_memory_by_the_largest_stage():
    model = get_model("llama2-70b")  # 80 layers over 3 stages → 27, 27, 26
    assert kv_bytes_per_token_per_gpu(model, 1, 3) == kv_bytes_per_token(27, 8, 128, 2)


def test_kv_capacity_is_free_memory_over_kv_bytes_per_token():
    model, gpu = get_model("llama2-70b"), get_gpu("h100-80gb")
    free = int(80 * 2**30 * 0.9) - weight_bytes_per_gpu(model, 8, 1)
    assert kv_capacity_tokens(model, gpu, 8, 1) == free // (327680 // 8)


def test_llama2_70b_tp2_a100_holds_50867_tokens_of_kv_by_hand():
    """80 GiB of HBM (not 80e9 bytes): 90% of 85,899,345,920 B = 77,309,411,328 B usable; weights
    68,975,329,280 parameters x 2 B / TP 2; KV 80 layers x 2 x (8 / 2) heads x 128 x 2 B = 163,840 B
    per token per GPU; (77,309,411,328 - 68,975,329,280) // 163,840 = 50,867 (80e9 would give 18,461)."""
    assert kv_capacity_tokens(get_model("llama2-70b"), get_gpu("a100-80gb"), 2, 1) == 50_867


def test_kv_capacity_is_zero_when_weights_do_not_fit():
    assert kv_capacity_tokens(get_model("llama2-70b"), get_gpu("a100-80gb"), 1, 1) == 0


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(PdplanError, match=r"unknown model 'gpt-5' \(known: bloom-176b, deepseek-r1, deepseek-v3"):
        get_model("gpt-5")


def test_user_model_yaml_is_loaded_by_path(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nlayers: 4\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\n"
                    "ffn: 160\nvocab: 1000\nparameters: 291840\n")
    assert get_model(str(path)).kv_bytes_per_token == 4 * 2 * 2 * 8 * 2


def test_a_model_file_at_a_precision_is_served_at_it_and_a_path_holding_the_mark_is_still_a_path(tmp_path):
    (tmp_path / "at@home").mkdir()
    for folder in (tmp_path, tmp_path / "at@home"):
        (folder / "tiny.yaml").write_text("name: tiny\nlayers: 4\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\n"
                                          "ffn: 160\nvocab: 1000\nparameters: 291840\n")
    at_fp8 = get_model(f"{tmp_path / 'tiny.yaml'}@fp8")
    assert (at_fp8.name, at_fp8.kv_bytes_per_token) == ("tiny@fp8", 4 * 2 * 2 * 8 * 1)
    assert model_file(f"{tmp_path / 'tiny.yaml'}@fp8") == tmp_path / "tiny.yaml"
    assert get_model(str(tmp_path / "at@home" / "tiny.yaml")).name == "tiny"


BAD_MODELS = [
    ("layers: 0\n", r"tiny.yaml:2: layers must be >= 1, got 0"),
    ("layers: four\n", r"tiny.yaml:2: layers must be an integer, got 'four'"),
    ("kv_heads: 3\n", r"tiny.yaml:5: kv_heads must divide q_heads \(8\), got 3"),
    ("parameters: 100\n", r"tiny.yaml:9: parameters disagrees with the geometry"),
    ("colour: red\n", r"tiny.yaml:\d+: colour is not a known field"),
    ("!!python/object:os.system {}\n", r"tiny.yaml:1: invalid YAML"),
]


@pytest.mark.parametrize("override,message", BAD_MODELS,
                         ids=["zero-layers", "text-layers", "kv-heads", "parameters", "unknown", "python-tag"])
def test_bad_model_file_names_file_line_and_field(tmp_path, override, message):
    fields = {"name": "tiny", "layers": "4", "hidden": "64", "q_heads": "8", "kv_heads": "2",
              "head_dim": "8", "ffn": "160", "vocab": "1000", "parameters": "291840"}
    key = override.split(":")[0]
    if key in fields:
        fields[key] = override.split(":", 1)[1].strip()
        text = "".join(f"{k}: {v}\n" for k, v in fields.items())
    else:
        text = override if override.startswith("!!") else "".join(
            f"{k}: {v}\n" for k, v in fields.items()) + override
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    with pytest.raises(PdplanError, match=message):
        load_model(path)


def test_user_model_may_not_borrow_a_catalog_name_with_other_geometry(tmp_path):
    path = tmp_path / "fake.yaml"
    path.write_text("name: llama2-70b\nlayers: 4\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\n"
                    "ffn: 160\nvocab: 1000\nparameters: 291840\n")
    with pytest.raises(PdplanError, match=r"fake.yaml: name 'llama2-70b' is a catalog model with a different geometry"):
        get_model(str(path))


# --- precision ------------------------------------------------------------------------------------

def test_fp8_halves_kv_bytes_per_token_of_llama_3_1_70b():
    bf16, fp8 = get_model("llama-3.1-70b"), get_model("llama-3.1-70b@fp8")
    assert bf16.kv_bytes_per_token == 80 * 2 * 8 * 128 * 2 == 327_680
    assert fp8.kv_bytes_per_token == 163_840


def test_fp8_weights_keep_embeddings_and_head_in_bf16():
    model = get_model("llama-3.1-70b", dtype="fp8")
    embeddings = 2 * 128_256 * 8192
    assert model.weight_bytes == (model.parameters - embeddings) * 1 + embeddings * 2


def test_nvfp4_weights_carry_one_fp8_scale_per_16_values():
    model = get_model("qwen3-32b@fp4")
    blocks = model.layers * model.params_per_layer
    assert model.weight_bytes_per_param == 0.5 + 1 / 16
    assert weight_bytes_per_gpu(model, 1, 1) == pytest.approx(blocks * 0.5625 + 2 * model.embedding_params, rel=1e-9)


def test_precision_is_part_of_the_name_so_profiles_never_cross_precisions():
    assert get_model("llama-3.1-70b", dtype="fp8").name == "llama-3.1-70b@fp8"
    assert get_model("llama-3.1-70b", dtype="fp8", kv_dtype="bf16").name == "llama-3.1-70b@fp8,kv=bf16"
    assert get_model("llama-3.1-70b", kv_dtype="fp8").name == "llama-3.1-70b@bf16,kv=fp8"
    assert get_model("llama-3.1-70b@fp8,kv=bf16").kv_dtype == "bf16"
    assert get_model("llama-3.1-70b@fp8").at_precision("bf16", "bf16").name == "llama-3.1-70b"


def test_a_catalog_model_is_served_at_its_published_checkpoints_precision():
    """Issue 21: the checkpoint's quantization sets the weight precision unless --dtype says otherwise.
    gpt-oss ships MXFP4 experts, DeepSeek-V3/R1 and Kimi-K2 block-scaled FP8 (their config.json
    quantization_config); Llama 3.1 ships bf16."""
    assert {name: (get_model(name).name, get_model(name).weight_dtype) for name in (
        "gpt-oss-120b", "gpt-oss-20b", "deepseek-v3", "deepseek-r1", "kimi-k2", "llama-3.1-70b")} == {
        "gpt-oss-120b": ("gpt-oss-120b@mxfp4", "mxfp4"), "gpt-oss-20b": ("gpt-oss-20b@mxfp4", "mxfp4"),
        "deepseek-v3": ("deepseek-v3@fp8", "fp8"), "deepseek-r1": ("deepseek-r1@fp8", "fp8"),
        "kimi-k2": ("kimi-k2@fp8", "fp8"), "llama-3.1-70b": ("llama-3.1-70b", "bf16")}


def test_a_model_keeps_its_checkpoints_precision_at_any_served_precision():
    assert get_model("deepseek-v3", dtype="bf16").checkpoint_dtype == "fp8"
    assert get_model("llama-3.1-70b@fp8").checkpoint_dtype == "bf16"
    assert get_model("gpt-oss-120b", kv_dtype="bf16").weight_dtype == "mxfp4"


def test_a_quantized_checkpoint_served_at_bf16_names_it_and_reads_back_as_planned():
    model = get_model("deepseek-v3", dtype="bf16")
    assert model.name == "deepseek-v3@bf16"
    assert get_model(model.name) == model


def test_a_model_file_states_its_checkpoints_precision(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: mini\nlayers: 2\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\nffn: 160\n"
                    "vocab: 100\nparameters: 94720\ncheckpoint_dtype: fp8\n")
    model = load_model(path)
    assert (model.name, model.weight_dtype, model.kv_dtype, model.checkpoint_dtype) == ("mini@fp8", "fp8", "fp8", "fp8")
    path.write_text(path.read_text().replace("fp8", "int8"))
    with pytest.raises(PdplanError, match=r"checkpoint_dtype"):
        load_model(path)


def test_unknown_dtype_is_refused_with_the_known_ones():
    with pytest.raises(PdplanError, match=r"--dtype must be one of bf16, fp8, fp4, mxfp4, int4, got 'int8'"):
        get_model("llama-3.1-8b", dtype="int8")
    with pytest.raises(PdplanError, match=r"--kv-dtype must be one of bf16, fp8, got 'fp4'"):
        get_model("llama-3.1-8b@fp4,kv=fp4")


def test_model_file_with_legacy_dtype_bytes_1_is_served_at_fp8(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: mini\nlayers: 2\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\nffn: 160\n"
                    "vocab: 100\nparameters: 94720\ndtype_bytes: 1\n")
    model = load_model(path)
    assert (model.name, model.weight_dtype, model.kv_dtype) == ("mini@fp8", "fp8", "fp8")


def test_model_file_may_not_put_a_precision_mark_in_its_name(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("name: mini@fp8\nlayers: 2\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\nffn: 160\n"
                    "vocab: 100\nparameters: 100000\n")
    with pytest.raises(PdplanError, match=r"m.yaml:1: name may not hold '@'"):
        load_model(path)


def test_fp8_roofline_is_faster_where_gemms_dominate_and_refused_on_a100():
    from pdplan.latency.roofline import roofline_profile
    h100 = get_gpu("h100-80gb")
    bf16 = roofline_profile(get_model("llama-3.1-70b"), h100, 4, 1)
    fp8 = roofline_profile(get_model("llama-3.1-70b@fp8"), h100, 4, 1)
    assert fp8.prefill_time_s([8192]) < 0.75 * bf16.prefill_time_s([8192])
    assert fp8.decode_step_s(64, 64 * 2048) < bf16.decode_step_s(64, 64 * 2048)
    assert fp8.kv_capacity_tokens > 1.5 * bf16.kv_capacity_tokens
    with pytest.raises(PdplanError, match=r"a100-80gb has no fp8 tensor cores"):
        roofline_profile(get_model("llama-3.1-70b@fp8"), get_gpu("a100-80gb"), 4, 1)


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", ["my_model", "Llama 2", "m$(id)", "a/b", "-x", "x" * 201])
def test_a_model_name_that_cannot_name_the_manifest_is_refused_where_it_enters(tmp_path, name):
    path = tmp_path / "m.yaml"
    path.write_text((ROOT / "pdplan" / "catalog" / "models" / "llama2-70b.yaml").read_text().replace(
        "name: llama2-70b", f"name: {json.dumps(name)}"))
    with pytest.raises(PdplanError, match=r"m.yaml:2: name must be a Kubernetes object name once lowercased"):
        load_model(path)


def test_a_model_name_in_capitals_and_dots_is_welcome(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text((ROOT / "pdplan" / "catalog" / "models" / "llama2-70b.yaml").read_text().replace(
        "name: llama2-70b", "name: My-Llama-3.1-70B"))
    assert load_model(path).name == "My-Llama-3.1-70B"


# --- identity -------------------------------------------------------------------------------------

def test_each_catalog_model_names_the_hugging_face_repository_its_config_came_from():
    assert {name: model.hf_repo for name, model in model_catalog().items()} == {
        "bloom-176b": "bigscience/bloom", "llama-3.1-70b": "meta-llama/Llama-3.1-70B",
        "llama-3.1-8b": "meta-llama/Llama-3.1-8B", "llama2-70b": "meta-llama/Llama-2-70b-hf",
        "opt-13b": "facebook/opt-13b", "opt-175b": None,  # given out on request, on no hub
        "opt-66b": "facebook/opt-66b", "qwen3-32b": "Qwen/Qwen3-32B",
        "deepseek-v3": "deepseek-ai/DeepSeek-V3", "deepseek-r1": "deepseek-ai/DeepSeek-R1",
        "kimi-k2": "moonshotai/Kimi-K2-Instruct", "qwen3-235b-a22b": "Qwen/Qwen3-235B-A22B",
        "qwen3-30b-a3b": "Qwen/Qwen3-30B-A3B", "gpt-oss-120b": "openai/gpt-oss-120b",
        "gpt-oss-20b": "openai/gpt-oss-20b", "mixtral-8x7b": "mistralai/Mixtral-8x7B-v0.1",
        "kimi-k2.5": "moonshotai/Kimi-K2.5"}


def test_a_precision_keeps_the_models_repository():
    assert get_model("llama-3.1-70b@fp8").hf_repo == "meta-llama/Llama-3.1-70B"


def test_a_user_model_may_omit_its_repository(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text("name: tiny\nlayers: 4\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\n"
                    "ffn: 160\nvocab: 1000\nparameters: 291840\n")
    assert load_model(path).hf_repo is None


@pytest.mark.parametrize("repo", ["llama2-70b", "meta-llama/Llama-2-70b-hf/main", "meta-llama/-x", "a/b..c",
                                  "a--b/c", "a/b.git", "a/b c", "a/b$(id)", "a/" + "b" * 97, "", 70])
def test_a_repository_that_is_no_hub_id_is_refused_naming_file_line_and_field(tmp_path, repo):
    path = tmp_path / "m.yaml"
    path.write_text((ROOT / "pdplan" / "catalog" / "models" / "llama2-70b.yaml").read_text().replace(
        "hf_repo: meta-llama/Llama-2-70b-hf", f"hf_repo: {json.dumps(repo)}"))
    with pytest.raises(PdplanError, match=r"m.yaml:14: hf_repo must be (a Hugging Face repository id, <owner>/<name>"
                                          r"|a non-empty string)") as error:
        load_model(path)
    assert error.value.field == "hf_repo"


def test_a_tp_group_beyond_a_gb200_tray_must_take_whole_trays_of_its_rack():
    gb200 = get_gpu("gb200-185gb")
    assert shape_rejection(get_model("deepseek-v3@fp4"), gb200, 8, 1, gpus_per_node=4) is None
    assert shape_rejection(get_model("deepseek-v3@fp4"), gb200, 6, 1, gpus_per_node=4).endswith(
        "TP 6 > 4 GPUs per node, and a wider one takes whole nodes of its NVLink fabric (a multiple of 4, at most "
        "72 GPUs)")
