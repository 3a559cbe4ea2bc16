"""Every candidate shape measured on the trace: one instance's goodput, then its pool curve c(n).

Both are simulated (bisection over rates, each phase judged alone against its share of the SLO)
and cached on disk under a key of everything that determines them, so a second run with the
same inputs reuses every number and ``pdplan goodput`` shares the per-instance figures.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, replace
from functools import partial
from typing import Callable

from pdplan import limits
from pdplan.cache import ResultCache, cache_key
from pdplan.candidates import Rejected, Shape, enumerate_shapes
from pdplan.engines import rank_router
from pdplan.errors import PdplanError
from pdplan.goodput import CLOSE_GUESS_STEP, InstanceGoodput, SearchSettings, instance_goodput, pool_goodput
from pdplan.handoff import handoff_copies
from pdplan.latency.profile import PhaseProfile, profile_to_dict, shipped_profiles
from pdplan.modelspec import ModelSpec
from pdplan.parallel import run_each
from pdplan.placement import Candidate
from pdplan.planner.request import PlanRequest
from pdplan.poolcap import PoolCurve, build_curve
from pdplan.shape import shape_key, shape_label, wide_slots
from pdplan.slo import SLO
from pdplan.vocabulary import RankRouter
from pdplan.work import cross_node_all_to_all_bytes_per_token
from pdplan.workload import Workload, head

#: Pool curves are sampled until a pool serves this multiple of the target (room for raises).
CURVE_HEADROOM = 1.25

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, kw_only=True)
class Measured:
    """A candidate shape with its profile and its simulated per-instance goodput."""

    shape: Shape
    profile: PhaseProfile
    goodput: InstanceGoodput

    @property
    def key(self) -> tuple:
        """The profile key a pool of this shape looks its profile up by (:attr:`pdplan.sim.plan.Pool.shape`)."""
        return shape_key(self.profile.model, self.shape.gpu, self.shape.tp, self.shape.pp, dp=self.shape.dp,
                         ep=self.shape.ep, all_to_all=self.shape.all_to_all)


def profile_digest(profile: PhaseProfile) -> str:
    """sha256 of a profile's canonical content, for cache keys."""
    return hashlib.sha256(json.dumps(profile_to_dict(profile), sort_keys=True).encode()).hexdigest()


def goodput_key_parts(workload: Workload, profile: PhaseProfile, *, phase: str, slo: SLO, settings: SearchSettings,
                      seed: int, policy: str | None, chunk_tokens: int | None, admission_share: float,
                      rank_router: str = RankRouter.SHORTEST_QUEUE, max_running_requests: int | None = None) -> dict:
    """Everything one shape's goodput depends on; ``pdplan goodput`` and ``optimize`` key alike (the rank
    router only when it routes by room, a rank's running cap only when there is one, so every other key is as it
    was)."""
    return {"trace": workload.digest(), "profile": profile_digest(profile), "slo": slo.to_dict(),
            "phase": phase, "policy": policy, "chunk": chunk_tokens, "settings": asdict(settings),
            "seed": seed, "admission_share": admission_share,
            **({} if rank_router == RankRouter.SHORTEST_QUEUE else {"rank_router": str(rank_router)}),
            **({} if max_running_requests is None else {"max_running_requests": max_running_requests})}


def cached_instance_goodput(workload: Workload, profile: PhaseProfile, *, phase: str, slo: SLO,
                            settings: SearchSettings, seed: int, policy: str | None, chunk_tokens: int | None,
                            admission_share: float, cache: ResultCache,
                            rank_router: str = RankRouter.SHORTEST_QUEUE,
                            max_running_requests: int | None = None) -> InstanceGoodput:
    """:func:`pdplan.goodput.instance_goodput`, from the cache when the inputs match."""
    key = cache_key(goodput_key_parts(workload, profile, phase=phase, slo=slo, settings=settings, seed=seed,
                                      policy=policy, chunk_tokens=chunk_tokens, admission_share=admission_share,
                                      rank_router=rank_router, max_running_requests=max_running_requests))
    cached = cache.get(key, decode_goodput)
    if cached is not None:
        return cached
    result = instance_goodput(workload, profile, phase=phase, slo=slo, settings=settings, seed=seed, policy=policy,
                              chunk_tokens=chunk_tokens, admission_share=admission_share, rank_router=rank_router,
                              max_running_requests=max_running_requests)
    cache.put(key, result.to_dict())
    return result


