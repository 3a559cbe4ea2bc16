"""Fleets: which GPU type each pool may use (Splitwise's provisioning coordinates, 0x08K).

A fleet is a (prefill GPU, decode GPU) pair the cluster holds, power-capped decode settings
included, named ``prefill/decode`` (``h200-141gb/h100-80gb``); Splitwise's AA, HH, HA and HHcap
are aliases of four pairs. ``any`` lets the program choose the GPU types of each pool freely.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pdplan.errors import PdplanError
from pdplan.hardware import Cluster, get_gpu, gpu_catalog

#: Splitwise's names for four (prefill GPU, decode GPU) pairs.
ALIASES: dict[str, tuple[str, str]] = {
    "AA": ("a100-80gb", "a100-80gb"),
    "HH": ("h100-80gb", "h100-80gb"),
    "HA": ("h100-80gb", "a100-80gb"),
    "HHcap": ("h100-80gb", "h100-80gb-pcap"),
}


@dataclass(frozen=True, kw_only=True)
class Fleet:
    """The GPU types each pool may use; None means any."""

    name: str
    prefill: str | None = None
    decode: str | None = None

    @property
    def alias(self) -> str | None:
        """Splitwise's name for this pair, if it has one."""
        return next((a for a, pair in ALIASES.items() if pair == (self.prefill, self.decode)), None)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.alias})" if self.alias else self.name

    @property
    def breadth(self) -> float:
        """How many physical GPU types the fleet lets a pool use (any: infinitely many)."""
        allowed = self.allowed("colocated")
        return math.inf if allowed is None else len(allowed)

    def allowed(self, phase: str) -> tuple[str, ...] | None:
        """GPU types a pool of ``phase`` may use (None: any). A colocated pool, or a mixed one,
        may use either pool's physical types (capping is a decode-machine setting)."""
        if self.prefill is None:
            return None
        if phase in ("colocated", "mixed"):
            return tuple(sorted({get_gpu(self.prefill).physical, get_gpu(self.decode).physical}))
        return (self.prefill,) if phase == "prefill" else (self.decode,)


ANY = Fleet(name="any")


def pair(prefill: str, decode: str) -> Fleet:
    return Fleet(name=f"{prefill}/{decode}", prefill=prefill, decode=decode)


def cluster_pairs(cluster: Cluster) -> tuple[Fleet, ...]:
    """Every (prefill GPU, decode GPU) pair the cluster holds: prefill on the types its nodes
    carry, decode on those and on their power-capped settings."""
    present = set(cluster.gpu_types)
    decode = present | {g.name for g in gpu_catalog().values() if g.base in present}
    return tuple(pair(p, d) for p in sorted(present) for d in sorted(decode))


def resolve_fleets(choice: str, cluster: Cluster) -> tuple[Fleet, ...]:
    """``all`` (every pair the cluster holds), ``any``, an alias (AA, HH, HA, HHcap) or a pair
    ``PREFILL_GPU/DECODE_GPU``."""
    if choice == "all":
        return cluster_pairs(cluster)
    if choice == "any":
        return (ANY,)
    if choice in ALIASES:
        return (pair(*ALIASES[choice]),)
    parts = choice.split("/")
    catalog = gpu_catalog()
    if len(parts) == 2 and all(p in catalog for p in parts):
        if catalog[parts[0]].base is not None:
            raise PdplanError(f"--fleet {choice}: prefill runs on uncapped GPUs (power caps are a "
                              "decode-machine setting)", field="fleet")
        return (pair(*parts),)
    raise PdplanError(f"--fleet must be all, any, one of {', '.join(ALIASES)} or a pair PREFILL_GPU/DECODE_GPU "
                      f"of {', '.join(sorted(catalog))}, got {choice!r}", field="fleet")
