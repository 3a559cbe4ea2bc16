"""`pdplan schema`, `validate`, `diff` and `export`: the deployment manifest after `optimize`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pdplan import names
from pdplan.cli.options import FormatOpt, load_workload, profile_source
from pdplan.cli.output import print_json, stderr, stdout
from pdplan.errors import PdplanError
from pdplan.fileio import Outputs
from pdplan.manifest.check import check_manifest, refuse_unreadable_inputs
from pdplan.manifest.diff import diff_manifests
from pdplan.manifest.document import KIND, SCHEDULE_KIND, load_manifest, read_manifest
from pdplan.manifest.document import schema as manifest_schema
from pdplan.manifest.export import FORMATS, export_manifest, field_first
from pdplan.manifest.export.k8s import DEFAULT_ROUTER_IMAGE as K8S_ROUTER_IMAGE
from pdplan.manifest.export.pods import DEFAULT_HF_TOKEN_SECRET
from pdplan.manifest.plan import plan_of_manifest
from pdplan.manifest.resimulate import RESIMULATE_TOLERANCE
from pdplan.manifest.resimulate import resimulate as rerun_plan
from pdplan.manifest.schedule import check_schedule
from pdplan.schema import shown
from pdplan.wording import counted

ManifestArg = Annotated[Path, typer.Argument(help="Deployment manifest written by pdplan optimize --out.",
                                             show_default=False)]


def schema(schedule: Annotated[bool, typer.Option(
        "--schedule", help="The schedule's schema (optimize --windows --out) instead of the manifest's.")] = False,
           ) -> None:
    """Print the deployment manifest's JSON Schema (draft 2020-12); every read checks against it."""
    print_json(manifest_schema(SCHEDULE_KIND if schedule else KIND))


def validate(
    manifest: ManifestArg,
    strict: Annotated[bool, typer.Option("--strict", help="Also require a complete identity (checkpoint, "
                                                          "revision, tokenizer, adapter, position).")] = False,
    trace: Annotated[Path | None, typer.Option("--trace", help="The trace to check the manifest against "
                                                               "(its sha256), and to re-simulate on.")] = None,
    profiles: Annotated[Path | None, typer.Option("--profiles", help="Your measured profile file or folder "
                                                                     "(sha256, and timing a re-simulation).")] = None,
    cluster: Annotated[Path | None, typer.Option("--cluster", help="The cluster YAML (its sha256).")] = None,
    resimulate: Annotated[bool, typer.Option(
        "--resimulate", help=f"Re-run the verification (same plan, trace, rate, seeds) of a manifest that is "
                             f"otherwise valid and compare the attainments within {RESIMULATE_TOLERANCE}; "
                             "needs --trace.")] = False,
    format: FormatOpt = None,
    json: Annotated[bool, typer.Option("--json", help="Machine-readable result.")] = False,
) -> None:
    """Check a manifest: schema, content hash (hand edits are reported as tampering), consistency
    (capacity vs target, GPUs per node, TP within a node, memory, KV links, roles, rollback order,
    fallback), identity (--strict), stale inputs, and optionally a re-simulation. A schedule
    (optimize --windows --out): every window's pools fit the inventory and its node map, the
    changes match the replicas, and every change drains before its GPUs are reused.

    Exit 0: valid. 1: invalid, every violation listed with its field path. 2: unreadable.
    """
    if resimulate and trace is None:
        raise PdplanError("--resimulate needs the trace: give --trace", field="trace")
    refuse_unreadable_inputs(trace=trace, profiles=profiles, cluster=cluster)
    data = load_manifest(manifest, schedules=True)
    if data.get("kind") == SCHEDULE_KIND:
        if resimulate or strict or profiles is not None or cluster is not None:
            raise PdplanError("a schedule is checked against its trace only: drop --resimulate, --strict, "
                              "--profiles and --cluster", field="resimulate")
        violations = check_schedule(data, trace=trace)
    else:
        violations = check_manifest(data, strict=strict, trace=trace, profiles=profiles, cluster=cluster)
    rerun = None
    if resimulate and not violations:  # a manifest invalid as written is not worth re-running
        timing = plan_of_manifest(data, manifest)  # timed as planned, speculative decoding included
        source = profile_source(profiles, timing.engine, timing.engine_version, timing.compose, timing.speculative,
                                timing.moe_activations)
        seed = data["predictions"]["verification"]["base_seed"]  # the arrivals as the plan's checks replayed them
        rerun, found = rerun_plan(data, load_workload(trace, format, seed), source, path=manifest)
        violations += found
    if json:
        print_json({"valid": not violations, "violations": [{"field": v.field, "message": v.message}
                                                             for v in violations], "resimulated": rerun})
    elif violations:
        stderr.print(f"{manifest}: INVALID ({counted(len(violations), 'violation')})",
                     markup=False, highlight=False)
        for v in violations:
            stdout.print(f"  {v}", markup=False, highlight=False)
    else:
        checked = "schema, content hash, consistency" + (", identity" if strict else "")
        checked += "".join(f", {name}" for name, given in (("trace", trace), ("profiles", profiles),
                                                             ("cluster", cluster)) if given)
        stdout.print(f"{manifest}: valid ({checked}" + (", re-simulation" if rerun else "") + ")",
                     markup=False, highlight=False)
    if violations:
        raise typer.Exit(1)


