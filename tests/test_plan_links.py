"""The KV link a plan gives a pair of pools: a decoding instance's ingress on the path the placement gives it, and,
where the two pools landed on different node types, at most the network between the types (two GB200 racks hand
off over each GPU's NIC, not the rack's NVLink)."""

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import load_cluster
from pdplan.placement.problem import Candidate, Instance, Solution
from pdplan.planner.plans import path_bytes_per_s

GB = 1e9
RACK = """
  - name: {name}
    gpu: gb200-185gb
    gpus_per_node: 4
    intra_node_gb_s: 900
    inter_node_gb_s: 900
    scale_out_gb_s: 100
    count: 18
"""
PREFILL = Candidate(phase="prefill", gpu="gb200-185gb", tp=1, dp=8, ep=8, goodput_rps=10.0)
DECODE = Candidate(phase="decode", gpu="gb200-185gb", tp=1, dp=16, ep=16, goodput_rps=10.0)


def _racks(tmp_path):
    path = tmp_path / "racks.yaml"
    path.write_text("nodes:" + RACK.format(name="rack-a") + RACK.format(name="rack-b"))
    return load_cluster(path)


def _placed(prefill_rack: str, decode_rack: str) -> Solution:
    def instance(cand, rack, nodes):
        return Instance(id=f"{cand.phase}-0", candidate=cand, node_type=rack, nodes_per_stage=nodes,
                        stage_nodes=tuple(f"{rack}-{i}" for i in range(nodes)),
                        stage_gpus=tuple((0, 1, 2, 3) for _ in range(nodes)))
    return Solution(replicas={PREFILL: 1, DECODE: 1},
                    instances=(instance(PREFILL, prefill_rack, 2), instance(DECODE, decode_rack, 4)),
                    gpus_total=24, usd_per_hour=0.0, power_w=0.0, goodput_rps=10.0, phase_capacity_rps={},
                    status="OPTIMAL", objective=0.0, bound=0.0, gap=0.0, wall_s=0.0)


def test_a_handoff_inside_one_rack_takes_its_nvlink(tmp_path):
    """16 decode GPUs at 900 GB/s each."""
    assert path_bytes_per_s(_placed("rack-a", "rack-a"), _racks(tmp_path), PREFILL, DECODE,
                            "inter-node") == pytest.approx(16 * 900 * GB)


def test_a_handoff_between_racks_takes_the_network_between_them(tmp_path):
    """16 decode GPUs at their 100 GB/s NICs."""
    assert path_bytes_per_s(_placed("rack-a", "rack-b"), _racks(tmp_path), PREFILL, DECODE,
                            "inter-node") == pytest.approx(16 * 100 * GB)


def test_node_types_that_state_no_scale_out_hand_off_at_their_inter_node_bandwidth(tmp_path):
    """Two HGX node types share one network: the decode's NICs, as before."""
    prefill = Candidate(phase="prefill", gpu="h200-141gb", tp=8, goodput_rps=10.0)
    decode = Candidate(phase="decode", gpu="h200-141gb", tp=8, goodput_rps=10.0)
    assert path_bytes_per_s(_hgx_pair(prefill, decode), _hgx(tmp_path), prefill, decode,
                            "inter-node") == pytest.approx(8 * 50 * GB)


def _hgx(tmp_path):
    path = tmp_path / "hgx.yaml"
    path.write_text("nodes:\n" + "".join(
        f"  - {{name: {name}, gpu: h200-141gb, gpus_per_node: 8, intra_node_gb_s: 450, inter_node_gb_s: 50}}\n"
        for name in ("hgx-a", "hgx-b")))
    return load_cluster(path)


def _hgx_pair(prefill: Candidate, decode: Candidate) -> Solution:
    """One instance of each shape, the prefill on node type hgx-a, the decode on hgx-b."""
    def instance(cand, node):
        return Instance(id=cand.phase, candidate=cand, node_type=node, stage_nodes=(f"{node}-0",),
                        stage_gpus=(tuple(range(cand.stage_gpus)),))
    return Solution(replicas={prefill: 1, decode: 1}, instances=(instance(prefill, "hgx-a"), instance(decode, "hgx-b")),
                    gpus_total=prefill.gpus + decode.gpus, usd_per_hour=0.0, power_w=0.0, goodput_rps=10.0,
                    phase_capacity_rps={}, status="OPTIMAL", objective=0.0, bound=0.0, gap=0.0, wall_s=0.0)


def test_a_plans_link_is_the_decodes_ingress_whatever_the_prefill_sends_from(tmp_path):
    """A DeepSeek prefill of attention TP 1 into a TP8 decode: the link states the decode's eight NICs, as a plan file
    states its link; how much of it the one sending GPU fills is the simulator's to derive
    (``test_sim_handoff``)."""
    prefill = Candidate(phase="prefill", gpu="h200-141gb", tp=1, dp=8, ep=8, goodput_rps=10.0)
    decode = Candidate(phase="decode", gpu="h200-141gb", tp=8, goodput_rps=10.0)
    assert path_bytes_per_s(_hgx_pair(prefill, decode), _hgx(tmp_path), prefill, decode,
                            "inter-node") == pytest.approx(8 * 50 * GB)


def test_a_scale_out_bandwidth_that_is_no_bandwidth_is_refused_naming_file_line_and_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("nodes:" + RACK.format(name="rack-a").replace("scale_out_gb_s: 100", "scale_out_gb_s: -1"))
    with pytest.raises(PdplanError, match=r"bad.yaml:\d+: nodes\[0\].scale_out_gb_s must be >= 0.001, got -1"):
        load_cluster(path)
