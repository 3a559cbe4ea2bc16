"""Dynamo's TensorRT-LLM workers: a plan made for TensorRT-LLM runs as ``python3 -m dynamo.trtllm`` components whose
flags are Dynamo's worker's (ai-dynamo 1.6.1 ``dynamo/trtllm/backend_args.py``) and whose ``--override-engine-args``
holds the ``LlmArgs`` fields the plan was verified with (TensorRT-LLM ``tensorrt_llm/llmapi/llm_args.py``);
scripts/check_consumers.py hands the same commands to Dynamo's own parser."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from pdplan.errors import PdplanError
from pdplan.manifest.export import export_manifest
from pdplan.manifest.export.common import gathering_pools
from pdplan.manifest.export.trtllm import kv_memory_fraction
from tests.test_manifest_export import _validator
from tests.wide_plan import WIDE


def made_for_trtllm(manifest: dict) -> dict:
    edited = copy.deepcopy(manifest)
    edited["provenance"]["profiles"]["serving_engine"] = "trtllm"
    return edited


@pytest.fixture
def wide() -> dict:
    """The hand-written DeepSeek-V3 plan of tests/wide_plan.py (a DP16 EP16 prefill over two nodes, a DP8 EP8
    decode on one) made for TensorRT-LLM, with the KV capacities and the trace's prompts a manifest states."""
    manifest = made_for_trtllm(yaml.safe_load(WIDE))
    manifest["pools"][0].pop("redundant_experts")
    for pool, tokens in zip(manifest["pools"], (16 * 40_000, 8 * 20_000)):
        pool["memory"]["kv_capacity_tokens_per_instance"] = tokens
    manifest["workload"] = {"trace": {"prompt_tokens": {"max": 8191}}}
    return manifest


def workers(manifest: dict) -> dict[str, dict]:
    """The graph's worker components by name, each with its parsed arguments and engine overrides."""
    (text,) = export_manifest(manifest, "dynamo").values()
    graph = yaml.safe_load(text)
    found = {}
    for component in graph["spec"]["components"][1:]:
        main = component["podTemplate"]["spec"]["containers"][0]
        args = main["args"]
        found[component["name"]] = {"component": component, "command": main["command"], "args": args,
                                    "overrides": json.loads(args[args.index("--override-engine-args") + 1])}
    return found


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_a_plan_made_for_trtllm_runs_dynamo_trtllm_workers_in_a_graph_the_crd_schema_accepts(shared_data, manifests):
    manifest = made_for_trtllm(yaml.safe_load(manifests["disaggregated"].read_text()))
    manifest["transfer"]["connector"] = "nixl"  # the fixture moves its KV over Mooncake
    (text,) = export_manifest(manifest, "dynamo").values()
    graph = yaml.safe_load(text)
    _validator(shared_data, "dynamo.dynamographdeployment.v1beta1.schema.json").validate(graph)
    assert graph["spec"]["backendFramework"] == "trtllm"
    images = {c["podTemplate"]["spec"]["containers"][0]["image"] for c in graph["spec"]["components"]}
    assert images == {"nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:1.6.1"}
    modes = {_value(w["args"], "--disaggregation-mode") for w in workers(manifest).values()}
    assert modes == {"prefill", "decode"}
    assert all(w["command"] == ["python3", "-m", "dynamo.trtllm"] for w in workers(manifest).values())


def test_attention_dp_runs_as_tensor_parallel_size_gpus_each_one_rank_with_the_experts_spread_over_ep(wide):
    """TensorRT-LLM's tensor_parallel_size counts the stage's GPUs; with enable_attention_dp each is one DP rank."""
    prefill = workers(wide)["prefill"]["args"]
    assert (_value(prefill, "--tensor-parallel-size"), _value(prefill, "--expert-parallel-size")) == ("16", "16")
    assert "--enable-attention-dp" in prefill and _value(prefill, "--pipeline-parallel-size") == "1"


def test_each_rank_holds_at_most_the_kv_tokens_the_plan_gave_it(wide):
    """max_tokens is per DP rank (each rank's executor holds its own KV pool): 640,000 over 16 ranks."""
    found = workers(wide)
    assert found["prefill"]["overrides"]["kv_cache_config"]["max_tokens"] == 40_000
    assert found["decode"]["overrides"]["kv_cache_config"]["max_tokens"] == 20_000