def diff(
    a: Annotated[Path, typer.Argument(help="The manifest in force.", show_default=False)],
    b: Annotated[Path, typer.Argument(help="The proposed manifest.", show_default=False)],
    json: Annotated[bool, typer.Option("--json", help="Machine-readable result.")] = False,
) -> None:
    """What changed between two manifests (pools, placement, identity, predictions, inputs), for
    release review. Exit 0 when equal, 1 when different."""
    changes = diff_manifests(read_manifest(a), read_manifest(b))
    if json:
        print_json({"equal": not changes, "changes": changes})
    elif not changes:
        stdout.print("no differences", markup=False, highlight=False)
    else:
        table = Table(title=f"{a} → {b}: {counted(len(changes), 'changed field')}")
        for name in ("section", "field", "change", "a", "b"):
            table.add_column(name)
        for c in changes:
            table.add_row(c["section"], c["field"], c["change"], _shown(c["a"]), _shown(c["b"]))
        stdout.print(table)
    if changes:
        raise typer.Exit(1)


def _shown(value) -> str:
    return "—" if value is None else str(value)


def export(
    manifest: ManifestArg,
    format: Annotated[str, typer.Option("--format", help=f"Target: {', '.join(FORMATS)}.",
                                          show_default=False)],
    out: Annotated[Path, typer.Option("--out", help="Folder for the files (created). An export owns its format's "
                                                    "subfolder, e.g. <out>/vllm/, and replaces it whole, so no file "
                                                    "of an earlier plan stays in it; the rest of --out is left "
                                                    "alone.")] = Path("deploy"),
    image: Annotated[str | None, typer.Option("--image", help="Container image reference for the pods (dynamo, "
                                                              "llm-d, k8s); default the engine's release "
                                                              "image.")] = None,
    router_image: Annotated[str | None, typer.Option("--router-image", help="Container image reference of the k8s "
                                                                            "router; default "
                                                                            f"{K8S_ROUTER_IMAGE} (vllm-router), the "
                                                                            "SGLang image for sglang-router.")] = None,
    hf_token_secret: Annotated[str, typer.Option("--hf-token-secret", help="Secret the pods (dynamo, llm-d, k8s) read "
                                                                           "HF_TOKEN from, key 'token'; optional, so "
                                                                           "an ungated model starts without "
                                                                           "it.")] = DEFAULT_HF_TOKEN_SECRET,
) -> None:
    """Write the configs a serving stack reads, from a manifest that validates: vLLM or SGLang
    launch scripts and router, a Dynamo DynamoGraphDeployment (SGLang or TensorRT-LLM workers for a plan made for
    that engine, else vLLM's), llm-d-modelservice Helm values, or a Kubernetes bundle (Deployments /
    LeaderWorkerSets, Services, vllm-router or sglang-router, kustomization)."""
    if format not in FORMATS:
        raise PdplanError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}", field="format")
    problem = None if image is None else names.image_reference(image)
    if problem:
        raise PdplanError(f"--image {problem}, got {shown(image)!r}", field="image")
    data = load_manifest(manifest)
    violations = check_manifest(data)
    if violations:
        raise PdplanError(f"the manifest does not validate ({violations[0]}); run pdplan validate", file=manifest)
    outputs = Outputs(manifest)
    outputs.claim(out, "--out", folder=True)
    try:
        files = export_manifest(data, format, image=image, router_image=router_image,
                                hf_token_secret=hf_token_secret)
    except PdplanError as refused:
        raise _in_manifest(refused, manifest) from None
    inside = {name.removeprefix(f"{format}/"): text for name, text in files.items()}
    outputs.put_folder(out / format, inside, "--out", executable=frozenset(n for n in inside if n.endswith(".sh")))
    outputs.commit()
    for name in sorted(files):
        stdout.print(str(out / name), markup=False, highlight=False)


#: The fields of an export refusal that name ``pdplan export``'s own options, not the manifest.
OPTION_FIELDS = frozenset({"format", "image", "router-image", "hf-token-secret"})


def _in_manifest(refused: PdplanError, manifest: Path) -> PdplanError:
    """An export's refusal of something in the manifest, as one line naming the manifest file and the field
    (``pools[1].pp: …``); a refusal of an option, or one that names its file already, as it came."""
    if refused.file is not None or refused.field is None or refused.field in OPTION_FIELDS:
        return refused
    return PdplanError(field_first(refused), file=manifest, field=refused.field)
