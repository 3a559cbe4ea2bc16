"""Calibration of the roofline's efficiency factors against measured prompt and token times.

:data:`pdplan.latency.roofline.DEFAULT_EFFICIENCY` is the grid point :func:`calibrate_efficiency` picks
on Splitwise's llama2-70b measurements (``benchmarks/roofline_fit.py`` reruns it);
:func:`roofline_errors` reports how far any efficiency setting sits from measured times.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
import pandas as pd

from pdplan.fileio import sha256_file
from pdplan.hardware import GPU
from pdplan.latency.importers import read_splitwise
from pdplan.latency.roofline import DEFAULT_EFFICIENCY, Efficiency, phase_terms
from pdplan.modelspec import ModelSpec
from pdplan.shape import shape_label


@dataclass(frozen=True, kw_only=True)
class CalibrationPoints:
    """Measured phase times, as profile features, for a calibration or an error report."""

    prefill: pd.DataFrame     #: columns gpu, tp, batch, f0, f1, f2 (1, Σl, Σl²), measured_s
    decode: pd.DataFrame      #: same columns, features (1, B, Σctx)
    outliers: tuple[str, ...]
    sha256: str


def load_splitwise_points(path: str | Path, model: str = "llama2-70b",
                          gpus: tuple[str, ...] = ("a100-80gb", "h100-80gb")) -> CalibrationPoints:
    """Splitwise's measured prompt and token times as roofline calibration points.

    The points are the ones :func:`pdplan.latency.importers.read_splitwise` reads for the measured
    profiles (same features, same rejected decode runs), with repeats of one grid point averaged.
    One more rule for prefill: a point whose prompt time is below that of a smaller batch at the
    same prompt length is an outlier (more work cannot take less time) and is dropped, by name.
    """
    rows, outliers = [], set()
    for shape in read_splitwise(path):
        if shape.model != model or shape.gpu not in gpus:
            continue
        for point in shape.points:
            if point.rejected:
                outliers.add(f"{shape.shape} {point.phase} B={point.batch_size}: {point.rejected}")
                continue
            rows.append((point.phase, shape.gpu, shape.tp, point.batch_size, *point.features,
                         point.latency_s))
    frame = pd.DataFrame(rows, columns=["phase", "gpu", "tp", "batch", "f0", "f1", "f2", "measured_s"])
    frame = frame.groupby(["phase", "gpu", "tp", "batch", "f0", "f1", "f2"], sort=True,
                          as_index=False)["measured_s"].mean()
    prefill = frame[frame["phase"] == "prefill"].drop(columns="phase")
    keep = np.ones(len(prefill), dtype=bool)
    prompt = prefill["f1"] / prefill["batch"]
    for _, series in prefill.groupby([prefill["gpu"], prefill["tp"], prompt], sort=True):
        slowest = 0.0
        for index, row in series.sort_values("batch").iterrows():
            if row["measured_s"] < slowest:
                keep[prefill.index.get_loc(index)] = False
                outliers.add(f"{shape_label(row['gpu'], row['tp'], 1, compact=True)} prefill B={row['batch']}x"
                             f"{row['f1'] / row['batch']:.0f}: {row['measured_s'] * 1e3:.0f} ms < "
                             f"{slowest * 1e3:.0f} ms at a smaller batch")
            slowest = max(slowest, row["measured_s"])
    decode = frame[frame["phase"] == "decode"].drop(columns="phase")
    return CalibrationPoints(prefill=prefill[keep].reset_index(drop=True),
                             decode=decode.reset_index(drop=True), outliers=tuple(sorted(outliers)),
                             sha256=sha256_file(path))


Models = ModelSpec | Mapping[str, ModelSpec]


def _model_of(models: Models, frame: pd.DataFrame, i: int) -> ModelSpec:
    """One model for every point, or the model a ``model`` column names."""
    return models if isinstance(models, ModelSpec) else models[frame["model"].iloc[i]]


def _components(frame: pd.DataFrame, models: Models, gpus: Mapping[str, GPU], phase: int) -> np.ndarray:
    """Per point: (compute at 100%, memory at 100%, comm, layers), shape (n, 4)."""
    out = np.empty((len(frame), 4))
    x = frame[["f0", "f1", "f2"]].to_numpy(dtype=float)
    terms = {}
    for i, (g, tp) in enumerate(zip(frame["gpu"], frame["tp"])):
        model = _model_of(models, frame, i)
        key = (model.name, g, int(tp))
        if key not in terms:
            terms[key] = phase_terms(model, gpus[g], int(tp), 1)
        t = terms[key][phase]
        out[i] = (x[i] @ t.compute_s, x[i] @ t.memory_s, x[i] @ t.comm_s, t.layers)
    return out


def roofline_errors(points: CalibrationPoints, model: Models, gpus: Mapping[str, GPU],
                    efficiency: Efficiency = DEFAULT_EFFICIENCY) -> tuple[np.ndarray, np.ndarray]:
    """Signed relative errors ``predicted/measured − 1`` of the roofline, (prefill, decode);
    ``model`` is one model, or models by the name the points' ``model`` column holds."""
    errors = []
    for phase, frame in enumerate((points.prefill, points.decode)):
        c = _components(frame, model, gpus, phase)
        predicted = (np.maximum(c[:, 0] / efficiency.compute, c[:, 1] / efficiency.bandwidth)
                     + c[:, 2] + c[:, 3] * efficiency.layer_overhead_s)
        errors.append(predicted / frame["measured_s"].to_numpy() - 1)
    return errors[0], errors[1]


def calibrate_efficiency(points: CalibrationPoints, model: Models, gpus: Mapping[str, GPU], *,
                         step: float = 0.01, overhead_step_s: float = 10e-6,
                         max_overhead_s: float = 500e-6) -> Efficiency:
    """The grid point minimising the mean of the prefill and the decode MAPE.

    Grid: compute and bandwidth efficiency from ``step`` to 1 in steps of ``step``; per-layer
    cost from 0 to ``max_overhead_s`` in steps of ``overhead_step_s``. Ties go to the first
    point in (overhead, compute, bandwidth) order, so the result is deterministic.
    """
    parts = [(_components(f, model, gpus, phase), f["measured_s"].to_numpy())
             for phase, f in enumerate((points.prefill, points.decode))]
    factors = np.round(np.arange(1, int(round(1 / step)) + 1) * step, 10)
    ec, eb = factors[:, None, None], factors[None, :, None]
    best = (np.inf, None)
    for k in range(int(round(max_overhead_s / overhead_step_s)) + 1):
        overhead = k * overhead_step_s
        score = 0.0
        for c, measured in parts:
            predicted = np.maximum(c[:, 0] / ec, c[:, 1] / eb) + c[:, 2] + c[:, 3] * overhead
            score = score + np.abs(predicted / measured - 1).mean(axis=-1) / 2
        i, j = np.unravel_index(np.argmin(score), score.shape)
        if score[i, j] < best[0] - 1e-12:
            best = (score[i, j], Efficiency(compute=float(factors[i]), bandwidth=float(factors[j]),
                                            layer_overhead_s=round(overhead, 12)))
    return best[1]
