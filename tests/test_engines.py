"""Engine capabilities: each rule an engine's source enforces refuses its shape in ``optimize
--engine``, in ``validate`` and in ``export``; a plan that keeps the rules still exports."""

from __future__ import annotations

import copy
import re
import shlex
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from pdplan.candidates import enumerate_shapes
from pdplan.engines import CHUNK_RULES, EXPERT_RULES, RANK_RULES, RULES, Role, plan_refusal
from pdplan.errors import PdplanError
from pdplan.hardware import default_cluster_path, load_cluster
from pdplan.manifest.check import check_manifest
from pdplan.manifest.document import seal
from pdplan.manifest.export import FORMATS, export_manifest
from pdplan.modelref import get_model
from pdplan.placement import Candidate
from pdplan.planner.pipeline import unpairable
from tests.conftest import ROOT, TRACE

NIXL_DECODE_PP = "nixl-decode-pp: vLLM's NIXL connector refuses a kv_consumer (decode) instance"
SGLANG_EQUAL_TP = "sglang-equal-tp: SGLang P/D without wide expert parallelism needs equal TP"
SGLANG_EVEN_EXPERTS = ("sglang-even-experts: SGLang's MoE layer needs EP to divide the routed experts plus the "
                       "redundant ones")


@pytest.fixture(scope="module")
def runnable(manifests) -> dict:
    """The P/D fixture: TP 2 on both sides, a pipeline-parallel decode, KV over Mooncake."""
    manifest = yaml.safe_load(manifests["disaggregated"].read_text())
    decode = next(p for p in manifest["pools"] if p["phase"] == "decode")
    assert {p["tp"] for p in manifest["pools"]} == {2} and decode["pp"] > 1
    return manifest


def made_for(manifest: dict, engine: str | None) -> dict:
    """The manifest as ``optimize --engine engine`` writes it; None: as a manifest written before
    pdplan recorded the engine whose rules its search kept (it names none)."""
    edited = copy.deepcopy(manifest)
    edited["provenance"]["profiles"]["engine"] = engine
    if engine is None:
        edited["provenance"]["profiles"].pop("serving_engine", None)
    else:
        edited["provenance"]["profiles"]["serving_engine"] = engine
    return seal(edited)


def over_nixl(manifest: dict, *, engine: str | None = None) -> dict:
    """The plan with its KV over NIXL (and, given, planned for ``engine``), sealed again."""
    edited = copy.deepcopy(manifest)
    edited["transfer"].update(connector="nixl", connector_class="NixlConnector")
    return made_for(edited, engine)


def with_prefill_tp(manifest: dict, tp: int, *, engine: str | None = None) -> dict:
    edited = copy.deepcopy(manifest)
    next(p for p in edited["pools"] if p["phase"] == "prefill")["tp"] = tp
    return made_for(edited, engine)


def write(path: Path, manifest: dict) -> Path:
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def test_every_rule_cites_an_upstream_file_and_commit():
    for rule in (*RULES, *EXPERT_RULES, *CHUNK_RULES, *RANK_RULES):
        assert "/" in rule.source and "@" in rule.source, rule.name


def test_a_colocated_plan_faces_no_kv_rule():
    assert plan_refusal("vllm", "nixl", [Role(phase="colocated", gpu="h100-80gb", tp=2, pp=2)]) is None


def test_no_engine_named_means_no_rule():
    pools = [Role(phase="prefill", gpu="h100-80gb", tp=1, pp=1), Role(phase="decode", gpu="h100-80gb", tp=2, pp=2)]
    assert plan_refusal(None, "nixl", pools) is None


# --- nixl-decode-pp ------------------------------------------------------------------------------

def test_the_default_search_keeps_vllms_nixl_rule_and_says_so_in_explain(run_cli, tmp_path):
    """No --engine: the plan is made for vLLM (its tables compose, its pods are the default exports)."""
    code, out, err = run_cli("optimize", TRACE, "--requests-per-probe", "300", "--cache-dir", tmp_path / "cache",
                             "--mode", "disaggregated", "--explain", "--out", tmp_path / "plan.yaml")
    assert code == 0, err
    assert f"decode a100-80gb TP2 PP2: {NIXL_DECODE_PP}" in out
    plan = yaml.safe_load((tmp_path / "plan.yaml").read_text())
    assert all(p["pp"] == 1 for p in plan["pools"] if p["phase"] == "decode")
    assert plan["provenance"]["profiles"]["serving_engine"] == "vllm"
    for fmt in FORMATS:
        if fmt != "sglang":  # SGLang's equal-TP rule is not vLLM's
            assert export_manifest(plan, fmt)


