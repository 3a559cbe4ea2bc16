"""The optimize pipeline: shapes → goodput → pool curves → verified search per fleet → the answer.

For each fleet, the disaggregated plan (each node affinity asked for) and the colocated plan are
searched under the same constraints (0x0A–0x0C), each by :func:`~pdplan.planner.search.verified_search`;
with ``--mixed``, so is a disaggregated plan that may add Splitwise's mixed machines (0x08G), which
the program counts in both phases and the simulation runs with their spill thresholds; with
``--borrow``, so is a disaggregated plan whose dedicated machines may be lent to the other phase
past those thresholds (Splitwise's borrowing, :mod:`pdplan.sim.fast.borrowing`): the program counts
its pools as dedicated, and the verified search's descent finds what borrowing lets it drop.
The answer is the cheapest plan the end-to-end simulation passed, over every fleet, mode and
affinity (objective goodput: the highest verified rate). When none passed, there is no answer:
the report carries the plan that missed by the least.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import partial, reduce

from pdplan.cache import ResultCache
from pdplan.candidates import Rejected
from pdplan.engines import pair_refusal
from pdplan.errors import InfeasibleError, PdplanError
from pdplan.goodput import Search
from pdplan.hardware import Cluster
from pdplan.parallel import run_each, shared_workers
from pdplan.placement import Candidate, Fleet, Problem, solve
from pdplan.placement.recall import recalling
from pdplan.planner.checks import Verifier
from pdplan.planner.measure import Measured, Progress, measure, pool_candidates
from pdplan.planner.request import PlanRequest
from pdplan.planner.search import Checked, SearchResult, verified_search
from pdplan.vocabulary import Objective, Redundancy


@dataclass(frozen=True, kw_only=True)
class FleetResult:
    """Both modes for one fleet and the mode that wins it."""

    fleet: Fleet
    disaggregated: SearchResult
    colocated: SearchResult
    objective: str
    mixed: SearchResult | None = None     #: with --mixed: the disaggregated search that may add mixed machines
    borrowing: SearchResult | None = None  #: with --borrow: the disaggregated search whose machines may be lent

    @property
    def best(self) -> SearchResult | None:
        """The better mode with a verified plan (None when neither has one)."""
        return self.best_in("auto")

    def searches(self, mode: str = "auto") -> tuple[SearchResult, ...]:
        """The searches of the modes ``mode`` allows ("auto": both)."""
        return tuple(r for r in (self.disaggregated, self.mixed, self.borrowing, self.colocated)
                     if r is not None and mode in ("auto", r.mode))

    def best_in(self, mode: str) -> SearchResult | None:
        """The better verified plan among the modes ``mode`` allows."""
        found = [r for r in self.searches(mode) if r.best is not None]
        return reduce(lambda a, b: better(a, b, self.objective), found) if found else None


@dataclass(frozen=True, kw_only=True)
class PlanReport:
    """What ``pdplan optimize`` found, with the evidence behind every number."""

    request: PlanRequest
    measured: tuple[Measured, ...]
    rejected: tuple[Rejected, ...]
    candidates: tuple[Candidate, ...]
    fleets: tuple[FleetResult, ...]
    chosen: SearchResult | None            #: the search whose verified plan is the answer
    end_to_end: Search | None              #: the answer's own goodput, the whole plan simulated
    without_redundancy: SearchResult | None  #: the answer of the same request without redundancy
    simulations: int                       #: end-to-end simulation runs this invocation ran
    cache_hits: int
    cache_misses: int
    cache_dir: str | None = None           #: the result cache's folder (None: the cache was off)
    #: when the answer runs attention DP or expert parallelism: the best plan of TP × PP shapes only, in
    #: the mode asked for (its search; None when the answer needs no such comparison)
    tp_only: SearchResult | None = None
    #: a P/D answer whose fleet has no colocated plan at the target: the colocated plan of that fleet
    #: that serves the highest rate the cluster holds, verified at that rate (the rollback's fallback)
    fallback: SearchResult | None = None

    @property
    def answer(self) -> Checked | None:
        return None if self.chosen is None else self.chosen.best

    @property
    def closest(self) -> Checked | None:
        """With no answer: the plan that missed by the least, over every search of the mode asked for."""
        tried = [c for f in self.fleets for r in f.searches(self.request.mode) for c in r.tried]
        return min(tried, key=lambda c: c.verification.worst_shortfall, default=None)

    @property
    def fleet(self) -> FleetResult | None:
        return None if self.chosen is None else next(f for f in self.fleets if f.fleet == self.chosen.fleet)

    @property
    def rollback(self) -> Checked | None:
        """The colocated plan a rollback switches to: the answer itself when it is colocated, else its
        fleet's colocated plan at the target, else the :attr:`fallback` that serves the most."""
        if self.chosen is None:
            return None
        if self.chosen.mode == "colocated":
            return self.answer
        if self.fleet.colocated.best is not None:
            return self.fleet.colocated.best
        return None if self.fallback is None else self.fallback.best

    @property
    def rival(self) -> SearchResult | None:
        """The best verified plan of the other mode over every fleet (disaggregated when the answer
        is colocated, and the other way round): what the margin is measured against."""
        if self.chosen is None:
            return None
        other = [f.colocated if self.chosen.mode == "disaggregated" else f.disaggregated for f in self.fleets]
        found = [r for r in other if r.best is not None]
        return reduce(lambda a, b: better(a, b, self.request.objective), found) if found else None

    @property
    def margin(self) -> float | None:
        """How much better the answer is than the :attr:`rival`, as a fraction of the rival's
        objective (cost, GPUs or power saved; goodput gained); None if the other mode has no plan."""
        rival, objective = self.rival, self.request.objective
        if rival is None or not rival.best.value(objective):
            return None
        ours, theirs = self.answer.value(objective), rival.best.value(objective)
        return (ours - theirs if objective == "goodput" else theirs - ours) / theirs


