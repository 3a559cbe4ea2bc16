"""Plans over time: the windowed program proposes, each window's simulation decides.

1. Every shape is measured once on the whole trace (per-instance goodput, then pool curves up to
   the busiest window), as ``optimize`` measures them.
2. The windowed program (:mod:`.program`) picks, per window, a mode, one shape per phase and
   their replicas (per mode; with ``--mode auto``, also the schedule that switches modes, when
   the program finds a switch pays).
3. Each window's pools are placed on the nodes and verified end to end on that window's own
   requests at its rate (R runs, 95% intervals, the optimize rule). A window that misses raises
   its failing phase's requirement until the program changes what the window runs (as ``optimize``
   raises a pool; :func:`_raised_until_changed`), and that schedule is verified.
4. When every window passes alone, the whole schedule is simulated on the whole trace with its
   changes drained first (:mod:`.timeline`): a window that then misses (a backlog carried over, a
   drain, an instance still loading) raises every phase's requirement in it, and round 2 follows.
   The schedule passes when every window passes both ways; rounds are bounded.

The same search with replicas held equal across windows is the *static peak* plan (over every
mode the request allows), itself a schedule: the answer when it passes for no more than every
windowed one (:attr:`WindowedReport.chosen`). A static plan sized for the trace's mean rate,
verified but never raised, shows what planning for the mean costs in missed windows. Each window planned alone by
the program (no change cost) gives the lower bound the schedule is compared with, and the
program held to one shape per phase all day shows what that restriction would cost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

from pdplan.cache import ResultCache
from pdplan.errors import InfeasibleError
from pdplan.parallel import shared_workers
from pdplan.placement import Solution, solve
from pdplan.placement.recall import recalling
from pdplan.planner.checks import Verifier
from pdplan.planner.measure import measure, pool_candidates
from pdplan.planner.pipeline import base_problem
from pdplan.planner.request import PlanRequest
from pdplan.planner.search import MAX_RAISE, RAISE_FACTOR
from pdplan.schedule.program import CHANGING, MODE_PHASES, MODES, Schedule, solve_schedule
from pdplan.schedule.timeline import Timeline, simulate_timeline
from pdplan.schedule.windows import Window
from pdplan.sim import Plan
from pdplan.verify import Verification

#: Program solves (each followed by the windows' verification) one schedule may take.
MAX_SCHEDULE_ROUNDS = 8
#: GPU-minutes each GPU of an instance joining or leaving a pool loses (draining, loading weights).
DEFAULT_CHANGE_GPU_MINUTES = 5.0

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, kw_only=True)
class WindowCheck:
    """One window's placed plan and its end-to-end verdict on the window's requests."""

    window: Window
    solution: Solution
    plan: Plan
    verification: Verification


@dataclass(frozen=True, kw_only=True)
class VerifiedSchedule:
    """A schedule and every window's verdict; ``passed`` when all windows pass."""

    kind: str                       #: "windowed", "static peak" or "static mean"
    schedule: Schedule
    checks: tuple[WindowCheck, ...]
    rounds: int
    timeline: Timeline | None = None  #: the whole schedule on the whole trace, changes drained first

    @property
    def passed(self) -> bool:
        return not self.missed

    @property
    def missed(self) -> tuple[int, ...]:
        """Windows that miss alone or in the whole-schedule simulation."""
        alone = {c.window.index for c in self.checks if not c.verification.passed}
        whole = set() if self.timeline is None else {v.window for v in self.timeline.windows if not v.passed}
        return tuple(sorted(alone | whole))


