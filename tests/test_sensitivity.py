"""The sensitivity grid: coordinates applied to the inputs, the net margin ΔT and its terms, the
decision per cell, the outputs (CSV, heatmap, JSON, words), bad specs, and Ray against local."""

from __future__ import annotations

import json
import math
import struct
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from pdplan.cli import output
from pdplan.cli.sensitivity_render import render
from pdplan.hardware import GB, default_cluster_path, load_cluster
from pdplan.latency.profile import shipped_profiles
from pdplan.modelref import get_model
from pdplan.sensitivity import GridResult, cell_coordinates, summary_text
from pdplan.sensitivity.cell import CellResult
from pdplan.sensitivity.coordinates import cell_cluster, cell_slo, cell_workload, shared_prefixes
from pdplan.sensitivity.margin import net_margin, variants
from pdplan.sim import Link, Plan, Pool
from pdplan.slo import slo_from_flags
from pdplan.workload import interarrival_cv, load_trace, prefix_reuse_fraction
from tests.conftest import ROOT
from tests.conftest import run_main as run

SMOKE = ROOT / "traces" / "smoke_uniform_200.csv"
MODEL = get_model("llama2-70b")
TERMS = ("t_saved_ms", "t_transfer_exposed_ms", "t_route_ms", "t_failure_ms")
GRID = ("--vary", "bandwidth=0.5,2,8,100", "--vary", "failure_rate=0,0.2", "--vary", "gpu=h100-80gb")


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


# --- coordinates -----------------------------------------------------------------------------------

def test_length_scales_round_and_keep_at_least_one_token():
    workload = load_trace(SMOKE)
    scaled = cell_workload(workload, {"prompt_scale": 0.001, "output_scale": 2.0}, rate_rps=1.0, seed=0)
    assert scaled.prompt_tokens.min() == 1
    np.testing.assert_array_equal(scaled.output_tokens, workload.output_tokens * 2)


def test_burstiness_draws_gamma_gaps_of_the_asked_cv_at_the_target_rate(shared_data):
    workload = load_trace(shared_data / "traces" / "AzureLLMInferenceTrace_conv.csv")
    bursty = cell_workload(workload, {"burstiness": 3.0}, rate_rps=5.0, seed=1)
    assert interarrival_cv(bursty.arrival_s) == pytest.approx(3.0, rel=0.1)
    assert len(bursty) / bursty.arrival_s[-1] == pytest.approx(5.0, rel=0.1)
    np.testing.assert_array_equal(bursty.prompt_tokens, workload.prompt_tokens)


def test_prefix_hit_shares_that_fraction_of_each_prompt_in_whole_blocks():
    """With 512-token blocks, a 2,048-token prompt at 0.5 shares 2 blocks and a 700-token one none."""
    values, offsets = shared_prefixes(np.array([2048, 700]), 512, 0.5, seed=0)
    assert np.diff(offsets).tolist() == [4, 2]
    assert (values[:2] < (1 << 40)).all() and (values[2:] >= (1 << 40)).all()


def test_prefix_hit_fraction_is_what_the_trace_statistics_then_measure():
    workload = load_trace(SMOKE)
    shared = cell_workload(workload, {"prompt_scale": 8.0, "prefix_hit": 0.6}, rate_rps=1.0, seed=0)
    assert prefix_reuse_fraction(shared) == pytest.approx(0.6, abs=0.1)


def test_bandwidth_price_and_gpu_change_only_the_cluster_fields_they_name():
    cluster = load_cluster(default_cluster_path())
    first = cluster.nodes[0].gpu
    changed = cell_cluster(cluster, {"bandwidth": 3.0, "price_ratio": 2.0})
    assert all(n.inter_node_bytes_per_s == 3.0 * GB for n in changed.nodes)
    assert all(n.intra_node_bytes_per_s == o.intra_node_bytes_per_s for n, o in zip(changed.nodes, cluster.nodes))
    assert all(n.gpu.usd_per_hour == pytest.approx(first.usd_per_hour * (1 if n.gpu.name == first.name else 2))
               for n in changed.nodes)
    only = cell_cluster(cluster, {"gpu": "h100-80gb"})
    assert {n.gpu.name for n in only.nodes} == {"h100-80gb"}


