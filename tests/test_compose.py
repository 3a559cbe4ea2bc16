"""Composed profiles: step times summed from AIConfigurator's measured operators.

These need the optional extra (pip install 'pdplan[aic]'); without it they skip with the reason.
"""

import numpy as np
import pytest

pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")

import pandas as pd  # noqa: E402

from pdplan.errors import PdplanError  # noqa: E402
from pdplan.hardware import get_gpu  # noqa: E402
from pdplan.latency.compose import tables  # noqa: E402
from pdplan.latency.compose.profile import composed_profile  # noqa: E402
from pdplan.latency.compose.step import Step  # noqa: E402
from pdplan.latency.compose.tables import Extrapolated, Grid  # noqa: E402
from pdplan.latency.roofline import streamed_weight_bytes_per_gpu  # noqa: E402
from pdplan.modelref import get_model  # noqa: E402
from pdplan.shape import InstanceShape  # noqa: E402

H100_VLLM = tables.choose_versions("h100-80gb", "vllm", None)


def raw_table(system, family, engine, version, filename):
    return pd.read_parquet(tables.package_root() / "systems" / "data" / system / family / engine / version / filename)


# --- interpolation ----------------------------------------------------------------------------------

def test_trilinear_interpolation_is_exact_for_latency_proportional_to_n_times_k():
    m, n, k = (np.array([1.0, 64.0, 256.0]), np.array([32.0, 512.0, 4096.0]), np.array([128.0, 1024.0]))
    values = (0.2 + 0.01 * m[:, None, None]) * n[None, :, None] * k[None, None, :] * 1e-9
    grid = Grid((m, n, k), values, "GEMM", ("m", "n", "k"))
    for point in [(17.0, 700.0, 300.0), (200.0, 4000.0, 1000.0)]:
        mm, nn, kk = point
        assert grid(point, Extrapolated()) == pytest.approx((0.2 + 0.01 * mm) * nn * kk * 1e-9, rel=1e-12)


def test_a_query_beyond_the_grid_scales_the_edge_linearly_and_is_recorded():
    grid = Grid((np.array([1.0, 2.0]), np.array([10.0, 20.0])), np.array([[1.0, 2.0], [3.0, 4.0]]), "GEMM",
                ("m", "n"))
    log = Extrapolated()
    assert grid((2.0, 60.0), log) == pytest.approx(4.0 * 3)
    assert log.text() == "GEMM n outside the measured 10–20, scaled linearly (1 queries)"


def test_a_size_past_the_grid_continues_along_its_last_octaves_slope_and_is_recorded():
    """A kernel still reading its weights at the table's last size (flat from 256 to 512 tokens) is not scaled
    in proportion past it: 4,096 tokens cost the edge plus the last octave's slope, not eight times the edge."""
    grid = Grid((np.array([128.0, 256.0, 512.0]),), np.array([0.40, 0.45, 0.46]), "MoE", ("tokens",))
    log = Extrapolated()
    assert grid((4096.0,), log) == pytest.approx(0.46 + (0.46 - 0.45) / 256 * (4096 - 512))
    assert log.text() == "MoE tokens past the measured 128–512, continued along its slope (1 queries)"


def test_a_dense_size_axis_reads_its_slope_an_octave_below_the_last_measurement():
    """GEMM rows are measured at neighbours (4,352 and 4,353): their difference is noise, not a slope."""
    m = np.array([2048.0, 4352.0, 4353.0])
    grid = Grid((m, np.array([8.0])), np.array([[1.0], [2.0], [2.1]]), "GEMM", ("m", "n"))
    assert grid((8706.0, 8.0), Extrapolated()) == pytest.approx(2.1 + (2.1 - 1.0) / (4353 - 2048) * 4353)


def test_a_falling_last_octave_holds_the_edge_past_the_grid():
    grid = Grid((np.array([1.0, 2.0]),), np.array([2.0, 1.9]), "all-reduce", ("elements",))
    assert grid((8.0,), Extrapolated()) == pytest.approx(1.9)


