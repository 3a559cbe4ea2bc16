"""Solving the placement program: the optimum, why there is none, and the node map."""

from __future__ import annotations

import math
import threading
from dataclasses import replace

from ortools.sat.python import cp_model

from pdplan.errors import InfeasibleError
from pdplan.placement.model import Model, build_model, objective_scale
from pdplan.placement.problem import PHASES, Instance, Problem, Solution, counts_of, serves
from pdplan.placement.recall import Recalled, solve_once


def solve(problem: Problem) -> Solution:
    """Solve to proven optimality within the time limit; infeasible problems name what binds."""
    built = build_model(problem)
    if any(not any(c.phase == phase for c in built.usable) for phase in problem.phases):
        raise InfeasibleError(_explain_no_candidates(problem, built))
    status, solver, wall = solve_once(_solver(problem), built.cp, interruptible_solve)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return _solution(problem, built, solver, status, wall)
    if status == cp_model.INFEASIBLE:
        searching = (problem.fixed is not None or problem.excluded or problem.excluded_exactly
                     or problem.below is not None)
        raise InfeasibleError(f"no {problem.mode} plan ({problem.fleet.label}) is left to try" if searching
                              else diagnose(problem))
    raise InfeasibleError(f"the solver found no plan within {problem.time_limit_s:g} s "
                          f"(status {solver.status_name(status)}); raise --time-limit")  # never a recalled one


def _solver(problem: Problem) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = problem.time_limit_s
    solver.parameters.random_seed = problem.seed
    # One worker keeps the search, and so the chosen optimum among ties, identical run to run.
    solver.parameters.num_workers = 1
    # The full LP relaxation (pool-curve stretches, node patterns): at level 1 one worker's bound stays far
    # from the optimum on clusters of hundreds of GPUs with several shapes per pool, and the solve times out.
    solver.parameters.linearization_level = 2
    return solver


