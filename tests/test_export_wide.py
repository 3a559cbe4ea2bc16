"""Exports of wide expert-parallel plans as scripts: an instance with attention data parallelism (DP ranks) and
expert parallelism (EP) starts with the engines' own flags, and one that spans nodes starts once per node with that
node's rank and its leader's address; the parallel coordinates the formats refuse.

The plan is tests/wide_plan.py's, hand-written: a DeepSeek-V3 deployment with one prefill instance of DP16 EP16 over
two H200 nodes (node ranks 0 and 1) and one decode instance of DP8 EP8 on a third node. Each script is run with
bash on stub programs that record their arguments, so a test reads the command each node would run.

The flags are the engines' (SGLang 0.5.23, python/sglang/srt/arg_groups/fields/parallel.py and exec_.py; vLLM
0.33.0, vllm/engine/arg_utils.py and docs/serving/data_parallel_deployment.md); scripts/check_consumers.py
hands the same commands to the installed parsers. The pod formats' wide exports are tests/test_export_wide_pods.py.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from pdplan.errors import PdplanError
from pdplan.manifest.check import engine_refusal
from pdplan.manifest.export import export_manifest
from tests.test_manifest_export import _validator
from tests.wide_plan import arg, engine_command, made_for_vllm, run_script

# --- SGLang ---------------------------------------------------------------------------------------

def test_sglang_decode_of_dp8_ep8_runs_eight_attention_dp_ranks_with_expert_parallelism_on_one_node(wide, tmp_path):
    script = export_manifest(wide, "sglang")["sglang/decode-0.sh"]
    command = engine_command(tmp_path, script)
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    # SGLang's --tp-size counts every GPU of the instance; --attn-dp-size splits them into DP attention ranks.
    assert (arg(command, "--tp-size"), arg(command, "--attn-dp-size"), arg(command, "--ep-size")) == \
        ("8", "8", "8")
    assert arg(command, "--disaggregation-mode") == "decode"
    assert "--nnodes" not in command and "--moe-a2a-backend" not in command
    assert "export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in script


def test_sglang_decode_ranks_take_requests_by_load_as_simulated_and_a_prefills_follow_the_bootstrap_room(wide,
                                                                                                         tmp_path):
    """SGLang's DP controller would put a decode's requests on its ranks in turn (round_robin, its default there);
    pdplan simulates each on the rank with the fewest outstanding, which ``total_requests`` is. A P/D prefill keeps
    SGLang's default, the bootstrap room, which is what pdplan simulates there."""
    scripts = export_manifest(wide, "sglang")
    decode = engine_command(tmp_path, scripts["sglang/decode-0.sh"])
    prefill = engine_command(tmp_path, scripts["sglang/prefill-0.sh"], "0")
    assert arg(decode, "--load-balance-method") == "total_requests"
    assert "--load-balance-method" not in prefill


@pytest.mark.parametrize("rank", ["0", "1"])
def test_sglang_prefill_over_two_nodes_runs_each_node_with_its_rank_and_the_leaders_init_address(wide, tmp_path,
                                                                                                  rank):
    script = export_manifest(wide, "sglang")["sglang/prefill-0.sh"]
    command = engine_command(tmp_path, script, rank)
    assert (arg(command, "--tp-size"), arg(command, "--attn-dp-size"), arg(command, "--ep-size")) == \
        ("16", "16", "16")
    assert (arg(command, "--nnodes"), arg(command, "--node-rank")) == ("2", rank)
    assert arg(command, "--dist-init-addr").startswith("h200-0:")   # the node of node_rank 0
    assert arg(command, "--disaggregation-mode") == "prefill"


def test_sglang_gives_each_attention_dp_rank_of_a_prefill_instance_the_prompt_budget_it_was_verified_with(
        wide, tmp_path):
    """SGLang hands each attention-DP rank chunked_prefill_size // attn_dp_size: the flag states the rank's
    budget, the profile's 16,384 tokens, times its 16 ranks; --max-prefill-tokens is each rank's own."""
    wide["pools"][0]["profile"] = {"source": "composed", "method": "nnls", "fallback": None,
                                   "max_prefill_batch_tokens": 16384}
    command = engine_command(tmp_path, export_manifest(wide, "sglang")["sglang/prefill-0.sh"], "0")
    assert (arg(command, "--chunked-prefill-size"), arg(command, "--max-prefill-tokens")) == \
        (str(16384 * 16), "16384")


