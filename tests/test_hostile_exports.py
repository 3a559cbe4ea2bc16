"""Hostile names and paths on the export side: a name that could inject a command, leave --out or
be refused by Kubernetes is stopped where it enters (the cluster file, a manifest, a flag) with
exit 2 (validate: exit 1 naming the field); every value that reaches a script is quoted, every
comment is one line; an export replaces its own format folder whole and writes nowhere else."""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pdplan import names
from pdplan.errors import PdplanError
from pdplan.fileio import Outputs
from pdplan.hardware import load_cluster
from pdplan.manifest.document import seal
from pdplan.manifest.export import export_manifest, shell
from pdplan.manifest.export.common import instances
from tests.conftest import without_mixed
from tests.test_export_router import cache_aware_plan

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "chat_poisson_2k.csv"

#: Names that must never reach a script, a file name or a Kubernetes object as they are.
HOSTILE = {"command substitution": "a$(touch PWNED)", "backticks": "a`touch PWNED`", "semicolon": "a;touch PWNED",
           "ampersand": "a&touch PWNED", "IFS": "a${IFS}b", "newline": "a\ntouch PWNED", "carriage return": "a\rb",
           "quote": "a'b", "double quote": 'a"b', "parent folder": "../../ESCAPED", "space": "a b", "colon": "a:b",
           "uppercase": "Node-A", "64 characters": "a" * 64, "slash": "a/b"}
#: Free text that legitimately reaches a script (a checkpoint id, a manifest's name in a comment).
FREE_TEXT = "m$(touch PWNED1)`touch PWNED2`;touch PWNED3&touch PWNED4|touch PWNED5 ${IFS}'\"\n touch PWNED6\r\n#"
SCRIPT_FORMATS = ("vllm", "sglang")
STUBS = ("vllm", "ray", "python", "python3", "vllm-router")


def one_error_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and "Traceback" not in err, err
    return lines[0]


def renamed(manifest: dict, old: str, new: str) -> dict:
    """``manifest`` with every value and key equal to ``old`` replaced by ``new``, re-sealed."""
    def walk(node):
        if isinstance(node, dict):
            return {(new if k == old else k): walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return new if node == old else node
    return seal(walk(manifest))


def spread_over_nodes(manifest: dict) -> dict:
    """The plan with the last stage of its first pipeline-parallel instance on a node of its own."""
    spread = copy.deepcopy(manifest)
    for node in spread["placement"]["nodes"]:
        later = [slot for slot in node["instances"] if slot["stage"] > 0]
        if later:
            node["instances"].remove(later[-1])
            spread["placement"]["nodes"].append({**node, "node": f"{node['node']}-b", "instances": [later[-1]]})
            return spread
    pytest.skip("the plan has no pipeline-parallel instance to spread over nodes")


@pytest.fixture(scope="module")
def plans(manifests, mixed_manifest) -> dict[str, dict]:
    loaded = {mode: yaml.safe_load(path.read_text()) for mode, path in manifests.items()}
    loaded["nixl"] = without_mixed(yaml.safe_load(mixed_manifest["manifest"].read_text()))
    loaded["spanning"] = spread_over_nodes(loaded["disaggregated"])
    loaded["spanning colocated"] = spread_over_nodes(loaded["colocated"])
    loaded["prefix caches"] = cache_aware_plan(loaded["disaggregated"])  # router policy, cache switch, tier notice
    return loaded


def script_exports(plans: dict[str, dict]):
    """(plan, format, files) of every script format and plan."""
    for plan, manifest in plans.items():
        for fmt in SCRIPT_FORMATS:
            yield plan, fmt, export_manifest(manifest, fmt)


# --- names where they enter --------------------------------------------------------------------

@pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_node_name_in_the_cluster_file_exits_2_naming_file_line_and_field(name, run_cli, tmp_path,
                                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)
    cluster = tmp_path / "c.yaml"
    cluster.write_text(f"nodes:\n  - {{name: {json.dumps(name)}, gpu: h100-80gb, "
                       "gpus_per_node: 8, intra_node_gb_s: 450, inter_node_gb_s: 50, count: 2}\n")
    code, out, err = run_cli("optimize", TRACE, "--cluster", cluster, "--out", tmp_path / "m.yaml")
    assert code == 2
    assert f"{cluster}:2: nodes[0].name must be a Kubernetes node name" in one_error_line(err)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_a_node_type_name_leaves_room_for_the_index_pdplan_appends():
    longest = "n" * (names.NODE_NAME_MAX - names.NODE_SUFFIX_MAX)
    assert names.node_type(longest) is None and names.node(f"{longest}-{999_999}") is None
    assert names.node_type(longest + "n") is not None


def test_every_shipped_cluster_file_has_admitted_names():
    for path in sorted((ROOT / "examples").glob("cluster*.yaml")) + [ROOT / "pdplan" / "data" / "cluster.yaml"]:
        assert load_cluster(path).nodes


def test_a_real_clusters_dotted_lowercase_node_names_are_admitted():
    assert names.node("gpu-07.rack-2.example.com") is None
    assert names.node_type("h100.rack-2") is None


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=70), st.from_regex(r"[a-z0-9][-a-z0-9.]{0,70}", fullmatch=True)))
def test_every_admitted_name_is_a_shell_literal_a_single_path_component_and_a_label_value(name):
    admitted = [rule for rule in (names.dns_label, names.node, names.node_type) if rule(name) is None]
    if admitted:
        assert shlex.quote(name) == name  # nothing in it the shell would read
        assert "/" not in name and name not in (".", "..")
        assert len(name) <= 63 and name == name.lower()


