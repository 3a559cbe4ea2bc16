"""What ``pdplan optimize`` decides from, in one frozen object."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pdplan import engines, limits
from pdplan.candidates import DEFAULT_CHUNKS, DEFAULT_DPS, DEFAULT_PPS, DEFAULT_TPS
from pdplan.errors import PdplanError
from pdplan.goodput import DEFAULT_ADMISSION_SHARE, DEFAULT_SEED, SearchSettings, check_admission_share
from pdplan.hardware import Cluster
from pdplan.latency.source import ProfileSource
from pdplan.modelspec import ModelSpec
from pdplan.placement import ANY, POOL_SHAPES, REDUNDANCY, Fleet
from pdplan.planner.plans import Spill
from pdplan.slo import SLO
from pdplan.verify import DEFAULT_MIN_RUN_S, DEFAULT_RUNS, RULES
from pdplan.vocabulary import (
    Affinity,
    Connector,
    FailurePolicy,
    Mode,
    Objective,
    PoolShapes,
    Redundancy,
    Router,
    Rule,
    TransferSchedule,
)
from pdplan.workload import Workload

#: End-to-end checks one search (a fleet, mode and affinity) may run.
DEFAULT_MAX_CHECKS = 24


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """The files a plan was made from, as the user named them (paths are recorded as given, so a
    manifest does not depend on the machine's folder layout)."""

    trace: Path
    cluster: Path | None = None          #: None: the shipped example cluster
    profiles: tuple[Path, ...] = ()
    model: Path | None = None            #: a model YAML, when the model is not from the catalog


@dataclass(frozen=True, kw_only=True)
class PlanRequest:
    """Everything ``pdplan optimize`` decides from."""

    workload: Workload
    model: ModelSpec
    cluster: Cluster
    profiles: ProfileSource             #: measured, else composed, else roofline, per shape
    slo: SLO
    target_rps: float | None            #: None with objective goodput
    fleets: tuple[Fleet, ...] = (ANY,)
    objective: Objective = Objective.COST
    affinity: Affinity = Affinity.AUTO
    settings: SearchSettings = field(default_factory=SearchSettings)
    admission_share: float = DEFAULT_ADMISSION_SHARE
    link_headroom: float = 0.8
    max_gpus: int | None = None
    max_usd_per_hour: float | None = None
    max_power_w: float | None = None
    time_limit_s: float = 10.0
    max_checks: int = DEFAULT_MAX_CHECKS  #: end-to-end checks per fleet, mode and affinity
    runs: int = DEFAULT_RUNS            #: verification runs (seeds) per check
    rule: Rule = Rule.LOWER             #: pass when the interval's lower end or mean meets the target
    min_run_s: float = DEFAULT_MIN_RUN_S  #: a verification run lasts at least this long (short traces repeat)
    redundancy: Redundancy = Redundancy.NONE  #: instance or node: the plan must survive losing one
    pool_shapes: PoolShapes = PoolShapes.ONE
    tps: tuple[int, ...] = DEFAULT_TPS
    pps: tuple[int, ...] = DEFAULT_PPS
    dps: tuple[int, ...] = DEFAULT_DPS  #: attention data-parallel sizes; above 1, a MoE model's wide shapes
    #: expert slots beyond the model's on every wide shape, which EPLB rebalances the load over (SGLang
    #: ``--ep-num-redundant-experts``, vLLM EPLB's ``num_redundant_experts``); 0: none
    redundant_experts: int = 0
    chunk_sizes: tuple[int, ...] = DEFAULT_CHUNKS
    #: when the KV leaves the prefill: after it, as every engine the exports start sends it (vLLM's NIXL and Mooncake
    #: connectors once the prompt's request finishes, SGLang each chunk after its forward); ``layer`` streams it
    #: beside the prefill, which none of them is started to do
    transfer_schedule: TransferSchedule = TransferSchedule.REQUEST
    failure_rate: float = 0.0           #: probability that one KV transfer attempt fails (simulated)
    failure_policy: FailurePolicy = FailurePolicy.RETRY
    route_s: float = 0.0                #: the router's hop from prefill to decode (simulated)
    router: Router = Router.LEAST_LOADED  #: how the verified plans route arrivals to prefill instances
    early_rejection: bool = False       #: the verified P/D plans reject arrivals predicted to miss the TTFT
    mode: Mode = Mode.AUTO              #: the answer's mode: the better of both, or the one asked for
    connector: Connector = Connector.NIXL  #: the KV connector the plan's engine (profiles.engine) runs
    mixed: bool = False                 #: P/D plans may add Splitwise's mixed machines (a third capacity)
    mixed_max: int = 8                  #: mixed instances a plan may add at most
    spill: Spill = Spill()              #: when work spills to mixed machines (or borrowed ones)
    #: P/D plans are also searched with Splitwise's borrowing: dedicated machines lent to the other phase
    borrow: bool = False
    seed: int = DEFAULT_SEED            #: the run's seed: every draw (probes, verification runs, CP-SAT)
    jobs: int = 1                       #: processes the per-shape stages run on (pdplan.parallel)
    inputs: Inputs | None = None        #: the files read, which manifests record (None: built in memory)

    def __post_init__(self):
        if self.mode not in tuple(Mode):
            raise PdplanError(f"--mode must be one of {', '.join(Mode)}, got {self.mode!r}", field="mode")
        if self.affinity not in tuple(Affinity):
            raise PdplanError(f"--affinity must be one of {', '.join(Affinity)}, got {self.affinity!r}",
                              field="affinity")
        if self.max_checks < 1:
            raise PdplanError(f"--max-rounds must be >= 1, got {self.max_checks!r}", field="max_rounds")
        if self.runs < 1:
            raise PdplanError(f"--seeds must be >= 1, got {self.runs!r}", field="seeds")
        if self.rule not in RULES:
            raise PdplanError(f"--verify-rule must be one of {', '.join(RULES)}, got {self.rule!r}",
                              field="verify_rule")
        if self.redundancy not in REDUNDANCY:
            raise PdplanError(f"--redundancy must be one of {', '.join(REDUNDANCY)}, got {self.redundancy!r}",
                              field="redundancy")
        if self.pool_shapes not in POOL_SHAPES:
            raise PdplanError(f"--pool-shapes must be one of {', '.join(POOL_SHAPES)}, got {self.pool_shapes!r}",
                              field="pool_shapes")
        if self.mixed and self.affinity == "low":
            raise PdplanError("--mixed adds machines that take handoffs across nodes; it needs --affinity high "
                              "or auto", field="mixed")
        if self.borrow and self.affinity == "low":
            raise PdplanError("--borrow lends machines that then take handoffs across nodes; it needs --affinity "
                              "high or auto", field="borrow")
        check_admission_share(self.admission_share)
        if not 0 <= self.redundant_experts <= limits.MAX_GPUS:
            raise PdplanError(f"--redundant-experts must be in [0, {limits.MAX_GPUS}], got {self.redundant_experts!r}",
                              field="redundant_experts")
        if self.redundant_experts and (not self.model.is_moe or max(self.dps) < 2):
            raise PdplanError(f"--redundant-experts {self.redundant_experts} adds expert slots to wide shapes, which "
                              "a mixture-of-experts model gets with --dp above 1", field="redundant_experts")
        engine = self.profiles.serving_engine
        unloaded = engines.weights_refusal(engine, self.model.weight_dtype)
        if unloaded:
            raise PdplanError(f"{self.model.name} at --engine {engine}: {unloaded}", field="engine")

    @property
    def affinities(self) -> tuple[Affinity, ...]:
        return (Affinity.HIGH, Affinity.LOW) if self.affinity == Affinity.AUTO else (self.affinity,)
