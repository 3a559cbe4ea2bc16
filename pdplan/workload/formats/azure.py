"""The Azure LLM inference trace CSV: ``TIMESTAMP,ContextTokens,GeneratedTokens``."""

from __future__ import annotations

from pdplan.workload.formats.csvfile import Column, CsvFile
from pdplan.workload.model import Rows

HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
"""The columns that name an Azure trace."""


def load(table: CsvFile, block_tokens: int, sort: bool) -> Rows:
    """Rows of an Azure trace; arrivals count seconds from the earliest timestamp."""
    columns = [Column("TIMESTAMP", "time"), Column("ContextTokens", "int"),
               Column("GeneratedTokens", "int")]
    table.require(columns, "azure")
    arrays = table.read(columns)
    stamps_ns = arrays["TIMESTAMP"]
    table.check_sorted(stamps_ns, "TIMESTAMP", sort)
    return Rows(arrival_s=(stamps_ns - stamps_ns.min()) / 1e9, prompt_tokens=arrays["ContextTokens"],
                 output_tokens=arrays["GeneratedTokens"])
