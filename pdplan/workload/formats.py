"""Reading and writing trace files: native CSV, Azure LLM trace, Mooncake JSONL, BurstGPT,
lengths-only CSV. Loaders name the file, the 1-based physical line (the header is line 1) and
the field of the first offending value.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
import unicodedata
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import input_file, read_text
from pdplan.workload.model import DEFAULT_BLOCK_TOKENS, Rows, Workload, first_decrease, first_true, max_blocks, require_arrivals

FORMATS = ("azure", "burstgpt", "lengths", "mooncake", "native")
"""Trace formats ``load_trace`` reads, sorted."""

CHUNK_ROWS = 1_000_000
"""Rows per chunk when reading CSV: bounds memory and the rows a parse error rescans."""

_HEAD_BYTES = 1 << 16
_CHUNK_BYTES = 1 << 24


def load_trace(path: str | Path, *, format: str | None = None, sort: bool = False,
               block_tokens: int = DEFAULT_BLOCK_TOKENS) -> Workload:
    """Read a trace file, detecting its format from the header unless ``format`` names one.

    Formats (``FORMATS``):

    - ``native``: CSV ``arrival_s,prompt_tokens,output_tokens[,request_id][,prefix_hashes]``;
      ``prefix_hashes`` holds space-separated integers, one per ``block_tokens`` prompt block.
    - ``azure``: Azure LLM inference CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``; ISO
      timestamps with or without a UTC offset (naive ones are read as UTC); arrivals count
      seconds from the earliest timestamp (the first row of a sorted trace).
    - ``mooncake``: JSONL of ``timestamp`` (ms), ``input_length``, ``output_length``,
      ``hash_ids``.
    - ``burstgpt``: CSV ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``;
      rows with 0 response tokens are failed requests, excluded and counted in
      ``failed_requests``.
    - ``lengths``: CSV ``num_prefill_tokens,num_decode_tokens`` (or ``prompt_tokens,
      output_tokens``) without arrivals; the workload has ``has_arrivals == False``.

    Blank lines are skipped; line numbers in errors stay physical.  Arrivals must be
    non-decreasing unless ``sort`` is true, which sorts stably.  Any rule broken raises a
    ``PdplanError`` naming file, line and field.
    """
    if format is not None and format not in FORMATS:
        raise PdplanError(f"unknown trace format {format!r}; expected one of {', '.join(FORMATS)}")
    if not isinstance(block_tokens, int) or block_tokens < 1:
        raise PdplanError(f"block_tokens must be an integer >= 1, got {block_tokens!r}")
    input_file(path, what="trace", limit=limits.TRACE_BYTES)
    header_line, header = _read_header(path)
    if not header.startswith("{"):
        _check_near_misses(path, header_line, _split_csv(header, path, header_line))
    if format is None:
        format = _detect_format(path, header_line, header)
    if format == "mooncake":
        rows = _load_mooncake(path, block_tokens, sort)
    else:
        table = _CsvFile.open(path, header_line, header)
        rows = _CSV_LOADERS[format](table, block_tokens, sort)
    if sort and rows.arrival_s is not None:
        rows = rows.take(np.argsort(rows.arrival_s, kind="stable"))
    return rows.workload(source=str(path), format=format, block_tokens=block_tokens)


def _read_header(path: str | Path) -> tuple[int, str]:
    """The first non-blank line (1-based number, text) from the head of the file."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError as err:
        raise PdplanError(f"cannot read trace: {err.strerror}", file=path) from None
    nul = head.find(b"\0")
    if nul >= 0:
        raise _binary_error(path, head[:nul].count(b"\n") + 1)
    bare_cr = re.search(rb"\r(?!\n)", head)
    if bare_cr is not None and bare_cr.end() < len(head):
        raise PdplanError("lines end in a bare carriage return (CR, classic Mac); save the trace with "
                          "LF or CRLF line ends", file=path, line=head[:bare_cr.start()].count(b"\n") + 1)
    for number, raw in enumerate(head.split(b"\n"), 1):
        text = _decode_line(path, number, raw)
        if text.strip():
            return number, text.strip()
    raise PdplanError("trace is empty: expected a header line", file=path, line=1)


