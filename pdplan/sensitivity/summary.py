"""A grid's outcome in words: how many cells P/D wins, and along each numeric dimension where it
stops paying, other coordinates held."""

from __future__ import annotations

from pdplan.sensitivity.cell import DECISIONS, CellResult
from pdplan.sensitivity.spec import DIMENSIONS

#: Boundary sentences a summary lists at most.
MAX_BOUNDARIES = 6


def summary_text(dimensions: tuple[tuple[str, tuple], ...], cells: tuple[CellResult, ...]) -> str:
    """"P/D wins in 4 of 9 cells (COLOCATE 3, INFEASIBLE 2); below bandwidth 10 GB/s it stops
    paying at prompt_scale 1×; …"."""
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
    """Where P/D stops paying along ``name``, one phrase per setting of the other dimensions whose
    wins form one run at the top or the bottom of ``name``'s values (a threshold)."""
    dim = DIMENSIONS[name]
    others = [n for n, _ in dimensions if n != name]
    lines: dict[tuple, list[tuple[float, bool]]] = {}
    for cell in cells:
        key = tuple(cell.coords[n] for n in others)
        lines.setdefault(key, []).append((cell.coords[name], cell.decision == "ENABLE_PD"))
    out = []
    for key, points in lines.items():
        wins = [win for _, win in sorted(points)]
        values = [v for v, _ in sorted(points)]
        if all(wins) or not any(wins):
            continue
        where = " at " + ", ".join(f"{n} {DIMENSIONS[n].show(v)}" for n, v in zip(others, key)) if others else ""
        first_win = wins.index(True)
        if wins == [False] * first_win + [True] * (len(wins) - first_win):
            out.append(f"below {name} {dim.show(values[first_win])} it stops paying{where}")
        elif wins == [True] * (len(wins) - wins[::-1].index(True)) + [False] * wins[::-1].index(True):
            last_win = len(wins) - 1 - wins[::-1].index(True)
            out.append(f"above {name} {dim.show(values[last_win])} it stops paying{where}")
        else:
            out.append(f"along {name} it wins and loses more than once{where}")
    return out
