"""Exports of wide expert-parallel plans: an instance with attention data parallelism (DP ranks) and expert
parallelism (EP) starts with the engines' own flags, and one that spans nodes starts once per node with that
node's rank and its leader's address.

The plan is written by hand below: a DeepSeek-V3 deployment with one prefill instance of DP16 EP16 over two
H200 nodes (node ranks 0 and 1) and one decode instance of DP8 EP8 on a third node. Each script is run with
bash on stub programs that record their arguments, so a test reads the command each node would run.

The flags are the engines' (SGLang 0.5.23, python/sglang/srt/arg_groups/fields/parallel.py and exec_.py; vLLM
0.33.0, vllm/engine/arg_utils.py and docs/serving/data_parallel_deployment.md); scripts/check_consumers.py
hands the same commands to the installed parsers. The pod formats are held to their consumers' rules: the
Dynamo operator's for a multinode vLLM component (ai-dynamo/dynamo deploy/operator/internal/dynamo/backend_vllm.go)
and the llm-d-modelservice chart's for its parallelism block (templates/_helpers.tpl), and to their schemas.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import pytest
import yaml

from pdplan.errors import PdplanError
from pdplan.manifest.check import engine_refusal
from pdplan.manifest.export import export_manifest
from tests.test_manifest_export import _validator

WIDE = """
apiVersion: pdplan/v1
kind: DeploymentManifest
metadata: {name: deepseek-wide}
identity:
  model: deepseek-v3
  checkpoint: {id: deepseek-ai/DeepSeek-V3, revision: main, dtype: fp8}
  weights_dtype: fp8
  kv_cache: {dtype: bf16}
pools:
- name: prefill
  phase: prefill
  model: deepseek-v3
  gpu: h200-141gb
  tp: 1
  dp: 16
  ep: 16
  redundant_experts: 32
  pp: 1
  replicas: 1
  gpus: 16
  scheduling: {}
  memory: {gpu_memory_gib: 141.0, memory_utilization: 0.85, weights_gib_per_gpu: 45.0}
- name: decode
  phase: decode
  model: deepseek-v3
  gpu: h200-141gb
  tp: 1
  dp: 8
  ep: 8
  pp: 1
  replicas: 1
  gpus: 8
  scheduling: {}
  memory: {gpu_memory_gib: 141.0, memory_utilization: 0.85, weights_gib_per_gpu: 90.0}
placement:
  route_epoch: 1
  affinity: high
  nodes:
  - node: h200-0
    gpu: h200-141gb
    gpus: 8
    node_label: {key: nvidia.com/gpu.product, value: NVIDIA-H200}
    instances:
    - {instance: prefill-0, pool: prefill, stage: 0, node_rank: 0, gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]}
  - node: h200-1
    gpu: h200-141gb
    gpus: 8
    node_label: {key: nvidia.com/gpu.product, value: NVIDIA-H200}
    instances:
    - {instance: prefill-0, pool: prefill, stage: 0, node_rank: 1, gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]}
  - node: h200-2
    gpu: h200-141gb
    gpus: 8
    node_label: {key: nvidia.com/gpu.product, value: NVIDIA-H200}
    instances:
    - {instance: decode-0, pool: decode, stage: 0, gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]}
transfer:
  connector: nixl
  roles: {prefill: kv_producer, decode: kv_consumer}
provenance:
  profiles: {serving_engine: sglang}
  content_hash: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
"""

#: A stub program: appends its name and arguments to $STUB_LOG, one call per line, arguments separated
#: by the unit separator (no argument holds one), and exits 0; ``python -c`` (a prerequisite's import
#: check) only exits 0.
STUB = ('#!/bin/bash\nif [ "${1:-}" = -c ]; then exit 0; fi\n'
        '(IFS=$\'\\x1f\'; printf "%s\\n" "${0##*/}$IFS$*") >> "$STUB_LOG"\n')


@pytest.fixture
def wide() -> dict:
    return yaml.safe_load(WIDE)


def _run(tmp_path: Path, script: str, *args: str,
         env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run ``script`` with ``args`` (and ``env``) on stubs of python, python3 and vllm: (the run, the calls it
    made)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name in ("python", "python3", "vllm"):
        (folder / name).write_text(STUB)
        (folder / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    (tmp_path / "script.sh").write_text(script)
    done = subprocess.run(["bash", str(tmp_path / "script.sh"), *args], capture_output=True, text=True,
                          env={"PATH": f"{folder}:/usr/bin:/bin", "STUB_LOG": str(log), **(env or {})})
    return done, [line.split("\x1f") for line in log.read_text().splitlines()]


def _command(tmp_path: Path, script: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """The one engine command a script runs (with ``args`` and ``env``)."""
    done, calls = _run(tmp_path, script, *args, env=env)
    assert done.returncode == 0, done.stderr
    assert len(calls) == 1, calls
    return calls[0]


def _value(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


# --- SGLang ---------------------------------------------------------------------------------------

def test_sglang_decode_of_dp8_ep8_runs_eight_attention_dp_ranks_with_expert_parallelism_on_one_node(wide, tmp_path):
    script = export_manifest(wide, "sglang")["sglang/decode-0.sh"]
    command = _command(tmp_path, script)
    assert command[:3] == ["python", "-m", "sglang.launch_server"]
    # SGLang's --tp-size counts every GPU of the instance; --attn-dp-size splits them into DP attention ranks.
    assert (_value(command, "--tp-size"), _value(command, "--attn-dp-size"), _value(command, "--ep-size")) == \
        ("8", "8", "8")
    assert _value(command, "--disaggregation-mode") == "decode"
    assert "--nnodes" not in command and "--moe-a2a-backend" not in command
    assert "export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7" in script


def test_sglang_decode_ranks_take_requests_by_load_as_simulated_and_a_prefills_follow_the_bootstrap_room(wide,
                                                                                                         tmp_path):
    """SGLang's DP controller would put a decode's requests on its ranks in turn (round_robin, its default there);
    pdplan simulates each on the rank with the fewest outstanding, which ``total_requests`` is. A P/D prefill keeps
    SGLang's default, the bootstrap room, which is what pdplan simulates there."""
    scripts = export_manifest(wide, "sglang")
    decode = _command(tmp_path, scripts["sglang/decode-0.sh"])
    prefill = _command(tmp_path, scripts["sglang/prefill-0.sh"], "0")
    assert _value(decode, "--load-balance-method") == "total_requests"
    assert "--load-balance-method" not in prefill


