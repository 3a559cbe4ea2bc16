"""Splitwise's mixed pool as a third kind of capacity: the verified P/D plan, shrunk by machines
that take either phase when it is short.

From the best verified disaggregated plan (p prefill and d decode instances, one shape each), the
search proposes plans of p′ ≤ p prefill, d′ ≤ d decode and m ≥ 1 mixed instances (colocated,
chunked, the best measured colocated shape on the prefill pool's GPU type) that cost less. The
article's capacity ledger (0x08G) ranks them,

    G_mixed = min(c_P(p′) + m·g_M,  c_D(d′) + m·g_M),

with c_P, c_D the pool curves and g_M the mixed pool's simulated capacity (a mixed machine runs
both phases of the requests it takes, so its rate counts once in each phase). As in the verified
search's descent, the strongest proposal cheaper than the best plan so far is verified end to
end, spill thresholds included; a pass lowers the ceiling, a miss excludes every plan it
dominates, and proposals the ledger puts below ``SEARCH_FLOOR`` of what it gives the plain plan
are not tried (the ledger, like the program, may be pessimistic: the simulation decides). The
cheapest plan that passes is reported beside the answer, with what it saves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pdplan.placement import Candidate
from pdplan.planner.checks import Verifier
from pdplan.planner.request import PlanRequest
from pdplan.planner.search import SEARCH_FLOOR, SearchResult
from pdplan.sim import Plan, Pool
from pdplan.verify import Verification

#: Mixed machines a proposal may have at most.
MAX_MIXED = 8


@dataclass(frozen=True, kw_only=True)
class MixedPlan:
    """A verified plan with a mixed pool and the plain plan it shrinks."""

    plan: Plan
    counts: tuple[int, int, int]          #: prefill, decode, mixed instances
    usd_per_hour: float
    gpus: int
    verification: Verification
    ledger_rps: float                     #: G_mixed of the proposal, the ledger's claim
    baseline_counts: tuple[int, int]
    baseline_usd_per_hour: float
    checks: int


def mixed_search(request: PlanRequest, result: SearchResult, candidates: tuple[Candidate, ...],
                 verifier: Verifier) -> MixedPlan | None:
    """The cheapest verified plan with a mixed pool below ``result``'s best (None when none passes
    or the plan does not have one shape per phase)."""
    best = result.best
    if best is None or result.mode != "disaggregated":
        return None
    shapes = {c.phase: (c, k) for c, k in best.solution.replicas.items()}
    if len(best.solution.replicas) != 2 or set(shapes) != {"prefill", "decode"}:
        return None
    (pre, p0), (dec, d0) = shapes["prefill"], shapes["decode"]
    mixed = max((c for c in candidates if c.phase == "colocated" and c.gpu == pre.gpu and c.chunk_tokens),
                key=lambda c: c.goodput_rps / c.gpus, default=None)
    if mixed is None:
        return None
    price = {c: request.cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus for c in (pre, dec, mixed)}
    baseline_usd = ceiling = best.solution.usd_per_hour
    floor = SEARCH_FLOOR * min(pre.capacity_rps(p0), dec.capacity_rps(d0))  # the plain plan's own ledger, lowered
    options = [(price[pre] * p + price[dec] * d + price[mixed] * m, p, d, m, ledger(pre, dec, mixed, p, d, m))
               for m in range(1, MAX_MIXED + 1) for p in range(1, p0 + 1) for d in range(1, d0 + 1)]
    missed: list[tuple[int, int, int]] = []
    found, checks = None, 0
    while checks < request.max_checks:
        open_ = [o for o in options if o[0] < ceiling - 1e-9 and o[4] >= floor
                 and not any(o[1] <= a and o[2] <= b and o[3] <= c for a, b, c in missed)]
        if not open_:
            break
        usd, p, d, m, claim = max(open_, key=lambda o: (o[4], -o[0]))  # the strongest, then the cheapest
        plan = with_mixed(best.plan, pre, dec, mixed, p, d, m, request)
        verification = verifier.verify(plan, request.target_rps, mode="disaggregated")
        checks += 1
        if verification.passed:
            ceiling = usd
            found = MixedPlan(plan=plan, counts=(p, d, m), usd_per_hour=usd,
                              gpus=pre.gpus * p + dec.gpus * d + mixed.gpus * m, verification=verification,
                              ledger_rps=claim, baseline_counts=(p0, d0), baseline_usd_per_hour=baseline_usd,
                              checks=checks)
        else:  # a plan no larger anywhere than one that missed misses too
            missed.append((p, d, m))
    return None if found is None else replace(found, checks=checks)


def ledger(pre: Candidate, dec: Candidate, mixed: Candidate, p: int, d: int, m: int) -> float:
    """G_mixed = min(c_P(p) + m·g_M, c_D(d) + m·g_M) (0x08G): a mixed machine's rate counts in
    both phases, because the requests it takes run both there."""
    g_m = mixed.capacity_rps(m)
    return min(pre.capacity_rps(p) + g_m, dec.capacity_rps(d) + g_m)


def with_mixed(plan: Plan, pre: Candidate, dec: Candidate, mixed: Candidate, p: int, d: int, m: int,
               request: PlanRequest) -> Plan:
    """``plan`` with p prefill and d decode instances and a mixed pool of m, linked to prefill as
    its decode pool is."""
    pools = []
    for pool in plan.pools:
        pools.append(replace(pool, replicas=p if pool.phase == "prefill" else d))
    name = f"mixed-{mixed.gpu}-tp{mixed.tp}-pp{mixed.pp}"
    pools.append(Pool(name=name, phase="mixed", model=plan.pools[0].model, gpu=mixed.gpu, tp=mixed.tp, pp=mixed.pp,
                      replicas=m, policy="chunked", chunk_tokens=mixed.chunk_tokens))
    links = list(plan.links) + [replace(link, to_pool=name) for link in plan.links]
    return replace(plan, pools=tuple(pools), links=tuple(links), spill_tokens=request.mixed_spill_tokens,
                   kv_share=request.mixed_kv_share, name=plan.name + ", with a mixed pool")
