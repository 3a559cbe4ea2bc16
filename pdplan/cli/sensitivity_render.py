"""What ``pdplan sensitivity grid`` prints: one row per cell with both plans, the margin's terms and
the decision."""

from __future__ import annotations

from rich.table import Table

from pdplan.cli.output import money, number, print_json, stdout
from pdplan.sensitivity import DIMENSIONS, Base, GridResult, summary_text


def render(result: GridResult, base: Base, as_json: bool) -> None:
    """The grid's document as JSON; or its table and the summary sentence."""
    if as_json:
        print_json(result.to_dict(base))
        return
    _table(result, base)
    stdout.print(summary_text(result.dimensions, result.cells), markup=False, highlight=False)


def _table(result: GridResult, base: Base) -> None:
    """One table row per cell: coordinates, both plans' cost and verdict, the terms, the decision."""
    rows = result.rows()
    what = (f"at {base.target_rps:.3g} req/s" if base.compare == "rate"
            else f"within ${base.budget_usd_per_hour:,.2f} per hour")
    table = Table(title=f"Sensitivity grid: best verified colocated vs P/D plan {what} (ms per request)")
    for name in result.names:
        table.add_column(name, justify="right")
    budget = base.compare == "budget"
    plans = (("colocated $/h", "colocated req/s", "colocated verdict", "P/D $/h", "P/D req/s", "P/D verdict")
             if budget else ("colocated $/h", "colocated verdict", "P/D $/h", "P/D verdict"))
    for name in (*plans, "T_saved", "T_xfer", "T_route", "T_fail", "ΔT", "decision"):
        table.add_column(name, justify="right")
    table.add_column("why")
    for row in rows:
        plans = [cell for prefix in ("colocated", "pd") for cell in (
            money(row[f"{prefix}_usd_per_hour"]), *([number(row[f"{prefix}_rate_rps"])] if budget else []),
            row[f"{prefix}_verdict"] or "—")]
        table.add_row(*[DIMENSIONS[n].show(row[n]) for n in result.names], *plans,
                      *[_ms(row[c]) for c in ("t_saved_ms", "t_transfer_exposed_ms", "t_route_ms", "t_failure_ms",
                                              "delta_t_ms")],
                      row["decision"], row["reason"])
    stdout.print(table)


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{round(value, 1) or 0.0:+.1f}"
