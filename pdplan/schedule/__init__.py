"""Plans over time: per-window replicas under one inventory, changes between windows that drain
first, verified window by window.

Modules: :mod:`.windows` (cutting the trace), :mod:`.program` (the windowed integer program),
:mod:`.search` (the verified search over windows and the static plans it is judged against).
"""

from pdplan.schedule.program import Schedule, solve_schedule
from pdplan.schedule.search import VerifiedSchedule, WindowedReport, plan_windows
from pdplan.schedule.windows import Window, cut, window_starts

__all__ = ["Schedule", "VerifiedSchedule", "Window", "WindowedReport", "cut", "plan_windows", "solve_schedule",
           "window_starts"]