@pytest.mark.parametrize("rank", ["0", "1"])
def test_sglang_prefill_over_two_nodes_runs_each_node_with_its_rank_and_the_leaders_init_address(wide, tmp_path,
                                                                                                  rank):
    script = export_manifest(wide, "sglang")["sglang/prefill-0.sh"]
    command = _command(tmp_path, script, rank)
    assert (_value(command, "--tp-size"), _value(command, "--attn-dp-size"), _value(command, "--ep-size")) == \
        ("16", "16", "16")
    assert (_value(command, "--nnodes"), _value(command, "--node-rank")) == ("2", rank)
    assert _value(command, "--dist-init-addr").startswith("h200-0:")   # the node of node_rank 0
    assert _value(command, "--disaggregation-mode") == "prefill"


def test_sglang_gives_each_attention_dp_rank_of_a_prefill_instance_the_prompt_budget_it_was_verified_with(
        wide, tmp_path):
    """SGLang hands each attention-DP rank chunked_prefill_size // attn_dp_size: the flag states the rank's
    budget, the profile's 16,384 tokens, times its 16 ranks; --max-prefill-tokens is each rank's own."""
    wide["pools"][0]["profile"] = {"source": "composed", "method": "nnls", "fallback": None,
                                   "max_prefill_batch_tokens": 16384}
    command = _command(tmp_path, export_manifest(wide, "sglang")["sglang/prefill-0.sh"], "0")
    assert (_value(command, "--chunked-prefill-size"), _value(command, "--max-prefill-tokens")) == \
        (str(16384 * 16), "16384")


def test_sglang_decode_and_a_prefill_pool_without_a_recorded_budget_keep_sglangs_defaults(wide, tmp_path):
    files = export_manifest(wide, "sglang")
    for script, args in ((files["sglang/prefill-0.sh"], ("0",)), (files["sglang/decode-0.sh"], ())):
        command = _command(tmp_path, script, *args)
        assert "--chunked-prefill-size" not in command and "--max-prefill-tokens" not in command


def test_sglang_chunk_of_a_colocated_attention_dp_pool_is_each_ranks_chunk_times_dp():
    from pdplan.manifest.export.sglang import prompt_budget_args

    pool = {"phase": "colocated", "tp": 1, "dp": 8, "ep": 8, "pp": 1,
            "scheduling": {"policy": "chunked", "chunk_tokens": 2048}}
    assert prompt_budget_args(pool) == ["--chunked-prefill-size", str(2048 * 8)]
    assert prompt_budget_args({**pool, "dp": 1, "ep": 1}) == ["--chunked-prefill-size", "2048"]


def test_sglang_expert_parallelism_across_nodes_dispatches_with_deepep_in_its_phases_mode(wide, tmp_path):
    files = export_manifest(wide, "sglang")
    prefill = _command(tmp_path, files["sglang/prefill-0.sh"], "1")
    assert (_value(prefill, "--moe-a2a-backend"), _value(prefill, "--deepep-mode")) == ("deepep", "normal")
    decode_wide = copy.deepcopy(wide)
    decode_wide["pools"][0]["phase"], decode_wide["pools"][1]["phase"] = "decode", "prefill"
    decode_wide["transfer"]["roles"] = {"prefill": "kv_consumer", "decode": "kv_producer"}
    decode = _command(tmp_path, export_manifest(decode_wide, "sglang")["sglang/prefill-0.sh"], "0")
    assert (_value(decode, "--moe-a2a-backend"), _value(decode, "--deepep-mode")) == ("deepep", "low_latency")


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
    prefill = _command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "0")
    assert _value(prefill, "--all2all-backend") == "deepep_high_throughput"
    decode_wide = copy.deepcopy(wide)
    decode_wide["pools"][0]["phase"], decode_wide["pools"][1]["phase"] = "decode", "prefill"
    decode_wide["transfer"]["roles"] = {"prefill": "kv_consumer", "decode": "kv_producer"}
    decode_wide["pools"][0]["scheduling"] = {"max_running_requests": 256}
    files = export_manifest(decode_wide, "vllm")
    decode = _command(tmp_path, files["vllm/prefill-0.sh"], "0")
    assert (_value(decode, "--all2all-backend"), _value(decode, "--max-num-batched-tokens"),
            _value(decode, "--max-num-seqs")) == ("deepep_low_latency", "256", "256")
    assert _value(_command(tmp_path, files["vllm/decode-0.sh"]), "--all2all-backend") is None  # one node


