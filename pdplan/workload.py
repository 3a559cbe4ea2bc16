"""Request traces: the ``Workload`` object and everything that reads, summarises, reshapes or makes one.

A workload is one row per request in arrival order: arrival time, prompt and output token
counts, optionally a request id and the prompt's prefix-block hashes.  Loaders validate at the
boundary and name the file, the 1-based physical line (the header is line 1) and the field of
the first offending value; everything downstream trusts the object.

Randomness always comes from an explicit ``numpy.random.Generator`` (or an int seed for
``numpy.random.default_rng``); nothing here touches global random state.
"""

from __future__ import annotations

import csv
import hashlib
import itertools
import json
import math
import re
import warnings
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from pdplan.errors import PdplanError
from pdplan.fileio import read_text

FORMATS = ("azure", "burstgpt", "lengths", "mooncake", "native")
"""Trace formats ``load_trace`` reads, sorted."""

DEFAULT_BLOCK_TOKENS = 512
"""Tokens per prefix-hash block (Mooncake's block size)."""

PEAK_WINDOW_S = 60.0
"""Width of the sliding window behind ``TraceStats.peak_rate_rps``."""

NO_ARRIVALS_HINT = "give it an arrival process with --arrivals poisson|gamma --rate R"

CHUNK_ROWS = 1_000_000
"""Rows per chunk when reading CSV: bounds memory and the rows a parse error rescans."""

_HEAD_BYTES = 1 << 16
_CHUNK_BYTES = 1 << 24


# ---------------------------------------------------------------------------------------------
# The object


@dataclass(frozen=True, kw_only=True, eq=False)
class Workload:
    """A request trace, one row per request, in arrival order.

    Arrays are stored exactly as given.  Compare workloads with ``digest()``, not ``==``.
    """

    prompt_tokens: np.ndarray
    """int64, shape (n,): prompt length of each request, >= 1."""
    output_tokens: np.ndarray
    """int64, shape (n,): tokens each request generates, >= 1."""
    arrival_s: np.ndarray | None = None
    """float64, shape (n,): arrival time in seconds, finite and non-decreasing; None for a
    lengths-only trace, which needs an arrival process before it can be replayed."""
    request_id: np.ndarray | None = None
    """object array of non-empty, unique str, shape (n,), or None."""
    hash_values: np.ndarray | None = None
    """int64: prefix-block hash ids of all requests, concatenated (CSR values), or None."""
    hash_offsets: np.ndarray | None = None
    """int64, shape (n + 1,): request i's blocks are ``hash_values[hash_offsets[i]:hash_offsets[i + 1]]``."""
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    """Prompt tokens covered by one prefix-hash block."""
    source: str | None = None
    """Path the trace was read from, or None when it was made in memory."""
    format: str = "native"
    """Name of the format it was read from (one of ``FORMATS``), or ``"synth"``."""
    failed_requests: int = 0
    """Failed requests found in the source trace and excluded from this workload."""

    def __post_init__(self) -> None:
        n = _check_array("prompt_tokens", self.prompt_tokens, np.int64, None)
        _check_array("output_tokens", self.output_tokens, np.int64, n)
        if n == 0:
            raise PdplanError("workload has no requests", file=self.source)
        for name in ("prompt_tokens", "output_tokens"):
            values = getattr(self, name)
            bad = np.flatnonzero(values < 1)
            if bad.size:
                raise PdplanError(f"{name} must be an integer >= 1, got {values[bad[0]]} "
                                  f"at request {bad[0]}", file=self.source, field=name)
        if self.arrival_s is not None:
            _check_array("arrival_s", self.arrival_s, np.float64, n)
            bad = _first_true(~np.isfinite(self.arrival_s))
            if bad is None:
                bad = _first_decrease(self.arrival_s)
            if bad is not None:
                raise PdplanError(f"arrival_s must be finite and non-decreasing, got "
                                  f"{self.arrival_s[bad]} at request {bad}",
                                  file=self.source, field="arrival_s")
        if self.request_id is not None:
            _check_array("request_id", self.request_id, np.object_, n)
            repeated = _first_true(pd.Series(self.request_id).duplicated().to_numpy())
            if repeated is not None:
                raise PdplanError(f"request_id must be unique, got {self.request_id[repeated]!r} "
                                  f"again at request {repeated}", file=self.source, field="request_id")
        if not isinstance(self.block_tokens, int) or self.block_tokens < 1:
            raise PdplanError(f"block_tokens must be an integer >= 1, got {self.block_tokens!r}")
        if (self.hash_values is None) != (self.hash_offsets is None):
            raise ValueError("hash_values and hash_offsets go together: give both or neither")
        if self.hash_values is not None:
            self._check_hashes(n)
        if not isinstance(self.failed_requests, int) or self.failed_requests < 0:
            raise PdplanError(f"failed_requests must be an integer >= 0, got {self.failed_requests!r}")

    def _check_hashes(self, n: int) -> None:
        _check_array("hash_values", self.hash_values, np.int64, None)
        _check_array("hash_offsets", self.hash_offsets, np.int64, n + 1)
        offsets = self.hash_offsets
        if offsets[0] != 0 or offsets[-1] != self.hash_values.size or np.any(np.diff(offsets) < 0):
            raise ValueError("hash_offsets must rise from 0 to len(hash_values)")
        bad = _first_true(np.diff(offsets) > max_blocks(self.prompt_tokens, self.block_tokens))
        if bad is not None:
            raise PdplanError(f"request {bad} has {offsets[bad + 1] - offsets[bad]} prefix blocks, "
                              f"more than its {self.prompt_tokens[bad]} prompt tokens fill",
                              file=self.source, field="hash_values")

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def has_arrivals(self) -> bool:
        """False for a lengths-only trace."""
        return self.arrival_s is not None

    @property
    def has_prefix_hashes(self) -> bool:
        return self.hash_values is not None

    def digest(self) -> str:
        """Hex sha256 of the request content, for cache keys.

        Covers arrivals, lengths, request ids, prefix hashes and block size in a canonical
        little-endian encoding; not ``source``, ``format`` or ``failed_requests``, so the same
        requests read from two files share a digest.
        """
        h = hashlib.sha256(b"pdplan.workload.v1")
        parts = {
            "arrival_s": None if self.arrival_s is None else self.arrival_s.astype("<f8"),
            "prompt_tokens": self.prompt_tokens.astype("<i8"),
            "output_tokens": self.output_tokens.astype("<i8"),
            "hash_values": None if self.hash_values is None else self.hash_values.astype("<i8"),
            "hash_offsets": None if self.hash_offsets is None else self.hash_offsets.astype("<i8"),
            "block_tokens": np.array([self.block_tokens], dtype="<i8"),
        }
        for name, array in parts.items():
            h.update(f"\0{name}:".encode())
            h.update(b"-" if array is None else array.tobytes())
        h.update(b"\0request_id:")
        if self.request_id is not None:
            h.update(json.dumps(self.request_id.tolist()).encode())
        return h.hexdigest()


