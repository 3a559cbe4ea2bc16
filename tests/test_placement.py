"""CP-SAT placement against the article's fixtures and against exhaustive enumeration."""

import functools
import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from pdplan.errors import InfeasibleError, InternalError
from pdplan.hardware import Cluster, NodeType, get_gpu
from pdplan.placement import ALIASES, Candidate, Problem, node_patterns, pair, serves, solve

GIB, MIB = 2**30, 2**20


def cluster_of(*nodes):
    return Cluster(nodes=tuple(nodes))


def node(name="n", gpu="a100-80gb", gpus=4, count=2, inter=4 * GIB):
    return NodeType(name=name, gpu=get_gpu(gpu), gpus_per_node=gpus, intra_node_bytes_per_s=8 * GIB,
                    inter_node_bytes_per_s=inter, count=count)


FIXTURE = (Candidate(phase="prefill", gpu="a100-80gb", tp=2, pp=1, goodput_rps=8),
           Candidate(phase="decode", gpu="a100-80gb", tp=2, pp=1, goodput_rps=12))


def test_article_fixture_places_two_prefill_and_one_decode_on_six_gpus():
    """0x08C: 10 rps; prefill 8 rps / 2 GPUs, decode 12 rps / 2 GPUs → 2 + 1, 6 GPUs, 12 rps, 2 rps/GPU."""
    sol = solve(Problem(candidates=FIXTURE, cluster=cluster_of(node()), mode="disaggregated",
                        target_rps=10, objective="gpus"))
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 2, "decode": 1}
    assert sol.gpus_total == 6
    assert sol.goodput_rps == 12
    assert sol.goodput_rps / sol.gpus_total == 2.0
    assert sol.status == "OPTIMAL" and sol.gap == 0


def with_kv(candidates, bytes_per_request):
    return tuple(Candidate(phase=c.phase, gpu=c.gpu, tp=c.tp, pp=c.pp, goodput_rps=c.goodput_rps,
                           kv_bytes_per_request=bytes_per_request) for c in candidates)


def test_768_mib_per_s_handoff_fits_a_4_gib_per_s_path():
    """0x08D: 64 MiB per request at 12 rps; each 2-GPU instance has 2 × 2 GiB/s = 4 GiB/s."""
    sol = solve(Problem(candidates=with_kv(FIXTURE, 64 * MIB), cluster=cluster_of(node(inter=2 * GIB)),
                        mode="disaggregated", target_rps=10, objective="gpus", link_headroom=1.0))
    assert sol.gpus_total == 6


def test_768_mib_per_s_handoff_is_rejected_on_a_256_mib_per_s_path():
    with pytest.raises(InfeasibleError,
                       match=r"decode a100-80gb TP2 PP1: KV handoff 0.81 GB/s at 12 rps > 100% of 0.3 GB/s"):
        solve(Problem(candidates=with_kv(FIXTURE, 64 * MIB), cluster=cluster_of(node(inter=128 * MIB)),
                      mode="disaggregated", target_rps=10, objective="gpus", link_headroom=1.0))


def test_infeasible_inventory_is_named():
    with pytest.raises(InfeasibleError, match="node counts cannot hold enough instances"):
        solve(Problem(candidates=FIXTURE, cluster=cluster_of(node(count=1)), mode="disaggregated",
                      target_rps=10, objective="gpus"))


def test_infeasible_budget_is_named():
    with pytest.raises(InfeasibleError, match="budget is too small"):
        solve(Problem(candidates=FIXTURE, cluster=cluster_of(node()), mode="disaggregated",
                      target_rps=10, objective="gpus", max_gpus=4))


def test_fleet_that_excludes_every_shape_is_named():
    with pytest.raises(InfeasibleError, match=r"no usable prefill/decode shape \(fleet rules them out"):
        solve(Problem(candidates=FIXTURE, cluster=cluster_of(node()), mode="disaggregated",
                      target_rps=10, objective="gpus", fleet=pair(*ALIASES["HH"])))


def test_goodput_objective_fills_the_budget():
    sol = solve(Problem(candidates=FIXTURE, cluster=cluster_of(node(count=4)), mode="disaggregated",
                        target_rps=None, objective="goodput", max_gpus=10))
    assert sol.goodput_rps == 24  # 3 prefill (24) + 2 decode (24) on 10 GPUs