def test_a_pool_timed_with_a_gather_runs_the_engines_gathering_default_and_the_header_says_nothing(wide, tmp_path):
    """A pool whose verification gathered its tokens (``all_to_all: gather``) is what SGLang's and vLLM's defaults
    run: no DeepEP flag even across nodes, and no warning in the header."""
    for pool in wide["pools"]:
        pool["all_to_all"] = "gather"
        pool.pop("redundant_experts", None)
    sglang = export_manifest(wide, "sglang")
    assert "--moe-a2a-backend" not in _command(tmp_path, sglang["sglang/prefill-0.sh"], "1")
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
    prefill = _command(tmp_path, files["sglang/prefill-0.sh"], "0")
    assert _value(prefill, "--ep-num-redundant-experts") == "32" and "--enable-eplb" in prefill
    decode = _command(tmp_path, files["sglang/decode-0.sh"])
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
            export_manifest(_vllm(wide), fmt)
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
    command = _command(tmp_path, export_manifest(wide, "vllm")["vllm/decode-0.sh"])
    assert command[:2] == ["vllm", "serve"]
    assert (_value(command, "--tensor-parallel-size"), _value(command, "--data-parallel-size")) == ("1", "8")
    assert "--enable-expert-parallel" in command
    assert "--headless" not in command and "--data-parallel-address" not in command


def test_vllm_prefill_leader_serves_the_api_with_its_local_ranks_and_the_coordinators_address(wide, tmp_path):
    command = _command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "0")
    assert (_value(command, "--data-parallel-size"), _value(command, "--data-parallel-size-local")) == ("16", "8")
    assert _value(command, "--data-parallel-address") == "h200-0"
    assert _value(command, "--data-parallel-rpc-port") is not None
    # vLLM takes a start rank without --headless for hybrid load balancing: the leader states none.
    assert "--headless" not in command and "--data-parallel-start-rank" not in command
    assert "--distributed-executor-backend" not in command   # DP ranks, not pipeline stages through Ray


def test_vllm_prefill_worker_node_runs_headless_from_its_start_rank(wide, tmp_path):
    script = export_manifest(wide, "vllm")["vllm/prefill-0.sh"]
    leader, worker = _command(tmp_path, script, "0"), _command(tmp_path, script, "1")
    assert "--headless" in worker
    assert (_value(worker, "--data-parallel-start-rank"), _value(worker, "--data-parallel-size-local")) == ("8", "8")
    for flag in ("--data-parallel-size", "--data-parallel-address", "--data-parallel-rpc-port"):
        assert _value(worker, flag) == _value(leader, flag)
    assert "--enable-expert-parallel" in worker


def test_vllm_runs_each_prefill_rank_at_the_prompt_budget_it_was_verified_with(wide, tmp_path):
    """vLLM's API server would take 8,192 tokens a step on an H200 (vllm/engine/arg_utils.py); each DP rank's
    engine core takes --max-num-batched-tokens whole, so it states the profile's 16,384, not times DP."""
    wide["pools"][0]["profile"] = {"source": "composed", "method": "nnls", "fallback": None,
                                   "max_prefill_batch_tokens": 16384}
    files = export_manifest(wide, "vllm")
    for rank in ("0", "1"):
        assert _value(_command(tmp_path, files["vllm/prefill-0.sh"], rank), "--max-num-batched-tokens") == "16384"
    assert "--max-num-batched-tokens" not in _command(tmp_path, files["vllm/decode-0.sh"])


def test_vllm_prefill_pool_without_a_recorded_budget_keeps_vllms_default(wide, tmp_path):
    command = _command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "0")
    assert "--max-num-batched-tokens" not in command


def test_vllm_places_redundant_experts_through_eplb(wide, tmp_path):
    command = _command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "0")
    assert "--enable-eplb" in command
    assert json.loads(_value(command, "--eplb-config")) == {"num_redundant_experts": 32}


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
    done, calls = _run(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "2")
    assert done.returncode == 2 and "0 to 1" in done.stderr
    assert calls == []


