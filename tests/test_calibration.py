"""pdplan profile calibrate: correct a profile from a serving benchmark's saved result."""

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from pdplan.errors import PdplanError
from pdplan.latency.calibration.bench import BenchRun, read_bench
from pdplan.latency.calibration.fit import EngineBatching, calibrate, corrected, replay
from pdplan.latency.compose import tables
from pdplan.latency.profile import load_profile, save_profile, shipped_profiles, with_prompt_iteration

BASE = shipped_profiles()[("llama2-70b", "h100-80gb", 4, 1)]
TRUTH = dict(prefill=1.3, decode=0.8, iteration_s=0.004)


def vllm_result(path: Path, clients: int, seed: int = 0, n: int = 300,
                schedule: EngineBatching = EngineBatching(), base=BASE, truth=TRUTH) -> Path:
    """What `vllm bench serve --save-result --save-detailed` writes, from a run of the simulator
    on the base profile corrected by TRUTH: per-request lengths, TTFTs and ITLs in seconds."""
    rng = np.random.default_rng(seed)
    prompts, outputs = rng.integers(100, 3000, n), rng.integers(20, 400, n)
    run = BenchRun(file=str(path), format="vllm-bench", concurrency=clients, rate_rps=None,
                   prompt_tokens=prompts, output_tokens=outputs)
    truth = corrected(base, truth["prefill"], truth["decode"], truth["iteration_s"], truth.get("prompt_iteration_s", 0))
    ttft, tpot = replay(truth, run, schedule)
    itls = [[float(t)] * (int(o) - 1) for t, o in zip(tpot, outputs)]
    path.write_text(json.dumps({
        "date": "20261201-120000", "endpoint_type": "openai", "backend": "vllm", "model_id": "llama2-70b",
        "num_prompts": n, "request_rate": "inf", "burstiness": 1.0, "max_concurrency": clients,
        "completed": n, "total_input_tokens": int(prompts.sum()), "total_output_tokens": int(outputs.sum()),
        "input_lens": prompts.tolist(), "output_lens": outputs.tolist(), "ttfts": ttft.tolist(), "itls": itls,
        "errors": [""] * n, "mean_ttft_ms": float(ttft.mean() * 1e3), "median_ttft_ms": float(np.median(ttft) * 1e3),
        "mean_tpot_ms": float(np.nanmean(tpot) * 1e3)}))
    return path


@pytest.fixture(scope="module")
def base_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("base") / "base.yaml"
    save_profile(BASE, path)
    return path


