"""`pdplan optimize` as a user runs it: contract keys, verification, determinism, cache, fleets, errors."""

import json
import re
from pathlib import Path

import pytest

from pdplan.latency.accuracy import accuracy_for, layout_of
from pdplan.manifest.export import FORMATS
from pdplan.manifest.plan import read_plan
from tests.conftest import run_main

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "chat_poisson_2k.csv"
FAST = ("--requests-per-probe", "300")


@pytest.fixture
def optimize(run_cli, tmp_path):
    def run(*args, trace=TRACE):
        return run_cli("optimize", trace, *FAST, "--cache-dir", tmp_path / "cache", *args)
    return run


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, tuple[dict, bytes]]:
    """The default run three ways, each writing its JSON and its plan: with a cold cache ("cold"),
    again on that cache ("warm") and without one ("uncached"). Shared by the tests that only read
    them."""
    folder = tmp_path_factory.mktemp("runs")
    found = {}
    for name, cache in (("cold", ("--cache-dir", folder / "cache")), ("warm", ("--cache-dir", folder / "cache")),
                        ("uncached", ("--no-cache",))):
        code, text = run_main("optimize", TRACE, *FAST, *cache, "--json", "--out", folder / f"{name}.yaml")
        assert code in (0, None)
        found[name] = (json.loads(text), (folder / f"{name}.yaml").read_bytes())
    return found


@pytest.fixture(scope="module")
def answer(runs) -> dict:
    """One default run's JSON document."""
    return runs["cold"][0]


def test_json_has_every_contract_key(answer):
    doc = answer
    assert doc["decision"] in ("disaggregated", "colocated")
    for key in ("fleet", "prefill", "decode", "colocated_baseline", "gpus_total", "cost_per_hour", "power_w",
                "goodput_rps", "goodput_per_gpu", "attainment", "links", "solver", "fleets", "verification", "search"):
        assert key in doc, key
    disaggregated = doc if doc["decision"] == "disaggregated" else doc["disaggregated_alternative"]
    assert {"gpu", "tp", "pp", "replicas", "goodput_rps_per_instance", "shapes"} <= set(disaggregated["prefill"])
    assert set(disaggregated["decode"]) == set(disaggregated["prefill"])
    if doc["decision"] == "colocated":  # no prefill or decode pool in a colocated plan
        assert doc["prefill"] is None and doc["decode"] is None
    assert {"gpu", "tp", "pp", "replicas", "gpus_total", "cost_per_hour", "shapes"} <= set(doc["colocated_baseline"])
    assert set(doc["attainment"]) == {"ttft", "tpot", "joint"}
    assert {"status", "objective", "bound", "gap"} <= set(doc["solver"])
    assert {"cache", "end_to_end_simulations", "solver_wall_s"} <= set(doc["run"])
    assert {"fleet", "alias", "feasible", "verified", "gpus_total", "cost_per_hour", "power_w", "goodput_per_gpu",
            "reason"} <= set(doc["fleets"][0])


def test_every_pool_says_how_far_its_source_was_from_measured_deployments_and_how_that_was_derived(answer):
    for pool in answer["pools"]:
        layout = layout_of(pool["phase"], pool.get("dp", 1))
        expected = accuracy_for(pool["profile"], answer["serving_engine"], False, layout,
                                engine_rooflines=answer["engine"] is not None)
        assert pool["profile_accuracy"] == (None if expected is None else expected.to_dict())
    assert any(pool["profile_accuracy"] for pool in answer["pools"])  # the default answer is composed
    assert answer["provenance"]["pools[].profile_accuracy"].startswith("derived: median and p90")


def test_the_default_answer_is_one_every_export_format_starts(answer):
    assert answer["export_refusals"] == {}


def test_optimize_says_as_it_plans_what_export_would_refuse_and_why(optimize, run_cli, tmp_path):
    """A model whose YAML names no Hugging Face repository leaves the engines nothing to load: every format would
    refuse the plan, and optimize says so once, with the reason export gives."""
    model = tmp_path / "no-repo.yaml"
    catalog = ROOT / "pdplan" / "catalog" / "models" / "llama2-70b.yaml"
    model.write_text("".join(line for line in catalog.read_text().splitlines(keepends=True)
                             if not line.startswith("hf_repo:")))
    code, out, err = optimize("--model", model, "--fleet", "HH", "--tp", "4", "--pp", "1", "--out",
                              tmp_path / "plan.yaml", "--json")
    assert code == 0, err
    refused = json.loads(out)["export_refusals"]
    assert list(refused) == list(FORMATS) and len(set(refused.values())) == 1
    why = refused["sglang"]
    assert why.startswith("identity.checkpoint.id is unknown")
    assert " ".join(err.split()).count("notice: pdplan export would refuse this plan (every format): " + why) == 1
    code, _, refusal = run_cli("export", tmp_path / "plan.yaml", "--format", "sglang", "--out", tmp_path / "deploy")
    assert code == 2 and " ".join(refusal.split()) == f"Error: {tmp_path / 'plan.yaml'}: {why}"


def test_verification_reports_seeds_requests_and_intervals(answer):
    v = answer["verification"]
    assert set(v) >= {"passed", "rule", "seeds", "requests", "joint", "per_objective"}
    assert v["rule"] == "lower" and v["seeds"] == [0, 1, 2] and v["requests"] == [2000, 2000, 2000]
    assert v["joint"]["low"] <= v["joint"]["mean"] <= v["joint"]["high"]
    assert [o["metric"] for o in v["per_objective"]] == ["ttft", "tpot"]


def test_the_answer_passes_every_objective_at_the_lower_end_of_its_interval(answer):
    v = answer["verification"]
    assert v["passed"] and answer["meets_slo"]
    assert all(o["low"] >= o["target"] for o in v["per_objective"])
    assert answer["attainment"]["joint"] <= min(answer["attainment"]["ttft"], answer["attainment"]["tpot"])


def test_search_reports_the_program_estimate_the_verified_cost_and_the_gap(answer):
    s = answer["search"]
    assert s["verified"] == pytest.approx(answer["cost_per_hour"])
    assert s["gap"] == pytest.approx((s["verified"] - s["program_estimate"]) / s["verified"])
    assert s["lower_bound"] == s["program_estimate"] and s["is_bound"] is False
    assert s["checks"] >= 1 and answer["run"]["end_to_end_simulations"] >= 3


