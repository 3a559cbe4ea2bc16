"""The pod formats ship a bundle that starts: node selection by label, a model cache that holds the
weights, requests on every pod, probes whose startup budget covers the weight load, the Hugging
Face token from an optional Secret, the router in front, and a kustomization that applies it all."""

import copy
from types import SimpleNamespace

import pytest
import yaml

from pdplan.errors import PdplanError
from pdplan.hardware import load_cluster
from pdplan.manifest.build import node_map
from pdplan.manifest.check import check_manifest
from pdplan.manifest.document import seal
from pdplan.manifest.export import export_manifest
from pdplan.placement import Candidate, Instance

GIB = 2**30
#: The product label NVIDIA GPU Feature Discovery writes (NVIDIA/k8s-device-plugin internal/lm/resource.go:
#: the NVML device name, spaces replaced by '-') on nodes of the GPUs the shipped plans use.
GFD_PRODUCT = {"a100-80gb": "NVIDIA-A100-SXM4-80GB", "h100-80gb": "NVIDIA-H100-80GB-HBM3"}
#: The planner's weight-load rate (pdplan.schedule.timeline.LOAD_BYTES_PER_S: 2 GB/s per GPU).
LOAD_BYTES_PER_S = 2e9
#: LeaderWorkerSet labels a group's pods with their index, 0 for the leader (kubernetes-sigs/lws
#: api/leaderworkerset/v1/leaderworkerset_types.go, WorkerIndexLabelKey).
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
QUANTITY = {"Gi": GIB, "Mi": 2**20}


def _objects(files: dict[str, str]) -> list[dict]:
    return [doc for name, text in files.items() if not name.endswith("kustomization.yaml")
            for doc in yaml.safe_load_all(text)]


def _pools(manifest: dict) -> dict[str, dict]:
    return {p["name"]: p for p in manifest["pools"]}


def _templates(doc: dict) -> list[tuple[str, dict]]:
    """(role, pod template) of a k8s workload: a Deployment's one, a LeaderWorkerSet's leader and worker."""
    if doc["kind"] == "Deployment":
        return [("serving", doc["spec"]["template"])]
    group = doc["spec"]["leaderWorkerTemplate"]
    return [("serving", group["leaderTemplate"]), ("worker", group["workerTemplate"])]


def _pool_templates(files: dict[str, str]) -> list[tuple[str, str, dict]]:
    """(pool name, role, pod template) of every pool workload of a k8s export."""
    return [(doc["metadata"]["name"], role, template) for doc in _objects(files)
            if doc["kind"] in ("Deployment", "LeaderWorkerSet") and "pdplan.dev/pool" in doc["metadata"]["labels"]
            for role, template in _templates(doc)]


def _bytes(quantity: str) -> int:
    return int(quantity[:-2]) * QUANTITY[quantity[-2:]]


def _instance_weight_bytes(pool: dict) -> float:
    return pool["memory"]["weights_gib_per_gpu"] * GIB * pool["tp"] * pool["pp"]


def test_the_startup_probe_allows_at_least_the_planners_weight_load_time(manifest):
    for name, role, template in _pool_templates(export_manifest(manifest, "k8s")):
        pool = _pools(manifest)[name]
        container = template["spec"]["containers"][0]
        if role == "worker":
            continue
        probe = container["startupProbe"]
        assert probe["httpGet"]["path"] == "/health"
        load_s = pool["memory"]["weights_gib_per_gpu"] * GIB / LOAD_BYTES_PER_S
        assert probe["failureThreshold"] * probe["periodSeconds"] >= load_s


