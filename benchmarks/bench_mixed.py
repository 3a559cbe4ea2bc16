"""Splitwise's mixed pool and borrowing on the Azure code trace at 70 req/s: bloom-176b on H100 TP8.

Runs `pdplan optimize --mixed --borrow` (P/D only, TP8 only, an unbounded H100 cluster, default
SLO) and prints the verified plain P/D plan, the verified plans the searches with mixed machines
and with lent machines found, and the machines and dollars each saves (issues 12 and 24). Empty
goodput cache.

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
                               "--mode", "disaggregated", "--affinity", "high", "--mixed", "--borrow", *sys.argv[1:],
                               "--cache-dir", str(Path(tmp) / "cache"), "--json"],
                              capture_output=True, text=True, check=True)
        wall = time.perf_counter() - started
    doc = json.loads(done.stdout)
    m = doc["mixed_pool"]
    plain = m["baseline"]
    plain_machines = plain["prefill"] + plain["decode"]
    plain_search = doc["fleets"][0]["search"]
    print(f"bloom-176b, Azure code trace at 70 req/s, H100 TP8 machines; {wall:.1f} s")
    print(f"plain P/D (verified):  {plain['prefill']} prefill + {plain['decode']} decode = {plain_machines} machines, "
          f"${plain['cost_per_hour']:,.2f}/h, {plain_search['checks']} checks, proven {plain_search['proven']}")
    for label, found in (("with a mixed pool", m), ("borrowing", doc["borrowing"])):
        if not found["found"]:
            print(f"{label}: no plan passes end to end ({found['search']['checks']} checks)")
            continue
        machines = found["prefill"] + found["decode"] + found["mixed"]
        joint = found["verification"]["joint"]
        lent = found.get("lent_work") or {}
        took = (f", lent: {lent.get('whole_requests_on_decode', 0)} whole requests on decode machines, "
                f"{lent.get('whole_requests_on_prefill', 0)} whole and {lent.get('decodes_on_prefill', 0)} decodes "
                "on prefill machines" if lent else "")
        print(f"{label + ':':<22} {found['prefill']} prefill + {found['decode']} decode + {found['mixed']} mixed = "
              f"{machines} machines, ${found['cost_per_hour']:,.2f}/h, joint {joint['mean']:.3f} "
              f"[{joint['low']:.3f}, {joint['high']:.3f}], ledger {found['ledger_rps']:.1f} req/s, "
              f"{found['checks']} checks, proven {found['search']['proven']}, "
              f"{'the answer' if found['chosen'] else 'not the answer'}{took}")
        print(f"{'':<22} saves {plain_machines - machines} machines and "
              f"{1 - found['cost_per_hour'] / plain['cost_per_hour']:.1%} of the cost")
    return 0


if __name__ == "__main__":
    sys.exit(main())
