"""Redundant expert slots (EPLB's): asked of the search, carried by the plan, timed by each pool's profile.

DeepSeek's own decode unit (EP144) and srt-slurm's GB200 recipes (DEP24, DEP48) run 256 routed experts plus 32
redundant slots: their EP divides 288, not 256. ``optimize --redundant-experts`` gives every wide shape those slots;
the plan's wide pools carry them to the manifest and the exports; a plan file states them per pool.
"""

from __future__ import annotations

import pytest

from pdplan.candidates import enumerate_shapes
from pdplan.errors import PdplanError
from pdplan.hardware import load_cluster
from pdplan.latency.source import ProfileSource
from pdplan.modelref import get_model
from pdplan.placement.problem import Candidate, Solution
from pdplan.planner.plans import plan_of
from pdplan.sim.plan import Plan, Pool, plan_profiles
from tests.conftest import ROOT

TRACE = ROOT / "traces" / "smoke_uniform_200.csv"


def _pool(name: str, dp: int, redundant: int) -> Pool:
    return Pool(name=name, phase="colocated", model="deepseek-v3@fp8", gpu="h200-141gb", tp=1, pp=1, dp=dp, ep=dp,
                redundant_experts=redundant, policy="prefill-first")


def test_two_pools_of_one_shape_with_different_redundant_experts_are_refused_naming_the_field():
    """The simulator times a shape by one profile, and redundant slots change it (memory, EPLB's load)."""
    plan = Plan(pools=(_pool("a", 16, 32), _pool("b", 16, 0)))
    with pytest.raises(PdplanError, match="pool 'b' has 0 redundant experts and another pool of its shape 32") \
            as refused:
        plan_profiles(plan, ProfileSource({}, compose=False))
    assert refused.value.field == "pools[1].redundant_experts"


def test_a_pools_profile_holds_its_redundant_experts_in_memory():
    plan = Plan(pools=(_pool("slotted", 16, 32),))
    slotted = plan_profiles(plan, ProfileSource({}, compose=False))[plan.pools[0].shape]
    plain = plan_profiles(Plan(pools=(_pool("plain", 16, 0),)), ProfileSource({}, compose=False))[plan.pools[0].shape]
    assert slotted.kv_capacity_tokens < plain.kv_capacity_tokens


def test_the_plan_gives_the_requests_redundant_experts_to_its_wide_pools_only():
    wide = Candidate(phase="colocated", gpu="h200-141gb", tp=1, dp=16, ep=16, goodput_rps=10.0, chunk_tokens=512)
    narrow = Candidate(phase="colocated", gpu="h200-141gb", tp=8, goodput_rps=5.0, chunk_tokens=512)
    solution = Solution(replicas={wide: 1, narrow: 1}, instances=(), gpus_total=24, usd_per_hour=0.0, power_w=0.0,
                        goodput_rps=15.0, phase_capacity_rps={}, status="OPTIMAL", objective=0.0, bound=0.0, gap=0.0,
                        wall_s=0.0)
    plan = plan_of(solution, model=get_model("deepseek-v3@fp8"), cluster=load_cluster(ROOT / "examples" /
                                                                                       "cluster_h200.yaml"),
                   mode="colocated", affinity="high", transfer_schedule="request", name="p", redundant_experts=32)
    assert {(p.dp, p.redundant_experts) for p in plan.pools} == {(16, 32), (1, 0)}


@pytest.mark.parametrize(("args", "message"), [
    (("--redundant-experts", "32"), "--redundant-experts 32 adds expert slots to wide shapes, which a "
                                    "mixture-of-experts model gets with --dp above 1"),
    (("--redundant-experts", "-1", "--dp", "8"), "--redundant-experts must be in [0, 10000000], got -1"),
])
def test_optimize_refuses_redundant_experts_it_cannot_place_naming_the_flag(run_cli, args, message):
    code, out, err = run_cli("optimize", TRACE, "--model", "deepseek-v3@fp8", "--cluster",
                             ROOT / "examples" / "cluster_h200.yaml", *args)
    assert code == 2 and out == ""
    assert err.strip() == f"Error: {message}"


def test_goodput_times_an_instance_with_redundant_experts_that_its_ep_needs(run_cli):
    """DEP24 over six GB200 trays: EP 24 does not divide 256 experts, and 256 + 32 it does."""
    code, out, err = run_cli("goodput", TRACE, "--model", "deepseek-r1", "--dtype", "fp8", "--gpu", "gb200-185gb",
                             "--engine", "sglang", "--phase", "decode", "--dp", "24", "--redundant-experts", "32",
                             "--tpot", "50ms", "--requests-per-probe", "20", "--json")
    assert code == 0, err
    assert '"goodput_rps"' in out


def test_a_one_host_instance_its_engine_gathers_is_refused_redundant_slots_saying_why():
    """SGLang gathers a DP 8 instance inside one HGX host; EPLB's slots rebalance DeepEP's dispatch, which a DP 16
    over two hosts runs."""
    cluster = load_cluster(ROOT / "examples" / "cluster_h200.yaml")
    kept, rejected = enumerate_shapes(get_model("deepseek-v3@fp8"), cluster, largest_request_tokens=4096,
                                      phases=("decode",), tps=(1,), pps=(1,), dps=(8, 16), engine="sglang",
                                      redundant_experts=32)
    reasons = {r.shape.dp: r.reason for r in rejected if r.shape.dp > 1}
    assert reasons[8] == ("h200-141gb TP1 DP8 EP8 PP1: 32 redundant expert slots rebalance a dispatch (EPLB over "
                          "DeepEP), but SGLang gathers the tokens of an instance within one host of 8 GPUs (its "
                          "default all-to-all there); a DP past one host dispatches, or search without "
                          "--redundant-experts")
    assert [(s.dp, s.all_to_all) for s in kept] == [(16, "dispatch")]
