"""The families of latency models a fit chooses among, and fitting one of them to grid points.

Each basis is a :class:`~pdplan.latency.profile.LatencyModel` shape over a phase's features: ``poly``
(DistServe's form), ``floor+poly``, ``floor+poly[B>=T]`` (a small- and a large-batch segment) and,
for composed mixture-of-experts decode steps, ``poly/octaves`` (one plane per span of batch sizes).
Coefficients come from non-negative least squares on relative error (:func:`nnls_relative`).
:mod:`pdplan.latency.fit` scores the bases held out and chooses among them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
from scipy.optimize import nnls

from pdplan.errors import InternalError
from pdplan.latency.profile import LatencyModel, Segment

LOO_LIMIT = 40             #: leave-one-out up to this many grid points, K-fold above
MAX_THRESHOLDS = 6         #: segmented bases tried per phase (batch-size thresholds)
_EPS = float(np.finfo(float).eps)


@dataclass(frozen=True, kw_only=True)
class Basis:
    """A family of latency models: optional floor, optional batch-size threshold."""

    floor: bool = False
    threshold: int | None = None   #: first batch size of the large-batch segment
    #: one poly per span between consecutive measured batch sizes (no max with the span below): a
    #: step time concave in B, as a mixture-of-experts decode is while more experts are touched
    octaves: bool = False

    def __post_init__(self):
        if self.threshold is not None and self.threshold < 2:
            raise InternalError("threshold must be >= 2")
        if self.octaves and (self.floor or self.threshold is not None):
            raise InternalError("the octave basis has neither floor nor threshold")

    @property
    def name(self) -> str:
        if self.octaves:
            return "poly/octaves"
        segment = "" if self.threshold is None else f"[B>={self.threshold}]"
        return ("floor+" if self.floor else "") + "poly" + segment

    @property
    def level(self) -> int:
        """0 for poly, 1 for floor+poly, 2 for segmented bases (3 for octaves): the order of preference."""
        return 3 if self.octaves else int(self.floor) + int(self.threshold is not None)


POLY = Basis()
FLOOR_POLY = Basis(floor=True)
#: Composed mixture-of-experts decode steps (:mod:`pdplan.latency.compose.profile`).
OCTAVES = Basis(octaves=True)


def candidate_bases(batch_sizes: Iterable[int]) -> tuple[Basis, ...]:
    """poly, floor+poly, and floor+poly split at up to :data:`MAX_THRESHOLDS` batch sizes.

    Thresholds are the measured batch sizes above the smallest (evenly thinned when there are
    more than MAX_THRESHOLDS of them), so each segment holds measured points.
    """
    sizes = sorted(set(int(b) for b in batch_sizes))[1:]
    if len(sizes) > MAX_THRESHOLDS:
        picks = np.linspace(0, len(sizes) - 1, MAX_THRESHOLDS).round().astype(int)
        sizes = [sizes[i] for i in sorted(set(picks))]
    return (POLY, FLOOR_POLY) + tuple(Basis(floor=True, threshold=t) for t in sizes if t >= 2)


def nnls_relative(design: np.ndarray, latency: np.ndarray, *, free: Sequence[int] = ()) -> np.ndarray:
    """Coefficients β minimising ``Σ((design·β − y)/y)²`` with ``β_j ≥ 0`` except for ``free`` j.

    Relative error weights every point by its own size, so a 60 ms point counts as much as a
    6 s one. Solved with ``scipy.optimize.nnls`` on rows scaled by ``1/y`` against ones; columns
    are scaled to unit maximum first, and a free coefficient is the difference of two
    non-negative ones.
    """
    x = np.asarray(design, dtype=float)
    y = np.asarray(latency, dtype=float)
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    xs = x / scale
    a = np.hstack([xs] + [-xs[:, [j]] for j in free]) / y[:, None]
    solution, _ = nnls(a, np.ones(len(y)), maxiter=100 * a.shape[1])
    beta = solution[:x.shape[1]].copy()
    for k, j in enumerate(free):
        beta[j] -= solution[x.shape[1] + k]
    return beta / scale


class Solutions:
    """Relative-error solutions kept by their rows' bytes, for one phase's fit.

    Leave-one-out refits nearly the same points again and again: with the floor enumeration, the
    points above a fold's k lowest are often another fold's, and the outlier pass fits poly and
    floor+poly on the very folds the held-out scores use. The same bytes give the same
    coefficients, so a kept solution is the one a fresh solve would return.
    """

    def __init__(self):
        self._kept: dict = {}

    def solve(self, design: np.ndarray, latency: np.ndarray, free: Sequence[int] = ()) -> np.ndarray | None:
        """:func:`nnls_relative`'s coefficients, or None when the rows are not :func:`full_rank`."""
        key = (design.shape, tuple(free), design.tobytes(), latency.tobytes())
        if key not in self._kept:
            self._kept[key] = nnls_relative(design, latency, free=free) if full_rank(design, latency) else None
        return self._kept[key]


def _design(basis: Basis, x: np.ndarray, batch: np.ndarray) -> np.ndarray:
    if basis.threshold is None:
        return x
    high = (batch >= basis.threshold).astype(float)
    low = 1.0 - high
    return np.column_stack([low, x[:, 1] * low, high, x[:, 1] * high, x[:, 2]])