# --- node ranks, pods, other formats ----------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["vllm", "sglang", "dynamo", "llm-d", "k8s"])
def test_a_node_of_more_gpus_than_one_host_holds_is_refused_by_every_format_naming_the_field(wide, fmt):
    """A GB200 NVL72 rack planned as one node of 72: its hosts are compute trays of 4, one process group each, and
    no launch on the rack's 72 GPUs names the host it runs on."""
    for pool in wide["pools"]:
        pool["gpu"] = "gb200-185gb"
    for n, node in enumerate(wide["placement"]["nodes"]):
        node.update(node=f"nvl72-{n}", gpu="gb200-185gb", gpus=72, node_label={"key": "nvidia.com/gpu.product",
                                                                              "value": "NVIDIA-GB200"})
    with pytest.raises(PdplanError, match=r"node nvl72-0 holds 72 gb200-185gb GPUs, but one host of them holds 4 .*"
                                          r"gpus_per_node: 4") as refused:
        export_manifest(wide, fmt)
    assert refused.value.field == "placement.nodes[0].gpus"


def test_node_ranks_that_do_not_number_an_instances_nodes_are_refused_naming_the_field(wide):
    wide["placement"]["nodes"][1]["instances"][0]["node_rank"] = 0
    with pytest.raises(PdplanError) as refused:
        export_manifest(wide, "sglang")
    assert refused.value.field.endswith(".node_rank")


def test_the_node_of_rank_zero_leads_whatever_the_node_order(wide, tmp_path):
    nodes = wide["placement"]["nodes"]
    nodes[0]["instances"][0]["node_rank"], nodes[1]["instances"][0]["node_rank"] = 1, 0
    command = _command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "1")
    assert _value(command, "--data-parallel-address") == "h200-1"


