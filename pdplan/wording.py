"""How counts read in text for people: the library's reasons and the CLI's lines alike."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``1 check``, ``2 checks``, ``0 checks``; ``plural`` where adding an s is wrong (losses)."""
    return f"{count:,} {noun if count == 1 else plural or noun + 's'}"
