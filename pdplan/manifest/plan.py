"""The simulator plan and the SLO a manifest describes, so ``simulate --plan`` and
``validate --resimulate`` run exactly what ``optimize`` verified."""

from __future__ import annotations

from pathlib import Path

from pdplan.errors import PdplanError
from pdplan.fileio import load_yaml
from pdplan.manifest.build import MODEL, input_sha256
from pdplan.manifest.document import all_to_all, is_manifest, pool_shape, read_manifest, redundant_experts
from pdplan.modelcatalog import model_catalog
from pdplan.modelspec import PRECISION_MARK
from pdplan.schema import Fields
from pdplan.sim.plan import Plan
from pdplan.sim.planfile import FORMAT_VERSION, parse_plan, wide_fields
from pdplan.slo import SLO, objective_from_fields


def plan_of_manifest(manifest: dict, path: str | Path) -> Plan:
    """The plan a (schema-checked) manifest describes, checked by the plan file's own rules: its pools
    with their simulator settings (``scheduling``: prefix caches and their tiers included), links,
    timing, prefill router (``transfer.router``; absent, as in manifests before it, least-loaded) and
    early rejection (``transfer.early_rejection``; absent: off)."""
    doc: dict = {"pdplan_plan": FORMAT_VERSION, "name": manifest["metadata"]["name"]}
    timing = manifest["provenance"]["profiles"]
    timing = {k: timing[k] for k in ("engine", "engine_version", "compose", "speculative", "moe_activations")
              if timing.get(k) is not None}  # speculative, moe_activations: only in manifests that state them
    if timing:
        doc["profiles"] = timing
    transfer = manifest["transfer"]
    if "router" in transfer:  # absent: least-loaded, the default of the plan file too
        if transfer["connector"] == "none":
            raise PdplanError("transfer.router applies only to disaggregated plans (it picks a prefill instance)",
                              file=path, field="transfer.router")
        doc["router"] = transfer["router"]
    if "early_rejection" in transfer:  # absent: off; only P/D plans write it (the plan file's rules refuse it else)
        doc["early_rejection"] = dict(transfer["early_rejection"])
    if transfer["connector"] != "none":
        doc["transfer"] = {"schedule": transfer["schedule"]}
        doc["links"] = [{"from": p["from"], "to": p["to"], "bandwidth_gb_s": p["bandwidth_gb_s"],
                         "setup_ms": p["setup_ms"]} for p in transfer["paths"]]
        if "spill" in transfer:
            spill = dict(transfer["spill"])
            lent = spill.pop("lent_link", None)
            doc["mixed"] = spill
            if lent is not None:  # borrowing: a lent prefill instance receives on this link
                doc["default_link"] = {"bandwidth_gb_s": lent["bandwidth_gb_s"], "setup_ms": lent["setup_ms"]}
    source = None if catalog_serves(manifest) else model_source(manifest, path)
    doc["pools"] = [{k: p[k] for k in ("name", "phase", "gpu", "tp", "pp", "replicas")}
                    | {"model": p["model"] if source is None else served_from(source, p["model"])}
                    | wide_fields(pool_shape(p).dp, pool_shape(p).ep, redundant_experts(p), all_to_all(p))
                    | p["scheduling"]
                    for p in manifest["pools"]]
    return parse_plan(doc, path)


def catalog_serves(manifest: dict) -> bool:
    """Whether the catalog holds the model the pools name. A plan made from a model file named as a
    catalog model has that model's geometry (``optimize`` refuses one that does not), so it needs no file."""
    catalog = model_catalog()
    return all(pool["model"].partition(PRECISION_MARK)[0] in catalog for pool in manifest["pools"])


def model_source(manifest: dict, path: str | Path) -> Path | None:
    """The model file a manifest's plan was made from (``provenance.inputs.model``: a model YAML or a Hugging
    Face config the catalog lacks), as it was named (a relative path from here, else beside the manifest)
    and unchanged since (its sha256); None for a plan of a catalog model."""
    recorded = manifest["provenance"]["inputs"].get("model")
    if recorded is None:
        return None
    named = Path(recorded["path"])
    places = [named] if named.is_absolute() else [named, Path(path).parent / named]
    found = next((place for place in places if place.exists()), None)
    if found is None:
        field = "provenance.inputs.model.path"
        raise PdplanError(f"{field}: the plan was made from the model file {named}, which is absent (looked for "
                          f"{' and '.join(map(str, places))})", file=path, field=field)
    if input_sha256(found, *MODEL) != recorded["sha256"]:
        field = "provenance.inputs.model.sha256"
        raise PdplanError(f"{field}: the model file {found} changed since the plan was made (its sha256 is not the "
                          "one recorded)", file=path, field=field)
    return found


def served_from(source: Path, pool_model: str) -> str:
    """A pool's model as the simulator loads it: the plan's model file at the precision the pool names
    (``mine.yaml@fp8`` for a pool serving ``my-model@fp8``)."""
    _, mark, precision = pool_model.partition(PRECISION_MARK)
    return f"{source}{mark}{precision}"


def manifest_slo(manifest: dict, path: str | Path) -> SLO:
    """The SLO a (schema-checked) manifest was planned under, read by the SLO file's own rules."""
    slo = Fields(manifest["workload"], path, "workload").mapping("slo")
    return SLO(objectives=tuple(objective_from_fields(item) for item in slo.items("objectives")))


def read_plan(path: str | Path) -> tuple[Plan, SLO | None]:
    """A plan file, or a manifest's plan with the SLO it was planned under (None for a plan file)."""
    data = load_yaml(path, what="plan file")
    if not is_manifest(data):
        return parse_plan(data, path), None
    manifest = read_manifest(path, data)
    return plan_of_manifest(manifest, path), manifest_slo(manifest, path)
