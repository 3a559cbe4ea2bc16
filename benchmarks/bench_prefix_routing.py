"""The cheapest verified plan per prefill router on Mooncake's conversation trace, with its cache hit rate.

    python benchmarks/bench_prefix_routing.py [TRACE_JSONL] [--rate R] [--ttft S] [--tpot S] [--jobs N]

For each router (round-robin, least-loaded, cache-aware) runs what ``pdplan optimize TRACE
--router R --target-rate R --ttft S --tpot S`` runs (llama2-70b, the shipped example cluster,
the default search, its result cache as optimize keeps it), then simulates the verified answer
once more at the target rate to report its prefill prefix-cache hit rate and prefill
GPU-seconds (busy seconds × GPUs per instance).
Prints per router: the plan (prefill and decode shapes), its GPUs and $/h, the hit rate, the
prefill GPU-seconds and the wall time; a router with no verified plan prints the closest miss.
Defaults: 12 req/s (3.5× the trace's own), p90 TTFT <= 20 s (Mooncake's prompts average 12k
tokens) and TPOT <= 100 ms.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "mooncake_conversation_trace.jsonl"
ROUTERS = ("round-robin", "least-loaded", "cache-aware")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", default=str(DEFAULT_TRACE))
    parser.add_argument("--rate", type=float, default=12.0)
    parser.add_argument("--ttft", type=float, default=20.0)
    parser.add_argument("--tpot", type=float, default=0.1)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()

    from pdplan.cache import ResultCache
    from pdplan.cli.options import profile_source
    from pdplan.hardware import default_cluster_path, load_cluster
    from pdplan.modelref import get_model
    from pdplan.placement import resolve_fleets
    from pdplan.planner import PlanRequest, optimize
    from pdplan.sim import simulate
    from pdplan.sim.plan import plan_profiles
    from pdplan.slo import slo_from_flags
    from pdplan.workload import load_trace, spread_over_grid

    workload = spread_over_grid(load_trace(args.trace), 0)  # replayed as the CLI replays it, seed 0
    cluster = load_cluster(default_cluster_path())
    model = get_model("llama2-70b")
    source = profile_source(None, None, None, True, None)
    print(f"{len(workload):,} requests of {Path(args.trace).name} at {args.rate:g} req/s; p90 TTFT <= {args.ttft:g} s, "
          f"TPOT <= {args.tpot * 1e3:g} ms; llama2-70b on the example cluster\n")
    print(f"{'router':<14}{'GPUs':>6}{'$/h':>10}{'prefill GPUs':>14}{'hit rate':>10}{'prefill GPU·s':>15}"
          f"{'wall s':>8}  plan")
    for router in ROUTERS:
        request = PlanRequest(workload=workload, model=model, cluster=cluster, profiles=source,
                              slo=slo_from_flags(args.ttft, args.tpot, 0.9), target_rps=args.rate,
                              fleets=resolve_fleets("any", cluster), router=router, jobs=args.jobs)
        started = time.perf_counter()
        report = optimize(request, cache=ResultCache())
        wall = time.perf_counter() - started
        checked = report.answer or report.closest
        plan = checked.plan
        result = simulate(workload, plan, plan_profiles(plan, source), model=model, rate_rps=args.rate)
        prefill = [i for i, phase in enumerate(result.instance_phase) if phase == "prefill"]
        gpus_of = {f"{p.name}/{k}": p.gpus for p in plan.pools for k in range(p.replicas)}
        gpu_s = sum(result.busy_s[i] * gpus_of[result.instances[i]] for i in prefill)
        hit = result.summary().get("prefix_cache", {}).get("hit_rate", 0.0)
        pools = " + ".join(f"{p.phase} {p.gpu} TP{p.tp} PP{p.pp} ×{p.replicas}" for p in plan.pools)
        verdict = "" if report.answer is not None else "  (no verified plan; the closest miss)"
        print(f"{router:<14}{plan.gpus:>6}{checked.solution.usd_per_hour:>10.2f}"
              f"{sum(p.gpus * p.replicas for p in plan.pools_of('prefill')):>14}{hit:>10.1%}{gpu_s:>15,.0f}"
              f"{wall:>8.0f}  {pools}{verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
