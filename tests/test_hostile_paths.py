"""Every input path of every command, given what is not a file it can read (/dev/zero, a FIFO, a
folder, a name that does not exist), ends within seconds with exit 2 and one line naming it, and
writes nothing. The table below holds one working command line per command; each case swaps one
of its inputs for a hostile one. A path-typed parameter the table does not cover fails the
coverage test, so a new input cannot ship unchecked.
"""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path

import pytest
import typer
from test_hostile_input import CLUSTER, NATIVE, PLAN, PROFILE, ROOT, ROWS, SLO, bound, snapshot

GRID = "pdplan_grid: 1\ntrace: t.csv\nmodel: llama2-70b\ncluster: c.yaml\nvary:\n  rate: [1, 2]\n"
BENCH = json.dumps({"num_prompts": 3, "completed": 3, "max_concurrency": 1, "request_rate": "inf",
                    "input_lens": [100, 120, 140], "output_lens": [10, 12, 14], "ttfts": [0.1, 0.1, 0.1],
                    "itls": [[0.02] * 9, [0.02] * 11, [0.02] * 13], "errors": ["", "", ""]})
DISTSERVE = json.dumps({"facebook/opt-13b": {"1": {
    "decoding_large_small_bs_threshold": 95, "prefill": [18.1, 0.1, 7e-06], "decoding_smallbs": [19.9, 0.0006, 0.04],
    "decoding_largebs": [7.2, 0.0005, 0.16]}}})
MODEL = (ROOT / "pdplan" / "catalog" / "models" / "llama2-70b.yaml").read_text()
FILES = {"t.csv": NATIVE + ROWS, "c.yaml": CLUSTER, "m.yaml": MODEL, "slo.yaml": SLO, "p.yaml": PROFILE,
         "plan.yaml": PLAN, "g.yaml": GRID, "bench.json": BENCH, "d.json": DISTSERVE,
         "mnt.csv": "model,tp,pp,max_num_tokens\nfacebook/opt-13b,1,1,66144\n", "w.txt": "0\n10\n"}

# command: (argv with {slot} placeholders, {slot: file it stands for}); "manifest" is a real one.
COMMANDS = {
    "optimize": (["optimize", "{trace}", "--model", "{model}", "--profiles", "{profiles}", "--cluster",
                  "{cluster}", "--slo", "{slo}", "--windows", "{windows}", "--requests-per-probe", "100"],
                 {"trace": "t.csv", "model": "m.yaml", "profiles": "p.yaml", "cluster": "c.yaml",
                  "slo": "slo.yaml", "windows": "w.txt"}),
    "goodput": (["goodput", "{trace}", "--model", "{model}", "--gpu", "h100-80gb", "--tp", "4", "--phase",
                 "prefill", "--slo", "{slo}", "--profiles", "{profiles}"],
                {"trace": "t.csv", "model": "m.yaml", "slo": "slo.yaml", "profiles": "p.yaml"}),
    "simulate": (["simulate", "{trace}", "--plan", "{plan}", "--profiles", "{profiles}"],
                 {"trace": "t.csv", "plan": "plan.yaml", "profiles": "p.yaml"}),
    "validate": (["validate", "{manifest}", "--trace", "{trace}", "--profiles", "{profiles}", "--cluster",
                  "{cluster}"], {"manifest": "MANIFEST", "trace": "t.csv", "profiles": "p.yaml",
                                 "cluster": "c.yaml"}),
    "diff": (["diff", "{a}", "{b}"], {"a": "MANIFEST", "b": "MANIFEST"}),
    "export": (["export", "{manifest}", "--format", "vllm", "--out", "deploy"], {"manifest": "MANIFEST"}),
    "trace stats": (["trace", "stats", "{trace}"], {"trace": "t.csv"}),
    "trace transform": (["trace", "transform", "{trace}", "-o", "new.csv", "--rate", "2"], {"trace": "t.csv"}),
    "profile fit": (["profile", "fit", "{src}", "--format", "distserve", "--max-num-tokens", "{max_num_tokens}",
                     "--model", "{model}", "--gpu", "a100-80gb", "-o", "fit"],
                    {"src": "d.json", "max_num_tokens": "mnt.csv", "model": "m.yaml"}),
    "profile show": (["profile", "show", "{path}"], {"path": "p.yaml"}),
    "profile roofline": (["profile", "roofline", "--model", "{model}", "--gpu", "h100-80gb", "--tp", "1",
                          "--pp", "1"], {"model": "m.yaml"}),
    "profile compose": (["profile", "compose", "--model", "{model}", "--gpu", "h100-80gb", "--tp", "1"],
                        {"model": "m.yaml"}),
    "profile calibrate": (["profile", "calibrate", "{profile_file}", "--bench", "{bench}", "--plan", "{plan}",
                           "--decode-profile", "{decode_profile}", "-o", "cal.yaml", "--decode-output", "dcal.yaml"],
                          {"profile_file": "p.yaml", "bench": "bench.json", "plan": "plan.yaml",
                           "decode_profile": "p.yaml"}),
    "sensitivity grid": (["sensitivity", "grid", "{spec}", "--trace", "{trace}", "--model", "{model}",
                          "--cluster", "{cluster}", "--profiles", "{profiles}", "--out", "grid.csv"],
                         {"spec": "g.yaml", "trace": "t.csv", "model": "m.yaml", "cluster": "c.yaml",
                          "profiles": "p.yaml"}),
}
#: Inputs that may be a folder (a folder of profiles), so a folder is no hostile value for them.
FOLDERS_WELCOME = {"profiles"}
#: Parameters typed ``str`` that name a file when they end in .yaml (or, for windows, are not a length).
PATH_STRINGS = {"model", "windows"}
#: Path-typed parameters that are outputs, or caches pdplan creates: another test's business.
OUTPUTS = {"out", "output", "decode_output", "plot", "cache_dir"}
HOSTILE = ("fifo", "dev-zero", "folder", "missing")


