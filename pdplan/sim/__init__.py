"""Discrete-event simulation of P/D-disaggregated and colocated LLM serving.

API (stable; used by goodput search and the ``pdplan simulate`` / ``pdplan goodput`` commands)::

    load_plan(path) -> Plan
    simulate(workload, plan, profiles, *, model=None, seed=0, rate_rps=None) -> SimResult
    simulate_prefill_instance(workload, profile, *, seed=0, rate_rps=None) -> SimResult
    simulate_decode_instance(workload, profile, *, seed=0, rate_rps=None) -> SimResult
    simulate_colocated_instance(workload, profile, *, policy="prefill-first", chunk_tokens=None,
                                seed=0, rate_rps=None) -> SimResult
    simulate_pool(workload, profile, *, phase, replicas=1, ...) -> SimResult   # n replicas, one phase
    SimResult.requests                  # pandas DataFrame, one row per request (results.COLUMNS)
    SimResult.columns                   # the same as a dict of numpy arrays
    SimResult.summary(ttft_s, tpot_s)   # dict; see SimResult.summary
    SimResult.attainment_masks(ttft_s, tpot_s)   # per-request pass/fail per clock and joint
    layer_visibility(ready_s, transfer_s), request_completion(ready_s, transfer_s)   # 0x08I

Modules: :mod:`.plan` (the plan file), :mod:`.layout` (requests and the plan flattened into
instances: what both engines read), :mod:`.engine` (running a layout; the modelling choices are
listed there), :mod:`.events` (event priorities, shared by both engines), :mod:`.fast` (the
compiled engine, a package), :mod:`.reference` with :mod:`.core` (the slow token-by-token oracle
the tests compare against), :mod:`.transfer` (transfer-schedule recurrences) and
:mod:`.results` (records and summary).
"""

from pdplan.sim.engine import (
    MissStop,
    simulate,
    simulate_colocated_instance,
    simulate_decode_instance,
    simulate_pool,
    simulate_prefill_instance,
)
from pdplan.sim.layout import as_requests
from pdplan.sim.plan import Link, Plan, Pool, resolve_pools
from pdplan.sim.planfile import load_plan
from pdplan.sim.results import COLUMNS, SimResult
from pdplan.sim.transfer import layer_visibility, request_completion

__all__ = [
    "COLUMNS", "Link", "Plan", "Pool", "MissStop", "SimResult", "as_requests", "layer_visibility",
    "load_plan", "request_completion", "resolve_pools", "simulate", "simulate_colocated_instance",
    "simulate_decode_instance", "simulate_pool", "simulate_prefill_instance",
]
