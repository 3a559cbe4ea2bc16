"""An on-disk cache of goodput results, keyed by everything that determines them.

A key is the sha256 of a canonical JSON of its parts (trace digest, profile digest, SLO, shape,
policy, search settings, seed) and of pdplan's own source, so a changed input or a changed
model never hits a stale entry.
Entries are small JSON files written atomically, each with a checksum of its key and content; a
corrupt, edited or undecodable entry is a miss, and an unwritable folder only costs speed.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any, Callable, TypeVar

from pdplan import __version__
from pdplan.errors import InternalError, PdplanError
from pdplan.fileio import atomic_write_text

T = TypeVar("T")

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
    """Get and put JSON-able results by key; ``enabled=False`` makes every lookup a miss.

    The cache only ever saves work: an entry that cannot be read, does not match its checksum
    (a hand edit, a torn write) or does not decode is a miss and is computed again; a folder that
    cannot be written is reported once through ``warn`` and the run goes on without it.
    """

    def __init__(self, folder: str | Path | None = None, *, enabled: bool = True,
                 warn: Callable[[str], None] | None = None):
        self.folder = Path(folder) if folder is not None else default_cache_dir()
        self.enabled = enabled
        self.hits = 0
        self.misses = 0
        self._warn = warn
        self._writable = True

    def _path(self, key: str) -> Path:
        return self.folder / key[:2] / f"{key}.json"

    def get(self, key: str, decode: Callable[[Any], T] = lambda value: value) -> T | None:
        """The value stored under ``key``, through ``decode``; None (a miss) when there is none
        or it is not sound."""
        value = self._read(key) if self.enabled else None
        if value is not None:
            try:
                decoded = decode(value)
            except (KeyError, TypeError, ValueError, AttributeError, IndexError, PdplanError, InternalError):
                decoded = None  # a value a domain object refuses (InternalError) is as unsound as a malformed one
            if decoded is not None:
                self.hits += 1
                return decoded
        self.misses += 1
        return None

    def _read(self, key: str) -> Any | None:
        try:
            entry = json.loads(self._path(key).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(entry, dict) or set(entry) != {"sha256", "value"} or entry["sha256"] != _checksum(
                key, entry["value"]):
            return None
        return entry["value"]

    def put(self, key: str, value: Any) -> None:
        if not (self.enabled and self._writable):
            return
        try:
            # the value keeps its key order, so a hit reads back exactly what was computed
            atomic_write_text(self._path(key), json.dumps({"sha256": _checksum(key, value), "value": value}))
        except PdplanError as err:
            self._writable = False
            if self._warn is not None:
                self._warn(f"cannot write the result cache in {self.folder} ({err.detail}); "
                           "going on without it")


def _checksum(key: str, value: Any) -> str:
    """sha256 of an entry's key and canonical content."""
    return hashlib.sha256((key + json.dumps(value, sort_keys=True)).encode()).hexdigest()
