"""A grid's outcome in words: how many cells P/D wins, and along each numeric dimension where it
stops paying, other coordinates held."""

from __future__ import annotations

from pdplan.sensitivity.cell import DECISIONS, CellResult
from pdplan.sensitivity.spec import DIMENSIONS

#: Boundary sentences a summary lists at most.
MAX_BOUNDARIES = 6


def summary_text(dimensions: tuple[tuple[str, tuple], ...], cells: tuple[CellResult, ...]) -> str:
    """"P/D wins in 4 of 9 cells (COLOCATE 3, INFEASIBLE 2); below bandwidth 10 GB/s it stops
    paying, prompt_scale held at 1× or 2×; …"."""
    counts = {d: sum(c.decision == d for c in cells) for d in DECISIONS}
    others = ", ".join(f"{d} {n}" for d, n in counts.items() if d != "ENABLE_PD" and n)
    text = f"P/D wins in {counts['ENABLE_PD']} of {len(cells)} cell{'s' if len(cells) != 1 else ''}"
    text += f" ({others})" if others else ""
    found = [s for name, values in dimensions if not DIMENSIONS[name].text and len(values) > 1
             for s in boundaries(name, dimensions, cells)]
    if found:
        text += "; " + "; ".join(found[:MAX_BOUNDARIES])
        if len(found) > MAX_BOUNDARIES:
            text += f"; and {len(found) - MAX_BOUNDARIES} more boundaries (see the table)"
    return text + "."


def boundaries(name: str, dimensions: tuple[tuple[str, tuple], ...], cells: tuple[CellResult, ...]) -> list[str]:
    """Where P/D stops paying along ``name``, other coordinates held: one phrase per threshold (the
    wins form one run at the top or the bottom of ``name``'s values), naming every setting of the
    other dimensions it holds at, so one threshold is said once and never reads as two."""
    dim = DIMENSIONS[name]
    others = [n for n, values in dimensions if n != name and len(values) > 1]  # a single value holds everywhere
    lines: dict[tuple, list[tuple[float, bool]]] = {}
    for cell in cells:
        key = tuple(cell.coords[n] for n in others)
        lines.setdefault(key, []).append((cell.coords[name], cell.decision == "ENABLE_PD"))
    held: dict[str, list[str]] = {}
    for key, points in lines.items():
        wins = [win for _, win in sorted(points)]
        values = [v for v, _ in sorted(points)]
        if all(wins) or not any(wins):
            continue
        first_win = wins.index(True)
        if wins == [False] * first_win + [True] * (len(wins) - first_win):
            phrase = f"below {name} {dim.show(values[first_win])} it stops paying"
        elif wins == [True] * (len(wins) - wins[::-1].index(True)) + [False] * wins[::-1].index(True):
            last_win = len(wins) - 1 - wins[::-1].index(True)
            phrase = f"above {name} {dim.show(values[last_win])} it stops paying"
        else:
            phrase = f"along {name} it wins and loses more than once"
        setting = ", ".join(DIMENSIONS[n].show(v) for n, v in zip(others, key))
        held.setdefault(phrase, []).append(setting if len(others) == 1 else f"({setting})")
    if not others:
        return list(held)
    return [f"{phrase}, {', '.join(others)} held at {' or '.join(settings)}" for phrase, settings in held.items()]