@pytest.mark.parametrize("image", [*(HOSTILE[k] for k in HOSTILE if k not in ("colon", "64 characters", "slash")),
                                   "vllm/vllm-openai:v1 --privileged", "vllm/Openai",
                                   "vllm/openai:" + "t" * 129, "vllm/openai@sha256:short", ":tag"])
def test_a_hostile_image_flag_exits_2_naming_the_flag(image, run_cli, manifests, tmp_path):
    code, _, err = run_cli("export", manifests["disaggregated"], "--format", "k8s", "--image", image,
                           "--out", tmp_path / "deploy")
    assert code == 2
    assert "--image must be an OCI image reference" in one_error_line(err)
    assert not (tmp_path / "deploy").exists()


@pytest.mark.parametrize("image", ["vllm/vllm-openai:v0.33.0", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.1",
                                   "localhost:5000/team/vllm__build-x.y", "[::1]:5000/vllm:latest",
                                   "registry.example.com/vllm@sha256:" + "a" * 64, "ubuntu"])
def test_every_form_of_image_reference_is_admitted(image):
    assert names.image_reference(image) is None


def test_an_admitted_image_reaches_every_pod_verbatim(run_cli, manifests, tmp_path):
    image = "registry.example.com:5000/team/vllm:v0.33.0-rc1@sha256:" + "0" * 64
    router = "registry.example.com/team/vllm-router:v0.1.17"
    code, out, err = run_cli("export", manifests["disaggregated"], "--format", "k8s", "--image", image,
                             "--router-image", router, "--out", tmp_path)
    assert code == 0, err
    objects = next(Path(name) for name in out.split() if not name.endswith("kustomization.yaml"))
    workloads = [d for d in yaml.safe_load_all(objects.read_text()) if d["kind"] in ("Deployment", "LeaderWorkerSet")]
    templates = [t for d in workloads for t in ([d["spec"]["template"]] if d["kind"] == "Deployment"
                                                else [d["spec"]["leaderWorkerTemplate"]["leaderTemplate"],
                                                      d["spec"]["leaderWorkerTemplate"]["workerTemplate"]])]
    images = {(c["name"], c["image"]) for t in templates for c in t["spec"]["containers"]}
    assert images == {("vllm", image), ("router", router)}


