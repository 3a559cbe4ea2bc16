"""Fitting phase latency models: relative-error NNLS, basis choice, outliers, refusals."""

from __future__ import annotations

import re

import numpy as np
import pytest

from pdplan.errors import PdplanError
from pdplan.latency.bases import FLOOR_POLY, OCTAVES, POLY, Basis, fit_basis, nnls_relative
from pdplan.latency.fit import (
    DECODE,
    PREFILL,
    ShapePoints,
    decode_point,
    fit_phase,
    fit_profile,
    prefill_point,
)

PROMPTS = (128, 256, 512, 1024, 2048, 4096, 8192)


def quadratic_ms(total, total_sq, a=20.0, b=0.08, c=4e-6):
    """A DistServe-form prefill time in ms."""
    return a + b * total + c * total_sq


def prefill_points(latency_ms, prompts=PROMPTS, batches=(1,), repeats=1, noise=0.0, seed=0):
    """Points on a grid of batch sizes × prompt lengths, latency from ``latency_ms(B, l)``."""
    rng = np.random.default_rng(seed)
    points, line = [], 2
    for batch in batches:
        for prompt in prompts:
            for _ in range(repeats):
                ms = latency_ms(batch, prompt) * (1 + noise * rng.standard_normal())
                points.append(prefill_point(batch_size=batch, prompt_tokens=prompt,
                                            latency_s=ms / 1e3, origin=f"line {line}"))
                line += 1
    return points


def test_nnls_relative_recovers_known_coefficients_from_noiseless_points():
    """Exact points of a + b·Σl + c·Σl² give back a, b and c (closed form: the data are the model)."""
    total = np.array([128, 512, 1024, 4096, 8192, 16384], dtype=float)
    design = np.column_stack([np.ones_like(total), total, total**2])
    latency = design @ np.array([0.020, 8e-5, 4e-9])
    assert nnls_relative(design, latency) == pytest.approx([0.020, 8e-5, 4e-9], rel=1e-9)


def test_nnls_relative_keeps_coefficients_non_negative():
    """A falling latency cannot make a slope negative: the best non-negative slope is zero."""
    total = np.array([100.0, 200.0, 300.0, 400.0])
    design = np.column_stack([np.ones_like(total), total, total**2])
    beta = nnls_relative(design, 1.0 - total / 1000)
    assert beta[1] == 0 and beta[2] == 0 and beta[0] > 0


def test_fit_phase_recovers_the_distserve_form_and_chooses_poly():
    """Noiseless quadratic data: the simplest basis wins and reproduces its coefficients."""
    points = prefill_points(lambda B, l: quadratic_ms(B * l, B * l * l), batches=(1, 2, 4))
    fit = fit_phase(points, PREFILL)
    assert fit.basis == "poly"
    assert fit.heldout_mape < 1e-9
    (piece,) = fit.model.segments[0].pieces_s
    assert np.array(piece) * 1e3 == pytest.approx([20.0, 0.08, 4e-6], rel=1e-7)


def test_floor_plus_poly_is_chosen_on_floor_shaped_data():
    """A latency that stays flat at small prompts, then grows, needs the floor."""
    points = prefill_points(lambda B, l: max(60.0, quadratic_ms(l, l * l, a=-10.0, b=0.1)))
    fit = fit_phase(points, PREFILL)
    assert fit.basis == "floor+poly"
    assert fit.heldout_mape < 0.01
    assert fit.model.segments[0].pieces_s[0] == pytest.approx((0.060, 0.0, 0.0))


def test_poly_is_chosen_when_there_is_no_floor():
    """Data without a floor keep the simpler DistServe form, even with a little noise."""
    points = prefill_points(lambda B, l: quadratic_ms(l, l * l), repeats=3, noise=0.01, seed=3)
    assert fit_phase(points, PREFILL).basis == "poly"


def test_segmented_basis_never_makes_a_batch_faster_by_crossing_the_threshold():
    """From the threshold up, the small-batch polynomial still applies: max of both."""
    slow_batches = lambda B, l: quadratic_ms(B * l, B * l * l) * (1.0 if B < 4 else 1.4)  # noqa: E731
    points = prefill_points(slow_batches, batches=(1, 2, 4, 8), prompts=(256, 512, 1024, 2048))
    x = np.array([[p.features[0], p.features[1], p.features[2]] for p in points])
    batch = np.array([p.batch_size for p in points])
    y = np.array([p.latency_s for p in points])
    model = fit_basis(Basis(floor=True, threshold=4), x, batch, y)
    assert np.abs(model.evaluate(x, batch) / y - 1).max() < 0.05
    for prompt in (100, 700, 3000):
        three, four = ([[1.0, b * prompt, b * prompt**2]] for b in (3, 4))
        assert model.evaluate(np.array(four), np.array([4]))[0] >= model.evaluate(
            np.array(three), np.array([3]))[0]


