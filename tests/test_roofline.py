"""Roofline profiles: each phase is max(compute, memory) + communication + a per-layer cost."""

import json
import math

import numpy as np
import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import GPU, get_gpu
from pdplan.latency.profile import load_profile, save_profile
from pdplan.latency.roofline import (
    CALIBRATION,
    DEFAULT_EFFICIENCY,
    DEFAULT_MAX_PREFILL_BATCH_TOKENS,
    phase_terms,
    pipeline_hops,
    roofline_profile,
)
from pdplan.latency.roofline_fit import calibrate_efficiency, load_splitwise_points, roofline_errors
from pdplan.modelref import get_model
from pdplan.modelspec import ModelSpec
from pdplan.network import network_for
from pdplan.work import decode_work, lower_bound_s, prefill_work

LLAMA70 = get_model("llama2-70b")
H100, A100, H100CAP = get_gpu("h100-80gb"), get_gpu("a100-80gb"), get_gpu("h100-80gb-pcap")
EC, EB, T_LAYER = DEFAULT_EFFICIENCY.compute, DEFAULT_EFFICIENCY.bandwidth, DEFAULT_EFFICIENCY.layer_overhead_s

# 0x02A's toy block (see tests/test_modelspec.py) on 0x02B's synthetic machine, C = 1e12 FLOP/s
# and R = 1e11 B/s, at full efficiency and no per-layer cost: the roofline is the lower bound.
TOY = ModelSpec(name="toy-0x02A", layers=4, hidden=64, q_heads=8, kv_heads=2, head_dim=8, ffn=160,
                vocab=1, parameters=163_904, mlp_matrices=3)
TOY_GPU = GPU(name="toy-gpu", memory_bytes=10**9, flops_per_s=1e12, hbm_bytes_per_s=1e11,
              nvlink_bytes_per_s=1e11, network_bytes_per_s=1e10, tdp_w=1, usd_per_hour=0)
IDEAL = dict(compute_efficiency=1.0, bandwidth_efficiency=1.0, layer_overhead_s=0.0)


def tp_all_reduce_s(gpu, tp, rows):
    """Two ring all-reduces per layer of rows × hidden × 2 bytes, from the shipped constants."""
    fit = network_for(gpu).fit_for("all_reduce", tp, intra_node=True)
    per = fit.alpha_s + 2 * (tp - 1) / tp * rows * 8192 * 2 / fit.beta_bytes_per_s
    return 2 * 80 * per


def test_long_prefill_is_compute_bound_and_equals_flops_over_effective_throughput_plus_comm():
    """One 8192-token prompt, llama2-70b H100 TP4: F/(tp·C·e_c) + 2L all-reduces + L·t_layer."""
    profile = roofline_profile(LLAMA70, H100, 4, 1)
    l = 8192
    flops = 2 * 80 * l * 855_638_016 + 4 * 80 * 64 * 128 * l * (l + 1) / 2
    compute = flops / (4 * 989e12 * EC)
    weights = math.ceil((80 * 855_638_016 + 32000 * 8192) / 4) * 2
    memory = (weights + l * 80 * 2 * 2 * 128 * 2) / (3.35e12 * EB)
    assert compute > 10 * memory
    expected = compute + tp_all_reduce_s(H100, 4, l) + 80 * T_LAYER
    assert profile.prefill_time_s([l]) == pytest.approx(expected, rel=1e-12)


def test_batch_one_decode_is_memory_bound_and_equals_weights_over_effective_bandwidth_plus_comm():
    """B = 1 holding 600 tokens, llama2-70b H100 TP4: (weights + K/V of 601 read + 1 written)/(R·e_b)."""
    profile = roofline_profile(LLAMA70, H100, 4, 1)
    weights = math.ceil((80 * 855_638_016 + 32000 * 8192) / 4) * 2
    kv_per_token = 80 * 2 * 2 * 128 * 2          # 2 of 8 KV heads on each of 4 ranks
    memory = (weights + (601 + 1) * kv_per_token) / (3.35e12 * EB)
    compute = (2 * 80 * 855_638_016 + 4 * 80 * 64 * 128 * 601) / (4 * 989e12 * EC)
    assert memory > 10 * compute
    expected = memory + tp_all_reduce_s(H100, 4, 1) + 80 * T_LAYER
    assert profile.decode_step_s(1, 600) == pytest.approx(expected, rel=1e-12)


