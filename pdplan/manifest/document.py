"""The manifest as a document: its JSON Schema, canonical form, content hash, and reading it back.

A manifest is plain data (mappings, lists, strings, integers, floats rounded to
:data:`~pdplan.fileio.WRITTEN_DIGITS` significant digits). Its content hash is the sha256 of the
canonical JSON (sorted keys, no spaces) of everything except ``provenance.content_hash`` itself;
``provenance.sections`` holds one such hash per part of each section, so a hand edit can be
traced to the field it touched (0x01A: an immutable manifest is checked, not trusted).
"""

from __future__ import annotations

import hashlib
import json
import math
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Iterator

from pdplan import limits
from pdplan.errors import InternalError, PdplanError
from pdplan.fileio import WRITTEN_DIGITS, load_yaml, significant
from pdplan.modelcatalog import model_catalog
from pdplan.modelspec import PRECISION_MARK
from pdplan.schema import shown
from pdplan.shape import InstanceShape
from pdplan.vocabulary import AllToAll

API_VERSION = "pdplan/v1"
KIND = "DeploymentManifest"
#: A windowed plan (``optimize --windows --out``): each window's pools and node map, the changes.
SCHEDULE_KIND = "DeploymentSchedule"
#: Top-level sections covered by a per-section hash, per kind, in the order the file lists them.
SECTIONS = ("identity", "workload", "pools", "placement", "transfer", "predictions", "fallback", "release",
            "rollback")
SCHEDULE_SECTIONS = ("identity", "workload", "shapes", "inventory", "windows", "changes", "verification")
_SCHEMAS = {KIND: "manifest.schema.json", SCHEDULE_KIND: "schedule.schema.json"}


@cache
def schema(kind: str = KIND) -> dict:
    """The JSON Schema (draft 2020-12) of a manifest (or, by ``kind``, a schedule), shipped in the package."""
    return json.loads((resources.files("pdplan.manifest") / _SCHEMAS[kind]).read_text())