def test_only_a_multinode_groups_leader_is_probed_and_served(spanning):
    files = export_manifest(spanning, "k8s")
    groups = [doc for doc in _objects(files) if doc["kind"] == "LeaderWorkerSet"]
    services = {doc["metadata"]["name"]: doc for doc in _objects(files) if doc["kind"] == "Service"}
    assert groups
    for group in groups:
        (_, leader), (_, worker) = _templates(group)
        assert {"startupProbe", "readinessProbe", "livenessProbe"} <= set(leader["spec"]["containers"][0])
        assert not {"startupProbe", "readinessProbe", "livenessProbe"} & set(worker["spec"]["containers"][0])
        assert services[group["metadata"]["name"]]["spec"]["selector"][LWS_WORKER_INDEX] == "0"


def test_llmd_probes_a_section_only_when_its_one_pod_serves_http(spanning):
    """A multinode llm-d section renders one pod template for the whole group, whose workers serve no HTTP."""
    values = yaml.safe_load(export_manifest(spanning, "llm-d")["llm-d/values.yaml"])
    sections = [values[key] for key in ("prefill", "decode") if values[key]["create"]]
    assert {s["parallelism"]["workers"] for s in sections} == {1, 2}
    for section in sections:
        probed = "startupProbe" in section["containers"][0].get("extraConfig", {})
        assert probed == (section["parallelism"]["workers"] == 1)


@pytest.mark.parametrize("fmt", ["k8s", "dynamo"])
def test_every_pods_model_cache_holds_its_instances_weights(manifest, fmt):
    files = export_manifest(manifest, fmt)
    if fmt == "k8s":
        pods = [(name, template["spec"]) for name, _, template in _pool_templates(files)]
    else:
        pods = [(c["name"], c["podTemplate"]["spec"]) for c in _objects(files)[0]["spec"]["components"]
                if c["type"] != "frontend"]
    assert pods
    for name, spec in pods:
        mounts = {m["name"]: m["mountPath"] for m in spec["containers"][0]["volumeMounts"]}
        env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
        volume = next(v for v in spec["volumes"] if mounts.get(v["name"]) == env["HF_HOME"])
        storage = volume["ephemeral"]["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"]
        assert _bytes(storage) >= _instance_weight_bytes(_pools(manifest)[name])


def test_the_llmd_model_volume_holds_the_weights_instead_of_the_charts_5mi(manifest):
    values = yaml.safe_load(export_manifest(manifest, "llm-d")["llm-d/values.yaml"])
    assert _bytes(values["modelArtifacts"]["size"]) >= max(map(_instance_weight_bytes, manifest["pools"]))


def _all_pod_specs(manifest: dict) -> list[dict]:
    """Every pod spec of the k8s and Dynamo exports, router and frontend included."""
    k8s = [template["spec"] for doc in _objects(export_manifest(manifest, "k8s"))
           if doc["kind"] in ("Deployment", "LeaderWorkerSet") for _, template in _templates(doc)]
    dynamo = [c["podTemplate"]["spec"] for c in _objects(export_manifest(manifest, "dynamo"))[0]["spec"]["components"]]
    return k8s + dynamo


def test_no_pod_runs_without_cpu_and_memory_requests(manifest):
    """A pod whose containers request nothing is BestEffort: first to be evicted under pressure."""
    specs = _all_pod_specs(manifest)
    assert specs
    for spec in specs:
        for container in spec["containers"]:
            assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    values = yaml.safe_load(export_manifest(manifest, "llm-d")["llm-d/values.yaml"])
    for section in (values["prefill"], values["decode"]):
        for container in section.get("containers", []):
            assert {"cpu", "memory"} <= set(container["resources"]["requests"])


def test_a_gpu_request_equals_its_limit_as_kubernetes_requires_of_an_extended_resource(manifest):
    for spec in _all_pod_specs(manifest):
        resources = spec["containers"][0]["resources"]
        assert resources["requests"].get("nvidia.com/gpu") == resources["limits"].get("nvidia.com/gpu")


def _selected(spec: dict) -> set[tuple[str, str]]:
    """The (key, value) node labels a pod spec accepts."""
    if "nodeSelector" in spec:
        return set(spec["nodeSelector"].items())
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    return {(e["key"], v) for t in terms for e in t["matchExpressions"] for v in e["values"]}


