"""A broken rule of a manifest: the field it names and what is wrong, as ``pdplan validate`` prints it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Violation:
    field: str
    message: str

    def __str__(self) -> str:
        """One line, whatever a hand-edited manifest put into the field or the value quoted."""
        return " ".join(f"{self.field}: {self.message}".split())