def rounded(data: Any) -> Any:
    """``data`` with every float at the written precision (integers, strings and bools as they are)."""
    if isinstance(data, bool) or data is None or isinstance(data, (int, str)):
        return data
    if isinstance(data, float):
        return significant(data, WRITTEN_DIGITS)
    if isinstance(data, dict):
        return {k: rounded(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [rounded(v) for v in data]
    raise InternalError(f"a manifest holds plain data, not {type(data).__name__}")


def canonical(data: Any) -> bytes:
    """Canonical JSON: sorted keys, no whitespace, UTF-8; the bytes every hash is taken over."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def digest(data: Any) -> str:
    return "sha256:" + hashlib.sha256(canonical(data)).hexdigest()


def section_hashes(manifest: dict) -> dict[str, str]:
    """One hash per part of each section (``identity.tokenizer``, ``pools[1]``, ``rollback[3]``), so
    a hand edit is traced to the field it touched."""
    hashes = {}
    for name in SCHEDULE_SECTIONS if manifest.get("kind") == SCHEDULE_KIND else SECTIONS:
        value = manifest.get(name)
        if isinstance(value, dict) and value:
            hashes.update({f"{name}.{key}": digest(part) for key, part in value.items()})
        elif isinstance(value, list) and value:
            hashes.update({f"{name}[{i}]": digest(part) for i, part in enumerate(value)})
        else:
            hashes[name] = digest(value)
    return hashes


def content_hash(manifest: dict) -> str:
    """The hash over the whole manifest except the ``provenance.content_hash`` field itself."""
    body = dict(manifest)
    body["provenance"] = {k: v for k, v in manifest.get("provenance", {}).items() if k != "content_hash"}
    return digest(body)


def seal(manifest: dict) -> dict:
    """Round every float, then fill ``provenance.sections`` and ``provenance.content_hash``."""
    sealed = rounded(manifest)
    sealed["provenance"]["sections"] = section_hashes(sealed)
    sealed["provenance"]["content_hash"] = content_hash(sealed)
    return sealed


def schema_errors(data: Any) -> list[tuple[str, str]]:
    """Every violation of the schema as (field path, message), in a stable order.

    A manifest is untrusted input, so the schema is applied more strictly than JSON Schema's own
    types: an integer field refuses 1.0 (YAML writes it, JSON Schema admits it, and it would
    reach a launch flag as ``1.0``), and every value must be JSON data with its numbers finite
    and within :data:`~pdplan.limits.MAX_NUMBER` (integers :data:`~pdplan.limits.MAX_INTEGER`)
    and its keys strings (:func:`not_json_data`), so nothing read can break the content hash.
    A value that is not JSON data is named by that alone, not also by the schema's rules."""
    found = set(not_json_data(data))
    bad = {path for path, _ in found}
    kind = SCHEDULE_KIND if isinstance(data, dict) and data.get("kind") == SCHEDULE_KIND else KIND
    for error in _validator(kind).iter_errors(data):
        path = _path(error.absolute_path) or "(top level)"
        if not any(path == b or path.startswith((b + ".", b + "[")) for b in bad):
            found.add((path, error.message))
    return sorted(found)


@cache
def _validator(kind: str):
    """The schema's validator, its "integer" an int and never a float such as 1.0."""
    from jsonschema import Draft202012Validator, validators

    def integer(_checker, value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    strict = validators.extend(Draft202012Validator,
                               type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", integer))
    return strict(schema(kind))


def not_json_data(data: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(field path, message) of each value that is not JSON data a hash can be taken over: a
    non-finite or out-of-range number (YAML's .nan, .inf, 1.0e+400), a key that is not a string,
    or a YAML type JSON lacks (a date, binary, a set)."""
    where = path or "(top level)"
    if isinstance(data, dict):
        for key, value in data.items():
            if not isinstance(key, str):
                yield where, f"keys must be strings, got {shown(key)!r}"
            else:
                yield from not_json_data(value, f"{path}.{key}" if path else key)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            yield from not_json_data(value, f"{path}[{i}]")
    elif isinstance(data, float) and not (math.isfinite(data) and abs(data) <= limits.MAX_NUMBER):
        yield where, f"must be a finite number of at most {limits.MAX_NUMBER:g} in size, got {data!r}"
    elif isinstance(data, int) and not isinstance(data, bool) and abs(data) > limits.MAX_INTEGER:
        yield where, f"must be an integer of at most {limits.MAX_INTEGER:,} in size, got {shown(data)!r}"
    elif not (data is None or isinstance(data, (str, int, float))):
        yield where, f"must be a string, number, true/false, null, list or mapping, not a YAML {type(data).__name__}"


def _path(parts) -> str:
    text = ""
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def pool_shape(pool: dict) -> InstanceShape:
    """A manifest pool's instance shape (GPUs per instance ``.gpus`` = TP × DP × PP, as the engines count
    them). ``dp`` and ``ep`` are the pool's own fields, 1 when absent (a manifest written before wide
    expert parallelism); a MoE manifest of that time recorded EP as ``memory.expert_parallel``, read
    here when the pool has no ``ep``, so EP has one home however old the manifest."""
    memory = pool.get("memory", {})
    return InstanceShape(gpu=pool["gpu"], tp=pool["tp"], pp=pool["pp"], dp=pool.get("dp", 1),
                         ep=pool.get("ep", memory.get("expert_parallel", 1)))


def ep_field(pool: dict) -> str:
    """Where a manifest pool's expert-parallel size is recorded (:func:`pool_shape`), to name it."""
    return "memory.expert_parallel" if "ep" not in pool and "expert_parallel" in pool.get("memory", {}) else "ep"


def redundant_experts(pool: dict) -> int:
    """A manifest pool's redundant experts (written only when above 0)."""
    return pool.get("redundant_experts", 0)


def routed_experts(manifest: dict, pool: dict) -> int:
    """The routed experts a manifest pool places: its catalog model's plus its redundant ones; 0 for a dense model
    or one the catalog does not hold (a model YAML, whose experts the manifest does not state)."""
    known = model_catalog().get(manifest["identity"]["model"].partition(PRECISION_MARK)[0])
    return known.experts + redundant_experts(pool) if known is not None and known.is_moe else 0


def prompt_budget(pool: dict) -> tuple[int | None, int | None]:
    """The prompt tokens one rank of the pool takes per iteration, as pdplan verified them: (chunk, cap). The
    chunk is a chunked pool's ``chunk_tokens``, else a prefill pool's cap; the cap is the pool's batch cap
    (``scheduling.max_prefill_batch_tokens``), else the one its profile ran (``profile.max_prefill_batch_tokens``).
    A manifest written before the cap was recorded has none, so the engine keeps its own defaults."""
    scheduling = pool.get("scheduling") or {}
    cap = scheduling.get("max_prefill_batch_tokens") or (pool.get("profile") or {}).get("max_prefill_batch_tokens")
    return scheduling.get("chunk_tokens") or (cap if pool["phase"] == "prefill" else None), cap


def all_to_all(pool: dict) -> str:
    """How a manifest pool of attention DP with expert parallelism moves tokens to its experts (written for such
    pools; a manifest before it was verified with a dispatch)."""
    return pool.get("all_to_all", AllToAll.DISPATCH)


def search_engine(manifest: dict) -> tuple[str | None, str]:
    """The engine the plan's search kept the rules of and the field that states it: ``provenance.profiles
    .serving_engine``, or in a manifest written before it the ``optimize --engine`` it named
    (``provenance.profiles.engine``; None when it named none)."""
    profiles = manifest["provenance"]["profiles"]
    key = "serving_engine" if profiles.get("serving_engine") else "engine"
    return profiles.get(key), f"provenance.profiles.{key}"


def is_manifest(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == KIND


def load_manifest(path: str | Path, data: Any = None, *, schedules: bool = False) -> dict:
    """A manifest file's content as plain data, not yet checked against the schema (``validate``
    lists every violation itself); ``data``: the file already parsed; ``schedules``: a schedule
    is welcome too. Anything else raises PdplanError naming the file."""
    data = load_yaml(path, what="manifest") if data is None else data
    if schedules and isinstance(data, dict) and data.get("kind") == SCHEDULE_KIND:
        return _plain(data)
    if not is_manifest(data):
        hint = (" (a schedule: it holds one plan per window)" if isinstance(data, dict)
                and data.get("kind") == SCHEDULE_KIND else "")
        raise PdplanError(f"not a pdplan manifest (kind must be {KIND!r}){hint}", file=path, field="kind")
    return _plain(data)


def read_manifest(path: str | Path, data: Any = None) -> dict:
    """:func:`load_manifest`, then the schema: the first failing field raises PdplanError."""
    data = load_yaml(path, what="manifest") if data is None else data
    manifest = load_manifest(path, data)
    errors = schema_errors(manifest)
    if errors:
        field, message = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise PdplanError(f"{field}: {message}{more}", file=path, line=_line_of(data, field), field=field)
    return manifest


def _line_of(data: Any, field: str) -> int | None:
    """The YAML line of the top-level key a field path starts with, when the loader kept it."""
    head = field.split(".")[0].split("[")[0]
    return getattr(data, "lines", {}).get(head)


def _plain(data: Any) -> Any:
    """The loader's line-tracking mappings as plain dicts (hashes are taken over plain data)."""
    if isinstance(data, dict):
        return {k: _plain(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_plain(v) for v in data]
    return data
