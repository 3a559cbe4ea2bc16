"""``pdplan export``: turn a deployment manifest into the files a serving stack reads.

Each format lives in its own module; all of them read the manifest through
:mod:`pdplan.manifest.export.common`, so a plan is interpreted the same way everywhere. A format
starts one engine (:func:`common.format_engine`) behind one router; a plan that engine cannot
run, or a mixed pool that router cannot run as verified, is refused before any file is written, naming
the rule.
"""

from __future__ import annotations

from pdplan.engines import mixed_refusal
from pdplan.errors import PdplanError
from pdplan.hardware import beyond_a_host, gpu_catalog
from pdplan.manifest.check import engine_refusal
from pdplan.manifest.export import common, dynamo, k8s, llmd, pods, sglang, vllm
from pdplan.manifest.export.pods import DEFAULT_HF_TOKEN_SECRET

FORMATS = ("vllm", "sglang", "dynamo", "llm-d", "k8s")

_SCRIPT_WRITERS = {"vllm": vllm.export, "sglang": sglang.export}
_POD_WRITERS = {"dynamo": dynamo.export, "llm-d": llmd.export, "k8s": k8s.export}


def export_manifest(manifest: dict, fmt: str, *, image: str | None = None, router_image: str | None = None,
                    hf_token_secret: str = DEFAULT_HF_TOKEN_SECRET) -> dict[str, str]:
    """Relative file name -> file text for one format; every name lies under ``<fmt>/``, the
    folder ``pdplan export`` owns and replaces whole.

    Deterministic: the same manifest gives byte-identical texts (stable order, no
    timestamps, no randomness).  ``image`` overrides the container image of the pod formats
    (dynamo, llm-d, k8s), ``router_image`` the k8s router's, and ``hf_token_secret`` names the
    Secret their pods read the Hugging Face token from; the script formats ignore all three.
    """
    if fmt not in _SCRIPT_WRITERS and fmt not in _POD_WRITERS:
        raise PdplanError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}", field="format")
    _refuse_mixed(manifest, fmt)  # no router runs the plan's spill rule: the first thing to fix
    _refuse_nodes_beyond_hosts(manifest)
    for pool in manifest["pools"]:
        common.parallel(pool)  # a coordinate that is not a whole number in range, named before any rule reads it
    engine = common.format_engine(manifest, fmt)
    refusal = engine_refusal(manifest, engine)
    if refusal:
        raise PdplanError(f"{fmt} export starts {engine}, which cannot run this plan: {refusal}", field="pools")
    if fmt in _SCRIPT_WRITERS:
        return _SCRIPT_WRITERS[fmt](manifest, image=image)
    options = pods.PodOptions(image=image, router_image=router_image, hf_token_secret=hf_token_secret)
    return _POD_WRITERS[fmt](manifest, options)


def refusals(manifest: dict) -> dict[str, str]:
    """Each format whose export would refuse ``manifest``, with the one line it would refuse it with (the field, then
    the rule), found without writing anything: ``optimize`` names them as it plans, so that a plan some stack cannot
    start as verified is known before anyone exports it. Empty when every format starts the plan."""
    found = {}
    for fmt in FORMATS:
        try:
            export_manifest(manifest, fmt)
        except PdplanError as refused:
            found[fmt] = field_first(refused)
    return found


def field_first(refused: PdplanError) -> str:
    """An export's refusal as one line that starts with the manifest field it names (``pools[1].pp: …``)."""
    detail = " ".join(refused.detail.split())
    if refused.field is None or detail.startswith(refused.field):
        return detail
    return f"{refused.field}: {detail}"


def _refuse_nodes_beyond_hosts(manifest: dict) -> None:
    """Every format starts one engine process group per host on the GPUs a node lists; a node with more GPUs than one
    host of its GPU holds (a GB200 NVL72 rack planned as one node of 72, whose hosts are its compute trays of 4) names
    no host to start them on, so it is refused."""
    for n, node in enumerate(manifest["placement"]["nodes"]):
        gpu = gpu_catalog().get(node["gpu"])
        why = None if gpu is None else beyond_a_host(node["gpus"], gpu)
        if why is not None:
            raise PdplanError(f"node {node['node']} {why}, and plan again; no launch can place this node's instances",
                              field=f"placement.nodes[{n}].gpus")


def _refuse_mixed(manifest: dict, fmt: str) -> None:
    """A mixed pool (or borrowing) was verified under Splitwise's spill rule; a format whose router
    does not run that rule would serve it otherwise than verified, so it is refused."""
    mixed = [p["name"] for p in manifest["pools"] if p["phase"] == "mixed"]
    engine = common.format_engine(manifest, fmt)
    why = mixed_refusal(fmt, engine) if mixed else None
    if why:
        raise PdplanError(f"{fmt} export cannot run mixed pool {mixed[0]} as it was verified ({why}); plan "
                          "without --mixed to export", field="pools")
    why = mixed_refusal(fmt, engine) if manifest["transfer"].get("spill", {}).get("borrow") else None
    if why:
        raise PdplanError(f"{fmt} export cannot lend machines between phases as the plan was verified ({why}); "
                          "plan without --borrow to export", field="transfer.spill.borrow")


__all__ = ["FORMATS", "export_manifest", "field_first", "refusals"]
