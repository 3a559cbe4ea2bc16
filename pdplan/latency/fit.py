"""Fitting a phase latency model to measured batch latencies.

A phase (prefill or decode) of one instance shape is measured at a few grid points: a batch size
and the phase's features — ``(1, Σl, Σl²)`` for prefill, ``(1, B, Σctx)`` for decode (see
:mod:`pdplan.latency.profile`). :func:`fit_phase` turns those points into a
:class:`~pdplan.latency.profile.LatencyModel` in five steps, each a stated rule:

1. **Repeats.** Points with the same batch size and features are repeats of one grid point; the
   grid point's latency is their median. With three or more repeats, a repeat more than
   :data:`REPEAT_FACTOR` (2×) from that median is reported as an outlier and left out of it.
2. **Outlying grid points.** A grid point is an outlier when neither the DistServe form nor the
   floor+poly form (below), fitted to the *other* grid points, predicts it within
   :data:`OUTLIER_FACTOR` (3×). The worst such point is removed and the test repeated, at most
   for :data:`MAX_OUTLIER_SHARE` (one in five) of the grid points. (Splitwise's llama2-70b TP2
   batch-64 prompt times sit 8–16× below what their neighbours imply.)
3. **Bases.** Every candidate basis is a max of linear forms that a LatencyModel stores:

   * ``poly`` — DistServe's form, one linear form ``a + b·x₁ + c·x₂`` with a, b, c ≥ 0
     (prefill ``a + b·Σl + c·Σl²``, decode ``a + b·B + c·Σctx``);
   * ``floor+poly`` — ``max(floor, a + b·x₁ + c·x₂)``: a latency floor at small batches (weights
     must be read however small the batch) and a polynomial above it. b, c ≥ 0 keep it monotone;
     the intercept a may be negative, since below the knee the floor holds the latency up;
   * ``floor+poly[B>=T]`` — DistServe's small/large-batch split applied to floor+poly: batches
     below T and from T up get their own ``a`` and ``b``, and share the floor and ``c`` (the
     attention cost per Σl², the KV-read cost per context token). From T up the small-batch
     polynomial still applies — the latency is the max of both — so adding a request never
     makes a batch faster across the threshold. (Splitwise's A100 prompt batches run 10–40%
     slower than one prompt of the same total length: a per-prompt cost the features
     ``(1, Σl, Σl²)`` cannot express without segments.)

   Each is fitted by non-negative least squares on relative error — ``scipy.optimize.nnls`` on the
   design rows scaled by ``1/y`` against a vector of ones (columns scaled to unit maximum for
   conditioning; a sign-free intercept is two non-negative columns ``+1`` and ``−1``). The floor
   is found by enumeration: the k points of lowest latency set the floor (its relative-error
   least-squares constant ``Σ(1/y)/Σ(1/y²)``), the others fit the polynomial, and the k with the
   least relative squared error of the whole max-model wins.
4. **Held-out error.** Each basis is scored by leave-one-out over the distinct grid points (above
   :data:`LOO_LIMIT` points: :data:`K_FOLDS`-fold, folds from a seeded permutation): the model
   fitted without a point predicts it, and MAPE and max error are over those predictions. A basis
   that some fold cannot determine is not a candidate.
5. **Selection.** Bases come in levels of complexity (poly; floor+poly; segmented; and, offered only
   for composed mixture-of-experts decode, :data:`OCTAVES`). The
   lowest held-out MAPE of each level wins it, and a more complex level replaces the simpler
   choice only if it cuts the held-out MAPE below :data:`SIMPLER_MARGIN` (90%) of it, and by at
   least :data:`SIMPLER_MARGIN_ABS` (half a percentage point). The chosen
   basis is refitted on all kept grid points. Its held-out error is the one reported; choosing
   among bases on the same folds makes it slightly optimistic, and
   :func:`selection_heldout_errors` measures the selection itself held out.

Points that cannot determine the basis — fewer than four distinct grid points, or a design whose
three features are linearly dependent (for example every batch with the same Σl) — are refused
with a :class:`~pdplan.errors.PdplanError` naming the source file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from pdplan.errors import InternalError, PdplanError
from pdplan.latency.bases import (
    FLOOR_POLY,
    LOO_LIMIT,
    OCTAVES,
    POLY,
    Basis,
    Solutions,
    candidate_bases,
    fit_basis,
    full_rank,
)
from pdplan.latency.profile import LatencyModel, PhaseProfile, Provenance
from pdplan.shape import ModelShape
from pdplan.vocabulary import Phase

PREFILL = Phase.PREFILL
DECODE = Phase.DECODE
PHASES = (PREFILL, DECODE)

REPEAT_FACTOR = 2.0        #: a repeat this far (either way) from its grid point's median is an outlier
OUTLIER_FACTOR = 3.0       #: a grid point this far from every held-out simple fit is an outlier
MAX_OUTLIER_SHARE = 0.2    #: at most this share of grid points is removed as outliers
SIMPLER_MARGIN = 0.9       #: a more complex basis must reach this fraction of the simpler's MAPE
SIMPLER_MARGIN_ABS = 0.005  #: ... and also be better by this much (half a percentage point)
K_FOLDS = 10
FOLD_SEED = 0
MIN_GRID_POINTS = 4        #: three coefficients plus one point to hold out

_FEATURE_TEXT = {PREFILL: ("1", "Σl", "Σl²"), DECODE: ("1", "B", "Σctx")}


# --- measured points -----------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class MeasuredPoint:
    """One measured latency of one phase batch, as an importer read it from a source file."""

    phase: str                              #: "prefill" or "decode"
    batch_size: int                         #: requests in the batch (B)
    features: tuple[float, float, float]    #: (1, Σl, Σl²) for prefill, (1, B, Σctx) for decode
    latency_s: float                        #: measured time of the batch (prefill) or step (decode)
    origin: str = ""                        #: where it came from, e.g. "line 17" or "z_itl[3]"
    rejected: str = ""                      #: an importer rule it broke; reported, never fitted

    def __post_init__(self):
        if self.phase not in PHASES:
            raise InternalError(f"phase must be one of {', '.join(PHASES)}, got {self.phase!r}")
        if self.batch_size < 1:
            raise InternalError("batch_size must be >= 1")
        if len(self.features) != 3 or self.features[0] != 1.0:
            raise InternalError("features must be a triple starting with 1")
        if not all(math.isfinite(x) and x >= 0 for x in self.features):
            raise InternalError("features must be finite and >= 0")
        if not (math.isfinite(self.latency_s) and self.latency_s > 0):
            raise InternalError("latency_s must be a finite number > 0")


def prefill_point(*, batch_size: int, prompt_tokens: int, latency_s: float, origin: str = "",
                  rejected: str = "") -> MeasuredPoint:
    """A prefill batch of ``batch_size`` prompts of ``prompt_tokens`` tokens each."""
    total = float(batch_size * prompt_tokens)
    return MeasuredPoint(phase=PREFILL, batch_size=batch_size,
                         features=(1.0, total, float(batch_size) * float(prompt_tokens) ** 2),
                         latency_s=latency_s, origin=origin, rejected=rejected)


def decode_point(*, batch_size: int, context_tokens: float, latency_s: float, origin: str = "",
                 rejected: str = "") -> MeasuredPoint:
    """A decode step of ``batch_size`` requests holding ``context_tokens`` of context in all (Σctx)."""
    return MeasuredPoint(phase=DECODE, batch_size=batch_size,
                         features=(1.0, float(batch_size), float(context_tokens)),
                         latency_s=latency_s, origin=origin, rejected=rejected)


@dataclass(frozen=True, kw_only=True)
class ShapePoints(ModelShape):
    """Everything a source file says about one (model, GPU, TP, PP) shape: its measured points."""

    points: tuple[MeasuredPoint, ...]
    source: str                              #: the source file, as provenance records it
    sha256: str | None = None
    file: str | None = None                  #: the source file as read, for error messages
    kv_capacity_tokens: int | None = None    #: when the source states the KV capacity
    notes: str = ""                          #: how the importer read the source


# --- grid points, repeats and outliers ----------------------------------------------------------

@dataclass(frozen=True)
class _Grid:
    features: np.ndarray      # (n, 3)
    batch: np.ndarray         # (n,)
    latency: np.ndarray       # (n,) median of repeats, seconds
    origins: tuple[tuple[str, ...], ...]
    repeats: np.ndarray       # (n,)

    def __len__(self) -> int:
        return len(self.latency)

    def without(self, index: int) -> "_Grid":
        keep = np.arange(len(self)) != index
        return _Grid(self.features[keep], self.batch[keep], self.latency[keep],
                     tuple(o for i, o in enumerate(self.origins) if keep[i]), self.repeats[keep])


def _origins_text(origins: Sequence[str]) -> str:
    """``line 3, line 4, line 5`` → ``lines 3-5``; other origins listed, long lists shortened."""
    lines = [int(o[5:]) for o in origins if o.startswith("line ") and o[5:].isdigit()]
    if origins and len(lines) == len(origins):
        lines.sort()
        runs, start = [], lines[0]
        for prev, cur in zip(lines, lines[1:] + [None]):
            if cur is None or cur != prev + 1:
                runs.append(f"{start}" if start == prev else f"{start}-{prev}")
                start = cur
        label = "line" if len(lines) == 1 else "lines"
        shown = runs if len(runs) <= 4 else runs[:4] + [f"… ({len(runs) - 4} more runs)"]
        return f"{label} {', '.join(shown)}"
    shown = list(origins[:4]) + ([f"… ({len(origins) - 4} more)"] if len(origins) > 4 else [])
    return ", ".join(shown)


def _point_text(phase: str, features: np.ndarray, batch: int) -> str:
    if phase == PREFILL:
        return f"B={batch} Σl={features[1]:.0f}"
    return f"B={batch} Σctx={features[2]:.0f}"


def _group(points: Sequence[MeasuredPoint], phase: str) -> tuple[_Grid, list[str]]:
    groups: dict[tuple, list[MeasuredPoint]] = {}
    for point in points:
        groups.setdefault((point.batch_size, point.features), []).append(point)
    reports, rows = [], []
    for (batch, features), members in sorted(groups.items()):
        latencies = np.array([m.latency_s for m in members])
        median = float(np.median(latencies))
        keep = np.ones(len(members), dtype=bool)
        if len(members) >= 3:
            keep = np.abs(np.log(latencies / median)) <= math.log(REPEAT_FACTOR)
            for m, kept in zip(members, keep):
                if not kept:
                    reports.append(
                        f"{phase} {_point_text(phase, np.array(features), batch)} "
                        f"({_origins_text([m.origin])}): {m.latency_s * 1e3:.4g} ms is more than "
                        f"{REPEAT_FACTOR:g}x from the median {median * 1e3:.4g} ms of its "
                        f"{len(members)} repeats")
            median = float(np.median(latencies[keep]))
        rows.append((features, batch, median, tuple(m.origin for m, k in zip(members, keep) if k),
                     int(keep.sum())))
    grid = _Grid(np.array([r[0] for r in rows], dtype=float).reshape(-1, 3),
                 np.array([r[1] for r in rows], dtype=int),
                 np.array([r[2] for r in rows], dtype=float),
                 tuple(r[3] for r in rows),
                 np.array([r[4] for r in rows], dtype=int))
    return grid, reports


def _remove_outliers(grid: _Grid, phase: str, solutions: Solutions) -> tuple[_Grid, list[str]]:
    reports: list[str] = []
    limit = int(MAX_OUTLIER_SHARE * len(grid))
    threshold = math.log(OUTLIER_FACTOR)
    while len(reports) < limit and len(grid) > MIN_GRID_POINTS:
        worst = None
        for i in range(len(grid)):
            rest = grid.without(i)
            predictions = []
            for basis in (POLY, FLOOR_POLY):
                model = fit_basis(basis, rest.features, rest.batch, rest.latency, solutions)
                if model is not None:
                    predictions.append(float(model.evaluate(grid.features[i:i + 1],
                                                            grid.batch[i:i + 1])[0]))
            if not predictions:
                continue
            deviations = [abs(math.log(grid.latency[i] / p)) for p in predictions]
            closest = int(np.argmin(deviations))
            if deviations[closest] > threshold and (worst is None or deviations[closest] > worst[0]):
                worst = (deviations[closest], i, predictions[closest])
        if worst is None:
            break
        _, i, predicted = worst
        measured = grid.latency[i]
        direction = "below" if measured < predicted else "above"
        ratio = max(measured / predicted, predicted / measured)
        reports.append(
            f"{phase} {_point_text(phase, grid.features[i], int(grid.batch[i]))} "
            f"({_origins_text(grid.origins[i])}): {measured * 1e3:.4g} ms is {ratio:.1f}x {direction} "
            f"the {predicted * 1e3:.4g} ms that fits of the other points predict "
            f"(rule: off by more than {OUTLIER_FACTOR:g}x)")
        grid = grid.without(i)
    return grid, reports


# --- held-out error and selection ----------------------------------------------------------------

def _folds(n: int) -> list[np.ndarray]:
    if n <= LOO_LIMIT:
        return [np.array([i]) for i in range(n)]
    order = np.random.default_rng(FOLD_SEED).permutation(n)
    return [np.sort(part) for part in np.array_split(order, K_FOLDS)]


def _heldout(basis: Basis, x: np.ndarray, batch: np.ndarray, y: np.ndarray,
             solutions: Solutions) -> np.ndarray | None:
    errors = np.empty(len(y))
    for test in _folds(len(y)):
        train = np.ones(len(y), dtype=bool)
        train[test] = False
        model = fit_basis(basis, x[train], batch[train], y[train], solutions)
        if model is None:
            return None
        errors[test] = model.evaluate(x[test], batch[test]) / y[test] - 1
    return errors


@dataclass(frozen=True, kw_only=True)
class BasisScore:
    """One candidate basis and its held-out error (None: some fold could not determine it)."""

    basis: str
    heldout_mape: float | None
    heldout_max_error: float | None


def _select(scored: list[tuple[Basis, np.ndarray | None]]) -> tuple[Basis, np.ndarray] | None:
    best = None
    for level in sorted({b.level for b, _ in scored}):
        contenders = [(float(np.mean(np.abs(e))), b, e) for b, e in scored
                      if b.level == level and e is not None]
        if not contenders:
            continue
        mape, basis, errors = min(contenders, key=lambda c: c[0])
        if best is None or mape < SIMPLER_MARGIN * best[0] - SIMPLER_MARGIN_ABS:
            best = (mape, basis, errors)
    return None if best is None else (best[1], best[2])


@dataclass(frozen=True, kw_only=True)
class PhaseFit:
    """The fitted model of one phase, with the evidence for it."""

    phase: str
    basis: str                       #: name of the chosen basis
    model: LatencyModel              #: the chosen basis fitted on all kept grid points
    grid_points: int                 #: distinct grid points fitted
    measurements: int                #: measured points (repeats) behind them
    heldout_mape: float              #: fraction
    heldout_max_error: float         #: fraction
    fit_mape: float                  #: in-sample, fraction
    max_sum_tokens: float            #: largest Σl (prefill) or Σctx (decode) among fitted points
    outliers: tuple[str, ...] = ()   #: every point left out, with the rule it broke
    scores: tuple[BasisScore, ...] = field(default=())


def _refuse(message: str, file: str | None, what: str, phase: str) -> PdplanError:
    where = f"{what}: " if what else ""
    return PdplanError(f"{where}{message}", file=file, field=phase)


def _prepared(points: Sequence[MeasuredPoint], phase: str, file: str | None,
              what: str, solutions: Solutions) -> tuple[_Grid, list[str]]:
    mine = [p for p in points if p.phase == phase]
    rejected: dict[tuple, list[str]] = {}
    for p in mine:
        if p.rejected:
            rejected.setdefault((p.batch_size, p.features, p.rejected), []).append(p.origin)
    reports = [f"{phase} {_point_text(phase, np.array(features), batch)} "
               f"({_origins_text(origins)}): {reason}"
               for (batch, features, reason), origins in rejected.items()]
    usable = [p for p in mine if not p.rejected]
    grid, repeat_reports = _group(usable, phase)
    names = ", ".join(_FEATURE_TEXT[phase])
    if len(grid) < MIN_GRID_POINTS:
        raise _refuse(f"{phase} points cannot determine a fit: {len(grid)} distinct grid points, "
                      f"need at least {MIN_GRID_POINTS} (3 coefficients over ({names}) and one to "
                      f"hold out); {_what_to_add(grid, phase, MIN_GRID_POINTS - len(grid))}", file, what, phase)
    if not full_rank(grid.features, grid.latency):
        rank = int(np.linalg.matrix_rank(grid.features / np.maximum(np.abs(grid.features).max(0), 1e-300)))
        raise _refuse(f"{phase} points cannot determine a fit: their features ({names}) span "
                      f"only {rank} of 3 dimensions (rank-deficient design); {_what_to_add(grid, phase, 1)}",
                      file, what, phase)
    grid, outlier_reports = _remove_outliers(grid, phase, solutions)
    return grid, reports + repeat_reports + outlier_reports


def _what_to_add(grid: "_Grid", phase: str, missing: int) -> str:
    """The measurements that would make a fit determinable, in the user's terms."""
    length = "prompt length" if phase == PREFILL else "context per request"
    batches = sorted(set(int(b) for b in grid.batch))
    per_request = sorted(set(float(round(x, 6)) for x in grid.features[:, 1 if phase == PREFILL else 2] / grid.batch))
    needs = []
    if len(batches) == 1:
        needs.append(f"another batch size (every point has batch size {batches[0]})")
    if len(per_request) == 1:
        needs.append(f"another {length} (every point has {per_request[0]:g} tokens)")
    if not needs:
        needs.append(f"points at new (batch size, {length}) pairs")
    return f"add at least {missing} measured point{'s' if missing > 1 else ''} at {' and at '.join(needs)}"


