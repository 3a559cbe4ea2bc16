"""The ``pdplan`` console script, with Ctrl-C handled from its first line.

The command's imports (typer, numpy, pandas, ortools…) take seconds, and :func:`pdplan.cli.main`
can catch nothing until they are done; so the handler of :mod:`pdplan.interrupts` is installed
here first, with only the standard library loaded.
"""

from __future__ import annotations

from pdplan.interrupts import Interrupted, interrupted, interruptible


def main() -> None:
    """Console-script entry point: the CLI, imported and run with Ctrl-C handled throughout."""
    with interruptible():
        try:
            from pdplan.cli import main as run

            run()
        except (Interrupted, KeyboardInterrupt):
            interrupted()
