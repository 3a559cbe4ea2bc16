"""Shared fixtures: the real data in ../shared/data (skipped with a reason when absent)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Folder of real traces/profiles/network measurements; skip when the clone has no ../shared."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not present at {SHARED_DATA} (only in the development workspace)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def benchmark():
    """Load a script of benchmarks/ by name as a module, its folder on the path as when it runs from there
    (the scripts import each other: silicon_validation.py reads its rows from silicon_rows.py)."""
    folder = str(ROOT / "benchmarks")
    if folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module


@pytest.fixture
def run_cli(capsys):
    """Run ``pdplan ARGS`` in-process; returns (exit_code, stdout, stderr)."""
    from pdplan.cli import main

    def run(*args: str) -> tuple[int, str, str]:
        code = 0
        try:
            main([str(a) for a in args])
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def run_main(*args) -> tuple[int | None, str]:
    """Run ``pdplan ARGS`` in-process outside a test's capture (module fixtures): (exit code, stdout)."""
    import contextlib
    import io

    from pdplan.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
        main([str(a) for a in args])
    return stop.value.code, out.getvalue()


TRACE = ROOT / "traces" / "chat_poisson_2k.csv"
#: optimize flags whose default P/D plan (TP 2 on both sides, decode TP2 PP2) every export format's
#: engine runs: vLLM's NIXL connector refuses a pipeline-parallel decode, Mooncake has no such rule
#: (pdplan.engines).
#: TP 2 on both sides (SGLang's P/D needs equal TP; equal-cost plans with a TP 1 prefill exist) and KV over
#: Mooncake, so every export format's engine runs the plan, its pipeline-parallel decode included.
RUNNABLE_EVERYWHERE = ("--connector", "mooncake", "--tp", "2")
IDENTITY = ("--checkpoint", "meta-llama/Llama-2-70b-hf", "--revision", "main", "--tokenizer",
            "meta-llama/Llama-2-70b-hf", "--adapter", "none", "--position", "rope theta=10000")


@pytest.fixture(scope="session")
def manifests(tmp_path_factory) -> dict[str, Path]:
    """Manifests ``optimize --out`` wrote on the shipped chat trace, one per mode: "disaggregated"
    (identity complete; TP 2 on both sides and its KV over Mooncake, so every export format's engine runs
    it, its pipeline-parallel decode included) and "colocated" (no identity given: the checkpoint is the catalog
    model's repository, the rest unknown). Each run takes ~20 s, so once."""
    import contextlib
    import io

    from pdplan.cli import main

    folder = tmp_path_factory.mktemp("manifests")
    found = {}
    for mode, extra in (("disaggregated", (*IDENTITY, *RUNNABLE_EVERYWHERE)), ("colocated", ())):
        found[mode] = folder / f"{mode}.yaml"
        with contextlib.redirect_stdout(io.StringIO()), pytest.raises(SystemExit) as stop:
            main(["optimize", str(TRACE), "--requests-per-probe", "300", "--cache-dir", str(folder / "cache"),
                  "--mode", mode, "--out", str(found[mode]), *extra])
        assert stop.value.code == 0
    return found


MIXED_CLUSTER = ("nodes:\n  - {name: a100, gpu: a100-80gb, gpus_per_node: 8, intra_node_gb_s: 300, "
                 "inter_node_gb_s: 25, count: 2}\n")


@pytest.fixture(scope="session")
def mixed_manifest(tmp_path_factory) -> dict[str, Path]:
    """A manifest whose answer has Splitwise's mixed pool: llama2-70b on two A100 nodes at 1.5 req/s,
    the chat trace's first 600 requests, P/D only, spill above 2048 queued prompt tokens (~5 s).
    Returns the manifest, its trace and its cluster."""
    return _two_node_manifest(tmp_path_factory.mktemp("mixed"), "--mixed", rate=1.5)


@pytest.fixture(scope="session")
def borrowing_manifest(tmp_path_factory) -> dict[str, Path]:
    """A manifest whose answer borrows (Splitwise's policy): the mixed manifest's case with
    ``--borrow`` instead of ``--mixed``, where lending a decode machine to prefill saves a prefill
    machine (~5 s). Returns the manifest, its trace and its cluster."""
    return _two_node_manifest(tmp_path_factory.mktemp("borrowing"), "--borrow")


