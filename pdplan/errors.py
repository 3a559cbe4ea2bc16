"""The one base class for bad input, the message shape every loader uses, and the error for a bug."""

from __future__ import annotations

from pathlib import Path


class PdplanError(Exception):
    """Unusable input: a file, row or field that breaks a stated rule.

    The message reads ``file:line: field <rule>, got <value>`` so that a person can go
    straight to the offending place.  The CLI prints it as one ``Error:`` line and exits 2.
    """

    def __init__(self, message: str, *, file: str | Path | None = None,
                 line: int | None = None, field: str | None = None):
        self.file = None if file is None else str(file)
        self.line = line
        self.field = field
        self.detail = message
        super().__init__(self._render())

    def _render(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
        elif self.line is not None:
            where = f"line {self.line}"
        text = " ".join(self.detail.split())  # always one line
        return f"{where}: {text}" if where else text

    def __reduce__(self):
        """Pickled whole (a worker process's error reaches the CLI with its file, line and field)."""
        return _rebuild, (type(self), self.detail, self.file, self.line, self.field)


def _rebuild(cls: type, detail: str, file: str | None, line: int | None, field: str | None) -> PdplanError:
    return cls(detail, file=file, line=line, field=field)


class InfeasibleError(PdplanError):
    """The inputs are well formed but no plan satisfies them; the message names the binding constraint."""


class InternalError(Exception):
    """A bug in pdplan, not bad input: an invariant the code itself should have kept."""
