"""The verified search's control: misses raise the failing pool, passes try cheaper plans, and the
answer is always a plan that passed. The end-to-end verdict is scripted here (real simulations
decide in test_verified_optimum.py and test_cli_optimize.py)."""

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pdplan import planner
from pdplan.cache import ResultCache
from pdplan.goodput import SearchSettings
from pdplan.hardware import Cluster, NodeType, default_cluster_path, get_gpu, load_cluster
from pdplan.latency.profile import shipped_profiles
from pdplan.latency.source import ProfileSource
from pdplan.modelref import get_model
from pdplan.placement import Candidate, Problem, resolve_fleets, solve
from pdplan.planner import search
from pdplan.planner.checks import Verifier
from pdplan.planner.pipeline import Searches
from pdplan.planner.plans import link_path
from pdplan.planner.search import _next_stride
from pdplan.slo import slo_from_flags
from pdplan.verify import RunRecord, judge
from pdplan.workload import head, load_trace

TRACE = Path(__file__).resolve().parent.parent / "traces" / "chat_poisson_2k.csv"


def request(**overrides):
    cluster = load_cluster(default_cluster_path())
    fields = dict(workload=head(load_trace(TRACE), 600), model=get_model("llama2-70b"), cluster=cluster,
                  profiles=ProfileSource(shipped_profiles(), compose=False), slo=slo_from_flags(1.0, 0.1, 0.9),
                  target_rps=4.0, fleets=resolve_fleets("HH", cluster), affinity="high",
                  settings=SearchSettings(requests_per_probe=300), tps=(2, 4), pps=(1,))
    return planner.PlanRequest(**{**fields, **overrides})


def records(slo, ttft_ok: bool, tpot_ok: bool = True) -> list[RunRecord]:
    """Three identical runs: attainment 0.95 on a clock that passes, 0.5 on one that misses; the
    late requests waited for prefill."""
    share = {"ttft": 0.95 if ttft_ok else 0.5, "tpot": 0.95 if tpot_ok else 0.5}
    return [RunRecord(objectives=tuple(share[o.metric] for o in slo.objectives),
                      clocks={**share, "joint": min(share.values())},
                      ttft_excess_s={"prefill_queue": 1.0, "transfer": 0.0, "admission": 0.0}, requests=600)] * 3


def scripted(monkeypatch, passes):
    """End-to-end verdicts from ``passes(plan)`` instead of simulations; returns the plans judged."""
    judged = []

    def verify(self, plan, rate_rps, *, mode, lost=()):
        judged.append(plan)
        ok = passes(plan)
        return judge(records(self.request.slo, ttft_ok=ok), self.request.slo, rule=self.request.rule,
                     rate_rps=rate_rps, seeds=self.seeds, mode=mode)

    monkeypatch.setattr(Verifier, "verify", verify)
    return judged


def replicas(plan, phase):
    return sum(p.replicas for p in plan.pools if p.phase == phase)


def test_a_ttft_miss_raises_prefill_until_the_prefill_pool_changes(monkeypatch, tmp_path):
    first = {}

    def passes(plan):
        if plan.colocated:
            return False
        first.setdefault("prefill", replicas(plan, "prefill"))
        return replicas(plan, "prefill") > first["prefill"]

    scripted(monkeypatch, passes)
    report = planner.optimize(request(), cache=ResultCache(tmp_path))
    tried = report.chosen.tried
    assert not tried[0].verification.passed and tried[0].verification.failing_phase == "prefill"
    assert replicas(tried[1].plan, "prefill") > replicas(tried[0].plan, "prefill")
    assert replicas(tried[1].plan, "decode") == replicas(tried[0].plan, "decode")
    assert report.answer.verification.passed


def test_a_pass_tries_cheaper_plans_until_none_above_the_floor_is_left(monkeypatch, tmp_path):
    scripted(monkeypatch, lambda plan: not plan.colocated)
    report = planner.optimize(request(target_rps=10.0), cache=ResultCache(tmp_path))
    search = report.chosen
    assert search.proven and len(search.tried) >= 2
    assert report.answer.value("cost") < search.tried[0].value("cost")
    assert min(report.answer.solution.phase_capacity_rps.values()) >= planner.SEARCH_FLOOR * 10.0 - 1e-9


