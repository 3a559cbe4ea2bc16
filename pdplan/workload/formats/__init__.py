"""Reading and writing trace files: native CSV, Azure LLM trace, Mooncake JSONL, BurstGPT,
lengths-only CSV. Loaders name the file, the 1-based physical line (the header is line 1) and
the field of the first offending value.

The dispatch lives here: :func:`load_trace` reads the header, detects the format and hands the
file to its module (:mod:`.native`, :mod:`.azure`, :mod:`.burstgpt`, :mod:`.lengths` over the
shared CSV reader :mod:`.csvfile`, or :mod:`.mooncake`); :func:`.native.native_csv` writes.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import numpy as np

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import input_file
from pdplan.workload.formats import azure, burstgpt, lengths, mooncake, native
from pdplan.workload.formats.csvfile import CsvFile, binary_error, decode_line, split_csv
from pdplan.workload.model import DEFAULT_BLOCK_TOKENS, Workload

FORMATS = ("azure", "burstgpt", "lengths", "mooncake", "native")
"""Trace formats ``load_trace`` reads, sorted."""

_HEAD_BYTES = 1 << 16


def load_trace(path: str | Path, *, format: str | None = None, sort: bool = False,
               block_tokens: int = DEFAULT_BLOCK_TOKENS) -> Workload:
    """Read a trace file, detecting its format from the header unless ``format`` names one.

    Formats (``FORMATS``):

    - ``native``: CSV ``arrival_s,prompt_tokens,output_tokens[,request_id][,prefix_hashes]``;
      ``prefix_hashes`` holds space-separated integers, one per ``block_tokens`` prompt block.
    - ``azure``: Azure LLM inference CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``; ISO
      timestamps with or without a UTC offset (naive ones are read as UTC); arrivals count
      seconds from the earliest timestamp (the first row of a sorted trace).
    - ``mooncake``: JSONL of ``timestamp`` (ms), ``input_length``, ``output_length``,
      ``hash_ids``.
    - ``burstgpt``: CSV ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``;
      rows with 0 response tokens are failed requests, excluded and counted in
      ``failed_requests``.
    - ``lengths``: CSV ``num_prefill_tokens,num_decode_tokens`` (or ``prompt_tokens,
      output_tokens``) without arrivals; the workload has ``has_arrivals == False``.

    Blank lines are skipped; line numbers in errors stay physical.  Arrivals must be
    non-decreasing unless ``sort`` is true, which sorts stably.  Any rule broken raises a
    ``PdplanError`` naming file, line and field.
    """
    if format is not None and format not in FORMATS:
        raise PdplanError(f"unknown trace format {format!r}; expected one of {', '.join(FORMATS)}")
    if not isinstance(block_tokens, int) or block_tokens < 1:
        raise PdplanError(f"block_tokens must be an integer >= 1, got {block_tokens!r}")
    input_file(path, what="trace", limit=limits.TRACE_BYTES)
    header_line, header = _read_header(path)
    if not header.startswith("{"):
        _check_near_misses(path, header_line, split_csv(header, path, header_line))
    if format is None:
        format = _detect_format(path, header_line, header)
    if format == "mooncake":
        rows = mooncake.load(path, block_tokens, sort)
    else:
        table = CsvFile.open(path, header_line, header)
        rows = _CSV_LOADERS[format](table, block_tokens, sort)
    if sort and rows.arrival_s is not None:
        rows = rows.take(np.argsort(rows.arrival_s, kind="stable"))
    return rows.workload(source=str(path), format=format, block_tokens=block_tokens)


def _read_header(path: str | Path) -> tuple[int, str]:
    """The first non-blank line (1-based number, text) from the head of the file."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError as err:
        raise PdplanError(f"cannot read trace: {err.strerror}", file=path) from None
    nul = head.find(b"\0")
    if nul >= 0:
        raise binary_error(path, head[:nul].count(b"\n") + 1)
    bare_cr = re.search(rb"\r(?!\n)", head)
    if bare_cr is not None and bare_cr.end() < len(head):
        raise PdplanError("lines end in a bare carriage return (CR, classic Mac); save the trace with "
                          "LF or CRLF line ends", file=path, line=head[:bare_cr.start()].count(b"\n") + 1)
    for number, raw in enumerate(head.split(b"\n"), 1):
        text = decode_line(path, number, raw)
        if text.strip():
            return number, text.strip()
    raise PdplanError("trace is empty: expected a header line", file=path, line=1)


_HEADERS = {"native": native.HEADER, "azure": azure.HEADER, "burstgpt": burstgpt.HEADER, "lengths": lengths.HEADER}

#: Every column name a CSV format knows, required or optional.
_KNOWN_COLUMNS = {name for names in _HEADERS.values() for name in names} | set(lengths.ALIAS) | {
    *native.OPTIONAL, *burstgpt.OPTIONAL}

_CSV_LOADERS = {"native": native.load, "azure": azure.load, "burstgpt": burstgpt.load, "lengths": lengths.load}


def _check_near_misses(path: str | Path, line: int, names: list[str]) -> None:
    """A header name one character away from a known column (a Cyrillic а for a Latin a, a
    zero-width space, one letter off) would silently drop that column: it is an error."""
    for name in names:
        if name in _KNOWN_COLUMNS or len(name) < 4:
            continue
        for known in sorted(_KNOWN_COLUMNS):
            if _one_edit_apart(name, known):
                odd = [f"U+{ord(ch):04X} {unicodedata.name(ch, 'unnamed')} at position {i + 1}"
                       for i, ch in enumerate(name) if not ch.isascii() or unicodedata.category(ch) == "Cf"]
                detail = f" ({'; '.join(odd)})" if odd else ""
                raise PdplanError(f"column {name!r} is one character away from {known!r}{detail}; fix the "
                                  "header or rename the column", file=path, line=line, field=name)


def _one_edit_apart(a: str, b: str) -> bool:
    """Whether one substitution, insertion or deletion turns ``a`` into ``b``."""
    if abs(len(a) - len(b)) > 1 or a == b:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long = sorted((a, b), key=len)
    return any(long[:i] + long[i + 1:] == short for i in range(len(long)))


def _detect_format(path: str | Path, header_line: int, header: str) -> str:
    """Name the format from the first line: ``{`` starts JSONL, else CSV column names."""
    if header.startswith("{"):
        return "mooncake"
    names = set(split_csv(header, path, header_line))
    for name, required in _HEADERS.items():
        if names.issuperset(required):
            return name
    if names.issuperset(lengths.ALIAS):
        return "lengths"
    expected = "; ".join(f"{name} ({','.join(cols)})" for name, cols in sorted(_HEADERS.items()))
    raise PdplanError(f"unrecognised trace header {header[:80]!r}; expected columns of {expected}, "
                      "mooncake JSONL, or pass --format", file=path, line=header_line)