def test_slo_scales_multiply_only_their_clock():
    slo = cell_slo(slo_from_flags(1.0, 0.1, 0.9), {"ttft_scale": 0.5})
    assert (slo.threshold_s("ttft"), slo.threshold_s("tpot")) == pytest.approx((0.5, 0.1))


# --- the net margin on fixed plans -----------------------------------------------------------------

def h100(name, phase, replicas, **extra):
    return Pool(name=name, phase=phase, model=MODEL.name, gpu="h100-80gb", tp=4, replicas=replicas, **extra)


COLOCATED = Plan(pools=(h100("c", "colocated", 6, policy="chunked", chunk_tokens=512),))


def disaggregated(gb_s_per_gpu: float, **faults) -> Plan:
    return Plan(pools=(h100("p", "prefill", 4), h100("d", "decode", 2)), transfer_schedule="layer",
                links=(Link(from_pool="p", to_pool="d", bandwidth_bytes_per_s=4 * gb_s_per_gpu * GB, setup_s=5e-4),),
                **faults)


@pytest.fixture(scope="module")
def azure_code(shared_data):
    return load_trace(shared_data / "traces" / "AzureLLMInferenceTrace_code.csv")


def margin(workload, plan, rate=2.0, runs=1):
    return net_margin(workload, COLOCATED, plan, shipped_profiles(), model=MODEL, rate_rps=rate, runs=runs, seed=0,
                      arrivals="trace")


@pytest.mark.slow
def test_on_fixed_plans_the_net_margin_does_not_increase_as_bandwidth_decreases(azure_code):
    deltas = [margin(azure_code, disaggregated(b)).delta_ms for b in (32.0, 8.0, 2.0, 0.5)]
    assert deltas == sorted(deltas, reverse=True)
    assert deltas[0] - deltas[-1] > 10  # a 64× slower link costs the Azure code trace's long prompts


@pytest.mark.slow
def test_the_terms_telescope_to_the_measured_difference(azure_code):
    m = margin(azure_code, disaggregated(1.0, failure_rate=0.1, route_s=0.003), runs=2)
    assert m.delta_ms == pytest.approx(m.saved_ms - m.transfer_exposed_ms - m.route_ms - m.failure_ms, abs=1e-6)
    assert m.saved_ms == pytest.approx(m.saved_ttft_ms + m.saved_decode_ms, abs=1e-6)
    assert m.failure_ms > 0 and m.failures_per_request == pytest.approx(0.1 / 0.9, rel=0.15)


def test_free_handoffs_expose_no_transfer():
    trace = load_trace(SMOKE)
    from pdplan.sim import simulate

    free = variants(disaggregated(0.1, failure_rate=0.3, route_s=0.01))[0]
    result = simulate(trace, free, shipped_profiles(), model=MODEL, rate_rps=4.0)
    assert np.nanmax(result["exposed_transfer_s"]) == 0
    assert result["transfer_failures"].sum() == 0


# --- a whole grid ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One goodput cache for the module's grids on the smoke trace."""
    return tmp_path_factory.mktemp("grid-cache")


@pytest.fixture(scope="module")
def grid(tmp_path_factory, cache):
    """The smoke trace on H100 nodes over link bandwidth × transfer failure rate (8 cells), CSV
    and heatmap."""
    folder = tmp_path_factory.mktemp("grid")
    code, out = run("sensitivity", "grid", "--trace", SMOKE, *GRID, "--jobs", "2", "--cache-dir", cache,
                    "--out", folder / "grid.csv", "--plot", folder / "heatmap.png", "--json")
    assert code in (0, None)
    return {"doc": json.loads(out), "csv": pd.read_csv(folder / "grid.csv"),
            "png": (folder / "heatmap.png").read_bytes(), "folder": folder, "cache": cache}


def test_gpu_counts_are_written_as_integers(grid):
    import csv

    rows = list(csv.DictReader((grid["folder"] / "grid.csv").open()))
    assert all(row[key].isdigit() for row in rows for key in ("colocated_gpus", "pd_gpus") if row[key])


def test_every_row_has_each_coordinate_and_the_decision(grid):
    frame = grid["csv"]
    assert len(frame) == 8
    assert sorted(set(zip(frame["bandwidth"], frame["failure_rate"]))) == sorted(
        (b, f) for b in (0.5, 2, 8, 100) for f in (0, 0.2))
    assert set(frame["decision"]) <= {"ENABLE_PD", "COLOCATE", "INFEASIBLE"}


