"""Composed steps of mixture-of-experts, latent-attention and sliding-window models.

The expected values are read from AIConfigurator's parquet tables here, independently of the
composition. These need the optional extra (pip install 'pdplan[aic]'); without it they skip.
"""

import dataclasses

import pytest

pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")

import pandas as pd  # noqa: E402

from pdplan.errors import PdplanError  # noqa: E402
from pdplan.latency.compose import moe, tables  # noqa: E402
from pdplan.latency.compose.step import Step  # noqa: E402
from pdplan.modelref import get_model  # noqa: E402
from pdplan.shape import InstanceShape  # noqa: E402


def raw_table(system, family, engine, version, filename):
    return pd.read_parquet(tables.package_root() / "systems" / "data" / system / family / engine / version / filename)


def step(model, gpu, tp, engine="vllm", **options):
    return Step(model=model, shape=InstanceShape(gpu=gpu, tp=tp, pp=1), engine=engine,
                versions=tables.choose_versions(gpu, engine, None), **options)


def moe_latency_s(system, engine, version, *, hidden, inter, topk, experts, dtype, tp, tokens, distribution):
    """Fastest measured kernel of one MoE table point (TP-split experts), in seconds."""
    frame = raw_table(system, "moe", engine, version, "moe_perf.parquet")
    rows = frame[(frame.hidden_size == hidden) & (frame.inter_size == inter) & (frame.topk == topk)
                 & (frame.num_experts == experts) & (frame.moe_dtype == dtype) & (frame.moe_tp_size == tp)
                 & (frame.moe_ep_size == 1) & (frame.num_tokens == tokens) & (frame.distribution == distribution)]
    assert not rows.empty
    return rows.latency.min() / 1e3


def test_a_decode_steps_routed_experts_cost_the_moe_tables_value_once_per_layer():
    """Qwen3-235B-A22B (94 MoE layers) at TP 8: only the routed experts depend on the expert load,
    so two loads' steps differ by 94 times the two table values' difference at 64 tokens."""
    model = get_model("qwen3-235b-a22b")
    times = {load: step(model, "h100-80gb", 8, distribution=load).decode_s(64, 2048)
             for load in ("balanced", "power_law_1.2")}
    table = {load: moe_latency_s("h100_sxm", "vllm", "0.24.0", hidden=4096, inter=1536, topk=8, experts=128,
                                 dtype="bfloat16", tp=8, tokens=64, distribution=load)
             for load in times}
    assert times["power_law_1.2"] - times["balanced"] == pytest.approx(
        94 * (table["power_law_1.2"] - table["balanced"]), rel=1e-9)


def test_deepseek_routes_experts_on_every_layer_but_its_three_dense_ones():
    model = get_model("deepseek-v3")  # block-scaled fp8, as published
    times = {load: step(model, "h200-141gb", 8, distribution=load).prefill_s(1, 1024)
             for load in ("balanced", "power_law_1.01")}
    table = {load: moe_latency_s("h200_sxm", "vllm", "0.24.0", hidden=7168, inter=2048, topk=8, experts=256,
                                 dtype="fp8_block", tp=8, tokens=1024, distribution=load)
             for load in times}
    assert times["power_law_1.01"] - times["balanced"] == pytest.approx(
        (61 - 3) * (table["power_law_1.01"] - table["balanced"]), rel=1e-9)


def test_the_latent_attention_module_costs_its_measured_time_once_per_layer():
    """DeepSeek-V3 on vLLM reads the measured MLA module (16 local heads at TP 8); the KV length
    reaches nothing else in a decode step."""
    frame = raw_table("h200_sxm", "mla", "vllm", "0.24.0", "mla_generation_module_perf.parquet")
    frame = frame[(frame.gemm_type == "fp8_block") & (frame.kv_cache_dtype == "fp8") & (frame.num_heads == 16)
                  & (frame.batch_size == 64)]
    module = {length: frame[frame.step == length].latency.min() / 1e3 for length in (2048, 8192)}
    composed = step(get_model("deepseek-v3"), "h200-141gb", 8)  # block-scaled fp8, as published
    assert composed.decode_s(64, 8192) - composed.decode_s(64, 2048) == pytest.approx(
        61 * (module[8192] - module[2048]), rel=1e-9)


