"""Wide-EP candidate shapes: attention data parallelism with every routed expert whole on one GPU."""

from pdplan.candidates import enumerate_shapes
from pdplan.hardware import Cluster, NodeType, get_gpu, load_cluster
from pdplan.modelref import get_model
from tests.conftest import ROOT


def h200(count=4):
    return Cluster(nodes=(NodeType(name="h200", gpu=get_gpu("h200-141gb"), gpus_per_node=8,
                                   intra_node_bytes_per_s=1.0, inter_node_bytes_per_s=1.0, count=count),))


def wide_labels(model, cluster, dps, tps=(1,)):
    kept, rejected = enumerate_shapes(get_model(model), cluster, largest_request_tokens=8192, dps=dps, tps=tps,
                                      pps=(1,), phases=("decode",))
    return [s.shape_label() for s in kept if s.dp > 1], {r.shape.shape_label(): r.reason for r in rejected}


def test_a_moe_model_gets_wide_shapes_with_ep_equal_to_its_gpus():
    kept, _ = wide_labels("deepseek-v3@fp8", h200(), dps=(8, 16))
    assert kept == ["h200-141gb TP1 DP8 EP8 PP1", "h200-141gb TP1 DP16 EP16 PP1"]


def test_a_dense_model_gets_no_wide_shapes():
    kept, _ = wide_labels("llama-3.1-70b", h200(), dps=(8,))
    assert kept == []


def test_a_wide_shape_needing_more_nodes_than_the_cluster_has_is_rejected_by_name():
    kept, rejected = wide_labels("deepseek-v3@fp8", h200(count=1), dps=(16,))
    assert kept == []
    assert "spans more nodes than one node type holds (2 > 1)" in rejected["h200-141gb TP1 DP16 EP16 PP1"]


def test_a_wide_shape_that_cannot_spread_evenly_is_rejected_by_name():
    _, rejected = wide_labels("deepseek-v3@fp8", h200(), dps=(12,))
    assert "do not spread evenly" in rejected["h200-141gb TP1 DP12 EP12 PP1"]


def test_a_wide_shape_no_table_times_is_a_rejected_candidate_not_an_abort():
    from pdplan.cache import ResultCache
    from pdplan.errors import PdplanError
    from pdplan.latency.source import ProfileSource
    from pdplan.planner.measure import measure
    from pdplan.planner.request import PlanRequest
    from pdplan.slo import slo_from_flags
    from pdplan.workload import head, load_trace
    from tests.conftest import TRACE

    class NoWideTables(ProfileSource):
        def profile(self, model, gpu, tp, pp, **kw):
            if kw.get("dp", 1) > 1:
                raise PdplanError("no wide-EP table for this shape")
            return super().profile(model, gpu, tp, pp, **kw)

    request = PlanRequest(workload=head(load_trace(TRACE), 200), model=get_model("deepseek-v3@fp8"), cluster=h200(),
                          profiles=NoWideTables({}, compose=False), slo=slo_from_flags(1.0, 0.1, 0.9), target_rps=1.0,
                          tps=(1, 8), pps=(1,), dps=(8,))
    measured, rejected = measure(request, ResultCache(None, enabled=False))
    assert all(not m.shape.is_wide for m in measured) and measured
    assert {r.reason for r in rejected if r.shape.is_wide} >= {"no wide-EP table for this shape"}


def all_to_alls(engine, dps, tps=(1,), phases=("decode",), cluster=None):
    kept, _ = enumerate_shapes(get_model("deepseek-v3@fp8"), cluster or h200(), largest_request_tokens=8192, dps=dps,
                               tps=tps, pps=(1,), phases=phases, engine=engine)
    return {s.shape_label(): str(s.all_to_all) for s in kept if s.dp > 1}


def test_sglang_and_vllm_gather_a_wide_shape_on_one_node_and_dispatch_across_nodes():
    """As their exports start them: SGLang's default all-to-all gathers on one node and DeepEP runs across nodes;
    vLLM's default gathers, and across nodes its gather is timed by no table, so the plan keeps a dispatch."""
    for engine in ("sglang", "vllm"):
        assert all_to_alls(engine, dps=(8, 16)) == {"h200-141gb TP1 DP8 EP8 PP1": "gather",
                                                    "h200-141gb TP1 DP16 EP16 PP1": "dispatch"}
    assert all_to_alls("sglang", dps=(4,), tps=(2,)) == {"h200-141gb TP2 DP4 EP8 PP1": "gather"}


def test_tensorrt_llm_gathers_off_an_nvlink_domain_spanning_nodes_and_dispatches_on_one():
    """Its MoE layers run their NVLink all-to-all only where the NVLink domain spans compute trays (GB200 NVL72, the
    example cluster's 18 trays) and gather every rank's tokens on HGX nodes, over one node or two."""
    assert set(all_to_alls("trtllm", dps=(8, 16)).values()) == {"gather"}
    nvl72 = load_cluster(ROOT / "examples" / "cluster_gb200.yaml")
    assert set(all_to_alls("trtllm", dps=(4, 8), cluster=nvl72).values()) == {"dispatch"}


