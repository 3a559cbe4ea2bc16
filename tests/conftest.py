"""Shared fixtures: the real data in ../shared/data (skipped with a reason when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Folder of real traces/profiles/network measurements; skip when the clone has no ../shared."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not present at {SHARED_DATA} (only in the development workspace)")
    return SHARED_DATA


@pytest.fixture
def run_cli(capsys):
    """Run ``pdplan ARGS`` in-process; returns (exit_code, stdout, stderr)."""
    from pdplan.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return run
