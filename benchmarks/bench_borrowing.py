"""Splitwise's five bloom runs replayed: plain P/D and borrowing, judged by Splitwise's own SLOs.

The runs are those of Splitwise's simulator (Mutinifni/splitwise-sim, ``splitwise_hh`` runs):
bloom-176b on DGX-H100 machines (TP8, one instance each), its ``rr_code_70_2min`` trace, with
27 + 3, 30 + 4, 33 + 5, 36 + 6 and 40 + 6 prompt + token machines. Each is simulated here twice,
as plain P/D (Splitwise's ``kv_jsq``: never borrows) and with borrowing (its ``mixed_pool``:
MixedPoolScheduler, prompt queue threshold 8,192 tokens, a machine lent when its pool is full),
with the same parts Splitwise uses:

* the trace regenerated as ``generate_trace.generate_code_traces`` makes it (Poisson arrivals at
  70 req/s for 120 s, prompt and output lengths drawn apart from the Azure code trace), with the
  numpy global seed 0 (Splitwise sets none);
* bloom's profiles fitted by pdplan to Splitwise's own ``perf_model.csv`` (shared data);
* KV moved after the prompt over a 200 GiB/s link (Splitwise's ``transfer_bandwidth``);
* prompt batches of at most 2,048 tokens (its instances' ``max_batch_tokens``).

Verdicts use Splitwise's definitions (notebooks/plots.ipynb ``get_data``/``get_slo`` and
``utils.find_within_slo``): TTFT = prompt done − arrival (no transfer), TBT = (E2E − TTFT) / output
tokens, each as a slowdown over bloom alone on an idle A100 TP8 (the same perf model), and a run
passes when the p50/p90/p99 slowdowns stay under TTFT 2/3/6, TBT 1.25/1.5/5, E2E 1.25/1.5/5.

    python benchmarks/bench_borrowing.py [--splitwise-results results_table.csv]

``--splitwise-results``: a CSV of Splitwise's own runs (columns cfg, sched, ttft_p99, tbt_p99,
e2e_p99, verdict), printed beside pdplan's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from pdplan.latency.importers import profiles_from_source
from pdplan.modelref import get_model
from pdplan.sim import Link, Plan, Pool, simulate

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared" / "data"
TRACE = SHARED / "traces" / "AzureLLMInferenceTrace_code.csv"
PERF_MODEL = SHARED / "profiles" / "splitwise_perf_model.csv"
RUNS = ((27, 3), (30, 4), (33, 5), (36, 6), (40, 6))
RATE, SECONDS = 70, 120
GIB = 1024**3
#: Splitwise's instances' max_batch_tokens (configs/start_state/splitwise.yaml), which lent machines
#: batch both phases under too (the plan's borrow_chunk_tokens default)
BATCH_TOKENS = 2048
#: Splitwise's SLOs on slowdowns: (p50, p90, p99) per clock
SLO = {"ttft": (2.0, 3.0, 6.0), "tbt": (1.25, 1.5, 5.0), "e2e": (1.25, 1.5, 5.0)}


def splitwise_trace() -> dict:
    """``rr_code_70_2min`` as Splitwise's generate_trace.py draws it, numpy global seed 0."""
    np.random.seed(0)
    n = 10**6
    arrival = np.cumsum(stats.expon(scale=1 / RATE).rvs(size=n))
    azure = pd.read_csv(TRACE)
    prompt = azure["ContextTokens"].sample(n, replace=True).to_numpy()
    output = azure["GeneratedTokens"].sample(n, replace=True).to_numpy()
    keep = arrival < SECONDS
    return {"arrival_s": arrival[keep], "prompt_tokens": prompt[keep], "output_tokens": output[keep]}


def plan(prompt: int, token: int, borrow: bool) -> Plan:
    def pool(name, phase, n, **kw):
        return Pool(name=name, phase=phase, model="bloom-176b", gpu="h100-80gb", tp=8, replicas=n, **kw)

    return Plan(pools=(pool("prompt", "prefill", prompt, max_prefill_batch_tokens=BATCH_TOKENS),
                       pool("token", "decode", token)),
                default_link=Link(from_pool=None, to_pool=None, bandwidth_bytes_per_s=200 * GIB),
                transfer_schedule="request", borrow=borrow, spill_tokens=8192, kv_share=1.0)


