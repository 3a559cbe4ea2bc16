"""Composed steps of one attention data-parallel rank under wide expert parallelism.

The rank's MoE layer is router + shared experts + dispatch + routed experts + combine, as
AIConfigurator's large-EP MoE block sums it; the routed experts are read at DP × the rank's tokens
(``MoEExpertCompute`` scales tokens by ``attention_dp_size``), dispatch and combine at the rank's own
tokens (``MoEAllToAll`` sees per-rank token counts). Expected values are read from AIConfigurator's parquet
tables here, independently of the composition. These need the optional extra (pip install
'pdplan[aic]'); without it they skip.
"""

from dataclasses import replace

import pytest

pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")

import pandas as pd  # noqa: E402

from pdplan.errors import PdplanError  # noqa: E402
from pdplan.hardware import get_gpu  # noqa: E402
from pdplan.latency.compose import tables  # noqa: E402
from pdplan.latency.compose.profile import composed_profile  # noqa: E402
from pdplan.latency.compose.step import Step, reads_moe_table  # noqa: E402
from pdplan.latency.compose.tables import Extrapolated  # noqa: E402
from pdplan.latency.compose.wide import stand_in_experts  # noqa: E402
from pdplan.latency.profile import profile_from_dict, profile_to_dict  # noqa: E402
from pdplan.latency.source import ProfileSource  # noqa: E402
from pdplan.modelref import get_model  # noqa: E402
from pdplan.modelspec import kv_capacity_tokens  # noqa: E402
from pdplan.shape import InstanceShape  # noqa: E402
from pdplan.sim.plan import Pool  # noqa: E402
from pdplan.vocabulary import AllToAll  # noqa: E402


def raw(system, family, engine, version, filename):
    return pd.read_parquet(tables.package_root() / "systems" / "data" / system / family / engine / version / filename)


@pytest.fixture(scope="module")
def sglang_dp8(dsr1):
    return Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=8), engine="sglang",
                versions=tables.choose_versions("h200-141gb", "sglang", None))


def test_a_decode_rank_reads_the_experts_at_dp_times_its_tokens_and_the_all_to_all_at_its_own(sglang_dp8):
    """16 requests on each of 8 ranks: the low-latency DeepEP dispatch and combine of 16 tokens on one node,
    and the wide-EP decode MoE kernel at 8 × 16 = 128 tokens over EP 8 (DeepSeek's power-law α = 1.01)."""
    versions = sglang_dp8.versions
    ll = raw("h200_sxm", "comm", "sglang", versions["wideep_deepep_ll"], "wideep_deepep_ll_perf.parquet")
    ll = ll[(ll.node_num == 1) & (ll.hidden_size == 7168) & (ll.num_topk == 8) & (ll.num_experts == 256)
            & (ll.num_token == 16)]
    moe = raw("h200_sxm", "moe", "sglang", versions["wideep_generation_moe"], "wideep_generation_moe_perf.parquet")
    moe = moe[(moe.moe_dtype == "fp8_block") & (moe.hidden_size == 7168) & (moe.inter_size == 2048)
              & (moe.num_experts == 256) & (moe.topk == 8) & (moe.moe_tp_size == 1) & (moe.moe_ep_size == 8)
              & (moe.distribution == "power_law_1.01") & (moe.num_tokens == 128)]
    assert len(ll) == 1 and not moe.empty
    expected = (ll.dispatch_avg_t_us.iloc[0] + ll.combine_avg_t_us.iloc[0]) / 1e6 + moe.latency.min() / 1e3
    assert sglang_dp8.wide_experts.routed_s(16, False, Extrapolated()) == pytest.approx(expected, rel=1e-12)


