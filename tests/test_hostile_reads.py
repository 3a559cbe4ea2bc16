"""Every read bounded: what validate, diff, export, simulate --plan and profile calibrate do with
inputs that are not what they claim. Each ends within seconds and bounded memory: a path that is
not a readable file, an alias bomb, a count that would size a huge allocation is one ``Error:``
line naming the file (exit 2) and writes nothing; a manifest holding numbers JSON lacks (NaN,
infinity, 1.0 where an integer is meant) is a violation ``validate`` lists (exit 1), and every
other command refuses it (exit 2).
"""

from __future__ import annotations

import json
import os
import tracemalloc
from pathlib import Path

import pytest
from test_hostile_input import bound

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import dump_yaml, load_yaml, sha256_file
from pdplan.manifest.document import load_manifest, schema, schema_errors, seal

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "chat_poisson_2k.csv"
PROFILE = ROOT / "pdplan" / "data" / "profiles" / "llama2-70b_h100-80gb_tp4_pp1.yaml"
#: Generous for one refused input, tiny beside the gigabytes the attacks below used to take.
MEMORY_BOUND = 64 * 2**20


def run_bounded(run_cli, *args, seconds: int = 30) -> tuple[int, str, str]:
    """``run_cli(*args)``, failing the test if it has not ended within ``seconds``."""
    with bound(seconds, f"pdplan {' '.join(map(str, args))}"):
        return run_cli(*args)


def run_in_bounded_memory(run_cli, *args) -> tuple[int, str, str]:
    """:func:`run_bounded`, asserting the Python heap never grew past :data:`MEMORY_BOUND`."""
    tracemalloc.start()
    try:
        result = run_bounded(run_cli, *args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MEMORY_BOUND, f"peak {peak / 2**20:.0f} MiB"
    return result


def one_error_line(code: int, out: str, err: str, *fragments: str) -> None:
    assert code == 2, out + err
    assert out == "" and err.startswith("Error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PDPLAN_CACHE_DIR", str(tmp_path / "cache"))
    import pdplan.latency.calibration.fit  # noqa: F401 - imported before any memory is measured
    import pdplan.manifest.plan  # noqa: F401


# --- paths that are not readable files ------------------------------------------------------------

def hostile_path(folder: Path, kind: str) -> Path:
    """A path of ``kind``: a FIFO (no writer: a read would block for ever), /dev/zero (a read never
    ends), a folder, or nothing at all."""
    if kind == "dev-zero":
        return Path("/dev/zero")
    path = folder / f"hostile-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    return path


KIND_SAYS = {"dev-zero": "is not a regular file", "fifo": "is not a regular file", "folder": "is a directory",
             "missing": "not found"}


def _bench(folder: Path) -> Path:
    path = folder / "bench.json"
    path.write_text(json.dumps({"max_concurrency": 2, "input_lens": [500, 900], "output_lens": [20, 30],
                                "ttfts": [0.1, 0.2], "itls": [[0.02] * 19, [0.02] * 29], "errors": ["", ""]}))
    return path


#: Each input path of each command, the hostile path as X (M: a real manifest, B: a benchmark result).
SURFACES = {
    "validate-manifest": ("validate", "X"),
    "validate-trace": ("validate", "M", "--trace", "X"),
    "validate-cluster": ("validate", "M", "--cluster", "X"),
    "validate-profiles": ("validate", "M", "--profiles", "X"),
    "diff-first": ("diff", "X", "M"),
    "diff-second": ("diff", "M", "X"),
    "export-manifest": ("export", "X", "--format", "vllm", "--out", "deploy"),
    "simulate-plan": ("simulate", str(TRACE), "--plan", "X"),
    "simulate-trace": ("simulate", "X", "--plan", "M"),
    "calibrate-profile": ("profile", "calibrate", "X", "--bench", "B", "-o", "cal.yaml"),
    "calibrate-bench": ("profile", "calibrate", str(PROFILE), "--bench", "X", "-o", "cal.yaml"),
}
#: A folder is a valid --profiles (a folder of profiles).
UNREADABLE = [(surface, kind) for surface in SURFACES for kind in KIND_SAYS
              if (surface, kind) != ("validate-profiles", "folder")]


@pytest.mark.parametrize("surface,kind", UNREADABLE)
def test_an_input_that_is_not_a_readable_file_is_one_error_line_within_seconds(
        surface, kind, manifests, run_cli, tmp_path, monkeypatch):
    args = SURFACES[surface]
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    manifest = work / "m.yaml"
    manifest.write_bytes(manifests["disaggregated"].read_bytes())
    bench = _bench(work)
    hostile = hostile_path(work, kind)
    before = files_in(work)
    swap = {"X": str(hostile), "M": str(manifest), "B": str(bench)}
    code, out, err = run_bounded(run_cli, *(swap.get(a, a) for a in args), seconds=20)
    one_error_line(code, out, err, f"{hostile}: ", KIND_SAYS[kind])
    assert files_in(work) == before


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "folder", "missing"])
def test_hashing_an_input_refuses_what_is_not_a_regular_file_naming_it(kind, tmp_path):
    hostile = hostile_path(tmp_path, kind)
    with pytest.raises(PdplanError, match=f"^{hostile}: trace {KIND_SAYS[kind]}"):
        sha256_file(hostile, what="trace")


