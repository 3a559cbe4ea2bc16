"""The expert all-to-all's traffic across nodes, from its closed form."""

from pdplan.modelref import get_model
from pdplan.work import cross_node_all_to_all_bytes_per_token


def test_deepseek_v3_on_two_nodes_sends_half_its_expert_copies_across_them():
    # 58 MoE layers x 7168 x 8 experts x 1/2 remote x (1 B FP8 dispatch + 2 B BF16 combine)
    assert cross_node_all_to_all_bytes_per_token(get_model("deepseek-v3"), ep=16, nodes=2) == 58 * 7168 * 8 * 0.5 * 3


def test_one_node_sends_no_expert_traffic_across_nodes():
    assert cross_node_all_to_all_bytes_per_token(get_model("deepseek-v3"), ep=8, nodes=1) == 0


def test_a_dense_model_sends_no_expert_traffic():
    assert cross_node_all_to_all_bytes_per_token(get_model("llama-3.1-70b"), ep=16, nodes=2) == 0
