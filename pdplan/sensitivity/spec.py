"""A grid specification: the base inputs (trace, model, cluster, SLO) and the dimensions to vary.

File format (``examples/grid.yaml``)::

    pdplan_grid: 1                  # format version
    trace: ../traces/chat_poisson_2k.csv   # paths are relative to this file
    model: llama2-70b               # catalog name or a model YAML
    cluster: cluster.yaml           # optional; default the shipped example cluster
    profiles: my-profiles/          # optional: measured profiles (else composed, else roofline)
    slo: {ttft_ms: 1000, tpot_ms: 100, attainment: 0.9}   # optional; these are the defaults
    target_rate: 2.5                # optional req/s; default the trace's mean rate
    fleet: any                      # optional; as optimize --fleet
    affinity: high                  # optional; high (handoffs cross nodes, default) | low | auto
    failure_policy: retry           # optional; retry | recompute
    router: least-loaded            # optional; least-loaded | round-robin | cache-aware (prefill routing)
    seeds: 3                        # optional; verification runs per check
    max_rounds: 8                   # optional; end-to-end checks per fleet, mode and affinity
    seed: 0
    vary:                           # one list per dimension; cells are every combination
      bandwidth: [1, 10, 100]
      prompt_scale: [0.5, 1, 2]

``--vary NAME=v1,v2`` on the command line adds a dimension or replaces the file's list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import load_yaml
from pdplan.latency.profile import profile_inputs
from pdplan.modelref import model_file
from pdplan.modelspec import DEFAULT_MODEL
from pdplan.schema import Fields, bound
from pdplan.slo import DEFAULT_ATTAINMENT, DEFAULT_TPOT_S, DEFAULT_TTFT_S
from pdplan.verify import DEFAULT_RUNS
from pdplan.vocabulary import Affinity, FailurePolicy, Router

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Dimension:
    """One coordinate a grid may vary: its meaning, unit and allowed values."""

    name: str
    help: str
    unit: str
    low: float | None = None        #: numeric dimensions: smallest allowed value
    high: float | None = None       #: and largest
    above: bool = False             #: the low end is excluded
    text: bool = False              #: values are names (GPU types), not numbers

    def show(self, value: float | str) -> str:
        """A value as people read it: ``10 GB/s``, ``2×``, ``0.1``, ``h100-80gb``."""
        if self.text:
            return str(value)
        if self.unit == "×":
            return f"{value:g}×"
        return f"{value:g} {self.unit}" if self.unit in ("GB/s", "req/s", "ms") else f"{value:g}"

    def parse(self, value: object, where: Callable[[str], PdplanError]) -> float | str:
        """A value of this dimension, or ``where(rule)``'s error naming the dimension."""
        if self.text:
            if not isinstance(value, str) or not value:
                raise where(f"takes GPU type names, got {value!r}")
            return value
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                raise where(f"takes numbers ({self.unit}), got {value!r}") from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise where(f"takes numbers ({self.unit}), got {value!r}")
        if value < self.low or (self.above and value == self.low) or value > self.high:
            opening = "(" if self.above else "["
            raise where(f"values must be in {opening}{bound(self.low)}, {bound(self.high)}], got {value!r}")
        return float(value)


DIMENSIONS = {d.name: d for d in (
    Dimension("bandwidth", "KV link bandwidth per GPU across nodes (the cluster's inter-node path)", "GB/s",
              limits.MIN_BANDWIDTH_GB_S, limits.MAX_BANDWIDTH_GB_S),
    Dimension("prompt_scale", "every prompt length times this (rounded, at least 1 token)", "×", 0, 100, above=True),
    Dimension("output_scale", "every output length times this (rounded, at least 1 token)", "×", 0, 100, above=True),
    Dimension("rate", "target rate the plans must serve", "req/s", 0, limits.MAX_RATE_RPS, above=True),
    Dimension("burstiness", "interarrival CV: Gamma arrival gaps at the target rate (1 = Poisson)", "CV",
              0, 20, above=True),
    Dimension("prefix_hit", "share of each prompt's leading blocks shared with earlier requests, which an "
              "instance's prefix cache then need not prefill (or receive, at decode)", "fraction", 0, 1),
    Dimension("failure_rate", "probability that one KV transfer attempt fails (then retried or recomputed)",
              "fraction", 0, 0.5),
    Dimension("route_ms", "the router's hop from prefill to decode", "ms", 0, 10_000),
    Dimension("ttft_scale", "every TTFT threshold times this", "×", 0, 100, above=True),
    Dimension("tpot_scale", "every TPOT threshold times this", "×", 0, 100, above=True),
    Dimension("gpu", "only this GPU type's nodes (their power-capped settings included)", "name", text=True),
    Dimension("price_ratio", "price per GPU-hour of every other GPU type relative to the first node type's",
              "×", 0, 100, above=True),
)}

DEFAULT_SLO = {"ttft_ms": DEFAULT_TTFT_S * 1e3, "tpot_ms": DEFAULT_TPOT_S * 1e3, "attainment": DEFAULT_ATTAINMENT}
AFFINITIES = tuple(Affinity)
FAILURE_POLICIES = tuple(FailurePolicy)
#: End-to-end checks per search in a grid cell: fewer than optimize's, since a grid runs many.
DEFAULT_GRID_ROUNDS = 8