def better(a: SearchResult, b: SearchResult, objective: str) -> SearchResult:
    """The search with the better verified plan (ties: fewer GPUs, then colocated, the simpler
    system, then no mixed pool, then no borrowing, then the narrower fleet); a search with no
    verified plan loses."""
    if a.best is None:
        return b
    if b.best is None:
        return a
    sign = -1 if objective == "goodput" else 1

    def key(r: SearchResult) -> tuple:  # then the fleet that allows the fewest GPU types
        return (sign * r.best.value(objective), r.best.solution.gpus_total, r.mode != "colocated",
                r.best.solution.mixed, r.best.plan.borrow, r.fleet.breadth)

    return min((a, b), key=key)


def base_problem(request: PlanRequest, candidates: tuple[Candidate, ...], fleet: Fleet, mode: str,
                 affinity: str, cluster: Cluster | None = None, mixed: bool = False) -> Problem:
    """The program for one fleet, mode and affinity at the request's target and budgets (with
    ``mixed``, mixed machines may join the disaggregated plan)."""
    return Problem(candidates=candidates, cluster=cluster or request.cluster, mode=mode,
                   target_rps=request.target_rps, fleet=fleet, objective=request.objective,
                   link_headroom=request.link_headroom, affinity=affinity, max_gpus=request.max_gpus,
                   max_usd_per_hour=request.max_usd_per_hour, max_power_w=request.max_power_w,
                   time_limit_s=request.time_limit_s, seed=request.seed, pool_shapes=request.pool_shapes,
                   redundancy=request.redundancy, mixed=mixed, max_mixed=request.mixed_max if mixed else None,
                   apart=unpairable(request, candidates))


def unpairable(request: PlanRequest, candidates: tuple[Candidate, ...]) -> tuple[tuple[Candidate, Candidate], ...]:
    """The prefill and decode shapes the plan's engine cannot run together (SGLang's equal TP)."""
    prefills = [c for c in candidates if c.phase == "prefill"]
    decodes = [c for c in candidates if c.phase == "decode"]
    return tuple((p, d) for p in prefills for d in decodes
                 if pair_refusal(request.profiles.serving_engine, request.connector, p, d))