def test_toy_decode_is_the_0x02B_lower_bound_3_661_us_plus_the_output_head():
    """3 requests holding 47 + 48 + 49 = 144 tokens see s = 48, 49, 50 (Σs = 147): 3.661 µs of
    block weights and K/V, plus the 64 × 1 × 2-byte output head the roofline also reads."""
    profile = roofline_profile(TOY, TOY_GPU, 1, 1, **IDEAL)
    bound = lower_bound_s(decode_work(TOY, [48, 49, 50]), 1e12, 1e11)
    assert bound * 1e6 == pytest.approx(3.661, abs=5e-4)
    assert profile.decode_step_s(3, 144) == pytest.approx(bound + 64 * 1 * 2 / 1e11, rel=1e-12)


def test_toy_fresh_prefill_is_the_0x02B_compute_bound():
    """16 new rows, no prefix: F = 2·4·16·40960 + 4·4·8·8·136 = 5,382,144 FLOPs → 5.382 µs."""
    profile = roofline_profile(TOY, TOY_GPU, 1, 1, **IDEAL)
    bound = lower_bound_s(prefill_work(TOY, new_rows=16, visible_before=0), 1e12, 1e11)
    assert bound == pytest.approx(5_382_144 / 1e12, rel=1e-12)
    assert profile.prefill_time_s([16]) == pytest.approx(bound, rel=1e-12)


def test_prefill_attention_is_the_causal_triangle_of_each_prompt():
    """Two prompts of 8 cost Σ l(l+1)/2 = 72 pairs, one prompt of 16 costs 136 (toy, compute-bound)."""
    profile = roofline_profile(TOY, TOY_GPU, 1, 1, **IDEAL)
    linear = 2 * 4 * 16 * 40960
    assert profile.prefill_time_s([8, 8]) == pytest.approx((linear + 4 * 4 * 64 * 72) / 1e12, rel=1e-12)


def test_more_tensor_parallelism_halves_compute_but_adds_all_reduces():
    llama8 = get_model("llama-3.1-8b")
    (p1, _), (p2, _) = phase_terms(llama8, H100, 1, 1), phase_terms(llama8, H100, 2, 1)
    assert p2.compute_s[1] == pytest.approx(p1.compute_s[1] / 2, rel=1e-12)
    assert p1.comm_s == (0.0, 0.0, 0.0)
    fit = network_for(H100).fit_for("all_reduce", 2, intra_node=True)
    assert p2.comm_s[0] == pytest.approx(2 * 32 * fit.alpha_s, rel=1e-12)
    assert p2.comm_s[1] == pytest.approx(2 * 32 * 1.0 * 4096 * 2 / fit.beta_bytes_per_s, rel=1e-12)


def test_pipeline_adds_one_send_per_stage_boundary_to_the_sum_of_stage_times():
    """TP4 PP2 on one 8-GPU node = TP4 PP1 + one in-node hop of N × hidden × 2 bytes."""
    pp1 = roofline_profile(LLAMA70, H100, 4, 1)
    pp2 = roofline_profile(LLAMA70, H100, 4, 2)
    hop = network_for(H100).fit_for("send_recv", 2, intra_node=True)
    for rows in (1, 4096):
        extra = hop.alpha_s + rows * 8192 * 2 / hop.beta_bytes_per_s
        assert pp2.prefill_time_s([rows]) - pp1.prefill_time_s([rows]) == pytest.approx(extra, rel=1e-9)


def test_stage_boundaries_cross_nodes_where_the_packing_does():
    assert pipeline_hops(4, 4, 8) == (2, 1)
    assert pipeline_hops(8, 2, 8) == (0, 1)
    assert pipeline_hops(2, 4, 8) == (3, 0)


def test_a100_tp1_llama2_70b_is_refused_naming_the_weights():
    with pytest.raises(PdplanError) as err:
        roofline_profile(LLAMA70, A100, 1, 1)
    assert str(err.value) == ("llama2-70b a100-80gb TP1 PP1: weights 128.5 GiB per GPU > 72.0 GiB "
                              "usable (90% of 80 GiB)")


def test_capped_h100_prefill_compute_is_slower_by_the_measured_1_3():
    """Same comm and per-layer cost; the compute part of a compute-bound prefill grows 1.3×."""
    fixed = tp_all_reduce_s(H100, 4, 8192) + 80 * T_LAYER
    capped = roofline_profile(LLAMA70, H100CAP, 4, 1).prefill_time_s([8192])
    uncapped = roofline_profile(LLAMA70, H100, 4, 1).prefill_time_s([8192])
    assert capped - fixed == pytest.approx(1.3 * (uncapped - fixed), rel=1e-12)


