"""Candidate shapes: kept when they fit, rejected with a reason when they do not."""

from pdplan.candidates import enumerate_shapes, gpu_types_for
from pdplan.hardware import default_cluster_path, load_cluster
from pdplan.modelref import get_model

CLUSTER = load_cluster(default_cluster_path())


def test_decode_may_use_the_power_capped_h100():
    assert gpu_types_for(CLUSTER, "decode") == ("a100-80gb", "h100-80gb", "h100-80gb-pcap")
    assert "h100-80gb-pcap" not in gpu_types_for(CLUSTER, "prefill")


def test_llama2_70b_on_one_a100_is_rejected_for_its_weights():
    kept, rejected = enumerate_shapes(get_model("llama2-70b"), CLUSTER, largest_request_tokens=4096,
                                      phases=("prefill",))
    reasons = {r.shape.label: r.reason for r in rejected}
    assert reasons["prefill a100-80gb TP1 PP1"].startswith("a100-80gb TP1 PP1: weights 128.5 GiB per GPU")
    assert any(s.label == "prefill a100-80gb TP4 PP1" for s in kept)


def test_shapes_that_cannot_hold_the_largest_request_are_rejected():
    _, rejected = enumerate_shapes(get_model("llama2-70b"), CLUSTER, largest_request_tokens=50_000,
                                   phases=("decode",), tps=(2,), pps=(1,))
    assert all("KV room for" in r.reason for r in rejected)


def test_colocated_shapes_come_once_per_chunk_budget():
    kept, _ = enumerate_shapes(get_model("llama2-70b"), CLUSTER, largest_request_tokens=4096,
                               phases=("colocated",), tps=(4,), pps=(1,), chunk_sizes=(512, 2048))
    assert sorted(s.chunk_tokens for s in kept if s.gpu == "a100-80gb") == [512, 2048]


def test_a_cluster_of_power_capped_nodes_gives_shapes_for_every_phase(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("nodes:\n  - {name: n, gpu: h100-80gb-pcap, gpus_per_node: 8, intra_node_gb_s: 450,"
                    " inter_node_gb_s: 50, count: 2}\n")
    kept, _ = enumerate_shapes(get_model("llama2-70b"), load_cluster(path), largest_request_tokens=4096)
    assert {(s.phase, s.gpu) for s in kept} == {(phase, "h100-80gb-pcap")
                                                for phase in ("prefill", "decode", "colocated")}
