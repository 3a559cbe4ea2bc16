"""The compiled engine's kernels are typed once each: numba compiles a kernel again for every literal
constant a caller passes (``f(x, 0)`` types the 0 as ``Literal[int](0)``), and a first run after install
pays each such specialisation, so callers pass constants as ``np.int64(...)``."""

import importlib
import pkgutil

import numpy as np
from numba.core import types
from numba.core.registry import CPUDispatcher

import pdplan.sim.fast as fast
from pdplan.sim import Plan, simulate, simulate_pool
from tests.test_sim_data_parallel import grouped, wide
from tests.test_sim_system import HETEROGENEOUS, MODEL, PROFILES, pool, profile, random_trace


def kernels() -> dict[str, CPUDispatcher]:
    found = {}
    for module in pkgutil.iter_modules(fast.__path__):
        loaded = importlib.import_module(f"{fast.__name__}.{module.name}")
        found.update({f"{module.name}.{name}": value for name, value in vars(loaded).items()
                      if isinstance(value, CPUDispatcher) and value.__module__ == loaded.__name__})
    return found


def run_every_loop() -> None:
    """A plan of prefill, decode, data-parallel and mixed pools with prefix hashes and failed
    transfers, and a chunked colocated pool of grouped ranks."""
    decode4 = wide(profile("a100-80gb", kv=6000), 4)
    profiles = {**PROFILES, decode4.key: decode4}
    pools = (pool("dw", "decode", dp=4, replicas=2), *HETEROGENEOUS["pools"],
             pool("mx", "mixed", policy="chunked", chunk_tokens=512))
    plan = Plan(pools=pools, default_link=HETEROGENEOUS["default_link"], failure_rate=0.3,
                failure_policy="recompute", spill_tokens=4000, kv_share=0.5)
    simulate(random_trace(3, n=60, rate_rps=12.0, hashes=True), plan, profiles, model=MODEL, seed=3)
    n = 40
    workload = {"arrival_s": np.linspace(0.0, 2.0, n), "prompt_tokens": np.full(n, 300),
                "output_tokens": np.full(n, 20)}
    simulate_pool(workload, grouped(2), phase="colocated", policy="chunked", chunk_tokens=256, replicas=2)


def test_no_kernel_is_compiled_for_a_literal_argument():
    run_every_loop()
    literal = {name: [str(sig) for sig in kernel.signatures if any(isinstance(t, types.Literal) for t in sig)]
               for name, kernel in kernels().items()}
    assert {name: sigs for name, sigs in literal.items() if sigs} == {}
