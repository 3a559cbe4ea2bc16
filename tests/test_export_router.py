"""Exports start the routers with the plan's prefill router and the engines with the prefix caches it was verified
with: a cache-aware or round-robin plan sets each router's policy of that name, a pool whose prefix cache the plan
turns off starts with the engine's switch off, a second cache tier is named in a notice (no export starts one), and
a least-loaded plan with caches on exports as it always has. Flags and values are compared with the routers' and
engines' own lists, quoted from their sources."""

from __future__ import annotations

import copy
import shlex
import subprocess

import pytest
import yaml

from pdplan.manifest.document import seal
from pdplan.manifest.export import FORMATS, export_manifest
from pdplan.manifest.export.common import hash_hex, instances
from tests.test_manifest_export import _tokens, _yaml_documents

#: vllm-router's --prefill-policy choices: vllm-project/router src/main.rs @03e9af5c (CliArgs.prefill_policy).
VLLM_ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "consistent_hash",
                        "sticky_least_loaded", "rendezvous_hash")
#: sglang-router 0.3.2's --prefill-policy choices: sglang_router/router_args.py.
SGLANG_ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual", "bucket")
#: Dynamo's frontend --router-mode choices: components/src/dynamo/common/configuration/groups/router_args.py
#: @028cab44.
DYNAMO_ROUTER_MODES = ("round-robin", "random", "power-of-two", "kv", "direct", "least-loaded",
                       "device-aware-weighted")
#: The router flag each format writes, and where its values come from.
ROUTER_FLAGS = {"vllm": ("--prefill-policy", VLLM_ROUTER_POLICIES), "k8s": ("--prefill-policy", VLLM_ROUTER_POLICIES),
                "sglang": ("--prefill-policy", SGLANG_ROUTER_POLICIES),
                "dynamo": ("--router-mode", DYNAMO_ROUTER_MODES)}
#: vLLM 0.33.0 vllm/engine/arg_utils.py: --enable-prefix-caching is negatable; SGLang 0.5.23
#: python/sglang/srt/arg_groups/fields/memory.py: disable_radix_cache.
VLLM_OFF, SGLANG_OFF = "--no-enable-prefix-caching", "--disable-radix-cache"
TIER = {"medium": "host", "blocks": 65536, "bandwidth_gb_s": 50.0}


def planned(manifest: dict, *, router: str | None = None, blocks: dict[str, int] | None = None,
            tier: dict | None = None) -> dict:
    """``manifest`` sealed again with a prefill router, prefix-cache blocks by phase and a prefill tier."""
    edited = copy.deepcopy(manifest)
    if router is not None:
        edited["transfer"]["router"] = router
    for pool in edited["pools"]:
        if blocks and pool["phase"] in blocks:
            pool["scheduling"]["prefix_cache_blocks"] = blocks[pool["phase"]]
        if tier is not None and pool["phase"] == "prefill":
            pool["scheduling"]["cache_tier"] = tier
    return seal(edited)


def cache_aware_plan(manifest: dict) -> dict:
    """A plan using every switch: a cache-aware router, prefill caches off in HBM, a host tier under them."""
    return planned(manifest, router="cache-aware", blocks={"prefill": 0}, tier=TIER)


def flag_values(files: dict[str, str], flag: str) -> list[str]:
    return [tokens[i + 1] for tokens in _tokens(files) for i, token in enumerate(tokens) if token == flag]


def phase_commands(manifest: dict, fmt: str, files: dict[str, str]) -> dict[str, list[list[str]]]:
    """The engine commands of an export by the phase of their pool: a script's by its instance, a pod's by
    its KV role (vLLM) or disaggregation mode."""
    if fmt in ("vllm", "sglang"):
        found: dict[str, list[list[str]]] = {}
        for inst in instances(manifest):
            tokens = shlex.split(files[f"{fmt}/{inst.name}.sh"], comments=True)
            found.setdefault(inst.pool["phase"], []).append(tokens)
        return found
    roles = {"kv_producer": "prefill", "kv_consumer": "decode"}
    found = {}
    for tokens in _tokens(files):
        if "--kv-transfer-config" in tokens:
            role = yaml.safe_load(tokens[tokens.index("--kv-transfer-config") + 1])["kv_role"]
            found.setdefault(roles[role], []).append(tokens)
    return found


@pytest.mark.parametrize("fmt", ROUTER_FLAGS)
@pytest.mark.parametrize("router, names", [("cache-aware", ("cache_aware", "kv")),
                                           ("round-robin", ("round_robin", "round-robin"))])
def test_the_plans_prefill_router_sets_the_routers_policy_of_that_name(disaggregated, fmt, router, names):
    flag, upstream = ROUTER_FLAGS[fmt]
    values = flag_values(export_manifest(planned(disaggregated, router=router), fmt), flag)
    want = names[1] if fmt == "dynamo" else names[0]
    assert values == [want] and want in upstream


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_least_loaded_plan_written_out_exports_as_one_that_does_not_say_so(disaggregated, fmt):
    said, unsaid = planned(disaggregated, router="least-loaded"), planned(disaggregated)
    stated, unstated = export_manifest(said, fmt), export_manifest(unsaid, fmt)
    assert not flag_values(stated, "--prefill-policy") and not flag_values(stated, "--router-mode")
    assert {name: unhashed(text, said) for name, text in stated.items()} == {
        name: unhashed(text, unsaid) for name, text in unstated.items()}