def test_when_the_engine_rules_out_every_decode_shape_the_answer_says_so_not_goodput(run_cli, tmp_path):
    code, out, err = run_cli("optimize", TRACE, "--requests-per-probe", "300", "--cache-dir", tmp_path / "cache",
                             "--mode", "disaggregated", "--tp", "2", "--pp", "2", "--out", tmp_path / "plan.yaml")
    assert code == 2
    assert "every decode shape (3) is ruled out before it is measured: nixl-decode-pp" in err
    assert "goodput rules them out" not in err
    assert not (tmp_path / "plan.yaml").exists()


def test_nixl_decode_pp_is_rejected_for_optimize_engine_vllm():
    shapes, rejected = enumerate_shapes(get_model("llama2-70b"), load_cluster(default_cluster_path()),
                                        largest_request_tokens=4096, tps=(2,), pps=(1, 2), engine="vllm",
                                        connector="nixl")
    assert {(s.phase, s.pp) for s in shapes if s.phase == "decode"} == {("decode", 1)}
    assert {r.reason.rsplit(" (", 1)[0] for r in rejected if r.shape.phase == "decode"} == {
        "nixl-decode-pp: vLLM's NIXL connector refuses a kv_consumer (decode) instance with pipeline parallelism"}


def test_nixl_decode_pp_is_refused_by_validate_for_a_plan_made_for_vllm(run_cli, runnable, tmp_path):
    code, out, _ = run_cli("validate", write(tmp_path / "m.yaml", over_nixl(runnable, engine="vllm")))
    assert code == 1
    assert f"provenance.profiles.serving_engine: vllm cannot run this plan: {NIXL_DECODE_PP}" in out


@pytest.mark.parametrize("fmt", ["vllm", "dynamo", "llm-d", "k8s"])
def test_nixl_decode_pp_refuses_every_export_that_starts_vllm(run_cli, runnable, tmp_path, fmt):
    manifest = write(tmp_path / "m.yaml", over_nixl(runnable))
    assert run_cli("validate", manifest)[0] == 0  # an older manifest naming no engine is valid
    code, _, err = run_cli("export", manifest, "--format", fmt, "--out", tmp_path / "deploy")
    assert code == 2
    assert f"{fmt} export starts vllm, which cannot run this plan: {NIXL_DECODE_PP}" in " ".join(err.split())
    assert not (tmp_path / "deploy").exists()


# --- sglang-equal-tp -----------------------------------------------------------------------------

def test_sglang_equal_tp_is_refused_by_validate_for_a_plan_made_for_sglang(runnable):
    found = [str(v) for v in check_manifest(with_prefill_tp(runnable, 4, engine="sglang"))]
    assert any(line.startswith(f"provenance.profiles.serving_engine: sglang cannot run this plan: {SGLANG_EQUAL_TP}")
               for line in found), found


def test_sglang_equal_tp_refuses_the_sglang_export(runnable):
    with pytest.raises(PdplanError, match=f"sglang export starts sglang, which cannot run this plan: "
                                          f"{SGLANG_EQUAL_TP} on the prefill and decode sides "
                                          r"\(prefill TP 4, decode TP 2\)"):
        export_manifest(with_prefill_tp(runnable, 4), "sglang")


# --- sglang-even-experts -------------------------------------------------------------------------

