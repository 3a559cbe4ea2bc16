"""Composed steps of one attention data-parallel rank whose MoE layer gathers DP × the rank's tokens onto every
GPU: each expert's 1/(TP × DP) slice (EP 1) or whole experts over TP × DP (EP = TP × DP reached by a gather)
run on them, and the sums are scattered back. SGLang gathers and combines with an all-reduce each (its
sum-length padding), vLLM with an all-gather and a reduce-scatter, one all-reduce's worth, and TensorRT-LLM with
NCCL's all-gather and reduce-scatter, read from NCCL's table.
Expected values are read from AIConfigurator's parquet tables here, independently of the composition. These
need the optional extra (pip install 'pdplan[aic]'); without it they skip.
"""

import numpy as np
import pytest

pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")

from pdplan.errors import PdplanError  # noqa: E402
from pdplan.hardware import get_gpu  # noqa: E402
from pdplan.latency.compose import tables  # noqa: E402
from pdplan.latency.compose.gathered import gathered_bytes_per_value  # noqa: E402
from pdplan.latency.compose.profile import composed_profile  # noqa: E402
from pdplan.latency.compose.step import Step  # noqa: E402
from pdplan.latency.compose.tables import Extrapolated  # noqa: E402
from pdplan.latency.profile import profile_from_dict, profile_to_dict  # noqa: E402
from pdplan.latency.source import ProfileSource  # noqa: E402
from pdplan.shape import InstanceShape  # noqa: E402
from pdplan.vocabulary import AllToAll  # noqa: E402
from tests.test_compose_wide import raw  # noqa: E402


@pytest.fixture(scope="module")
def sglang_dp8_tp_experts(dsr1):
    return Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=1), engine="sglang",
                versions=tables.choose_versions("h200-141gb", "sglang", None))


def test_a_rank_gathers_dp_times_its_tokens_onto_experts_split_over_every_gpu(sglang_dp8_tp_experts):
    """16 requests on each of 8 ranks: the MoE kernel at 8 × 16 = 128 tokens with each expert split 8 ways
    (2048 / 8 = 256 columns per GPU), plus two all-reduces of those 128 tokens' hidden states over 8 GPUs,
    SGLang's gather and combine."""
    step = sglang_dp8_tp_experts
    versions = step.wide_experts.versions
    moe = raw("h200_sxm", "moe", "sglang", versions["moe"], "moe_perf.parquet")
    moe = moe[(moe.moe_dtype == "fp8_block") & (moe.hidden_size == 7168) & (moe.inter_size == 2048)
              & (moe.num_experts == 256) & (moe.topk == 8) & (moe.moe_tp_size == 8) & (moe.moe_ep_size == 1)
              & (moe.distribution == "power_law_1.01") & (moe.num_tokens == 128)]
    assert not moe.empty
    all_reduce = tables.all_reduce_grid("h200_sxm", "sglang", versions["all_reduce"])
    expected = moe.latency.min() / 1e3 + 2 * all_reduce((128 * 7168, 8), Extrapolated())
    assert step.wide_experts.routed_s(16, False, Extrapolated()) == pytest.approx(expected, rel=1e-12)


def moe_rows(system, engine, version, tokens, tp, ep):
    """DeepSeek-V3's block-scaled FP8 rows of a MoE table at one token count and split."""
    moe = raw(system, "moe", engine, version, "moe_perf.parquet")
    return moe[(moe.moe_dtype == "fp8_block") & (moe.hidden_size == 7168) & (moe.inter_size == 2048)
               & (moe.num_experts == 256) & (moe.topk == 8) & (moe.moe_tp_size == tp) & (moe.moe_ep_size == ep)
               & (moe.distribution == "power_law_1.01") & (moe.num_tokens == tokens)]


def test_gathered_tokens_reach_whole_experts_at_the_moe_tables_ep(dsr1):
    """SGLang's DEP 8 on one node without DeepEP: 16 requests on each of 8 ranks run the MoE kernel at 128
    tokens with 256 / 8 = 32 whole experts per GPU, plus SGLang's two all-reduces of those tokens."""
    step = Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=8), engine="sglang",
                versions=tables.choose_versions("h200-141gb", "sglang", None), all_to_all=AllToAll.GATHER)
    versions = step.wide_experts.versions
    moe = moe_rows("h200_sxm", "sglang", versions["moe"], 128, tp=1, ep=8)
    assert not moe.empty
    all_reduce = tables.all_reduce_grid("h200_sxm", "sglang", versions["all_reduce"])
    expected = moe.latency.min() / 1e3 + 2 * all_reduce((128 * 7168, 8), Extrapolated())
    assert step.wide_experts.routed_s(16, False, Extrapolated()) == pytest.approx(expected, rel=1e-12)