def test_in_every_row_the_net_margin_is_the_sum_of_its_terms(grid):
    frame = grid["csv"].dropna(subset=["delta_t_ms"])
    assert len(frame)
    total = frame["t_saved_ms"] - frame["t_transfer_exposed_ms"] - frame["t_route_ms"] - frame["t_failure_ms"]
    np.testing.assert_allclose(frame["delta_t_ms"], total, rtol=0, atol=0.0025)  # four terms rounded to 1 µs


def test_with_the_same_plans_the_net_margin_does_not_increase_as_bandwidth_decreases(grid):
    """Up to batching noise: a faster link can land a handoff in another decode step and so reorder
    batches, which moves the margin by a sliver of the saving (seen: 0.011 ms of 75 ms, 1.2 ms of
    1,138 ms), never by what a slower link costs. A negative exposed transfer is that noise measured
    (no link is faster than an instant one), so it widens the allowance by its size."""
    frame = grid["csv"].dropna(subset=["delta_t_ms"]).sort_values("bandwidth", ascending=False)
    compared = 0
    for _, line in frame.groupby(["failure_rate", "pd_plan", "colocated_plan"]):
        measured = max(0.0, -line["t_transfer_exposed_ms"].min())
        deltas, noise = line["delta_t_ms"].tolist(), 1e-3 * line["t_saved_ms"].abs().max() + measured
        compared += len(deltas) - 1
        assert all(later <= earlier + noise for earlier, later in zip(deltas, deltas[1:])), deltas
    assert compared >= 2


def test_no_failures_cost_nothing_and_failures_are_measured(grid):
    frame = grid["csv"].dropna(subset=["delta_t_ms"])
    assert (frame.loc[frame["failure_rate"] == 0, "t_failure_ms"] == 0).all()
    assert (frame.loc[frame["failure_rate"] == 0.2, "transfer_failures_per_request"] > 0).all()


def test_each_decision_follows_the_rule_from_its_row(grid):
    for _, row in grid["csv"].iterrows():
        pd_passes, colo_passes = row["pd_verdict"] == "passes", row["colocated_verdict"] == "passes"
        enable = pd_passes and (not colo_passes or (row["delta_t_ms"] > row["margin_ms"]
                                                    and row["pd_usd_per_hour"] <= row["colocated_usd_per_hour"]))
        expected = "ENABLE_PD" if enable else ("COLOCATE" if colo_passes else "INFEASIBLE")
        assert row["decision"] == expected, row["reason"]


def test_the_heatmap_is_a_png_of_the_stated_size(grid):
    assert png_size(grid["png"]) == (576, 504)  # one 4.8 × 3.6 in panel plus the legend strip, 120 dpi


@pytest.mark.parametrize("compare,reading", [
    ("rate", "ΔT -1196.0\ncolocated $36.50\nP/D —"),
    ("budget", "ΔT -1196.0\ncolocated 1.91 req/s\nP/D —"),
])
def test_a_heatmap_cell_shows_what_each_mode_s_plan_costs_beside_its_margin(compare, reading):
    from pdplan.plots import cell_text

    row = {"compare": compare, "delta_t_ms": -1196.04, "colocated_usd_per_hour": 36.5, "colocated_rate_rps": 1.90819,
           "pd_usd_per_hour": None, "pd_rate_rps": None}
    assert cell_text(row) == reading


def test_json_carries_the_cells_and_a_summary_in_words(grid):
    doc = grid["doc"]
    assert doc["dimensions"] == {"bandwidth": [0.5, 2.0, 8.0, 100.0], "failure_rate": [0.0, 0.2], "gpu": ["h100-80gb"]}
    assert len(doc["cells"]) == 8 and doc["compare"] == "rate"
    wins = sum(c["decision"] == "ENABLE_PD" for c in doc["cells"])
    assert doc["summary"].startswith(f"P/D wins in {wins} of 8 cells")


