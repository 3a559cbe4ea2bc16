"""Wide expert parallelism: the MoE layer of one attention data-parallel rank, from AIConfigurator's
wide-EP tables.

An instance with attention data parallelism (DP) runs ``dp`` ranks, each with its own batch; every MoE
layer dispatches each rank's tokens to the GPUs holding their experts (expert parallelism, EP), runs
the experts and combines the results back. A composed profile of such an instance describes ONE rank
at its own batch, every rank carrying the same batch. Per MoE layer the rank's step is

    router + shared experts + dispatch + routed experts + combine

as AIConfigurator's large-EP MoE block sums it (``_large_ep_block_ops`` in
sdk/models/blocks/moe.py of aiconfigurator-core: router GEMM, shared-expert triplet, ``MoEAllToAll``
dispatch, ``MoEExpertCompute``, ``MoEAllToAll`` combine; TensorRT-LLM's decode runs the shared experts
beside the routed path, an ``OverlapOp``), with the tables read as it reads them:

* routed experts (``MoEExpertCompute``): the table's ``num_tokens`` is the tokens of the whole MoE
  group, the rank's tokens times DP ("``query(x=...)`` scales tokens by ``attention_dp_size``
  (attention DP globalizes tokens through the A2A dispatch)", sdk/operations/moe_comm.py), at
  ``moe_ep_size`` = EP and ``moe_tp_size`` = 1. SGLang: ``moe/sglang/<v>/wideep_{context,generation}_
  moe_perf`` (DeepEP normal and low-latency kernels); TensorRT-LLM: ``moe/trtllm/<v>/wideep_moe_perf``
  (``num_slots`` = experts without EPLB); vLLM: its ``moe_perf`` at that EP.
* dispatch and combine (``MoEAllToAll``): per-rank tokens ("Comm ops see per-rank token counts"),
  in the prefill divided by the attention TP for DeepEP (``attention_tp_size``), over
  ``node_num = ceil(EP / GPUs per node)`` nodes. SGLang: ``comm/sglang/<v>/wideep_deepep_normal_perf``
  (prefill, DeepEP normal mode at AIConfigurator's default 20 SMs, ``sms: int = 20`` in sdk/config.py)
  and ``wideep_deepep_ll_perf`` (decode, low latency); vLLM and TensorRT-LLM: ``comm/<engine>/<v>/
  moe_a2a_perf`` (DeepEP high-throughput for prefill, low-latency for decode; TensorRT-LLM's wire
  dtype as ``communication_dtype_for`` resolves it: bf16 for high-throughput of an fp8 model, fp8
  for low latency).
* shared experts: whole on every GPU (the engines' wide-EP placement, :mod:`pdplan.experts`); SGLang's
  measured ``mlp/sglang/<v>/wideep_{context,generation}_mlp_perf`` where it holds the model's width,
  else the GEMM table at full width.

Deliberate differences from AIConfigurator's graph: it emits SGLang's fused q_a/kv_a GEMM twice per layer
(``qkv_a_proj_gemm`` and ``downscale_gemm``) and strips SGLang's router GEMM; pdplan counts each once, as the
engine runs them, and keeps the logits GEMM and the TP all-reduces of :class:`~pdplan.latency.compose.step.Step`.

Redundant experts (EPLB) read the tables' rebalanced rows as AIConfigurator does
(:func:`eplb_distribution`). An EP the table did not measure but brackets (EP 8 between 4 and 16, DEP72 on
a GB200 NVL72 rack between 64 and 128) interpolates the routed experts in 1/EP between its neighbours
(:class:`BetweenEPs`, said in the profile's notes). A shape no table covers (an EP outside the measured
ones, a node count not measured, expert TP above 1, a model or precision not measured, EPLB on vLLM) is
refused with the reason, never extrapolated from another EP.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from pdplan.errors import PdplanError
from pdplan.latency.compose import moe, tables
from pdplan.latency.compose.tables import Extrapolated, Grid

#: DeepEP normal-mode SMs AIConfigurator assumes (``ModelConfig.sms = 20``, sdk/config.py).
DEEPEP_NORMAL_SMS = 20
PHASES = ("context", "generation")


def nodes_spanned(ep: int, gpus_per_node: int) -> int:
    """Nodes the EP group spans: AIConfigurator's ``nodes_for(moe_ep * moe_tp, gpus_per_node)``."""
    return -(-ep // gpus_per_node)


def table_distribution(engine: str, distribution: str) -> str:
    """The wide-EP tables' name for an expert load: SGLang's call a balanced load ``uniform``."""
    return "uniform" if engine == "sglang" and distribution == "balanced" else distribution


def _grid(frame, column: str, name: str) -> Grid:
    grid = Grid.from_frame(frame.loc[:, [column, "latency"]], (column,), name)
    grid.columns = ("tokens",)
    return grid


def _newest(system: str, engine: str, table: str, ceiling: str | None, pick) -> tuple[Grid, str] | None:
    """The newest version not above ``ceiling`` whose ``table`` ``pick`` finds rows in, as (grid, version)."""
    for version in moe.newest_not_above(system, engine, table, ceiling):
        grid = pick(version)
        if grid is not None:
            return grid, version
    return None


# --- routed experts ---------------------------------------------------------------------------------

def eplb_distribution(engine: str, distribution: str, phase: str) -> str:
    """The expert load the tables measure once EPLB has rebalanced the experts over redundant copies, as
    AIConfigurator reads them (``build_large_ep_moe_ops``, sdk/models/helpers.py: "sglang flattens the
    prefill alpha to 0.6 under EPLB ... while trtllm keeps the model alpha in both phases and marks EPLB
    with the ``_eplb`` suffix"). vLLM's tables measure no rebalanced load."""
    if not distribution.startswith("power_law_"):
        return distribution
    if engine == "trtllm":
        return f"{distribution}_eplb"
    if engine == "sglang":
        return "power_law_0.6" if phase == "context" else distribution
    raise PdplanError(f"no {engine} MoE table measures experts rebalanced over redundant copies (EPLB): "
                      "compose without redundant experts", field="redundant_experts")


#: SGLang's EPLB prefill token correction: "tokens become ``int(tokens * 0.8)`` before the table lookup
#: when the phase is context" and the kernel is SGLang's (``MoEExpertCompute``, sdk/operations/moe_comm.py).
SGLANG_EPLB_PREFILL_TOKENS = 0.8


@cache
def _compute_grid(system: str, engine: str, ceiling: str | None, config: moe.MoeConfig, phase: str,
                  ep: int, redundant: int = 0) -> tuple[Grid, str, str]:
    """The routed experts' latency over the MoE group's tokens at EP ``ep``, with ``redundant`` expert copies
    rebalanced by EPLB: (grid, table, version)."""
    dist = table_distribution(engine, config.distribution)
    if redundant:
        dist = eplb_distribution(engine, dist, phase)
    common = ["moe_dtype", "num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size",
              "moe_ep_size", "distribution", "latency"]
    if engine == "sglang":
        table, columns = f"wideep_{phase}_moe", common
    elif engine == "trtllm":
        table, columns = "wideep_moe", [*common, "num_slots", "op_name"]
    else:
        table, columns = "moe", common

    @cache  # read once per version: the exact search and the bracketing one both look
    def rows_of(version):
        frame = tables._read(system, engine, table, version, columns)
        rows = moe._model_rows(frame, config)
        rows = rows[(rows.distribution == dist) & (rows.moe_tp_size == 1)]
        if engine == "trtllm":   # EPLB rows: wideep_moe_eplb at num_slots = experts + redundant copies
            rows = rows[(rows.num_slots == config.experts + redundant)
                        & (rows.op_name == ("wideep_moe_eplb" if redundant else "wideep_moe"))]
        return rows

    def at(rows, e: int) -> Grid:
        return _grid(rows[rows.moe_ep_size == e], "num_tokens", f"wide-EP MoE {phase} at EP {e}")

    def measured(version):
        rows = rows_of(version)
        return at(rows, ep) if (rows.moe_ep_size == ep).any() else None

    def bracketed(version):
        rows = rows_of(version)
        eps = sorted({int(e) for e in rows.moe_ep_size})
        below, above = [e for e in eps if e < ep], [e for e in eps if e > ep]
        if not (below and above):
            return None
        return BetweenEPs.of(ep, at(rows, below[-1]), below[-1], at(rows, above[0]), above[0])

    # A measurement at this EP in any version before an interpolation in a newer one.
    found = _newest(system, engine, table, ceiling, measured) or _newest(system, engine, table, ceiling, bracketed)
    if found is None:
        copies = f" with {redundant} redundant experts ({dist})" if redundant else ""
        raise PdplanError(f"no {engine} {table.replace('_', ' ')} measurement on {system} for {config.text()} at "
                          f"EP {ep} (expert TP 1){copies}{_measured_eps(system, engine, table, ceiling, config)}",
                          field="ep")
    return found[0], table, found[1]


@dataclass(frozen=True)
class BetweenEPs:
    """The routed experts at an EP the table brackets but did not measure: the latencies of the nearest
    measured EPs below and above, at the same MoE-group tokens, weighted linearly in 1/EP. At a fixed group
    of tokens each GPU runs 1/EP of the routed work and holds 1/EP of the experts (the weights it reads), so
    its time is taken as affine in 1/EP between the two measurements; launch overheads stay as measured."""

    low: Grid
    high: Grid
    weight: float          #: of ``high``
    text: str

    @classmethod
    def of(cls, ep: int, low: Grid, low_ep: int, high: Grid, high_ep: int) -> "BetweenEPs":
        weight = (1 / ep - 1 / low_ep) / (1 / high_ep - 1 / low_ep)
        return cls(low=low, high=high, weight=weight,
                   text=f"EP {ep} interpolated in 1/EP between the measured EP {low_ep} and EP {high_ep}")

    def __call__(self, point: tuple[float, ...], log: Extrapolated) -> float:
        return (1 - self.weight) * self.low(point, log) + self.weight * self.high(point, log)


def _measured_eps(system, engine, table, ceiling, config) -> str:
    versions = moe.newest_not_above(system, engine, table, ceiling)
    if not versions:
        return f": no {table} table"
    frame = tables._read(system, engine, table, versions[0], ["moe_dtype", "hidden_size", "inter_size", "topk",
                                                              "num_experts", "moe_tp_size", "moe_ep_size"])
    rows = moe._model_rows(frame, config)
    eps = sorted({int(e) for e in rows[rows.moe_tp_size == 1].moe_ep_size})
    return f" (measured EPs: {', '.join(map(str, eps)) or 'none for this model'})"


# --- dispatch and combine -----------------------------------------------------------------------------

def a2a_dtypes(model) -> tuple[str, str]:
    """TensorRT-LLM's all-to-all wire dtype for (high-throughput, low-latency) DeepEP:
    ``communication_dtype_for`` in sdk/operations/moe_comm.py (fp8 and fp8_block models send bf16 over
    high-throughput and fp8 over low-latency; bf16 models bf16; nvfp4 models nvfp4)."""
    kind = moe.moe_dtype(model)
    if kind in ("fp8", "fp8_block"):
        return "bfloat16", "fp8"
    if kind == "nvfp4":
        return "nvfp4", "nvfp4"
    return "bfloat16", "bfloat16"


@cache
def _a2a_grids(system: str, engine: str, ceiling: str | None, model_key: tuple, phase: str, ep: int,
               nodes: int, wire: str) -> tuple[Grid, Grid, str, str]:
    """DeepEP's (dispatch, combine) latency over a rank's tokens, the table and its version."""
    hidden, topk, experts = model_key
    if engine == "sglang":
        if phase == "context":
            table = "wideep_deepep_normal"
            columns = ["node_num", "hidden_size", "num_token", "num_topk", "num_experts", "dispatch_sms",
                       "dispatch_transmit_us", "dispatch_notify_us", "combine_sms", "combine_transmit_us",
                       "combine_notify_us"]
        else:
            table = "wideep_deepep_ll"
            columns = ["node_num", "hidden_size", "num_token", "num_topk", "num_experts", "dispatch_avg_t_us",
                       "combine_avg_t_us"]

        def pick(version):
            frame = tables._read(system, engine, table, version, columns)
            rows = frame[(frame.node_num == nodes) & (frame.hidden_size == hidden) & (frame.num_topk == topk)
                         & (frame.num_experts == experts)]
            if phase == "context":
                rows = rows[(rows.dispatch_sms == DEEPEP_NORMAL_SMS) & (rows.combine_sms == DEEPEP_NORMAL_SMS)]
                us = {"dispatch": rows.dispatch_transmit_us + rows.dispatch_notify_us,
                      "combine": rows.combine_transmit_us + rows.combine_notify_us}
            else:
                us = {"dispatch": rows.dispatch_avg_t_us, "combine": rows.combine_avg_t_us}
            if rows.empty:
                return None
            return tuple(_grid(rows.assign(latency=us[p] / 1e3), "num_token", f"DeepEP {p}")
                         for p in ("dispatch", "combine"))
        where = f"over {nodes} node(s)"
    else:
        table = "moe_a2a"
        kind = "ht" if phase == "context" else "ll"
        backend = f"trtllm_deepep_{kind}" if engine == "trtllm" else f"deepep_{kind}"
        columns = ["comm_backend", "phase", "comm_dtype", "ep_size", "node_num", "hidden_size", "topk", "num_experts",
                   "num_tokens", "sms", "latency"]

        def pick(version):
            frame = tables._read(system, engine, table, version, columns)
            rows = frame[(frame.comm_backend == backend) & (frame.ep_size == ep) & (frame.node_num == nodes)
                         & (frame.hidden_size == hidden) & (frame.topk == topk) & (frame.num_experts == experts)
                         & (frame.comm_dtype == (wire if engine == "trtllm" else "default"))]
            if kind == "ht" and (rows.sms == DEEPEP_NORMAL_SMS).any():
                rows = rows[rows.sms == DEEPEP_NORMAL_SMS]
            grids = []
            for p in ("dispatch", "combine"):
                part = rows[rows.phase == p]
                if part.empty:
                    return None
                grids.append(_grid(part.assign(latency=part.latency / 1e3), "num_tokens", f"{backend} {p}"))
            return tuple(grids)
        where = f"over EP {ep} on {nodes} node(s)"
    found = _newest(system, engine, table, ceiling, pick)
    if found is None:
        raise PdplanError(f"no {engine} {table.replace('_', ' ')} all-to-all measured on {system} {where} for "
                          f"hidden {hidden}, top-{topk} of {experts} experts", field="ep")
    (dispatch, combine), version = found
    return dispatch, combine, table, version


@cache
def _nvlink_one_sided(system: str, ceiling: str | None, model_key: tuple, ep: int,
                      moe_dtype: str) -> tuple[Grid, Grid, str, str]:
    """TensorRT-LLM's NVLink one-sided dispatch and combine over a rank's tokens: what its CUTLASS and TRT-LLM-Gen MoE
    layers run on a multi-node NVLink fabric (``select_alltoall_method_type``: NVLinkOneSided under
    ``MnnvlMemory.supports_mnnvl()``), as AIConfigurator's ``_select_alltoall_kernel`` reads it, from its
    ``trtllm_alltoall`` table at the model's MoE dtype and EP (both phases; the kernel is one). Where the table holds
    another expert count than the model's at the same hidden size, top-k, dtype and EP, the nearest stands in
    (:func:`stand_in_experts`), named in the table label the provenance carries."""
    hidden, topk, experts = model_key
    columns = ["kernel_source", "op_name", "moe_dtype", "num_tokens", "hidden_size", "topk", "num_experts",
               "moe_ep_size", "latency"]

    def pick(version):
        frame = tables._read(system, "trtllm", "trtllm_alltoall", version, columns)
        rows = frame[(frame.kernel_source == "NVLinkOneSided") & (frame.moe_dtype == moe_dtype)
                     & (frame.moe_ep_size == ep) & (frame.hidden_size == hidden) & (frame.topk == topk)]
        measured = stand_in_experts(experts, rows.num_experts.unique())
        rows = rows[rows.num_experts == measured]
        grids = []
        for op in ("alltoall_dispatch", "alltoall_combine"):
            part = rows[rows.op_name == op]
            if part.empty:
                return None
            grids.append(_grid(part, "num_tokens", f"NVLink one-sided {op.split('_')[1]}"))
        label = ("trtllm_alltoall" if measured == experts
                 else f"trtllm_alltoall (measured for {measured} experts, standing in for {experts})")
        return (*grids, label)
    found = _newest(system, "trtllm", "trtllm_alltoall", ceiling, pick)
    if found is None:
        raise PdplanError(f"no trtllm NVLink one-sided all-to-all measured on {system} over EP {ep} for hidden "
                          f"{hidden}, top-{topk} of {experts} experts at {moe_dtype}", field="ep")
    (dispatch, combine, label), version = found
    return dispatch, combine, label, version


def stand_in_experts(experts: int, measured) -> int | None:
    """The expert count whose all-to-all stands in for ``experts``: itself when measured, else the nearest measured
    (None: none). An all-to-all moves each token's hidden state to the ranks of its top-k experts, so at one hidden
    size, top-k, dtype and EP the bytes do not depend on how many experts share the ranks; where AIConfigurator
    measured both, DeepEP's kernels over 384 and 256 experts at EP 4 on GB200 differ by −3% to +12% at the median per
    phase and dtype (its trtllm ``moe_a2a`` table, 1.3.0rc11: low-latency 0.97–1.02, high-throughput 1.08–1.12)."""
    counts = sorted(int(c) for c in measured)
    if not counts:
        return None
    return experts if experts in counts else min(counts, key=lambda c: (abs(c - experts), c))


# --- shared experts ------------------------------------------------------------------------------------

@cache
def _shared_grid(system: str, engine: str, ceiling: str | None, hidden: int, width: int, dtype: str,
                 phase: str) -> tuple[Grid, str] | None:
    """SGLang's measured whole shared-expert MLP over a GPU's tokens, when a table holds this width."""
    if engine != "sglang":
        return None
    table = f"wideep_{phase}_mlp"

    def pick(version):
        frame = tables._read(system, engine, table, version, ["quant_type", "num_token", "hidden_size",
                                                              "intermediate_size", "avg_ms"])
        rows = frame[(frame.quant_type == dtype) & (frame.hidden_size == hidden) & (frame.intermediate_size == width)]
        return None if rows.empty else _grid(rows.rename(columns={"avg_ms": "latency"}), "num_token",
                                             f"shared expert {phase}")
    return _newest(system, engine, table, ceiling, pick)


@cache
def wide_mla_grid(system: str, engine: str, ceiling: str | None, phase: str, dtype: str,
                  kv_dtype: str) -> tuple[Grid, str] | None:
    """SGLang's wide-EP latent-attention rows over (batch, length, local heads): the MLA block but its
    fused q_a/kv_a down-projection, which SGLang runs outside it (AIConfigurator's sglang large-EP
    DeepSeek graph: ``qkv_a_proj`` GEMM then ``WideEP{Context,Generation}MLA``, sdk/models/deepseek.py),
    with the FlashInfer backend AIConfigurator defaults to. None: no table for this engine or precision."""
    if engine != "sglang":
        return None
    table = f"wideep_{phase}_mla"

    def pick(version):
        frame = tables._read(system, engine, table, version, ["kernel_source", "mla_dtype", "kv_cache_dtype",
                                                              "num_heads", "batch_size", "isl", "latency"])
        rows = frame[(frame.mla_dtype == dtype) & (frame.kv_cache_dtype == tables.KV_DTYPES[kv_dtype])]
        if (rows.kernel_source == "flashinfer").any():
            rows = rows[rows.kernel_source == "flashinfer"]
        if rows.empty:
            return None
        transforms = (None, "square" if phase == "context" else None, None)
        return Grid.from_frame(rows.loc[:, ["batch_size", "isl", "num_heads", "latency"]],
                               ("batch_size", "isl", "num_heads"), f"wide-EP MLA {phase}", transforms)
    return _newest(system, engine, table, ceiling, pick)


# --- one rank's MoE layer --------------------------------------------------------------------------------

@dataclass
class RankExperts:
    """What one attention-DP rank's MoE layer is read for, whichever way the instance places its experts."""

    system: str
    engine: str
    ceiling: str | None   #: the engine version asked for (None: newest)
    model: object
    config: moe.MoeConfig
    tp: int
    dp: int


@dataclass
class WideExperts(RankExperts):
    """The routed experts, shared experts and all-to-all of one DP rank's MoE layer."""

    ep: int
    gpus_per_node: int
    redundant: int = 0   #: redundant expert copies EPLB rebalances the load over (0: none)
    fabric: bool = False  #: the GPUs' NVLink domain spans compute trays (:attr:`pdplan.hardware.GPU.nvlink_fabric`)

    def __post_init__(self):
        m = self.model
        split = self.tp * self.dp // self.ep
        if split != 1:
            raise PdplanError(f"the wide-EP tables measure whole experts per GPU (expert TP 1); TP {self.tp} × "
                              f"DP {self.dp} / EP {self.ep} = expert TP {split}", field="ep")
        self.nodes = nodes_spanned(self.ep, self.gpus_per_node)
        self.versions: dict[str, str] = {}
        self.compute, self.a2a, self.shared = {}, {}, {}
        ht, ll = a2a_dtypes(m)
        for phase in PHASES:
            grid, table, version = _compute_grid(self.system, self.engine, self.ceiling, self.config, phase, self.ep,
                                                 self.redundant)
            self.compute[phase] = grid
            self.versions[table] = version
            dispatch, combine, table, version = self._a2a(phase, ht if phase == "context" else ll)
            self.a2a[phase] = (dispatch, combine)
            self.versions[table] = version
            found = (_shared_grid(self.system, self.engine, self.ceiling, m.hidden, m.shared_experts * m.expert_ffn,
                                  moe.gemm_dtype(m), phase) if m.shared_experts else None)
            self.shared[phase] = found[0] if found else None
            if found:
                self.versions[f"wideep_{phase}_mlp"] = found[1]

    def _a2a(self, phase: str, wire: str) -> tuple[Grid, Grid, str, str]:
        """The dispatch and combine grids of ``phase``, their table and version: TensorRT-LLM's NVLink one-sided
        kernel on an NVLink fabric (one kernel for both phases), DeepEP's tables elsewhere."""
        m = self.model
        key = (m.hidden, m.experts_per_token, m.experts)
        if self.engine == "trtllm" and self.fabric:
            return _nvlink_one_sided(self.system, self.ceiling, key, self.ep, self.config.dtype)
        return _a2a_grids(self.system, self.engine, self.ceiling, key, phase, self.ep, self.nodes, wire)

    def ffn_rows(self, rows: float, prefill: bool) -> float:
        """Token rows one GPU's router, shared experts and dense MLPs run: in the prefill the rank's tokens
        are scattered over its attention TP (AIConfigurator's ``scale_num_tokens=tp_size`` on the large-EP
        context ops), in the decode every GPU runs them all."""
        return rows / self.tp if prefill else rows

    def routed_s(self, rows: float, prefill: bool, log: Extrapolated) -> float:
        """Dispatch, routed experts at DP × the rank's tokens, and combine, for ``rows`` rank tokens."""
        phase = "context" if prefill else "generation"
        a2a_rows = rows // self.tp if prefill and self.engine != "trtllm" else rows
        dispatch, combine = self.a2a[phase]
        return (dispatch((max(a2a_rows, 1),), log) + self.group_s(rows * self.dp, prefill, log)
                + combine((max(a2a_rows, 1),), log))

    def group_s(self, tokens: float, prefill: bool, log: Extrapolated) -> float:
        """The routed experts over ``tokens`` of the whole MoE group: the part of a rank's MoE layer that
        depends on every rank's tokens."""
        if self.redundant and prefill and self.engine == "sglang":
            tokens = int(tokens * SGLANG_EPLB_PREFILL_TOKENS)
        return self.compute["context" if prefill else "generation"]((tokens,), log)

    def shared_s(self, rows: float, prefill: bool, log: Extrapolated) -> float | None:
        """The whole shared experts' measured time, None when no table holds them."""
        grid = self.shared["context" if prefill else "generation"]
        return None if grid is None else grid((rows,), log)

    def note(self) -> str:
        tables_used = ", ".join(f"{t} {v}" for t, v in sorted(self.versions.items()))
        per_gpu = (self.model.experts + self.redundant) / self.ep
        load = moe.load_label(self.config.distribution)
        if self.redundant:
            rows = sorted({eplb_distribution(self.engine, self.config.distribution, p) for p in PHASES})
            correction = ", prefill tokens × 0.8" if self.engine == "sglang" else ""
            load = (f"{load} expert load rebalanced by EPLB over {self.redundant} redundant experts (the tables' "
                    f"{', '.join(rows)} rows{correction})")
        else:
            load = f"{load} expert load"
        between = "".join(f" ({phase}: {grid.text})" for phase, grid in self.compute.items()
                          if isinstance(grid, BetweenEPs))
        return (f"wide expert parallelism: one of {self.dp} attention data-parallel ranks at its own batch, every "
                f"rank carrying the same; routed experts whole over EP {self.ep} ({per_gpu:g} per GPU) from "
                f"AIConfigurator's wide-EP tables ({tables_used}){between} at a {load}, each MoE layer seeing "
                f"DP {self.dp} × the rank's tokens; dispatch and combine over {self.nodes} node(s); shared experts "
                "and dense MLPs whole on every GPU")
