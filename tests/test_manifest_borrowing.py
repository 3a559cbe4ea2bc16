"""A plan that borrows (Splitwise's policy: dedicated machines lent to the other phase) as the
answer: what the search compares it with, the manifest that records the policy and the link a lent
prefill machine receives on, validation and re-simulation; no export runs it, since no router
lends machines between phases."""

from __future__ import annotations

import json

import pytest
import yaml

from pdplan.engines import mixed_refusal
from pdplan.manifest.export import FORMATS
from pdplan.manifest.export.common import format_engine
from pdplan.manifest.plan import read_plan


def load(path):
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def manifest(borrowing_manifest) -> dict:
    return load(borrowing_manifest["manifest"])


def test_the_manifest_records_the_borrowing_policy_and_the_lent_link(manifest):
    spill = manifest["transfer"]["spill"]
    assert (spill["prefill_queue_tokens"], spill["decode_kv_share"], spill["borrow"], spill["borrow_chunk_tokens"]) \
        == (2048, 1.0, True, 2048)
    # the two-node case holds the whole answer on one node: a lent prefill instance receives over NVLink
    gpus = min(p["tp"] * p["pp"] for p in manifest["pools"] if p["phase"] == "prefill")
    assert spill["lent_link"] == {"path": "intra-node", "bandwidth_gb_s": 300.0 * gpus, "setup_ms": 0.5}


def test_the_borrowing_answer_is_cheaper_than_the_plain_plan_it_was_compared_with(run_cli, borrowing_manifest):
    code, out, _ = run_cli("optimize", borrowing_manifest["trace"], "--model", "llama2-70b", "--tp", "2", "--tp", "4",
                           "--pp", "1", "--target-rate", "2", "--ttft", "1", "--tpot", "0.1", "--cluster",
                           borrowing_manifest["cluster"], "--borrow", "--mixed-spill-tokens", "2048", "--mode",
                           "disaggregated", "--affinity", "high", "--cache-dir",
                           borrowing_manifest["manifest"].parent / "cache", "--json")
    doc = json.loads(out)
    found = doc["borrowing"]
    assert code == 0 and doc["borrow"] and found["chosen"]
    assert found["cost_per_hour"] < found["baseline"]["cost_per_hour"]
    assert found["verification"]["passed"] and found["lent_work"]["whole_requests_on_decode"] > 0


def test_the_borrowing_manifest_validates_and_resimulates(run_cli, borrowing_manifest):
    code, out, _ = run_cli("validate", borrowing_manifest["manifest"], "--resimulate", "--trace",
                           borrowing_manifest["trace"])
    assert code == 0, out


def test_simulate_runs_the_manifest_borrowing_over_its_lent_link(borrowing_manifest, manifest):
    plan, _ = read_plan(borrowing_manifest["manifest"])
    assert plan.borrow and plan.spill_tokens == 2048 and plan.borrow_chunk_tokens == 2048
    lent = manifest["transfer"]["spill"]["lent_link"]
    assert plan.default_link.bandwidth_bytes_per_s == pytest.approx(lent["bandwidth_gb_s"] * 1e9)


def test_a_spill_section_that_neither_borrows_nor_serves_a_mixed_pool_is_named(run_cli, borrowing_manifest, tmp_path):
    edited = load(borrowing_manifest["manifest"])
    for key in ("borrow", "borrow_chunk_tokens", "lent_link"):
        del edited["transfer"]["spill"][key]
    path = tmp_path / "spill.yaml"
    path.write_text(yaml.safe_dump(edited, sort_keys=False))
    code, out, _ = run_cli("validate", path, "--json")
    assert code == 1
    assert "transfer.spill" in {v["field"] for v in json.loads(out)["violations"]}


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_format_refuses_a_plan_that_borrows_naming_its_routers_rule(run_cli, borrowing_manifest, tmp_path, fmt):
    code, out, err = run_cli("export", borrowing_manifest["manifest"], "--format", fmt, "--out", tmp_path / fmt)
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    engine = format_engine(load(borrowing_manifest["manifest"]), fmt)
    assert "cannot lend machines" in err and mixed_refusal(fmt, engine) in " ".join(err.split())
    assert not (tmp_path / fmt).exists()


def test_lent_machines_need_high_node_affinity(run_cli, borrowing_manifest):
    code, _, err = run_cli("optimize", borrowing_manifest["trace"], "--borrow", "--affinity", "low")
    assert code == 2 and "--borrow" in err