@dataclass(frozen=True, kw_only=True)
class GridSpec:
    """Base inputs and the dimensions a grid varies, validated."""

    trace: Path | None = None           #: required by the time a grid runs (file or --trace)
    model: str = DEFAULT_MODEL
    cluster: Path | None = None
    profiles: Path | None = None
    slo: dict = field(default_factory=lambda: dict(DEFAULT_SLO))  #: ttft_ms, tpot_ms, attainment
    target_rate: float | None = None
    fleet: str = "any"
    affinity: Affinity = Affinity.HIGH
    failure_policy: FailurePolicy = FailurePolicy.RETRY
    router: Router = Router.LEAST_LOADED
    seeds: int = DEFAULT_RUNS           #: verification runs per check, as optimize's
    max_rounds: int = DEFAULT_GRID_ROUNDS
    seed: int = 0
    dimensions: tuple[tuple[str, tuple], ...] = ()   #: (name, values) in the order given

    def __post_init__(self) -> None:
        if self.cells > limits.MAX_GRID_CELLS:  # refused before a list of every cell is built
            sizes = " × ".join(f"{len(values):,} {name}" for name, values in self.dimensions)
            raise PdplanError(f"vary: the grid has {self.cells:,} cells ({sizes}); at most {limits.MAX_GRID_CELLS:,} "
                              "(vary fewer values)", field="vary")

    @property
    def cells(self) -> int:
        return math.prod(len(values) for _, values in self.dimensions)

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file the grid reads (trace, cluster, profiles, a model YAML): no output may be one."""
        return tuple(p for p in (self.trace, self.cluster, *profile_inputs(self.profiles), model_file(self.model))
                     if p is not None)


def dimension_values(name: str, values: list, where: Callable[[str], PdplanError]) -> tuple:
    """Validated values of dimension ``name``; errors name the dimension."""
    if name not in DIMENSIONS:
        raise where(f"is not a dimension (known: {', '.join(DIMENSIONS)})")
    if not isinstance(values, list) or not values:
        raise where("needs a non-empty list of values")
    parsed = tuple(DIMENSIONS[name].parse(v, where) for v in values)
    if len(set(parsed)) != len(parsed):
        raise where(f"repeats a value: {', '.join(map(str, values))}")
    return parsed


def parse_vary(text: str) -> tuple[str, tuple]:
    """``NAME=v1,v2,…`` from ``--vary``."""
    def where(rule: str) -> PdplanError:
        return PdplanError(f"--vary {name}: {rule}", field=f"vary.{name}")

    name, sep, values = text.partition("=")
    name = name.strip()
    if not sep or not name:
        raise PdplanError(f"--vary must read NAME=v1,v2,…, got {text!r}", field="vary")
    items = [v.strip() for v in values.split(",")] if values.strip() else []
    return name, dimension_values(name, items, where)


def load_spec(path: Path) -> GridSpec:
    """A grid file, every field checked; paths resolve against the file's folder."""
    top = Fields(load_yaml(path, what="grid spec"), path)
    top.reject_unknown({"pdplan_grid", "trace", "model", "cluster", "profiles", "slo", "target_rate", "fleet",
                        "affinity", "failure_policy", "router", "seeds", "max_rounds", "seed", "vary"})
    if top.integer("pdplan_grid") != FORMAT_VERSION:
        raise top.fail("pdplan_grid", f"must be {FORMAT_VERSION}", top.data["pdplan_grid"])
    folder = Path(path).parent

    def file(key: str) -> Path | None:
        return folder / top.string(key) if top.has(key) else None

    slo = dict(DEFAULT_SLO)
    if top.has("slo"):
        spec = top.mapping("slo")
        spec.reject_unknown(set(DEFAULT_SLO))
        slo = {"ttft_ms": spec.number("ttft_ms", DEFAULT_SLO["ttft_ms"], minimum=0, exclusive=True),
               "tpot_ms": spec.number("tpot_ms", DEFAULT_SLO["tpot_ms"], minimum=0, exclusive=True),
               "attainment": spec.number("attainment", DEFAULT_SLO["attainment"], minimum=0, exclusive=True,
                                         maximum=1)}
    dimensions = []
    if top.has("vary"):
        vary = top.mapping("vary")
        for name in vary.data:
            dimensions.append((str(name), dimension_values(str(name), vary.data[name],
                                                           lambda rule, n=name: vary.fail(str(n), rule,
                                                                                          show_value=False))))
    model = top.string("model", GridSpec.model)
    return GridSpec(
        trace=file("trace"),
        model=str(folder / model) if model.endswith((".yaml", ".yml")) else model,
        cluster=file("cluster"), profiles=file("profiles"), slo=slo,
        target_rate=top.number("target_rate", minimum=0, exclusive=True, maximum=limits.MAX_RATE_RPS)
        if top.has("target_rate") else None,
        fleet=top.string("fleet", GridSpec.fleet),
        affinity=Affinity(top.string("affinity", GridSpec.affinity, choices=list(AFFINITIES))),
        failure_policy=FailurePolicy(top.string("failure_policy", GridSpec.failure_policy,
                                                choices=list(FAILURE_POLICIES))),
        router=Router(top.string("router", GridSpec.router, choices=list(Router))),
        seeds=top.integer("seeds", GridSpec.seeds, minimum=1, maximum=limits.MAX_RUNS),
        max_rounds=top.integer("max_rounds", GridSpec.max_rounds, minimum=1, maximum=limits.MAX_CHECKS),
        seed=top.integer("seed", GridSpec.seed, minimum=0, maximum=limits.MAX_SEED), dimensions=tuple(dimensions))


def with_vary(spec: GridSpec, varied: list[tuple[str, tuple]]) -> GridSpec:
    """``spec`` with each ``--vary`` dimension added, or replacing the file's list of that name."""
    dims = dict(spec.dimensions)
    for name, values in varied:
        dims[name] = values
    return replace(spec, dimensions=tuple(dims.items()))