def test_capped_decode_runs_on_h100_nodes():
    cands = (Candidate(phase="prefill", gpu="h100-80gb", tp=2, pp=1, goodput_rps=8),
             Candidate(phase="decode", gpu="h100-80gb-pcap", tp=2, pp=1, goodput_rps=12))
    sol = solve(Problem(candidates=cands, cluster=cluster_of(node(gpu="h100-80gb")), mode="disaggregated",
                        target_rps=10, objective="power", fleet=pair(*ALIASES["HHcap"])))
    assert sol.power_w == pytest.approx(4 * 700 + 2 * 490)


def test_pipeline_stages_each_take_a_tp_group():
    cands = (Candidate(phase="colocated", gpu="a100-80gb", tp=2, pp=2, goodput_rps=5),)
    sol = solve(Problem(candidates=cands, cluster=cluster_of(node(gpus=2, count=2)), mode="colocated",
                        target_rps=4, objective="gpus"))
    (inst,) = sol.instances
    assert inst.stage_nodes == ("n-0", "n-1")


def test_node_patterns_are_maximal_fillings():
    assert sorted(tuple(sorted(p.items())) for p in node_patterns(4, (1, 2))) == [
        ((1, 0), (2, 2)), ((1, 2), (2, 1)), ((1, 4), (2, 0))]


# --- brute force ------------------------------------------------------------------------------

def packs(groups, capacities):
    """Exhaustive: can TP groups (sizes) be assigned to nodes (free GPUs) without overflow?"""
    groups = sorted(groups, reverse=True)

    def place(i, free):
        if i == len(groups):
            return True
        tried = set()  # nodes with equal free room are interchangeable
        for k, room in enumerate(free):
            if room >= groups[i] and room not in tried:
                tried.add(room)
                free[k] -= groups[i]
                if place(i + 1, free):
                    return True
                free[k] += groups[i]
        return False

    return place(0, list(capacities))


def brute_force(problem):
    """Minimum GPUs / money units / watts over every replica vector, checking packing exhaustively."""
    cands = [c for c in problem.candidates if c.phase in problem.kinds]
    best = None
    bounds = [range(0, math.ceil(problem.target_rps / c.goodput_rps) + 1) for c in cands]
    for counts in itertools.product(*bounds):
        in_use = [(c.phase, c.gpu) for c, k in zip(cands, counts) if k]
        if problem.pool_shapes == "one" and len(in_use) != len(set(in_use)):
            continue
        ok = (all(sum(k for c, k in zip(cands, counts) if c.phase == p) for p in problem.phases)
              and all(sum(math.floor(c.goodput_rps * 1000 + 1e-9) * k
                          for c, k in zip(cands, counts) if serves(c.phase, p))
                      >= math.ceil(problem.target_rps * 1000 - 1e-9) for p in problem.phases))
        if not ok:
            continue
        by_type = {}
        for c, k in zip(cands, counts):
            by_type.setdefault(get_gpu(c.gpu).physical, []).extend([c.tp] * (k * c.pp))
        if not all(packs(groups, [n.gpus_per_node for n in problem.cluster.nodes if n.gpu.name == gpu
                                  for _ in range(n.count)]) for gpu, groups in by_type.items()):
            continue
        value = {"gpus": sum(c.gpus * k for c, k in zip(cands, counts)),
                 "cost": sum(round(problem.cluster.priced_gpu(c.gpu).usd_per_hour * c.gpus * 10_000) * k
                             for c, k in zip(cands, counts)),
                 "power": sum(round(problem.cluster.priced_gpu(c.gpu).tdp_w * c.gpus) * k
                              for c, k in zip(cands, counts))}[problem.objective]
        best = value if best is None else min(best, value)
    return best


def random_problem(rng):
    gpu_types = list(rng.choice(["a100-80gb", "h100-80gb"], size=rng.integers(1, 3), replace=False))
    nodes, total_nodes = [], 0
    for i, gpu in enumerate(gpu_types):
        count = int(rng.integers(1, 3 if len(gpu_types) == 2 else 5))
        total_nodes += count
        nodes.append(node(name=f"t{i}", gpu=gpu, gpus=int(rng.choice([2, 4, 8])), count=count))
    mode = "colocated" if rng.random() < 0.25 else "disaggregated"
    phases = ("colocated",) if mode == "colocated" else ("prefill", "decode")
    cands = []
    for phase in phases:
        for _ in range(int(rng.integers(1, 4))):
            cands.append(Candidate(phase=phase, gpu=str(rng.choice(gpu_types)), tp=int(rng.choice([1, 2, 4])),
                                   pp=int(rng.choice([1, 1, 2])), goodput_rps=round(float(rng.uniform(0.5, 6)), 3)))
    return Problem(candidates=tuple(dict.fromkeys(cands)), cluster=cluster_of(*nodes), mode=mode,
                   target_rps=round(float(rng.uniform(1, 9)), 2), objective=str(rng.choice(["gpus", "cost", "power"])))


