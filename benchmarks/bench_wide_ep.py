"""Wide expert parallelism at scale, timed: DeepSeek-R1 (FP8) on 64 nodes x 8 H200.

`pdplan optimize` on the Azure conversation trace rescaled to a rate that needs most of the 512 GPUs
(``--nodes`` and ``--rate`` scale it: 256 nodes at 4,800 req/s is a plan of about 1,500 GPUs), TPOT
<= 50 ms p90 and TTFT <= 2 s p90, attention DP sizes 1, 8, 16 and 32 allowed (wide shapes of one to
four nodes), SGLang's operator tables. Cold: an empty goodput cache and a fresh process. Prints the
wall time and peak resident memory (targets: <= 120 s on 2 cores, < 8 GiB), the verified answer, the
best TP x PP plan and the best colocated plan beside it, how the verification runs were made (the
trace repeated back to back, and the seconds of arrivals each run held), and the files the SGLang
and vLLM scripts, the Kubernetes bundle and the Dynamo graph of the manifest write (or the rule a
format refuses it by).

    python benchmarks/bench_wide_ep.py [TRACE] [--rate RPS] [--nodes N] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
CLUSTER = ROOT / "examples" / "cluster_h200_64.yaml"


def cluster(nodes: int, folder: Path) -> Path:
    """The example cluster, or a copy of it with ``nodes`` nodes of its one node type."""
    spec = yaml.safe_load(CLUSTER.read_text())
    (node,) = spec["nodes"]
    if node["count"] == nodes:
        return CLUSTER
    path = folder / f"cluster_h200_{nodes}.yaml"
    path.write_text(yaml.safe_dump({**spec, "nodes": [{**node, "count": nodes}]}, sort_keys=False))
    return path


def optimize(trace: Path, rate: float, nodes: int, folder: Path, jobs: int) -> tuple[float, float, dict, str]:
    """Wall seconds, peak GiB, the --json document and stderr of one cold optimize."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pdplan", "optimize", str(trace), "--model", "deepseek-r1", "--dtype", "fp8",
         "--engine", "sglang", "--cluster", str(cluster(nodes, folder)), "--target-rate", f"{rate:g}", "--ttft", "2s",
         "--tpot", "50ms", "--dp", "1", "--dp", "8", "--dp", "16", "--dp", "32", "--jobs", str(jobs),
         "--cache-dir", str(folder / "cache"), "--out", str(folder / "manifest.yaml"), "--json"],
        capture_output=True, text=True, env=dict(os.environ), check=False)
    wall = time.perf_counter() - started
    peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    doc = json.loads(done.stdout) if done.stdout.strip() else {}
    return wall, peak_gib, doc, done.stderr


def shapes(plan: dict) -> str:
    parts = []
    for phase in ("prefill", "decode", "colocated"):
        for s in (plan.get(phase) or {}).get("shapes", ()):
            wide = f" DP{s['dp']} EP{s['ep']}" if "dp" in s else ""
            cap = f" (at most {s['max_running_requests']} requests per rank)" if "max_running_requests" in s else ""
            parts.append(f"{phase} {s['replicas']} x TP{s['tp']}{wide} PP{s['pp']}{cap}")
    return " + ".join(parts)


def export(folder: Path, fmt: str) -> str:
    """What ``pdplan export --format fmt`` of the manifest wrote (its files), or the line it refused with."""
    out = folder / fmt
    done = subprocess.run([sys.executable, "-m", "pdplan", "export", str(folder / "manifest.yaml"), "--format", fmt,
                           "--out", str(out)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"refused (exit {done.returncode}): {' '.join(done.stderr.split())}"
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    return f"{len(files)} files: {', '.join(files[:4])}{' ...' if len(files) > 4 else ''}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--rate", type=float, default=1200.0, help="target rate, req/s")
    parser.add_argument("--nodes", type=int, default=64, help="8-GPU H200 nodes in the cluster")
    parser.add_argument("--jobs", type=int, default=2, help="optimize --jobs (worker processes)")
    args = parser.parse_args()
    if not args.trace.exists():
        sys.exit(f"skipped: {args.trace} is absent (the shared data folder)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        wall, peak, doc, err = optimize(args.trace, args.rate, args.nodes, folder, args.jobs)
        print(f"optimize DeepSeek-R1 FP8, {args.nodes} x 8 H200, {args.rate:g} req/s, --jobs {args.jobs}: "
              f"{wall:.1f} s cold, peak {peak:.2f} GiB (the largest process)")
        if not doc.get("decision"):
            print(err.strip().splitlines()[-1] if err.strip() else "no answer")
            return
        v = doc["verification"]
        print(f"answer ({doc['decision']}): {shapes(doc)}; {doc['gpus_total']} GPUs, ${doc['cost_per_hour']:,.2f}/h; "
              f"verified on {len(v['seeds'])} runs x {v['requests'][0]:,} requests (the trace x{v['trace_copies']}, "
              f"{v['run_s']:.0f} s of arrivals each, --min-run {v['min_run_s']:g} s); joint {v['joint']['mean']:.3f}")
        narrow = doc.get("tp_only_baseline")
        if narrow is None:
            print("best TP x PP plan: the answer itself (no attention DP / EP)")
        elif narrow["found"]:
            print(f"best TP x PP plan ({narrow['decision']}): {shapes(narrow)}; {narrow['gpus_total']} GPUs, "
                  f"${narrow['cost_per_hour']:,.2f}/h; going wide saves {narrow['wide_saves']:.1%}")
        else:
            print(f"best TP x PP plan: none passes ({narrow['reason']})")
        base = doc.get("colocated_baseline")
        if doc["decision"] == "colocated":
            print("best colocated plan: the answer")
        elif base is None:
            print("best colocated plan: none passes end to end")
        else:
            print(f"best colocated plan: {shapes(base)}; {base['gpus_total']} GPUs, ${base['cost_per_hour']:,.2f}/h")
        reduced = doc.get("colocated_fallback")
        if reduced is not None:
            print(f"colocated fallback (registered for rollback): {shapes(reduced)}; {reduced['gpus_total']} GPUs, "
                  f"verified at {reduced['rate_rps']:.4g} req/s ({reduced['rate_rps'] / args.rate:.0%} of the target)")
        for fmt in ("sglang", "vllm", "k8s", "dynamo"):
            print(f"export {fmt}: {export(folder, fmt)}")


if __name__ == "__main__":
    main()