def fit_phase(points: Sequence[MeasuredPoint], phase: str, *, file: str | None = None,
              what: str = "", bases: Sequence[Basis] | None = None, extra: Sequence[Basis] = ()) -> PhaseFit:
    """Fit one phase's latency model from measured points (module docstring: the five rules).

    ``file`` and ``what`` (e.g. the shape) name the source in errors; ``bases`` restricts the
    candidates (default :func:`candidate_bases`), ``extra`` adds to them (:data:`OCTAVES`).
    """
    if phase not in PHASES:
        raise InternalError(f"phase must be one of {', '.join(PHASES)}")
    solutions = Solutions()
    grid, reports = _prepared(points, phase, file, what, solutions)
    candidates = (tuple(bases) if bases is not None else candidate_bases(grid.batch)) + tuple(extra)
    scored = [(b, _heldout(b, grid.features, grid.batch, grid.latency, solutions)) for b in candidates]
    chosen = _select(scored)
    if chosen is None:
        raise _refuse(f"{phase} points cannot determine a fit with a point held out: no basis "
                      f"({', '.join(b.name for b in candidates)}) is determined in every fold",
                      file, what, phase)
    basis, errors = chosen
    model = fit_basis(basis, grid.features, grid.batch, grid.latency, solutions)
    assert model is not None  # determined in every fold, so on all points
    in_sample = model.evaluate(grid.features, grid.batch) / grid.latency - 1
    sums = grid.features[:, 1] if phase == PREFILL else grid.features[:, 2]
    return PhaseFit(
        phase=phase, basis=basis.name, model=model, grid_points=len(grid),
        measurements=int(grid.repeats.sum()),
        heldout_mape=float(np.mean(np.abs(errors))), heldout_max_error=float(np.max(np.abs(errors))),
        fit_mape=float(np.mean(np.abs(in_sample))), max_sum_tokens=float(sums.max()),
        outliers=tuple(reports),
        scores=tuple(BasisScore(basis=b.name,
                                heldout_mape=None if e is None else float(np.mean(np.abs(e))),
                                heldout_max_error=None if e is None else float(np.max(np.abs(e))))
                     for b, e in scored),
    )