SEEDS = range(100)


@functools.cache
def case(seed):
    problem = random_problem(np.random.default_rng(seed))
    return problem, brute_force(problem)


def test_the_random_corpus_has_at_least_50_feasible_instances():
    assert sum(case(seed)[1] is not None for seed in SEEDS) >= 50


@functools.cache
def case_one_shape(seed):
    problem = replace(case(seed)[0], pool_shapes="one")
    return problem, brute_force(problem)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("shapes", ["mixed", "one"])
def test_cp_sat_matches_exhaustive_enumeration(seed, shapes):
    assert_solves_to(*(case(seed) if shapes == "mixed" else case_one_shape(seed)))


def assert_solves_to(problem, expected):
    """CP-SAT proves the brute-force optimum, or finds the problem infeasible when it has none."""
    if expected is None:
        with pytest.raises(InfeasibleError):
            solve(problem)
        return
    sol = solve(problem)
    scale = {"gpus": 1, "cost": 10_000, "power": 1}[problem.objective]
    assert sol.status == "OPTIMAL"
    assert round(sol.objective * scale) == expected


def pp2(phase, rps, kv=0.0):
    return Candidate(phase=phase, gpu="a100-80gb", tp=1, pp=2, goodput_rps=rps, kv_bytes_per_request=kv)


def test_low_affinity_keeps_every_handoff_inside_a_node():
    """0x08D: a slow NIC rules out high affinity; stage-local segments use the 8 GiB/s in-node path."""
    cands = (pp2("prefill", 8, 64 * MIB), pp2("decode", 12, 64 * MIB))
    cluster = cluster_of(node(gpus=4, count=2, inter=128 * MIB))
    with pytest.raises(InfeasibleError):
        solve(Problem(candidates=cands, cluster=cluster, mode="disaggregated", target_rps=10, objective="gpus"))
    sol = solve(Problem(candidates=cands, cluster=cluster, mode="disaggregated", target_rps=10,
                        objective="gpus", affinity="low"))
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 2, "decode": 1}
    assert sol.gpus_total == 6
    for inst in sol.instances:  # the article's layout: stage 0 on node 0, stage 1 on node 1
        assert inst.stage_nodes == ("n-0", "n-1")


def test_low_affinity_needs_matching_pipeline_splits():
    cands = (pp2("prefill", 8), Candidate(phase="decode", gpu="a100-80gb", tp=2, pp=1, goodput_rps=12))
    with pytest.raises(InfeasibleError):
        solve(Problem(candidates=cands, cluster=cluster_of(node()), mode="disaggregated", target_rps=10,
                      objective="gpus", affinity="low"))


def test_low_affinity_capacity_is_the_sum_of_segment_minima():
    cands = (pp2("prefill", 8), pp2("decode", 12))
    sol = solve(Problem(candidates=cands, cluster=cluster_of(node(gpus=4, count=2)), mode="disaggregated",
                        target_rps=10, objective="gpus", affinity="low"))
    assert sol.goodput_rps == min(2 * 8, 1 * 12)


def test_a_shape_below_one_milli_rps_is_unusable_and_unbounded_counts_stay_solvable():
    """A near-zero goodput adds no capacity in milli-rps; its replica bound must not overflow the model."""
    tiny = Candidate(phase="prefill", gpu="a100-80gb", tp=1, pp=1, goodput_rps=4.4e-14)
    sol = solve(Problem(candidates=(tiny, *FIXTURE), cluster=cluster_of(node(count=None)),
                        mode="disaggregated", target_rps=10, objective="cost"))
    assert {c.phase: k for c, k in sol.replicas.items() if k} == {"prefill": 2, "decode": 1}
    assert tiny not in sol.replicas or sol.replicas[tiny] == 0


def test_equally_cheap_plans_take_the_fewest_nodes():
    cands = (Candidate(phase="colocated", gpu="h100-80gb", tp=4, pp=1, goodput_rps=2.0),)
    sol = solve(Problem(candidates=cands, cluster=cluster_of(node(gpu="h100-80gb", gpus=8, count=2)),
                        mode="colocated", target_rps=4, objective="cost"))
    assert [(i.stage_nodes, i.stage_gpus) for i in sol.instances] == [
        (("n-0",), ((0, 1, 2, 3),)), (("n-0",), ((4, 5, 6, 7),))]


# --- pool capacity, redundancy and the verified search's families ----------------------------------

