"""The deployment manifest: what optimize writes, and what validate, diff, schema and simulate do
with it. Every single-field edit of a valid manifest is caught and named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator

from pdplan.manifest.build import ROLLBACK

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "chat_poisson_2k.csv"


def load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def write(path: Path, manifest: dict) -> Path:
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def test_pdplan_schema_prints_the_schema_every_written_manifest_meets(run_cli, manifests):
    code, out, _ = run_cli("schema")
    assert code == 0
    schema = json.loads(out)
    Draft202012Validator.check_schema(schema)
    for path in manifests.values():
        assert not list(Draft202012Validator(schema).iter_errors(load(path)))


def test_a_fresh_manifest_validates_strictly_when_its_identity_is_given(run_cli, manifests):
    code, out, err = run_cli("validate", manifests["disaggregated"], "--strict", "--trace", TRACE)
    assert code == 0, out + err
    assert "valid" in out


def test_strict_names_every_unknown_identity_field(run_cli, manifests):
    assert run_cli("validate", manifests["colocated"])[0] == 0
    code, out, _ = run_cli("validate", manifests["colocated"], "--strict")
    assert code == 1
    for field in ("identity.checkpoint.revision", "identity.tokenizer", "identity.adapter", "identity.position"):
        assert f"{field}: is unknown" in out
    assert "identity.checkpoint.id" not in out  # the catalog names llama2-70b's repository


def test_the_checkpoint_defaults_to_the_catalog_models_repository(manifests):
    assert load(manifests["colocated"])["identity"]["checkpoint"] == {"id": "meta-llama/Llama-2-70b-hf",
                                                                      "revision": "unknown", "dtype": "bf16"}


def test_the_manifest_carries_the_whole_decision(manifests):
    pd = load(manifests["disaggregated"])
    assert (pd["apiVersion"], pd["kind"]) == ("pdplan/v1", "DeploymentManifest")
    assert pd["rollback"] == list(ROLLBACK)
    assert pd["placement"]["route_epoch"] == 1
    assert pd["transfer"]["connector"] == "mooncake"
    assert set(pd["transfer"]["roles"].values()) == {"kv_producer", "kv_consumer"}
    assert pd["predictions"]["gpus"]["value"] == sum(p["gpus"] for p in pd["pools"])
    assert pd["predictions"]["verification"]["passed"]
    verification = pd["predictions"]["verification"]  # the seconds of arrivals each run held: its requests / rate
    assert verification["run_s"] == pytest.approx(verification["requests"][0] / verification["rate_rps"], rel=1e-4)
    assert pd["fallback"]["mode"] == "colocated" and pd["fallback"]["verified"]
    assert "created" not in pd["metadata"]
    assert pd["provenance"]["inputs"]["trace"]["sha256"] == pd["workload"]["trace"]["sha256"]
    # KV bytes per token from the ABI: layers × 2 × KV heads × head dim × 2 bytes (bf16)
    abi = pd["identity"]["kv_cache"]
    assert pd["identity"]["kv_bytes_per_token"] == abi["layers"] * 2 * abi["kv_heads"] * abi["head_dim"] * 2


def test_a_prefill_pool_records_the_prompt_budget_its_verification_ran_and_no_other_pool_does(manifests):
    """The pool's cap when it states one, else its profile's; the exports start the engine with it."""
    from dataclasses import replace

    from pdplan.latency.profile import shipped_profiles
    from pdplan.manifest.build import recorded_prompt_budget
    from pdplan.sim import Pool

    profile = shipped_profiles()[("llama2-70b", "a100-80gb", 2, 1)]
    prefill = Pool(name="p", phase="prefill", model="llama2-70b", gpu="a100-80gb", tp=2)
    assert recorded_prompt_budget(prefill, profile) == {"max_prefill_batch_tokens": profile.max_prefill_batch_tokens}
    assert recorded_prompt_budget(replace(prefill, max_prefill_batch_tokens=4096), profile) == \
        {"max_prefill_batch_tokens": 4096}
    assert recorded_prompt_budget(replace(prefill, phase="decode"), profile) == {}
    pd = load(manifests["disaggregated"])
    assert all(("max_prefill_batch_tokens" in pool["profile"]) == (pool["phase"] == "prefill")
               for pool in pd["pools"])


def test_a_pd_plan_is_verified_with_the_kv_sent_once_the_prefill_ends(manifests):
    """No engine the exports start streams the KV layer by layer beside the prefill, so optimize verifies what
    they run and the manifest says so."""
    assert load(manifests["disaggregated"])["transfer"]["schedule"] == "request"


def test_validate_names_a_prompt_budget_on_a_decode_pool_and_one_unlike_the_pools_own_cap(manifests):
    from pdplan.manifest.check import check_manifest
    from pdplan.manifest.document import seal

    manifest = load(manifests["disaggregated"])
    decode = next(i for i, p in enumerate(manifest["pools"]) if p["phase"] == "decode")
    prefill = next(i for i, p in enumerate(manifest["pools"]) if p["phase"] == "prefill")
    assert not check_manifest(seal(manifest))
    manifest["pools"][decode]["profile"]["max_prefill_batch_tokens"] = 4096
    pool = manifest["pools"][prefill]
    pool["scheduling"]["max_prefill_batch_tokens"] = pool["profile"]["max_prefill_batch_tokens"] // 2
    found = {v.field for v in check_manifest(seal(manifest))}
    assert found == {f"pools[{decode}].profile.max_prefill_batch_tokens",
                     f"pools[{prefill}].profile.max_prefill_batch_tokens"}


def test_a_manifest_written_before_kv_copies_still_validates(manifests):
    """A path's ``kv_copies`` is optional: a manifest that states none reads as one copy per request, as before."""
    from pdplan.manifest.check import check_manifest
    from pdplan.manifest.document import seal

    manifest = load(manifests["disaggregated"])
    for path in manifest["transfer"]["paths"]:
        assert path.pop("kv_copies") == 1  # llama2-70b's 8 K/V heads split over each decode's TP
    assert not check_manifest(seal(manifest))