def test_a_prefill_rank_dispatches_with_deepep_normal_mode_at_20_sms(sglang_dp8):
    versions = sglang_dp8.versions
    normal = raw("h200_sxm", "comm", "sglang", versions["wideep_deepep_normal"], "wideep_deepep_normal_perf.parquet")
    normal = normal[(normal.node_num == 1) & (normal.hidden_size == 7168) & (normal.num_topk == 8)
                    & (normal.num_experts == 256) & (normal.num_token == 4096) & (normal.dispatch_sms == 20)
                    & (normal.combine_sms == 20)]
    moe = raw("h200_sxm", "moe", "sglang", versions["wideep_context_moe"], "wideep_context_moe_perf.parquet")
    moe = moe[(moe.moe_dtype == "fp8_block") & (moe.inter_size == 2048) & (moe.moe_ep_size == 8)
              & (moe.distribution == "power_law_1.01") & (moe.num_tokens == 8 * 4096)]
    assert len(normal) == 1 and not moe.empty
    expected = ((normal.dispatch_transmit_us + normal.dispatch_notify_us + normal.combine_transmit_us
                 + normal.combine_notify_us).iloc[0] / 1e6 + moe.latency.min() / 1e3)
    assert sglang_dp8.wide_experts.routed_s(4096, True, Extrapolated()) == pytest.approx(expected, rel=1e-12)


def test_the_shared_expert_is_sglangs_measured_whole_mlp(sglang_dp8):
    versions = sglang_dp8.versions
    mlp = raw("h200_sxm", "mlp", "sglang", versions["wideep_generation_mlp"], "wideep_generation_mlp_perf.parquet")
    mlp = mlp[(mlp.quant_type == "fp8_block") & (mlp.intermediate_size == 2048) & (mlp.num_token == 32)]
    assert sglang_dp8.wide_experts.shared_s(32, False, Extrapolated()) == pytest.approx(mlp.avg_ms.min() / 1e3)


def test_a_wide_profile_is_one_ranks_with_its_own_kv(dsr1):
    gpu = get_gpu("h200-141gb")
    profile = composed_profile(dsr1, gpu, 1, 1, dp=8, ep=8, engine="sglang")
    assert (profile.dp, profile.ep, profile.gpus) == (8, 8, 8)
    assert profile.key == ("deepseek-r1@fp8", "h200-141gb", 1, 1, 8, 8)
    assert profile.kv_capacity_tokens == kv_capacity_tokens(dsr1, gpu, 1, 1, dp=8, ep=8)
    notes = profile.provenance.notes
    assert "wideep_generation_moe" in notes and "wideep_deepep_ll" in notes and "power-law (α = 1.01)" in notes


def test_a_profile_file_keeps_dp_and_ep_and_old_files_read_as_one_rank(dsr1):
    profile = composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=8, ep=8, engine="sglang")
    written = profile_to_dict(profile)
    assert (written["dp"], written["ep"]) == (8, 8)
    old = {k: v for k, v in written.items() if k not in ("dp", "ep")}
    assert (profile_from_dict(old, "old.yaml").dp, profile_from_dict(old, "old.yaml").ep) == (1, 1)


def test_a_wide_profile_holds_its_moe_layers_time_over_the_whole_instances_tokens(dsr1):
    """The group part the simulator re-times when ranks' batches differ: at 128 instance tokens, DeepSeek's
    58 MoE layers × the wide-EP decode MoE kernel at 128 tokens over EP 8; below 8 tokens (one per rank)
    it holds its 8-token value."""
    profile = composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=8, ep=8, engine="sglang")
    step = Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=8), engine="sglang",
                versions=tables.choose_versions("h200-141gb", "sglang", None))
    moe = raw("h200_sxm", "moe", "sglang", step.versions["wideep_generation_moe"], "wideep_generation_moe_perf.parquet")
    moe = moe[(moe.moe_dtype == "fp8_block") & (moe.hidden_size == 7168) & (moe.inter_size == 2048)
              & (moe.num_experts == 256) & (moe.topk == 8) & (moe.moe_tp_size == 1) & (moe.moe_ep_size == 8)
              & (moe.distribution == "power_law_1.01") & (moe.num_tokens == 128)]
    assert profile.group_s(False, 128) == pytest.approx(58 * moe.latency.min() / 1e3, rel=1e-5)
    assert profile.group_s(False, 1) == profile.group_s(False, 4) == profile.group_s(False, 8)
    assert 0 < profile.group_s(False, 8 * 16) < profile.decode_step_s(16, 16 * 2048)


