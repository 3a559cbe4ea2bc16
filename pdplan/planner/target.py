"""The rate a plan must serve: the one given, the trace's busiest minute, or its mean rate."""

from __future__ import annotations

from pathlib import Path

from pdplan.errors import PdplanError
from pdplan.vocabulary import Objective
from pdplan.workload import Workload, peak_rate_rps


def trace_rate_rps(workload: Workload, trace: Path) -> float:
    """The trace's mean rate (requests over first to last arrival), the default target."""
    if not workload.has_arrivals:
        raise PdplanError("trace has no arrival times; give --target-rate", file=trace)
    duration = float(workload.arrival_s[-1] - workload.arrival_s[0])
    if duration <= 0:
        raise PdplanError("all arrivals fall at one instant; give --target-rate", file=trace)
    return len(workload) / duration


def target_rate(workload: Workload, trace: Path, *, given: float | None = None,
                objective: Objective = Objective.COST, peak: bool = False, windowed: bool = False) -> float | None:
    """The target rate of a plan on ``workload`` (read from the file ``trace``): none when the
    objective is goodput (the search finds the highest rate itself), else the rate ``given``, else
    with ``peak`` the busiest minute's rate (windowed: each window takes its own busiest minute,
    and the whole trace its mean rate), else the trace's mean rate."""
    if objective == Objective.GOODPUT:
        return None
    if given is not None:
        rate = given
    elif peak and not windowed:
        if not workload.has_arrivals:
            raise PdplanError("trace has no arrival times; give --target-rate", file=trace)
        rate = peak_rate_rps(workload.arrival_s)
    else:
        rate = trace_rate_rps(workload, trace)
    if not rate > 0:
        raise PdplanError(f"--target-rate must be > 0, got {rate!r}", field="target_rate")
    return rate
