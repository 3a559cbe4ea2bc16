"""`pdplan sensitivity grid` on the Azure code and conversation traces, timed end to end.

The issue-11 grid: KV link bandwidth {1, 10, 100} GB/s × prompt scale {0.5, 1, 2}, llama2-70b with
the shipped profiles, the default cluster and SLO, 2 local processes, an empty goodput cache
(numba's compiled simulator already cached, as after any first run). Target: both grids within
120 s on 2 cores. Prints each grid's wall time, its decisions and its summary.

    python benchmarks/bench_grid.py [--jobs N] [--executor local|ray]
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--executor", default="local", choices=["local", "ray"])
    args = parser.parse_args()
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
