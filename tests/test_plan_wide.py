"""Plan files with wide expert parallelism: a pool may state its attention data-parallel ranks (dp),
its expert-parallel size (ep) and its redundant experts; coordinates an engine cannot run exit 2
naming the plan file, the pool and the field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pdplan.errors import PdplanError
from pdplan.sim.plan import plan_model
from pdplan.sim.planfile import load_plan, plan_to_dict

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "chat_poisson_2k.csv"



def plan(decode: str = "tp: 1\n    dp: 8\n    ep: 8", model: str = "deepseek-v3@fp8") -> str:
    """A DeepSeek-V3 P/D plan: a TP8 prefill pool and a decode pool of ``decode``'s coordinates (its
    lines indented as a pool's fields)."""
    return textwrap.dedent(f"""\
        pdplan_plan: 1
        default_link: {{bandwidth_gb_s: 50}}
        pools:
          - name: prefill
            phase: prefill
            model: {model}
            gpu: h200-141gb
            tp: 8
          - name: decode
            phase: decode
            model: {model}
            gpu: h200-141gb
        """) + "    " + decode + "\n"


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


def test_a_pool_states_dp_ep_and_redundant_experts(tmp_path):
    loaded = load_plan(write(tmp_path, plan("tp: 1\n    dp: 8\n    ep: 8\n    redundant_experts: 32")))
    decode = loaded.pools[1]
    assert (decode.tp, decode.dp, decode.ep, decode.redundant_experts) == (1, 8, 8, 32)
    assert decode.gpus == 8  # TP1 × DP8 × PP1, as SGLang --tp 8 --dp 8 --enable-dp-attention counts it
    assert loaded.gpus == 8 + 8


def test_a_pool_without_them_is_tp_only_and_writes_back_as_before(tmp_path):
    loaded = load_plan(ROOT / "examples" / "plan_disagg.yaml")
    assert all((p.dp, p.ep, p.redundant_experts) == (1, 1, 0) for p in loaded.pools)
    assert all(not {"dp", "ep", "redundant_experts"} & set(p) for p in plan_to_dict(loaded)["pools"])


def test_a_wide_pool_writes_back_its_coordinates(tmp_path):
    loaded = load_plan(write(tmp_path, plan("tp: 1\n    dp: 8\n    ep: 8")))
    assert {k: plan_to_dict(loaded)["pools"][1][k] for k in ("tp", "dp", "ep")} == {"tp": 1, "dp": 8, "ep": 8}


def test_a_pool_states_how_its_tokens_reach_whole_experts_and_writes_it_back(tmp_path):
    loaded = load_plan(write(tmp_path, plan("tp: 1\n    dp: 8\n    ep: 8\n    all_to_all: gather")))
    assert loaded.pools[1].all_to_all == "gather" and loaded.pools[0].all_to_all == "dispatch"
    assert plan_to_dict(loaded)["pools"][1]["all_to_all"] == "gather"
    assert "all_to_all" not in plan_to_dict(loaded)["pools"][0]
    assert loaded.pools[1].shape[-1] == "gather"  # its profile is not the dispatched one


@pytest.mark.parametrize("decode", [
    "tp: 8\n    all_to_all: gather",                                   # no attention DP
    "tp: 1\n    dp: 8\n    ep: 1\n    all_to_all: gather",            # experts split, not whole
    "tp: 1\n    dp: 8\n    ep: 8\n    redundant_experts: 32\n    all_to_all: gather",  # EPLB's copies
    "tp: 1\n    dp: 8\n    ep: 8\n    all_to_all: deepep",            # not a way the plan names
])
def test_an_all_to_all_the_layout_cannot_run_names_the_file_and_field(tmp_path, decode):
    path = write(tmp_path, plan(decode))
    with pytest.raises(PdplanError) as err:
        load_plan(path)
    assert err.value.field == "pools[1].all_to_all" and str(path) in str(err.value)


@pytest.mark.parametrize("decode, field", [
    ("dp: 0", "pools[1].dp"),
    ("ep: 0", "pools[1].ep"),
    ("dp: two", "pools[1].dp"),
    ("ep: 8.5", "pools[1].ep"),
    ("redundant_experts: -1", "pools[1].redundant_experts"),
    ("dp: 100000", "pools[1].dp"),
])
def test_a_coordinate_that_is_no_count_names_the_file_and_field(tmp_path, decode, field):
    path = write(tmp_path, plan("tp: 8\n    " + decode))
    with pytest.raises(PdplanError) as err:
        load_plan(path)
    assert err.value.field == field and str(path) in str(err.value)


@pytest.mark.parametrize("decode, field, rule", [
    # EP3 over TP8: whole experts cannot be spread over 3 of 8 ranks
    ("tp: 8\n    ep: 3", "pools[1].ep", "EP 3"),
    # 256 routed + 4 redundant experts = 260 over EP8: not even
    ("tp: 8\n    ep: 8\n    redundant_experts: 4", "pools[1].redundant_experts", "spread evenly"),
    # redundant experts without EP
    ("tp: 8\n    redundant_experts: 8", "pools[1].redundant_experts", "expert parallelism"),
])
def test_experts_an_engine_cannot_place_name_the_file_pool_and_field(tmp_path, decode, field, rule):
    path = write(tmp_path, plan(decode))
    with pytest.raises(PdplanError) as err:
        plan_model(load_plan(path))
    assert err.value.field == field
    assert "pool 'decode'" in str(err.value) and rule in str(err.value) and str(path) in str(err.value)


def test_a_dense_model_takes_no_expert_parallelism(tmp_path):
    path = write(tmp_path, plan("tp: 4\n    ep: 4", model="llama2-70b"))
    with pytest.raises(PdplanError) as err:
        plan_model(load_plan(path))
    assert err.value.field == "pools[1].ep" and "no routed experts" in str(err.value)


def test_ep_dividing_tp_times_dp_is_accepted_and_ep_that_does_not_is_refused(tmp_path):
    assert plan_model(load_plan(write(tmp_path, plan("tp: 1\n    dp: 16\n    ep: 16\n    redundant_experts: 32"))))
    with pytest.raises(PdplanError) as err:
        plan_model(load_plan(write(tmp_path, plan("tp: 1\n    dp: 8\n    ep: 3"))))
    assert err.value.field == "pools[1].ep"


def test_simulate_exits_2_on_one_line_naming_the_plan_file_and_field(run_cli, tmp_path):
    path = write(tmp_path, plan("tp: 8\n    ep: 8\n    redundant_experts: 4"))
    code, out, err = run_cli("simulate", TRACE, "--plan", path)
    assert (code, out) == (2, "")
    assert err.startswith(f"Error: {path}") and err.count("\n") == 1
    assert "pools[1].redundant_experts" in err
