"""The bare-metal launch scripts (``vllm/*.sh``, ``sglang/*.sh``) check their prerequisites before
they start anything, and a multi-node vLLM leader waits for its workers to join its Ray cluster.

Each script is run with bash on a machine made of stubs: a ``bin`` folder first on PATH and a
Python that sees only the fake modules a test puts in place (its site-packages are switched off),
so a missing module is really missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pdplan.manifest.export import export_manifest, prerequisites
from pdplan.manifest.export.common import instances

#: A stub program: records its name and arguments, one call per line, and exits 0.
STUB = '#!/bin/bash\nprintf "%s\\n" "${0##*/} $*" >> "$STUB_LOG"\n'
#: A fake ``ray`` module for the leader's poll: each poll (one Python process) counts itself in
#: $RAY_POLLS; the cluster has all its nodes from poll $RAY_READY_AT on (never when it is 0).
FAKE_RAY = '''import os
_polls = os.environ["RAY_POLLS"]
def init(**kwargs):
    count = int(open(_polls).read()) + 1 if os.path.exists(_polls) else 1
    open(_polls, "w").write(str(count))
def _ready():
    at = int(os.environ["RAY_READY_AT"])
    return at and int(open(_polls).read()) >= at
def nodes():
    return [{"Alive": True}] * (int(os.environ["RAY_NODES"]) if _ready() else 1)
def cluster_resources():
    return {"GPU": float(os.environ["RAY_GPUS"]) if _ready() else 1.0}
'''


class Machine:
    """A folder with stub programs and fake Python modules, and a way to run a script on it."""

    def __init__(self, root: Path, programs=(), modules=()):
        self.root, self.bin, self.site, self.log = root, root / "bin", root / "site", root / "calls.log"
        self.bin.mkdir()
        self.site.mkdir()
        self.log.write_text("")
        for name in ("python", "python3"):  # the real interpreter without its site-packages
            wrapper = self.bin / name
            wrapper.write_text(f'#!/bin/bash\nexec {sys.executable} -S "$@"\n')
            wrapper.chmod(0o755)
        for name in programs:
            self.stub(name)
        for module in modules:
            self.module(module)

    def stub(self, name: str) -> None:
        path = self.bin / name
        path.write_text(STUB)
        path.chmod(0o755)

    def module(self, dotted: str, text: str = "") -> None:
        folder = self.site
        for part in dotted.split("."):
            folder = folder / part
            folder.mkdir(exist_ok=True)
        (folder / "__init__.py").write_text(text)

    def run(self, text: str, *args: str, **env: str) -> subprocess.CompletedProcess:
        script = self.root / "script.sh"
        script.write_text(text)
        environment = {"PATH": f"{self.bin}:/usr/bin:/bin", "PYTHONPATH": str(self.site), "STUB_LOG": str(self.log),
                       "HOME": str(self.root), **env}
        return subprocess.run(["bash", str(script), *args], env=environment, capture_output=True, text=True,
                              cwd=self.root)

    def calls(self, program: str) -> list[str]:
        return [line for line in self.log.read_text().splitlines() if line.split(" ", 1)[0] == program]


def _script(files: dict[str, str], phase: str, *, spans: bool = False) -> str:
    """The launch script of the first instance of ``phase``, spanning nodes or not."""
    return next(text for name, text in sorted(files.items())
                if f"({phase}," in text and ("NODE_RANK" in text) == spans)


# --- prerequisites ---------------------------------------------------------------------------

def test_the_connector_modules_are_the_ones_the_engines_import():
    """vLLM's nixl_utils loads nixl._api, its MooncakeConnector and SGLang's Mooncake engine import
    mooncake.engine, SGLang's NIXL backend imports nixl._api (the upstream lines cited in the module)."""
    modules = {key: need.module for key, need in prerequisites.CONNECTOR_MODULES.items()}
    assert modules[("vllm", "nixl")] == modules[("sglang", "nixl")] == "nixl._api"
    assert modules[("vllm", "mooncake")] == modules[("sglang", "mooncake")] == "mooncake.engine"


def test_a_pd_vllm_instance_without_its_connectors_package_exits_naming_it_and_starts_nothing(disaggregated,
                                                                                             tmp_path):
    machine = Machine(tmp_path, programs=["vllm"], modules=["vllm"])
    result = machine.run(_script(export_manifest(disaggregated, "vllm"), "prefill"))
    assert result.returncode != 0
    assert "mooncake.engine" in result.stderr and "pip install mooncake-transfer-engine" in result.stderr
    assert machine.calls("vllm") == []


def test_a_pd_vllm_instance_with_every_prerequisite_starts_vllm(disaggregated, tmp_path):
    machine = Machine(tmp_path, programs=["vllm"], modules=["vllm", "mooncake.engine"])
    result = machine.run(_script(export_manifest(disaggregated, "vllm"), "prefill"))
    assert result.returncode == 0, result.stderr
    assert [call.split()[:2] for call in machine.calls("vllm")] == [["vllm", "serve"]]


