"""Memory of instances with attention data parallelism (DP) and expert parallelism (EP).

Expected values are closed forms over DeepSeek-V3's published config.json (hidden_size 7168, 61 layers,
first_k_dense_replace 3, 128 heads, q_lora_rank 1536, kv_lora_rank 512, qk_rope_head_dim 64,
qk_nope_head_dim 128, v_head_dim 128, intermediate_size 18432, 256 routed experts of
moe_intermediate_size 2048, 1 shared, vocab 129280, weight_block_size [128, 128]), computed here by hand:

* each DP rank holds its own attention, split over its attention TP (the latent down-projections q_a
  and kv_a whole on every rank);
* the dense MLPs of the first three layers, the shared experts and the embedding are whole on every GPU
  (SGLang's DeepEP shared experts and ``--moe-dense-tp-size 1``, its embedding under DP attention);
  the output head is split over attention TP;
* routed experts: without EP split over all TP × DP GPUs; with EP, ⌈(E + R)/EP⌉ whole experts per EP
  group, each split over expert TP = TP × DP / EP;
* KV: the whole latent (512 + 64 values per layer) on every GPU of a rank; capacity is per DP rank.
"""

import math

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import GIB, get_gpu
from pdplan.modelref import get_model
from pdplan.modelspec import ModelSpec, kv_capacity_tokens, shape_rejection, weight_bytes_per_gpu

D, V = 7168, 129280
REPLICATED_ATTENTION = D * 1536 + D * (512 + 64)                           # q_a, kv_a
SPLIT_ATTENTION = 1536 * 128 * 192 + 512 * 128 * (128 + 128) + 128 * 128 * D  # q_b, kv_b, o
DENSE_MLP = 3 * D * 18432
EXPERT = 3 * D * 2048
ROUTER = D * 256
FP8_BLOCK_SCALED = 1 + 4 / 128**2      # one float32 scale per 128 x 128 block
KV_PER_TOKEN = 61 * (512 + 64)         # fp8 KV, one byte per value


def wide_bytes(tp: int, routed_per_gpu: float) -> int:
    """One GPU of a DeepSeek-V3 fp8 instance with attention DP: ``routed_per_gpu`` experts' worth of
    routed weights per MoE layer."""
    fp8 = (61 * SPLIT_ATTENTION / tp + 61 * REPLICATED_ATTENTION + 3 * DENSE_MLP + 58 * EXPERT
           + 58 * routed_per_gpu * EXPERT)
    return math.ceil(fp8 * FP8_BLOCK_SCALED) + 58 * ROUTER * 2 + math.ceil(V * D / tp + V * D) * 2


@pytest.fixture(scope="module")
def dsv3():
    return get_model("deepseek-v3@fp8")


def test_dp8_ep8_holds_32_whole_experts_and_everything_else_whole(dsv3):
    """SGLang --tp 8 --dp 8 --enable-dp-attention --ep-size 8: attention TP 1, 256 / 8 = 32 experts per GPU."""
    expected = wide_bytes(1, 32)
    assert weight_bytes_per_gpu(dsv3, 1, 1, dp=8, ep=8) == expected
    # by hand: 61 x 187.1M attention + 3 x 396.4M dense + 58 x 33 x 44.0M experts = 96.9 GB in fp8 with
    # block scales, 0.2 GB of bf16 router and 3.7 GB of bf16 embedding and head: about 100.8 GB
    assert 100.5e9 < expected < 101.2e9


def test_dp32_ep32_with_32_redundant_experts_holds_9_per_gpu(dsv3):
    """DeepSeek's prefill unit of 4 nodes: EP32 with 32 redundant experts, (256 + 32) / 32 = 9 per GPU."""
    expected = wide_bytes(1, 9)
    assert weight_bytes_per_gpu(dsv3, 1, 1, dp=32, ep=32, redundant_experts=32) == expected
    # 11.4 + 1.2 + 58 x 10 x 44.0M = 25.5 (GB, fp8) + 0.2 + 3.7 (bf16): about 42.1 GB
    assert 41.7e9 < expected < 42.4e9


def test_attention_tp_splits_only_attention_and_the_head_under_dp(dsv3):
    """TP 2 x DP 4, EP 8: q_b, kv_b and o over the rank's two GPUs, dense MLPs, shared experts and the
    embedding whole, 32 whole experts per GPU."""
    assert weight_bytes_per_gpu(dsv3, 2, 1, dp=4, ep=8) == wide_bytes(2, 32)