def test_a_size_below_the_grid_reads_the_smallest_measured_a_kernels_floor():
    grid = Grid((np.array([64.0, 128.0]), np.array([10.0, 20.0])), np.array([[1.0, 2.0], [1.5, 3.0]]),
                "wide-EP MoE context", ("tokens", "width"))
    log = Extrapolated()
    assert grid((8.0, 15.0), log) == pytest.approx(1.5)
    assert log.text() == "wide-EP MoE context tokens below the measured 64–128, held at the smallest (1 queries)"


def test_sglangs_gb300_wide_ep_moe_past_its_measured_tokens_stays_near_its_weight_read():
    """SGLang's wide-EP MoE generation table on GB300 stops at 128 tokens a GPU; at EP 4 its experts still stream
    their weights there (0.454 ms at 256 tokens, 0.463 at 512). A decode of 1,024 requests a rank over 8 ranks
    (SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=1024 in srt-slurm's GB300 recipes) reads it at 4,096 tokens:
    scaled in proportion that was 3.7 ms a layer, twice the step the recipe's rows measured."""
    frame = raw_table("gb300", "moe", "sglang", "0.5.10", "wideep_generation_moe_perf.parquet")
    line = frame[(frame.moe_ep_size == 4) & (frame.distribution == "power_law_1.01")]
    grid = Grid.from_frame(line.loc[:, ["num_tokens", "latency"]], ("num_tokens",), "wide-EP MoE generation")
    edge = grid((512.0,), Extrapolated())
    assert edge < grid((4096.0,), Extrapolated()) < 1.5 * edge


def test_the_grid_benchmark_predicts_a_line_that_streams_then_computes_by_each_rule(benchmark):
    """grid_holes.py --past scores the rules on the tables' own lines: on a kernel of a fixed cost plus one per
    token, the octave's slope predicts the largest size exactly where scaling in proportion does not, and holding
    the smallest predicts a flat start exactly where scaling down halves it."""
    holes = benchmark("grid_holes")
    sizes = np.array([64.0, 128.0, 256.0, 512.0, 1024.0])
    latency = np.where(sizes <= 128, 1.25, 1.0 + sizes / 512)
    signed = {(side, k, rule): error for side, k, rule, error in holes.off_the_grid(sizes, latency)}
    assert signed[("past", 1, "along the octave's slope")] == pytest.approx(0.0, abs=1e-12)
    assert signed[("past", 1, "in proportion")] == pytest.approx(1 / 3)
    assert signed[("below", 1, "held")] == pytest.approx(0.0, abs=1e-12)
    assert signed[("below", 1, "in proportion")] == pytest.approx(-0.5)


def test_a_line_the_table_never_measured_is_filled_along_the_next_axis():
    """vLLM's MLA context table skips whole (batch, length) lines; the grid still answers there."""
    rows = [(1, 1, 1, 1.0), (2, 1, 1, 2.0), (1, 1, 2, 3.0), (2, 1, 2, 4.0), (1, 2, 1, 5.0), (2, 2, 1, 6.0)]
    frame = pd.DataFrame(rows, columns=["a", "b", "c", "latency"])
    grid = Grid.from_frame(frame, ("a", "b", "c"), "MLA")
    # (b=2, c=2) was never measured at any a: held at b=1's values along b, the nearest measured
    assert grid((1.0, 2.0, 2.0), Extrapolated()) == pytest.approx(3.0e-3)
    assert grid((2.0, 2.0, 2.0), Extrapolated()) == pytest.approx(4.0e-3)
    assert np.isfinite(grid.values).all()


def test_a_batch_past_a_lines_last_measurement_continues_along_the_slope_of_its_last_two():
    """An attention table stops at a total of tokens: its long lines never measured the large batches."""
    rows = [(1, 8, 1.0), (2, 8, 1.5), (4, 8, 2.5), (8, 8, 4.5), (1, 64, 2.0), (2, 64, 3.0), (4, 64, 5.0)]
    grid = Grid.from_frame(pd.DataFrame(rows, columns=["batch_size", "step", "latency"]), ("batch_size", "step"),
                           "generation attention")
    log = Extrapolated()
    assert grid((8.0, 64.0), log) == pytest.approx((5.0 + (5.0 - 3.0) / 2 * 4) * 1e-3)
    assert log.text() == "generation attention past its measured points, continued along their slope (1 queries)"
    inside = Extrapolated()
    assert grid((2.0, 64.0), inside) == pytest.approx(3.0e-3)
    assert inside.text() == ""


