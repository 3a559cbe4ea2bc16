"""The collectives a composed step times: the engine's measured all-reduce, and past the GPU counts AIConfigurator
measured inside one NVLink domain (GB200 NVL72's tables stop at one compute tray of 4), NCCL's largest measured
group scaled by the ring's traffic, as AIConfigurator's own estimator scales it. Expected values are read from
AIConfigurator's parquet tables here. These need the optional extra (pip install 'pdplan[aic]'); without it they
skip."""

import pandas as pd
import pytest

pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")

from pdplan.hardware import get_gpu  # noqa: E402
from pdplan.latency.compose import tables  # noqa: E402
from pdplan.latency.compose.profile import composed_profile  # noqa: E402
from pdplan.latency.compose.tables import Extrapolated, ring_traffic_scale  # noqa: E402
from tests.test_compose_gathered import nccl_s  # noqa: E402


def _version(gpu, engine):
    return tables.choose_versions(gpu, engine, None)["all_reduce"]


def test_a_ring_all_reduce_sends_two_n_minus_one_over_n_of_the_message_per_gpu():
    """Patarasuk and Yuan: 2(n - 1)/n of the message per GPU, so 8 GPUs over 4 take (7/8) / (3/4) = 7/6."""
    assert ring_traffic_scale(8, 4) == pytest.approx(7 / 6)
    assert ring_traffic_scale(4, 4) == 1
    assert ring_traffic_scale(72, 4) == pytest.approx((71 / 72) * (4 / 3))


def test_a_measured_group_reads_the_engines_own_all_reduce_table():
    found = tables.all_reduce("h200_sxm", "sglang", _version("h200-141gb", "sglang"), 8, 8)
    assert (found.table, found.measured) == ("all_reduce", 8)


def test_a_tp8_all_reduce_over_two_gb200_trays_is_nccls_four_gpu_one_scaled_by_the_ring_where_nothing_measured_it():
    """vLLM's GB200 release (0.24.0) measured no cross-tray all-reduce, nor did GB300's at or below it."""
    found = tables.all_reduce("gb200", "vllm", _version("gb200-185gb", "vllm"), 8, 72)
    elements = 64 * 7168
    log = Extrapolated()
    assert found(elements, log) == pytest.approx(7 / 6 * nccl_s("gb200", "all_reduce", "half", 4, elements), rel=1e-9)
    assert (found.table, found.measured) == ("nccl", 4)
    assert "all-reduce over 8 GPUs: NCCL's over 4 scaled" in log.text()


def test_a_tp8_all_reduce_over_two_gb200_trays_reads_what_gb300_measured_over_the_same_nvlink_fabric():
    """TensorRT-LLM's MNNVL all-reduce over 8 GB300 GPUs (AIConfigurator's gb300 table, 1.3.0rc20), whose NVL72
    racks join their trays through the same NVLink 5 switch trays as GB200's."""
    version = _version("gb200-185gb", "trtllm")
    found = tables.all_reduce("gb200", "trtllm", version, 8, 72)
    frame = pd.read_parquet(tables.package_root() / "systems" / "data" / "gb300" / "comm" / "trtllm" / found.version
                            / "custom_allreduce_perf.parquet")
    row = frame[(frame.num_gpus == 8) & (frame.message_size == 16384)]
    assert found.table == "all_reduce (gb300's over its same NVLink fabric)" and found.measured == 8
    assert found(16384, Extrapolated()) == pytest.approx(row.latency.min() / 1e3, rel=1e-9)
    assert tables.version_key(found.version) <= tables.version_key(version)


@pytest.mark.parametrize(("system", "gpu", "gpus", "domain"), [("gb200", "gb200-185gb", 144, 72),
                                                               ("h200_sxm", "h200-141gb", 16, 8)])
def test_an_all_reduce_past_the_nvlink_domain_is_not_derived(system, gpu, gpus, domain):
    """Across domains the network, not NVLink, carries it: no table measured that."""
    assert tables.all_reduce(system, "sglang", _version(gpu, "sglang"), gpus, domain) is None


def test_a_tp8_profile_on_gb200_composes_and_says_its_all_reduce_was_scaled(dsr1):
    profile = composed_profile(dsr1, get_gpu("gb200-185gb"), 8, 1, engine="vllm")
    assert profile.provenance.source == "composed"
    assert "all-reduce over 8 GPUs: NCCL's over 4 scaled by the ring's traffic" in profile.provenance.notes