def test_a_profile_file_keeps_the_group_part_and_refuses_a_malformed_one(dsr1):
    profile = composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=8, ep=8, engine="sglang")
    written = profile_to_dict(profile)
    assert profile_from_dict(written, "p.yaml").group_decode_points == profile.group_decode_points
    with pytest.raises(PdplanError, match="must be \\[tokens, ms\\] points from 1 token on") as err:
        profile_from_dict({**written, "group": {"decode": [[2, 1.0], [4, 2.0]]}}, "p.yaml")
    assert err.value.field.endswith("decode")
    with pytest.raises(PdplanError, match="decode part at DP 8 × 1 tokens is 1000 ms, more than the .* ms step "
                                          "it is part of"):
        profile_from_dict({**written, "group": {"decode": [[1, 1000.0]]}}, "p.yaml")


def test_an_ep_between_measured_ones_weighs_its_neighbours_in_one_over_ep(dsr1):
    """B200's SGLang wide-EP decode MoE table measures DeepSeek at EP 4 and 16, not 8: EP 8 is
    (1 − w) · EP 4 + w · EP 16 at the same group tokens, w = (1/8 − 1/4) / (1/16 − 1/4) = 2/3."""
    step = Step(model=dsr1, shape=InstanceShape(gpu="b200-180gb", tp=1, pp=1, dp=8, ep=8), engine="sglang",
                versions=tables.choose_versions("b200-180gb", "sglang", None))
    moe = raw("b200_sxm", "moe", "sglang", step.versions["wideep_generation_moe"], "wideep_generation_moe_perf.parquet")
    moe = moe[(moe.moe_dtype == "fp8_block") & (moe.inter_size == 2048) & (moe.num_experts == 256)
              & (moe.moe_tp_size == 1) & (moe.distribution == "power_law_1.01") & (moe.num_tokens == 128)]
    at = {ep: moe[moe.moe_ep_size == ep].latency.min() / 1e3 for ep in (4, 8, 16)}
    assert at[8] != at[8] and at[4] > 0 and at[16] > 0  # EP 8 unmeasured (NaN)
    compute = step.wide_experts.compute["generation"]
    assert compute((128,), Extrapolated()) == pytest.approx(at[4] / 3 + 2 * at[16] / 3, rel=1e-12)
    assert "EP 8 interpolated in 1/EP between the measured EP 4 and EP 16" in step.wide_experts.note()


def test_dep72_on_a_gb200_nvl72_rack_composes_with_its_all_to_all_inside_the_nvlink_domain(dsr1):
    """72 ranks of one NVL72 rack: the all-to-all stays on one NVLink domain (one node of 72, as
    AIConfigurator's large-EP configs set num_gpus_per_node), the experts between EP 64 and 128."""
    profile = ProfileSource({}, engine="sglang").profile(dsr1, get_gpu("gb200-185gb"), 1, 1, dp=72, ep=72)
    assert (profile.dp, profile.ep, profile.gpus) == (72, 72, 72)
    notes = profile.provenance.notes
    assert "dispatch and combine over 1 node(s)" in notes
    assert "EP 72 interpolated in 1/EP between the measured EP 64 and EP 128" in notes


