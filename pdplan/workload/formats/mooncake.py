"""The Mooncake trace: JSONL of ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import read_text
from pdplan.workload.model import Rows, first_decrease, is_int64


def load(path: str | Path, block_tokens: int, sort: bool) -> Rows:
    """Mooncake JSONL: one object per line; ``timestamp`` in ms becomes seconds."""
    times, prompts, outputs, lines, hashes = [], [], [], [], []
    for line, text in enumerate(read_text(path, what="trace", limit=limits.TRACE_BYTES).split("\n"), 1):
        if not text.strip():
            continue
        record = _json_record(path, line, text)
        times.append(_json_number(path, line, record, "timestamp", 1000 * limits.MAX_TRACE_SECONDS))
        prompts.append(_json_int(path, line, record, "input_length"))
        outputs.append(_json_int(path, line, record, "output_length"))
        hashes.append(_json_hashes(path, line, record, prompts[-1], block_tokens))
        lines.append(line)
    if not lines:
        raise PdplanError("trace has no requests", file=path, line=1)
    arrival_s = np.array(times, dtype=np.float64) / 1000.0
    row = None if sort else first_decrease(arrival_s)
    if row is not None:
        raise PdplanError(f"timestamp must be non-decreasing, got {json.dumps(times[row])} after "
                          f"{json.dumps(times[row - 1])} on line {lines[row - 1]}; pass --sort to sort stably",
                          file=path, line=lines[row], field="timestamp")
    offsets = np.zeros(len(hashes) + 1, dtype=np.int64)
    np.cumsum([len(h) for h in hashes], out=offsets[1:])
    values = np.array(list(itertools.chain.from_iterable(hashes)), dtype=np.int64)
    return Rows(arrival_s=arrival_s, prompt_tokens=np.array(prompts, dtype=np.int64),
                 output_tokens=np.array(outputs, dtype=np.int64), hash_values=values,
                 hash_offsets=offsets)


def _json_record(path: str | Path, line: int, text: str) -> dict:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise PdplanError(f"invalid JSON: {err.msg.removesuffix(' at')} at column {err.colno}",
                          file=path, line=line) from None
    except RecursionError:
        raise PdplanError("invalid JSON: nested too deeply", file=path, line=line) from None
    except ValueError:  # an integer of more digits than Python converts
        raise PdplanError("invalid JSON: a number has more than 4,300 digits", file=path, line=line) from None
    if not isinstance(record, dict):
        raise PdplanError(f"each line must be a JSON object, got {text.strip()[:40]!r}", file=path, line=line)
    return record


def _json_field(path: str | Path, line: int, record: dict, key: str) -> object:
    if key not in record:
        raise PdplanError(f"missing field {key!r}", file=path, line=line, field=key)
    return record[key]


def _json_number(path: str | Path, line: int, record: dict, key: str, maximum: float) -> int | float:
    value = _json_field(path, line, record, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) <= maximum:
        raise PdplanError(f"{key} must be a finite number within ±{maximum:g}, got {json.dumps(value)[:40]}",
                          file=path, line=line, field=key)
    return value


def _json_int(path: str | Path, line: int, record: dict, key: str) -> int:
    value = _json_field(path, line, record, key)
    if not is_int64(value) or not 1 <= value <= limits.MAX_TOKENS_PER_REQUEST:
        raise PdplanError(f"{key} must be an integer from 1 to {limits.MAX_TOKENS_PER_REQUEST:,}, got "
                          f"{json.dumps(value)[:40]}", file=path, line=line, field=key)
    return value


def _json_hashes(path: str | Path, line: int, record: dict, prompt: int, block_tokens: int) -> list[int]:
    value = _json_field(path, line, record, "hash_ids")
    if not isinstance(value, list) or not all(is_int64(v) for v in value):
        raise PdplanError(f"hash_ids must be a list of integers, got {json.dumps(value)[:40]}",
                          file=path, line=line, field="hash_ids")
    limit = -(-prompt // block_tokens)
    if len(value) > limit:
        raise PdplanError(f"hash_ids has {len(value)} blocks, but input_length {prompt} fills at most "
                          f"{limit} blocks of {block_tokens} tokens", file=path, line=line, field="hash_ids")
    return value
