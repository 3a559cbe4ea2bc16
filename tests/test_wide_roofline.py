"""The wide expert-parallel roofline: one attention-DP rank's step when no wide-EP table holds the shape."""

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.eager import eager_prefill_host_s
from pdplan.latency.roofline import Efficiency, efficiency_for
from pdplan.latency.source import ProfileSource
from pdplan.latency.wide_roofline import WideFit, WideRoofline, wide_fit_for, wide_roofline_profile
from pdplan.modelref import get_model
from pdplan.modelspec import kv_capacity_tokens
from pdplan.network import network_for
from pdplan.work import COMBINE_BYTES, DISPATCH_BYTES

PURE = Efficiency(compute=1.0, bandwidth=1.0, layer_overhead_s=0.0)


def _rank(model="deepseek-v3", gpu="h200-141gb", tp=1, dp=8, ep=8, fit=None, gpus_per_node=8):
    return WideRoofline(model=get_model(model), gpu=get_gpu(gpu), tp=tp, dp=dp, ep=ep, efficiency=PURE,
                        gpus_per_node=gpus_per_node, fit=fit)


def test_an_all_to_all_inside_one_node_sends_k_copies_of_each_row_over_nvlink():
    """Each MoE layer: dispatch FP8 and combine BF16 of k copies of every row, 7 of 8 to other GPUs."""
    rank, model = _rank(), get_model("deepseek-v3")
    inside = network_for(get_gpu("h200-141gb")).fit_for("send_recv", 2, intra_node=True)
    sent = 100 * model.experts_per_token * model.hidden * (DISPATCH_BYTES + COMBINE_BYTES)
    expected = model.moe_layers * (2 * inside.alpha_s + sent * 7 / 8 / inside.beta_bytes_per_s)
    assert rank.all_to_all_s(100, prefill=False) == pytest.approx(expected, rel=1e-12)


def test_an_all_to_all_over_two_nodes_is_bound_by_the_share_that_crosses_them():
    model, net = get_model("deepseek-v3"), network_for(get_gpu("h200-141gb"))
    inside, across = (net.fit_for("send_recv", 2, intra_node=flag) for flag in (True, False))
    sent = 100 * model.experts_per_token * model.hidden * (DISPATCH_BYTES + COMBINE_BYTES)
    per_byte = max(7 / 16 / inside.beta_bytes_per_s, 8 / 16 / across.beta_bytes_per_s)
    assert _rank(dp=16, ep=16).wire_s(100) == pytest.approx(model.moe_layers * sent * per_byte, rel=1e-12)


def test_routed_experts_over_many_tokens_take_each_gpus_share_of_their_flops():
    """Compute-bound: 2 FLOPs per multiply-add, k experts per token, each of the TP x DP GPUs 1/(TP x DP)."""
    model, gpu = get_model("deepseek-v3"), get_gpu("h200-141gb")
    tokens = 1_000_000
    flops = 2 * model.moe_layers * tokens * model.experts_per_token * model.expert_params / 8
    assert _rank().balanced_group_s(tokens, prefill=False) == pytest.approx(flops / gpu.tensor_flops("fp8"),
                                                                   rel=1e-9)


def test_with_attention_tp_the_routed_flops_spread_over_every_gpu_of_the_group_once():
    """TP 2 × DP 8: each of the 16 GPUs runs 1/16 of the group's expert rows."""
    model, gpu = get_model("deepseek-v3"), get_gpu("h200-141gb")
    tokens = 1_000_000
    flops = 2 * model.moe_layers * tokens * model.experts_per_token * model.expert_params / 16
    rank = _rank(tp=2, dp=8, ep=16, gpus_per_node=16)
    assert rank.balanced_group_s(tokens, prefill=False) == pytest.approx(flops / gpu.tensor_flops("fp8"), rel=1e-9)


def test_one_decoded_token_reads_only_its_k_experts_spread_over_the_gpus():
    model, gpu = get_model("deepseek-v3"), get_gpu("h200-141gb")
    read = model.experts_per_token * model.moe_layers * model.expert_params * model.weight_bytes_per_param / 8
    assert _rank().balanced_group_s(1, prefill=False) == pytest.approx(read / gpu.hbm_bytes_per_s, rel=1e-9)


def test_a_prefill_reads_every_expert_as_the_tp_only_roofline_does():
    model, gpu = get_model("deepseek-v3"), get_gpu("h200-141gb")
    read = model.experts * model.moe_layers * model.expert_params * model.weight_bytes_per_param / 8
    assert _rank().balanced_group_s(1, prefill=True) == pytest.approx(read / gpu.hbm_bytes_per_s, rel=1e-9)