class Searches:
    """Runs (and remembers) the verified search of each fleet, mode and affinity: fleets that
    allow a colocated pool the same GPU types share one colocated search."""

    def __init__(self, request: PlanRequest, candidates: tuple[Candidate, ...], verifier: Verifier):
        self.request, self.candidates, self.verifier = request, candidates, verifier
        self._done: dict[tuple, SearchResult] = {}

    def run(self, fleet: Fleet, mode: str, affinity: str, request: PlanRequest | None = None,
            mixed: bool = False, borrow: bool = False) -> SearchResult:
        request = request or self.request
        key = _search_key(fleet, mode, affinity, request, mixed, borrow)
        if key not in self._done:
            base = base_problem(request, self.candidates, fleet, mode, affinity, mixed=mixed)
            self._done[key] = self._search(request, base, borrow)
        return replace(self._done[key], fleet=fleet)

    def _search(self, request: PlanRequest, base: Problem, borrow: bool) -> SearchResult:
        def check(solution, rate_rps=None) -> Checked:
            return self.verifier.check(solution, mode=base.mode, affinity=base.affinity, fleet=base.fleet.label,
                                       rate_rps=rate_rps, redundancy=base.redundancy, borrow=borrow)

        if request.objective != "goodput":
            return verified_search(request, base, check)
        return self._highest_rate(base, check)

    def _highest_rate(self, base: Problem, check) -> SearchResult:
        """Objective goodput: the program's strongest plan within the budget, verified at the
        highest rate the whole plan sustains."""
        found = SearchResult(fleet=base.fleet, mode=base.mode, affinity=base.affinity)
        try:
            first = solve(base)
        except PdplanError as err:  # infeasible, or no budget bounds an unbounded cluster
            return replace(found, reason=err.detail)
        claimed = check(first, first.goodput_rps)
        search = self.verifier.goodput(claimed.plan, mode=base.mode, start_rps=first.goodput_rps)
        rate = search.goodput_rps
        if rate <= 0:
            return replace(found, first=first, tried=(claimed,))
        verified = check(first, rate)
        return replace(found, first=first, best=verified, tried=(claimed, verified), proven=True,
                       end_to_end=search)

    def prefetch(self, wanted: list[tuple]) -> None:
        """With ``jobs`` above 1, run the searches ``wanted`` (fleet, mode, affinity, request, mixed, borrow)
        that are not done yet on that many processes, each with its own verifier on the shared cache;
        :meth:`run` then finds them done. The searches are independent, so the results are the ones
        :meth:`run` would compute."""
        todo = self.pending(wanted)
        if self.request.jobs <= 1 or len(todo) <= 1:
            return
        found = run_each(_call, [self.job(item) for _, item in todo], jobs=self.request.jobs,
                         cache=self.verifier.cache)
        for (key, _), (result, simulations) in zip(todo, found):
            self.adopt(key, result)
            self.verifier.simulations += simulations

    def pending(self, wanted: list[tuple]) -> list[tuple[tuple, tuple]]:
        """(key, item) of each search in ``wanted`` not done yet, once each."""
        return list({_search_key(*item): item for item in wanted if _search_key(*item) not in self._done}.items())

    def job(self, item: tuple) -> partial:
        """The search ``item`` as work for :func:`pdplan.parallel.run_each`: (its result, simulations)."""
        return partial(_search_in_worker, self.candidates, self.verifier.profiles, item)

    def adopt(self, key: tuple, result: SearchResult) -> None:
        """A search run elsewhere (:meth:`job`): :meth:`run` finds it done."""
        self._done[key] = result

    def wanted(self, fleet: Fleet, request: PlanRequest | None = None) -> list[tuple]:
        """The searches :meth:`fleet` runs: each affinity asked for, mixed machines and borrowing when
        asked, colocated."""
        request = request or self.request
        return ([(fleet, "disaggregated", a, request, False, False) for a in request.affinities]
                + ([(fleet, "disaggregated", "high", request, True, False)] if request.mixed else [])
                + ([(fleet, "disaggregated", "high", request, False, True)] if request.borrow else [])
                + [(fleet, "colocated", "high", request, False, False)])

    def fleet(self, fleet: Fleet, request: PlanRequest | None = None) -> FleetResult:
        request = request or self.request
        self.prefetch(self.wanted(fleet, request))
        affinities = [self.run(fleet, "disaggregated", a, request) for a in request.affinities]
        mixed = self.run(fleet, "disaggregated", "high", request, mixed=True) if request.mixed else None
        borrowing = self.run(fleet, "disaggregated", "high", request, borrow=True) if request.borrow else None
        return FleetResult(fleet=fleet, disaggregated=pick(affinities, request.objective),
                           colocated=self.run(fleet, "colocated", "high", request), objective=request.objective,
                           mixed=mixed, borrowing=borrowing)