def interruptible_solve(solver: cp_model.CpSolver, model: cp_model.CpModel) -> int:
    """``solver.solve(model)``, which Ctrl-C ends at once and then goes on to end pdplan. CP-SAT's
    own SIGINT handler would end the solve but swallow the signal (pdplan would go on with what it
    found), so it is off, and the solve runs in a thread the main thread waits on: Python handles
    signals in the main thread only, between bytecodes, never inside a solve."""
    solver.parameters.catch_sigint_signal = False
    outcome: dict = {}

    def run() -> None:
        try:
            outcome["status"] = solver.solve(model)
        except BaseException as err:  # re-raised in the caller's thread
            outcome["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        thread.join()
    except BaseException:
        solver.stop_search()
        thread.join()
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome["status"]


FAMILY_SENTENCES = {
    "capacity": "no mix of candidate shapes reaches {target} in every phase",
    "inventory": "the cluster's node counts cannot hold enough instances",
    "budget": "the GPU, cost or power budget is too small",
    "redundancy": "the cluster cannot hold the spare capacity that surviving a lost {redundancy} needs",
    "link": "the KV handoff does not fit the links between nodes",
    "fleet": "fleet {fleet} rules out the shapes that could serve the target",
}
#: The order families are relaxed in: the first whose relaxation is feasible is named.
FAMILIES = ("budget", "inventory", "redundancy", "link", "fleet", "capacity")


def diagnose(problem: Problem) -> str:
    """Re-solve with one constraint family relaxed at a time; name the first whose relaxation
    makes the problem feasible (or say that several bind together)."""
    for family in FAMILIES:
        if family == "redundancy":
            if problem.redundancy == "none":
                continue
            built = build_model(replace(problem, redundancy="none"))
        else:
            built = build_model(problem, relax=frozenset({family}))
        if interruptible_solve(_solver(problem), built.cp) in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return binding_sentence(problem, family)
    return (f"no {problem.mode} plan ({problem.fleet.label}): several constraints bind together "
            "(capacity, inventory, budget, link, fleet); relaxing any one alone is not enough")


def binding_sentence(problem: Problem, family: str) -> str:
    """The family's sentence; a search for the highest rate (no target) is short of any rate at all."""
    target = "any rate" if problem.target_rps is None else f"{problem.target_rps:g} rps"
    sentence = FAMILY_SENTENCES[family].format(target=target, fleet=problem.fleet.label,
                                               redundancy=problem.redundancy)
    return f"no {problem.mode} plan ({problem.fleet.label}): {sentence}"


def _explain_no_candidates(problem: Problem, built: Model) -> str:
    missing = [p for p in problem.phases if not any(c.phase == p for c in built.usable)]
    reasons = [r.reason for r in built.rejections if r.candidate.phase in missing]
    detail = "; ".join(reasons[:3]) + (f"; and {len(reasons) - 3} more" if len(reasons) > 3 else "")
    families = sorted({r.family for r in built.rejections if r.candidate.phase in missing})
    which = " and ".join(families) if families else "goodput"
    why = (": " + detail if detail
           else "; no shape meets the SLO on its own even at a low rate, so relax the SLO or allow larger shapes")
    return (f"no {problem.mode} plan ({problem.fleet.label}): no usable {'/'.join(missing)} shape "
            f"({which} rules them out{why})")


def _solution(problem: Problem, built: Model, solver: cp_model.CpSolver | Recalled, status: int,
              wall: float) -> Solution:
    replicas = {c: solver.value(v) for c, v in built.n.items() if solver.value(v) > 0}
    capacity = {phase: sum(c.capacity_rps(k) for c, k in replicas.items() if serves(c.phase, phase))
                for phase in problem.phases}
    system = min(capacity.values())
    if built.units:  # requests stay inside their segment: sum of segment minima
        system = sum(seg.capacity_rps * solver.value(built.u[k]) for k, seg in enumerate(built.units))
        counts = counts_of({seg: solver.value(built.u[k]) for k, seg in enumerate(built.units)})
    else:
        counts = counts_of(replicas)
    priced = problem.cluster.priced_gpu
    totals = {"gpus": sum(c.gpus * k for c, k in replicas.items()),
              "cost": sum(priced(c.gpu).usd_per_hour * c.gpus * k for c, k in replicas.items()),
              "power": sum(priced(c.gpu).tdp_w * c.gpus * k for c, k in replicas.items())}
    # Report the primary objective: strip the node tie-break (|nodes| < weight).
    weight = built.nodes_weight
    scale = objective_scale(problem.objective)
    if problem.strongest:  # the solver optimised strength, not the objective: no bound on it
        objective = bound = round(totals[problem.objective] * scale)
    elif problem.objective == "goodput":
        objective = math.ceil(solver.objective_value / weight)
        bound = math.ceil(solver.best_objective_bound / weight)
    else:
        objective = math.floor(solver.objective_value / weight)
        bound = math.floor(solver.best_objective_bound / weight)
    gap = abs(bound - objective) / max(abs(objective), 1e-9) if objective else 0.0
    return Solution(
        replicas=replicas,
        instances=expand(problem, built, solver),
        gpus_total=totals["gpus"],
        usd_per_hour=totals["cost"],
        power_w=totals["power"],
        goodput_rps=system,
        phase_capacity_rps=capacity,
        status="OPTIMAL" if status == cp_model.OPTIMAL else "FEASIBLE",
        objective=objective / scale,
        bound=bound / scale,
        gap=gap,
        wall_s=wall,
        counts=counts,
        rejections=tuple(built.rejections),
    )


def expand(problem: Problem, built: Model, solver: cp_model.CpSolver | Recalled) -> tuple[Instance, ...]:
    """The node map of a solution: every instance, its node per stage and its GPUs there."""
    if problem.affinity == "low":
        return _expand_segments(problem, built, solver)
    return _expand_patterns(problem, built, solver)


def _expand_segments(problem: Problem, built: Model, solver: cp_model.CpSolver | Recalled) -> tuple[Instance, ...]:
    """Each segment copy takes pp fresh nodes; on node j, prefill groups first, then decode."""
    instances, next_node = [], {}
    for k, seg in enumerate(built.units):
        for _ in range(solver.value(built.u[k])):
            first = next_node.get(seg.node.name, 0)
            next_node[seg.node.name] = first + seg.prefill.pp
            nodes = tuple(f"{seg.node.name}-{first + j}" for j in range(seg.prefill.pp))
            offset = 0
            for cand, copies in ((seg.prefill, seg.a), (seg.decode, seg.b)):
                for _ in range(copies):
                    gpus = tuple(range(offset, offset + cand.tp))
                    offset += cand.tp
                    instances.append(Instance(
                        id=f"{cand.phase}-{len(instances)}", candidate=cand, node_type=seg.node.name,
                        stage_nodes=nodes, stage_gpus=(gpus,) * cand.pp, segment=k))
    return tuple(instances)


def _expand_patterns(problem: Problem, built: Model, solver: cp_model.CpSolver | Recalled) -> tuple[Instance, ...]:
    """Turn pattern counts into a node map: node ids, and for every stage its node and GPUs.

    Nodes are filled in pattern order; groups of one size go to slots in the order of (phase, GPU,
    TP, DP, PP) so the same solution always yields the same map. A stage wider than a node takes
    whole nodes, one slot each, its node ranks in order.
    """
    instances = []
    for node in problem.cluster.nodes:
        slots: dict[int, list[tuple[str, tuple[int, ...]]]] = {}
        index = 0
        for k, pattern in enumerate(built.patterns[node.name]):
            for _ in range(solver.value(built.z[node.name, k]) if (node.name, k) in built.z else 0):
                name, first = f"{node.name}-{index}", 0
                for size in sorted(pattern, reverse=True):  # big groups from GPU 0
                    for _ in range(pattern[size]):
                        slots.setdefault(size, []).append((name, tuple(range(first, first + size))))
                        first += size
                index += 1
        order = sorted((c for c in built.usable if (c, node.name) in built.m),
                       key=lambda c: (PHASES.index(c.phase), c.gpu, c.tp, c.dp, c.ep, c.pp))
        taken: dict[int, int] = {}
        for cand in order:
            size, spans = cand.node_slot(node.gpus_per_node), node.stage_nodes(cand)
            for _ in range(solver.value(built.m[cand, node.name])):
                parts = []
                for _ in range(cand.pp * spans):
                    parts.append(slots[size][taken.get(size, 0)])
                    taken[size] = taken.get(size, 0) + 1
                instances.append(Instance(
                    id=f"{cand.phase}-{len(instances)}", candidate=cand, node_type=node.name,
                    stage_nodes=tuple(s[0] for s in parts), stage_gpus=tuple(s[1] for s in parts),
                    nodes_per_stage=spans))
    return tuple(instances)