def nccl_s(system, op, dtype, gpus, elements):
    """NCCL's ``op`` over ``gpus`` GPUs at ``elements`` of ``dtype``, read from the system's NCCL table (the
    release its system file names) and interpolated linearly in the message size."""
    version = tables.system_spec(system).nccl_version
    frame = raw(system, "comm", "nccl", version, "nccl_perf.parquet")
    rows = frame[(frame.op_name == op) & (frame.nccl_dtype == dtype) & (frame.num_gpus == gpus)]
    rows = rows.groupby("message_size").latency.min()
    return float(np.interp(elements, rows.index.to_numpy(float), rows.to_numpy())) / 1e3


def test_tensorrt_llm_gathers_with_nccls_all_gather_and_reduce_scatter(dsr1):
    """TensorRT-LLM's attention DP over experts split 8 ways on one H200 node: the MoE kernel at 8 × 16 = 128 tokens,
    NCCL's all-gather of the 128 tokens' bf16 activations (block-scaled FP8 quantizes after the gather) and its
    reduce-scatter of their bf16 results, over 8 GPUs."""
    step = Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=1), engine="trtllm",
                versions=tables.choose_versions("h200-141gb", "trtllm", None))
    versions = step.wide_experts.versions
    moe = moe_rows("h200_sxm", "trtllm", versions["moe"], 128, tp=8, ep=1)
    assert not moe.empty and "all_reduce" not in versions
    values = 128 * 7168
    expected = (moe.latency.min() / 1e3 + nccl_s("h200_sxm", "all_gather", "half", 8, values)
                + nccl_s("h200_sxm", "reduce_scatter", "half", 8, values))
    assert step.wide_experts.routed_s(16, False, Extrapolated()) == pytest.approx(expected, rel=1e-12)
    assert versions["nccl"] == tables.system_spec("h200_sxm").nccl_version


def test_tensorrt_llm_gathers_quantized_activations_at_their_bytes():
    """FP4 with one FP8 scale per 16 values, per-tensor FP8, MXFP8 with one scale per 32; block-scaled FP8 and BF16
    gather bf16."""
    assert gathered_bytes_per_value("nvfp4") == 0.5625
    assert gathered_bytes_per_value("fp8") == 1.0
    assert gathered_bytes_per_value("w4a8_mxfp4_mxfp8") == 1.03125
    assert gathered_bytes_per_value("fp8_block") == gathered_bytes_per_value("bfloat16") == 2.0


def test_a_tensorrt_llm_gather_over_more_gpus_than_nccls_table_measured_is_refused(dsr1):
    """The H100 NCCL table measures 2, 4 and 8 GPUs: TensorRT-LLM's DEP 16 over two HGX nodes gathers over 16."""
    with pytest.raises(PdplanError, match=r"no NCCL all-gather and reduce-scatter measured over 16 GPUs on h100_sxm "
                                          r"to gather DP 16 ranks' tokens for their whole experts \(measured: 2, 4, "
                                          r"8\)") as err:
        composed_profile(dsr1, get_gpu("h100-80gb"), 1, 1, dp=16, ep=16, engine="trtllm", all_to_all=AllToAll.GATHER)
    assert err.value.field == "all_to_all"


def test_a_gather_takes_longer_than_deepeps_dispatch_for_a_prompt_batch_on_one_node(dsr1):
    """Every GPU runs its experts over all 8 ranks' 8k-token prompts and two all-reduces of 64k tokens' hidden
    states, where DeepEP moves each token only to its experts' ranks."""
    gpu = get_gpu("b200-180gb")
    ranks = {a2a: composed_profile(dsr1, gpu, 1, 1, dp=8, ep=8, engine="sglang", max_prefill_batch_tokens=8192,
                                   all_to_all=a2a) for a2a in AllToAll}
    assert ranks[AllToAll.GATHER].group_s(True, 8 * 8192) > ranks[AllToAll.DISPATCH].group_s(True, 8 * 8192)
    assert "32 whole routed experts per GPU of TP 1 × DP 8 = EP 8" in ranks[AllToAll.GATHER].provenance.notes


