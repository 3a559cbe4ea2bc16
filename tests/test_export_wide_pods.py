"""Exports of wide expert-parallel plans as pods: the Kubernetes bundle's LeaderWorkerSets, Dynamo's multinode
components (vLLM and SGLang workers) and llm-d's parallelism block start each instance with the engines' own flags,
and are held to their consumers' rules: the Dynamo operator's for a multinode component (ai-dynamo/dynamo
deploy/operator/internal/dynamo/backend_vllm.go, backend_sglang.go), the llm-d-modelservice chart's for its
parallelism block (templates/_helpers.tpl), and their schemas. The plan is tests/wide_plan.py's.
"""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from pdplan.errors import PdplanError
from pdplan.manifest.export import export_manifest
from tests.test_manifest_export import _validator
from tests.wide_plan import arg, engine_command, made_for_vllm

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
    command = engine_command(tmp_path, export_manifest(wide, "vllm")["vllm/prefill-0.sh"], "1")
    assert arg(command, "--data-parallel-address") == "h200-1"


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
    command = engine_command(tmp_path, script, "0")[3:]
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
    assert arg(args, "--prefill-selector") == "pdplan.dev/phase=prefill"
    assert arg(args, "--decode-selector") == "pdplan.dev/phase=decode"


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
    return [(flag, None if flag in switches else arg(command, flag)) for flag in DP_EP_FLAGS if flag in command]


def _dynamo_components(wide: dict) -> dict[str, dict]:
    (text,) = export_manifest(made_for_vllm(wide), "dynamo").values()
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
    script = export_manifest(made_for_vllm(copy.deepcopy(wide)), "vllm")[f"vllm/{pool}-0.sh"]
    vllm_command = engine_command(tmp_path, script, *(["0"] if pool == "prefill" else []))
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
    world = int(arg(args, "--tensor-parallel-size")) * int(arg(args, "--pipeline-parallel-size"))
    dp = int(arg(args, "--data-parallel-size"))
    assert world * dp > gpus and gpus % world == 0
    assert gpus // world * prefill["multinode"]["nodeCount"] == dp


def test_a_dynamo_dp_that_its_nodes_cannot_share_evenly_is_refused_naming_the_field(wide):
    # 3 GPUs per node, 1.5 ranks each (EP 1: 256 experts over EP 6 would not reach the DP rule, DeepEP refusing first)
    wide["pools"][0].update(tp=2, dp=3, ep=1, gpus=6, redundant_experts=0)
    for node in wide["placement"]["nodes"][:2]:
        node["instances"][0]["gpu_indices"] = [0, 1, 2]
    with pytest.raises(PdplanError) as refused:
        export_manifest(made_for_vllm(wide), "dynamo")
    assert refused.value.field == "pools[0].dp" and "evenly" in str(refused.value)


def test_the_wide_dynamo_graph_validates_strictly_against_the_crd_schema(shared_data, wide):
    (text,) = export_manifest(made_for_vllm(wide), "dynamo").values()
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
    # the arguments after "python -m sglang.launch_server"
    command = engine_command(tmp_path, script, *(["0"] if pool == "prefill" else []))[3:]
    dp = command.index("--attn-dp-size")
    command[dp:dp + 2] = ["--dp-size", command[dp + 1], "--enable-dp-attention"]
    args = _main({c["name"]: c for c in _sglang_graph(wide)["spec"]["components"]}[pool])["args"]
    assert args == _without(command, DYNAMO_SGLANG_OPERATOR_FLAGS + DYNAMO_SGLANG_OWN_FLAGS) + ["--skip-tokenizer-init"]


def test_a_multinode_dynamo_sglang_component_leaves_the_rendezvous_to_its_operator(wide):
    prefill = {c["name"]: c for c in _sglang_graph(wide)["spec"]["components"]}["prefill"]
    assert prefill["multinode"] == {"nodeCount": 2}
    assert not [flag for flag in DYNAMO_SGLANG_OPERATOR_FLAGS if flag in _main(prefill)["args"]]
    # SGLang's --tp-size counts the instance's every GPU, over its nodes
    assert arg(_main(prefill)["args"], "--tp-size") == "16"


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
    assert arg(_main(graph["spec"]["components"][0])["args"], "--router-mode") == "kv"   # the frontend
    for worker in graph["spec"]["components"][1:]:
        assert json.loads(arg(_main(worker)["args"], "--kv-events-config"))["publisher"] == "zmq"
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
    manifest = _named(made_for_vllm(wide), "decode", "decode-gb200-185gb-tp1-pp1-dp8-ep8")
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
    return yaml.safe_load(export_manifest(made_for_vllm(wide), "llm-d")["llm-d/values.yaml"])


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
    command = engine_command(tmp_path, container["args"][0], env={"LWS_WORKER_INDEX": index,
                                                            "LWS_LEADER_ADDRESS": "leader.pd"})
    env = _chart_env(section["parallelism"])
    assert arg(command, "--data-parallel-size") == env["DP_SIZE"]
    assert arg(command, "--data-parallel-size-local") == env["DP_SIZE_LOCAL"]
    assert arg(command, "--tensor-parallel-size") == env["TP_SIZE"]
    # hybrid load balancing: each pod an API server over its own ranks, as llm-d's wide-EP guide starts them
    assert "--data-parallel-hybrid-lb" in command and "--headless" not in command
    assert arg(command, "--data-parallel-start-rank") == str(int(index) * int(env["DP_SIZE_LOCAL"]))
    assert arg(command, "--data-parallel-address") == "leader.pd"


def test_every_llmd_pod_of_a_multinode_dp_group_is_probed_on_vllm_health(wide):
    container = _llmd_values(wide)["prefill"]["containers"][0]
    assert container["extraConfig"]["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


@pytest.mark.parametrize("pool", ["prefill", "decode"])
def test_the_llmd_pods_start_the_same_dp_and_ep_flags_as_the_vllm_script(wide, tmp_path, pool):
    script = export_manifest(made_for_vllm(copy.deepcopy(wide)), "vllm")[f"vllm/{pool}-0.sh"]
    vllm_command = engine_command(tmp_path, script, *(["0"] if pool == "prefill" else []))
    container = _llmd_values(wide)[pool]["containers"][0]
    if container["command"][:2] == ["vllm", "serve"]:
        pod_command = container["command"] + container["args"]
    else:
        pod_command = engine_command(tmp_path, container["args"][0], env={"LWS_WORKER_INDEX": "0",
                                                                     "LWS_LEADER_ADDRESS": "leader.pd"})
    assert _dp_ep_flags(pod_command) == _dp_ep_flags(vllm_command)


def test_a_llmd_dp_that_its_nodes_cannot_share_evenly_is_refused_naming_the_field(wide):
    wide["pools"][0].update(tp=2, dp=3, ep=1, gpus=6, redundant_experts=0)   # as the Dynamo case above
    for node in wide["placement"]["nodes"][:2]:
        node["instances"][0]["gpu_indices"] = [0, 1, 2]
    with pytest.raises(PdplanError) as refused:
        export_manifest(made_for_vllm(wide), "llm-d")
    assert refused.value.field == "pools[0].dp"


def test_the_wide_llmd_values_validate_strictly_against_the_chart_schema(shared_data, wide):
    _validator(shared_data, "llm-d-modelservice.values.schema.json").validate(_llmd_values(wide))