def test_sglang_even_experts_keeps_an_ep_that_does_not_divide_the_experts_out_of_optimize_engine_sglang():
    """DeepSeek-V3's 256 routed experts over TP 2 × DP 12 = EP 24: SGLang's FusedMoE asserts at start, in every phase.
    vLLM's own MoE layer places them unevenly (``determine_expert_map``): its colocated pool, which gathers, keeps
    the shape; its decode pool across three nodes runs DeepEP, which asserts (``deepep-even-experts``). EP 32 divides
    them under both."""
    model, cluster = get_model("deepseek-v3", dtype="fp8"), load_cluster(ROOT / "examples" / "cluster_h200_64.yaml")

    def wide(engine: str, phase: str):
        shapes, rejected = enumerate_shapes(model, cluster, largest_request_tokens=4096, phases=(phase,),
                                            tps=(2,), pps=(1,), dps=(12, 16), engine=engine)
        return {s.ep for s in shapes if s.dp > 1}, {r.reason.split(":")[0] for r in rejected if r.shape.dp > 1}

    assert wide("sglang", "decode") == ({32}, {"sglang-even-experts"})
    assert wide("sglang", "colocated") == ({32}, {"sglang-even-experts"})
    assert wide("vllm", "decode") == ({32}, {"deepep-even-experts"})
    assert wide("vllm", "colocated") == ({24, 32}, set())


def test_vllm_keeps_an_uneven_ep_on_one_node_where_it_gathers_and_sglang_does_not():
    """TP 1 × DP 6 = EP 6 on one 8-GPU node: vLLM gathers the ranks' tokens (no DeepEP) and places 256 experts
    unevenly; SGLang refuses."""
    model, cluster = get_model("deepseek-v3", dtype="fp8"), load_cluster(ROOT / "examples" / "cluster_h200_64.yaml")
    for engine, kept in (("vllm", {6}), ("sglang", set())):
        shapes, _ = enumerate_shapes(model, cluster, largest_request_tokens=4096, phases=("decode",), tps=(1,),
                                     pps=(1,), dps=(6,), engine=engine)
        assert {s.ep for s in shapes if s.dp > 1} == kept


def test_sglang_even_experts_counts_the_redundant_experts_of_every_pool():
    def pool(phase: str, redundant: int) -> Role:
        return Role(phase=phase, gpu="h200-141gb", tp=1, dp=24, ep=24, experts=256 + redundant)

    for phase in ("prefill", "decode", "colocated"):
        assert plan_refusal("sglang", "nixl", [pool(phase, 0)]).startswith(SGLANG_EVEN_EXPERTS)
        assert plan_refusal("sglang", "nixl", [pool(phase, 8)]) is None
        assert plan_refusal("vllm", "nixl", [pool(phase, 0)]) is None


def test_trtllm_even_experts_keeps_an_ep_that_does_not_divide_the_experts_and_their_slots_out():
    """TensorRT-LLM asserts EP divides the routed experts (no load balancer) or the slots with EPLB's redundant ones:
    DeepSeek-V3's 256 over DP 12 = EP 12 is refused in optimize, 256 over EP 16 kept; 256 + 8 slots over EP 24 pass."""
    model, cluster = get_model("deepseek-v3", dtype="fp8"), load_cluster(ROOT / "examples" / "cluster_h200_64.yaml")
    shapes, rejected = enumerate_shapes(model, cluster, largest_request_tokens=4096, phases=("decode",), tps=(1,),
                                        pps=(1,), dps=(12, 16), engine="trtllm")
    assert {s.ep for s in shapes if s.dp > 1} == {16}
    assert {r.reason.split(":")[0] for r in rejected if r.shape.dp > 1} == {"trtllm-even-experts"}
    pool = Role(phase="prefill", gpu="h200-141gb", tp=1, dp=24, ep=24, experts=256 + 8)
    assert plan_refusal("trtllm", "nixl", [pool]) is None
    assert plan_refusal("trtllm", "nixl", [Role(phase="prefill", gpu="h200-141gb", tp=1, dp=24, ep=24,
                                                experts=256)]).startswith("trtllm-even-experts: ")


# --- sglang-page-chunk ---------------------------------------------------------------------------

SGLANG_PAGE_CHUNK = ("sglang-page-chunk: SGLang on Blackwell pages the KV 64 tokens at a time (trtllm_mha, trtllm_mla) "
                     "and needs each rank's --chunked-prefill-size to be whole pages")


