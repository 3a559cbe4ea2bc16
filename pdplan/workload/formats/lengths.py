"""A lengths-only trace CSV: ``num_prefill_tokens,num_decode_tokens`` (or ``prompt_tokens,
output_tokens``), without arrivals."""

from __future__ import annotations

from pdplan.workload.formats.csvfile import Column, CsvFile
from pdplan.workload.model import Rows

HEADER = ("num_prefill_tokens", "num_decode_tokens")
"""The columns that name a lengths-only trace."""
ALIAS = ("prompt_tokens", "output_tokens")
"""The same columns under native names (a native trace without ``arrival_s``)."""


def load(table: CsvFile, block_tokens: int, sort: bool) -> Rows:
    """Rows of a lengths-only trace (no arrivals)."""
    names = HEADER if "num_prefill_tokens" in table.names else ALIAS
    columns = [Column(names[0], "int"), Column(names[1], "int")]
    table.require(columns, "lengths")
    arrays = table.read(columns)
    return Rows(prompt_tokens=arrays[names[0]], output_tokens=arrays[names[1]])
