"""End-to-end verification: the whole plan, routing, KV transfer and admission included, simulated
on R runs of the trace at the target rate, each SLO objective judged with a 95% interval.

Runs. Run 0 replays the trace rescaled to the target rate (its burst shape kept, as ``pdplan
simulate --rate`` does). Runs 1 … R−1 are Poisson resamples of it: new arrivals whose rate
follows the trace's own rate over time (:func:`pdplan.workload.poisson_resample`), lengths in
trace order, each from its own seed. With ``--arrivals poisson`` or a lengths-only trace every
run is a Poisson draw of the trace's lengths at the target rate.

Length. A run lasts at least ``min_run_s`` seconds of arrivals (optimize's ``--min-run``, default
:data:`DEFAULT_MIN_RUN_S`): a trace that, rescaled to the target rate, arrives in less is replayed
several times back to back (:func:`pdplan.workload.repeat`: its burst shape kept, prefix hashes
renumbered per copy so that no copy reuses another's prefixes); a Poisson run draws as many
requests. The empty system a run starts from and the drain it ends with each last about one
request's lifetime (seconds to a minute at chat lengths); in a run of a few seconds, which is what
an hour's trace rescaled to thousands of requests per second becomes, they would be most of it
and flatter the plan. Runs hold at most :data:`MAX_RUN_REQUESTS` requests either way.

Intervals. Each objective's attainment (0x0A: the share of requests within the threshold, a
request with one output token passing TPOT) is measured per run; the 95% interval is
mean ± t(0.975, R−1) · s / √R over the runs (one run has no spread: low = high = mean). Joint
attainment, every clock on the same request, is counted per request in each run, never inferred
from the marginals.

Pass rule. ``lower`` (default): every objective's interval lower end meets its target; ``mean``:
every mean does. With redundancy, the plan must also pass with each distinct instance (or node)
lost.

A miss settled by the first run. Both rules need an objective's mean over the R runs at its
target, so when run 0 alone attains less than ``R · target − (R − 1)`` (0.7 for a 0.9 target over
3 runs), no further runs, even at 100%, could make the plan pass: the verdict is a miss on run 0
alone and runs 1 … R−1 are not simulated (:func:`settled_by_first_run`). This is exact, not a
heuristic; the reported attainment of such a miss is run 0's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats

from pdplan.errors import InternalError
from pdplan.goodput import joint_attainment, per_request_clocks
from pdplan.sim import SimResult
from pdplan.slo import SLO, Objective, attainment
from pdplan.vocabulary import Rule
from pdplan.workload import Workload, head, poisson_resample, repeat, replace_arrivals, rescale_rate

DEFAULT_RUNS = 3
RULES = tuple(Rule)
#: Runs simulate at most this many requests each (the trace's first ones beyond it): a default run of five
#: minutes up to 5,000 req/s, about 1.5 GiB a process there. At 200,000, a run at 4,800 req/s held 40 s of
#: arrivals, in which a decode pool had not filled, and passed a plan that five minutes of the same traffic miss.
MAX_RUN_REQUESTS = 1_500_000
#: A verification run lasts at least this many seconds of arrivals (see the module docstring).
DEFAULT_MIN_RUN_S = 300.0


@dataclass(frozen=True, kw_only=True)
class Interval:
    """Mean over runs and its 95% interval, clipped to [0, 1]."""

    mean: float
    low: float
    high: float

    @classmethod
    def of(cls, values: list[float]) -> "Interval":
        mean = float(np.mean(values))
        if len(values) < 2:
            return cls(mean=mean, low=mean, high=mean)
        half = float(stats.t.ppf(0.975, len(values) - 1) * np.std(values, ddof=1) / math.sqrt(len(values)))
        return cls(mean=mean, low=max(0.0, mean - half), high=min(1.0, mean + half))

    def judged(self, rule: str) -> float:
        return self.low if rule == "lower" else self.mean

    def to_dict(self) -> dict:
        return {"mean": self.mean, "low": self.low, "high": self.high}


@dataclass(frozen=True, kw_only=True)
class ObjectiveCheck:
    """One SLO objective across the runs."""

    objective: Objective
    runs: tuple[float, ...]
    interval: Interval
    judged: float                            #: what the pass rule compares: the low end or the mean

    @property
    def passed(self) -> bool:
        return self.judged >= self.objective.attainment

    @property
    def shortfall(self) -> float:
        """How far the judged attainment is below its target (≤ 0 when it passes)."""
        return self.objective.attainment - self.judged

    def to_dict(self) -> dict:
        return {"metric": self.objective.metric, "threshold_s": self.objective.threshold_s,
                "target": self.objective.attainment, "runs": list(self.runs), **self.interval.to_dict(),
                "passed": self.passed}


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """What one simulated run contributes: attainments and where the TTFT misses spent their time."""

    objectives: tuple[float, ...]            #: attainment per SLO objective, in SLO order
    clocks: dict[str, float]                 #: tightest-threshold attainment per clock and joint
    ttft_excess_s: dict[str, float]          #: summed over requests missing TTFT: prefill_queue, transfer, admission
    requests: int
    summary: dict = field(default_factory=dict)  #: run 0 only: the simulate summary


def run_record(result: SimResult, slo: SLO, *, with_summary: bool) -> RunRecord:
    """Judge one simulated run against the SLO."""
    clocks = per_request_clocks(result)
    ttft = slo.threshold_s("ttft")
    shares = {metric: attainment(clocks[metric], slo.threshold_s(metric))
              for metric in ("ttft", "tpot", "e2e") if slo.threshold_s(metric) is not None}
    shares["joint"] = joint_attainment(slo, clocks)
    excess = {"prefill_queue": 0.0, "transfer": 0.0, "admission": 0.0}
    if ttft is not None:
        late = ~(clocks["ttft"] <= ttft)
        for key, column in (("prefill_queue", "prefill_queue_s"), ("transfer", "exposed_transfer_s"),
                            ("admission", "admission_wait_s")):
            values = result[column][late]
            excess[key] = float(np.nansum(values[np.isfinite(values)]))
    tpot = slo.threshold_s("tpot")
    return RunRecord(objectives=tuple(attainment(clocks[o.metric], o.threshold_s) for o in slo.objectives),
                     clocks=shares, ttft_excess_s=excess, requests=len(result),
                     summary=result.summary(ttft, tpot) if with_summary else {})


@dataclass(frozen=True, kw_only=True)
class Verification:
    """The verdict on one plan at one rate, and the evidence."""

    passed: bool
    rule: str
    rate_rps: float
    seeds: tuple[int, ...]
    requests: tuple[int, ...]
    per_objective: tuple[ObjectiveCheck, ...]
    clocks: dict[str, Interval]              #: ttft, tpot (tightest thresholds) and joint
    failing_phase: str | None                #: the pool to strengthen after a miss
    summary: dict                            #: run 0's simulate summary
    losses: tuple["LossCheck", ...] = ()
    #: the miss was settled by run 0 alone (:func:`settled_by_first_run`): the further runs were not simulated
    settled_early: bool = False

    @property
    def joint(self) -> Interval:
        return self.clocks["joint"]

    @property
    def worst_shortfall(self) -> float:
        """The largest amount by which an objective misses (≤ 0: every objective holds), over
        the plan and every loss it must survive."""
        own = max(o.shortfall for o in self.per_objective)
        return max([own, *(loss.worst_shortfall for loss in self.losses)])

    @property
    def clear_miss(self) -> bool:
        """Missed even on the mean over the runs (not only by the interval's width): a plan
        no larger anywhere would miss too, noise aside."""
        own = max(o.objective.attainment - o.interval.mean for o in self.per_objective)
        return max([own, *(loss.mean_shortfall for loss in self.losses)]) > 0

    def to_dict(self) -> dict:
        return {
            "passed": self.passed, "rule": self.rule, "rate_rps": self.rate_rps, "seeds": list(self.seeds),
            "requests": list(self.requests), "settled_by_first_run": self.settled_early,
            "joint": self.joint.to_dict(),
            "per_objective": [o.to_dict() for o in self.per_objective],
            "losses": [loss.to_dict() for loss in self.losses],
        }


@dataclass(frozen=True, kw_only=True)
class LossCheck:
    """The plan with one instance or node lost, and how it fared."""

    lost: str                                #: what was removed, e.g. "node h100-dgx-0"
    passed: bool
    worst_shortfall: float                   #: by the pass rule
    mean_shortfall: float                    #: by the mean over the runs
    joint: Interval | None                   #: None when a phase had nothing left
    failing_phase: str | None = None         #: the pool to strengthen for this loss

    def to_dict(self) -> dict:
        return {"lost": self.lost, "passed": self.passed, "worst_shortfall": self.worst_shortfall,
                "joint": None if self.joint is None else self.joint.to_dict()}


def run_copies(requests: int, rate_rps: float, min_run_s: float) -> int:
    """How many times a trace of ``requests`` requests is replayed back to back so that a run at
    ``rate_rps`` lasts at least ``min_run_s`` seconds, within :data:`MAX_RUN_REQUESTS`."""
    requests = min(requests, MAX_RUN_REQUESTS)
    wanted = math.ceil(min_run_s * rate_rps / requests - 1e-9)
    return max(1, min(wanted, MAX_RUN_REQUESTS // requests))


def run_seconds(requests: int, rate_rps: float, min_run_s: float) -> float:
    """Seconds of arrivals a run at ``rate_rps`` holds (its requests over the rate): at least ``min_run_s``
    unless :data:`MAX_RUN_REQUESTS` cut the repeats short, as it does at thousands of requests per second."""
    return min(requests, MAX_RUN_REQUESTS) * run_copies(requests, rate_rps, min_run_s) / rate_rps


def run_workloads(workload: Workload, rate_rps: float, *, runs: int, seed: int, arrivals: str,
                  min_run_s: float = 0.0) -> list[Workload]:
    """The R request streams a plan is verified on (see the module docstring)."""
    if runs < 1:
        raise InternalError("runs must be >= 1")
    if len(workload) > MAX_RUN_REQUESTS:
        workload = head(workload, MAX_RUN_REQUESTS)
    copies = run_copies(len(workload), rate_rps, min_run_s)
    if arrivals == "poisson" or not workload.has_arrivals:
        return [replace_arrivals(workload, rate_rps=rate_rps, n_requests=copies * len(workload), rng=seed + r)
                for r in range(runs)]
    replay = repeat(rescale_rate(workload, rate_rps), copies)
    return [replay] + [poisson_resample(replay, rng=seed + r) for r in range(1, runs)]


def settled_by_first_run(record: RunRecord, slo: SLO, runs: int) -> bool:
    """Whether run 0's ``record`` settles a miss over ``runs`` runs: some objective attains less than
    ``runs · target − (runs − 1)`` in it, so even further runs at 100% could not lift its mean to the
    target, which both pass rules need (see the module docstring). The best mean they could reach must fall
    short by more than a rounding step, so a run exactly on the bound is never settled."""
    return runs > 1 and any((a + runs - 1) / runs < o.attainment - 1e-9
                            for a, o in zip(record.objectives, slo.objectives))


def judge(records: list[RunRecord], slo: SLO, *, rule: str, rate_rps: float, seeds: tuple[int, ...],
          mode: str, losses: tuple[LossCheck, ...] = ()) -> Verification:
    """The verdict from the runs' records; fewer records than ``seeds`` is a miss that
    :func:`settled_by_first_run` settled on the first."""
    if rule not in RULES:
        raise InternalError(f"rule must be one of {', '.join(RULES)}")
    checks = []
    for i, objective in enumerate(slo.objectives):
        values = [r.objectives[i] for r in records]
        interval = Interval.of(values)
        checks.append(ObjectiveCheck(objective=objective, runs=tuple(values), interval=interval,
                                     judged=interval.judged(rule)))
    clocks = {key: Interval.of([r.clocks[key] for r in records]) for key in records[0].clocks}
    own = all(c.passed for c in checks)
    failed = [loss for loss in losses if not loss.passed]
    if not own:
        phase = failing_phase(mode, checks, records)
    else:  # the plan holds whole but not after a loss: strengthen what the worst loss lacked
        phase = max(failed, key=lambda loss: loss.worst_shortfall).failing_phase if failed else None
    early = len(records) < len(seeds)
    if early and (own or len(records) != 1 or not settled_by_first_run(records[0], slo, len(seeds))):
        raise InternalError("fewer runs than seeds are only a miss that the first run settled")
    return Verification(
        passed=own and not failed, rule=rule, rate_rps=rate_rps, seeds=seeds[:len(records)],
        requests=tuple(r.requests for r in records), per_objective=tuple(checks), clocks=clocks,
        failing_phase=phase, summary=records[0].summary, losses=losses, settled_early=early)


def failing_phase(mode: str, checks: list[ObjectiveCheck], records: list[RunRecord]) -> str:
    """The pool to strengthen after a miss. Colocated: its one pool. Disaggregated: the worst
    objective's clock; a TTFT miss points at prefill when queueing for prefill is most of the
    late requests' waiting, at decode when the KV transfer and the wait for decode admission are
    (more decode instances bring more ingress links and more KV memory). The first step a decode may take
    before the first token (``first_step_s``) counts for neither: more decode instances do not remove it."""
    if mode == "colocated":
        return "colocated"
    worst = max(checks, key=lambda c: c.shortfall)
    if worst.objective.metric != "ttft":
        return "decode"
    excess = {k: sum(r.ttft_excess_s[k] for r in records) for k in ("prefill_queue", "transfer", "admission")}
    return "prefill" if excess["prefill_queue"] >= excess["transfer"] + excess["admission"] else "decode"