def test_a_vllm_instance_without_vllm_exits_naming_it(disaggregated, tmp_path):
    machine = Machine(tmp_path, modules=["mooncake.engine"])
    result = machine.run(_script(export_manifest(disaggregated, "vllm"), "decode"))
    assert result.returncode != 0 and "the program vllm" in result.stderr and "pip install vllm" in result.stderr


def test_a_vllm_instance_spanning_nodes_without_ray_exits_naming_it_on_every_node(spanning, tmp_path):
    machine = Machine(tmp_path, programs=["vllm"], modules=["vllm", "mooncake.engine"])
    script = _script(export_manifest(spanning, "vllm"), "decode", spans=True)
    for rank in ("0", "1"):
        result = machine.run(script, rank)
        assert result.returncode != 0 and "ray" in result.stderr and "pip install ray" in result.stderr
    assert machine.calls("vllm") == []


def test_an_sglang_instance_without_sglang_exits_with_its_own_message(disaggregated, tmp_path):
    machine = Machine(tmp_path, modules=["mooncake.engine"])
    result = machine.run(_script(export_manifest(disaggregated, "sglang"), "decode"))
    assert result.returncode != 0
    assert "the Python module sglang" in result.stderr and "No module named" not in result.stderr


def test_an_sglang_instance_without_its_transfer_backend_exits_naming_it(disaggregated, tmp_path):
    machine = Machine(tmp_path, modules=["sglang"])
    result = machine.run(_script(export_manifest(disaggregated, "sglang"), "prefill"))
    assert result.returncode != 0 and "mooncake.engine" in result.stderr


@pytest.mark.parametrize(("fmt", "missing"), [("vllm", "the program vllm-router"),
                                              ("sglang", "the Python module sglang_router.launch_router")])
def test_a_router_script_without_its_router_exits_naming_it(disaggregated, tmp_path, fmt, missing):
    machine = Machine(tmp_path)
    result = machine.run(export_manifest(disaggregated, fmt)[f"{fmt}/router.sh"])
    assert result.returncode != 0 and missing in result.stderr


def test_every_export_script_checks_before_its_first_command(disaggregated, spanning):
    """The checks come before any exec, ray start or poll."""
    for manifest in (disaggregated, spanning):
        for fmt in ("vllm", "sglang"):
            for name, text in export_manifest(manifest, fmt).items():
                lines = text.splitlines()
                first_check = next(i for i, line in enumerate(lines) if line.startswith("command -v ")
                                   or " -c 'import " in line)
                first_start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(("exec ", "ray ")))
                assert first_check < first_start, name


# --- the multi-node leader waits -------------------------------------------------------------

@pytest.fixture
def ray_machine(tmp_path) -> Machine:
    machine = Machine(tmp_path, programs=["vllm", "ray", "sleep"], modules=["vllm", "mooncake.engine"])
    machine.module("ray", FAKE_RAY)
    return machine


def _leader_env(machine: Machine, manifest: dict, ready_at: int) -> dict[str, str]:
    inst = next(i for i in instances(manifest) if i.spans_nodes)
    return {"RAY_POLLS": str(machine.root / "polls"), "RAY_READY_AT": str(ready_at),
            "RAY_NODES": str(len(inst.nodes)), "RAY_GPUS": str(inst.pool["tp"] * inst.pool["pp"])}


def test_the_multinode_leader_starts_vllm_only_once_all_its_nodes_and_gpus_have_joined(spanning, ray_machine):
    script = _script(export_manifest(spanning, "vllm"), "decode", spans=True)
    result = ray_machine.run(script, "0", **_leader_env(ray_machine, spanning, ready_at=3))
    assert result.returncode == 0, result.stderr
    assert (ray_machine.root / "polls").read_text() == "3"   # two short polls, then the full cluster
    assert len(ray_machine.calls("sleep")) == 2
    assert [c.split()[:3] for c in ray_machine.calls("ray")] == [["ray", "start", "--head"]]
    assert [c.split()[:2] for c in ray_machine.calls("vllm")] == [["vllm", "serve"]]
    assert "ray cluster: 1 nodes, 1 GPUs" in result.stdout


def test_the_multinode_leader_gives_up_with_a_clear_error_when_workers_never_join(spanning, ray_machine):
    script = _script(export_manifest(spanning, "vllm"), "decode", spans=True)
    result = ray_machine.run(script, "0", **_leader_env(ray_machine, spanning, ready_at=0))
    assert result.returncode != 0
    assert "has not reached" in result.stderr and "vLLM was not started" in result.stderr
    assert ray_machine.calls("vllm") == []


def test_a_multinode_worker_joins_the_leaders_cluster_and_blocks(spanning, ray_machine):
    script = _script(export_manifest(spanning, "vllm"), "decode", spans=True)
    leader = next(i for i in instances(spanning) if i.spans_nodes).nodes[0]
    result = ray_machine.run(script, "1", **_leader_env(ray_machine, spanning, ready_at=1))
    assert result.returncode == 0, result.stderr
    assert ray_machine.calls("ray") == [f"ray start --address={leader}:6379 --block"]
    assert ray_machine.calls("vllm") == [] and not os.path.exists(ray_machine.root / "polls")