def test_vllm_reads_an_nvfp4_models_latent_attention_from_its_module_measured_at_nvfp4():
    """Kimi-K2.5 at NVFP4 on B200 under vLLM, which has no granular MLA tables: the module measured with NVFP4
    projections (8 local heads at TP 8, an fp8 cache), once per layer."""
    frame = raw_table("b200_sxm", "mla", "vllm", "0.24.0", "mla_generation_module_perf.parquet")
    frame = frame[(frame.gemm_type == "nvfp4") & (frame.kv_cache_dtype == "fp8") & (frame.num_heads == 8)
                  & (frame.batch_size == 64)]
    module = {length: frame[frame.step == length].latency.min() / 1e3 for length in (2048, 8192)}
    composed = step(get_model("kimi-k2.5@fp4"), "b200-180gb", 8)
    assert composed.versions["mla_module"] == "0.24.0"
    assert composed.decode_s(64, 8192) - composed.decode_s(64, 2048) == pytest.approx(
        61 * (module[8192] - module[2048]), rel=1e-9)


def test_an_engine_with_granular_latent_attention_tables_keeps_summing_them_at_nvfp4():
    composed = step(get_model("deepseek-r1@fp4"), "b200-180gb", 8, engine="trtllm")
    assert "mla_attention" in composed.versions and "mla_module" not in composed.versions


@pytest.mark.parametrize(("gpu", "system", "engine", "asked", "table", "version", "dtype"), [
    ("b200-180gb", "b200_sxm", "trtllm", None, "trtllm", "1.3.0rc20", "w4a8_mxfp4_mxfp8"),  # SM 100: MXFP8
    ("h200-141gb", "h200_sxm", "trtllm", None, "trtllm", "1.3.0rc20", "w4a16_mxfp4"),       # SM 90: bf16
    ("b200-180gb", "b200_sxm", "sglang", None, "sglang", "0.5.14", "w4a8_mxfp4_mxfp8"),     # flashinfer_mxfp4
    ("b200-180gb", "b200_sxm", "vllm", None, "vllm", "0.24.0", "w4a16_mxfp4"),              # vLLM's default
    # VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1: FlashInfer's kernel, measured in SGLang's table only
    ("b200-180gb", "b200_sxm", "vllm", "mxfp8", "sglang", "0.5.14", "w4a8_mxfp4_mxfp8"),
])
def test_mxfp4_experts_read_the_activation_precision_the_engine_runs_them_at(gpu, system, engine, asked, table,
                                                                             version, dtype):
    """gpt-oss-120b (36 MoE layers) on one GPU: TensorRT-LLM runs an MXFP4 checkpoint's experts as
    W4A8_MXFP4_MXFP8 from SM 100 and W4A16_MXFP4 below (``get_mxfp4_quant_algo``), SGLang's flashinfer_mxfp4
    runner quantizes their activations to MXFP8, vLLM only when asked; two loads' decode steps differ by 36
    times the difference of that kind's table values at 4 tokens."""
    model = get_model("gpt-oss-120b", dtype="mxfp4")
    times = {load: step(model, gpu, 1, engine=engine, distribution=load, moe_activations=asked).decode_s(4, 2048)
             for load in ("balanced", "power_law_1.2")}
    values = {load: moe_latency_s(system, table, version, hidden=2880, inter=2880, topk=4, experts=128,
                                  dtype=dtype, tp=1, tokens=4, distribution=load)
              for load in times}
    assert times["power_law_1.2"] - times["balanced"] == pytest.approx(
        36 * (values["power_law_1.2"] - values["balanced"]), rel=1e-9)


def test_a_kernel_read_from_another_engines_table_says_so_in_the_provenance():
    composed = step(get_model("gpt-oss-120b", dtype="mxfp4"), "b200-180gb", 1, engine="vllm", moe_activations="mxfp8")
    assert composed.versions["moe"] == "0.5.14 (sglang's table, the same kernel)"
    assert "sglang_flashinfer_trtllm_moe" in composed.notes()[0]


def deepseek_fp8_moe_s(table, version, kernel, tokens):
    """One DeepSeek-V3 FP8 (block-scaled) MoE point on B200, experts split over TP 8, from one kernel's rows."""
    frame = raw_table("b200_sxm", "moe", table, version, "moe_perf.parquet")
    rows = frame[(frame.hidden_size == 7168) & (frame.inter_size == 2048) & (frame.topk == 8)
                 & (frame.num_experts == 256) & (frame.moe_dtype == "fp8_block") & (frame.moe_tp_size == 8)
                 & (frame.moe_ep_size == 1) & (frame.num_tokens == tokens) & (frame.distribution == "power_law_1.01")
                 & (frame.kernel_source == kernel)]
    assert len(rows) == 1
    return rows.latency.iloc[0] / 1e3


