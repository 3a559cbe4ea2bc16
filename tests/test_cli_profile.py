"""`pdplan profile fit` and `pdplan profile show`: exit codes, stderr lines and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdplan.latency.profile import shipped_profiles_dir

ROOT = Path(__file__).resolve().parent.parent

SHOW_KEYS = ["model", "gpu", "tp", "pp", "dp", "ep", "prefill_ms_512", "prefill_ms_2048", "decode_ms_b1",
             "decode_ms_b32", "kv_capacity_tokens", "max_prefill_batch_tokens", "source", "method",
             "points_prefill", "points_decode", "mape_prefill", "max_error_prefill", "mape_decode",
             "max_error_decode", "outliers", "file", "sha256", "profile", "all_to_all", "redundant_experts", "shape"]
POINTS_HEADER = "phase,tp,pp,batch_size,prompt_tokens,context_tokens,latency_ms\n"


def points_csv(tmp_path, tps=(4,), prompts=(256, 1024, 4096), extra=""):
    rows = [f"prefill,{tp},1,{b},{l},,{20 + 0.08 * b * l + 4e-6 * b * l * l:.6f}"
            for tp in tps for b in (1, 2, 4) for l in prompts]
    rows += [f"decode,{tp},1,{b},,{c},{30 + 0.2 * b + 1e-4 * b * c:.6f}"
             for tp in tps for b in (1, 8, 32) for c in (512, 2048)]
    path = tmp_path / "points.csv"
    path.write_text(POINTS_HEADER + "\n".join(rows) + "\n" + extra, encoding="utf-8")
    return path


def test_show_json_lists_every_shipped_profile_with_its_mape(run_cli):
    code, out, err = run_cli("profile", "show", "--json")
    assert (code, err) == (0, "")
    rows = json.loads(out)
    assert sorted(Path(r["profile"]).name for r in rows) == sorted(
        p.name for p in shipped_profiles_dir().glob("*.yaml"))
    assert all(list(r) == SHOW_KEYS for r in rows)
    fitted = [r for r in rows if r["method"].startswith("nnls-relative")]
    assert {(r["model"], r["gpu"], r["tp"]) for r in fitted} == {
        ("llama2-70b", g, t) for g in ("a100-80gb", "h100-80gb", "h100-80gb-pcap") for t in (2, 4, 8)}
    assert all(0 < r["mape_prefill"] <= 0.10 and 0 < r["mape_decode"] <= 0.10 for r in fitted)
    assert all(r["file"] == "../shared/data/profiles/splitwise_perf_model.csv" for r in fitted)
    imported = [r for r in rows if r not in fitted]
    assert {(r["model"], r["tp"]) for r in imported} == {
        ("opt-13b", 1), ("opt-13b", 2), ("opt-13b", 4),
        ("opt-66b", 2), ("opt-66b", 3), ("opt-66b", 4), ("opt-66b", 8)}
    assert all(r["mape_prefill"] is None and r["method"] == "distserve-coefficients" for r in imported)


def test_show_table_names_every_shape(run_cli):
    code, out, _ = run_cli("profile", "show")
    assert code == 0
    assert "llama2-70b h100-80gb-pcap TP8 PP1" in out and "opt-66b a100-80gb TP3 PP1" in out


def test_fit_writes_one_profile_that_show_reads_back(run_cli, tmp_path):
    target = tmp_path / "out" / "llama.yaml"
    code, out, err = run_cli("profile", "fit", points_csv(tmp_path), "--format", "points",
                             "--model", "llama2-70b", "--gpu", "a100-80gb", "-o", target, "--json")
    assert (code, err) == (0, "")
    (written,) = json.loads(out)
    assert written["profile"] == target.as_posix()
    assert written["prefill_ms_512"] == pytest.approx(20 + 0.08 * 512 + 4e-6 * 512**2, abs=1e-3)
    assert written["decode_ms_b32"] == pytest.approx(30 + 0.2 * 32 + 1e-4 * 32 * 1024, abs=1e-3)
    code, out, _ = run_cli("profile", "show", target, "--json")
    assert json.loads(out) == [written]
    assert "- [" in target.read_text()          # coefficient triples on one line


def test_fit_of_several_shapes_into_one_file_is_refused(run_cli, tmp_path):
    target = tmp_path / "one.yaml"
    src = points_csv(tmp_path, tps=(4, 8))
    code, out, err = run_cli("profile", "fit", src, "--format", "points", "--model", "llama2-70b",
                             "--gpu", "a100-80gb", "-o", target)
    assert (code, out) == (2, "")
    assert err == (f"Error: {src}: 2 shapes selected (llama2-70b a100-80gb TP4 PP1, llama2-70b "
                   "a100-80gb TP8 PP1) but -o names one file; select one with --model/--gpu/--tp/--pp, "
                   "or give a folder as -o\n")
    assert not target.exists()


def test_fit_into_a_folder_names_each_file_by_its_shape(run_cli, tmp_path):
    code, _, _ = run_cli("profile", "fit", points_csv(tmp_path, tps=(4, 8)), "--format", "points",
                         "--model", "llama2-70b", "--gpu", "h100-80gb", "-o", tmp_path / "profiles")
    assert code == 0
    assert sorted(p.name for p in (tmp_path / "profiles").iterdir()) == [
        "llama2-70b_h100-80gb_tp4_pp1.yaml", "llama2-70b_h100-80gb_tp8_pp1.yaml"]


def test_fit_distserve_reads_max_num_tokens_next_to_the_json(run_cli, tmp_path):
    (tmp_path / "profiler.json").write_text(json.dumps({"facebook/opt-13b": {"2": {
        "decoding_large_small_bs_threshold": 95, "prefill": [14.7, 0.07, 2e-06],
        "decoding_smallbs": [13.3, 0.0003, 0.06], "decoding_largebs": [10.6, 0.0003, 0.09]}}}))
    (tmp_path / "max_num_tokens.csv").write_text("model,tp,pp,max_num_tokens\nfacebook/opt-13b,2,1,163008\n")
    code, out, err = run_cli("profile", "fit", tmp_path / "profiler.json", "--format", "distserve",
                             "--gpu", "a100-80gb", "-o", tmp_path / "out", "--json")
    assert (code, err) == (0, "")
    (row,) = json.loads(out)
    assert (row["model"], row["tp"], row["kv_capacity_tokens"]) == ("opt-13b", 2, 163008)
    assert (tmp_path / "out" / "opt-13b_a100-80gb_tp2_pp1.yaml").is_file()


SPLITWISE_HEADER = ("model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,"
                    "prompt_time,token_time,e2e_time,tensor_parallel\n")


def bad_input(kind, tmp_path):
    """(arguments, expected start of the Error line after the path, path) for each bad input."""
    if kind == "too-few-points":
        src = points_csv(tmp_path, prompts=(1024,))
        return (["profile", "fit", src, "--format", "points", "--model", "llama2-70b", "--gpu",
                 "a100-80gb", "-o", tmp_path / "p.yaml"], src,
                ": llama2-70b a100-80gb TP4 PP1: prefill points cannot determine a fit: 3 distinct "
                "grid points, need at least 4")
    if kind == "python-tag":
        src = tmp_path / "evil.yaml"
        src.write_text("pdplan_profile: 1\nmodel: !!python/object/apply:os.system ['true']\n")
        return (["profile", "show", src], src,
                ":2: invalid YAML: could not determine a constructor for the tag "
                "'tag:yaml.org,2002:python/object/apply:os.system'")
    if kind == "truncated-csv":
        src = tmp_path / "perf_model.csv"
        src.write_text(SPLITWISE_HEADER + "llama2-70b,a100-80gb,512,1,128,0,0,200,50,6550,4\n"
                       "llama2-70b,a100-80gb,512,2,12")
        return (["profile", "fit", src, "--format", "splitwise", "-o", tmp_path / "out"], src,
                ":3: row has 5 fields, the header has 11 (truncated or misquoted row?)")
    src = points_csv(tmp_path, extra="decode,4,1,8,,512,slow\n")
    return (["profile", "fit", src, "--format", "points", "--model", "llama2-70b", "--gpu",
             "a100-80gb", "-o", tmp_path / "p.yaml"], src,
            ":17: latency_ms must be a finite number > 0, got 'slow'")


@pytest.mark.parametrize("kind", ["too-few-points", "python-tag", "truncated-csv", "text-in-number"])
def test_bad_input_exits_2_with_one_error_line_naming_file_and_place(run_cli, tmp_path, kind):
    args, src, expected = bad_input(kind, tmp_path)
    code, out, err = run_cli(*args)
    assert (code, out) == (2, "")
    assert err.startswith(f"Error: {src}{expected}")
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("args,field", [(("--dp", "8", "--pp", "2"), "dp"), (("--dp", "0"), "dp"),
                                        (("--dp", "2", "--ep", "0"), "ep")])
def test_compose_refuses_parallel_coordinates_it_cannot_time(run_cli, args, field):
    code, out, err = run_cli("profile", "compose", "--model", "deepseek-v3", "--gpu", "h200-141gb", "--tp", "1",
                             *args)
    assert (code, out) == (2, "")
    assert err.startswith("Error: ") and f"--{field}" in err and err.count("\n") == 1


@pytest.mark.parametrize("args", [("--model", "gpt-oss-120b", "--gpu", "h100-80gb", "--moe-activations", "mxfp8"),
                                  ("--model", "qwen3-32b", "--gpu", "b200-180gb", "--moe-activations", "mxfp8"),
                                  ("--model", "gpt-oss-120b", "--gpu", "b200-180gb", "--moe-activations", "fp8")])
def test_compose_refuses_an_activation_precision_the_experts_cannot_take(run_cli, args):
    pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")
    code, out, err = run_cli("profile", "compose", "--engine", "vllm", *args)
    assert (code, out) == (2, "")
    assert err.startswith("Error: ") and "--moe-activations" in err and err.count("\n") == 1


def test_compose_names_the_table_that_measured_vllms_mxfp8_experts(run_cli):
    pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")
    code, out, err = run_cli("profile", "compose", "--model", "gpt-oss-120b", "--gpu", "b200-180gb", "--engine",
                             "vllm", "--moe-activations", "mxfp8", "--json")
    assert (code, err) == (0, "")
    assert "moe 0.5.14 (sglang's table, the same kernel)" in out and "w4a8_mxfp4_mxfp8" in out


@pytest.mark.slow
def test_shipped_llama_profiles_are_what_the_documented_command_makes(run_cli, tmp_path, shared_data,
                                                                    monkeypatch):
    """pdplan/data/profiles/README.md's command, rerun from the project root, writes the shipped
    files byte for byte (coefficients are written to 6 significant digits, far above the digits
    another machine's BLAS changes)."""
    monkeypatch.chdir(ROOT)  # provenance records the source path as given, relative to the root
    code, _, err = run_cli("profile", "fit", "../shared/data/profiles/splitwise_perf_model.csv",
                           "--format", "splitwise", "--model", "llama2-70b", "-o", tmp_path)
    assert (code, err) == (0, "")
    made = sorted(tmp_path.glob("*.yaml"))
    assert len(made) == 9
    for path in made:
        assert path.read_bytes() == (shipped_profiles_dir() / path.name).read_bytes(), path.name