def _search_key(fleet: Fleet, mode: str, affinity: str, request: PlanRequest, mixed: bool, borrow: bool) -> tuple:
    """What makes two searches the same: fleets that allow a colocated pool the same GPU types share one."""
    return (mode, affinity, fleet.allowed("colocated") if mode == "colocated" else fleet.name,
            request.redundancy, request.objective, mixed, borrow)


def _call(job: partial, *, cache: ResultCache):
    return job(cache=cache)


def _headroom_in_worker(request: PlanRequest, profiles: dict, plan, mode: str, start_rps: float, *,
                        cache: ResultCache) -> tuple[Search, int]:
    """The answer's headroom bisection in a worker process, and the simulations it ran."""
    verifier = Verifier(request, profiles, cache)
    return verifier.goodput(plan, mode=mode, start_rps=start_rps), verifier.simulations


def _search_in_worker(candidates: tuple[Candidate, ...], profiles: dict, item: tuple, *,
                      cache: ResultCache) -> tuple[SearchResult, int]:
    """One search in a worker process, and the simulations it ran."""
    fleet, mode, affinity, request, mixed, borrow = item
    verifier = Verifier(request, profiles, cache)
    result = Searches(request, candidates, verifier).run(fleet, mode, affinity, request, mixed, borrow)
    return result, verifier.simulations


def pick(results: list[SearchResult], objective: str) -> SearchResult:
    """The best of several searches: a verified plan wins; without one, the search whose
    closest plan missed least; without any plan, the first (its reason)."""
    if any(r.best is not None for r in results):
        return reduce(lambda a, b: better(a, b, objective), results)
    tried = [r for r in results if r.tried]
    if tried:
        return min(tried, key=lambda r: r.closest.verification.worst_shortfall)
    return results[0]


def optimize(request: PlanRequest, *, cache: ResultCache, progress: Progress | None = None,
             headroom: bool = True) -> PlanReport:
    """Run the whole pipeline. No plan at all (the program is infeasible everywhere) raises
    InfeasibleError naming why; plans that all miss end to end give a report without an answer.
    ``headroom`` False skips the answer's own goodput bisection (``end_to_end`` is then None
    unless the search measured it), for callers that read only the verdicts. Its stages share
    one pool of ``request.jobs`` worker processes, and every placement solve is kept in ``cache``
    (:mod:`pdplan.placement.recall`)."""
    with shared_workers(request.jobs), recalling(cache):
        return _optimize(request, cache=cache, progress=progress, headroom=headroom)


def _optimize(request: PlanRequest, *, cache: ResultCache, progress: Progress | None, headroom: bool) -> PlanReport:
    measured, rejected = measure(request, cache, progress)
    candidates = pool_candidates(request, measured, cache, progress)
    verifier = Verifier(request, {m.key: m.profile for m in measured}, cache)
    searches = Searches(request, candidates, verifier)
    fleets = []
    for i, fleet in enumerate(request.fleets):
        if progress is not None:
            progress(f"verified search {fleet.label}", i, len(request.fleets))
        fleets.append(searches.fleet(fleet))
    if all(f.best_in(request.mode) is None for f in fleets) and all(
            r.first is None for f in fleets for r in f.searches(request.mode)):
        raise InfeasibleError(no_plan_message(request, fleets, searches, ruled_out(request, measured, rejected)))
    chosen = best_of(fleets, request)
    end_to_end = without = tp_only = fallback = None
    if chosen is not None:
        narrow = Searches(request, tuple(c for c in candidates if not c.is_wide), verifier)
        end_to_end = chosen.end_to_end
        if end_to_end is None and headroom:
            end_to_end = after_the_answer(request, chosen, fleets, searches, narrow)
        if request.redundancy != "none":  # the answer the same request gets without redundancy
            free = replace(request, redundancy=Redundancy.NONE)
            without = best_of([searches.fleet(f, free) for f in request.fleets], free)
        tp_only = narrow_baseline(request, chosen, narrow)
        fallback = reduced_fallback(request, chosen, fleets, searches)
    return PlanReport(request=request, measured=tuple(measured), rejected=tuple(rejected), candidates=candidates,
                      fleets=tuple(fleets), chosen=chosen, end_to_end=end_to_end, without_redundancy=without,
                      simulations=verifier.simulations, cache_hits=cache.hits, cache_misses=cache.misses,
                      cache_dir=str(cache.folder) if cache.enabled else None, tp_only=tp_only,
                      fallback=fallback)


