"""Mixture-of-experts planning, timed: composing a MoE profile, and `optimize` on DeepSeek-V3.

Two figures (issue 21):

* composing one MoE shape's profile from AIConfigurator's operator tables, cold (a fresh process:
  parquet tables read, grid timed, profile fitted) and warm (the composed-profile cache);
* `pdplan optimize` of DeepSeek-V3 (FP8) on the example H200 cluster over the Azure conversation
  trace, cold (empty goodput cache, fresh process), with the process's peak resident memory.
  Targets: <= 60 s cold on 2 cores, peak memory under 4 GiB.

    python benchmarks/bench_moe.py [TRACE]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv"
COMPOSE = """
import sys, time
from pdplan.cache import ResultCache
from pdplan.hardware import get_gpu
from pdplan.latency.source import ProfileSource
from pdplan.modelref import get_model
started = time.perf_counter()
profile = ProfileSource({}).profile(get_model(sys.argv[1], dtype=sys.argv[2]), get_gpu(sys.argv[3]), int(sys.argv[4]),
                                    1, cache=ResultCache(sys.argv[5]))
print(time.perf_counter() - started, profile.provenance.source)
"""
SHAPES = (("deepseek-v3", "fp8", "h200-141gb", 8), ("qwen3-235b-a22b", "fp8", "h100-80gb", 8),
          ("gpt-oss-120b", "mxfp4", "h100-80gb", 1))


def compose(shape: tuple, cache: Path) -> tuple[float, str]:
    done = subprocess.run([sys.executable, "-c", COMPOSE, *map(str, shape), str(cache)], capture_output=True,
                          text=True, check=True)
    seconds, source = done.stdout.split()
    return float(seconds), source


def optimize(trace: Path, cache: Path) -> tuple[float, float, dict]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pdplan", "optimize", str(trace), "--model", "deepseek-v3",
                           "--dtype", "fp8", "--cluster", str(ROOT / "examples" / "cluster_h200.yaml"),
                           "--cache-dir", str(cache), "--json"], capture_output=True, text=True,
                          env=dict(os.environ), check=False)
    wall = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if done.returncode != 0:
        print(done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}")
        return wall, max(peak_kib, before) / 2**20, {}
    return wall, max(peak_kib, before) / 2**20, json.loads(done.stdout)


def main() -> int:
    trace = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_TRACE
    if not trace.exists():
        print(f"trace not found: {trace}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"{'composed profile':<40} {'cold s':>7} {'warm s':>7}  source")
        for shape in SHAPES:
            cold, source = compose(shape, tmp / "compose")
            warm, _ = compose(shape, tmp / "compose")
            label = f"{shape[0]}@{shape[1]} {shape[2]} TP{shape[3]}"
            print(f"{label:<40} {cold:>7.2f} {warm:>7.2f}  {source}")
        wall, peak_gib, doc = optimize(trace, tmp / "optimize")
    print(f"\noptimize deepseek-v3@fp8 on examples/cluster_h200.yaml, {trace.name}, cold: {wall:.1f} s, "
          f"peak memory {peak_gib:.2f} GiB")
    if doc:
        print(f"  {doc['decision']}: {doc['gpus_total']} GPUs, ${doc['cost_per_hour']:.2f}/h, "
              f"{doc['search']['checks']} checks, {doc['run']['end_to_end_simulations']} end-to-end simulations, "
              f"joint {doc['verification']['joint']['mean']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
