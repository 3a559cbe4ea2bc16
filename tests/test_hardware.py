"""GPU catalog and cluster files."""

import pytest

from pdplan.errors import PdplanError
from pdplan.hardware import NodeType, default_cluster_path, get_gpu, gpu_catalog, load_cluster, load_gpu_catalog
from tests.conftest import ROOT


def cluster_file(tmp_path, node: str, rest: str = ""):
    """A cluster file ``c.yaml`` of one node type, written as a flow mapping (``node``), and ``rest`` below."""
    path = tmp_path / "c.yaml"
    path.write_text(f"nodes:\n  - {{{node}}}\n{rest}")
    return path


def test_catalog_has_the_four_gpu_types():
    assert {"a100-80gb", "h100-80gb", "h100-80gb-pcap", "h200-141gb"} <= set(gpu_catalog())


def test_every_catalog_number_names_its_source():
    for gpu in gpu_catalog().values():
        if gpu.base is None:
            assert {"memory_gib", "bf16_tflops", "hbm_tb_s", "nvlink_gb_s", "network_gb_s", "tdp_w",
                    "usd_per_hour"} <= set(gpu.sources), gpu.name


def test_capped_h100_runs_at_70_percent_of_rated_power_on_h100_hardware():
    capped, full = get_gpu("h100-80gb-pcap"), get_gpu("h100-80gb")
    assert capped.tdp_w == pytest.approx(0.7 * full.tdp_w)
    assert capped.physical == "h100-80gb"
    assert capped.memory_bytes == full.memory_bytes


def test_unknown_gpu_lists_known_names():
    with pytest.raises(PdplanError, match=r"unknown GPU 'b300' \(known: a100-80gb, b200-180gb, "):
        get_gpu("b300")


def test_shipped_cluster_loads_with_price_overrides():
    cluster = load_cluster(default_cluster_path())
    assert cluster.gpu_types == ("a100-80gb", "h100-80gb")
    assert cluster.node("a100-dgx").gpus_per_node == 8


def test_unbounded_node_count_is_none(tmp_path):
    path = cluster_file(tmp_path, "name: n, gpu: h100-80gb, gpus_per_node: 8,"
                        " intra_node_gb_s: 450, inter_node_gb_s: 50, count: unbounded")
    assert load_cluster(path).nodes[0].count is None


NODE = ("  - name: a\n    gpu: a100-80gb\n    gpus_per_node: 8\n"
        "    intra_node_gb_s: 300\n    inter_node_gb_s: 25\n    count: 2\n")

BAD_CLUSTERS = [
    ("", r"c.yaml: top level must be a mapping, got NoneType"),
    ("nodes: []\n", r"c.yaml:1: nodes must be a non-empty list"),
    ("nodes:\n" + NODE.replace("gpus_per_node: 8", "gpus_per_node: 0"),
     r"c.yaml:4: nodes\[0\].gpus_per_node must be >= 1, got 0"),
    ("nodes:\n" + NODE.replace("a100-80gb", "tpu-v5"),
     r"c.yaml:3: nodes\[0\].gpu must be one of a100-80gb, b200-180gb, b300-288gb, gb200-185gb, gb300-288gb, "
     r"h100-80gb, h100-80gb-pcap, h200-141gb, got 'tpu-v5'"),
    ("nodes:\n" + NODE.replace("    count: 2\n", ""), None),
    ("nodes:\n" + NODE + NODE, r"c.yaml:8: nodes\[1\].name must be unique across nodes, got 'a'"),
    ("nodes:\n" + NODE.replace("inter_node_gb_s: 25", "inter_node_gb_s: -1"),
     r"c.yaml:6: nodes\[0\].inter_node_gb_s must be >= 0.001, got -1"),
    ("nodes:\n" + NODE + "prices:\n  a100: 3\n", r"c.yaml:\d+: prices.a100 is not a known GPU"),
    ("!!python/object/apply:os.system ['true']\n", r"c.yaml:1: invalid YAML"),
    ("nodes:\n" + NODE.replace("gpus_per_node: 8", "gpus_per_node: 16"),
     r"c.yaml:4: nodes\[0\].gpus_per_node must be at most 8, the GPUs one a100-80gb NVLink domain holds"),
]


