"""`pdplan optimize --windows` on the Azure conversation trace: 24 windows, timed end to end.

The trace (19,366 requests, about an hour) is cut into 24 equal windows; every window is planned,
placed and verified on its own requests, the whole schedule is simulated with its changes drained
first, and the static peak and mean plans and each window planned alone are verified beside it.
Empty goodput cache, numba's compiled simulator already cached. Target (issue 12): within 60 s on
2 cores (pass ``--jobs=2`` to use both); the schedule within 10% of each window planned alone plus
its own changes (issue 24).

    python benchmarks/bench_windows.py [TRACE] [optimize flags, e.g. --mixed]

Issue 24's diurnal day (4 h, rate 2 → 8 → 2 req/s, so 24 windows of 10 minutes):

    pdplan trace synth --requests 72000 --rate 5 --diurnal 4 --period 14400 \
        --prompt lognormal:1500:0.8 --output lognormal:200:0.7 --seed 1 -o day.csv
    python benchmarks/bench_windows.py day.csv
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"


def main() -> int:
    given = [a for a in sys.argv[1:] if not a.startswith("--")]
    trace = Path(given[0]) if given else DEFAULT_TRACE
    flags = [a for a in sys.argv[1:] if a not in given[:1]]
    if not trace.exists():
        print(f"trace not found: {trace}", file=sys.stderr)
        return 2
    stats = json.loads(subprocess.run([sys.executable, "-m", "pdplan", "trace", "stats", str(trace), "--json"],
                                      capture_output=True, text=True, check=True).stdout)
    length = stats["duration_s"] / 24
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pdplan", "optimize", str(trace), "--windows", f"{length:.6f}",
                               "--cache-dir", tmp, "--json", *flags], capture_output=True, text=True)
        wall = time.perf_counter() - started
    doc = json.loads(done.stdout)
    s = doc["schedule"]
    print(f"trace: {trace.name} {' '.join(flags)}, 24 windows of {length:.1f} s; exit {done.returncode}; "
          f"{wall:.1f} s (target <= 60 s)")
    if s is None:
        print("no schedule passes every window")
        return 1
    rates = [w["rate_rps"] for w in doc["windows"]]
    print(f"window rates {min(rates):.2f}–{max(rates):.2f} req/s; {s['mode']} ({', '.join(s['shapes'])}), "
          f"{s['rounds']} program round(s), solver {s['solver_status']}; "
          f"timeline: {'every window passes' if doc['timeline']['passed'] else 'MISSES'}, "
          f"{len(doc['timeline']['changes'])} changes")
    for kind in ("schedule", "static_peak", "static_mean"):
        p = doc[kind]
        if p is not None:
            print(f"  {kind:<12} {p['gpu_hours']:8.2f} GPU-h  ${p['usd']:8.2f}  "
                  f"windows missed {len(p['missed_windows'])}")
    b = doc["bounds"]
    print(f"  each window alone, verified: ${b['windows_alone_usd']:.2f} "
          f"(program bound ${b['window_optima_usd']:.2f}); "
          f"one shape per phase all day (program): ${b['one_shape_usd']:.2f}; schedule / (alone + its changes) = "
          f"{s['usd'] / (b['windows_alone_usd'] + s['change_usd']):.3f} (target <= 1.10); {s['reshapes']} reshapes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