def test_a_line_whose_last_two_measurements_fall_is_held_past_them():
    rows = [(1, 8, 1.0), (2, 8, 2.0), (4, 8, 3.0), (1, 64, 2.0), (2, 64, 1.9)]
    grid = Grid.from_frame(pd.DataFrame(rows, columns=["batch_size", "step", "latency"]), ("batch_size", "step"),
                           "generation attention")
    assert grid((4.0, 64.0), Extrapolated()) == pytest.approx(1.9e-3)


def test_the_slope_predicts_a_real_lines_last_measured_batch_within_ten_percent():
    """TensorRT-LLM's B200 generation attention at 8,191 KV tokens, 16 query heads over 2 KV heads: its 128-request
    point left out and predicted from the smaller batches (held, the rule before, misses it by about half)."""
    version = tables.choose_versions("b200-180gb", "trtllm", None)["generation_attention"]
    frame = raw_table("b200_sxm", "attention", "trtllm", version, "generation_attention_perf.parquet")
    line = frame[(frame.num_heads == 16) & (frame.num_key_value_heads == 2) & (frame.head_dim == 128)
                 & (frame.window_size == 0) & (frame.kv_cache_dtype == "fp8") & (frame.step == 8191)]
    best = line.groupby("batch_size")["latency"].min()
    assert best.index.max() == 128  # the table's last batch at this length
    values = best.to_numpy(float).copy()
    measured, values[-1] = values[-1], np.nan
    tables.fill_holes(values, [best.index.to_numpy(float)])
    assert values[-1] == pytest.approx(measured, rel=0.10)
    assert abs(values[-2] / measured - 1) > 0.3


def test_gemm_at_a_measured_point_is_the_fastest_kernel_measured_there():
    frame = raw_table("h100_sxm", "gemm", "vllm", H100_VLLM["gemm"], "gemm_perf.parquet")
    row = frame[(frame.gemm_dtype == "fp8") & (frame.m == 64) & (frame.n == 8192) & (frame.k == 8192)]
    grid = tables.gemm_grid("h100_sxm", "vllm", H100_VLLM["gemm"], "fp8")
    assert grid((64, 8192, 8192), Extrapolated()) == pytest.approx(row.latency.min() / 1e3, rel=1e-12)


def test_context_attention_interpolates_in_the_square_of_the_prompt_length():
    lines = tables.attention_lines("h100_sxm", "vllm", H100_VLLM["context_attention"], "context", 128, "bf16")
    line = lines[(16, 2)]
    log = Extrapolated()
    lo, hi = line((4, 4096), log), line((4, 6144), log)
    w = (5120**2 - 4096**2) / (6144**2 - 4096**2)
    assert line((4, 5120), log) == pytest.approx((1 - w) * lo + w * hi, rel=1e-12)


def test_unmeasured_head_counts_interpolate_between_lines_of_the_same_ratio():
    lines = {(32, 32): Grid((np.array([1.0, 2.0]), np.array([1.0, 2.0])), np.full((2, 2), 1.0), "a", ("b", "s")),
             (48, 48): Grid((np.array([1.0, 2.0]), np.array([1.0, 2.0])), np.full((2, 2), 2.0), "a", ("b", "s"))}
    assert tables.attention_s(lines, 40, 40, 1, 1, Extrapolated()) == pytest.approx(1.5)
    assert tables.attention_s(lines, 96, 96, 1, 1, Extrapolated()) == pytest.approx(4.0)
    with pytest.raises(PdplanError, match="no attention measurement with 40 query heads per 8"):
        tables.attention_s(lines, 40, 8, 1, 1, Extrapolated())


