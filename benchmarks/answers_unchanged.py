"""Shows that a change of code leaves pdplan's answers as they were: five jobs, run at two revisions.

Each job runs once at BASE (checked out into a temporary git worktree) and once in this checkout,
each with an empty goodput cache of its own, and their answers are compared: the whole `--json`
document less the solver's wall time and the cache folder, and the manifest's pools, placement, transfer and
predictions. Input digests may differ where a moved file is read (none of the jobs reads one).

    python benchmarks/answers_unchanged.py [BASE]      # default BASE: the commit before issue 19's moves

Prints one line per job (identical, naming the keys the new revision adds, or the first differing
paths) and exits 1 on any difference; an added key is not one (documents may grow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BASE = "4913a87"
CHAT = "traces/chat_poisson_2k.csv"
CODE = "traces/code_bursty_2k.csv"
JOBS = {
    "main job": ["optimize", CHAT],
    "disaggregated": ["optimize", CHAT, "--mode", "disaggregated"],
    "code --fleet all": ["optimize", CODE, "--fleet", "all"],
    "windows": ["optimize", CODE, "--windows", "120s", "--fleet", "HH"],
    "grid": ["sensitivity", "grid", "--trace", CHAT, "--vary", "bandwidth=1,100", "--jobs", "1"],
}
MANIFEST_PARTS = ("pools", "placement", "transfer", "predictions")
# The two fields of the optimize document that are not answers: the solver's wall time and where the cache was.
VOLATILE = {("run", "solver_wall_s"), ("run", "cache", "dir")}


def strip(value, path=()):
    """The document without the fields in VOLATILE."""
    if isinstance(value, dict):
        return {k: strip(v, (*path, k)) for k, v in value.items() if (*path, k) not in VOLATILE}
    return value


def differences(a, b, path="", added: list[str] | None = None) -> list[str]:
    """Paths at which two JSON-like values differ, first ones first. A key only the new value ``b``
    has is an addition, which a contract allows: it goes to ``added``, not among the differences."""
    if type(a) is not type(b):
        return [path or "/"]
    if isinstance(a, dict):
        out = [f"{path}/{k}" for k in sorted(set(a) - set(b))]
        if added is not None:
            added += [f"{path}/{k}" for k in sorted(set(b) - set(a))]
        for k in sorted(set(a) & set(b)):
            out += differences(a[k], b[k], f"{path}/{k}", added)
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path} (length {len(a)} vs {len(b)})"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in differences(x, y, f"{path}/{i}", added)]
    return [] if a == b else [path or "/"]


def answer(tree: Path, args: list[str], scratch: Path) -> dict:
    """One job's answer at one tree: its JSON and, for optimize, the manifest's parts."""
    scratch.mkdir(parents=True)
    env = {**os.environ, "PYTHONPATH": str(tree), "PDPLAN_CACHE_DIR": str(scratch / "cache")}
    extra = ["--out", str(scratch / "manifest.yaml")] if args[0] == "optimize" else []
    done = subprocess.run([sys.executable, "-m", "pdplan", *args, *extra, "--json"], cwd=tree, env=env,
                          capture_output=True, text=True)
    got = {"exit": done.returncode, "json": strip(json.loads(done.stdout)) if done.stdout.strip() else None}
    manifest = scratch / "manifest.yaml"
    if manifest.exists():
        doc = yaml.safe_load(manifest.read_text())
        got["manifest"] = {part: doc.get(part) for part in MANIFEST_PARTS}
    if done.returncode not in (0, 1):
        got["stderr"] = done.stderr.strip().splitlines()[-1:]
    return got


def main() -> int:
    base = sys.argv[1] if len(sys.argv) > 1 else BASE
    with tempfile.TemporaryDirectory(prefix="pdplan-answers-") as tmp:
        old = Path(tmp) / "base"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old), base], check=True)
        try:
            started = time.perf_counter()
            with ThreadPoolExecutor(max_workers=2) as pool:
                futures = {name: (pool.submit(answer, old, args, Path(tmp) / "a" / str(i)),
                                  pool.submit(answer, ROOT, args, Path(tmp) / "b" / str(i)))
                           for i, (name, args) in enumerate(JOBS.items())}
                changed = 0
                for name, (before, after) in futures.items():
                    added: list[str] = []
                    diff = differences(before.result(), after.result(), added=added)
                    changed += bool(diff)
                    news = f" (adds {', '.join(sorted(set(added))[:6])})" if added else ""
                    print(f"{name:<18} {'identical' + news if not diff else 'DIFFERS at ' + ', '.join(diff[:6])}")
            print(f"{len(JOBS)} jobs at {base} and here, {time.perf_counter() - started:.0f} s; "
                  f"{changed} differ")
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=True)
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main())
