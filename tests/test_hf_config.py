"""Models from Hugging Face config.json: mixture-of-experts, latent and sliding-window attention.

Expected values are closed forms over the published configs and the numbers of the model cards,
never pdplan's own output. The configs are those AIConfigurator ships (the optional extra
pdplan[aic]); tests that read them are skipped without it.
"""

import json
import shutil
from pathlib import Path

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.roofline import roofline_profile
from pdplan.manifest.build import abi_kv_bytes_per_token, kv_cache_abi
from pdplan.manifest.check import _identity
from pdplan.modelcatalog import geometry, load_model, model_catalog
from pdplan.modelref import get_model, model_file
from pdplan.modelspec import WEIGHT_BYTES

try:
    import aiconfigurator_core
    CONFIGS = Path(aiconfigurator_core.__file__).parent / "model_configs"
except ImportError:  # pragma: no cover - the extra is optional
    CONFIGS = None

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "pdplan" / "catalog" / "models"
needs_configs = pytest.mark.skipif(CONFIGS is None, reason="the published configs ship with the extra pdplan[aic]")


def config(stem: str) -> Path:
    return CONFIGS / f"{stem}_config.json"


def write_config(tmp_path: Path, stem: str, **changes) -> Path:
    """A copy of a published config with ``changes`` (None deletes a key)."""
    data = json.loads(config(stem).read_text())
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    path = tmp_path / "bad-model" / "config.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(data))
    return path


# --- KV bytes per token ---------------------------------------------------------------------------

@needs_configs
def test_mla_caches_the_latent_and_the_rope_key_per_layer():
    """DeepSeek-V3: 61 layers × (kv_lora_rank 512 + qk_rope_head_dim 64) × 2 bytes = 70,272 at bf16."""
    model = get_model(str(config("deepseek-ai--DeepSeek-V3")), dtype="bf16", kv_dtype="bf16")
    assert model.kv_bytes_per_token == 61 * (512 + 64) * 2 == 70_272
    assert get_model("deepseek-v3@bf16").kv_bytes_per_token == 70_272


@needs_configs
def test_gqa_caches_k_and_v_heads_per_layer():
    """Llama-3.1-70B: 80 layers × 2 × 8 KV heads × 128 × 2 bytes = 327,680 at bf16."""
    model = get_model(str(config("meta-llama--Meta-Llama-3.1-70B")))
    assert model.kv_bytes_per_token == 80 * 2 * 8 * 128 * 2 == 327_680


@needs_configs
def test_sliding_window_layers_stop_growing_at_the_window():
    """gpt-oss-120b: layer_types alternates sliding_attention (window 128) and full_attention over
    36 layers, 8 KV heads of 64 dims. At bf16 one layer holds 2·8·64·2 = 2,048 B per token, so a
    context of n tokens holds 18·2048·n + 18·2048·min(n, 128) bytes."""
    model = get_model(str(config("openai--gpt-oss-120b")), kv_dtype="bf16")
    assert (model.sliding_window, len(model.sliding_layers)) == (128, 18)
    for n in (1, 128, 129, 8192):
        assert model.kv_bytes_for_context(n) == 18 * 2048 * n + 18 * 2048 * min(n, 128)
    assert model.kv_bytes_per_token == 36 * 2048


def test_a_dense_model_holds_every_token_in_every_layer():
    model = get_model("llama-3.1-70b")
    assert model.kv_bytes_for_context(4096) == 4096 * 327_680


# --- parameters against the model cards -----------------------------------------------------------

TOTALS = {  # total parameters as the model cards state them
    "deepseek-v3": 671e9,        # DeepSeek-V3 model card: 671B (main model; the 14B MTP module apart)
    "qwen3-235b-a22b": 235e9,    # Qwen3-235B-A22B model card: 235B in total
    "gpt-oss-120b": 116.83e9,    # gpt-oss model card, table 1: 116.83B
    "mixtral-8x7b": 46.7e9,      # Mistral AI, "Mixtral of experts": 46.7B total
}