def _two_node_manifest(folder: Path, flag: str, rate: float = 2) -> dict[str, Path]:
    """The manifest ``optimize FLAG`` writes for llama2-70b on two A100 nodes at ``rate`` req/s (the chat
    trace's first 600 requests, P/D only, spill above 2048 queued prompt tokens), with its trace
    and cluster."""
    trace, cluster, out = folder / "chat600.csv", folder / "a100x2.yaml", folder / "manifest.yaml"
    trace.write_text("".join(TRACE.read_text().splitlines(keepends=True)[:601]))
    cluster.write_text(MIXED_CLUSTER)
    code, _ = run_main("optimize", trace, "--model", "llama2-70b", "--tp", "2", "--tp", "4", "--pp", "1",
                       "--target-rate", str(rate), "--ttft", "1", "--tpot", "0.1", "--cluster", cluster, flag,
                       "--mixed-spill-tokens", "2048", "--mode", "disaggregated", "--affinity", "high",
                       "--cache-dir", folder / "cache", "--out", out, *IDENTITY)
    assert code == 0
    return {"manifest": out, "trace": trace, "cluster": cluster}


def without_mixed(manifest: dict) -> dict:
    """The mixed manifest as plain P/D: its mixed pool, its instances and its handoffs taken out (no
    export runs a mixed pool; the rest is a NIXL plan of several instances on one node)."""
    import copy

    plain = copy.deepcopy(manifest)
    mixed = {p["name"] for p in plain["pools"] if p["phase"] == "mixed"}
    plain["pools"] = [p for p in plain["pools"] if p["name"] not in mixed]
    for node in plain["placement"]["nodes"]:
        node["instances"] = [slot for slot in node["instances"] if slot["pool"] not in mixed]
    plain["transfer"]["roles"] = {name: role for name, role in plain["transfer"]["roles"].items() if name not in mixed}
    plain["transfer"]["paths"] = [path for path in plain["transfer"]["paths"]
                                  if path["to"] not in mixed and path["from"] not in mixed]
    return plain


@pytest.fixture(scope="session")
def disaggregated(manifests) -> dict:
    """The disaggregated manifest as data (tests that change it change a deep copy)."""
    import yaml

    return yaml.safe_load(manifests["disaggregated"].read_text())


@pytest.fixture(scope="session")
def colocated(manifests) -> dict:
    """The colocated manifest as data (tests that change it change a deep copy)."""
    import yaml

    return yaml.safe_load(manifests["colocated"].read_text())


@pytest.fixture(scope="session")
def spanning(disaggregated) -> dict:
    """The disaggregated plan with its first multi-stage instance's last stage moved to a new node:
    an instance spanning nodes, which the pod formats run as a multinode group."""
    import copy

    manifest = copy.deepcopy(disaggregated)
    nodes = manifest["placement"]["nodes"]
    for node in nodes:
        stages = [s for s in node["instances"] if s["stage"] > 0]
        if stages:
            node["instances"].remove(stages[-1])
            nodes.append({**node, "node": node["node"] + "-extra", "instances": [stages[-1]]})
            return manifest
    pytest.skip("the optimizer chose no pipeline-parallel instance to split over nodes")


@pytest.fixture(params=["disaggregated", "colocated", "spanning"])
def manifest(request) -> dict:
    """Each of the three manifests the export tests run on."""
    return request.getfixturevalue(request.param)


@pytest.fixture(scope="session")
def dsr1():
    """DeepSeek-R1 at its checkpoint's FP8, the model the wide-EP composition tests read tables for."""
    from pdplan.modelref import get_model

    return get_model("deepseek-r1@fp8")


@pytest.fixture
def wide() -> dict:
    """The hand-written wide expert-parallel plan of tests/wide_plan.py, fresh for each test (tests edit it)."""
    import yaml

    from tests.wide_plan import WIDE

    return yaml.safe_load(WIDE)
