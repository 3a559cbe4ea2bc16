"""Ctrl-C: one line and exit 130 at any moment, nothing written.

Ctrl-C raises :class:`Interrupted` rather than KeyboardInterrupt, which click turns into an empty
line and "Aborted" and some libraries catch themselves. Unwinding runs every ``finally`` (temp
files are removed), and a command writes its outputs only at its end, so an interrupted command
leaves every file as it was. Standard library only: :mod:`pdplan.entry` installs the handler
before the command's slow imports.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator, NoReturn

#: 128 + SIGINT, the code a shell gives a command that Ctrl-C ended.
EXIT_CODE = 130
MESSAGE = "Interrupted"


class Interrupted(BaseException):
    """SIGINT, raised wherever the program was (a BaseException: no ``except Exception`` keeps it)."""


def _interrupt(signum, frame) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the cleanup short
    raise Interrupted


@contextmanager
def interruptible() -> Iterator[None]:
    """Within, SIGINT raises :class:`Interrupted`; the previous handler is back afterwards. Only
    the main thread receives signals, so elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Within, Ctrl-C waits: it is noted, and raised again when the block ends, for steps that must
    not be cut in two (renaming outputs into place, starting worker processes). Deferred at the
    Python handler, not by masking the signal: the kernel hands a signal sent to the process to
    any thread that does not mask it. Only the main thread runs handlers, so elsewhere nothing
    changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)  # as if it came now, to the handler in force before


def interrupted() -> NoReturn:
    """End the command as interrupted: the one line on stderr, exit 130."""
    sys.stderr.write(f"{MESSAGE}\n")
    sys.stderr.flush()
    sys.exit(EXIT_CODE)
