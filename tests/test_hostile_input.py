"""Hostile input, every kind and every class: each case ends within its bound with exit 2, one
stderr line naming the file (and line and field where there is one), no traceback, and no file
created or changed. Every bug found later adds its case here.

Classes: unbounded reads and work, numbers at the edges, parser internals, outputs that would
clobber, messages. Kinds: a trace in each format, a profile (YAML, Splitwise CSV, DistServe JSON,
points CSV, Dynamo npz), a cluster, a plan, a model YAML, an SLO YAML, flags.
"""

from __future__ import annotations

import hashlib
import io
import os
import signal
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
NATIVE = "arrival_s,prompt_tokens,output_tokens\n"
ROWS = "".join(f"{i * 0.5},{100 + i},{10 + i % 5}\n" for i in range(40))
CLUSTER = ("nodes:\n  - {name: n, gpu: h100-80gb, gpus_per_node: 8, intra_node_gb_s: 450, inter_node_gb_s: 50, "
           "count: 2}\n")
PLAN = ("pdplan_plan: 1\npools:\n"
        "  - {name: p, phase: prefill, model: llama2-70b, gpu: h100-80gb, tp: 4}\n"
        "  - {name: d, phase: decode, model: llama2-70b, gpu: h100-80gb, tp: 4}\n"
        "default_link: {bandwidth_gb_s: 25}\n")
MODEL = ("name: toy\nlayers: 4\nhidden: 64\nq_heads: 8\nkv_heads: 2\nhead_dim: 8\nffn: 160\nvocab: 100\n"
         "parameters: 110592\nmlp_matrices: 3\n")
SLO = "objectives:\n  - {metric: ttft, threshold_ms: 1000, attainment: 0.9}\n"
PROFILE = (ROOT / "pdplan" / "data" / "profiles" / "llama2-70b_h100-80gb_tp4_pp1.yaml").read_text()
POINTS = "phase,tp,pp,batch_size,prompt_tokens,context_tokens,latency_ms\n" + "".join(
    f"prefill,4,1,1,{n},,{10 + n / 100}\n" for n in (128, 256, 512, 1024, 2048)) + "".join(
    f"decode,4,1,{b},,{b * 512},{20 + b / 10}\n" for b in (1, 2, 4, 8, 16))
SPLITWISE = "model,hardware,prompt_size,batch_size,token_size,prompt_time,token_time,e2e_time,tensor_parallel\n"


def deep_json(depth: int = 100_000) -> str:
    return '{"timestamp": ' + "[" * depth + "]" * depth + ', "input_length": 5, "output_length": 5, "hash_ids": []}\n'