@pytest.mark.parametrize("name", sorted(TOTALS))
def test_total_parameters_are_within_one_percent_of_the_model_card(name):
    assert get_model(name).geometric_parameters == pytest.approx(TOTALS[name], rel=0.01)


@pytest.mark.parametrize("name, card", [("qwen3-235b-a22b", 22e9), ("mixtral-8x7b", 12.9e9)])
def test_active_parameters_are_within_one_percent_of_the_model_card(name, card):
    """Qwen3-235B-A22B (22B activated) and Mixtral (12.9B per token) count every weight a token
    uses, embedding and output head included."""
    assert get_model(name).active_parameters == pytest.approx(card, rel=0.01)


def test_gpt_oss_active_parameters_follow_its_card_which_leaves_the_embedding_out():
    """gpt-oss model card, table 1: 5.13B (120b) and 3.61B (20b) active, counting the unembedding
    but not the embedding (a row lookup)."""
    for name, card in (("gpt-oss-120b", 5.13e9), ("gpt-oss-20b", 3.61e9)):
        model = get_model(name)
        assert model.active_parameters - model.vocab * model.hidden == pytest.approx(card, rel=0.01)


def test_deepseek_v3_active_parameters_bracket_its_cards_37b():
    """The card's 37B activated is rounded and names no convention: it lies between the count with
    the output head alone (36.6B) and with both embedding matrices (37.55B), each within 1.5%."""
    model = get_model("deepseek-v3")
    assert model.active_parameters - model.vocab * model.hidden < 37e9 < model.active_parameters
    assert model.active_parameters == pytest.approx(37e9, rel=0.015)


def test_a_dense_models_active_parameters_are_all_of_them():
    model = get_model("llama-3.1-70b")
    assert model.active_parameters == model.geometric_parameters


# --- quantization ---------------------------------------------------------------------------------

def test_mxfp4_costs_four_and_a_quarter_bits_per_weight():
    """OCP MX v1.0: 32 four-bit E2M1 values share one 8-bit E8M0 scale: (32·4 + 8)/32 = 4.25 bits."""
    assert WEIGHT_BYTES["mxfp4"] * 8 == (32 * 4 + 8) / 32
    assert WEIGHT_BYTES["fp4"] * 8 == (16 * 4 + 8) / 16  # NVFP4: one E4M3 scale per 16


def test_w4a16_int4_costs_four_and_a_half_bits_per_weight():
    """compressed-tensors pack-quantized int4 as Kimi-K2.5 ships it: 32 four-bit integers share one bf16 scale."""
    assert WEIGHT_BYTES["int4"] * 8 == (32 * 4 + 16) / 32


@needs_configs
@pytest.mark.parametrize("stem, dtype", [("deepseek-ai--DeepSeek-V3", "fp8"), ("openai--gpt-oss-120b", "mxfp4"),
                                         ("Qwen--Qwen3-235B-A22B", "bf16"),
                                         ("nvidia--Qwen3-235B-A22B-NVFP4", "fp4"),
                                         ("nvidia--Llama-3.1-70B-Instruct-FP8", "fp8"),
                                         ("moonshotai--Kimi-K2.5", "int4"), ("nvidia--Kimi-K2.5-NVFP4", "fp4")])
def test_the_configs_quantization_sets_the_weight_precision(stem, dtype):
    assert get_model(str(config(stem))).weight_dtype == dtype


@needs_configs
def test_kimi_k25_is_its_text_configs_language_model_the_catalog_states():
    """KimiK25ForConditionalGeneration nests a DeepSeek-V3 text model under text_config; read from there it has the
    catalog entry's geometry, and its repository keeps its config as code."""
    model = get_model(str(config("moonshotai--Kimi-K2.5")))
    catalog = model_catalog()["kimi-k2.5"]
    assert model.name == catalog.name == "kimi-k2.5@int4" and geometry(model) == geometry(catalog)
    assert (model.experts, model.q_heads, model.attention, model.kv_dtype) == (384, 64, "mla", "bf16")
    assert model.remote_code and "vision tower not counted" in model.source