def moe_decode_ms(batch, context, experts=128, per_token=8):
    """A mixture-of-experts decode step in ms: weights of the experts B requests touch
    (E·(1 − (1 − k/E)^B), concave in B) plus a KV read per context token."""
    touched = experts * (1 - (1 - per_token / experts) ** batch)
    return 5.0 + 0.2 * touched + 2e-5 * batch * context


def moe_decode_points():
    return [decode_point(batch_size=b, context_tokens=b * ctx, latency_s=moe_decode_ms(b, ctx) / 1e3,
                         origin=f"B{b}x{ctx}")
            for b in (1, 2, 4, 8, 16, 32, 64, 128, 256) for ctx in (256, 1024, 4096)]


def test_octaves_reproduce_a_step_linear_between_the_measured_batch_sizes():
    """Within each span of measured batch sizes the octave basis is one plane: a step time that is
    piecewise linear in B with knots there (and linear in Σctx) is reproduced exactly."""
    knots = {1: 10.0, 4: 16.0, 16: 22.0, 64: 25.0}
    step_ms = lambda b, ctx: np.interp(b, list(knots), list(knots.values())) + 1e-4 * b * ctx  # noqa: E731
    points = [decode_point(batch_size=b, context_tokens=b * ctx, latency_s=step_ms(b, ctx) / 1e3)
              for b in knots for ctx in (512, 2048, 8192)]
    x = np.array([p.features for p in points])
    batch = np.array([p.batch_size for p in points])
    y = np.array([p.latency_s for p in points])
    model = fit_basis(OCTAVES, x, batch, y)
    assert [s.min_batch for s in model.segments] == [1, 4, 16]
    assert model.evaluate(x, batch) == pytest.approx(y, rel=1e-6)
    assert model.evaluate(np.array([[1.0, 8.0, 8 * 1024.0]]), np.array([8]))[0] * 1e3 == pytest.approx(
        step_ms(8, 1024), rel=1e-6)


def test_a_concave_moe_decode_step_is_fitted_by_octaves_when_they_hold_out_better():
    plain = fit_phase(moe_decode_points(), DECODE)
    concave = fit_phase(moe_decode_points(), DECODE, extra=(OCTAVES,))
    assert concave.basis == "poly/octaves"
    assert concave.heldout_mape < 0.5 * plain.heldout_mape


def test_outlier_rule_flags_an_injected_10x_point_and_fits_without_it():
    """One grid point ten times off its neighbours is reported with its line, never fitted."""
    points = prefill_points(lambda B, l: quadratic_ms(B * l, B * l * l), batches=(1, 2),
                            noise=0.01, seed=1)
    bad = points[4]
    points[4] = prefill_point(batch_size=bad.batch_size, prompt_tokens=2048,
                              latency_s=bad.latency_s * 10, origin=bad.origin)
    fit = fit_phase(points, PREFILL)
    assert len(fit.outliers) == 1
    assert "prefill B=1 Σl=2048 (line 6)" in fit.outliers[0]
    assert re.search(r"is (9\.\d|10\.\d)x above .* \(rule: off by more than 3x\)$", fit.outliers[0])
    assert fit.grid_points == len(points) - 1
    assert fit.heldout_mape < 0.03


def test_a_repeat_far_from_the_median_of_its_repeats_is_reported():
    """Five repeats, one of them 3x the others: reported, and the median uses the other four."""
    points = prefill_points(lambda B, l: quadratic_ms(l, l * l), repeats=5)
    slow = points[7]
    points[7] = prefill_point(batch_size=1, prompt_tokens=256, latency_s=slow.latency_s * 3,
                              origin=slow.origin)
    fit = fit_phase(points, PREFILL)
    assert fit.outliers == (fit.outliers[0],)
    assert "(line 9)" in fit.outliers[0] and "median" in fit.outliers[0]
    assert fit.measurements == len(points) - 1
    assert fit.heldout_mape < 1e-9


