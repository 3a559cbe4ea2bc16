"""Memory and the roofline of mixture-of-experts, latent- and sliding-window-attention models.

Expected values are closed forms over the published config.json numbers (each test states them),
computed here by hand, never pdplan's own output: routed experts split over TP (vLLM's and SGLang's
default) or whole on each of EP = TP ranks (vLLM --enable-expert-parallel), MLA's latent whole on
every TP rank, the router and (under MXFP4) attention kept in bf16.
"""

import itertools
import math
import random

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import GIB, get_gpu
from pdplan.latency.roofline import decode_flops_coefficients, prefill_flops_coefficients, roofline_profile
from pdplan.modelref import get_model
from pdplan.modelspec import (
    ModelSpec,
    kv_bytes_per_token_per_gpu,
    kv_capacity_tokens,
    kv_heads_per_gpu,
    shape_rejection,
    weight_bytes_per_gpu,
)
from pdplan.work import attention_flops_per_pair, block_weight_bytes, expected_experts_touched

# --- DeepSeek-V3 at fp8 (config.json: hidden_size 7168, 61 layers, first_k_dense_replace 3, 128 heads,
# q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128,
# intermediate_size 18432, 256 routed experts of moe_intermediate_size 2048, 1 shared, vocab 129280,
# weight_block_size [128, 128]) ------------------------------------------------------------------------
D = 7168
DSV3_REPLICATED_ATTENTION = D * 1536 + D * (512 + 64)            # q_a and kv_a, on every TP rank
DSV3_SPLIT_ATTENTION = 1536 * 128 * 192 + 512 * 128 * (128 + 128) + 128 * 128 * D  # q_b, kv_b, o
DSV3_DENSE_MLP = 3 * D * 18432
DSV3_EXPERT = 3 * D * 2048
DSV3_ROUTER = D * 256                                             # bf16, replicated
DSV3_EDGES = 2 * 129280 * D
FP8_BLOCK_SCALED = 1 + 4 / 128**2                                 # one float32 scale per 128x128 block


def dsv3_bytes(tp: int, routed_per_rank: float) -> int:
    quantized = ((61 * DSV3_SPLIT_ATTENTION + 3 * DSV3_DENSE_MLP + 58 * DSV3_EXPERT) / tp
                 + 61 * DSV3_REPLICATED_ATTENTION + 58 * routed_per_rank * DSV3_EXPERT)
    return math.ceil(quantized * FP8_BLOCK_SCALED) + 58 * DSV3_ROUTER * 2 + math.ceil(DSV3_EDGES / tp) * 2


def test_deepseek_v3_fp8_weights_per_gpu_with_experts_split_over_tp():
    model = get_model("deepseek-v3@fp8")
    assert weight_bytes_per_gpu(model, 8, 1) == dsv3_bytes(8, 256 / 8)
    # about an eighth of the card's 671B at one byte, the bf16 embedding, head and router a little more
    assert 671e9 / 8 < weight_bytes_per_gpu(model, 8, 1) < 671e9 / 8 * 1.03


def test_deepseek_v3_fp8_under_expert_parallelism_holds_whole_experts():
    """EP = TP = 8: 256/8 = 32 whole experts per rank, the same bytes as 1/8 of each of the 256."""
    model = get_model("deepseek-v3@fp8")
    assert weight_bytes_per_gpu(model, 8, 1, ep=8) == dsv3_bytes(8, 32)


def test_redundant_experts_add_whole_experts_per_rank():
    """32 redundant experts (EPLB): 288 physical over 8 ranks, 36 each."""
    model = get_model("deepseek-v3@fp8")
    assert weight_bytes_per_gpu(model, 8, 1, ep=8, redundant_experts=32) == dsv3_bytes(8, 36)


def test_deepseek_v3_does_not_fit_eight_h200_at_bf16_but_does_at_fp8():
    assert "weights" in shape_rejection(get_model("deepseek-v3@bf16"), get_gpu("h200-141gb"), 8, 1)
    assert shape_rejection(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 8, 1) is None


# --- Qwen3-235B-A22B at bf16 (94 layers, hidden 4096, 64 heads, 4 KV heads of 128, 128 experts of
# moe_intermediate_size 1536, vocab 151936) ------------------------------------------------------------
Q_D = 4096
Q_QO = 2 * Q_D * 64 * 128
Q_KV_HEAD = 2 * Q_D * 128        # K and V of one head
Q_EXPERT = 3 * Q_D * 1536
Q_EDGES = 2 * 151936 * Q_D


