"""Placing instances whose attention data-parallel ranks and experts span several nodes."""

import itertools
import math

import numpy as np
import pytest
from test_placement import packs

from pdplan.errors import InfeasibleError
from pdplan.hardware import Cluster, NodeType, get_gpu
from pdplan.placement import Candidate, Problem, solve
from pdplan.placement.model import node_patterns

GIB = 2**30


def h200_nodes(name="h200", count=4, gpus=8):
    return NodeType(name=name, gpu=get_gpu("h200-141gb"), gpus_per_node=gpus, intra_node_bytes_per_s=400 * GIB,
                    inter_node_bytes_per_s=50 * GIB, count=count)


PREFILL = Candidate(phase="prefill", gpu="h200-141gb", tp=8, goodput_rps=10)
WIDE_DECODE = Candidate(phase="decode", gpu="h200-141gb", tp=1, dp=16, ep=16, goodput_rps=10)


def plan(candidates, *nodes, target=10):
    return solve(Problem(candidates=candidates, cluster=Cluster(nodes=nodes), mode="disaggregated",
                         target_rps=target, objective="gpus"))


def test_a_two_node_decode_instance_takes_two_whole_nodes_with_ranks_zero_and_one():
    sol = plan((PREFILL, WIDE_DECODE), h200_nodes())
    decode = next(i for i in sol.instances if i.candidate == WIDE_DECODE)
    assert [(stage, rank, len(gpus)) for stage, rank, _, gpus in decode.parts()] == [(0, 0, 8), (0, 1, 8)]
    assert len(set(decode.stage_nodes)) == 2
    assert sol.gpus_total == 8 + 16


def test_a_spanning_instance_uses_nodes_of_one_type_only():
    # two node types of one node each: neither scale-out fabric holds the 2-node instance alone
    with pytest.raises(InfeasibleError):
        plan((PREFILL, WIDE_DECODE), h200_nodes("a", count=1), h200_nodes("b", count=1))


def test_a_spanning_instance_fills_its_nodes_so_a_prefill_needs_a_node_of_its_own():
    with pytest.raises(InfeasibleError):
        plan((PREFILL, WIDE_DECODE), h200_nodes(count=2))


def test_a_stage_that_cannot_spread_evenly_over_nodes_is_rejected_by_name():
    uneven = Candidate(phase="decode", gpu="h200-141gb", tp=1, dp=12, ep=12, goodput_rps=50)
    with pytest.raises(InfeasibleError, match="spreads 12 GPUs per stage evenly"):
        plan((PREFILL, uneven), h200_nodes())


def test_inventory_bounds_spanning_instances_by_whole_nodes():
    # 25 rps: three prefill nodes and three 2-node decode instances, 9 nodes; 8 cannot hold them
    with pytest.raises(InfeasibleError):
        plan((PREFILL, WIDE_DECODE), h200_nodes(count=8), target=25)
    sol = plan((PREFILL, WIDE_DECODE), h200_nodes(count=9), target=25)
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 3, "decode": 3}


def nvl72_racks(count):
    """GB200 NVL72 racks: one NVLink domain of 72 GPUs each, so one node of 72."""
    return NodeType(name="nvl72", gpu=get_gpu("gb200-185gb"), gpus_per_node=72, intra_node_bytes_per_s=900 * GIB,
                    inter_node_bytes_per_s=100 * GIB, count=count)


def test_a_dep72_decode_instance_fills_one_nvl72_rack_and_its_prefill_takes_the_other():
    prefill = Candidate(phase="prefill", gpu="gb200-185gb", tp=4, dp=8, ep=32, goodput_rps=200)
    dep72 = Candidate(phase="decode", gpu="gb200-185gb", tp=1, dp=72, ep=72, goodput_rps=2500)
    sol = plan((prefill, dep72), nvl72_racks(2), target=400)
    decode = next(i for i in sol.instances if i.candidate == dep72)
    assert [(rank, len(gpus)) for _, rank, _, gpus in decode.parts()] == [(0, 72)]
    prefill_nodes = {n for i in sol.instances if i.candidate == prefill for n in i.stage_nodes}
    assert len(set(decode.stage_nodes)) == 1 and not prefill_nodes & set(decode.stage_nodes)
    assert {c.phase: k for c, k in sol.replicas.items()} == {"prefill": 2, "decode": 1}


