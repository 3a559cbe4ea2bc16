"""One grid cell: the best verified colocated and P/D plans under its coordinates, the net margin
between them, and the decision (0x0FD).

Decision, against the declared margin M (ms per request):

* ENABLE_PD — the P/D plan passes both clocks end to end, and either no colocated plan passes
  (P/D is then the only verified way to serve the cell), or the colocated plan passes too,
  ΔT > M and P/D costs no more per hour (``--budget``: P/D serves a higher verified rate).
* COLOCATE — the colocated plan passes and P/D does not clear every condition above.
* INFEASIBLE — no plan of either mode passes.

``compare`` says how the two plans were matched: ``rate`` (the cheapest verified plan of each
mode at the cell's target rate) or ``budget`` (the highest verified rate of each mode within the
same dollars per hour). ΔT is measured at the target rate, or with a budget at the lower of the
two verified rates, where both plans run; with no passing plan in a mode, against the plan of
that mode that missed by the least, so a near miss still shows its margin.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from functools import reduce

from pdplan.cache import ResultCache, cache_key
from pdplan.errors import InfeasibleError
from pdplan.fileio import significant
from pdplan.hardware import Cluster
from pdplan.latency.source import ProfileSource
from pdplan.modelspec import ModelSpec
from pdplan.placement import resolve_fleets
from pdplan.planner import PlanRequest, optimize
from pdplan.planner.checks import runs_key_parts
from pdplan.planner.pipeline import better
from pdplan.planner.plans import plan_key
from pdplan.planner.search import Checked
from pdplan.sensitivity.coordinates import cell_cluster, cell_slo, cell_workload
from pdplan.sensitivity.margin import Margin, net_margin
from pdplan.sim import Plan
from pdplan.slo import SLO
from pdplan.vocabulary import Affinity, FailurePolicy, Objective, Router
from pdplan.workload import Workload

DECISIONS = ("ENABLE_PD", "COLOCATE", "INFEASIBLE")


@dataclass(frozen=True, kw_only=True)
class Base:
    """What every cell starts from: the loaded inputs and the grid's settings."""

    workload: Workload
    model: ModelSpec
    cluster: Cluster
    profiles: ProfileSource
    slo: SLO
    target_rps: float
    fleet: str                          #: the grid's settings (GridSpec holds their defaults)
    affinity: Affinity
    failure_policy: FailurePolicy
    runs: int
    max_checks: int
    seed: int
    margin_ms: float = 0.0
    router: Router = Router.LEAST_LOADED
    budget_usd_per_hour: float | None = None   #: compare by rate within this budget instead of cost
    cache_dir: str | None = None
    use_cache: bool = True

    @property
    def compare(self) -> str:
        return "rate" if self.budget_usd_per_hour is None else "budget"


@dataclass(frozen=True, kw_only=True)
class ModeResult:
    """The best plan of one mode in a cell: verified (``passed``), else the closest miss."""

    checked: Checked
    passed: bool

    @property
    def rate_rps(self) -> float:
        return self.checked.verification.rate_rps

    @property
    def usd_per_hour(self) -> float:
        return self.checked.solution.usd_per_hour

    def columns(self, prefix: str) -> dict:
        solution, verification = self.checked.solution, self.checked.verification
        return {f"{prefix}_plan": plan_text(self.checked), f"{prefix}_gpus": solution.gpus_total,
                f"{prefix}_usd_per_hour": significant(solution.usd_per_hour),
                f"{prefix}_rate_rps": significant(verification.rate_rps),
                f"{prefix}_goodput_per_gpu": significant(verification.rate_rps / solution.gpus_total),
                f"{prefix}_joint": significant(verification.joint.mean),
                f"{prefix}_verdict": "passes" if self.passed else "misses"}