def test_a_concurrency_sweep_made_with_known_factors_is_recovered_within_2_percent(run_cli, tmp_path, base_file):
    benches = [vllm_result(tmp_path / f"c{c}.json", c) for c in (1, 16, 64)]
    args = [a for b in benches for a in ("--bench", b)]
    code, out, err = run_cli("profile", "calibrate", base_file, *args, "-o", tmp_path / "cal.yaml", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["prefill_scale"] == pytest.approx(TRUTH["prefill"], rel=0.02)
    assert doc["decode_scale"] == pytest.approx(TRUTH["decode"], rel=0.02)
    assert doc["iteration_ms"] == pytest.approx(TRUTH["iteration_s"] * 1e3, rel=0.02)
    assert doc["undetermined"] == []
    assert max(map(abs, doc["error_after"].values())) < 0.01 < max(map(abs, doc["error_before"].values()))
    prov = load_profile(tmp_path / "cal.yaml").provenance
    record = dict(prov.calibration)
    assert prov.source == "calibrated" and record["format"] == "vllm-bench" and record["runs"] == 3
    assert record["prefill_scale"] == pytest.approx(TRUTH["prefill"], rel=0.02)
    assert record["error_after"] < 0.01 < record["error_before"]


@pytest.mark.skipif(not tables.installed(), reason="composing needs the optional extra pdplan[aic]")
def test_a_composed_attention_dp_profile_is_calibrated_from_a_sweep_of_its_whole_instance(run_cli, tmp_path):
    """The pilot run the accuracy line advises for a wide pool: profile compose --dp writes one rank's
    profile of a DeepSeek-V3 TP1 DP8 EP8 instance, and a sweep of that instance made with known factors
    is recovered."""
    base_file = tmp_path / "dp8.yaml"
    code, out, err = run_cli("profile", "compose", "--model", "deepseek-v3", "--gpu", "h200-141gb", "--tp", "1",
                             "--dp", "8", "--engine", "sglang", "-o", base_file, "--json")
    assert code == 0, err
    assert (json.loads(out)["dp"], json.loads(out)["ep"]) == (8, 8)
    base = load_profile(base_file)
    assert (base.dp, base.ep) == (8, 8) and base.group_decode_points  # one rank's steps and its MoE share
    schedule = EngineBatching(policy="prefill-first", tokens=8192)
    benches = [vllm_result(tmp_path / f"c{c}.json", c, schedule=schedule, base=base) for c in (8, 64, 256)]
    args = [a for b in benches for a in ("--bench", b)]
    code, out, err = run_cli("profile", "calibrate", base_file, *args, "--policy", "prefill-first", "-o",
                             tmp_path / "cal.yaml", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["prefill_scale"] == pytest.approx(TRUTH["prefill"], rel=0.03)
    assert doc["decode_scale"] == pytest.approx(TRUTH["decode"], rel=0.03)
    calibrated = load_profile(tmp_path / "cal.yaml")
    assert (calibrated.dp, calibrated.ep) == (8, 8) and calibrated.provenance.source == "calibrated"


def test_a_benchmark_of_an_engine_running_mtp_is_replayed_with_it(run_cli, tmp_path, base_file):
    from pdplan.latency.speculative import SpeculativeDecoding

    mtp = SpeculativeDecoding(method="mtp", acceptance=0.7, draft_tokens=2, draft_cost=1 / 80)  # llama2-70b: L = 80
    benches = [vllm_result(tmp_path / f"c{c}.json", c, schedule=EngineBatching(speculative=mtp)) for c in (1, 8, 32)]
    args = [a for b in benches for a in ("--bench", b)]
    code, out, err = run_cli("profile", "calibrate", base_file, *args, "-o", tmp_path / "cal.yaml", "--json",
                             "--speculative", "mtp", "--acceptance", "0.7", "--draft-tokens", "2")
    assert code == 0, err
    doc = json.loads(out)  # the plain decode step is recovered, not the faster one the engine showed
    assert doc["decode_scale"] == pytest.approx(TRUTH["decode"], rel=0.02)
    assert doc["prefill_scale"] == pytest.approx(TRUTH["prefill"], rel=0.02)
    record = dict(load_profile(tmp_path / "cal.yaml").provenance.calibration)
    assert record["speculative"].startswith("speculative decoding with multi-token prediction (MTP): 2 draft tokens")


def test_a_sweep_made_with_a_cost_per_prompt_iteration_is_recovered_within_2_percent(run_cli, tmp_path, base_file):
    """An engine that runs its prefill eagerly pays its launches in every iteration with prompt work (here
    40 ms); prompts of 100 to 3,000 tokens tell that fixed cost from the prefill scale."""
    eager = dict(prefill=1.1, decode=0.9, iteration_s=0.002, prompt_iteration_s=0.040)
    benches = [vllm_result(tmp_path / f"c{c}.json", c, truth=eager) for c in (1, 8, 32)]
    args = [a for b in benches for a in ("--bench", b)]
    code, out, err = run_cli("profile", "calibrate", base_file, *args, "-o", tmp_path / "cal.yaml", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["prompt_iteration_ms"] == pytest.approx(40.0, rel=0.02)
    assert doc["prefill_scale"] == pytest.approx(eager["prefill"], rel=0.02)
    assert doc["decode_scale"] == pytest.approx(eager["decode"], rel=0.02)
    calibrated = load_profile(tmp_path / "cal.yaml")
    assert calibrated.prompt_iteration_s == pytest.approx(0.040, rel=0.02)
    assert dict(calibrated.provenance.calibration)["prompt_iteration_ms"] == pytest.approx(40.0, rel=0.02)


def test_a_run_that_cannot_place_a_fixed_cost_leaves_the_kernels_scale_as_measured():
    """One client sending prompts of one length cannot tell a prefill scale from a cost per prompt iteration:
    the fit keeps the measured kernels (scale 1) and puts the gap on the host, as an eager prefill pays it."""
    truth = corrected(BASE, 1.0, 1.0, 0.0, 0.100)
    bench = BenchRun(file="c1", format="vllm-bench", concurrency=1, rate_rps=None,
                     prompt_tokens=np.full(100, 1024), output_tokens=np.full(100, 128))
    ttft, tpot = replay(truth, bench, EngineBatching())
    fit = calibrate(BASE, [dataclasses.replace(bench, ttft_s=ttft, tpot_s=tpot)])
    assert fit.prefill_scale == pytest.approx(1.0, rel=0.05)
    assert fit.prompt_iteration_s == pytest.approx(0.100, rel=0.05)


def test_a_stated_prompt_iteration_cost_is_replaced_by_the_measured_one_not_added_to(run_cli, tmp_path):
    """A profile timed from kernels states the eager prefill's host time (here 60 ms); a pilot whose engine
    pays 20 ms brings it down to 20 ms: the stated cost is where the search may leave, not a floor."""
    stated = with_prompt_iteration(BASE, 0.060)
    save_profile(stated, tmp_path / "stated.yaml")
    truth = dict(prefill=1.1, decode=0.9, iteration_s=0.002, prompt_iteration_s=0.020)
    benches = [vllm_result(tmp_path / f"c{c}.json", c, base=stated, truth=truth) for c in (1, 8, 32)]
    args = [a for b in benches for a in ("--bench", b)]
    code, out, err = run_cli("profile", "calibrate", tmp_path / "stated.yaml", *args, "-o", tmp_path / "cal.yaml",
                             "--json")
    assert code == 0, err
    assert json.loads(out)["prompt_iteration_ms"] == pytest.approx(20.0, rel=0.02)
    assert load_profile(tmp_path / "cal.yaml").prompt_iteration_s == pytest.approx(0.020, rel=0.02)


def test_correcting_a_profile_with_its_own_stated_cost_and_unit_factors_leaves_it_as_it_was():
    stated = with_prompt_iteration(BASE, 0.060)
    again = corrected(stated, 1.0, 1.0, 0.0, stated.prompt_iteration_s)
    for lengths in ([100], [2000, 3000]):
        assert again.prefill_time_s(lengths) == pytest.approx(stated.prefill_time_s(lengths), rel=1e-12)
    assert again.decode_step_s(16, 20000) == pytest.approx(stated.decode_step_s(16, 20000), rel=1e-12)
    assert again.prompt_iteration_s == pytest.approx(0.060)


def sglang_sweep(path: Path, clients: tuple[int, ...], schedule: EngineBatching) -> Path:
    """What `python -m sglang.bench_serving --output-file PATH --output-details` leaves after a sweep: each
    run's object appended on a line of its own, a closed loop's unlimited rate written as Infinity."""
    lines = []
    for c in clients:
        run = json.loads(vllm_result(path.with_name(f"vllm{c}.json"), c, schedule=schedule).read_text())
        sglang_keys = {k: run[k] for k in ("completed", "total_input_tokens", "total_output_tokens", "input_lens",
                                           "output_lens", "ttfts", "itls", "errors", "mean_ttft_ms",
                                           "median_ttft_ms", "mean_tpot_ms")}
        lines.append(json.dumps({"tag": None, "backend": "sglang", "dataset_name": "random",
                                 "request_rate": float("inf"), "max_concurrency": c, **sglang_keys,
                                 "generated_texts": ["x"] * len(run["ttfts"])}))
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_an_sglang_sweep_appended_to_one_file_is_recovered_run_by_run(run_cli, tmp_path, base_file):
    schedule = EngineBatching(policy="prefill-first", tokens=8192)
    bench = sglang_sweep(tmp_path / "res.jsonl", (1, 16, 64), schedule)
    assert "Infinity" in bench.read_text() and len(bench.read_text().splitlines()) == 3
    code, out, err = run_cli("profile", "calibrate", base_file, "--bench", bench, "--format", "sglang-bench",
                             "--policy", "prefill-first", "-o", tmp_path / "cal.yaml", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["prefill_scale"] == pytest.approx(TRUTH["prefill"], rel=0.02)
    assert doc["decode_scale"] == pytest.approx(TRUTH["decode"], rel=0.02)
    assert doc["undetermined"] == []
    record = dict(load_profile(tmp_path / "cal.yaml").provenance.calibration)
    assert (record["format"], record["runs"], record["files"]) == ("sglang-bench", 3, str(bench))


PD_PLAN = """pdplan_plan: 1
name: llama2-70b 1P TP4 + 1D TP8 h100
default_link: {bandwidth_gb_s: 25, setup_ms: 0.5}
pools:
  - {name: prefill, phase: prefill, model: llama2-70b, gpu: h100-80gb, tp: 4, pp: 1, replicas: 1}
  - {name: decode, phase: decode, model: llama2-70b, gpu: h100-80gb, tp: 8, pp: 1, replicas: 1}
"""
DECODE_BASE = shipped_profiles()[("llama2-70b", "h100-80gb", 8, 1)]


def pd_result(path: Path, clients: int, deployment, truth=TRUTH, n: int = 300) -> Path:
    """What `vllm bench serve --save-detailed` writes against a whole P/D deployment, from a run of the
    simulator on it with both profiles corrected by ``truth``."""
    rng = np.random.default_rng(clients)
    prompts, outputs = rng.integers(100, 3000, n), rng.integers(20, 400, n)
    run = BenchRun(file=str(path), format="vllm-bench", concurrency=clients, rate_rps=None,
                   prompt_tokens=prompts, output_tokens=outputs)
    factors = (truth["prefill"], truth["decode"], truth["iteration_s"], truth.get("prompt_iteration_s", 0))
    ttft, tpot = deployment.replay(corrected(BASE, *factors), corrected(DECODE_BASE, *factors), run)
    path.write_text(json.dumps({
        "request_rate": "inf", "max_concurrency": clients, "input_lens": prompts.tolist(),
        "output_lens": outputs.tolist(), "ttfts": ttft.tolist(),
        "itls": [[float(t)] * (int(o) - 1) for t, o in zip(tpot, outputs)], "errors": [""] * n}))
    return path


def test_a_sweep_of_a_whole_disaggregated_deployment_corrects_both_its_profiles(run_cli, tmp_path, base_file):
    """The benchmark ran router, prefill, KV handoff and decode: replayed on the deployment's plan, the
    factors come back, and each pool's profile is written corrected by them."""
    from pdplan.latency.calibration.fit import Deployment
    from pdplan.manifest.plan import read_plan
    from pdplan.sim.plan import plan_model

    plan, decode_file = tmp_path / "pd.yaml", tmp_path / "decode_base.yaml"
    plan.write_text(PD_PLAN)
    save_profile(DECODE_BASE, decode_file)
    the_plan, _ = read_plan(plan)
    deployment = Deployment.of(the_plan, plan_model(the_plan), BASE, DECODE_BASE)
    benches = [pd_result(tmp_path / f"c{c}.json", c, deployment) for c in (1, 16, 64)]
    args = [a for b in benches for a in ("--bench", b)]
    code, out, err = run_cli("profile", "calibrate", base_file, *args, "--plan", plan, "--decode-profile", decode_file,
                             "-o", tmp_path / "prefill.yaml", "--decode-output", tmp_path / "decode.yaml", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["prefill_scale"] == pytest.approx(TRUTH["prefill"], rel=0.03)
    assert doc["decode_scale"] == pytest.approx(TRUTH["decode"], rel=0.03)
    assert doc["decode_profile"] == (tmp_path / "decode.yaml").as_posix()
    for name in ("prefill.yaml", "decode.yaml"):
        record = dict(load_profile(tmp_path / name).provenance.calibration)
        assert record["schedule"] == "disaggregated: 1 x prefill h100-80gb TP4 PP1, 1 x decode h100-80gb TP8 PP1"
        assert record["prefill_scale"] == pytest.approx(doc["prefill_scale"])


@pytest.mark.parametrize("flags, refused", [
    (("--decode-profile", "D"), "--plan is missing"),
    (("--plan", "P", "--decode-profile", "D", "--decode-output", "out.yaml", "--recv-interval", "4"),
     "--recv-interval sets one instance's schedule"),
])
def test_a_deployment_calibration_needs_its_three_flags_and_no_instance_schedule(run_cli, tmp_path, base_file,
                                                                                 flags, refused):
    bench = vllm_result(tmp_path / "c8.json", 8)
    code, out, err = run_cli("profile", "calibrate", base_file, "--bench", bench, *flags, "-o", tmp_path / "cal.yaml")
    assert code == 2 and out == "" and refused in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "cal.yaml").exists()


def test_a_plan_whose_pool_another_profile_times_is_refused_naming_the_pool(run_cli, tmp_path, base_file):
    plan = tmp_path / "pd.yaml"
    plan.write_text(PD_PLAN.replace("phase: decode, model: llama2-70b, gpu: h100-80gb, tp: 8",
                                    "phase: decode, model: llama2-70b, gpu: h100-80gb, tp: 2"))
    decode_file = tmp_path / "decode_base.yaml"
    save_profile(DECODE_BASE, decode_file)
    bench = vllm_result(tmp_path / "c8.json", 8)
    code, out, err = run_cli("profile", "calibrate", base_file, "--bench", bench, "--plan", plan, "--decode-profile",
                             decode_file, "-o", tmp_path / "p.yaml", "--decode-output", tmp_path / "d.yaml")
    assert code == 2 and out == "" and "pd.yaml" in err and "pool decode runs llama2-70b h100-80gb TP2" in err, err


def test_pools_of_one_shape_are_calibrated_from_one_profile(run_cli, tmp_path, base_file):
    """The simulator times a shape by one profile: two different ones for a P/D plan's one shape are refused."""
    plan, other = tmp_path / "pd.yaml", tmp_path / "other.yaml"
    plan.write_text(PD_PLAN.replace("tp: 8", "tp: 4"))
    save_profile(corrected(BASE, 1.1, 1.0, 0.0), other)
    bench = vllm_result(tmp_path / "c8.json", 8)
    code, out, err = run_cli("profile", "calibrate", base_file, "--bench", bench, "--plan", plan, "--decode-profile",
                             other, "-o", tmp_path / "p.yaml", "--decode-output", tmp_path / "d.yaml")
    assert code == 2 and "the decode profile times llama2-70b h100-80gb TP4 PP1 as the prefill profile does" in err
    assert "pd.yaml" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flags, schedule", [
    (("--policy", "prefill-first", "--recv-interval", "10"), EngineBatching(policy="prefill-first", recv_interval=10)),
    (("--batch-wait-timeout-iters", "20", "--batch-wait-max-tokens-ratio", "0.9"),
     EngineBatching(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9))],
    ids=["sglang-receive-interval", "tensorrt-llm-batch-waiting"])
def test_a_benchmark_of_an_engine_with_its_scheduler_s_waits_is_replayed_with_them(run_cli, tmp_path, base_file,
                                                                                     flags, schedule):
    benches = [vllm_result(tmp_path / f"c{c}.json", c, schedule=schedule) for c in (1, 8, 32)]
    args = [a for b in benches for a in ("--bench", b)]
    code, out, err = run_cli("profile", "calibrate", base_file, *args, *flags, "-o", tmp_path / "cal.yaml", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["prefill_scale"] == pytest.approx(TRUTH["prefill"], rel=0.02)
    assert doc["decode_scale"] == pytest.approx(TRUTH["decode"], rel=0.02)
    ran = dict(load_profile(tmp_path / "cal.yaml").provenance.calibration)["schedule"]
    assert ran == schedule.describe() and ("receive every 10" in ran or "batch waiting 20 iterations" in ran)
    policy = flags[:2] if flags[0] == "--policy" else ()
    code, out, err = run_cli("profile", "calibrate", base_file, *args, *policy, "-o", tmp_path / "blind.yaml", "--json")
    blind = json.loads(out)  # replayed without the waits, no factors reproduce what the engine did
    assert max(map(abs, doc["error_after"].values())) < 0.01 < 0.1 < max(map(abs, blind["error_after"].values()))


def test_a_sweep_that_restarted_its_server_with_other_settings_is_replayed_run_by_run(tmp_path):
    """InferenceMAX starts the server afresh for each configuration, its budget and waits set per run: each
    run replayed with its own schedule gives back the factors; one schedule for all does not."""
    ran = [EngineBatching(tokens=1152), EngineBatching(tokens=8192),
           EngineBatching(batch_wait_timeout_iters=20, batch_wait_max_tokens_ratio=0.9)]
    runs = [run for c, batching in zip((1, 16, 64), ran)
            for run in read_bench(vllm_result(tmp_path / f"c{c}.json", c, schedule=batching), "vllm-bench")]
    fit = calibrate(BASE, runs, ran)
    assert (fit.prefill_scale, fit.decode_scale) == (pytest.approx(TRUTH["prefill"], rel=0.02),
                                                     pytest.approx(TRUTH["decode"], rel=0.02))
    assert max(map(abs, fit.after.values())) < 0.01 < max(map(abs, calibrate(BASE, runs).after.values()))


def test_a_benchmark_of_attention_dp_ranks_under_the_balance_is_replayed_with_it(tmp_path):
    """Four ranks under TensorRT-LLM's attention-DP balance: replayed with it the fit gives back the factors;
    replayed without it, no factors reproduce the prompts' waits."""
    base = dataclasses.replace(BASE, dp=4)
    ran = EngineBatching(attention_dp_timeout_iters=60, attention_dp_batching_wait_iters=0)
    runs = [run for c in (4, 32) for run in read_bench(vllm_result(tmp_path / f"c{c}.json", c, schedule=ran, base=base),
                                                       "vllm-bench")]
    fit = calibrate(base, runs, ran)
    assert (fit.prefill_scale, fit.decode_scale) == (pytest.approx(TRUTH["prefill"], rel=0.02),
                                                     pytest.approx(TRUTH["decode"], rel=0.02))
    assert max(map(abs, fit.after.values())) < 0.01 < max(map(abs, calibrate(base, runs).after.values()))
    assert ran.describe() == "chunked 8192, attention-DP balance 60 iterations, 0 batching"


@pytest.mark.parametrize("flags, flag", [
    (("--batch-wait-timeout-iters", "20"), "--batch-wait-max-tokens-ratio"),
    (("--policy", "prefill-first", "--batch-wait-timeout-iters", "20", "--batch-wait-max-tokens-ratio", "0.9"),
     "--batch-wait-timeout-iters"),
    (("--recv-interval", "0"), "--recv-interval"),
    (("--attention-dp-timeout-iters", "60", "--attention-dp-batching-wait-iters", "0"),  # a one-rank profile
     "--attention-dp-timeout-iters")])
def test_scheduler_flags_the_engine_cannot_run_exit_2_naming_the_flag(run_cli, tmp_path, base_file, flags, flag):
    bench = vllm_result(tmp_path / "c8.json", 8)
    code, out, err = run_cli("profile", "calibrate", base_file, "--bench", bench, *flags, "-o", tmp_path / "cal.yaml")
    assert code == 2 and flag in err and len(err.strip().splitlines()) == 1 and out == ""
    assert not (tmp_path / "cal.yaml").exists()


def test_one_closed_loop_run_says_the_decode_scale_and_iteration_cost_trade_off(run_cli, tmp_path, base_file):
    bench = vllm_result(tmp_path / "c8.json", 8)
    code, out, err = run_cli("profile", "calibrate", base_file, "--bench", bench, "-o", tmp_path / "cal.yaml")
    assert code == 0, err
    assert "Not separately determined by these runs: decode scale, iteration cost" in " ".join(out.split())


# --- formats ----------------------------------------------------------------------------------------

def write(tmp_path, name, doc) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def test_vllm_aggregate_result_replays_mean_lengths_in_a_closed_loop(tmp_path):
    [run] = read_bench(write(tmp_path, "v.json", {
        "request_rate": "inf", "max_concurrency": 16, "completed": 200, "total_input_tokens": 204800,
        "total_output_tokens": 25600, "mean_ttft_ms": 120.0, "median_ttft_ms": 110.0, "p99_ttft_ms": 400.0,
        "mean_tpot_ms": 20.0, "median_tpot_ms": 19.5, "p99_tpot_ms": 30.0}), "vllm-bench")
    assert (run.concurrency, run.rate_rps, len(run.prompt_tokens)) == (16, None, 200)
    assert run.prompt_tokens[0] == 1024 and run.output_tokens[0] == 128
    assert run.statistics()["ttft"] == pytest.approx({"mean": 0.12, "p50": 0.11, "p99": 0.4})


def test_vllm_detailed_result_skips_failed_requests_and_derives_tpot_from_itls(tmp_path):
    [run] = read_bench(write(tmp_path, "v.json", {
        "request_rate": 4.0, "max_concurrency": None, "input_lens": [512, 512, 100], "output_lens": [3, 0, 1],
        "ttfts": [0.05, 0.0, 0.02], "itls": [[0.01, 0.03], [], []], "errors": ["", "Internal Server Error", ""]}),
        "vllm-bench")
    assert (run.concurrency, run.rate_rps) == (None, 4.0)
    assert run.prompt_tokens.tolist() == [512, 100]
    assert run.ttft_s.tolist() == [0.05, 0.02]
    assert run.tpot_s[0] == pytest.approx(0.02) and np.isnan(run.tpot_s[1])


def test_a_rate_beside_a_concurrency_cap_is_read_as_a_paced_closed_loop(tmp_path):
    """vllm bench serve --request-rate 4 --max-concurrency 8 sends each request when the rate schedules it or when one
    of 8 slots frees: both settings stay."""
    [run] = read_bench(write(tmp_path, "v.json", {
        "request_rate": 4.0, "max_concurrency": 8, "completed": 100, "total_input_tokens": 51200,
        "total_output_tokens": 6400, "mean_ttft_ms": 100.0, "mean_tpot_ms": 20.0}), "vllm-bench")
    assert (run.concurrency, run.rate_rps) == (8, 4.0)


def test_a_paced_run_replays_fewer_requests_at_once_than_its_unpaced_closed_loop():
    """At 0.5 req/s, 8 clients rarely have more than one request in flight: TTFT is about a lone prefill's, and none
    waits as long as the unpaced loop's first wave, where all 8 clients start at once and queue at the prefill."""
    rng = np.random.default_rng(0)
    lengths = {"prompt_tokens": rng.integers(1000, 3000, 60), "output_tokens": rng.integers(20, 60, 60)}
    unpaced, paced = (replay(BASE, BenchRun(file="b.json", format="vllm-bench", concurrency=8, rate_rps=rate,
                                            **lengths), EngineBatching())[0] for rate in (None, 0.5))
    assert paced.max() < unpaced.max()
    assert np.median(paced) == pytest.approx(np.median([BASE.prefill_time_s([p]) for p in lengths["prompt_tokens"]]),
                                             rel=0.25)


def test_runs_vllm_appended_to_one_result_file_are_read_in_the_order_written(tmp_path):
    """`vllm bench serve --append-result` writes a newline, then the next run's object."""
    run = {"request_rate": "inf", "completed": 10, "total_input_tokens": 5000, "total_output_tokens": 300,
           "mean_ttft_ms": 100.0, "mean_tpot_ms": 20.0}
    path = write(tmp_path, "v.json", "\n".join(json.dumps(run | {"max_concurrency": c}) for c in (4, 16, 2)))
    runs = read_bench(path, "vllm-bench")
    assert [r.concurrency for r in runs] == [4, 16, 2]
    assert all(r.format == "vllm-bench" and r.file == str(path) for r in runs)


def test_a_file_appending_more_runs_than_a_calibration_replays_is_refused_at_the_first_one_over(tmp_path):
    from pdplan import limits

    run = json.dumps({"request_rate": "inf", "max_concurrency": 2, "completed": 10, "total_input_tokens": 5000,
                      "total_output_tokens": 300, "mean_ttft_ms": 100.0, "mean_tpot_ms": 20.0})
    path = write(tmp_path, "s.jsonl", "\n".join([run] * (limits.MAX_BENCH_RUNS + 1)))
    with pytest.raises(PdplanError, match=rf"s.jsonl:{limits.MAX_BENCH_RUNS + 1}: holds more than the "
                                          rf"{limits.MAX_BENCH_RUNS} runs a calibration replays"):
        read_bench(path, "sglang-bench")


def test_an_sglang_closed_loop_without_a_concurrency_cap_sends_every_request_at_once(tmp_path):
    [run] = read_bench(write(tmp_path, "s.jsonl", json.dumps({
        "request_rate": float("inf"), "max_concurrency": None, "completed": 8, "total_input_tokens": 8192,
        "total_output_tokens": 128, "mean_ttft_ms": 300.0, "median_ttft_ms": 280.0, "p99_ttft_ms": 500.0,
        "mean_tpot_ms": 12.0, "median_tpot_ms": 11.0, "p99_tpot_ms": 20.0}) + "\n"), "sglang-bench")
    assert (run.concurrency, run.rate_rps, run.format, len(run.prompt_tokens)) == (None, None, "sglang-bench", 8)
    assert run.statistics()["ttft"] == pytest.approx({"mean": 0.3, "p50": 0.28, "p99": 0.5})


def test_every_percentile_a_result_reports_is_compared_and_its_spread_is_not(tmp_path):
    """vLLM writes the percentiles --metric-percentiles asked for (99.9 too) and SGLang 0.5.23 p90, p95 and p99;
    each is a statistic to match, the standard deviation is not."""
    [run] = read_bench(write(tmp_path, "v.json", {
        "request_rate": "inf", "max_concurrency": 8, "completed": 100, "total_input_tokens": 51200,
        "total_output_tokens": 12800, "mean_ttft_ms": 100.0, "std_ttft_ms": 30.0, "p95_ttft_ms": 180.0,
        "p99.9_ttft_ms": 400.0, "p95_tpot_ms": 25.0, "mean_tpot_ms": 20.0}), "vllm-bench")
    assert run.statistics()["ttft"] == pytest.approx({"mean": 0.1, "p95": 0.18, "p99.9": 0.4})
    assert run.statistics()["tpot"] == pytest.approx({"mean": 0.02, "p95": 0.025})


def test_the_replay_computes_the_statistics_the_measurement_states():
    from pdplan.latency.calibration.bench import statistics, statistics_stated

    stated = statistics_stated({"run1_ttft": {"mean": 0.1, "p95": 0.2, "p99.9": 0.4}, "run1_tpot": {"p50": 0.02}})
    assert stated == ("mean", "p50", "p95", "p99.9")
    values = np.arange(1, 1001, dtype=float)
    assert statistics(values, stated)["p95"] == pytest.approx(np.percentile(values, 95))
    assert statistics(values, stated)["p99.9"] == pytest.approx(np.percentile(values, 99.9))


def test_every_request_is_compared_by_the_mean_of_each_band_between_percentiles():
    """1..1000: the band from the 10th to the 25th percentile holds requests 101..250."""
    from pdplan.latency.calibration.bench import statistics

    stats = statistics(np.arange(1, 1001, dtype=float))
    assert stats["b10-25"] == pytest.approx(np.mean(np.arange(101, 251)))
    assert stats["b99-100"] == pytest.approx(np.mean(np.arange(991, 1001)))
    assert stats["mean"] == pytest.approx(500.5)


def test_a_band_mean_moves_by_a_share_of_a_request_that_jumps_where_a_percentile_moves_by_all_of_it():
    """Prefill batching splits TTFT into requests that wait no batch and those that wait one: when the 10th
    percentile sits between the two, one request moving across the gap moves it the whole gap."""
    from pdplan.latency.calibration.bench import statistics

    quick, slow = np.full(101, 0.1), np.full(899, 1.0)
    before = np.concatenate([quick, slow])
    after = np.concatenate([quick[:-1], [1.0], slow])  # one request now waits a batch
    names = ("p10", "b0-10", "b10-25")
    moved = {n: statistics(after, names)[n] / statistics(before, names)[n] - 1 for n in names}
    assert moved["p10"] > 8 and abs(moved["b0-10"]) < 0.01 and abs(moved["b10-25"]) < 0.01


GENAI = {"time_to_first_token": {"unit": "ms", "avg": 45.1, "p50": 44.8, "p90": 48.7, "p99": 52.3, "std": 3.0},
         "inter_token_latency": {"unit": "ms", "avg": 11.2, "p50": 11.1, "p90": 12.0, "p99": 13.4},
         "input_sequence_length": {"unit": "tokens", "avg": 550.0},
         "output_sequence_length": {"unit": "tokens", "avg": 128.0},
         "request_count": {"unit": "count", "avg": 100}}


@pytest.mark.parametrize("config", [{"perf_analyzer": {"stimulus": {"concurrency": 8}}},
                                    {"concurrency": 8, "request_rate": ""}], ids=["2025", "before-march-2025"])
def test_genai_perf_export_parses_in_both_config_layouts(tmp_path, config):
    [run] = read_bench(write(tmp_path, "g.json", {**GENAI, "input_config": config}), "genai-perf")
    assert (run.concurrency, len(run.prompt_tokens), run.prompt_tokens[0], run.output_tokens[0]) == (8, 100, 550, 128)
    assert run.statistics()["tpot"] == pytest.approx({"mean": 0.0112, "p50": 0.0111, "p90": 0.012, "p99": 0.0134})


@pytest.mark.parametrize("doc,load", [
    ({**GENAI, "input_config": {"loadgen": {"concurrency": 4, "request_count": 50}}}, (4, None, 50)),
    ({**GENAI, "input_config": {"endpoint": {}}}, (1, None, 100)),
    ({**GENAI, "input_config": {"phases": [{"name": "warmup", "type": "concurrency", "concurrency": 2},
                                           {"name": "profiling", "type": "poisson", "rate": 5.0, "requests": 80}]}},
     (None, 5.0, 80)),
    ({"records": {k: v for k, v in GENAI.items()}, "input_config": {"loadgen": {"concurrency": 2}}}, (2, None, 1000)),
], ids=["loadgen", "loadgen-unset", "phases", "records-0.1"])
def test_aiperf_export_parses_each_release_layout(tmp_path, doc, load):
    [run] = read_bench(write(tmp_path, "a.json", doc), "aiperf")
    assert (run.concurrency, run.rate_rps, len(run.prompt_tokens)) == load
    assert run.statistics()["ttft"]["p90"] == pytest.approx(0.0487)


SGLANG_RUN = {"request_rate": float("inf"), "max_concurrency": 4, "completed": 3, "total_input_tokens": 3000,
              "total_output_tokens": 300, "mean_ttft_ms": 90.0, "mean_tpot_ms": 12.0}
BAD = [
    ("vllm-bench", "{not json", r"v.json:1: not JSON"),
    ("vllm-bench", {"max_concurrency": 8, "input_lens": [1, 2], "output_lens": [2, 2], "ttfts": [0.1],
                    "itls": [[0.1], [0.1]], "errors": ["", ""]}, r"ttfts must have one entry per request"),
    ("vllm-bench", {"max_concurrency": 8, "input_lens": [1], "output_lens": [2], "ttfts": [-0.1], "itls": [[0.1]]},
     r"ttfts\[0\] must hold finite numbers >= 0"),
    ("vllm-bench", {"max_concurrency": 2.5, "completed": 3, "total_input_tokens": 3, "total_output_tokens": 3,
                    "mean_ttft_ms": 1, "mean_tpot_ms": 1}, r": max_concurrency must be an integer"),
    ("genai-perf", GENAI | {"input_config": {"perf_analyzer": {"stimulus": {"concurrency": 2.5}}}},
     r": input_config.perf_analyzer.stimulus.concurrency must be a whole number of clients, got '2.5'"),
    ("aiperf", GENAI | {"input_config": {"loadgen": {"request_rate": 0}}},
     r": input_config.loadgen.request_rate must be > 0"),
    ("vllm-bench", {"max_concurrency": 8, "completed": 3, "total_input_tokens": 3, "total_output_tokens": 3},
     r"holds no TTFT and TPOT measurements"),
    ("genai-perf",
     {k: v for k, v in GENAI.items() if k != "time_to_first_token"} | {"input_config": {"concurrency": 1}},
     r"time_to_first_token is missing"),
    ("genai-perf", GENAI | {"input_config": {"concurrency": 1},
                            "inter_token_latency": {"unit": "fortnights", "avg": 1}},
     r"inter_token_latency.unit must be one of"),
    ("aiperf", GENAI | {"input_config": {"phases": [{"name": "profiling", "type": "burst"}]}},
     r"input_config.phases\[0\].type must be concurrency or a request rate"),
    ("aiperf", GENAI, r"input_config is missing"),
    ("sglang-bench", json.dumps(SGLANG_RUN) + "\n" + json.dumps(SGLANG_RUN | {"request_rate": "trace"}) + "\n",
     r"v.json:2: request_rate is 'trace': the run followed a trace's timestamps"),
    ("sglang-bench", json.dumps(SGLANG_RUN) + "\n\n{cut short\n", r"v.json:3: not JSON \(JSONDecodeError\); appended "
                                                                      r"runs must be one JSON object per line"),
    ("sglang-bench", json.dumps(SGLANG_RUN) + "\n[1, 2]\n", r"v.json:2: each line must be a JSON object"),
    ("vllm-bench", json.dumps(SGLANG_RUN) + "\n" + json.dumps(SGLANG_RUN | {"max_concurrency": 0}),
     r"v.json:2: max_concurrency must be a finite number >= 1"),
    ("genai-perf", json.dumps(GENAI) + "\n" + json.dumps(GENAI), r"v.json:2: not JSON"),
]


@pytest.mark.parametrize("fmt,doc,message", BAD, ids=["not-json", "length-mismatch", "negative-ttft",
                                                       "fractional-concurrency", "fractional-stimulus",
                                                       "zero-rate", "no-latencies", "no-ttft",
                                                       "unknown-unit", "unknown-phase", "no-config",
                                                       "sglang-trace-rate", "sglang-line-cut-short",
                                                       "sglang-line-not-an-object", "vllm-appended-bad-run",
                                                       "genai-perf-two-objects"])
def test_bad_benchmark_file_exits_2_naming_the_field(run_cli, tmp_path, base_file, fmt, doc, message):
    bench = write(tmp_path, "v.json", doc)
    code, out, err = run_cli("profile", "calibrate", base_file, "--bench", bench, "--format", fmt,
                             "-o", tmp_path / "cal.yaml")
    assert code == 2 and out == ""
    assert err.startswith("Error: ") and err.count("\n") == 1
    assert str(bench) in err and __import__("re").search(message, err), err
    assert not (tmp_path / "cal.yaml").exists()


def test_an_unknown_format_is_refused_with_the_known_ones():
    with pytest.raises(PdplanError, match="--format must be one of vllm-bench, sglang-bench, genai-perf, aiperf"):
        read_bench("x.json", "locust")