def test_sglang_decode_and_a_prefill_pool_without_a_recorded_budget_keep_sglangs_defaults(wide, tmp_path):
    files = export_manifest(wide, "sglang")
    for script, args in ((files["sglang/prefill-0.sh"], ("0",)), (files["sglang/decode-0.sh"], ())):
        command = engine_command(tmp_path, script, *args)
        assert "--chunked-prefill-size" not in command and "--max-prefill-tokens" not in command


def test_sglang_chunk_of_a_colocated_attention_dp_pool_is_each_ranks_chunk_times_dp():
    from pdplan.manifest.export.sglang import prompt_budget_args

    pool = {"phase": "colocated", "tp": 1, "dp": 8, "ep": 8, "pp": 1,
            "scheduling": {"policy": "chunked", "chunk_tokens": 2048}}
    assert prompt_budget_args(pool) == ["--chunked-prefill-size", str(2048 * 8)]
    assert prompt_budget_args({**pool, "dp": 1, "ep": 1}) == ["--chunked-prefill-size", "2048"]


def test_sglang_expert_parallelism_across_nodes_dispatches_with_deepep_in_its_phases_mode(wide, tmp_path):
    files = export_manifest(wide, "sglang")
    prefill = engine_command(tmp_path, files["sglang/prefill-0.sh"], "1")
    assert (arg(prefill, "--moe-a2a-backend"), arg(prefill, "--deepep-mode")) == ("deepep", "normal")
    decode_wide = copy.deepcopy(wide)
    decode_wide["pools"][0]["phase"], decode_wide["pools"][1]["phase"] = "decode", "prefill"
    decode_wide["transfer"]["roles"] = {"prefill": "kv_consumer", "decode": "kv_producer"}
    decode = engine_command(tmp_path, export_manifest(decode_wide, "sglang")["sglang/prefill-0.sh"], "0")
    assert (arg(decode, "--moe-a2a-backend"), arg(decode, "--deepep-mode")) == ("deepep", "low_latency")


def test_an_ep_pool_without_attention_dp_whose_pipeline_stages_span_nodes_starts_no_deepep(wide):
    """TP 8 with its experts whole over the TP group (EP 8) and two pipeline stages, one per node: the experts'
    group stays on a node and no plan timed an all-to-all, so SGLang keeps its default."""
    wide["pools"][0].update(tp=8, dp=1, ep=8, pp=2, redundant_experts=0, gpus=16)
    for node, stage in zip(wide["placement"]["nodes"][:2], (0, 1)):
        node["instances"][0].pop("node_rank")
        node["instances"][0]["stage"] = stage
    script = export_manifest(wide, "sglang")["sglang/prefill-0.sh"]
    assert "--ep-size 8" in script and "--moe-a2a-backend" not in script


def test_an_export_says_which_pools_it_runs_without_the_deepep_all_to_all_they_were_timed_with(wide):
    """The wide-EP profiles time DeepEP's dispatch and combine. Both exports start DeepEP across nodes only, so the
    one-node decode of an older manifest (timed with a dispatch) runs the engine's default: each header says so."""
    sglang = export_manifest(wide, "sglang")
    assert "Pool decode's MoE layers were timed with DeepEP's all-to-all; SGLang on one node" in \
        sglang["sglang/decode-0.sh"]
    assert "Pool prefill's MoE" not in sglang["sglang/decode-0.sh"]
    vllm = export_manifest(wide, "vllm")["vllm/decode-0.sh"]
    assert "Pool decode's MoE layers were timed" in vllm and "Pool prefill's MoE layers were timed" not in vllm
    assert "allgather_reducescatter" in vllm


def test_vllm_runs_a_pd_pool_across_nodes_on_deepep_as_its_expert_parallel_guide_pairs_them(wide, tmp_path):
    """High-throughput kernels for a prefill across nodes; for a decode across nodes the low-latency ones, at the
    256-token budget their buffers are sized for and the requests per rank the plan verified."""
    prefill = engine_command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "0")
    assert arg(prefill, "--all2all-backend") == "deepep_high_throughput"
    decode_wide = copy.deepcopy(wide)
    decode_wide["pools"][0]["phase"], decode_wide["pools"][1]["phase"] = "decode", "prefill"
    decode_wide["transfer"]["roles"] = {"prefill": "kv_consumer", "decode": "kv_producer"}
    decode_wide["pools"][0]["scheduling"] = {"max_running_requests": 256}
    files = export_manifest(decode_wide, "vllm")
    decode = engine_command(tmp_path, files["vllm/prefill-0.sh"], "0")
    assert (arg(decode, "--all2all-backend"), arg(decode, "--max-num-batched-tokens"),
            arg(decode, "--max-num-seqs")) == ("deepep_low_latency", "256", "256")
    assert arg(engine_command(tmp_path, files["vllm/decode-0.sh"]), "--all2all-backend") is None  # one node


