"""A trace cut into planning windows, each with the rate its plan must serve.

``--windows 1h`` (also ``30m``, ``900s`` or plain seconds) cuts the trace into equal windows from
its first arrival; ``--windows FILE`` reads explicit window starts, one number of seconds from
the first arrival per line (a ``start_s`` header is allowed), the first of them 0. A window's
rate is its mean (requests over its length), or with ``--peak`` its busiest minute.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.fileio import read_text
from pdplan.workload import Workload, peak_rate_rps, window

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
#: Windows one schedule may have.
MAX_WINDOWS = 1000


@dataclass(frozen=True, kw_only=True, eq=False)
class Window:
    """One stretch of the trace: its requests (arrivals from 0) and the rate its plan serves."""

    index: int
    start_s: float
    end_s: float
    requests: Workload
    mean_rps: float
    peak_rps: float
    rate_rps: float          #: what the window's plan must serve: the mean, or the peak with --peak

    @property
    def hours(self) -> float:
        return (self.end_s - self.start_s) / 3600.0


LENGTH = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*")


def windows_file(text: str | None) -> Path | None:
    """The file ``--windows`` names, or None when it gives a length (a file of that name wins) or
    is not given."""
    if text is None or LENGTH.fullmatch(text) and not os.path.lexists(text):
        return None
    return Path(text)


def window_starts(text: str, span_s: float) -> list[float]:
    """Window starts from ``--windows``: a length (``1h``, ``30m``, ``900s``, ``600``) or a file."""
    path = windows_file(text)
    if path is None:
        match = LENGTH.fullmatch(text)
        length = float(match.group(1)) * UNITS[match.group(2) or "s"]
        if not length > 0:
            raise PdplanError(f"--windows length must be > 0, got {text!r}", field="windows")
        count = max(1, math.ceil(span_s / length - 1e-9))
        if count > MAX_WINDOWS:
            raise PdplanError(f"--windows {text} cuts the trace's {span_s:,.0f} s into {count:,} windows; at most "
                              f"{MAX_WINDOWS:,}", field="windows")
        return [i * length for i in range(count)]
    if not os.path.lexists(path):
        raise PdplanError(f"--windows must be a length (1h, 30m, 900s, 600) or a file of window starts, "
                          f"got {text!r}", field="windows")
    return _read_starts(path)  # a FIFO, device or folder is refused by name, as every input is


def _read_starts(path: Path) -> list[float]:
    starts = []
    lines = read_text(path, what="windows file", limit=limits.YAML_BYTES).splitlines()
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or (number == 1 and text == "start_s"):
            continue
        try:
            value = float(text)
        except ValueError:
            raise PdplanError(f"start_s must be a number of seconds, got {text!r}", file=path, line=number,
                              field="start_s") from None
        if not math.isfinite(value) or value < 0 or (starts and value <= starts[-1]):
            raise PdplanError(f"start_s must be finite, >= 0 and rise line by line, got {text!r}", file=path,
                              line=number, field="start_s")
        starts.append(value)
    if not starts or starts[0] != 0:
        raise PdplanError("the first window must start at 0 (the trace's first arrival)", file=path, field="start_s")
    if len(starts) > MAX_WINDOWS:
        raise PdplanError(f"{len(starts):,} windows; at most {MAX_WINDOWS:,}", file=path, field="start_s")
    return starts


def merge_ragged(workload: Workload, starts: list[float]) -> tuple[list[float], list[str]]:
    """Window starts in which a first or last window holding fewer than two requests (too few to
    have a rate: a trace ends where it ends) is merged into its neighbour, and a notice per merge.
    Windows between keep their boundaries (and :func:`cut`'s error)."""
    arrival = workload.arrival_s - workload.arrival_s[0]
    starts, notices = list(starts), []

    def count(lo: float, hi: float) -> int:
        return int(np.count_nonzero((arrival >= lo) & (arrival < hi)))

    end = float(arrival[-1]) + 1e-6
    while len(starts) > 1 and (held := count(starts[-1], max(end, starts[-1]))) < 2:
        notices.append(f"the last window [{starts[-1]:g} s, end) held {held} request(s), too few to have a rate: "
                       f"merged into the window before it, from {starts[-2]:g} s")
        starts.pop()
    while len(starts) > 1 and (held := count(starts[0], starts[1])) < 2:
        notices.append(f"the first window [{starts[0]:g}, {starts[1]:g}) s held {held} request(s), too few to have "
                       f"a rate: merged into the window after it")
        del starts[1]
    return starts, notices


def cut(workload: Workload, starts: list[float], *, peak: bool) -> list[Window]:
    """The windows that ``starts`` cut; the last ends at the trace's last arrival."""
    arrival = workload.arrival_s - workload.arrival_s[0]
    span = float(arrival[-1])
    ends = starts[1:] + [max(span, starts[-1]) + 1e-6]
    found = []
    for i, (start, end) in enumerate(zip(starts, ends)):
        count = int(np.count_nonzero((arrival >= start) & (arrival < end)))
        if count < 2:
            raise PdplanError(f"window {i} [{start:g}, {end:g}) s holds {count} request(s); a window needs at least "
                              "two to have a rate (use longer windows)", file=workload.source, field="windows")
        requests = window(workload, start_s=start, duration_s=end - start)
        mean = count / (end - start)
        top = peak_rate_rps(requests.arrival_s) or mean
        found.append(Window(index=i, start_s=start, end_s=end, requests=requests, mean_rps=mean, peak_rps=top,
                            rate_rps=top if peak else mean))
    return found
