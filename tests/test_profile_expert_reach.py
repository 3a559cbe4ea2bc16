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
    ({"dp": 1, "ep": 1, "tp": 1}, "old.yaml: redundant_experts is wrong: 32 redundant experts need expert "
                                  "parallelism (EP > 1) and must be >= 0"),
    ({"all_to_all": "gather"}, "old.yaml: all_to_all gather applies to attention data parallelism with whole experts "
                               "over every GPU (dp above 1, ep = tp × dp) and no redundant experts, got 'gather'"),
    ({"all_to_all": "scatter"}, "old.yaml: all_to_all must be one of dispatch, gather, got 'scatter'"),
])
def test_a_profile_file_whose_experts_cannot_be_reached_so_is_refused_naming_the_field(slotted, change, message):
    with pytest.raises(PdplanError) as refused:
        profile_from_dict({**profile_to_dict(slotted), **change}, "old.yaml")
    assert str(refused.value) == message


def test_profile_compose_refuses_slots_without_expert_parallelism_naming_the_flag(run_cli):
    code, out, err = run_cli("profile", "compose", "--model", "deepseek-v3", "--gpu", "h200-141gb", "--tp", "8",
                             "--redundant-experts", "32")
    assert code == 2 and out == ""
    assert err.strip() == ("Error: --redundant-experts 32 with --ep 1: 32 redundant experts need expert parallelism "
                           "(EP > 1) and must be >= 0")


def test_a_tensor_parallel_pool_with_expert_parallelism_holds_slots_in_its_profile(run_cli, tmp_path):
    """TP 8 with EP 8 and no attention DP may hold EPLB's slots, as a plan file's pool states them: its profile carries
    them (a regression: the profile once required DP above 1 and broke such a plan with a traceback)."""
    plan = tmp_path / "slots.yaml"
    plan.write_text("pdplan_plan: 1\ndefault_link: {bandwidth_gb_s: 50, setup_ms: 0.5}\npools:\n"
                    "  - {name: p, phase: prefill, model: deepseek-v3, gpu: h200-141gb, tp: 8}\n"
                    "  - {name: d, phase: decode, model: deepseek-v3, gpu: h200-141gb, tp: 8, ep: 8, "
                    "redundant_experts: 32}\n")
    code, out, err = run_cli("simulate", TRACE, "--plan", plan, "--engine", "sglang", "--no-compose", "--json")
    assert code == 0, err
    profile = wide_roofline_profile(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 8, 1, dp=1, ep=8,
                                    engine="sglang", redundant_experts=32)
    assert profile_from_dict(profile_to_dict(profile), "tp8.yaml").shape.endswith("TP8 EP8 PP1 +32 slots")
