"""``pdplan diff``: what changed between two manifests, field by field, for release review."""

from __future__ import annotations

from typing import Any

#: Sections in the order a reviewer reads them; everything else is grouped under "other".
GROUPS = ("identity", "workload", "pools", "placement", "transfer", "predictions", "fallback", "release",
          "rollback", "provenance")


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """Leaf values by field path (``pools[0].replicas``); an empty mapping or list is a leaf."""
    if isinstance(data, dict) and data:
        out = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
        return out
    if isinstance(data, list) and data:
        out = {}
        for i, value in enumerate(data):
            out.update(flatten(value, f"{prefix}[{i}]"))
        return out
    return {prefix: data}


def diff_manifests(a: dict, b: dict) -> list[dict]:
    """Every field that differs: ``{"section", "field", "change": added|removed|changed, "a", "b"}``,
    sections in review order, fields in path order. The seals (section and content hashes) are
    left out: they differ whenever anything else does."""
    left, right = flatten(a), flatten(b)
    changes = []
    for field in sorted(set(left) | set(right)):
        if field.startswith(("provenance.sections", "provenance.content_hash")):
            continue
        if field in left and field in right and left[field] == right[field]:
            continue
        change = "added" if field not in left else "removed" if field not in right else "changed"
        changes.append({"section": _section(field), "field": field, "change": change,
                        "a": left.get(field), "b": right.get(field)})
    order = {name: i for i, name in enumerate(GROUPS)}
    return sorted(changes, key=lambda c: (order.get(c["section"], len(GROUPS)), c["field"]))


def _section(field: str) -> str:
    head = field.split(".")[0].split("[")[0]
    return head if head in GROUPS else "other"
