"""Goodput: the highest request rate at which every SLO objective still holds (0x08C, 0x0A).

The search is separate from the simulation: :func:`find_goodput` bisects over any ``probe``
function that simulates one rate and reports attainment, so it can be tested against closed
forms and reused for prefill, decode and colocated instances alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Callable

import numpy as np

from pdplan.errors import InternalError, PdplanError
from pdplan.latency.profile import PhaseProfile
from pdplan.queueing import decode_saturation_rps, mg1_rate_for_mean_ttft, service_moments
from pdplan.shape import InstanceShape
from pdplan.sim import MissStop, SimResult, simulate_pool
from pdplan.slo import SLO, Objective, attainment, miss_budget
from pdplan.vocabulary import RankRouter, Router
from pdplan.workload import Workload, repeat, replace_arrivals, rescale_rate, stretch, thin


@dataclass(frozen=True, kw_only=True)
class Probe:
    """One simulated rate: attainment per clock, joint attainment, and the verdict."""

    rate_rps: float
    attainment_ttft: float | None   #: share meeting the tightest TTFT threshold (None: no TTFT objective)
    attainment_tpot: float | None
    attainment_joint: float         #: share meeting every clock's tightest threshold on the same request
    meets: bool                     #: every objective holds and the instance is not saturated
    saturated: bool = False         #: offered rate above what the instance can drain
    #: the run stopped once its misses settled the miss (:func:`miss_stop`): the shares are upper
    #: bounds on what the whole run would attain
    stopped_early: bool = False


#: The seed every draw of a run starts from unless the run names one (probes, verification, CP-SAT).
DEFAULT_SEED = 0


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How hard to look: bisection tolerance, probe budget and probe size."""

    tolerance_rel: float = 0.02     #: stop when (hi − lo) ≤ tolerance_rel · hi
    max_probes: int = 40
    requests_per_probe: int = 2000  #: the one default of goodput and optimize, so their figures agree
    arrivals: str = "trace"         #: "trace" (rescaled, burst shape kept) or "poisson"
    grid_points: int = 0            #: extra rates, evenly spaced up to 1.5 × goodput, for the curve

    def __post_init__(self):
        if not 0 < self.tolerance_rel < 1:
            raise InternalError("tolerance_rel must be in (0, 1)")
        if self.max_probes < 2 or self.requests_per_probe < 1:
            raise InternalError("max_probes must be >= 2 and requests_per_probe >= 1")
        if self.arrivals not in ("trace", "poisson"):
            raise InternalError("arrivals must be 'trace' or 'poisson'")
        if self.grid_points < 0:
            raise InternalError("grid_points must be >= 0")


SEARCH_FIELDS = tuple(f.name for f in fields(SearchSettings))


@dataclass(frozen=True, kw_only=True)
class Search:
    """The answer and every probe that led to it, sorted by rate (the attainment curve)."""

    goodput_rps: float
    probes: tuple[Probe, ...]

    @property
    def missed_rps(self) -> float | None:
        """The lowest probed rate above the goodput that missed: the true goodput lies in
        [goodput_rps, missed_rps) (None when every probe met the SLO)."""
        return min((p.rate_rps for p in self.probes if not p.meets and p.rate_rps > self.goodput_rps),
                   default=None)


def probe_from_clocks(rate_rps: float, slo: SLO, clocks: dict[str, np.ndarray],
                      saturated: bool = False, stopped_early: bool = False) -> Probe:
    """Judge per-request clocks (``{"ttft": s, "tpot": s, "e2e": s}``, NaN = no such clock)."""
    meets = not saturated and all(
        attainment(clocks[o.metric], o.threshold_s) >= o.attainment for o in slo.objectives)
    return Probe(
        rate_rps=rate_rps,
        attainment_ttft=_clock_attainment(slo, clocks, "ttft"),
        attainment_tpot=_clock_attainment(slo, clocks, "tpot"),
        attainment_joint=joint_attainment(slo, clocks),
        meets=meets,
        saturated=saturated,
        stopped_early=stopped_early,
    )


def _clock_attainment(slo: SLO, clocks: dict[str, np.ndarray], metric: str) -> float | None:
    threshold = slo.threshold_s(metric)
    return None if threshold is None else attainment(clocks[metric], threshold)