def test_sglang_page_chunk_refuses_a_rank_chunk_of_part_pages_on_blackwell_only():
    """64 tokens a page: 1,000 is 15.6 pages, 1,024 is 16. A decode server takes no prompts (SGLang skips the
    check there); an H200 runs FlashAttention 3 with pages of one token; vLLM states no such rule."""
    def pool(phase: str, chunk: int, blackwell: bool = True) -> Role:
        return Role(phase=phase, gpu="b200-180gb" if blackwell else "h200-141gb", tp=8, chunk_tokens=chunk,
                    blackwell=blackwell)

    for phase in ("prefill", "colocated"):
        assert plan_refusal("sglang", "nixl", [pool(phase, 1000)]) == \
            f"{SGLANG_PAGE_CHUNK} ({phase}: a chunk of 1000 tokens per rank, pages of 64)"
        assert plan_refusal("sglang", "nixl", [pool(phase, 1024)]) is None
        assert plan_refusal("sglang", "nixl", [pool(phase, 1000, blackwell=False)]) is None
        assert plan_refusal("vllm", "nixl", [pool(phase, 1000)]) is None
    assert plan_refusal("sglang", "nixl", [pool("decode", 1000)]) is None


def test_optimize_engine_sglang_keeps_a_colocated_chunk_of_part_pages_out_on_blackwell():
    model = get_model("llama-3.1-8b")

    def chunks(engine: str, cluster: str) -> tuple[set, set]:
        shapes, rejected = enumerate_shapes(model, load_cluster(ROOT / "examples" / cluster),
                                            largest_request_tokens=4096, phases=("colocated",), tps=(1,), pps=(1,),
                                            chunk_sizes=(512, 1000), engine=engine)
        return {s.chunk_tokens for s in shapes}, {r.reason for r in rejected}

    assert chunks("sglang", "cluster_b200.yaml") == (
        {512}, {f"{SGLANG_PAGE_CHUNK} (colocated: a chunk of 1000 tokens per rank, pages of 64)"})
    assert chunks("sglang", "cluster_h200.yaml") == ({512, 1000}, set())
    assert chunks("vllm", "cluster_b200.yaml") == ({512, 1000}, set())


def test_sglang_profiles_on_blackwell_cut_a_prefill_cap_of_part_pages_to_whole_pages():
    """A cap bound by the KV capacity, or stated in a profile file, is any number of tokens; SGLang's prefill rank on
    Blackwell takes it as its chunk, so its profile's cap is the whole pages below it, and the notes say so."""
    from dataclasses import replace

    from pdplan.hardware import get_gpu
    from pdplan.latency.roofline import roofline_profile
    from pdplan.latency.source import ProfileSource

    model = get_model("llama-3.1-8b")

    def cap(engine: str, gpu: str) -> tuple[int, str]:
        stated = replace(roofline_profile(model, get_gpu(gpu), 1, 1), max_prefill_batch_tokens=10_000)
        source = ProfileSource(measured={(model.name, gpu, 1, 1): stated}, engine=engine, compose=False)
        found = source.profile(model, get_gpu(gpu), 1, 1)
        return found.max_prefill_batch_tokens, found.provenance.notes

    paged, notes = cap("sglang", "b200-180gb")
    assert paged == 9_984 and notes.endswith("prefill batch cap 10,000 cut to 9,984 tokens, whole KV pages of 64")
    assert cap("sglang", "h200-141gb")[0] == cap("vllm", "b200-180gb")[0] == 10_000