def test_int4_weighs_its_routed_experts_at_four_and_a_half_bits_and_the_rest_at_sixteen():
    """Kimi-K2.5: 60 MoE layers × 384 experts × 3 × 7168 × 2048 weights at 0.5625 B; every other weight in bf16."""
    model = get_model("kimi-k2.5")
    routed = 60 * 384 * 3 * 7168 * 2048
    assert model.weight_bytes == pytest.approx(routed * 0.5625 + (model.parameters - routed) * 2, abs=2)


@needs_configs
@pytest.mark.parametrize("change, key", [
    ({"num_bits": 8}, "config_groups.group_0.weights"),
    ({"group_size": 128}, "config_groups.group_0.weights"),
    ({"type": "float"}, "config_groups.group_0.weights")])
def test_a_compressed_tensors_scheme_other_than_w4a16_int4_is_refused_naming_its_key(tmp_path, change, key):
    data = json.loads(config("moonshotai--Kimi-K2.5").read_text())
    data["text_config"]["quantization_config"]["config_groups"]["group_0"]["weights"].update(change)
    path = tmp_path / "kimi" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    with pytest.raises(PdplanError, match="W4A16 int4 scheme only") as error:
        get_model(str(path))
    assert error.value.field == f"text_config.quantization_config.{key}"


@needs_configs
def test_int4_that_quantizes_attention_is_refused_since_pdplan_models_it_on_the_routed_experts(tmp_path):
    data = json.loads(config("moonshotai--Kimi-K2.5").read_text())
    quant = data["text_config"]["quantization_config"]
    quant["ignore"] = [k for k in quant["ignore"] if "self_attn" not in k]
    path = tmp_path / "kimi" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps(data))
    with pytest.raises(PdplanError, match="must keep self_attn unquantized: pdplan models int4 on the routed experts"):
        get_model(str(path))


@needs_configs
def test_dtype_overrides_the_configs_quantization_and_the_name_says_so():
    """AIConfigurator's copy of DeepSeek-V3's config is that repository's, so the catalog model kept there."""
    model = get_model(str(config("deepseek-ai--DeepSeek-V3")), dtype="bf16")
    assert (model.weight_dtype, model.checkpoint_dtype, model.name) == ("bf16", "fp8", "deepseek-v3@bf16")


# --- reading configs ------------------------------------------------------------------------------

CATALOG_CONFIGS = {"deepseek-v3": "deepseek-ai--DeepSeek-V3", "deepseek-r1": "deepseek-ai--DeepSeek-R1",
                   "kimi-k2": "moonshotai--Kimi-K2-Instruct", "qwen3-235b-a22b": "Qwen--Qwen3-235B-A22B",
                   "qwen3-30b-a3b": "Qwen--Qwen3-30B-A3B", "gpt-oss-120b": "openai--gpt-oss-120b",
                   "gpt-oss-20b": "openai--gpt-oss-20b", "mixtral-8x7b": "mistralai--Mixtral-8x7B-v0.1",
                   "llama-3.1-70b": "meta-llama--Meta-Llama-3.1-70B", "llama-3.1-8b": "meta-llama--Meta-Llama-3.1-8B",
                   "qwen3-32b": "Qwen--Qwen3-32B"}
