"""The whole `pdplan optimize --fleet all` on the Azure conv trace (19,366 requests), timed end to end.

Three runs, each a fresh process:
  * cold: empty goodput cache and empty numba compile cache (a first run on a new machine);
  * cold cache: empty goodput cache, numba's compiled simulator already cached;
  * warm: the goodput cache from the run before.
Targets (issues 4 and 7): <= 60 s cold, <= 10 s warm. Prints the end-to-end simulations each run
ran (a warm run reuses every cached check and runs none).

    python benchmarks/bench_optimize.py [TRACE]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"


def run(trace: Path, cache: Path, numba_cache: Path | None) -> tuple[float, dict]:
    env = dict(os.environ)
    if numba_cache is not None:
        env["NUMBA_CACHE_DIR"] = str(numba_cache)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pdplan", "optimize", str(trace), "--fleet", "all",
                           "--cache-dir", str(cache), "--json"], capture_output=True, text=True, env=env, check=True)
    return time.perf_counter() - started, json.loads(done.stdout)


def main() -> int:
    trace = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_TRACE
    if not trace.exists():
        print(f"trace not found: {trace}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = [("cold (goodput + numba caches empty)", *run(trace, tmp / "c1", tmp / "numba"))]
        rows.append(("cold goodput cache, numba compiled", *run(trace, tmp / "c2", None)))
        rows.append(("warm goodput cache", *run(trace, tmp / "c2", None)))
    print(f"trace: {trace.name}")
    print(f"{'run':<38} {'wall s':>7} {'computed':>9} {'cached':>7} {'e2e sims':>8}  decision")
    for name, wall, doc in rows:
        search = doc["search"]
        meta = doc["run"]
        print(f"{name:<38} {wall:>7.1f} {meta['cache']['misses']:>9} {meta['cache']['hits']:>7} "
              f"{meta['end_to_end_simulations']:>8}  {doc['decision']} on {doc['fleet']}, {doc['gpus_total']} GPUs, "
              f"${doc['cost_per_hour']:.2f}/h (bound ${search['lower_bound']:.2f}, {search['checks']} checks), "
              f"joint {doc['verification']['joint']['mean']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