def pooled(phase, c1, samples, gpu="a100-80gb", tp=2):
    from pdplan.poolcap import PoolCurve
    return Candidate(phase=phase, gpu=gpu, tp=tp, pp=1, goodput_rps=c1,
                     curve=PoolCurve(samples=((1, c1), *samples)))


def test_pool_capacity_lets_fewer_replicas_serve_the_target():
    """c(1) = 4 but c(2) = 10: two replicas behind one router serve 10 rps, not 8."""
    cands = (pooled("prefill", 4, ((2, 10),)), pooled("decode", 12, ()))
    sol = solve(Problem(candidates=cands, cluster=cluster_of(node()), mode="disaggregated", target_rps=10,
                        objective="gpus"))
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 2, "decode": 1}
    assert sol.phase_capacity_rps["prefill"] == 10


def test_instance_redundancy_keeps_the_target_with_any_one_instance_lost():
    """Fixture at 10 rps: 2 prefill at 8 rps leave 8 after a loss, so 3; 1 decode at 12 leaves 0, so 2."""
    sol = solve(Problem(candidates=FIXTURE, cluster=cluster_of(node(count=4)), mode="disaggregated",
                        target_rps=10, objective="gpus", redundancy="instance"))
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 3, "decode": 2}


def test_node_redundancy_keeps_the_target_with_a_whole_node_lost():
    """Four-GPU nodes hold two TP2 instances each: a lost node takes two of a phase."""
    sol = solve(Problem(candidates=FIXTURE, cluster=cluster_of(node(count=6)), mode="disaggregated",
                        target_rps=10, objective="gpus", redundancy="node"))
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 4, "decode": 3}


def test_one_shape_per_phase_and_gpu_type():
    cands = (Candidate(phase="colocated", gpu="a100-80gb", tp=2, pp=1, goodput_rps=3),
             Candidate(phase="colocated", gpu="a100-80gb", tp=4, pp=1, goodput_rps=7))
    mixed = solve(Problem(candidates=cands, cluster=cluster_of(node(count=4)), mode="colocated",
                          target_rps=10, objective="gpus"))
    one = solve(Problem(candidates=cands, cluster=cluster_of(node(count=4)), mode="colocated",
                        target_rps=10, objective="gpus", pool_shapes="one"))
    assert len(mixed.replicas) == 2 and mixed.gpus_total == 6
    assert len(one.replicas) == 1 and one.gpus_total == 8


def test_a_plan_that_missed_excludes_every_plan_it_dominates():
    base = Problem(candidates=FIXTURE, cluster=cluster_of(node(count=4)), mode="disaggregated",
                   target_rps=10, objective="gpus")
    first = solve(base)
    again = solve(replace(base, excluded=(first.counts,)))
    assert any(again.replicas.get(c, 0) > k for c, k in first.replicas.items())
    assert again.gpus_total == 8


def test_a_fixed_plan_is_placed_as_given_without_a_capacity_requirement():
    prefill, decode = FIXTURE
    sol = solve(Problem(candidates=FIXTURE, cluster=cluster_of(node()), mode="disaggregated", target_rps=100,
                        objective="gpus", fixed=((prefill, 1), (decode, 1))))
    assert sol.replicas == {prefill: 1, decode: 1} and len(sol.instances) == 2


def test_a_fixed_plan_that_does_not_fit_is_infeasible():
    prefill, decode = FIXTURE
    with pytest.raises(InfeasibleError, match="is left to try"):
        solve(Problem(candidates=FIXTURE, cluster=cluster_of(node(count=1)), mode="disaggregated",
                      target_rps=10, objective="gpus", fixed=((prefill, 2), (decode, 1))))


def test_strongest_below_a_ceiling_finds_the_plan_whose_weakest_phase_serves_most():
    """Under 8 GPUs: 2 prefill (16 rps) + 1 decode (12 rps) makes the weakest phase 12 rps; 1 + 2
    would leave prefill at 8."""
    sol = solve(Problem(candidates=FIXTURE, cluster=cluster_of(node(count=4)), mode="disaggregated",
                        target_rps=5, objective="gpus", below=8, strongest=True,
                        phase_targets={"prefill": 0.001, "decode": 0.001}))
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 2, "decode": 1}


def test_fleet_all_is_every_prefill_and_decode_gpu_pair_the_cluster_holds():
    from pdplan.placement import resolve_fleets

    cluster = cluster_of(node(name="a", gpu="a100-80gb"), node(name="h", gpu="h100-80gb"))
    names = [f.name for f in resolve_fleets("all", cluster)]
    assert names == ["a100-80gb/a100-80gb", "a100-80gb/h100-80gb", "a100-80gb/h100-80gb-pcap",
                     "h100-80gb/a100-80gb", "h100-80gb/h100-80gb", "h100-80gb/h100-80gb-pcap"]
    assert [f.alias for f in resolve_fleets("all", cluster)] == ["AA", None, None, "HA", "HH", "HHcap"]
    assert resolve_fleets("HHcap", cluster)[0].name == "h100-80gb/h100-80gb-pcap"


