"""`pdplan trace stats|transform|synth`: flags, JSON contracts, files written, the shipped traces."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from pdplan.workload import load_trace, trace_stats

ROOT = Path(__file__).resolve().parent.parent
NATIVE = "arrival_s,prompt_tokens,output_tokens\n"
STATS_KEYS = ["requests", "duration_s", "mean_rate_rps", "peak_rate_rps", "interarrival_cv", "prompt_tokens",
              "output_tokens", "prefix_reuse_fraction", "failed_requests", "format", "source", "has_arrivals",
              "digest", "notes", "arrival_grid_s"]
LENGTH_KEYS = ["mean", "p50", "p90", "p99", "max"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty current folder holding a 4-request native trace and a lengths-only trace."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text(NATIVE + "0,100,10\n1,200,20\n2,300,30\n4,400,40\n")
    (tmp_path / "lengths.csv").write_text("num_prefill_tokens,num_decode_tokens\n100,10\n200,20\n")
    return tmp_path


def run_json(run_cli, *args: str) -> dict:
    code, out, err = run_cli(*args, "--json")
    assert (code, err) == (0, "")
    return json.loads(out)


# --- stats -----------------------------------------------------------------------------------


def test_stats_json_has_the_contract_keys_and_values(run_cli, workdir):
    result = run_json(run_cli, "trace", "stats", "t.csv")
    assert list(result) == STATS_KEYS
    assert list(result["prompt_tokens"]) == LENGTH_KEYS
    assert (result["requests"], result["duration_s"], result["mean_rate_rps"]) == (4, 4.0, 1.0)
    assert result["prompt_tokens"]["max"] == 400
    assert (result["prefix_reuse_fraction"], result["failed_requests"]) == (None, 0)


def test_stats_json_of_a_lengths_only_trace_has_null_rates_and_says_why(run_cli, workdir):
    result = run_json(run_cli, "trace", "stats", "lengths.csv")
    assert (result["has_arrivals"], result["mean_rate_rps"], result["peak_rate_rps"]) == (False, None, None)
    assert "--arrivals poisson|gamma --rate R" in result["notes"][0]


def test_stats_table_for_people_shows_counts_and_notes(run_cli, workdir):
    code, out, err = run_cli("trace", "stats", "lengths.csv")
    assert (code, err) == (0, "")
    assert "requests" in out and "prompt" in out
    assert "note: no arrival times (lengths-only trace)" in out


def test_stats_sort_flag_accepts_arrivals_out_of_order(run_cli, workdir):
    (workdir / "u.csv").write_text(NATIVE + "3,1,1\n1,1,1\n")
    assert run_json(run_cli, "trace", "stats", "u.csv", "--sort")["duration_s"] == 2.0


def test_stats_format_flag_reads_a_native_file_as_lengths(run_cli, workdir):
    assert run_json(run_cli, "trace", "stats", "t.csv", "--format", "lengths")["has_arrivals"] is False


# --- transform -------------------------------------------------------------------------------


def test_transform_rescales_to_the_target_rate_and_writes_native_csv(run_cli, workdir):
    summary = run_json(run_cli, "trace", "transform", "t.csv", "--rate", "2", "-o", "out.csv")
    assert summary["path"] == "out.csv"
    assert summary["stats"]["mean_rate_rps"] == pytest.approx(2.0, rel=1e-12)
    assert load_trace("out.csv").arrival_s.tolist() == [0.0, 0.5, 1.0, 2.0]


def test_transform_titles_the_statistics_with_the_file_it_wrote(run_cli, workdir):
    code, out, err = run_cli("trace", "transform", "t.csv", "--rate", "2", "-o", "faster.csv")
    assert code == 0, err
    assert out.splitlines()[1] == "faster.csv (native)"


def test_transform_window_keeps_requests_from_start_to_start_plus_duration(run_cli, workdir):
    run_json(run_cli, "trace", "transform", "t.csv", "--start", "1", "--duration", "3", "-o", "w.csv")
    assert load_trace("w.csv").prompt_tokens.tolist() == [200, 300]


def test_transform_gives_a_lengths_only_trace_gamma_arrivals_reproducibly(run_cli, workdir):
    args = ("trace", "transform", "lengths.csv", "--arrivals", "gamma", "--cv", "2", "--rate", "5",
            "--requests", "50", "--seed", "9")
    summary = run_json(run_cli, *args, "-o", "a.csv")
    run_json(run_cli, *args, "-o", "b.csv")
    assert (summary["stats"]["requests"], summary["cv"], summary["seed"]) == (50, 2.0, 9)
    assert Path("a.csv").read_bytes() == Path("b.csv").read_bytes()


def test_transform_of_a_lengths_only_trace_without_an_arrival_process_is_an_error(run_cli, workdir):
    code, out, err = run_cli("trace", "transform", "lengths.csv", "--rate", "2", "-o", "out.csv")
    assert code == 2
    assert err == ("Error: lengths.csv: cannot rescale arrivals: the lengths trace has no arrival times "
                   "(lengths only); give it an arrival process with --arrivals poisson|gamma --rate R\n")
    assert not Path("out.csv").exists()


@pytest.mark.parametrize("flags, message", [
    (["--arrivals", "gamma", "--rate", "2"], "--arrivals gamma needs --cv"),
    (["--arrivals", "poisson", "--rate", "2", "--cv", "2"], "--cv applies only to --arrivals gamma"),
    (["--arrivals", "poisson"], "--arrivals poisson needs --rate"),
    (["--arrivals", "uniform", "--rate", "2"], "--arrivals must be one of gamma, poisson, trace, got 'uniform'"),
    (["--rate", "2", "--requests", "5"], "--requests applies only to --arrivals poisson|gamma"),
    (["--rate", "0"], "--rate must be > 0 and <= 1,000,000, got 0.0"),
], ids=["gamma-without-cv", "cv-without-gamma", "poisson-without-rate", "unknown-arrivals",
        "requests-with-trace-arrivals", "zero-rate"])
def test_transform_rejects_flags_that_do_not_fit_together(run_cli, workdir, flags, message):
    code, out, err = run_cli("trace", "transform", "t.csv", *flags, "-o", "out.csv")
    assert (code, out, err) == (2, "", f"Error: {message}\n")


# --- synth -----------------------------------------------------------------------------------

SYNTH = ("trace", "synth", "--requests", "100", "--rate", "5", "--prompt", "lognormal:500:1:4096",
         "--output", "uniform:1:200", "--seed", "4")


def test_synth_writes_the_same_bytes_for_the_same_arguments(run_cli, workdir):
    summary = run_json(run_cli, *SYNTH, "-o", "a.csv")
    run_json(run_cli, *SYNTH, "-o", "b.csv")
    assert Path("a.csv").read_bytes() == Path("b.csv").read_bytes()
    assert (summary["stats"]["requests"], summary["prompt"], summary["seed"]) == (100, "lognormal:500:1:4096", 4)
    assert summary["stats"]["digest"] == trace_stats(load_trace("a.csv")).digest


def test_synth_with_a_bad_length_spec_names_the_flag(run_cli, workdir):
    code, out, err = run_cli("trace", "synth", "--requests", "5", "--rate", "1", "--prompt", "zipf:2",
                             "--output", "const:5", "-o", "x.csv")
    assert (code, out) == (2, "")
    assert err == "Error: --prompt 'zipf:2': unknown length kind 'zipf'; expected one of const, lognormal, uniform\n"


def test_synth_error_line_keeps_colon_numbers_as_typed(run_cli, workdir):
    code, out, err = run_cli("trace", "synth", "--requests", "5", "--rate", "1", "--prompt", "lognormal:100:-1",
                             "--output", "const:5", "-o", "x.csv")
    assert (code, out) == (2, "")
    assert err == "Error: --prompt 'lognormal:100:-1': lognormal needs MEAN >= 1 and SIGMA >= 0, got 100:-1\n"


@pytest.mark.parametrize("spec", ["const:99999999999999999999", "uniform:1:1e300", "lognormal:1e30:1",
                                  "lognormal:100:1:1e20"])
def test_synth_refuses_token_counts_too_large_to_draw(run_cli, workdir, spec):
    code, out, err = run_cli("trace", "synth", "--requests", "5", "--rate", "1", "--prompt", spec,
                             "--output", "const:5", "-o", "x.csv")
    assert (code, out) == (2, "")
    assert err.startswith(f"Error: --prompt '{spec}': token counts must be <= 10,000,000")
    assert err.count("\n") == 1 and not Path("x.csv").exists()


def test_synth_refuses_a_negative_seed(run_cli, workdir):
    code, out, err = run_cli(*SYNTH, "--seed", "-1", "-o", "x.csv")
    assert (code, out, err) == (2, "", "Error: --seed must be >= 0, got -1\n")
    assert not Path("x.csv").exists()


def test_synth_output_path_that_is_a_directory_is_one_error_line(run_cli, workdir):
    Path("outdir").mkdir()
    code, out, err = run_cli(*SYNTH, "-o", "outdir")
    assert (code, out) == (2, "")
    assert err == "Error: outdir: --out names a directory; give a file path\n"


def readme_commands() -> list[list[str]]:
    lines = (ROOT / "traces" / "README.md").read_text().splitlines()
    return [shlex.split(line)[1:] for line in lines if line.startswith("pdplan trace synth ")]


def test_readme_lists_one_command_per_shipped_trace():
    written = sorted(Path(cmd[cmd.index("-o") + 1]).name for cmd in readme_commands())
    assert written == sorted(p.name for p in (ROOT / "traces").glob("*.csv"))


@pytest.mark.parametrize("command", readme_commands(), ids=lambda cmd: Path(cmd[-1]).name)
def test_readme_command_regenerates_the_shipped_trace_byte_for_byte(run_cli, tmp_path, command):
    target = command[command.index("-o") + 1]
    command = [str(tmp_path / "regen.csv") if arg == target else arg for arg in command]
    code, _, err = run_cli(*command)
    assert (code, err) == (0, "")
    assert (tmp_path / "regen.csv").read_bytes() == (ROOT / target).read_bytes()
    assert (ROOT / target).stat().st_size < 100_000


# --- real traces (../shared/data) ------------------------------------------------------------


@pytest.mark.parametrize("name, requests, has_arrivals", [
    ("AzureLLMInferenceTrace_conv.csv", 19_366, True),
    ("AzureLLMInferenceTrace_code.csv", 8_819, True),
    ("mooncake_conversation_trace.jsonl", 12_031, True),
    ("arxiv_summarization_lengths.csv", 28_257, False),
], ids=["azure-conv", "azure-code", "mooncake", "arxiv-lengths"])
def test_real_trace_stats(run_cli, shared_data, name, requests, has_arrivals):
    result = run_json(run_cli, "trace", "stats", str(shared_data / "traces" / name))
    assert (result["requests"], result["has_arrivals"], result["failed_requests"]) == (requests, has_arrivals, 0)


def test_real_mooncake_trace_reuses_some_but_not_all_prefix_blocks(run_cli, shared_data):
    result = run_json(run_cli, "trace", "stats", str(shared_data / "traces" / "mooncake_conversation_trace.jsonl"))
    assert 0 < result["prefix_reuse_fraction"] < 1


def test_real_lengths_trace_replays_with_a_poisson_process(run_cli, shared_data, tmp_path):
    summary = run_json(run_cli, "trace", "transform", str(shared_data / "traces" / "arxiv_summarization_lengths.csv"),
                       "--arrivals", "poisson", "--rate", "2", "--requests", "1000", "-o", str(tmp_path / "a.csv"))
    assert summary["stats"]["requests"] == 1000
    assert summary["stats"]["prompt_tokens"]["max"] <= 4054