def test_a_profiles_folder_holding_a_fifo_or_a_device_is_hashed_without_opening_them(manifests, run_cli,
                                                                                     tmp_path):
    folder = tmp_path / "profiles"
    folder.mkdir()
    (folder / "mine.yaml").write_bytes(PROFILE.read_bytes())
    os.mkfifo(folder / "pipe")
    (folder / "zeros").symlink_to("/dev/zero")
    code, out, _ = run_bounded(run_cli, "validate", manifests["disaggregated"], "--profiles", folder)
    assert code == 1 and "provenance.inputs.profiles: stale" in out


# --- alias bombs ----------------------------------------------------------------------------------

def billion_laughs() -> str:
    """9 anchors, each a list of 8 aliases of the one before: 72 aliases, 8**9 values expanded."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 8)}]" for i in range(1, 10)]
    return "\n".join(lines) + "\n"


BOMBED = {
    "validate": ("validate", "X"),
    "diff": ("diff", "M", "X"),
    "export": ("export", "X", "--format", "vllm", "--out", "deploy"),
    "simulate-plan": ("simulate", str(TRACE), "--plan", "X"),
}


@pytest.mark.parametrize("command", list(BOMBED))
def test_a_manifest_carrying_a_billion_laughs_is_refused_in_bounded_memory(command, manifests, run_cli,
                                                                           tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bombed = tmp_path / "bombed.yaml"
    bombed.write_text(manifests["disaggregated"].read_text() + billion_laughs())
    swap = {"X": str(bombed), "M": str(manifests["disaggregated"])}
    code, out, err = run_in_bounded_memory(run_cli, *(swap.get(a, a) for a in BOMBED[command]))
    one_error_line(code, out, err, f"{bombed}:", f"more than {limits.YAML_VALUES:,} values once its aliases "
                                                 "are expanded")
    assert files_in(tmp_path) == ["bombed.yaml"]


def test_aliases_are_counted_by_what_they_expand_to_not_by_their_number(tmp_path):
    many = tmp_path / "many.yaml"
    many.write_text("a: &a 1\nb: [" + ", ".join(["*a"] * 5_000) + "]\n")
    assert len(load_yaml(many)["b"]) == 5_000


def test_an_alias_inside_the_node_it_names_is_refused(tmp_path):
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &a [1, *a]\n")
    with pytest.raises(PdplanError, match="loop.yaml:1: invalid YAML: an alias refers to the node that holds it"):
        load_yaml(loop)


# --- manifests are untrusted: numbers JSON lacks, floats for integers ----------------------------

SENTINEL = 123457.0  # a value at the written precision, unique in the manifest's text


def resealed(source: Path, dest: Path, field: tuple, value: object = SENTINEL, text: str | None = None) -> Path:
    """``source`` with ``field`` (a key path) set to ``value`` and sealed again, as a user would
    edit and re-seal it; with ``text``, the sentinel is then replaced by that YAML in the file
    (seal cannot hash a NaN, so that manifest's seal is the one before the edit)."""
    doc = load_manifest(source)
    where = doc
    for key in field[:-1]:
        where = where[key]
    where[field[-1]] = value
    written = dump_yaml(seal(doc))
    if text is not None:
        assert written.count(str(SENTINEL)) == 1
        written = written.replace(str(SENTINEL), text)
    dest.write_text(written)
    return dest


def refused_everywhere(run_cli, good: Path, bad: Path, field: str, tmp_path: Path) -> None:
    """validate lists ``field`` (exit 1); diff, export and simulate --plan refuse ``bad`` in one line."""
    code, out, err = run_bounded(run_cli, "validate", bad)
    assert code == 1 and field in out and "Traceback" not in out + err, out + err
    for args in (("diff", good, bad), ("export", bad, "--format", "vllm", "--out", tmp_path / "deploy"),
                 ("simulate", TRACE, "--plan", bad)):
        code, out, err = run_bounded(run_cli, *args)
        one_error_line(code, out, err, f"{bad}", field)
    assert not (tmp_path / "deploy").exists()


@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf", "1.0e+400", "1e400"])
def test_a_number_json_lacks_in_a_resealed_manifest_is_a_violation_every_reader_refuses(text, manifests, run_cli,
                                                                                         tmp_path):
    """The field is one simulate --plan does not use: it refuses what validate cannot read anyway."""
    good = manifests["disaggregated"]
    bad = resealed(good, tmp_path / "bad.yaml", ("pools", 0, "capacity", "pool_rps"), text=text)
    refused_everywhere(run_cli, good, bad, "pools[0].capacity.pool_rps", tmp_path)


def test_a_float_where_an_integer_is_meant_is_a_violation_not_a_launch_flag_of_1_0(manifests, run_cli, tmp_path):
    good = manifests["disaggregated"]
    tp = load_manifest(good)["pools"][0]["tp"]
    bad = resealed(good, tmp_path / "bad.yaml", ("pools", 0, "tp"), float(tp))
    assert f"tp: {float(tp)}" in bad.read_text()
    refused_everywhere(run_cli, good, bad, "pools[0].tp", tmp_path)


def test_a_link_slower_than_the_lower_bound_is_a_violation(manifests, run_cli, tmp_path):
    good = manifests["disaggregated"]
    bad = resealed(good, tmp_path / "bad.yaml", ("transfer", "paths", 0, "bandwidth_gb_s"), 1e-300)
    refused_everywhere(run_cli, good, bad, "transfer.paths[0].bandwidth_gb_s", tmp_path)


def test_values_yaml_has_and_json_lacks_are_named_not_hashed():
    doc = {"kind": "DeploymentManifest", "metadata": {"created": __import__("datetime").date(2026, 1, 1)},
           "transfer": {"roles": {1: "kv_producer"}}, "rollback": [float("nan")], "big": 10**30}
    errors = dict(schema_errors(doc))
    assert "YAML date" in errors["metadata.created"]
    assert "keys must be strings" in errors["transfer.roles"]
    assert "finite" in errors["rollback[0]"]
    assert "integer of at most" in errors["big"]


def test_the_schema_states_the_bandwidth_bounds_of_limits():
    path = schema()["properties"]["transfer"]["properties"]["paths"]["items"]["properties"]["bandwidth_gb_s"]
    assert (path["minimum"], path["maximum"]) == (limits.MIN_BANDWIDTH_GB_S, limits.MAX_BANDWIDTH_GB_S)


# --- bandwidths in plan and cluster files --------------------------------------------------------

PLAN = ("pdplan_plan: 1\npools:\n"
        "  - {name: p, phase: prefill, model: llama2-70b, gpu: h100-80gb, tp: 4}\n"
        "  - {name: d, phase: decode, model: llama2-70b, gpu: h100-80gb, tp: 4}\n"
        "default_link: {bandwidth_gb_s: 1.0e-300}\n")


def test_a_plan_link_slower_than_the_lower_bound_is_refused_naming_it(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(PLAN)
    code, out, err = run_bounded(run_cli, "simulate", TRACE, "--plan", plan)
    one_error_line(code, out, err, f"{plan}:5: default_link.bandwidth_gb_s must be >= 0.001, got 1e-300")


def test_a_cluster_link_slower_than_the_lower_bound_is_refused_naming_it(tmp_path):
    from pdplan.hardware import load_cluster

    cluster = tmp_path / "c.yaml"
    cluster.write_text("nodes:\n  - {name: n, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, "
                       "inter_node_gb_s: 1.0e-300}\n")
    with pytest.raises(PdplanError, match=r"c.yaml:2: nodes\[0\].inter_node_gb_s must be >= 0.001, got 1e-300"):
        load_cluster(cluster)


# --- benchmark results given to profile calibrate ------------------------------------------------

DETAILED = {"max_concurrency": 2, "input_lens": [500, 900], "output_lens": [20, 30], "ttfts": [0.1, 0.2],
            "itls": [[0.02] * 19, [0.02] * 29], "errors": ["", ""]}
AGGREGATE = {"max_concurrency": 2, "completed": 10, "total_input_tokens": 5000, "total_output_tokens": 300,
             "mean_ttft_ms": 100.0, "mean_tpot_ms": 20.0}
GENAI = {"time_to_first_token": {"unit": "ms", "avg": 45.1}, "inter_token_latency": {"unit": "ms", "avg": 11.2},
         "input_sequence_length": {"avg": 550.0}, "output_sequence_length": {"avg": 128.0},
         "input_config": {"concurrency": 4}}

BAD_BENCH = {
    "fractional-input-lens": ("vllm-bench", DETAILED | {"input_lens": [500.5, 900]},
                              "input_lens must hold whole token counts in [1, 10,000,000], got '500.5'"),
    "integer-for-input-lens": ("vllm-bench", DETAILED | {"input_lens": 2}, "input_lens must be a list, got '2'"),
    "integer-for-errors": ("vllm-bench", DETAILED | {"errors": 2}, "errors must be a list"),
    "integer-for-itls": ("vllm-bench", DETAILED | {"itls": [5, 6]}, "itls[0] must be a list"),
    "huge-input-len": ("vllm-bench", DETAILED | {"input_lens": [1e15, 900]},
                       "input_lens must hold whole token counts in [1, 10,000,000], got '1000000000000000.0'"),
    "huge-mean-input": ("vllm-bench", AGGREGATE | {"total_input_tokens": 1e15},
                        "total_input_tokens gives 100,000,000,000,000 tokens per request"),
    "huge-genai-input": ("genai-perf", GENAI | {"input_sequence_length": {"avg": 1e12}},
                         "input_sequence_length.avg gives 1,000,000,000,000 tokens per request"),
    "a-billion-completed": ("vllm-bench", AGGREGATE | {"completed": 1e9},
                            "completed must be a whole number of requests in [1, 10,000,000], got '1000000000.0'"),
    "1e15-completed": ("vllm-bench", AGGREGATE | {"completed": 1e15}, "completed must be a whole number"),
    "fractional-completed": ("vllm-bench", AGGREGATE | {"completed": 10.5}, "completed must be a whole number"),
    "a-billion-genai-requests": ("genai-perf", GENAI | {"request_count": {"avg": 1e9}},
                                 "request_count.avg must be a whole number of requests"),
    "1e15-aiperf-requests": ("aiperf", GENAI | {"input_config": {"loadgen": {"concurrency": 2,
                                                                              "request_count": 1e15}}},
                             "input_config.loadgen.request_count must be a whole number of requests"),
}


@pytest.mark.parametrize("case", list(BAD_BENCH))
def test_a_benchmark_number_that_would_size_an_allocation_or_be_truncated_is_refused_naming_the_field(
        case, run_cli, tmp_path):
    fmt, doc, message = BAD_BENCH[case]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps(doc))
    code, out, err = run_in_bounded_memory(run_cli, "profile", "calibrate", PROFILE, "--bench", bench,
                                           "--format", fmt, "-o", tmp_path / "cal.yaml")
    one_error_line(code, out, err, f"{bench}: ", message)
    assert not (tmp_path / "cal.yaml").exists()


# --- what today's code wrote still reads ---------------------------------------------------------

def test_manifests_and_plan_files_written_before_still_read(manifests, run_cli):
    for manifest in manifests.values():
        code, out, err = run_bounded(run_cli, "validate", manifest)
        assert code == 0, out + err
    from pdplan.sim.planfile import load_plan

    for plan in sorted((ROOT / "examples").glob("plan_*.yaml")):
        assert load_plan(plan).pools