def _free_columns(basis: Basis) -> tuple[int, ...]:
    if not basis.floor:
        return ()
    return (0,) if basis.threshold is None else (0, 2)


def full_rank(design: np.ndarray, latency: np.ndarray) -> bool:
    """Whether the relative-error rows determine every column: numpy's ``matrix_rank`` rule (singular
    values above the largest × max(rows, columns) × machine epsilon), without its checks per call."""
    rows, columns = design.shape
    if rows < columns:
        return False
    scale = np.abs(design).max(axis=0)
    if not scale.all():
        return False
    singular = np.linalg.svd(design / scale / latency[:, None], compute_uv=False)
    return bool(singular[-1] > singular[0] * max(rows, columns) * _EPS)


def _to_model(basis: Basis, floor: float | None, beta: np.ndarray) -> LatencyModel:
    floor_piece = () if floor is None else ((float(floor), 0.0, 0.0),)
    if basis.threshold is None:
        pieces = floor_piece + (tuple(float(c) for c in beta),)
        return LatencyModel(segments=(Segment(min_batch=1, pieces_s=pieces),))
    low, high = (tuple(float(c) for c in plane) for plane in _planes(beta))
    return LatencyModel(segments=(
        Segment(min_batch=1, pieces_s=floor_piece + (low,)),
        Segment(min_batch=basis.threshold, pieces_s=floor_piece + (low, high)),
    ))


def _fit_octaves(x: np.ndarray, b: np.ndarray, y: np.ndarray) -> LatencyModel | None:
    """One poly per span [B_i, B_j] of consecutive measured batch sizes, fitted on the points at
    both ends (a span widens until its points determine the poly; a last span that cannot is
    merged into the one before); the span's form holds from B_i to the next span's start."""
    sizes = sorted(set(int(v) for v in b))
    starts, i = [], 0
    while i < len(sizes) - 1:
        j = i + 1
        while j < len(sizes) - 1 and not full_rank(*_span(x, b, y, sizes[i], sizes[j])):
            j += 1
        starts.append((sizes[i], sizes[j]))
        i = j
    while starts and not full_rank(*_span(x, b, y, *starts[-1])):
        if len(starts) == 1:
            return None
        starts[-2:] = [(starts[-2][0], starts[-1][1])]
    if not starts:
        return None
    segments = []
    for lo, hi in starts:
        beta = nnls_relative(*_span(x, b, y, lo, hi))
        segments.append(Segment(min_batch=lo if segments else 1, pieces_s=(tuple(float(c) for c in beta),)))
    return LatencyModel(segments=tuple(segments))


def _span(x: np.ndarray, b: np.ndarray, y: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    inside = (b >= lo) & (b <= hi)
    return x[inside], y[inside]


def _floor_sizes(n: int, columns: int) -> list[int]:
    sizes = list(range(1, n - columns + 1))
    if len(sizes) > LOO_LIMIT:
        sizes = sorted(set(np.linspace(1, n - columns, LOO_LIMIT).round().astype(int).tolist()))
    return sizes


def fit_basis(basis: Basis, features: np.ndarray, batch: np.ndarray,
              latency: np.ndarray, solutions: Solutions | None = None) -> LatencyModel | None:
    """The basis fitted to these points, or None when they cannot determine it (``solutions``: the
    phase's kept solutions, shared by its folds)."""
    solutions = solutions or Solutions()
    x = np.asarray(features, dtype=float)
    b = np.asarray(batch)
    y = np.asarray(latency, dtype=float)
    if basis.octaves:
        return _fit_octaves(x, b, y)
    design = _design(basis, x, b)
    columns = design.shape[1]
    if not basis.floor:
        beta = solutions.solve(design, y)
        return None if beta is None else _to_model(basis, None, beta)
    order = np.argsort(y, kind="stable")
    inverse, inverse_squared = 1 / y[order], 1 / y[order] ** 2   # the floor's sums run over their first k
    pieces = _piece_columns(basis, x, b)
    best = None
    for k in _floor_sizes(len(y), columns):
        rest = order[k:]
        beta = solutions.solve(design[rest], y[rest], free=_free_columns(basis))
        if beta is None:
            continue
        floor = float(inverse[:k].sum() / inverse_squared[:k].sum())
        predicted = np.maximum(floor, pieces(beta))
        sse = float(((predicted / y - 1) ** 2).sum())
        if best is None or sse < best[0] * (1 - 1e-12):
            best = (sse, floor, beta)
    return None if best is None else _to_model(basis, best[1], best[2])


def _piece_columns(basis: Basis, x: np.ndarray, b: np.ndarray):
    """β → each point's latency without the floor, as :func:`_to_model`'s model evaluates it: the
    poly, or below the threshold the low plane and from it the larger of the low and high planes."""
    if basis.threshold is None:
        return lambda beta: x @ beta
    high = b >= basis.threshold

    def pieces(beta: np.ndarray) -> np.ndarray:
        low_plane, high_plane = (x @ plane for plane in _planes(beta))
        return np.where(high, np.maximum(low_plane, high_plane), low_plane)
    return pieces


def _planes(beta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A segmented basis's coefficients as its (small-batch, large-batch) planes; the last column
    (Σctx or Σl²) is shared by both."""
    return beta[[0, 1, 4]], beta[[2, 3, 4]]
