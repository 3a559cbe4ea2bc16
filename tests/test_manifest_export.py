"""`pdplan export`: every format's files parse, validate against the upstream schemas, request
exactly the plan's GPUs, carry the right KV roles, and come out byte-identical each time."""

import copy
import json
import shlex
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

from pdplan.errors import PdplanError
from pdplan.manifest.document import seal
from pdplan.manifest.export import FORMATS, export_manifest, refusals
from tests.conftest import without_mixed

REMOVED_KV_KEYS = {"kv_rank", "kv_parallel_size", "kv_ip", "kv_buffer_size"}
#: The Kubernetes API the core objects are checked against (a version kubernetes-validate ships).
KUBERNETES_VERSION = "1.33.0"
CRD_SCHEMAS = {"DynamoGraphDeployment": "dynamo.dynamographdeployment.v1beta1.schema.json",
               "LeaderWorkerSet": "lws.leaderworkerset.v1.schema.json"}


def _yaml_documents(files: dict[str, str]) -> list[dict]:
    """Every object the export would create (a kustomization is read by kubectl, not created)."""
    return [doc for name, text in files.items() if name.endswith(".yaml") and not name.endswith("kustomization.yaml")
            for doc in yaml.safe_load_all(text)]


def _pool_workloads(documents: list[dict]) -> list[dict]:
    """The Deployments and LeaderWorkerSets that run a pool (not the router)."""
    return [d for d in documents if d["kind"] in ("Deployment", "LeaderWorkerSet")
            and "pdplan.dev/pool" in d["metadata"]["labels"]]


def _strict(node):
    """Emulate `kubectl --validate=strict`: forbid unknown fields wherever a schema lists its fields."""
    if isinstance(node, dict):
        node = {key: _strict(value) for key, value in node.items()}
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [_strict(value) for value in node]
    return node


def _validator(shared_data, name: str) -> jsonschema.Draft7Validator:
    schema = json.loads((shared_data / "schemas" / name).read_text())
    return jsonschema.Draft7Validator(_strict(schema))


def _tokens(files: dict[str, str]) -> list[list[str]]:
    """Every command line in the export as a token list: script lines and YAML string lists."""
    commands = [shlex.split(text, comments=True) for name, text in files.items() if name.endswith(".sh")]

    def walk(node):
        if isinstance(node, dict):
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            if all(isinstance(v, str) for v in node):
                commands.append([t for v in node for t in (shlex.split(v) if "\n" in v else [v])])
            for value in node:
                walk(value)

    for document in _yaml_documents(files):
        walk(document)
    return commands


def _kv_configs(files: dict[str, str]) -> list[dict]:
    return [json.loads(tokens[i + 1]) for tokens in _tokens(files)
            for i, token in enumerate(tokens) if token == "--kv-transfer-config"]