def test_a_second_run_reads_every_cell_from_the_cache_and_writes_the_same_csv(grid, tmp_path):
    again = tmp_path / "again.csv"
    code, _ = run("sensitivity", "grid", "--trace", SMOKE, *GRID, "--jobs", "1", "--cache-dir",
                  grid["cache"], "--out", again)
    assert code in (0, None)
    assert again.read_bytes() == (grid["folder"] / "grid.csv").read_bytes()


@pytest.mark.slow
def test_the_ray_executor_writes_the_same_csv_as_the_local_one(tmp_path, cache):
    """Ray computes every cell afresh (its own empty cache); the local run may reuse the module's."""
    pytest.importorskip("ray", reason="Ray is the optional extra pdplan[ray]")
    paths = {}
    for executor, folder in (("local", cache), ("ray", tmp_path / "ray-cache")):
        paths[executor] = tmp_path / f"{executor}.csv"
        code, _ = run("sensitivity", "grid", "--trace", SMOKE, "--vary", "bandwidth=1,50", "--vary",
                      "gpu=h100-80gb", "--executor", executor, "--jobs", "2", "--cache-dir", folder,
                      "--out", paths[executor])
        assert code in (0, None)
    assert paths["ray"].read_bytes() == paths["local"].read_bytes()


# --- the grid in words and as a table, on hand-made cells -------------------------------------------

def hand_cell(index: int, decision: str, **coords) -> CellResult:
    return CellResult(index=index, coords=coords, compare="rate", margin_ms=0.0, colocated=None,
                      disaggregated=None, margin=None, decision=decision, reason="")


def hand_grid(dimensions: tuple[tuple[str, tuple], ...], wins: set[tuple]) -> tuple[CellResult, ...]:
    """A cell per coordinate combination: ENABLE_PD where its coordinates are in ``wins``, else COLOCATE."""
    return tuple(hand_cell(i, "ENABLE_PD" if tuple(coords.values()) in wins else "COLOCATE", **coords)
                 for i, coords in enumerate(cell_coordinates(dimensions)))


def test_the_summary_names_each_threshold_along_a_dimension_with_the_other_one_held():
    # P/D wins at (10, 2×), (100, 1×), (100, 2×). Along prompt_scale: at 10 GB/s it wins from 2×, at
    # 100 GB/s from 1×. Along bandwidth: at 1× it wins from 100 GB/s, at 2× from 10 GB/s; at 0.5× never.
    dimensions = (("bandwidth", (1.0, 10.0, 100.0)), ("prompt_scale", (0.5, 1.0, 2.0)))
    cells = hand_grid(dimensions, {(10.0, 2.0), (100.0, 1.0), (100.0, 2.0)})
    assert summary_text(dimensions, cells) == (
        "P/D wins in 3 of 9 cells (COLOCATE 6); "
        "below bandwidth 100 GB/s it stops paying, prompt_scale held at 1×; "
        "below bandwidth 10 GB/s it stops paying, prompt_scale held at 2×; "
        "below prompt_scale 2× it stops paying, bandwidth held at 10 GB/s; "
        "below prompt_scale 1× it stops paying, bandwidth held at 100 GB/s.")


def test_the_summary_says_a_threshold_shared_by_several_settings_once():
    # P/D wins only at 2× whatever the bandwidth: one threshold along prompt_scale, none along bandwidth.
    dimensions = (("bandwidth", (10.0, 100.0)), ("prompt_scale", (1.0, 2.0)), ("gpu", ("h100-80gb",)))
    cells = hand_grid(dimensions, {(10.0, 2.0, "h100-80gb"), (100.0, 2.0, "h100-80gb")})
    assert summary_text(dimensions, cells) == (
        "P/D wins in 2 of 4 cells (COLOCATE 2); below prompt_scale 2× it stops paying, "
        "bandwidth held at 10 GB/s or 100 GB/s.")


def test_the_grid_table_names_each_plan_s_verdict_column_for_its_mode(capsys, monkeypatch):
    monkeypatch.setattr(output.stdout, "width", 400)
    dimensions = (("bandwidth", (10.0,)),)
    result = GridResult(dimensions=dimensions, cells=(hand_cell(0, "INFEASIBLE", bandwidth=10.0),))
    render(result, SimpleNamespace(compare="rate", target_rps=2.0), False)
    header = next(line for line in capsys.readouterr().out.splitlines() if "bandwidth" in line)
    columns = [cell.strip() for cell in header.strip("┃").split("┃")]
    assert columns[1:5] == ["colocated $/h", "colocated verdict", "P/D $/h", "P/D verdict"]


