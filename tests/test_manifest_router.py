"""The manifest records the plan's prefill router and each pool's prefix cache (its HBM size when stated, and a
prefill pool's second tier): optional fields, written only when set, that ``simulate --plan`` reads back as the
plan verified, while a manifest without them loads, validates and hashes as before."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
import yaml

from pdplan.errors import PdplanError
from pdplan.hardware import GB
from pdplan.manifest.build import routing, scheduling
from pdplan.manifest.check import check_manifest
from pdplan.manifest.document import content_hash, schema_errors, seal, section_hashes
from pdplan.manifest.plan import read_plan
from pdplan.sim.plan import CacheTier
from pdplan.vocabulary import Handoff, Router

TIER = CacheTier(medium="host", blocks=65536, bandwidth_bytes_per_s=50 * GB)


def write(tmp_path, manifest: dict, name: str = "m.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(manifest, sort_keys=False))
    return path


def prefill_index(manifest: dict) -> int:
    return next(i for i, p in enumerate(manifest["pools"]) if p["phase"] == "prefill")


def decode_index(manifest: dict) -> int:
    return next(i for i, p in enumerate(manifest["pools"]) if p["phase"] == "decode")


@pytest.fixture(scope="module")
def old_plan(manifests):
    """The disaggregated manifest read as a plan: written with neither a router nor a prefix cache."""
    return read_plan(manifests["disaggregated"])[0]


def test_a_manifest_without_router_or_prefix_cache_loads_as_a_least_loaded_plan_without_tiers(old_plan, disaggregated):
    assert "router" not in disaggregated["transfer"]
    assert all("cache_tier" not in p["scheduling"] for p in disaggregated["pools"])
    assert old_plan.router == Router.LEAST_LOADED
    assert all(p.cache_tier is None for p in old_plan.pools)


def test_a_manifest_without_router_or_prefix_cache_still_validates_with_its_hash(disaggregated):
    assert check_manifest(disaggregated) == []
    assert content_hash(disaggregated) == disaggregated["provenance"]["content_hash"]
    assert not any(key.startswith("transfer.router") for key in section_hashes(disaggregated))


def test_a_least_loaded_plan_writes_no_router_and_a_pool_without_a_tier_writes_none(old_plan):
    assert routing(old_plan) == {}
    assert all("cache_tier" not in fields for fields in scheduling(old_plan).values())


def test_a_pools_settings_are_written_only_when_set(old_plan):
    """As before the prefix cache was recorded: the manifest of an unchanged plan carries the same fields, and a
    decode pool's handoff only when it pulls (vLLM's, this plan's engine)."""
    for pool in old_plan.pools:
        pulled = {"handoff": "pull"} if pool.handoff == Handoff.PULL else {}
        assert scheduling(old_plan)[pool.name] == {
            k: getattr(pool, k) for k in ("policy", "chunk_tokens", "max_prefill_batch_tokens", "max_running_requests",
                                          "prefix_cache_blocks")
            if getattr(pool, k) is not None} | pulled
    assert [p.handoff for p in old_plan.pools if p.phase == "decode"] == [Handoff.PULL]


def planned_with(old_plan, router: str, tier: CacheTier | None, prefill_blocks: int | None = None):
    pools = tuple(replace(p, cache_tier=tier, prefix_cache_blocks=prefill_blocks) if p.phase == "prefill" else p
                  for p in old_plan.pools)
    return replace(old_plan, router=router, pools=pools)


def sealed_from(manifest: dict, plan) -> dict:
    """``manifest`` with ``plan``'s router and pool settings, as build_manifest writes them, sealed again."""
    edited = copy.deepcopy(manifest)
    edited["transfer"].pop("router", None)
    edited["transfer"].update(routing(plan))
    settings = scheduling(plan)
    for pool in edited["pools"]:
        pool["scheduling"] = settings[pool["name"]]
    return seal(edited)


def test_the_router_is_written_when_it_is_not_least_loaded(old_plan):
    assert routing(replace(old_plan, router=Router.CACHE_AWARE)) == {"router": "cache-aware"}
    assert routing(replace(old_plan, router=Router.ROUND_ROBIN)) == {"router": "round-robin"}


def test_a_prefill_pools_tier_is_written_with_its_bandwidth_in_gb_s(old_plan):
    plan = planned_with(old_plan, Router.CACHE_AWARE, TIER, prefill_blocks=8192)
    prefill = next(p.name for p in plan.pools if p.phase == "prefill")
    assert scheduling(plan)[prefill]["cache_tier"] == {"medium": "host", "blocks": 65536, "bandwidth_gb_s": 50.0}
    assert scheduling(plan)[prefill]["prefix_cache_blocks"] == 8192


def test_router_and_tier_round_trip_through_the_manifest(old_plan, disaggregated, tmp_path):
    plan = planned_with(old_plan, Router.CACHE_AWARE, TIER, prefill_blocks=8192)
    again, _ = read_plan(write(tmp_path, sealed_from(disaggregated, plan)))
    assert again.router == Router.CACHE_AWARE
    assert {p.name: (p.prefix_cache_blocks, p.cache_tier) for p in again.pools} == {
        p.name: (p.prefix_cache_blocks, p.cache_tier) for p in plan.pools}