def test_tensorrt_llms_fp8_block_experts_read_its_deepgemm_and_the_trtllm_gen_kernel_sglangs_table_measured():
    """TensorRT-LLM runs block-scaled FP8 experts on DEEPGEMM (its own table) or on TRTLLM, the trtllm-gen kernel
    FlashInfer ships and AIConfigurator measured in SGLang's table: the decode's routed experts cost 58 MoE layers
    times the faster of the two at 16 tokens, and the provenance names both tables."""
    model = get_model("deepseek-v3")
    fastest = step(model, "b200-180gb", 8, engine="trtllm")
    assert fastest.moe_kernels == ("deepgemm", "sglang_flashinfer_trtllm_moe")
    assert fastest.versions["moe"] == "1.3.0rc20 + 0.5.14 (sglang's table, the same kernel)"
    values = {kernel: deepseek_fp8_moe_s(table, version, kernel, 16) for table, version, kernel in
              (("trtllm", "1.3.0rc20", "deepgemm"), ("sglang", "0.5.14", "sglang_flashinfer_trtllm_moe"))}
    pinned = {kernel: step(model, "b200-180gb", 8, engine="trtllm", moe_kernel=kernel) for kernel in values}
    for kernel, composed in pinned.items():
        assert composed.moe_kernels == (kernel,)
        assert composed.decode_s(16, 2048) - pinned["deepgemm"].decode_s(16, 2048) == pytest.approx(
            58 * (values[kernel] - values["deepgemm"]), rel=1e-9, abs=1e-12)
    assert fastest.decode_s(16, 2048) == pytest.approx(pinned["sglang_flashinfer_trtllm_moe"].decode_s(16, 2048),
                                                       rel=1e-9)
    assert values["sglang_flashinfer_trtllm_moe"] < values["deepgemm"]


def test_tensorrt_llms_nvfp4_experts_of_384_read_the_trtllm_gen_kernel_sglangs_table_measured():
    """TensorRT-LLM's own GB200 table times Kimi-K2.5's 384 NVFP4 experts on CUTLASS alone; the trtllm-gen kernel its
    TRTLLM backend runs, which srt-slurm's Kimi-K2.5 TEP 8 decodes set, AIConfigurator measured in SGLang's table:
    a decode of one request over TEP 8 reads it (0.019 ms a layer against CUTLASS's 0.038)."""
    model = get_model("kimi-k2.5", dtype="fp4")
    composed = step(model, "gb200-185gb", 8, engine="trtllm", expert_parallel=True)
    assert composed.moe_kernels == ("moe_torch_flow_cutlass", "sglang_flashinfer_trtllm_moe")
    cutlass = step(model, "gb200-185gb", 8, engine="trtllm", expert_parallel=True, moe_kernel="moe_torch_flow_cutlass")
    assert composed.decode_s(1, 1024) < cutlass.decode_s(1, 1024) - 60 * 0.015e-3


def test_a_moe_kernel_no_table_measured_for_the_model_is_refused_naming_the_measured_ones():
    with pytest.raises(PdplanError, match=r"no cutlass MoE kernel measured on b200_sxm for trtllm's 256 experts of "
                                          r"7168×2048, top-8, fp8_block, power_law_1\.01 \(measured: deepgemm, "
                                          r"sglang_flashinfer_trtllm_moe\)") as err:
        step(get_model("deepseek-v3"), "b200-180gb", 8, engine="trtllm", moe_kernel="cutlass")
    assert err.value.field == "moe_kernel"