def test_a_pool_timed_with_a_gather_runs_the_engines_gathering_default_and_the_header_says_nothing(wide, tmp_path):
    """A pool whose verification gathered its tokens (``all_to_all: gather``) is what SGLang's and vLLM's defaults
    run: no DeepEP flag even across nodes, and no warning in the header."""
    for pool in wide["pools"]:
        pool["all_to_all"] = "gather"
        pool.pop("redundant_experts", None)
    sglang = export_manifest(wide, "sglang")
    assert "--moe-a2a-backend" not in engine_command(tmp_path, sglang["sglang/prefill-0.sh"], "1")
    assert not any("all-to-all" in text for text in sglang.values())
    assert not any("all-to-all" in text for text in export_manifest(wide, "vllm").values())


def test_a_dispatch_pool_of_a_manifest_written_before_the_field_keeps_its_header_note(wide):
    assert all("all_to_all" not in pool for pool in wide["pools"])
    assert "timed with DeepEP's all-to-all" in export_manifest(wide, "sglang")["sglang/decode-0.sh"]


def test_a_tp_only_export_says_nothing_of_an_all_to_all(wide):
    for fmt in ("sglang", "vllm"):
        assert not any("all-to-all" in text for text in export_manifest(_tp_only(wide), fmt).values())


def test_sglang_allocates_the_plans_redundant_experts_and_rebalances_them_as_they_were_timed(wide, tmp_path):
    """The slots come with --enable-eplb: without it SGLang keeps them in a trivial placement, while pdplan timed them
    at the load EPLB rebalances."""
    files = export_manifest(wide, "sglang")
    prefill = engine_command(tmp_path, files["sglang/prefill-0.sh"], "0")
    assert arg(prefill, "--ep-num-redundant-experts") == "32" and "--enable-eplb" in prefill
    decode = engine_command(tmp_path, files["sglang/decode-0.sh"])
    assert "--ep-num-redundant-experts" not in decode and "--enable-eplb" not in decode


def test_sglang_refuses_an_ep_across_nodes_other_than_the_instances_gpus_naming_the_field(wide):
    wide["pools"][0]["ep"] = 8
    with pytest.raises(PdplanError) as refused:
        export_manifest(wide, "sglang")
    assert refused.value.field == "pools[0].ep" and "DeepEP" in str(refused.value)


def test_sglang_refuses_an_ep_that_does_not_divide_tp_times_dp(wide):
    wide["pools"][1]["ep"] = 16   # over TP 1 × DP 8 (16 divides the 256 experts)
    with pytest.raises(PdplanError) as refused:
        export_manifest(wide, "sglang")
    assert refused.value.field == "pools[1].ep"


def test_sglang_refuses_redundant_experts_that_do_not_spread_evenly_over_ep_naming_the_rule(wide):
    """256 routed experts and 8 redundant ones over EP 16: SGLang's MoE layer asserts at start."""
    wide["pools"][0]["redundant_experts"] = 8
    with pytest.raises(PdplanError, match="sglang export starts sglang, which cannot run this plan: "
                                          "sglang-even-experts: .* \\(prefill: 264 routed experts, redundant ones "
                                          "included, over EP 16\\)") as refused:
        export_manifest(wide, "sglang")
    assert refused.value.field == "pools"


def test_vllm_refuses_a_deepep_pool_whose_experts_do_not_spread_evenly_over_ep_naming_the_rule(wide):
    """The prefill pool runs DeepEP across its two nodes; 256 routed experts and 8 redundant ones over EP 16 do not
    divide, which DeepEP's dispatch asserts."""
    wide["pools"][0]["redundant_experts"] = 8
    for fmt in ("vllm", "k8s"):
        with pytest.raises(PdplanError, match=f"{fmt} export starts vllm, which cannot run this plan: "
                                              "deepep-even-experts: .* \\(prefill: 264 routed experts, redundant ones "
                                              "included, over EP 16\\)") as refused:
            export_manifest(made_for_vllm(wide), fmt)
        assert refused.value.field == "pools"