def verdict(result, baseline) -> tuple[bool, str, dict]:
    """Splitwise's verdict on a run, its tightest SLO (slowdown over limit) and its p99 latencies
    in seconds."""
    c = result.columns
    prompt, output = c["prompt_tokens"], c["output_tokens"]
    ttft = c["prefill_end_s"] - c["arrival_s"]
    e2e = c["finish_s"] - c["arrival_s"]
    tbt = (e2e - ttft) / output
    base_ttft = np.array([baseline.prefill_time_s([int(p)]) for p in prompt])
    base_tbt = np.array([baseline.decode_step_s(1, int(p)) for p in prompt])
    slow = {"ttft": ttft / base_ttft, "tbt": tbt / base_tbt, "e2e": e2e / (base_ttft + base_tbt * (output - 1))}
    ratios = {f"{k} p{q}": float(np.percentile(slow[k], q)) / bound
              for k, limits in SLO.items() for q, bound in zip((50, 90, 99), limits)}
    tightest = max(ratios, key=ratios.get)
    p99 = {"ttft": np.percentile(ttft, 99), "tbt": np.percentile(tbt, 99), "e2e": np.percentile(e2e, 99)}
    return max(ratios.values()) < 1, f"{tightest} {ratios[tightest]:.2f}", p99


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--splitwise-results", type=Path, help="Splitwise's own results (CSV) to print beside")
    args = parser.parse_args()
    if not (TRACE.exists() and PERF_MODEL.exists()):
        print(f"shared data not found under {SHARED}", file=sys.stderr)
        return 2
    profiles = {p.key: p for p in profiles_from_source(PERF_MODEL, "splitwise", model="bloom-176b").profiles}
    baseline = next(p for p in profiles.values() if p.gpu == "a100-80gb")
    trace = splitwise_trace()
    theirs = pd.read_csv(args.splitwise_results) if args.splitwise_results else None
    model = get_model("bloom-176b")
    print(f"bloom-176b, Splitwise's rr_code_70_2min ({len(trace['arrival_s']):,} requests), DGX-H100 TP8, "
          "Splitwise's SLOs; p99 in seconds")
    print(f"{'run':>8} {'policy':>9} | {'pdplan':>7} {'tightest':>13} {'TTFT':>6} {'TBT':>6} {'E2E':>6} "
          f"{'lent':>14} {'s':>5}"
          + (f" | {'Splitwise':>9} {'TTFT':>6} {'TBT':>6} {'E2E':>6}" if theirs is not None else ""))
    agree = 0
    for prompt, token in RUNS:
        for borrow, sched in ((False, "kv_jsq"), (True, "mixed_pool")):
            started = time.perf_counter()
            result = simulate(trace, plan(prompt, token, borrow), profiles, model=model)
            wall = time.perf_counter() - started
            passed, tightest, p99 = verdict(result, baseline)
            lent = result.summary().get("borrowing", {})
            took = "/".join(str(lent.get(k, 0)) for k in ("whole_requests_on_decode", "whole_requests_on_prefill",
                                                          "decodes_on_prefill")) if borrow else "-"
            line = (f"{prompt:>3} + {token:<2} {'borrow' if borrow else 'plain':>9} | "
                    f"{'PASS' if passed else 'MISS':>7} {tightest:>13} "
                    f"{p99['ttft']:6.2f} {p99['tbt']:6.3f} {p99['e2e']:6.2f} {took:>14} {wall:5.1f}")
            if theirs is not None:
                row = theirs[(theirs.cfg == f"{prompt}P/{token}T") & theirs.sched.str.startswith(sched)]
                if len(row):
                    r = row.iloc[0]
                    agree += (r.verdict == "PASS") == passed
                    line += f" | {r.verdict:>9} {r.ttft_p99:6.2f} {r.tbt_p99:6.3f} {r.e2e_p99:6.2f}"
            print(line)
    if theirs is not None:
        print(f"verdicts that agree with Splitwise's: {agree} of {2 * len(RUNS)}")
    print("tightest: the SLO closest to its limit, as slowdown / limit (a miss above 1); lent: requests run whole "
          "on a decode machine / whole on a prefill machine / decodes handed to a prefill machine")
    return 0


if __name__ == "__main__":
    sys.exit(main())
