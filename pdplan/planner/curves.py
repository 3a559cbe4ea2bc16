"""What the plots of ``optimize --plot`` show beyond the answer: each fleet's plans with the chosen
one marked, each shape's goodput per GPU, and the integer program's cost at rates around the
target for both modes of the chosen fleet.

The cost curve is the decomposition's estimate (pool capacity curves, each point simulated, under
the program's placement rules), not a verified plan per rate: the plot says so and marks the
plans the end-to-end simulation passed at the target. Where the two curves cross, if they do in
the range, is the rate at which splitting starts (or stops) paying on cost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pdplan.errors import InfeasibleError
from pdplan.placement import solve
from pdplan.planner.measure import CURVE_HEADROOM
from pdplan.planner.pipeline import PlanReport, base_problem

#: Rates of the cost curve, as fractions of the target (the pool curves reach CURVE_HEADROOM).
CURVE_POINTS = 10


@dataclass(frozen=True, kw_only=True)
class PlanBar:
    """One fleet's plan of one kind: the verified one, else the one that missed least."""

    fleet: str                   #: Splitwise's alias, else the fleet's name
    kind: str                    #: "disaggregated", "disaggregated, mixed machines allowed" or "colocated"
    usd_per_hour: float | None   #: None: the program found no plan to check
    power_w: float | None
    passes: bool                 #: verified end to end
    chosen: bool                 #: this plan is the answer


def fleet_bars(report: PlanReport) -> list[PlanBar]:
    """Every fleet's plans in the order the fleets were searched, disaggregated (then, with
    ``--mixed``, the search that may add mixed machines) before colocated; the one whose search
    is the answer's is ``chosen``."""
    bars = []
    for fleet in report.fleets:
        for search in fleet.searches():
            shown = search.best or search.closest
            kind = ("disaggregated, mixed machines allowed" if search is fleet.mixed
                    else "disaggregated, machines lent" if search is fleet.borrowing else search.mode)
            bars.append(PlanBar(
                fleet=fleet.fleet.alias or fleet.fleet.name, kind=kind,
                usd_per_hour=None if shown is None else shown.solution.usd_per_hour,
                power_w=None if shown is None else shown.solution.power_w,
                passes=search.best is not None,
                chosen=report.answer is not None and search is report.chosen))
    return bars


@dataclass(frozen=True, kw_only=True)
class ShapeGoodput:
    """One measured shape: phase, label, per-instance goodput per GPU, and whether the answer runs it."""

    phase: str
    label: str
    goodput_per_gpu: float
    chosen: bool = False


def goodput_per_gpu(report: PlanReport) -> list[ShapeGoodput]:
    """Every shape with positive goodput, its simulated per-instance goodput divided by its GPUs;
    ``chosen`` when a pool of the answer runs that shape."""
    answer = report.answer
    used = set() if answer is None else {(c.phase, c.gpu, c.tp, c.pp, c.dp, c.ep, c.chunk_tokens)
                                         for c in answer.solution.replicas}
    return [ShapeGoodput(phase=m.shape.phase, label=m.shape.label, goodput_per_gpu=m.goodput.goodput_rps / m.shape.gpus,
                         chosen=(m.shape.phase, m.shape.gpu, m.shape.tp, m.shape.pp, m.shape.dp, m.shape.ep,
                                 m.shape.chunk_tokens) in used)
            for m in report.measured if m.goodput.goodput_rps > 0]


def cost_curves(report: PlanReport) -> dict[str, list[tuple[float, float | None]]]:
    """Per mode of the chosen fleet, (rate, cheapest $/h the program finds, None when none) at
    CURVE_POINTS rates from a tenth of the target to CURVE_HEADROOM × the target, and at the target."""
    request = report.request
    if report.chosen is None or request.target_rps is None:
        return {}
    rates = np.union1d(np.linspace(0.1, CURVE_HEADROOM, CURVE_POINTS), [1.0]) * request.target_rps
    affinity = report.fleet.disaggregated.affinity
    curves = {}
    for mode in ("disaggregated", "colocated"):
        points = []
        for rate in rates:
            problem = replace(base_problem(request, report.candidates, report.chosen.fleet, mode,
                                           affinity if mode == "disaggregated" else "high"),
                              target_rps=float(rate), objective="cost")
            try:
                points.append((float(rate), solve(problem).usd_per_hour))
            except InfeasibleError:
                points.append((float(rate), None))
        curves[mode] = points
    return curves
