"""What every importer shares: CSV records that fail with their file, line and field; how a source
file is labelled in provenance; and what an import returns."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import read_text
from pdplan.latency.profile import PhaseProfile

_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")  # ASCII digits only, and few enough to stay an int64
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")

@dataclass(frozen=True)
class Row:
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


def csv_rows(path: str | Path, required: Sequence[str], *, what: str,
              allow_extra: bool) -> list[Row]:
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
            rows.append(Row(file, reader.line_num, dict(zip(names, record))))
    except csv.Error as err:
        raise PdplanError(f"invalid CSV: {err}", file=file, line=reader.line_num) from None
    if not rows:
        raise PdplanError(f"{what} has a header but no rows", file=file, line=1)
    return rows


def source_label(path: str | Path, label: str | None) -> str:
    return label if label is not None else Path(path).as_posix()


@dataclass(frozen=True, kw_only=True)
class ImportResult:
    """Profiles made from one source, and the shapes it holds that could not be made."""

    profiles: tuple[PhaseProfile, ...]
    skipped: tuple[str, ...] = ()      #: one sentence per shape left out, with the reason