GEOMETRY = ("layers", "hidden", "q_heads", "kv_heads", "head_dim", "ffn", "vocab", "tied_embeddings", "experts",
            "experts_per_token", "shared_experts", "expert_ffn", "dense_layers", "attention", "kv_lora_rank",
            "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "sliding_window", "sliding_layers")


@needs_configs
@pytest.mark.parametrize("name", sorted(CATALOG_CONFIGS))
def test_each_catalog_entry_states_its_published_configs_geometry(name):
    entry, published = get_model(name), get_model(str(config(CATALOG_CONFIGS[name])))
    assert {k: getattr(entry, k) for k in GEOMETRY} == {k: getattr(published, k) for k in GEOMETRY}


@needs_configs
@pytest.mark.parametrize("name", sorted(CATALOG_CONFIGS))
def test_each_catalog_entry_says_whether_its_repository_keeps_code_as_its_published_config_does(name):
    entry, published = get_model(name), get_model(str(config(CATALOG_CONFIGS[name])))
    assert entry.remote_code == published.remote_code == (name == "kimi-k2")


@needs_configs
def test_a_config_of_a_model_type_transformers_lacks_is_code_in_its_repository(tmp_path):
    """Kimi-K2's config names model_type kimi_k2 and maps AutoConfig to its own configuration_deepseek.py;
    the same geometry under DeepSeek-V3's registered model_type needs none."""
    assert get_model(str(config("moonshotai--Kimi-K2-Instruct"))).remote_code
    native = write_config(tmp_path, "moonshotai--Kimi-K2-Instruct", model_type="deepseek_v3")
    assert not get_model(str(native)).remote_code


@needs_configs
@pytest.mark.parametrize("name", sorted(CATALOG_CONFIGS))
def test_each_catalog_entry_is_served_at_its_published_configs_quantization(name):
    entry, published = get_model(name), get_model(str(config(CATALOG_CONFIGS[name])))
    assert (entry.checkpoint_dtype, entry.weight_dtype) == (published.checkpoint_dtype, published.weight_dtype)


def test_the_catalog_ships_the_current_mixture_of_experts_models():
    catalog = model_catalog()
    for name in ("deepseek-v3", "deepseek-r1", "kimi-k2", "qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b",
                 "gpt-oss-20b", "mixtral-8x7b"):
        assert catalog[name].is_moe and catalog[name].hf_repo


@needs_configs
def test_a_folder_holding_config_json_is_a_model_named_after_the_folder(tmp_path):
    folder = tmp_path / "Mixtral-8x7B"
    folder.mkdir()
    shutil.copy(config("mistralai--Mixtral-8x7B-v0.1"), folder / "config.json")
    model = get_model(str(folder))
    assert (model.name, model.experts, model.experts_per_token) == ("mixtral-8x7b", 8, 2)


def hub_snapshot(tmp_path: Path, stem: str, repo: str) -> Path:
    """A repository as huggingface_hub downloads it: models--{owner}--{name}/snapshots/{commit}/, the
    config.json a link to the blob that holds it."""
    folder = tmp_path / f"models--{repo.replace('/', '--')}"
    snapshot = folder / "snapshots" / "9216db5781bf21249d130ec9da846c4624c16137"
    snapshot.mkdir(parents=True)
    blob = folder / "blobs" / "1f0a5c"
    blob.parent.mkdir()
    shutil.copy(config(stem), blob)
    (snapshot / "config.json").symlink_to(blob)
    return snapshot


@needs_configs
@pytest.mark.parametrize("name", ["kimi-k2", "qwen3-235b-a22b", "gpt-oss-120b"])
def test_a_hub_snapshot_of_a_catalog_models_repository_is_that_model_and_its_checkpoint(tmp_path, name):
    repo = model_catalog()[name].hf_repo
    model = get_model(str(hub_snapshot(tmp_path, CATALOG_CONFIGS[name], repo)))
    assert (model.base_name, model.hf_repo) == (name, repo)


@needs_configs
def test_a_hub_snapshot_of_another_repository_is_named_after_the_repository_not_the_commit(tmp_path):
    model = get_model(str(hub_snapshot(tmp_path, "Qwen--Qwen3-30B-A3B-FP8", "Qwen/Qwen3-30B-A3B-FP8")
                          / "config.json"))
    assert (model.base_name, model.hf_repo, model.weight_dtype) == ("qwen3-30b-a3b-fp8", "Qwen/Qwen3-30B-A3B-FP8",
                                                                    "fp8")


@pytest.mark.parametrize("reference, name", [("moonshotai/Kimi-K2-Instruct", "kimi-k2@fp8"),
                                             ("deepseek-ai/DeepSeek-V3@bf16", "deepseek-v3@bf16")])
def test_a_catalog_models_repository_id_names_that_model(tmp_path, monkeypatch, reference, name):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    assert get_model(reference).name == name


@needs_configs
def test_a_repository_in_the_hub_cache_is_read_at_the_commit_its_main_branch_names(tmp_path, monkeypatch):
    repo = "Qwen/Qwen3-30B-A3B-FP8"
    snapshot = hub_snapshot(tmp_path / "hub", "Qwen--Qwen3-30B-A3B-FP8", repo)  # $HF_HOME/hub
    older = snapshot.with_name("0" * 40)
    shutil.copytree(snapshot, older)
    (older / "config.json").write_text("{}")  # another commit's, not read
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text(snapshot.name)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    model = get_model(repo)
    assert (model.base_name, model.hf_repo, model.hf_revision) == ("qwen3-30b-a3b-fp8", repo, snapshot.name)


def test_a_repository_neither_catalogued_downloaded_nor_shipped_is_refused_naming_the_cache_and_the_download(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(PdplanError, match=r"acme/Tiny-7B' is a Hugging Face repository .* the hub's cache \("
                                          rf"{tmp_path / 'hub'}\) holds no config.json of its main branch, and "
                                          r"AIConfigurator ships none \(the aic extra\): download it \(hf download "
                                          r"acme/Tiny-7B config.json\)"):
        get_model("acme/Tiny-7B")


@needs_configs
def test_a_repository_whose_config_aiconfigurator_ships_is_that_repository_read_from_the_copy(tmp_path, monkeypatch):
    """NVIDIA's NVFP4 DeepSeek states its precision in hf_quant_config.json (quant_algo NVFP4), beside the copy."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    repo = "nvidia/DeepSeek-V3.1-NVFP4"
    assert model_file(repo) == config("nvidia--DeepSeek-V3.1-NVFP4")
    model = get_model(repo)
    assert (model.base_name, model.hf_repo, model.hf_revision) == ("deepseek-v3.1-nvfp4", repo, None)
    assert (model.weight_dtype, model.checkpoint_dtype, model.experts, model.attention) == ("fp4", "fp4", 256, "mla")


@needs_configs
def test_a_catalog_models_repository_stays_the_catalog_model_though_aiconfigurator_ships_its_config(
        tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    assert config("deepseek-ai--DeepSeek-R1").is_file()
    assert model_file("deepseek-ai/DeepSeek-R1") is None
    assert get_model("deepseek-ai/DeepSeek-R1") == model_catalog()["deepseek-r1"]


@needs_configs
@pytest.mark.parametrize("package, repo", [("aiconfigurator_core", "acme/Tiny-Model"), ("elsewhere", None)])
def test_only_a_copy_in_aiconfigurators_model_configs_names_its_repository(tmp_path, package, repo):
    folder = tmp_path / package / "model_configs"
    folder.mkdir(parents=True)
    shutil.copy(config("Qwen--Qwen3-30B-A3B"), folder / "acme--Tiny-Model_config.json")
    model = get_model(str(folder / "acme--Tiny-Model_config.json"))
    assert model.hf_repo == repo
    assert model.base_name == ("tiny-model" if repo else "acme--tiny-model")


@needs_configs
def test_a_folder_named_snapshots_outside_the_hub_cache_has_no_repository(tmp_path):
    folder = tmp_path / "mine" / "snapshots" / "v2"
    folder.mkdir(parents=True)
    shutil.copy(config("Qwen--Qwen3-30B-A3B"), folder / "config.json")
    model = get_model(str(folder))
    assert (model.base_name, model.hf_repo) == ("v2", None)


@needs_configs
def test_a_config_named_like_a_catalog_model_with_other_experts_is_refused(tmp_path):
    folder = tmp_path / "mixtral-8x7b"
    folder.mkdir()
    data = json.loads(config("mistralai--Mixtral-8x7B-v0.1").read_text())
    (folder / "config.json").write_text(json.dumps({**data, "num_local_experts": 16}))
    with pytest.raises(PdplanError, match=r"'mixtral-8x7b' is a catalog model with a different geometry"):
        get_model(str(folder))


BAD = [
    ({"num_experts_per_tok": 129, "experts_per_token": 129}, "num_experts_per_tok"),  # gpt-oss-120b has 128 experts
    ({"num_key_value_heads": 7}, "num_key_value_heads"),
    ({"layer_types": ["chunked_attention"] * 36}, "layer_types"),
    ({"quantization_config": {"quant_method": "gptq"}}, "quantization_config.quant_method"),
    ({"architectures": ["GemmaForCausalLM"]}, "architectures"),
    ({"num_hidden_layers": None}, "num_hidden_layers"),
    ({"experts_per_token": 2}, "experts_per_token"),  # contradicts num_experts_per_tok 4
]


@needs_configs
@pytest.mark.parametrize("changes, key", BAD, ids=[key for _, key in BAD])
def test_a_bad_config_exits_2_on_one_line_naming_file_and_key(run_cli, tmp_path, changes, key):
    path = write_config(tmp_path, "openai--gpt-oss-120b", **changes)
    code, _, err = run_cli("profile", "roofline", "--model", path, "--gpu", "h100-80gb", "--tp", 1, "--pp", 1,
                           "--output", tmp_path / "out.yaml")
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert str(path) in err and key in err


@pytest.mark.parametrize("content, rule", [("[" * 100_000 + "]" * 100_000, "nested too deep or a number too long"),
                                           ('{"num_hidden_layers": ' + "9" * 5000 + "}", "a number too long"),
                                           ("{not json", "is not JSON"), ("[1, 2]", "top level must be a JSON object")])
def test_unreadable_json_is_one_error_naming_the_file(tmp_path, content, rule):
    path = tmp_path / "odd_config.json"
    path.write_text(content)
    with pytest.raises(PdplanError, match=rf"odd_config\.json(:\d+)?: .*{rule}"):
        get_model(str(path))


def test_a_model_yaml_with_more_experts_per_token_than_experts_names_its_line(tmp_path):
    text = (MODELS / "mixtral-8x7b.yaml").read_text()
    path = tmp_path / "m.yaml"
    path.write_text(text.replace("name: mixtral-8x7b", "name: my-moe").replace("experts_per_token: 2",
                                                                                 "experts_per_token: 9"))
    with pytest.raises(PdplanError, match=r"m\.yaml:\d+: experts_per_token must be in \[1, experts = 8\]"):
        load_model(path)


def test_a_model_yaml_with_an_unknown_attention_kind_is_refused(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text((MODELS / "llama-3.1-8b.yaml").read_text().replace(
        "name: llama-3.1-8b", "name: mine\nattention: linear"))
    with pytest.raises(PdplanError, match=r"attention must be one of gqa, mla, got 'linear'"):
        load_model(path)


# --- what is not modelled yet is refused, not guessed ----------------------------------------------

@pytest.mark.parametrize("name", ["deepseek-v3@fp8", "gpt-oss-120b@mxfp4", "qwen3-30b-a3b"])
def test_rooflines_of_mixture_of_experts_models_are_made(name):
    profile = roofline_profile(get_model(name), get_gpu("h200-141gb"), 8, 1)
    assert profile.kv_capacity_tokens > 0


@pytest.mark.parametrize("dtype", ["mxfp4", "int4"])
def test_experts_only_weights_are_refused_for_a_dense_model(dtype):
    with pytest.raises(PdplanError, match=rf"llama-3.1-8b: {dtype} quantizes only routed experts \(as gpt-oss's MXFP4"):
        roofline_profile(get_model("llama-3.1-8b", dtype=dtype), get_gpu("b200-180gb"), 1, 1)


def test_optimize_refuses_mxfp4_for_a_dense_model_on_one_line(run_cli):
    code, out, err = run_cli("optimize", ROOT / "traces/smoke_uniform_200.csv", "--model", "llama-3.1-8b", "--dtype",
                             "mxfp4", "--cluster", ROOT / "examples/cluster_h200.yaml")
    assert code == 2 and not out
    assert err.strip() == ("Error: llama-3.1-8b: mxfp4 quantizes only routed experts (as gpt-oss's MXFP4 and "
                           "Kimi-K2.5's int4 checkpoints do) and this model has none: use --dtype fp4 or fp8")


# --- block-scaled fp8 and what MXFP4 quantizes -----------------------------------------------------

@needs_configs
@pytest.mark.parametrize("name", ["deepseek-v3", "deepseek-r1", "kimi-k2"])
def test_the_catalog_states_the_fp8_block_its_config_states(name):
    """quantization_config.weight_block_size [128, 128] in each published config."""
    assert get_model(name).weight_block == get_model(str(config(CATALOG_CONFIGS[name]))).weight_block == 128


@needs_configs
def test_a_per_tensor_or_unquantized_config_has_no_block():
    assert get_model(str(config("Qwen--Qwen3-235B-A22B"))).weight_block == 0
    assert get_model(str(config("openai--gpt-oss-120b"))).weight_block == 0


BAD_QUANT = [
    ("deepseek-ai--DeepSeek-V3", {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 64]}},
     "quantization_config.weight_block_size"),
    ("openai--gpt-oss-120b", {"quantization_config": {"quant_method": "mxfp4",
                                                      "modules_to_not_convert": ["model.embed_tokens", "lm_head"]}},
     "quantization_config.modules_to_not_convert"),
    ("deepseek-ai--DeepSeek-V3", {"n_group": 7}, "n_group"),
    ("deepseek-ai--DeepSeek-V3", {"topk_group": 9}, "topk_group"),
]


@needs_configs
@pytest.mark.parametrize("stem, changes, key", BAD_QUANT, ids=[key for _, _, key in BAD_QUANT])
def test_a_config_pdplan_would_mis_size_is_refused_naming_the_key(tmp_path, stem, changes, key):
    path = write_config(tmp_path, stem, **changes)
    with pytest.raises(PdplanError, match=rf"config\.json: {key} ") as caught:
        get_model(str(path))
    assert caught.value.field == key


# --- the manifest's KV-cache ABI -----------------------------------------------------------------

def test_a_dense_models_kv_abi_is_unchanged():
    """The ABI fields of a GQA model are the ones manifests carried before latent attention."""
    assert set(kv_cache_abi(get_model("llama-3.1-70b"))) == {"layers", "kv_heads", "head_dim", "dtype",
                                                             "block_tokens", "layout", "hash"}


def test_an_mla_kv_abi_records_the_latent_dims_and_gives_its_bytes():
    abi = kv_cache_abi(get_model("deepseek-v3@bf16"))
    assert (abi["attention"], abi["kv_lora_rank"], abi["qk_rope_head_dim"]) == ("mla", 512, 64)
    assert abi_kv_bytes_per_token(abi) == 61 * 576 * 2


def test_the_identity_check_accepts_an_mla_abi_and_its_bytes():
    model = get_model("deepseek-v3@bf16")
    identity = {"model": model.name, "weights_dtype": model.weight_dtype, "kv_cache": kv_cache_abi(model),
                "kv_bytes_per_token": 70_272}
    assert _identity({"identity": identity, "pools": []}) == []
    wrong = _identity({"identity": {**identity, "kv_bytes_per_token": 61 * 2 * 128 * 192 * 2}, "pools": []})
    assert [v.field for v in wrong] == ["identity.kv_bytes_per_token"]
