"""The instance shape: GPUs per instance as the engines count them, labels and profile keys."""

from pdplan.shape import InstanceShape, ModelShape, shape_key, shape_label


def test_a_tp_only_instance_occupies_tp_times_pp_gpus():
    assert InstanceShape(gpu="h100-80gb", tp=4, pp=2).gpus == 8


def test_an_attention_dp_instance_counts_each_rank_once_not_ranks_times_ep():
    # DeepSeek's decode unit: attention TP1 on 32 DP ranks, experts EP32 = 32 GPUs (SGLang --tp 32 --dp 32)
    assert InstanceShape(gpu="h800-80gb", tp=1, dp=32, ep=32).gpus == 32


def test_a_tp_only_key_keeps_its_four_fields():
    assert ModelShape(model="m", gpu="g", tp=2).key == ("m", "g", 2, 1)


def test_a_wide_key_appends_dp_and_ep():
    assert shape_key("m", "g", 1, 1, dp=8, ep=8) == ("m", "g", 1, 1, 8, 8)


def test_labels_show_dp_and_ep_only_when_used():
    assert shape_label("g", 8, 1) == "g TP8 PP1"
    assert shape_label("g", 1, 1, dp=16, ep=16, compact=True) == "g TP1 DP16 EP16"


def test_a_stage_wider_than_a_node_spans_whole_nodes_with_equal_ranks():
    decode_unit = InstanceShape(gpu="h800-80gb", tp=1, dp=144, ep=144)  # DeepSeek's decode unit
    assert decode_unit.nodes_per_stage(8) == 18
    assert decode_unit.node_slot(8) == 8


def test_a_stage_that_does_not_spread_evenly_over_nodes_cannot_be_placed():
    assert InstanceShape(gpu="g", tp=1, dp=12, ep=12).nodes_per_stage(8) == 0


def test_a_rank_whose_tp_group_leaves_the_node_cannot_be_placed():
    assert InstanceShape(gpu="g", tp=16, dp=1).nodes_per_stage(8) == 0


def test_a_stage_inside_one_node_takes_its_own_gpus_there():
    shape = InstanceShape(gpu="g", tp=2, dp=2, ep=4)
    assert (shape.nodes_per_stage(8), shape.node_slot(8)) == (1, 4)


def test_a_cluster_holds_spanning_instances_by_whole_nodes():
    from pdplan.hardware import Cluster, NodeType, get_gpu

    nodes = NodeType(name="h200", gpu=get_gpu("h200-141gb"), gpus_per_node=8, intra_node_bytes_per_s=1.0,
                     inter_node_bytes_per_s=1.0, count=5)
    cluster = Cluster(nodes=(nodes,))
    assert cluster.instances_of("h200-141gb", 1, 1, dp=16) == 2   # 2 nodes each, 5 nodes
    assert cluster.instances_of("h200-141gb", 2, 1, dp=2) == 10   # 4 GPUs each, 2 per node
    assert cluster.instances_of("h200-141gb", 8, 1) == 5


def test_a_tp_group_wider_than_a_node_takes_whole_nodes_of_an_nvlink_fabric():
    # TensorRT-LLM's TEP8 on GB200: a TP8 group over two compute trays of 4 in a rack of 72
    assert InstanceShape(gpu="g", tp=8).nodes_per_stage(4, fabric_gpus=72) == 2
    assert InstanceShape(gpu="g", tp=8, dp=2, ep=16).nodes_per_stage(4, fabric_gpus=72) == 4


def test_a_tp_group_does_not_leave_its_node_without_a_fabric_or_by_part_of_a_node():
    assert InstanceShape(gpu="g", tp=8).nodes_per_stage(4) == 0                    # NVLink on one board
    assert InstanceShape(gpu="g", tp=6).nodes_per_stage(4, fabric_gpus=72) == 0    # not whole trays
    assert InstanceShape(gpu="g", tp=80).nodes_per_stage(4, fabric_gpus=72) == 0   # beyond the rack