def test_capped_h100_memory_bound_decode_is_unchanged():
    capped = roofline_profile(LLAMA70, H100CAP, 4, 1).decode_step_s(1, 600)
    assert capped == roofline_profile(LLAMA70, H100, 4, 1).decode_step_s(1, 600)


def test_profile_records_roofline_provenance_and_efficiencies():
    prov = roofline_profile(LLAMA70, H100CAP, 4, 2).provenance
    assert prov.source == "roofline"
    assert prov.method == ("roofline max(compute, memory) + comm + L*overhead; compute_efficiency=0.54, "
                           "bandwidth_efficiency=1, layer_overhead_us=260")
    assert "h100-80gb's constants" in prov.notes and "1 in-node and 0 cross-node hops" in prov.notes
    assert "compute throughput / 1.3" in prov.notes


def test_prefill_batch_cap_is_the_default_or_the_kv_capacity_whichever_is_smaller():
    roomy = roofline_profile(LLAMA70, H100, 8, 1)
    assert roomy.max_prefill_batch_tokens == DEFAULT_MAX_PREFILL_BATCH_TOKENS
    tight = roofline_profile(LLAMA70, A100, 2, 1, memory_utilization=0.82)
    assert tight.max_prefill_batch_tokens == tight.kv_capacity_tokens < DEFAULT_MAX_PREFILL_BATCH_TOKENS


def test_roofline_profile_survives_a_profile_file_round_trip(tmp_path):
    profile = roofline_profile(LLAMA70, H100, 4, 2)
    save_profile(profile, tmp_path / "p.yaml")
    again = load_profile(tmp_path / "p.yaml")
    # the file carries 6 significant digits per coefficient
    assert again.prefill_time_s([1000, 300]) == pytest.approx(profile.prefill_time_s([1000, 300]), rel=1e-5)
    assert again.provenance == profile.provenance


@pytest.mark.parametrize("options, message", [
    ({"compute_efficiency": 0.0}, "compute efficiency must be in (0, 1], got 0.0"),
    ({"bandwidth_efficiency": 1.5}, "bandwidth efficiency must be in (0, 1], got 1.5"),
    ({"layer_overhead_s": -1e-6}, "layer overhead must be >= 0 s, got -1e-06"),
    ({"memory_utilization": 0.0}, "memory utilization must be in (0, 1], got 0.0"),
    ({"max_prefill_batch_tokens": 0}, "max prefill batch tokens must be >= 1, got 0"),
], ids=["compute", "bandwidth", "overhead", "memory", "batch-cap"])
def test_out_of_range_options_are_refused(options, message):
    with pytest.raises(PdplanError) as err:
        roofline_profile(LLAMA70, H100, 4, 1, **options)
    assert str(err.value) == message


# --- against Splitwise's measurements (../shared/data) --------------------------------------------

@pytest.fixture(scope="module")
def splitwise(shared_data):
    return shared_data / "profiles" / "splitwise_perf_model.csv"


@pytest.mark.slow
def test_defaults_predict_splitwise_llama2_70b_within_20_percent_mape(splitwise):
    """Prefill MAPE ≤ 20 % and decode MAPE ≤ 15 % on a100/h100, TP 2/4/8 (batch-64 TP2 runs dropped)."""
    points = load_splitwise_points(splitwise)
    prefill, decode = roofline_errors(points, LLAMA70, {g.name: g for g in (A100, H100)})
    assert (len(prefill), len(decode), len(points.outliers)) == (76, 112, 4)
    assert np.abs(prefill).mean() <= 0.20 and np.abs(decode).mean() <= 0.15
    assert np.abs(prefill).mean() == pytest.approx(CALIBRATION["mape_prefill"], abs=5e-4)
    assert np.abs(decode).mean() == pytest.approx(CALIBRATION["mape_decode"], abs=5e-4)
    assert points.sha256 == CALIBRATION["sha256"]


@pytest.mark.slow
def test_defaults_are_the_calibration_grid_optimum(splitwise):
    points = load_splitwise_points(splitwise)
    assert calibrate_efficiency(points, LLAMA70, {g.name: g for g in (A100, H100)}) == DEFAULT_EFFICIENCY


