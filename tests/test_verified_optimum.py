"""The answer of `optimize` is the cheapest plan that passes end to end: against brute force.

Each case is small (two nodes of 8 GPUs, two shapes per phase), so every replica combination
can be placed and simulated. The brute force walks all of them in order of cost, colocated and
disaggregated alike, and stops at the first that the same end-to-end verification passes; the
search must land on exactly that cost.
"""

import itertools
from dataclasses import replace
from functools import partial
from pathlib import Path

import pytest

from pdplan import planner
from pdplan.cache import ResultCache
from pdplan.errors import InfeasibleError
from pdplan.goodput import SearchSettings
from pdplan.hardware import Cluster, NodeType, get_gpu
from pdplan.latency.profile import shipped_profiles
from pdplan.latency.source import ProfileSource
from pdplan.modelref import get_model
from pdplan.placement import ANY, Problem, money_units, solve
from pdplan.planner.checks import Verifier
from pdplan.slo import slo_from_flags
from pdplan.workload import head, load_trace

TRACE = Path(__file__).resolve().parent.parent / "traces" / "chat_poisson_2k.csv"
GPUS = 16

CASES = [  # model, GPU, TP degrees, target req/s, TTFT s, TPOT s
    ("llama2-70b", "a100-80gb", (2, 4), 2.0, 1.0, 0.1),
    ("llama2-70b", "a100-80gb", (2, 4), 4.0, 1.0, 0.1),
    ("llama2-70b", "a100-80gb", (4, 8), 3.0, 2.0, 0.1),
    ("llama2-70b", "h100-80gb", (2, 4), 4.0, 1.0, 0.1),
    ("llama2-70b", "h100-80gb", (2, 4), 8.0, 1.0, 0.1),
    ("llama2-70b", "h100-80gb", (2, 4), 6.0, 0.5, 0.05),
    ("llama2-70b", "h100-80gb", (4, 8), 10.0, 2.0, 0.1),
    ("opt-13b", "a100-80gb", (1, 2), 6.0, 0.5, 0.05),
    ("opt-13b", "a100-80gb", (1, 2), 12.0, 1.0, 0.1),
    ("opt-66b", "a100-80gb", (2, 4), 3.0, 1.0, 0.1),
    ("opt-66b", "a100-80gb", (4, 8), 6.0, 2.0, 0.1),
]


