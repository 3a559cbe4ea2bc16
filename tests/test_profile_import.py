"""Importers: each source format read into measured points or profiles, and every bad row named."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.fit import DECODE, PREFILL
from pdplan.latency.importers import profiles_from_source, read_distserve, read_dynamo, read_points_csv, read_splitwise
from pdplan.latency.profile import load_profile, profile_file_name, profile_to_dict, shipped_profiles_dir
from pdplan.modelref import get_model
from pdplan.modelspec import kv_capacity_tokens

SPLITWISE_HEADER = ("model,hardware,prompt_size,batch_size,token_size,peak_power,average_power,"
                    "prompt_time,token_time,e2e_time,tensor_parallel\n")


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def by_phase(shape, phase):
    return [p for p in shape.points if p.phase == phase]


# --- Splitwise -----------------------------------------------------------------------------------

@pytest.fixture
def splitwise_csv(tmp_path):
    return write(tmp_path / "perf_model.csv", SPLITWISE_HEADER + (
        "llama2-70b,a100-80gb,512,2,128,0,0,400.0,50.0,6750.0,4\n"      # 127 steps: the full run
        "llama2-70b,a100-80gb,512,1,1024,0,0,200.0,40.0,12200.0,4\n"    # 300 steps: stopped early
        "llama2-70b,a100-80gb,512,64,128,0,0,80.0,60.0,90000.0,4\n"     # 1499 steps: preempted
        "llama2-70b,h100-80gb,256,1,128,0,0,30.0,20.0,2570.0,8\n"))


def test_splitwise_rows_group_into_one_shape_per_model_hardware_and_tp(splitwise_csv):
    shapes = read_splitwise(splitwise_csv, label="data/perf_model.csv")
    assert [s.key for s in shapes] == [("llama2-70b", "a100-80gb", 4, 1), ("llama2-70b", "h100-80gb", 8, 1)]
    assert shapes[0].source == "data/perf_model.csv" and len(shapes[0].sha256) == 64


def test_splitwise_prompt_time_is_one_prefill_batch_of_equal_prompts(splitwise_csv):
    (first,) = [p for p in by_phase(read_splitwise(splitwise_csv)[0], PREFILL) if p.origin == "line 2"]
    assert (first.batch_size, first.features, first.latency_s) == (2, (1.0, 1024.0, 524288.0), 0.4)


def test_splitwise_token_time_is_a_step_at_the_mean_context_of_its_decode_steps(splitwise_csv):
    """n = (e2e − prompt)/token steps; Σctx = B·(prompt + (n+1)/2), n at most token_size − 1."""
    decode = {p.origin: p for p in by_phase(read_splitwise(splitwise_csv)[0], DECODE)}
    full, early = decode["line 2"], decode["line 3"]
    assert (full.features, full.latency_s) == ((1.0, 2.0, 2 * (512 + 128 / 2)), 0.05)
    assert early.features == (1.0, 1.0, 512 + 301 / 2)
    assert not full.rejected and not early.rejected


def test_splitwise_run_with_far_more_decode_time_than_its_tokens_is_rejected(splitwise_csv):
    preempted = [p for p in read_splitwise(splitwise_csv)[0].points if p.origin == "line 4"]
    prefill, decode = sorted(preempted, key=lambda p: p.phase, reverse=True)
    assert prefill.phase == PREFILL and not prefill.rejected
    assert decode.rejected.startswith("e2e_time implies more than 1.5x the 127 decode steps")


@pytest.mark.parametrize("row, message", [
    ("llama2-70b,a100-80gb,512,1,128,0,0,fast,50,6500,4",
     r"perf_model\.csv:3: prompt_time must be a finite number > 0, got 'fast'$"),
    ("llama2-70b,a100-80gb,512,0,128,0,0,200,50,6500,4",
     r"perf_model\.csv:3: batch_size must be an integer >= 1, got '0'$"),
    ("llama2-70b,a100-80gb,512,1,128,0,0,200",
     r"perf_model\.csv:3: row has 8 fields, the header has 11 \(truncated or misquoted row\?\)$"),
    ("llama2-70b,a100-80gb,512,1,128,0,0,200,50,100,4",
     r"perf_model\.csv:3: e2e_time must be at least prompt_time \+ token_time \(250 ms: one decode "
     r"step\), got '100'$"),
    ("llama2-70b,a100-80gb,512,1,128,0,0,200,nan,6500,4",
     r"perf_model\.csv:3: token_time must be a finite number > 0, got 'nan'$"),
], ids=["text-in-number", "zero-batch", "truncated", "e2e-too-short", "nan"])
def test_splitwise_malformed_row_names_file_line_and_field(tmp_path, row, message):
    path = write(tmp_path / "perf_model.csv",
                 SPLITWISE_HEADER + "llama2-70b,a100-80gb,512,1,128,0,0,200,50,6550,4\n" + row + "\n")
    with pytest.raises(PdplanError, match=message):
        read_splitwise(path)


def test_splitwise_header_without_a_needed_column_is_refused(tmp_path):
    path = write(tmp_path / "perf_model.csv", SPLITWISE_HEADER.replace(",e2e_time", "") + "x\n")
    with pytest.raises(PdplanError, match=r"perf_model\.csv:1: header lacks column\(s\) e2e_time"):
        read_splitwise(path)


# --- pdplan points CSV ---------------------------------------------------------------------------

POINTS_HEADER = "phase,tp,pp,batch_size,prompt_tokens,context_tokens,latency_ms\n"


def points_csv(tmp_path, tp=4, extra=""):
    rows = [f"prefill,{tp},1,{b},{l},,{20 + 0.08 * b * l + 4e-6 * b * l * l:.6f}"
            for b in (1, 2, 4) for l in (256, 1024, 4096)]
    rows += [f"decode,{tp},1,{b},,{c},{30 + 0.2 * b + 1e-4 * b * c:.6f}"
             for b in (1, 8, 32) for c in (512, 2048)]
    return write(tmp_path / "points.csv", POINTS_HEADER + "\n".join(rows) + "\n" + extra)


def test_points_csv_lengths_are_per_request(tmp_path):
    """A decode row's context_tokens is each request's: Σctx = batch_size · context_tokens."""
    (shape,) = read_points_csv(points_csv(tmp_path), model="llama2-70b", gpu="a100-80gb")
    assert shape.key == ("llama2-70b", "a100-80gb", 4, 1)
    decode = by_phase(shape, DECODE)
    assert decode[2].features == (1.0, 8.0, 8 * 512.0)
    assert by_phase(shape, PREFILL)[4].features == (1.0, 2048.0, 2 * 1024.0**2)


def test_points_csv_one_shape_per_tp_and_pp(tmp_path):
    path = points_csv(tmp_path, extra="prefill,8,1,1,512,,40\n")
    assert [s.tp for s in read_points_csv(path, model="m", gpu="g")] == [4, 8]


@pytest.mark.parametrize("row, message", [
    ("prefil,4,1,1,512,,40", r"points\.csv:17: phase must be one of decode, prefill, got 'prefil'$"),
    ("prefill,4,1,1,512,100,40", r"points\.csv:17: context_tokens must be empty or 0 in a prefill "
                                 r"row, got '100'$"),
    ("decode,4,1,1,,512,abc", r"points\.csv:17: latency_ms must be a finite number > 0, got 'abc'$"),
    ("decode,4,1,1,,2.5,30", r"points\.csv:17: context_tokens must be an integer >= 1, got '2\.5'$"),
    ("decode,4,1,1", r"points\.csv:17: row has 4 fields, the header has 7"),
], ids=["phase", "unused-column", "text-latency", "fractional-tokens", "truncated"])
def test_points_csv_malformed_row_names_file_line_and_field(tmp_path, row, message):
    with pytest.raises(PdplanError, match=message):
        read_points_csv(points_csv(tmp_path, extra=row + "\n"), model="m", gpu="g")


def test_points_csv_rejects_an_unknown_column(tmp_path):
    path = write(tmp_path / "points.csv", POINTS_HEADER.strip() + ",gpu\n")
    with pytest.raises(PdplanError, match=r"points\.csv:1: header has unknown column\(s\) gpu"):
        read_points_csv(path, model="m", gpu="g")


def test_points_profiles_take_kv_capacity_from_geometry_and_skip_shapes_that_do_not_fit(tmp_path):
    """KV capacity = modelspec.kv_capacity_tokens(model, gpu, tp, pp, 0.9); TP1 llama2-70b does not fit."""
    path = points_csv(tmp_path, extra="".join(
        line.replace(",4,1,", ",1,1,", 1) + "\n" for line in points_csv(tmp_path).read_text().splitlines()[1:]))
    result = profiles_from_source(path, "points", model="llama2-70b", gpu="a100-80gb")
    (profile,) = result.profiles
    assert profile.kv_capacity_tokens == kv_capacity_tokens(get_model("llama2-70b"),
                                                            get_gpu("a100-80gb"), 4, 1, 0.9)
    assert profile.max_prefill_batch_tokens == 4 * 4096     # the largest measured batch
    assert result.skipped == ("llama2-70b a100-80gb TP1 PP1: does not fit (a100-80gb TP1 PP1: "
                              "weights 128.5 GiB per GPU > 72.0 GiB usable (90% of 80 GiB))",)


def test_points_format_needs_the_model_and_gpu(tmp_path):
    with pytest.raises(PdplanError, match=r"--model is required with --format points"):
        profiles_from_source(points_csv(tmp_path), "points", gpu="a100-80gb")


# --- Dynamo --------------------------------------------------------------------------------------

def dynamo_arrays(**override):
    isl = np.array([256, 512, 1024, 2048, 4096, 8192])
    arrays = dict(
        prefill_isl=isl, prefill_ttft=20 + 0.05 * isl + 2e-6 * isl**2.0,
        prefill_thpt_per_gpu=np.full(len(isl), 1000.0),
        max_kv_tokens=np.array([100000]),
        x_kv_usage=np.array([0.01, 0.05, 0.2, 0.02, 0.1, 0.4, 0.8]),
        y_context_length=np.array([1000, 1000, 1000, 4000, 4000, 4000, 4000.0]),
        z_itl=np.array([10.0, 11, 14, 10.5, 12, 18, 25]),
        z_thpt_per_gpu=np.ones(7),
    )
    arrays.update(override)
    return arrays


def test_dynamo_batch_size_comes_from_kv_usage_and_context(tmp_path):
    """B = x_kv_usage·max_kv_tokens / y_context_length; Σctx = B·y; capacity = max_kv_tokens."""
    np.savez(tmp_path / "raw_data.npz", **dynamo_arrays())
    shape = read_dynamo(tmp_path / "raw_data.npz", model="m", gpu="g", tp=2)
    decode = by_phase(shape, DECODE)
    assert [(p.batch_size, p.features[2], p.latency_s) for p in decode[:3]] == [
        (1, 1000.0, 0.010), (5, 5000.0, 0.011), (20, 20000.0, 0.014)]
    prefill = by_phase(shape, PREFILL)
    assert (prefill[1].batch_size, prefill[1].features[1], prefill[1].origin) == (1, 512.0, "prefill_isl[1]")
    assert shape.kv_capacity_tokens == 100000 and shape.key == ("m", "g", 2, 1)


def test_dynamo_results_folder_reads_both_interpolation_files(tmp_path):
    arrays = dynamo_arrays()
    for sub, names in (("selected_prefill_interpolation", ("prefill_isl", "prefill_ttft")),
                       ("selected_decode_interpolation", ("max_kv_tokens", "x_kv_usage",
                                                          "y_context_length", "z_itl"))):
        (tmp_path / sub).mkdir()
        np.savez(tmp_path / sub / "raw_data.npz", **{n: arrays[n] for n in names})
    shape = read_dynamo(tmp_path, model="m", gpu="g", tp=1)
    assert len(by_phase(shape, PREFILL)) == 6 and len(by_phase(shape, DECODE)) == 7
    assert "decode arrays from" in shape.notes


@pytest.mark.parametrize("override, message", [
    (dict(z_itl=np.array([10.0, 11, np.nan, 10.5, 12, 18, 25])), r"z_itl\[2\] must be a finite number > 0, got nan"),
    (dict(x_kv_usage=np.array([0.01, 0.05, 1.5, 0.02, 0.1, 0.4, 0.8])),
     r"x_kv_usage\[2\] must be a fraction in \(0, 1\]"),
    (dict(x_kv_usage=np.array([0.001, 0.05, 0.2, 0.02, 0.1, 0.4, 0.8])),
     r"x_kv_usage\[0\] = 0\.001 of 100000 KV tokens at context 1000 holds 0\.10 requests"),
    (dict(prefill_ttft=np.array([1.0, 2.0])), r"prefill_ttft has 2 values, prefill_isl 6"),
], ids=["nan", "usage-over-one", "less-than-a-request", "length-mismatch"])
def test_dynamo_bad_array_names_file_and_element(tmp_path, override, message):
    np.savez(tmp_path / "raw_data.npz", **dynamo_arrays(**override))
    with pytest.raises(PdplanError, match=r"raw_data\.npz: " + message):
        read_dynamo(tmp_path / "raw_data.npz", model="m", gpu="g", tp=1)


def test_dynamo_missing_array_lists_those_present(tmp_path):
    arrays = dynamo_arrays()
    del arrays["z_itl"]
    np.savez(tmp_path / "raw_data.npz", **arrays)
    with pytest.raises(PdplanError, match=r"array z_itl is missing \(arrays present: max_kv_tokens, "):
        read_dynamo(tmp_path / "raw_data.npz", model="m", gpu="g", tp=1)


def test_dynamo_file_that_is_not_an_npz_is_an_input_error(tmp_path):
    write(tmp_path / "raw_data.npz", "not a zip")
    with pytest.raises(PdplanError, match=r"raw_data\.npz: not a readable \.npz archive"):
        read_dynamo(tmp_path / "raw_data.npz", model="m", gpu="g", tp=1)


# --- DistServe -----------------------------------------------------------------------------------

DISTSERVE = {"facebook/opt-13b": {
    "1": {"decoding_large_small_bs_threshold": 95, "prefill": [18.1, 0.1, 7e-06],
          "decoding_smallbs": [19.9, 0.0006, 0.04], "decoding_largebs": [7.2, 0.0005, 0.16]},
    "2": {"decoding_large_small_bs_threshold": 95, "prefill": [14.7, 0.07, 2e-06],
          "decoding_smallbs": [13.3, 0.0003, 0.06], "decoding_largebs": [10.6, 0.0003, 0.09]},
}}


def distserve_files(tmp_path, data=DISTSERVE):
    write(tmp_path / "max_num_tokens.csv", "model,tp,pp,max_num_tokens\nfacebook/opt-13b,1,1,66144\n")
    return write(tmp_path / "profiler.json", json.dumps(data, indent=2)), tmp_path / "max_num_tokens.csv"


def test_distserve_prefill_reproduces_the_json_formula(tmp_path):
    """a + b·Σl + c·Σl²: one 2048-token prompt, then two of 1024 (same Σl, half the Σl²)."""
    result = read_distserve(*distserve_files(tmp_path), gpu="a100-80gb")
    profile = result.profiles[0]
    assert profile.prefill_time_s([2048]) * 1e3 == pytest.approx(18.1 + 204.8 + 29.360128)
    assert profile.prefill_time_s([1024, 1024]) * 1e3 == pytest.approx(18.1 + 204.8 + 14.680064)


@pytest.mark.parametrize("batch, context, expected_ms", [
    (8, 8000, 19.9 + 0.0006 * (8000 + 8) + 0.04 * 8),        # small-batch piece
    (94, 94000, 19.9 + 0.0006 * (94000 + 94) + 0.04 * 94),    # last batch below the threshold
    (100, 100000, 7.2 + 0.0005 * (100000 + 100) + 0.16 * 100),  # large-batch piece
], ids=["small", "below-threshold", "large"])
def test_distserve_decode_reproduces_the_json_formula(tmp_path, batch, context, expected_ms):
    """a + b·Σ(ctx+1) + c·B, with DistServe's coefficient order (1, Σctx, B) mapped to ours."""
    profile = read_distserve(*distserve_files(tmp_path), gpu="a100-80gb").profiles[0]
    assert profile.decode_step_s(batch, context) * 1e3 == pytest.approx(expected_ms, rel=1e-12)