@pytest.mark.slow
def test_held_out_bloom_176b_is_predicted_within_25_percent_mape(splitwise):
    """bloom-176b never entered the calibration: prefill MAPE ≤ 25 %, decode ≤ 15 %."""
    points = load_splitwise_points(splitwise, "bloom-176b", ("a100-80gb", "h100-80gb", "h100-80gb-pcap"))
    prefill, decode = roofline_errors(points, get_model("bloom-176b"),
                                      {g.name: g for g in (A100, H100, H100CAP)})
    assert np.abs(prefill).mean() <= 0.25 and np.abs(decode).mean() <= 0.15


@pytest.mark.slow
def test_measured_power_cap_slowdown_is_1_3_on_prompts_and_1_on_tokens(splitwise):
    import pandas as pd

    raw = pd.read_csv(splitwise)
    keys = ["model", "tensor_parallel", "prompt_size", "batch_size", "token_size"]
    means = raw.groupby(keys + ["hardware"])[["prompt_time", "token_time"]].mean().reset_index()
    pair = means[means.hardware == "h100-80gb"].merge(means[means.hardware == "h100-80gb-pcap"], on=keys)
    assert len(pair) == 76
    assert np.allclose(pair.prompt_time_y / pair.prompt_time_x, 1.3, rtol=1e-9)
    assert np.allclose(pair.token_time_y / pair.token_time_x, 1.0, rtol=1e-9)


# --- `pdplan profile roofline` ---------------------------------------------------------------------

def test_profile_roofline_json_has_the_profile_show_keys_plus_notes(run_cli):
    code, out, err = run_cli("profile", "roofline", "--model", "llama2-70b", "--gpu", "h100-80gb",
                             "--tp", "4", "--pp", "1", "--json")
    assert (code, err) == (0, "")
    result = json.loads(out)
    assert list(result) == [
        "model", "gpu", "tp", "pp", "dp", "ep", "prefill_ms_512", "prefill_ms_2048", "decode_ms_b1",
        "decode_ms_b32", "kv_capacity_tokens", "max_prefill_batch_tokens", "source", "method",
        "points_prefill", "points_decode", "mape_prefill", "max_error_prefill", "mape_decode",
        "max_error_decode", "outliers", "file", "sha256", "profile", "all_to_all", "redundant_experts", "shape",
        "notes"]
    assert (result["source"], result["profile"]) == ("roofline", None)
    expected = roofline_profile(LLAMA70, H100, 4, 1).prefill_time_s([2048]) * 1e3
    assert result["prefill_ms_2048"] == pytest.approx(expected, abs=5e-4)


def test_profile_roofline_writes_a_loadable_profile_with_the_given_efficiency(run_cli, tmp_path):
    path = tmp_path / "roofline.yaml"
    code, _, err = run_cli("profile", "roofline", "--model", "llama2-70b", "--gpu", "h100-80gb-pcap",
                           "--tp", "8", "--pp", "1", "--compute-efficiency", "0.5", "-o", path, "--json")
    assert (code, err) == (0, "")
    assert "compute_efficiency=0.5," in load_profile(path).provenance.method


def test_profile_roofline_refuses_a_shape_that_cannot_hold_the_weights(run_cli):
    code, out, err = run_cli("profile", "roofline", "--model", "llama2-70b", "--gpu", "a100-80gb",
                             "--tp", "1", "--pp", "1")
    assert (code, out) == (2, "")
    assert err == ("Error: llama2-70b a100-80gb TP1 PP1: weights 128.5 GiB per GPU > 72.0 GiB usable "
                   "(90% of 80 GiB)\n")


def test_each_engine_has_a_fitted_roofline_leaner_than_the_splitwise_2023_case():
    from pdplan.latency.roofline import efficiency_for
    for engine in ("vllm", "sglang", "trtllm"):
        fitted = efficiency_for(engine)
        assert fitted.layer_overhead_s < DEFAULT_EFFICIENCY.layer_overhead_s / 4
        profile = roofline_profile(get_model("llama-3.1-8b"), H100, 8, 1, engine=engine)
        assert f"Efficiencies fitted for {engine}" in profile.provenance.notes
    assert efficiency_for(None) == efficiency_for("splitwise-2023") == DEFAULT_EFFICIENCY


def test_an_engine_without_a_roofline_fit_is_refused_with_the_known_ones():
    from pdplan.latency.roofline import efficiency_for
    with pytest.raises(PdplanError, match=r"no roofline fit for engine 'tgi' \(known: splitwise-2023, vllm"):
        efficiency_for("tgi")