# --- bad specs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("vary,named", [
    ("bandwith=1,10", "bandwith"),           # unknown dimension
    ("bandwidth=", "bandwidth"),             # empty list
    ("prompt_scale=1,big", "prompt_scale"),  # a value of the wrong type
    ("failure_rate=0.1,0.9", "failure_rate"),  # out of range
    ("rate=2,2", "rate"),                    # a repeated value
])
def test_a_bad_vary_exits_2_naming_the_dimension(run_cli, vary, named):
    code, out, err = run_cli("sensitivity", "grid", "--trace", SMOKE, "--vary", vary)
    assert code == 2
    assert named in err and err.count("\n") == 1 and "Traceback" not in err


def test_a_seed_beyond_32_bits_exits_2_before_any_work(run_cli):
    code, _, err = run_cli("sensitivity", "grid", "--trace", SMOKE, "--vary", "bandwidth=10", "--seed", "3000000000")
    assert code == 2 and "--seed" in err and "Traceback" not in err


@pytest.mark.parametrize("body,named", [
    ("vary: {latency: [1, 2]}", "vary.latency"),
    ("vary: {bandwidth: []}", "vary.bandwidth"),
    ("vary: {bandwidth: [fast]}", "vary.bandwidth"),
    ("vary: {gpu: [1]}", "vary.gpu"),
    ("affinity: sideways", "affinity"),
    ("router: fastest\nvary: {bandwidth: [10]}", "router"),
    ("seed: 99999999999999\nvary: {bandwidth: [10]}", "seed"),  # beyond CP-SAT's 32-bit seed
])
def test_a_bad_grid_file_exits_2_naming_the_field_and_line(run_cli, tmp_path, body, named):
    spec = tmp_path / "grid.yaml"
    spec.write_text(f"pdplan_grid: 1\ntrace: {SMOKE}\n{body}\n")
    code, out, err = run_cli("sensitivity", "grid", spec)
    assert code == 2
    assert named in err and str(spec) in err and err.count("\n") == 1


def test_a_grid_files_router_is_the_cells_router(tmp_path):
    from pdplan.sensitivity.spec import load_spec

    spec = tmp_path / "grid.yaml"
    spec.write_text(f"pdplan_grid: 1\ntrace: {SMOKE}\nrouter: cache-aware\nvary: {{prefix_hit: [0.5]}}\n")
    assert load_spec(spec).router == "cache-aware"


def test_a_gpu_the_cluster_lacks_exits_2_before_any_work(run_cli, tmp_path):
    out = tmp_path / "grid.csv"
    code, _, err = run_cli("sensitivity", "grid", "--trace", SMOKE, "--vary", "gpu=h100-80gb,b200-180gb",
                           "--out", out)
    assert code == 2 and "b200-180gb" in err and "vary.gpu" in err
    assert not out.exists()


def test_a_grid_file_is_read_relative_to_its_folder(run_cli, tmp_path, cache):
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "t.csv").write_bytes(SMOKE.read_bytes())
    spec = tmp_path / "grid.yaml"
    spec.write_text("pdplan_grid: 1\ntrace: traces/t.csv\nvary: {bandwidth: [1], gpu: [h100-80gb]}\nmax_rounds: 2\n")
    code, out, err = run_cli("sensitivity", "grid", spec, "--json", "--cache-dir", cache)
    assert code == 0, err
    assert len(json.loads(out)["cells"]) == 1
    assert math.isfinite(json.loads(out)["target_rps"])


@pytest.mark.slow
def test_with_a_budget_each_mode_serves_its_highest_verified_rate_and_more_wins(tmp_path):
    code, out = run("sensitivity", "grid", "--trace", SMOKE, "--vary", "route_ms=0,40", "--vary", "gpu=h100-80gb",
                    "--budget", "30", "--jobs", "1", "--cache-dir", tmp_path / "cache", "--json")
    assert code in (0, None)
    doc = json.loads(out)
    assert doc["compare"] == "budget"
    for cell in doc["cells"]:
        for prefix in ("colocated", "pd"):
            assert cell[f"{prefix}_usd_per_hour"] <= 30 + 1e-9
        assert cell["margin_rate_rps"] == pytest.approx(min(cell["colocated_rate_rps"], cell["pd_rate_rps"]), rel=1e-5)
        both = cell["pd_verdict"] == "passes" and cell["colocated_verdict"] == "passes"
        if both:
            expected = cell["pd_rate_rps"] > cell["colocated_rate_rps"] and cell["delta_t_ms"] > 0
            assert (cell["decision"] == "ENABLE_PD") == expected, cell["reason"]


