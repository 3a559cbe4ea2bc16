"""`pdplan trace …`: statistics, transforms and synthesis of workload traces."""

from __future__ import annotations

import typer

app = typer.Typer(help="Inspect, transform and synthesise request traces.", no_args_is_help=True)
