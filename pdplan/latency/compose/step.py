"""One engine step of a dense decoder, summed from measured operators.

A step is the operator list AIConfigurator's LLaMA model runs, per layer: add+norm, the QKV
GEMM, attention, the output projection, add+norm, the gate/up GEMM, the activation, the down
GEMM and two TP all-reduces; once per step the embedding (and its all-reduce) and the logits
GEMM; and pp − 1 pipeline hops. GEMMs, attention and all-reduces come from the measured tables
(:mod:`pdplan.latency.compose.tables`); the memory-bound element-wise kernels and the pipeline hops use
AIConfigurator's analytic formulas with its system constants (bytes / (bandwidth × its
empirical factor) + its constant latency). A PP instance is timed as one batch through every
stage, like the roofline: each layer counted once, plus the hops.

Prefill runs ``batch`` prompts of ``length`` tokens (m = batch × length rows in every GEMM; only
the last row of each prompt reaches the logits, as vLLM, SGLang and TensorRT-LLM do); decode runs
``batch`` requests holding ``context`` tokens each, one row per request.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pdplan.errors import PdplanError
from pdplan.latency.compose import tables
from pdplan.latency.compose.tables import Extrapolated
from pdplan.latency.roofline import pipeline_hops
from pdplan.modelspec import ACTIVATION_BYTES, ModelSpec, kv_heads_per_gpu
from pdplan.shape import InstanceShape


@dataclass
class Step:
    """The operator tables of one (model, shape, engine, version) and the step times they give."""

    model: ModelSpec
    shape: InstanceShape        #: on the physical GPU the tables measured
    engine: str
    versions: dict[str, str]
    gpus_per_node: int = 8
    log: Extrapolated = field(default_factory=Extrapolated)

    def __post_init__(self):
        system = tables.system_for(self.shape.gpu)
        self.system, self.spec = system, tables.system_spec(system)
        self.gemm = tables.gemm_grid(system, self.engine, self.versions["gemm"], self.model.weight_dtype)
        self.bf16_gemm = tables.gemm_grid(system, self.engine, self.versions["gemm"], "bf16")
        self.context = tables.attention_lines(system, self.engine, self.versions["context_attention"], "context",
                                              self.model.head_dim, self.model.kv_dtype)
        self.generation = tables.attention_lines(system, self.engine, self.versions["generation_attention"],
                                                 "generation", self.model.head_dim, self.model.kv_dtype)
        self.all_reduce = None
        if self.shape.tp > 1:
            if "all_reduce" not in self.versions:
                raise PdplanError(f"no {self.engine} all-reduce measurements on {self.shape.gpu} "
                                  f"for TP {self.shape.tp}", field="tp")
            self.all_reduce = tables.all_reduce_grid(system, self.engine, self.versions["all_reduce"])
            sizes = tables.measured_group_sizes(self.all_reduce)
            if self.shape.tp not in sizes:
                raise PdplanError(f"no {self.engine} all-reduce measured over {self.shape.tp} GPUs on {self.shape.gpu} "
                                  f"(measured: {', '.join(map(str, sizes))})", field="tp")
        m = self.model
        self.q_heads = m.q_heads // self.shape.tp
        self.kv_heads = kv_heads_per_gpu(m, self.shape.tp)
        if m.q_heads % self.shape.tp:
            raise PdplanError(f"TP {self.shape.tp} does not divide {m.q_heads} query heads", field="tp")

    # --- operators --------------------------------------------------------------------------------
    def _gemm(self, rows: float, n: int, k: int, grid=None) -> float:
        return (grid or self.gemm)((rows, n, k), self.log)

    def _memory(self, nbytes: float) -> float:
        """AIConfigurator's memory-bound kernel time: bytes / (bandwidth × factor) + constant."""
        return nbytes / (self.spec.mem_bw * self.spec.mem_scale) + self.spec.mem_latency_s

    def _all_reduce(self, rows: float) -> float:
        if self.all_reduce is None:
            return 0.0
        return self.all_reduce((rows * self.model.hidden, self.shape.tp), self.log)

    def _hops(self, rows: float) -> float:
        inside, across = pipeline_hops(self.shape.tp, self.shape.pp, self.gpus_per_node)
        nbytes = rows * self.model.hidden * ACTIVATION_BYTES
        return (inside * (nbytes / self.spec.intra_node_bw + self.spec.p2p_latency_s)
                + across * (nbytes / self.spec.inter_node_bw + self.spec.p2p_latency_s))

    def _layers(self, rows: float, attention: float) -> float:
        """Every layer's operators for ``rows`` token rows, attention given."""
        m, tp = self.model, self.shape.tp
        h, d = m.hidden, m.head_dim
        ffn = m.ffn // tp
        up = 2 * ffn if m.mlp_matrices == 3 else ffn
        per_layer = (2 * self._memory(rows * 4 * h * ACTIVATION_BYTES)                       # add + norm, twice
                     + self._gemm(rows, (self.q_heads + 2 * self.kv_heads) * d, h)           # QKV
                     + attention
                     + self._gemm(rows, h, self.q_heads * d)                                 # output projection
                     + self._gemm(rows, up, h)                                               # gate/up
                     + self._memory(rows * (up + ffn) * ACTIVATION_BYTES)                    # activation
                     + self._gemm(rows, h, ffn)                                              # down
                     + 2 * self._all_reduce(rows))
        return m.layers * per_layer

    def _edges(self, rows: float, logit_rows: float) -> float:
        """Embedding gather and its all-reduce, the logits GEMM (bf16), the pipeline hops."""
        m = self.model
        return (self._memory(rows * m.hidden * ACTIVATION_BYTES) + self._all_reduce(rows)
                + self._gemm(logit_rows, -(-m.vocab // self.shape.tp), m.hidden, self.bf16_gemm)
                + self._hops(rows))

    # --- phases -----------------------------------------------------------------------------------
    def prefill_s(self, batch: int, length: int) -> float:
        """Seconds to prefill ``batch`` prompts of ``length`` tokens in one step."""
        rows = batch * length
        attention = tables.attention_s(self.context, self.q_heads, self.kv_heads, batch, length, self.log)
        return self._layers(rows, attention) + self._edges(rows, batch)

    def decode_s(self, batch: int, context: int) -> float:
        """Seconds for one decode step of ``batch`` requests holding ``context`` tokens each."""
        attention = tables.attention_s(self.generation, self.q_heads, self.kv_heads, batch, context, self.log)
        return self._layers(batch, attention) + self._edges(batch, batch)
