"""Composed steps of one attention data-parallel rank whose instance splits every expert over all its GPUs
(EP 1): the MoE layer gathers DP × the rank's tokens, runs each expert's 1/(TP × DP) slice on them and
scatters the sums back. Expected values are read from AIConfigurator's parquet tables here, independently
of the composition. These need the optional extra (pip install 'pdplan[aic]'); without it they skip.
"""

import pytest

pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")

from pdplan.errors import PdplanError  # noqa: E402
from pdplan.hardware import get_gpu  # noqa: E402
from pdplan.latency.compose import tables  # noqa: E402
from pdplan.latency.compose.profile import composed_profile  # noqa: E402
from pdplan.latency.compose.step import Step  # noqa: E402
from pdplan.latency.compose.tables import Extrapolated  # noqa: E402
from pdplan.shape import InstanceShape  # noqa: E402
from tests.test_compose_wide import raw  # noqa: E402


@pytest.fixture(scope="module")
def sglang_dp8_tp_experts(dsr1):
    return Step(model=dsr1, shape=InstanceShape(gpu="h200-141gb", tp=1, pp=1, dp=8, ep=1), engine="sglang",
                versions=tables.choose_versions("h200-141gb", "sglang", None))


def test_a_rank_gathers_dp_times_its_tokens_onto_experts_split_over_every_gpu(sglang_dp8_tp_experts):
    """16 requests on each of 8 ranks: the MoE kernel at 8 × 16 = 128 tokens with each expert split 8 ways
    (2048 / 8 = 256 columns per GPU), plus one all-reduce of those 128 tokens' hidden states over 8 GPUs
    for the gather and the scatter."""
    step = sglang_dp8_tp_experts
    versions = step.wide_experts.versions
    moe = raw("h200_sxm", "moe", "sglang", versions["moe"], "moe_perf.parquet")
    moe = moe[(moe.moe_dtype == "fp8_block") & (moe.hidden_size == 7168) & (moe.inter_size == 2048)
              & (moe.num_experts == 256) & (moe.topk == 8) & (moe.moe_tp_size == 8) & (moe.moe_ep_size == 1)
              & (moe.distribution == "power_law_1.01") & (moe.num_tokens == 128)]
    assert not moe.empty
    all_reduce = tables.all_reduce_grid("h200_sxm", "sglang", versions["all_reduce"])
    expected = moe.latency.min() / 1e3 + all_reduce((128 * 7168, 8), Extrapolated())
    assert step.wide_experts.routed_s(16, False, Extrapolated()) == pytest.approx(expected, rel=1e-12)


def test_the_shared_experts_run_whole_on_the_ranks_own_tokens(sglang_dp8_tp_experts):
    """No gather for them: one rank's step grows with its own batch by what the whole shared MLP adds."""
    assert sglang_dp8_tp_experts.wide_experts.ffn_rows(16, True) == 16
    assert sglang_dp8_tp_experts.wide_experts.shared_s(16, True, Extrapolated()) is None


def test_the_profile_says_the_experts_are_split_and_the_ranks_gathered(dsr1):
    profile = composed_profile(dsr1, get_gpu("h200-141gb"), 1, 1, dp=8, ep=1, engine="sglang")
    assert (profile.dp, profile.ep) == (8, 1)
    assert "every routed expert split over TP 1 × DP 8 = 8 GPUs" in profile.provenance.notes
    assert "gather and scatter timed as one all-reduce" in profile.provenance.notes


def test_a_gather_over_more_gpus_than_the_all_reduce_table_measured_is_refused(dsr1):
    """SGLang's GB200 all-reduce table measures 2 and 4 GPUs."""
    with pytest.raises(PdplanError, match=r"no sglang all-reduce measured over 8 GPUs on gb200 to gather DP 8 "
                                          r"ranks' tokens .*\(measured: 2, 4\)") as err:
        composed_profile(dsr1, get_gpu("gb200-185gb"), 1, 1, dp=8, ep=1, engine="sglang")
    assert err.value.field == "dp"
