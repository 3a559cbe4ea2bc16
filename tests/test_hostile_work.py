"""Hostile input against the work itself: no output lands on an input, no request makes pdplan work
or allocate without bound, Ctrl-C ends every command the same way, and messages say what is wrong.

Every case ends within its bound with exit 2 (130 for Ctrl-C), one stderr line naming the file or
flag, no traceback, and no file created or changed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from test_hostile_input import NATIVE, ROWS, bound, make, refused, snapshot

CLUSTER = ("nodes:\n  - {name: n, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, inter_node_gb_s: 50, "
           "count: 2}\n")
#: A model YAML that loads (its parameter count agrees with its geometry).
MODEL = ("name: toy\nlayers: 4\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\nffn: 160\nvocab: 100\n"
         "parameters: 176640\nmlp_matrices: 3\n")
TRACE = NATIVE + ROWS
#: optimize on the toy trace with one TP and PP, so that a run that does get to work stays short.
OPT = ("optimize", "t.csv", "--requests-per-probe", "100", "--tp", "4", "--pp", "1")


@pytest.fixture
def work(tmp_path, monkeypatch) -> Path:
    """An empty working folder, the cache beside it."""
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PDPLAN_CACHE_DIR", str(tmp_path / "cache"))
    return folder


# --- an infeasible problem names what binds --------------------------------------------------------

@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory) -> Path:
    """One result cache for the cases that do plan: the toy trace's shapes are measured once."""
    return tmp_path_factory.mktemp("cache")


@pytest.mark.parametrize("flags, binding", [
    (("--max-gpus", "1"), "the GPU, cost or power budget is too small"),
    (("--max-gpus", "1", "--objective", "goodput"), "the GPU, cost or power budget is too small"),
    (("--cluster", "c.yaml"), "the cluster's node counts cannot hold enough instances"),
    (("--cluster", "c.yaml", "--objective", "goodput"), "the cluster's node counts cannot hold enough instances"),
], ids=["one-gpu-budget", "one-gpu-budget-for-goodput", "no-nodes", "no-nodes-for-goodput"])
def test_an_infeasible_problem_is_one_line_naming_the_binding_constraint(run_cli, work, shared_cache, monkeypatch,
                                                                        flags, binding):
    monkeypatch.setenv("PDPLAN_CACHE_DIR", str(shared_cache))
    make(work, {"t.csv": TRACE, "c.yaml": CLUSTER.replace("count: 2", "count: 0")})
    refused(run_cli, work, OPT + flags, [binding])


@pytest.mark.parametrize("flags, message", [
    (("--max-gpus", "0"), "--max-gpus must be >= 1, got 0"),
    (("--max-cost", "0"), "--max-cost must be > 0 and <= 1,000,000,000, got 0.0"),
    (("--max-power", "0"), "--max-power must be > 0 and <= 10,000,000,000, got 0.0"),
], ids=["gpus", "cost", "power"])
def test_a_budget_of_nothing_is_refused_before_any_work(run_cli, work, flags, message):
    make(work, {"t.csv": TRACE})
    refused(run_cli, work, OPT + flags, [message], seconds=5)


# --- no output lands on an input ------------------------------------------------------------------

#: Output flags of every command that writes (trace synth reads nothing): "file" or "folder".
WRITES = {
    "optimize": {"--out": "file", "--plot": "folder"},
    "goodput": {"--plot": "file"},
    "simulate": {"--out": "file"},
    "trace transform": {"--out": "file"},
    "profile fit": {"--output": "file"},
    "profile roofline": {"--output": "file"},
    "profile compose": {"--output": "file"},
    "profile calibrate": {"--output": "file"},
    "sensitivity grid": {"--out": "file", "--plot": "file"},
}
#: A grid file that names every kind of input itself, and varies two dimensions (for --plot).
OWN_GRID = ("pdplan_grid: 1\ntrace: t.csv\nmodel: m.yaml\ncluster: c.yaml\nprofiles: p.yaml\n"
            "vary:\n  rate: [1, 2]\n  bandwidth: [10, 100]\n")
#: The same file under another name: itself, a hard link to it, a symlink to it, a symlink to that.
ALIASES = ("same-path", "hard-link", "symlink", "symlink-to-a-symlink")


def alias(kind: str, work: Path, name: str) -> str:
    """A name for ``name`` in ``work`` of ``kind`` (made in ``work`` before the snapshot)."""
    if kind == "same-path":
        return name
    made = f"{kind}-{name.replace('/', '_')}"
    if kind == "hard-link":
        os.link(work / name, work / made)
    elif kind == "symlink":
        os.symlink(name, work / made)
    else:
        os.symlink(name, work / "hop")
        os.symlink("hop", work / made)
    return made