def unhashed(text: str, manifest: dict) -> str:
    """An export's text with its manifest's content hash (in headers, labels and annotations) taken out."""
    return text.replace(hash_hex(manifest), "HASH").replace(hash_hex(manifest)[:16], "HASH")


def test_a_cache_aware_llm_d_plan_names_the_inference_schedulers_prefix_cache_scorer(disaggregated):
    """llm-d-modelservice renders no scheduler; llm-d/llm-d-inference-scheduler deploy/config/pd-epp-config.yaml
    scores prefill endpoints with the prefix-cache-scorer plugin."""
    def header(manifest: dict) -> list[str]:
        (text,) = export_manifest(manifest, "llm-d").values()
        return [line for line in text.splitlines() if line.startswith("#")]

    assert any("prefix-cache-scorer" in line for line in header(planned(disaggregated, router="cache-aware")))
    assert not any("prefix-cache-scorer" in line for line in header(disaggregated))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_plan_with_its_caches_on_writes_no_prefix_cache_switch(disaggregated, fmt):
    files = export_manifest(planned(disaggregated, blocks={"prefill": 4096, "decode": 4096}), fmt)
    assert not flag_values(files, VLLM_OFF) and all(VLLM_OFF not in t and SGLANG_OFF not in t for t in _tokens(files))


@pytest.mark.parametrize("fmt", FORMATS)
def test_prefill_pools_whose_cache_is_off_start_with_the_engines_cache_off_and_only_they(disaggregated, fmt):
    manifest = planned(disaggregated, blocks={"prefill": 0})
    commands = phase_commands(manifest, fmt, export_manifest(manifest, fmt))
    switch = SGLANG_OFF if fmt == "sglang" else VLLM_OFF
    assert commands["prefill"] and all(switch in tokens for tokens in commands["prefill"])
    assert commands["decode"] and not any(switch in tokens for tokens in commands["decode"])


@pytest.mark.parametrize("fmt", ["vllm", "dynamo", "llm-d", "k8s"])
def test_a_vllm_decode_pool_whose_cache_is_off_starts_without_prefix_caching(disaggregated, fmt):
    manifest = planned(disaggregated, blocks={"decode": 0})
    commands = phase_commands(manifest, fmt, export_manifest(manifest, fmt))
    assert commands["decode"] and all(VLLM_OFF in tokens for tokens in commands["decode"])
    assert not any(VLLM_OFF in tokens for tokens in commands["prefill"])


def test_an_sglang_decode_pool_gets_no_switch_its_server_has_no_radix_cache_in_decode_mode(disaggregated):
    """SGLang 0.5.23 arg_groups/pd_disaggregation_hook.py: a decode server disables its radix cache unless
    --disaggregation-decode-enable-radix-cache is given."""
    manifest = planned(disaggregated, blocks={"decode": 0})
    commands = phase_commands(manifest, "sglang", export_manifest(manifest, "sglang"))
    assert not any(SGLANG_OFF in tokens for tokens in commands["decode"] + commands["prefill"])


@pytest.mark.parametrize("fmt, option", [("vllm", "--kv-offloading-size"), ("sglang", "--enable-hierarchical-cache")])
def test_a_cache_tier_is_named_in_a_comment_of_its_pools_scripts_and_not_started(disaggregated, fmt, option):
    manifest = planned(disaggregated, tier=TIER)
    files = export_manifest(manifest, fmt)
    for inst in instances(manifest):
        text = files[f"{fmt}/{inst.name}.sh"]
        noted = [line for line in text.splitlines() if line.startswith("#") and option in line]
        assert len(noted) == (inst.pool["phase"] == "prefill")
    assert not any(option in tokens for tokens in _tokens(files))


@pytest.mark.parametrize("fmt", ["dynamo", "llm-d", "k8s"])
def test_a_cache_tier_is_named_in_the_header_of_a_pod_format(disaggregated, fmt):
    files = export_manifest(planned(disaggregated, tier=TIER), fmt)
    text = next(text for name, text in files.items() if not name.endswith("kustomization.yaml"))
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("--kv-offloading-size" in line and "65536 blocks in host memory at 50 GB/s" in line for line in header)
    assert not any("--kv-offloading-size" in tokens for tokens in _tokens(files))


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_switch_at_once_exports_parseable_files(disaggregated, fmt):
    files = export_manifest(cache_aware_plan(disaggregated), fmt)
    for name, text in files.items():
        if name.endswith(".sh"):
            assert subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True).returncode == 0
    assert list(_yaml_documents(files)) or fmt in ("vllm", "sglang")


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_a_tier_notice_stays_one_comment_line_whatever_the_pool_is_called(disaggregated, fmt):
    """A library caller may pass an unvalidated pool name; the notice naming it cannot end its comment."""
    from tests.test_hostile_exports import renamed

    manifest = cache_aware_plan(disaggregated)
    prefill = next(p["name"] for p in manifest["pools"] if p["phase"] == "prefill")
    files = export_manifest(renamed(manifest, prefill, prefill + "\ntouch PWNED\r#"), fmt)
    notes = [line for text in files.values() for line in text.splitlines() if "second prefix-cache tier" in line]
    assert notes and all(line.startswith("# ") for line in notes)
    assert not any(line.startswith("touch PWNED") for text in files.values() for line in text.splitlines())