def after_the_answer(request: PlanRequest, chosen: SearchResult, fleets: list[FleetResult], searches: Searches,
                     narrow: Searches) -> Search:
    """The answer's headroom bisection (the highest rate the whole plan passes). With ``jobs`` above
    1, the searches that follow the answer run beside it on the workers (the TP-only ones of
    :func:`narrow_baseline` on ``narrow``, the colocated one of :func:`reduced_fallback`), and
    :meth:`Searches.run` finds them done: each is independent of the others, so the results are
    the ones the serial order computes."""
    verifier, best = searches.verifier, chosen.best
    narrow_items = [item for f in request.fleets for item in narrow.wanted(f)] if _is_wide(chosen) else []
    fallback_items = [item for item in [_fallback_item(request, chosen, fleets)] if item is not None]
    beside = [(owner, key, item) for owner, items in ((narrow, narrow_items), (searches, fallback_items))
              for key, item in owner.pending(items)]
    if request.jobs <= 1 or not beside:  # nothing to run beside it: here, with this verifier's memory
        return verifier.goodput(best.plan, mode=chosen.mode, start_rps=best.verification.rate_rps)
    headroom = partial(_headroom_in_worker, request, verifier.profiles, best.plan, chosen.mode,
                       best.verification.rate_rps)
    (end_to_end, simulations), *found = run_each(_call, [headroom] + [owner.job(item) for owner, _, item in beside],
                                                 jobs=request.jobs, cache=verifier.cache)
    verifier.simulations += simulations
    for (owner, key, _), (result, simulations) in zip(beside, found):
        owner.adopt(key, result)
        verifier.simulations += simulations
    return end_to_end


def _is_wide(chosen: SearchResult) -> bool:
    """Whether the answer runs a shape with attention DP or EP (then a TP-only baseline is searched)."""
    return any(c.is_wide for c in chosen.best.solution.replicas)


def _fallback_item(request: PlanRequest, chosen: SearchResult, fleets: list[FleetResult]) -> tuple | None:
    """The search :func:`reduced_fallback` runs (None when it runs none)."""
    fleet = next(f for f in fleets if f.fleet == chosen.fleet)
    if chosen.mode == "colocated" or fleet.colocated.best is not None or request.objective == "goodput":
        return None
    return (fleet.fleet, "colocated", "high", replace(request, objective=Objective.GOODPUT, target_rps=None), False,
            False)


def reduced_fallback(request: PlanRequest, chosen: SearchResult, fleets: list[FleetResult],
                     searches: Searches) -> SearchResult | None:
    """The colocated fallback of a P/D answer when no colocated plan of its fleet meets the target:
    the colocated plan of that fleet with the highest rate the cluster and budgets hold, verified
    at that rate, so a rollback has a registered plan and knows what share of the target it keeps.
    None when the answer is colocated or its fleet has a colocated plan at the target."""
    item = _fallback_item(request, chosen, fleets)
    if item is None:
        return None
    found = searches.run(*item)
    return found if found.best is not None and found.best.verification.passed else None


def narrow_baseline(request: PlanRequest, chosen: SearchResult, narrow: Searches) -> SearchResult | None:
    """When the answer runs a shape with attention DP or EP: the best verified plan of TP × PP
    shapes alone over every fleet, in the mode asked for (``narrow`` searches those shapes only), so
    the report can say what going wide saves. None when the answer is TP × PP already; a search
    without a plan when none passes."""
    if not _is_wide(chosen):
        return None
    results = [r for f in request.fleets for r in narrow.fleet(f).searches(request.mode)]
    found = pick(results, request.objective)
    if found.best is None and not found.tried and request.target_rps is not None:
        needed = gpus_needed(request, narrow.candidates)
        if needed is not None:
            found = replace(found, reason=f"{found.reason or 'no plan passed'}; TP x PP shapes alone would need "
                                          f"{needed} GPUs for {request.target_rps:g} req/s (integer program, "
                                          "node counts lifted; not simulated)")
    return found


def best_of(fleets: list[FleetResult], request: PlanRequest) -> SearchResult | None:
    """The search with the best verified plan over ``fleets`` in the mode asked for (None: none passed)."""
    found = [best for best in (f.best_in(request.mode) for f in fleets) if best is not None]
    return reduce(lambda a, b: better(a, b, request.objective), found) if found else None