def test_a_rate_dimension_with_a_budget_exits_2(run_cli):
    code, _, err = run_cli("sensitivity", "grid", "--trace", SMOKE, "--vary", "rate=1,2", "--budget", "20")
    assert code == 2 and "vary.rate" in err


def test_an_acceptance_without_speculative_decoding_exits_2_naming_the_flag(run_cli):
    code, _, err = run_cli("sensitivity", "grid", "--trace", SMOKE, "--vary", "bandwidth=10", "--acceptance", "0.7")
    assert code == 2 and "--acceptance" in err and err.count("\n") == 1


def test_mtp_on_a_checkpoint_without_prediction_layers_exits_2(run_cli, cache):
    code, _, err = run_cli("sensitivity", "grid", "--trace", SMOKE, "--vary", "bandwidth=10", "--jobs", "1",
                           "--speculative", "mtp", "--acceptance", "0.7")
    assert code == 2 and "num_nextn_predict_layers" in err and "Traceback" not in err


def test_a_grid_of_one_dimension_is_drawn_along_it():
    """ΔT along the dimension, a cell without one (an infeasible mode) drawn hollow at 0: a PNG, not a refusal."""
    from pdplan.cli.sensitivity import heatmap_axes
    from pdplan.plots import plot_grid_line
    from pdplan.sensitivity.spec import GridSpec

    assert heatmap_axes(GridSpec(dimensions=(("bandwidth", (1.0, 10.0)),)), None) == ("bandwidth", None)
    row = {"compare": "cost", "colocated_usd_per_hour": 12.17, "pd_usd_per_hour": 13.69, "colocated_rate_rps": None,
           "pd_rate_rps": None}
    rows = [{**row, "bandwidth": 1.0, "delta_t_ms": None, "decision": "COLOCATE", "pd_usd_per_hour": None},
            {**row, "bandwidth": 10.0, "delta_t_ms": -798.8, "decision": "COLOCATE"},
            {**row, "bandwidth": 100.0, "delta_t_ms": 12.0, "decision": "ENABLE_PD"}]
    png = plot_grid_line(rows, "bandwidth", margin_ms=0.0, show=lambda name, value: f"{value:g} GB/s")
    assert png.startswith(b"\x89PNG") and len(png) > 10_000


def test_a_cells_net_margin_is_kept_and_read_back_without_simulating(tmp_path, monkeypatch):
    """Two cells with the same plans, requests, profiles and seeds measure ΔT once; another rate
    measures it anew."""
    from pdplan.cache import ResultCache
    from pdplan.latency.source import ProfileSource
    from pdplan.planner import PlanRequest
    from pdplan.sensitivity import cell
    from pdplan.slo import slo_from_flags
    from tests.test_placement import cluster_of, node

    measured = []
    real = cell.net_margin

    def counted(*args, **kwargs):
        measured.append(kwargs["rate_rps"])
        return real(*args, **kwargs)

    monkeypatch.setattr(cell, "net_margin", counted)
    request = PlanRequest(workload=load_trace(SMOKE), model=MODEL, cluster=cluster_of(node(gpu="h100-80gb", gpus=8)),
                          profiles=ProfileSource(shipped_profiles(), compose=False), slo=slo_from_flags(2.0, 0.15, 0.9),
                          target_rps=2.0, runs=2)
    cache = ResultCache(tmp_path)
    first = cell.cell_margin(request, COLOCATED, disaggregated(8.0), shipped_profiles(), 2.0, cache)
    again = cell.cell_margin(request, COLOCATED, disaggregated(8.0), shipped_profiles(), 2.0, ResultCache(tmp_path))
    other = cell.cell_margin(request, COLOCATED, disaggregated(8.0), shipped_profiles(), 3.0, cache)
    assert measured == [2.0, 3.0]
    assert again == first and other.rate_rps == 3.0