@dataclass(frozen=True, kw_only=True)
class CellResult:
    """A cell's coordinates, both modes' plans, the margin and the decision."""

    index: int
    coords: dict
    compare: str
    margin_ms: float
    colocated: ModeResult | None
    disaggregated: ModeResult | None
    margin: Margin | None
    decision: str
    reason: str

    def row(self, dimensions: tuple[str, ...]) -> dict:
        """The CSV row: every coordinate, both plans, every term, the decision."""
        row = {"cell": self.index, **{name: self.coords[name] for name in dimensions}, "compare": self.compare}
        for prefix, result in (("colocated", self.colocated), ("pd", self.disaggregated)):
            row |= result.columns(prefix) if result is not None else {
                f"{prefix}_{key}": None for key in ("plan", "gpus", "usd_per_hour", "rate_rps", "goodput_per_gpu",
                                                    "joint", "verdict")}
        m = None if self.margin is None else self.margin.to_dict()
        terms = {"margin_rate_rps": "rate_rps", "t_saved_ms": "saved_ms", "t_saved_ttft_ms": "saved_ttft_ms",
                 "t_saved_decode_ms": "saved_decode_ms", "t_transfer_exposed_ms": "transfer_exposed_ms",
                 "t_route_ms": "route_ms", "t_failure_ms": "failure_ms", "delta_t_ms": "delta_ms",
                 "observed_exposed_transfer_ms": "observed_exposed_ms",
                 "transfer_failures_per_request": "failures_per_request"}
        for column, key in terms.items():
            value = None if m is None else m[key]
            row[column] = significant(value) if key in ("rate_rps", "failures_per_request") else value
        return row | {"margin_ms": self.margin_ms, "decision": self.decision, "reason": self.reason}


def plan_text(checked: Checked) -> str:
    """``prefill h100-80gb TP2 PP2 ×5 + decode h100-80gb TP4 ×2``: each pool's shape and replicas."""
    parts = [f"{c.phase} {c.shape_label(compact=True)} ×{k}"
             for c, k in sorted(checked.solution.replicas.items(), key=lambda kv: (kv[0].phase != "prefill",
                                                                                   kv[0].label))]
    return " + ".join(parts)


def cell_request(base: Base, coords: dict) -> PlanRequest:
    """The planning request of one cell: the base inputs under its coordinates."""
    rate = coords.get("rate", base.target_rps)
    cluster = cell_cluster(base.cluster, coords)
    return PlanRequest(
        workload=cell_workload(base.workload, coords, rate_rps=rate, seed=base.seed), model=base.model,
        cluster=cluster, profiles=base.profiles, slo=cell_slo(base.slo, coords),
        target_rps=None if base.budget_usd_per_hour is not None else rate,
        fleets=resolve_fleets(base.fleet, cluster),
        objective=Objective.COST if base.budget_usd_per_hour is None else Objective.GOODPUT,
        max_usd_per_hour=base.budget_usd_per_hour, affinity=base.affinity, seed=base.seed,
        max_checks=base.max_checks, runs=base.runs, failure_rate=coords.get("failure_rate", 0.0),
        failure_policy=base.failure_policy, route_s=coords.get("route_ms", 0.0) / 1e3, router=base.router)


def why_none(report, mode: str) -> str:
    """Why the program has no plan of ``mode`` in any fleet (the binding constraint, as it names it)."""
    reasons = dict.fromkeys(r.reason for f in report.fleets for r in f.searches(mode) if r.reason)
    return "; ".join(reasons) or "no plan was tried"


def best_of_mode(report, mode: str) -> ModeResult | None:
    """The mode's best verified plan over every fleet, else the plan that missed by the least."""
    searches = [r for f in report.fleets for r in f.searches(mode)]
    passing = [r for r in searches if r.best is not None]
    if passing:
        return ModeResult(checked=reduce(lambda a, b: better(a, b, report.request.objective), passing).best,
                          passed=True)
    tried = [c for r in searches for c in r.tried]
    if not tried:
        return None
    return ModeResult(checked=min(tried, key=lambda c: c.verification.worst_shortfall), passed=False)


