"""Placing instances whose attention data-parallel ranks and experts span several nodes."""

import pytest

from pdplan.errors import InfeasibleError
from pdplan.hardware import Cluster, NodeType, get_gpu
from pdplan.placement import Candidate, Problem, solve

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
