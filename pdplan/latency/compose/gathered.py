"""Attention data parallelism over gathered tokens: the MoE layer of one DP rank when every rank's tokens
are gathered onto every GPU, which runs its part of the experts over all of them. The experts are either
split over all the instance's GPUs (EP 1, expert TP = TP × DP) or whole and spread over them (EP = TP ×
DP, moved by a gather instead of a dispatch: :class:`pdplan.vocabulary.AllToAll`).

The first is what the engines run with attention DP and no expert parallelism: SGLang's ``--tp N
--attn-dp-size N`` without ``--ep-size`` (expert TP = tp_size / ep_size, runtime_context.py
``derive_parallel_widths``), vLLM's ``--data-parallel-size`` without ``--enable-expert-parallel``
(its FusedMoE flattens TP across DP), TensorRT-LLM's attention DP with ``moe_tp_size`` = TP. The second
is what SGLang and vLLM run with expert parallelism and their default all-to-all: SGLang 0.5.23's
``--moe-a2a-backend`` "none" (``layers/dp_attention.py`` gathers the DP ranks' tokens around the MoE
layer) and vLLM 0.33.0's ``--all2all-backend`` "allgather_reducescatter" (``config/parallel.py``).
Every MoE layer gathers the ranks' tokens onto every GPU, runs its experts (or expert slices) on all of
them and scatters the summed results back to their ranks. Per MoE layer one rank's step is

    router + shared experts + gather + routed experts over DP × the rank's tokens + scatter

* routed experts: AIConfigurator's MoE table (``moe/<engine>/<v>/moe_perf``) at DP × the rank's tokens:
  at ``moe_ep_size`` 1 and expert width ``inter_size / (TP × DP)`` per GPU, or at ``moe_tp_size`` 1 and
  ``experts / (TP × DP)`` whole experts per GPU;
* gather and scatter: an all-gather and a reduce-scatter of the gathered tokens' hidden states over
  the TP × DP GPUs, the two halves of a ring all-reduce (Patarasuk and Yuan, "Bandwidth optimal
  all-reduce algorithms for clusters of workstations", JPDC 2009; NCCL's ring all-reduce is a
  reduce-scatter followed by an all-gather), so timed as one all-reduce of that size from the
  engine's all-reduce table. SGLang instead pads the ranks' tokens into one buffer of their sum,
  gathers it with an all-reduce and combines with another (``DpPaddingMode.SUM_LEN``, which it takes
  for every prompt batch over several ranks and for decode batches its custom all-reduce holds), so
  SGLang's is timed as two (:func:`exchange_all_reduces`); a decode batch past that buffer takes
  ``MAX_LEN``, an all-gather and a reduce-scatter, for which two all-reduces are an upper bound.
  TensorRT-LLM calls NCCL's own all-gather and reduce-scatter (``allgather`` and ``reducescatter`` of
  ``tensorrt_llm/_torch/distributed``, from its CUTLASS and TRT-LLM-Gen MoE layers when they run no
  all-to-all), so its pair is timed from AIConfigurator's NCCL table, as its own estimator times that path
  (``MoEDispatch``): the all-gather of the ranks' activations at the precision its MoE quantizes them to
  before the gather (:func:`gathered_bytes_per_value`), the reduce-scatter of their bf16 results. A group
  the table did not measure is refused;
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
    """The tables of one attention-DP rank's MoE layers over the gathered tokens of the TP × DP GPUs: every expert
    split over them (``ep`` 1) or whole experts spread over them (``ep`` = TP × DP)."""

    all_reduce_version: str | None
    ep: int = 1
    nvlink_domain: int = 8  #: GPUs in the instance's NVLink domain, which an all-reduce is derived within

    def __post_init__(self):
        self.group = self.tp * self.dp
        self.whole = self.ep == self.group > 1
        if self.ep != 1 and not self.whole:
            raise PdplanError(f"gathered tokens reach experts split over TP {self.tp} × DP {self.dp} = {self.group} "
                              f"GPUs (EP 1) or whole over them (EP {self.group}), not EP {self.ep}", field="ep")
        if self.whole and self.model.experts % self.group:
            raise PdplanError(f"EP {self.group} does not divide the {self.model.experts} routed experts", field="ep")
        if not self.whole and self.model.expert_ffn % self.group:
            raise PdplanError(f"TP {self.tp} × DP {self.dp} = {self.group} GPUs do not divide the expert width "
                              f"{self.model.expert_ffn}", field="dp")
        self.compute, moe_version, self.kernels = moe.moe_grid(self.system, self.engine, self.ceiling, self.config,
                                                               expert_parallel=self.whole)
        self.versions = {"moe": moe_version}
        self.exchange = (self._nccl_exchange() if self.engine == "trtllm" else self._all_reduce_exchange())

    def _unmeasured(self, what: str, sizes) -> PdplanError:
        experts = "whole experts" if self.whole else "tensor-parallel experts"
        field = "all_to_all" if self.whole else "dp"  # whole experts could be dispatched to instead
        instead = "a dispatch (DeepEP, a P/D pool across nodes)" if self.whole else "expert parallelism (EP = TP × DP)"
        measured = f" (measured: {', '.join(map(str, sizes))}): use {instead}" if sizes else ""
        return PdplanError(f"no {what} measured over {self.group} GPUs on {self.system} to gather DP {self.dp} ranks' "
                           f"tokens for their {experts}{measured}", field=field)

    def _all_reduce_exchange(self):
        """The gather and scatter as :func:`exchange_all_reduces` all-reduces of the gathered tokens."""
        found = tables.all_reduce(self.system, self.engine, self.all_reduce_version, self.group, self.nvlink_domain)
        if found is None:
            raise self._unmeasured(f"{self.engine} all-reduce",
                                   tables.all_reduce_sizes(self.system, self.engine, self.all_reduce_version))
        self.versions[found.table] = found.version
        self.all_reduce = found
        count = exchange_all_reduces(self.engine)
        return lambda values, log: count * found(values, log)

    def _nccl_exchange(self):
        """TensorRT-LLM's NCCL all-gather of the ranks' activations and reduce-scatter of their bf16 results."""
        gather, scatter = (tables.nccl_collective(self.system, op, "half", self.group, self.nvlink_domain)
                           for op in ("all_gather", "reduce_scatter"))
        if gather is None or scatter is None:
            found = tables.nccl_grid(self.system, "all_gather", "half")
            raise self._unmeasured("NCCL all-gather and reduce-scatter",
                                   tables.measured_group_sizes(found[0]) if found else ())
        self.versions["nccl"] = gather.version
        wire = gathered_bytes_per_value(self.config.dtype) / 2   # in the table's half-precision elements

        def exchange(values: float, log: Extrapolated) -> float:
            return gather(values * wire, log) + scatter(values, log)
        return exchange

    def ffn_rows(self, rows: float, prefill: bool) -> float:
        """Token rows one GPU's router, shared experts and dense MLPs run: the rank's own."""
        return rows

    def routed_s(self, rows: float, prefill: bool, log: Extrapolated) -> float:
        """Gather, every expert's 1/(TP × DP) slice over DP × the rank's tokens, and scatter."""
        return self.group_s(rows * self.dp, prefill, log)

    def group_s(self, tokens: float, prefill: bool, log: Extrapolated) -> float:
        """Gather, the experts and scatter over ``tokens`` of the whole instance: all of the layer that depends on
        every rank's tokens."""
        per_gpu = (self.model.experts if self.whole else self.model.expert_ffn) / self.group
        return self.compute((tokens, per_gpu), log) + self.exchange(tokens * self.model.hidden, log)

    def shared_s(self, rows: float, prefill: bool, log: Extrapolated) -> float | None:
        """No measured table for whole shared experts here: the caller times them from the GEMM table."""
        return None

    def note(self) -> str:
        load = moe.load_label(self.config.distribution)
        experts = (f"{self.model.experts // self.group} whole routed experts per GPU of TP {self.tp} × DP {self.dp} "
                   f"= EP {self.group}" if self.whole else
                   f"every routed expert split over TP {self.tp} × DP {self.dp} = {self.group} GPUs")
        if self.engine == "trtllm":
            timed = (f"NCCL's all-gather of them at {gathered_bytes_per_value(self.config.dtype):g} bytes a value and "
                     f"reduce-scatter of their bf16 results over {self.group} GPUs (NCCL {self.versions['nccl']}, "
                     "as TensorRT-LLM's MoE runs without an all-to-all)")
        else:
            exchanges = exchange_all_reduces(self.engine)
            timed = (f"{'one all-reduce' if exchanges == 1 else f'{exchanges} all-reduces'} of those tokens over "
                     f"{self.group} GPUs ({self.all_reduce.label()})")
        return (f"attention data parallelism over gathered tokens: one of {self.dp} ranks at its own batch, every "
                f"rank carrying the same; {experts} from AIConfigurator's MoE table (moe {self.versions['moe']}, "
                f"{moe.kernel_label(self.kernels)}) at a {load} expert load and DP {self.dp} × the rank's tokens; "
                f"gather and scatter timed as {timed}; shared experts and dense MLPs whole on every GPU")