def test_simulate_says_a_profile_cap_below_the_plans_is_whole_kv_pages_under_sglang_on_blackwell(tmp_path):
    """A plan file asking for the KV-bound cap that SGLang's profile on Blackwell cut to whole pages is told why the
    profile allows less; under vLLM the same refusal has no such clause, nor under SGLang when the plan asks for more
    than the page the profile's cap was cut from."""
    from dataclasses import replace

    from pdplan.hardware import get_gpu
    from pdplan.latency.roofline import roofline_profile
    from pdplan.sim import load_plan
    from pdplan.sim.plan import resolve_pools

    model = get_model("llama-3.1-8b")
    profile = replace(roofline_profile(model, get_gpu("b200-180gb"), 1, 1), max_prefill_batch_tokens=9_984)
    for engine, asked, clause in (
            ("sglang", 10_000, ", whole KV pages of 64 tokens as sglang takes a rank's chunk on b200-180gb"),
            ("vllm", 10_000, ""), ("sglang", 20_000, "")):
        path = tmp_path / f"{engine}-{asked}.yaml"
        path.write_text(f"pdplan_plan: 1\nprofiles: {{engine: {engine}}}\ndefault_link: {{bandwidth_gb_s: 50}}\n"
                        "pools:\n  - {name: prefill, phase: prefill, "
                        f"model: llama-3.1-8b, gpu: b200-180gb, tp: 1, max_prefill_batch_tokens: {asked}}}\n"
                        "  - {name: decode, phase: decode, model: llama-3.1-8b, gpu: b200-180gb, tp: 1}\n")
        plan = load_plan(path)
        with pytest.raises(PdplanError) as refused:
            resolve_pools(plan, {pool.shape: profile for pool in plan.pools})
        assert str(refused.value).endswith(f"allows 9984{clause}")


def test_a_prefill_cap_under_one_kv_page_is_refused_naming_the_field():
    from dataclasses import replace

    from pdplan.hardware import get_gpu
    from pdplan.latency.roofline import roofline_profile
    from pdplan.latency.source import in_whole_pages

    profile = roofline_profile(get_model("llama-3.1-8b"), get_gpu("b200-180gb"), 1, 1)
    tiny = replace(profile, max_prefill_batch_tokens=50)
    with pytest.raises(PdplanError, match="a prefill batch cap of 50 tokens is less than one KV page of 64") as refused:
        in_whole_pages(tiny, 64)
    assert refused.value.field == "max_prefill_batch_tokens"


def test_the_sglang_export_refuses_a_blackwell_prefill_pool_whose_chunk_is_part_pages_naming_the_rule(runnable):
    edited = copy.deepcopy(runnable)
    prefill = next(p for p in edited["pools"] if p["phase"] == "prefill")
    prefill.update(gpu="b200-180gb")
    prefill["scheduling"]["max_prefill_batch_tokens"] = 10_000
    with pytest.raises(PdplanError, match=re.escape(f"sglang export starts sglang, which cannot run this plan: "
                                                    f"{SGLANG_PAGE_CHUNK} (prefill: a chunk of 10000 tokens per rank")):
        export_manifest(seal(edited), "sglang")
    found = [str(v) for v in check_manifest(made_for(edited, "sglang"))]
    assert any(line.startswith(f"provenance.profiles.serving_engine: sglang cannot run this plan: {SGLANG_PAGE_CHUNK}")
               for line in found)


# --- trtllm-attention-dp -------------------------------------------------------------------------

TRTLLM_ATTENTION_DP = ("trtllm-attention-dp: TensorRT-LLM's attention data parallelism (enable_attention_dp) makes "
                       "each of its tensor_parallel_size GPUs one DP rank, so attention DP needs TP 1")


def test_trtllm_attention_dp_refuses_ranks_of_two_gpus_in_every_phase_where_sglang_and_vllm_run_them():
    def pool(phase: str, tp: int) -> Role:
        return Role(phase=phase, gpu="h200-141gb", tp=tp, dp=4, ep=4 * tp, experts=256)

    for phase in ("prefill", "decode", "colocated"):
        assert plan_refusal("trtllm", "nixl", [pool(phase, 2)]) == f"{TRTLLM_ATTENTION_DP} (TP 2 × DP 4)"
        assert plan_refusal("trtllm", "nixl", [pool(phase, 1)]) is None
        assert plan_refusal("sglang", "nixl", [pool(phase, 2)]) is None
        assert plan_refusal("vllm", "nixl", [pool(phase, 2)]) is None