def test_tensorrt_llm_on_an_nvlink_fabric_dispatches_by_its_nvlink_one_sided_kernel():
    """DeepSeek-R1 at NVFP4 on GB200, DEP 8 decode, 16 requests a rank: NVLink one-sided dispatch and combine of
    those 16 tokens at EP 8 (TensorRT-LLM's choice under MNNVL), and the experts at 8 × 16 = 128 tokens."""
    step = Step(model=get_model("deepseek-r1@fp4"), shape=InstanceShape(gpu="gb200-185gb", tp=1, pp=1, dp=8, ep=8),
                engine="trtllm", versions=tables.choose_versions("gb200-185gb", "trtllm", None))
    versions = step.wide_experts.versions
    a2a = raw("gb200", "comm", "trtllm", versions["trtllm_alltoall"], "trtllm_alltoall_perf.parquet")
    a2a = a2a[(a2a.kernel_source == "NVLinkOneSided") & (a2a.moe_dtype == "nvfp4") & (a2a.moe_ep_size == 8)
              & (a2a.hidden_size == 7168) & (a2a.topk == 8) & (a2a.num_experts == 256) & (a2a.num_tokens == 16)]
    assert sorted(a2a.op_name) == ["alltoall_combine", "alltoall_dispatch"]
    rank, experts = step.wide_experts, step.wide_experts.group_s(128, False, Extrapolated())
    assert rank.routed_s(16, False, Extrapolated()) - experts == pytest.approx(a2a.latency.sum() / 1e3, rel=1e-9)


def test_kimis_384_experts_dispatch_by_the_one_sided_kernel_measured_for_256_and_say_so():
    """AIConfigurator measures TensorRT-LLM's NVLink one-sided all-to-all for 256 experts only: Kimi-K2.5's 384 at
    the same hidden size, top-k, dtype and EP read those rows, and the tables named in the provenance say so."""
    step = Step(model=get_model("kimi-k2.5@fp4"), shape=InstanceShape(gpu="gb200-185gb", tp=1, pp=1, dp=4, ep=4),
                engine="trtllm", versions=tables.choose_versions("gb200-185gb", "trtllm", None))
    label = "trtllm_alltoall (measured for 256 experts, standing in for 384)"
    a2a = raw("gb200", "comm", "trtllm", step.wide_experts.versions[label], "trtllm_alltoall_perf.parquet")
    a2a = a2a[(a2a.kernel_source == "NVLinkOneSided") & (a2a.moe_dtype == "nvfp4") & (a2a.moe_ep_size == 4)
              & (a2a.hidden_size == 7168) & (a2a.topk == 8) & (a2a.num_tokens == 16)]
    assert set(a2a.num_experts) == {256} and sorted(a2a.op_name) == ["alltoall_combine", "alltoall_dispatch"]
    rank = step.wide_experts
    assert rank.routed_s(16, False, Extrapolated()) - rank.group_s(64, False, Extrapolated()) == pytest.approx(
        a2a.latency.sum() / 1e3, rel=1e-9)
    assert label in rank.note()


@pytest.mark.parametrize("experts, measured, stand_in", [(384, [256], 256), (256, [384, 256], 256),
                                                         (300, [256, 384], 256), (320, [256, 384], 256),
                                                         (384, [], None)])
def test_an_all_to_all_stands_in_with_the_nearest_measured_expert_count(experts, measured, stand_in):
    """Ties go to the smaller count; with none measured there is no stand-in."""
    assert stand_in_experts(experts, measured) == stand_in


def test_tensorrt_llm_on_hgx_nodes_keeps_deepeps_tables_for_a_dispatch(dsr1):
    """Off an NVLink fabric a dispatch TensorRT-LLM is asked for (srt-slurm's H100 recipes force DeepEP) reads the
    DeepEP table, not the NVLink one."""
    step = Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=8), engine="trtllm",
                versions=tables.choose_versions("h200-141gb", "trtllm", None))
    assert "moe_a2a" in step.wide_experts.versions and "trtllm_alltoall" not in step.wide_experts.versions


def test_an_ep_no_measurement_brackets_is_refused_with_the_measured_ones():
    """B200's SGLang wide-EP tables measure DeepSeek at fp8, not at nvfp4: nothing to interpolate between,
    and another precision's rows are never borrowed."""
    with pytest.raises(PdplanError, match=r"nvfp4, power_law_1.01 at EP 4 \(expert TP 1\) \(measured EPs: none "
                                          r"for this model\)") as caught:
        composed_profile(get_model("deepseek-r1@fp4"), get_gpu("b200-180gb"), 1, 1, dp=4, ep=4, engine="sglang")
    assert caught.value.field == "ep"