def test_distserve_shape_without_a_max_num_tokens_row_does_not_fit(tmp_path):
    result = read_distserve(*distserve_files(tmp_path), gpu="a100-80gb", max_num_tokens_label="mnt.csv")
    assert [p.shape for p in result.profiles] == ["opt-13b a100-80gb TP1 PP1"]
    assert result.profiles[0].kv_capacity_tokens == 66144
    assert result.profiles[0].max_prefill_batch_tokens == 16384
    assert result.skipped == ("opt-13b a100-80gb TP2 PP1: no row (facebook/opt-13b, 2, 1) in "
                              "mnt.csv, so it does not fit in memory",)


def test_distserve_bad_coefficients_name_line_and_field(tmp_path):
    data = json.loads(json.dumps(DISTSERVE))
    data["facebook/opt-13b"]["2"]["decoding_smallbs"] = [13.3, "x", 0.06]
    path, table = distserve_files(tmp_path, data)
    with pytest.raises(PdplanError, match=r"profiler\.json:28: facebook/opt-13b\.2\.decoding_smallbs "
                                          r"must be a list of 3 finite numbers \[a, b, c\]"):
        read_distserve(path, table, gpu="a100-80gb")


def test_distserve_invalid_json_names_the_line(tmp_path):
    path = write(tmp_path / "profiler.json", '{\n  "facebook/opt-13b": {\n    "1": [1, 2,\n}')
    write(tmp_path / "max_num_tokens.csv", "model,tp,pp,max_num_tokens\n")
    with pytest.raises(PdplanError, match=r"profiler\.json:4: invalid JSON"):
        read_distserve(path, tmp_path / "max_num_tokens.csv", gpu="a100-80gb")


