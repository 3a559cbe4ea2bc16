"""``pdplan export``: turn a deployment manifest into the files a serving stack reads.

Each format lives in its own module; all of them read the manifest through
:mod:`pdplan.manifest.export.common`, so a plan is interpreted the same way everywhere. A format
starts one engine (:data:`pdplan.engines.FORMAT_ENGINES`) behind one router; a plan that engine cannot
run, or a mixed pool that router cannot run as verified, is refused before any file is written, naming
the rule.
"""

from __future__ import annotations

from pdplan.engines import FORMAT_ENGINES, mixed_refusal
from pdplan.errors import PdplanError
from pdplan.manifest.check import engine_refusal
from pdplan.manifest.export import dynamo, k8s, llmd, sglang, vllm

FORMATS = ("vllm", "sglang", "dynamo", "llm-d", "k8s")

_WRITERS = {"vllm": vllm.export, "sglang": sglang.export, "dynamo": dynamo.export,
            "llm-d": llmd.export, "k8s": k8s.export}


def export_manifest(manifest: dict, fmt: str, *, image: str | None = None) -> dict[str, str]:
    """Relative file name -> file text for one format; every name lies under ``<fmt>/``, the
    folder ``pdplan export`` owns and replaces whole.

    Deterministic: the same manifest gives byte-identical texts (stable order, no
    timestamps, no randomness).  ``image`` overrides the container image of the
    pod-based formats (dynamo, llm-d, k8s); the script formats ignore it.
    """
    writer = _WRITERS.get(fmt)
    if writer is None:
        raise PdplanError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}", field="format")
    engine = FORMAT_ENGINES[fmt]
    refusal = engine_refusal(manifest, engine)
    if refusal:
        raise PdplanError(f"{fmt} export starts {engine}, which cannot run this plan: {refusal}", field="pools")
    _refuse_mixed(manifest, fmt)
    return writer(manifest, image=image)


def _refuse_mixed(manifest: dict, fmt: str) -> None:
    """A mixed pool was verified under Splitwise's spill rule; a format whose router does not run
    that rule would serve it otherwise than verified, so it is refused."""
    mixed = [p["name"] for p in manifest["pools"] if p["phase"] == "mixed"]
    why = mixed_refusal(fmt) if mixed else None
    if why:
        raise PdplanError(f"{fmt} export cannot run mixed pool {mixed[0]} as it was verified ({why}); plan "
                          "without --mixed to export", field="pools")


__all__ = ["FORMATS", "export_manifest"]
