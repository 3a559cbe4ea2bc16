"""The hand-written wide expert-parallel plan the export tests read, and the stubs they run its scripts on.

The plan: a DeepSeek-V3 deployment with one prefill instance of DP16 EP16 over two H200 nodes (node ranks 0 and 1)
and one decode instance of DP8 EP8 on a third node, made for SGLang. Each script is run with bash on stub programs
that record their arguments, so a test reads the command each node would run."""

from __future__ import annotations

import subprocess
from pathlib import Path

WIDE = """
apiVersion: pdplan/v1
kind: DeploymentManifest
metadata: {name: deepseek-wide}
identity:
  model: deepseek-v3
  checkpoint: {id: deepseek-ai/DeepSeek-V3, revision: main, dtype: fp8}
  weights_dtype: fp8
  kv_cache: {dtype: bf16}
pools:
- name: prefill
  phase: prefill
  model: deepseek-v3
  gpu: h200-141gb
  tp: 1
  dp: 16
  ep: 16
  redundant_experts: 32
  pp: 1
  replicas: 1
  gpus: 16
  scheduling: {}
  memory: {gpu_memory_gib: 141.0, memory_utilization: 0.85, weights_gib_per_gpu: 45.0}
- name: decode
  phase: decode
  model: deepseek-v3
  gpu: h200-141gb
  tp: 1
  dp: 8
  ep: 8
  pp: 1
  replicas: 1
  gpus: 8
  scheduling: {}
  memory: {gpu_memory_gib: 141.0, memory_utilization: 0.85, weights_gib_per_gpu: 90.0}
placement:
  route_epoch: 1
  affinity: high
  nodes:
  - node: h200-0
    gpu: h200-141gb
    gpus: 8
    node_label: {key: nvidia.com/gpu.product, value: NVIDIA-H200}
    instances:
    - {instance: prefill-0, pool: prefill, stage: 0, node_rank: 0, gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]}
  - node: h200-1
    gpu: h200-141gb
    gpus: 8
    node_label: {key: nvidia.com/gpu.product, value: NVIDIA-H200}
    instances:
    - {instance: prefill-0, pool: prefill, stage: 0, node_rank: 1, gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]}
  - node: h200-2
    gpu: h200-141gb
    gpus: 8
    node_label: {key: nvidia.com/gpu.product, value: NVIDIA-H200}
    instances:
    - {instance: decode-0, pool: decode, stage: 0, gpu_indices: [0, 1, 2, 3, 4, 5, 6, 7]}
transfer:
  connector: nixl
  roles: {prefill: kv_producer, decode: kv_consumer}
provenance:
  profiles: {serving_engine: sglang}
  content_hash: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
"""

#: A stub program: appends its name and arguments to $STUB_LOG, one call per line, arguments separated
#: by the unit separator (no argument holds one), and exits 0; ``python -c`` (a prerequisite's import
#: check) only exits 0.
STUB = ('#!/bin/bash\nif [ "${1:-}" = -c ]; then exit 0; fi\n'
        '(IFS=$\'\\x1f\'; printf "%s\\n" "${0##*/}$IFS$*") >> "$STUB_LOG"\n')


def run_script(tmp_path: Path, script: str, *args: str,
         env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run ``script`` with ``args`` (and ``env``) on stubs of python, python3 and vllm: (the run, the calls it
    made)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    for name in ("python", "python3", "vllm"):
        (folder / name).write_text(STUB)
        (folder / name).chmod(0o755)
    log = tmp_path / "calls.log"
    log.write_text("")
    (tmp_path / "script.sh").write_text(script)
    done = subprocess.run(["bash", str(tmp_path / "script.sh"), *args], capture_output=True, text=True,
                          env={"PATH": f"{folder}:/usr/bin:/bin", "STUB_LOG": str(log), **(env or {})})
    return done, [line.split("\x1f") for line in log.read_text().splitlines()]


def engine_command(tmp_path: Path, script: str, *args: str, env: dict[str, str] | None = None) -> list[str]:
    """The one engine command a script runs (with ``args`` and ``env``)."""
    done, calls = run_script(tmp_path, script, *args, env=env)
    assert done.returncode == 0, done.stderr
    assert len(calls) == 1, calls
    return calls[0]


def arg(command: list[str], flag: str) -> str | None:
    return command[command.index(flag) + 1] if flag in command else None


def made_for_vllm(wide: dict) -> dict:
    """The plan as ``optimize --engine vllm`` would record it."""
    wide["provenance"]["profiles"]["serving_engine"] = "vllm"
    return wide