def test_after_a_clear_miss_counted_short_the_descent_tries_only_plans_counting_more_for_that_phase(
        monkeypatch, tmp_path):
    judged = scripted(monkeypatch, lambda plan: not plan.colocated and replicas(plan, "prefill") >= 3)
    report = planner.optimize(request(target_rps=10.0), cache=ResultCache(tmp_path))
    tried = report.chosen.tried
    for i, checked in enumerate(tried):
        capacity = checked.solution.phase_capacity_rps["prefill"]
        if checked.verification.clear_miss and capacity < 10.0:
            later = [c.solution.phase_capacity_rps["prefill"] for c in tried[i + 1:]]
            assert all(c > capacity for c in later)
    assert judged and report.answer.verification.passed


def test_with_no_plan_that_passes_a_clear_miss_counted_short_still_bounds_the_descent(monkeypatch, tmp_path):
    """At a target the cluster cannot hold (the program has no plan), the descent runs from the whole
    cluster trusting no floor of the program's; but a phase the simulation confirmed short at some
    count is not tried at or below that count again, so it ends before the check budget."""
    scripted(monkeypatch, lambda plan: False)
    wanted = request(target_rps=400.0)
    cache = ResultCache(tmp_path)
    measured, _ = planner.measure(wanted, cache)
    candidates = planner.pool_candidates(wanted, measured, cache)
    verifier = Verifier(wanted, {m.profile.key: m.profile for m in measured}, cache)
    search = Searches(wanted, candidates, verifier).run(wanted.fleets[0], "disaggregated", "high")
    assert search.first is None and search.best is None and search.tried
    for i, checked in enumerate(search.tried):
        phase = checked.verification.failing_phase
        assert checked.verification.clear_miss and checked.solution.phase_capacity_rps[phase] < 400.0
        counted = checked.solution.phase_capacity_rps[phase]
        assert all(c.solution.phase_capacity_rps[phase] > counted for c in search.tried[i + 1:])
    assert len(search.tried) < wanted.max_checks


def test_the_answer_is_the_cheapest_plan_that_passed(monkeypatch, tmp_path):
    scripted(monkeypatch, lambda plan: replicas(plan, "decode" if not plan.colocated else "colocated") >= 2)
    report = planner.optimize(request(), cache=ResultCache(tmp_path))
    passed = [c for f in report.fleets for r in (f.disaggregated, f.colocated) for c in r.tried
              if c.verification.passed]
    assert report.answer.verification.passed
    assert report.answer.value("cost") == min(c.value("cost") for c in passed)


def test_when_the_cheapest_fleet_misses_end_to_end_a_fleet_that_passes_is_the_answer(monkeypatch, tmp_path):
    """HHcap's capped decode GPUs cost less to run, so it is cheaper on paper; it misses."""
    scripted(monkeypatch, lambda plan: not plan.colocated and all(p.gpu != "h100-80gb-pcap" for p in plan.pools))
    cluster = load_cluster(default_cluster_path())
    report = planner.optimize(request(fleets=resolve_fleets("HH", cluster) + resolve_fleets("HHcap", cluster)),
                              cache=ResultCache(tmp_path))
    capped = next(f for f in report.fleets if f.fleet.alias == "HHcap")
    assert capped.disaggregated.best is None and capped.disaggregated.tried
    assert report.chosen.fleet.alias == "HH"
    assert capped.disaggregated.first.usd_per_hour < report.answer.solution.usd_per_hour


def test_the_margin_is_over_the_best_plan_of_the_other_mode_on_any_fleet(tmp_path):
    """Colocated wins on a fleet whose own disaggregated plan is not the cheapest one in the table."""
    cluster = load_cluster(default_cluster_path())
    report = planner.optimize(request(tps=(4,), fleets=resolve_fleets("all", cluster)), cache=ResultCache(tmp_path))
    cents = {f.fleet.name: round(f.disaggregated.best.solution.usd_per_hour * 100) for f in report.fleets
             if f.disaggregated.best is not None}
    cheapest = min(cents, key=cents.get)
    assert report.chosen.mode == "colocated" and cents[report.chosen.fleet.name] > cents[cheapest]
    doc = planner.report_to_dict(report)
    assert (doc["margin_over"]["decision"], doc["margin_over"]["fleet"]) == ("disaggregated", cheapest)
    assert doc["margin"] == pytest.approx(1 - doc["cost_per_hour"] * 100 / cents[cheapest], abs=1e-4)


