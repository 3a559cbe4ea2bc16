"""Attention data parallelism over tensor-parallel experts: the MoE layer of one DP rank when the
instance splits every expert over all its GPUs instead of placing whole experts (EP 1, expert TP =
TP × DP).

This is what the engines run with attention DP and no expert parallelism: SGLang's ``--tp N
--attn-dp-size N`` without ``--ep-size`` (expert TP = tp_size / ep_size, runtime_context.py
``derive_parallel_widths``), vLLM's ``--data-parallel-size`` without ``--enable-expert-parallel``
(its FusedMoE flattens TP across DP), TensorRT-LLM's attention DP with ``moe_tp_size`` = TP. Every
MoE layer gathers the ranks' tokens onto every GPU, runs each expert's 1/(TP × DP) slice on all of
them and scatters the summed results back to their ranks. Per MoE layer one rank's step is

    router + shared experts + gather + routed experts over DP × the rank's tokens + scatter

* routed experts: AIConfigurator's MoE table (``moe/<engine>/<v>/moe_perf``) at ``moe_ep_size`` 1 and
  expert width ``inter_size / (TP × DP)`` per GPU, at DP × the rank's tokens;
* gather and scatter: an all-gather and a reduce-scatter of the gathered tokens' hidden states over
  the TP × DP GPUs, the two halves of a ring all-reduce (Patarasuk and Yuan, "Bandwidth optimal
  all-reduce algorithms for clusters of workstations", JPDC 2009; NCCL's ring all-reduce is a
  reduce-scatter followed by an all-gather), so timed as one all-reduce of that size from the
  engine's all-reduce table. A group the table did not measure is refused;
* shared experts and dense MLPs: whole on every GPU at the rank's own tokens, as with wide expert
  parallelism (TensorRT-LLM's ``_compute_shared_expert_tp_size`` gives the shared experts TP 1 under
  attention DP; :data:`pdplan.experts.DP_REPLICATES_DENSE` sizes memory the same way).
"""

from __future__ import annotations

from dataclasses import dataclass

from pdplan.errors import PdplanError
from pdplan.latency.compose import moe, tables
from pdplan.latency.compose.tables import Extrapolated
from pdplan.latency.compose.wide import RankExperts


@dataclass
class GatheredExperts(RankExperts):
    """The tables of one attention-DP rank's MoE layers with every expert split over the TP × DP GPUs."""

    all_reduce_version: str | None

    def __post_init__(self):
        self.group = self.tp * self.dp
        if self.model.expert_ffn % self.group:
            raise PdplanError(f"TP {self.tp} × DP {self.dp} = {self.group} GPUs do not divide the expert width "
                              f"{self.model.expert_ffn}", field="dp")
        self.compute, moe_version, self.kernels = moe.moe_grid(self.system, self.engine, self.ceiling, self.config,
                                                               expert_parallel=False)
        if self.all_reduce_version is None:
            raise PdplanError(f"no {self.engine} all-reduce measurements on {self.system} to gather DP {self.dp} "
                              "ranks' tokens for their tensor-parallel experts", field="dp")
        self.all_reduce = tables.all_reduce_grid(self.system, self.engine, self.all_reduce_version)
        sizes = tables.measured_group_sizes(self.all_reduce)
        if self.group not in sizes:
            raise PdplanError(f"no {self.engine} all-reduce measured over {self.group} GPUs on {self.system} to "
                              f"gather DP {self.dp} ranks' tokens for their tensor-parallel experts (measured: "
                              f"{', '.join(map(str, sizes))}): use expert parallelism (EP = TP × DP)", field="dp")
        self.versions = {"moe": moe_version, "all_reduce": self.all_reduce_version}

    def ffn_rows(self, rows: float, prefill: bool) -> float:
        """Token rows one GPU's router, shared experts and dense MLPs run: the rank's own."""
        return rows

    def routed_s(self, rows: float, prefill: bool, log: Extrapolated) -> float:
        """Gather, every expert's 1/(TP × DP) slice over DP × the rank's tokens, and scatter."""
        return self.group_s(rows * self.dp, prefill, log)

    def group_s(self, tokens: float, prefill: bool, log: Extrapolated) -> float:
        """Gather, the split experts and scatter over ``tokens`` of the whole instance: all of the layer that
        depends on every rank's tokens."""
        width = self.model.expert_ffn / self.group
        exchange = self.all_reduce((tokens * self.model.hidden, self.group), log)
        return self.compute((tokens, width), log) + exchange

    def shared_s(self, rows: float, prefill: bool, log: Extrapolated) -> float | None:
        """No measured table for whole shared experts here: the caller times them from the GEMM table."""
        return None

    def note(self) -> str:
        load = moe.load_label(self.config.distribution)
        return (f"attention data parallelism over tensor-parallel experts: one of {self.dp} ranks at its own "
                f"batch, every rank carrying the same; every routed expert split over TP {self.tp} × DP {self.dp} "
                f"= {self.group} GPUs from AIConfigurator's MoE table (moe {self.versions['moe']}, "
                f"{moe.kernel_label(self.kernels)}) at a {load} "
                f"expert load and DP {self.dp} × the rank's tokens; gather and scatter timed as one all-reduce of "
                f"those tokens over {self.group} GPUs (all_reduce {self.versions['all_reduce']}); shared experts "
                "and dense MLPs whole on every GPU")