def resealable(manifest: dict, kind: str) -> tuple[str, str, str]:
    """(field path, its value, a format to export) of a pool's, a node's or an instance's name."""
    node = manifest["placement"]["nodes"][0]
    pool = next(i for i, p in enumerate(manifest["pools"]) if p["name"] == node["instances"][0]["pool"])
    return {"pool": (f"pools[{pool}].name", manifest["pools"][pool]["name"], "k8s"),
            "node": ("placement.nodes[0].node", node["node"], "vllm"),
            "instance": ("placement.nodes[0].instances[0].instance", node["instances"][0]["instance"], "sglang")}[kind]


@pytest.mark.parametrize("name", HOSTILE.values(), ids=HOSTILE.keys())
@pytest.mark.parametrize("field", ["pool", "node", "instance"])
def test_a_resealed_manifest_with_a_hostile_name_is_invalid_and_not_exported(field, name, plans, run_cli, tmp_path,
                                                                             monkeypatch):
    monkeypatch.chdir(tmp_path)
    path, old, fmt = resealable(plans["disaggregated"], field)
    manifest = tmp_path / "resealed.yaml"
    manifest.write_text(yaml.safe_dump(renamed(plans["disaggregated"], old, name), sort_keys=False))
    code, out, err = run_cli("validate", manifest)
    assert code == 1
    assert f"{path}: must be a" in out, out
    code, _, err = run_cli("export", manifest, "--format", fmt, "--out", tmp_path / "out" / "deploy")
    assert code == 2
    assert f"{path}: must be a" in one_error_line(err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["resealed.yaml"]  # no PWNED, no ESCAPED.sh


def test_an_instance_placed_for_two_pools_is_invalid(plans, run_cli, tmp_path):
    manifest = copy.deepcopy(plans["disaggregated"])
    slots = [s for node in manifest["placement"]["nodes"] for s in node["instances"]]
    other = next(s for s in slots if s["pool"] != slots[0]["pool"])
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(renamed(manifest, other["instance"], slots[0]["instance"]), sort_keys=False))
    code, out, _ = run_cli("validate", path)
    assert code == 1 and "an instance belongs to one pool" in out


def test_a_composed_dynamo_object_name_over_63_characters_exits_2(plans, run_cli, tmp_path):
    long_name = "m" * 50
    assert names.dns_subdomain(long_name) is None
    manifest = copy.deepcopy(plans["disaggregated"])
    manifest["metadata"]["name"] = long_name
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(seal(manifest), sort_keys=False))
    code, _, err = run_cli("export", path, "--format", "dynamo", "--out", tmp_path / "deploy")
    assert code == 2
    assert "over the 63 of a DNS-1123 label" in one_error_line(err)


def test_an_instance_named_router_is_refused_not_written_over_the_router(plans):
    manifest = copy.deepcopy(plans["colocated"])
    slot = manifest["placement"]["nodes"][0]["instances"][0]
    manifest = renamed(manifest, slot["instance"], "router")
    with pytest.raises(PdplanError, match="would share its script with the vllm router"):
        export_manifest(manifest, "vllm")


# --- scripts -----------------------------------------------------------------------------------

def test_every_generated_script_passes_bash_n(plans):
    checked = 0
    for plan, fmt, files in script_exports(plans):
        for name, text in files.items():
            result = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
            assert result.returncode == 0, (plan, fmt, name, result.stderr)
            checked += 1
    for fmt in ("k8s", "llm-d"):  # a multi-node pod runs its launch lines through bash -c
        for text in export_manifest(plans["spanning"], fmt).values():
            for script in _bash_c_scripts(list(yaml.safe_load_all(text))):
                assert subprocess.run(["bash", "-n", "-c", script]).returncode == 0
                checked += 1
    assert checked > 10


def _bash_c_scripts(node) -> list[str]:
    if isinstance(node, dict):
        if node.get("command") == ["/bin/bash", "-c"]:
            return list(node["args"])
        return [s for value in node.values() for s in _bash_c_scripts(value)]
    if isinstance(node, list):
        return [s for value in node for s in _bash_c_scripts(value)]
    return []


