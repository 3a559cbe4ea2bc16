"""The BurstGPT trace CSV: ``Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type``;
rows with 0 response tokens are failed requests."""

from __future__ import annotations

from pdplan.errors import PdplanError
from pdplan.workload.formats.csvfile import Column, CsvFile
from pdplan.workload.model import Rows, first_true

HEADER = ("Timestamp", "Request tokens", "Response tokens")
"""The columns that name a BurstGPT trace."""
OPTIONAL = ("Model", "Total tokens", "Log Type")


def load(table: CsvFile, block_tokens: int, sort: bool) -> Rows:
    """Rows of a BurstGPT trace; rows with 0 response tokens are failed requests, left out and counted."""
    columns = [Column("Timestamp", "float"), Column("Request tokens", "int", minimum=0),
               Column("Response tokens", "int", minimum=0)]
    table.require(columns, "burstgpt")
    total = [Column("Total tokens", "int", minimum=0)] if "Total tokens" in table.names else []
    arrays = table.read(columns + total)
    table.check_sorted(arrays["Timestamp"], "Timestamp", sort)
    if total:
        row = first_true(arrays["Total tokens"] != arrays["Request tokens"] + arrays["Response tokens"])
        if row is not None:
            line, raw = table.raw(row, "Total tokens")
            raise PdplanError(f"Total tokens must be Request tokens + Response tokens "
                              f"({arrays['Request tokens'][row]} + {arrays['Response tokens'][row]}), got {raw!r}",
                              file=table.path, line=line, field="Total tokens")
    ok = arrays["Response tokens"] > 0
    if not ok.any():
        raise PdplanError(f"no successful requests: all {ok.size} rows have 0 Response tokens",
                          file=table.path, field="Response tokens")
    row = first_true(ok & (arrays["Request tokens"] < 1))
    if row is not None:
        raise table.value_error(row, Column("Request tokens", "int"))
    return Rows(arrival_s=arrays["Timestamp"][ok], prompt_tokens=arrays["Request tokens"][ok],
                 output_tokens=arrays["Response tokens"][ok], failed_requests=int((~ok).sum()))
