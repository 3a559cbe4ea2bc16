"""The work one engine iteration does, W = (F, B_weights, B_KV,read, B_KV,write, A, N_new): the
toy ledger the closed-form service lower bound ``max(F/C, B/R)`` is taken over (DistServe-style
roofline reasoning; the article's phase-work formulas)."""

from __future__ import annotations

from dataclasses import dataclass

from pdplan.modelspec import ModelSpec


@dataclass(frozen=True, kw_only=True)
class WorkVector:
    """One iteration's work W = (F, B_weights, B_KV,read, B_KV,write, A, N_new) of 0x02B."""

    flops: float
    weight_bytes: float
    kv_read_bytes: float
    kv_write_bytes: float
    pairs: float      #: causal query-key pairs per head, A
    new_rows: int     #: N_new, rows (tokens) the iteration appends

    @property
    def state_bytes(self) -> float:
        return self.weight_bytes + self.kv_read_bytes + self.kv_write_bytes


def linear_flops(model: ModelSpec, rows: int) -> float:
    """F_linear(N) = 2 · L · N · P_layer (0x02A; one multiply-add is two FLOPs)."""
    return 2.0 * model.layers * rows * model.params_per_layer


def attention_flops(model: ModelSpec, pairs: float) -> float:
    """F_attn(A) = 4 · L · H_q · d_h · A (0x02A: QKᵀ and P·V, one dot product each)."""
    return 4.0 * model.layers * model.q_heads * model.head_dim * pairs


def block_weight_bytes(model: ModelSpec) -> float:
    """Weights of the transformer blocks only, as the 0x02A toy ledger counts them."""
    return float(model.layers * model.params_per_layer * model.weight_bytes_per_param)


def prefill_work(model: ModelSpec, new_rows: int, visible_before: int = 0) -> WorkVector:
    """Prefill of N_P rows after T_0 visible rows: A_P = N_P·T_0 + N_P(N_P+1)/2 (0x02A)."""
    pairs = new_rows * visible_before + new_rows * (new_rows + 1) / 2
    kv = model.kv_bytes_per_token
    return WorkVector(
        flops=linear_flops(model, new_rows) + attention_flops(model, pairs),
        weight_bytes=block_weight_bytes(model),
        kv_read_bytes=float((visible_before + new_rows) * kv),
        kv_write_bytes=float(new_rows * kv),
        pairs=pairs,
        new_rows=new_rows,
    )


def decode_work(model: ModelSpec, visible_lengths: list[int]) -> WorkVector:
    """One decode iteration over B requests with visible lengths s_i: A_D = Σ s_i (0x02A)."""
    batch = len(visible_lengths)
    pairs = float(sum(visible_lengths))
    kv = model.kv_bytes_per_token
    return WorkVector(
        flops=linear_flops(model, batch) + attention_flops(model, pairs),
        weight_bytes=block_weight_bytes(model),
        kv_read_bytes=pairs * kv,
        kv_write_bytes=float(batch * kv),
        pairs=pairs,
        new_rows=batch,
    )


def mixed_work(prefill: WorkVector, decode: WorkVector) -> WorkVector:
    """One colocated slot running both: work adds, but the weights are read once (0x02B)."""
    return WorkVector(
        flops=prefill.flops + decode.flops,
        weight_bytes=max(prefill.weight_bytes, decode.weight_bytes),
        kv_read_bytes=prefill.kv_read_bytes + decode.kv_read_bytes,
        kv_write_bytes=prefill.kv_write_bytes + decode.kv_write_bytes,
        pairs=prefill.pairs + decode.pairs,
        new_rows=prefill.new_rows + decode.new_rows,
    )


def lower_bound_s(work: WorkVector, flops_per_s: float, bytes_per_s: float) -> float:
    """Service lower bound ``max(F/C, (B_weights + B_KV,read + B_KV,write)/R)`` (0x02B)."""
    return max(work.flops / flops_per_s, work.state_bytes / bytes_per_s)