def selection_heldout_errors(points: Sequence[MeasuredPoint], phase: str, *,
                             file: str | None = None, what: str = "") -> np.ndarray:
    """Relative errors when the basis choice itself is held out (nested cross-validation).

    For each outer fold the basis is chosen by the inner held-out rule on the other grid points
    only, fitted there, and asked to predict the held-out points. Slower than :func:`fit_phase`;
    used by ``benchmarks/fit_quality.py`` to show how much choosing the basis flatters its error.
    """
    solutions = Solutions()
    grid, _ = _prepared(points, phase, file, what, solutions)
    errors = np.full(len(grid), np.nan)
    for test in _folds(len(grid)):
        train = np.ones(len(grid), dtype=bool)
        train[test] = False
        x, b, y = grid.features[train], grid.batch[train], grid.latency[train]
        chosen = _select([(basis, _heldout(basis, x, b, y, solutions)) for basis in candidate_bases(b)])
        if chosen is None:
            continue
        model = fit_basis(chosen[0], x, b, y, solutions)
        errors[test] = model.evaluate(grid.features[test], grid.batch[test]) / grid.latency[test] - 1
    return errors


# --- whole profiles ------------------------------------------------------------------------------

RULES_NOTE = (f"grid latency = median of repeats; a repeat > {REPEAT_FACTOR:g}x from that median and a "
              f"grid point > {OUTLIER_FACTOR:g}x from every fit of the other points are outliers; "
              "held-out = leave-one-out over distinct grid points")