def request(model, gpu, tps, rate, ttft, tpot):
    cluster = Cluster(nodes=(NodeType(name="node", gpu=get_gpu(gpu), gpus_per_node=8, intra_node_bytes_per_s=300e9,
                                      inter_node_bytes_per_s=25e9, count=GPUS // 8),))
    return planner.PlanRequest(workload=head(load_trace(TRACE), 600), model=get_model(model), cluster=cluster,
                               profiles=ProfileSource(shipped_profiles(), compose=False),
                               slo=slo_from_flags(ttft, tpot, 0.9), target_rps=rate,
                               fleets=(ANY,), affinity="high", settings=SearchSettings(requests_per_probe=300),
                               tps=tps, pps=(1,), max_checks=40)


def every_plan(candidates):
    """Every colocated and disaggregated replica combination of the shapes within GPUS, one
    shape per phase (the cluster has one GPU type)."""
    by_phase = {phase: [c for c in candidates if c.phase == phase] for phase in ("prefill", "decode", "colocated")}
    for cand in by_phase["colocated"]:
        for n in range(1, GPUS // cand.gpus + 1):
            yield "colocated", ((cand, n),)
    for p, d in itertools.product(by_phase["prefill"], by_phase["decode"]):
        for a in range(1, GPUS // p.gpus + 1):
            for b in range(1, (GPUS - a * p.gpus) // d.gpus + 1):
                yield "disaggregated", ((p, a), (d, b))


def brute_force(req, candidates, cache, plans=None):
    """The cost of the cheapest plan the end-to-end verification passes, in money units, among
    ``plans`` (default: every colocated and disaggregated plan)."""
    verifier = Verifier(req, {p.key: p for p in shipped_profiles().values()}, cache)
    priced = lambda counts: sum(money_units(req.cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus) * k
                                for c, k in counts)
    plans = every_plan(candidates) if plans is None else plans
    for mode, counts in sorted(set(plans), key=lambda mc: (priced(mc[1]), repr(mc))):
        mixed = any(c.phase == "mixed" for c, _ in counts)
        try:
            placed = solve(Problem(candidates=candidates, cluster=req.cluster, mode=mode, target_rps=req.target_rps,
                                   fixed=counts, pool_shapes="one", mixed=mixed))
        except InfeasibleError:
            continue
        if verifier.check(placed, mode=mode, affinity="high", fleet="any").verification.passed:
            return priced(counts)
    return None


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[f"{m}-{g.split('-')[0]}-tp{'/'.join(map(str, t))}-{r:g}rps-ttft{f:g}"
                                            for m, g, t, r, f, _ in CASES])
def test_the_answer_is_the_cheapest_plan_exhaustive_simulation_passes(case, tmp_path):
    req = request(*case)
    cache = ResultCache(tmp_path)
    try:
        report = planner.optimize(req, cache=cache)
    except InfeasibleError:
        report = None
    answer = None if report is None or report.answer is None else money_units(report.answer.solution.usd_per_hour)
    candidates = report.candidates if report is not None else ()
    assert answer == brute_force(req, candidates, cache)


def every_plan_with_mixed(candidates):
    """Every disaggregated plan within GPUS that may add mixed machines (Splitwise's mixed pool),
    one shape per kind."""
    by_kind = {kind: [c for c in candidates if c.phase == kind] for kind in ("prefill", "decode", "mixed")}
    for p, d, m in itertools.product(by_kind["prefill"], by_kind["decode"], by_kind["mixed"]):
        for a in range(1, GPUS // p.gpus + 1):
            for b in range(1, (GPUS - a * p.gpus) // d.gpus + 1):
                for k in range((GPUS - a * p.gpus - b * d.gpus) // m.gpus + 1):
                    yield "disaggregated", tuple(unit for unit in ((p, a), (d, b), (m, k)) if unit[1])


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES[::2], ids=[f"{m}-{g.split('-')[0]}-tp{'/'.join(map(str, t))}-{r:g}rps-ttft{f:g}"
                                                 for m, g, t, r, f, _ in CASES[::2]])
def test_with_mixed_machines_the_search_finds_the_cheapest_plan_exhaustive_simulation_passes(case, tmp_path):
    req = replace(request(*case), mixed=True, mode="disaggregated")
    cache = ResultCache(tmp_path)
    report = planner.optimize(req, cache=cache)
    found = report.fleets[0].mixed.best
    answer = None if found is None else money_units(found.solution.usd_per_hour)
    assert answer == brute_force(req, report.candidates, cache, every_plan_with_mixed(report.candidates))


def test_the_corpus_has_at_least_ten_cases_with_two_shapes_per_phase():
    assert len(CASES) >= 10 and all(len(tps) == 2 for _, _, tps, *_ in CASES)


def test_a_plan_its_first_run_settles_as_a_miss_is_simulated_once(tmp_path):
    """The answer at five times its target: run 0 misses by so much that runs 1 and 2 are not simulated."""
    req = request("opt-13b", "a100-80gb", (1, 2), 6.0, 0.5, 0.05)
    cache = ResultCache(tmp_path)
    report = planner.optimize(req, cache=cache)
    verifier = Verifier(req, {p.key: p for p in shipped_profiles().values()}, cache)
    check = partial(verifier.check, report.answer.solution, mode=report.chosen.mode, affinity="high", fleet="any")
    sunk = check(rate_rps=5 * req.target_rps).verification
    assert (sunk.passed, sunk.settled_early, sunk.seeds, verifier.simulations) == (False, True, (req.seed,), 1)
    held = check(rate_rps=req.target_rps / 2).verification
    assert held.passed and not held.settled_early and len(held.seeds) == req.runs
