"""A small deterministic event loop: a clock and a heap of (time, priority, seq, callback).

In the manner of SimPy's ``Environment``: ``schedule`` puts a callback on the heap, ``run`` pops
the earliest and calls it, advancing ``now``. Priority orders events at equal times, and the
sequence number (insertion order) breaks the remaining ties, so a run never depends on hash
order or wall-clock time. Serving processes (prefill, links, decode) are built on top in
:mod:`pdplan.sim.reference`; the compiled engine in :mod:`pdplan.sim.fast` keeps the same
ordering with arrays.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable


class Environment:
    """The simulation clock and its pending events."""

    def __init__(self, start_s: float = 0.0):
        self.now = start_s
        self._heap: list[tuple[float, int, int, Callable[..., Any], tuple]] = []
        self._seq = 0
        self.events = 0  #: callbacks run so far

    def schedule(self, time_s: float, priority: int, callback: Callable[..., Any], *args: Any) -> None:
        """Run ``callback(*args)`` at ``time_s``; lower priority first among equal times."""
        assert time_s >= self.now, f"cannot schedule in the past ({time_s} < {self.now})"
        heapq.heappush(self._heap, (time_s, priority, self._seq, callback, args))
        self._seq += 1

    def step(self) -> None:
        """Pop the earliest event, advance the clock to it and run it."""
        time_s, _, _, callback, args = heapq.heappop(self._heap)
        self.now = time_s
        self.events += 1
        callback(*args)

    def stop(self) -> None:
        """Drop every pending event: the run ends when the current callback returns."""
        self._heap.clear()

    def run(self, until_s: float | None = None) -> None:
        """Run events until none are left (or the next one is later than ``until_s``)."""
        while self._heap and (until_s is None or self._heap[0][0] <= until_s):
            self.step()

    @property
    def pending(self) -> int:
        return len(self._heap)