def _writer_cases() -> list[tuple]:
    from test_hostile_paths import COMMANDS

    cases = [(command, slot, flag) for command, flags in WRITES.items() for flag, target in flags.items()
             for slot in COMMANDS[command][1] if target == "file"]
    return cases + [("sensitivity grid (its own files)", slot, flag)
                    for slot in ("trace", "model", "cluster", "profiles") for flag in ("--out", "--plot")]


WRITER_CASES = _writer_cases()


@pytest.mark.parametrize("command,slot,flag", WRITER_CASES, ids=[" ".join(c) for c in WRITER_CASES])
def test_an_output_naming_an_input_under_any_name_is_refused_before_any_work(run_cli, work, command, slot, flag):
    from test_hostile_paths import COMMANDS, FILES

    make(work, {**FILES, "own.yaml": OWN_GRID})
    if command.endswith("(its own files)"):
        argv, slots = ["sensitivity", "grid", "own.yaml"], {"trace": "t.csv", "model": "m.yaml", "cluster": "c.yaml",
                                                             "profiles": "p.yaml"}
    else:
        argv, slots = COMMANDS[command]
    for kind in ALIASES:
        target = alias(kind, work, slots[slot])
        args = [part.format(**slots) for part in argv] + [flag, target]  # the last of a flag given twice wins
        folder = command == "profile fit" and not target.endswith(".yaml")  # fit writes a folder unless -o is .yaml
        refused(run_cli, work, tuple(args), [f"{flag} must name a folder, got a file" if folder
                                             else f"{flag} would overwrite the input"], seconds=20)


def test_every_command_that_writes_has_its_outputs_checked_against_its_inputs():
    from test_hostile_paths import COMMANDS

    writers = {c for c, (argv, _) in COMMANDS.items() if {"-o", "--out", "--output", "--plot"} & set(argv)}
    assert writers - {"export"} <= set(WRITES), writers - set(WRITES)  # export's --out is a folder of files


@pytest.mark.parametrize("kind", ["same-path", "symlink"])
def test_a_plot_folder_that_is_the_profiles_folder_is_refused(run_cli, work, kind):
    from test_hostile_paths import FILES

    make(work, {"t.csv": TRACE, "profiles": "DIR"})
    (work / "profiles" / "p.yaml").write_text(FILES["p.yaml"])
    refused(run_cli, work, OPT + ("--profiles", "profiles", "--plot", alias(kind, work, "profiles")),
            ["--plot would overwrite the input profiles"])


@pytest.mark.parametrize("args", [OPT + ("--profiles", "profiles", "--out", "profiles/p.yaml"),
                                  ("goodput", "t.csv", "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                                   "--phase", "prefill", "--profiles", "profiles", "--plot", "profiles/p.yaml"),
                                  ("sensitivity", "grid", "--trace", "t.csv", "--vary", "rate=1", "--profiles",
                                   "profiles", "--out", "profiles/p.yaml")], ids=["optimize", "goodput", "grid"])
def test_an_output_onto_a_profile_in_the_profiles_folder_is_refused(run_cli, work, args):
    from test_hostile_paths import FILES

    make(work, {"t.csv": TRACE, "profiles": "DIR"})
    (work / "profiles" / "p.yaml").write_text(FILES["p.yaml"])
    refused(run_cli, work, args, ["would overwrite the input profiles/p.yaml"])


def test_a_windows_file_that_is_a_fifo_is_not_a_regular_file(run_cli, work):
    make(work, {"t.csv": TRACE, "w": "FIFO"})
    refused(run_cli, work, OPT + ("--windows", "w"), ["w: windows file is not a regular file"])


def test_a_windows_length_that_names_no_file_is_still_a_length(run_cli, work):
    from pdplan.schedule.windows import window_starts, windows_file

    assert windows_file("1h") is None and window_starts("30m", 3600.0) == [0.0, 1800.0]
    make(work, {"1h": "0\n10\n"})
    assert windows_file("1h") == Path("1h")  # a file of that name is what --windows means


# --- every piece of work is bounded before it starts ----------------------------------------------

def test_six_dimensions_of_a_hundred_values_are_refused_before_a_cell_is_listed(run_cli, work):
    make(work, {"t.csv": TRACE})
    values = ",".join(str(v) for v in range(1, 101))
    vary = [part for name in ("bandwidth", "prompt_scale", "output_scale", "rate", "route_ms", "ttft_scale")
            for part in ("--vary", f"{name}={values}")]
    started = time.perf_counter()
    refused(run_cli, work, ("sensitivity", "grid", "--trace", "t.csv", *vary),
            ["the grid has 1,000,000,000,000 cells", "at most 1,000"], seconds=10)
    assert time.perf_counter() - started < 1.0


def test_a_grid_file_of_too_many_cells_is_refused_like_the_flags(run_cli, work):
    lists = "".join(f"  {name}: [{', '.join(str(v) for v in range(1, 33))}]\n"
                    for name in ("bandwidth", "prompt_scale"))
    make(work, {"t.csv": TRACE, "g.yaml": f"pdplan_grid: 1\ntrace: t.csv\nvary:\n{lists}"})
    refused(run_cli, work, ("sensitivity", "grid", "g.yaml"), ["the grid has 1,024 cells", "at most 1,000"])


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_an_unreachable_ray_address_is_one_line_within_seconds(run_cli, work, address):
    make(work, {"t.csv": TRACE})
    started = time.perf_counter()
    refused(run_cli, work, ("sensitivity", "grid", "--trace", "t.csv", "--vary", "rate=1,2", "--executor", "ray",
                            "--address", address), [f"--address {address}: no Ray cluster is reachable there"],
            seconds=15)
    assert time.perf_counter() - started < 10  # limits.RAY_CONNECT_S, not Ray's minutes of retries


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1", "--address must read HOST:PORT or ray://HOST:PORT"),
    ("ray://127.0.0.1:99999", "--address must read HOST:PORT or ray://HOST:PORT"),
])
def test_a_ray_address_that_is_no_host_and_port_is_named(run_cli, work, address, message):
    make(work, {"t.csv": TRACE})
    refused(run_cli, work, ("sensitivity", "grid", "--trace", "t.csv", "--vary", "rate=1,2", "--executor", "ray",
                            "--address", address), [message])