@dataclass(frozen=True, kw_only=True)
class WindowedReport:
    """The chosen schedule, the other mode's, and the static plans it is judged against."""

    request: PlanRequest
    windows: tuple[Window, ...]
    change_gpu_minutes: float
    #: mode → its windowed schedule (None: infeasible); "changing": the one switching modes, when it pays
    schedules: dict[str, VerifiedSchedule | None]
    reasons: dict[str, str]                          #: mode → why it has none
    static_peak: VerifiedSchedule | None
    static_mean: VerifiedSchedule | None
    #: each window planned alone at its rate (the program, no change cost): their sum bounds every schedule
    window_optima: tuple[Schedule, ...] = ()
    #: each window planned alone as optimize plans it: the program, raised until the window passes end to end
    windows_alone: tuple[VerifiedSchedule, ...] = ()
    #: the program's optimum with one mode and one shape per phase all day, at the windows' rates
    one_shape: Schedule | None = None

    @property
    def window_optima_usd(self) -> float | None:
        return sum(s.usd for s in self.window_optima) if self.window_optima else None

    @property
    def windows_alone_usd(self) -> float | None:
        return sum(v.schedule.usd for v in self.windows_alone) if self.windows_alone else None

    @property
    def chosen(self) -> VerifiedSchedule | None:
        """The cheapest schedule whose every window passes: a windowed one, or the static peak plan when it passes for
        no more. The static plan is a schedule of the windowed program's too (the same replicas in every window,
        verified the same two ways), which the windowed search, raising a missed window at a time for at most
        MAX_SCHEDULE_ROUNDS programs, may not reach; on a tie it is the one with no changes to run."""
        passing = [s for s in (*self.schedules.values(), self.static_peak) if s is not None and s.passed]
        # a tie is judged to the dollar's millionth, not to the last bit of two sums in another order
        return min(passing, key=lambda s: (round(s.schedule.usd, 6), s.kind != "static peak",
                                           s.schedule.mode != "colocated"), default=None)


class WindowChecker:
    """Places and verifies window plans, one verifier per window (so each window's checks are
    cached by plan and rate, in memory and on disk). A placement depends on the counts alone
    (fixed counts need no capacity, and the screens do not read the rate), so windows and rounds
    with the same counts share one solve."""

    def __init__(self, request: PlanRequest, windows: list[Window], candidates, profiles: dict, cache: ResultCache):
        self.request, self.candidates, self.profiles, self.cache = request, candidates, profiles, cache
        self.requests = [replace(request, workload=w.requests, target_rps=w.rate_rps) for w in windows]
        self.verifiers = [Verifier(r, profiles, cache) for r in self.requests]
        self._placed: dict[tuple, Solution] = {}
        self._solved: dict[tuple, Schedule] = {}

    def solve(self, windows: list[Window], requirements: list[dict[str, float]], *, mode: str,
              change_gpu_minutes: float, **options) -> Schedule:
        """The windowed program over ``windows`` at ``requirements``, on the request's cluster,
        fleet and mixed machines (``options``: static, one_shape); the same program is solved once
        (the mode-switching check and its first round, each window alone and its first round)."""
        key = (tuple(w.index for w in windows), tuple(tuple(sorted(r.items())) for r in requirements), mode,
               change_gpu_minutes, tuple(sorted(options.items())))
        if key not in self._solved:
            request = self.request
            self._solved[key] = solve_schedule(
                self.candidates, cluster=request.cluster, fleet=request.fleets[0], mode=mode,
                hours=[w.hours for w in windows], requirements=requirements, change_gpu_minutes=change_gpu_minutes,
                mixed_max=request.mixed_max if request.mixed else 0, time_limit_s=request.time_limit_s,
                seed=request.seed, **options)
        return self._solved[key]

    def check(self, schedule: Schedule, window: Window, at: int | None = None) -> WindowCheck:
        """``window`` run as the schedule's window ``at`` (default: its own index) runs."""
        request, w = self.requests[window.index], window.index
        position = w if at is None else at
        mode, counts = schedule.modes[position], schedule.counts(position)
        if (mode, counts) not in self._placed:
            problem = base_problem(request, self.candidates, request.fleets[0], mode, "high",
                                   mixed="mixed" in schedule.window_shapes[position])
            try:
                self._placed[mode, counts] = solve(replace(problem, fixed=counts))
            except InfeasibleError as err:
                raise InfeasibleError(f"window {w}'s pools do not fit on the nodes: {err.detail}") from None
        solution = self._placed[mode, counts]
        verifier = self.verifiers[w]
        plan = verifier.plan(solution, mode=mode, affinity="high", name=f"{request.model.name} {mode}, window {w}")
        verification = verifier.verify(plan, window.rate_rps, mode=mode)
        return WindowCheck(window=window, solution=solution, plan=plan, verification=verification)