def test_optimize_engine_trtllm_keeps_attention_dp_ranks_of_two_gpus_out_naming_the_rule():
    """TP 2 × DP 4 on one H200 node: SGLang (--tp-size 8 --dp-size 4) runs it, TensorRT-LLM cannot (its
    tensor_parallel_size 8 with attention DP is DP 8); TP 1 × DP 8 stays."""
    model, cluster = get_model("deepseek-v3", dtype="fp8"), load_cluster(ROOT / "examples" / "cluster_h200_64.yaml")

    def wide(engine: str):
        shapes, rejected = enumerate_shapes(model, cluster, largest_request_tokens=4096, phases=("decode",),
                                            tps=(1, 2), pps=(1,), dps=(4, 8), engine=engine)
        return ({s.shape_label() for s in shapes if s.dp > 1},
                {r.shape.shape_label(): r.reason for r in rejected if r.shape.dp > 1})

    kept, rejected = wide("trtllm")
    assert kept == {"h200-141gb TP1 DP8 EP8 PP1"}
    assert rejected["h200-141gb TP2 DP4 EP8 PP1"] == f"{TRTLLM_ATTENTION_DP} (TP 2 × DP 4)"
    assert "h200-141gb TP2 DP4 EP8 PP1" in wide("sglang")[0]


def test_validate_refuses_a_plan_made_for_trtllm_whose_dp_ranks_take_two_gpus(runnable):
    edited = copy.deepcopy(runnable)
    prefill = next(p for p in edited["pools"] if p["phase"] == "prefill")
    prefill.update(dp=2, ep=4)
    found = [str(v) for v in check_manifest(made_for(edited, "trtllm"))]
    assert any(line.startswith(f"provenance.profiles.serving_engine: trtllm cannot run this plan: "
                               f"{TRTLLM_ATTENTION_DP} (TP 2 × DP 2)") for line in found), found
    assert not any("trtllm-attention-dp" in str(v) for v in check_manifest(made_for(edited, "sglang")))


# --- vLLM's default requests per rank ------------------------------------------------------------

def test_vllm_runs_at_most_its_default_requests_per_rank_by_gpu_tier():
    """vLLM 0.33.0's get_batch_defaults for its API server: 1,024 requests on GPUs of 70 GiB and more (160 GiB and
    more too), 256 on an A100 whatever its memory and on smaller GPUs; at most the iteration's token budget."""
    from dataclasses import replace

    from pdplan.engines import vllm_default_running
    from pdplan.hardware import GIB, get_gpu

    assert [vllm_default_running(get_gpu(g)) for g in ("a100-80gb", "h100-80gb", "h200-141gb", "b200-180gb")] == \
        [256, 1024, 1024, 1024]
    assert vllm_default_running(replace(get_gpu("h100-80gb"), name="l40s-48gb", memory_bytes=48 * GIB)) == 256
    assert vllm_default_running(get_gpu("h100-80gb"), chunk_tokens=512) == 512
    assert vllm_default_running(get_gpu("a100-80gb"), chunk_tokens=2048) == 256


def test_optimize_holds_vllm_decode_and_colocated_ranks_to_its_default_and_leaves_prefill_and_other_engines_to_kv():
    model, cluster = get_model("llama-3.1-8b"), load_cluster(ROOT / "examples" / "cluster.yaml")

    def caps(engine: str) -> dict:
        shapes, _ = enumerate_shapes(model, cluster, largest_request_tokens=4096, tps=(1,), pps=(1,),
                                     chunk_sizes=(512, 2048), engine=engine)
        return {(s.phase, s.gpu, s.chunk_tokens): s.max_running_requests for s in shapes}

    assert caps("vllm") == {
        ("prefill", "a100-80gb", None): None, ("prefill", "h100-80gb", None): None,
        ("decode", "a100-80gb", None): 256, ("decode", "h100-80gb", None): 1024,
        ("decode", "h100-80gb-pcap", None): 1024,
        ("colocated", "a100-80gb", 512): 256, ("colocated", "a100-80gb", 2048): 256,
        ("colocated", "h100-80gb", 512): 512, ("colocated", "h100-80gb", 2048): 1024}
    assert set(caps("sglang").values()) == {None}