def test_the_profile_is_the_rank_step_itself():
    """Exact for a prefill (with the eager prefill's host time); for a decode at every batch where the experts
    touched are restated (powers of two), the chord of their count below it between them."""
    model, gpu = get_model("kimi-k2"), get_gpu("gb200-185gb")
    rank = WideRoofline(model=model, gpu=gpu, tp=1, dp=8, ep=8, efficiency=efficiency_for("sglang"),
                        gpus_per_node=72, fit=wide_fit_for("sglang"))
    profile = wide_roofline_profile(model, gpu, 1, 1, dp=8, ep=8, engine="sglang")
    for batch, length in ((1, 64), (2, 1000), (4, 4096)):
        assert profile.prefill_time_s([length] * batch) == pytest.approx(
            rank.prefill_s(batch, length) + eager_prefill_host_s(model), rel=1e-5)
    for batch in (1, 2, 4, 16, 256):
        assert profile.decode_step_s(batch, batch * 2048) == pytest.approx(rank.decode_s(batch, 2048), rel=1e-5)
    assert profile.decode_step_s(3, 3 * 2048) <= rank.decode_s(3, 2048)


def test_the_fitted_terms_add_a_fixed_cost_per_moe_layer_and_scale_the_routed_experts():
    fit = WideFit(a2a_prefill_s=300e-6, a2a_decode_s=100e-6, expert_factor=2.0)
    plain, fitted = _rank(), _rank(fit=fit)
    own, group, wire = plain.decode_parts(16, 2048)
    layers = get_model("deepseek-v3").moe_layers
    assert fitted.decode_s(16, 2048) == pytest.approx(own + 2.0 * group + wire + layers * 100e-6, rel=1e-12)
    own, group, wire = plain.prefill_parts(2, 1024)
    assert fitted.prefill_s(2, 1024) == pytest.approx(own + 2.0 * group + wire + layers * 300e-6, rel=1e-12)


def test_every_engine_with_wide_ep_tables_has_fitted_terms():
    for engine in ("vllm", "sglang", "trtllm"):
        fit = wide_fit_for(engine)
        assert fit is not None and fit.expert_factor >= 1 and fit.a2a_decode_s >= 0
    assert wide_fit_for(None) is None


def test_a_wide_shape_no_table_holds_gets_one_ranks_roofline_profile():
    """Kimi-K2's 384 experts are in no wide-EP table: DEP8 on GB200 is timed by the wide roofline."""
    model, gpu = get_model("kimi-k2"), get_gpu("gb200-185gb")
    source = ProfileSource({}, engine="sglang")
    profile = source.profile(model, gpu, 1, 1, dp=8, ep=8)
    assert (profile.provenance.source, profile.dp, profile.ep) == ("roofline", 8, 8)
    assert profile.provenance.method.startswith("wide-EP roofline")
    assert "Wide expert parallelism without a table" in profile.provenance.notes
    assert profile.kv_capacity_tokens == kv_capacity_tokens(model, gpu, 1, 1, 0.9, ep=8, dp=8)
    assert profile.group_decode is not None
    assert "wideep" in source.fallback_reason(model.name, gpu.name, 1, 1, dp=8, ep=8)


def test_a_larger_group_of_ranks_costs_the_rank_more_routed_expert_time_per_step():
    """At the same per-rank batch, DP 16 ranks send twice the tokens through the routed experts as DP 8."""
    profile = wide_roofline_profile(get_model("kimi-k2"), get_gpu("gb200-185gb"), 1, 1, dp=8, ep=8, engine="sglang")
    assert profile.group_s(False, 16 * 64) > profile.group_s(False, 8 * 64)


def test_the_wide_roofline_times_one_pipeline_stage():
    with pytest.raises(PdplanError, match="PP 1") as err:
        wide_roofline_profile(get_model("kimi-k2"), get_gpu("gb200-185gb"), 1, 2, dp=8, ep=8)
    assert err.value.field == "pp"


def test_a_wide_shape_that_cannot_hold_the_model_is_refused():
    with pytest.raises(PdplanError, match="kimi-k2"):
        wide_roofline_profile(get_model("kimi-k2"), get_gpu("h100-80gb"), 1, 1, dp=4, ep=4)


def test_redundant_experts_take_their_weights_out_of_each_ranks_kv():
    """32 redundant slots over EP 16 put 2 more of DeepSeek-V3's FP8 experts (3 × 7168 × 2048 bytes each) on every GPU
    in each of its 58 MoE layers: that many bytes less KV, 35,136 bytes a token (MLA's 576 values × 61 layers)."""
    model, gpu = get_model("deepseek-v3@fp8"), get_gpu("h200-141gb")
    source = ProfileSource({}, compose=False)
    plain = source.profile(model, gpu, 1, 1, dp=16, ep=16)
    slotted = source.profile(model, gpu, 1, 1, dp=16, ep=16, redundant_experts=32)
    lost = (plain.kv_capacity_tokens - slotted.kv_capacity_tokens) * 576 * 61
    assert lost == pytest.approx(2 * 3 * 7168 * 2048 * 58, rel=0.01)  # block scales add 1/128² of it


def test_redundant_experts_that_do_not_spread_evenly_over_ep_are_refused_naming_the_field():
    with pytest.raises(PdplanError, match="256 \\+ 8 redundant experts do not spread evenly over EP 16") as refused:
        ProfileSource({}, compose=False).profile(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 1, 1, dp=16,
                                                 ep=16, redundant_experts=8)
    assert refused.value.field == "redundant_experts"