def test_engine_versions_order_as_releases():
    ordered = ["0.5.6.post2", "0.5.9", "0.5.10", "1.3.0rc5", "1.3.0rc20", "1.3.0"]
    assert sorted(reversed(ordered), key=tables.version_key) == ordered


# --- physics ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,gpu,tp", [("llama-3.1-8b", "h100-80gb", 1), ("llama-3.1-70b@fp8", "h200-141gb", 4),
                                         ("qwen3-32b@fp4", "b200-180gb", 2)])
def test_a_decode_step_is_never_faster_than_reading_the_weights_at_peak_bandwidth(name, gpu, tp):
    model, device = get_model(name), get_gpu(gpu)
    versions = tables.choose_versions(gpu, "vllm", None)
    step = Step(model=model, shape=InstanceShape(gpu=gpu, tp=tp, pp=1), engine="vllm", versions=versions)
    floor = streamed_weight_bytes_per_gpu(model, tp) / device.hbm_bytes_per_s
    assert floor < step.decode_s(1, 1024) < 6 * floor  # small-m GEMMs reach 20-80% of HBM bandwidth


def test_a_large_prefill_is_never_faster_than_its_flops_at_peak_throughput():
    model, gpu = get_model("llama-3.1-70b@fp8"), get_gpu("h100-80gb")
    step = Step(model=model, shape=InstanceShape(gpu="h100-80gb", tp=4, pp=1), engine="vllm", versions=H100_VLLM)
    tokens = 8192
    flops = 2 * model.layers * model.params_per_layer * tokens / 4
    assert flops / gpu.tensor_flops("fp8") < step.prefill_s(1, tokens) < 4 * flops / gpu.tensor_flops("fp8")


def test_more_tensor_parallelism_shortens_the_decode_step():
    model = get_model("llama-3.1-70b@fp8")
    times = [Step(model=model, shape=InstanceShape(gpu="h100-80gb", tp=tp, pp=1), engine="vllm",
                  versions=H100_VLLM).decode_s(16, 2048)
             for tp in (2, 4, 8)]
    assert times[0] > times[1] > times[2]


# --- profiles ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("engine", tables.ENGINES)
def test_composed_profile_fits_its_operator_sums_within_ten_percent(engine):
    profile = composed_profile(get_model("llama-3.1-70b@fp8"), get_gpu("h200-141gb"), 4, 1, engine=engine)
    prov = profile.provenance
    assert prov.source == "composed" and prov.method.startswith(f"{engine}: operator sum")
    assert prov.mape_prefill < 0.10 and prov.mape_decode < 0.10
    assert "AIConfigurator" in prov.notes and "h200_sxm" in prov.notes


def test_composed_profile_reports_queries_outside_the_measured_grids():
    prov = composed_profile(get_model("qwen3-32b"), get_gpu("h100-80gb"), 1, 1).provenance
    assert "outside the measured grids: GEMM n outside the measured 32–65536" in prov.notes  # the 151,936-word head


@pytest.mark.parametrize("args,message", [
    (dict(engine="tensorrt"), r"unknown engine 'tensorrt' \(known: vllm, sglang, trtllm\)"),
    (dict(engine="vllm", engine_version="0.9.0"), r"no vllm 0.9.0 operator data for h100-80gb \(measured: .*0.24.0"),
])
def test_unknown_engine_or_version_names_what_is_measured(args, message):
    with pytest.raises(PdplanError, match=message):
        composed_profile(get_model("llama-3.1-8b"), get_gpu("h100-80gb"), 1, 1, **args)


def test_a_gpu_without_operator_tables_is_refused_by_name():
    with pytest.raises(PdplanError, match="no AIConfigurator operator data for h100-80gb-pcap"):
        composed_profile(get_model("llama2-70b"), get_gpu("h100-80gb-pcap"), 4, 1)


def test_a_precision_the_gpu_lacks_is_refused_before_any_table_is_read():
    with pytest.raises(PdplanError, match=r"a100-80gb has no fp8 tensor cores \(it runs bf16\)"):
        composed_profile(get_model("llama-3.1-8b@fp8"), get_gpu("a100-80gb"), 1, 1)
