"""Placement solves kept in the result cache: a model solved to proven optimality or proven
infeasible is read back in place of a solve, identically; a solve stopped by its time limit is
never kept; nothing is kept outside a run's cache; a warm optimize solves nothing again."""

from __future__ import annotations

import sys
from dataclasses import replace

import pytest
from ortools.sat.python import cp_model

from pdplan.cache import ResultCache
from pdplan.errors import InfeasibleError
from pdplan.placement import Problem, solve
from pdplan.placement import recall as recall_module
from pdplan.placement.recall import recalling, solve_once
from tests.test_placement import FIXTURE, cluster_of, node

PROBLEM = Problem(candidates=FIXTURE, cluster=cluster_of(node(count=4)), mode="disaggregated", target_rps=20.0)


def counting(monkeypatch) -> list:
    """Every real CP-SAT solve placement runs from now on."""
    calls = []
    real = recall_module.solve_once

    def run(solver, model, run):
        def counted(s, m):
            calls.append(1)
            return run(s, m)
        return real(solver, model, counted)

    monkeypatch.setattr(sys.modules["pdplan.placement.solve"], "solve_once", run)
    return calls


def same(a, b) -> bool:
    return (a.replicas, a.instances, a.counts, a.objective, a.bound, a.status, a.goodput_rps) == \
        (b.replicas, b.instances, b.counts, b.objective, b.bound, b.status, b.goodput_rps)


def test_a_solve_kept_in_the_cache_is_read_back_identically_without_solving(tmp_path, monkeypatch):
    calls = counting(monkeypatch)
    with recalling(ResultCache(tmp_path)):
        first = solve(PROBLEM)
        again = solve(PROBLEM)
    assert first.status == "OPTIMAL" and len(calls) == 1
    assert same(first, again) and again.wall_s == 0.0


def test_a_different_problem_is_solved_anew(tmp_path, monkeypatch):
    calls = counting(monkeypatch)
    with recalling(ResultCache(tmp_path)):
        solve(PROBLEM)
        solve(replace(PROBLEM, target_rps=30.0))
        solve(replace(PROBLEM, time_limit_s=20.0))
    assert len(calls) == 3


def test_a_proven_infeasible_solve_is_kept_and_still_named(tmp_path, monkeypatch):
    calls = counting(monkeypatch)
    searching = replace(PROBLEM, fixed=((FIXTURE[0], 40),))  # more instances than the nodes hold
    with recalling(ResultCache(tmp_path)):
        for _ in range(2):
            with pytest.raises(InfeasibleError, match="left to try"):
                solve(searching)
    assert len(calls) == 1


def test_without_a_run_cache_every_solve_runs(monkeypatch):
    calls = counting(monkeypatch)
    solve(PROBLEM)
    solve(PROBLEM)
    assert len(calls) == 2


def test_a_solve_stopped_by_its_time_limit_is_never_kept(tmp_path):
    """FEASIBLE depends on the machine's speed: the next run solves again."""
    model = cp_model.CpModel()
    model.new_int_var(0, 3, "x")
    runs = []

    def stopped(solver, m):
        runs.append(1)
        solver.solve(m)
        return cp_model.FEASIBLE

    with recalling(ResultCache(tmp_path)):
        for _ in range(2):
            status, _, _ = solve_once(cp_model.CpSolver(), model, stopped)
            assert status == cp_model.FEASIBLE
    assert len(runs) == 2


def test_a_warm_optimize_solves_no_placement_again(tmp_path, monkeypatch):
    from pdplan.latency.profile import shipped_profiles
    from pdplan.latency.source import ProfileSource
    from pdplan.modelref import get_model
    from pdplan.planner import PlanRequest, optimize
    from pdplan.planner.report import report_to_dict
    from pdplan.slo import slo_from_flags
    from pdplan.workload import head, load_trace
    from tests.conftest import ROOT

    request = PlanRequest(workload=head(load_trace(ROOT / "traces" / "chat_poisson_2k.csv"), 400),
                          model=get_model("llama2-70b"), cluster=cluster_of(node(gpu="a100-80gb", gpus=8, count=2)),
                          profiles=ProfileSource(shipped_profiles(), compose=False), slo=slo_from_flags(2.0, 0.15, 0.9),
                          target_rps=2.0, tps=(4,), pps=(1,))
    cold = report_to_dict(optimize(request, cache=ResultCache(tmp_path)))
    calls = counting(monkeypatch)
    warm = report_to_dict(optimize(request, cache=ResultCache(tmp_path)))
    assert calls == []
    for doc in (cold, warm):
        del doc["run"]
    assert warm == cold