def test_expert_tp_splits_whole_experts_over_the_rest_of_the_group(dsv3):
    """DP 16 over EP 8: expert TP 2, so each GPU holds 32 experts at half their width."""
    assert weight_bytes_per_gpu(dsv3, 1, 1, dp=16, ep=8) == wide_bytes(1, 32 / 2)


def test_without_ep_the_experts_are_split_over_every_gpu_of_the_instance(dsv3):
    """TP 4 x DP 2, EP 1: vLLM flattens TP across DP for the MoE layers, 256 / 8 experts' worth per GPU."""
    assert weight_bytes_per_gpu(dsv3, 4, 1, dp=2) == wide_bytes(4, 256 / 8)


def test_kv_capacity_is_per_dp_rank(dsv3):
    """Each DP8 EP8 rank (one H200) holds its own latent cache in what its weights leave."""
    free = int(141 * GIB * 0.9) - wide_bytes(1, 32)
    assert kv_capacity_tokens(dsv3, get_gpu("h200-141gb"), 1, 1, dp=8, ep=8) == free // KV_PER_TOKEN


def test_dp32_ep32_fits_an_h200_rank_and_dp8_ep8_on_h100_does_not(dsv3):
    assert shape_rejection(dsv3, get_gpu("h200-141gb"), 1, 1, dp=32, ep=32, redundant_experts=32,
                           gpus_per_node=8, kv_reserve_tokens=1) is None
    reason = shape_rejection(dsv3, get_gpu("h100-80gb"), 1, 1, dp=8, ep=8, gpus_per_node=8)
    assert reason.startswith("h100-80gb TP1 DP8 EP8 PP1: weights ")


# --- coordinates the engines cannot run are refused naming the field and the rule -------------------------

TINY_MOE = ModelSpec(name="tiny-moe", layers=2, hidden=64, q_heads=8, kv_heads=8, head_dim=8, ffn=128, vocab=100,
                     parameters=1, experts=4, experts_per_token=2, expert_ffn=64)


@pytest.mark.parametrize("model, tp, dp, ep, redundant, field, rule", [
    ("dsv3", 1, 8, 3, 0, "ep", r"EP 3 must divide the 8 GPUs of TP 1 × DP 8 that hold the experts"),
    ("dsv3", 1, 32, 32, 16, "redundant_experts", r"256 \+ 16 redundant experts do not spread evenly over EP 32"),
    ("tiny", 1, 8, 8, 0, "ep", r"EP 8 > 4 experts \(4 \+ 0 redundant\): ranks without experts"),
    ("tiny", 1, 6, 2, 0, "tp", r"expert TP 3 \(TP 1 × DP 6 / EP 2\) does not divide the expert width 64"),
    ("dsv3", 1, 32, 1, 0, "tp", r"splits each expert to 64 columns, not a multiple of the fp8 scale block 128"),
])
def test_unplaceable_wide_experts_are_refused_naming_the_field(dsv3, model, tp, dp, ep, redundant, field, rule):
    spec = dsv3 if model == "dsv3" else TINY_MOE
    with pytest.raises(PdplanError, match=rule) as caught:
        weight_bytes_per_gpu(spec, tp, 1, dp=dp, ep=ep, redundant_experts=redundant)
    assert caught.value.field == field
    assert "\n" not in str(caught.value)


def test_a_dp_ranks_tp_group_must_sit_inside_one_node(dsv3):
    reason = shape_rejection(dsv3, get_gpu("h200-141gb"), 16, 1, dp=2, ep=32, gpus_per_node=8)
    assert reason == ("h200-141gb TP16 DP2 EP32 PP1: TP 16 > 8 GPUs per node: each DP rank's attention TP group "
                      "must sit inside one node")


def test_a_wide_shape_with_unplaceable_experts_is_rejected_in_one_sentence():
    reason = shape_rejection(TINY_MOE, get_gpu("h100-80gb"), 1, 1, dp=8, ep=8)
    assert reason == "h100-80gb TP1 DP8 EP8 PP1: EP 8 > 4 experts (4 + 0 redundant): ranks without experts"
