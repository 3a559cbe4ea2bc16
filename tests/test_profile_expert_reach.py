"""A wide rank's profile file states how its tokens reach the experts (gathered) and EPLB's slots, and serves
only pools of the same: each changes the MoE layers' time and the memory left for KV."""

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.profile import profile_from_dict, profile_to_dict
from pdplan.latency.source import ProfileSource
from pdplan.latency.wide_roofline import wide_roofline_profile
from pdplan.modelref import get_model
from pdplan.vocabulary import AllToAll
from tests.conftest import ROOT

TRACE = ROOT / "traces" / "smoke_uniform_200.csv"


@pytest.fixture(scope="module")
def slotted():
    """One rank of DeepSeek-V3's DEP16 on H200 with EPLB's 32 slots, written to a file and read back."""
    profile = wide_roofline_profile(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 1, 1, dp=16, ep=16,
                                    engine="sglang", redundant_experts=32)
    return profile_from_dict(profile_to_dict(profile), "slotted.yaml")


def test_a_profile_file_states_its_redundant_slots_and_its_label_says_them(slotted):
    assert profile_to_dict(slotted)["redundant_experts"] == 32
    assert slotted.shape == "deepseek-v3@fp8 h200-141gb TP1 DP16 EP16 PP1 +32 slots"


def test_a_profile_with_slots_serves_only_pools_of_those_slots(slotted):
    source = ProfileSource({slotted.key: slotted}, compose=False)
    model, gpu = get_model("deepseek-v3@fp8"), get_gpu("h200-141gb")
    assert source.profile(model, gpu, 1, 1, dp=16, ep=16, redundant_experts=32) == slotted
    plain = source.profile(model, gpu, 1, 1, dp=16, ep=16)
    assert plain.redundant_experts == 0 and plain.kv_capacity_tokens > slotted.kv_capacity_tokens


def test_a_profile_file_without_the_fields_reads_as_a_dispatched_rank_without_slots(slotted):
    data = profile_to_dict(slotted)
    del data["redundant_experts"]
    profile = profile_from_dict(data, "old.yaml")
    assert (profile.all_to_all, profile.redundant_experts) == (AllToAll.DISPATCH, 0)


@pytest.mark.parametrize(("change", "message"), [
    ({"dp": 1, "ep": 1, "tp": 1}, "old.yaml: redundant_experts goes with attention data parallelism (dp above 1), "
                                  "got 32"),
    ({"all_to_all": "gather"}, "old.yaml: all_to_all gather applies to attention data parallelism with whole experts "
                               "over every GPU (dp above 1, ep = tp × dp) and no redundant experts, got 'gather'"),
    ({"all_to_all": "scatter"}, "old.yaml: all_to_all must be one of dispatch, gather, got 'scatter'"),
])
def test_a_profile_file_whose_experts_cannot_be_reached_so_is_refused_naming_the_field(slotted, change, message):
    with pytest.raises(PdplanError) as refused:
        profile_from_dict({**profile_to_dict(slotted), **change}, "old.yaml")
    assert str(refused.value) == message


def test_profile_compose_refuses_slots_without_attention_dp_naming_the_flag(run_cli):
    code, out, err = run_cli("profile", "compose", "--model", "deepseek-v3", "--gpu", "h200-141gb", "--tp", "8",
                             "--redundant-experts", "32")
    assert code == 2 and out == ""
    assert err.strip() == ("Error: --redundant-experts 32 adds expert slots to an instance with attention data "
                           "parallelism: --dp above 1")
