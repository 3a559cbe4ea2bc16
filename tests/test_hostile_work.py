"""Hostile input against the work itself: no output lands on an input, no request makes pdplan work
or allocate without bound, Ctrl-C ends every command the same way, and messages say what is wrong.

Every case ends within its bound with exit 2 (130 for Ctrl-C), one stderr line naming the file or
flag, no traceback, and no file created or changed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from test_hostile_input import NATIVE, ROWS, make, snapshot

CLUSTER = ("nodes:\n  - {name: n, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, inter_node_gb_s: 50, "
           "count: 2}\n")
#: A model YAML that loads (its parameter count agrees with its geometry).
MODEL = ("name: toy\nlayers: 4\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\nffn: 160\nvocab: 100\n"
         "parameters: 176640\nmlp_matrices: 3\n")
TRACE = NATIVE + ROWS
#: optimize on the toy trace with one TP and PP, so that a run that does get to work stays short.
OPT = ("optimize", "t.csv", "--requests-per-probe", "100", "--tp", "4", "--pp", "1")


class Timeout(Exception):
    pass


@contextmanager
def bound(seconds: int, what: str):
    """Fail ``what`` when it runs longer than ``seconds`` (SIGALRM; the main thread only)."""
    def give_up(signum, frame):
        raise Timeout(f"{what} did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """An empty working folder, the cache beside it."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PDPLAN_CACHE_DIR", str(tmp_path / "cache"))
    return folder


def refused(run_cli, work: Path, args: tuple, fragments: list[str], *, seconds: int = 30) -> str:
    """Run ``pdplan ARGS`` in ``work``: exit 2, one ``Error:`` line holding every fragment, no
    traceback, nothing in ``work`` created or changed, within ``seconds``. Returns the line."""
    before = snapshot(work)
    with bound(seconds, " ".join(map(str, args))):
        code, out, err = run_cli(*args)
    assert code == 2, err
    assert out == "" and err.startswith("Error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err
    assert snapshot(work) == before
    return err


# --- an infeasible problem names what binds --------------------------------------------------------

@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One result cache for the cases that do plan: the toy trace's shapes are measured once."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("flags, binding", [
    (("--max-gpus", "0"), "the GPU, cost or power budget is too small"),
    (("--max-gpus", "0", "--objective", "goodput"), "the GPU, cost or power budget is too small"),
    (("--cluster", "c.yaml"), "the cluster's node counts cannot hold enough instances"),
    (("--cluster", "c.yaml", "--objective", "goodput"), "the cluster's node counts cannot hold enough instances"),
], ids=["no-gpu-budget", "no-gpu-budget-for-goodput", "no-nodes", "no-nodes-for-goodput"])
def test_an_infeasible_problem_is_one_line_naming_the_binding_constraint(run_cli, work, shared_cache, monkeypatch,
                                                                        flags, binding):
    monkeypatch.setenv("PDPLAN_CACHE_DIR", str(shared_cache))
    make(work, {"t.csv": TRACE, "c.yaml": CLUSTER.replace("count: 2", "count: 0")})
    refused(run_cli, work, OPT + flags, [binding])