def test_qwen3_235b_weights_per_gpu_at_tp4():
    expected = (math.ceil(94 * (Q_QO + 4 * Q_KV_HEAD + 128 * Q_EXPERT) / 4 * 2) + math.ceil(94 * Q_D * 128 * 2)
                + math.ceil(Q_EDGES / 4) * 2)
    assert weight_bytes_per_gpu(get_model("qwen3-235b-a22b"), 4, 1) == expected


def test_qwen3_235b_at_tp8_replicates_one_kv_head_per_rank():
    """TP 8 > 4 KV heads: each rank holds one whole K and V head (vLLM's QKVParallelLinear)."""
    expected = (math.ceil((94 * (Q_QO + 128 * Q_EXPERT) / 8 + 94 * Q_KV_HEAD) * 2) + math.ceil(94 * Q_D * 128 * 2)
                + math.ceil(Q_EDGES / 8) * 2)
    assert weight_bytes_per_gpu(get_model("qwen3-235b-a22b"), 8, 1) == expected


def test_qwen3_235b_under_ep4_holds_32_whole_experts_per_rank():
    expected = (math.ceil((94 * (Q_QO + 4 * Q_KV_HEAD) / 4 + 94 * 32 * Q_EXPERT) * 2) + math.ceil(94 * Q_D * 128 * 2)
                + math.ceil(Q_EDGES / 4) * 2)
    assert weight_bytes_per_gpu(get_model("qwen3-235b-a22b"), 4, 1, ep=4) == expected


# --- gpt-oss-120b at MXFP4 (36 layers, hidden 2880, 64 heads and 8 KV heads of 64, 128 experts of
# 2880, vocab 201088; modules_to_not_convert: self_attn, router, embed_tokens, lm_head) ------------------
G_ATTENTION = 2 * 2880 * 64 * 64 + 2 * 2880 * 8 * 64
G_EXPERT = 3 * 2880 * 2880
G_ROUTER = 2880 * 128
G_EDGES = 2 * 201088 * 2880
MXFP4 = (32 * 4 + 8) / 32 / 8    # OCP MX: 32 four-bit values share one 8-bit scale


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gpt_oss_120b_quantizes_only_the_routed_experts(tp):
    model = get_model("gpt-oss-120b@mxfp4")
    expected = (math.ceil(36 * 128 * G_EXPERT / tp * MXFP4) + math.ceil((36 * G_ATTENTION / tp + 36 * G_ROUTER) * 2)
                + math.ceil(G_EDGES / tp) * 2)
    assert weight_bytes_per_gpu(model, tp, 1) == expected


def test_gpt_oss_120b_fits_one_h100_in_mxfp4():
    """MXFP4 runs with bf16 activations on Hopper (vLLM's Mxfp4Config: compute capability 80 and up)."""
    assert shape_rejection(get_model("gpt-oss-120b@mxfp4"), get_gpu("h100-80gb"), 1, 1) is None


def test_mxfp4_on_a_model_without_experts_is_refused_by_name():
    with pytest.raises(PdplanError, match=r"llama-3.1-8b: mxfp4 quantizes only routed experts"):
        shape_rejection(get_model("llama-3.1-8b", dtype="mxfp4"), get_gpu("b200-180gb"), 1, 1)


# --- KV per GPU --------------------------------------------------------------------------------------

@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_the_mla_latent_is_whole_on_every_tp_rank(tp):
    """DeepSeek-V3 at fp8 KV: 61 layers × (512 + 64) × 1 byte per token on each rank, whatever the TP."""
    model = get_model("deepseek-v3@fp8")
    assert kv_bytes_per_token_per_gpu(model, tp, 1) == 61 * 576
    assert kv_heads_per_gpu(model, tp) == 1


def test_deepseek_v3_kv_capacity_on_eight_h200():
    gpu = get_gpu("h200-141gb")
    free = int(141 * GIB * 0.9) - dsv3_bytes(8, 32)
    assert kv_capacity_tokens(get_model("deepseek-v3@fp8"), gpu, 8, 1) == free // (61 * 576)


