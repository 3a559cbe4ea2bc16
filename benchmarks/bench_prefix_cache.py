"""What prefill-side prefix caching costs the simulator, and what it and the router save, on Mooncake's trace.

    python benchmarks/bench_prefix_cache.py [TRACE_JSONL] [--repeat N] [--rate R] [--prefill N]

TRACE_JSONL defaults to ../shared/data/traces/mooncake_conversation_trace.jsonl (12,031 requests
with hash chains of 512-token blocks). The plan is N prefill + 4 decode llama2-70b instances on
A100-80GB TP4 (the shipped profile, else the hand-built stand-in), layer streaming at 25 GB/s, at
``--rate`` requests per second (the trace's burst shape kept).

Speed: the best and median of ``--repeat`` timed ``simulate`` runs (one core) with every prefix
cache off, with the decode side's only (what the simulator did before prefill caching), with
both sides' (the default), and with a host tier under HBM; requests simulated per second.

Savings, one run per router (least-loaded, round-robin, cache-aware) with the default caches:
the prefill hit rate, prefill GPU-seconds (busy seconds × GPUs per instance), p90 TTFT and the
share of requests within 2 s TTFT.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"


def _plan(prefill: int, prefill_cache: int | None, decode_cache: int | None, tier=None, router="least-loaded"):
    from pdplan.sim.plan import Link, Plan, Pool

    common = {"model": "llama2-70b", "gpu": "a100-80gb", "tp": 4}
    return Plan(pools=(Pool(name="prefill", phase="prefill", replicas=prefill, prefix_cache_blocks=prefill_cache,
                            cache_tier=tier, **common),
                       Pool(name="decode", phase="decode", replicas=4, prefix_cache_blocks=decode_cache, **common)),
                default_link=Link(from_pool=None, to_pool=None, bandwidth_bytes_per_s=25e9, setup_s=0.5e-3),
                transfer_schedule="layer", router=router)


def _time(run, repeat: int) -> tuple[float, float, object]:
    result = run()  # the first call compiles or loads the kernels
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rate", type=float, default=0.5)
    parser.add_argument("--prefill", type=int, default=12)
    args = parser.parse_args()

    from bench_sim import _profiles

    from pdplan.modelref import get_model
    from pdplan.sim import simulate
    from pdplan.sim.plan import CacheTier
    from pdplan.workload import load_trace, spread_over_grid

    workload = spread_over_grid(load_trace(args.trace), 0)  # replayed as the CLI replays it, seed 0
    profiles, source = _profiles()
    model = get_model("llama2-70b")
    print(f"{len(workload):,} requests of {args.trace} at {args.rate} req/s; {args.prefill} prefill + 4 decode "
          f"llama2-70b a100-80gb TP4 ({source} profile)\n")
    host = CacheTier(medium="host", blocks=20_000, bandwidth_bytes_per_s=20e9)
    variants = {"caches off": _plan(args.prefill, 0, 0), "decode cache only": _plan(args.prefill, 0, None),
                "prefill + decode caches": _plan(args.prefill, None, None),
                "+ host tier (20,000 blocks, 20 GB/s)": _plan(args.prefill, None, None, host)}
    print(f"{'caches':<40}{'best s':>9}{'median s':>10}{'requests/s':>13}")
    base = None
    for name, plan in variants.items():
        best, median, _ = _time(lambda: simulate(workload, plan, profiles, model=model, rate_rps=args.rate),
                                args.repeat)
        base = base or best
        print(f"{name:<40}{best:>9.3f}{median:>10.3f}{len(workload) / best:>13,.0f}  ({best / base:.2f}× off)")

    print(f"\n{'router':<16}{'hit rate':>10}{'prefill GPU·s':>15}{'p90 TTFT s':>12}{'TTFT ≤ 2 s':>12}")
    gpus = 4
    for router in ("least-loaded", "round-robin", "cache-aware"):
        plan = dataclasses.replace(variants["prefill + decode caches"], router=router)
        result = simulate(workload, plan, profiles, model=model, rate_rps=args.rate)
        summary = result.summary(ttft_s=2.0)
        prefill = [i for i, phase in enumerate(result.instance_phase) if phase == "prefill"]
        cache = summary.get("prefix_cache", {"hit_rate": 0.0})
        print(f"{router:<16}{cache['hit_rate']:>10.1%}{result.busy_s[prefill].sum() * gpus:>15,.0f}"
              f"{summary['ttft']['p90']:>12.2f}{summary['attainment']['ttft']:>12.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