def test_a_remote_tier_and_a_round_robin_router_round_trip_too(old_plan, disaggregated, tmp_path):
    remote = CacheTier(medium="remote", blocks=1_000_000, bandwidth_bytes_per_s=12.5 * GB)
    plan = planned_with(old_plan, Router.ROUND_ROBIN, remote)
    again, _ = read_plan(write(tmp_path, sealed_from(disaggregated, plan)))
    assert again.router == Router.ROUND_ROBIN
    assert [p.cache_tier for p in again.pools if p.phase == "prefill"] == [remote]


def test_a_manifest_with_a_router_and_a_tier_validates(old_plan, disaggregated):
    plan = planned_with(old_plan, Router.CACHE_AWARE, TIER, prefill_blocks=0)
    assert check_manifest(sealed_from(disaggregated, plan)) == []


def test_editing_the_router_after_sealing_is_named_as_tampering(old_plan, disaggregated):
    manifest = sealed_from(disaggregated, planned_with(old_plan, Router.CACHE_AWARE, None))
    manifest["transfer"]["router"] = "round-robin"
    assert [v.field for v in check_manifest(manifest)] == ["transfer.router"]


def test_the_schema_refuses_a_router_it_does_not_know(disaggregated):
    manifest = copy.deepcopy(disaggregated)
    manifest["transfer"]["router"] = "power-of-two"
    assert [field for field, _ in schema_errors(manifest)] == ["transfer.router"]


@pytest.mark.parametrize("tier, field", [
    ({"medium": "disk", "blocks": 10, "bandwidth_gb_s": 5}, "cache_tier.medium"),
    ({"medium": "host", "blocks": -1, "bandwidth_gb_s": 5}, "cache_tier.blocks"),
    ({"medium": "host", "blocks": 10, "bandwidth_gb_s": 0}, "cache_tier.bandwidth_gb_s"),
    ({"medium": "host", "blocks": 10}, "cache_tier"),
])
def test_the_schema_refuses_a_tier_that_breaks_the_plan_files_rules(disaggregated, tier, field):
    manifest = copy.deepcopy(disaggregated)
    i = prefill_index(manifest)
    manifest["pools"][i]["scheduling"]["cache_tier"] = tier
    assert [f for f, _ in schema_errors(manifest)] == [f"pools[{i}].scheduling.{field}"]


def test_validate_names_a_tier_on_a_decode_pool(disaggregated):
    manifest = copy.deepcopy(disaggregated)
    i = decode_index(manifest)
    manifest["pools"][i]["scheduling"]["cache_tier"] = {"medium": "host", "blocks": 10, "bandwidth_gb_s": 5}
    assert [v.field for v in check_manifest(seal(manifest))] == [f"pools[{i}].scheduling.cache_tier"]


def test_validate_names_a_handoff_on_a_prefill_pool(disaggregated):
    manifest = copy.deepcopy(disaggregated)
    i = prefill_index(manifest)
    manifest["pools"][i]["scheduling"]["handoff"] = "pull"
    assert [v.field for v in check_manifest(seal(manifest))] == [f"pools[{i}].scheduling.handoff"]


def test_validate_names_a_first_token_on_a_prefill_pool(disaggregated):
    manifest = copy.deepcopy(disaggregated)
    i = prefill_index(manifest)
    manifest["pools"][i]["scheduling"]["first_token"] = "decode"
    assert [v.field for v in check_manifest(seal(manifest))] == [f"pools[{i}].scheduling.first_token"]


def test_a_prefix_cache_on_a_colocated_pool_validates(colocated):
    manifest = copy.deepcopy(colocated)
    manifest["pools"][0]["scheduling"]["prefix_cache_blocks"] = 100
    assert check_manifest(seal(manifest)) == []


def test_validate_names_a_prefix_cache_on_a_mixed_pool(mixed_manifest):
    manifest = yaml.safe_load(mixed_manifest["manifest"].read_text())
    i = next(i for i, p in enumerate(manifest["pools"]) if p["phase"] == "mixed")
    manifest["pools"][i]["scheduling"]["prefix_cache_blocks"] = 100
    assert [v.field for v in check_manifest(seal(manifest))] == [f"pools[{i}].scheduling.prefix_cache_blocks"]


def test_early_rejection_round_trips_through_the_manifest(old_plan, disaggregated, tmp_path):
    plan = replace(old_plan, reject_ttft_s=2.0)
    assert routing(plan) == {"early_rejection": {"ttft_ms": 2000.0}}
    again, _ = read_plan(write(tmp_path, sealed_from(disaggregated, plan)))
    assert again.reject_ttft_s == pytest.approx(2.0)


def test_validate_names_a_router_in_a_colocated_plan(colocated):
    manifest = copy.deepcopy(colocated)
    manifest["transfer"]["router"] = "cache-aware"
    assert [v.field for v in check_manifest(seal(manifest))] == ["transfer.router"]


def test_simulate_refuses_a_colocated_manifests_router_naming_it(colocated, tmp_path):
    manifest = copy.deepcopy(colocated)
    manifest["transfer"]["router"] = "cache-aware"
    with pytest.raises(PdplanError, match="transfer.router applies only to disaggregated plans") as error:
        read_plan(write(tmp_path, seal(manifest)))
    assert error.value.field == "transfer.router"