def test_redundant_experts_are_refused_for_gathered_tokens(dsr1):
    with pytest.raises(PdplanError, match="redundant experts") as err:
        composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=8, ep=8, engine="sglang", redundant_experts=32,
                         all_to_all=AllToAll.GATHER)
    assert err.value.field == "all_to_all"


def test_the_shared_experts_run_whole_on_the_ranks_own_tokens(sglang_dp8_tp_experts):
    """No gather for them: one rank's step grows with its own batch by what the whole shared MLP adds."""
    assert sglang_dp8_tp_experts.wide_experts.ffn_rows(16, True) == 16
    assert sglang_dp8_tp_experts.wide_experts.shared_s(16, True, Extrapolated()) is None


def test_the_profile_says_the_experts_are_split_and_the_ranks_gathered(dsr1):
    profile = composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=8, ep=1, engine="sglang")
    assert (profile.dp, profile.ep) == (8, 1)
    assert "every routed expert split over TP 1 × DP 8 = 8 GPUs" in profile.provenance.notes
    assert "gather and scatter timed as 2 all-reduces" in profile.provenance.notes


def test_a_gather_past_the_nvlink_domain_and_the_all_reduce_table_is_refused(dsr1):
    """SGLang's H200 all-reduce table measures 2, 4 and 8 GPUs, one HGX node's NVLink domain: DP 16 spans two."""
    with pytest.raises(PdplanError, match=r"no sglang all-reduce measured over 16 GPUs on h200_sxm to gather DP 16 "
                                          r"ranks' tokens .*\(measured: 2, 4, 8\)") as err:
        composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=16, ep=1, engine="sglang")
    assert err.value.field == "dp"


def test_a_gather_over_two_gb200_trays_is_two_of_sglangs_all_reduces_over_8_gb300_gpus(dsr1):
    """SGLang's GB200 all-reduce table measures 2 and 4 GPUs (one compute tray); its GB300 one measured 8, over the same
    NVLink 5 switch trays (0.5.14). DP 8 over two trays gathers with two such all-reduces."""
    step = Step(model=dsr1, shape=InstanceShape(gpu="gb200-185gb", tp=1, pp=1, dp=8, ep=1), engine="sglang",
                versions=tables.choose_versions("gb200-185gb", "sglang", None))
    elements = 128 * 7168
    found = tables.all_reduce("gb300", "sglang", step.wide_experts.versions["all_reduce (gb300's over its same NVLink "
                                                                            "fabric)"], 8, 72)
    assert (found.table, found.measured) == ("all_reduce", 8)
    assert step.wide_experts.exchange(elements, Extrapolated()) == pytest.approx(2 * found(elements, Extrapolated()),
                                                                                 rel=1e-9)


def test_a_gather_over_gb200_trays_is_nccls_four_gpu_all_reduce_scaled_by_the_ring_where_nothing_measured_it(dsr1):
    """Over 32 GPUs SGLang measured no all-reduce on either rack (GB300's table stops at 16), so DP 32 over eight trays
    gathers with NCCL's over 4 GPUs times (31/32) / (3/4), as AIConfigurator scales it."""
    step = Step(model=dsr1, shape=InstanceShape(gpu="gb200-185gb", tp=1, pp=1, dp=32, ep=1), engine="sglang",
                versions=tables.choose_versions("gb200-185gb", "sglang", None))
    elements = 128 * 7168
    expected = 2 * (31 / 32) / (3 / 4) * nccl_s("gb200", "all_reduce", "half", 4, elements)
    assert step.wide_experts.exchange(elements, Extrapolated()) == pytest.approx(expected, rel=1e-9)
    assert step.wide_experts.versions["nccl"] == tables.system_spec("gb200").nccl_version


def test_a_gathered_profile_file_says_so_and_times_only_gathered_pools(dsr1):
    """Read back from its file, SGLang's one-host DEP 8 rank serves the gathering pool, not a dispatching one."""
    composed = composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=8, ep=8, engine="sglang",
                                all_to_all=AllToAll.GATHER)
    data = profile_to_dict(composed)
    assert data["all_to_all"] == "gather"
    profile = profile_from_dict(data, "dsv3_dp8.yaml")
    source = ProfileSource({profile.key: profile}, compose=False)
    gpu = get_gpu("h200-141gb")
    assert source.profile(dsr1, gpu, 1, 1, dp=8, ep=8, all_to_all=AllToAll.GATHER) == profile
    assert source.profile(dsr1, gpu, 1, 1, dp=8, ep=8).provenance.source == "roofline"
