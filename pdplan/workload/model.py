"""The ``Workload`` object: one row per request, validated once, and the rows on their way to one.

A workload is one row per request in arrival order: arrival time, prompt and output token
counts, optionally a request id and the prompt's prefix-block hashes.  Loaders validate at the
boundary; everything downstream trusts the object.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pdplan import limits
from pdplan.errors import InternalError, PdplanError

DEFAULT_BLOCK_TOKENS = 512
"""Tokens per prefix-hash block (Mooncake's block size)."""

NO_ARRIVALS_HINT = "give it an arrival process with --arrivals poisson|gamma --rate R"


@dataclass(frozen=True, kw_only=True, eq=False)
class Workload:
    """A request trace, one row per request, in arrival order.

    Arrays are stored exactly as given.  Compare workloads with ``digest()``, not ``==``.
    """

    prompt_tokens: np.ndarray
    """int64, shape (n,): prompt length of each request, >= 1."""
    output_tokens: np.ndarray
    """int64, shape (n,): tokens each request generates, >= 1."""
    arrival_s: np.ndarray | None = None
    """float64, shape (n,): arrival time in seconds, finite and non-decreasing; None for a
    lengths-only trace, which needs an arrival process before it can be replayed."""
    request_id: np.ndarray | None = None
    """object array of non-empty, unique str, shape (n,), or None."""
    hash_values: np.ndarray | None = None
    """int64: prefix-block hash ids of all requests, concatenated (CSR values), or None."""
    hash_offsets: np.ndarray | None = None
    """int64, shape (n + 1,): request i's blocks are ``hash_values[hash_offsets[i]:hash_offsets[i + 1]]``."""
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    """Prompt tokens covered by one prefix-hash block."""
    source: str | None = None
    """Path the trace was read from, or None when it was made in memory."""
    format: str = "native"
    """Name of the format it was read from (one of ``FORMATS``), or ``"synth"``."""
    failed_requests: int = 0
    """Failed requests found in the source trace and excluded from this workload."""
    arrival_grid_s: float | None = None
    """The step of the grid the source's arrival times were rounded to, when its requests have been
    spread over their grid intervals (:func:`pdplan.workload.ticks.spread_over_grid`); else None."""

    def __post_init__(self) -> None:
        n = check_array("prompt_tokens", self.prompt_tokens, np.int64, None)
        check_array("output_tokens", self.output_tokens, np.int64, n)
        if n == 0:
            raise PdplanError("workload has no requests", file=self.source)
        if n > limits.MAX_TRACE_REQUESTS:
            raise PdplanError(f"workload has {n:,} requests, more than the {limits.MAX_TRACE_REQUESTS:,} "
                              "pdplan plans for", file=self.source)
        for name in ("prompt_tokens", "output_tokens"):
            values = getattr(self, name)
            bad = np.flatnonzero((values < 1) | (values > limits.MAX_TOKENS_PER_REQUEST))
            if bad.size:
                raise PdplanError(f"{name} must be an integer from 1 to {limits.MAX_TOKENS_PER_REQUEST:,}, "
                                  f"got {values[bad[0]]} at request {bad[0]}", file=self.source, field=name)
        if self.arrival_s is not None:
            check_array("arrival_s", self.arrival_s, np.float64, n)
            bad = first_true(~(np.abs(self.arrival_s) <= limits.MAX_TRACE_SECONDS))
            if bad is None:
                bad = first_decrease(self.arrival_s)
            if bad is not None:
                raise PdplanError(f"arrival_s must be finite, within ±{limits.MAX_TRACE_SECONDS:g} s and "
                                  f"non-decreasing, got {self.arrival_s[bad]} at request {bad}",
                                  file=self.source, field="arrival_s")
        if self.request_id is not None:
            check_array("request_id", self.request_id, np.object_, n)
            repeated = first_true(pd.Series(self.request_id).duplicated().to_numpy())
            if repeated is not None:
                raise PdplanError(f"request_id must be unique, got {self.request_id[repeated]!r} "
                                  f"again at request {repeated}", file=self.source, field="request_id")
        if not isinstance(self.block_tokens, int) or self.block_tokens < 1:
            raise PdplanError(f"block_tokens must be an integer >= 1, got {self.block_tokens!r}")
        if (self.hash_values is None) != (self.hash_offsets is None):
            raise InternalError("hash_values and hash_offsets go together: give both or neither")
        if self.hash_values is not None:
            self._check_hashes(n)
        if not isinstance(self.failed_requests, int) or self.failed_requests < 0:
            raise PdplanError(f"failed_requests must be an integer >= 0, got {self.failed_requests!r}")
        if self.arrival_grid_s is not None and not (math.isfinite(self.arrival_grid_s) and self.arrival_grid_s > 0):
            raise PdplanError(f"arrival_grid_s must be a finite number > 0, got {self.arrival_grid_s!r}")

    def _check_hashes(self, n: int) -> None:
        check_array("hash_values", self.hash_values, np.int64, None)
        check_array("hash_offsets", self.hash_offsets, np.int64, n + 1)
        offsets = self.hash_offsets
        if offsets[0] != 0 or offsets[-1] != self.hash_values.size or np.any(np.diff(offsets) < 0):
            raise InternalError("hash_offsets must rise from 0 to len(hash_values)")
        bad = first_true(np.diff(offsets) > max_blocks(self.prompt_tokens, self.block_tokens))
        if bad is not None:
            raise PdplanError(f"request {bad} has {offsets[bad + 1] - offsets[bad]} prefix blocks, "
                              f"more than its {self.prompt_tokens[bad]} prompt tokens fill",
                              file=self.source, field="hash_values")

    def __len__(self) -> int:
        return int(self.prompt_tokens.size)

    @property
    def has_arrivals(self) -> bool:
        """False for a lengths-only trace."""
        return self.arrival_s is not None

    @property
    def has_prefix_hashes(self) -> bool:
        return self.hash_values is not None

    def digest(self) -> str:
        """Hex sha256 of the request content, for cache keys.

        Covers arrivals, lengths, request ids, prefix hashes and block size in a canonical
        little-endian encoding; not ``source``, ``format`` or ``failed_requests``, so the same
        requests read from two files share a digest.
        """
        h = hashlib.sha256(b"pdplan.workload.v1")
        parts = {
            "arrival_s": None if self.arrival_s is None else self.arrival_s.astype("<f8"),
            "prompt_tokens": self.prompt_tokens.astype("<i8"),
            "output_tokens": self.output_tokens.astype("<i8"),
            "hash_values": None if self.hash_values is None else self.hash_values.astype("<i8"),
            "hash_offsets": None if self.hash_offsets is None else self.hash_offsets.astype("<i8"),
            "block_tokens": np.array([self.block_tokens], dtype="<i8"),
        }
        for name, array in parts.items():
            h.update(f"\0{name}:".encode())
            h.update(b"-" if array is None else array.tobytes())
        h.update(b"\0request_id:")
        if self.request_id is not None:
            h.update(json.dumps(self.request_id.tolist()).encode())
        return h.hexdigest()


def is_int64(value: object) -> bool:
    """Whether ``value`` is a Python integer (not a bool) that fits int64, as a read hash id must."""
    return isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63


def max_blocks(prompt_tokens: np.ndarray, block_tokens: int) -> np.ndarray:
    """Most prefix blocks a prompt can have: ceil(prompt_tokens / block_tokens)."""
    return -(-prompt_tokens // block_tokens)


def check_array(name: str, array: object, dtype: type, size: int | None) -> int:
    if not isinstance(array, np.ndarray) or array.ndim != 1 or array.dtype != dtype:
        raise InternalError(f"{name} must be a 1-D numpy array of {np.dtype(dtype)}")
    if size is not None and array.size != size:
        raise InternalError(f"{name} has {array.size} entries, expected {size}")
    return int(array.size)


def first_true(mask: np.ndarray) -> int | None:
    hits = np.flatnonzero(mask)
    return int(hits[0]) if hits.size else None


def first_decrease(values: np.ndarray) -> int | None:
    """Index of the first value smaller than its predecessor."""
    hit = first_true(np.diff(values) < 0)
    return None if hit is None else hit + 1



@dataclass(frozen=True, kw_only=True, eq=False)
class Rows:
    """Validated columns on their way to a Workload (sorting happens here, before the checks
    of ``Workload.__post_init__``)."""

    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_s: np.ndarray | None = None
    request_id: np.ndarray | None = None
    hash_values: np.ndarray | None = None
    hash_offsets: np.ndarray | None = None
    failed_requests: int = 0

    def take(self, index: np.ndarray) -> Rows:
        """The rows at ``index``, in that order (repeats allowed)."""
        values, offsets = self.hash_values, self.hash_offsets
        if values is not None:
            values, offsets = _take_csr(values, offsets, index)
        return Rows(
            prompt_tokens=self.prompt_tokens[index], output_tokens=self.output_tokens[index],
            arrival_s=None if self.arrival_s is None else self.arrival_s[index],
            request_id=None if self.request_id is None else self.request_id[index],
            hash_values=values, hash_offsets=offsets, failed_requests=self.failed_requests)

    def workload(self, **extra: object) -> Workload:
        return Workload(**self.__dict__, **extra)

    @classmethod
    def of(cls, workload: Workload) -> Rows:
        return cls(prompt_tokens=workload.prompt_tokens, output_tokens=workload.output_tokens,
                   arrival_s=workload.arrival_s, request_id=workload.request_id,
                   hash_values=workload.hash_values, hash_offsets=workload.hash_offsets,
                   failed_requests=workload.failed_requests)


def _take_csr(values: np.ndarray, offsets: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Gather rows ``index`` of a CSR array."""
    counts = np.diff(offsets)[index]
    new_offsets = np.zeros(index.size + 1, dtype=np.int64)
    np.cumsum(counts, out=new_offsets[1:])
    shift = np.repeat(offsets[:-1][index] - new_offsets[:-1], counts)
    return values[np.arange(new_offsets[-1], dtype=np.int64) + shift], new_offsets


def require_arrivals(workload: Workload, action: str) -> np.ndarray:
    if workload.arrival_s is None:
        raise PdplanError(f"cannot {action}: the {workload.format} trace has no arrival times "
                          f"(lengths only); {NO_ARRIVALS_HINT}", file=workload.source)
    return workload.arrival_s