def test_sliding_window_layers_reserve_their_windows_and_full_layers_count_per_token():
    """gpt-oss-120b at fp8 KV on one H100: 18 full-attention layers of 2 × 8 × 64 bytes per token; the 18
    sliding layers hold at most 128 tokens for each of vLLM's default 1024 sequences on an 80 GiB GPU."""
    model, gpu = get_model("gpt-oss-120b@mxfp4"), get_gpu("h100-80gb")
    layer = 2 * 8 * 64
    free = int(80 * GIB * 0.9) - weight_bytes_per_gpu(model, 1, 1) - 18 * 128 * layer * 1024
    assert kv_bytes_per_token_per_gpu(model, 1, 1) == 18 * layer
    assert kv_capacity_tokens(model, gpu, 1, 1) == free // (18 * layer)


# --- expert placement is refused in one line naming the field ------------------------------------------

TINY_MOE = ModelSpec(name="tiny-moe", layers=2, hidden=64, q_heads=8, kv_heads=8, head_dim=8, ffn=128, vocab=100,
                     parameters=1, experts=4, experts_per_token=2, expert_ffn=64)


@pytest.mark.parametrize("tp, ep, redundant, field, rule", [
    (8, 8, 0, "ep", r"EP 8 > 4 experts \(4 \+ 0 redundant\): ranks without experts"),
    (4, 3, 0, "ep", r"EP 3 must be 1 \(experts split over TP\) or divide TP 4"),
    (2, 1, 2, "redundant_experts", r"2 redundant experts need expert parallelism"),
    (4, 4, 2, "redundant_experts", r"4 \+ 2 redundant experts do not spread evenly over EP 4"),
])
def test_unplaceable_experts_are_refused_naming_the_field(tp, ep, redundant, field, rule):
    with pytest.raises(PdplanError, match=rule) as caught:
        weight_bytes_per_gpu(TINY_MOE, tp, 1, ep=ep, redundant_experts=redundant)
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


def test_a_shape_with_unplaceable_experts_is_rejected_in_one_sentence():
    reason = shape_rejection(TINY_MOE, get_gpu("h100-80gb"), 8, 1, ep=8)
    assert reason == "h100-80gb TP8 PP1: EP 8 > 4 experts (4 + 0 redundant): ranks without experts"


def test_block_scaled_fp8_experts_must_split_into_whole_blocks():
    """vLLM's Fp8MoEMethod refuses gate/up widths that are not a multiple of block_n: 1536/8 = 192."""
    model = ModelSpec(**{**get_model("qwen3-235b-a22b").__dict__, "name": "q@fp8", "weight_dtype": "fp8",
                         "kv_dtype": "fp8", "weight_block": 128})
    assert "192 columns, not a multiple of the fp8 scale block 128" in shape_rejection(model, get_gpu("h200-141gb"),
                                                                                       8, 1)
    assert shape_rejection(model, get_gpu("h200-141gb"), 4, 1) is None  # 384 = 3 × 128


# --- experts a batch touches ----------------------------------------------------------------------------

@pytest.mark.parametrize("experts, per_token, tokens", [(6, 2, 1), (6, 2, 3), (5, 3, 4), (4, 1, 5)])
def test_touched_experts_match_enumeration_of_every_routing(experts, per_token, tokens):
    choices = list(itertools.combinations(range(experts), per_token))
    counts = [len(set().union(*routing)) for routing in itertools.product(choices, repeat=tokens)]
    assert expected_experts_touched(experts, per_token, tokens) == pytest.approx(sum(counts) / len(counts), rel=1e-12)


def test_touched_experts_match_a_seeded_simulation():
    rng = random.Random(21)
    trials = [len({e for _ in range(16) for e in rng.sample(range(64), 8)}) for _ in range(20000)]
    assert expected_experts_touched(64, 8, 16) == pytest.approx(sum(trials) / len(trials), rel=0.005)


def test_one_decode_row_reads_only_its_experts_and_a_large_batch_reads_them_all():
    """Qwen3-30B-A3B: 48 MoE layers of 128 experts (3 × 2048 × 768 each), 8 per token."""
    model = get_model("qwen3-30b-a3b")
    expert_bytes = 48 * 3 * 2048 * 768 * 2
    one, many = block_weight_bytes(model, 1), block_weight_bytes(model, 100_000)
    assert many - one == pytest.approx((128 - 8) * expert_bytes)