def joint_attainment(slo: SLO, clocks: dict[str, np.ndarray]) -> float:
    """Share of requests meeting every clock's tightest threshold at once (0x0A).

    Counted per request, never inferred from the marginals; it is at most their minimum.
    """
    ok = None
    for metric in ("ttft", "tpot", "e2e"):
        threshold = slo.threshold_s(metric)
        if threshold is None:
            continue
        values = np.asarray(clocks[metric], dtype=float)
        passed = np.isnan(values) | (values <= threshold)
        ok = passed if ok is None else ok & passed
    return float("nan") if ok is None or len(ok) == 0 else float(ok.mean())


#: The search gives up (goodput 0) when no rate meets the SLO down to this share of its start.
NOTHING_BELOW = 1e-3

#: :func:`find_goodput`'s first step from a start that is a close guess: a pool's rate per replica
#: moves by a few percent per doubling of the pool. (Not a verified plan's headroom: there a failing
#: rate is settled by its first run and costs little, a passing one costs every run, and doubling
#: probes fewer passing rates.)
CLOSE_GUESS_STEP = 0.1


def find_goodput(probe: Callable[[float], Probe], *, start_rps: float, settings: SearchSettings,
                 on_probe: Callable[[Probe], None] | None = None, first_step: float = 1.0) -> Search:
    """g = max{λ : a(λ) meets every objective} by expansion then bisection (0x08C).

    ``settings.grid_points`` extra probes, evenly spaced up to 1.5 × g, fill in the curve a(λ).

    Starts at ``start_rps`` (the queueing bracket), doubles while the rate still meets the SLO,
    then bisects between the last rate that met it and the first that did not. The answer is
    always a rate that was simulated and met the SLO (0 when none did, down to
    ``NOTHING_BELOW`` × the start), so it never overstates.

    A caller whose start is a close guess (a pool sized from a smaller pool's rate per replica)
    passes ``first_step`` below 1: the bracket then grows from the start by ``1 + first_step``,
    the step doubling at each probe, upwards while the rate meets the SLO and downwards while it
    does not, so the bisection starts from a bracket a few times the step wide instead of one a
    factor of two wide.
    """
    if not start_rps > 0:
        raise InternalError("start_rps must be > 0")
    if not 0 < first_step <= 1:
        raise InternalError("first_step must be in (0, 1]")
    probes: dict[float, Probe] = {}

    def run(rate: float) -> Probe:
        if rate not in probes:
            probes[rate] = probe(rate)
            if on_probe is not None:
                on_probe(probes[rate])
        return probes[rate]

    lo, hi = _bracket(run, start_rps, first_step, settings.max_probes, probes)
    while (hi - lo > settings.tolerance_rel * hi and len(probes) < settings.max_probes
           and (lo > 0 or hi > start_rps * NOTHING_BELOW)):
        mid = (lo + hi) / 2
        if run(mid).meets:
            lo = mid
        else:
            hi = mid
    top = 1.5 * (lo or hi)  # the curve on a grid: around the goodput, or below the first failure
    for k in range(1, settings.grid_points + 1):
        run(top * k / settings.grid_points)
    return Search(goodput_rps=lo, probes=tuple(probes[r] for r in sorted(probes)))


def _bracket(run: Callable[[float], Probe], start_rps: float, step: float, max_probes: int,
             probes: dict) -> tuple[float, float]:
    """(lo, hi) for :func:`find_goodput`'s bisection: lo met the SLO (0: nothing has yet), hi did
    not (or the probe budget ran out while every rate met it: then lo = hi)."""
    lo, hi = 0.0, start_rps
    while run(hi).meets and len(probes) < max_probes:
        lo, hi = hi, hi * (1 + step)
        step = min(2 * step, 1.0)
    if run(hi).meets:  # probe budget spent while still meeting: report the best verified rate
        return hi, hi
    if lo > 0 or step >= 1:  # a step of 1 bisects down from the start, as the doubling search always has
        return lo, hi
    below = hi / (1 + step)
    while not run(below).meets and len(probes) < max_probes and below > start_rps * NOTHING_BELOW:
        hi, step = below, min(2 * step, 1.0)
        below = hi / (1 + step)
    return (below, hi) if run(below).meets else (0.0, below)


def replicas_for(target_rps: float, goodput_rps: float) -> int:
    """``n = ceil(R_target / g)`` replicas of one configuration (0x08C)."""
    if goodput_rps <= 0:
        raise InternalError("an instance with zero goodput cannot serve any target")
    return math.ceil(target_rps / goodput_rps - 1e-12)


