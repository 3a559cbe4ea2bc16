"""DistServe's already-fitted profiler JSON and ``max_num_tokens.csv`` read into profiles directly
(the coefficients are kept as DistServe fitted them)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import read_text, sha256_file
from pdplan.latency.importers.common import ImportResult, csv_rows, source_label
from pdplan.latency.profile import LatencyModel, PhaseProfile, Provenance, Segment
from pdplan.shape import shape_label

#: DistServe's context-stage ``max_tokens_per_batch`` in its examples and launch scripts.
DISTSERVE_MAX_TOKENS_PER_BATCH = 16384

MAX_NUM_TOKENS_COLUMNS = ("model", "tp", "pp", "max_num_tokens")

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
    for row in csv_rows(path, MAX_NUM_TOKENS_COLUMNS, what="max_num_tokens CSV", allow_extra=False):
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
    table_label = source_label(max_num_tokens_path, max_num_tokens_label)
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
                skipped.append(f"{model} {shape_label(gpu, tp, 1)}: no row ({model_key}, {tp}, 1) in "
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
                    file=source_label(path, label), sha256=sha,
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