def test_an_address_without_ray_is_refused_before_any_work(run_cli, work):
    make(work, {"t.csv": "FIFO"})  # the trace is never opened
    refused(run_cli, work, ("sensitivity", "grid", "--trace", "t.csv", "--vary", "rate=1,2", "--address",
                            "127.0.0.1:1"), ["--address applies to --executor ray"])


def test_a_day_curve_far_shorter_than_the_trace_is_refused_before_allocating(run_cli, work):
    started = time.perf_counter()
    refused(run_cli, work, ("trace", "synth", "--requests", "1000000", "--rate", "1", "--prompt", "const:5",
                            "--output", "const:5", "--diurnal", "2", "--period", "0.001", "-o", "x.csv"),
            ["--period 0.001 s repeats the day curve about 1,000,000,000 times", "at most 1,000"], seconds=10)
    assert time.perf_counter() - started < 1.0


def test_a_day_curve_of_a_day_still_synthesises(run_cli, work):
    code, out, err = run_cli("trace", "synth", "--requests", "200", "--rate", "0.01", "--prompt", "const:5",
                             "--output", "const:5", "--diurnal", "3", "--period", "86400", "-o", "x.csv")
    assert code == 0, err
    assert (work / "x.csv").read_text().count("\n") == 201


# --- messages --------------------------------------------------------------------------------------

def test_a_grid_files_seed_bound_is_printed_in_full(run_cli, work):
    make(work, {"t.csv": TRACE, "g.yaml": "pdplan_grid: 1\ntrace: t.csv\nseed: 3000000000\nvary:\n  rate: [1, 2]\n"})
    refused(run_cli, work, ("sensitivity", "grid", "g.yaml"),
            ["g.yaml:3: seed must be <= 2,147,483,647, got 3000000000"])


@pytest.mark.parametrize("args", [("optimize", "t.csv", "--seed", "3000000000"),
                                  ("sensitivity", "grid", "--trace", "t.csv", "--vary", "rate=1", "--seed",
                                   "3000000000")], ids=["optimize", "sensitivity-grid"])
def test_a_seed_flags_bound_is_printed_in_full(run_cli, work, args):
    make(work, {"t.csv": TRACE})
    refused(run_cli, work, args, ["--seed must be between 0 and 2,147,483,647, got 3000000000"])


# --- Ctrl-C: one line, exit 130, nothing written, at any moment -----------------------------------

SYNTH = ("trace", "synth", "--requests", "1000", "--rate", "1", "--prompt", "const:5", "--output", "const:5",
         "-o", "x.csv")
ENTRIES = {"console-script": [str(Path(sys.executable).with_name("pdplan"))],
           "python-m": [sys.executable, "-m", "pdplan"]}


def mapped(pid: int, library: str) -> bool:
    """Whether the process has loaded a shared library whose path holds ``library``."""
    try:
        return library in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False