@pytest.fixture(scope="module")
def stubs(tmp_path_factory) -> Path:
    """Stub binaries that record their argv (and the NIXL host they were given) and exit 0."""
    folder = tmp_path_factory.mktemp("stubs")
    for name in STUBS:
        stub = folder / name
        stub.write_text('#!/bin/bash\ncall=$(mktemp "$STUB_LOG/call.XXXXXX")\n'
                        'printf \'%s\\0\' "${VLLM_NIXL_SIDE_CHANNEL_HOST-}" "${0##*/}" "$@" > "$call"\n')
        stub.chmod(0o755)
    return folder


def run_scripts(files: dict[str, str], stubs: Path, folder: Path) -> list[list[str]]:
    """Run every script with the stubs first on PATH (each rank of a multi-node one); the calls
    the stubs saw, each as [NIXL host, program, args...]."""
    log = folder / "calls"
    log.mkdir()
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_LOG": str(log), "HOME": str(folder)}
    for name, text in sorted(files.items()):
        script = folder / Path(name).name
        script.write_text(text)
        for rank in ([["0"], ["1"]] if "NODE_RANK" in text else [[]]):
            result = subprocess.run(["bash", str(script), *rank], cwd=folder, env=env, capture_output=True, text=True)
            assert result.returncode == 0, (name, result.stderr)
    return [call.read_bytes().decode().split("\0")[:-1] for call in sorted(log.iterdir())]


@pytest.mark.parametrize("fmt", SCRIPT_FORMATS)
def test_the_scripts_run_with_stubs_and_execute_nothing_injected(plans, stubs, tmp_path, fmt):
    """The quoting itself: free text and names (as a library caller could pass them, unvalidated)
    reach every stub verbatim as one argument, and none of them runs."""
    manifest = copy.deepcopy(plans["spanning"])
    manifest["identity"]["checkpoint"]["id"] = FREE_TEXT
    manifest["metadata"]["name"] = FREE_TEXT
    leader = next(inst.nodes[0] for inst in instances(manifest) if inst.spans_nodes)
    hostile = f"{leader}$(touch PWNED7);touch PWNED8\n`touch PWNED9`"
    calls = run_scripts(export_manifest(renamed(manifest, leader, hostile), fmt), stubs, tmp_path)
    assert not list(tmp_path.rglob("PWNED*"))
    serving = [c for c in calls if c[1] in ("vllm", "python") and FREE_TEXT in c]
    assert serving and all(c.count(FREE_TEXT) == 1 for c in serving)
    words = {word for call in calls for word in call}
    leader_address = {"vllm": f"--address={hostile}:6379", "sglang": f"{hostile}:20000"}[fmt]
    assert leader_address in words  # vLLM's ray --address, SGLang's --dist-init-addr
    assert {f"http://{hostile}:" in word for word in words} == {True, False}  # a router's worker URL


def test_the_ray_leader_of_a_pod_stays_a_variable_the_pod_expands(plans, stubs, tmp_path):
    doc = next(d for d in yaml.safe_load_all(next(iter(export_manifest(plans["spanning"], "k8s").values())))
               if d["kind"] == "LeaderWorkerSet")
    script = _bash_c_scripts(doc)[0]
    log = tmp_path / "calls"
    log.mkdir()
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STUB_LOG": str(log), "LWS_WORKER_INDEX": "1",
           "LWS_LEADER_ADDRESS": "10.0.0.7"}
    assert subprocess.run(["bash", "-c", script], env=env).returncode == 0
    (call,) = [c.read_bytes().decode().split("\0")[:-1] for c in log.iterdir()]
    assert call[1:] == ["ray", "start", "--address=10.0.0.7:6379", "--block"]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(exclude_characters="\0"), max_size=40))
def test_any_value_is_one_shell_word_and_any_text_one_comment_line(value):
    assert shlex.split(shell.word(value)) == [value]
    assert shlex.split(shell.word(("--x=", value, ":1"))) == [f"--x={value}:1"]
    assert len(shell.comment(value).splitlines()) == 1 and "\r" not in shell.comment(value)