def test_when_nothing_passes_there_is_no_answer_and_the_closest_plan_is_reported(monkeypatch, tmp_path):
    scripted(monkeypatch, lambda plan: False)
    report = planner.optimize(request(max_checks=2), cache=ResultCache(tmp_path))
    assert report.answer is None and report.closest is not None
    doc = planner.report_to_dict(report)
    assert doc["decision"] is None and doc["closest"]["misses"]
    assert doc["closest"]["misses"][0].startswith("p90 TTFT <= 1000 ms: 0.500 (lower) against 0.9, short by 0.400")


def test_the_simulated_link_is_the_nic_of_the_nodes_the_decode_instances_landed_on():
    def nodes(name, nic, count):  # one TP4 instance per node: every handoff crosses nodes
        return NodeType(name=name, gpu=get_gpu("h100-80gb"), gpus_per_node=4, intra_node_bytes_per_s=450e9,
                        inter_node_bytes_per_s=nic, count=count)

    cluster = Cluster(nodes=(nodes("slow-nic", 1e9, 2), nodes("fast-nic", 100e9, 0)))
    cands = (Candidate(phase="prefill", gpu="h100-80gb", tp=4, pp=1, goodput_rps=5),
             Candidate(phase="decode", gpu="h100-80gb", tp=4, pp=1, goodput_rps=5))
    solution = solve(Problem(candidates=cands, cluster=cluster, mode="disaggregated", target_rps=4))
    plan = planner.plan_of(solution, model=get_model("llama2-70b"), cluster=cluster, mode="disaggregated",
                           affinity="high", transfer_schedule="layer", name="p")
    assert [link.bandwidth_bytes_per_s for link in plan.links] == [4 * 1e9]


#: Two 8-GPU H100 nodes with NVLink at 450 GB/s and NICs at 1 GB/s per GPU, and a TP4 shape per phase.
TWO_NODES = Cluster(nodes=(NodeType(name="h100", gpu=get_gpu("h100-80gb"), gpus_per_node=8,
                                    intra_node_bytes_per_s=450e9, inter_node_bytes_per_s=1e9, count=2),))
TP4_PAIR = (Candidate(phase="prefill", gpu="h100-80gb", tp=4, pp=1, goodput_rps=5),
            Candidate(phase="decode", gpu="h100-80gb", tp=4, pp=1, goodput_rps=5))


def test_a_handoff_between_pools_sharing_one_node_takes_its_nvlink_not_its_nic():
    solution = solve(Problem(candidates=TP4_PAIR, cluster=TWO_NODES, mode="disaggregated", target_rps=4))
    assert {node for i in solution.instances for node in i.stage_nodes} == {"h100-0"}
    assert link_path(solution, "high", *TP4_PAIR) == "intra-node"
    plan = planner.plan_of(solution, model=get_model("llama2-70b"), cluster=TWO_NODES, mode="disaggregated",
                           affinity="high", transfer_schedule="layer", name="p")
    assert [link.bandwidth_bytes_per_s for link in plan.links] == [4 * 450e9]


def test_a_decode_pool_is_verified_at_the_requests_per_rank_its_candidate_was_measured_with():
    """A candidate the engine holds below its KV (DeepEP's low-latency budget) becomes a pool held to it: the plan the
    verification simulates, the manifest's scheduling and the exports all read Pool.max_running_requests."""
    capped = (TP4_PAIR[0], replace(TP4_PAIR[1], max_running_requests=64))
    solution = solve(Problem(candidates=capped, cluster=TWO_NODES, mode="disaggregated", target_rps=4))
    plan = planner.plan_of(solution, model=get_model("llama2-70b"), cluster=TWO_NODES, mode="disaggregated",
                           affinity="high", transfer_schedule="layer", name="p")
    assert {p.phase: p.max_running_requests for p in plan.pools} == {"prefill": None, "decode": 64}


