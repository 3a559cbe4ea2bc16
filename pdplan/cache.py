"""An on-disk cache of goodput results, keyed by everything that determines them.

A key is the sha256 of a canonical JSON of its parts (trace digest, profile digest, SLO, shape,
policy, search settings, seed) and of pdplan's own source, so a changed input or a changed
model never hits a stale entry.
Entries are small JSON files written atomically; a corrupt entry is treated as a miss.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from pdplan import __version__
from pdplan.fileio import atomic_write_text

ENV_VAR = "PDPLAN_CACHE_DIR"


def default_cache_dir() -> Path:
    """``$PDPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/pdplan``, else ``~/.cache/pdplan``."""
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "pdplan"


@cache
def code_digest() -> str:
    """sha256 over pdplan's Python source: results computed by other code are never reused."""
    digest = hashlib.sha256(__version__.encode())
    package = Path(__file__).resolve().parent
    for path in sorted(package.rglob("*.py")):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def cache_key(parts: dict[str, Any]) -> str:
    """Hex digest of the canonical JSON of ``parts`` plus :func:`code_digest`."""
    canonical = json.dumps({"pdplan": code_digest(), **parts}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class ResultCache:
    """Get and put JSON-able results by key; ``enabled=False`` makes every lookup a miss."""

    def __init__(self, folder: str | Path | None = None, *, enabled: bool = True):
        self.folder = Path(folder) if folder is not None else default_cache_dir()
        self.enabled = enabled
        self.hits = 0
        self.misses = 0

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str) -> Any | None:
        if not self.enabled:
            self.misses += 1
            return None
        try:
            value = json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            self.misses += 1
            return None
        self.hits += 1
        return value

    def put(self, key: str, value: Any) -> None:
        if self.enabled:
            atomic_write_text(self._path(key), json.dumps(value, sort_keys=True))