def fit_profile(shape: ShapePoints, *, kv_capacity_tokens: int,
                max_prefill_batch_tokens: int | None = None, concave_decode: bool = False) -> PhaseProfile:
    """Fit both phases of one shape into a profile with provenance.

    ``max_prefill_batch_tokens`` defaults to the largest prompt-token total among the fitted
    prefill points (the model is not trusted beyond what was measured), capped at the KV
    capacity (a prefill batch must fit its KV). ``concave_decode`` lets the decode fit choose
    :data:`OCTAVES` too (a mixture-of-experts step, which grows ever slower in B).
    """
    file = shape.file if shape.file is not None else shape.source
    prefill = fit_phase(shape.points, PREFILL, file=file, what=shape.shape)
    decode = fit_phase(shape.points, DECODE, file=file, what=shape.shape, extra=(OCTAVES,) if concave_decode else ())
    if max_prefill_batch_tokens is None:
        max_prefill_batch_tokens = min(int(prefill.max_sum_tokens), kv_capacity_tokens)
    notes = "; ".join(n for n in (shape.notes, RULES_NOTE) if n)
    return PhaseProfile(
        model=shape.model, gpu=shape.gpu, tp=shape.tp, pp=shape.pp,
        prefill=prefill.model, decode=decode.model,
        kv_capacity_tokens=kv_capacity_tokens,
        max_prefill_batch_tokens=max_prefill_batch_tokens,
        provenance=Provenance(
            source="measured",
            method=f"nnls-relative/prefill:{prefill.basis},decode:{decode.basis}",
            file=shape.source, sha256=shape.sha256,
            points_prefill=prefill.grid_points, points_decode=decode.grid_points,
            mape_prefill=prefill.heldout_mape, max_error_prefill=prefill.heldout_max_error,
            mape_decode=decode.heldout_mape, max_error_decode=decode.heldout_max_error,
            outliers=prefill.outliers + decode.outliers,
            notes=notes,
        ),
    )