def decode_goodput(entry: dict) -> InstanceGoodput:
    """A cached instance goodput, refused (PdplanError: the cache reads it as a miss) unless its rates are sound."""
    result = InstanceGoodput.from_dict(entry)
    rate(result.goodput_rps)
    for probe in result.probes:
        rate(probe.rate_rps)
    return result


def rate(value: object) -> float:
    """A cached rate: a finite number of requests per second within pdplan's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= limits.MAX_RATE_RPS:
        raise PdplanError(f"not a rate: {value!r}", field="rate_rps")
    return float(value)


def measure(request: PlanRequest, cache: ResultCache,
            progress: Progress | None = None) -> tuple[list[Measured], list[Rejected]]:
    """Every candidate shape's per-instance goodput, from the cache where the inputs match."""
    largest = int((request.workload.prompt_tokens + request.workload.output_tokens).max())
    shapes, rejected = enumerate_shapes(request.model, request.cluster, largest_request_tokens=largest,
                                        tps=request.tps, pps=request.pps, chunk_sizes=request.chunk_sizes,
                                        dps=request.dps, engine=request.profiles.serving_engine,
                                        connector=request.connector, draft_tokens=draft_tokens(request),
                                        redundant_experts=request.redundant_experts)
    keys = list(dict.fromkeys(_profile_key(shape) for shape in shapes))
    # With several processes, one of them first compiles the simulator's kernels (or loads them)
    # while the others compose profiles: numba then caches them once, and every goodput worker
    # loads them, instead of each compiling them at once (about 30 s each, once per install).
    stage = (list(KERNELS) if request.jobs > 1 else []) + keys
    made = run_each(partial(_profile_stage, request), stage, jobs=request.jobs, cache=cache,
                    on_start=None if progress is None else lambda i: progress(
                        _stage_label(stage[i]), i, len(stage)))[len(stage) - len(keys):]
    profiles = {}
    for key, (found, fallbacks) in zip(keys, made):
        request.profiles.fallbacks.update(fallbacks)  # what a worker's copy of the source learned
        profiles[key] = found
    usable = []
    for shape in shapes:
        found = profiles[_profile_key(shape)]
        if isinstance(found, PdplanError):
            if not shape.is_wide:
                raise found
            # a wide shape only the wide-EP tables time: without them it is not a candidate, said why
            rejected.append(Rejected(shape=shape, reason=found.detail))
            continue
        usable.append((shape, found))
    results = run_each(partial(_goodput_of, request), usable, jobs=request.jobs, cache=cache,
                       on_start=None if progress is None else lambda i: progress(
                           f"goodput {usable[i][0].label}", i, len(usable)))
    return [Measured(shape=shape, profile=profile, goodput=result)
            for (shape, profile), result in zip(usable, results)], rejected


def draft_tokens(request: PlanRequest) -> int:
    """Tokens the deployment drafts per request and step (0 without speculative decoding)."""
    drafting = request.profiles.speculative
    return 0 if drafting is None else drafting.draft_tokens


def _profile_key(shape: Shape) -> tuple:
    return shape.gpu, shape.tp, shape.pp, shape.dp, shape.ep, shape.all_to_all


#: The profile stage's items that compile the simulator's kernels instead of composing a profile:
#: the disaggregated event loop (prefill and decode probes) and the colocated one, on two processes.
KERNELS = (("kernels", ("prefill", "decode")), ("kernels", ("colocated",)))


def _stage_label(item: tuple) -> str:
    if item in KERNELS:
        return f"simulator kernels ({', '.join(item[1])})"
    return f"profile {shape_label(*item[:3], dp=item[3], ep=item[4])}"


def _profile_stage(request: PlanRequest, item: tuple, *, cache: ResultCache) -> tuple:
    """One item of the profile stage: a shape's profile (:func:`_profile_of`), or, for an item of
    :data:`KERNELS`, those kernels compiled (:func:`compile_kernels`) and nothing returned."""
    if item in KERNELS:
        compile_kernels(request, item[1])
        return None, {}
    return _profile_of(request, item, cache=cache)


