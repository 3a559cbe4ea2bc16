"""Input files a command is given as text rather than as a path, so that its outputs are checked
against them too (:class:`pdplan.fileio.Outputs` refuses an output that is one of its inputs)."""

from __future__ import annotations

from pathlib import Path


def model_file(model: str | None) -> Path | None:
    """The model YAML ``--model`` names, or None for a catalog name (``get_model`` reads a name
    ending in .yaml or .yml as a file)."""
    return Path(model) if model is not None and model.endswith((".yaml", ".yml")) else None