def test_the_kv_memory_fraction_is_what_the_plan_leaves_the_kv_of_the_memory_after_the_weights():
    """(u·G − W) / (G − W): 80 GiB at 0.9 with 32 GiB of weights gives 40 of the 48 GiB left, 0.8333."""
    pool = {"memory": {"gpu_memory_gib": 80.0, "memory_utilization": 0.9, "weights_gib_per_gpu": 32.0}}
    assert kv_memory_fraction(pool) == pytest.approx(40 / 48, abs=1e-4)


def test_prefill_runs_without_the_overlap_scheduler_and_chunks_long_prompts_while_decode_keeps_both_defaults(wide):
    found = workers(wide)
    prefill, decode = found["prefill"]["overrides"], found["decode"]["overrides"]
    assert prefill["disable_overlap_scheduler"] is True and prefill["enable_chunked_prefill"] is True
    assert "disable_overlap_scheduler" not in decode and "enable_chunked_prefill" not in decode


def test_the_kv_moves_over_nixl_through_a_buffer_that_holds_the_largest_prompt(wide):
    for worker in workers(wide).values():
        assert worker["overrides"]["cache_transceiver_config"] == {"backend": "NIXL", "max_tokens_in_buffer": 8192}


def test_fp8_kv_and_a_cache_the_plan_turns_off_reach_the_kv_cache_config(wide):
    wide["identity"]["kv_cache"]["dtype"] = "fp8"
    wide["pools"][0]["scheduling"]["prefix_cache_blocks"] = 0
    found = workers(wide)
    assert found["prefill"]["overrides"]["kv_cache_config"]["dtype"] == "fp8"
    assert found["prefill"]["overrides"]["kv_cache_config"]["enable_block_reuse"] is False
    assert "enable_block_reuse" not in found["decode"]["overrides"]["kv_cache_config"]


def test_the_batch_limits_the_plan_was_verified_at_are_the_workers_flags(wide):
    wide["pools"][0]["scheduling"]["max_prefill_batch_tokens"] = 16384
    wide["pools"][1]["scheduling"]["max_running_requests"] = 256
    found = workers(wide)
    assert _value(found["prefill"]["args"], "--max-num-tokens") == "16384"
    assert _value(found["decode"]["args"], "--max-batch-size") == "256"


def test_mtp_drafts_on_every_pool_as_dynamos_mtp_configs_run_it(wide):
    wide["provenance"]["profiles"]["speculative"] = {"method": "mtp", "draft_tokens": 2}
    for worker in workers(wide).values():
        assert worker["overrides"]["speculative_config"] == {"decoding_type": "MTP", "num_nextn_predict_layers": 2}


def test_a_kv_router_plan_has_every_worker_publish_its_kv_events(wide):
    wide["transfer"]["router"] = "cache-aware"
    assert all("--publish-kv-events" in w["args"] for w in workers(wide).values())


def test_an_instance_over_two_nodes_is_one_multinode_component_the_operator_starts_with_mpirun(wide):
    """The operator wraps the worker's command in mpirun over its MPI Secret's SSH keypair (backend_trtllm.go), so the
    component states only its nodes, each pod with its node's GPUs."""
    component = workers(wide)["prefill"]["component"]
    limits = component["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]
    assert (component["multinode"]["nodeCount"], limits["nvidia.com/gpu"]) == (2, "8")


def test_a_checkpoint_tensorrt_llm_would_have_to_quantize_as_it_loads_is_refused_naming_the_field(wide):
    wide["identity"]["checkpoint"]["dtype"] = "bf16"
    with pytest.raises(PdplanError, match="TensorRT-LLM cannot quantize every block matrix to fp8") as refused:
        export_manifest(wide, "dynamo")
    assert refused.value.field == "identity.weights_dtype"


def test_a_kv_connector_tensorrt_llm_has_no_transceiver_for_is_refused_naming_the_field(wide):
    wide["transfer"]["connector"] = "lmcache"
    with pytest.raises(PdplanError, match="cache transceiver has no 'lmcache' backend") as refused:
        export_manifest(wide, "dynamo")
    assert refused.value.field == "transfer.connector"



def test_a_dispatch_timed_pool_runs_gathered_off_an_nvlink_fabric_and_dispatched_on_one(wide):
    """A wide pool timed with a dispatch: TensorRT-LLM gathers on HGX H200 nodes, which the export's header warns of,
    and dispatches over a GB200 rack's NVLink by itself."""
    assert gathering_pools(wide, "trtllm") == ["prefill", "decode"]
    for pool in wide["pools"]:
        pool["gpu"] = "gb200-185gb"
    assert gathering_pools(wide, "trtllm") == []
