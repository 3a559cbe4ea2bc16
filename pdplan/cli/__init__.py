"""The ``pdplan`` command: one typer sub-app per command group; they parse, call, render."""

from __future__ import annotations

import inspect
import logging
import re
import sys
import warnings
from functools import cache
from typing import Annotated

import typer
from rich.console import Console

from pdplan.errors import PdplanError
from pdplan.interrupts import Interrupted, interrupted, interruptible

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import Context
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - older typer on the real click
    from click import Context
    from click import exceptions as click_errors

app = typer.Typer(
    name="pdplan",
    help="Plan prefill/decode disaggregated LLM serving: traces, profiles, goodput, placement.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

from pdplan.cli import goodput as _goodput  # noqa: E402  (commands register on import)
from pdplan.cli import manifest as _manifest  # noqa: E402
from pdplan.cli import optimize as _optimize  # noqa: E402
from pdplan.cli import profile as _profile  # noqa: E402
from pdplan.cli import sensitivity as _sensitivity  # noqa: E402
from pdplan.cli import simulate as _simulate  # noqa: E402
from pdplan.cli import trace as _trace  # noqa: E402

app.add_typer(_trace.app, name="trace")
app.add_typer(_profile.app, name="profile")
app.add_typer(_sensitivity.app, name="sensitivity")
app.command("optimize")(_optimize.optimize)
app.command("goodput")(_goodput.goodput)
app.command("simulate")(_simulate.simulate)
app.command("schema")(_manifest.schema)
app.command("validate")(_manifest.validate)
app.command("diff")(_manifest.diff)
app.command("export")(_manifest.export)


@cache
def _command():
    """The click command typer builds from the app, its help tidied (:func:`_tidy`): once per process, not
    on every call (70 ms)."""
    return _tidy(typer.main.get_command(app))


def _tidy(command):
    """The command and each of its subcommands with every help paragraph on one line, so rich wraps it at
    the terminal's width (typer keeps the line breaks of a docstring's paragraphs after the first, which
    then print ragged), and every flag's value placeholder empty, --help's included (a flag takes no value,
    yet typer's help shows one, ``<bool>``, unless the flag's metavar says otherwise)."""
    if command.help:
        command.help = unwrap(command.help)
    for param in (*command.params, command.get_help_option(Context(command))):
        if getattr(param, "is_flag", False):
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _tidy(sub)
    return command


def unwrap(doc: str) -> str:
    """``doc`` dedented with each paragraph's lines joined by spaces; a list item (``- ``, ``* ``,
    ``1. ``) keeps its own line and a paragraph marked ``\\b`` (click's "do not rewrap") keeps all."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p if p.startswith("\b") else re.sub(r"[ \t]*\n[ \t]*(?![ \t]*(?:[-*•]|\d+\.) )", " ", p)
                       for p in paragraphs)


@app.callback()
def _options(verbose: Annotated[bool, typer.Option(
        "--verbose", help="Show library warnings and notices (numpy, matplotlib, numba), which are quiet "
                          "otherwise.")] = False) -> None:
    """Plan prefill/decode disaggregated LLM serving: traces, profiles, goodput, placement."""
    if verbose:
        warnings.resetwarnings()
        logging.getLogger("matplotlib").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> None:
    """Run the app; any input error, usage error included, is one ``Error:`` line on stderr and
    exit 2; Ctrl-C is one line and exit 130 (:mod:`pdplan.entry`); library chatter stays quiet
    unless --verbose."""
    errors = Console(stderr=True, soft_wrap=True, emoji=False)
    with warnings.catch_warnings(), interruptible():
        warnings.simplefilter("ignore")
        logging.getLogger("matplotlib").setLevel(logging.ERROR)
        try:
            code = _command()(args=argv, prog_name="pdplan", standalone_mode=False)
        except PdplanError as err:
            errors.print(f"Error: {err}", markup=False, highlight=False)
            sys.exit(2)
        except click_errors.NoArgsIsHelpError:  # bare `pdplan` or `pdplan trace`: typer showed the help
            sys.exit(2)
        except click_errors.UsageError as err:
            command = err.ctx.command_path if err.ctx is not None else "pdplan"
            errors.print(f"Error: {' '.join(err.format_message().split())} (see {command} --help)",
                         markup=False, highlight=False)
            sys.exit(2)
        except click_errors.ClickException as err:
            errors.print(f"Error: {' '.join(err.format_message().split())}", markup=False, highlight=False)
            sys.exit(err.exit_code)
        except (Interrupted, typer.Abort):  # Abort: click's word for a KeyboardInterrupt
            interrupted()
    sys.exit(code or 0)
