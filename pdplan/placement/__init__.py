"""Placement as an integer program: replicas per shape, packed onto the cluster's nodes (CP-SAT).

Given per-shape pool capacities c(n) (from :mod:`pdplan.goodput` and :mod:`pdplan.poolcap`),
the model chooses how many instances of each (phase, GPU type, TP, PP) to run and on which node
types, so that each phase serves its requirement (system goodput is the minimum of the phases,
0x0A), every TP group sits inside one node or on whole nodes of one NVLink domain, node
inventories hold, the fleet's GPU rules hold, every instance's KV handoff fits its link (0x08D),
and budgets hold — at the least cost, GPUs or power, or at the highest goodput within a budget.

Modules: :mod:`.fleets` (which GPU types each pool may use), :mod:`.problem` (inputs and the
solved plan), :mod:`.model` (the CP-SAT model), :mod:`.solve` (solving, diagnosis, node map).
"""

from pdplan.placement.fleets import ALIASES, ANY, Fleet, cluster_pairs, pair, resolve_fleets
from pdplan.placement.model import (
    build_model,
    instance_link_bytes_per_s,
    node_patterns,
    objective_step,
    objective_units,
    whole_cluster,
)
from pdplan.placement.problem import (
    OBJECTIVES,
    POOL_SHAPES,
    REDUNDANCY,
    Candidate,
    Counts,
    Instance,
    Problem,
    Rejection,
    Segment,
    Solution,
    counts_of,
    dominated,
    milli_rps,
    money_units,
    serves,
)
from pdplan.placement.solve import diagnose, solve

__all__ = [
    "ALIASES", "ANY", "OBJECTIVES", "POOL_SHAPES", "REDUNDANCY", "Candidate", "Counts", "Fleet", "Instance",
    "Problem", "Rejection", "Segment", "Solution", "build_model", "cluster_pairs", "counts_of", "diagnose",
    "dominated", "instance_link_bytes_per_s", "milli_rps", "money_units", "node_patterns", "objective_step",
    "objective_units", "pair", "resolve_fleets", "serves", "solve", "whole_cluster",
]
