"""`pdplan goodput` and `pdplan simulate` as a user runs them."""

import json
from pathlib import Path

import pytest

from pdplan.hardware import get_gpu
from pdplan.latency.compose import tables
from pdplan.latency.profile import save_profile
from pdplan.latency.roofline import roofline_profile
from pdplan.modelref import get_model

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "smoke_uniform_200.csv"
PLAN = ROOT / "examples" / "plan_disagg.yaml"
COLOCATED = ROOT / "examples" / "plan_colocated.yaml"


def test_goodput_json_has_the_documented_keys(run_cli):
    code, out, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                             "--phase", "prefill", "--requests-per-probe", "200", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert {"goodput_rps", "goodput_per_gpu", "gpus", "bracket", "curve", "probes",
            "requests_per_probe"} <= set(result)
    assert set(result["bracket"]) == {"md1_rps", "mg1_rps"}
    assert {"rate_rps", "attainment_ttft", "attainment_tpot", "attainment_joint"} <= set(result["curve"][0])
    assert result["gpus"] == 4
    assert result["goodput_per_gpu"] == pytest.approx(result["goodput_rps"] / 4)


def test_goodput_table_names_the_saturation_of_the_phase_it_judged(run_cli):
    code, out, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                             "--phase", "prefill", "--requests-per-probe", "200", "--grid", "0")
    assert code == 0, err
    assert "prefill saturation" in out and "decode saturation" not in out


def test_goodput_bound_by_its_slo_names_the_lowest_rate_that_missed(run_cli):
    code, out, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                             "--phase", "prefill", "--requests-per-probe", "200", "--grid", "0", "--json")
    assert code == 0, err
    missed = json.loads(out)["missed_rps"]
    code, out, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                             "--phase", "prefill", "--requests-per-probe", "200", "--grid", "0")
    assert f"{missed:.3f} req/s missed, so it lies in between" in out


def test_goodput_that_holds_up_to_the_decode_saturation_names_that_bound(run_cli):
    """With thresholds no queue reaches, a decode instance is good up to its closed-form saturation throughput and
    no further: the table says the saturation bounds it, not a missed probe a hair above it."""
    code, out, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                             "--phase", "decode", "--tpot", "10s", "--ttft", "100s", "--requests-per-probe", "200",
                             "--grid", "0")
    assert code == 0, err
    assert "the decode saturation throughput, above which it is never good" in out
    assert "missed, so it lies in between" not in out