# --- paths -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../ESCAPED.sh", "/tmp/ESCAPED.sh", "a/../../ESCAPED.sh", "./x", "a//b"])
def test_an_output_name_that_could_leave_its_folder_is_refused(name, tmp_path):
    with pytest.raises(PdplanError, match="would lead out of its folder"):
        Outputs().put_folder(tmp_path / "vllm", {name: "x"}, "--out")
    assert not list(tmp_path.parent.rglob("ESCAPED*"))


def test_a_second_export_leaves_only_its_own_files_in_the_format_folder(manifests, run_cli, tmp_path):
    deploy = tmp_path / "deploy"
    assert run_cli("export", manifests["disaggregated"], "--format", "vllm", "--out", deploy)[0] == 0
    assert run_cli("export", manifests["disaggregated"], "--format", "k8s", "--out", deploy)[0] == 0
    k8s = {p: p.read_bytes() for p in (deploy / "k8s").iterdir()}
    code, out, err = run_cli("export", manifests["colocated"], "--format", "vllm", "--out", deploy)
    assert code == 0, err
    assert sorted((deploy / "vllm").iterdir()) == sorted(Path(line) for line in out.split())
    assert {p: p.read_bytes() for p in (deploy / "k8s").iterdir()} == k8s
    assert sorted(p.name for p in deploy.iterdir()) == ["k8s", "vllm"]  # no temp folder left


def test_a_format_folder_that_is_a_link_out_of_out_is_refused(manifests, run_cli, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "vllm").symlink_to(outside)
    code, _, err = run_cli("export", manifests["disaggregated"], "--format", "vllm", "--out", tmp_path / "deploy")
    assert code == 2
    assert "it is a link or a file" in one_error_line(err)
    assert not list(outside.iterdir())


def test_a_link_inside_the_format_folder_is_replaced_not_followed(manifests, run_cli, tmp_path):
    target = tmp_path / "precious.sh"
    target.write_text("keep me\n")
    (tmp_path / "deploy" / "vllm").mkdir(parents=True)
    (tmp_path / "deploy" / "vllm" / "router.sh").symlink_to(target)
    code, _, err = run_cli("export", manifests["disaggregated"], "--format", "vllm", "--out", tmp_path / "deploy")
    assert code == 0, err
    assert target.read_text() == "keep me\n"
    assert not (tmp_path / "deploy" / "vllm" / "router.sh").is_symlink()


def test_an_export_never_replaces_the_folder_holding_its_input(manifests, run_cli, tmp_path):
    manifest = tmp_path / "deploy" / "vllm" / "m.yaml"
    manifest.parent.mkdir(parents=True)
    manifest.write_bytes(manifests["disaggregated"].read_bytes())
    code, _, err = run_cli("export", manifest, "--format", "vllm", "--out", tmp_path / "deploy")
    assert code == 2
    assert "would replace the folder holding the input" in one_error_line(err)
    assert manifest.read_bytes() == manifests["disaggregated"].read_bytes()


@pytest.mark.parametrize("where", ["file in the way", "/proc", "/sys"])
def test_an_out_folder_that_cannot_be_written_exits_2_in_one_line(where, manifests, run_cli, tmp_path):
    (tmp_path / "f").write_text("a file\n")
    out = {"file in the way": tmp_path / "f" / "sub", "/proc": Path("/proc/self/pdplan-deploy"),
           "/sys": Path("/sys/pdplan-deploy")}[where]
    code, _, err = run_cli("export", manifests["disaggregated"], "--format", "vllm", "--out", out)
    assert code == 2
    assert "cannot write output" in one_error_line(err)
    assert (tmp_path / "f").read_text() == "a file\n"


def test_scripts_are_executable_and_the_folder_takes_the_umask(manifests, run_cli, tmp_path):
    code, out, _ = run_cli("export", manifests["colocated"], "--format", "vllm", "--out", tmp_path)
    assert code == 0
    umask = os.umask(0)
    os.umask(umask)
    assert (tmp_path / "vllm").stat().st_mode & 0o777 == 0o777 & ~umask
    assert all(Path(p).stat().st_mode & 0o777 == 0o777 & ~umask for p in out.split())
