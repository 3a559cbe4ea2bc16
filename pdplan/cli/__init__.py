"""The ``pdplan`` command: one typer sub-app per command group; they parse, call, render."""

from __future__ import annotations

import sys

import typer
from rich.console import Console

from pdplan.errors import PdplanError

app = typer.Typer(
    name="pdplan",
    help="Plan prefill/decode disaggregated LLM serving: traces, profiles, goodput, placement.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

from pdplan.cli import goodput as _goodput  # noqa: E402  (commands register on import)
from pdplan.cli import optimize as _optimize  # noqa: E402
from pdplan.cli import profile as _profile  # noqa: E402
from pdplan.cli import simulate as _simulate  # noqa: E402
from pdplan.cli import trace as _trace  # noqa: E402

app.add_typer(_trace.app, name="trace")
app.add_typer(_profile.app, name="profile")
app.command("optimize")(_optimize.optimize)
app.command("goodput")(_goodput.goodput)
app.command("simulate")(_simulate.simulate)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, turning input errors into one line and exit 2."""
    try:
        app(args=argv, prog_name="pdplan")
    except PdplanError as err:
        Console(stderr=True, soft_wrap=True, emoji=False).print(f"Error: {err}", markup=False,
                                                                 highlight=False)
        sys.exit(2)