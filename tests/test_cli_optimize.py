"""`pdplan optimize` as a user runs it: contract keys, determinism, cache, fleets, errors."""

import json
from pathlib import Path

import pytest

from pdplan.planner import _failing_phase
from pdplan.slo import slo_from_flags

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "chat_poisson_2k.csv"
FAST = ("--requests-per-probe", "300")


@pytest.fixture
def optimize(run_cli, tmp_path):
    def run(*args, trace=TRACE):
        return run_cli("optimize", trace, *FAST, "--cache-dir", tmp_path / "cache", *args)
    return run


def test_json_has_every_contract_key(optimize):
    code, out, err = optimize("--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["decision"] in ("disaggregated", "colocated")
    for key in ("fleet", "prefill", "decode", "colocated_baseline", "gpus_total", "cost_per_hour", "power_w",
                "goodput_rps", "goodput_per_gpu", "attainment", "links", "solver", "fleets"):
        assert key in doc, key
    disaggregated = doc if doc["decision"] == "disaggregated" else doc["disaggregated_alternative"]
    assert set(disaggregated["prefill"]) == {"gpu", "tp", "pp", "replicas", "goodput_rps_per_instance"}
    assert set(disaggregated["decode"]) == set(disaggregated["prefill"])
    if doc["decision"] == "colocated":  # no prefill or decode pool in a colocated plan
        assert doc["prefill"] is None and doc["decode"] is None
    assert {"gpu", "tp", "pp", "replicas", "gpus_total", "cost_per_hour"} <= set(doc["colocated_baseline"])
    assert set(doc["attainment"]) == {"ttft", "tpot", "joint"}
    assert {"status", "objective", "bound", "gap", "wall_s"} <= set(doc["solver"])
    assert {"fleet", "feasible", "gpus_total", "cost_per_hour", "power_w", "goodput_per_gpu"} <= set(doc["fleets"][0])


def test_totals_add_up_over_the_chosen_pools(optimize):
    doc = json.loads(optimize("--json")[1])
    assert doc["gpus_total"] == sum(p["tp"] * p["pp"] * p["replicas"] for p in doc["pools"])
    assert doc["cost_per_hour"] == pytest.approx(sum(p["usd_per_hour"] for p in doc["pools"]))
    assert doc["goodput_per_gpu"] == pytest.approx(doc["goodput_rps"] / doc["gpus_total"])
    assert doc["solver"]["status"] == "OPTIMAL" and doc["solver"]["gap"] == 0


def test_the_chosen_plan_meets_the_slo_end_to_end(optimize):
    doc = json.loads(optimize("--json")[1])
    assert doc["meets_slo"]
    assert doc["attainment"]["joint"] >= 0.9
    assert doc["attainment"]["joint"] <= min(doc["attainment"]["ttft"], doc["attainment"]["tpot"])


def test_the_whole_plan_sustains_at_least_the_target(optimize):
    doc = json.loads(optimize("--json")[1])
    assert doc["end_to_end_goodput_rps"] >= doc["target_rps"]
    assert doc["headroom"] == pytest.approx(doc["end_to_end_goodput_rps"] / doc["target_rps"] - 1)


def test_second_run_reuses_the_goodput_cache(optimize):
    first = json.loads(optimize("--json")[1])
    second = json.loads(optimize("--json")[1])
    assert first["cache"]["misses"] > 0 and second["cache"]["misses"] == 0
    assert second["cache"]["hits"] == first["cache"]["misses"]


def test_same_inputs_and_seed_write_identical_plans(optimize, tmp_path):
    optimize("--out", tmp_path / "a.yaml", "--no-cache")
    optimize("--out", tmp_path / "b.yaml", "--no-cache")
    assert (tmp_path / "a.yaml").read_bytes() == (tmp_path / "b.yaml").read_bytes()


def test_written_plan_runs_in_simulate(optimize, run_cli, tmp_path):
    optimize("--out", tmp_path / "plan.yaml")
    code, out, err = run_cli("simulate", TRACE, "--plan", tmp_path / "plan.yaml", "--json")
    assert code == 0, err
    assert json.loads(out)["requests"] == 2000


def test_fleet_all_reports_four_fleets(optimize, tmp_path):
    code, out, err = optimize("--fleet", "all", "--json", "--plot", tmp_path / "plots")
    assert code == 0, err
    doc = json.loads(out)
    assert [f["fleet"] for f in doc["fleets"]] == ["AA", "HH", "HA", "HHcap"]
    assert (tmp_path / "plots" / "fleets.png").exists()


def test_explain_names_shapes_whose_weights_do_not_fit(optimize):
    code, out, _ = optimize("--explain")
    assert code == 0
    assert "weights 128.5 GiB per GPU > 72.0 GiB usable" in out


def test_goodput_objective_within_a_gpu_budget(optimize):
    code, out, err = optimize("--objective", "goodput", "--max-gpus", "8", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["gpus_total"] <= 8 and doc["goodput_rps"] > 0


def test_infeasible_target_names_the_binding_constraint(optimize, tmp_path):
    cluster = tmp_path / "small.yaml"
    cluster.write_text("nodes:\n  - {name: n, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, "
                       "inter_node_gb_s: 50, count: 1}\n")
    code, out, err = optimize("--cluster", cluster, "--target-rate", "500")
    assert code == 2 and out == ""
    assert err.startswith("Error: no fleet can serve the target: any: no disaggregated plan (any): "
                          "the cluster's node counts cannot hold enough instances")


BAD = [
    (("--fleet", "AB"), "Error: --fleet must be one of AA, HA, HH, HHcap, all, any, got 'AB'"),
    (("--objective", "speed"), "Error: --objective must be one of cost, goodput, gpus, power, got 'speed'"),
    (("--peak", "--target-rate", "3"), "Error: give --peak or --target-rate, not both"),
    (("--model", "gpt-9"), "Error: unknown model 'gpt-9'"),
    (("--target-rate", "0"), "Error: --target-rate must be > 0, got 0.0"),
    (("--target-rate", "inf"), "Error: --target-rate must be a finite number, got inf"),
    (("--objective", "goodput", "--target-rate", "3"),
     "Error: --objective goodput finds the highest rate itself; drop --target-rate/--peak"),
    (("--max-gpus", "-1"), "Error: --max-gpus must be >= 0, got -1"),
    (("--max-power", "nan"), "Error: --max-power must be a finite number >= 0, got nan"),
    (("--link-headroom", "2"), "Error: --link-headroom must be in (0, 1], got 2.0"),
    (("--time-limit", "0"), "Error: --time-limit must be a finite number of seconds > 0, got 0.0"),
    (("--seed", "-1"), "Error: --seed must be >= 0, got -1"),
]


@pytest.mark.parametrize("args,message", BAD, ids=["fleet", "objective", "peak-and-rate", "model", "rate",
                                                    "rate-inf", "goodput-with-rate", "max-gpus", "max-power",
                                                    "link-headroom", "time-limit", "seed"])
def test_bad_flags_exit_2_with_one_line(optimize, args, message):
    code, out, err = optimize(*args)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1


def test_plot_path_that_is_a_file_fails_before_the_plan_is_written(optimize, tmp_path):
    (tmp_path / "plots").write_text("not a folder")
    code, out, err = optimize("--plot", tmp_path / "plots", "--out", tmp_path / "plan.yaml")
    assert (code, out) == (2, "")
    assert err == f"Error: {tmp_path / 'plots'}: --plot must name a folder, got a file\n"
    assert not (tmp_path / "plan.yaml").exists()


def test_a_ttft_miss_strengthens_prefill_and_a_tpot_miss_decode():
    slo = slo_from_flags(1.0, 0.1, 0.9)
    assert _failing_phase("disaggregated", {"ttft": 0.8, "tpot": 0.95, "joint": 0.8}, slo) == "prefill"
    assert _failing_phase("disaggregated", {"ttft": 0.95, "tpot": 0.7, "joint": 0.7}, slo) == "decode"


@pytest.mark.slow
def test_fleet_all_on_azure_conv_gives_four_distinct_costs_and_powers(run_cli, shared_data, tmp_path):
    code, out, err = run_cli("optimize", shared_data / "traces" / "AzureLLMInferenceTrace_conv.csv",
                             "--fleet", "all", "--cache-dir", tmp_path, "--json")
    assert code == 0, err
    fleets = json.loads(out)["fleets"]
    assert [f["fleet"] for f in fleets] == ["AA", "HH", "HA", "HHcap"]
    assert all(f["feasible"] for f in fleets)
    assert len({round(f["cost_per_hour"], 4) for f in fleets}) == 4
    assert len({f["power_w"] for f in fleets}) == 4


def test_an_slo_no_shape_can_meet_says_to_relax_it(optimize):
    code, out, err = optimize("--ttft", "0.01")
    assert code == 2 and out == ""
    assert "no shape meets the SLO on its own even at a low rate, so relax the SLO" in err
    assert err.count("\n") == 1