def _decode_line(path: str | Path, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise PdplanError(f"trace is not UTF-8 text (byte 0x{raw[err.start]:02x})",
                          file=path, line=number) from None


def _binary_error(path: str | Path, line: int) -> PdplanError:
    return PdplanError("trace contains binary data (NUL byte)", file=path, line=line)


_HEADERS = {
    "native": ("arrival_s", "prompt_tokens", "output_tokens"),
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "lengths": ("num_prefill_tokens", "num_decode_tokens"),
}
_LENGTHS_ALIAS = ("prompt_tokens", "output_tokens")


#: Every column name a CSV format knows, required or optional.
_KNOWN_COLUMNS = {name for names in _HEADERS.values() for name in names} | set(_LENGTHS_ALIAS) | {
    "request_id", "prefix_hashes", "Model", "Total tokens", "Log Type"}


def _check_near_misses(path: str | Path, line: int, names: list[str]) -> None:
    """A header name one character away from a known column (a Cyrillic а for a Latin a, a
    zero-width space, one letter off) would silently drop that column: it is an error."""
    for name in names:
        if name in _KNOWN_COLUMNS or len(name) < 4:
            continue
        for known in sorted(_KNOWN_COLUMNS):
            if _one_edit_apart(name, known):
                odd = [f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')} at position {i + 1}"
                       for i, ch in enumerate(name) if not ch.isascii() or unicodedata.category(ch) == "Cf"]
                detail = f" ({'; '.join(odd)})" if odd else ""
                raise PdplanError(f"column {name!r} is one character away from {known!r}{detail}; fix the "
                                  "header or rename the column", file=path, line=line, field=name)


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether one substitution, insertion or deletion turns ``a`` into ``b``."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _detect_format(path: str | Path, header_line: int, header: str) -> str:
    """Name the format from the first line: ``{`` starts JSONL, else CSV column names."""
    if header.startswith("{"):
        return "mooncake"
    names = set(_split_csv(header, path, header_line))
    for name, required in _HEADERS.items():
        if names.issuperset(required):
            return name
    if names.issuperset(_LENGTHS_ALIAS):
        return "lengths"
    expected = "; ".join(f"{name} ({','.join(cols)})" for name, cols in sorted(_HEADERS.items()))
    raise PdplanError(f"unrecognised trace header {header[:80]!r}; expected columns of {expected}, "
                      "mooncake JSONL, or pass --format", file=path, line=header_line)


def _split_csv(text: str, path: str | Path | None = None, line: int | None = None) -> list[str]:
    return [name.strip() for name in _csv_fields(text, path, line)]


def _csv_fields(text: str, path: str | Path | None, line: int | None) -> list[str]:
    """One CSV line's fields; a line the csv module cannot read (a field over its 128 KiB limit,
    a stray quote or carriage return) is an error naming the line."""
    try:
        return next(csv.reader([text], skipinitialspace=True), [])
    except csv.Error as err:
        raise PdplanError(f"cannot read the line as CSV: {err}", file=path, line=line) from None


# --- CSV columns: each kind knows its pandas dtype, its rule, and how to check a value --------

_INT_RE = re.compile(r"[+-]?\d{1,18}", re.ASCII)  # ASCII digits: full-width ones are not numbers here
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)  # finite decimals only
_HASHES_RE = re.compile(r"\s*(?:-?\d{1,19}(?:\s+-?\d{1,19})*)?\s*", re.ASCII)