#: The phases each mode asked for needs a shape for.
MODE_PHASES = {"colocated": ("colocated",), "disaggregated": ("prefill", "decode")}


def ruled_out(request: PlanRequest, measured: list, rejected: list[Rejected]) -> str | None:
    """When every shape of a phase the mode needs was ruled out before any was measured (memory,
    an engine's start-up rule), that, with the first reasons; None otherwise. Without it the
    program would only see no shape of that phase, as if goodput had ruled them all out."""
    modes = MODE_PHASES if request.mode == "auto" else {request.mode: MODE_PHASES[request.mode]}
    unmeasured = {r.shape.phase for r in rejected} - {m.shape.phase for m in measured}
    per_mode = [[_ruled_out_text(phase, rejected) for phase in phases if phase in unmeasured]
                for phases in modes.values()]
    if not all(per_mode):  # a mode still had shapes for every phase: the program's reason stands
        return None
    return "; ".join(text for texts in per_mode for text in texts)


def _ruled_out_text(phase: str, rejected: list[Rejected]) -> str:
    shapes = [r for r in rejected if r.shape.phase == phase]
    reasons = list(dict.fromkeys(r.reason for r in shapes))  # distinct, in order
    more = f"; and {len(reasons) - 2} other reasons" if len(reasons) > 2 else ""
    return f"every {phase} shape ({len(shapes)}) is ruled out before it is measured: {'; '.join(reasons[:2])}{more}"


def no_plan_message(request: PlanRequest, fleets: list[FleetResult], searches: Searches,
                    unmeasured: str | None = None) -> str:
    """Why no fleet has a plan; when the cluster's size or the budget binds, also the highest rate
    the cluster serves (verified end to end) and the GPUs the target would need."""
    if unmeasured is not None:
        return f"no fleet can serve the target: {unmeasured}"
    reasons = "; ".join(f"{f.fleet.label}: {(f.colocated if request.mode == 'colocated' else f.disaggregated).reason}"
                        for f in fleets)
    message = f"no fleet can serve the target: {reasons}"
    if request.target_rps is None or not any(word in reasons for word in ("node counts", "budget", "spare capacity")):
        return message
    needed = gpus_needed(request, searches.candidates)
    served = highest_verified_rate(request, searches)
    if served is not None:
        rate, checked = served
        mode = "colocated" if checked.plan.colocated else "disaggregated"
        message += (f". The cluster serves at most {rate:.3g} req/s ({mode}, verified end to end on "
                    f"{checked.solution.gpus_total} GPUs)")
    if needed is not None:
        message += f"; {request.target_rps:g} req/s would need {needed} GPUs"
    return message


def asked_modes(request: PlanRequest) -> tuple[str, ...]:
    """The modes the answer may take: both under ``--mode auto``, else the one asked for."""
    return ("disaggregated", "colocated") if request.mode == "auto" else (str(request.mode),)


def gpus_needed(request: PlanRequest, candidates: tuple[Candidate, ...]) -> int | None:
    """The fewest GPUs any fleet needs for the target in a mode the answer may take, node counts and budgets
    lifted."""
    unbounded = Cluster(nodes=tuple(replace(n, count=None) for n in request.cluster.nodes),
                        energy_usd_per_kwh=request.cluster.energy_usd_per_kwh, pue=request.cluster.pue)
    lifted = replace(request, max_gpus=None, max_usd_per_hour=None, max_power_w=None, objective=Objective.GPUS)
    found = []
    for fleet in request.fleets:
        for mode in asked_modes(request):
            try:
                found.append(solve(base_problem(lifted, candidates, fleet, mode, "high", unbounded)).gpus_total)
            except InfeasibleError:
                continue
    return min(found, default=None)


def highest_verified_rate(request: PlanRequest, searches: Searches) -> tuple[float, Checked] | None:
    """The highest rate any fleet sustains within the cluster and budgets in a mode the answer may take, verified."""
    strongest = replace(request, objective=Objective.GOODPUT, target_rps=None)
    best = None
    for fleet in request.fleets:
        for mode in asked_modes(request):
            result = searches.run(fleet, mode, "high", strongest)
            if result.best is not None and (best is None or result.best.verification.rate_rps > best[0]):
                best = (result.best.verification.rate_rps, result.best)
    return best
