"""A plan with Splitwise's mixed pool as the answer: placed on nodes, sealed in the manifest,
validated and re-simulated with its spill thresholds; no export runs it, since no router runs its spill rule."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from pdplan.engines import MIXED_RULES, mixed_refusal
from pdplan.manifest.document import seal
from pdplan.manifest.export import FORMATS
from pdplan.manifest.export.common import format_engine
from pdplan.manifest.plan import read_plan


def load(path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def manifest(mixed_manifest) -> dict:
    return load(mixed_manifest["manifest"])


def test_the_answer_runs_a_mixed_pool_placed_on_the_node_map(manifest):
    mixed = [p for p in manifest["pools"] if p["phase"] == "mixed"]
    assert len(mixed) == 1 and mixed[0]["scheduling"]["policy"] == "chunked"
    placed = [s for node in manifest["placement"]["nodes"] for s in node["instances"] if s["pool"] == mixed[0]["name"]]
    assert len(placed) == mixed[0]["replicas"] * mixed[0]["pp"]


def test_a_mixed_machine_both_produces_and_consumes_kv(manifest):
    roles = manifest["transfer"]["roles"]
    assert {p["phase"]: roles[p["name"]] for p in manifest["pools"]} == {
        "prefill": "kv_producer", "decode": "kv_consumer", "mixed": "kv_both"}
    assert manifest["transfer"]["spill"] == {"prefill_queue_tokens": 2048, "decode_kv_share": 1.0}
    mixed = next(p["name"] for p in manifest["pools"] if p["phase"] == "mixed")
    assert any(path["to"] == mixed for path in manifest["transfer"]["paths"])


def test_handoffs_between_instances_sharing_one_node_are_intra_node_at_its_nvlink_speed(manifest):
    """The two-node cluster of this case holds the whole answer on one node, so no handoff leaves it:
    each decoding instance takes its KV over NVLink, 300 GB/s per GPU, not over the 25 GB/s NICs."""
    assert [node["node"] for node in manifest["placement"]["nodes"]] == ["a100-0"]
    gpus = {p["name"]: p["tp"] * p["pp"] for p in manifest["pools"]}
    assert [(path["path"], path["bandwidth_gb_s"]) for path in manifest["transfer"]["paths"]] == [
        ("intra-node", 300 * gpus[path["to"]]) for path in manifest["transfer"]["paths"]]


def test_the_mixed_manifest_validates_and_resimulates(run_cli, mixed_manifest):
    code, out, _ = run_cli("validate", mixed_manifest["manifest"], "--resimulate", "--trace", mixed_manifest["trace"])
    assert code == 0, out


def test_simulate_runs_the_manifest_with_its_spill_thresholds(mixed_manifest):
    plan, _ = read_plan(mixed_manifest["manifest"])
    assert plan.pools_of("mixed") and plan.spill_tokens == 2048 and plan.kv_share == 1.0


def test_a_mixed_pool_without_its_spill_thresholds_is_named(run_cli, mixed_manifest, tmp_path):
    edited = load(mixed_manifest["manifest"])
    del edited["transfer"]["spill"]
    path = tmp_path / "nospill.yaml"
    path.write_text(yaml.safe_dump(edited, sort_keys=False))
    code, out, _ = run_cli("validate", path, "--json")
    assert code == 1
    assert "transfer.spill" in {v["field"] for v in json.loads(out)["violations"]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_refuses_a_mixed_pool_naming_its_routers_rule(run_cli, mixed_manifest, tmp_path, fmt):
    """No router the exports deploy runs Splitwise's spill rule, under which the pool was verified."""
    code, out, err = run_cli("export", mixed_manifest["manifest"], "--format", fmt, "--out", tmp_path / fmt)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    engine = format_engine(load(mixed_manifest["manifest"]), fmt)
    assert "cannot run mixed pool" in err and mixed_refusal(fmt, engine) in " ".join(err.split())
    assert not (tmp_path / fmt).exists()


def test_the_k8s_bundle_of_a_plan_made_for_sglang_refuses_a_mixed_pool_by_sglang_routers_rule(run_cli, manifest,
                                                                                               tmp_path):
    """The bundle runs an SGLang plan behind sglang-router, whose servers are prefill or decode, never both."""
    edited = copy.deepcopy(manifest)
    edited["provenance"]["profiles"]["serving_engine"] = "sglang"
    path = tmp_path / "sglang.yaml"
    path.write_text(yaml.safe_dump(seal(edited), sort_keys=False))
    code, _, err = run_cli("export", path, "--format", "k8s", "--out", tmp_path / "out")
    assert code == 2
    assert "sglang-mixed" in err and "vllm-router-mixed" not in err
    assert not (tmp_path / "out").exists()


def test_every_mixed_rule_cites_an_upstream_file_and_commit():
    for rule in MIXED_RULES:
        assert "/" in rule.source and "@" in rule.source, rule.name


def test_the_json_names_the_mixed_answer_and_the_plain_plan_beside_it(run_cli, mixed_manifest):
    folder = mixed_manifest["manifest"].parent
    code, out, _ = run_cli("optimize", mixed_manifest["trace"], "--model", "llama2-70b", "--tp", "2", "--tp", "4",
                           "--pp", "1", "--target-rate", "1.5", "--ttft", "1", "--tpot", "0.1", "--cluster",
                           mixed_manifest["cluster"], "--mixed", "--mixed-spill-tokens", "2048", "--mode",
                           "disaggregated", "--affinity", "high", "--cache-dir", folder / "cache", "--json")
    assert code == 0
    doc = json.loads(out)
    found = doc["mixed_pool"]
    assert found["found"] and found["chosen"] and doc["mixed"]["replicas"] == found["mixed"] >= 1
    assert found["cost_per_hour"] == doc["cost_per_hour"] < found["baseline"]["cost_per_hour"]
    assert found["verification"]["passed"] and found["spill_tokens"] == 2048


def test_mixed_machines_need_high_node_affinity(run_cli, mixed_manifest):
    code, _, err = run_cli("optimize", mixed_manifest["trace"], "--mixed", "--affinity", "low")
    assert code == 2 and "--mixed" in err


def test_validate_refuses_an_inter_node_path_between_pools_on_one_node(manifest):
    from pdplan.manifest.check import check_manifest
    from pdplan.manifest.document import seal

    edited = copy.deepcopy(manifest)
    edited["transfer"]["paths"][0]["path"] = "inter-node"
    found = [str(v) for v in check_manifest(seal(edited))]
    assert any(line.startswith("transfer.paths[0].path: inter-node, but every instance of") and
               "sits on node a100-0: the handoff is intra-node" in line for line in found), found
