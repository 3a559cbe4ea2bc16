"""optimize answers, verified end to end, for the mixture-of-experts models deployments run: DeepSeek-V3
(FP8) on H200, gpt-oss-120b on H100 and Qwen3-235B-A22B on B200, over the head of the Azure conversation
trace, with every step time composed from AIConfigurator's measured operators and the output saying so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_main

pytest.importorskip("aiconfigurator_core", reason="composed profiles need the optional extra pdplan[aic]")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
REQUESTS = 1000


@pytest.fixture(scope="module")
def conversation(shared_data, tmp_path_factory) -> Path:
    """The first 1,000 requests of the Azure LLM 2023 conversation trace."""
    lines = (shared_data / "traces" / "AzureLLMInferenceTrace_conv.csv").read_text().splitlines()[:REQUESTS + 1]
    path = tmp_path_factory.mktemp("trace") / "azure_conv_head.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


#: model, precision, example cluster, the GPU type planned on (the A100 + H100 example held to its H100s)
CASES = [("deepseek-v3", "fp8", "cluster_h200.yaml", "h200-141gb"),
         ("gpt-oss-120b", "mxfp4", "cluster.yaml", "h100-80gb"),
         ("qwen3-235b-a22b", "fp8", "cluster_b200.yaml", "b200-180gb")]


@pytest.mark.slow
@pytest.mark.parametrize(("model", "dtype", "cluster", "gpu"), CASES, ids=[c[0] for c in CASES])
def test_optimize_answers_a_moe_model_with_a_verified_plan_timed_by_measured_operators(
        run_cli, conversation, tmp_path, model, dtype, cluster, gpu):
    out_file = tmp_path / "plan.yaml"
    code, out, err = run_cli("optimize", conversation, "--model", model, "--dtype", dtype, "--cluster",
                             EXAMPLES / cluster, "--fleet", f"{gpu}/{gpu}", "--requests-per-probe", "300",
                             "--cache-dir", tmp_path / "cache", "--out", out_file)
    assert code == 0, err
    assert "verification: PASSES" in out
    plan = yaml.safe_load(out_file.read_text())
    assert plan["identity"]["model"] == f"{model}@{dtype}"
    assert plan["provenance"]["profiles"]["serving_engine"] == "vllm"
    assert plan["pools"] and all(p["gpu"] == gpu and p["profile"]["source"] == "composed" for p in plan["pools"])


@pytest.fixture(scope="module")
def wide(conversation, tmp_path_factory) -> dict[int, dict]:
    """DeepSeek-V3 on H200 under SGLang with attention DP 8 allowed, planned on one process and on two:
    the --json document of each."""
    docs = {}
    for jobs in (1, 2):
        folder = tmp_path_factory.mktemp(f"wide{jobs}")
        code, out = run_main("optimize", conversation, "--model", "deepseek-v3", "--dtype", "fp8", "--cluster",
                             EXAMPLES / "cluster_h200.yaml", "--engine", "sglang", "--tp", "1", "--tp", "8", "--pp",
                             "1", "--dp", "8", "--target-rate", "40", "--requests-per-probe", "300", "--cache-dir",
                             folder / "cache", "--jobs", jobs, "--json")
        assert code in (0, None)
        docs[jobs] = json.loads(out)
    return docs


@pytest.mark.slow
def test_a_wide_expert_parallel_answer_is_verified_and_says_what_tp_only_shapes_miss(wide):
    doc = wide[1]
    assert doc["meets_slo"] and any(p.get("dp", 1) == 8 and p["ep"] == 8 for p in doc["pools"])
    verification = doc["verification"]  # 1,000 requests at 40 req/s arrive in 25 s: repeated to last 300 s
    assert verification["trace_copies"] == 12 and verification["requests"][0] == 12 * REQUESTS
    assert verification["run_s"] == pytest.approx(12 * REQUESTS / 40.0) and verification["run_s"] >= 300.0
    narrow = doc["tp_only_baseline"]  # on this head of the trace TP-only plans fit but miss end to end
    assert not narrow["found"] and narrow["reason"].startswith("the closest plan of TP x PP shapes (")


def test_a_wide_sglang_instance_on_one_node_is_verified_with_its_tokens_gathered(wide):
    """SGLang's export keeps its default all-to-all on one node, which gathers: the answer times that."""
    wide_pools = [p for p in wide[1]["pools"] if p.get("dp", 1) > 1]
    assert wide_pools and all(p["all_to_all"] == "gather" for p in wide_pools)


@pytest.mark.slow
def test_two_processes_run_the_searches_after_a_wide_answer_beside_its_headroom_and_answer_the_same(wide):
    one, two = ({k: v for k, v in doc.items() if k != "run"} for doc in (wide[1], wide[2]))
    assert one == two
    assert two["tp_only_baseline"]["reason"] and two["headroom"] == one["headroom"]