def run_cell(base: Base, index: int, coords: dict) -> CellResult:
    """Plan both modes under the cell's coordinates, measure ΔT between them and decide."""
    request = cell_request(base, coords)
    cache = ResultCache(base.cache_dir, enabled=base.use_cache)
    empty = CellResult(index=index, coords=coords, compare=base.compare, margin_ms=base.margin_ms,
                                      colocated=None, disaggregated=None, margin=None, decision="INFEASIBLE",
                                      reason="")
    try:
        report = optimize(request, cache=cache, headroom=False)  # a cell reads verdicts, not headroom
    except InfeasibleError as err:
        return replace(empty, reason=f"no plan fits: {err.detail}")
    colocated, disaggregated = best_of_mode(report, "colocated"), best_of_mode(report, "disaggregated")
    margin = None
    if colocated is not None and disaggregated is not None:
        rate = request.target_rps or min(colocated.rate_rps, disaggregated.rate_rps)
        profiles = {m.key: m.profile for m in report.measured}
        margin = cell_margin(request, colocated.checked.plan, disaggregated.checked.plan, profiles, rate, cache)
    decision, reason = decide(colocated, disaggregated, margin, base)
    missing = [f"no {label} plan fits: {why_none(report, mode)}" for label, mode, found in (
        ("colocated", "colocated", colocated), ("P/D", "disaggregated", disaggregated)) if found is None]
    reason = "; ".join([reason, *missing])
    return replace(empty, colocated=colocated, disaggregated=disaggregated, margin=margin, decision=decision,
                   reason=reason)


def cell_margin(request: PlanRequest, colocated: Plan, disaggregated: Plan, profiles: dict, rate_rps: float,
                cache: ResultCache) -> Margin:
    """ΔT between the two plans at ``rate_rps`` (:func:`net_margin`), kept in the run's cache: a
    cell whose plans, requests, profiles and seeds another cell (or an earlier run) measured reads
    it back instead of simulating the five plans again."""
    key = cache_key({"margin": [plan_key(colocated), plan_key(disaggregated)],
                     **runs_key_parts(request, (colocated, disaggregated), profiles, rate_rps)})
    kept = cache.get(key, lambda value: Margin(**value))
    if kept is not None:
        return kept
    margin = net_margin(request.workload, colocated, disaggregated, profiles, model=request.model, rate_rps=rate_rps,
                        runs=request.runs, seed=request.seed, arrivals=request.settings.arrivals,
                        min_run_s=request.min_run_s)
    cache.put(key, asdict(margin))
    return margin


def decide(colocated: ModeResult | None, disaggregated: ModeResult | None, margin: Margin | None,
           base: Base) -> tuple[str, str]:
    """ENABLE_PD, COLOCATE or INFEASIBLE, and why in one phrase (see the module docstring)."""
    pd_passes = disaggregated is not None and disaggregated.passed
    colo_passes = colocated is not None and colocated.passed
    if not pd_passes and not colo_passes:
        return "INFEASIBLE", "neither mode passes end to end"
    if not colo_passes:
        return "ENABLE_PD", "only P/D passes end to end"
    if not pd_passes:
        return "COLOCATE", "no P/D plan passes end to end"
    delta = round(margin.delta_ms, 1) or 0.0
    if not round(margin.delta_ms, 3) > base.margin_ms:
        return "COLOCATE", f"ΔT {delta:+.1f} ms ≤ margin {base.margin_ms:g} ms"
    if base.budget_usd_per_hour is None and disaggregated.usd_per_hour > colocated.usd_per_hour:
        return "COLOCATE", f"P/D costs more: ${disaggregated.usd_per_hour:.2f} vs ${colocated.usd_per_hour:.2f}/h"
    served = "" if base.budget_usd_per_hour is None else \
        f"P/D serves {disaggregated.rate_rps:.3g} vs {colocated.rate_rps:.3g} req/s; "
    if base.budget_usd_per_hour is not None and not disaggregated.rate_rps > colocated.rate_rps:
        return "COLOCATE", f"{served}no more within the budget"
    return "ENABLE_PD", f"{served}ΔT {delta:+.1f} ms > margin {base.margin_ms:g} ms"