@dataclass(frozen=True)
class _Column:
    """One CSV column a loader reads: name as in the header, value kind and the rule it obeys."""

    name: str
    kind: str  # "int", "float", "text", "hashes" or "time"
    minimum: int = 1

    @property
    def maximum(self) -> float:
        """Tokens of one request (int), or seconds either side of zero (float)."""
        return limits.MAX_TOKENS_PER_REQUEST if self.kind == "int" else limits.MAX_TRACE_SECONDS

    @property
    def rule(self) -> str:
        return {
            "int": f"must be an integer from {self.minimum} to {self.maximum:,}",
            "float": f"must be a finite number of seconds within ±{self.maximum:g}",
            "text": "must be non-empty",
            "hashes": "must be space-separated integers",
            "time": "must be a timestamp like '2023-11-16 18:17:03.9799600'",
        }[self.kind]

    @property
    def dtype(self) -> str | type:
        return {"int": "int64", "float": "float64"}.get(self.kind, object)

    def value_ok(self, raw: str) -> bool:
        """Per-value check for rows the C parser rejected; ``time`` values are checked by ``convert``."""
        raw = raw.strip()
        if self.kind == "int":
            return _INT_RE.fullmatch(raw) is not None and self.minimum <= int(raw) <= self.maximum
        if self.kind == "float":
            return _FLOAT_RE.fullmatch(raw) is not None and abs(float(raw)) <= self.maximum
        if self.kind == "text":
            return raw != ""
        if self.kind == "hashes":
            return _HASHES_RE.fullmatch(raw) is not None
        return True

    def convert(self, series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """Column values as a numpy array, and the mask of values that break the rule."""
        if self.kind == "int":
            values = series.to_numpy(np.int64)
            return values, (values < self.minimum) | (values > self.maximum)
        if self.kind == "float":
            values = series.to_numpy(np.float64)
            return values, ~(np.abs(values) <= self.maximum)
        if self.kind == "time":
            stamps = pd.to_datetime(series, format="ISO8601", utc=True, errors="coerce")
            values = stamps.dt.tz_convert(None).to_numpy("datetime64[ns]").view(np.int64)
            return values, stamps.isna().to_numpy()
        values = series.to_numpy(object)
        if self.kind == "text":
            return values, series.str.strip().eq("").to_numpy()
        return values, ~series.str.fullmatch(_HASHES_RE).to_numpy(bool)


@dataclass(frozen=True)
class _CsvFile:
    """A CSV trace on disk: its path, header line number and header names."""

    path: str | Path
    header_line: int
    names: tuple[str, ...]

    @classmethod
    def open(cls, path: str | Path, header_line: int, header: str) -> _CsvFile:
        return cls(path, header_line, tuple(_split_csv(header, path, header_line)))

    def require(self, columns: list[_Column], format: str) -> None:
        for column in columns:
            count = self.names.count(column.name)
            if count == 0:
                raise PdplanError(f"missing column {column.name!r} for format {format}; the header "
                                  f"has {', '.join(self.names)}", file=self.path,
                                  line=self.header_line, field=column.name)
            if count > 1:
                raise PdplanError(f"column {column.name!r} appears {count} times in the header",
                                  file=self.path, line=self.header_line, field=column.name)

    def read(self, columns: list[_Column]) -> dict[str, np.ndarray]:
        """Read and check ``columns`` chunk by chunk; the first value that breaks a rule raises,
        naming its line.  Only a chunk the C parser rejects is walked line by line."""
        nul_line = _first_nul_line(self.path)
        if nul_line is not None:
            raise _binary_error(self.path, nul_line)
        parts: dict[str, list[np.ndarray]] = {c.name: [] for c in columns}
        rows = 0
        for frame in self._chunks(columns):
            first_bad = None
            for column in columns:
                values, bad = column.convert(frame[column.name])
                parts[column.name].append(values)
                row = first_true(bad)
                if row is not None and (first_bad is None or row < first_bad[0]):
                    first_bad = (row, column)
            if first_bad is not None:
                raise self.value_error(rows + first_bad[0], first_bad[1])
            rows += len(frame)
        if rows == 0:
            raise PdplanError("trace has a header but no requests", file=self.path, line=self.header_line)
        return {name: np.concatenate(arrays) for name, arrays in parts.items()}

    def _chunks(self, columns: list[_Column]) -> Iterator[pd.DataFrame]:
        """Typed frames of ``CHUNK_ROWS`` rows from pandas' C parser (unused columns as text).

        Every column is read, not only ``columns``, so that a row with extra fields is an error
        rather than silently cut; pandas' warning for that case is raised as an error too.
        """
        used = {c.name: c.dtype for c in columns}
        raw_names = _raw_header(self.path, self.header_line)
        dtypes = {raw: used.get(raw.strip(), object) for raw in raw_names}
        rows, reader = 0, None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", pd.errors.ParserWarning)
                warnings.simplefilter("ignore", RuntimeWarning)  # a cast of text to int: the scan reports it
                reader = pd.read_csv(self.path, engine="c", encoding="utf-8-sig", skipinitialspace=True,
                                     na_filter=False, index_col=False, dtype=dtypes, chunksize=CHUNK_ROWS)
                for frame in reader:
                    yield frame.rename(columns=str.strip)
                    rows += len(frame)
        except (ValueError, OverflowError, pd.errors.ParserWarning) as err:
            self._scan(columns, rows)  # ValueError includes ParserError and UnicodeDecodeError
            raise PdplanError(f"cannot parse trace: {err}", file=self.path) from None
        finally:
            if reader is not None:
                reader.close()

    def _scan(self, columns: list[_Column], from_row: int) -> None:
        """Check rows from ``from_row`` on, one at a time, and raise at the first malformed one."""
        index = [self.names.index(c.name) for c in columns]
        for line, raw in self._data_lines(from_row):
            fields = self._fields(line, raw)
            if len(fields) != len(self.names):
                raise PdplanError(f"row has {len(fields)} fields, the header has {len(self.names)}",
                                  file=self.path, line=line)
            for column, i in zip(columns, index):
                if not column.value_ok(fields[i]):
                    raise PdplanError(f"{column.name} {column.rule}, got {fields[i].strip()!r}",
                                      file=self.path, line=line, field=column.name)

    def _data_lines(self, from_row: int) -> Iterator[tuple[int, bytes]]:
        """(physical line, raw bytes) of data rows ``from_row``, ``from_row + 1``, ...

        Data rows are the non-blank lines after the header, as pandas counts them.
        """
        with open(self.path, "rb") as handle:
            row = -1
            for line, raw in enumerate(handle, 1):
                if line > self.header_line and raw.strip():
                    row += 1
                    if row >= from_row:
                        yield line, raw

    def _fields(self, line: int, raw: bytes) -> list[str]:
        return _csv_fields(_decode_line(self.path, line, raw), self.path, line)

    def locate(self, row: int) -> tuple[int, list[str]]:
        """Physical line and fields of data row ``row`` (0-based, blank lines not counted)."""
        line, raw = next(self._data_lines(row))
        return line, self._fields(line, raw)

    def raw(self, row: int, name: str) -> tuple[int, str]:
        line, fields = self.locate(row)
        i = self.names.index(name)
        return line, fields[i].strip() if i < len(fields) else ""

    def value_error(self, row: int, column: _Column) -> PdplanError:
        line, raw = self.raw(row, column.name)
        return PdplanError(f"{column.name} {column.rule}, got {raw!r}", file=self.path,
                           line=line, field=column.name)

    def check_sorted(self, values: np.ndarray, name: str, sort: bool) -> None:
        """Unless the caller will sort, the first value below its predecessor raises."""
        row = None if sort else first_decrease(values)
        if row is not None:
            before_line, before = self.raw(row - 1, name)
            line, raw = self.raw(row, name)
            raise PdplanError(f"{name} must be non-decreasing, got {raw!r} after {before!r} on line "
                              f"{before_line}; pass --sort to sort stably",
                              file=self.path, line=line, field=name)


def _raw_header(path: str | Path, header_line: int) -> list[str]:
    """Header names as pandas will see them (leading spaces skipped, trailing ones kept)."""
    with open(path, "rb") as handle:
        raw = next(itertools.islice(handle, header_line - 1, None))
    return _csv_fields(_decode_line(path, header_line, raw), path, header_line)


def _first_nul_line(path: str | Path) -> int | None:
    """Line of the first NUL byte, reading the file in large chunks."""
    newlines = 0
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK_BYTES), b""):
            nul = chunk.find(b"\0")
            if nul >= 0:
                return newlines + chunk[:nul].count(b"\n") + 1
            newlines += chunk.count(b"\n")
    return None