def test_validate_holds_a_vllm_plan_to_deepep_even_experts_only_for_a_pool_whose_instances_span_nodes(wide):
    """``validate`` (:func:`engine_refusal`) holds a plan to the rules of the engine it was made for. vLLM's export
    starts DeepEP for the prefill pool, across two nodes, and not for the decode pool on one node, whose ranks
    gather: 256 + 4 experts over EP 8 pass there (vLLM's own layer places them unevenly; SGLang's refuses), 256 + 8
    over EP 16 on the prefill pool do not."""
    wide["pools"][1]["redundant_experts"] = 4
    assert engine_refusal(wide, "vllm") is None
    assert engine_refusal(wide, "sglang").startswith("sglang-even-experts")
    wide["pools"][0]["redundant_experts"] = 8
    why = engine_refusal(wide, "vllm")
    assert why.startswith("deepep-even-experts: ") and "(prefill: 264 routed experts, redundant ones included, over " \
                                                      "EP 16)" in why


def test_the_sglang_router_reaches_a_multinode_instance_at_its_leader(wide):
    router = export_manifest(wide, "sglang")["sglang/router.sh"]
    assert "--prefill http://h200-0:30000 " in router and "h200-1" not in router


# --- vLLM -----------------------------------------------------------------------------------------

def test_vllm_decode_of_dp8_ep8_runs_eight_dp_ranks_with_expert_parallelism_on_one_node(wide, tmp_path):
    command = engine_command(tmp_path, export_manifest(wide, "vllm")["vllm/decode-0.sh"])
    assert command[:2] == ["vllm", "serve"]
    assert (arg(command, "--tensor-parallel-size"), arg(command, "--data-parallel-size")) == ("1", "8")
    assert "--enable-expert-parallel" in command
    assert "--headless" not in command and "--data-parallel-address" not in command


def test_vllm_prefill_leader_serves_the_api_with_its_local_ranks_and_the_coordinators_address(wide, tmp_path):
    command = engine_command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "0")
    assert (arg(command, "--data-parallel-size"), arg(command, "--data-parallel-size-local")) == ("16", "8")
    assert arg(command, "--data-parallel-address") == "h200-0"
    assert arg(command, "--data-parallel-rpc-port") is not None
    # vLLM takes a start rank without --headless for hybrid load balancing: the leader states none.
    assert "--headless" not in command and "--data-parallel-start-rank" not in command
    assert "--distributed-executor-backend" not in command   # DP ranks, not pipeline stages through Ray


def test_vllm_prefill_worker_node_runs_headless_from_its_start_rank(wide, tmp_path):
    script = export_manifest(wide, "vllm")["vllm/prefill-0.sh"]
    leader, worker = engine_command(tmp_path, script, "0"), engine_command(tmp_path, script, "1")
    assert "--headless" in worker
    assert (arg(worker, "--data-parallel-start-rank"), arg(worker, "--data-parallel-size-local")) == ("8", "8")
    for flag in ("--data-parallel-size", "--data-parallel-address", "--data-parallel-rpc-port"):
        assert arg(worker, flag) == arg(leader, flag)
    assert "--enable-expert-parallel" in worker


def test_vllm_runs_each_prefill_rank_at_the_prompt_budget_it_was_verified_with(wide, tmp_path):
    """vLLM's API server would take 8,192 tokens a step on an H200 (vllm/engine/arg_utils.py); each DP rank's
    engine core takes --max-num-batched-tokens whole, so it states the profile's 16,384, not times DP."""
    wide["pools"][0]["profile"] = {"source": "composed", "method": "nnls", "fallback": None,
                                   "max_prefill_batch_tokens": 16384}
    files = export_manifest(wide, "vllm")
    for rank in ("0", "1"):
        assert arg(engine_command(tmp_path, files["vllm/prefill-0.sh"], rank), "--max-num-batched-tokens") == "16384"
    assert "--max-num-batched-tokens" not in engine_command(tmp_path, files["vllm/decode-0.sh"])


def test_vllm_prefill_pool_without_a_recorded_budget_keeps_vllms_default(wide, tmp_path):
    command = engine_command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "0")
    assert "--max-num-batched-tokens" not in command


def test_vllm_places_redundant_experts_through_eplb(wide, tmp_path):
    command = engine_command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "0")
    assert "--enable-eplb" in command
    assert json.loads(arg(command, "--eplb-config")) == {"num_redundant_experts": 32}