# --- per-instance goodput (DistServe's Algorithm 1, with the decode rule of docs/design.md) -------

#: Share of each TTFT threshold that a decode instance's admission wait may use when phases are
#: judged alone; prefill keeps the rest. The end-to-end simulation is the final judge.
DEFAULT_ADMISSION_SHARE = 0.1


@dataclass(frozen=True, kw_only=True)
class InstanceGoodput(InstanceShape):
    """Goodput of one instance shape for one phase, with the evidence behind it."""

    phase: str                       #: "prefill", "decode" or "colocated"
    model: str
    policy: str | None
    chunk_tokens: int | None
    goodput_rps: float
    md1_rps: float | None            #: M/D/1 rate at which mean TTFT reaches the TTFT threshold
    mg1_rps: float | None            #: the same by Pollaczek–Khinchine over the trace's prompts
    saturation_rps: float | None     #: prefill/decode: closed-form throughput limit (never good above)
    probes: tuple[Probe, ...]
    requests_per_probe: int
    settings: SearchSettings
    seed: int                        #: the run's seed every probe drew from
    admission_share: float
    max_running_requests: int | None = None  #: requests each rank ran at most (None: its KV's worth)

    @property
    def goodput_per_gpu(self) -> float:
        return self.goodput_rps / self.gpus

    @property
    def missed_rps(self) -> float | None:
        """The lowest probed rate that missed above the goodput (see :attr:`Search.missed_rps`)."""
        return Search(goodput_rps=self.goodput_rps, probes=self.probes).missed_rps

    def to_dict(self) -> dict:
        """The ``pdplan goodput --json`` document."""
        return {
            "phase": self.phase, "model": self.model, "gpu": self.gpu, "tp": self.tp, "pp": self.pp,
            "dp": self.dp, "ep": self.ep, "policy": self.policy, "chunk_tokens": self.chunk_tokens,
            "goodput_rps": self.goodput_rps, "goodput_per_gpu": self.goodput_per_gpu, "gpus": self.gpus,
            "missed_rps": self.missed_rps,
            "bracket": {"md1_rps": self.md1_rps, "mg1_rps": self.mg1_rps},
            "saturation_rps": self.saturation_rps,
            "curve": [{"rate_rps": p.rate_rps, "attainment_ttft": p.attainment_ttft,
                       "attainment_tpot": p.attainment_tpot, "attainment_joint": p.attainment_joint,
                       "meets": p.meets, "saturated": p.saturated, "stopped_early": p.stopped_early}
                      for p in self.probes],
            "probes": len(self.probes),
            "requests_per_probe": self.requests_per_probe,
            "tolerance_rel": self.settings.tolerance_rel,
            "arrivals": self.settings.arrivals,
            "seed": self.seed,
            "max_probes": self.settings.max_probes,
            "grid_points": self.settings.grid_points,
            "admission_share": self.admission_share,
            **({} if self.max_running_requests is None else {"max_running_requests": self.max_running_requests}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "InstanceGoodput":
        """Rebuild from :meth:`to_dict` (the goodput cache stores that form)."""
        settings = SearchSettings(**{k: data[k] for k in SEARCH_FIELDS})
        probes = tuple(Probe(rate_rps=p["rate_rps"], attainment_ttft=p["attainment_ttft"],
                             attainment_tpot=p["attainment_tpot"], attainment_joint=p["attainment_joint"],
                             meets=p["meets"], saturated=p["saturated"],
                             stopped_early=p.get("stopped_early", False)) for p in data["curve"])
        return cls(phase=data["phase"], model=data["model"], gpu=data["gpu"], tp=data["tp"], pp=data["pp"],
                   dp=data.get("dp", 1), ep=data.get("ep", 1), policy=data["policy"],
                   chunk_tokens=data["chunk_tokens"], goodput_rps=data["goodput_rps"],
                   md1_rps=data["bracket"]["md1_rps"], mg1_rps=data["bracket"]["mg1_rps"],
                   saturation_rps=data["saturation_rps"], probes=probes,
                   requests_per_probe=data["requests_per_probe"], settings=settings, seed=data["seed"],
                   admission_share=data["admission_share"], max_running_requests=data.get("max_running_requests"))


def probe_settings(workload: Workload, settings: SearchSettings) -> SearchSettings:
    """The settings probes of ``workload`` run with: a lengths-only trace has no arrivals to
    rescale, so its probes are Poisson."""
    return settings if workload.has_arrivals else replace(settings, arrivals="poisson")


def probe_workload(workload: Workload, rate_rps: float, settings: SearchSettings,
                   replicas: int = 1, *, seed: int = DEFAULT_SEED, reuse: bool = True,
                   replay: bool = False) -> Workload:
    """The requests one probe simulates at ``rate_rps``: ``requests_per_probe`` per replica (the
    caller counts a DP instance's ranks as replicas), so each instance of a pool sees as many
    requests as one instance alone.

    ``trace``: a uniform random subset of the trace's requests, in trace order, gaps scaled to the rate.
    A trace shorter than the probe is used whole, or with ``replay`` (decode pools) replayed back to
    back first (:func:`pdplan.workload.repeat`) so that the probe has its requests: used whole, a pool
    of n lasts 1/n of one instance's probe, and a decode pool, whose requests live for their outputs,
    does not fill in it (a DP8 DeepSeek decode pool of 32 probed for 5 s of the Azure conversation trace
    sampled 116 req/s per replica, where one alone served 48 and the plan's verification found about
    53). Prefill pools keep the trace whole (their requests live for a prefill); so do colocated pools,
    whose attention-DP shapes would simulate 2,000 requests per rank and replica, more than doubling the
    at-scale benchmark; the end-to-end verification judges both. Drawing from the whole trace, not its
    head, keeps its rate swings in every probe, and one replica of a pool of n then sees the same
    process as one instance alone (a router thins the stream it splits), so c(n) and c(1) compare. A
    trace with prefix hashes probed with ``reuse`` (for prefill and colocated instances, whose prefix
    caches reuse them) gives a run of consecutive requests from a drawn start instead: a subset would
    keep a conversation's later turns without the earlier ones they reuse.
    ``poisson``: requests with lengths resampled from the trace and Poisson arrivals. Both draw
    from ``seed``. Lengths-only traces always take ``poisson``.
    """
    wanted = settings.requests_per_probe * replicas
    if probe_settings(workload, settings).arrivals == "poisson":
        return replace_arrivals(workload, rate_rps=rate_rps, n_requests=wanted, rng=seed)
    source = repeat(workload, math.ceil(wanted / len(workload))) if wanted > len(workload) and replay else workload
    if reuse and workload.has_prefix_hashes:
        return rescale_rate(stretch(source, wanted, rng=seed), rate_rps)
    return rescale_rate(thin(source, wanted, rng=seed), rate_rps)


def per_request_clocks(result: SimResult) -> dict[str, np.ndarray]:
    """TTFT, TPOT and E2E per request for :func:`probe_from_clocks`: a rejected request fails
    every clock (inf); a one-token request has no TPOT (NaN, which passes). In a run a stop
    ended, a request whose TTFT or E2E had not ended by the stop has waited at least until
    then: that wait is its clock (a lower bound, as the stop judged it), and a TPOT not known
    passes, so every share is an upper bound on the whole run's."""
    rejected = result["rejected"]
    clocks = {}
    for metric in ("ttft", "tpot", "e2e"):
        values = np.array(result[f"{metric}_s"], dtype=float)
        if result.stopped_s is not None and metric != "tpot":
            waited = result.stopped_s - np.asarray(result["arrival_s"], dtype=float)
            values = np.where(np.isnan(values), waited, values)
        values[rejected] = np.inf
        clocks[metric] = values
    return clocks


def miss_stop(slo: SLO, requests: int) -> MissStop | None:
    """The stop that ends a run of ``requests`` once a TTFT or TPOT objective of ``slo`` can no
    longer be met: more requests missed its threshold than :func:`pdplan.slo.miss_budget` allows
    (per clock, its objective allowing the fewest misses). The verdict is the whole run's; None
    when no miss could settle one."""
    parts = {}
    for metric in ("ttft", "tpot"):
        budgets = [(miss_budget(requests, o.attainment), o.threshold_s) for o in slo.objectives if o.metric == metric]
        misses, threshold = min(budgets, default=(requests, None))
        if misses < requests:
            parts |= {f"{metric}_s": threshold, f"{metric}_misses": misses}
    return MissStop(**parts) if parts else None


def check_admission_share(share: float) -> None:
    """The admission share is a fraction of TTFT in [0, 1): prefill keeps the rest."""
    if not 0 <= share < 1:
        raise PdplanError(f"--admission-share must be in [0, 1), got {share!r}", field="admission_share")


def phase_slo(slo: SLO, phase: str, admission_share: float) -> SLO:
    """The objectives one instance is judged on alone.

    Prefill: each TTFT objective at (1 − share) of its threshold. Decode: each TPOT objective,
    plus each TTFT objective applied to the admission wait at ``share`` of its threshold (the
    wait for decode admission is part of TTFT: docs/design.md, "Clocks and units"). Colocated:
    the SLO as given. Share 0 judges prefill on the whole TTFT and decode on TPOT alone, as
    DistServe does.
    """
    if phase == "colocated":
        return slo
    check_admission_share(admission_share)
    chosen = []
    for o in slo.objectives:
        if o.metric == "ttft":
            share = admission_share if phase == "decode" else 1 - admission_share
            if share > 0:  # share 0: decode's admission wait is not judged alone (DistServe)
                chosen.append(Objective(metric="ttft", threshold_s=o.threshold_s * share, attainment=o.attainment))
        elif o.metric == "tpot" and phase == "decode":
            chosen.append(o)
    if not chosen:
        raise PdplanError(f"the SLO has no objective that judges a {phase} instance alone "
                          f"({'TTFT' if phase == 'prefill' else 'TPOT or TTFT'} needed)", field="slo")
    return SLO(objectives=tuple(chosen))


def prefill_moments_s(workload: Workload, profile: PhaseProfile) -> tuple[float, float, float]:
    """D (prefill of the mean prompt), and E[S], E[S²] over the trace's prompts each run alone."""
    prompts = workload.prompt_tokens.astype(float)
    features = np.column_stack([np.ones_like(prompts), prompts, prompts**2])
    times = profile.prefill.evaluate(features, np.ones(len(prompts), dtype=np.int64))
    mean, second = service_moments(times)
    return profile.prefill_time_s([float(prompts.mean())]), mean, second


def prefill_saturation(workload: Workload, profile: PhaseProfile) -> float:
    """Closed-form prefill throughput with batches of mean prompts filled to the token cap.

    ``dp · pp · max_k k / t(k mean prompts)`` for k up to the cap (at least one prompt): each of the
    PP stages holds a batch for t/pp, so PP batches are in flight, on each of the DP ranks.
    """
    prompt = float(workload.prompt_tokens.mean())
    most = max(1, int(profile.max_prefill_batch_tokens // prompt))
    return profile.dp * profile.pp * max(k / profile.prefill_time_s([prompt] * k) for k in range(1, most + 1))


def decode_saturation(workload: Workload, profile: PhaseProfile, max_running_requests: int | None = None) -> float:
    """Closed-form decode throughput with the batch at its KV limit (docs/design.md, "Decode rule").

    Largest batch B* = KV capacity / mean (prompt + output), at most the rank's running cap; its step at
    mean context B*·(mean prompt + mean output / 2); throughput B* / (step · (mean output − 1)). An
    instance of DP ranks holds B* on each, stepping together: DP times that.
    """
    prompt, output = float(workload.prompt_tokens.mean()), float(workload.output_tokens.mean())
    batch = max(1, int(profile.kv_capacity_tokens // (prompt + output)))
    if max_running_requests is not None:
        batch = min(batch, max_running_requests)
    step = profile.decode_step_s(batch, int(batch * (prompt + output / 2)))
    return profile.dp * decode_saturation_rps(batch, step, output)


def instance_goodput(workload: Workload, profile: PhaseProfile, *, phase: str, slo: SLO,
                     settings: SearchSettings, seed: int = DEFAULT_SEED, policy: str | None = None,
                     chunk_tokens: int | None = None, admission_share: float = DEFAULT_ADMISSION_SHARE,
                     on_probe: Callable[[Probe], None] | None = None,
                     rank_router: str = RankRouter.SHORTEST_QUEUE,
                     max_running_requests: int | None = None) -> InstanceGoodput:
    """Per-instance goodput of ``profile`` for ``phase`` (0x08C), found by simulated bisection (a prefill
    instance with attention DP putting prompts on its ranks by ``rank_router``; each rank running at most
    ``max_running_requests`` requests, None: as many as its KV holds).

    The queueing bracket (M/D/1 and P–K on the TTFT threshold) starts the search. A prefill or
    decode instance is never good above its closed-form saturation throughput: a finite probe of
    an overloaded queue can still pass its percentiles (and decode TPOT stays low while the queue
    grows). A colocated instance's overload shows directly in its TTFT, which includes the queue.
    """
    if phase not in ("prefill", "decode", "colocated"):
        raise InternalError("phase must be prefill, decode or colocated")
    judged = phase_slo(slo, phase, admission_share)
    md1 = mg1 = None
    ttft = judged.threshold_s("ttft")
    if phase != "decode" and ttft is not None:
        d, mean, second = prefill_moments_s(workload, profile)  # one rank's queue; DP ranks share arrivals
        md1 = profile.dp * mg1_rate_for_mean_ttft(ttft, d, d * d)
        mg1 = profile.dp * mg1_rate_for_mean_ttft(ttft, mean, second)
    saturation = instance_saturation(workload, profile, phase, max_running_requests)
    # Start at the P–K bracket; a decode instance has none, so at half its saturation.
    start = mg1 or md1 or (saturation / 2 if saturation else 1.0)
    search = pool_goodput(workload, profile, phase=phase, slo=slo, settings=settings, seed=seed, policy=policy,
                          chunk_tokens=chunk_tokens, admission_share=admission_share, start_rps=start,
                          on_probe=on_probe, rank_router=rank_router, max_running_requests=max_running_requests)
    return InstanceGoodput(
        phase=phase, model=profile.model, gpu=profile.gpu, tp=profile.tp, pp=profile.pp, dp=profile.dp, ep=profile.ep,
        policy=policy if phase == "colocated" else None, chunk_tokens=chunk_tokens,
        goodput_rps=search.goodput_rps, md1_rps=md1, mg1_rps=mg1, saturation_rps=saturation,
        probes=search.probes, requests_per_probe=settings.requests_per_probe, settings=settings, seed=seed,
        admission_share=admission_share, max_running_requests=max_running_requests)


def instance_saturation(workload: Workload, profile: PhaseProfile, phase: str,
                        max_running_requests: int | None = None) -> float | None:
    """Closed-form throughput limit of one instance (None for colocated: its TTFT shows overload;
    None for prefill on a trace with prefix hashes: its prefix cache computes less than the
    prompts, by an amount only the simulation knows)."""
    if phase == "prefill" and workload.has_prefix_hashes:
        return None
    if phase == "prefill":
        return prefill_saturation(workload, profile)
    if phase == "decode":
        return decode_saturation(workload, profile, max_running_requests)  # the cap bounds a decode rank's batch
    return None


def pool_goodput(workload: Workload, profile: PhaseProfile, *, phase: str, slo: SLO, settings: SearchSettings,
                 start_rps: float, seed: int = DEFAULT_SEED, replicas: int = 1, policy: str | None = None,
                 chunk_tokens: int | None = None,
                 admission_share: float = DEFAULT_ADMISSION_SHARE, router: str = Router.LEAST_LOADED,
                 on_probe: Callable[[Probe], None] | None = None, first_step: float = 1.0,
                 rank_router: str = RankRouter.SHORTEST_QUEUE, max_running_requests: int | None = None) -> Search:
    """Goodput of ``replicas`` instances of one shape behind the router, the phase judged alone
    (:func:`phase_slo`): one instance is the 0x08C goodput, n of them the pool capacity c(n).

    Each probe simulates ``requests_per_probe`` requests per replica and per attention DP rank
    (each rank admits its own share, so a 16-rank instance is probed as hard as 16 single-rank
    ones); a pool is never good above n × one instance's saturation throughput. Without grid
    points, a probe stops once its misses settle its miss (:func:`miss_stop`): the search finds
    the same rate, and the stopped probes' shares are upper bounds. On a trace with prefix
    hashes, prefill and colocated instances keep their prefix caches, and ``router`` picks the
    prefill instance; ``rank_router``, a prefill instance's attention-DP rank (the engine's,
    :func:`pdplan.engines.rank_router`); ``max_running_requests``, what one rank runs at once (None: its KV's
    worth). ``first_step``: as :func:`find_goodput` takes it.
    """
    judged = phase_slo(slo, phase, admission_share)
    single = instance_saturation(workload, profile, phase, max_running_requests)
    saturation = None if single is None else replicas * single

    def probe(rate: float) -> Probe:
        requests = probe_workload(workload, rate, settings, replicas * profile.dp, seed=seed,
                                  reuse=phase != "decode",  # a decode instance alone caches nothing
                                  replay=phase == "decode")
        stop = None if settings.grid_points else miss_stop(judged, len(requests))  # a curve asked for is drawn whole
        result = simulate_pool(requests, profile, phase=phase, replicas=replicas,
                               policy=(policy or "prefill-first") if phase == "colocated" else None,
                               chunk_tokens=chunk_tokens, seed=seed, stop=stop, router=router, rank_router=rank_router,
                               max_running_requests=max_running_requests)
        return probe_from_clocks(rate, judged, per_request_clocks(result),
                                 saturated=saturation is not None and rate > saturation,
                                 stopped_early=result.stopped_s is not None)

    return find_goodput(probe, start_rps=start_rps, settings=settings, on_probe=on_probe, first_step=first_step)


# --- closed loop: how many clients an instance serves ---------------------------------------------

@dataclass(frozen=True, kw_only=True)
class ClientsProbe:
    """One closed-loop run: C clients, the throughput they drew, the attainment they saw."""

    clients: int
    throughput_rps: float
    probe: Probe


@dataclass(frozen=True, kw_only=True)
class ClosedLoopGoodput:
    """The most clients whose closed loop meets the SLO, and every run that led to it."""

    clients: int                        #: 0 when even one client misses
    throughput_rps: float               #: requests per second those clients drew
    probes: tuple[ClientsProbe, ...]    #: sorted by clients

    def to_dict(self) -> dict:
        return {"clients": self.clients, "throughput_rps": self.throughput_rps,
                "probes": [{"clients": p.clients, "throughput_rps": p.throughput_rps,
                            "attainment_ttft": p.probe.attainment_ttft, "attainment_tpot": p.probe.attainment_tpot,
                            "attainment_joint": p.probe.attainment_joint, "meets": p.probe.meets}
                           for p in self.probes]}


def closed_loop_goodput(workload: Workload, profile: PhaseProfile, *, phase: str, slo: SLO,
                        settings: SearchSettings, seed: int = DEFAULT_SEED, policy: str | None = None,
                        chunk_tokens: int | None = None, admission_share: float = DEFAULT_ADMISSION_SHARE,
                        max_clients: int = 65536,
                        on_probe: Callable[[ClientsProbe], None] | None = None,
                        rank_router: str = RankRouter.SHORTEST_QUEUE,
                        max_running_requests: int | None = None) -> ClosedLoopGoodput:
    """The largest concurrency C whose closed loop (C clients, each sending its next request when
    its last one ends, as benchmark tools drive a server) meets the SLO on one instance, the
    phase judged alone as :func:`pool_goodput` judges it: doubling C, then integer bisection.

    Each run sends ``requests_per_probe`` requests drawn uniformly from the trace (their order
    kept, their arrival times ignored), a prefill instance with attention DP putting them on its ranks
    by ``rank_router``, each rank running at most ``max_running_requests`` (None: its KV's worth). Throughput is
    requests over the run's span.
    """
    judged = phase_slo(slo, phase, admission_share)
    requests = thin(workload, settings.requests_per_probe, rng=seed)
    runs: dict[int, ClientsProbe] = {}

    def run(clients: int) -> ClientsProbe:
        if clients not in runs:
            result = simulate_pool({"prompt_tokens": requests.prompt_tokens, "output_tokens": requests.output_tokens},
                                   profile, phase=phase, concurrency=clients,
                                   policy=(policy or "prefill-first") if phase == "colocated" else None,
                                   chunk_tokens=chunk_tokens, seed=seed, rank_router=rank_router,
                                   max_running_requests=max_running_requests)
            throughput = result.summary()["throughput_rps"] or 0.0
            runs[clients] = ClientsProbe(clients=clients, throughput_rps=throughput,
                                         probe=probe_from_clocks(throughput, judged, per_request_clocks(result)))
            if on_probe is not None:
                on_probe(runs[clients])
        return runs[clients]

    good, bad = 0, 1
    while bad <= max_clients and run(bad).probe.meets and len(runs) < settings.max_probes:
        good, bad = bad, 2 * bad
    while bad - good > 1 and len(runs) < settings.max_probes and bad <= max_clients:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if run(mid).probe.meets else (good, mid)
    throughput = runs[good].throughput_rps if good else 0.0
    return ClosedLoopGoodput(clients=good, throughput_rps=throughput,
                             probes=tuple(runs[c] for c in sorted(runs)))
