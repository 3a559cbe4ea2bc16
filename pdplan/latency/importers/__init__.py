"""Importers: measured-latency source files read into measured points or into profiles.

Four formats, each a documented reading of someone else's file:

* ``splitwise`` — Splitwise's ``perf_model.csv`` (:func:`read_splitwise`), measured points;
* ``points`` — pdplan's own points CSV (:func:`read_points_csv`), measured points;
* ``dynamo`` — NVIDIA Dynamo's pre-deployment profiler ``raw_data.npz`` (:func:`read_dynamo`),
  measured points;
* ``distserve`` — DistServe's already-fitted ``profiler-*.json`` with ``max_num_tokens.csv``
  (:func:`read_distserve`), profiles directly (the coefficients are kept as DistServe fitted them).

:func:`profiles_from_source` is the one entry point the CLI uses: read, select shapes, fit with
:func:`pdplan.latency.fit.fit_profile`, attach KV capacity. Every malformed row or field raises a
:class:`~pdplan.errors.PdplanError` naming the file, the line and the field.
"""

from __future__ import annotations

from pathlib import Path

from pdplan.errors import PdplanError
from pdplan.hardware import get_gpu
from pdplan.latency.fit import ShapePoints, fit_profile
from pdplan.latency.importers.common import ImportResult
from pdplan.latency.importers.distserve import read_distserve
from pdplan.latency.importers.dynamo import read_dynamo
from pdplan.latency.importers.points import read_points_csv
from pdplan.latency.importers.splitwise import read_splitwise
from pdplan.modelref import get_model
from pdplan.modelspec import ModelSpec, kv_capacity_tokens, shape_rejection

FORMATS = ("distserve", "dynamo", "points", "splitwise")

#: Fraction of HBM the engine may use when the KV capacity comes from the model geometry.
DEFAULT_MEMORY_UTILIZATION = 0.9


def _matches(key: tuple[str, str, int, int], model, gpu, tp, pp) -> bool:
    return ((model is None or key[0] == model) and (gpu is None or key[1] == gpu)
            and (tp is None or key[2] == tp) and (pp is None or key[3] == pp))


def _selection_text(model, gpu, tp, pp) -> str:
    parts = [f"--{name} {value}" for name, value in
             (("model", model), ("gpu", gpu), ("tp", tp), ("pp", pp)) if value is not None]
    return " ".join(parts) or "no selection"


def _geometry_capacity(shape: ShapePoints, memory_utilization: float,
                       spec: ModelSpec | None) -> tuple[int | None, str | None]:
    model = spec if spec is not None and spec.name == shape.model else get_model(shape.model)
    gpu = get_gpu(shape.gpu)
    reason = shape_rejection(model, gpu, shape.tp, shape.pp, memory_utilization=memory_utilization,
                             kv_reserve_tokens=1)
    if reason is not None:
        return None, reason
    return kv_capacity_tokens(model, gpu, shape.tp, shape.pp, memory_utilization), None


def profiles_from_source(path: str | Path, fmt: str, *, model: str | None = None,
                         gpu: str | None = None, tp: int | None = None, pp: int | None = None,
                         label: str | None = None, max_num_tokens: str | Path | None = None,
                         max_num_tokens_label: str | None = None,
                         memory_utilization: float = DEFAULT_MEMORY_UTILIZATION) -> ImportResult:
    """Read ``path`` in format ``fmt`` and make a profile of every selected shape it holds.

    ``model``/``gpu``/``tp``/``pp`` select shapes (``points`` and ``dynamo`` need model and GPU
    since their files do not name them, ``dynamo`` also TP; ``distserve`` needs the GPU). A
    ``model`` ending in ``.yaml`` is a model file, and its ``name`` is what profiles record.
    KV capacity: the source's own when it states one (Dynamo, DistServe), otherwise
    :func:`pdplan.modelspec.kv_capacity_tokens` at ``memory_utilization``; a shape whose weights
    do not fit is skipped with the reason. ``label`` is how the source file is recorded in
    provenance (default: the path as given).
    """
    if fmt not in FORMATS:
        raise PdplanError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}", field="format")

    def need(value, flag: str):
        if value is None:
            raise PdplanError(f"--{flag} is required with --format {fmt} (the file does not say)",
                              field=flag)
        return value

    if fmt == "distserve":
        if max_num_tokens is None:
            max_num_tokens = Path(path).parent / "max_num_tokens.csv"
        result = read_distserve(path, max_num_tokens, gpu=need(gpu, "gpu"), label=label,
                                max_num_tokens_label=max_num_tokens_label)
        chosen = tuple(p for p in result.profiles if _matches(p.key, model, gpu, tp, pp))
        skipped = tuple(s for s in result.skipped
                        if model is None or s.startswith(f"{model} "))
        if not chosen:
            raise _nothing_selected(path, [p.shape for p in result.profiles], skipped,
                                    model, gpu, tp, pp)
        return ImportResult(profiles=chosen, skipped=skipped)

    spec = None
    if model is not None and model.endswith((".yaml", ".yml")):
        spec = get_model(model)   # a user's model file: profiles carry its name
        model = spec.name
    if fmt == "splitwise":
        shapes = read_splitwise(path, label=label)
    elif fmt == "points":
        shapes = read_points_csv(path, model=need(model, "model"), gpu=need(gpu, "gpu"), label=label)
    else:
        shapes = (read_dynamo(path, model=need(model, "model"), gpu=need(gpu, "gpu"),
                              tp=need(tp, "tp"), pp=1 if pp is None else pp, label=label),)
    selected = [s for s in shapes if _matches(s.key, model, gpu, tp, pp)]
    if not selected:
        raise _nothing_selected(path, [s.shape for s in shapes], (), model, gpu, tp, pp)
    profiles, skipped = [], []
    for shape in selected:
        capacity = shape.kv_capacity_tokens
        if capacity is None:
            capacity, reason = _geometry_capacity(shape, memory_utilization, spec)
            if capacity is None:
                skipped.append(f"{shape.shape}: does not fit ({reason})")
                continue
        profiles.append(fit_profile(shape, kv_capacity_tokens=capacity))
    return ImportResult(profiles=tuple(profiles), skipped=tuple(skipped))


def _nothing_selected(path, shapes, skipped, model, gpu, tp, pp) -> PdplanError:
    held = ", ".join(shapes) or "none that fit"
    extra = f"; left out: {'; '.join(skipped)}" if skipped else ""
    return PdplanError(f"no shape matches {_selection_text(model, gpu, tp, pp)} (the file holds: "
                       f"{held}{extra})", file=path)