def max_blocks(prompt_tokens: np.ndarray, block_tokens: int) -> np.ndarray:
    """Most prefix blocks a prompt can have: ceil(prompt_tokens / block_tokens)."""
    return -(-prompt_tokens // block_tokens)


def _check_array(name: str, array: object, dtype: type, size: int | None) -> int:
    if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype != dtype:
        raise TypeError(f"{name} must be a 1-D numpy array of {np.dtype(dtype)}")
    if size is not None and array.size != size:
        raise ValueError(f"{name} has {array.size} entries, expected {size}")
    return int(array.size)


def _first_true(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def _first_decrease(values: np.ndarray) -> int | None:
    """Index of the first value smaller than its predecessor."""
    hit = _first_true(np.diff(values) < 0)
    return None if hit is None else hit + 1


# ---------------------------------------------------------------------------------------------
# Loading


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
    header_line, header = _read_header(path)
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
    except FileNotFoundError:
        raise PdplanError("trace not found", file=path) from None
    except IsADirectoryError:
        raise PdplanError("trace is a directory, expected a file", file=path) from None
    except OSError as err:
        raise PdplanError(f"cannot read trace: {err.strerror}", file=path) from None
    nul = head.find(b"\0")
    if nul >= 0:
        raise _binary_error(path, head[:nul].count(b"\n") + 1)
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


def _detect_format(path: str | Path, header_line: int, header: str) -> str:
    """Name the format from the first line: ``{`` starts JSONL, else CSV column names."""
    if header.startswith("{"):
        return "mooncake"
    names = set(_split_csv(header))
    for name, required in _HEADERS.items():
        if names.issuperset(required):
            return name
    if names.issuperset(_LENGTHS_ALIAS):
        return "lengths"
    expected = "; ".join(f"{name} ({','.join(cols)})" for name, cols in sorted(_HEADERS.items()))
    raise PdplanError(f"unrecognised trace header {header[:80]!r}; expected columns of {expected}, "
                      "mooncake JSONL, or pass --format", file=path, line=header_line)


def _split_csv(text: str) -> list[str]:
    return [name.strip() for name in next(csv.reader([text], skipinitialspace=True), [])]


@dataclass(frozen=True, kw_only=True, eq=False)
class _Rows:
    """Validated columns on their way to a Workload (sorting happens here, before the checks
    of ``Workload.__post_init__``)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray | None = None
    request_id: np.ndarray | None = None
    hash_values: np.ndarray | None = None
    hash_offsets: np.ndarray | None = None
    failed_requests: int = 0

    def take(self, index: np.ndarray) -> _Rows:
        """The rows at ``index``, in that order (repeats allowed)."""
        values, offsets = self.hash_values, self.hash_offsets
        if values is not None:
            values, offsets = _take_csr(values, offsets, index)
        return _Rows(
            prompt_tokens=self.prompt_tokens[index], output_tokens=self.output_tokens[index],
            arrival_s=None if self.arrival_s is None else self.arrival_s[index],
            request_id=None if self.request_id is None else self.request_id[index],
            hash_values=values, hash_offsets=offsets, failed_requests=self.failed_requests)

    def workload(self, **extra: object) -> Workload:
        return Workload(**self.__dict__, **extra)

    @classmethod
    def of(cls, workload: Workload) -> _Rows:
        return cls(prompt_tokens=workload.prompt_tokens, output_tokens=workload.output_tokens,
                   arrival_s=workload.arrival_s, request_id=workload.request_id,
                   hash_values=workload.hash_values, hash_offsets=workload.hash_offsets,
                   failed_requests=workload.failed_requests)


def _take_csr(values: np.ndarray, offsets: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gather rows ``index`` of a CSR array."""
    counts = np.diff(offsets)[index]
    new_offsets = np.zeros(index.size + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    shift = np.repeat(offsets[:-1][index] - new_offsets[:-1], counts)
    return values[np.arange(new_offsets[-1], dtype=np.int64) + shift], new_offsets


# --- CSV columns: each kind knows its pandas dtype, its rule, and how to check a value --------

_INT_RE = re.compile(r"[+-]?\d{1,18}")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")  # finite decimals only
_HASHES_RE = re.compile(r"\s*(?:-?\d{1,19}(?:\s+-?\d{1,19})*)?\s*")


@dataclass(frozen=True)
class _Column:
    """One CSV column a loader reads: name as in the header, value kind and the rule it obeys."""

    name: str
    kind: str  # "int", "float", "text", "hashes" or "time"
    minimum: int = 1

    @property
    def rule(self) -> str:
        return {
            "int": f"must be an integer >= {self.minimum}",
            "float": "must be a finite number",
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
            return _INT_RE.fullmatch(raw) is not None and int(raw) >= self.minimum
        if self.kind == "float":
            return _FLOAT_RE.fullmatch(raw) is not None
        if self.kind == "text":
            return raw != ""
        if self.kind == "hashes":
            return _HASHES_RE.fullmatch(raw) is not None
        return True

    def convert(self, series: pd.Series) -> tuple[np.ndarray, np.ndarray]:
        """Column values as a numpy array, and the mask of values that break the rule."""
        if self.kind == "int":
            values = series.to_numpy(np.int64)
            return values, values < self.minimum
        if self.kind == "float":
            values = series.to_numpy(np.float64)
            return values, ~np.isfinite(values)
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
        return cls(path, header_line, tuple(_split_csv(header)))

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
                row = _first_true(bad)
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
        return next(csv.reader([_decode_line(self.path, line, raw)], skipinitialspace=True))

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
        row = None if sort else _first_decrease(values)
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
    return next(csv.reader([_decode_line(path, header_line, raw)], skipinitialspace=True))


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


def _load_native(table: _CsvFile, block_tokens: int, sort: bool) -> _Rows:
    columns = [_Column("arrival_s", "float"), _Column("prompt_tokens", "int"),
               _Column("output_tokens", "int")]
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
    return _Rows(arrival_s=arrays["arrival_s"], prompt_tokens=arrays["prompt_tokens"],
                 output_tokens=arrays["output_tokens"],
                 request_id=arrays["request_id"] if has_ids else None,
                 hash_values=values, hash_offsets=offsets)


def _check_unique_ids(table: _CsvFile, ids: np.ndarray) -> None:
    repeated = _first_true(pd.Series(ids).duplicated().to_numpy())
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
    row = _first_true(np.diff(offsets) > limit)
    if row is not None:
        line, _ = table.locate(row)
        raise PdplanError(f"prefix_hashes has {offsets[row + 1] - offsets[row]} blocks, but "
                          f"prompt_tokens {prompt[row]} fills at most {limit[row]} blocks of "
                          f"{block_tokens} tokens", file=table.path, line=line, field="prefix_hashes")


def _load_azure(table: _CsvFile, block_tokens: int, sort: bool) -> _Rows:
    columns = [_Column("TIMESTAMP", "time"), _Column("ContextTokens", "int"),
               _Column("GeneratedTokens", "int")]
    table.require(columns, "azure")
    arrays = table.read(columns)
    stamps_ns = arrays["TIMESTAMP"]
    table.check_sorted(stamps_ns, "TIMESTAMP", sort)
    return _Rows(arrival_s=(stamps_ns - stamps_ns.min()) / 1e9, prompt_tokens=arrays["ContextTokens"],
                 output_tokens=arrays["GeneratedTokens"])


def _load_burstgpt(table: _CsvFile, block_tokens: int, sort: bool) -> _Rows:
    columns = [_Column("Timestamp", "float"), _Column("Request tokens", "int", minimum=0),
               _Column("Response tokens", "int", minimum=0)]
    table.require(columns, "burstgpt")
    arrays = table.read(columns)
    table.check_sorted(arrays["Timestamp"], "Timestamp", sort)
    ok = arrays["Response tokens"] > 0
    if not ok.any():
        raise PdplanError(f"no successful requests: all {ok.size} rows have 0 Response tokens",
                          file=table.path, field="Response tokens")
    row = _first_true(ok & (arrays["Request tokens"] < 1))
    if row is not None:
        raise table.value_error(row, _Column("Request tokens", "int"))
    return _Rows(arrival_s=arrays["Timestamp"][ok], prompt_tokens=arrays["Request tokens"][ok],
                 output_tokens=arrays["Response tokens"][ok], failed_requests=int((~ok).sum()))


def _load_lengths(table: _CsvFile, block_tokens: int, sort: bool) -> _Rows:
    names = _HEADERS["lengths"] if "num_prefill_tokens" in table.names else _LENGTHS_ALIAS
    columns = [_Column(names[0], "int"), _Column(names[1], "int")]
    table.require(columns, "lengths")
    arrays = table.read(columns)
    return _Rows(prompt_tokens=arrays[names[0]], output_tokens=arrays[names[1]])


_CSV_LOADERS = {"native": _load_native, "azure": _load_azure, "burstgpt": _load_burstgpt,
                "lengths": _load_lengths}


def _load_mooncake(path: str | Path, block_tokens: int, sort: bool) -> _Rows:
    """Mooncake JSONL: one object per line; ``timestamp`` in ms becomes seconds."""
    times, prompts, outputs, lines, hashes = [], [], [], [], []
    for line, text in enumerate(read_text(path, what="trace").split("\n"), 1):
        if not text.strip():
            continue
        record = _json_record(path, line, text)
        times.append(_json_number(path, line, record, "timestamp"))
        prompts.append(_json_int(path, line, record, "input_length"))
        outputs.append(_json_int(path, line, record, "output_length"))
        hashes.append(_json_hashes(path, line, record, prompts[-1], block_tokens))
        lines.append(line)
    if not lines:
        raise PdplanError("trace has no requests", file=path, line=1)
    arrival_s = np.array(times, dtype=np.float64) / 1000.0
    row = None if sort else _first_decrease(arrival_s)
    if row is not None:
        raise PdplanError(f"timestamp must be non-decreasing, got {json.dumps(times[row])} after "
                          f"{json.dumps(times[row - 1])} on line {lines[row - 1]}; pass --sort to sort stably",
                          file=path, line=lines[row], field="timestamp")
    offsets = np.zeros(len(hashes) + 1, dtype=np.int64)
    np.cumsum([len(h) for h in hashes], out=offsets[1:])
    values = np.array(list(itertools.chain.from_iterable(hashes)), dtype=np.int64)
    return _Rows(arrival_s=arrival_s, prompt_tokens=np.array(prompts, dtype=np.int64),
                 output_tokens=np.array(outputs, dtype=np.int64), hash_values=values,
                 hash_offsets=offsets)


def _json_record(path: str | Path, line: int, text: str) -> dict:
    try:
        record = json.loads(text)
    except json.JSONDecodeError as err:
        raise PdplanError(f"invalid JSON: {err.msg.removesuffix(' at')} at column {err.colno}",
                          file=path, line=line) from None
    if not isinstance(record, dict):
        raise PdplanError(f"each line must be a JSON object, got {text.strip()[:40]!r}", file=path, line=line)
    return record


def _json_field(path: str | Path, line: int, record: dict, key: str) -> object:
    if key not in record:
        raise PdplanError(f"missing field {key!r}", file=path, line=line, field=key)
    return record[key]


def _json_number(path: str | Path, line: int, record: dict, key: str) -> int | float:
    value = _json_field(path, line, record, key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PdplanError(f"{key} must be a finite number, got {json.dumps(value)}",
                          file=path, line=line, field=key)
    return value


def _is_int64(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def _json_int(path: str | Path, line: int, record: dict, key: str) -> int:
    value = _json_field(path, line, record, key)
    if not _is_int64(value) or value < 1:
        raise PdplanError(f"{key} must be an integer >= 1, got {json.dumps(value)}",
                          file=path, line=line, field=key)
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
    arrival_s = _require_arrivals(workload, "write a native trace")
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


def _require_arrivals(workload: Workload, action: str) -> np.ndarray:
    if workload.arrival_s is None:
        raise PdplanError(f"cannot {action}: the {workload.format} trace has no arrival times "
                          f"(lengths only); {NO_ARRIVALS_HINT}", file=workload.source)
    return workload.arrival_s


# ---------------------------------------------------------------------------------------------
# Statistics


@dataclass(frozen=True, kw_only=True)
class LengthStats:
    """Summary of a token-count column."""

    mean: float
    p50: float
    p90: float
    p99: float
    max: int

    @classmethod
    def of(cls, tokens: np.ndarray) -> LengthStats:
        """Percentiles use numpy's default linear interpolation."""
        p50, p90, p99 = np.percentile(tokens, [50, 90, 99])
        return cls(mean=float(tokens.mean()), p50=float(p50), p90=float(p90), p99=float(p99),
                   max=int(tokens.max()))


@dataclass(frozen=True, kw_only=True)
class TraceStats:
    """What a trace looks like; arrival-based fields are None for a lengths-only trace.

    Definitions (n requests, arrivals a_0 <= ... <= a_{n-1}):

    - ``duration_s`` = a_{n-1} - a_0.
    - ``mean_rate_rps`` = n / duration_s (None when duration_s is 0).
    - ``peak_rate_rps``: the largest number of arrivals in any half-open window [t, t + 60 s),
      divided by 60 s.  A trace shorter than the window has no full window; then it is
      n / duration_s, the same as ``mean_rate_rps``.
    - ``interarrival_cv``: population standard deviation over mean of the n - 1 gaps
      a_{i+1} - a_i (None with fewer than 2 gaps or a zero mean gap).
    - ``prefix_reuse_fraction``: a prefix block is reused when its hash id appeared in an
      earlier request (earlier in file order; repeats inside one request do not count);
      reused blocks / all blocks.  None without prefix hashes.
    """

    requests: int
    duration_s: float | None
    mean_rate_rps: float | None
    peak_rate_rps: float | None
    interarrival_cv: float | None
    prompt_tokens: LengthStats
    output_tokens: LengthStats
    prefix_reuse_fraction: float | None
    failed_requests: int
    format: str
    source: str | None
    has_arrivals: bool
    digest: str
    notes: tuple[str, ...] = field(default=())
    """Plain-language reasons for every None above, and other caveats."""

    def to_dict(self) -> dict:
        """Plain dict for ``--json``; keys in the documented order."""
        result = asdict(self)
        result["notes"] = list(self.notes)
        return result


def trace_stats(workload: Workload) -> TraceStats:
    """Summarise a workload; see ``TraceStats`` for the exact definitions."""
    notes = []
    duration_s = mean_rate = peak_rate = cv = None
    if workload.arrival_s is None:
        notes.append("no arrival times (lengths-only trace): duration_s, mean_rate_rps, "
                     f"peak_rate_rps and interarrival_cv are null; {NO_ARRIVALS_HINT}")
    else:
        arrival_s = workload.arrival_s
        duration_s = float(arrival_s[-1] - arrival_s[0])
        cv = interarrival_cv(arrival_s)
        if duration_s > 0:
            mean_rate = len(workload) / duration_s
            peak_rate = peak_rate_rps(arrival_s)
            if duration_s < PEAK_WINDOW_S:
                notes.append(f"trace spans {duration_s:.3g} s, shorter than the {PEAK_WINDOW_S:g} s "
                             "peak window: peak_rate_rps is requests / duration_s")
        else:
            notes.append("all arrivals fall at one instant: mean_rate_rps and peak_rate_rps are null")
        if cv is None:
            notes.append("fewer than 2 inter-arrival gaps or a zero mean gap: interarrival_cv is null")
    reuse = prefix_reuse_fraction(workload)
    if workload.hash_values is None:
        notes.append("no prefix hashes: prefix_reuse_fraction is null")
    if workload.failed_requests:
        notes.append(f"{workload.failed_requests} failed requests (0 response tokens) in the source "
                     "were excluded from the workload")
    return TraceStats(
        requests=len(workload), duration_s=duration_s, mean_rate_rps=mean_rate,
        peak_rate_rps=peak_rate, interarrival_cv=cv,
        prompt_tokens=LengthStats.of(workload.prompt_tokens),
        output_tokens=LengthStats.of(workload.output_tokens),
        prefix_reuse_fraction=reuse, failed_requests=workload.failed_requests,
        format=workload.format, source=workload.source, has_arrivals=workload.has_arrivals,
        digest=workload.digest(), notes=tuple(notes))


def peak_rate_rps(arrival_s: np.ndarray, window_s: float = PEAK_WINDOW_S) -> float | None:
    """Most arrivals in any half-open window [t, t + window_s), per second.

    The busiest window can always start at an arrival, so it is max_i #{j : a_i <= a_j <
    a_i + window_s} / window_s.  For a trace shorter than the window: n / duration (None if 0).
    """
    duration_s = float(arrival_s[-1] - arrival_s[0])
    if duration_s < window_s:
        return arrival_s.size / duration_s if duration_s > 0 else None
    ends = np.searchsorted(arrival_s, arrival_s + window_s, side="left")
    return int((ends - np.arange(arrival_s.size)).max()) / window_s


def interarrival_cv(arrival_s: np.ndarray) -> float | None:
    """Population std / mean of the gaps between consecutive arrivals."""
    gaps = np.diff(arrival_s)
    if gaps.size < 2 or gaps.mean() <= 0:
        return None
    return float(gaps.std() / gaps.mean())


def prefix_reuse_fraction(workload: Workload) -> float | None:
    """Share of prefix blocks whose hash id appeared in an earlier request."""
    if workload.hash_values is None or workload.hash_values.size == 0:
        return None
    owner = np.repeat(np.arange(len(workload)), np.diff(workload.hash_offsets))
    _, first, inverse = np.unique(workload.hash_values, return_index=True, return_inverse=True)
    reused = owner[first][inverse] < owner
    return float(reused.mean())


# ---------------------------------------------------------------------------------------------
# Arrival transforms


def _generator(rng: np.random.Generator | int) -> np.random.Generator:
    if isinstance(rng, np.random.Generator):
        return rng
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        if rng < 0:
            raise PdplanError(f"seed must be an integer >= 0, got {int(rng)}", field="seed")
        return np.random.default_rng(int(rng))
    raise TypeError("rng must be a numpy.random.Generator or an int seed")


def _positive(name: str, value: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise PdplanError(f"{name} must be a finite number > 0, got {value!r}", field=name)
    return float(value)


def rescale_rate(workload: Workload, rate_rps: float) -> Workload:
    """Scale every inter-arrival gap by one factor so that ``mean_rate_rps`` becomes ``rate_rps``.

    The burst shape (inter-arrival CV, relative order) is kept; the first arrival stays put.
    """
    rate_rps = _positive("rate_rps", rate_rps)
    arrival_s = _require_arrivals(workload, "rescale arrivals")
    if float(arrival_s[-1] - arrival_s[0]) <= 0:
        raise PdplanError(f"cannot rescale: all {len(workload)} arrivals fall at one instant",
                          file=workload.source, field="arrival_s")
    return _replace(workload, arrival_s=rescaled_arrivals(arrival_s, rate_rps))


def rescaled_arrivals(arrival_s: np.ndarray, rate_rps: float) -> np.ndarray:
    """Arrivals with every gap scaled by one factor so the mean rate n / (last − first) becomes
    ``rate_rps``; the first arrival stays put. Needs at least two distinct arrival times."""
    factor = arrival_s.size / (rate_rps * float(arrival_s[-1] - arrival_s[0]))
    return arrival_s[0] + (arrival_s - arrival_s[0]) * factor


def _replace(workload: Workload, *, rows: _Rows | None = None, **fields: object) -> Workload:
    """A new workload with ``rows`` (default: the same requests) and ``fields`` changed."""
    rows = _Rows.of(workload) if rows is None else rows
    base = {"source": workload.source, "format": workload.format,
            "block_tokens": workload.block_tokens}
    merged = {**rows.__dict__, **base, **fields}
    return Workload(**merged)


def head(workload: Workload, n: int) -> Workload:
    """The first ``n`` requests, in trace order (all of them when the trace is shorter)."""
    if n >= len(workload):
        return workload
    return _replace(workload, rows=_Rows.of(workload).take(np.arange(n)))


def thin(workload: Workload, n: int, *, rng: np.random.Generator | int) -> Workload:
    """``n`` requests drawn uniformly without replacement, kept in trace order (all of them when
    the trace is shorter): the trace's rate over time survives, at 1/k of its density."""
    if n >= len(workload):
        return workload
    keep = np.sort(_generator(rng).choice(len(workload), size=n, replace=False))
    return _replace(workload, rows=_Rows.of(workload).take(keep))


def poisson_resample(workload: Workload, *, rng: np.random.Generator | int, window: int = 16) -> Workload:
    """The trace's requests on new Poisson arrivals that follow the trace's own rate over time.

    The arrivals are cut into windows of ``window`` consecutive requests. Each request lands in a
    window with probability proportional to the window's count and at a uniform time inside it:
    a Poisson process whose rate is the trace's windowed rate, conditioned on the same total.
    Bursts longer than a window survive; the order inside one is redrawn. Lengths (and prefix
    hashes) stay in trace order; the span and mean rate are the trace's.
    """
    arrival_s = _require_arrivals(workload, "resample arrivals")
    n = len(workload)
    edges_at = np.unique(np.append(np.arange(0, n, window), n - 1))
    edges = arrival_s[edges_at]
    counts = np.diff(edges_at).astype(float)
    counts[-1] += 1  # the last window also holds the last arrival
    generator = _generator(rng)
    which = generator.choice(len(counts), size=n, p=counts / counts.sum()) if len(counts) else np.zeros(n, int)
    width = np.diff(edges) if len(edges) > 1 else np.zeros(1)
    times = np.sort(edges[which] + generator.random(n) * width[which])
    return _replace(workload, arrival_s=times)


def window(workload: Workload, *, start_s: float = 0.0, duration_s: float = math.inf) -> Workload:
    """Requests arriving in [start_s, start_s + duration_s), both measured from the first arrival.

    Arrivals are shifted so that the window opens at 0.
    """
    if not (math.isfinite(start_s) and start_s >= 0):
        raise PdplanError(f"start_s must be a finite number >= 0, got {start_s!r}", field="start_s")
    if not duration_s > 0:
        raise PdplanError(f"duration_s must be > 0, got {duration_s!r}", field="duration_s")
    arrival_s = _require_arrivals(workload, "select a time window")
    offset = arrival_s - arrival_s[0]
    keep = np.flatnonzero((offset >= start_s) & (offset < start_s + duration_s))
    if keep.size == 0:
        raise PdplanError(f"window [{start_s:g}, {start_s + duration_s:g}) s holds no requests; the "
                          f"trace spans {offset[-1]:g} s", file=workload.source)
    rows = _Rows.of(workload).take(keep)
    return _replace(workload, rows=rows, arrival_s=offset[keep] - start_s)


def gamma_arrivals(n: int, *, rate_rps: float, cv: float, rng: np.random.Generator | int) -> np.ndarray:
    """n arrival times starting at 0 with i.i.d. Gamma gaps of mean 1/rate_rps and the given CV.

    Gamma shape 1/cv**2, scale cv**2/rate_rps; cv = 1 is a Poisson process.  Times are
    rounded to whole microseconds (rounding keeps them non-decreasing), so written traces stay
    short and reload exactly.
    """
    if not (isinstance(n, int) and n >= 1):
        raise PdplanError(f"number of requests must be an integer >= 1, got {n!r}", field="n")
    rate_rps, cv = _positive("rate_rps", rate_rps), _positive("cv", cv)
    gaps = _generator(rng).gamma(shape=1.0 / cv**2, scale=cv**2 / rate_rps, size=n - 1)
    times = np.zeros(n, dtype=np.float64)
    np.cumsum(gaps, out=times[1:])
    return np.round(times, 6)


def poisson_arrivals(n: int, *, rate_rps: float, rng: np.random.Generator | int) -> np.ndarray:
    """n Poisson arrival times at ``rate_rps`` starting at 0 (Gamma gaps with CV 1 are exponential)."""
    return gamma_arrivals(n, rate_rps=rate_rps, cv=1.0, rng=rng)


def replace_arrivals(workload: Workload, *, rate_rps: float, cv: float = 1.0, n_requests: int | None = None,
                     rng: np.random.Generator | int) -> Workload:
    """A new arrival process (Poisson for cv = 1, else Gamma) with lengths from the trace.

    Draws ``n_requests`` (default: as many as the trace) rows with replacement, then the
    arrival gaps, both from ``rng``.  Prefix hashes travel with their rows; request ids are
    dropped because resampled rows repeat.  Works on lengths-only traces.
    """
    rng = _generator(rng)
    n = len(workload) if n_requests is None else n_requests
    if not (isinstance(n, int) and n >= 1):
        raise PdplanError(f"n_requests must be an integer >= 1, got {n!r}", field="n_requests")
    rows = _Rows.of(workload).take(rng.integers(0, len(workload), size=n))
    rows = _Rows(**{**rows.__dict__, "request_id": None})
    return _replace(workload, rows=rows, arrival_s=gamma_arrivals(n, rate_rps=rate_rps, cv=cv, rng=rng))


# ---------------------------------------------------------------------------------------------
# Synthesis

LENGTH_KINDS = ("const", "lognormal", "uniform")

MAX_SPEC_TOKENS = 2**53
"""Largest token count a length spec may name or draw (spec numbers are floats, exact up to 2**53)."""

LENGTH_SPEC_HELP = (
    "const:N (every request N tokens); uniform:LO:HI (integers LO..HI inclusive); "
    "lognormal:MEAN:SIGMA[:MAX] (MEAN tokens before rounding, SIGMA of the log; rounded to the "
    "nearest integer and clipped to [1, MAX], MAX unbounded if omitted)"
)


@dataclass(frozen=True, kw_only=True)
class LengthDist:
    """A distribution of token counts, written ``KIND:PARAMS`` (see ``LENGTH_SPEC_HELP``)."""

    kind: str
    params: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.kind not in LENGTH_KINDS:
            raise PdplanError(f"unknown length kind {self.kind!r}; expected one of {', '.join(LENGTH_KINDS)}")
        arity = {"const": (1,), "uniform": (2,), "lognormal": (2, 3)}[self.kind]
        if len(self.params) not in arity:
            raise PdplanError(f"{self.kind} takes {' or '.join(map(str, arity))} parameters, "
                              f"got {len(self.params)}")
        self._check_params()

    def _check_params(self) -> None:
        p = self.params
        counts = (p[0], *p[2:]) if self.kind == "lognormal" else p  # lognormal's SIGMA is no count
        if any(abs(v) > MAX_SPEC_TOKENS for v in counts):
            raise PdplanError(f"token counts must be <= {MAX_SPEC_TOKENS}, got "
                              f"{':'.join(f'{v:g}' for v in p)}")
        if self.kind == "const" and not (_whole(p[0]) and p[0] >= 1):
            raise PdplanError(f"const N must be an integer >= 1, got {p[0]:g}")
        if self.kind == "uniform" and not (_whole(p[0]) and _whole(p[1]) and 1 <= p[0] <= p[1]):
            raise PdplanError(f"uniform needs integers 1 <= LO <= HI, got {p[0]:g}:{p[1]:g}")
        if self.kind == "lognormal":
            if not (p[0] >= 1 and p[1] >= 0):
                raise PdplanError(f"lognormal needs MEAN >= 1 and SIGMA >= 0, got {p[0]:g}:{p[1]:g}")
            if len(p) == 3 and not (_whole(p[2]) and p[2] >= 1):
                raise PdplanError(f"lognormal MAX must be an integer >= 1, got {p[2]:g}")

    def sample(self, n: int, rng: np.random.Generator | int) -> np.ndarray:
        """n token counts (int64) drawn from ``rng``."""
        rng, p = _generator(rng), self.params
        if self.kind == "const":
            return np.full(n, int(p[0]), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(p[0]), int(p[1]), size=n, endpoint=True, dtype=np.int64)
        mean, sigma = p[0], p[1]
        draws = rng.lognormal(mean=math.log(mean) - sigma**2 / 2, sigma=sigma, size=n)
        upper = p[2] if len(p) == 3 else MAX_SPEC_TOKENS
        return np.clip(np.rint(draws), 1, upper).astype(np.int64)


def _whole(value: float) -> bool:
    return float(value).is_integer()


def parse_length_dist(text: str, *, what: str = "length") -> LengthDist:
    """Parse ``KIND:P1[:P2...]``; errors name ``what`` (e.g. ``--prompt``)."""
    kind, *raw = text.strip().split(":")
    try:
        params = tuple(float(v) for v in raw)
        if not all(math.isfinite(v) for v in params):
            raise ValueError
    except ValueError:
        raise PdplanError(f"{what} {text!r}: parameters must be finite numbers ({LENGTH_SPEC_HELP})",
                          field=what) from None
    try:
        return LengthDist(kind=kind, params=params)
    except PdplanError as err:
        raise PdplanError(f"{what} {text!r}: {err.detail}", field=what) from None


def synthesize(*, n_requests: int, rate_rps: float, prompt: LengthDist, output: LengthDist,
               cv: float = 1.0, rng: np.random.Generator | int) -> Workload:
    """A synthetic trace: Gamma(cv) arrivals at ``rate_rps`` (Poisson for cv = 1) and i.i.d.
    lengths.  Draw order, all from ``rng``: arrival gaps, prompt lengths, output lengths."""
    rng = _generator(rng)
    arrival_s = gamma_arrivals(n_requests, rate_rps=rate_rps, cv=cv, rng=rng)
    return Workload(arrival_s=arrival_s, prompt_tokens=prompt.sample(n_requests, rng),
                    output_tokens=output.sample(n_requests, rng), format="synth")