def verified_schedule(checker: WindowChecker, windows: list[Window], *, mode: str, change_gpu_minutes: float,
                      kind: str, rates: list[float], raise_misses: bool = True) -> VerifiedSchedule:
    """The cheapest schedule whose every window passes (see the module docstring), starting from
    the requirement ``rates`` per window; ``raise_misses`` False verifies the first one only (and
    does not simulate it whole). ``mode`` "auto" lets each window run either mode."""
    request = checker.request
    requirements = _requirements(mode, rates)
    solve = partial(checker.solve, windows, mode=mode, change_gpu_minutes=change_gpu_minutes, static=kind != "windowed")
    schedule = solve(requirements)
    for round_ in range(1, MAX_SCHEDULE_ROUNDS + 1):
        checks = tuple(checker.check(schedule, w) for w in windows)
        result = VerifiedSchedule(kind=kind, schedule=schedule, checks=checks, rounds=round_)
        if raise_misses and result.passed:
            result = replace(result, timeline=simulate_timeline(result, request, checker.profiles))
        if result.passed or not raise_misses or round_ == MAX_SCHEDULE_ROUNDS:
            return result
        ran = [MODE_PHASES[m] for m in schedule.modes]  # each window's phases
        failing = {c.window.index: (c.verification.failing_phase or ran[c.window.index][0],) for c in checks
                   if not c.verification.passed}
        if not failing:  # every window passed alone: raise all phases of those the whole run misses
            failing = {w: ran[w] for w in result.missed}
        schedule = _raised_until_changed(solve, requirements, schedule, failing, rates, static=kind != "windowed")
        if schedule is None:
            return result
    raise AssertionError("unreachable")


def _raised_until_changed(solve: Callable[[list[dict[str, float]]], Schedule], requirements: list[dict[str, float]],
                          missed: Schedule, failing: dict[int, tuple[str, ...]], rates: list[float], *,
                          static: bool) -> Schedule | None:
    """Raise the failing windows' phases (a static plan's in every window at once) until the program changes what a
    failing window runs, as optimize raises a pool (``planner.search._raise_until_changed``): a raise the schedule
    absorbs would verify the same schedule again. A static plan rises by RAISE_FACTOR steps: its programs solve in a
    fraction of a second, and with ``--mode auto`` a jump could tip it to the other mode, whose requirements were
    never raised. A windowed schedule rises by RAISE_FACTOR and at least past what the window runs serves
    (:func:`_past_what_it_runs`): a windowed program takes seconds, and each absorbed step would cost one. None when
    the raise passes MAX_RAISE × a window's rate first."""
    while True:
        for w, raised in failing.items():
            for phase in raised:
                top = requirements[w][phase] * RAISE_FACTOR
                if not static:
                    top = max(top, _past_what_it_runs(missed, w, phase))
                for r in (requirements if static else (requirements[w],)):
                    r[phase] = max(r[phase], top)
        if any(requirements[w][phase] > MAX_RAISE * rates[w] for w, raised in failing.items() for phase in raised):
            return None
        schedule = solve(requirements)
        if any((schedule.modes[w], schedule.counts(w)) != (missed.modes[w], missed.counts(w)) for w in failing):
            return schedule


def _past_what_it_runs(schedule: Schedule, w: int, phase: str) -> float:
    """The least requirement of ``phase`` in window w that what the window runs does not serve: just past the capacity
    of its replicas of that phase's shape and of its mixed machines, which count in both phases (the program's
    ``Day.need``); 0 when the window runs no such shape."""
    shape, mixed = schedule.window_shapes[w].get(phase), schedule.window_shapes[w].get("mixed")
    if shape is None:
        return 0.0
    served = shape.pool_curve.capacity_rps(schedule.replicas[w].get(phase, 0))
    if mixed is not None and schedule.replicas[w].get("mixed", 0):
        served += mixed.capacity_rps(schedule.replicas[w]["mixed"])
    return served * (1 + 1e-9)


def plan_windows(request: PlanRequest, windows: list[Window], *, cache: ResultCache,
                 change_gpu_minutes: float = DEFAULT_CHANGE_GPU_MINUTES,
                 progress: Progress | None = None) -> WindowedReport:
    """Measure the shapes once, then the windowed schedule per mode (and, when the request allows
    both, the one that switches between them, if the program finds switching pays), each window
    planned alone, and the two static plans (each over every mode the request allows). Its stages
    share one pool of ``request.jobs`` worker processes, and placement solves are kept in
    ``cache`` (:mod:`pdplan.placement.recall`)."""
    with shared_workers(request.jobs), recalling(cache):
        return _plan_windows(request, windows, cache=cache, change_gpu_minutes=change_gpu_minutes, progress=progress)


