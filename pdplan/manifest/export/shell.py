"""The one writer of bash script text: every value quoted, every comment a single line.

A value becomes one shell word through ``shlex.quote`` (POSIX single quotes, which bash reads
verbatim: no expansion, no splitting, no globbing); a variable the script must expand when it
runs is a :class:`Var`, written double-quoted (``"$NAME"``: expanded once, never split); a
comment has every line break and control character replaced by a space, so no text can end it
and start a command (bash ends a comment at a newline, see bash(1), COMMENTS).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from pdplan.errors import InternalError

#: A shell variable name (POSIX: letters, digits and '_', not starting with a digit).
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: What could end a comment line or garble a terminal: C0 controls, DEL, C1 controls, and
#: Unicode's line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


@dataclass(frozen=True)
class Var:
    """A variable the script expands when it runs, e.g. ``Var("LWS_LEADER_ADDRESS")``."""

    name: str

    def __post_init__(self):
        if not _VARIABLE.fullmatch(self.name):
            raise InternalError(f"not a shell variable name: {self.name!r}")

    def __str__(self) -> str:
        return f'"${self.name}"'


#: One shell word: a literal, a variable, or a tuple of those written together as one word.
Word = str | Var | tuple[str | Var, ...]


def word(value: Word) -> str:
    """``value`` as one shell word: literals quoted, variables expanded."""
    pieces = value if isinstance(value, tuple) else (value,)
    return "".join(str(p) if isinstance(p, Var) else shlex.quote(p) for p in pieces)


def line(argv: list[Word]) -> str:
    """A command on one line."""
    return " ".join(word(arg) for arg in argv)


def command(argv: list[Word]) -> str:
    """``exec`` line of a script, one ``--flag value`` per continued line for reading."""
    parts = [word(argv[0])]
    for arg in argv[1:]:
        first = arg[0] if isinstance(arg, tuple) else arg
        flag = isinstance(first, str) and first.startswith("--")
        parts.append(f" \\\n    {word(arg)}" if flag else f" {word(arg)}")
    return "exec " + "".join(parts)


def export(name: str, value: str) -> str:
    """``export NAME=value``, the value quoted."""
    return f"export {Var(name).name}={shlex.quote(value)}"


def comment(text: str) -> str:
    """``# text`` on one line, whatever ``text`` holds."""
    return f"# {_CONTROL.sub(' ', text)}"


def require(argv: list[Word], message: str, status: int) -> str:
    """A line that runs ``argv`` silently and, when it fails, prints ``message`` (one line) to
    stderr and exits with ``status``."""
    return f"{line(argv)} >/dev/null 2>&1 || {{ {fail(message, status)}; }}"


def fail(message: str, status: int) -> str:
    """A line that prints ``message`` (one line) to stderr and exits with ``status``."""
    return f"printf '%s\\n' {shlex.quote(_CONTROL.sub(' ', message))} >&2; exit {int(status)}"