def test_points_an_importer_rejected_are_reported_not_fitted():
    """A point that carries an importer's reason shows up in the outliers with that reason."""
    points = prefill_points(lambda B, l: quadratic_ms(l, l * l))
    points.append(prefill_point(batch_size=1, prompt_tokens=300, latency_s=9.0, origin="line 99",
                                rejected="run was preempted"))
    fit = fit_phase(points, PREFILL)
    assert fit.outliers == ("prefill B=1 Σl=300 (line 99): run was preempted",)
    assert fit.heldout_mape < 1e-9


def test_too_few_distinct_points_are_refused_naming_the_file():
    """Three grid points (however many repeats) cannot fit three coefficients and hold one out."""
    points = prefill_points(lambda B, l: quadratic_ms(l, l * l), prompts=(128, 512, 2048), repeats=4)
    with pytest.raises(PdplanError, match=r"^pts\.csv: prefill points cannot determine a fit: 3 "
                                          r"distinct grid points, need at least 4"):
        fit_phase(points, PREFILL, file="pts.csv")


def test_a_rank_deficient_design_is_refused():
    """Decode steps measured only at batch 1 cannot separate the per-request cost from the constant."""
    points = [decode_point(batch_size=1, context_tokens=c, latency_s=0.03 + 1e-7 * c)
              for c in (512, 1024, 2048, 4096, 8192)]
    with pytest.raises(PdplanError, match=r"span only 2 of 3 dimensions \(rank-deficient"):
        fit_phase(points, DECODE, file="pts.csv", what="m g TP1 PP1")


def test_bases_name_themselves_by_their_parts():
    assert [POLY.name, FLOOR_POLY.name, Basis(floor=True, threshold=8).name] == [
        "poly", "floor+poly", "floor+poly[B>=8]"]


def test_fit_profile_records_fit_quality_and_provenance():
    """Both phases fitted; the provenance names the source, the bases and the held-out error."""
    prefill = prefill_points(lambda B, l: quadratic_ms(B * l, B * l * l), batches=(1, 4))
    decode = [decode_point(batch_size=b, context_tokens=b * c, latency_s=(30 + 0.2 * b + 1e-4 * b * c) / 1e3)
              for b in (1, 2, 8, 32) for c in (256, 1024, 4096)]
    shape = ShapePoints(model="m", gpu="g", tp=2, pp=1, points=tuple(prefill + decode),
                        source="data/pts.csv", sha256="ab" * 32, notes="test points")
    profile = fit_profile(shape, kv_capacity_tokens=20000)
    prov = profile.provenance
    assert (prov.source, prov.file, prov.sha256) == ("measured", "data/pts.csv", "ab" * 32)
    assert prov.method == "nnls-relative/prefill:poly,decode:poly"
    assert (prov.points_prefill, prov.points_decode) == (14, 12)
    assert prov.mape_prefill < 1e-9 and prov.mape_decode < 1e-9
    assert prov.notes.startswith("test points; ")
    assert profile.max_prefill_batch_tokens == 20000   # largest Σl 4·8192, capped at the KV capacity
    assert profile.decode_step_s(8, 8 * 1024) == pytest.approx((30 + 1.6 + 0.8192) / 1e3)


@pytest.mark.slow
def test_heldout_error_within_ten_percent_for_every_llama2_shape_of_splitwise(shared_data):
    """Acceptance: leave-one-out MAPE ≤ 10% for prefill and decode on every llama2-70b shape."""
    from pdplan.latency.importers import read_splitwise

    shapes = [s for s in read_splitwise(shared_data / "profiles" / "splitwise_perf_model.csv")
              if s.model == "llama2-70b"]
    assert len(shapes) == 9
    for shape in shapes:
        for phase in (PREFILL, DECODE):
            fit = fit_phase(shape.points, phase, what=shape.shape)
            assert fit.heldout_mape <= 0.10, (shape.shape, phase, fit.basis, fit.heldout_mape)


def test_a_fit_that_cannot_be_determined_says_which_points_to_add():
    from pdplan.latency.fit import decode_point
    same_batch = [decode_point(batch_size=8, context_tokens=8 * c, latency_s=0.01 + c * 1e-6)
                  for c in (100, 400, 900, 1600)]
    with pytest.raises(PdplanError, match=r"add at least 1 measured point at another batch size \(every point has "
                                          r"batch size 8\)"):
        fit_phase(same_batch, "decode")
    two = [decode_point(batch_size=b, context_tokens=b * 500, latency_s=0.01 * b) for b in (1, 2)]
    with pytest.raises(PdplanError, match=r"need at least 4 .*add at least 2 measured points at another context "
                                          r"per request \(every point has 500 tokens\)"):
        fit_phase(two, "decode")