def gb200_rack_as_one_node():
    return Cluster(nodes=(NodeType(name="nvl72", gpu=get_gpu("gb200-185gb"), gpus_per_node=72,
                                   intra_node_bytes_per_s=1.0, inter_node_bytes_per_s=1.0, count=1),))


def test_sglang_and_vllm_dispatch_a_wide_shape_across_gb200_trays_however_the_cluster_groups_them():
    """A GB200 rank group beyond one compute tray of 4 spans hosts, where SGLang's GB200 recipes run DeepEP: so
    on the example's trays and on a rack written as one node of 72 alike; within one tray the engines gather."""
    trays = load_cluster(ROOT / "examples" / "cluster_gb200.yaml")
    for engine in ("sglang", "vllm"):
        for cluster in (trays, gb200_rack_as_one_node()):
            assert set(all_to_alls(engine, dps=(8, 16, 32), cluster=cluster).values()) == {"dispatch"}
        assert all_to_alls(engine, dps=(2,), tps=(2,), cluster=trays) == {"gb200-185gb TP2 DP2 EP4 PP1": "gather"}


def test_redundant_experts_let_sglang_run_an_ep_that_does_not_divide_the_models_experts():
    """SGLang refuses EP 24 for DeepSeek's 256 experts; with 32 redundant slots (288 = 12 × 24), as srt-slurm's GB200
    recipes run DEP24 decodes, the shape is kept, dispatched across its six trays."""
    trays = load_cluster(ROOT / "examples" / "cluster_gb200.yaml")
    without, rejected = enumerate_shapes(get_model("deepseek-v3@fp8"), trays, largest_request_tokens=8192, dps=(24,),
                                         tps=(1,), pps=(1,), phases=("decode",), engine="sglang")
    assert [s for s in without if s.dp > 1] == []
    assert "256 routed experts, redundant ones included, over EP 24" in \
        {r.shape.shape_label(): r.reason for r in rejected}["gb200-185gb TP1 DP24 EP24 PP1"]
    kept, _ = enumerate_shapes(get_model("deepseek-v3@fp8"), trays, largest_request_tokens=8192, dps=(24,), tps=(1,),
                               pps=(1,), phases=("decode",), engine="sglang", redundant_experts=32)
    assert [(s.shape_label(), str(s.all_to_all)) for s in kept if s.dp > 1] == [("gb200-185gb TP1 DP24 EP24 PP1",
                                                                                "dispatch")]


def test_redundant_experts_that_do_not_spread_evenly_reject_the_shape_by_name():
    _, rejected = enumerate_shapes(get_model("deepseek-v3@fp8"), h200(), largest_request_tokens=8192, dps=(16,),
                                   tps=(1,), pps=(1,), phases=("decode",), redundant_experts=8)
    assert "256 + 8 redundant experts do not spread evenly over EP 16" in \
        {r.shape.shape_label(): r.reason for r in rejected}["h200-141gb TP1 DP16 EP16 PP1"]


def test_a_gather_is_timed_from_the_operator_tables_only():
    """The wide-EP roofline times a dispatch: without composition a gathered shape has no profile, said why."""
    import pytest

    from pdplan.errors import PdplanError
    from pdplan.latency.source import ProfileSource

    with pytest.raises(PdplanError, match="gathered tokens are timed from AIConfigurator's operator tables only") \
            as refused:
        ProfileSource({}, compose=False).profile(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 1, 1, dp=8,
                                                 ep=8, all_to_all="gather")
    assert refused.value.field == "all_to_all"


def test_a_gather_the_tables_cannot_time_says_what_they_lack_and_the_way_out():
    """SGLang gathers an instance of one node; AIConfigurator measured no FP8 MoE of Qwen3-235B's shape under SGLang
    on H200, so the refusal names the gather, the missing measurement and the dispatch the wide-EP roofline times."""
    import pytest

    from pdplan.errors import PdplanError
    from pdplan.latency.source import ProfileSource

    pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")
    with pytest.raises(PdplanError, match=r"gathered tokens are timed from AIConfigurator's operator tables only "
                                          r"\(no sglang MoE measurement on h200_sxm .*\).*--all-to-all dispatch") \
            as refused:
        ProfileSource({}, engine="sglang").profile(get_model("qwen3-235b-a22b@fp8"), get_gpu("h200-141gb"), 1, 1,
                                                   dp=8, ep=8, all_to_all="gather")
    assert refused.value.field == "all_to_all"


def running_caps(engine, dps, phases=("prefill", "decode", "colocated"), draft_tokens=0):
    """The requests per rank each wide shape kept under ``engine`` is held to, by (phase, label); None: its KV."""
    kept, _ = enumerate_shapes(get_model("deepseek-v3@fp8"), h200(), largest_request_tokens=8192, dps=dps, tps=(1,),
                               pps=(1,), phases=phases, engine=engine, draft_tokens=draft_tokens)
    return {(s.phase, s.shape_label()): s.max_running_requests for s in kept if s.dp > 1}


