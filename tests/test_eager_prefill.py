"""The eager prefill's host time (:mod:`pdplan.latency.eager`): what a mixture-of-experts model's prompt
iteration adds to the kernel timings it is composed from, by SGLang's measurement of DeepSeek-V3 (pull
request #12160: a one-token prefill forward of 82.6 ms eager, 23.1 ms in a CUDA graph)."""

import importlib.util

import pytest

from pdplan.hardware import get_gpu
from pdplan.latency.eager import eager_prefill_host_s
from pdplan.latency.profile import with_prompt_iteration
from pdplan.latency.roofline import roofline_profile
from pdplan.latency.wide_roofline import wide_roofline_profile
from pdplan.modelref import get_model
from tests.test_sim_colocated import constant_profile

PER_LAYER_S = (82.6e-3 - 23.1e-3) / 61  # the measured forward's host share over DeepSeek-V3's 61 layers


def test_deepseek_v3_pays_the_whole_measured_gap_between_its_eager_and_graphed_forward():
    assert eager_prefill_host_s(get_model("deepseek-v3")) == pytest.approx(82.6e-3 - 23.1e-3)


@pytest.mark.parametrize("name, layers", [("gpt-oss-120b", 36), ("qwen3-235b-a22b", 94), ("kimi-k2", 61)])
def test_another_moe_model_pays_the_measured_time_per_layer_for_each_of_its_layers(name, layers):
    assert get_model(name).layers == layers  # the published configs' num_hidden_layers
    assert eager_prefill_host_s(get_model(name)) == pytest.approx(PER_LAYER_S * layers)


@pytest.mark.parametrize("name", ["llama-3.1-70b", "llama-3.1-8b", "qwen3-32b"])
def test_a_dense_model_pays_none(name):
    assert eager_prefill_host_s(get_model(name)) == 0.0


def test_the_time_is_added_to_every_prefill_batch_and_recorded_as_what_a_decode_step_does_not_pay():
    profile = constant_profile(prefill_ms=100.0, decode_ms=20.0)
    eager = with_prompt_iteration(profile, 0.030)
    assert eager.prefill_time_s([10]) == pytest.approx(profile.prefill_time_s([10]) + 0.030)
    assert eager.prefill_time_s([500, 700]) == pytest.approx(profile.prefill_time_s([500, 700]) + 0.030)
    assert eager.decode_step_s(8, 4000) == pytest.approx(profile.decode_step_s(8, 4000))
    assert eager.prompt_iteration_s == pytest.approx(profile.prompt_iteration_s + 0.030)


def test_an_engines_moe_roofline_carries_it_and_names_its_source():
    model, gpu = get_model("deepseek-v3"), get_gpu("h200-141gb")
    plain = roofline_profile(model, gpu, 8, 1)  # the Splitwise calibration's overhead is measured end to end
    fitted = roofline_profile(model, gpu, 8, 1, engine="sglang")
    assert plain.prompt_iteration_s == 0.0
    assert fitted.prompt_iteration_s == pytest.approx(82.6e-3 - 23.1e-3)
    assert "PR #12160" in fitted.provenance.notes and "PR #12160" not in plain.provenance.method
    assert fitted.provenance.method.endswith(
        "+ eager prefill host time 59.5 ms per prompt iteration (SGLang PR #12160)")


def test_a_wide_expert_parallel_ranks_roofline_carries_it_once_per_prompt_iteration():
    model, gpu = get_model("deepseek-v3"), get_gpu("h200-141gb")
    rank = wide_roofline_profile(model, gpu, 1, 1, dp=16, ep=16, engine="sglang", gpus_per_node=8)
    assert rank.prompt_iteration_s == pytest.approx(82.6e-3 - 23.1e-3)


def test_an_engines_dense_roofline_carries_none():
    assert roofline_profile(get_model("llama-3.1-70b"), get_gpu("h100-80gb"), 4, 1,
                            engine="vllm").prompt_iteration_s == 0.0


needs_tables = pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                                  reason="composed profiles need the optional extra pdplan[aic]")


@needs_tables
def test_a_composed_moe_profile_carries_it_over_its_operator_sum():
    from pdplan.latency.compose.profile import composed_profile
    profile = composed_profile(get_model("gpt-oss-120b"), get_gpu("h200-141gb"), 4, 1, engine="trtllm")
    assert profile.prompt_iteration_s == pytest.approx(PER_LAYER_S * 36, rel=1e-3)
    assert "PR #12160" in profile.provenance.notes
    assert profile.provenance.method.startswith("trtllm: operator sum") and "35.1 ms" in profile.provenance.method


@needs_tables
def test_a_composed_dense_profile_carries_none():
    from pdplan.latency.compose.profile import composed_profile
    profile = composed_profile(get_model("llama-3.1-8b"), get_gpu("h100-80gb"), 1, 1, engine="vllm")
    assert profile.prompt_iteration_s == 0.0
    assert "PR #12160" not in profile.provenance.notes
