"""Input files a command is given as text rather than as a path, so that its outputs are checked
against them too (:class:`pdplan.fileio.Outputs` refuses an output that is one of its inputs)."""

from __future__ import annotations

from pathlib import Path

from pdplan.profiles import profile_files


def model_file(model: str | None) -> Path | None:
    """The model YAML ``--model`` names, or None for a catalog name (``get_model`` reads a name
    ending in .yaml or .yml as a file)."""
    return Path(model) if model is not None and model.endswith((".yaml", ".yml")) else None


def profile_inputs(profiles: Path | None) -> tuple[Path, ...]:
    """``--profiles`` as inputs: the file, or the folder and every profile in it (an output inside
    the folder would replace a profile, or be read as one next time)."""
    if profiles is None:
        return ()
    return (profiles, *profile_files(profiles)) if profiles.is_dir() else (profiles,)
