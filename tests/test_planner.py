"""The optimize pipeline's control loop: end-to-end misses raise the failing phase and re-solve."""

from pathlib import Path

import pytest

from pdplan import planner
from pdplan.cache import ResultCache
from pdplan.goodput import SearchSettings
from pdplan.hardware import default_cluster_path, load_cluster
from pdplan.modelspec import get_model
from pdplan.profiles import shipped_profiles
from pdplan.slo import slo_from_flags
from pdplan.workload import load_trace

TRACE = Path(__file__).resolve().parent.parent / "traces" / "chat_poisson_2k.csv"


def request(**overrides):
    fields = dict(workload=load_trace(TRACE), model=get_model("llama2-70b"),
                  cluster=load_cluster(default_cluster_path()), measured=shipped_profiles(),
                  slo=slo_from_flags(1.0, 0.1, 0.9), target_rps=4.0, fleets=("HH",),
                  settings=SearchSettings(requests_per_probe=300), max_rounds=3)
    return planner.PlanRequest(**{**fields, **overrides})


def scripted_checks(monkeypatch, verdicts):
    """Replace the end-to-end simulation by a script of (TTFT share, meets) verdicts."""
    calls = []

    def fake_check(req, plan, profiles, rate):
        ttft, meets = verdicts[min(len(calls), len(verdicts) - 1)]
        calls.append(plan)
        return {}, {"ttft": ttft, "tpot": 0.99, "joint": ttft}, meets

    monkeypatch.setattr(planner, "check", fake_check)
    monkeypatch.setattr(planner, "evaluate", lambda req, mode, run: mode)  # only the rounds check
    return calls


def test_a_ttft_miss_raises_prefill_by_15_percent_and_solves_again(monkeypatch, tmp_path):
    """At 4.5 req/s one instance (about 4.9 req/s) serves; 15% more needs a second."""
    scripted_checks(monkeypatch, [(0.5, False), (0.95, True)])
    report = planner.optimize(request(target_rps=4.5), cache=ResultCache(tmp_path))
    chosen_rounds = list(report.rounds)
    assert [r.meets for r in chosen_rounds] == [False, True]
    expected = {"colocated": pytest.approx(4.5 * 1.15)} if report.chosen.mode == "colocated" else {
        "prefill": pytest.approx(4.5 * 1.15)}
    assert chosen_rounds[1].phase_targets == expected


def test_a_raise_that_leaves_the_plan_unchanged_is_raised_again(monkeypatch, tmp_path):
    """At 4 req/s one instance (about 4.9 req/s) still serves 4.6: the next change comes at 5.29."""
    calls = scripted_checks(monkeypatch, [(0.5, False), (0.95, True)])
    report = planner.optimize(request(), cache=ResultCache(tmp_path))
    assert [r.meets for r in report.rounds] == [False, True]
    assert calls[0] != calls[1]
    assert list(report.rounds[1].phase_targets.values()) == [pytest.approx(4.0 * 1.15**2)]


def test_rounds_stop_at_the_limit_and_report_the_miss(monkeypatch, tmp_path):
    scripted_checks(monkeypatch, [(0.5, False)])
    report = planner.optimize(request(max_rounds=2), cache=ResultCache(tmp_path))
    assert len(report.rounds) == 2 and not report.rounds[-1].meets
    assert planner.report_to_dict(report)["meets_slo"] is False


def test_every_fleet_is_judged_end_to_end(tmp_path):
    report = planner.optimize(request(fleets=("AA", "HH")), cache=ResultCache(tmp_path))
    for fleet in report.fleets:
        assert fleet.disaggregated.attainment["joint"] <= fleet.disaggregated.attainment["ttft"]


def test_the_simulated_link_is_the_nic_of_the_nodes_the_decode_instances_landed_on():
    from pdplan.hardware import Cluster, NodeType, get_gpu
    from pdplan.placement import Candidate, Problem, solve

    def nodes(name, nic, count):
        return NodeType(name=name, gpu=get_gpu("h100-80gb"), gpus_per_node=8, intra_node_bytes_per_s=450e9,
                        inter_node_bytes_per_s=nic, count=count)

    cluster = Cluster(nodes=(nodes("slow-nic", 1e9, 2), nodes("fast-nic", 100e9, 0)))
    cands = (Candidate(phase="prefill", gpu="h100-80gb", tp=4, pp=1, goodput_rps=5),
             Candidate(phase="decode", gpu="h100-80gb", tp=4, pp=1, goodput_rps=5))
    solution = solve(Problem(candidates=cands, cluster=cluster, mode="disaggregated", target_rps=4))
    mode = planner.ModeResult(mode="disaggregated", fleet="any", solution=solution, affinity="high")
    plan = planner.plan_of(request(cluster=cluster), mode)
    assert [link.bandwidth_bytes_per_s for link in plan.links] == [4 * 1e9]
