"""`pdplan profile …`: fit, show and derive phase latency profiles."""

from __future__ import annotations

import typer

app = typer.Typer(help="Fit, show and derive phase latency profiles.", no_args_is_help=True)