@pytest.mark.parametrize("text,message", BAD_CLUSTERS,
                         ids=["empty", "no-nodes", "zero-gpus", "unknown-gpu", "count-defaults",
                              "duplicate-name", "negative-bandwidth", "unknown-price-gpu", "python-tag",
                              "node-beyond-nvlink-domain"])
def test_bad_cluster_file_names_file_line_and_field(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    if message is None:  # a missing count means unbounded, which is valid
        assert load_cluster(path).nodes[0].count is None
        return
    with pytest.raises(PdplanError, match=message):
        load_cluster(path)


def test_hourly_cost_adds_metered_energy_at_the_power_limit(tmp_path):
    path = cluster_file(tmp_path, "name: n, gpu: h100-80gb, gpus_per_node: 8,"
                        " intra_node_gb_s: 450, inter_node_gb_s: 50",
                        "prices: {h100-80gb: 1.0}\nenergy_usd_per_kwh: 0.1\npue: 1.5\n")
    cluster = load_cluster(path)
    assert cluster.priced_gpu("h100-80gb").usd_per_hour == pytest.approx(1.0 + 0.7 * 1.5 * 0.1)
    assert cluster.priced_gpu("h100-80gb-pcap").usd_per_hour == pytest.approx(1.0 + 0.49 * 1.5 * 0.1)


def test_nodes_declared_power_capped_run_and_price_their_own_type(tmp_path):
    path = cluster_file(tmp_path, "name: n, gpu: h100-80gb-pcap, gpus_per_node: 8,"
                        " intra_node_gb_s: 450, inter_node_gb_s: 50, count: 2",
                        "prices: {h100-80gb-pcap: 0.9}\n")
    cluster = load_cluster(path)
    assert [n.name for n in cluster.nodes_for("h100-80gb-pcap")] == ["n"]
    assert cluster.nodes_for("h100-80gb") == ()
    assert cluster.priced_gpu("h100-80gb-pcap").usd_per_hour == pytest.approx(0.9)


def test_a_node_larger_than_any_nvlink_domain_is_refused(tmp_path):
    path = cluster_file(tmp_path, "name: n, gpu: h100-80gb, gpus_per_node: 100000,"
                        " intra_node_gb_s: 450, inter_node_gb_s: 50")
    with pytest.raises(PdplanError, match=r"c.yaml:2: nodes\[0\].gpus_per_node must be <= 72, got 100000"):
        load_cluster(path)


def rack_as_one_node(tmp_path):
    """A GB200 NVL72 rack written as one node of 72, as the example cluster wrote it before it named the trays."""
    path = cluster_file(tmp_path, "name: nvl72, gpu: gb200-185gb, gpus_per_node: 72,"
                        " intra_node_gb_s: 900, inter_node_gb_s: 100, count: 2")
    return load_cluster(path)


def test_gb200_nvl72_rack_may_still_be_one_node_of_72_whose_hosts_are_its_trays_of_4(tmp_path):
    node = rack_as_one_node(tmp_path).nodes[0]
    assert (node.gpus_per_node, node.host_gpus) == (72, 4)


def test_a_cluster_with_a_node_larger_than_a_host_says_its_exports_will_be_refused(tmp_path):
    notice = rack_as_one_node(tmp_path).hosts_notice()
    assert "node type nvl72 holds 72 gb200-185gb GPUs, but one host of them holds 4" in notice
    assert "export refuses" in notice
    assert load_cluster(ROOT / "examples" / "cluster_gb200.yaml").hosts_notice() is None
    assert load_cluster(default_cluster_path()).hosts_notice() is None


def test_a_type_of_trays_beyond_one_nvlink_rack_says_its_instances_are_planned_as_if_nvlink_joined_them(tmp_path):
    path = cluster_file(tmp_path, "name: trays, gpu: gb200-185gb, gpus_per_node: 4,"
                        " intra_node_gb_s: 900, inter_node_gb_s: 900, count: 36")
    notice = load_cluster(path).racks_notice()
    assert "node type trays holds 36 nodes of 4 gb200-185gb GPUs, more than one NVLink domain joins (72)" in notice
    assert load_cluster(ROOT / "examples" / "cluster_gb200.yaml").racks_notice() is None   # its 18 trays: one rack
    assert rack_as_one_node(tmp_path).racks_notice() is None                                # a rack per node
    assert load_cluster(default_cluster_path()).racks_notice() is None                      # HGX boards


def test_a_gb200_host_is_a_compute_tray_of_4_and_an_hgx_host_its_boards_8():
    assert get_gpu("gb200-185gb").gpus_per_host == get_gpu("gb300-288gb").gpus_per_host == 4
    assert {get_gpu(name).gpus_per_host for name in ("a100-80gb", "h100-80gb", "h200-141gb", "b200-180gb",
                                                     "b300-288gb")} == {8}


def test_the_example_gb200_rack_is_its_18_trays_each_one_host():
    nodes = load_cluster(ROOT / "examples" / "cluster_gb200.yaml").nodes
    assert [(n.gpus_per_node, n.host_gpus, n.count) for n in nodes] == [(4, 4, 18)]


def test_a_host_larger_than_the_gpus_nvlink_domain_is_refused_naming_the_field(tmp_path):
    path = tmp_path / "gpus.yaml"
    path.write_text("gpus:\n  g:\n    memory_gib: 80\n    bf16_tflops: 989\n    hbm_tb_s: 3.35\n    nvlink_gb_s: 450\n"
                    "    network_gb_s: 50\n    tdp_w: 700\n    usd_per_hour: 4\n    host_gpus: 16\n")
    with pytest.raises(PdplanError, match=r"gpus.yaml:10: gpus.g.host_gpus must be <= 8, got 16"):
        load_gpu_catalog(path)


def test_only_a_gpu_whose_nvlink_domain_spans_compute_trays_sits_in_an_nvlink_fabric():
    """GB200 and GB300 NVL72 join 72 GPUs through NVLink switch trays; an HGX board joins its own eight."""
    assert get_gpu("gb200-185gb").nvlink_fabric and get_gpu("gb300-288gb").nvlink_fabric
    assert not any(get_gpu(name).nvlink_fabric for name in ("a100-80gb", "h100-80gb", "h200-141gb", "b200-180gb",
                                                            "b300-288gb"))


@pytest.mark.parametrize("name, mib", [("b300-288gb", 275_040), ("gb300-288gb", 284_208)])
def test_blackwell_ultra_holds_the_memory_nvidia_smi_reports_and_fp4_tensor_cores(name, mib):
    """AIConfigurator's b300_sxm.yaml and gb300.yaml: 275,040 and 284,208 MiB reported by nvidia-smi."""
    gpu = get_gpu(name)
    assert gpu.memory_bytes == pytest.approx(mib * 2**20, rel=1e-3) and gpu.blackwell


def test_a_tp_group_may_take_whole_trays_of_a_gb200_rack_but_never_two_hgx_nodes():
    """NVLink joins GB200 trays into one rack, so a TP8 group takes two of its trays; an HGX board's NVLink ends at
    the board, so two nodes of 4 H100s (shares of boards) never join one TP8 group."""
    from pdplan.shape import InstanceShape

    (tray,) = load_cluster(ROOT / "examples" / "cluster_gb200.yaml").nodes
    hgx = NodeType(name="hgx", gpu=get_gpu("h100-80gb"), gpus_per_node=4, intra_node_bytes_per_s=1.0,
                   inter_node_bytes_per_s=1.0, count=2)
    assert (get_gpu("gb200-185gb").fabric_gpus, get_gpu("h100-80gb").fabric_gpus) == (72, 0)
    assert tray.stage_nodes(InstanceShape(gpu="gb200-185gb", tp=8)) == 2
    assert hgx.stage_nodes(InstanceShape(gpu="h100-80gb", tp=8)) == 0


def test_tensor_flops_per_precision_and_refusal_names_what_the_gpu_runs():
    assert get_gpu("b200-180gb").tensor_flops("fp4") == pytest.approx(9000e12)
    assert get_gpu("h100-80gb").tensor_flops("fp8") == pytest.approx(1979e12)
    assert get_gpu("h100-80gb-pcap").tensor_flops("fp8") == pytest.approx(1979e12)  # inherited from its base
    with pytest.raises(PdplanError, match=r"a100-80gb has no fp8 tensor cores \(it runs bf16\)"):
        get_gpu("a100-80gb").tensor_flops("fp8")
    with pytest.raises(PdplanError, match=r"h200-141gb has no fp4 tensor cores \(it runs bf16, fp8\)"):
        get_gpu("h200-141gb").tensor_flops("fp4")