def _requested_gpus(fmt: str, files: dict[str, str]) -> int:
    """GPUs the export asks for: instances × TP × PP for scripts, replicas × pods × limit for pods."""
    if fmt in ("vllm", "sglang"):
        tp, pp = {"vllm": ("--tensor-parallel-size", "--pipeline-parallel-size"),
                  "sglang": ("--tp-size", "--pp-size")}[fmt]
        total = 0
        for name, text in files.items():
            tokens = shlex.split(text, comments=True)
            if tp in tokens:
                total += int(tokens[tokens.index(tp) + 1]) * int(tokens[tokens.index(pp) + 1])
        return total
    total = 0
    for doc in _yaml_documents(files):
        if fmt == "dynamo":
            for c in doc["spec"]["components"]:
                limit = c["podTemplate"]["spec"]["containers"][0].get("resources", {}).get("limits", {})
                total += (c["replicas"] * c.get("multinode", {}).get("nodeCount", 1)
                          * int(limit.get("nvidia.com/gpu", 0)))
        elif fmt == "llm-d":
            for section in (doc["prefill"], doc["decode"]):
                if section["create"]:
                    limit = section["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
                    total += section["replicas"] * section["parallelism"]["workers"] * int(limit)
        elif doc["kind"] == "Deployment":  # the router's requests no GPU
            limits = doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
            total += doc["spec"]["replicas"] * int(limits.get("nvidia.com/gpu", 0))
        elif doc["kind"] == "LeaderWorkerSet":  # a Service requests no GPU
            group = doc["spec"]["leaderWorkerTemplate"]
            gpus = [int(template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
                    for template in (group.get("leaderTemplate", group["workerTemplate"]), group["workerTemplate"])]
            total += doc["spec"]["replicas"] * (gpus[0] + (group["size"] - 1) * gpus[1])
    return total


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_file_parses(manifest, fmt, tmp_path):
    for name, text in export_manifest(manifest, fmt).items():
        if name.endswith(".sh"):
            script = tmp_path / Path(name).name
            script.write_text(text)
            assert text.startswith("#!/usr/bin/env bash\n") and "set -euo pipefail" in text
            assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0, name
        else:
            assert name.endswith(".yaml") and list(yaml.safe_load_all(text)), name


@pytest.mark.parametrize("fmt", FORMATS)
def test_gpu_requests_sum_to_the_manifests_gpus(manifest, fmt):
    assert _requested_gpus(fmt, export_manifest(manifest, fmt)) == manifest["predictions"]["gpus"]["value"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_two_exports_are_byte_identical(manifest, fmt):
    assert export_manifest(manifest, fmt) == export_manifest(copy.deepcopy(manifest), fmt)


@pytest.mark.parametrize("fmt", ["vllm", "dynamo", "llm-d", "k8s"])
def test_kv_transfer_configs_validate_against_the_vllm_schema(shared_data, disaggregated, fmt):
    schema = json.loads((shared_data / "schemas" / "vllm.kv_transfer_config.schema.json").read_text())
    configs = _kv_configs(export_manifest(disaggregated, fmt))
    assert configs
    for config in configs:
        jsonschema.Draft202012Validator(schema).validate(config)
        assert config["kv_connector"] in schema["x-registered-connectors"]


@pytest.mark.parametrize("fmt", ["vllm", "dynamo", "llm-d", "k8s"])
def test_kv_transfer_config_names_the_manifests_roles_and_no_removed_keys(disaggregated, fmt):
    files = export_manifest(disaggregated, fmt)
    configs = _kv_configs(files)
    assert not any(REMOVED_KV_KEYS & set(config) for config in configs)
    assert {config["kv_role"] for config in configs} == set(disaggregated["transfer"]["roles"].values())


@pytest.mark.parametrize("fmt", FORMATS)
def test_colocated_plans_carry_no_kv_transfer(colocated, fmt):
    files = export_manifest(colocated, fmt)
    assert not _kv_configs(files)
    assert not any("--disaggregation-mode" in tokens for tokens in _tokens(files))


def test_vllm_scripts_give_each_instance_its_own_port_gpus_and_side_channel(mixed_manifest):
    nixl_plan = without_mixed(yaml.safe_load(mixed_manifest["manifest"].read_text()))
    scripts = {n: t for n, t in export_manifest(nixl_plan, "vllm").items() if n != "vllm/router.sh"}
    ports = [shlex.split(t, comments=True) for t in scripts.values()]
    ports = [tokens[tokens.index("--port") + 1] for tokens in ports]
    channels = [line for t in scripts.values() for line in t.splitlines() if "VLLM_NIXL_SIDE_CHANNEL_PORT=" in line]
    assert len(set(ports)) == len(scripts) and len(set(channels)) == len(scripts)
    assert all("CUDA_VISIBLE_DEVICES=" in t for t in scripts.values())


def test_the_vllm_router_lists_every_prefill_and_decode_instance(disaggregated):
    tokens = shlex.split(export_manifest(disaggregated, "vllm")["vllm/router.sh"], comments=True)
    pools = {p["name"]: p for p in disaggregated["pools"]}
    assert "--vllm-pd-disaggregation" in tokens
    for phase in ("prefill", "decode"):
        assert tokens.count(f"--{phase}") == sum(p["replicas"] for p in pools.values() if p["phase"] == phase)


def test_the_sglang_router_passes_each_prefill_bootstrap_port(disaggregated):
    files = export_manifest(disaggregated, "sglang")
    tokens = shlex.split(files["sglang/router.sh"], comments=True)
    bootstraps = sorted(shlex.split(t, comments=True)[-1] for n, t in files.items()
                        if "--disaggregation-bootstrap-port" in t)
    given = sorted(tokens[i + 2] for i, token in enumerate(tokens) if token == "--prefill")
    assert given and given == bootstraps


def test_llmd_refuses_a_pool_pinned_to_another_engine_than_vllm(colocated):
    manifest = copy.deepcopy(colocated)
    manifest["pools"][0]["engine"] = "sglang"
    with pytest.raises(PdplanError, match="llm-d export runs vllm pods, but pool .* has engine 'sglang'"):
        export_manifest(manifest, "llm-d")


def test_a_refused_engine_pin_names_the_formats_that_start_that_engine(colocated):
    manifest = copy.deepcopy(colocated)
    manifest["pools"][0]["engine"] = "sglang"
    with pytest.raises(PdplanError, match="'sglang': export --format sglang or dynamo or k8s starts sglang$"):
        export_manifest(manifest, "llm-d")


def test_a_pin_to_tensorrt_llm_names_the_dynamo_graph_that_starts_its_workers(colocated):
    manifest = copy.deepcopy(colocated)
    manifest["pools"][0]["engine"] = "trtllm"
    with pytest.raises(PdplanError, match="'trtllm': export --format dynamo starts trtllm$"):
        export_manifest(manifest, "k8s")


def test_an_export_refusal_names_the_manifest_file_and_the_field_in_one_line(run_cli, colocated, tmp_path):
    manifest = copy.deepcopy(colocated)
    manifest["pools"][0]["engine"] = "sglang"
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(seal(manifest), sort_keys=False))
    code, out, err = run_cli("export", path, "--format", "llm-d", "--out", tmp_path / "deploy")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert err.startswith(f"Error: {path}: pools[0].engine: llm-d export runs vllm pods")
    assert not (tmp_path / "deploy").exists()


def test_refusals_name_the_formats_that_refuse_a_plan_and_only_those(colocated):
    manifest = copy.deepcopy(colocated)
    manifest["pools"][0]["engine"] = "sglang"  # llm-d starts vLLM pods only; the others start SGLang or say so
    assert refusals(colocated) == {}
    found = refusals(manifest)
    assert list(found) == ["llm-d"]
    assert found["llm-d"].startswith("pools[0].engine: llm-d export runs vllm pods") and "\n" not in found["llm-d"]


def test_a_pod_format_refuses_a_pool_pinned_to_an_engine_it_starts_no_pod_of(colocated):
    manifest = copy.deepcopy(colocated)
    manifest["pools"][0]["engine"] = "trtllm"
    with pytest.raises(PdplanError, match=r"k8s export runs vllm pods \(one of vllm, sglang for every pool\), "
                                          r"but pool .* has engine 'trtllm'"):
        export_manifest(manifest, "k8s")


@pytest.mark.parametrize("fmt", ["dynamo", "k8s"])
def test_a_pod_format_refuses_pools_pinned_to_two_engines_since_it_runs_one(disaggregated, fmt):
    manifest = copy.deepcopy(disaggregated)
    manifest["pools"][0]["engine"], manifest["pools"][1]["engine"] = "sglang", "vllm"
    with pytest.raises(PdplanError, match=f"{fmt} export runs sglang pods .*but pool {manifest['pools'][1]['name']} "
                                          "has engine 'vllm'"):
        export_manifest(manifest, fmt)


@pytest.mark.parametrize("fmt, other", [("vllm", "sglang"), ("sglang", "trtllm")])
def test_a_bare_metal_format_says_when_it_starts_another_engine_than_the_plan_was_verified_on(colocated, fmt, other):
    manifest = copy.deepcopy(colocated)
    manifest["pools"][0]["engine"] = other
    files = export_manifest(manifest, fmt)
    said = f"The plan was verified on {other}'s step times, and this export starts {fmt}"
    assert all(said in text for name, text in files.items() if name.endswith(".sh"))
    assert not any(said.split(",")[0] in text for text in export_manifest(colocated, fmt).values())


def test_sglang_refuses_lmcache(disaggregated):
    manifest = copy.deepcopy(disaggregated)
    manifest["transfer"]["connector"] = "lmcache"
    with pytest.raises(PdplanError, match="lmcache"):
        export_manifest(manifest, "sglang")


def test_crds_validate_strictly_against_their_upstream_schemas(shared_data, manifest):
    documents = _yaml_documents(export_manifest(manifest, "dynamo")) + _yaml_documents(export_manifest(manifest, "k8s"))
    checked = 0
    for doc in documents:
        if doc["kind"] in CRD_SCHEMAS:
            _validator(shared_data, CRD_SCHEMAS[doc["kind"]]).validate(doc)
            checked += 1
    assert checked >= 1


def test_core_kubernetes_objects_validate_strictly_against_the_kubernetes_api(manifest):
    """Every object of the k8s and Dynamo exports that is not a custom resource passes
    kubernetes-validate in strict mode (unknown fields refused), as ``kubectl --validate=strict``."""
    import kubernetes_validate

    documents = _yaml_documents(export_manifest(manifest, "k8s")) + _yaml_documents(export_manifest(manifest, "dynamo"))
    core = [doc for doc in documents if doc["kind"] not in CRD_SCHEMAS]
    # the pools' Deployments (with their model cache claim templates) and Services, the router's
    # Deployment, Service, ServiceAccount, Role and RoleBinding
    assert {"Deployment", "Service", "ServiceAccount", "Role", "RoleBinding"} <= {doc["kind"] for doc in core}
    for doc in core:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_llmd_values_validate_strictly_against_the_chart_schema(shared_data, manifest):
    documents = _yaml_documents(export_manifest(manifest, "llm-d"))
    assert documents
    for doc in documents:
        _validator(shared_data, "llm-d-modelservice.values.schema.json").validate(doc)


def test_each_deployment_is_reached_through_a_service_of_its_pool_and_gated_on_vllm_health(manifest):
    documents = _yaml_documents(export_manifest(manifest, "k8s"))
    services = {d["metadata"]["name"]: d for d in documents if d["kind"] == "Service"}
    deployments = [d for d in _pool_workloads(documents) if d["kind"] == "Deployment"]
    assert deployments
    for deployment in deployments:
        name = deployment["metadata"]["name"]
        assert services[name]["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert services[name]["spec"]["ports"][0]["targetPort"] in {p["name"] for p in container["ports"]}
        assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}


def test_a_pod_of_several_gpus_mounts_a_memory_backed_dev_shm(manifest):
    for doc in _pool_workloads(_yaml_documents(export_manifest(manifest, "k8s"))):
        template = (doc["spec"]["template"] if doc["kind"] == "Deployment"
                    else doc["spec"]["leaderWorkerTemplate"]["workerTemplate"])
        pool = next(p for p in manifest["pools"] if p["name"] == doc["metadata"]["name"])
        mounts = template["spec"]["containers"][0].get("volumeMounts", [])
        shm = [m for m in mounts if m["mountPath"] == "/dev/shm"]
        assert bool(shm) == (pool["tp"] * pool["pp"] > 1)
        if shm:
            volume = next(v for v in template["spec"]["volumes"] if v["name"] == shm[0]["name"])
            assert volume["emptyDir"] == {"medium": "Memory"}


def test_deployments_select_their_own_pod_template(manifest):
    deployments = [d for d in _yaml_documents(export_manifest(manifest, "k8s")) if d["kind"] == "Deployment"]
    assert deployments
    for doc in deployments:
        assert doc["apiVersion"] == "apps/v1"
        selector = doc["spec"]["selector"]["matchLabels"]
        assert selector.items() <= doc["spec"]["template"]["metadata"]["labels"].items()


def test_an_instance_spanning_nodes_becomes_a_multinode_group(spanning):
    kinds = {d["kind"] for d in _yaml_documents(export_manifest(spanning, "k8s"))}
    assert "LeaderWorkerSet" in kinds
    dynamo = _yaml_documents(export_manifest(spanning, "dynamo"))[0]
    assert any(c.get("multinode", {}).get("nodeCount") == 2 for c in dynamo["spec"]["components"])
    assert yaml.safe_load(export_manifest(spanning, "llm-d")["llm-d/values.yaml"])["multinode"] is True


def test_k8s_objects_carry_the_route_epoch_and_manifest_hash(disaggregated):
    full = disaggregated["provenance"]["content_hash"]
    for doc in _yaml_documents(export_manifest(disaggregated, "k8s")):
        labels = doc["metadata"]["labels"]
        assert labels["pdplan.dev/route-epoch"] == str(disaggregated["placement"]["route_epoch"])
        assert full.split(":")[1].startswith(labels["pdplan.dev/manifest-hash"])
        assert doc["metadata"]["annotations"]["pdplan.dev/manifest-hash"] == full


def test_a_manifest_without_a_checkpoint_serves_the_catalog_models_repository(colocated):
    script = export_manifest(colocated, "vllm")
    text = next(t for n, t in script.items() if n != "vllm/router.sh")
    assert "vllm serve meta-llama/Llama-2-70b-hf " in text


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_manifest_whose_checkpoint_is_unknown_is_exported_to_no_format(colocated, fmt):
    manifest = copy.deepcopy(colocated)
    manifest["identity"]["checkpoint"]["id"] = "unknown"
    with pytest.raises(PdplanError, match=r"identity.checkpoint.id is unknown, so the engines have no model to "
                                          r"load: set it with optimize --checkpoint") as error:
        export_manifest(manifest, fmt)
    assert error.value.field == "identity.checkpoint.id"


def test_export_of_an_unknown_checkpoint_exits_2_in_one_line_naming_the_flag(run_cli, colocated, tmp_path):
    manifest = copy.deepcopy(colocated)
    manifest["identity"]["checkpoint"]["id"] = "unknown"
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(seal(manifest), sort_keys=False))
    code, _, err = run_cli("export", path, "--format", "k8s", "--out", tmp_path / "deploy")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "optimize --checkpoint" in err
    assert not (tmp_path / "deploy").exists()


def test_the_image_option_sets_every_pod_image(disaggregated):
    for fmt in ("dynamo", "llm-d", "k8s"):
        text = "".join(export_manifest(disaggregated, fmt, image="registry.example/vllm:v9.9.9").values())
        assert "registry.example/vllm:v9.9.9" in text and "vllm-openai:v0.33.0" not in text


def test_an_unknown_format_is_refused():
    with pytest.raises(PdplanError, match="--format must be one of") as error:
        export_manifest({}, "helm")
    assert error.value.field == "format"


def test_mooncake_prefill_scripts_each_get_a_bootstrap_port_the_router_is_given(disaggregated):
    """vLLM's MooncakeConnector serves prefilled KV from a bootstrap server on VLLM_MOONCAKE_BOOTSTRAP_PORT;
    vllm-router takes that port as ``--prefill URL PORT`` (vllm_router/router_args.py)."""
    assert disaggregated["transfer"]["connector"] == "mooncake"
    files = export_manifest(disaggregated, "vllm")
    ports = {}
    for name, text in files.items():
        for line in text.splitlines():
            if line.startswith("export VLLM_MOONCAKE_BOOTSTRAP_PORT="):
                ports[name] = line.split("=", 1)[1]
    prefills = sum(p["replicas"] for p in disaggregated["pools"] if p["phase"] == "prefill")
    assert len(ports) == len(set(ports.values())) == prefills
    tokens = shlex.split(files["vllm/router.sh"], comments=True)
    given = [tokens[i + 2] for i, t in enumerate(tokens) if t == "--prefill"]
    assert sorted(given) == sorted(ports.values())
