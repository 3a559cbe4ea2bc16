"""pdplan's native trace CSV: ``arrival_s,prompt_tokens,output_tokens[,request_id][,prefix_hashes]``,
read with row-numbered errors and written back so that it reads to the same digest."""

from __future__ import annotations

import csv
import itertools

import numpy as np
import pandas as pd

from pdplan.errors import PdplanError
from pdplan.workload.formats.csvfile import Column, CsvFile
from pdplan.workload.model import Rows, Workload, first_true, is_int64, max_blocks, require_arrivals

HEADER = ("arrival_s", "prompt_tokens", "output_tokens")
"""The columns that name a native trace."""
OPTIONAL = ("request_id", "prefix_hashes")


def load(table: CsvFile, block_tokens: int, sort: bool) -> Rows:
    """Rows of a native trace, with its optional request ids and prefix hashes."""
    columns = [Column("arrival_s", "float"), Column("prompt_tokens", "int"), Column("output_tokens", "int")]
    table.require(columns, "native")
    has_ids, has_hashes = "request_id" in table.names, "prefix_hashes" in table.names
    columns += [Column("request_id", "text")] * has_ids + [Column("prefix_hashes", "hashes")] * has_hashes
    arrays = table.read(columns)
    table.check_sorted(arrays["arrival_s"], "arrival_s", sort)
    if has_ids:
        _check_unique_ids(table, arrays["request_id"])
    values = offsets = None
    if has_hashes:
        values, offsets = _parse_hashes(table, arrays["prefix_hashes"])
        _check_block_counts(table, offsets, arrays["prompt_tokens"], block_tokens)
    return Rows(arrival_s=arrays["arrival_s"], prompt_tokens=arrays["prompt_tokens"],
                 output_tokens=arrays["output_tokens"],
                 request_id=arrays["request_id"] if has_ids else None,
                 hash_values=values, hash_offsets=offsets)


def _check_unique_ids(table: CsvFile, ids: np.ndarray) -> None:
    repeated = first_true(pd.Series(ids).duplicated().to_numpy())
    if repeated is not None:
        first = int(np.flatnonzero(ids == ids[repeated])[0])
        line, raw = table.raw(repeated, "request_id")
        first_line, _ = table.locate(first)
        raise PdplanError(f"request_id must be unique, got {raw!r} again (first on line {first_line})",
                          file=table.path, line=line, field="request_id")


def _parse_hashes(table: CsvFile, texts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Space-separated integer strings to CSR (values, offsets); each value must fit int64."""
    split = [text.split() for text in texts]
    offsets = np.zeros(len(split) + 1, dtype=np.int64)
    np.cumsum([len(blocks) for blocks in split], out=offsets[1:])
    try:
        values = np.array(list(itertools.chain.from_iterable(split)), dtype=np.int64)
    except OverflowError:
        row = next(i for i, blocks in enumerate(split) if not all(is_int64(int(b)) for b in blocks))
        line, raw = table.raw(row, "prefix_hashes")
        raise PdplanError(f"prefix_hashes values must lie in [-2**63, 2**63), got {raw!r}",
                          file=table.path, line=line, field="prefix_hashes") from None
    return values, offsets


def _check_block_counts(table: CsvFile, offsets: np.ndarray, prompt: np.ndarray, block_tokens: int) -> None:
    limit = max_blocks(prompt, block_tokens)
    row = first_true(np.diff(offsets) > limit)
    if row is not None:
        line, _ = table.locate(row)
        raise PdplanError(f"prefix_hashes has {offsets[row + 1] - offsets[row]} blocks, but "
                          f"prompt_tokens {prompt[row]} fills at most {limit[row]} blocks of "
                          f"{block_tokens} tokens", file=table.path, line=line, field="prefix_hashes")


def native_csv(workload: Workload) -> str:
    """The workload as native CSV text; arrivals are written in shortest round-trip form, so
    ``load_trace`` gives back the same digest."""
    arrival_s = require_arrivals(workload, "write a native trace")
    header = ["arrival_s", "prompt_tokens", "output_tokens"]
    columns = [[repr(t) for t in arrival_s.tolist()], workload.prompt_tokens.tolist(),
               workload.output_tokens.tolist()]
    if workload.request_id is not None:
        header.append("request_id")
        columns.append(workload.request_id.tolist())
    if workload.hash_values is not None:
        header.append("prefix_hashes")
        blocks = np.split(workload.hash_values, workload.hash_offsets[1:-1])
        columns.append([" ".join(map(str, b.tolist())) for b in blocks])
    lines = _CsvText()
    writer = csv.writer(lines, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(zip(*columns))
    return lines.text()


class _CsvText:
    """Collects what ``csv.writer`` writes."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write(self, text: str) -> None:
        self.parts.append(text)

    def text(self) -> str:
        return "".join(self.parts)
