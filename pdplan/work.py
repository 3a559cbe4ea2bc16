"""The work one engine iteration does, W = (F, B_weights, B_KV,read, B_KV,write, A, N_new): the
toy ledger the closed-form service lower bound ``max(F/C, B/R)`` is taken over (DistServe-style
roofline reasoning; the article's phase-work formulas)."""

from __future__ import annotations

from dataclasses import dataclass

from pdplan.modelspec import ModelSpec, full_attention_layers


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


def expected_experts_touched(experts: int, per_token: int, tokens: float) -> float:
    """Expected distinct experts of E that N tokens choosing k each touch: ``E·(1 − (1 − k/E)^N)``.

    Assumes uniform, independent routing: each token picks k distinct experts uniformly at random, so it
    misses a given expert with probability 1 − k/E, and N tokens all miss it with (1 − k/E)^N. Real
    routers are skewed (load-balancing losses only push toward uniform), which touches fewer experts:
    this is the most weight traffic N tokens can cause on average."""
    if tokens <= 0:
        return 0.0
    return experts * (1.0 - (1.0 - per_token / experts) ** tokens)


#: Bytes per hidden value on the wire: DeepEP dispatches FP8 and combines BF16, the DeepSeek-V3/R1
#: setting its README benchmarks ("FP8 dispatching and BF16 combining", deepseek-ai/DeepEP README).
DISPATCH_BYTES, COMBINE_BYTES = 1, 2


def cross_node_all_to_all_bytes_per_token(model: ModelSpec, ep: int, nodes: int) -> float:
    """Bytes one token's forward pass sends over the NICs, each way, when its instance spreads EP
    experts evenly over ``nodes`` nodes: in every MoE layer the token's hidden state goes to its k
    routed experts (dispatch) and their outputs come back (combine), and under uniform routing
    (nodes − 1)/nodes of the k copies live on another node:
    ``L_moe · d · k · (nodes − 1)/nodes · (b_dispatch + b_combine)``.

    Under balanced load every GPU sends as much as it receives, so this is also each GPU's ingress.
    DeepSeek-V3's node-limited routing (at most 4 nodes per token) only lowers it; 0 for one node, a
    dense model or experts split by TP."""
    if nodes <= 1 or ep <= 1 or not model.is_moe:
        return 0.0
    remote = model.experts_per_token * (nodes - 1) / nodes
    return model.moe_layers * model.hidden * remote * (DISPATCH_BYTES + COMBINE_BYTES)


def linear_flops(model: ModelSpec, rows: int) -> float:
    """F_linear(N) = 2 · L · N · P_layer (0x02A; one multiply-add is two FLOPs). A mixture-of-experts
    model multiplies each row by its active parameters only: P_layer is
    :attr:`~pdplan.modelspec.ModelSpec.active_block_parameters` / L (attention, dense MLPs, router, top-k
    and shared experts)."""
    per_layer = model.active_block_parameters / model.layers if model.is_moe else model.params_per_layer
    return 2.0 * model.layers * rows * per_layer


def routed_expert_flops(model: ModelSpec, rows: float) -> float:
    """The part of :func:`linear_flops` a mixture-of-experts model spends in its routed experts: each row
    runs k of them in every MoE layer, ``2 · L_moe · N · k · P_expert`` (0 for a dense model)."""
    return 2.0 * model.moe_layers * rows * model.experts_per_token * model.expert_params


def attention_flops_per_pair(model: ModelSpec, *, decode: bool = False) -> float:
    """FLOPs of one query-key pair in one layer, over all heads: ``2·H_q·(d_qk + d_v)`` (QKᵀ and P·V, one
    dot product each), ``4·H_q·d_h`` for GQA.

    Multi-head latent attention dots over d_qk = qk_nope_head_dim + qk_rope_head_dim and weighs values of
    v_head_dim (DeepSeek-V2, arXiv:2405.04434, 2.1.2-2.1.3). vLLM computes prefill that way and decode with
    W_UK and W_UV absorbed, an MQA over the cached latent: d_qk = kv_lora_rank + qk_rope_head_dim, d_v =
    kv_lora_rank (vllm-project/vllm vllm/model_executor/layers/attention/mla_attention.py, module docstring:
    "compute friendly approach for prefill", "data-movement friendly approach for decode")."""
    if model.attention == "mla" and decode:
        return 2.0 * model.q_heads * (model.kv_lora_rank + model.qk_rope_head_dim + model.kv_lora_rank)
    return 2.0 * model.q_heads * (model.qk_head_dim + model.value_head_dim)


