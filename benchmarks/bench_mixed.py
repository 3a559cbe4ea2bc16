"""Splitwise's mixed pool on the Azure code trace at 70 req/s: bloom-176b on H100 TP8 machines.

Runs `pdplan optimize --mixed` (P/D only, TP8 only, an unbounded H100 cluster, default SLO) and
prints the verified plain P/D plan, the verified plan the search with mixed machines found, and
the machines and dollars it saves (issue 12's acceptance). Empty goodput cache.

    python benchmarks/bench_mixed.py [optimize flags, e.g. --max-rounds 48]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "data" / "traces" / "AzureLLMInferenceTrace_code.csv"
CLUSTER = ("nodes:\n  - {name: h100-dgx, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, "
           "inter_node_gb_s: 50, count: unbounded}\n")


def main() -> int:
    if not TRACE.exists():
        print(f"trace not found: {TRACE}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        cluster = Path(tmp) / "h100.yaml"
        cluster.write_text(CLUSTER)
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "pdplan", "optimize", str(TRACE), "--model", "bloom-176b",
                               "--tp", "8", "--pp", "1", "--target-rate", "70", "--cluster", str(cluster),
                               "--mode", "disaggregated", "--affinity", "high", "--mixed", *sys.argv[1:], "--cache-dir",
                               str(Path(tmp) / "cache"), "--json"], capture_output=True, text=True, check=True)
        wall = time.perf_counter() - started
    doc = json.loads(done.stdout)
    m = doc["mixed_pool"]
    plain = m["baseline"]
    plain_machines = plain["prefill"] + plain["decode"]
    plain_search = doc["fleets"][0]["search"]
    print(f"bloom-176b, Azure code trace at 70 req/s, H100 TP8 machines; {wall:.1f} s")
    print(f"plain P/D (verified):  {plain['prefill']} prefill + {plain['decode']} decode = {plain_machines} machines, "
          f"${plain['cost_per_hour']:,.2f}/h, {plain_search['checks']} checks, proven {plain_search['proven']}")
    if not m["found"]:
        print(f"mixed pool: no cheaper plan passes end to end ({m['search']['checks']} checks)")
        return 0
    machines = m["prefill"] + m["decode"] + m["mixed"]
    print(f"with a mixed pool:     {m['prefill']} prefill + {m['decode']} decode + {m['mixed']} mixed = {machines} "
          f"machines, ${m['cost_per_hour']:,.2f}/h, joint {m['verification']['joint']['mean']:.3f} "
          f"[{m['verification']['joint']['low']:.3f}, {m['verification']['joint']['high']:.3f}], "
          f"ledger {m['ledger_rps']:.1f} req/s, {m['checks']} checks, proven {m['search']['proven']}, "
          f"{'the answer' if m['chosen'] else 'not the answer'}")
    print(f"saves {plain_machines - machines} machines and "
          f"{1 - m['cost_per_hour'] / plain['cost_per_hour']:.1%} of the cost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