def test_a_negative_gap_is_printed_as_such_and_the_estimate_is_not_called_a_bound():
    from pdplan.cli.optimize_render import search_line
    doc = {"search": {"program_estimate": 10.0, "lower_bound": 10.0, "verified": 9.0, "gap": -1 / 9, "checks": 2,
                      "proven": True},
           "solver": {"objective_name": "cost"}, "run": {"end_to_end_simulations": 6}}
    line = search_line(doc)
    assert line.startswith("search: integer-program estimate $10.00 (from pool capacities, not a bound), "
                           "verified $9.00, gap -11.1%, the simulation passed a plan the program counts short")
    assert "bound $" not in line


def test_a_search_of_one_check_and_one_simulation_says_so_in_the_singular():
    from pdplan.cli.optimize_render import search_line
    doc = {"search": {"program_estimate": 9.0, "verified": 9.0, "gap": 0.0, "checks": 1, "proven": True},
           "solver": {"objective_name": "cost"}, "run": {"end_to_end_simulations": 1}}
    assert "(1 check, 1 end-to-end simulation run; " in search_line(doc)
    doc["search"]["verified"] = None
    assert search_line(doc) == "search: 1 end-to-end check"


def test_a_verification_of_one_run_surviving_one_loss_says_so_in_the_singular():
    from pdplan.cli.optimize_render import verification_line
    interval = {"mean": 0.95, "low": 0.93, "high": 0.97}
    v = {"seeds": [0], "rule": "lower", "passed": True, "losses": [{"lost": "node h100-0"}], "rate_rps": 4.0,
         "requests": [2000], "joint": interval,
         "per_objective": [{"metric": "ttft", "threshold_s": 1.0, "target": 0.9, **interval}]}
    line = verification_line(v)
    assert " on 1 run × 2,000 requests " in line and line.endswith("; survives 1 distinct loss")


def test_a_verification_whose_runs_the_most_requests_cut_says_how_long_they_were():
    from pdplan.cli.optimize_render import verification_line
    from pdplan.verify import MAX_RUN_REQUESTS
    interval = {"mean": 0.95, "low": 0.93, "high": 0.97}
    # an hour of Azure conversations (19,366 requests) at 10,000 req/s: 77 copies, 149 s
    v = {"seeds": [0, 1, 2], "rule": "lower", "passed": True, "losses": [], "rate_rps": 10_000.0,
         "requests": [1_491_182] * 3, "joint": interval, "min_run_s": 300.0, "trace_copies": 77, "run_s": 149.1,
         "per_objective": [{"metric": "ttft", "threshold_s": 2.0, "target": 0.9, **interval}]}
    line = verification_line(v)
    assert (f"the trace 77× back to back: 149 s of arrivals a run, short of the 300 s asked "
            f"({MAX_RUN_REQUESTS:,} requests a run at most)") in line
    assert "lasts at least" not in line
    v["run_s"] = 310.0
    assert "the trace 77× back to back so a run lasts at least 300 s" in verification_line(v)
    del v["run_s"]  # a document written before run_s was recorded reads as it did
    assert "the trace 77× back to back so a run lasts at least 300 s" in verification_line(v)


def test_the_node_map_shows_an_instance_on_one_gpu_by_its_index_and_on_several_by_their_range(capsys, monkeypatch):
    from pdplan.cli import output
    from pdplan.cli.optimize_render import nodes_table
    monkeypatch.setattr(output.stdout, "width", 200)
    nodes_table({"nodes": [{"instance": "decode-0", "pp": 1, "stages": [{"node": "h100-0", "gpus": [4]}]},
                            {"instance": "prefill-0", "pp": 1, "stages": [{"node": "h100-0", "gpus": [0, 1, 2, 3]}]},
                            {"instance": "decode-1", "pp": 1, "stages": [{"node": "h100-0", "gpus": [5, 7]}]}]})
    assert "decode-0 (GPU 4), prefill-0 (GPUs 0-3), decode-1 (GPUs 5,7)" in capsys.readouterr().out


def test_totals_add_up_over_the_chosen_pools(answer):
    doc = answer
    assert doc["gpus_total"] == sum(p["tp"] * p["pp"] * p["replicas"] for p in doc["pools"])
    assert doc["cost_per_hour"] == pytest.approx(sum(p["usd_per_hour"] for p in doc["pools"]))
    assert doc["goodput_per_gpu"] == pytest.approx(doc["goodput_rps"] / doc["gpus_total"])
    assert doc["solver"]["status"] == "OPTIMAL" and doc["solver"]["gap"] == 0


def test_the_whole_plan_sustains_at_least_the_target(answer):
    assert answer["end_to_end_goodput_rps"] >= answer["target_rps"]
    assert answer["headroom"] == pytest.approx(answer["end_to_end_goodput_rps"] / answer["target_rps"] - 1)


def test_no_article_section_codes_reach_users(answer, run_cli):
    assert "0x0" not in json.dumps(answer)
    assert "0x0" not in run_cli("optimize", "--help")[1]


def test_second_run_reuses_every_cached_result(runs):
    first, second = runs["cold"][0], runs["warm"][0]
    assert first["run"]["cache"]["misses"] > 0 and second["run"]["cache"]["misses"] == 0
    assert second["run"]["end_to_end_simulations"] == 0


def test_json_is_byte_identical_between_runs_but_for_the_run_key(runs):
    """A cold run, a warm run and a run without the cache differ only under "run"."""
    texts = [json.dumps({k: v for k, v in doc.items() if k != "run"}, indent=2) for doc, _ in runs.values()]
    assert texts[0] == texts[1] == texts[2]


def test_same_inputs_and_seed_write_identical_plans(runs):
    plans = [plan for _, plan in runs.values()]
    assert plans[0] == plans[1] == plans[2]


def test_two_worker_processes_give_the_same_answer_and_plan_as_one(runs, tmp_path):
    code, text = run_main("optimize", TRACE, *FAST, "--cache-dir", tmp_path / "cache", "--jobs", "2", "--json",
                          "--out", tmp_path / "two.yaml")
    assert code in (0, None)
    doc, one = json.loads(text), runs["cold"][0]
    assert {k: v for k, v in doc.items() if k != "run"} == {k: v for k, v in one.items() if k != "run"}
    assert (tmp_path / "two.yaml").read_bytes() == runs["cold"][1]
    # the workers' lookups are counted; two searches may both compute a check the other is writing
    assert doc["run"]["cache"]["misses"] >= one["run"]["cache"]["misses"]