def test_pods_select_nodes_by_the_gpu_product_label_by_default(manifest):
    for name, _, template in _pool_templates(export_manifest(manifest, "k8s")):
        pool = _pools(manifest)[name]
        assert _selected(template["spec"]) == {("nvidia.com/gpu.product", GFD_PRODUCT[pool["gpu"]])}
        assert "kubernetes.io/hostname" not in yaml.safe_dump(template)


def test_a_manifest_written_before_node_labels_still_validates_and_exports(disaggregated):
    old = copy.deepcopy(disaggregated)
    for node in old["placement"]["nodes"]:
        del node["node_label"]
    old = seal(old)
    assert check_manifest(old) == []
    for fmt in ("llm-d", "dynamo"):
        assert export_manifest(old, fmt)
    for name, _, template in _pool_templates(export_manifest(old, "k8s")):
        gpu = _pools(old)[name]["gpu"]
        assert _selected(template["spec"]) == {("nvidia.com/gpu.product", GFD_PRODUCT[gpu])}


def test_the_node_label_of_a_manifest_reaches_every_pod_format(disaggregated):
    manifest = copy.deepcopy(disaggregated)
    for node in manifest["placement"]["nodes"]:
        node["node_label"] = {"key": "example.com/pool", "value": f"{node['node_type']}-gpus"}
    wanted = {p["name"]: {("example.com/pool", f"{n['node_type']}-gpus") for n in manifest["placement"]["nodes"]
                          if any(i["pool"] == p["name"] for i in n["instances"])} for p in manifest["pools"]}
    for name, _, template in _pool_templates(export_manifest(manifest, "k8s")):
        assert _selected(template["spec"]) == wanted[name]
    for component in _objects(export_manifest(manifest, "dynamo"))[0]["spec"]["components"][1:]:
        assert _selected(component["podTemplate"]["spec"]) == wanted[component["name"]]
    values = yaml.safe_load(export_manifest(manifest, "llm-d")["llm-d/values.yaml"])
    for pool in manifest["pools"]:
        accelerator = values[pool["phase"]]["acceleratorTypes"]
        assert {(accelerator["labelKey"], v) for v in accelerator["labelValues"]} == wanted[pool["name"]]


def test_the_cluster_files_node_label_is_recorded_in_the_node_map(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes:\n  - {name: h100, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, "
                    "inter_node_gb_s: 50, count: 1, node_label: {key: example.com/gpu, value: h100-sxm}}\n"
                    "  - {name: a100, gpu: a100-80gb, gpus_per_node: 8, intra_node_gb_s: 300, "
                    "inter_node_gb_s: 25, count: 1}\n")
    cluster = load_cluster(path)
    instances = [Instance(id=f"{kind}-0", node_type=kind, stage_nodes=(f"{kind}-0",), stage_gpus=((0, 1),),
                          candidate=Candidate(phase="decode", gpu=gpu, tp=2, pp=1, goodput_rps=1.0))
                 for kind, gpu in (("h100", "h100-80gb"), ("a100", "a100-80gb"))]
    nodes = {n["node"]: n for n in node_map(SimpleNamespace(instances=instances), cluster)}
    assert nodes["h100-0"]["node_label"] == {"key": "example.com/gpu", "value": "h100-sxm"}
    assert nodes["a100-0"]["node_label"] == {"key": "nvidia.com/gpu.product", "value": GFD_PRODUCT["a100-80gb"]}


def test_a_node_whose_first_instance_is_power_capped_is_recorded_as_its_hardware(tmp_path):
    """Splitwise's HHcap: a power-capped H100 setting runs on H100 nodes; the node map (and so
    validate and the exports) must name the hardware, not the setting."""
    path = tmp_path / "cluster.yaml"
    path.write_text("nodes:\n  - {name: h100, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, "
                    "inter_node_gb_s: 50, count: 1}\n")
    instances = [Instance(id=f"{phase}-0", node_type="h100", stage_nodes=("h100-0",), stage_gpus=(gpus,),
                          candidate=Candidate(phase=phase, gpu=gpu, tp=2, pp=1, goodput_rps=1.0))
                 for phase, gpu, gpus in (("decode", "h100-80gb-pcap", (0, 1)), ("prefill", "h100-80gb", (2, 3)))]
    (node,) = node_map(SimpleNamespace(instances=instances), load_cluster(path))
    assert node["gpu"] == "h100-80gb"


@pytest.mark.parametrize("label, field", [({"key": "example.com/gpu", "value": "H100 SXM"}, "value"),
                                          ({"key": "-bad/gpu", "value": "h100"}, "key"),
                                          ({"key": "example.com/gpu"}, "value")])
def test_a_malformed_node_label_in_the_cluster_file_is_refused_naming_the_field(tmp_path, label, field):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"nodes": [{"name": "h100", "gpu": "h100-80gb", "gpus_per_node": 8,
                                               "intra_node_gb_s": 450, "inter_node_gb_s": 50, "count": 1,
                                               "node_label": label}]}))
    with pytest.raises(PdplanError) as error:
        load_cluster(path)
    assert error.value.field.endswith(f"node_label.{field}")