def test_a_handoff_crosses_nodes_when_either_pool_has_an_instance_on_another_node():
    solution = solve(Problem(candidates=TP4_PAIR, cluster=TWO_NODES, mode="disaggregated", target_rps=9))
    assert len({node for i in solution.instances for node in i.stage_nodes}) == 2
    assert link_path(solution, "high", *TP4_PAIR) == "inter-node"


def test_losing_a_node_removes_every_instance_with_a_stage_on_it():
    from pdplan.planner.plans import losses

    cands = (Candidate(phase="prefill", gpu="a100-80gb", tp=2, pp=1, goodput_rps=3),
             Candidate(phase="decode", gpu="a100-80gb", tp=2, pp=1, goodput_rps=12))
    cluster = Cluster(nodes=(NodeType(name="n", gpu=get_gpu("a100-80gb"), gpus_per_node=4, intra_node_bytes_per_s=1e11,
                                      inter_node_bytes_per_s=1e10, count=4),))
    solution = solve(Problem(candidates=cands, cluster=cluster, mode="disaggregated", target_rps=10))
    plan = planner.plan_of(solution, model=get_model("llama2-70b"), cluster=cluster, mode="disaggregated",
                           affinity="high", transfer_schedule="layer", name="p")
    total = sum(p.replicas for p in plan.pools)
    for loss in losses(solution, plan, "node"):
        assert loss.left is None or sum(p.replicas for p in loss.left.pools) == total - 2  # two TP2 per node
    instance = {loss.label: loss for loss in losses(solution, plan, "instance")}
    assert set(instance) == {"one prefill a100-80gb TP2 PP1 instance", "one decode a100-80gb TP2 PP1 instance"}
    only_decode = instance["one decode a100-80gb TP2 PP1 instance"]
    assert only_decode.left is None and only_decode.emptied == "decode"


@pytest.mark.parametrize("kwargs,message", [
    (dict(runs=0), "--seeds must be >= 1"), (dict(rule="median"), "--verify-rule must be one of lower, mean"),
    (dict(redundancy="rack"), "--redundancy must be one of none, instance, node"),
    (dict(pool_shapes="some"), "--pool-shapes must be one of one, mixed"),
])
def test_bad_search_settings_are_input_errors(kwargs, message):
    from pdplan.errors import PdplanError

    with pytest.raises(PdplanError, match=message):
        request(**kwargs)


def test_a_plan_that_borrows_hands_off_to_a_lent_prefill_instance_on_the_prefill_pools_path():
    """Both TP4 instances share one node, so a lent prefill instance receives its KV over NVLink."""
    solution = solve(Problem(candidates=TP4_PAIR, cluster=TWO_NODES, mode="disaggregated", target_rps=4))
    plan = planner.plan_of(solution, model=get_model("llama2-70b"), cluster=TWO_NODES, mode="disaggregated",
                           affinity="high", transfer_schedule="layer", name="p", borrow=True)
    assert plan.borrow and plan.default_link.bandwidth_bytes_per_s == 4 * 450e9


def test_a_plan_of_data_parallel_instances_only_does_not_borrow():
    """Borrowing lends one-rank machines; a plan with none of them is verified without it."""
    wide = tuple(replace(c, tp=2, dp=2) for c in TP4_PAIR)
    solution = solve(Problem(candidates=wide, cluster=TWO_NODES, mode="disaggregated", target_rps=4))
    plan = planner.plan_of(solution, model=get_model("llama2-70b"), cluster=TWO_NODES, mode="disaggregated",
                           affinity="high", transfer_schedule="layer", name="p", borrow=True)
    assert not plan.borrow and plan.default_link is None


@pytest.mark.parametrize(("engine", "router"), [("sglang", "bootstrap-room"), ("vllm", "shortest-queue"),
                                                ("trtllm", "shortest-queue")])