def test_vllm_and_sglang_tables_time_gpt_oss_flashinfer_experts_alike():
    """The premise of reading vLLM's MXFP8-activation experts from SGLang's table: where both tables measured
    FlashInfer's MXFP4 kernel with BF16 activations for gpt-oss's experts, they agree split by split."""
    keys = ["num_tokens", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size", "distribution"]

    def fastest(engine, version):
        frame = raw_table("b200_sxm", "moe", engine, version, "moe_perf.parquet")
        frame = frame[(frame.moe_dtype == "w4a16_mxfp4") & (frame.hidden_size == 2880)]
        return frame.groupby(keys).latency.min()

    both = pd.concat([fastest("vllm", "0.24.0").rename("vllm"), fastest("sglang", "0.5.14").rename("sglang")],
                     axis=1, join="inner").reset_index()
    ratio = (both.vllm / both.sglang).groupby([both.num_experts, both.moe_tp_size, both.moe_ep_size]).median()
    assert len(ratio) >= 20
    assert ratio.between(0.95, 1.05).all()


@pytest.mark.parametrize(("model", "gpu", "asked", "says"), [
    ("gpt-oss-120b", "h100-80gb", "mxfp8", "Blackwell"),
    ("qwen3-235b-a22b", "b200-180gb", "bf16", "MXFP4 experts only"),
])
def test_an_activation_precision_the_experts_cannot_take_is_refused_by_name(model, gpu, asked, says):
    with pytest.raises(PdplanError, match=says) as refused:
        step(get_model(model), gpu, 8 if model.startswith("qwen") else 1, moe_activations=asked)
    assert refused.value.field == "moe_activations"


def test_a_skewed_expert_load_slows_a_large_prefill():
    model = get_model("qwen3-235b-a22b")
    balanced = step(model, "h100-80gb", 8, distribution="balanced").prefill_s(1, 8192)
    skewed = step(model, "h100-80gb", 8, distribution="power_law_1.2").prefill_s(1, 8192)
    assert skewed > balanced


def test_the_expert_load_defaults_to_aiconfigurators_per_family_power_law():
    # MOEModel: self._power_law_alpha = 1.2; DeepSeekModel: 1.01 (aiconfigurator-core 0.12.0).
    assert moe.default_distribution(get_model("qwen3-235b-a22b")) == "power_law_1.2"
    assert moe.default_distribution(get_model("gpt-oss-120b")) == "power_law_1.2"
    assert moe.default_distribution(get_model("deepseek-v3")) == "power_law_1.01"
    note = step(get_model("qwen3-30b-a3b"), "h100-80gb", 1).notes()
    assert note == ["routed experts from AIConfigurator's MoE table (bfloat16, kernel "
                    "vllm_unquantizedfusedmoe_triton_tritonexperts) at a power-law (α = 1.2) expert load, every "
                    "expert on the one GPU"]


def test_the_provenance_names_every_moe_kernel_the_grid_reads_and_takes_the_fastest():
    # TensorRT-LLM 1.3.0rc20 on B200 measures NVFP4 experts under two backends: CUTLASS and TRTLLM-gen
    # (AIConfigurator's collector logs the latter as moe_torch_flow_min_latency); SGLang's table the trtllm-gen kernel
    # FlashInfer ships.
    [note] = step(get_model("deepseek-r1", dtype="fp4"), "b200-180gb", 8, engine="trtllm").notes()
    assert ("kernels moe_torch_flow_cutlass, moe_torch_flow_min_latency, sglang_flashinfer_trtllm_moe, the faster at "
            "each point") in note


def test_an_expert_split_finer_than_measured_is_scaled_and_counted():
    """vLLM's B200 table measures Qwen3-30B-A3B's experts split at most 2 ways (768 wide per GPU)."""
    composed = step(get_model("qwen3-30b-a3b"), "b200-180gb", 4)
    composed.decode_s(8, 1024)
    assert composed.log.text() == "MoE expert width per GPU outside the measured 384–768, scaled linearly (1 queries)"


def test_a_model_whose_experts_no_table_measures_is_refused_by_name():
    model = dataclasses.replace(get_model("qwen3-30b-a3b"), name="qwen3-30b-96x", experts=96)
    with pytest.raises(PdplanError, match=r"no vllm MoE measurement on h100_sxm for 96 experts of 2048×768, "
                                          r"top-8, bfloat16, power_law_1.2") as err:
        step(model, "h100-80gb", 1)
    assert err.value.field == "model"


def test_a_model_measured_only_with_whole_experts_is_refused_at_a_tensor_split_naming_ep():
    """TensorRT-LLM's H100 table measures gpt-oss-120b at EP 2 to 128 with expert TP 1 only."""
    with pytest.raises(PdplanError, match=r"trtllm 1\.3\.0rc20 on h100_sxm measures 128 experts of 2880×2880, "
                                          r"top-4, w4a16_mxfp4, power_law_1\.2 only with whole experts per GPU "
                                          r"\(EP 2, 4, 8, 16, 32, 64, 128\), never split over TP") as err:
        step(get_model("gpt-oss-120b", dtype="mxfp4"), "h100-80gb", 2, engine="trtllm")
    assert err.value.field == "ep"
    step(get_model("gpt-oss-120b", dtype="mxfp4"), "h100-80gb", 2, engine="trtllm", expert_parallel=True)


def test_sliding_window_layers_read_the_windows_own_kernel():
    """gpt-oss alternates 128-token windows and full attention; a longer context lengthens only
    the full-attention half of the layers."""
    composed = step(get_model("gpt-oss-120b", dtype="mxfp4"), "h100-80gb", 1)
    assert set(composed.generation) == {0, 128}
    full = composed.generation[0][(64, 8)]
    log = tables.Extrapolated()
    growth = composed.decode_s(16, 8192) - composed.decode_s(16, 2048)
    window = composed.generation[128][(64, 8)]
    assert growth == pytest.approx(18 * (full((16, 8192), log) - full((16, 2048), log))
                                   + 18 * (window((16, 8192), log) - window((16, 2048), log)), rel=1e-9)