def test_an_all_to_all_across_nodes_no_table_measures_is_refused(dsr1):
    """vLLM's and TensorRT-LLM's all-to-all tables measure EP 8 on one node only."""
    with pytest.raises(PdplanError, match=r"all-to-all measured on h200_sxm over EP 16 on 2 node\(s\)"):
        composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=16, ep=16, engine="vllm")


def test_expert_tp_above_one_is_refused_by_the_wide_tables(dsr1):
    with pytest.raises(PdplanError, match=r"expert TP 2"):
        composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=8, ep=4, engine="sglang")


def test_ep_equal_to_tp_without_dp_is_todays_expert_parallel_profile():
    model = get_model("qwen3-30b-a3b")
    gpu = get_gpu("h100-80gb")
    assert composed_profile(model, gpu, 2, 1, ep=2) == composed_profile(model, gpu, 2, 1, expert_parallel=True)


def test_an_ep_equal_to_tp_profile_keys_the_pools_of_that_ep_and_its_file_keeps_it():
    model, gpu = get_model("qwen3-30b-a3b"), get_gpu("h100-80gb")
    profile = composed_profile(model, gpu, 2, 1, ep=2)
    assert profile.key == Pool(name="p", phase="prefill", model=profile.model, gpu=gpu.name, tp=2, ep=2).shape
    assert profile_from_dict(profile_to_dict(profile), "file").key == profile.key


def test_a_users_profile_of_an_ep_equal_to_tp_shape_times_that_shape():
    model, gpu = get_model("qwen3-30b-a3b"), get_gpu("h100-80gb")
    composed = composed_profile(model, gpu, 2, 1, ep=2)
    mine = replace(composed, kv_capacity_tokens=composed.kv_capacity_tokens // 2)   # a calibrated one, say
    assert ProfileSource({mine.key: mine}, engine="sglang").profile(model, gpu, 2, 1, ep=2).kv_capacity_tokens \
        == mine.kv_capacity_tokens


def test_the_profile_source_composes_a_wide_shape_else_times_it_by_the_wide_roofline(dsr1):
    gpu = get_gpu("h200-141gb")
    composed = ProfileSource({}, engine="sglang").profile(dsr1, gpu, 1, 1, dp=8, ep=8)
    assert composed.provenance.source == "composed" and composed.dp == 8
    off = ProfileSource({}, engine="sglang", compose=False).profile(dsr1, gpu, 1, 1, dp=8, ep=8)
    assert off.provenance.source == "roofline" and off.provenance.method.startswith("wide-EP roofline")
    untabled = ProfileSource({}, engine="vllm")
    assert untabled.profile(dsr1, gpu, 1, 1, dp=16, ep=16).provenance.source == "roofline"
    assert "all-to-all measured" in untabled.fallback_reason(dsr1.name, "h200-141gb", 1, 1, dp=16, ep=16)


def test_trtllm_runs_the_shared_expert_beside_the_routed_path_in_decode(dsr1):
    shape = InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=8)
    step = Step(model=dsr1, shape=shape, engine="trtllm", versions=tables.choose_versions("h200-141gb", "trtllm", None))
    assert step.overlaps_shared(prefill=False) and not step.overlaps_shared(prefill=True)


# --- redundant experts (EPLB), read as AIConfigurator reads them ----------------------------------------------

def test_trtllm_eplb_reads_the_rebalanced_rows_at_experts_plus_redundant_slots(dsr1):
    step = Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=8), engine="trtllm",
                versions=tables.choose_versions("h200-141gb", "trtllm", None), redundant_experts=32)
    table = raw("h200_sxm", "moe", "trtllm", step.versions["wideep_moe"], "wideep_moe_perf.parquet")
    rows = table[(table.op_name == "wideep_moe_eplb") & (table.distribution == "power_law_1.01_eplb")
                 & (table.num_slots == 288) & (table.moe_ep_size == 8) & (table.hidden_size == 7168)
                 & (table.inter_size == 2048) & (table.num_tokens == 128)]
    assert not rows.empty
    assert step.wide_experts.compute["generation"]((128,), Extrapolated()) == pytest.approx(rows.latency.min() / 1e3)


