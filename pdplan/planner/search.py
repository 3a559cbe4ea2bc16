"""The verified search: the integer program proposes, the end-to-end simulation decides.

For one fleet, mode and affinity:

1. **Ascend.** Solve the program at the target (each pool's capacity c(n) must reach it). Verify
   the plan end to end. After a miss, raise the failing pool's requirement by ``RAISE_FACTOR``
   steps until that pool changes (an unchanged plan would only miss again), and exclude every
   plan the missed one dominates (no larger anywhere: adding replicas never makes a plan worse,
   so those miss too; a plan that misses only by its interval's width excludes itself alone).
   Repeat until a plan passes.
2. **Descend.** While the budget lasts, ask the program for the strongest plan (the weakest
   pool's capacity as high as can be, then the cheapest) strictly cheaper than the best verified
   one, not dominated by any miss, whose pools reach at least ``SEARCH_FLOOR`` of the target, or
   of what they counted for the best plan when that passed below it (the decomposition is never
   trusted to be more pessimistic than that). A pass becomes the best plan; a
   miss is excluded with everything it dominates. A clear miss on a phase whose pools the
   program already counted short of the target is evidence that the decomposition was not
   pessimistic there: that phase's floor rises just above what the missed plan counted, so the
   descent stops trying plans that count no more for the phase that failed. When no such plan is left, the best plan is
   the cheapest that passes among all plans above the floor: the search is *proven*. The
   strongest cheaper plan is the likeliest to pass, so good plans come early when the budget
   cannot cover the whole space. After a pass the next proposal must come below the best plan by
   twice what that pass gained; after a miss, or when no plan is that far below, just below it
   (:func:`_next_stride`), so the proof still exhausts the plans just below the best one. A miss
   a stride reached excludes what it dominates but raises no phase's floor: far below the best
   plan, every phase may be short, and the one its clock points at need not be the one that is.
   When the ascent found no plan that passes (the program had none at the target,
   or the cluster could not hold a stronger one), the descent starts from the largest plan
   tried, or the whole cluster, with no floor but that of clear misses counted short: the
   simulation, not the decomposition, decides which of the plans the cluster holds serve, except
   that a phase the simulation confirmed short at some count is not tried at or below it again
   (DeepSeek-R1's TP x PP baseline on 512 H200s, every plan short by 0.88: 3 checks, not 24).

The program's optimum at the target is the decomposition's estimate, not a bound: the report
gives it beside the verified cost and the gap between them (negative when the simulation finds
the decomposition pessimistic).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from pdplan.errors import InfeasibleError
from pdplan.goodput import Search
from pdplan.placement import Fleet, Problem, Solution, objective_step, serves, solve, whole_cluster
from pdplan.planner.request import PlanRequest
from pdplan.sim import Plan
from pdplan.verify import Verification

#: Requirement raise after an end-to-end miss, per step, on the failing pool.
RAISE_FACTOR = 1.15
#: Raising stops once a requirement reaches this multiple of the target.
MAX_RAISE = 8.0
#: The descent never tries plans whose pools reach less than this share of the target.
SEARCH_FLOOR = 0.75
#: The program's capacity unit (one milli-req/s): "more than a missed plan counted" is this much more.
CAPACITY_STEP_RPS = 1e-3


@dataclass(frozen=True, kw_only=True)
class Checked:
    """A placed plan and its end-to-end verdict."""

    solution: Solution
    plan: Plan
    verification: Verification

    def value(self, objective: str) -> float:
        """The objective this plan achieves: its cost, GPUs or power, or (goodput) the rate it
        was verified at."""
        return self.verification.rate_rps if objective == "goodput" else self.solution.objective_value(objective)


@dataclass(frozen=True, kw_only=True)
class SearchResult:
    """One fleet, mode and affinity: the cheapest verified plan, or why there is none."""

    fleet: Fleet
    mode: str
    affinity: str
    first: Solution | None = None         #: the program's optimum at the target
    best: Checked | None = None           #: the cheapest plan the simulation passed
    tried: tuple[Checked, ...] = ()       #: every plan simulated, in order
    proven: bool = False                  #: the descent ran out of cheaper plans, not of budget
    reason: str | None = None             #: why the program has no plan at all
    end_to_end: Search | None = None      #: objective goodput: the bisection that set the verified rate

    @property
    def closest(self) -> Checked | None:
        """The plan that missed by the least (for a report when nothing passed)."""
        return min(self.tried, key=lambda c: c.verification.worst_shortfall, default=None)

    def gap(self, objective: str) -> float | None:
        """(verified − the program's estimate) / verified, the program's optimism about the best plan."""
        if self.best is None or self.first is None or objective == "goodput":
            return None
        verified = self.best.value(objective)
        return (verified - self.first.bound) / verified if verified else 0.0


#: check(solution) → Checked: place it as a plan and verify it end to end.
Check = Callable[[Solution], Checked]


def verified_search(request: PlanRequest, base: Problem, check: Check) -> SearchResult:
    """The cheapest plan the simulation passes for ``base``'s fleet, mode and affinity."""
    found = SearchResult(fleet=base.fleet, mode=base.mode, affinity=base.affinity)
    try:
        first = solve(base)
    except InfeasibleError as err:
        first, found = None, replace(found, reason=str(err))
    tried, missed = [], Missed(base.target_rps)
    best, solution, targets = None, first, {}
    while solution is not None and len(tried) < request.max_checks:  # ascend
        checked = check(solution)
        tried.append(checked)
        if checked.verification.passed:
            best = checked
            break
        missed.add(checked)
        solution = _raise_until_changed(missed.excluding(base), solution, checked.verification.failing_phase, targets)
    # Descend from the best plan; without one, from the largest plan tried (or the whole cluster)
    # and with no floor: the decomposition has shown no plan that passes, so it is not trusted.
    floor = _floor(base, best, missed)
    ceiling = _ceiling(base, best, tried)
    stride = 0.0  # how far below the best plan the next proposal must come (:func:`_next_stride`)
    proven = False
    while ceiling is not None and len(tried) < request.max_checks:
        try:
            solution = solve(replace(missed.excluding(base), phase_targets=floor, strongest=True,
                                     below=ceiling - stride))
        except InfeasibleError:
            if stride > 0:  # nothing that far below: the plans just below the best one are still open
                stride = 0.0
                continue
            proven = True
            break
        checked = check(solution)
        tried.append(checked)
        passed, strode = checked.verification.passed, stride > 0
        stride = _next_stride(ceiling - checked.value(base.objective), passed, best)
        if passed:
            best, ceiling = checked, checked.value(base.objective)
        else:  # a miss a stride reached is far below the best plan: no evidence on which phase is short
            missed.add(checked, counted=not strode)
        floor = _floor(base, best, missed)
    return replace(found, first=first, best=best, tried=tuple(tried), proven=proven and best is not None)


def _next_stride(gained: float, passed: bool, best: Checked | None) -> float:
    """How far below the best plan the descent's next proposal must come: after a pass that came
    ``gained`` below the plan before it, twice that, so a descent from a program estimate far
    above the cheapest passing plan reaches it in a logarithmic number of checks, not one plan step at
    a time (an exponential search: Bentley and Yao 1976; DeepSeek-R1 on 2,048 H200s, one prefill
    instance per step, took 21 checks); after a miss, none: the plans just below the best one, where
    the misses' evidence on which phase is short holds. Without a plan that passed, none: the descent
    keeps stepping from the largest plan tried."""
    return 2 * gained if passed and best is not None else 0.0


def _floor(base: Problem, best: Checked | None, missed: "Missed") -> dict[str, float]:
    """The least each phase's pools must reach in the descent: SEARCH_FLOOR of the target, or of
    what the program counted for the best plan when that passed below the target (the
    decomposition is then known to be that pessimistic), and more than any plan counted that
    missed clearly on that phase while counted short. Without a plan that passed, only the
    last: the decomposition is not trusted to say what passes, but a clear miss it counted short
    confirms it on that phase."""
    above_short = {phase: count + CAPACITY_STEP_RPS for phase, count in missed.counted_short.items()}
    if best is None:
        return {phase: above_short.get(phase, 0.0) for phase in base.phases}
    counted = best.solution.phase_capacity_rps
    return {phase: max(SEARCH_FLOOR * min(base.target_rps, counted[phase]), above_short.get(phase, CAPACITY_STEP_RPS))
            for phase in base.phases}


def _ceiling(base: Problem, best: Checked | None, tried: list[Checked]) -> float | None:
    """What the descent must stay strictly below: the best plan's value; without one, just above
    the largest plan tried or, with none, the whole cluster (None when the cluster is unbounded)."""
    if best is not None:
        return best.value(base.objective)
    if tried:
        return max(c.value(base.objective) for c in tried) + objective_step(base.objective)
    return whole_cluster(base)


class Missed:
    """Plans that missed. A clear miss (the mean over the runs misses) excludes every plan it
    dominates; a narrow one (only the interval's lower end misses) excludes itself alone, since
    near the edge a larger plan can draw a wider interval than a smaller one."""

    def __init__(self, target_rps: float | None):
        self.target_rps = target_rps
        self.clear: list = []
        self.narrow: list = []
        self.counted_short: dict[str, float] = {}  #: per phase, the most a clear miss on it counted below the target

    def add(self, checked: Checked, *, counted: bool = True) -> None:
        """Exclude a missed plan (and, when clear, what it dominates); ``counted``: let a clear miss counted short on
        its failing phase raise that phase's floor (:func:`_floor`)."""
        v = checked.verification
        (self.clear if v.clear_miss else self.narrow).append(checked.solution.counts)
        capacity = checked.solution.phase_capacity_rps.get(v.failing_phase) if v.clear_miss and counted else None
        if capacity is not None and self.target_rps is not None and capacity < self.target_rps:
            self.counted_short[v.failing_phase] = max(capacity, self.counted_short.get(v.failing_phase, 0.0))

    def excluding(self, base: Problem) -> Problem:
        return replace(base, excluded=tuple(self.clear), excluded_exactly=tuple(self.narrow))


def _raise_until_changed(base: Problem, missed_plan: Solution, phase: str,
                         targets: dict[str, float]) -> Solution | None:
    """Raise ``phase``'s requirement by RAISE_FACTOR steps until the program's answer changes that
    pool; None when no plan serves the raised requirement (or it passed MAX_RAISE × target)."""
    before = _part(missed_plan, phase)
    while targets.get(phase, base.target_rps) < MAX_RAISE * base.target_rps:
        targets[phase] = targets.get(phase, base.target_rps) * RAISE_FACTOR
        try:
            solution = solve(replace(base, phase_targets=dict(targets)))
        except InfeasibleError:
            return None
        if _part(solution, phase) != before:
            return solution
    return None


def _part(solution: Solution, phase: str) -> dict:
    """The counts of the pools serving one phase, mixed machines included (at low affinity, the
    whole plan: segments hold both)."""
    return {cand: k for cand, k in solution.replicas.items() if serves(cand.phase, phase)}