def test_vllm_nixl_side_channels_of_dp_instances_do_not_overlap_and_listen_on_each_node(wide, tmp_path):
    files = export_manifest(wide, "vllm")
    # each DP rank listens on its instance's port + its DP rank (vLLM nixl/base_scheduler.py)
    assert "export VLLM_NIXL_SIDE_CHANNEL_PORT=5600" in files["vllm/prefill-0.sh"]
    assert "export VLLM_NIXL_SIDE_CHANNEL_PORT=5616" in files["vllm/decode-0.sh"]
    assert "export VLLM_NIXL_SIDE_CHANNEL_HOST=h200-1" in files["vllm/prefill-0.sh"]


def test_vllm_refuses_an_ep_other_than_tp_times_dp_naming_the_field(wide):
    wide["pools"][1]["ep"] = 4
    with pytest.raises(PdplanError) as refused:
        export_manifest(wide, "vllm")
    assert refused.value.field == "pools[1].ep" and "TP x DP" in str(refused.value)


def test_a_multinode_vllm_script_run_with_a_rank_its_instance_lacks_exits_and_starts_nothing(wide, tmp_path):
    done, calls = run_script(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "2")
    assert done.returncode == 2 and "0 to 1" in done.stderr
    assert calls == []


# --- manifests without the wide fields ----------------------------------------------------------------

def _tp_only(wide: dict) -> dict:
    """The plan as a manifest written before wide expert parallelism: TP8 instances on one node each."""
    old = copy.deepcopy(wide)
    for pool in old["pools"]:
        for key in ("dp", "ep", "redundant_experts"):
            pool.pop(key, None)
        pool["tp"], pool["gpus"] = 8, 8
    old["pools"][0]["replicas"] = 2
    old["placement"]["nodes"][0]["instances"][0]["instance"] = "prefill-1"   # one instance per node
    for node in old["placement"]["nodes"]:
        for slot in node["instances"]:
            slot.pop("node_rank", None)
    return old


@pytest.mark.parametrize("fmt", ["sglang", "vllm", "k8s", "dynamo", "llm-d"])
def test_stating_the_defaults_dp1_ep1_and_no_redundant_experts_changes_no_byte(wide, fmt):
    old = _tp_only(wide)
    old["provenance"]["profiles"]["serving_engine"] = "vllm"
    stated = copy.deepcopy(old)
    for pool in stated["pools"]:
        pool.update(dp=1, ep=1, redundant_experts=0)
    assert export_manifest(stated, fmt) == export_manifest(old, fmt)


def test_a_tp_only_manifest_starts_sglang_with_tp_alone(wide, tmp_path):
    command = engine_command(tmp_path, export_manifest(_tp_only(wide), "sglang")["sglang/decode-0.sh"])
    assert arg(command, "--tp-size") == "8"
    for flag in ("--attn-dp-size", "--ep-size", "--moe-a2a-backend", "--ep-num-redundant-experts", "--nnodes"):
        assert flag not in command


@pytest.mark.parametrize("fmt", ["sglang", "dynamo", "llm-d"])
@pytest.mark.parametrize("key, value", [("dp", "8; touch PWNED"), ("ep", 0), ("dp", True), ("redundant_experts", -1)])
def test_a_parallel_size_that_is_not_a_whole_number_in_range_is_refused_naming_it(wide, key, value, fmt):
    wide["pools"][1][key] = value
    with pytest.raises(PdplanError) as refused:
        export_manifest(made_for_vllm(wide), fmt)
    assert refused.value.field == f"pools.{key}"


def test_a_node_rank_that_is_not_a_whole_number_is_refused_naming_its_field(wide):
    wide["placement"]["nodes"][1]["instances"][0]["node_rank"] = "1$(touch PWNED)"
    with pytest.raises(PdplanError) as refused:
        export_manifest(wide, "vllm")
    assert refused.value.field == "placement.nodes[1].instances[0].node_rank"


def test_each_node_of_a_multinode_vllm_dp_instance_sees_only_its_own_gpus(wide, tmp_path):
    nodes = wide["placement"]["nodes"]
    nodes[0]["instances"][0]["gpu_indices"], nodes[1]["instances"][0]["gpu_indices"] = [4, 5, 6, 7], [0, 1, 2, 3]
    wide["pools"][0].update(dp=8, ep=8, gpus=8)
    script = export_manifest(wide, "vllm")["vllm/prefill-0.sh"]
    leader = script[script.index("  0)"):script.index("  1)")]
    worker = script[script.index("  1)"):script.index("  *)")]
    assert "export CUDA_VISIBLE_DEVICES=4,5,6,7" in leader and "export CUDA_VISIBLE_DEVICES=0,1,2,3" in worker