def npz_bomb() -> bytes:
    """A small archive that unpacks to 800 MB of zeros."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (100_000_000,)})
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        with archive.open("prefill_isl.npy", "w", force_zip64=True) as member:
            member.write(header.getvalue())
            chunk = bytes(1 << 20)
            for _ in range(800):
                member.write(chunk)
    return buffer.getvalue()


def alias_bomb() -> str:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 200):
        lines.append(f"a{i}: &a{i} [" + ", ".join(["*a" if i == 1 else f"*a{i - 1}"] * 10) + "]")
    return "\n".join(lines) + "\n"


OPT = ("optimize", "t.csv", "--requests-per-probe", "100")
SIM = ("simulate", "t.csv", "--plan", "plan.yaml")
GOOD = ("goodput", "t.csv", "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4", "--phase", "prefill")

# id: (command, files {name: text | bytes | "FIFO" | "DIR"}, fragments the one error line must hold)
CASES = {
    # --- unbounded reads and work --------------------------------------------------------------
    "trace-fifo": (("trace", "stats", "t.csv"), {"t.csv": "FIFO"}, ["t.csv: trace is not a regular file"]),
    "trace-directory": (("trace", "stats", "t.csv"), {"t.csv": "DIR"}, ["t.csv: trace is a directory"]),
    "trace-over-its-limit": (("trace", "stats", "big.csv"), {"big.csv": "LIMIT"},
                             ["big.csv: trace is ", "over the 4 GiB a trace may be"]),
    "plan-as-dev-zero": (SIM[:3] + ("/dev/zero",), {"t.csv": NATIVE + ROWS},
                         ["/dev/zero: plan file is not a regular file"]),
    "cluster-fifo": (OPT + ("--cluster", "c.yaml"), {"t.csv": NATIVE + ROWS, "c.yaml": "FIFO"},
                     ["c.yaml: cluster file is not a regular file"]),
    "profile-as-dev-zero": (("profile", "show", "/dev/zero"), {}, ["/dev/zero: profile is not a regular file"]),
    "slo-alias-bomb": (GOOD + ("--slo", "slo.yaml"), {"t.csv": NATIVE + ROWS, "slo.yaml": alias_bomb()},
                       ["slo.yaml:", "invalid YAML: the document holds more than 2,000,000 values once its "
                        "aliases are expanded"]),
    "dynamo-npz-bomb": (("profile", "fit", "raw_data.npz", "--format", "dynamo", "--model", "llama2-70b",
                         "--gpu", "h100-80gb", "--tp", "4", "-o", "out"), {"raw_data.npz": "NPZBOMB"},
                        ["raw_data.npz: unpacks to 800 MiB, over the 256 MiB an archive may hold"]),
    "grid-of-a-billion": (GOOD + ("--grid", "1000000000"), {"t.csv": NATIVE + ROWS},
                          ["--grid must be between 0 and 1,000, got 1000000000"]),
    "synth-a-billion-requests": (("trace", "synth", "--requests", "1000000000", "--rate", "1", "--prompt",
                                  "const:5", "--output", "const:5", "-o", "x.csv"), {},
                                 ["--requests must be between 1 and 10,000,000"]),
    "requests-per-probe-huge": (OPT[:2] + ("--requests-per-probe", "1000000000"), {"t.csv": NATIVE + ROWS},
                                ["--requests-per-probe must be between 2 and 1,000,000"]),
    # --- numbers at the edges ------------------------------------------------------------------
    "prompt-of-2-to-the-63": (SIM, {"t.csv": NATIVE + f"0,{2**63 - 1},5\n1,5,5\n", "plan.yaml": PLAN},
                              ["t.csv:2: prompt_tokens must be an integer from 1 to 10,000,000"]),
    "arrival-1e308": (("trace", "stats", "t.csv"), {"t.csv": NATIVE + "0,5,5\n1e308,5,5\n"},
                      ["t.csv:3: arrival_s must be a finite number of seconds"]),
    "azure-tokens-beyond-a-request": (("trace", "stats", "t.csv"),
                                      {"t.csv": "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                                "2023-11-16 18:15:46.6805900,100000000,5\n"},
                                      ["t.csv:2: ContextTokens must be an integer from 1 to 10,000,000"]),
    "mooncake-timestamp-of-5000-digits": (("trace", "stats", "t.jsonl"),
                                          {"t.jsonl": '{"timestamp": ' + "9" * 5000 + ', "input_length": 5, '
                                                      '"output_length": 5, "hash_ids": []}\n'},
                                          ["t.jsonl:1: invalid JSON: a number has more than 4,300 digits"]),
    "target-rate-1e308": (OPT + ("--target-rate", "1e308"), {"t.csv": NATIVE + ROWS},
                          ["--target-rate must be > 0 and <= 1,000,000, got 1e+308"]),
    "cluster-pue-1e308": (OPT + ("--cluster", "c.yaml"),
                          {"t.csv": NATIVE + ROWS, "c.yaml": CLUSTER + "pue: 1.0e+308\n"},
                          ["c.yaml:3: pue must be <= 10, got 1e+308"]),
    "cluster-price-1e308": (OPT + ("--cluster", "c.yaml"),
                            {"t.csv": NATIVE + ROWS, "c.yaml": CLUSTER + "prices: {h100-80gb: 1.0e+308}\n"},
                            ["c.yaml:3: prices.h100-80gb must be <= 10,000"]),
    "cluster-node-count-2-to-the-60": (OPT + ("--cluster", "c.yaml"),
                                       {"t.csv": NATIVE + ROWS,
                                        "c.yaml": CLUSTER.replace("count: 2", f"count: {2**60}")},
                                       ["c.yaml:2: nodes[0].count must be <= 1,000,000"]),
    "budget-1e308": (OPT + ("--max-cost", "1e308"), {"t.csv": NATIVE + ROWS},
                     ["--max-cost must be > 0 and <= 1,000,000,000"]),
    "profile-kv-capacity-1e308": (("profile", "show", "p.yaml"),
                                  {"p.yaml": PROFILE.replace("kv_capacity_tokens: 522726",
                                                             "kv_capacity_tokens: 1.0e+308")},
                                  ["p.yaml:6: kv_capacity_tokens must be an integer, got 1e+308"]),
    "profile-latency-1e308": (("profile", "show", "p.yaml"),
                              {"p.yaml": PROFILE.replace("pieces_ms:\n    - [",
                                                         "pieces_ms:\n    - [1e308, 0, 0]\n    - [", 1)},
                              ["p.yaml:", "prefill.segments[0].pieces_ms coefficients must be finite numbers"]),
    "ttft-inf-for-goodput": (GOOD + ("--ttft", "inf"), {"t.csv": NATIVE + ROWS},
                             ["--ttft must be a duration such as 2s, 50ms or 0.5 (seconds), got 'inf'"]),
    "ttft-inf-for-simulate": (SIM + ("--ttft", "inf"), {"t.csv": NATIVE + ROWS, "plan.yaml": PLAN},
                              ["--ttft must be a duration such as 2s"]),
    "roofline-overhead-inf": (("profile", "roofline", "--model", "llama2-70b", "--gpu", "h100-80gb", "--tp", "4",
                               "--pp", "1", "--layer-overhead-us", "inf"), {},
                              ["--layer-overhead-us must be between 0 and 1,000,000, got inf"]),
    "seed-of-24-digits": (OPT + ("--seed", "123456789012345678901234"), {"t.csv": NATIVE + ROWS},
                          ["--seed must be between 0 and 2,147,483,647"]),
    "plan-bandwidth-inf": (SIM, {"t.csv": NATIVE + ROWS, "plan.yaml": PLAN.replace("25}", ".inf}")},
                           ["plan.yaml:5: default_link.bandwidth_gb_s must be a finite number"]),
    "plan-tp-10-to-the-30": (SIM, {"t.csv": NATIVE + ROWS, "plan.yaml": PLAN.replace("tp: 4}", f"tp: {10**30}}}", 1)},
                             ["plan.yaml:3: pools[0].tp must be <= 72"]),
    "model-with-a-million-layers": (("profile", "roofline", "--model", "m.yaml", "--gpu", "h100-80gb", "--tp", "1",
                                     "--pp", "1"), {"m.yaml": MODEL.replace("layers: 4", "layers: 1000000")},
                                    ["m.yaml:2: layers must be <= 10,000"]),
    "model-integer-of-5000-digits": (("profile", "roofline", "--model", "m.yaml", "--gpu", "h100-80gb", "--tp", "1",
                                      "--pp", "1"), {"m.yaml": MODEL.replace("vocab: 100", "vocab: " + "9" * 5000)},
                                     ["m.yaml: invalid YAML:"]),
    "model-kv-bytes-beyond-int64": (("profile", "roofline", "--model", "m.yaml", "--gpu", "h100-80gb", "--tp", "1",
                                     "--pp", "1"), {"m.yaml": MODEL.replace("layers: 4", "layers: 10000").replace(
                                         "q_heads: 8\nkv_heads: 2\nhead_dim: 8",
                                         "q_heads: 65536\nkv_heads: 65536\nhead_dim: 16384")},
                                    ["m.yaml:5: kv_heads gives 42,949,672,960,000 KV bytes per token, more than the "
                                     "4,294,967,296 pdplan plans for"]),
    "slo-threshold-1e308": (GOOD + ("--slo", "slo.yaml"), {"t.csv": NATIVE + ROWS,
                                                           "slo.yaml": SLO.replace("1000", "1.0e+308")},
                            ["slo.yaml:2: objectives[0].threshold_ms must be <= 1,000,000,000"]),
    "slo-attainment-nan": (GOOD + ("--slo", "slo.yaml"), {"t.csv": NATIVE + ROWS,
                                                          "slo.yaml": SLO.replace("0.9}", ".nan}")},
                           ["slo.yaml:2: objectives[0].attainment must be a finite number"]),
    # --- parser internals ------------------------------------------------------------------------
    "bare-cr-line-ends": (("trace", "stats", "t.csv"), {"t.csv": (NATIVE + ROWS).replace("\n", "\r")},
                          ["t.csv:1: lines end in a bare carriage return"]),
    "field-of-300-kb": (("trace", "stats", "t.csv"), {"t.csv": NATIVE + "0,5,5\n1," + "7" * 300_000 + ",5\n"},
                        ["t.csv:3: cannot read the line as CSV: field larger than field limit (131072)"]),
    "quoted-field-of-300-kb": (("trace", "stats", "t.csv"),
                               {"t.csv": NATIVE + '0,5,5\n1,"' + "7" * 300_000 + '",5\n'},
                               ["t.csv:3: "]),
    "json-nested-100k-deep": (("trace", "stats", "t.jsonl"), {"t.jsonl": deep_json()},
                              ["t.jsonl:1: invalid JSON: nested too deeply"]),
    "yaml-nested-100k-deep": (SIM[:3] + ("deep.yaml",), {"t.csv": NATIVE + ROWS,
                                                        "deep.yaml": "pools: " + "[" * 100_000 + "]" * 100_000 + "\n"},
                              ["deep.yaml: invalid YAML: nested too deeply"]),
    "full-width-digits": (("trace", "stats", "t.csv"), {"t.csv": NATIVE + "0,５,5\n"},
                          ["t.csv:2: prompt_tokens must be an integer from 1 to 10,000,000, got '５'"]),
    "header-with-a-cyrillic-a": (("trace", "stats", "t.csv"), {"t.csv": NATIVE.replace("arrival", "arrivаl") + ROWS},
                                 ["t.csv:1: column 'arrivаl_s' is one character away from 'arrival_s' "
                                  "(U+0430 CYRILLIC SMALL LETTER A at position 6)"]),
    "header-with-a-zero-width-space": (("trace", "stats", "t.csv"),
                                       {"t.csv": NATIVE.replace("arrival_s", "arrival\u200b_s") + ROWS},
                                       ["t.csv:1: column 'arrival\\u200b_s' is one character away from 'arrival_s' "
                                        "(U+200B ZERO WIDTH SPACE at position 8)"]),
    "burstgpt-total-disagrees": (("trace", "stats", "t.csv"),
                                 {"t.csv": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                                           "5,ChatGPT,472,18,490,Conversation log\n"
                                           "6,ChatGPT,400,20,999,Conversation log\n"},
                                 ["t.csv:3: Total tokens must be Request tokens + Response tokens (400 + 20), "
                                  "got '999'"]),
    "splitwise-field-of-300-kb": (("profile", "fit", "sw.csv", "--format", "splitwise", "-o", "out"),
                                  {"sw.csv": SPLITWISE + 'llama2-70b,a100-80gb,"' + "1" * 300_000 + '",1,1,1,1,1,2\n'},
                                  ["sw.csv:2: invalid CSV: field larger than field limit"]),
    "distserve-json-nested-100k-deep": (("profile", "fit", "d.json", "--format", "distserve", "--gpu", "a100-80gb",
                                         "-o", "out"), {"d.json": "[" * 100_000 + "]" * 100_000,
                                                        "max_num_tokens.csv": "model,tp,pp,max_num_tokens\n"},
                                        ["d.json: invalid JSON: nested too deeply"]),
    "points-full-width-digits": (("profile", "fit", "p.csv", "--format", "points", "--model", "llama2-70b",
                                  "--gpu", "h100-80gb", "-o", "p.yaml"),
                                 {"p.csv": POINTS.replace("4,1,1,128", "４,1,1,128")},
                                 ["p.csv:2: tp must be an integer >= 1, got '４'"]),
    # --- outputs that would clobber --------------------------------------------------------------
    "transform-onto-its-input": (("trace", "transform", "t.csv", "-o", "t.csv"), {"t.csv": NATIVE + ROWS},
                                 ["t.csv: --out would overwrite the input t.csv"]),
    "simulate-out-onto-the-plan": (SIM + ("--out", "plan.yaml"), {"t.csv": NATIVE + ROWS, "plan.yaml": PLAN},
                                   ["plan.yaml: --out would overwrite the input plan.yaml"]),
    "profile-fit-onto-its-source": (("profile", "fit", "sw.yaml", "--format", "points", "--model", "llama2-70b",
                                     "--gpu", "h100-80gb", "-o", "sw.yaml"), {"sw.yaml": POINTS},
                                    ["sw.yaml: --output would overwrite the input sw.yaml"]),
    "optimize-out-onto-the-trace": (OPT + ("--out", "t.csv"), {"t.csv": NATIVE + ROWS},
                                    ["t.csv: --out would overwrite the input t.csv"]),
    "out-to-a-device": (("trace", "synth", "--requests", "5", "--rate", "1", "--prompt", "const:5", "--output",
                         "const:5", "-o", "/dev/null"), {},
                        ["/dev/null: --out names a FIFO, device or socket; pdplan replaces only regular files"]),
    "out-to-a-fifo": (("trace", "transform", "t.csv", "-o", "f"), {"t.csv": NATIVE + ROWS, "f": "FIFO"},
                      ["f: --out names a FIFO, device or socket"]),
    "out-and-plot-on-one-path": (OPT + ("--out", "x", "--plot", "x"), {"t.csv": NATIVE + ROWS},
                                 ["x: --plot and --out name the same path"]),
    # --- messages ----------------------------------------------------------------------------------
    "unknown-option": (OPT + ("--bogus",), {"t.csv": NATIVE + ROWS}, ["No such option: --bogus"]),
    "not-an-integer": (OPT + ("--max-gpus", "abc"), {"t.csv": NATIVE + ROWS}, ["Invalid value for '--max-gpus'"]),
    "missing-trace": (("optimize", "nope.csv"), {}, ["nope.csv: trace not found"]),
}


def make(workdir: Path, files: dict) -> None:
    for name, content in files.items():
        path = workdir / name
        if content == "FIFO":
            os.mkfifo(path)
        elif content == "DIR":
            path.mkdir()
        elif content == "LIMIT":  # a sparse file one byte over the limit: no disk is used
            with open(path, "wb") as handle:
                handle.truncate(4 * 2**30 + 1)
        elif content == "NPZBOMB":
            path.write_bytes(npz_bomb())
        else:
            path.write_bytes(content if isinstance(content, bytes) else content.encode())


def snapshot(folder: Path) -> dict:
    """Every entry below ``folder``: its kind, and a regular file's size and content hash."""
    seen = {}
    for path in sorted(folder.rglob("*")):
        info = path.lstat()
        if path.is_fifo() or path.is_dir():
            seen[str(path)] = "fifo" if path.is_fifo() else "dir"
        else:
            seen[str(path)] = (info.st_size, info.st_mtime_ns, _digest(path) if info.st_size < 2**28 else None)
    return seen


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class Timeout(Exception):
    pass