def hostile(kind: str, workdir: Path, original: str) -> str:
    """A path of ``kind`` standing where ``original`` was (same extension, so it is read as one)."""
    if kind == "dev-zero":
        return "/dev/zero"
    name = f"hostile-{kind}{Path(original).suffix or '.yaml'}"
    if kind == "fifo":
        os.mkfifo(workdir / name)
    elif kind == "folder":
        (workdir / name).mkdir()
    return name


CASES = [(command, slot, kind) for command, (_, slots) in COMMANDS.items() for slot in slots
         for kind in HOSTILE if not (kind == "folder" and slot in FOLDERS_WELCOME)]


@pytest.mark.parametrize("command,slot,kind", CASES, ids=[f"{c}-{s}-{k}" for c, s, k in CASES])
def test_an_input_that_is_no_readable_file_is_one_error_line_naming_it(command, slot, kind, run_cli, tmp_path,
                                                                       monkeypatch, manifests):
    workdir = tmp_path / "work"
    workdir.mkdir()
    for name, text in FILES.items():
        (workdir / name).write_text(text)
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("PDPLAN_CACHE_DIR", str(tmp_path / "cache"))
    argv, slots = COMMANDS[command]
    values = {s: str(manifests["colocated"]) if f == "MANIFEST" else f for s, f in slots.items()}
    values[slot] = hostile(kind, workdir, slots[slot])
    before = snapshot(workdir)

    with bound(20, f"{command} with {kind} as {slot}"):
        code, out, err = run_cli(*(part.format(**values) for part in argv))
    assert code == 2, err
    assert err.startswith("Error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    assert values[slot] in err, err
    assert snapshot(workdir) == before


def _path_inputs(callback) -> set[str]:
    """Parameters of a command that name input files: typed Path (alone, optional or in a list),
    or one of PATH_STRINGS."""
    found = set()
    for name, hint in typing.get_type_hints(callback).items():
        parts = {hint, *typing.get_args(hint), *(a for h in typing.get_args(hint) for a in typing.get_args(h))}
        if (Path in parts or name in PATH_STRINGS) and name not in OUTPUTS:
            found.add(name)
    return found


def test_the_table_covers_every_input_path_of_every_command():
    from pdplan.cli import app

    def commands(group, prefix=()):
        for name, sub in group.commands.items():
            if hasattr(sub, "commands"):
                yield from commands(sub, prefix + (name,))
            else:
                yield " ".join(prefix + (name,)), sub.callback

    for command, callback in commands(typer.main.get_command(app)):
        inputs = _path_inputs(callback)
        if inputs:
            assert command in COMMANDS, f"{command} reads {sorted(inputs)}: add it to COMMANDS"
            assert inputs <= set(COMMANDS[command][1]), (command, inputs - set(COMMANDS[command][1]))
