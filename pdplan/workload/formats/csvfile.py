"""Reading a CSV trace: the header and its fields, the columns a format reads with their rules,
and the file read chunk by chunk, every broken rule named by file, physical line and field."""

from __future__ import annotations

import csv
import itertools
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.workload.model import first_decrease, first_true

CHUNK_ROWS = 1_000_000
"""Rows per chunk when reading CSV: bounds memory and the rows a parse error rescans."""

_CHUNK_BYTES = 1 << 24


def decode_line(path: str | Path, number: int, raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
    except UnicodeDecodeError as err:
        raise PdplanError(f"trace is not UTF-8 text (byte 0x{raw[err.start]:02x})",
                          file=path, line=number) from None


def binary_error(path: str | Path, line: int) -> PdplanError:
    return PdplanError("trace contains binary data (NUL byte)", file=path, line=line)


def split_csv(text: str, path: str | Path | None = None, line: int | None = None) -> list[str]:
    return [name.strip() for name in csv_fields(text, path, line)]


def csv_fields(text: str, path: str | Path | None, line: int | None) -> list[str]:
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
class Column:
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
class CsvFile:
    """A CSV trace on disk: its path, header line number and header names."""

    path: str | Path
    header_line: int
    names: tuple[str, ...]

    @classmethod
    def open(cls, path: str | Path, header_line: int, header: str) -> CsvFile:
        return cls(path, header_line, tuple(split_csv(header, path, header_line)))

    def require(self, columns: list[Column], format: str) -> None:
        for column in columns:
            count = self.names.count(column.name)
            if count == 0:
                raise PdplanError(f"missing column {column.name!r} for format {format}; the header "
                                  f"has {', '.join(self.names)}", file=self.path,
                                  line=self.header_line, field=column.name)
            if count > 1:
                raise PdplanError(f"column {column.name!r} appears {count} times in the header",
                                  file=self.path, line=self.header_line, field=column.name)

    def read(self, columns: list[Column]) -> dict[str, np.ndarray]:
        """Read and check ``columns`` chunk by chunk; the first value that breaks a rule raises,
        naming its line.  Only a chunk the C parser rejects is walked line by line."""
        nul_line = _first_nul_line(self.path)
        if nul_line is not None:
            raise binary_error(self.path, nul_line)
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

    def _chunks(self, columns: list[Column]) -> Iterator[pd.DataFrame]:
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

    def _scan(self, columns: list[Column], from_row: int) -> None:
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
        return csv_fields(decode_line(self.path, line, raw), self.path, line)

    def locate(self, row: int) -> tuple[int, list[str]]:
        """Physical line and fields of data row ``row`` (0-based, blank lines not counted)."""
        line, raw = next(self._data_lines(row))
        return line, self._fields(line, raw)

    def raw(self, row: int, name: str) -> tuple[int, str]:
        line, fields = self.locate(row)
        i = self.names.index(name)
        return line, fields[i].strip() if i < len(fields) else ""

    def value_error(self, row: int, column: Column) -> PdplanError:
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
    return csv_fields(decode_line(path, header_line, raw), path, header_line)


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
