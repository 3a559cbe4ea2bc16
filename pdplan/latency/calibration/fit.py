"""Calibrating a profile so the simulator reproduces a real serving benchmark.

An operator who ran a pilot has one benchmark result: the TTFT and TPOT a server gave under a
known load (a closed loop of C clients, or an open loop at a rate). :func:`calibrate` replays
that load through the simulator on one instance of the profile's shape and finds four
correction factors — a prefill scale s_p, a decode scale s_d, a fixed cost c added to every
engine iteration (scheduling, sampling, launch gaps that per-step profiles miss) and a fixed
cost c_p that only an iteration with prompt work pays (an engine running its prefill eagerly
beside decode steps replayed as CUDA graphs pays its kernel launches there) — so that

    prefill'(x) = s_p · prefill(x) + c + c_p,    decode'(x) = s_d · decode(x) + c,

and the simulated TTFT and TPOT distributions match the measured ones. prefill(x) is the profile's
prefill less the prompt iteration cost it states (the eager prefill's host time a profile timed from
kernels carries, :mod:`pdplan.latency.eager`): c_p is the whole of that cost, measured, and replaces the
stated one. The match is the least-squares fit of the log ratios of their statistics (when the result
carries every request, the mean of each band of requests between the 10th, 25th, 50th, 75th, 90th and
99th percentiles and the mean of all, which move smoothly with the factors where a percentile falling
between two modes of TTFT jumps; else the means and percentiles it reports), summed over every run
given. A chunked (mixed) iteration pays c once, through its decode step, and c_p once (the profile's
``prompt_iteration_s``). The search is Nelder–Mead from the unscaled profile: first over three factors twice,
once with s_p held at 1 (the kernels' scale as measured) and once with c_p held at 0 (the kernels alone), then
over all four from the better of the two, and where both fit the runs about as well (prompts of one length
cannot tell s_p from c_p) from the one with the kernels' scale as measured, then a polish: a gap the runs do not
place is put on the host, not on the measured kernels (a pilot of a disaggregated deployment at its lowest
concurrency, taken as a prefill scale of 3-7, made its prefill too slow for the queue at higher loads:
``benchmarks/pilot_holdout.py --mode disagg``). The simulation is deterministic, so the fit is too. The load
runs on one colocated instance scheduled as the benchmarked server ran (:meth:`EngineBatching.pool`).

One closed-loop run holds the batch at its concurrency, so it measures s_d · decode(B) + c at one
B: the decode scale and the iteration cost trade off. Runs at two or more concurrencies (the
sweep a pilot usually runs) separate them; prompts of one length leave s_p and c_p to trade off,
and runs at two or more prompt lengths separate those. :func:`calibrate` measures how well each
factor is determined from the fit's sensitivity and says which are not.

A disaggregated deployment benchmarked end to end (:class:`Deployment`: its plan, router, KV link
and pools) is replayed as it ran, and the same four factors correct both its profiles: the prefill
pool pays s_p · prefill + c + c_p per batch, the decode pool s_d · decode + c per step, so TTFT
(prefill, handoff, first decode step) and TPOT separate them as they do on one instance.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import minimize

from pdplan.errors import InternalError, PdplanError
from pdplan.latency.calibration.bench import BenchRun, statistics, statistics_stated
from pdplan.latency.profile import PhaseProfile, with_prompt_iteration
from pdplan.latency.speculative import SpeculativeDecoding
from pdplan.modelspec import ModelSpec
from pdplan.sim import simulate
from pdplan.sim.plan import Plan, Pool
from pdplan.workload import poisson_arrivals

#: Bounds of the factors: a profile more than 10x off is not a calibration but a different shape.
SCALE_BOUNDS = (0.1, 10.0)
MAX_ITERATION_S = 0.1
#: Bound of the prompt iteration cost: an eager forward's host time, not a second of it.
MAX_PROMPT_ITERATION_S = 1.0
MAX_REPLAY_REQUESTS = 4000
#: Most runs of the four-factor search, each from the last one's answer with a fresh simplex.
RESTARTS = 4
#: Two first descents whose losses are within this share (and this much) of the better fit the runs about as well.
TIE, TIE_ABSOLUTE = 0.02, 1e-6


@dataclass(frozen=True)
class EngineBatching:
    """How the benchmarked engine batches, as the simulator's colocated policies express it."""

    policy: str = "chunked"           #: "chunked" or "prefill-first"
    tokens: int = 8192                #: chunk budget per iteration, or prefill batch cap
    #: the speculative decoding the benchmarked engine ran (its draft cost resolved), replayed with it:
    #: the profile being corrected stays the engine's plain decode step
    speculative: SpeculativeDecoding | None = None
    #: SGLang's --scheduler-recv-interval, and TensorRT-LLM's batch waiting, when the engine ran them
    #: (a plan pool's fields of the same names, and their rules)
    recv_interval: int | None = None
    batch_wait_timeout_iters: int | None = None
    batch_wait_max_tokens_ratio: float | None = None
    #: TensorRT-LLM's attention-DP balance, when the engine ran it (a plan pool's fields of the same names)
    attention_dp_timeout_iters: int | None = None
    attention_dp_batching_wait_iters: int | None = None

    def describe(self) -> str:
        """The schedule as a calibrated profile's record states it: ``chunked 8192``, and the receive
        interval, batch waiting and the attention-DP balance when the engine ran them."""
        parts = [f"{self.policy} {self.tokens}"]
        if self.recv_interval is not None:
            parts.append(f"receive every {self.recv_interval} decode steps")
        if self.batch_wait_timeout_iters is not None:
            parts.append(f"batch waiting {self.batch_wait_timeout_iters} iterations or "
                         f"{self.batch_wait_max_tokens_ratio:g} of the budget")
        if self.attention_dp_timeout_iters is not None:
            parts.append(f"attention-DP balance {self.attention_dp_timeout_iters} iterations, "
                         f"{self.attention_dp_batching_wait_iters} batching")
        return ", ".join(parts)

    def pool(self, profile: PhaseProfile) -> Pool:
        """The one colocated instance of ``profile``'s shape the benchmark ran, scheduled as it was."""
        chunked = self.policy == "chunked"
        return Pool(name="benchmarked", phase="colocated", model=profile.model, gpu=profile.gpu, tp=profile.tp,
                    pp=profile.pp, dp=profile.dp, ep=profile.ep, policy=self.policy,
                    chunk_tokens=self.tokens if chunked else None,
                    max_prefill_batch_tokens=None if chunked else min(self.tokens, profile.max_prefill_batch_tokens),
                    recv_interval=self.recv_interval, batch_wait_timeout_iters=self.batch_wait_timeout_iters,
                    batch_wait_max_tokens_ratio=self.batch_wait_max_tokens_ratio,
                    attention_dp_timeout_iters=self.attention_dp_timeout_iters,
                    attention_dp_batching_wait_iters=self.attention_dp_batching_wait_iters)


