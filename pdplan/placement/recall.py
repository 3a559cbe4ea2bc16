"""Placement and schedule solves recalled from the result cache: one integer program is solved once.

A solve is keyed by its CP-SAT model, byte for byte (the text format of the model proto), with the
solver's time limit, seed and workers, under pdplan's code digest. One search worker
makes the solve deterministic, so a model solved to proven optimality (or proven infeasible) has
one answer on every machine: those are kept, as the value of every variable, and read back in
place of a solve. A solve that stopped at its time limit depends on the machine's speed and is
never kept. The cache is the one of the run that is solving (:func:`recalling`), so `optimize`,
its worker processes, windowed schedules and every cell of a sensitivity grid share what they
solved, and a warm run solves nothing it solved before.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cached_property

from ortools.sat.python import cp_model, cp_model_helper

from pdplan.cache import ResultCache, cache_key

_RECALLING: ContextVar[ResultCache | None] = ContextVar("placement_solves", default=None)
#: The statuses whose answer does not depend on the machine.
KEPT = {cp_model.OPTIMAL: "OPTIMAL", cp_model.INFEASIBLE: "INFEASIBLE"}


@contextmanager
def recalling(cache: ResultCache | None) -> Iterator[None]:
    """Within this block, placement solves are kept in and read back from ``cache``."""
    token = _RECALLING.set(cache)
    try:
        yield
    finally:
        _RECALLING.reset(token)


@dataclass(frozen=True)
class Recalled:
    """A solve read back: what the solver answered, through the solver's own accessors."""

    values: tuple[int, ...]
    objective_value: float
    best_objective_bound: float

    def value(self, expression) -> int:
        """A variable's or linear expression's value, evaluated as ``CpSolver.value`` does."""
        if isinstance(expression, cp_model.IntVar):
            return self.values[expression.index]
        return cp_model_helper.ResponseHelper.value(self._response, expression)

    @cached_property
    def _response(self) -> cp_model_helper.CpSolverResponse:
        response = cp_model_helper.CpSolverResponse()
        response.solution.extend(self.values)
        return response


def solve_once(solver: cp_model.CpSolver, model: cp_model.CpModel,
               run) -> tuple[int, cp_model.CpSolver | Recalled, float]:
    """``run(solver, model)``'s status, the solver (or what a kept solve recalls of it) and the
    seconds it took (0 when recalled)."""
    cache = _RECALLING.get()
    key = None if cache is None else _key(solver, model)
    if key is not None:
        kept = cache.get(key, _decode)
        if kept is not None:
            return (*kept, 0.0)
    started = time.perf_counter()
    status = run(solver, model)
    wall = time.perf_counter() - started
    if key is not None and status in KEPT:
        optimal = status == cp_model.OPTIMAL
        cache.put(key, {"status": KEPT[status],
                        "values": list(solver.response_proto.solution) if optimal else [],
                        "objective": solver.objective_value if optimal else 0.0,
                        "bound": solver.best_objective_bound if optimal else 0.0})
    return status, solver, wall


def _key(solver: cp_model.CpSolver, model: cp_model.CpModel) -> str:
    text = str(model.proto).encode()  # the proto's text format: every variable and constraint, in order
    return cache_key({"kind": "placement solve", "model": hashlib.sha256(text).hexdigest(),
                      "time_limit_s": solver.parameters.max_time_in_seconds,
                      "seed": solver.parameters.random_seed, "workers": solver.parameters.num_workers,
                      "linearization": solver.parameters.linearization_level})


def _decode(value: dict) -> tuple[int, Recalled]:
    status = {name: code for code, name in KEPT.items()}[value["status"]]
    return status, Recalled(values=tuple(int(v) for v in value["values"]), objective_value=float(value["objective"]),
                            best_objective_bound=float(value["bound"]))