def test_the_vllm_export_states_the_requests_per_rank_the_plan_was_verified_at(disaggregated):
    """The shipped P/D plan's manifest records vLLM's default for its decode GPU (256 on an A100, 1,024 on an
    H100) and the script starts it."""
    decode = next(p for p in disaggregated["pools"] if p["phase"] == "decode")
    default = {"a100-80gb": 256, "h100-80gb": 1024}[decode["gpu"]]
    assert decode["scheduling"]["max_running_requests"] == default
    scripts = [shlex.split(text, comments=True) for name, text in export_manifest(disaggregated, "vllm").items()
               if name != "vllm/router.sh"]
    seqs = {tokens[tokens.index("--max-num-seqs") + 1] for tokens in scripts if "--max-num-seqs" in tokens}
    assert seqs == {str(default)} and sum("--max-num-seqs" in tokens for tokens in scripts) == decode["replicas"]


# --- plans that keep the rules -------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_a_plan_every_engine_runs_exports_in_every_format(runnable, fmt):
    assert export_manifest(runnable, fmt)


def test_the_nixl_rule_holds_for_nixl_only(runnable):
    assert export_manifest(runnable, "vllm")  # the same pipeline-parallel decode over Mooncake
    with pytest.raises(PdplanError, match="nixl-decode-pp"):
        export_manifest(over_nixl(runnable), "vllm")


def test_sglang_equal_tp_keeps_unequal_prefill_and_decode_shapes_out_of_optimize():
    def shape(phase, tp):
        return Candidate(phase=phase, gpu="a100-80gb", tp=tp, pp=1, goodput_rps=1)

    candidates = (shape("prefill", 1), shape("prefill", 2), shape("decode", 2))
    request = SimpleNamespace(profiles=SimpleNamespace(serving_engine="sglang"), connector="nixl")  # what it reads
    assert unpairable(request, candidates) == ((candidates[0], candidates[2]),)
    request.profiles.serving_engine = "vllm"
    assert unpairable(request, candidates) == ()


def test_validate_holds_a_pool_pinned_to_an_engine_to_that_engines_rules(runnable):
    edited = with_prefill_tp(runnable, 4)
    edited["pools"][0]["engine"] = "sglang"
    found = [str(v) for v in check_manifest(seal(edited))]
    assert any(line.startswith(f"pools[0].engine: sglang cannot run this plan: {SGLANG_EQUAL_TP}") for line in found)


def test_optimize_engine_trtllm_refuses_an_int4_checkpoint_it_does_not_load_in_one_line(run_cli):
    code, out, err = run_cli("optimize", TRACE, "--model", "kimi-k2.5", "--engine", "trtllm")
    assert code == 2 and not out and len(err.strip().splitlines()) == 1
    assert err.startswith("Error: kimi-k2.5@int4 at --engine trtllm: trtllm-int4: TensorRT-LLM does not load a "
                          "compressed-tensors int4 checkpoint")


def test_validate_refuses_int4_weights_in_a_plan_made_for_trtllm_and_not_for_vllm(runnable):
    int4 = copy.deepcopy(runnable)
    int4["identity"]["weights_dtype"] = "int4"
    assert any("trtllm-int4" in str(v) for v in check_manifest(made_for(int4, "trtllm")))
    assert not any("trtllm-int4" in str(v) for v in check_manifest(made_for(int4, "vllm")))


def test_explain_counts_the_prefill_and_decode_pairs_each_rule_keeps_apart():
    from pdplan.cli.optimize_render import _kept_apart

    def shape(phase, tp):
        return Candidate(phase=phase, gpu="a100-80gb", tp=tp, pp=1, goodput_rps=1)

    candidates = (shape("prefill", 1), shape("prefill", 2), shape("decode", 2), shape("decode", 4))
    report = SimpleNamespace(request=SimpleNamespace(profiles=SimpleNamespace(serving_engine="sglang"),
                                                     connector="nixl"), candidates=candidates)
    assert _kept_apart(report) == [f"3 prefill and decode pairs kept apart: {SGLANG_EQUAL_TP} on the prefill and "
                                   "decode sides"]


def test_sglang_pairs_unequal_tp_when_a_side_runs_wide_expert_parallelism():
    prefill = Role(phase="prefill", gpu="h200-141gb", tp=8)
    assert plan_refusal("sglang", None, [prefill, Role(phase="decode", gpu="h200-141gb", tp=1, dp=16, ep=16)]) is None
    assert SGLANG_EQUAL_TP in plan_refusal("sglang", None, [prefill, Role(phase="decode", gpu="h200-141gb", tp=4)])
