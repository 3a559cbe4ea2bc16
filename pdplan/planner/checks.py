"""End-to-end checks, run once each: a plan at a rate over R runs, remembered in memory and on disk."""

from __future__ import annotations

import dataclasses
from dataclasses import asdict

from pdplan.cache import ResultCache, cache_key
from pdplan.errors import PdplanError
from pdplan.goodput import Probe, Search, find_goodput
from pdplan.placement import Solution
from pdplan.planner.measure import profile_digest
from pdplan.planner.plans import Loss, losses, plan_key, plan_of
from pdplan.planner.request import PlanRequest
from pdplan.planner.search import Checked
from pdplan.sim import Plan, simulate
from pdplan.verify import LossCheck, RunRecord, Verification, judge, run_record, run_workloads, settled_by_first_run


class Verifier:
    """Simulates plans end to end for one request; every (plan, rate) is simulated at most once
    per machine (the disk cache) and counted in :attr:`simulations`."""

    def __init__(self, request: PlanRequest, profiles: dict, cache: ResultCache):
        self.request = request
        self.profiles = profiles
        self.cache = cache
        self.simulations = 0
        self._memo: dict[tuple[str, float], list[RunRecord]] = {}
        self._workloads: dict[float, list] = {}
        self._trace = request.workload.digest()
        self.seeds = tuple(request.seed + r for r in range(request.runs))

    def records(self, plan: Plan, rate_rps: float) -> list[RunRecord]:
        """The runs of ``plan`` at ``rate_rps``, judged against the request's SLO."""
        key = (plan_key(plan), rate_rps)
        if key not in self._memo:
            disk = cache_key(self._key_parts(plan, rate_rps))
            records = self.cache.get(disk, self._decode)
            if records is None:
                records = self._simulated(plan, rate_rps)
                self.simulations += len(records)
                self.cache.put(disk, [asdict(r) for r in records])
            self._memo[key] = records
        return self._memo[key]

    def _simulated(self, plan: Plan, rate_rps: float) -> list[RunRecord]:
        """Run 0, then the further runs unless run 0 has settled a miss."""
        request = self.request
        records = []
        for i, workload in enumerate(self._runs(rate_rps)):
            result = simulate(workload, plan, self.profiles, model=request.model, seed=request.seed)
            records.append(run_record(result, request.slo, with_summary=i == 0))
            if i == 0 and settled_by_first_run(records[0], request.slo, request.runs):
                break
        return records

    def _decode(self, stored: list) -> list[RunRecord]:
        """Cached runs, refused (PdplanError: the cache reads it as a miss) unless there is one per seed with a
        share per objective, or one that settled a miss."""
        records = [RunRecord(**{**r, "objectives": tuple(r["objectives"])}) for r in stored]
        objectives = len(self.request.slo.objectives)
        settled = len(records) == 1 and settled_by_first_run(records[0], self.request.slo, self.request.runs)
        if (len(records) != self.request.runs and not settled) or any(
                len(r.objectives) != objectives or not all(0 <= a <= 1 for a in r.objectives) for r in records):
            raise PdplanError("cached runs do not fit this check")
        return records

    def _runs(self, rate_rps: float) -> list:
        if rate_rps not in self._workloads:
            s = self.request.settings
            self._workloads[rate_rps] = run_workloads(self.request.workload, rate_rps, runs=self.request.runs,
                                                      seed=self.request.seed, arrivals=s.arrivals,
                                                      min_run_s=self.request.min_run_s)
        return self._workloads[rate_rps]

    def _key_parts(self, plan: Plan, rate_rps: float) -> dict:
        return {"verify": plan_key(plan), "slo": self.request.slo.to_dict(),
                **runs_key_parts(self.request, (plan,), self.profiles, rate_rps, trace=self._trace)}

    def verify(self, plan: Plan, rate_rps: float, *, mode: str, lost: list[Loss] = ()) -> Verification:
        """The verdict on ``plan`` at ``rate_rps``, every loss in ``lost`` included."""
        checks = tuple(self._loss(loss, rate_rps, mode) for loss in lost)
        return judge(self.records(plan, rate_rps), self.request.slo, rule=self.request.rule, rate_rps=rate_rps,
                     seeds=self.seeds, mode=mode, losses=checks)

    def _loss(self, loss: Loss, rate_rps: float, mode: str) -> LossCheck:
        if loss.left is None:  # a phase lost its last instance
            everything = max(o.attainment for o in self.request.slo.objectives)
            return LossCheck(lost=loss.label, passed=False, worst_shortfall=everything, mean_shortfall=everything,
                             joint=None, failing_phase=loss.emptied)
        verdict = judge(self.records(loss.left, rate_rps), self.request.slo, rule=self.request.rule,
                        rate_rps=rate_rps, seeds=self.seeds, mode=mode)
        return LossCheck(lost=loss.label, passed=verdict.passed, worst_shortfall=verdict.worst_shortfall,
                         mean_shortfall=max(o.objective.attainment - o.interval.mean for o in verdict.per_objective),
                         joint=verdict.joint, failing_phase=verdict.failing_phase)

    def plan(self, solution: Solution, *, mode: str, affinity: str, name: str, borrow: bool = False) -> Plan:
        """``solution`` as the simulator plan this request verifies: its links, transfer failures,
        router hop, spill thresholds, prefill router, the engine's rank router and early rejection (at the
        SLO's tightest TTFT threshold); with ``borrow``, its dedicated machines may be lent to the other phase."""
        request = self.request
        return plan_of(solution, model=request.model, cluster=request.cluster, mode=mode, affinity=affinity,
                       transfer_schedule=request.transfer_schedule, failure_rate=request.failure_rate,
                       failure_policy=request.failure_policy, route_s=request.route_s, spill=request.spill,
                       router=request.router, engine=request.profiles.serving_engine,
                       reject_ttft_s=request.slo.threshold_s("ttft") if request.early_rejection else None,
                       name=name, borrow=borrow, redundant_experts=request.redundant_experts)

    def check(self, solution: Solution, *, mode: str, affinity: str, fleet: str,
              rate_rps: float | None = None, redundancy: str | None = None, borrow: bool = False) -> Checked:
        """Place ``solution`` as a plan and verify it at ``rate_rps`` (default: the target), with
        each loss ``redundancy`` (default: the request's) asks it to survive; with ``borrow``, its
        dedicated machines may be lent to the other phase."""
        request = self.request
        mixed = ", with a mixed pool" if solution.mixed else ", borrowing" if borrow else ""
        plan = self.plan(solution, mode=mode, affinity=affinity, borrow=borrow,
                         name=f"{request.model.name} {mode} ({fleet}" + (f", {affinity} affinity{mixed})"
                                                                          if mode != "colocated" else ")"))
        rate = request.target_rps if rate_rps is None else rate_rps
        lost = losses(solution, plan, request.redundancy if redundancy is None else redundancy)
        verification = self.verify(plan, rate, mode=mode, lost=lost)
        return Checked(solution=solution, plan=plan, verification=verification)

    def goodput(self, plan: Plan, *, mode: str, start_rps: float) -> Search:
        """The highest rate at which the whole plan still passes (bisection over verified rates):
        how much headroom it has, or (objective goodput) what it really sustains."""
        def probe(rate: float) -> Probe:
            verdict = self.verify(plan, rate, mode=mode)
            return Probe(rate_rps=rate, attainment_ttft=verdict.clocks.get("ttft", verdict.joint).mean,
                         attainment_tpot=verdict.clocks.get("tpot", verdict.joint).mean,
                         attainment_joint=verdict.joint.mean, meets=verdict.passed)

        settings = dataclasses.replace(self.request.settings, grid_points=0)
        return find_goodput(probe, start_rps=max(start_rps, 1e-3), settings=settings)


def runs_key_parts(request: PlanRequest, plans, profiles: dict, rate_rps: float, *, trace: str | None = None) -> dict:
    """What a simulation of ``plans`` on the request's runs at ``rate_rps`` depends on besides the
    plans themselves, for a result-cache key: the trace (``trace``: its digest, when known), the
    rate, the profiles of the shapes the plans run, the model, runs, seed, arrivals and minimum
    run length."""
    shapes = sorted({p.shape for plan in plans for p in plan.pools})
    return {"trace": request.workload.digest() if trace is None else trace, "rate": rate_rps,
            "profiles": [profile_digest(profiles[s]) for s in shapes], "model": asdict(request.model),
            "runs": request.runs, "seed": request.seed, "arrivals": request.settings.arrivals,
            "min_run_s": request.min_run_s}