def test_sglang_decode_ranks_on_deepeps_low_latency_kernels_run_at_most_its_128_tokens():
    """SGLang decodes an instance across nodes with DeepEP's low-latency kernels, which take at most
    SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK (128 by default) tokens per rank and step; a prefill's normal
    kernels and a gather on one node have no such cap."""
    caps = running_caps("sglang", dps=(8, 16))
    assert caps[("decode", "h200-141gb TP1 DP16 EP16 PP1")] == 128
    assert caps[("colocated", "h200-141gb TP1 DP16 EP16 PP1")] == 128
    assert caps[("prefill", "h200-141gb TP1 DP16 EP16 PP1")] is None
    assert caps[("decode", "h200-141gb TP1 DP8 EP8 PP1")] is None


def test_speculative_decoding_divides_the_deepep_budget_by_the_tokens_each_request_verifies():
    caps = running_caps("sglang", dps=(16,), phases=("decode",), draft_tokens=3)
    assert caps == {("decode", "h200-141gb TP1 DP16 EP16 PP1"): 128 // 4}


def test_vllm_decode_ranks_on_deepeps_low_latency_kernels_run_at_most_its_256_token_budget():
    """vLLM's export decodes across nodes with --all2all-backend deepep_low_latency, whose buffers hold its batched-DP
    token budget (256 by default); its prefill runs the high-throughput kernels, not capped; a decode on one node
    runs at most vLLM's own default on an H200, 1,024 requests a rank."""
    caps = running_caps("vllm", dps=(8, 16))
    assert caps[("decode", "h200-141gb TP1 DP16 EP16 PP1")] == 256
    assert caps[("prefill", "h200-141gb TP1 DP16 EP16 PP1")] is None
    assert caps[("decode", "h200-141gb TP1 DP8 EP8 PP1")] == 1024


def test_tensorrt_llm_leaves_the_ranks_to_their_kv():
    assert set(running_caps("trtllm", dps=(8, 16)).values()) == {None}


def test_a_vllm_colocated_instance_across_nodes_is_refused_for_the_gather_no_table_times():
    """vLLM's export keeps its default gather for a colocated instance (one backend serves both phases, and its
    DeepEP backends suit one each), so the shape is timed as that gather; over nodes no all-reduce table measures
    it, and the profile is refused, said why. SGLang, which starts DeepEP there, dispatches."""
    import pytest

    from pdplan.errors import PdplanError
    from pdplan.latency.compose import tables
    from pdplan.latency.source import ProfileSource

    if not tables.installed():
        pytest.skip("composed profiles need the optional extra pdplan[aic]")
    assert all_to_alls("vllm", dps=(16,), phases=("colocated",)) == {"h200-141gb TP1 DP16 EP16 PP1": "gather"}
    assert all_to_alls("sglang", dps=(16,), phases=("colocated",)) == {"h200-141gb TP1 DP16 EP16 PP1": "dispatch"}
    source = ProfileSource({}, engine="vllm")
    with pytest.raises(PdplanError, match="no vllm all-reduce measured over 16 GPUs on h200_sxm to gather DP 16 "
                                          "ranks' tokens for their whole experts") as refused:
        source.profile(get_model("deepseek-v3@fp8"), get_gpu("h200-141gb"), 1, 1, dp=16, ep=16, all_to_all="gather")
    assert refused.value.field == "all_to_all"


def test_a_tp8_group_over_two_gb200_trays_is_a_candidate_as_tensorrt_llm_runs_its_tep8():
    trays = load_cluster(ROOT / "examples" / "cluster_gb200.yaml")
    kept, _ = enumerate_shapes(get_model("deepseek-v3@fp8"), trays, largest_request_tokens=8192, tps=(8,), pps=(1,),
                               phases=("decode",), engine="trtllm")
    assert [s.shape_label() for s in kept] == ["gb200-185gb TP8 PP1"]


def test_a_tp_group_beyond_an_hgx_node_is_refused_naming_the_rule():
    _, rejected = wide_labels("deepseek-v3@fp8", h200(), dps=(1,), tps=(16,))
    assert rejected["h200-141gb TP16 PP1"].endswith("TP 16 > 8 GPUs per node")


def test_vllm_ranks_whose_tp_group_spans_trays_are_refused_as_its_export_starts_whole_ranks_per_node():
    trays = load_cluster(ROOT / "examples" / "cluster_gb200.yaml")
    kept, rejected = enumerate_shapes(get_model("deepseek-v3@fp8"), trays, largest_request_tokens=8192, tps=(8,),
                                      pps=(1,), dps=(2,), phases=("decode",), engine="vllm")
    reasons = {r.shape.shape_label(): r.reason for r in rejected}
    assert "vllm-whole-ranks" in reasons["gb200-185gb TP8 DP2 EP16 PP1"]
    assert [s.shape_label() for s in kept] == ["gb200-185gb TP8 PP1"]