def attention_flops(model: ModelSpec, pairs: float, sliding_pairs: float = 0.0, *, decode: bool = False) -> float:
    """F_attn = 4 · L · H_q · d_h · A (0x02A: QKᵀ and P·V, one dot product each), with the per-pair cost
    of :func:`attention_flops_per_pair`; sliding-window layers count their own pairs (at most the window
    per row)."""
    full = full_attention_layers(model, range(model.layers))
    per_pair = attention_flops_per_pair(model, decode=decode)
    return per_pair * full * pairs + per_pair * (model.layers - full) * sliding_pairs


def block_weight_bytes(model: ModelSpec, rows: float | None = None) -> float:
    """Weights of the transformer blocks only, as the 0x02A toy ledger counts them; a mixture-of-experts
    model reads its dense parts and, per MoE layer, the experts ``rows`` tokens touch
    (:func:`expected_experts_touched`; all of them when ``rows`` is None)."""
    if not model.is_moe:
        return float(model.layers * model.params_per_layer * model.weight_bytes_per_param)
    touched = model.experts if rows is None else expected_experts_touched(model.experts, model.experts_per_token, rows)
    kept = model.unquantized_block_params if model.weight_dtype != "bf16" else 0
    routed = model.moe_layers * model.experts * model.expert_params
    other = model.geometric_parameters - model.embedding_params - routed
    expert_bytes = model.weight_bytes_per_param
    other_bytes = 2.0 if model.experts_only_quantized else model.weight_bytes_per_param
    return ((other - kept) * other_bytes + kept * 2.0
            + model.moe_layers * touched * model.expert_params * expert_bytes)


def _sliding_pairs(model: ModelSpec, before: int, rows: int) -> float:
    """Query-key pairs per head of a sliding-window layer for ``rows`` rows after ``before``: row i sees
    min(before + i, W) keys."""
    window = model.sliding_window
    if not window:
        return 0.0
    return float(sum(min(before + i, window) for i in range(1, rows + 1)))


def _kv_bytes(model: ModelSpec, tokens: int) -> float:
    """KV bytes one sequence of ``tokens`` holds, sliding-window layers at most the window."""
    return float(model.kv_bytes_for_context(tokens))


def prefill_work(model: ModelSpec, new_rows: int, visible_before: int = 0) -> WorkVector:
    """Prefill of N_P rows after T_0 visible rows: A_P = N_P·T_0 + N_P(N_P+1)/2 (0x02A)."""
    pairs = new_rows * visible_before + new_rows * (new_rows + 1) / 2
    kv = model.kv_bytes_per_token
    return WorkVector(
        flops=linear_flops(model, new_rows) + attention_flops(model, pairs,
                                                              _sliding_pairs(model, visible_before, new_rows)),
        weight_bytes=block_weight_bytes(model, new_rows),
        kv_read_bytes=(_kv_bytes(model, visible_before + new_rows) if model.sliding_layers
                       else float((visible_before + new_rows) * kv)),
        kv_write_bytes=float(new_rows * kv),
        pairs=pairs,
        new_rows=new_rows,
    )


def decode_work(model: ModelSpec, visible_lengths: list[int]) -> WorkVector:
    """One decode iteration over B requests with visible lengths s_i: A_D = Σ s_i (0x02A)."""
    batch = len(visible_lengths)
    pairs = float(sum(visible_lengths))
    kv = model.kv_bytes_per_token
    sliding = float(sum(min(s, model.sliding_window) for s in visible_lengths)) if model.sliding_layers else 0.0
    return WorkVector(
        flops=linear_flops(model, batch) + attention_flops(model, pairs, sliding, decode=True),
        weight_bytes=block_weight_bytes(model, batch),
        kv_read_bytes=(sum(_kv_bytes(model, s) for s in visible_lengths) if model.sliding_layers
                       else pairs * kv),
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