def compile_kernels(request: PlanRequest, phases: tuple[str, ...]) -> None:
    """Compile the compiled engine's kernels for ``phases``, or load them from numba's cache: one
    probe of each phase on a few of the trace's requests, with a shipped profile (the kernels
    depend on the arrays' types, not on the model)."""
    profile = shipped_profiles()[("llama2-70b", "h100-80gb", 4, 1)]
    settings = replace(request.settings, requests_per_probe=8, max_probes=2, grid_points=0)
    few = head(request.workload, 8)
    for phase in phases:
        chunk = 512 if phase == "colocated" else None
        instance_goodput(few, profile, phase=phase, slo=request.slo, settings=settings,
                         policy="chunked" if chunk else None, chunk_tokens=chunk)


def _profile_of(request: PlanRequest, key: tuple, *, cache: ResultCache) -> tuple:
    """One shape's profile (or why it has none) and the fallback reasons its source recorded."""
    gpu, tp, pp, dp, ep, all_to_all = key
    before = set(request.profiles.fallbacks)
    try:
        found = request.profiles.profile(request.model, request.cluster.priced_gpu(gpu), tp, pp, cache=cache,
                                         dp=dp, ep=ep, all_to_all=all_to_all,
                                         redundant_experts=wide_slots(dp, request.redundant_experts))
    except PdplanError as err:
        found = err
    return found, {k: v for k, v in request.profiles.fallbacks.items() if k not in before}


def _goodput_of(request: PlanRequest, item: tuple, *, cache: ResultCache):
    shape, profile = item
    ranks = rank_router(request.profiles.serving_engine, shape.phase, shape.dp)
    return cached_instance_goodput(request.workload, profile, phase=shape.phase, slo=request.slo,
                                   settings=request.settings, seed=request.seed, policy=shape.policy,
                                   chunk_tokens=shape.chunk_tokens, admission_share=request.admission_share,
                                   cache=cache, rank_router=ranks, max_running_requests=shape.max_running_requests)


def mean_kv_bytes_per_request(workload: Workload, model: ModelSpec) -> float:
    """Mean handoff bytes per request: the whole prompt's KV (0x06; no destination reuse assumed,
    which is conservative for traces with prefix hashes)."""
    return float(workload.prompt_tokens.mean()) * model.kv_bytes_per_token


def all_to_all_bytes_per_request(request: PlanRequest, shape: Shape) -> float:
    """Mean bytes per request the expert all-to-all of a wide shape sends across nodes, each way: the
    tokens it runs (the prompt on prefill, the output on decode, both colocated) times
    :func:`pdplan.work.cross_node_all_to_all_bytes_per_token` over the fewest nodes a stage spans on
    this cluster's nodes; 0 when the stage fits one node."""
    spans = [n.stage_nodes(shape) for n in request.cluster.nodes_for(shape.gpu)]
    nodes = min((s for s in spans if s), default=1)
    per_token = cross_node_all_to_all_bytes_per_token(request.model, shape.ep, nodes)
    if not per_token:
        return 0.0
    tokens = {"prefill": request.workload.prompt_tokens.mean(), "decode": request.workload.output_tokens.mean()}
    return per_token * float(tokens.get(shape.phase, sum(tokens.values())))


def best_of_each_shape(measured: list[Measured]) -> list[Measured]:
    """Shapes with positive goodput; colocated shapes of one (GPU, TP, PP) keep only their best
    chunk size (the others cost the same and serve less)."""
    best: dict[tuple, Measured] = {}
    for m in measured:
        if m.goodput.goodput_rps <= 0:
            continue
        key = (m.shape.phase, m.shape.gpu, m.shape.tp, m.shape.pp, m.shape.dp, m.shape.ep)
        if key not in best or m.goodput.goodput_rps > best[key].goodput.goodput_rps:
            best[key] = m
    return sorted(best.values(), key=lambda m: m.shape.label)


