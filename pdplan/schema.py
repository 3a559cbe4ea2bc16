"""Field checks for mappings read from YAML: each failure names file, line and field path."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pdplan import limits
from pdplan.errors import PdplanError


class Fields:
    """One mapping under validation: ``Fields(data, file, "nodes[0]")``.

    Reads typed values out of a YAML mapping and raises :class:`PdplanError` naming the file,
    the key's line (when the YAML loader recorded it) and the dotted field path.
    """

    def __init__(self, data: Any, file: str | Path | None, path: str = "", *, line: int | None = None):
        if not isinstance(data, dict):
            where = path or "top level"
            raise PdplanError(f"{where} must be a mapping, got {type(data).__name__}", file=file,
                              line=line, field=path or None)
        self.data = data
        self.file = file
        self.path = path
        self.line = line

    def name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def line_of(self, key: str) -> int | None:
        return getattr(self.data, "lines", {}).get(key, self.line)

    def fail(self, key: str, rule: str, value: Any = None, *, show_value: bool = True) -> PdplanError:
        got = f", got {shown(value)!r}" if show_value else ""
        return PdplanError(f"{self.name(key)} {rule}{got}", file=self.file, line=self.line_of(key),
                           field=self.name(key))

    def has(self, key: str) -> bool:
        return key in self.data

    def require(self, key: str) -> Any:
        if key not in self.data:
            raise PdplanError(f"missing required field {self.name(key)}", file=self.file,
                              line=self.line, field=self.name(key))
        return self.data[key]

    def string(self, key: str, default: str | None = None, *, choices: list[str] | None = None) -> str:
        value = self.require(key) if default is None else self.data.get(key, default)
        if not isinstance(value, str) or not value:
            raise self.fail(key, "must be a non-empty string", value)
        if choices is not None and value not in choices:
            raise self.fail(key, f"must be one of {', '.join(sorted(choices))}", value)
        return value

    def number(self, key: str, default: float | None = None, *, minimum: float | None = None,
               exclusive: bool = False, maximum: float | None = None) -> float:
        value = self.require(key) if default is None else self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not _finite(value):
            raise self.fail(key, "must be a finite number", shown(value))
        self._check_range(key, value, minimum, exclusive, limits.MAX_NUMBER if maximum is None else maximum)
        return float(value)

    def bandwidth_gb_s(self, key: str, default: float | None = None) -> float:
        """A bandwidth in GB/s within the physical range of :mod:`pdplan.limits`: a positive
        1e-300 GB/s is no link, and would stretch one transfer past any simulated time."""
        return self.number(key, default, minimum=limits.MIN_BANDWIDTH_GB_S, maximum=limits.MAX_BANDWIDTH_GB_S)

    def integer(self, key: str, default: int | None = None, *, minimum: int | None = None,
                maximum: int | None = None) -> int:
        value = self.require(key) if default is None else self.data.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, "must be an integer", shown(value))
        self._check_range(key, value, minimum, False, limits.MAX_INTEGER if maximum is None else maximum)
        return value

    def boolean(self, key: str, default: bool | None = None) -> bool:
        value = self.require(key) if default is None else self.data.get(key, default)
        if not isinstance(value, bool):
            raise self.fail(key, "must be true or false", shown(value))
        return value

    def mapping(self, key: str) -> "Fields":
        return Fields(self.require(key), self.file, self.name(key), line=self.line_of(key))

    def items(self, key: str) -> list["Fields"]:
        value = self.require(key)
        if not isinstance(value, list) or not value:
            raise self.fail(key, "must be a non-empty list", value)
        return [Fields(item, self.file, f"{self.name(key)}[{i}]", line=_first_line(item, self.line_of(key)))
                for i, item in enumerate(value)]

    def reject_unknown(self, allowed: set[str]) -> None:
        for key in self.data:
            if key not in allowed:
                raise self.fail(str(key), f"is not a known field (known: {', '.join(sorted(allowed))})",
                                show_value=False)

    def _check_range(self, key, value, minimum, exclusive, maximum) -> None:
        if minimum is not None and (value <= minimum if exclusive else value < minimum):
            raise self.fail(key, f"must be {'>' if exclusive else '>='} {bound(minimum)}", shown(value))
        if value > maximum:
            raise self.fail(key, f"must be <= {bound(maximum)}", shown(value))


def bound(value: int | float) -> str:
    """A limit as a message states it: whole numbers in full with thousands separators
    (2,147,483,647, not 2.14748e+09), others in the shortest form."""
    if float(value).is_integer() and abs(value) < 1e16:
        return f"{int(value):,}"
    return f"{value:g}"


def _finite(value: int | float) -> bool:
    """Finite, and within what a float holds (a 400-digit YAML integer is not)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def shown(value: Any) -> Any:
    """A value as an error message quotes it: long ones cut (a 5,000-digit number, a 300 kB string)."""
    try:
        text = repr(value)
    except ValueError:  # an integer with more digits than Python prints
        return _Cut("an integer with thousands of digits")
    return value if len(text) <= 60 else _Cut(text[:40] + f"... ({len(text)} characters)")


class _Cut(str):
    def __repr__(self) -> str:
        return str(self)


def _first_line(item: Any, fallback: int | None) -> int | None:
    """The line a list item starts on: its first key's line when the loader recorded it."""
    lines = getattr(item, "lines", None)
    return min(lines.values()) if lines else fallback