def test_mooncake_bootstrap_ports_of_dp_prefill_instances_leave_room_for_every_ranks_side_channel(wide):
    wide["transfer"]["connector"] = "mooncake"
    second = {"instance": "prefill-1", "pool": "prefill", "stage": 0, "gpu_indices": [0, 1, 2, 3, 4, 5, 6, 7]}
    wide["placement"]["nodes"].append({**wide["placement"]["nodes"][2], "node": "h200-3", "instances": [second]})
    wide["pools"][0]["replicas"] = 2
    for node in wide["placement"]["nodes"][:2]:
        node["instances"][0].pop("node_rank")
        node["instances"][0]["instance"] = f"prefill-{node['node']}"
    wide["pools"][0].update(dp=8, ep=8, gpus=8, tp=1)
    files = export_manifest(wide, "vllm")
    ports = sorted(int(line.rsplit("=", 1)[1]) for text in files.values() for line in text.splitlines()
                   if line.startswith("export VLLM_MOONCAKE_BOOTSTRAP_PORT="))
    # DP8 TP1: ranks 0..7 of one instance listen on its port + 0..7 (vLLM mooncake_connector.py)
    assert len(ports) == 3 and all(b - a >= 8 for a, b in zip(ports, ports[1:]))


def test_a_deepep_decode_pool_starts_each_rank_at_the_requests_and_tokens_it_was_verified_with(wide, tmp_path):
    """A decode pool on DeepEP's low-latency kernels was verified with each rank running at most 128 requests
    (``scheduling.max_running_requests``): SGLang's --max-running-requests counts the instance's (128 x 16 ranks),
    and the script states DeepEP's per-rank token budget instead of inheriting one."""
    decode_wide = copy.deepcopy(wide)
    decode_wide["pools"][0]["phase"], decode_wide["pools"][1]["phase"] = "decode", "prefill"
    decode_wide["transfer"]["roles"] = {"prefill": "kv_consumer", "decode": "kv_producer"}
    decode_wide["pools"][0]["scheduling"] = {"max_running_requests": 128}
    files = export_manifest(decode_wide, "sglang")
    script = files["sglang/prefill-0.sh"]
    assert arg(engine_command(tmp_path, script, "0"), "--max-running-requests") == "2048"
    assert "export SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=128" in script
    assert "DISPATCH_TOKENS" not in files["sglang/decode-0.sh"]
    assert arg(engine_command(tmp_path, files["sglang/decode-0.sh"]), "--max-running-requests") is None


def test_vllm_runs_each_rank_at_most_the_requests_the_plan_verified(wide, tmp_path):
    wide["pools"][1]["scheduling"] = {"max_running_requests": 96}
    command = engine_command(tmp_path, export_manifest(wide, "vllm")["vllm/decode-0.sh"])
    assert arg(command, "--max-num-seqs") == "96"


def test_a_deepep_decode_pool_of_a_manifest_written_before_the_cap_says_its_ranks_were_not_held_to_it(wide):
    decode_wide = copy.deepcopy(wide)
    decode_wide["pools"][0]["phase"], decode_wide["pools"][1]["phase"] = "decode", "prefill"
    decode_wide["transfer"]["roles"] = {"prefill": "kv_consumer", "decode": "kv_producer"}
    note = "Pool prefill decodes on DeepEP's low-latency kernels, which take at most 128 tokens per rank and step"
    assert note in export_manifest(decode_wide, "sglang")["sglang/decode-0.sh"]
    decode_wide["pools"][0]["scheduling"] = {"max_running_requests": 128}
    assert "low-latency kernels" not in export_manifest(decode_wide, "sglang")["sglang/decode-0.sh"]
    assert "low-latency kernels" not in export_manifest(wide, "sglang")["sglang/decode-0.sh"]


