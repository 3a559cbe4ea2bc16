"""The optimize pipeline: candidate shapes → per-instance goodput and pool capacity → the verified
search over fleets, modes and affinities → the cheapest plan the end-to-end simulation passed.

Modules: :mod:`.request` (the inputs), :mod:`.target` (the rate a plan serves), :mod:`.windowed`
(what ``--windows`` takes and refuses), :mod:`.measure` (goodput and pool curves, cached),
:mod:`.plans` (a placement as a simulator plan, and its losses), :mod:`.checks` (end-to-end
verification, cached), :mod:`.search` (the two-sided verified search), :mod:`.pipeline` (fleets,
modes, the answer), :mod:`.report` (the JSON documents, windowed included).
"""

from pdplan.planner.measure import Measured, mean_kv_bytes_per_request, measure, pool_candidates
from pdplan.planner.pipeline import FleetResult, PlanReport, optimize
from pdplan.planner.plans import LINK_SETUP_S, losses, plan_of
from pdplan.planner.report import report_to_dict
from pdplan.planner.request import DEFAULT_MAX_CHECKS, PlanRequest
from pdplan.planner.search import RAISE_FACTOR, SEARCH_FLOOR, Checked, SearchResult, verified_search

__all__ = [
    "DEFAULT_MAX_CHECKS", "LINK_SETUP_S", "RAISE_FACTOR", "SEARCH_FLOOR", "Checked", "FleetResult", "Measured",
    "PlanReport", "PlanRequest", "SearchResult", "losses", "mean_kv_bytes_per_request", "measure", "optimize",
    "plan_of", "pool_candidates", "report_to_dict", "verified_search",
]