def test_k8s_runs_the_multinode_dp_instance_as_a_leaderworkerset_of_its_nodes(wide):
    wide["provenance"]["profiles"]["serving_engine"] = "vllm"
    text = export_manifest(wide, "k8s")["k8s/deepseek-wide.yaml"]
    documents = list(yaml.safe_load_all(text))
    group = next(d for d in documents if d["kind"] == "LeaderWorkerSet")
    assert group["metadata"]["name"] == "prefill" and group["spec"]["leaderWorkerTemplate"]["size"] == 2
    container = group["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "8"
    script = container["args"][0]
    assert 'case "$LWS_WORKER_INDEX" in' in script and '--data-parallel-address "$LWS_LEADER_ADDRESS"' in script
    decode = next(d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "decode")
    assert decode["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"


def _k8s_documents(manifest: dict) -> list[dict]:
    return list(yaml.safe_load_all(export_manifest(manifest, "k8s")["k8s/deepseek-wide.yaml"]))


def _leader_and_worker(documents: list[dict]) -> tuple[dict, dict]:
    template = next(d for d in documents if d["kind"] == "LeaderWorkerSet")["spec"]["leaderWorkerTemplate"]
    return template["leaderTemplate"], template["workerTemplate"]


def test_k8s_runs_a_plan_made_for_sglang_as_sglang_pods_behind_sglang_router(wide):
    documents = _k8s_documents(wide)
    leader, worker = _leader_and_worker(documents)
    decode = next(d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "decode")
    router = next(d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "router")
    for template in (leader, worker, decode["spec"]["template"]):
        container = template["spec"]["containers"][0]
        assert container["command"] == ["python3", "-m", "sglang.launch_server"]
        assert container["image"] == "lmsysorg/sglang:v0.5.23"
    router_container = router["spec"]["template"]["spec"]["containers"][0]
    assert router_container["command"] == ["python3", "-m", "sglang_router.launch_router"]
    assert "--pd-disaggregation" in router_container["args"]


def test_the_k8s_sglang_pods_start_the_scripts_flags_with_the_leaderworkersets_rendezvous(wide, tmp_path):
    """Each pod of the prefill group runs what the SGLang script runs on its node, with the group's leader address
    and its own worker index from LeaderWorkerSet (as SGLang's own LWS guide starts them) and the pod's port."""
    script = export_manifest(copy.deepcopy(wide), "sglang")["sglang/prefill-0.sh"]
    command = _command(tmp_path, script, "0")[3:]
    command[command.index("--port") + 1] = "8000"
    command[command.index("--node-rank") + 1] = "$(LWS_WORKER_INDEX)"
    command[command.index("--dist-init-addr") + 1] = "$(LWS_LEADER_ADDRESS):20000"
    leader, worker = _leader_and_worker(_k8s_documents(wide))
    for template in (leader, worker):
        container = template["spec"]["containers"][0]
        assert container["args"] == command
        index = next(e for e in container["env"] if e["name"] == "LWS_WORKER_INDEX")
        assert index["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"


def test_sglang_router_finds_each_prefill_pods_bootstrap_port_in_its_annotation(wide):
    documents = _k8s_documents(wide)
    leader, _ = _leader_and_worker(documents)
    assert leader["metadata"]["annotations"]["sglang.ai/bootstrap-port"] == "8998"
    assert {"name": "bootstrap", "containerPort": 8998, "protocol": "TCP"} in leader["spec"]["containers"][0]["ports"]
    decode = next(d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "decode")
    assert "sglang.ai/bootstrap-port" not in decode["spec"]["template"]["metadata"]["annotations"]
    router = next(d for d in documents if d["kind"] == "Deployment" and d["metadata"]["name"] == "router")
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _value(args, "--prefill-selector") == "pdplan.dev/phase=prefill"
    assert _value(args, "--decode-selector") == "pdplan.dev/phase=decode"


def test_the_k8s_sglang_leaderworkerset_validates_strictly_against_its_crd_schema(shared_data, wide):
    group = next(d for d in _k8s_documents(wide) if d["kind"] == "LeaderWorkerSet")
    _validator(shared_data, "lws.leaderworkerset.v1.schema.json").validate(group)


# --- Dynamo -------------------------------------------------------------------------------------

#: The flags vLLM's data parallelism and expert parallelism are started with (vLLM 0.33.0, vllm/engine/arg_utils.py).
DP_EP_FLAGS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--data-parallel-size",
               "--enable-expert-parallel", "--enable-eplb", "--eplb-config")
#: The flags the Dynamo operator appends to each node of a multinode vLLM component whose DP ranks span its nodes
#: (ai-dynamo/dynamo deploy/operator/internal/dynamo/backend_vllm.go, injectDataParallelLaunchFlags).
DYNAMO_OPERATOR_FLAGS = ("--data-parallel-hybrid-lb", "--data-parallel-size-local", "--data-parallel-start-rank",
                         "--data-parallel-address", "--data-parallel-rpc-port")


def _dp_ep_flags(command: list[str]) -> list[tuple[str, str | None]]:
    """The DP/EP flags of a command line with their values (None for a switch), in the order of DP_EP_FLAGS."""
    switches = ("--enable-expert-parallel", "--enable-eplb")
    return [(flag, None if flag in switches else _value(command, flag)) for flag in DP_EP_FLAGS if flag in command]


def _vllm(wide: dict) -> dict:
    wide["provenance"]["profiles"]["serving_engine"] = "vllm"
    return wide


def _dynamo_components(wide: dict) -> dict[str, dict]:
    (text,) = export_manifest(_vllm(wide), "dynamo").values()
    return {c["name"]: c for c in yaml.safe_load(text)["spec"]["components"]}


def _main(component: dict) -> dict:
    return component["podTemplate"]["spec"]["containers"][0]


def test_dynamo_runs_an_instance_spanning_two_nodes_as_a_multinode_component_of_their_gpus(wide):
    components = _dynamo_components(wide)
    prefill, decode = components["prefill"], components["decode"]
    # the operator gives each of nodeCount pods the container's GPU limit: nodeCount x limit = TP x DP x PP
    assert prefill["multinode"] == {"nodeCount": 2}
    assert int(_main(prefill)["resources"]["limits"]["nvidia.com/gpu"]) * 2 == 16
    assert "multinode" not in decode and _main(decode)["resources"]["limits"]["nvidia.com/gpu"] == "8"


@pytest.mark.parametrize("pool", ["prefill", "decode"])
def test_the_dynamo_worker_starts_the_same_dp_and_ep_flags_as_the_vllm_script(wide, tmp_path, pool):
    script = export_manifest(_vllm(copy.deepcopy(wide)), "vllm")[f"vllm/{pool}-0.sh"]
    vllm_command = _command(tmp_path, script, *(["0"] if pool == "prefill" else []))
    args = _main(_dynamo_components(wide)[pool])["args"]
    assert _dp_ep_flags(args) == _dp_ep_flags(vllm_command)
    assert ("--data-parallel-size", "16" if pool == "prefill" else "8") in _dp_ep_flags(args)


def test_dynamo_writes_none_of_the_per_node_dp_flags_its_operator_adds(wide):
    args = _main(_dynamo_components(wide)["prefill"])["args"]
    assert not [flag for flag in DYNAMO_OPERATOR_FLAGS + ("--headless",) if flag in args]


def test_the_dynamo_operator_splits_the_multinode_instances_dp_ranks_whole_over_its_nodes(wide):
    prefill = _dynamo_components(wide)["prefill"]
    args = _main(prefill)["args"]
    # the operator's rule: DP ranks span the nodes when TP x PP x DP exceeds the container's GPUs, and each node
    # runs --data-parallel-size-local = the container's GPUs / (TP x PP) of them, starting at node rank x that
    gpus = int(_main(prefill)["resources"]["limits"]["nvidia.com/gpu"])
    world = int(_value(args, "--tensor-parallel-size")) * int(_value(args, "--pipeline-parallel-size"))
    dp = int(_value(args, "--data-parallel-size"))
    assert world * dp > gpus and gpus % world == 0
    assert gpus // world * prefill["multinode"]["nodeCount"] == dp


def test_a_dynamo_dp_that_its_nodes_cannot_share_evenly_is_refused_naming_the_field(wide):
    # 3 GPUs per node, 1.5 ranks each (EP 1: 256 experts over EP 6 would not reach the DP rule, DeepEP refusing first)
    wide["pools"][0].update(tp=2, dp=3, ep=1, gpus=6, redundant_experts=0)
    for node in wide["placement"]["nodes"][:2]:
        node["instances"][0]["gpu_indices"] = [0, 1, 2]
    with pytest.raises(PdplanError) as refused:
        export_manifest(_vllm(wide), "dynamo")
    assert refused.value.field == "pools[0].dp" and "evenly" in str(refused.value)


def test_the_wide_dynamo_graph_validates_strictly_against_the_crd_schema(shared_data, wide):
    (text,) = export_manifest(_vllm(wide), "dynamo").values()
    _validator(shared_data, "dynamo.dynamographdeployment.v1beta1.schema.json").validate(yaml.safe_load(text))


#: The flags the Dynamo operator appends to each node of a multinode SGLang component (ai-dynamo/dynamo
#: deploy/operator/internal/dynamo/backend_sglang.go, getMultinodeFlags), and the ones Dynamo's worker chooses itself.
DYNAMO_SGLANG_OPERATOR_FLAGS = ("--dist-init-addr", "--nnodes", "--node-rank")
DYNAMO_SGLANG_OWN_FLAGS = ("--port", "--disaggregation-bootstrap-port")


def _sglang_graph(manifest: dict) -> dict:
    (text,) = export_manifest(manifest, "dynamo").values()
    return yaml.safe_load(text)


def _without(command: list[str], flags: tuple[str, ...]) -> list[str]:
    """The command without ``flags`` and their values."""
    kept, skip = [], False
    for word in command:
        if skip:
            skip = False
        elif word in flags:
            skip = True
        else:
            kept.append(word)
    return kept


def test_dynamo_runs_a_plan_made_for_sglang_as_sglang_workers(wide):
    graph = _sglang_graph(wide)
    assert graph["spec"]["backendFramework"] == "sglang"
    for worker in (c for c in graph["spec"]["components"] if c["name"] != "Frontend"):
        assert _main(worker)["command"] == ["python3", "-m", "dynamo.sglang"]
        assert _main(worker)["image"] == "nvcr.io/nvidia/ai-dynamo/sglang-runtime:1.6.1"


@pytest.mark.parametrize("pool", ["prefill", "decode"])
def test_the_dynamo_sglang_worker_starts_the_launch_scripts_flags_but_the_ones_dynamo_sets(wide, tmp_path, pool):
    """Everything the SGLang script starts an instance with (node 0's, for the prefill over two nodes) but its HTTP
    port, its bootstrap port and the rendezvous the operator adds; attention DP in the spelling of the SGLang 0.5.21
    Dynamo 1.6.1 runs, which has no --attn-dp-size; and no tokenizer, as Dynamo's SGLang recipes."""
    script = export_manifest(copy.deepcopy(wide), "sglang")[f"sglang/{pool}-0.sh"]
    command = _command(tmp_path, script, *(["0"] if pool == "prefill" else []))[3:]   # after "python -m sglang..."
    dp = command.index("--attn-dp-size")
    command[dp:dp + 2] = ["--dp-size", command[dp + 1], "--enable-dp-attention"]
    args = _main({c["name"]: c for c in _sglang_graph(wide)["spec"]["components"]}[pool])["args"]
    assert args == _without(command, DYNAMO_SGLANG_OPERATOR_FLAGS + DYNAMO_SGLANG_OWN_FLAGS) + ["--skip-tokenizer-init"]


def test_a_multinode_dynamo_sglang_component_leaves_the_rendezvous_to_its_operator(wide):
    prefill = {c["name"]: c for c in _sglang_graph(wide)["spec"]["components"]}["prefill"]
    assert prefill["multinode"] == {"nodeCount": 2}
    assert not [flag for flag in DYNAMO_SGLANG_OPERATOR_FLAGS if flag in _main(prefill)["args"]]
    # SGLang's --tp-size counts the instance's every GPU, over its nodes
    assert _value(_main(prefill)["args"], "--tp-size") == "16"


def test_a_dynamo_sglang_decode_on_deepeps_low_latency_kernels_states_their_budget_in_its_env(wide):
    wide["pools"][0]["phase"], wide["pools"][1]["phase"] = "decode", "prefill"   # the decode over two nodes
    wide["transfer"]["roles"] = {"prefill": "kv_consumer", "decode": "kv_producer"}
    workers = {c["name"]: c for c in _sglang_graph(wide)["spec"]["components"]}
    budget = {"name": "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", "value": "128"}
    assert budget in _main(workers["prefill"])["env"]
    assert not [e for e in _main(workers["decode"])["env"] if e["name"].startswith("SGLANG_")]


def test_dynamo_sglang_workers_of_a_cache_aware_plan_publish_the_kv_events_its_kv_router_reads(wide):
    plain = _sglang_graph(copy.deepcopy(wide))
    wide["transfer"]["router"] = "cache-aware"
    graph = _sglang_graph(wide)
    assert _value(_main(graph["spec"]["components"][0])["args"], "--router-mode") == "kv"   # the frontend
    for worker in graph["spec"]["components"][1:]:
        assert json.loads(_value(_main(worker)["args"], "--kv-events-config"))["publisher"] == "zmq"
    assert not [c for c in plain["spec"]["components"] if "--kv-events-config" in _main(c).get("args", [])]


def test_dynamo_refuses_an_sglang_prefill_with_pipeline_stages_its_sglang_admits_over_a_ring(wide):
    """SGLang 0.5.21, Dynamo 1.6.1's, passes a pipelined prefill's ready requests through its stages before batching
    them, which no simulation timed; the sglang scripts (SGLang 0.5.23, which decides on the first stage) still run
    the plan."""
    wide["pools"][0].update(dp=8, ep=8, pp=2, redundant_experts=0)   # the prefill's 16 GPUs as 2 stages of DP8
    for node in wide["placement"]["nodes"][:2]:
        node["instances"][0]["stage"] = node["instances"][0]["node_rank"]
    with pytest.raises(PdplanError, match="consensus ring") as refused:
        export_manifest(copy.deepcopy(wide), "dynamo")
    assert refused.value.field == "pools[0].pp"
    assert "sglang/prefill-0.sh" in export_manifest(wide, "sglang")


def test_the_wide_dynamo_sglang_graph_validates_strictly_against_the_crd_schema(shared_data, wide):
    _validator(shared_data, "dynamo.dynamographdeployment.v1beta1.schema.json").validate(_sglang_graph(wide))


def _named(manifest: dict, pool: str, name: str) -> dict:
    """The manifest with pool ``pool`` called ``name``, in its pools, its KV roles and on its node map."""
    roles = manifest["transfer"]["roles"]
    roles[name] = roles.pop(pool)
    for entry in manifest["pools"]:
        if entry["name"] == pool:
            entry["name"] = name
    for node in manifest["placement"]["nodes"]:
        for slot in node["instances"]:
            if slot["pool"] == pool:
                slot["pool"] = name
    return manifest


def test_a_dynamo_component_whose_object_names_would_pass_a_dns_label_runs_under_a_short_name_naming_its_pool(
        shared_data, wide):
    """DeepSeek's disaggregated graph and a wide decode pool's generated name make 64 characters of object name: the
    component runs as its phase and a hash of the pool's name, its pods annotated with the pool, and the graph still
    validates; the pool whose name fits keeps it."""
    manifest = _named(_vllm(wide), "decode", "decode-gb200-185gb-tp1-pp1-dp8-ep8")
    manifest["metadata"]["name"] = "deepseek-r1-fp8-disaggregated"
    (text,) = export_manifest(manifest, "dynamo").values()
    graph = yaml.safe_load(text)
    _validator(shared_data, "dynamo.dynamographdeployment.v1beta1.schema.json").validate(graph)
    components = {c["name"]: c for c in graph["spec"]["components"]}
    assert set(components) == {"Frontend", "prefill", "decode-9dd44ffa"}
    annotations = components["decode-9dd44ffa"]["podTemplate"]["metadata"]["annotations"]
    assert annotations == {"pdplan.dev/pool": "decode-gb200-185gb-tp1-pp1-dp8-ep8"}
    assert "# Component decode-9dd44ffa runs pool decode-gb200-185gb-tp1-pp1-dp8-ep8" in text
    assert all(len(f"deepseek-r1-fp8-disaggregated-{name.lower()}") <= 63 for name in components)


# --- llm-d ----------------------------------------------------------------------------------------

def _llmd_values(wide: dict) -> dict:
    return yaml.safe_load(export_manifest(_vllm(wide), "llm-d")["llm-d/values.yaml"])


def _chart_env(parallelism: dict) -> dict[str, str]:
    """The env llm-d-modelservice renders from a section's parallelism (templates/_helpers.tpl @3051935e,
    parallelismEnv, with dataParallelism / dataLocalParallelism / tensorParallelism for explicit values)."""
    return {"DP_SIZE": str(parallelism.get("data", 1)), "TP_SIZE": str(parallelism.get("tensor", 1)),
            "DP_SIZE_LOCAL": str(parallelism.get("dataLocal", parallelism.get("data", 1)))}


def test_llmd_runs_the_wide_pools_as_leaderworkersets_with_the_charts_parallelism_block(wide):
    values = _llmd_values(wide)
    assert values["multinode"] is True
    prefill, decode = values["prefill"], values["decode"]
    assert prefill["parallelism"] == {"tensor": 1, "data": 16, "dataLocal": 8, "workers": 2}
    assert decode["parallelism"] == {"tensor": 1, "data": 8, "dataLocal": 8, "workers": 1}
    for section, gpus in ((prefill, 16), (decode, 8)):
        parallelism = section["parallelism"]
        limit = int(section["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        # the chart's rules: data = dataLocal x workers (else it fails), dataLocal x tensor GPUs per pod (else
        # it annotates an accelerator mismatch), and the LeaderWorkerSet's size is workers
        assert parallelism["data"] == parallelism["dataLocal"] * parallelism["workers"]
        assert parallelism["dataLocal"] * parallelism["tensor"] == limit
        assert limit * parallelism["workers"] == gpus


@pytest.mark.parametrize("index", ["0", "1"])
def test_every_llmd_pod_of_the_multinode_group_serves_its_own_dp_ranks_from_its_lws_index(wide, tmp_path, index):
    section = _llmd_values(wide)["prefill"]
    container = section["containers"][0]
    assert container["command"] == ["/bin/bash", "-c"]
    command = _command(tmp_path, container["args"][0], env={"LWS_WORKER_INDEX": index,
                                                            "LWS_LEADER_ADDRESS": "leader.pd"})
    env = _chart_env(section["parallelism"])
    assert _value(command, "--data-parallel-size") == env["DP_SIZE"]
    assert _value(command, "--data-parallel-size-local") == env["DP_SIZE_LOCAL"]
    assert _value(command, "--tensor-parallel-size") == env["TP_SIZE"]
    # hybrid load balancing: each pod an API server over its own ranks, as llm-d's wide-EP guide starts them
    assert "--data-parallel-hybrid-lb" in command and "--headless" not in command
    assert _value(command, "--data-parallel-start-rank") == str(int(index) * int(env["DP_SIZE_LOCAL"]))
    assert _value(command, "--data-parallel-address") == "leader.pd"


def test_every_llmd_pod_of_a_multinode_dp_group_is_probed_on_vllm_health(wide):
    container = _llmd_values(wide)["prefill"]["containers"][0]
    assert container["extraConfig"]["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


@pytest.mark.parametrize("pool", ["prefill", "decode"])
def test_the_llmd_pods_start_the_same_dp_and_ep_flags_as_the_vllm_script(wide, tmp_path, pool):
    script = export_manifest(_vllm(copy.deepcopy(wide)), "vllm")[f"vllm/{pool}-0.sh"]
    vllm_command = _command(tmp_path, script, *(["0"] if pool == "prefill" else []))
    container = _llmd_values(wide)[pool]["containers"][0]
    if container["command"][:2] == ["vllm", "serve"]:
        pod_command = container["command"] + container["args"]
    else:
        pod_command = _command(tmp_path, container["args"][0], env={"LWS_WORKER_INDEX": "0",
                                                                     "LWS_LEADER_ADDRESS": "leader.pd"})
    assert _dp_ep_flags(pod_command) == _dp_ep_flags(vllm_command)


def test_a_llmd_dp_that_its_nodes_cannot_share_evenly_is_refused_naming_the_field(wide):
    wide["pools"][0].update(tp=2, dp=3, ep=1, gpus=6, redundant_experts=0)   # as the Dynamo case above
    for node in wide["placement"]["nodes"][:2]:
        node["instances"][0]["gpu_indices"] = [0, 1, 2]
    with pytest.raises(PdplanError) as refused:
        export_manifest(_vllm(wide), "llm-d")
    assert refused.value.field == "pools[0].dp"


def test_the_wide_llmd_values_validate_strictly_against_the_chart_schema(shared_data, wide):
    _validator(shared_data, "llm-d-modelservice.values.schema.json").validate(_llmd_values(wide))


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
    command = _command(tmp_path, export_manifest(_tp_only(wide), "sglang")["sglang/decode-0.sh"])
    assert _value(command, "--tp-size") == "8"
    for flag in ("--attn-dp-size", "--ep-size", "--moe-a2a-backend", "--ep-num-redundant-experts", "--nnodes"):
        assert flag not in command


@pytest.mark.parametrize("fmt", ["sglang", "dynamo", "llm-d"])
@pytest.mark.parametrize("key, value", [("dp", "8; touch PWNED"), ("ep", 0), ("dp", True), ("redundant_experts", -1)])
def test_a_parallel_size_that_is_not_a_whole_number_in_range_is_refused_naming_it(wide, key, value, fmt):
    wide["pools"][1][key] = value
    with pytest.raises(PdplanError) as refused:
        export_manifest(_vllm(wide), fmt)
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
    assert _value(_command(tmp_path, script, "0"), "--max-running-requests") == "2048"
    assert "export SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=128" in script
    assert "DISPATCH_TOKENS" not in files["sglang/decode-0.sh"]
    assert _value(_command(tmp_path, files["sglang/decode-0.sh"]), "--max-running-requests") is None


def test_vllm_runs_each_rank_at_most_the_requests_the_plan_verified(wide, tmp_path):
    wide["pools"][1]["scheduling"] = {"max_running_requests": 96}
    command = _command(tmp_path, export_manifest(wide, "vllm")["vllm/decode-0.sh"])
    assert _value(command, "--max-num-seqs") == "96"


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
    command = _command(tmp_path, export_manifest(tep8, "sglang")["sglang/prefill-0.sh"], rank)
    assert (_value(command, "--tp-size"), _value(command, "--nnodes"), _value(command, "--node-rank")) == \
        ("8", "2", rank)
    assert _value(command, "--dist-init-addr").startswith("tray-0:")
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
    (text,) = export_manifest(_vllm(tep8), "dynamo").values()
    graph = yaml.safe_load(text)
    _validator(shared_data, "dynamo.dynamographdeployment.v1beta1.schema.json").validate(graph)
    workers = [c for c in graph["spec"]["components"] if c["name"] != "Frontend"]
    assert len(workers) == 2
    for worker in workers:
        limits = worker["podTemplate"]["spec"]["containers"][0]["resources"]["limits"]
        assert (worker["multinode"]["nodeCount"], limits["nvidia.com/gpu"]) == (2, "4")