def _load_native(table: _CsvFile, block_tokens: int, sort: bool) -> Rows:
    columns = [_Column("arrival_s", "float"), _Column("prompt_tokens", "int"), _Column("output_tokens", "int")]
    table.require(columns, "native")
    has_ids, has_hashes = "request_id" in table.names, "prefix_hashes" in table.names
    columns += [_Column("request_id", "text")] * has_ids + [_Column("prefix_hashes", "hashes")] * has_hashes
    arrays = table.read(columns)
    table.check_sorted(arrays["arrival_s"], "arrival_s", sort)
    if has_ids:
        _check_unique_ids(table, arrays["request_id"])
    values = offsets = None
    if has_hashes:
        values, offsets = _parse_hashes(table, arrays["prefix_hashes"])
        _check_block_counts(table, offsets, arrays["prompt_tokens"], block_tokens)
    return Rows(arrival_s=arrays["arrival_s"], prompt_tokens=arrays["prompt_tokens"],
                 output_tokens=arrays["output_tokens"],
                 request_id=arrays["request_id"] if has_ids else None,
                 hash_values=values, hash_offsets=offsets)


def _check_unique_ids(table: _CsvFile, ids: np.ndarray) -> None:
    repeated = first_true(pd.Series(ids).duplicated().to_numpy())
    if repeated is not None:
        first = int(np.flatnonzero(ids == ids[repeated])[0])
        line, raw = table.raw(repeated, "request_id")
        first_line, _ = table.locate(first)
        raise PdplanError(f"request_id must be unique, got {raw!r} again (first on line {first_line})",
                          file=table.path, line=line, field="request_id")


