"""Shared rendering helpers for commands: JSON to stdout, tables through rich."""

from __future__ import annotations

import json
import math
from typing import Any

from rich.console import Console

# A terminal wraps tables to fit; pipes and files get them whole (wide enough for every table).
stdout = Console(soft_wrap=True, emoji=False)
if not stdout.is_terminal:
    stdout = Console(soft_wrap=True, width=180, emoji=False)
stderr = Console(stderr=True, soft_wrap=True, emoji=False)


def _clean(value: Any) -> Any:
    """Make a result JSON-safe: NaN/inf become null, numpy scalars become Python numbers."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def to_json(result: Any) -> str:
    """Stable JSON text for ``--json`` output."""
    return json.dumps(_clean(result), indent=2, sort_keys=False)


def print_json(result: Any) -> None:
    """Write a result as JSON on stdout, nothing else, so ``| jq`` always works."""
    import sys

    sys.stdout.write(to_json(result) + "\n")


def money(value: float | None) -> str:
    """Dollars per hour as tables show them; — for none."""
    return "—" if value is None else f"${value:,.2f}"


def number(value: float | None, fmt: str = ".3g") -> str:
    """A number as tables show it; — for none."""
    return "—" if value is None else format(value, fmt)
