"""What ``--model`` names: a catalog model (at a precision), a user's model YAML, a Hugging Face
config.json, or a Hugging Face repository (a catalog model's, one in the hub's cache, or one whose config.json
AIConfigurator's aic extra ships, read from its copy so no download is needed), read into the
:class:`~pdplan.modelspec.ModelSpec` it is served as."""

from __future__ import annotations

from pathlib import Path

from pdplan import names
from pdplan.errors import PdplanError
from pdplan.hf_config import config_path, hub_cache, hub_config, load_hf_config, shipped_config
from pdplan.latency.compose import tables
from pdplan.modelcatalog import geometry, kept_in, load_model, model_catalog
from pdplan.modelspec import PRECISION_MARK, ModelSpec, parse_precision


def model_file(name_or_path: str | None) -> Path | None:
    """The model file ``--model`` (or a plan's pool) names, or None for a catalog name: a name ending in
    .yaml or .yml is a model YAML, one ending in .json (or a folder holding config.json, or a repository id
    the hub's cache holds) a Hugging Face config, either perhaps at a precision (``mine.yaml@fp8``, as a
    manifest's plan names a user's model served at another precision) (commands check their outputs
    against it)."""
    return None if name_or_path is None else file_reference(name_or_path)[0]


def file_reference(name_or_path: str) -> tuple[Path | None, str]:
    """The model file a reference names and the precision after its last ``@`` ('' for none); (None, '')
    for a catalog name. The whole reference is tried as a path first, so a path holding ``@`` still works."""
    whole = _named_file(name_or_path)
    if whole is not None:
        return whole, ""
    base, mark, suffix = name_or_path.rpartition(PRECISION_MARK)
    path = _named_file(base) if mark else None
    return (path, suffix) if path is not None else (None, "")


def _named_file(name_or_path: str) -> Path | None:
    if name_or_path.endswith((".yaml", ".yml")):
        return Path(name_or_path)
    path = config_path(name_or_path)
    if path is None and names.hf_repo(name_or_path) is None:  # owner/name: its download, if the cache has one
        path = hub_config(name_or_path)
        if path is None and kept_in(name_or_path) is None:  # else a catalog model's, else AIConfigurator's copy
            path = shipped_config(name_or_path, tables.aiconfigurator_root())
    return path


def get_model(name_or_path: str, *, dtype: str | None = None, kv_dtype: str | None = None) -> ModelSpec:
    """An embedded model by name (``llama-3.1-70b``, or at a precision: ``llama-3.1-70b@fp8``), a
    user's model YAML by path, or a Hugging Face config.json (or a folder holding one) by path, at the
    precision its quantization_config states (or at the one after ``@``: ``mine.yaml@fp8``);
    ``dtype``/``kv_dtype`` set the precision it is served at."""
    catalog = model_catalog()
    path, suffix = file_reference(name_or_path)
    if path is not None:
        if path.suffix == ".json":
            model = load_hf_config(path)
        else:
            model = load_model(path)
        known = catalog.get(model.base_name)
        if known is not None and geometry(known) != geometry(model):
            # Profiles are matched by model name: a different model under a catalog name would
            # silently borrow the catalog model's measured latencies.
            raise PdplanError(f"name {model.base_name!r} is a catalog model with a different geometry; give "
                              "your model its own name", file=path, field="name")
        if suffix:
            model = model.at_precision(*parse_precision(suffix))
    else:
        base, _, suffix = name_or_path.partition(PRECISION_MARK)
        kept = kept_in(base)
        if kept is not None:  # a catalog model's repository
            base = kept
        elif base not in catalog and names.hf_repo(base) is None:
            raise PdplanError(f"model {base!r} is a Hugging Face repository that is no catalog model's, the hub's "
                              f"cache ({hub_cache()}) holds no config.json of its main branch, and AIConfigurator "
                              f"ships none (the aic extra): download it (hf download {base} config.json) or pass "
                              "the file", field="model")
        elif base not in catalog:
            raise PdplanError(f"unknown model {base!r} (known: {', '.join(sorted(catalog))}; "
                              "or pass a model YAML, a Hugging Face config.json or its folder, or a Hugging Face "
                              "repository id)", field="model")
        model = catalog[base]
        if suffix:
            model = model.at_precision(*parse_precision(suffix))
    return model if dtype is None and kv_dtype is None else model.at_precision(dtype, kv_dtype)
