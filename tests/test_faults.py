"""Faults around a run: a kill mid-run, two runs sharing one cache, a corrupted or unwritable cache,
a full disk. None loses a file, and none changes the answer."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pdplan.manifest import read_manifest

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "chat_poisson_2k.csv"
FAST = ("--requests-per-probe", "300", "--fleet", "HH", "--tp", "4", "--pp", "1")


def optimize_command(*args) -> list[str]:
    return [sys.executable, "-m", "pdplan", "optimize", str(TRACE), *FAST, *map(str, args)]


def without_run(text: str) -> dict:
    doc = json.loads(text)
    doc.pop("run")
    return doc


@pytest.mark.parametrize("after_s", [1.0, 3.0, 6.0])
def test_a_kill_mid_run_leaves_the_old_plan_whole_and_no_temp_files(tmp_path, after_s):
    old = tmp_path / "plan.yaml"
    old.write_text("the plan a deployer applied yesterday\n")
    run = subprocess.Popen(optimize_command("--out", old, "--cache-dir", tmp_path / "cache"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(after_s)
    run.send_signal(signal.SIGKILL)
    run.wait()
    # Killed before the rename, the old plan is untouched; after it (even when the kill lands
    # before the process exits), what is there is a whole manifest. Never a part of one.
    if old.read_text() != "the plan a deployer applied yesterday\n":
        assert read_manifest(old)["kind"] == "DeploymentManifest"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "plan.yaml"] or \
        sorted(p.name for p in tmp_path.iterdir()) == ["plan.yaml"]


def test_two_concurrent_runs_on_one_cache_agree(tmp_path):
    cache = tmp_path / "cache"
    runs = [subprocess.Popen(optimize_command("--cache-dir", cache, "--json"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=300) for run in runs]
    assert all(run.returncode == 0 for run in runs), [err for _, err in outputs]
    assert without_run(outputs[0][0]) == without_run(outputs[1][0])
    alone = subprocess.run(optimize_command("--no-cache", "--json"), capture_output=True, text=True, check=True)
    assert without_run(outputs[0][0]) == without_run(alone.stdout)


@pytest.mark.parametrize("corruption", ["junk", "empty-object", "truncated", "nan-goodput"])
def test_a_corrupted_cache_gives_the_plan_no_cache_gives(run_cli, tmp_path, corruption):
    cache = tmp_path / "cache"
    code, first, err = run_cli("optimize", TRACE, *FAST, "--cache-dir", cache, "--json")
    assert code == 0, err
    for entry in cache.rglob("*.json"):
        text = entry.read_text()
        entry.write_text({"junk": "\x00\x01 not json", "empty-object": "{}", "truncated": text[: len(text) // 2],
                          "nan-goodput": text.replace('"goodput_rps": ', '"goodput_rps": NaN, "was": ')}[corruption])
    code, again, err = run_cli("optimize", TRACE, *FAST, "--cache-dir", cache, "--json")
    assert code == 0, err
    assert without_run(again) == without_run(first)
    hits, entries = json.loads(again)["run"]["cache"]["hits"], json.loads(first)["run"]["cache"]["misses"]
    assert hits == 0 if corruption != "nan-goodput" else hits < entries  # only goodput entries hold goodput_rps


def test_an_unwritable_cache_warns_once_and_gives_the_same_plan(run_cli, tmp_path):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go")
    code, out, err = run_cli("optimize", TRACE, *FAST, "--cache-dir", blocker / "cache", "--json")
    assert code == 0
    assert err.count("warning: cannot write the result cache") == 1 and err.count("\n") == 1
    code, plain, _ = run_cli("optimize", TRACE, *FAST, "--no-cache", "--json")
    assert without_run(out) == without_run(plain)


def test_a_full_disk_is_one_error_line_and_leaves_nothing(run_cli, tmp_path, monkeypatch):
    import pdplan.fileio as fileio

    class Full:
        def __init__(self, fd, mode):
            os.close(fd)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fileio.os, "fdopen", Full)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli("trace", "synth", "--requests", "5", "--rate", "1", "--prompt", "const:5",
                             "--output", "const:5", "-o", "x.csv")
    assert (code, out) == (2, "")
    assert err == "Error: x.csv: cannot write output: No space left on device\n"
    assert list(tmp_path.iterdir()) == []
