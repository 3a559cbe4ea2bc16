"""NVIDIA Dynamo's pre-deployment profiler output (``raw_data.npz``) read into measured points."""

from __future__ import annotations

import io
import math
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import read_bytes, sha256_file
from pdplan.latency.fit import ShapePoints, decode_point, prefill_point
from pdplan.latency.importers.common import source_label

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
        notes += f"; decode arrays from {source_label(decode_file, None)} (sha256 {sha256_file(decode_file)})"
    return ShapePoints(model=model, gpu=gpu, tp=tp, pp=pp, points=tuple(points),
                       source=source_label(prefill_file, label), sha256=sha256_file(prefill_file),
                       file=str(prefill_file),
                       kv_capacity_tokens=capacity, notes=notes)