@pytest.mark.parametrize("sizes,count", [((72,), 1), ((8, 72), 2), ((32, 72), 2), ((8, 16, 32), 9), ((1, 72), 2)])
def test_an_nvl72_node_has_every_maximal_filling_of_its_72_gpus(sizes, count):
    """Brute force over the counts of each size: the fillings with no room left for the smallest group."""
    ranges = [range(72 // s + 1) for s in sizes]
    brute = [dict(zip(sizes, k)) for k in itertools.product(*ranges)
             if any(k) and 72 - min(sizes) < sum(a * b for a, b in zip(sizes, k)) <= 72]
    found = node_patterns(72, sizes)
    assert len(found) == count and sorted(map(str, found)) == sorted(map(str, brute))


def test_the_expert_all_to_all_shares_the_nics_with_the_kv_handoff():
    # 16 GPUs x 50 GiB/s = 800 GiB/s across nodes; 10 rps x (30 + 60) GiB per request = 900 GiB/s
    busy = Candidate(phase="decode", gpu="h200-141gb", tp=1, dp=16, ep=16, goodput_rps=10,
                     kv_bytes_per_request=30 * GIB, all_to_all_bytes_per_request=60 * GIB)
    with pytest.raises(InfeasibleError):
        solve(Problem(candidates=(PREFILL, busy), cluster=Cluster(nodes=(h200_nodes(count=3),)),
                      mode="disaggregated", target_rps=10, objective="gpus", link_headroom=1.0))
    lighter = Candidate(phase="decode", gpu="h200-141gb", tp=1, dp=16, ep=16, goodput_rps=10,
                        kv_bytes_per_request=30 * GIB, all_to_all_bytes_per_request=40 * GIB)
    assert solve(Problem(candidates=(PREFILL, lighter), cluster=Cluster(nodes=(h200_nodes(count=3),)),
                         mode="disaggregated", target_rps=10, objective="gpus", link_headroom=1.0)).gpus_total == 24


def brute_force_gpus(candidates, nodes, target):
    """Fewest GPUs over every replica vector: each spanning instance takes whole nodes of one type
    (tried on every type), the rest pack exhaustively into what is left; None when nothing fits."""
    best = None
    bounds = [range(0, math.ceil(target / c.goodput_rps) + 1) for c in candidates]
    for counts in itertools.product(*bounds):
        if not all(sum(k * c.goodput_rps for c, k in zip(candidates, counts) if c.phase == p) >= target
                   for p in ("prefill", "decode")):
            continue
        spanning = [c for c, k in zip(candidates, counts) for _ in range(k) if c.stage_gpus > c.tp and
                    c.nodes_per_stage(nodes[0].gpus_per_node) > 1]
        small = [c.stage_gpus for c, k in zip(candidates, counts) for _ in range(k * c.pp) if c not in spanning]
        fits = False
        for types in itertools.product(range(len(nodes)), repeat=len(spanning)):
            left = [n.count for n in nodes]
            for cand, t in zip(spanning, types):
                left[t] -= cand.pp * cand.nodes_per_stage(nodes[t].gpus_per_node)
            if min(left, default=0) >= 0 and packs(small, [n.gpus_per_node for n, k in zip(nodes, left)
                                                            for _ in range(k)]):
                fits = True
                break
        if fits:
            gpus = sum(c.gpus * k for c, k in zip(candidates, counts))
            best = gpus if best is None else min(best, gpus)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_cp_sat_places_spanning_instances_as_exhaustive_enumeration_does(seed):
    rng = np.random.default_rng(seed)
    nodes = tuple(h200_nodes(f"t{i}", count=int(rng.integers(1, 4)), gpus=4) for i in range(int(rng.integers(1, 3))))
    candidates = (Candidate(phase="prefill", gpu="h200-141gb", tp=2, goodput_rps=float(rng.integers(2, 6))),
                  Candidate(phase="prefill", gpu="h200-141gb", tp=4, goodput_rps=float(rng.integers(4, 12))),
                  Candidate(phase="decode", gpu="h200-141gb", tp=1, dp=4, ep=4, goodput_rps=float(rng.integers(3, 8))),
                  Candidate(phase="decode", gpu="h200-141gb", tp=1, dp=8, ep=8, goodput_rps=float(rng.integers(6, 16))))
    target = float(rng.integers(4, 14))
    expected = brute_force_gpus(candidates, nodes, target)
    if expected is None:
        with pytest.raises(InfeasibleError):
            plan(candidates, *nodes, target=target)
        return
    sol = plan(candidates, *nodes, target=target)
    assert sol.status == "OPTIMAL" and sol.gpus_total == expected


def gb200_rack(name="rack", count=18):
    return NodeType(name=name, gpu=get_gpu("gb200-185gb"), gpus_per_node=4, intra_node_bytes_per_s=900 * GIB,
                    inter_node_bytes_per_s=900 * GIB, count=count)


TEP8 = {phase: Candidate(phase=phase, gpu="gb200-185gb", tp=8, goodput_rps=10) for phase in ("prefill", "decode")}


def test_a_tp8_group_takes_two_whole_trays_of_one_gb200_rack():
    sol = plan(tuple(TEP8.values()), gb200_rack())
    for inst in sol.instances:
        assert [(stage, rank, len(gpus)) for stage, rank, _, gpus in inst.parts()] == [(0, 0, 4), (0, 1, 4)]
        assert len(set(inst.stage_nodes)) == 2
    assert sol.gpus_total == 16


def test_a_tp8_group_never_joins_trays_of_two_racks():
    # two racks of one tray each: NVLink joins neither pair, so no TP8 group can be placed
    with pytest.raises(InfeasibleError):
        plan(tuple(TEP8.values()), gb200_rack("a", count=1), gb200_rack("b", count=1))


def test_a_tp8_group_never_spans_two_hgx_nodes_of_four():
    hgx = h200_nodes(count=4, gpus=4)
    tp8 = tuple(Candidate(phase=phase, gpu="h200-141gb", tp=8, goodput_rps=10) for phase in ("prefill", "decode"))
    with pytest.raises(InfeasibleError, match="no node type with 8\\+ h200-141gb GPUs"):
        plan(tp8, hgx)