@contextmanager
def bound(seconds: int, what: str) -> Iterator[None]:
    """Fail ``what`` when it runs longer than ``seconds`` (SIGALRM, so the main thread only)."""
    def give_up(signum, frame):
        raise Timeout(f"{what} did not end within {seconds} s")

    previous = signal.signal(signal.SIGALRM, give_up)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def refused(run_cli, work: Path, args: tuple, fragments: list[str], *, seconds: int = 30) -> str:
    """Run ``pdplan ARGS`` in ``work``: exit 2, one ``Error:`` line holding every fragment, no
    traceback, nothing in ``work`` created or changed, within ``seconds``. Returns the line."""
    before = snapshot(work)
    with bound(seconds, " ".join(map(str, args))):
        code, out, err = run_cli(*args)
    assert code == 2, err
    assert out == "" and err.startswith("Error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in err, err
    assert snapshot(work) == before
    return err


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_input_is_one_error_line_exit_2_and_writes_nothing(case, run_cli, tmp_path, monkeypatch):
    args, files, fragments = CASES[case]
    workdir = tmp_path / "work"
    workdir.mkdir()
    make(workdir, files)
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("PDPLAN_CACHE_DIR", str(tmp_path / "cache"))
    refused(run_cli, workdir, args, fragments, seconds=60)
    assert not (tmp_path / "cache").exists() or case.startswith(("optimize", "out-and"))


def test_the_corpus_covers_every_class_and_every_input_kind():
    ids = set(CASES)
    for kind in ("trace", "plan", "cluster", "profile", "slo", "model", "mooncake", "azure", "burstgpt",
                 "splitwise", "distserve", "points", "dynamo", "seed", "ttft", "out"):
        assert any(kind in i for i in ids) or any(kind in " ".join(map(str, CASES[i][0])) for i in ids), kind