def test_sglang_eplb_prefill_reads_the_flattened_load_at_four_fifths_of_the_tokens(dsr1):
    """2560 tokens on each of 8 ranks: the wide-EP prefill MoE at int(0.8 × 20480) = 16384 tokens and power-law
    α = 0.6; DeepEP normal dispatch and combine a quarter of the way from 2048 to 4096 tokens."""
    step = Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=8), engine="sglang",
                versions=tables.choose_versions("h200-141gb", "sglang", None), redundant_experts=32)
    versions = step.versions
    moe = raw("h200_sxm", "moe", "sglang", versions["wideep_context_moe"], "wideep_context_moe_perf.parquet")
    moe = moe[(moe.moe_dtype == "fp8_block") & (moe.inter_size == 2048) & (moe.moe_ep_size == 8)
              & (moe.distribution == "power_law_0.6") & (moe.num_tokens == 16384)]
    normal = raw("h200_sxm", "comm", "sglang", versions["wideep_deepep_normal"], "wideep_deepep_normal_perf.parquet")
    normal = normal[(normal.node_num == 1) & (normal.hidden_size == 7168) & (normal.num_topk == 8)
                    & (normal.num_experts == 256) & (normal.dispatch_sms == 20) & (normal.combine_sms == 20)]
    a2a = {n: (normal[normal.num_token == n][["dispatch_transmit_us", "dispatch_notify_us", "combine_transmit_us",
                                              "combine_notify_us"]].sum(axis=1).iloc[0]) for n in (2048, 4096)}
    expected = (0.75 * a2a[2048] + 0.25 * a2a[4096]) / 1e6 + moe.latency.min() / 1e3
    assert step.wide_experts.routed_s(2560, True, Extrapolated()) == pytest.approx(expected, rel=1e-9)


def test_eplb_on_vllm_is_refused_naming_redundant_experts(dsr1):
    with pytest.raises(PdplanError, match="rebalanced over redundant copies") as caught:
        composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=8, ep=8, redundant_experts=32, engine="vllm")
    assert caught.value.field == "redundant_experts"


def test_a_moe_kernel_is_refused_for_whole_experts_under_attention_dp(dsr1):
    """A MoE kernel is chosen in the MoE table; the wide expert-parallel tables are read instead."""
    with pytest.raises(PdplanError, match="whole experts under attention data parallelism") as err:
        Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=8), engine="sglang",
             versions=tables.choose_versions("h200-141gb", "sglang", None), moe_kernel="sglang_fused_moe_triton")
    assert err.value.field == "moe_kernel"


@pytest.mark.parametrize(("tp", "dp", "ep", "redundant", "table"), [
    (8, 1, 1, 0, True),    # every expert split over TP
    (8, 1, 8, 0, True),    # whole experts over TP, no attention DP
    (1, 8, 1, 0, True),    # split over TP x DP, the gathered layout
    (1, 8, 8, 0, False),   # whole experts under attention DP: the wide-EP tables
    (8, 1, 8, 32, False),  # redundant experts: EPLB's rows of the wide-EP tables
])
def test_only_layouts_that_read_the_moe_table_can_choose_its_kernel(tp, dp, ep, redundant, table):
    assert reads_moe_table(tp, dp, ep, redundant) is table


@pytest.mark.parametrize(("tp", "dp", "ep", "redundant", "table"), [
    (1, 8, 8, 0, True),     # whole experts over the gathered tokens of TP x DP
    (2, 4, 8, 0, True),
    (1, 8, 4, 0, False),    # EP other than TP x DP: dispatched whatever is asked
    (1, 8, 8, 32, False),   # redundant experts: EPLB's rows of the wide-EP tables
])
def test_gathered_whole_experts_read_the_moe_table(tp, dp, ep, redundant, table):
    assert reads_moe_table(tp, dp, ep, redundant, AllToAll.GATHER) is table