def most_replicas(request: PlanRequest, shape: Shape) -> int:
    """Instances of ``shape`` the cluster (and the GPU budget) can hold; unbounded counts give
    the largest pool the curves sample."""
    held = request.cluster.instances_of(shape.gpu, shape.tp, shape.pp, shape.dp)
    limit = 10**6 if held is None else held
    if request.max_gpus is not None:
        limit = min(limit, request.max_gpus // shape.gpus)
    return max(1, limit)


def pool_candidates(request: PlanRequest, measured: list[Measured], cache: ResultCache,
                    progress: Progress | None = None) -> tuple[Candidate, ...]:
    """Placement candidates: each usable shape with its pool capacity curve c(n)."""
    kv_bytes = mean_kv_bytes_per_request(request.workload, request.model)
    wanted = math.inf if request.target_rps is None else CURVE_HEADROOM * request.target_rps
    chosen = best_of_each_shape(measured)
    curves = run_each(partial(pool_curve, request, wanted_rps=wanted), chosen, jobs=request.jobs, cache=cache,
                      on_start=None if progress is None else lambda i: progress(
                          f"pool capacity {chosen[i].shape.label}", i, len(chosen)))
    out = []
    for m, curve in zip(chosen, curves):
        out.append(Candidate(phase=m.shape.phase, gpu=m.shape.gpu, tp=m.shape.tp, pp=m.shape.pp,
                             dp=m.shape.dp, ep=m.shape.ep, all_to_all=m.shape.all_to_all,
                             max_running_requests=m.shape.max_running_requests,
                             goodput_rps=m.goodput.goodput_rps, chunk_tokens=m.shape.chunk_tokens,
                             kv_bytes_per_request=(0.0 if m.shape.phase == "colocated"
                                                   else kv_bytes * handoff_copies(request.model, m.shape.tp)),
                             all_to_all_bytes_per_request=all_to_all_bytes_per_request(request, m.shape),
                             curve=curve))
    if request.mixed:
        out += mixed_candidates(out, kv_bytes, request.model)
    return tuple(out)


def mixed_candidates(candidates: list[Candidate], kv_bytes: float, model: ModelSpec) -> list[Candidate]:
    """Splitwise's mixed machines: each chunked colocated shape, with its measured capacity c(n),
    as a machine a disaggregated plan may add. It runs whole requests and decodes handed off to
    it, so its link must take a decode's KV (``kv_bytes`` a request, each of its TP ranks its part)."""
    return [replace(c, phase="mixed", kv_bytes_per_request=kv_bytes * handoff_copies(model, c.tp))
            for c in candidates if c.phase == "colocated" and c.chunk_tokens]


def pool_curve(request: PlanRequest, m: Measured, *, wanted_rps: float, cache: ResultCache) -> PoolCurve:
    """c(n) of one shape behind the request's router, each sampled pool size from the cache where
    the inputs match."""
    ranks = rank_router(request.profiles.serving_engine, m.shape.phase, m.shape.dp)
    parts = goodput_key_parts(request.workload, m.profile, phase=m.shape.phase, slo=request.slo,
                              settings=request.settings, seed=request.seed, policy=m.shape.policy,
                              chunk_tokens=m.shape.chunk_tokens, admission_share=request.admission_share,
                              rank_router=ranks, max_running_requests=m.shape.max_running_requests)

    def sample(replicas: int, start_rps: float) -> float:
        key = cache_key({**parts, "replicas": replicas, "router": request.router})
        cached = cache.get(key, lambda entry: rate(entry["capacity_rps"]))
        if cached is not None:
            return cached
        search = pool_goodput(request.workload, m.profile, phase=m.shape.phase, slo=request.slo,
                              settings=request.settings, seed=request.seed, start_rps=start_rps, replicas=replicas,
                              policy=m.shape.policy, chunk_tokens=m.shape.chunk_tokens,
                              admission_share=request.admission_share, router=request.router,
                              first_step=CLOSE_GUESS_STEP, rank_router=ranks,  # from a smaller pool's rate per replica
                              max_running_requests=m.shape.max_running_requests)
        cache.put(key, {"replicas": replicas, "capacity_rps": search.goodput_rps, "missed_rps": search.missed_rps,
                        "probes": len(search.probes)})
        return search.goodput_rps

    return build_curve(m.goodput.goodput_rps, m.goodput.saturation_rps, wanted_rps=wanted_rps,
                       most_replicas=most_replicas(request, m.shape), sample=sample,
                       resolution=request.settings.tolerance_rel,
                       stop_when_flat=m.shape.phase == "colocated" and m.shape.dp > 1)