# --- compute ------------------------------------------------------------------------------------------

def test_mla_attention_costs_its_own_head_dims_per_pair():
    """DeepSeek-V2 (arXiv:2405.04434): prefill dots over 128 + 64 and weighs 128-wide values per head;
    decode, absorbed, dots over 512 + 64 and weighs 512-wide latents."""
    model = get_model("deepseek-v3")
    assert attention_flops_per_pair(model) == 2 * 128 * (192 + 128)
    assert attention_flops_per_pair(model, decode=True) == 2 * 128 * (576 + 512)


def test_moe_compute_counts_active_parameters_only():
    model = get_model("qwen3-30b-a3b")
    attention = 2 * 2048 * 32 * 128 + 2 * 2048 * 4 * 128
    active = 48 * (attention + 2048 * 128 + 8 * 3 * 2048 * 768)
    per_pair = 4 * 48 * 32 * 128
    assert prefill_flops_coefficients(model) == (2 * active + per_pair / 2, per_pair / 2)
    assert decode_flops_coefficients(model) == (2 * active + per_pair, per_pair)


def test_sliding_window_rows_attend_at_most_the_window():
    """gpt-oss-120b: 18 full and 18 sliding layers, 64 heads of 64; a row sees at most 128 keys there."""
    per_pair = 2 * 64 * (64 + 64)
    _, quadratic = prefill_flops_coefficients(get_model("gpt-oss-120b@mxfp4"))
    assert quadratic == 18 * per_pair / 2
    per_request, per_context = decode_flops_coefficients(get_model("gpt-oss-120b@mxfp4"))
    assert per_context == 18 * per_pair
    assert per_request - per_context - 18 * per_pair * 128 == pytest.approx(
        2 * get_model("gpt-oss-120b").active_block_parameters)


@pytest.mark.parametrize("name, gpu, tp", [("qwen3-30b-a3b", "h100-80gb", 1), ("deepseek-v3@fp8", "h200-141gb", 8),
                                           ("gpt-oss-120b@mxfp4", "h100-80gb", 1)])
def test_moe_rooflines_give_finite_decode_times_that_grow_with_the_batch(name, gpu, tp):
    profile = roofline_profile(get_model(name), get_gpu(gpu), tp, 1)
    times = [profile.decode_step_s(batch, batch * 2048) for batch in (1, 2, 8, 64, 256)]
    assert all(math.isfinite(t) and t > 0 for t in times)
    assert times == sorted(times)
    assert profile.kv_capacity_tokens > 0


# --- the manifest's memory plan -------------------------------------------------------------------------

def _pool(model, tp, **memory):
    from pdplan.manifest.build import MEMORY_UTILIZATION
    return {"gpu": "h200-141gb", "tp": tp, "pp": 1,
            "memory": {"gpu_memory_gib": 141.0, "memory_utilization": MEMORY_UTILIZATION,
                       "weights_gib_per_gpu": weight_bytes_per_gpu(model, tp, 1) / GIB,
                       "kv_capacity_tokens_per_instance": 1000, "kv_heads_per_gpu": 1, **memory}}


def test_validate_accepts_a_moe_pools_weights_with_or_without_its_expert_parallel_field():
    from pdplan.manifest.check import _memory
    model = get_model("deepseek-v3@fp8")
    assert _memory("pools[0]", _pool(model, 8), model) == []
    assert _memory("pools[0]", _pool(model, 8, expert_parallel=1), model) == []


def test_validate_names_an_expert_parallel_size_that_places_no_experts():
    from pdplan.manifest.check import _memory
    model = get_model("deepseek-v3@fp8")
    found = _memory("pools[0]", _pool(model, 8, expert_parallel=3), model)
    assert [v.field for v in found] == ["pools[0].memory.expert_parallel"]


def test_a_precision_the_gpu_lacks_exits_2_on_one_line_for_a_moe_model(run_cli):
    code, out, err = run_cli("profile", "roofline", "--model", "qwen3-30b-a3b", "--dtype", "fp4", "--gpu", "h100-80gb",
                             "--tp", 1, "--pp", 1)
    assert code == 2 and not out
    assert err.strip() == ("Error: qwen3-30b-a3b@fp4 h100-80gb TP1 PP1: h100-80gb has no fp4 tensor cores "
                           "(it runs bf16, fp8)")
