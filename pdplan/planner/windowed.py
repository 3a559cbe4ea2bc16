"""What ``optimize --windows`` takes: the trace cut into windows, and the settings a windowed
schedule cannot honour, refused rather than ignored."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from pdplan.errors import PdplanError
from pdplan.schedule import Window, cut, window_starts
from pdplan.schedule.windows import merge_ragged, windows_file
from pdplan.vocabulary import Affinity, Objective, Redundancy
from pdplan.workload import Workload

#: Longest change cost a windowed schedule takes, GPU-minutes per GPU: a day.
MAX_CHANGE_GPU_MINUTES = 24 * 60


def check_windowed(*, objective: Objective, target_rate: float | None, fleet: str, affinity: Affinity,
                   redundancy: Redundancy, budgets: tuple[float | None, ...], borrow: bool = False) -> None:
    """A windowed schedule minimises cost over the windows at each window's own rate, on one named
    fleet at high node affinity, within the cluster's inventory, without losses verified."""
    if objective != Objective.COST:
        raise PdplanError("--windows minimises cost over the windows; drop --objective", field="objective")
    if target_rate is not None:
        raise PdplanError("--windows plans each window at its own rate; drop --target-rate", field="target_rate")
    if fleet == "all":
        raise PdplanError("--windows plans one fleet: name it (any, HH, a PREFILL_GPU/DECODE_GPU pair)", field="fleet")
    if affinity == Affinity.LOW:
        raise PdplanError("--windows places every window at high node affinity; drop --affinity low",
                          field="affinity")
    if redundancy != Redundancy.NONE:
        raise PdplanError("--windows does not verify losses yet; drop --redundancy", field="redundancy")
    if borrow:
        raise PdplanError("--windows schedules dedicated pools and flips; borrowing is not scheduled yet: drop "
                          "--borrow", field="borrow")
    if any(b is not None for b in budgets):
        raise PdplanError("--windows plans within the cluster's inventory; drop --max-gpus, --max-cost and "
                          "--max-power", field="max_gpus")


def trace_windows(workload: Workload, trace: Path, windows: str, *, peak: bool,
                  notify: Callable[[str], None] = lambda notice: None) -> list[Window]:
    """``workload`` cut into the windows ``windows`` names (a length or a file of starts), each
    at its mean rate or, with ``peak``, its busiest minute's. Cut by a length, a first or last
    window too sparse to have a rate joins its neighbour (:func:`merge_ragged`, each merge told to
    ``notify``); a file's boundaries are kept as written."""
    if not workload.has_arrivals:
        raise PdplanError("--windows needs a trace with arrival times", file=trace)
    starts = window_starts(windows, float(workload.arrival_s[-1] - workload.arrival_s[0]))
    if windows_file(windows) is None:
        starts, notices = merge_ragged(workload, starts)
        for notice in notices:
            notify(notice)
    return cut(workload, starts, peak=peak)