def test_a_verified_plans_prefill_ranks_take_prompts_as_its_engine_routes_them(engine, router):
    """SGLang's P/D prefill puts a prompt on the DP rank its bootstrap room names; the others by load. Decode
    pools keep the fewest-outstanding rule."""
    wide = tuple(replace(c, tp=2, dp=2) for c in TP4_PAIR)
    solution = solve(Problem(candidates=wide, cluster=TWO_NODES, mode="disaggregated", target_rps=4))
    plan = planner.plan_of(solution, model=get_model("llama2-70b"), cluster=TWO_NODES, mode="disaggregated",
                           affinity="high", transfer_schedule="layer", name="p", engine=engine)
    assert {p.phase: p.rank_router for p in plan.pools} == {"prefill": router, "decode": "shortest-queue"}


def test_the_descents_stride_doubles_what_a_pass_gained_and_a_miss_returns_it_to_just_below_the_best_plan():
    best = object()  # any plan that passed
    assert _next_stride(1.5, True, best) == 3.0
    assert _next_stride(3.0, False, best) == 0.0
    assert _next_stride(9.0, True, None) == 0.0   # no plan passed before: keep stepping


#: Forty one-GPU prefill and decode instances' worth of target on eight 8-GPU nodes, each instance 1 req/s.
EIGHT_NODES = Cluster(nodes=(NodeType(name="h100", gpu=get_gpu("h100-80gb"), gpus_per_node=8,
                                      intra_node_bytes_per_s=450e9, inter_node_bytes_per_s=50e9, count=10),))
ONE_GPU_PAIR = (Candidate(phase="prefill", gpu="h100-80gb", tp=1, pp=1, goodput_rps=1.0),
                Candidate(phase="decode", gpu="h100-80gb", tp=1, pp=1, goodput_rps=1.0))


def _descent(passes, monkeypatch, *, gallop: bool):
    """The verified search over ONE_GPU_PAIR at 40 req/s with verdicts from ``passes(prefill, decode)``."""
    if not gallop:
        monkeypatch.setattr(search, "_next_stride", lambda *args: 0.0)
    slo = slo_from_flags(1.0, 0.1, 0.9)
    wanted = request(slo=slo, max_checks=40)

    def check(solution):
        counts = {c.phase: k for c, k in solution.replicas.items()}
        verdict = judge(records(slo, ttft_ok=passes(counts["prefill"], counts["decode"])), slo, rule=wanted.rule,
                        rate_rps=40.0, seeds=(0, 1, 2), mode="disaggregated")
        return search.Checked(solution=solution, plan=None, verification=verdict)

    base = Problem(candidates=ONE_GPU_PAIR, cluster=EIGHT_NODES, mode="disaggregated", target_rps=40.0,
                   objective="gpus")
    return search.verified_search(wanted, base, check)


def test_a_long_descent_reaches_the_same_cheapest_plan_in_fewer_checks_than_stepping_one_plan_at_a_time(
        monkeypatch):
    """The program starts at 40 + 40 instances; every plan of at least 31 of each passes (above the floor of 30)."""
    passes = lambda prefill, decode: prefill >= 31 and decode >= 31  # noqa: E731
    galloped = _descent(passes, monkeypatch, gallop=True)
    stepped = _descent(passes, monkeypatch, gallop=False)
    assert galloped.proven and stepped.proven
    assert galloped.best.solution.gpus_total == stepped.best.solution.gpus_total == 62
    assert len(galloped.tried) < len(stepped.tried)


def test_a_miss_a_stride_reached_is_excluded_but_raises_no_phases_floor():
    """Far below the best plan every phase may be short; the phase the miss's clock blames need not be the one."""
    miss = SimpleNamespace(verification=SimpleNamespace(clear_miss=True, failing_phase="prefill"),
                           solution=SimpleNamespace(counts=(("p", 29), ("d", 29)),
                                                    phase_capacity_rps={"prefill": 29.0, "decode": 29.0}))
    stepped, strode = search.Missed(40.0), search.Missed(40.0)
    stepped.add(miss)
    strode.add(miss, counted=False)
    assert stepped.counted_short == {"prefill": 29.0} and strode.counted_short == {}
    assert stepped.clear == strode.clear == [miss.solution.counts]
