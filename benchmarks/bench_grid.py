"""`pdplan sensitivity grid` on the Azure code and conversation traces, timed end to end.

The issue-11 grid: KV link bandwidth {1, 10, 100} GB/s × prompt scale {0.5, 1, 2}, llama2-70b with
the shipped profiles, the default cluster and SLO, 2 local processes, an empty goodput cache
(numba's compiled simulator already cached, as after any first run). Target: both grids within
120 s on 2 cores. Prints each grid's wall time, its decisions and its summary.

    python benchmarks/bench_grid.py [--jobs N] [--executor local|ray]
    python benchmarks/bench_grid.py --wide [--jobs N]
    python benchmarks/bench_grid.py --lengths [--jobs N]

``--wide`` runs the issue-24 grid instead: 10 bandwidths (1 to 100 GB/s, log-spaced) × 10 prompt
scales (0.5 to 2) on the Azure code trace, cold and then warm on the same cache (the warm run
reads every goodput, pool curve, verification and placement solve the cold one kept).
``--lengths`` runs the grid whose every cell changes the workload: 10 prompt scales × 10 output
scales (each 0.5 to 2, log-spaced) on the same trace, cold and then warm.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACES = ROOT.parent / "shared" / "data" / "traces"
GRID = ["--vary", "bandwidth=1,10,100", "--vary", "prompt_scale=0.5,1,2"]


def run(trace: Path, cache: Path, jobs: int, executor: str) -> tuple[float, dict]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pdplan", "sensitivity", "grid", "--trace", str(trace), *GRID,
                           "--jobs", str(jobs), "--executor", executor, "--cache-dir", str(cache), "--json"],
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - started, json.loads(done.stdout)


SCALES = ",".join(f"{0.5 * 4 ** (i / 9):.3g}" for i in range(10))
WIDE = {"bandwidth x prompt scale": ["--vary", "bandwidth=" + ",".join(f"{10 ** (2 * i / 9):.3g}" for i in range(10)),
                                     "--vary", f"prompt_scale={SCALES}"],
        "prompt scale x output scale": ["--vary", f"prompt_scale={SCALES}", "--vary", f"output_scale={SCALES}"]}


def wide(name: str, jobs: int, executor: str) -> int:
    trace = TRACES / "AzureLLMInferenceTrace_code.csv"
    if not trace.exists():
        print(f"trace not found: {trace}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("cold", "warm"):
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "pdplan", "sensitivity", "grid", "--trace", str(trace),
                                   *WIDE[name],
                                   "--jobs", str(jobs), "--executor", executor, "--cache-dir", tmp, "--json"],
                                  capture_output=True, text=True, check=True)
            wall = time.perf_counter() - started
            doc = json.loads(done.stdout)
            decisions = Counter(c["decision"] for c in doc["cells"])
            print(f"10 x 10 grid ({name}), {kind}: {len(doc['cells'])} cells in {wall:.1f} s; "
                  + ", ".join(f"{d} {n}" for d, n in sorted(decisions.items())))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--executor", default="local", choices=["local", "ray"])
    parser.add_argument("--wide", action="store_true", help="the 10 x 10 bandwidth x prompt grid, cold then warm")
    parser.add_argument("--lengths", action="store_true", help="the 10 x 10 prompt x output grid, cold then warm")
    args = parser.parse_args()
    if args.wide or args.lengths:
        name = "bandwidth x prompt scale" if args.wide else "prompt scale x output scale"
        return wide(name, args.jobs, args.executor)
    traces = [TRACES / "AzureLLMInferenceTrace_code.csv", TRACES / "AzureLLMInferenceTrace_conv.csv"]
    if not all(t.exists() for t in traces):
        print(f"traces not found under {TRACES}", file=sys.stderr)
        return 2
    total = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for trace in traces:
            wall, doc = run(trace, Path(tmp) / trace.stem, args.jobs, args.executor)
            total += wall
            decisions = Counter(c["decision"] for c in doc["cells"])
            print(f"{trace.name}: {len(doc['cells'])} cells in {wall:.1f} s at {doc['target_rps']:.3g} req/s; "
                  + ", ".join(f"{d} {n}" for d, n in sorted(decisions.items())))
            for cell in doc["cells"]:
                print(f"  bandwidth {cell['bandwidth']:>5g} GB/s, prompt ×{cell['prompt_scale']:<3g} "
                      f"colocated ${cell['colocated_usd_per_hour'] or 0:7.2f} {cell['colocated_verdict'] or '-':>7}  "
                      f"P/D ${cell['pd_usd_per_hour'] or 0:7.2f} {cell['pd_verdict'] or '-':>7}  "
                      f"ΔT {cell['delta_t_ms'] if cell['delta_t_ms'] is not None else float('nan'):9.1f} ms  "
                      f"{cell['decision']}")
            print(f"  {doc['summary']}")
    print(f"both grids: {total:.1f} s with {args.jobs} {args.executor} workers (target <= 120 s on 2 cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