def _plan_windows(request: PlanRequest, windows: list[Window], *, cache: ResultCache, change_gpu_minutes: float,
                  progress: Progress | None) -> WindowedReport:
    busiest = max(w.rate_rps for w in windows)
    peak_request = replace(request, target_rps=busiest)
    measured, _ = measure(peak_request, cache, progress)
    candidates = pool_candidates(peak_request, measured, cache, progress)
    profiles = {m.key: m.profile for m in measured}
    checker = WindowChecker(request, windows, candidates, profiles, cache)
    modes = MODES[request.mode]
    at_rates = _requirements(request.mode, [w.rate_rps for w in windows])
    if len(modes) > 1:
        try:
            switching = checker.solve(windows, at_rates, mode=request.mode, change_gpu_minutes=change_gpu_minutes)
            if switching.mode == CHANGING:
                modes = (*modes, request.mode)
        except InfeasibleError:
            pass  # each mode alone says why
    schedules, reasons = {}, {}
    for i, mode in enumerate(modes):
        key = CHANGING if mode == "auto" else mode
        if progress is not None:
            progress(f"windowed schedule, {key}", i, len(modes) + 3)
        try:
            schedules[key] = verified_schedule(checker, windows, mode=mode, change_gpu_minutes=change_gpu_minutes,
                                               kind="windowed", rates=[w.rate_rps for w in windows])
        except InfeasibleError as err:
            schedules[key], reasons[key] = None, err.detail
    mean = sum(len(w.requests) for w in windows) / (windows[-1].end_s - windows[0].start_s)
    statics = {}
    for i, (kind, rate) in enumerate((("static peak", busiest), ("static mean", mean))):
        if progress is not None:
            progress(f"{kind} plan", len(modes) + i, len(modes) + 3)
        try:
            statics[kind] = verified_schedule(checker, windows, mode=request.mode, change_gpu_minutes=0.0, kind=kind,
                                              rates=[rate] * len(windows), raise_misses=kind == "static peak")
        except InfeasibleError:
            statics[kind] = None
    report = WindowedReport(request=request, windows=tuple(windows), change_gpu_minutes=change_gpu_minutes,
                            schedules=schedules, reasons=reasons, static_peak=statics["static peak"],
                            static_mean=statics["static mean"])
    if report.chosen is None:
        return report
    alone = tuple(checker.solve([w], [r], mode=request.mode, change_gpu_minutes=0.0) for w, r in zip(windows, at_rates))
    if progress is not None:
        progress("each window alone", len(modes) + 2, len(modes) + 3)
    each = tuple(window_alone(checker, w, mode=request.mode) for w in windows)
    return replace(report, window_optima=alone, windows_alone=each,
                   one_shape=checker.solve(windows, at_rates, mode=request.mode, change_gpu_minutes=change_gpu_minutes,
                                           one_shape=True))


def window_alone(checker: WindowChecker, window: Window, *, mode: str) -> VerifiedSchedule:
    """``window`` planned alone as ``optimize`` would plan it at its rate: the program over that
    window (every mode ``mode`` allows, no change cost), its failing phase raised until the window
    passes end to end (at most MAX_SCHEDULE_ROUNDS programs)."""
    requirement = _requirements(mode, [window.rate_rps])[0]
    for round_ in range(1, MAX_SCHEDULE_ROUNDS + 1):
        schedule = checker.solve([window], [requirement], mode=mode, change_gpu_minutes=0.0)
        check = checker.check(schedule, window, at=0)
        if check.verification.passed or round_ == MAX_SCHEDULE_ROUNDS:
            return VerifiedSchedule(kind="window alone", schedule=schedule, checks=(check,), rounds=round_)
        requirement[check.verification.failing_phase or MODE_PHASES[schedule.modes[0]][0]] *= RAISE_FACTOR
    raise AssertionError("unreachable")


def _requirements(mode: str, rates: list[float]) -> list[dict[str, float]]:
    """Each window's rate as the requirement of every phase ``mode`` may run."""
    return [{p: rate for m in MODES[mode] for p in MODE_PHASES[m]} for rate in rates]


