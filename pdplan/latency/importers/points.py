"""pdplan's own points CSV read into measured points, one shape per (tp, pp) it holds."""

from __future__ import annotations

from pathlib import Path

from pdplan.fileio import sha256_file
from pdplan.latency.fit import ShapePoints, decode_point, prefill_point
from pdplan.latency.importers.common import csv_rows, source_label

POINTS_COLUMNS = ("phase", "tp", "pp", "batch_size", "prompt_tokens", "context_tokens", "latency_ms")


def read_points_csv(path: str | Path, *, model: str, gpu: str,
                    label: str | None = None) -> tuple[ShapePoints, ...]:
    """Measured points from pdplan's native CSV, one shape per (tp, pp) it holds.

    Columns ``phase, tp, pp, batch_size, prompt_tokens, context_tokens, latency_ms``; one row is
    one measurement (repeat a row for repeats). Every request of a row's batch has the same
    length: a ``prefill`` row is ``batch_size`` prompts of ``prompt_tokens`` tokens each and
    ``latency_ms`` is the whole batch; a ``decode`` row is one step of ``batch_size`` requests
    holding ``context_tokens`` tokens each (Σctx = batch_size·context_tokens) and ``latency_ms``
    is that step. The column a phase does not use must be empty or 0. The file names no model or
    GPU, so the caller states them.
    """
    rows = csv_rows(path, POINTS_COLUMNS, what="points CSV", allow_extra=False)
    shapes: dict[tuple[int, int], list] = {}
    for row in rows:
        phase = row.text("phase")
        if phase not in ("decode", "prefill"):
            raise row.fail("phase", "must be one of decode, prefill", phase)
        tp, pp = row.integer("tp"), row.integer("pp")
        batch = row.integer("batch_size")
        latency = row.number("latency_ms") / 1e3
        origin = f"line {row.line}"
        if phase == "prefill":
            row.empty_or_zero("context_tokens", "in a prefill row")
            point = prefill_point(batch_size=batch, prompt_tokens=row.integer("prompt_tokens"),
                                  latency_s=latency, origin=origin)
        else:
            row.empty_or_zero("prompt_tokens", "in a decode row")
            point = decode_point(batch_size=batch,
                                 context_tokens=batch * row.integer("context_tokens"),
                                 latency_s=latency, origin=origin)
        shapes.setdefault((tp, pp), []).append(point)
    sha = sha256_file(path)
    return tuple(ShapePoints(model=model, gpu=gpu, tp=tp, pp=pp, points=tuple(points),
                             source=source_label(path, label), sha256=sha, file=str(path),
                             notes="pdplan points CSV")
                 for (tp, pp), points in sorted(shapes.items()))