def test_simulate_reads_a_manifest_under_its_own_slo_unless_flags_say_otherwise(run_cli, manifests, tmp_path):
    manifest = load(manifests["disaggregated"])
    manifest["workload"]["slo"]["objectives"][0]["threshold_ms"] = 800.0  # TTFT
    manifest["workload"]["slo"]["objectives"][1]["attainment"] = 0.95
    edited = write(tmp_path / "slo.yaml", manifest)
    code, out, err = run_cli("simulate", TRACE, "--plan", edited, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["slo"] == {"ttft_s": 0.8, "tpot_s": 0.1}
    assert summary["meets_slo"]["ttft"] == (summary["attainment"]["ttft"] >= 0.95)
    code, out, _ = run_cli("simulate", TRACE, "--plan", edited, "--ttft", "2s", "--attainment", "0.5", "--json")
    assert json.loads(out)["slo"]["ttft_s"] == 2.0 and json.loads(out)["meets_slo"]["joint"]


def test_a_manifest_threshold_too_small_to_be_seconds_is_refused_naming_the_field(run_cli, manifests, tmp_path):
    manifest = load(manifests["disaggregated"])
    manifest["workload"]["slo"]["objectives"][0]["threshold_ms"] = 1e-323  # > 0, but 0.0 once in seconds
    edited = write(tmp_path / "tiny.yaml", manifest)
    code, out, err = run_cli("simulate", TRACE, "--plan", edited, "--json")
    assert (code, out) == (2, "")
    assert err.startswith(f"Error: {edited}") and err.count("\n") == 1
    assert "workload.slo.objectives[0].threshold_ms must be a latency > 0 in seconds too" in err


def test_resimulating_reproduces_the_predicted_attainment(run_cli, manifests):
    code, out, err = run_cli("validate", manifests["disaggregated"], "--trace", TRACE, "--resimulate", "--json")
    assert code == 0, err
    result = json.loads(out)
    written = load(manifests["disaggregated"])["predictions"]["attainment"]["joint"]["mean"]
    assert result["resimulated"]["joint"] == pytest.approx(written, abs=result["resimulated"]["tolerance"])


def test_another_trace_makes_the_manifest_stale(run_cli, manifests, tmp_path):
    other = tmp_path / "other.csv"
    other.write_text(TRACE.read_text() + "\n")
    code, out, _ = run_cli("validate", manifests["disaggregated"], "--trace", other)
    assert code == 1
    assert "provenance.inputs.trace.sha256: stale" in out


def _swap_rollback(m):
    m["rollback"][1], m["rollback"][2] = m["rollback"][2], m["rollback"][1]


def _set(path: str, value):
    """An edit setting the field at a dotted path (list indices as numbers) to ``value``, or to
    ``value(old)`` when it is a function."""
    keys = [int(part) if part.isdigit() else part for part in path.split(".")]

    def edit(m):
        node = m
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value(node[keys[-1]]) if callable(value) else value
    return edit


#: (edit, a field path validate must name). Each edit alone, on a valid manifest.
MUTATIONS = [
    (_set("identity.checkpoint.id", "meta-llama/Llama-2-7b-hf"), "identity.checkpoint"),
    (_set("identity.checkpoint.revision", "v2"), "identity.checkpoint"),
    (_set("identity.tokenizer", "other/tokenizer"), "identity.tokenizer"),
    (_set("identity.adapter", "lora-a"), "identity.adapter"),
    (_set("identity.position", "alibi"), "identity.position"),
    (_set("identity.kv_cache.dtype", "fp8"), "identity.kv_cache.hash"),
    (_set("identity.kv_bytes_per_token", 1), "identity.kv_bytes_per_token"),
    (_set("pools.1.replicas", lambda r: r + 1), "pools[1].replicas"),
    (_set("pools.0.tp", lambda t: t * 2), "pools[0].gpus"),
    (_set("pools.0.memory.weights_gib_per_gpu", lambda w: w / 2), "pools[0].memory.weights_gib_per_gpu"),
    (_swap_rollback, "rollback[1]"),
    (_set("placement.route_epoch", 2), "placement.route_epoch"),
    (_set("placement.nodes.0.gpus", 2), "placement.nodes[0].instances"),
    (_set("provenance.content_hash", "sha256:" + "0" * 64), "provenance.content_hash"),
    (_set("transfer.paths.0.capacity_gb_s", lambda c: c * 10), "transfer.paths[0].capacity_gb_s"),
    (_set("transfer.paths.0.demand_gb_s", 1e4), "transfer.paths[0].demand_gb_s"),
    (_set("transfer.paths.0.kv_copies", 8), "transfer.paths[0].kv_copies"),
    (_set("transfer.connector", "none"), "transfer.connector"),
    (_set("fallback.verified", False), "fallback"),
    (_set("workload.target_rps", lambda r: r * 100), "capacity.pool_rps"),
    (_set("workload.trace.sha256", "0" * 64), "workload.trace"),
    (_set("predictions.gpus.value", lambda g: g + 1), "predictions.gpus.value"),
    (_set("release.gates.canary_share", 0.5), "release.gates"),
    (_set("pools.0.gpu", "h200-141gb"), "placement.nodes"),
]


@pytest.mark.parametrize("edit, field", MUTATIONS, ids=[f for _, f in MUTATIONS])
def test_every_single_field_edit_is_caught_and_named(run_cli, manifests, tmp_path, edit, field):
    manifest = load(manifests["disaggregated"])
    edit(manifest)
    code, out, _ = run_cli("validate", write(tmp_path / "edited.yaml", manifest))
    assert code == 1
    assert field in out


def test_swapped_roles_are_named_by_pool(run_cli, manifests, tmp_path):
    manifest = load(manifests["disaggregated"])
    roles = manifest["transfer"]["roles"]
    for name in roles:
        roles[name] = "kv_consumer" if roles[name] == "kv_producer" else "kv_producer"
    code, out, _ = run_cli("validate", write(tmp_path / "roles.yaml", manifest), "--json")
    assert code == 1
    fields = {v["field"] for v in json.loads(out)["violations"]}
    assert {f"transfer.roles.{name}" for name in roles} <= fields


def test_a_file_that_breaks_the_schema_exits_1_naming_the_field(run_cli, manifests, tmp_path):
    manifest = load(manifests["disaggregated"])
    del manifest["fallback"]
    code, out, _ = run_cli("validate", write(tmp_path / "nofallback.yaml", manifest))
    assert code == 1
    assert "'fallback' is a required property" in out


@pytest.mark.parametrize("text", ["kind: Deployment\n", "{[unclosed\n", "- a list\n"])
def test_an_unreadable_manifest_exits_2_with_one_line(run_cli, tmp_path, text):
    path = tmp_path / "m.yaml"
    path.write_text(text)
    code, out, err = run_cli("validate", path)
    assert code == 2
    assert err.startswith("Error:") and err.count("\n") == 1


def test_diff_of_a_manifest_with_itself_is_empty_and_exits_0(run_cli, manifests):
    code, out, _ = run_cli("diff", manifests["disaggregated"], manifests["disaggregated"], "--json")
    assert (code, json.loads(out)) == (0, {"equal": True, "changes": []})


def test_diff_lists_what_changed_between_modes_by_section(run_cli, manifests):
    code, out, _ = run_cli("diff", manifests["colocated"], manifests["disaggregated"], "--json")
    assert code == 1
    changes = json.loads(out)["changes"]
    sections = [c["section"] for c in changes]
    assert {"identity", "pools", "placement", "transfer", "predictions"} <= set(sections)
    assert sections == sorted(sections, key=["identity", "workload", "pools", "placement", "transfer",
                                             "predictions", "fallback", "release", "rollback", "provenance",
                                             "other"].index)
    assert ({"field": "transfer.connector", "section": "transfer", "change": "changed", "a": "none", "b": "mooncake"}
            in changes)


def test_an_old_plan_file_still_loads_in_simulate(run_cli, tmp_path):
    code, out, err = run_cli("simulate", TRACE, "--plan", ROOT / "examples" / "plan_disagg.yaml", "--json")
    assert code == 0, err


@pytest.mark.parametrize("fmt", ["vllm", "sglang", "dynamo", "llm-d", "k8s"])
def test_optimize_validate_export_round_trip(run_cli, manifests, tmp_path, fmt):
    assert run_cli("validate", manifests["disaggregated"])[0] == 0
    code, out, err = run_cli("export", manifests["disaggregated"], "--format", fmt, "--out", tmp_path / "deploy")
    assert code == 0, err
    written = [Path(line) for line in out.split()]
    assert written and all(p.is_file() for p in written)
    for path in written:
        if path.suffix in (".yaml", ".json"):
            assert list(yaml.safe_load_all(path.read_text()))
        if path.suffix == ".sh":
            assert path.stat().st_mode & 0o111


def test_export_refuses_a_manifest_that_does_not_validate(run_cli, manifests, tmp_path):
    manifest = load(manifests["disaggregated"])
    manifest["pools"][0]["replicas"] += 1
    code, _, err = run_cli("export", write(tmp_path / "edited.yaml", manifest), "--format", "k8s",
                           "--out", tmp_path / "deploy")
    assert code == 2
    assert "does not validate" in err
    assert not (tmp_path / "deploy").exists()


def test_a_violation_prints_as_one_line_whatever_its_field_and_message_hold():
    from pdplan.manifest.violation import Violation

    assert str(Violation("pools[0].x\ny", "got 'a\r\nb'")) == "pools[0].x y: got 'a b'"


def test_a_power_capped_pool_may_sit_on_nodes_of_its_own_hardware_but_no_other():
    """Splitwise's HHcap: decode on H100s at a lower power limit runs on the H100 nodes."""
    from pdplan.manifest.node_map import node_map_violations

    pools = {"decode": {"gpu": "h100-80gb-pcap", "tp": 2, "pp": 1, "replicas": 1}}

    def on(node_gpu):
        nodes = [{"node": "n-0", "gpu": node_gpu, "gpus": 8,
                  "instances": [{"pool": "decode", "instance": 0, "stage": 0, "gpu_indices": [0, 1]}]}]
        return [v.field for v in node_map_violations(pools, nodes, at="placement.nodes",
                                                     pool_field=lambda name, key: f"pools.{name}.{key}")]

    assert on("h100-80gb") == []
    assert on("a100-80gb") == ["placement.nodes[0].gpu"]