# --- Splitwise's mixed pool as a third kind of capacity ---------------------------------------

SEED_FIXTURE = (Candidate(phase="prefill", gpu="a100-80gb", tp=1, pp=1, goodput_rps=6),
                Candidate(phase="decode", gpu="a100-80gb", tp=1, pp=1, goodput_rps=4),
                Candidate(phase="mixed", gpu="a100-80gb", tp=1, pp=1, goodput_rps=4, chunk_tokens=512))


def test_without_mixed_machines_the_program_ignores_mixed_candidates():
    """Two prompt machines at 6 rps and two token machines at 4 serve min(12, 8) = 8 rps; 10 rps
    needs a third token machine: 5 machines."""
    sol = solve(Problem(candidates=SEED_FIXTURE, cluster=cluster_of(node()), mode="disaggregated",
                        target_rps=10, objective="gpus"))
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 2, "decode": 3}


def test_a_mixed_machine_counts_in_both_phases():
    """0x08G: G_mixed = min(c_P + b·g_M, c_D + b·g_M); one prompt, two token and one mixed machine
    give min(6 + 4, 8 + 4) = 10 rps on 4 machines, one fewer than without it."""
    sol = solve(Problem(candidates=SEED_FIXTURE, cluster=cluster_of(node()), mode="disaggregated",
                        target_rps=10, objective="gpus", mixed=True))
    assert sol.gpus_total == 4
    assert sol.replicas[SEED_FIXTURE[2]] >= 1
    assert sol.phase_capacity_rps["prefill"] >= 10 and sol.phase_capacity_rps["decode"] >= 10
    assert {i.candidate.phase for i in sol.instances} >= {"prefill", "decode", "mixed"}


def test_a_plan_still_runs_each_phase_when_mixed_machines_are_cheaper():
    cheap = replace(SEED_FIXTURE[2], goodput_rps=20)
    sol = solve(Problem(candidates=SEED_FIXTURE[:2] + (cheap,), cluster=cluster_of(node()), mode="disaggregated",
                        target_rps=10, objective="gpus", mixed=True))
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 1, "decode": 1, "mixed": 1}


def test_mixed_machines_need_a_disaggregated_plan_at_high_affinity():
    with pytest.raises(InternalError, match="high node affinity"):
        Problem(candidates=SEED_FIXTURE, cluster=cluster_of(node()), mode="colocated", target_rps=10,
                objective="gpus", mixed=True)


def with_mixed(seed):
    """A random disaggregated problem with a mixed shape on one of its GPU types."""
    problem = case(seed)[0]
    rng = np.random.default_rng(1000 + seed)
    gpu = str(rng.choice(sorted({n.gpu.name for n in problem.cluster.nodes})))
    mixed = Candidate(phase="mixed", gpu=gpu, tp=int(rng.choice([1, 2])), pp=1,
                      goodput_rps=round(float(rng.uniform(0.3, 3)), 3), chunk_tokens=512)
    return replace(problem, candidates=problem.candidates + (mixed,), mixed=True)


@functools.cache
def case_mixed(seed):
    problem = with_mixed(seed)
    return problem, brute_force(problem)


@pytest.mark.parametrize("seed", [s for s in SEEDS if case(s)[0].mode == "disaggregated"][:40])
def test_cp_sat_with_mixed_machines_matches_exhaustive_enumeration(seed):
    problem, expected = case_mixed(seed)
    assert_solves_to(problem, expected)
    plain = case(seed)[1]  # a mixed shape only adds options
    assert plain is None or expected is not None and expected <= plain


def test_shapes_kept_apart_never_run_in_one_plan():
    """A TP1 prefill is cheaper; kept apart from the TP2 decode (SGLang's equal TP), the plan pays for TP2."""
    tp1_prefill = Candidate(phase="prefill", gpu="a100-80gb", tp=1, pp=1, goodput_rps=5)
    problem = Problem(candidates=(tp1_prefill, *FIXTURE), cluster=cluster_of(node()), mode="disaggregated",
                      target_rps=10, objective="gpus")
    assert tp1_prefill in solve(problem).replicas
    apart = solve(replace(problem, apart=((tp1_prefill, FIXTURE[1]),))).replicas
    assert tp1_prefill not in apart and {c.tp for c in apart} == {2}