def test_an_instance_started_on_deepep_checks_for_it_first_and_says_how_to_get_it(wide):
    """DeepEP is built from source, not a PyPI package: a script that starts its all-to-all stops first, naming the
    module both engines import (deep_ep) and where to get it; an instance on one node does not ask for it."""
    sglang = export_manifest(wide, "sglang")
    assert "import deep_ep" in sglang["sglang/prefill-0.sh"] and "github.com/deepseek-ai/DeepEP" in \
        sglang["sglang/prefill-0.sh"]
    assert "deep_ep" not in sglang["sglang/decode-0.sh"]
    vllm = export_manifest(wide, "vllm")
    assert "import deep_ep" in vllm["vllm/prefill-0.sh"] and "tools/ep_kernels/README.md" in vllm["vllm/prefill-0.sh"]
    assert "deep_ep" not in vllm["vllm/decode-0.sh"]


@pytest.fixture
def tep8(wide) -> dict:
    """The plan with its prefill and its decode each a TP8 group over two GB200 compute trays (TensorRT-LLM's TEP8
    shape, no attention DP), whose NVLink joins them."""
    plan = copy.deepcopy(wide)
    for pool in plan["pools"]:
        pool.update(gpu="gb200-185gb", tp=8, dp=1, ep=1, gpus=8)
        pool.pop("redundant_experts", None)
    plan["placement"]["nodes"] = [
        {"node": f"tray-{k}", "gpu": "gb200-185gb", "gpus": 4,
         "node_label": {"key": "nvidia.com/gpu.product", "value": "NVIDIA-GB200"},
         "instances": [{"instance": f"{pool}-0", "pool": pool, "stage": 0, "node_rank": k % 2,
                        "gpu_indices": [0, 1, 2, 3]}]}
        for k, pool in enumerate(("prefill", "prefill", "decode", "decode"))]
    return plan


@pytest.mark.parametrize("rank", ["0", "1"])
def test_sglang_runs_a_tp8_group_over_two_gb200_trays_as_one_instance_of_two_nodes(tep8, tmp_path, rank):
    command = engine_command(tmp_path, export_manifest(tep8, "sglang")["sglang/prefill-0.sh"], rank)
    assert (arg(command, "--tp-size"), arg(command, "--nnodes"), arg(command, "--node-rank")) == \
        ("8", "2", rank)
    assert arg(command, "--dist-init-addr").startswith("tray-0:")
    assert "--attn-dp-size" not in command and "--ep-size" not in command


def test_vllm_runs_a_tp8_group_over_two_gb200_trays_through_ray(tep8, tmp_path):
    script = export_manifest(tep8, "vllm")["vllm/prefill-0.sh"]
    assert "ray start --head" in script and "--address=tray-0:" in script
    assert "--tensor-parallel-size 8" in script and "--distributed-executor-backend ray" in script


def test_validate_refuses_a_vllm_plan_whose_dp_ranks_each_span_trays(tep8):
    """A TP8 DP2 prefill over four GB200 trays: each rank's TP group takes two whole trays, which SGLang starts
    (``--tp-size 16 --attn-dp-size 2 --nnodes 4``) and vLLM's export cannot (it starts whole DP ranks per node),
    so ``validate`` holds a vLLM plan to the rule the search applies."""
    prefill = tep8["pools"][0]
    prefill.update(dp=2, ep=16, gpus=16)
    tep8["placement"]["nodes"][:2] = [
        {**tep8["placement"]["nodes"][0], "node": f"tray-p{k}",
         "instances": [{"instance": "prefill-0", "pool": "prefill", "stage": 0, "node_rank": k,
                        "gpu_indices": [0, 1, 2, 3]}]} for k in range(4)]
    assert engine_refusal(tep8, "sglang") is None
    assert engine_refusal(tep8, "vllm").startswith("vllm-whole-ranks: ")


def test_the_dynamo_graph_of_a_tp8_group_over_two_gb200_trays_is_one_multinode_component_each(shared_data, tep8):
    """Each TEP8 pool runs as a component of two nodes of 4 GPUs (nodeCount x the container's GPUs = its 8), and the
    graph validates strictly against the CRD schema."""
    (text,) = export_manifest(made_for_vllm(tep8), "dynamo").values()
    graph = yaml.safe_load(text)
    _validator(shared_data, "dynamo.dynamographdeployment.v1beta1.schema.json").validate(graph)
    workers = [c for c in graph["spec"]["components"] if c["name"] != "Frontend"]
    assert len(workers) == 2
    for worker in workers:
        limits = worker["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]
        assert (worker["multinode"]["nodeCount"], limits["nvidia.com/gpu"]) == (2, "4")