def test_written_plan_passes_pdplan_simulate_under_the_same_slo(optimize, run_cli, tmp_path):
    doc = json.loads(optimize("--out", tmp_path / "plan.yaml", "--json")[1])
    code, out, err = run_cli("simulate", TRACE, "--plan", tmp_path / "plan.yaml", "--rate", doc["target_rps"], "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["requests"] == 2000
    assert summary["meets_slo"]["ttft"] and summary["meets_slo"]["tpot"]


@pytest.mark.slow
@pytest.mark.skipif(not __import__("pdplan.latency.compose.tables", fromlist=["installed"]).installed(),
                    reason="composed profiles need the optional extra pdplan[aic]")
def test_simulate_times_a_written_plan_with_the_engine_it_was_planned_with(optimize, run_cli, tmp_path):
    code, out, err = optimize("--model", "llama-3.1-8b", "--cluster", ROOT / "examples" / "cluster_h200.yaml",
                              "--engine", "sglang", "--out", tmp_path / "plan.yaml", "--json")
    assert code == 0, err
    assert "engine: sglang" in (tmp_path / "plan.yaml").read_text()

    def timed(*flags):
        code, out, err = run_cli("simulate", TRACE, "--plan", tmp_path / "plan.yaml", *flags, "--json")
        assert code == 0, err
        return json.loads(out)["tpot"]["p50"], json.loads(out)["profiles"]

    as_planned, with_flag, other = timed(), timed("--engine", "sglang"), timed("--engine", "trtllm")
    assert as_planned == with_flag and as_planned[0] != other[0] and set(as_planned[1].values()) == {"composed"}


def test_fleet_all_compares_every_gpu_pair_of_the_cluster_with_aliases(optimize, tmp_path):
    code, out, err = optimize("--fleet", "all", "--json", "--plot", tmp_path / "plots")
    assert code == 0, err
    doc = json.loads(out)
    assert [(f["fleet"], f["alias"]) for f in doc["fleets"]] == [
        ("a100-80gb/a100-80gb", "AA"), ("a100-80gb/h100-80gb", None), ("a100-80gb/h100-80gb-pcap", None),
        ("h100-80gb/a100-80gb", "HA"), ("h100-80gb/h100-80gb", "HH"), ("h100-80gb/h100-80gb-pcap", "HHcap")]
    assert (tmp_path / "plots" / "fleets.png").exists()
    verified = [f for f in doc["fleets"] if f["verified"]]
    assert min(f["cost_per_hour"] for f in verified) >= doc["cost_per_hour"] - 1e-9 or doc["decision"] == "colocated"


def test_fleet_all_on_an_h100_and_h200_cluster_compares_h200_pools(optimize, tmp_path):
    cluster = tmp_path / "hopper.yaml"
    cluster.write_text(
        "nodes:\n"
        "  - {name: h100, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, inter_node_gb_s: 50, count: 2}\n"
        "  - {name: h200, gpu: h200-141gb, gpus_per_node: 8, intra_node_gb_s: 450, inter_node_gb_s: 50, count: 2}\n")
    code, out, err = optimize("--cluster", cluster, "--fleet", "all", "--tp", "4", "--pp", "1", "--json")
    assert code == 0, err
    names = [f["fleet"] for f in json.loads(out)["fleets"]]
    assert {"h200-141gb/h100-80gb", "h200-141gb/h200-141gb", "h100-80gb/h200-141gb",
            "h200-141gb/h100-80gb-pcap"} <= set(names)


def test_fleet_rows_name_exact_gpu_types_and_every_shape(optimize):
    code, out, _ = optimize("--fleet", "HHcap", "--json")
    (row,) = json.loads(out)["fleets"]
    assert (row["fleet"], row["alias"]) == ("h100-80gb/h100-80gb-pcap", "HHcap")
    assert {s["gpu"] for s in row["decode"]["shapes"]} == {"h100-80gb-pcap"}
    assert sum(s["replicas"] for s in row["prefill"]["shapes"]) == row["prefill"]["replicas"] or \
        len(row["prefill"]["shapes"]) > 1
    code, out, _ = optimize("--fleet", "HHcap")
    assert "h100-80gb/h100-80gb-pcap (HHcap)" in out and "h100-80gb-pcap" in out.split("Chosen plan")[0]


def test_tp_and_pp_restrict_the_candidate_shapes(optimize):
    doc = json.loads(optimize("--tp", "4", "--pp", "1", "--json")[1])
    assert {(p["tp"], p["pp"]) for p in doc["pools"]} == {(4, 1)}


def test_explain_names_shapes_whose_weights_do_not_fit(optimize):
    code, out, _ = optimize("--explain")
    assert code == 0
    assert "weights 128.5 GiB per GPU > 72.0 GiB usable" in out


def test_the_verification_line_and_the_search_gap_are_printed(optimize):
    code, out, _ = optimize()
    assert code == 0
    assert "verification: PASSES at 4.04 req/s on 3 runs × 2,000 requests (seeds 0, 1, 2" in out
    assert "search: integer-program estimate $" in out and "(from pool capacities, not a bound), verified $" in out


def test_goodput_objective_within_a_gpu_budget(optimize):
    code, out, err = optimize("--objective", "goodput", "--max-gpus", "8", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["gpus_total"] <= 8 and doc["verification"]["passed"]
    assert doc["verification"]["rate_rps"] == pytest.approx(doc["end_to_end_goodput_rps"])


def test_infeasible_target_says_what_binds_what_the_cluster_serves_and_what_it_would_need(optimize, tmp_path):
    cluster = tmp_path / "small.yaml"
    cluster.write_text("nodes:\n  - {name: n, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, "
                       "inter_node_gb_s: 50, count: 1}\n")
    code, out, err = optimize("--cluster", cluster, "--target-rate", "60")
    assert code == 2 and out == ""
    assert err.startswith("Error: no fleet can serve the target: any: no disaggregated plan (any): "
                          "the cluster's node counts cannot hold enough instances")
    assert "The cluster serves at most " in err and "req/s (colocated, verified end to end on 8 GPUs)" in err
    assert "; 60 req/s would need " in err and err.count("\n") == 1


def test_an_infeasible_target_in_one_mode_says_what_the_cluster_serves_in_that_mode(optimize, tmp_path):
    """Asked for P/D only, the highest verified rate and the GPUs the target needs are P/D's, not colocated's."""
    cluster = tmp_path / "small.yaml"
    cluster.write_text("nodes:\n  - {name: n, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, "
                       "inter_node_gb_s: 50, count: 1}\n")
    code, out, err = optimize("--cluster", cluster, "--target-rate", "60", "--mode", "disaggregated")
    assert code == 2 and out == ""
    assert "colocated" not in err.split("The cluster serves at most ")[1]
    assert "(disaggregated, verified end to end on" in err


def test_a_pd_answer_with_no_colocated_plan_at_any_rate_says_its_manifest_registers_no_fallback(run_cli, tmp_path):
    """DeepSeek-R1 under vLLM on GB200 trays at p90 TPOT 50 ms: no colocated shape meets the SLO at any rate, so no
    colocated plan can be registered as the rollback's fallback; the answer says so (table and JSON), and validate
    refuses the manifest for it, as the release rule wants."""
    out_file = tmp_path / "plan.yaml"
    args = ("optimize", ROOT / "traces" / "smoke_uniform_200.csv", "--model", "deepseek-r1", "--dtype", "fp8",
            "--cluster", ROOT / "examples" / "cluster_gb200.yaml", "--engine", "vllm", "--mode", "disaggregated",
            "--tp", "1", "--pp", "1", "--dp", "8", "--target-rate", "20", "--ttft", "2s", "--tpot", "50ms",
            "--cache-dir", tmp_path / "cache")
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["decision"] == "disaggregated" and doc["colocated_fallback"] is None
    assert "no usable colocated shape" in doc["colocated_fallback_missing"]
    code, out, err = run_cli(*args, "--out", out_file)
    assert code == 0, err
    assert "the manifest registers no fallback, so validate and export refuse it" in " ".join(out.split())
    code, out, _ = run_cli("validate", out_file)
    assert code == 1 and "a verified colocated fallback must be registered before release" in out


def test_a_tp8_group_over_two_gb200_trays_is_planned_placed_on_whole_trays_and_validates(run_cli, tmp_path):
    """TensorRT-LLM's TEP8 shape on the example rack's trays of 4: each TP8 instance takes two whole trays, given
    node ranks 0 and 1, and the manifest validates against the cluster."""
    import yaml

    out_file, cluster = tmp_path / "plan.yaml", ROOT / "examples" / "cluster_gb200.yaml"
    code, _, err = run_cli("optimize", ROOT / "traces" / "smoke_uniform_200.csv", "--model", "deepseek-r1", "--dtype",
                           "fp8", "--cluster", cluster, "--engine", "trtllm", "--mode", "disaggregated", "--tp", "8",
                           "--pp", "1", "--target-rate", "5", "--ttft", "2s", "--tpot", "50ms", "--cache-dir",
                           tmp_path / "cache", "--out", out_file)
    assert code == 0, err
    doc = yaml.safe_load(out_file.read_text())
    assert {(p["tp"], p["gpus"] // p["replicas"]) for p in doc["pools"]} == {(8, 8)}
    spans = {}
    for node in doc["placement"]["nodes"]:
        for inst in node["instances"]:
            spans.setdefault(inst["instance"], []).append((inst["node_rank"], len(inst["gpu_indices"])))
    assert spans and all(sorted(ranks) == [(0, 4), (1, 4)] for ranks in spans.values())
    code, out, err = run_cli("validate", out_file, "--cluster", cluster)
    assert code == 0 and ": valid (" in out, out + err


def test_when_no_plan_passes_it_exits_1_writes_nothing_and_shows_the_closest(optimize, monkeypatch, tmp_path):
    from pdplan.planner.checks import Verifier
    from pdplan.verify import RunRecord, judge

    def verify(self, plan, rate_rps, *, mode, lost=()):
        runs = [RunRecord(objectives=(0.8, 1.0), clocks={"ttft": 0.8, "tpot": 1.0, "joint": 0.8},
                          ttft_excess_s={"prefill_queue": 1.0, "transfer": 0.0, "admission": 0.0}, requests=2000)] * 3
        return judge(runs, self.request.slo, rule="lower", rate_rps=rate_rps, seeds=(0, 1, 2), mode=mode)

    monkeypatch.setattr(Verifier, "verify", verify)
    code, out, err = optimize("--max-rounds", "2", "--out", tmp_path / "plan.yaml", "--plot", tmp_path / "plots")
    assert code == 1
    assert "No plan passes the end-to-end simulation" in err
    assert "Closest plan (it MISSES the SLO)" in out
    assert "misses p90 TTFT <= 1000 ms: 0.800 (lower) against 0.9, short by 0.100" in out
    assert not (tmp_path / "plan.yaml").exists() and not (tmp_path / "plots").exists()


BAD = [
    (("--fleet", "AB"), "Error: --fleet must be all, any, one of AA, HH, HA, HHcap or a pair PREFILL_GPU/DECODE_GPU"),
    (("--fleet", "h100-80gb-pcap/a100-80gb"), "Error: --fleet h100-80gb-pcap/a100-80gb: prefill runs on uncapped GPUs"),
    (("--objective", "speed"), "Error: --objective must be one of cost, goodput, gpus, power, got 'speed'"),
    (("--peak", "--target-rate", "3"), "Error: give --peak or --target-rate, not both"),
    (("--model", "gpt-9"), "Error: unknown model 'gpt-9'"),
    (("--target-rate", "0"), "Error: --target-rate must be > 0 and <= 1,000,000, got 0.0"),
    (("--target-rate", "inf"), "Error: --target-rate must be > 0 and <= 1,000,000, got inf"),
    (("--target-rate", "1e308"), "Error: --target-rate must be > 0 and <= 1,000,000, got 1e+308"),
    (("--objective", "goodput", "--target-rate", "3"),
     "Error: --objective goodput finds the highest rate itself; drop --target-rate/--peak"),
    (("--max-gpus", "-1"), "Error: --max-gpus must be >= 1, got -1"),
    (("--max-power", "nan"), "Error: --max-power must be > 0 and <= 10,000,000,000, got nan"),
    (("--max-cost", "1e308"), "Error: --max-cost must be > 0 and <= 1,000,000,000, got 1e+308"),
    (("--link-headroom", "2"), "Error: --link-headroom must be > 0 and <= 1, got 2.0"),
    (("--time-limit", "0"), "Error: --time-limit must be > 0 and <= 3,600, got 0.0"),
    (("--seed", "-1"), "Error: --seed must be >= 0, got -1"),
    (("--seed", "123456789012345678901234"), "Error: --seed must be between 0 and 2,147,483,647, got "
                                             "123456789012345678901234"),
    (("--seeds", "0"), "Error: --seeds must be >= 1, got 0"),
    (("--min-run", "-5"), "Error: --min-run must be >= 0, got -5.0"),
    (("--jobs", "-1"), "Error: --jobs must be >= 0, got -1"),
    (("--max-rounds", "0"), "Error: --max-rounds must be >= 1, got 0"),
    (("--verify-rule", "median"), "Error: --verify-rule must be one of lower, mean, got 'median'"),
    (("--redundancy", "rack"), "Error: --redundancy must be one of instance, node, none, got 'rack'"),
    (("--pool-shapes", "any"), "Error: --pool-shapes must be one of mixed, one, got 'any'"),
    (("--tp", "0"), "Error: --tp must be >= 1, got 0"),
    (("--dp", "0"), "Error: --dp must be >= 1, got 0"),
    (("--ttft", "2000"), "Error: --ttft 2000 reads as 2000 seconds; plain numbers are seconds, so for milliseconds "
                         "write --ttft 2000ms"),
    (("--tpot", "50"), "Error: --tpot 50 reads as 50 seconds"),
    (("--admission-share", "1"), "Error: --admission-share must be in [0, 1), got 1.0"),
]


@pytest.mark.parametrize("args,message", BAD, ids=["fleet", "capped-prefill", "objective", "peak-and-rate", "model",
                                                    "rate", "rate-inf", "rate-huge", "goodput-with-rate", "max-gpus",
                                                    "max-power", "max-cost-huge", "link-headroom", "time-limit", "seed",
                                                    "seed-24-digits", "seeds", "min-run", "jobs", "max-rounds", "rule",
                                                    "redundancy", "pool-shapes", "tp", "dp", "ttft-ms", "tpot-ms",
                                                    "admission-share"])
def test_bad_flags_exit_2_with_one_line(optimize, args, message):
    code, out, err = optimize(*args)
    assert code == 2 and out == ""
    assert err.startswith(message) and err.count("\n") == 1


def test_slo_flags_in_milliseconds_with_their_unit_are_accepted(optimize):
    doc = json.loads(optimize("--ttft", "1000ms", "--tpot", "100ms", "--json")[1])
    assert doc["slo"] == [{"metric": "ttft", "threshold_s": 1.0, "attainment": 0.9},
                          {"metric": "tpot", "threshold_s": 0.1, "attainment": 0.9}]


def test_plot_path_that_is_a_file_fails_before_the_plan_is_written(optimize, tmp_path):
    (tmp_path / "plots").write_text("not a folder")
    code, out, err = optimize("--plot", tmp_path / "plots", "--out", tmp_path / "plan.yaml")
    assert (code, out) == (2, "")
    assert err == f"Error: {tmp_path / 'plots'}: --plot must name a folder, got a file\n"
    assert not (tmp_path / "plan.yaml").exists()


def test_an_slo_no_shape_can_meet_says_to_relax_it(optimize):
    code, out, err = optimize("--ttft", "0.01")
    assert code == 2 and out == ""
    assert "no shape meets the SLO on its own even at a low rate, so relax the SLO" in err
    assert err.count("\n") == 1


def test_goodput_and_optimize_agree_on_a_shapes_goodput(optimize, run_cli, tmp_path):
    """One default probe size, one cache key: the same figure from both commands."""
    doc = json.loads(run_cli("optimize", TRACE, "--cache-dir", tmp_path / "c", "--fleet", "HH", "--tp", "4",
                             "--pp", "1", "--json")[1])
    pool = doc["pools"][0]
    code, out, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", pool["gpu"], "--tp", "4",
                             "--phase", pool["phase"], "--json",
                             *(("--policy", "chunked", "--chunk", str(pool["chunk_tokens"]))
                               if pool["phase"] == "colocated" else ()))
    assert code == 0, err
    assert json.loads(out)["goodput_rps"] == pytest.approx(pool["goodput_rps_per_instance"], rel=1e-9)


def test_node_redundancy_plans_pass_with_each_node_removed(optimize, run_cli, tmp_path):
    """Every node of the written plan's node map is removed in turn and the rest simulated."""
    doc = json.loads(optimize("--redundancy", "node", "--fleet", "HH", "--out", tmp_path / "plan.yaml", "--json")[1])
    assert doc["verification"]["passed"] and doc["redundancy"]["mode"] == "node"
    plan, _ = read_plan(tmp_path / "plan.yaml")
    by_node = {}
    for inst in doc["nodes"]:
        name = f"{inst['phase']}-{inst['gpu']}-tp{inst['tp']}-pp{inst['pp']}"
        for stage in inst["stages"]:
            by_node.setdefault(stage["node"], {}).setdefault(name, set()).add(inst["instance"])
    assert len(by_node) >= 2
    from dataclasses import replace

    from pdplan.fileio import dump_yaml
    from pdplan.sim.planfile import plan_to_dict
    for node, lost in by_node.items():
        pools = tuple(replace(p, replicas=p.replicas - len(lost.get(p.name, ()))) for p in plan.pools)
        assert all(p.replicas >= 1 for p in pools), node
        left = tmp_path / f"without-{node}.yaml"
        left.write_text(dump_yaml(plan_to_dict(replace(plan, pools=pools))))
        code, out, err = run_cli("simulate", TRACE, "--plan", left, "--rate", doc["target_rps"], "--json")
        assert code == 0, err
        summary = json.loads(out)
        assert summary["meets_slo"]["ttft"] and summary["meets_slo"]["tpot"], node


@pytest.fixture
def small_case(tmp_path):
    """A 400-request slice of the trace and a cluster of three 8-GPU H100 nodes: a fast run."""
    trace, cluster = tmp_path / "slice.csv", tmp_path / "h100.yaml"
    trace.write_text("".join(TRACE.read_text().splitlines(keepends=True)[:401]))
    cluster.write_text("nodes:\n  - {name: h100, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, "
                       "inter_node_gb_s: 50, count: 3}\n")
    return trace, ("--cluster", cluster, "--tp", "4", "--no-compose")


def test_without_redundancy_is_the_answer_the_same_request_gets_without_it(optimize, small_case):
    trace, flags = small_case
    code, out, err = optimize(*flags, "--redundancy", "node", "--json", trace=trace)
    assert code == 0, err
    red = json.loads(out)["redundancy"]
    plain = json.loads(optimize(*flags, "--json", trace=trace)[1])
    free = red["without_redundancy"]
    assert ((free["gpus_total"], round(free["value"] * 100))
            == (plain["gpus_total"], round(plain["cost_per_hour"] * 100)))
    assert (free["fleet"], free["decision"]) == (plain["fleet"], plain["decision"])
    text = optimize(*flags, "--redundancy", "node", trace=trace)[1]
    costs = json.loads(out)["cost_per_hour"] - plain["cost_per_hour"]
    assert f"redundancy costs +${costs:,.2f} (cost) over the answer without it ({plain['gpus_total']} GPUs" in text


def test_the_pools_table_says_how_pool_capacity_was_obtained(optimize, small_case):
    trace, flags = small_case
    out = " ".join(optimize(*flags, trace=trace)[1].split())
    assert ("pool capacity: the goodput of all its replicas behind the router, simulated; it can exceed "
            "replicas × goodput/instance, since pooled replicas absorb each other's bursts") in out


@pytest.mark.slow
def test_fleet_all_on_azure_conv_verifies_every_fleet(run_cli, shared_data, tmp_path):
    code, out, err = run_cli("optimize", shared_data / "traces" / "AzureLLMInferenceTrace_conv.csv",
                             "--fleet", "all", "--cache-dir", tmp_path, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["fleets"]) == 6 and all(f["verified"] for f in doc["fleets"])
    assert len({round(f["cost_per_hour"], 4) for f in doc["fleets"]}) >= 4
    assert doc["verification"]["passed"] and doc["verification"]["requests"] == [19366] * 3


@pytest.mark.slow
@pytest.mark.skipif(not __import__("pdplan.latency.compose.tables", fromlist=["installed"]).installed(),
                    reason="README's install brings the optional extra pdplan[aic], "
                           "whose composed profiles the excerpt shows")
def test_readme_shows_what_the_main_job_prints(run_cli, tmp_path):
    """README's excerpt of `pdplan optimize traces/chat_poisson_2k.csv`: head, verification, search."""
    readme = (ROOT / "README.md").read_text()
    excerpt = readme.split("```text\n", 1)[1].split("```", 1)[0]
    code, out, err = run_cli("optimize", TRACE, "--cache-dir", tmp_path)
    assert code == 0, err
    printed = out.split("Fleets (")[0]
    # Words exactly; numbers within a rounding step, since the composed profile behind the answer
    # is fitted on this machine (another BLAS may move its last digit).
    number = re.compile(r"-?\d[\d,]*\.?\d*")
    expected, got = " ".join(excerpt.split()), " ".join(printed.split())
    assert number.split(expected) == number.split(got)
    for a, b in zip(number.findall(expected), number.findall(got)):
        a, b = float(a.replace(",", "")), float(b.replace(",", ""))
        assert b == pytest.approx(a, rel=1e-3, abs=2e-3), (a, b)


def test_the_fleet_plot_marks_the_chosen_plan_misses_and_kinds_without_a_plan(monkeypatch):
    from pdplan import plots
    from pdplan.planner.curves import PlanBar

    drawn = {}
    monkeypatch.setattr(plots, "figure_png", lambda fig: drawn.setdefault("fig", fig))
    bars = [PlanBar(fleet="AA", kind="disaggregated", usd_per_hour=None, power_w=None, passes=False, chosen=False),
            PlanBar(fleet="AA", kind="colocated", usd_per_hour=12.0, power_w=6400, passes=True, chosen=False),
            PlanBar(fleet="HH", kind="disaggregated", usd_per_hour=10.0, power_w=5600, passes=True, chosen=False),
            PlanBar(fleet="HH", kind="colocated", usd_per_hour=6.0, power_w=2800, passes=True, chosen=True),
            PlanBar(fleet="HHcap", kind="disaggregated", usd_per_hour=9.0, power_w=4700, passes=False, chosen=False),
            PlanBar(fleet="HHcap", kind="colocated", usd_per_hour=6.0, power_w=2800, passes=True, chosen=False)]
    plots.plot_fleets(bars)
    cost, power = drawn["fig"].axes
    for ax in (cost, power):  # both panels show every plan, the chosen colocated one included
        texts = [t.get_text() for t in ax.texts]
        assert texts.count("MISSES") == 1 and texts.count("no plan") == 1 and texts.count("chosen") == 1
        assert [bar.get_hatch() for bar in ax.patches].count("//") == 1
        chosen = next(t for t in ax.texts if t.get_text() == "chosen")
        outlined = [bar for bar in ax.patches if bar.get_linewidth() == 2]
        assert len(outlined) == 1 and outlined[0].get_x() + outlined[0].get_width() / 2 == pytest.approx(chosen.xy[0])
    assert sorted(bar.get_height() for bar in power.patches) == pytest.approx([0, 2.8, 2.8, 4.7, 5.6, 6.4])


# --- today's models, precisions and GPUs (composed profiles from the optional extra) -----------------

EXAMPLES = ROOT / "examples"


def _pool_profiles(doc: dict) -> set[str]:
    return {p["profile"] for p in doc["pools"]}


@pytest.mark.slow
@pytest.mark.skipif(not __import__("pdplan.latency.compose.tables", fromlist=["installed"]).installed(),
                    reason="composed profiles need the optional extra pdplan[aic]")
def test_llama_3_1_70b_fp8_on_h200_is_planned_on_composed_profiles_and_says_so(optimize):
    code, out, err = optimize("--model", "llama-3.1-70b", "--dtype", "fp8", "--cluster", EXAMPLES / "cluster_h200.yaml",
                              "--target-rate", "12", "--ttft", "2s", "--tpot", "50ms", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["model"] == "llama-3.1-70b@fp8" and doc["verification"]["passed"]
    assert _pool_profiles(doc) == {"composed"}
    assert "composed from AIConfigurator" in doc["provenance"]["profile_sources"]
    assert all(p["profile_method"].startswith("vllm: operator sum") for p in doc["pools"])


@pytest.mark.slow
@pytest.mark.skipif(not __import__("pdplan.latency.compose.tables", fromlist=["installed"]).installed(),
                    reason="composed profiles need the optional extra pdplan[aic]")
def test_qwen3_32b_on_b200_uses_the_named_engine_s_operators(optimize):
    code, out, err = optimize("--model", "qwen3-32b", "--cluster", EXAMPLES / "cluster_b200.yaml", "--engine", "trtllm",
                              "--target-rate", "20", "--ttft", "1s", "--tpot", "30ms")
    assert code == 0, err
    assert "profiles: b200-180gb TP" in out and "composed" in out and "(trtllm newest measured)" in out


@pytest.mark.slow
def test_without_the_tables_the_same_plan_runs_on_rooflines_and_says_why(optimize, monkeypatch):
    from pdplan.latency.compose import tables
    monkeypatch.setattr(tables, "installed", lambda: False)
    code, out, err = optimize("--model", "qwen3-32b", "--cluster", EXAMPLES / "cluster_b200.yaml", "--engine", "sglang",
                              "--target-rate", "20", "--ttft", "1s", "--tpot", "30ms", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert _pool_profiles(doc) == {"roofline"}
    assert ({p["profile_fallback"] for p in doc["pools"]}
            == {"operator tables not installed (pip install 'pdplan[aic]')"})
    assert "rooflines fitted for sglang" in doc["provenance"]["profile_sources"]


@pytest.mark.parametrize("args,message", [
    (("--engine", "tensorrt"), "Error: unknown engine 'tensorrt' (known: vllm, sglang, trtllm)"),
    (("--dtype", "int8"), "Error: --dtype must be one of bf16, fp8, fp4, mxfp4, int4, got 'int8'"),
], ids=["engine", "dtype"])
def test_bad_engine_or_precision_exits_2_naming_what_exists(optimize, args, message):
    code, out, err = optimize(*args)
    assert code == 2 and out == "" and err.startswith(message)


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_plot_writes_goodput_per_gpu_by_shape_and_cost_versus_rate(optimize, tmp_path):
    code, _, err = optimize("--plot", tmp_path / "plots")
    assert code == 0, err
    assert png_size((tmp_path / "plots" / "goodput_per_gpu.png").read_bytes()) == (1200, 600)
    assert png_size((tmp_path / "plots" / "cost_vs_rate.png").read_bytes()) == (840, 528)


@pytest.mark.parametrize("disaggregated,colocated,reading", [
    ([9, 8, 6, 5], [6, 6, 7, 8], "the curves cross between 2 and 3 req/s, where splitting starts to pay"),
    ([4, 6, 9, 9], [6, 6, 6, 6], "the curves cross between 1 and 3 req/s, where splitting stops paying"),
    ([4.6, 6.1, 9, 9], [3, 6.1, 6.1, 6.1], "colocated costs no more than disaggregated at every rate of 1–4 req/s"),
    ([3, None, 5, 5], [4, 6, None, 6], "disaggregated costs no more than colocated at every rate of 1–4 req/s"),
    ([None] * 4, [3] * 4, "no rate where both modes have a plan"),
], ids=["starts", "stops", "colocated-throughout", "disaggregated-throughout", "one-mode"])
def test_the_cost_plot_says_the_curves_cross_only_when_they_do(disaggregated, colocated, reading):
    from pdplan.plots import cost_reading

    rates = [1.0, 2.0, 3.0, 4.0]
    curves = {"disaggregated": list(zip(rates, disaggregated)), "colocated": list(zip(rates, colocated))}
    assert cost_reading(curves) == reading


@pytest.fixture(scope="module")
def smoke_report():
    """The planner's report on the smoke trace at 4 req/s (a colocated answer), for the plot inputs."""
    from pdplan.cache import ResultCache
    from pdplan.cli.options import profile_source
    from pdplan.hardware import default_cluster_path, load_cluster
    from pdplan.modelref import get_model
    from pdplan.planner import PlanRequest
    from pdplan.planner import optimize as plan
    from pdplan.slo import slo_from_flags
    from pdplan.workload import load_trace

    workload = load_trace(TRACE.parent / "smoke_uniform_200.csv")
    return plan(PlanRequest(workload=workload, model=get_model("llama2-70b"), profiles=profile_source(None),
                            cluster=load_cluster(default_cluster_path()), slo=slo_from_flags(1.0, 0.1, 0.9),
                            target_rps=4.0, max_checks=4), cache=ResultCache(enabled=False))


def test_the_fleet_bars_mark_the_answer_s_own_plan_as_chosen(smoke_report):
    from pdplan.planner.curves import fleet_bars

    bars = fleet_bars(smoke_report)
    chosen = [b for b in bars if b.chosen]
    answer = smoke_report.answer.solution
    assert smoke_report.chosen.mode == "colocated"
    assert len(chosen) == 1 and chosen[0].kind == "colocated" and chosen[0].passes
    assert (chosen[0].usd_per_hour, chosen[0].power_w) == (answer.usd_per_hour, answer.power_w)
    assert [b.kind for b in bars] == ["disaggregated", "colocated"] * len(smoke_report.fleets)


def test_the_goodput_bars_mark_exactly_the_shapes_the_answer_runs(smoke_report):
    from pdplan.planner.curves import goodput_per_gpu

    chosen = [s for s in goodput_per_gpu(smoke_report) if s.chosen]
    used = {c.label for c in smoke_report.answer.solution.replicas}  # the shape without its policy
    assert len(chosen) == len(used) >= 1
    assert all(any(s.label == u or s.label.startswith(f"{u} ") for u in used) for s in chosen)


def test_the_cost_curve_never_falls_as_the_rate_rises_and_meets_the_programs_optimum_at_the_target(smoke_report):
    from pdplan.planner.curves import CURVE_POINTS, cost_curves

    report = smoke_report
    curves = cost_curves(report)
    for mode, points in curves.items():
        costs = [c for _, c in points if c is not None]
        assert len(points) == CURVE_POINTS + 1 and costs == sorted(costs), mode
    rates = [r for r, _ in curves["colocated"]]
    assert rates[0] == pytest.approx(0.4) and rates[-1] == pytest.approx(5.0) and 4.0 in rates
    for result in (report.fleet.colocated, report.fleet.disaggregated):  # the program's optimum at the target
        assert dict(curves[result.mode])[4.0] == pytest.approx(result.first.usd_per_hour, rel=1e-9)


def my_model(folder: Path) -> Path:
    """llama-3.1-8b's geometry under a name of the user's: a model the catalog lacks."""
    model = folder / "mine.yaml"
    catalog = (ROOT / "pdplan" / "catalog" / "models" / "llama-3.1-8b.yaml").read_text()
    model.write_text(catalog.replace("name: llama-3.1-8b", "name: my-llama-8b"))
    return model


def test_a_model_yaml_without_hf_repo_leaves_the_checkpoint_unknown_and_export_names_the_flag(
        optimize, run_cli, small_case, tmp_path):
    trace, (_, cluster, *_) = small_case
    model = my_model(tmp_path)
    model.write_text(model.read_text().replace("hf_repo: ", "# hf_repo: "))
    code, _, err = optimize("--model", model, "--cluster", cluster, "--tp", "1", "--mode", "colocated", "--no-compose",
                            "--out", tmp_path / "plan.yaml", trace=trace)
    assert code == 0, err
    assert "id: unknown" in (tmp_path / "plan.yaml").read_text()
    code, _, err = run_cli("export", tmp_path / "plan.yaml", "--format", "vllm", "--out", tmp_path / "deploy")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "identity.checkpoint.id is unknown" in err and "optimize --checkpoint" in err


#: Llama-3.1-8B's published config.json (the geometry pdplan reads), as a fine-tune's repository keeps it.
LLAMA_8B_CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
                   "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
                   "vocab_size": 128256, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def test_a_model_in_the_hub_cache_is_planned_as_its_repository_and_exported_without_a_checkpoint_flag(
        optimize, run_cli, small_case, tmp_path):
    """huggingface_hub keeps a download in models--{owner}--{name}/snapshots/{commit}/: the repository, not the
    commit's folder, names the model, and the engines load that repository at that commit."""
    trace, (_, cluster, *_) = small_case
    snapshot = tmp_path / "models--acme--Llama-3.1-8B-Tuned" / "snapshots" / "6f3cb6b1a4c38e5e5f3e1b0d6c7b8a9f0e1d2c3b"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text(json.dumps(LLAMA_8B_CONFIG))
    code, _, err = optimize("--model", snapshot, "--cluster", cluster, "--tp", "1", "--mode", "colocated",
                            "--no-compose", "--out", tmp_path / "plan.yaml", trace=trace)
    assert code == 0, err
    manifest = (tmp_path / "plan.yaml").read_text()
    assert "model: llama-3.1-8b-tuned" in manifest and "id: acme/Llama-3.1-8B-Tuned" in manifest
    assert f"revision: {snapshot.name}" in manifest
    code, _, err = run_cli("export", tmp_path / "plan.yaml", "--format", "vllm", "--out", tmp_path / "deploy")
    assert code == 0, err
    script = " ".join((tmp_path / "deploy" / "vllm" / "colocated-0.sh").read_text().replace("\\\n", " ").split())
    assert f"vllm serve acme/Llama-3.1-8B-Tuned --revision {snapshot.name} " in script


def test_a_plan_made_from_a_model_file_is_simulated_and_resimulated_from_it(optimize, run_cli, small_case, tmp_path):
    """The manifest's pools name the model as the file names itself (at the precision it was planned at,
    ``my-llama-8b@fp8``); simulate and validate load it from the file the manifest records."""
    trace, (_, cluster, *_) = small_case
    code, _, err = optimize("--model", my_model(tmp_path), "--dtype", "fp8", "--cluster", cluster, "--tp", "1",
                            "--mode", "colocated", "--no-compose", "--out", tmp_path / "plan.yaml", trace=trace)
    assert code == 0, err
    assert "model: my-llama-8b@fp8" in (tmp_path / "plan.yaml").read_text()
    code, out, err = run_cli("validate", tmp_path / "plan.yaml", "--trace", trace, "--resimulate")
    assert code == 0 and "re-simulation" in out, err
    code, out, err = run_cli("simulate", trace, "--plan", tmp_path / "plan.yaml", "--json")
    assert code == 0, err
    assert json.loads(out)["requests"] == 400


def test_a_model_file_named_relatively_is_found_beside_the_manifest(optimize, run_cli, small_case, tmp_path,
                                                                       monkeypatch):
    trace, (_, cluster, *_) = small_case
    (tmp_path / "made").mkdir()
    my_model(tmp_path / "made")
    monkeypatch.chdir(tmp_path / "made")
    code, _, err = optimize("--model", "mine.yaml", "--cluster", cluster, "--tp", "1", "--mode", "colocated",
                            "--no-compose", "--out", "plan.yaml", trace=trace)
    assert code == 0, err
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("validate", tmp_path / "made" / "plan.yaml", "--trace", trace, "--resimulate")
    assert code == 0 and "re-simulation" in out, err


@pytest.mark.parametrize("change, field", [("edit", "provenance.inputs.model.sha256"),
                                           ("remove", "provenance.inputs.model.path")])
def test_a_plan_whose_model_file_changed_or_went_is_refused_naming_the_field(optimize, run_cli, small_case, tmp_path,
                                                                             change, field):
    trace, (_, cluster, *_) = small_case
    model = my_model(tmp_path)
    code, _, err = optimize("--model", model, "--cluster", cluster, "--tp", "1", "--mode", "colocated",
                            "--no-compose", "--out", tmp_path / "plan.yaml", trace=trace)
    assert code == 0, err
    if change == "edit":
        model.write_text(model.read_text().replace("layers: 32", "layers: 33"))
    else:
        model.unlink()
    for command in (("simulate", trace, "--plan", tmp_path / "plan.yaml"),
                    ("validate", tmp_path / "plan.yaml", "--trace", trace, "--resimulate")):
        code, _, err = run_cli(*command)
        assert code == 2 and len(err.strip().splitlines()) == 1 and field in err, (command, err)


def test_a_plan_of_a_model_file_named_as_a_catalog_model_needs_no_file(optimize, run_cli, small_case, tmp_path):
    """A config of a catalog model under its own name (its geometry checked when planned) is simulated
    as the catalog's model once the file is gone, as such manifests always were."""
    trace, (_, cluster, *_) = small_case
    model = tmp_path / "llama-3.1-8b.yaml"
    model.write_text((ROOT / "pdplan" / "catalog" / "models" / "llama-3.1-8b.yaml").read_text())
    code, _, err = optimize("--model", model, "--cluster", cluster, "--tp", "1", "--mode", "colocated", "--no-compose",
                            "--out", tmp_path / "plan.yaml", trace=trace)
    assert code == 0, err
    model.unlink()
    code, out, err = run_cli("validate", tmp_path / "plan.yaml", "--trace", trace, "--resimulate")
    assert code == 0 and "re-simulation" in out, err


def test_a_trace_on_a_grid_is_planned_spread_and_its_manifest_names_the_grid(optimize, run_cli, small_case, tmp_path):
    """The slice's arrivals rounded down to 5 s, as a trace published at that resolution gives them: the
    plan is made on the requests spread over their intervals (a notice says so), the manifest records
    the grid, and the re-simulation, spreading with the manifest's seed, agrees."""
    import yaml

    trace, flags = small_case
    gridded = tmp_path / "gridded.csv"
    header, *rows = trace.read_text().splitlines()
    gridded.write_text("\n".join([header] + [f"{5 * (float(a) // 5):g},{rest}"
                                             for a, rest in (row.split(",", 1) for row in rows)]) + "\n")
    code, _, err = optimize(*flags, "--out", tmp_path / "plan.yaml", trace=gridded)
    assert code == 0 and "arrival times lie on a 5 s grid" in err and "(seed 0)" in err
    assert yaml.safe_load((tmp_path / "plan.yaml").read_text())["workload"]["trace"]["arrival_grid_s"] == 5.0
    code, out, err = run_cli("validate", tmp_path / "plan.yaml", "--trace", gridded, "--resimulate")
    assert code == 0 and "re-simulation" in out, err
