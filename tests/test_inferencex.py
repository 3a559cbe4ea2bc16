"""InferenceX's published runs in the silicon validation: a row is a run only when both its clocks equal the
run's means on its GPU; a disaggregated run states each phase's workers, which the rows that do not say
how many ran take; a run the export holds under several rows is replayed once."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pdplan.latency.compose import tables

pytestmark = pytest.mark.skipif(not tables.installed(), reason="the rows come with pdplan[aic]")

SILICON = "systems/silicon_sample.csv"


@pytest.fixture(scope="module")
def inferencex(benchmark):
    return benchmark("inferencex")


def phase(tp: int, ep: int, dp_attention: bool, gpus: int, workers: int) -> dict:
    return {"tp": tp, "ep": ep, "dp_attention": dp_attention, "gpus": gpus, "workers": workers}


def run(hardware: str, mean_ms: float, tpot_ms: float, prefill: dict | None = None, decode: dict | None = None,
        conc: int = 4, spec: str = "none") -> dict:
    """One run as InferenceX's API fixture holds it: clocks in seconds, each phase's layout under its names."""
    record = {"hardware": hardware, "isl": 1024, "osl": 1024, "conc": conc, "run_url": None, "spec_method": spec,
              "metrics": {"mean_ttft": mean_ms / 1e3, "median_ttft": mean_ms / 2e3, "p99_ttft": 1.0,
                          "mean_tpot": tpot_ms / 1e3}}
    if prefill is not None:
        record["disagg"] = True
        for name, layout in (("prefill", prefill), ("decode", decode)):
            record.update({f"{name}_tp": layout["tp"], f"{name}_ep": layout["ep"],
                           f"{name}_dp_attention": layout["dp_attention"], f"num_{name}_gpu": layout["gpus"],
                           f"{name}_num_workers": layout["workers"]})
    return record


def published(inferencex, path, runs: list[dict]) -> pd.DataFrame:
    path.write_text(json.dumps(runs))
    return inferencex.read_runs([str(path)])


def test_a_row_is_a_published_run_only_when_both_clocks_equal_its_means_on_its_gpu(inferencex, tmp_path):
    """Same GPU, lengths and concurrency, and both mean clocks within 0.01 ms: then the run's median is the
    row's; a mean TTFT alone, or the same clocks on another GPU, is another run."""
    runs = published(inferencex, tmp_path / "runs.json", [
        run("h200", 300.004, 10.0),   # this row's run
        run("h200", 412.0, 12.0),     # same TTFT as the second row, another TPOT
        run("b200", 500.0, 9.0)])     # the third row's clocks, on another GPU
    rows = pd.DataFrame({"id": ["a", "b", "c"], "gpu": ["h200-141gb", "h200-141gb", "h100-80gb"],
                         "isl": 1024, "osl": 1024, "concurrency": 4, "silicon_ttft_ms": [300.0, 412.0, 500.0],
                         "silicon_tpot_ms": [10.0, 11.0, 9.0]})
    matched = inferencex.same_runs(rows, runs)
    assert matched["id"].tolist() == ["a"] and matched["run"].tolist() == [0]
    assert matched["median_ttft_ms"].iloc[0] == pytest.approx(150.002)


def test_an_attention_dp_phase_runs_each_stated_workers_gpus_as_its_ranks(inferencex):
    """16 GPUs in 2 workers with attention DP and EP 8: each worker TP 1 × DP 8, EP 8 (a DEP8 worker)."""
    layout = inferencex.run_layout(pd.Series({f"prefill_{k}": v for k, v in phase(8, 8, True, 16, 2).items()}),
                                   "prefill")
    assert layout == {"tp": 1, "dp": 8, "ep": 8, "workers": 2}


def test_a_phase_without_attention_dp_is_one_worker_per_tp_group_when_no_count_is_stated(inferencex):
    """72 decode GPUs at TP 8 and no worker count: 9 workers of TP 8."""
    layout = inferencex.run_layout(pd.Series({f"decode_{k}": v for k, v in phase(8, 1, False, 72, 0).items()}),
                                   "decode")
    assert layout == {"tp": 8, "dp": 1, "ep": 1, "workers": 9}


def test_an_attention_dp_phase_without_a_worker_count_has_no_layout(inferencex):
    """20 GPUs with attention DP and no count could be one DP20 worker or five DP4 ones."""
    unstated = pd.Series({f"decode_{k}": v for k, v in phase(1, 1, True, 20, 0).items()})
    assert inferencex.run_layout(unstated, "decode") is None