def test_a_malformed_node_label_in_a_manifest_fails_validation(disaggregated):
    manifest = copy.deepcopy(disaggregated)
    manifest["placement"]["nodes"][0]["node_label"] = {"key": "nvidia.com/gpu.product", "value": "NVIDIA H100\n"}
    assert any("placement.nodes[0].node_label.value" in str(v) for v in check_manifest(manifest))


@pytest.mark.parametrize("fmt", ["k8s", "llm-d", "dynamo"])
def test_hf_token_comes_from_an_optional_reference_to_the_named_secret(disaggregated, fmt):
    text = "".join(export_manifest(disaggregated, fmt, hf_token_secret="team-hf").values())
    refs = []

    def walk(node):
        if isinstance(node, dict):
            if node.get("name") == "HF_TOKEN":
                refs.append(node["valueFrom"]["secretKeyRef"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for document in yaml.safe_load_all(text):
        walk(document)
    assert refs and all(ref == {"name": "team-hf", "key": "token", "optional": True} for ref in refs)


def test_a_secret_name_that_is_no_kubernetes_name_is_refused(disaggregated):
    with pytest.raises(PdplanError, match="--hf-token-secret") as error:
        export_manifest(disaggregated, "k8s", hf_token_secret="HF Token")
    assert error.value.field == "hf-token-secret"


def test_llmd_renders_tp_size_from_the_pools_tensor_parallelism_and_states_its_gpus(disaggregated):
    """The chart renders env TP_SIZE from parallelism.tensor and fills a GPU request of tensor × dataLocal
    only when the container states none (llm-d-modelservice _helpers.tpl, parallelismEnv and resources)."""
    values = yaml.safe_load(export_manifest(disaggregated, "llm-d")["llm-d/values.yaml"])
    for pool in disaggregated["pools"]:
        section = values[pool["phase"]]
        assert section["parallelism"]["tensor"] == pool["tp"]
        resources = section["containers"][0]["resources"]
        gpus = pool["tp"] * pool["pp"] // section["parallelism"]["workers"]
        assert resources["limits"]["nvidia.com/gpu"] == resources["requests"]["nvidia.com/gpu"] == str(gpus)


def _matches(selector: list[str], labels: dict[str, str]) -> bool:
    """vllm-router's selector rule (src/service_discovery.rs, matches_selector): every key=value is a pod label."""
    return all(labels.get(key) == value for key, value in (item.split("=", 1) for item in selector))


def _flag_values(args: list[str], flag: str) -> list[str]:
    if flag not in args:
        return []
    rest = args[args.index(flag) + 1:]
    return rest[:next((i for i, a in enumerate(rest) if a.startswith("--")), len(rest))]


def test_the_router_discovers_exactly_the_serving_pods_of_each_phase(manifest):
    files = export_manifest(manifest, "k8s")
    router = next(d for d in _objects(files) if d["kind"] == "Deployment" and d["metadata"]["name"] == "router")
    args = router["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--service-discovery" in args
    pods = _pool_templates(files)
    for phase, flag in (("prefill", "--prefill-selector"), ("decode", "--decode-selector"),
                        ("colocated", "--selector")):
        selector = _flag_values(args, flag)
        chosen = [(name, role) for name, role, t in pods if selector and _matches(selector, t["metadata"]["labels"])]
        expected = [(name, role) for name, role, _ in pods
                    if _pools(manifest)[name]["phase"] == phase and role == "serving"]
        assert chosen == expected


def test_with_mooncake_the_router_learns_each_prefill_pods_bootstrap_port(disaggregated):
    """vllm-router reads a discovered prefill pod's Mooncake bootstrap port from the annotation
    vllm.ai/bootstrap-port (src/main.rs); vLLM's prefiller serves it on 8998 by default
    (docs/features/mooncake_connector_usage.md)."""
    assert disaggregated["transfer"]["connector"] == "mooncake"
    for name, role, template in _pool_templates(export_manifest(disaggregated, "k8s")):
        port = template["metadata"]["annotations"].get("vllm.ai/bootstrap-port")
        prefill = _pools(disaggregated)[name]["phase"] == "prefill" and role == "serving"
        assert port == ("8998" if prefill else None)


def test_the_router_watches_pods_with_a_role_bound_to_its_service_account(disaggregated):
    objects = {(d["kind"], d["metadata"]["name"]): d for d in _objects(export_manifest(disaggregated, "k8s"))}
    deployment = objects[("Deployment", "router")]
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    binding = objects[("RoleBinding", "router")]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account}]
    role = objects[("Role", binding["roleRef"]["name"])]
    assert {"get", "list", "watch"} <= set(role["rules"][0]["verbs"]) and role["rules"][0]["resources"] == ["pods"]
    assert objects[("Service", "router")]["spec"]["selector"].items() <= \
        deployment["spec"]["template"]["metadata"]["labels"].items()


def test_the_kustomization_lists_every_object_file(manifest):
    files = export_manifest(manifest, "k8s")
    kustomization = yaml.safe_load(files["k8s/kustomization.yaml"])
    assert kustomization["kind"] == "Kustomization"
    listed = sorted(f"k8s/{resource}" for resource in kustomization["resources"])
    assert listed == sorted(name for name in files if name != "k8s/kustomization.yaml")
    assert f"k8s/{manifest['metadata']['name']}.yaml" in files  # the file name scripts already apply


@pytest.mark.parametrize("flag, value", [("--router-image", "Router Image"), ("--hf-token-secret", "hf token\n")])
def test_a_bad_pod_option_exits_2_in_one_line_and_writes_nothing(run_cli, manifests, tmp_path, flag, value):
    code, _, err = run_cli("export", manifests["disaggregated"], "--format", "k8s", flag, value,
                           "--out", tmp_path / "deploy")
    assert code == 2 and len(err.strip().splitlines()) == 1 and flag in err
    assert not (tmp_path / "deploy").exists()


def test_llmd_sections_of_several_gpus_mount_a_memory_backed_dev_shm(disaggregated):
    values = yaml.safe_load(export_manifest(disaggregated, "llm-d")["llm-d/values.yaml"])
    for pool in disaggregated["pools"]:
        section = values[pool["phase"]]
        mounts = section["containers"][0].get("volumeMounts", [])
        assert ({"name": "dshm", "mountPath": "/dev/shm"} in mounts) == (pool["tp"] * pool["pp"] > 1)
        if pool["tp"] * pool["pp"] > 1:
            assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in section["volumes"]