def test_goodput_of_a_lengths_only_trace_records_the_poisson_probes_it_ran(run_cli, tmp_path):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("num_prefill_tokens,num_decode_tokens\n" + "".join(
        f"{300 + 37 * i % 500},{20 + 7 * i % 90}\n" for i in range(100)))
    code, out, err = run_cli("goodput", lengths, "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                             "--phase", "prefill", "--requests-per-probe", "100", "--grid", "0", "--json")
    assert code == 0, err
    assert json.loads(out)["arrivals"] == "poisson"


def test_goodput_writes_a_curve_plot(run_cli, tmp_path):
    code, _, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", "a100-80gb", "--tp", "4",
                           "--phase", "colocated", "--policy", "chunked", "--chunk", "512",
                           "--requests-per-probe", "200", "--plot", tmp_path / "curve.png")
    assert code == 0, err
    assert (tmp_path / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_goodput_of_a_shape_without_profile_uses_the_roofline_when_composition_is_off(run_cli):
    code, out, err = run_cli("goodput", TRACE, "--model", "llama-3.1-8b", "--gpu", "h200-141gb", "--no-compose",
                             "--phase", "decode", "--requests-per-probe", "200", "--json")
    assert code == 0, err
    assert json.loads(out)["profile_source"] == "roofline"


@pytest.mark.skipif(not tables.installed(), reason="composed profiles need the optional extra pdplan[aic]")
def test_goodput_of_a_shape_without_profile_composes_it_from_the_engine_s_operators(run_cli):
    code, out, err = run_cli("goodput", TRACE, "--model", "llama-3.1-8b", "--gpu", "h200-141gb", "--engine", "sglang",
                             "--phase", "decode", "--requests-per-probe", "200", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["profile_source"] == "composed" and result["profile_method"].startswith("sglang: operator sum")


@pytest.mark.skipif(not tables.installed(), reason="composed profiles need the optional extra pdplan[aic]")
def test_goodput_of_a_wide_instance_is_the_whole_instance_s_with_each_rank_probed(run_cli):
    """DeepSeek-R1 decode on 8 attention-DP ranks with EP 8: one instance of 8 GPUs, composed from the
    wide-EP tables, each probe 200 requests per rank."""
    code, out, err = run_cli("goodput", TRACE, "--model", "deepseek-r1", "--dtype", "fp8", "--gpu", "h200-141gb",
                             "--engine", "sglang", "--phase", "decode", "--dp", "8", "--tpot", "50ms",
                             "--requests-per-probe", "20", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["tp"], result["dp"], result["ep"], result["gpus"]) == (1, 8, 8, 8)
    assert result["profile_source"] == "composed" and result["goodput_rps"] > 0
    code, out, err = run_cli("goodput", TRACE, "--model", "deepseek-r1", "--dtype", "fp8", "--gpu", "h200-141gb",
                             "--engine", "sglang", "--phase", "decode", "--dp", "8", "--tpot", "50ms",
                             "--requests-per-probe", "20")
    assert "× 20 requests per rank × 8 ranks" in out
    assert "max_running_requests" not in result  # on one node: no DeepEP, no budget


@pytest.mark.skipif(not tables.installed(), reason="composed profiles need the optional extra pdplan[aic]")
def test_goodput_of_an_sglang_decode_across_nodes_holds_each_rank_to_deepeps_budget(run_cli):
    """DP16 EP16 on 8-GPU H200 nodes dispatches with DeepEP, whose low-latency kernels take 128 tokens per rank and
    step: the probes hold each rank to 128 requests, and the answer says so."""
    code, out, err = run_cli("goodput", TRACE, "--model", "deepseek-r1", "--dtype", "fp8", "--gpu", "h200-141gb",
                             "--engine", "sglang", "--phase", "decode", "--dp", "16", "--tpot", "50ms",
                             "--requests-per-probe", "20", "--json")
    assert code == 0, err
    assert json.loads(out)["max_running_requests"] == 128


def test_goodput_of_an_sglang_decode_over_gb200_trays_dispatches_as_its_recipes_run_it(run_cli):
    """DP8 on GB200 spans two compute trays (hosts of 4) of the rack's one NVLink domain: SGLang runs DeepEP there,
    so the engine's default is a dispatch, held to DeepEP's 128 tokens per rank."""
    code, out, err = run_cli("goodput", TRACE, "--model", "deepseek-r1", "--dtype", "fp8", "--gpu", "gb200-185gb",
                             "--engine", "sglang", "--phase", "decode", "--dp", "8", "--tpot", "50ms",
                             "--requests-per-probe", "20", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["all_to_all"], result["max_running_requests"]) == ("dispatch", 128)


@pytest.mark.skipif(not tables.installed(), reason="composed profiles need the optional extra pdplan[aic]")
@pytest.mark.parametrize("asked", [("--all-to-all", "gather"), ()], ids=["asked", "the-engines-default"])
def test_goodput_of_a_wide_instance_with_gathered_tokens_reads_the_moe_table(run_cli, asked):
    """SGLang's DP 8 EP 8 on one node without DeepEP, as optimize times it there: asked, or by the engine's default."""
    code, out, err = run_cli("goodput", TRACE, "--model", "deepseek-r1", "--dtype", "fp8", "--gpu", "h200-141gb",
                             "--engine", "sglang", "--phase", "decode", "--dp", "8", *asked,
                             "--tpot", "50ms", "--requests-per-probe", "20", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["dp"], result["ep"], result["profile_source"]) == (8, 8, "composed") and result["goodput_rps"] > 0
    assert result["all_to_all"] == "gather"


@pytest.mark.skipif(not tables.installed(), reason="composed profiles need the optional extra pdplan[aic]")
def test_goodput_with_ep_1_splits_every_expert_over_the_dp_ranks_gpus(run_cli):
    """SGLang's --attn-dp-size 8 without --ep-size: 8 GPUs, each holding 1/8 of every expert."""
    code, out, err = run_cli("goodput", TRACE, "--model", "deepseek-r1", "--dtype", "fp8", "--gpu", "h200-141gb",
                             "--engine", "sglang", "--phase", "decode", "--dp", "8", "--ep", "1", "--tpot", "50ms",
                             "--requests-per-probe", "20", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert (result["tp"], result["dp"], result["ep"], result["gpus"]) == (1, 8, 1, 8)
    assert result["goodput_rps"] > 0


@pytest.mark.skipif(not tables.installed(), reason="composed profiles need the optional extra pdplan[aic]")
@pytest.mark.parametrize("loop", [(), ("--closed-loop",)], ids=["open", "closed"])
def test_goodput_says_how_far_its_source_was_from_measured_deployments_like_the_instance(run_cli, loop):
    """A colocated Llama-3.1-8B on an H200 composed under SGLang: the dense, aggregated SGLang rows of the
    silicon validation."""
    code, out, err = run_cli("goodput", TRACE, "--model", "llama-3.1-8b", "--gpu", "h200-141gb", "--engine", "sglang",
                             "--phase", "colocated", "--requests-per-probe", "100", *loop, "--json")
    assert code == 0, err
    found = json.loads(out)["profile_accuracy"]
    assert [found[k] for k in ("source", "engine", "family", "layout")] == ["composed", "sglang", "dense", "agg"]
    assert found["rows"] > 0 and found["ttft"]["median_abs_error"] >= 0


def test_simulate_reports_no_accuracy_for_measured_profiles(run_cli):
    code, out, err = run_cli("simulate", TRACE, "--plan", PLAN, "--json")
    assert code == 0, err
    assert json.loads(out)["profile_accuracy"] == {"prefill": None, "decode": None}  # Splitwise's fits: never replayed


@pytest.mark.skipif(not tables.installed(), reason="composed profiles need the optional extra pdplan[aic]")
def test_simulate_says_how_far_each_pools_source_was_from_measured_deployments(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(COLOCATED.read_text().replace("llama2-70b", "llama-3.1-8b").replace("a100-80gb", "h200-141gb")
                    .replace("tp: 4", "tp: 1"))
    code, out, err = run_cli("simulate", TRACE, "--plan", plan, "--json")
    assert code == 0, err
    found = json.loads(out)["profile_accuracy"]["colocated"]
    assert (found["source"], found["engine"], found["layout"]) == ("composed", "vllm", "agg")
    code, out, err = run_cli("simulate", TRACE, "--plan", plan)
    assert "accuracy: composed vllm steps replayed against" in out


def test_simulate_json_has_the_documented_keys(run_cli):
    code, out, err = run_cli("simulate", TRACE, "--plan", PLAN, "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["requests"] == 200
    assert {"p50", "p90", "p99"} <= set(result["ttft"]) and {"p50", "p90", "p99"} <= set(result["tpot"])
    assert set(result["attainment"]) == {"ttft", "tpot", "joint"}
    assert result["attainment"]["joint"] <= min(result["attainment"]["ttft"], result["attainment"]["tpot"])
    assert {"bytes_total", "exposed_s_mean"} <= set(result["transfer"])
    assert "throughput_rps" in result and "utilization" in result


def test_simulate_table_shows_each_threshold_the_target_and_the_verdict_the_json_gives(run_cli):
    args = ("simulate", TRACE, "--plan", PLAN, "--ttft", "5s", "--tpot", "20ms", "--attainment", "0.99")
    code, out, err = run_cli(*args, "--json")
    assert code == 0, err
    assert json.loads(out)["meets_slo"] == {"ttft": True, "tpot": False, "joint": False}
    code, out, err = run_cli(*args)
    assert code == 0, err
    rows = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    assert "5000 ms" in rows["TTFT"] and rows["TTFT"].split()[-2] == "meets"
    assert "20 ms" in rows["TPOT"] and rows["TPOT"].split()[-2] == "misses"
    assert rows["joint"].split()[-2] == "misses"
    assert "Misses the SLO: attainment target 0.99" in out and "short on TPOT, joint" in out


def test_simulate_closed_loop_runs_a_lengths_only_trace_with_c_clients(run_cli, tmp_path):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt_tokens,output_tokens\n" + "".join(f"{500 + i},{20 + i % 7}\n" for i in range(60)))
    code, out, err = run_cli("simulate", lengths, "--plan", COLOCATED, "--concurrency", "8", "--json",
                             "--out", tmp_path / "r.csv")
    assert code == 0, err
    assert json.loads(out)["concurrency"] == 8 and json.loads(out)["served"] == 60
    rows = (tmp_path / "r.csv").read_text().splitlines()[1:]
    assert sum(float(row.split(",")[0]) == 0 for row in rows) == 8  # the first C arrive at once


def test_simulate_paces_a_closed_loop_by_a_rate_as_a_benchmark_client_does(run_cli, tmp_path):
    """--rate 2 --concurrency 4: the first 4 requests are due at 0 and the trace's next gaps (rescaled to 2 req/s),
    so they are not sent at once, and no request is sent before it is due."""
    code, out, err = run_cli("simulate", TRACE, "--plan", COLOCATED, "--rate", "2", "--concurrency", "4", "--json",
                             "--out", tmp_path / "r.csv")
    assert code == 0, err
    arrivals = [float(row.split(",")[0]) for row in (tmp_path / "r.csv").read_text().splitlines()[1:]]
    assert arrivals[0] == 0 and 0 < arrivals[1] < arrivals[3] and json.loads(out)["concurrency"] == 4


def test_a_paced_closed_loop_needs_the_traces_arrival_times(run_cli, tmp_path):
    lengths = tmp_path / "lengths.csv"
    lengths.write_text("prompt_tokens,output_tokens\n" + "".join(f"{500 + i},{20 + i % 7}\n" for i in range(60)))
    code, out, err = run_cli("simulate", lengths, "--plan", COLOCATED, "--rate", "2", "--concurrency", "8")
    assert code == 2 and out == ""
    assert err.startswith(f"Error: {lengths}: trace has no arrival times; give it arrivals first")


def test_simulate_writes_one_row_per_request(run_cli, tmp_path):
    code, _, err = run_cli("simulate", TRACE, "--plan", COLOCATED, "--out", tmp_path / "r.csv")
    assert code == 0, err
    lines = (tmp_path / "r.csv").read_text().splitlines()
    assert len(lines) == 201 and lines[0].startswith("arrival_s,prompt_tokens,output_tokens")


def test_simulate_is_byte_identical_across_runs(run_cli, tmp_path):
    run_cli("simulate", TRACE, "--plan", PLAN, "--out", tmp_path / "a.csv")
    run_cli("simulate", TRACE, "--plan", PLAN, "--out", tmp_path / "b.csv")
    assert (tmp_path / "a.csv").read_bytes() == (tmp_path / "b.csv").read_bytes()


BAD = [
    (("goodput", TRACE, "--model", "llama2-70b", "--gpu", "a100-80gb", "--tp", "4", "--phase", "both"),
     "Error: --phase must be one of colocated, decode, prefill, got 'both'"),
    (("goodput", TRACE, "--model", "llama2-70b", "--gpu", "a100-80gb", "--phase", "prefill"),
     "Error: llama2-70b a100-80gb TP1 PP1: weights 128.5 GiB per GPU > 72.0 GiB usable (90% of 80 GiB)"),
    (("goodput", TRACE, "--model", "llama2-70b", "--gpu", "a100-80gb", "--tp", "4", "--phase", "prefill",
      "--attainment", "1.5"), "Error: --attainment must be in (0, 1], got 1.5"),
    (("goodput", TRACE, "--model", "llama2-70b", "--gpu", "a100-80gb", "--tp", "4", "--phase", "colocated",
      "--policy", "chunked"), "Error: --chunk goes with --phase colocated --policy chunked"),
    (("goodput", TRACE, "--model", "llama2-70b", "--gpu", "a100-80gb", "--tp", "4", "--phase", "colocated",
      "--policy", "chunked", "--chunk", "0"), "Error: --chunk must be >= 1, got 0"),
    (("goodput", TRACE, "--model", "llama2-70b", "--gpu", "a100-80gb", "--tp", "4", "--phase", "decode",
      "--dp", "2"), "Error: llama2-70b a100-80gb TP4 DP2 EP8 PP1: llama2-70b has no routed experts"),
    (("goodput", TRACE, "--model", "deepseek-r1", "--gpu", "h200-141gb", "--phase", "decode", "--dp", "8",
      "--pp", "2"), "Error: --dp 8 with --pp 2: an instance with attention data parallelism is one pipeline stage"),
    (("goodput", TRACE, "--model", "deepseek-r1", "--gpu", "h200-141gb", "--phase", "decode", "--dp", "0"),
     "Error: --dp must be >= 1, got 0"),
    (("goodput", TRACE, "--model", "deepseek-r1", "--gpu", "h200-141gb", "--phase", "decode", "--dp", "8",
      "--ep", "1", "--all-to-all", "gather"), "Error: --all-to-all gather with --tp 1 --dp 8 --ep 1: gather applies "
                                              "to attention data parallelism with whole experts over every GPU"),
    (("goodput", TRACE, "--model", "deepseek-r1", "--gpu", "h200-141gb", "--phase", "decode", "--dp", "8",
      "--all-to-all", "deepep"), "Error: --all-to-all must be one of dispatch, gather, got 'deepep'"),
    (("goodput", TRACE, "--model", "deepseek-r1", "--gpu", "h200-141gb", "--phase", "decode", "--dp", "8",
      "--ep", "3"), "Error: deepseek-r1@fp8 h200-141gb TP1 DP8 EP3 PP1: EP 3 must divide the 8 GPUs of TP 1 × DP 8 "
                    "that hold the experts (expert TP = TP × DP / EP)"),
    (("simulate", TRACE, "--plan", ROOT / "nope.yaml"), "Error: {root}/nope.yaml: plan file not found"),
    (("simulate", TRACE, "--plan", PLAN, "--rate", "-1"), "Error: --rate must be > 0 and <= 1,000,000, got -1.0"),
    (("simulate", TRACE, "--plan", PLAN, "--ttft", "0"), "Error: --ttft must be > 0, got '0'"),
    (("simulate", TRACE, "--plan", PLAN, "--tpot", "-1"),
     "Error: --tpot must be a duration such as 2s, 50ms or 0.5 (seconds), got '-1'"),
    (("simulate", TRACE, "--plan", PLAN, "--ttft", "inf"),
     "Error: --ttft must be a duration such as 2s, 50ms or 0.5 (seconds), got 'inf'"),
    (("simulate", TRACE, "--plan", PLAN, "--ttft", "2000"),
     "Error: --ttft 2000 reads as 2000 seconds; plain numbers are seconds, so for milliseconds write --ttft 2000ms"),
    (("simulate", TRACE, "--plan", PLAN, "--tpot", "50"),
     "Error: --tpot 50 reads as 50 seconds; plain numbers are seconds, so for milliseconds write --tpot 50ms"),
    (("simulate", TRACE, "--plan", PLAN, "--attainment", "1.5"), "Error: --attainment must be in (0, 1], got 1.5"),
    (("simulate", TRACE, "--plan", PLAN, "--concurrency", "0"), "Error: --concurrency must be >= 1, got 0"),
]


@pytest.mark.parametrize("args,message", BAD, ids=["phase", "does-not-fit", "attainment", "chunk",
                                                    "chunk-zero", "dp-dense", "dp-with-pp", "dp-zero",
                                                    "gather-split-experts", "all-to-all-word",
                                                    "ep-not-dividing", "missing-plan", "rate", "simulate-ttft",
                                                    "simulate-tpot", "simulate-ttft-inf", "ttft-in-ms-by-mistake",
                                                    "tpot-in-ms-by-mistake", "simulate-attainment",
                                                    "concurrency-zero"])
def test_bad_input_exits_2_with_one_line(run_cli, args, message):
    code, out, err = run_cli(*args)
    assert code == 2
    assert err.startswith(message.format(root=ROOT))
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_bad_slo_file_names_file_and_field(run_cli, tmp_path):
    slo = tmp_path / "slo.yaml"
    slo.write_text("objectives:\n  - {metric: ttft, threshold_ms: 0, attainment: 0.9}\n")
    code, _, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", "a100-80gb", "--tp", "4",
                           "--phase", "prefill", "--slo", slo)
    assert code == 2
    assert err == f"Error: {slo}:2: objectives[0].threshold_ms must be > 0, got 0\n"


def test_bad_plan_file_names_file_line_and_field(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN.read_text().replace("replicas: 2", "replicas: 0", 1))
    code, _, err = run_cli("simulate", TRACE, "--plan", plan)
    assert code == 2
    assert err.startswith(f"Error: {plan}:") and "replicas must be >= 1, got 0" in err


def test_decode_curve_heads_its_ttft_column_the_share_within_the_admission_wait_threshold(run_cli):
    code, out, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                             "--phase", "decode", "--requests-per-probe", "200", "--grid", "0",
                             "--ttft", "2s", "--tpot", "100ms", "--admission-share", "0.25")
    assert code == 0, err
    header = next(line for line in out.splitlines() if "rate req/s" in line)
    assert [cell.strip() for cell in header.strip("┃").split("┃")] == [
        "rate req/s", "admission wait ≤ 500 ms (share)", "TPOT ≤ 100 ms (share)", "joint (share)", "meets"]


@pytest.mark.parametrize("ttft,tpot", [("1s", "100ms"), ("1000ms", "0.1s"), ("1", "0.1")])
def test_slo_flags_take_seconds_or_milliseconds_with_their_unit(run_cli, ttft, tpot):
    code, out, err = run_cli("simulate", TRACE, "--plan", PLAN, "--ttft", ttft, "--tpot", tpot, "--json")
    assert code == 0, err
    assert json.loads(out)["slo"] == {"ttft_s": pytest.approx(1.0), "tpot_s": pytest.approx(0.1)}


@pytest.mark.slow
def test_library_notices_stay_quiet_unless_verbose(tmp_path):
    """A first matplotlib run builds its font cache and says so; pdplan's stderr stays empty."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path / "mpl")}
    done = subprocess.run([sys.executable, "-m", "pdplan", "goodput", str(TRACE), "--model", "llama2-70b", "--gpu",
                           "h100-80gb", "--tp", "4", "--phase", "prefill", "--requests-per-probe", "200", "--grid",
                           "0", "--plot", str(tmp_path / "curve.png")], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stderr == ""
    assert (tmp_path / "curve.png").exists()


def test_closed_loop_goodput_is_the_most_clients_that_meet_the_slo(run_cli):
    code, out, err = run_cli("goodput", TRACE, "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                             "--phase", "colocated", "--closed-loop", "--requests-per-probe", "300", "--json")
    assert code == 0, err
    loop = json.loads(out)["closed_loop"]
    verdict = {p["clients"]: p["meets"] for p in loop["probes"]}
    assert loop["clients"] >= 1 and verdict[loop["clients"]] and not verdict[loop["clients"] + 1]
    assert all(meets for clients, meets in verdict.items() if clients <= loop["clients"])
    best = next(p for p in loop["probes"] if p["clients"] == loop["clients"])
    assert loop["throughput_rps"] == best["throughput_rps"] > 0


def test_goodput_says_when_a_given_profile_times_its_model_and_tp_at_other_coordinates(run_cli, tmp_path):
    """A profile of experts split over TP 2 does not time an instance of EP 2: goodput says so, naming the file."""
    mine = tmp_path / "tp2.yaml"
    save_profile(roofline_profile(get_model("qwen3-30b-a3b"), get_gpu("h100-80gb"), 2, 1), mine)
    code, out, err = run_cli("goodput", TRACE, "--model", "qwen3-30b-a3b", "--gpu", "h100-80gb", "--tp", "2",
                             "--ep", "2", "--no-compose", "--phase", "prefill", "--profiles", mine,
                             "--requests-per-probe", "50", "--json")
    assert code == 0, err
    assert f"notice: {mine}: times qwen3-30b-a3b h100-80gb TP2 PP1, which no pool here runs; " in " ".join(err.split())