def corrected(profile: PhaseProfile, prefill_scale: float, decode_scale: float, iteration_s: float,
              prompt_iteration_s: float = 0.0) -> PhaseProfile:
    """The profile with both phases scaled, the fixed iteration cost added to both, and its prompt
    iteration cost (the part of the prefill only an iteration with prompt work pays) set to
    ``prompt_iteration_s``: a pilot measures the whole of it, so it replaces the host time a profile
    timed from kernels states (:mod:`pdplan.latency.eager`) rather than adding to it."""
    def scaled(points, scale: float):
        return tuple((t, v * scale) for t, v in points)
    kernels = with_prompt_iteration(profile, -profile.prompt_iteration_s)
    scaled_profile = replace(kernels, prefill=kernels.prefill.transformed((prefill_scale,) * 3, iteration_s),
                             decode=kernels.decode.transformed((decode_scale,) * 3, iteration_s),
                             group_prefill_points=scaled(kernels.group_prefill_points, prefill_scale),
                             group_decode_points=scaled(kernels.group_decode_points, decode_scale))
    return with_prompt_iteration(scaled_profile, prompt_iteration_s)


@dataclass(frozen=True, eq=False)
class Deployment:
    """A disaggregated deployment benchmarked end to end: the plan it ran (its prefill and decode pools,
    router and KV link), the model it served and its decode pool's profile. The profile calibrated
    with it is its prefill pool's."""

    plan: Plan
    model: ModelSpec
    decode: PhaseProfile

    @classmethod
    def of(cls, plan: Plan, model: ModelSpec, prefill: PhaseProfile, decode: PhaseProfile, *,
           file: str | None = None) -> "Deployment":
        """The deployment, when ``plan`` (read from ``file``) is prefill and decode pools of the shapes these
        profiles time; else the rule it breaks, naming the plan's field."""
        for i, pool in enumerate(plan.pools):
            if pool.phase not in ("prefill", "decode"):
                raise PdplanError(f"pool {pool.name} is {pool.phase}: calibrating from a deployment needs a plan of "
                                  "prefill and decode pools", file=file, field=f"pools[{i}].phase")
            want = prefill if pool.phase == "prefill" else decode
            if pool.shape != want.key:
                raise PdplanError(f"pool {pool.name} runs {pool.model} {pool.shape_label()}, but the {pool.phase} "
                                  f"profile given times {want.model} {want.shape_label()}", file=file,
                                  field=f"pools[{i}]")
        if {pool.phase for pool in plan.pools} != {"prefill", "decode"}:
            raise PdplanError("a disaggregated deployment needs a prefill pool and a decode pool", file=file,
                              field="pools")
        if decode.key == prefill.key and replace(decode, provenance=prefill.provenance) != prefill:
            raise PdplanError(f"the decode profile times {decode.shape} as the prefill profile does, with other "
                              "numbers: the simulator times a shape by one profile, so a deployment whose pools "
                              "share a shape is calibrated from one", file=file, field="decode_profile")
        return cls(plan=plan, model=model, decode=decode)

    def describe(self) -> str:
        return "disaggregated: " + ", ".join(f"{p.replicas} x {p.phase} {p.shape_label()}" for p in self.plan.pools)

    def replay(self, prefill: PhaseProfile, decode: PhaseProfile, run: BenchRun,
               seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Per-request TTFT and TPOT (seconds) of the benchmark's load on the deployment."""
        profiles = {pool.shape: prefill if pool.phase == "prefill" else decode for pool in self.plan.pools}
        result = simulate(_load(run, seed), self.plan, profiles, model=self.model, concurrency=run.concurrency,
                          rate_rps=_pace(run))
        return _served(result)


def replay(profile: PhaseProfile, run: BenchRun, schedule: EngineBatching,
           seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Per-request TTFT and TPOT (seconds) of the benchmark's load on one instance of ``profile``."""
    pool = schedule.pool(profile)
    if schedule.speculative is not None:
        profile = schedule.speculative.apply(profile)
    return _served(simulate(_load(run, seed), Plan(pools=(pool,)), {pool.shape: profile}, concurrency=run.concurrency,
                            rate_rps=_pace(run)))


def _load(run: BenchRun, seed: int) -> dict:
    """The benchmark's requests (at most :data:`MAX_REPLAY_REQUESTS`), with Poisson arrivals at its rate, as the
    benchmark clients schedule them (an open loop's, or the times a paced closed loop's requests are due)."""
    n = min(len(run.prompt_tokens), MAX_REPLAY_REQUESTS)
    workload = {"prompt_tokens": run.prompt_tokens[:n], "output_tokens": run.output_tokens[:n]}
    if run.concurrency is None or run.rate_rps is not None:
        workload["arrival_s"] = (np.zeros(n) if run.rate_rps is None
                                 else poisson_arrivals(n, rate_rps=run.rate_rps, rng=seed))
    return workload


def _pace(run: BenchRun) -> float | None:
    """The rate that paces a closed loop's clients (None: an open loop, whose arrivals carry their rate, an
    unpaced closed loop, or one request, which nothing paces)."""
    return run.rate_rps if run.concurrency is not None and len(run.prompt_tokens) > 1 else None


def _served(result) -> tuple[np.ndarray, np.ndarray]:
    served = ~np.asarray(result["rejected"])
    return np.asarray(result["ttft_s"])[served], np.asarray(result["tpot_s"])[served]


def errors(simulated: dict[str, dict[str, float]], measured: dict[str, dict[str, float]]) -> dict[str, float]:
    """Signed relative error simulated/measured − 1 of every statistic both sides have."""
    return {f"{clock}_{name}": simulated[clock][name] / value - 1
            for clock, stats in measured.items() for name, value in stats.items()
            if name in simulated.get(clock, {}) and value > 0}


@dataclass(frozen=True)
class Calibration:
    prefill_scale: float
    decode_scale: float
    iteration_s: float
    prompt_iteration_s: float
    before: dict[str, float]          #: signed relative error per statistic, uncorrected
    after: dict[str, float]           #: the same, corrected
    evaluations: int
    undetermined: tuple[str, ...] = ()  #: factors the runs cannot separate from the others

    @staticmethod
    def mean_abs(errs: dict[str, float]) -> float:
        return float(np.mean(np.abs(list(errs.values())))) if errs else float("nan")


def calibrate(profile: PhaseProfile, runs: list[BenchRun],
              schedule: EngineBatching | Sequence[EngineBatching] = EngineBatching(), *,
              deployment: Deployment | None = None) -> Calibration:
    """Fit (s_p, s_d, c, c_p) so every replayed benchmark run matches its measured statistics.
    ``schedule``: how the server batched, for every run, or one per run (a sweep that restarted its
    server with settings of each run's own); ``deployment``: the disaggregated deployment the runs
    were made on instead, whose prefill pool ``profile`` times (its pools schedule as the plan says)."""
    schedules = [schedule] * len(runs) if isinstance(schedule, EngineBatching) else list(schedule)
    if len(schedules) != len(runs):
        raise InternalError(f"{len(schedules)} schedules for {len(runs)} runs")
    measured = {f"run{i + 1}_{clock}": stats for i, run in enumerate(runs)
                for clock, stats in run.statistics().items()}
    stated = statistics_stated(measured)
    evaluations = 0

    def simulated(x) -> dict[str, dict[str, float]]:
        nonlocal evaluations
        evaluations += 1
        out = {}
        for i, (run, batching) in enumerate(zip(runs, schedules)):
            if deployment is None:
                ttft, tpot = replay(corrected(profile, *x), run, batching)
            else:
                ttft, tpot = deployment.replay(corrected(profile, *x), corrected(deployment.decode, *x), run)
            out[f"run{i + 1}_ttft"] = statistics(ttft, stated)
            out[f"run{i + 1}_tpot"] = statistics(tpot, stated)
        return out

    def residuals(z) -> np.ndarray:
        return np.log1p(np.array(list(errors(simulated(_factors(z)), measured).values())))

    def loss(z) -> float:
        return float(np.sum(residuals(z) ** 2))

    # Two first descents over three factors: one with the kernels' scale as measured (s_p held at 1), one with the
    # kernels alone (c_p held at 0). All four go on from the better; where both fit the runs about as well (prompts
    # of one length cannot tell s_p from c_p), from the one with the kernels' scale as measured.
    measured_scale, kernels_alone = (_descend(lambda z, held=held: loss(np.insert(z, held, 0.0)), np.zeros(3), 400)
                                     for held in (0, 3))
    start = (np.insert(measured_scale.x, 0, 0.0) if measured_scale.fun <= kernels_alone.fun * (1 + TIE) + TIE_ABSOLUTE
             else np.insert(kernels_alone.x, 3, 0.0))
    best = None
    for _ in range(RESTARTS):  # a fresh simplex while that still goes down the valley (a simplex stalls across it)
        found = _descend(loss, start, 300)
        if best is not None and found.fun >= best.fun * (1 - 1e-3):
            break
        best, start = found, found.x
    best = minimize(loss, best.x, method="Nelder-Mead",
                    options={"xatol": 1e-5, "fatol": 1e-12, "maxfev": 300, "initial_simplex": _simplex(best.x, 0.05)})
    factors = _factors(best.x)
    as_given = (1.0, 1.0, 0.0, profile.prompt_iteration_s)
    return Calibration(*factors, before=errors(simulated(as_given), measured),
                       after=errors(simulated(factors), measured), evaluations=evaluations,
                       undetermined=_undetermined(residuals, factors, _units(
                           profile, runs, profile if deployment is None else deployment.decode)))


def _descend(loss, start: np.ndarray, evaluations: int):
    """Nelder–Mead from ``start`` with a simplex of 0.3 in every coordinate."""
    return minimize(loss, start, method="Nelder-Mead", options={
        "xatol": 1e-4, "fatol": 1e-10, "maxfev": evaluations, "initial_simplex": _simplex(start, 0.3)})


FACTOR_NAMES = ("prefill scale", "decode scale", "iteration cost", "prompt iteration cost")
#: the bound of each cost factor (the search takes its square root as a fraction of it)
COST_BOUNDS = (MAX_ITERATION_S, MAX_PROMPT_ITERATION_S)


def _units(profile: PhaseProfile, runs: list[BenchRun], decoding: PhaseProfile) -> tuple[float, float]:
    """The natural units of c and c_p: one decode step of one request (on the profile that decodes),
    and one prefill of one prompt, at the runs' mean prompt."""
    prompt = float(np.mean([run.prompt_tokens.mean() for run in runs]))
    return decoding.decode_step_s(1, int(prompt)), profile.prefill_time_s([int(prompt)])


def _undetermined(residuals, factors: tuple[float, ...], units: tuple[float, float]) -> tuple[str, ...]:
    """Factors whose effect on the residuals the others can mimic: the weak directions (below 5%
    of the strongest) of the Jacobian in (log s_p, log s_d, c and c_p in their units), by
    differences at the answer."""
    point = np.array([np.log(factors[0]), np.log(factors[1]), factors[2] / units[0], factors[3] / units[1]])
    step = 0.02

    def at(q):  # back to the search coordinates
        return np.array([q[0], q[1], *(np.sqrt(max(q[k], 0.0) * units[k - 2] / COST_BOUNDS[k - 2]) for k in (2, 3))])

    columns = []
    for i in range(len(point)):
        up, down = point.copy(), point.copy()
        up[i] += step
        down[i] = max(down[i] - step, 0.0) if i >= 2 else down[i] - step
        columns.append((residuals(at(up)) - residuals(at(down))) / (up[i] - down[i]))
    jacobian = np.column_stack(columns)
    _, singular, vt = np.linalg.svd(jacobian, full_matrices=False)
    if singular[0] == 0:
        return FACTOR_NAMES
    weak = vt[singular < 0.05 * singular[0]]
    return tuple(name for i, name in enumerate(FACTOR_NAMES) if np.any(np.abs(weak[:, i]) > 0.3))


def _factors(z) -> tuple[float, float, float, float]:
    """Unconstrained search coordinates to bounded factors: log-scales, and each cost its bound times
    the square of its coordinate clipped to [0, 1]."""
    low, high = np.log(SCALE_BOUNDS)
    scale = lambda v: float(np.exp(np.clip(v, low, high)))  # noqa: E731
    costs = (float(bound * np.clip(v, 0.0, 1.0) ** 2) for v, bound in zip(z[2:], COST_BOUNDS))
    return scale(z[0]), scale(z[1]), *costs


def _simplex(center: np.ndarray, size: float) -> np.ndarray:
    points = [center]
    for i in range(len(center)):
        point = center.copy()
        point[i] += size
        points.append(point)
    return np.array(points)


def calibrated_profile(profile: PhaseProfile, runs: list[BenchRun], result: Calibration,
                       schedule: EngineBatching | Deployment) -> PhaseProfile:
    """The corrected profile, its provenance holding the runs, how they were replayed (the engine's
    schedule on one instance, or the deployment), the factors and the errors."""
    from pdplan.fileio import sha256_file

    prov = profile.provenance
    files = sorted({run.file for run in runs})
    speculative = getattr(schedule, "speculative", None)
    record = (("format", runs[0].format), ("runs", float(len(runs))), ("files", ", ".join(files)),
              ("schedule", schedule.describe()),
              *(() if speculative is None else (("speculative", speculative.describe()),)),
              ("prefill_scale", result.prefill_scale), ("decode_scale", result.decode_scale),
              ("iteration_ms", result.iteration_s * 1e3), ("prompt_iteration_ms", result.prompt_iteration_s * 1e3),
              ("error_before", Calibration.mean_abs(result.before)),
              ("error_after", Calibration.mean_abs(result.after)),
              ("undetermined", ", ".join(result.undetermined) or "none"))
    method = (f"calibrated: prefill x{result.prefill_scale:.4g}, decode x{result.decode_scale:.4g}, "
              f"+{result.iteration_s * 1e3:.4g} ms per iteration, +{result.prompt_iteration_s * 1e3:.4g} ms per "
              f"iteration with prompt work; base {prov.source} ({prov.method})")
    notes = (f"Corrected so the simulator reproduces {len(runs)} {runs[0].format} run(s) ({', '.join(files)}): mean "
             f"absolute error of the TTFT and TPOT statistics {Calibration.mean_abs(result.before):.1%} before, "
             f"{Calibration.mean_abs(result.after):.1%} after. "
             + (f"Not separately determined by these runs: {', '.join(result.undetermined)} (runs at other "
                "concurrencies and prompt lengths would separate them). " if result.undetermined else "")
             + f"Base profile: {prov.notes}")
    return replace(corrected(profile, result.prefill_scale, result.decode_scale, result.iteration_s,
                             result.prompt_iteration_s),
                   provenance=replace(prov, source="calibrated", method=method, file=files[0],
                                      sha256=sha256_file(files[0]) if len(files) == 1 else None,
                                      notes=notes, calibration=record))
