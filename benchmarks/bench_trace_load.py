"""Time ``load_trace`` on large native and Azure CSV traces and measure each load's peak memory.

    python benchmarks/bench_trace_load.py [--rows N] [--out FOLDER] [--fresh]

Writes N rows (default 10,000,000) of native CSV and of Azure-style CSV (7 fractional digits
in the timestamps) into FOLDER (default benchmarks/out/, git-ignored), reusing files of the
same size from an earlier run unless --fresh.  Each load runs in its own child process, which
reports its load time and its own peak resident set (interpreter, imports and all), so one
load's memory cannot hide another's.  The peak is VmHWM from /proc/self/status: ru_maxrss of
a child can carry over the parent's high-water mark from fork, VmHWM belongs to the exec'd
process alone.  Targets: <= 30 s and <= 3 GB per load.
Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 30.0
TARGET_GB = 3.0
CHUNK_ROWS = 1_000_000


def write_native(path: Path, rows: int, rng: np.random.Generator) -> None:
    """Poisson arrivals at 1,000 req/s, microsecond resolution; lengths uniform."""
    start = 0.0
    with open(path, "w", newline="") as handle:
        handle.write("arrival_s,prompt_tokens,output_tokens\n")
        for size in chunk_sizes(rows):
            arrival_s = start + np.cumsum(rng.exponential(1e-3, size))
            start = arrival_s[-1]
            frame = pd.DataFrame({"arrival_s": np.round(arrival_s, 6),
                                  "prompt_tokens": rng.integers(1, 8192, size),
                                  "output_tokens": rng.integers(1, 1024, size)})
            frame.to_csv(handle, header=False, index=False, float_format="%.6f")


def write_azure(path: Path, rows: int, rng: np.random.Generator) -> None:
    """Azure LLM inference layout: ``2023-11-16 18:17:03.9799600`` timestamps, then the token counts."""
    start = np.datetime64("2023-11-16T18:15:46.680590", "ns")
    with open(path, "w", newline="") as handle:
        handle.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for size in chunk_sizes(rows):
            stamps = start + np.cumsum(rng.integers(1, 2_000_000, size)).astype("timedelta64[ns]")
            start = stamps[-1]
            text = pd.Series(stamps).dt.strftime("%Y-%m-%d %H:%M:%S.%f") + "0"
            frame = pd.DataFrame({"TIMESTAMP": text, "ContextTokens": rng.integers(1, 8192, size),
                                  "GeneratedTokens": rng.integers(1, 1024, size)})
            frame.to_csv(handle, header=False, index=False)


def chunk_sizes(rows: int) -> list[int]:
    return [min(CHUNK_ROWS, rows - done) for done in range(0, rows, CHUNK_ROWS)]


def ensure(path: Path, rows: int, writer, fresh: bool) -> None:
    """Write the file unless one with the right number of lines is already there."""
    if not fresh and path.exists() and count_lines(path) == rows + 1:
        print(f"reusing {path}")
        return
    started = time.perf_counter()
    writer(path, rows, np.random.default_rng(0))
    print(f"wrote {path} ({path.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - started:.1f} s")


def count_lines(path: Path) -> int:
    with open(path, "rb") as handle:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: handle.read(1 << 24), b""))


def peak_rss_kb() -> int:
    """This process's peak resident set in KiB (VmHWM; ru_maxrss where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(path: str) -> None:
    """Runs in the child process: load once, report seconds and peak RSS as JSON."""
    from pdplan.workload import load_trace

    before_kb = peak_rss_kb()
    started = time.perf_counter()
    workload = load_trace(path)
    seconds = time.perf_counter() - started
    peak_kb = peak_rss_kb()
    print(json.dumps({"requests": len(workload), "seconds": seconds, "peak_kb": peak_kb,
                      "baseline_kb": before_kb, "format": workload.format}))


def measure(path: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", str(path)], capture_output=True,
                          text=True, check=True)
    result = json.loads(done.stdout)
    result["process_s"] = time.perf_counter() - started
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out")
    parser.add_argument("--fresh", action="store_true", help="rewrite the input files")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    files = {"native": args.out / f"native_{args.rows}.csv", "azure": args.out / f"azure_{args.rows}.csv"}
    ensure(files["native"], args.rows, write_native, args.fresh)
    ensure(files["azure"], args.rows, write_azure, args.fresh)

    print(f"\n{'format':8} {'rows':>12} {'MB':>7} {'load s':>7} {'process s':>9} "
          f"{'peak GB':>8} {'import GB':>9}  verdict")
    ok = True
    for name, path in files.items():
        r = measure(path)
        peak_gb, base_gb = r["peak_kb"] * 1024 / 1e9, r["baseline_kb"] * 1024 / 1e9
        passed = r["seconds"] <= TARGET_S and peak_gb <= TARGET_GB and r["requests"] == args.rows
        ok &= passed
        print(f"{r['format']:8} {r['requests']:>12,} {path.stat().st_size / 1e6:>7,.0f} {r['seconds']:>7.1f} "
              f"{r['process_s']:>9.1f} {peak_gb:>8.2f} {base_gb:>9.2f}  "
              f"{'ok' if passed else 'MISSED'} (targets {TARGET_S:g} s, {TARGET_GB:g} GB)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