def interrupt(argv: list[str], work: Path, when, cache: Path) -> tuple[int, str, str]:
    """Start ``argv`` in ``work``, send SIGINT once ``when(process)`` holds, and return its exit
    code, stdout and stderr."""
    env = {**os.environ, "PDPLAN_CACHE_DIR": str(cache)}
    process = subprocess.Popen(argv, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while not when(process):
            assert process.poll() is None, "the command ended before the moment came"
            assert time.monotonic() < deadline, "the moment never came"
            time.sleep(0.005)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return process.returncode, out.decode(), err.decode()


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps to find the moment")
@pytest.mark.parametrize("entry", list(ENTRIES))
def test_ctrl_c_while_the_command_still_imports_is_one_line_and_exit_130(work, tmp_path, entry):
    if not Path(ENTRIES[entry][0]).exists():
        pytest.skip("pdplan is not installed as a console script beside this Python")
    before = snapshot(work)
    code, out, err = interrupt(ENTRIES[entry] + list(SYNTH), work, lambda p: mapped(p.pid, "numpy"),
                               tmp_path / "cache")
    assert (code, out, err) == (130, "", "Interrupted\n")
    assert snapshot(work) == before


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/PID/maps to find the moment")
def test_ctrl_c_in_the_middle_of_an_optimize_is_one_line_and_exit_130_and_writes_nothing(work, tmp_path):
    make(work, {"t.csv": TRACE})
    before = snapshot(work)
    cache = tmp_path / "cache"

    def working(process) -> bool:  # a shape's goodput is in the cache: the search is under way
        return cache.is_dir() and any(p.is_file() for p in cache.rglob("*"))

    code, out, err = interrupt(ENTRIES["python-m"] + list(OPT) + ["--out", "plan.yaml", "--plot", "plots"], work,
                               working, cache)
    assert (code, out, err) == (130, "", "Interrupted\n")
    assert snapshot(work) == before


def test_ctrl_c_ends_a_running_solve_at_once_instead_of_only_the_solve():
    """CP-SAT's own Ctrl-C handling would end the solve and let pdplan go on with what it found."""
    from ortools.sat.python import cp_model

    from pdplan.interrupts import Interrupted, interruptible
    from pdplan.placement.solve import interruptible_solve

    model = cp_model.CpModel()
    xs = [model.new_int_var(0, 1000, f"x{i}") for i in range(60)]
    for i in range(59):
        model.add(xs[i] * (i % 7 + 3) + xs[i + 1] * (i % 5 + 2) != 1000 + i)
    model.add_all_different(xs)
    model.maximize(sum(x * (i * 37 % 11) for i, x in enumerate(xs)))  # seconds to prove, at the least
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = 60
    solver.parameters.num_workers = 1
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    started = time.perf_counter()
    with bound(30, "an interrupted solve"), interruptible(), pytest.raises(Interrupted):
        timer.start()
        interruptible_solve(solver, model)
    timer.join()
    assert time.perf_counter() - started < 5


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc to find the moment")
def test_ctrl_c_during_a_grid_ends_its_running_cells_instead_of_waiting_for_them(work, tmp_path):
    """Leaving the process pool would wait for every cell in flight; Ctrl-C ends them."""
    make(work, {"t.csv": TRACE})
    before = snapshot(work)

    def cells_running(process) -> bool:  # a worker has loaded the solver: a cell is under way
        return any(mapped(child, "ortools") for child in children(process.pid))

    started = []
    argv = ENTRIES["python-m"] + ["sensitivity", "grid", "--trace", "t.csv", "--vary", "rate=1,2", "--jobs", "2",
                                  "--out", "grid.csv"]
    code, out, err = interrupt(argv, work, lambda p: cells_running(p) and not started.append(time.monotonic()),
                               tmp_path / "cache")
    assert time.monotonic() - started[0] < 15
    assert (code, err) == (130, "Interrupted\n")
    assert snapshot(work) == before


def test_a_grid_bandwidth_below_a_megabyte_per_second_is_refused_like_a_cluster_link(run_cli, work):
    make(work, {"t.csv": TRACE})
    refused(run_cli, work, ("sensitivity", "grid", "--trace", "t.csv", "--vary", "bandwidth=1e-300,1", "--out",
                            "g.csv"), ["--vary bandwidth: values must be in [0.001, 1,000,000], got 1e-300"])


@pytest.mark.parametrize("kind", ALIASES)
def test_simulate_refuses_an_output_onto_the_model_yaml_its_plan_names(run_cli, work, kind):
    from test_hostile_paths import FILES

    make(work, {"t.csv": TRACE, "m.yaml": FILES["m.yaml"], "plan.yaml": FILES["plan.yaml"].replace(
        "model: llama2-70b", "model: m.yaml")})
    refused(run_cli, work, ("simulate", "t.csv", "--plan", "plan.yaml", "--out", alias(kind, work, "m.yaml")),
            ["--out would overwrite the input m.yaml"])
