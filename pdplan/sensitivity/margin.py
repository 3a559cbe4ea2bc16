"""The net margin of P/D over colocated serving, per request, measured from simulations (0x0FD).

0x0FD's decision coordinate is ΔT = T_saved − T_transfer_exposed − T_route − T_failure. Each term
is the difference in mean end-to-end latency per request (E2E = TTFT + (output − 1) · TPOT, so a
difference in it is a difference in TTFT plus one in the decode clock) between two simulations
of the same requests, each run of the verification replayed on:

* C — the colocated plan;
* D₀ — the P/D plan with free handoffs: KV visible the moment prefill ends, no router hop, no
  transfer failures (infinite link bandwidth, no setup);
* D₁ — D₀ with the plan's real links;
* D₂ — D₁ with transfer failures (retried or recomputed, drawn from the seed);
* D — D₂ with the router's hop: the P/D plan as verified.

T_saved = C − D₀ is the interference the split removes (split into its TTFT and decode parts);
T_transfer_exposed = D₁ − D₀ is what the handoff adds after prefill, the non-overlapped
transfer and the queueing it causes at decode; T_failure = D₂ − D₁; T_route = D − D₂. The terms
telescope, so ΔT = C − D, the mean latency per request P/D saves; positive means P/D is faster.
Requests a plan rejects (too long for every instance's KV) are left out of every mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from pdplan.sim import Plan, simulate
from pdplan.verify import run_workloads

#: Milliseconds are written to this many decimals (a microsecond).
MS_DECIMALS = 3


@dataclass(frozen=True, kw_only=True)
class Margin:
    """ΔT and its terms, in milliseconds per request, measured at ``rate_rps``."""

    rate_rps: float
    requests: int                  #: requests in each mean (all runs, none rejected by any plan)
    saved_ms: float
    saved_ttft_ms: float
    saved_decode_ms: float
    transfer_exposed_ms: float
    failure_ms: float
    route_ms: float
    delta_ms: float                #: C − D, measured directly (equals the terms' sum)
    observed_exposed_ms: float     #: mean KV visible − prefill end in D, as the records show it
    failures_per_request: float    #: failed transfer attempts per request in D

    def to_dict(self) -> dict:
        return {key: round(value, MS_DECIMALS) if key.endswith("_ms") else value
                for key, value in self.__dict__.items()}


def variants(plan: Plan) -> tuple[Plan, Plan, Plan, Plan]:
    """D₀, D₁, D₂ and D of a P/D plan (see the module docstring)."""
    free = tuple(replace(link, bandwidth_bytes_per_s=math.inf, setup_s=0.0) for link in plan.links)
    default = None if plan.default_link is None else replace(plan.default_link, bandwidth_bytes_per_s=math.inf,
                                                             setup_s=0.0)
    linked = replace(plan, failure_rate=0.0, route_s=0.0)
    return (replace(linked, links=free, default_link=default), linked, replace(plan, route_s=0.0), plan)


def net_margin(workload, colocated: Plan, disaggregated: Plan, profiles: dict, *, model, rate_rps: float,
               runs: int, seed: int, arrivals: str, min_run_s: float = 0.0) -> Margin:
    """ΔT and its terms for these two plans at ``rate_rps``, over the verification's runs."""
    plans = (colocated, *variants(disaggregated))
    e2e = [[] for _ in plans]
    ttft = [[] for _ in plans]
    exposed, failures = [], []
    for run in run_workloads(workload, rate_rps, runs=runs, seed=seed, arrivals=arrivals, min_run_s=min_run_s):
        results = [simulate(run, plan, profiles, model=model, seed=seed) for plan in plans]
        kept = np.logical_and.reduce([np.isfinite(r["e2e_s"]) for r in results])
        for i, result in enumerate(results):
            e2e[i].append(result["e2e_s"][kept])
            ttft[i].append(result["ttft_s"][kept])
        exposed.append(results[-1]["exposed_transfer_s"][kept])
        failures.append(results[-1]["transfer_failures"][kept])
    mean_e2e = [float(np.concatenate(x).mean()) * 1e3 if sum(map(len, x)) else math.nan for x in e2e]
    mean_ttft = [float(np.concatenate(x).mean()) * 1e3 if sum(map(len, x)) else math.nan for x in ttft]
    c, d0, d1, d2, d = mean_e2e
    return Margin(rate_rps=rate_rps, requests=sum(map(len, e2e[0])), saved_ms=c - d0,
                  saved_ttft_ms=mean_ttft[0] - mean_ttft[1], saved_decode_ms=(c - d0) - (mean_ttft[0] - mean_ttft[1]),
                  transfer_exposed_ms=d1 - d0, failure_ms=d2 - d1, route_ms=d - d2, delta_ms=c - d,
                  observed_exposed_ms=float(np.concatenate(exposed).mean()) * 1e3 if exposed else math.nan,
                  failures_per_request=float(np.concatenate(failures).mean()) if failures else math.nan)