def _parse_hashes(table: _CsvFile, texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Space-separated integer strings to CSR (values, offsets); each value must fit int64."""
    split = [text.split() for text in texts]
    offsets = np.zeros(len(split) + 1, dtype=np.int64)
    np.cumsum([len(blocks) for blocks in split], out=offsets[1:])
    try:
        values = np.array(list(itertools.chain.from_iterable(split)), dtype=np.int64)
    except OverflowError:
        row = next(i for i, blocks in enumerate(split) if not all(_is_int64(int(b)) for b in blocks))
        line, raw = table.raw(row, "prefix_hashes")
        raise PdplanError(f"prefix_hashes values must lie in [-2**63, 2**63), got {raw!r}",
                          file=table.path, line=line, field="prefix_hashes") from None
    return values, offsets


def _check_block_counts(table: _CsvFile, offsets: np.ndarray, prompt: np.ndarray, block_tokens: int) -> None:
    limit = max_blocks(prompt, block_tokens)
    row = first_true(np.diff(offsets) > limit)
    if row is not None:
        line, _ = table.locate(row)
        raise PdplanError(f"prefix_hashes has {offsets[row + 1] - offsets[row]} blocks, but "
                          f"prompt_tokens {prompt[row]} fills at most {limit[row]} blocks of "
                          f"{block_tokens} tokens", file=table.path, line=line, field="prefix_hashes")


def _load_azure(table: _CsvFile, block_tokens: int, sort: bool) -> Rows:
    columns = [_Column("TIMESTAMP", "time"), _Column("ContextTokens", "int"),
               _Column("GeneratedTokens", "int")]
    table.require(columns, "azure")
    arrays = table.read(columns)
    stamps_ns = arrays["TIMESTAMP"]
    table.check_sorted(stamps_ns, "TIMESTAMP", sort)
    return Rows(arrival_s=(stamps_ns - stamps_ns.min()) / 1e9, prompt_tokens=arrays["ContextTokens"],
                 output_tokens=arrays["GeneratedTokens"])


def _load_burstgpt(table: _CsvFile, block_tokens: int, sort: bool) -> Rows:
    columns = [_Column("Timestamp", "float"), _Column("Request tokens", "int", minimum=0),
               _Column("Response tokens", "int", minimum=0)]
    table.require(columns, "burstgpt")
    total = [_Column("Total tokens", "int", minimum=0)] if "Total tokens" in table.names else []
    arrays = table.read(columns + total)
    table.check_sorted(arrays["Timestamp"], "Timestamp", sort)
    if total:
        row = first_true(arrays["Total tokens"] != arrays["Request tokens"] + arrays["Response tokens"])
        if row is not None:
            line, raw = table.raw(row, "Total tokens")
            raise PdplanError(f"Total tokens must be Request tokens + Response tokens "
                              f"({arrays['Request tokens'][row]} + {arrays['Response tokens'][row]}), got {raw!r}",
                              file=table.path, line=line, field="Total tokens")
    ok = arrays["Response tokens"] > 0
    if not ok.any():
        raise PdplanError(f"no successful requests: all {ok.size} rows have 0 Response tokens",
                          file=table.path, field="Response tokens")
    row = first_true(ok & (arrays["Request tokens"] < 1))
    if row is not None:
        raise table.value_error(row, _Column("Request tokens", "int"))
    return Rows(arrival_s=arrays["Timestamp"][ok], prompt_tokens=arrays["Request tokens"][ok],
                 output_tokens=arrays["Response tokens"][ok], failed_requests=int((~ok).sum()))


def _load_lengths(table: _CsvFile, block_tokens: int, sort: bool) -> Rows:
    names = _HEADERS["lengths"] if "num_prefill_tokens" in table.names else _LENGTHS_ALIAS
    columns = [_Column(names[0], "int"), _Column(names[1], "int")]
    table.require(columns, "lengths")
    arrays = table.read(columns)
    return Rows(prompt_tokens=arrays[names[0]], output_tokens=arrays[names[1]])


_CSV_LOADERS = {"native": _load_native, "azure": _load_azure, "burstgpt": _load_burstgpt,
                "lengths": _load_lengths}


def _load_mooncake(path: str | Path, block_tokens: int, sort: bool) -> Rows:
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


def _is_int64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def _json_int(path: str | Path, line: int, record: dict, key: str) -> int:
    value = _json_field(path, line, record, key)
    if not _is_int64(value) or not 1 <= value <= limits.MAX_TOKENS_PER_REQUEST:
        raise PdplanError(f"{key} must be an integer from 1 to {limits.MAX_TOKENS_PER_REQUEST:,}, got "
                          f"{json.dumps(value)[:40]}", file=path, line=line, field=key)
    return value


def _json_hashes(path: str | Path, line: int, record: dict, prompt: int, block_tokens: int) -> list[int]:
    value = _json_field(path, line, record, "hash_ids")
    if not isinstance(value, list) or not all(_is_int64(v) for v in value):
        raise PdplanError(f"hash_ids must be a list of integers, got {json.dumps(value)[:40]}",
                          file=path, line=line, field="hash_ids")
    limit = -(-prompt // block_tokens)
    if len(value) > limit:
        raise PdplanError(f"hash_ids has {len(value)} blocks, but input_length {prompt} fills at most "
                          f"{limit} blocks of {block_tokens} tokens", file=path, line=line, field="hash_ids")
    return value


# ---------------------------------------------------------------------------------------------
# Writing


def native_csv(workload: Workload) -> str:
    """The workload as native CSV text; arrivals are written in shortest round-trip form, so
    ``load_trace`` gives back the same digest."""
    arrival_s = require_arrivals(workload, "write a native trace")
    header = ["arrival_s", "prompt_tokens", "output_tokens"]
    columns = [[repr(t) for t in arrival_s.tolist()], workload.prompt_tokens.tolist(),
               workload.output_tokens.tolist()]
    if workload.request_id is not None:
        header.append("request_id")
        columns.append(workload.request_id.tolist())
    if workload.hash_values is not None:
        header.append("prefix_hashes")
        blocks = np.split(workload.hash_values, workload.hash_offsets[1:-1])
        columns.append([" ".join(map(str, b.tolist())) for b in blocks])
    lines = _CsvText()
    writer = csv.writer(lines, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(zip(*columns))
    return lines.text()


class _CsvText:
    """Collects what ``csv.writer`` writes."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    def text(self) -> str:
        return "".join(self.parts)
