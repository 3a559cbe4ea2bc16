"""Importers: measured-latency source files read into measured points or into profiles.

Four formats, each a documented reading of someone else's file:

* ``splitwise`` — Splitwise's ``perf_model.csv`` (:func:`read_splitwise`), measured points;
* ``points`` — pdplan's own points CSV (:func:`read_points_csv`), measured points;
* ``dynamo`` — NVIDIA Dynamo's pre-deployment profiler ``raw_data.npz`` (:func:`read_dynamo`),
  measured points;
* ``distserve`` — DistServe's already-fitted ``profiler-*.json`` with ``max_num_tokens.csv``
  (:func:`read_distserve`), profiles directly (the coefficients are kept as DistServe fitted them).

:func:`profiles_from_source` is the one entry point the CLI uses: read, select shapes, fit with
:func:`pdplan.profile_fit.fit_profile`, attach KV capacity. Every malformed row or field raises a
:class:`~pdplan.errors.PdplanError` naming the file, the line and the field.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import read_bytes, read_text, sha256_file
from pdplan.hardware import get_gpu
from pdplan.modelspec import ModelSpec, get_model, kv_capacity_tokens, shape_rejection
from pdplan.profile_fit import (ShapePoints, decode_point, fit_profile, prefill_point)
from pdplan.profiles import LatencyModel, PhaseProfile, Provenance, Segment

FORMATS = ("distserve", "dynamo", "points", "splitwise")

#: Fraction of HBM the engine may use when the KV capacity comes from the model geometry.
DEFAULT_MEMORY_UTILIZATION = 0.9

#: A Splitwise run whose e2e_time implies more than this many times its decode steps was
#: preempted or restarted; its token_time is not the step time of a batch of that size.
SPLITWISE_E2E_FACTOR = 1.5

#: DistServe's context-stage ``max_tokens_per_batch`` in its examples and launch scripts.
DISTSERVE_MAX_TOKENS_PER_BATCH = 16384

SPLITWISE_COLUMNS = ("model", "hardware", "prompt_size", "batch_size", "token_size", "prompt_time",
                     "token_time", "e2e_time", "tensor_parallel")
POINTS_COLUMNS = ("phase", "tp", "pp", "batch_size", "prompt_tokens", "context_tokens", "latency_ms")
MAX_NUM_TOKENS_COLUMNS = ("model", "tp", "pp", "max_num_tokens")


# --- CSV rows ------------------------------------------------------------------------------------

_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")  # ASCII digits only, and few enough to stay an int64
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")

@dataclass(frozen=True)
class _Row:
    """One CSV record with its file and line, and typed accessors that fail with both."""

    file: str
    line: int
    values: dict[str, str]

    def fail(self, column: str, rule: str, value: Any) -> PdplanError:
        return PdplanError(f"{column} {rule}, got {value!r}", file=self.file, line=self.line,
                           field=column)

    def text(self, column: str) -> str:
        value = self.values[column].strip()
        if not value:
            raise self.fail(column, "must not be empty", value)
        return value

    def integer(self, column: str, minimum: int = 1, maximum: int = limits.MAX_KV_TOKENS) -> int:
        raw = self.values[column].strip()
        if _INTEGER.fullmatch(raw) is None or int(raw) < minimum:
            raise self.fail(column, f"must be an integer >= {minimum}", raw)
        if int(raw) > maximum:
            raise self.fail(column, f"must be an integer <= {maximum:,}", raw)
        return int(raw)

    def number(self, column: str, maximum: float = limits.MAX_LATENCY_MS) -> float:
        raw = self.values[column].strip()
        if _DECIMAL.fullmatch(raw) is None:
            raise self.fail(column, "must be a finite number > 0", raw)
        value = float(raw)
        if not 0 < value <= maximum:
            raise self.fail(column, f"must be a finite number > 0 and <= {maximum:g}", raw)
        return value

    def empty_or_zero(self, column: str, why: str) -> None:
        raw = self.values[column].strip()
        if raw not in ("", "0"):
            raise self.fail(column, f"must be empty or 0 {why}", raw)


def _csv_rows(path: str | Path, required: Sequence[str], *, what: str,
              allow_extra: bool) -> list[_Row]:
    """Parse a CSV with a header; each record keeps its line. Blank lines are skipped."""
    text = read_text(path, what=what, limit=limits.TABLE_BYTES)
    reader = csv.reader(io.StringIO(text))
    file = str(path)
    try:
        header = next(reader)
    except StopIteration:
        raise PdplanError(f"{what} is empty (expected a header: {', '.join(required)})",
                          file=file, line=1) from None
    except csv.Error as err:
        raise PdplanError(f"invalid CSV: {err}", file=file, line=1) from None
    names = [h.strip() for h in header]
    missing = [c for c in required if c not in names]
    if missing:
        raise PdplanError(f"header lacks column(s) {', '.join(missing)} (expected "
                          f"{', '.join(required)})", file=file, line=1, field=missing[0])
    unknown = [n for n in names if n not in required]
    if unknown and not allow_extra:
        raise PdplanError(f"header has unknown column(s) {', '.join(unknown)} (known: "
                          f"{', '.join(sorted(required))})", file=file, line=1, field=unknown[0])
    if len(set(names)) != len(names):
        raise PdplanError("header repeats a column name", file=file, line=1)
    rows = []
    try:
        for record in reader:
            if not record or all(not cell.strip() for cell in record):
                continue
            if len(record) != len(names):
                raise PdplanError(f"row has {len(record)} fields, the header has {len(names)} "
                                  "(truncated or misquoted row?)", file=file, line=reader.line_num,
                                  field=names[min(len(record), len(names) - 1)])
            rows.append(_Row(file, reader.line_num, dict(zip(names, record))))
    except csv.Error as err:
        raise PdplanError(f"invalid CSV: {err}", file=file, line=reader.line_num) from None
    if not rows:
        raise PdplanError(f"{what} has a header but no rows", file=file, line=1)
    return rows


def _label(path: str | Path, label: str | None) -> str:
    return label if label is not None else Path(path).as_posix()


# --- Splitwise perf_model.csv --------------------------------------------------------------------

def read_splitwise(path: str | Path, *, label: str | None = None) -> tuple[ShapePoints, ...]:
    """Measured points of every (model, hardware, TP) in Splitwise's ``perf_model.csv``; PP is 1.

    Columns: ``model, hardware, prompt_size, batch_size, token_size, prompt_time, token_time,
    e2e_time, tensor_parallel`` (the power columns are not read). Each row is one run of
    ``batch_size`` requests of ``prompt_size`` prompt tokens that generate ``token_size`` tokens.

    * **Prefill**: ``prompt_time`` (ms) is one prefill batch of B prompts of ``prompt_size``.
    * **Decode**: ``token_time`` (ms) is the mean time per output token after the first; the data
      bear this reading out: on the uncapped GPUs every batched run (B ≥ 2, 128 tokens) has
      ``e2e_time = prompt_time + token_time·(token_size − 1)`` within 1%, but for llama2-70b TP2
      at batch 32 (A100, +16%) and 64 (13–16×). So the run made
      ``n = (e2e_time − prompt_time)/token_time`` decode steps, and ``token_time`` is the step
      time of a batch of B requests at their mean context. Step i runs with ``prompt_size + i``
      tokens of context, so the mean over steps 1..n is ``prompt_size + (n + 1)/2`` and
      ``Σctx = B·(prompt_size + (n + 1)/2)``. n is the median over the repeats of a grid point,
      at most ``token_size − 1``: long runs stop early (for 1024–8192 tokens ``e2e_time``
      implies a median of about 600 steps — end-of-sequence), and the context they ran at is
      what their time measured.
    * **Rejected decode rows**: a run whose ``e2e_time`` implies more than
      :data:`SPLITWISE_E2E_FACTOR` × (token_size − 1) steps did far more work than its tokens
      explain (preemption and recomputation — llama2-70b TP2 at batch 64 needs 41k KV tokens,
      most of the 51k that 90% of two 80 GiB GPUs hold beside the weights, before activations);
      its token_time is reported as an outlier, never fitted.

    The capped ``h100-80gb-pcap`` rows repeat the uncapped H100's token_time and e2e_time
    (Splitwise found the token phase insensitive to the cap); only their prompt_time differs.
    """
    file = str(path)
    rows = _csv_rows(path, SPLITWISE_COLUMNS, what="Splitwise perf_model CSV", allow_extra=True)
    runs: dict[tuple, list[tuple[_Row, dict]]] = {}
    for row in rows:
        run = {
            "model": row.text("model"), "hardware": row.text("hardware"),
            "tp": row.integer("tensor_parallel"),
            "prompt": row.integer("prompt_size"), "batch": row.integer("batch_size"),
            "tokens": row.integer("token_size", minimum=2),
            "prompt_ms": row.number("prompt_time"), "token_ms": row.number("token_time"),
            "e2e_ms": row.number("e2e_time"),
        }
        if run["e2e_ms"] < run["prompt_ms"] + run["token_ms"]:
            raise row.fail("e2e_time", f"must be at least prompt_time + token_time "
                           f"({run['prompt_ms'] + run['token_ms']:.6g} ms: one decode step)",
                           row.values["e2e_time"].strip())
        key = (run["model"], run["hardware"], run["tp"], run["prompt"], run["batch"], run["tokens"])
        runs.setdefault(key, []).append((row, run))

    sha = sha256_file(path)
    points: dict[tuple[str, str, int], list] = {}
    for (model, hardware, tp, prompt, batch, tokens), members in sorted(runs.items()):
        bucket = points.setdefault((model, hardware, tp), [])
        limit = SPLITWISE_E2E_FACTOR * (tokens - 1)
        steps = [(r["e2e_ms"] - r["prompt_ms"]) / r["token_ms"] for _, r in members]
        kept = [s for s in steps if s <= limit]
        n = min(tokens - 1, float(np.median(kept))) if kept else tokens - 1
        context = batch * (prompt + (n + 1) / 2)
        for (row, run), s in zip(members, steps):
            origin = f"line {row.line}"
            bucket.append(prefill_point(batch_size=batch, prompt_tokens=prompt,
                                        latency_s=run["prompt_ms"] / 1e3, origin=origin))
            rejected = ""
            if s > limit:
                rejected = (f"e2e_time implies more than {SPLITWISE_E2E_FACTOR:g}x the {tokens - 1} "
                            f"decode steps of {tokens} tokens (preempted or restarted run; its "
                            "token_time is not a step time)")
            bucket.append(decode_point(batch_size=batch, context_tokens=context,
                                       latency_s=run["token_ms"] / 1e3, origin=origin,
                                       rejected=rejected))
    notes = ("Splitwise perf_model.csv: prefill = prompt_time of B prompts; decode step = "
             "token_time at Σctx = B·(prompt + (n+1)/2), n = (e2e_time − prompt_time)/token_time "
             f"decode steps (≤ token_size − 1); runs implying > {SPLITWISE_E2E_FACTOR:g}x their steps "
             "are rejected for decode")
    return tuple(
        ShapePoints(model=model, gpu=hardware, tp=tp, pp=1, points=tuple(bucket),
                    source=_label(path, label), sha256=sha, file=file, notes=notes)
        for (model, hardware, tp), bucket in sorted(points.items())
    )


# --- pdplan points CSV ---------------------------------------------------------------------------

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
    rows = _csv_rows(path, POINTS_COLUMNS, what="points CSV", allow_extra=False)
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
                             source=_label(path, label), sha256=sha, file=str(path),
                             notes="pdplan points CSV")
                 for (tp, pp), points in sorted(shapes.items()))


# --- Dynamo profiler raw_data.npz ----------------------------------------------------------------

DYNAMO_PREFILL_ARRAYS = ("prefill_isl", "prefill_ttft")
DYNAMO_DECODE_ARRAYS = ("max_kv_tokens", "x_kv_usage", "y_context_length", "z_itl")
DYNAMO_PREFILL_FILE = Path("selected_prefill_interpolation") / "raw_data.npz"
DYNAMO_DECODE_FILE = Path("selected_decode_interpolation") / "raw_data.npz"


def _load_npz(path: Path) -> dict[str, np.ndarray]:
    data = read_bytes(path, what="Dynamo raw_data.npz", limit=limits.TABLE_BYTES)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:  # unpacked, the arrays stay bounded too
            unpacked = sum(info.file_size for info in archive.infolist())
        if unpacked > limits.TABLE_BYTES:
            raise PdplanError(f"unpacks to {unpacked / 2**20:.0f} MiB, over the {limits.TABLE_BYTES // 2**20} MiB "
                              "an archive may hold", file=path)
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as err:
        raise PdplanError(f"not a readable .npz archive ({err})", file=path) from None


def _npz_vector(arrays: dict[str, np.ndarray], name: str, file: Path, *,
                check: Callable[[float], bool], rule: str) -> np.ndarray:
    if name not in arrays:
        raise PdplanError(f"array {name} is missing (arrays present: {', '.join(sorted(arrays)) or 'none'})",
                          file=file, field=name)
    array = arrays[name]
    if array.ndim != 1 or array.size == 0 or not np.issubdtype(array.dtype, np.number):
        raise PdplanError(f"{name} must be a non-empty 1-D numeric array, got shape "
                          f"{array.shape} of {array.dtype}", file=file, field=name)
    values = array.astype(float)
    for i, v in enumerate(values.tolist()):
        if not (math.isfinite(v) and check(v)):
            raise PdplanError(f"{name}[{i}] must be {rule}, got {v!r}", file=file, field=f"{name}[{i}]")
    return values


def read_dynamo(path: str | Path, *, model: str, gpu: str, tp: int, pp: int = 1,
                label: str | None = None) -> ShapePoints:
    """Measured points from Dynamo's pre-deployment profiler (``profile_sla``) output.

    ``path`` is either one ``.npz`` holding both array sets, or the profiler's results folder,
    read at ``selected_prefill_interpolation/raw_data.npz`` and
    ``selected_decode_interpolation/raw_data.npz``. Times are milliseconds, as Dynamo records them.

    * **Prefill**: ``prefill_ttft[i]`` is one prompt of ``prefill_isl[i]`` tokens (batch 1).
      ``prefill_thpt_per_gpu`` follows from those two and is not read.
    * **Decode**: at ``y_context_length[i]`` tokens of context per request and KV usage
      ``x_kv_usage[i]`` (a fraction of ``max_kv_tokens``), the engine held
      ``x·max_kv_tokens / y`` requests; rounded, that is the batch size B, and the step time is
      ``z_itl[i]`` at ``Σctx = B·y``. A point implying fewer than half a request is refused.
      ``z_thpt_per_gpu`` is not read.
    * KV capacity: ``max_kv_tokens`` (the engine's own count).
    """
    path = Path(path)
    if path.is_dir():
        prefill_file, decode_file = path / DYNAMO_PREFILL_FILE, path / DYNAMO_DECODE_FILE
    else:
        prefill_file = decode_file = path
    prefill_arrays = _load_npz(prefill_file)
    decode_arrays = prefill_arrays if decode_file == prefill_file else _load_npz(decode_file)

    positive = dict(check=lambda v: v > 0, rule="a finite number > 0")
    isl = _npz_vector(prefill_arrays, "prefill_isl", prefill_file, **positive)
    ttft = _npz_vector(prefill_arrays, "prefill_ttft", prefill_file, **positive)
    if len(ttft) != len(isl):
        raise PdplanError(f"prefill_ttft has {len(ttft)} values, prefill_isl {len(isl)}",
                          file=prefill_file, field="prefill_ttft")
    max_kv = _npz_vector(decode_arrays, "max_kv_tokens", decode_file, **positive)
    if len(max_kv) != 1 or max_kv[0] != round(max_kv[0]):
        raise PdplanError(f"max_kv_tokens must hold one integer, got {max_kv.tolist()}",
                          file=decode_file, field="max_kv_tokens")
    usage = _npz_vector(decode_arrays, "x_kv_usage", decode_file, check=lambda v: 0 < v <= 1,
                        rule="a fraction in (0, 1]")
    context = _npz_vector(decode_arrays, "y_context_length", decode_file, **positive)
    itl = _npz_vector(decode_arrays, "z_itl", decode_file, **positive)
    for name, values in (("y_context_length", context), ("z_itl", itl)):
        if len(values) != len(usage):
            raise PdplanError(f"{name} has {len(values)} values, x_kv_usage {len(usage)}",
                              file=decode_file, field=name)
    capacity = int(max_kv[0])

    points = []
    for i, (length, ms) in enumerate(zip(isl, ttft)):
        if length != round(length):
            raise PdplanError(f"prefill_isl[{i}] must be a whole number of tokens, got {length!r}",
                              file=prefill_file, field=f"prefill_isl[{i}]")
        points.append(prefill_point(batch_size=1, prompt_tokens=int(length), latency_s=ms / 1e3,
                                    origin=f"prefill_isl[{i}]"))
    for i, (x, y, ms) in enumerate(zip(usage, context, itl)):
        requests = x * capacity / y
        if requests < 0.5:
            raise PdplanError(f"x_kv_usage[{i}] = {x:g} of {capacity} KV tokens at context {y:g} "
                              f"holds {requests:.2f} requests, less than one",
                              file=decode_file, field=f"x_kv_usage[{i}]")
        batch = max(1, int(round(requests)))
        points.append(decode_point(batch_size=batch, context_tokens=batch * y, latency_s=ms / 1e3,
                                   origin=f"z_itl[{i}]"))
    notes = ("Dynamo profiler raw_data.npz: prefill = prefill_ttft at batch 1; decode step = z_itl "
             "at B = round(x_kv_usage·max_kv_tokens/y_context_length), Σctx = B·y_context_length")
    if decode_file != prefill_file:
        notes += f"; decode arrays from {_label(decode_file, None)} (sha256 {sha256_file(decode_file)})"
    return ShapePoints(model=model, gpu=gpu, tp=tp, pp=pp, points=tuple(points),
                       source=_label(prefill_file, label), sha256=sha256_file(prefill_file),
                       file=str(prefill_file),
                       kv_capacity_tokens=capacity, notes=notes)


# --- DistServe profiler JSON ---------------------------------------------------------------------

DISTSERVE_KEYS = ("decoding_large_small_bs_threshold", "decoding_largebs", "decoding_smallbs", "prefill")


def _json_line(text: str, keys: Sequence[str]) -> int | None:
    """Line of the last of ``keys``, each searched after the previous one (nested JSON keys)."""
    position = 0
    for key in keys:
        found = text.find(json.dumps(key), position)
        if found < 0:
            return None
        position = found
    return text.count("\n", 0, position) + 1


def read_max_num_tokens(path: str | Path) -> dict[tuple[str, int, int], int]:
    """DistServe's ``max_num_tokens.csv``: KV token capacity by (model, tp, pp).

    A shape without a row does not fit in memory.
    """
    table: dict[tuple[str, int, int], int] = {}
    for row in _csv_rows(path, MAX_NUM_TOKENS_COLUMNS, what="max_num_tokens CSV", allow_extra=False):
        key = (row.text("model"), row.integer("tp"), row.integer("pp"))
        if key in table:
            raise row.fail("model", "repeats an earlier (model, tp, pp) row", ",".join(map(str, key)))
        table[key] = row.integer("max_num_tokens")
    return table


def _coefficients(entry: dict, key: str, file: str, path: list[str], text: str) -> tuple[float, ...]:
    value = entry[key]
    if (not isinstance(value, list) or len(value) != 3
            or any(isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c)
                   for c in value)):
        raise PdplanError(f"{'.'.join(path + [key])} must be a list of 3 finite numbers [a, b, c], "
                          f"got {value!r}", file=file, line=_json_line(text, path + [key]),
                          field=".".join(path + [key]))
    return tuple(float(c) for c in value)


@dataclass(frozen=True, kw_only=True)
class ImportResult:
    """Profiles made from one source, and the shapes it holds that could not be made."""

    profiles: tuple[PhaseProfile, ...]
    skipped: tuple[str, ...] = ()      #: one sentence per shape left out, with the reason


def read_distserve(path: str | Path, max_num_tokens_path: str | Path, *, gpu: str,
                   label: str | None = None, max_num_tokens_label: str | None = None) -> ImportResult:
    """Profiles from DistServe's fitted coefficients (ms), one per (model, TP) of the JSON; PP is 1.

    DistServe's forms (``simdistserve/estimators``) and how they map onto pdplan's features:

    * prefill ``[a, b, c]``: ``a + b·Σl + c·Σl²`` — the same features, kept as they are;
    * decode ``[a, b, c]``: ``a + b·Σ(ctx+1) + c·B`` over DistServe's ``(1, Σ(ctx+1), B)``. Its
      sum runs over each request's context plus the token being generated, Σ(ctx+1) = Σctx + B,
      so over pdplan's ``(1, B, Σctx)`` the piece is ``(a, b + c, b)``;
    * ``decoding_smallbs`` holds for B < ``decoding_large_small_bs_threshold`` and
      ``decoding_largebs`` from the threshold up: two segments.

    Model names drop the organisation (``facebook/opt-13b`` → ``opt-13b``). KV capacity is the
    ``max_num_tokens.csv`` row of (model, tp, 1); a shape with no row does not fit and is
    skipped. ``max_prefill_batch_tokens`` is DistServe's context-stage ``max_tokens_per_batch``
    (16384 in its examples), capped at the KV capacity. The JSON names no GPU: the caller does.
    """
    file = str(path)
    text = read_text(path, what="DistServe profiler JSON", limit=limits.JSON_BYTES)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise PdplanError(f"invalid JSON: {err.msg}", file=file, line=err.lineno) from None
    except RecursionError:
        raise PdplanError("invalid JSON: nested too deeply", file=file) from None
    except ValueError:  # an integer of more digits than Python converts
        raise PdplanError("invalid JSON: a number has more than 4,300 digits", file=file) from None
    if not isinstance(data, dict) or not data:
        raise PdplanError("top level must be a non-empty object of model names", file=file, line=1)
    capacities = read_max_num_tokens(max_num_tokens_path)
    sha, table_sha = sha256_file(path), sha256_file(max_num_tokens_path)
    table_label = _label(max_num_tokens_path, max_num_tokens_label)
    profiles, skipped = [], []
    for model_key, by_tp in data.items():
        if not isinstance(by_tp, dict) or not by_tp:
            raise PdplanError(f"{model_key} must be an object of tensor-parallel sizes",
                              file=file, line=_json_line(text, [model_key]), field=model_key)
        model = model_key.rsplit("/", 1)[-1]
        for tp_key, entry in by_tp.items():
            where = [model_key, tp_key]
            line = _json_line(text, where)
            if not tp_key.isdigit() or int(tp_key) < 1:
                raise PdplanError(f"{model_key}.{tp_key}: tensor-parallel size must be an integer "
                                  ">= 1", file=file, line=line, field=f"{model_key}.{tp_key}")
            if not isinstance(entry, dict):
                raise PdplanError(f"{model_key}.{tp_key} must be an object", file=file, line=line,
                                  field=f"{model_key}.{tp_key}")
            missing = [k for k in DISTSERVE_KEYS if k not in entry]
            unknown = sorted(k for k in entry if k not in DISTSERVE_KEYS)
            if missing or unknown:
                problem = (f"lacks {', '.join(missing)}" if missing
                           else f"has unknown key(s) {', '.join(unknown)}")
                raise PdplanError(f"{model_key}.{tp_key} {problem} (known: {', '.join(DISTSERVE_KEYS)})",
                                  file=file, line=line, field=f"{model_key}.{tp_key}")
            threshold = entry["decoding_large_small_bs_threshold"]
            if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
                key = "decoding_large_small_bs_threshold"
                raise PdplanError(f"{model_key}.{tp_key}.{key} must be an integer >= 1, got {threshold!r}",
                                  file=file, line=_json_line(text, where + [key]),
                                  field=f"{model_key}.{tp_key}.{key}")
            prefill = _coefficients(entry, "prefill", file, where, text)
            small = _coefficients(entry, "decoding_smallbs", file, where, text)
            large = _coefficients(entry, "decoding_largebs", file, where, text)
            tp = int(tp_key)
            capacity = capacities.get((model_key, tp, 1))
            if capacity is None:
                skipped.append(f"{model} {gpu} TP{tp} PP1: no row ({model_key}, {tp}, 1) in "
                               f"{table_label}, so it does not fit in memory")
                continue
            profiles.append(PhaseProfile(
                model=model, gpu=gpu, tp=tp, pp=1,
                prefill=distserve_prefill_model(prefill),
                decode=distserve_decode_model(small, large, threshold),
                kv_capacity_tokens=capacity,
                max_prefill_batch_tokens=min(DISTSERVE_MAX_TOKENS_PER_BATCH, capacity),
                provenance=Provenance(
                    source="measured", method="distserve-coefficients",
                    file=_label(path, label), sha256=sha,
                    notes=(f"coefficients as DistServe fitted them for {model_key} TP{tp}; decode "
                           "Σ(ctx+1) = Σctx + B folded into the B coefficient; small-batch piece "
                           f"below B={threshold}; KV capacity from {table_label} (sha256 "
                           f"{table_sha}); max prefill batch = DistServe's max_tokens_per_batch "
                           f"{DISTSERVE_MAX_TOKENS_PER_BATCH} capped at the KV capacity"),
                ),
            ))
    return ImportResult(profiles=tuple(profiles), skipped=tuple(skipped))


def distserve_prefill_model(coefficients_ms: Sequence[float]) -> LatencyModel:
    """DistServe's prefill ``a + b·Σl + c·Σl²`` (ms) as a LatencyModel (seconds)."""
    a, b, c = coefficients_ms
    return LatencyModel(segments=(Segment(min_batch=1, pieces_s=((a / 1e3, b / 1e3, c / 1e3),)),))


def distserve_decode_model(small_ms: Sequence[float], large_ms: Sequence[float],
                           threshold: int) -> LatencyModel:
    """DistServe's decode ``a + b·Σ(ctx+1) + c·B`` (ms), small below ``threshold``, as (1, B, Σctx)."""
    def piece(coefficients):
        a, b, c = coefficients
        return ((a / 1e3, (b + c) / 1e3, b / 1e3),)

    if threshold <= 1:
        return LatencyModel(segments=(Segment(min_batch=1, pieces_s=piece(large_ms)),))
    return LatencyModel(segments=(Segment(min_batch=1, pieces_s=piece(small_ms)),
                                  Segment(min_batch=threshold, pieces_s=piece(large_ms))))


# --- one entry point -----------------------------------------------------------------------------

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