def exchange_all_reduces(engine: str) -> int:
    """All-reduces of the gathered tokens one MoE layer's gather and scatter cost (module docstring): SGLang's
    sum-length padding gathers with one and combines with another (``python/sglang/srt/layers/dp_attention.py``,
    ``DpPaddingMode.SUM_LEN``); an all-gather and a reduce-scatter are the two halves of one (Patarasuk and Yuan,
    JPDC 2009)."""
    return 2 if engine == "sglang" else 1


#: Bytes one gathered activation value crosses TensorRT-LLM's all-gather in, by the MoE table's dtype: its CUTLASS
#: and TRT-LLM-Gen MoE layers quantize before the gather (``quantize_input(post_quant_comm=True)``, or the CUTLASS
#: ``forward_chunk`` of older releases) an NVFP4 model's activations to FP4 with one FP8 scale per 16 values, a
#: per-tensor FP8 model's to FP8 and an MXFP4 × MXFP8 model's to MXFP8 with one scale per 32; FP8 block scales and
#: the rest gather bf16 (fp8_quantize_1x128 runs after the gather).
GATHERED_BYTES = {"nvfp4": 0.5 + 1 / 16, "fp8": 1.0, "w4a8_mxfp4_mxfp8": 1.0 + 1 / 32}


def gathered_bytes_per_value(moe_dtype: str) -> float:
    """Bytes one activation value takes in TensorRT-LLM's all-gather of a model whose MoE table dtype is
    ``moe_dtype`` (:data:`GATHERED_BYTES`; bf16 otherwise)."""
    return GATHERED_BYTES.get(moe_dtype, 2.0)
