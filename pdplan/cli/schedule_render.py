"""What ``pdplan optimize --windows`` prints: the per-window schedule, its verdicts and the static
plans beside it, and the changes between windows."""

from __future__ import annotations

from rich.table import Table

from pdplan.cli.output import print_json, stdout
from pdplan.schedule import WindowedReport
from pdplan.schedule.program import CHANGING
from pdplan.schedule.search import MAX_SCHEDULE_ROUNDS
from pdplan.wording import counted


def render(report: WindowedReport, doc: dict, as_json: bool) -> None:
    if as_json:
        print_json(doc)
        return
    chosen = report.chosen
    if chosen is None:
        stdout.print("No schedule passes every window end to end; nothing was written.", markup=False)
        for mode, s in report.schedules.items():
            text = report.reasons.get(mode) or f"misses windows {', '.join(map(str, s.missed))}"
            stdout.print(f"  {mode}: {text}", markup=False, highlight=False)
        return
    s = chosen.schedule
    shapes = ("shapes change between windows: " + counted(s.reshapes, "reshape") if s.reshapes else
              " + ".join(f"{c.phase} {c.shape_label(compact=True)}" for c in s.shapes.values()))
    mode = "colocated or disaggregated by window" if s.mode == CHANGING else s.mode
    static = f"; {_static_answer(report)}" if chosen is report.static_peak else ""
    stdout.print(f"[bold]{report.request.model.name}: {mode} over {len(report.windows)} windows[/bold] ({shapes})"
                 f"{static}; every window verified end to end on its own requests "
                 f"({counted(chosen.rounds, 'program round')})", highlight=False)
    table = Table(title="Schedule (replicas per window; changes = instances joining or leaving a pool as the window "
                        "starts, each drained first)")
    for name in ("window", "start", "req/s", *(("shapes",) if s.reshapes else ()),
                 *[f"{p} replicas" for p in s.phases], "changes", "GPUs", "joint", "verdict"):
        table.add_column(name, justify="right")
    for check in chosen.checks:
        w, i = check.window, check.window.index
        running = (" + ".join(f"{c.phase} {c.shape_label(compact=True)}" for c in s.window_shapes[i].values()),)
        table.add_row(str(i), _clock(w.start_s), f"{w.rate_rps:.3g}", *(running if s.reshapes else ()),
                      *[str(s.replicas[i].get(p, "—")) for p in s.phases],
                      str(sum(s.joins[i].values()) + sum(s.leaves[i].values())), str(s.gpus(i)),
                      f"{check.verification.joint.mean:.3f}", "passes" if check.verification.passed else "MISSES")
    stdout.print(table)
    _bounds(report)
    totals = Table(title="Against static plans (each its own cheapest shapes, the same replicas all day)")
    for name in ("plan", "GPU-hours", "USD", "windows missed", "vs static peak"):
        totals.add_column(name, justify="right")
    peak = report.static_peak
    for result in (chosen, *((peak,) if peak is not chosen else ()), report.static_mean):
        if result is None:
            continue
        saved = "" if peak is None else f"{result.schedule.gpu_hours / peak.schedule.gpu_hours - 1:+.1%} GPU-h"
        totals.add_row(result.kind, f"{result.schedule.gpu_hours:,.1f}", f"${result.schedule.usd:,.2f}",
                       str(len(result.missed)), saved)
    stdout.print(totals)
    _timeline(chosen.timeline)
    if s.change_usd:
        stdout.print(f"change cost: ${s.change_usd:,.2f} of the windowed total ({report.change_gpu_minutes:g} "
                     "GPU-minutes per GPU of each instance joining or leaving a pool)", markup=False, highlight=False)


def _static_answer(report: WindowedReport) -> str:
    """Why the answer runs the same replicas all day: the static peak plan passes for no more than each windowed
    schedule, which costs more, misses windows, or has none."""
    others = []
    for mode, result in report.schedules.items():
        if result is None:
            others.append(f"{mode}: {report.reasons.get(mode, 'none')}")
        elif result.passed:
            others.append(f"{mode} ${result.schedule.usd:,.2f}")
        else:
            others.append(f"{mode} misses windows {', '.join(map(str, result.missed))} after "
                          f"{counted(result.rounds, 'program round')}")
    return ("the same replicas all day: the static peak plan passes for no more than a windowed schedule ("
            + "; ".join(others) + ")")


def _bounds(report: WindowedReport) -> None:
    """The schedule against each window planned alone (verified, and the program's own bound at
    the windows' rates) and against one shape per phase all day."""
    alone = report.windows_alone_usd
    if alone is None:
        return
    s = report.chosen.schedule
    line = (f"each window planned alone and verified: ${alone:,.2f} (the program's bound at the windows' rates: "
            f"${report.window_optima_usd:,.2f}); this schedule runs for ${s.run_usd:,.2f} "
            f"({s.run_usd / alone - 1:+.1%}) plus ${s.change_usd:,.2f} of changes")
    if report.one_shape is not None:
        line += f"; held to one shape per phase all day the program's best is ${report.one_shape.usd:,.2f}"
    missed = [v.checks[0].window.index for v in report.windows_alone if not v.passed]
    if missed:
        line += (f"; alone, windows {', '.join(map(str, missed))} still missed after {MAX_SCHEDULE_ROUNDS} "
                 "programs (their figures are the last tried)")
    stdout.print(line, markup=False, highlight=False)


def _timeline(timeline) -> None:
    """The changes as a deployer runs them, and the whole-schedule verdict."""
    if timeline is None:
        return
    if timeline.changes:
        table = Table(title="Changes between windows (routes stop, the instance drains, then it is reloaded or "
                            "started and rejoins; simulated)")
        for name in ("window", "at", "pool", "replica", "change", "drain s", "takes requests at", "on GPUs of"):
            table.add_column(name, justify="right")
        for c in timeline.changes:
            table.add_row(str(c.window), _clock(c.at_s), c.pool, str(c.replica), c.kind,
                          "—" if c.drain_s is None else f"{c.drain_s:.1f}",
                          "—" if c.ready_s is None else _clock(c.ready_s), c.took_gpus_of or "—")
        stdout.print(table)
    missed = [v.window for v in timeline.windows if not v.passed]
    verdict = "every window passes" if not missed else f"windows {', '.join(map(str, missed))} MISS"
    stdout.print(f"whole schedule on the whole trace, changes drained first: {verdict} "
                 f"({counted(timeline.passes, 'timeline simulation')} until rejoin times "
                 "settled)", markup=False, highlight=False)


def _clock(seconds: float) -> str:
    hours, rest = divmod(int(round(seconds)), 3600)
    return f"{hours:d}:{rest // 60:02d}:{rest % 60:02d}"
