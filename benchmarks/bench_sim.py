"""Simulator speed on the Azure conversation trace: simulated requests per second of wall time.

    python benchmarks/bench_sim.py [TRACE_CSV] [--repeat N]

TRACE_CSV defaults to ../shared/data/traces/AzureLLMInferenceTrace_conv.csv (19,366 requests).
Runs examples/plan_colocated.yaml (4 colocated llama2-70b, chunked 512) and
examples/plan_disagg.yaml (2 prefill + 2 decode, layer streaming) at the trace's own rate, on
one core. Profiles: the shipped llama2-70b a100-80gb TP4 profile when present, else the
hand-built stand-in (tests/handbuilt.py). Prints, per plan, the first call's time (numba
compile, or loading its cache), the best and median of N timed runs of ``simulate`` end to end
(workload in, per-request records and clocks out), requests simulated per second, and events
per request; then a few SLO numbers so the run is seen to be doing real work. Then the same
for one decode instance of 16 attention data-parallel ranks judged alone (the profile's rank
repeated 16 times, each rank its own batch and KV, every step the slowest rank's) beside one
of a single rank, both at the trace's rate. Exits 1 below the target of 200,000 simulated
requests/s for the disaggregated plan.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
TARGET_RPS = 200_000


def _profiles():
    import sys

    from pdplan.latency.profile import shipped_profiles

    sys.path.insert(0, str(ROOT))  # the stand-in is a test helper
    from tests.handbuilt import llama2_70b_a100_tp4

    key = ("llama2-70b", "a100-80gb", 4, 1)
    try:
        shipped = shipped_profiles()
    except Exception:  # noqa: BLE001 - an empty or half-filled folder: fall back, and say so
        shipped = {}
    if key in shipped:
        return {key: shipped[key]}, "shipped"
    stand_in = llama2_70b_a100_tp4()
    return {key: stand_in}, "hand-built stand-in (tests/handbuilt.py)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    from pdplan.modelref import get_model
    from pdplan.sim import load_plan, simulate
    from pdplan.workload import load_trace

    workload = load_trace(args.trace)
    profiles, origin = _profiles()
    model = get_model("llama2-70b")
    print(f"trace: {args.trace} ({len(workload):,} requests, {workload.arrival_s[-1]:.0f} s)")
    print(f"profile: llama2-70b a100-80gb TP4, {origin}; cores visible: {os.cpu_count()}, one used")
    print(f"{'plan':<44} {'first s':>9} {'best s':>8} {'median s':>8} {'req/s':>10} {'events/req':>10}")
    rates = {}
    for name in ("plan_colocated.yaml", "plan_disagg.yaml"):
        plan = load_plan(ROOT / "examples" / name)
        started = time.perf_counter()
        result = simulate(workload, plan, profiles, model=model)
        first = time.perf_counter() - started
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            result = simulate(workload, plan, profiles, model=model)
            times.append(time.perf_counter() - started)
        best = min(times)
        rates[name] = len(workload) / best
        print(f"{plan.name[:44]:<44} {first:9.2f} {best:8.4f} {statistics.median(times):8.4f} "
              f"{rates[name]:10,.0f} {result.events / len(workload):10.2f}")
        s = result.summary(ttft_s=1.0, tpot_s=0.1)
        print(f"    TTFT p50/p99 {s['ttft']['p50']:.3f}/{s['ttft']['p99']:.3f} s, TPOT p50/p99 "
              f"{s['tpot']['p50'] * 1e3:.1f}/{s['tpot']['p99'] * 1e3:.1f} ms, attainment (1 s, 100 ms) "
              f"ttft {s['attainment']['ttft']:.3f} tpot {s['attainment']['tpot']:.3f} "
              f"joint {s['attainment']['joint']:.3f}")
    _wide_decode(workload, next(iter(profiles.values())), args.repeat)
    disagg = rates["plan_disagg.yaml"]
    verdict = "meets" if disagg >= TARGET_RPS else "MISSES"
    print(f"disaggregated: {disagg:,.0f} simulated requests/s — {verdict} the {TARGET_RPS:,} target")
    return 0 if disagg >= TARGET_RPS else 1


def _wide_decode(workload, profile, repeat: int) -> None:
    """Simulated requests per second of one decode instance alone, with 1 and with 16 ranks."""
    import dataclasses

    from pdplan.sim import simulate_pool

    for dp in (1, 16):
        wide = dataclasses.replace(profile, dp=dp)
        result = simulate_pool(workload, wide, phase="decode")  # compile or load the kernels
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            result = simulate_pool(workload, wide, phase="decode")
            times.append(time.perf_counter() - started)
        best = min(times)
        label = f"decode instance alone, {dp} rank{'s' if dp > 1 else ''}"
        print(f"{label:<44} {'':>9} {best:8.4f} {statistics.median(times):8.4f} "
              f"{len(workload) / best:10,.0f} {result.events / len(workload):10.2f}")


if __name__ == "__main__":
    raise SystemExit(main())