# --- real data -----------------------------------------------------------------------------------

def test_real_splitwise_file_holds_twelve_shapes_and_rejects_only_the_tp2_batch64_decode_runs(shared_data):
    shapes = read_splitwise(shared_data / "profiles" / "splitwise_perf_model.csv")
    assert len(shapes) == 12
    rejected = {(s.gpu, s.tp, p.batch_size) for s in shapes for p in s.points if p.rejected}
    assert rejected == {("a100-80gb", 2, 64), ("h100-80gb", 2, 64), ("h100-80gb-pcap", 2, 64)}
    assert all(p.phase == DECODE for s in shapes for p in s.points if p.rejected)


def test_real_distserve_import_matches_the_shipped_opt_profiles(shared_data):
    """The shipped OPT profiles are exactly what the importer makes of DistServe's files."""
    folder = shared_data / "profiles"
    result = read_distserve(folder / "profiler-a100-80g.distserve.json", folder / "max_num_tokens.csv",
                            gpu="a100-80gb",
                            label="../shared/data/profiles/profiler-a100-80g.distserve.json",
                            max_num_tokens_label="../shared/data/profiles/max_num_tokens.csv")
    assert len(result.profiles) == 7 and result.skipped == ()
    for profile in result.profiles:
        shipped = load_profile(shipped_profiles_dir() / profile_file_name(profile))
        assert profile_to_dict(profile) == profile_to_dict(shipped)