def test_a_row_without_workers_takes_its_runs_layout_unless_the_run_predicted_several_tokens(inferencex, tmp_path):
    runs = published(inferencex, tmp_path / "runs.json", [
        run("h200", 400.0, 10.0, phase(8, 1, False, 8, 1), phase(8, 8, True, 16, 2)),
        run("h200", 500.0, 11.0, phase(8, 1, False, 8, 1), phase(8, 8, True, 16, 2), spec="mtp")])
    rows = pd.DataFrame({"id": ["a", "b"], "mode": "disagg", "gpu": "h200-141gb", "isl": 1024, "osl": 1024,
                         "concurrency": 4, "silicon_ttft_ms": [400.0, 500.0], "silicon_tpot_ms": [10.0, 11.0],
                         **{f"{p}_{c}": float("nan") for p in ("prefill", "decode")
                            for c in ("tp_size", "attention_dp_size", "moe_ep_size", "moe_tp_size", "num_workers")}})
    laid = inferencex.with_published_layouts(rows, runs).set_index("id")
    assert laid.loc["a", ["prefill_tp_size", "prefill_num_workers"]].tolist() == [8, 1]
    assert laid.loc["a", ["decode_tp_size", "decode_attention_dp_size", "decode_moe_ep_size", "decode_moe_tp_size",
                          "decode_num_workers"]].tolist() == [1, 8, 8, 1, 2]
    assert pd.isna(laid.loc["b", "decode_num_workers"]) and laid.loc["b", "published_mtp"]


def test_a_run_the_export_holds_under_three_rows_is_replayed_once_through_the_row_naming_its_workers(
        inferencex, benchmark, tmp_path, capsys):
    """DeepSeek-R1 FP8 on GB200 under TensorRT-LLM, 256 clients: the database dump's row names its workers
    (one DEP8 prefill, one DEP32 decode); the two InferenceMAX exports hold the same run without them."""
    named = "dsr1_gb200_trtllm_fp8_disagg_1024x1024_c256_cfg375"
    twins = ["2026_03_25_deepseek_r1_gb200_trtllm_fp8_disagg_1024x1024_c256_tp8_0_ep8_0_1070",
             "2026_04_06_deepseek_r1_gb200_trtllm_fp8_disagg_1024x1024_c256_tp8_ep8_1667"]
    path = tables.package_root() / SILICON
    row = pd.read_csv(path).set_index("id").loc[named]
    runs = published(inferencex, tmp_path / "runs.json", [
        run("gb200", row["silicon_ttft_ms"], row["silicon_tpot_ms"], phase(8, 8, True, 8, 1),
            phase(32, 32, True, 32, 1), conc=256)])
    ids = set(benchmark("silicon_rows").supported_rows(path, runs)["id"])
    assert named in ids and not ids & set(twins)
    assert "2 mixture-of-experts rows are disaggregated runs InferenceX published that another row already " \
           "replays" in capsys.readouterr().out


def test_the_layout_check_counts_the_phases_whose_export_states_what_the_run_does(inferencex, tmp_path):
    """Both rows name their workers: the first as its run states them (a DEP8 prefill, nine TP8 decoders), the
    second with its prefill as one TP8 group where the run ran DEP8: three phases of four agree."""
    runs = published(inferencex, tmp_path / "runs.json", [
        run("h200", 400.0, 10.0, phase(8, 8, True, 8, 1), phase(8, 1, False, 72, 0)),
        run("h200", 500.0, 11.0, phase(8, 8, True, 8, 1), phase(8, 1, False, 72, 0))])
    rows = pd.DataFrame({"id": ["a", "b"], "mode": "disagg", "gpu": "h200-141gb", "isl": 1024, "osl": 1024,
                         "concurrency": 4, "silicon_ttft_ms": [400.0, 500.0], "silicon_tpot_ms": [10.0, 11.0],
                         "prefill_tp_size": [1, 8], "prefill_attention_dp_size": [8, 1], "prefill_moe_ep_size": 8,
                         "prefill_moe_tp_size": 1, "prefill_num_workers": 1, "decode_tp_size": 8,
                         "decode_attention_dp_size": float("nan"), "decode_moe_ep_size": 1, "decode_moe_tp_size": 8,
                         "decode_num_workers": 9})
    assert inferencex.stated_layouts_agree(inferencex.with_published_layouts(rows, runs), runs) == (3, 4)


def test_a_runs_file_missing_a_field_is_refused_in_one_line_naming_the_file_run_and_field(benchmark, tmp_path,
                                                                                        capsys):
    bad = run("h200", 400.0, 10.0)
    del bad["conc"]
    path = tmp_path / "runs.json"
    path.write_text(json.dumps([run("h200", 300.0, 9.0), bad]))
    with pytest.raises(SystemExit) as exit_:
        benchmark("silicon_validation").main(["--mode", "disagg", "--inferencex", str(path)])
    assert exit_.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith(f"{path}: run 1: no field 'conc'")
