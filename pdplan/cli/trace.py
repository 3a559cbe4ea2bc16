"""`pdplan trace …`: statistics, transforms and synthesis of workload traces."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from pdplan import limits
from pdplan import workload as wl
from pdplan.cli.options import check_seed, choice, within
from pdplan.cli.output import print_json, stdout
from pdplan.errors import PdplanError
from pdplan.fileio import Outputs
from pdplan.vocabulary import TraceArrivals

app = typer.Typer(help="Inspect, transform and synthesise request traces.", no_args_is_help=True)

LENGTH_KEYS = ("mean", "p50", "p90", "p99", "max")

TraceArg = Annotated[Path, typer.Argument(help="Trace file (native CSV, Azure CSV, Mooncake JSONL, "
                                               "BurstGPT CSV or a lengths-only CSV).", show_default=False)]
FormatOpt = Annotated[str | None, typer.Option(
    "--format", help=f"Trace format, one of {', '.join(wl.FORMATS)}; detected from the header if omitted.")]
SortOpt = Annotated[bool, typer.Option("--sort", help="Sort rows stably by arrival time instead of "
                                                      "rejecting a trace whose arrivals go backwards.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")]
OutOpt = Annotated[Path, typer.Option("-o", "--out", help="Native CSV file to write (atomically).",
                                      show_default=False)]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for numpy.random.default_rng; recorded in --json.")]
CvOpt = Annotated[float | None, typer.Option(
    "--cv", help="Coefficient of variation of inter-arrival gaps; only with --arrivals gamma.")]


@app.command()
def stats(trace: TraceArg, format: FormatOpt = None, sort: SortOpt = False, json: JsonOpt = False) -> None:
    """Summarise a trace: request count, rates, burstiness, length percentiles, prefix reuse.

    mean_rate_rps is requests / duration_s (first to last arrival).
    peak_rate_rps is the most arrivals in any half-open 60 s window [t, t+60) divided by 60; requests / duration_s for a trace shorter than 60 s.
    prefix_reuse_fraction is the share of prefix blocks whose hash id appeared in an earlier request.
    """  # noqa: E501  (typer prints this help line by line; a wrap would split the peak_rate_rps line)
    result = wl.trace_stats(wl.load_trace(trace, format=format, sort=sort))
    if json:
        print_json(result.to_dict())
    else:
        _print_stats(result)


@app.command()
def transform(
    trace: TraceArg,
    out: OutOpt,
    rate: Annotated[float | None, typer.Option(
        "--rate", help="Target mean arrival rate (requests/s). With --arrivals trace the gaps are "
                       "scaled to reach it, keeping the burst shape; required for poisson/gamma.")] = None,
    arrivals: Annotated[TraceArrivals, choice(
        "--arrivals", TraceArrivals, help="trace: keep (and rescale) the trace's arrivals; poisson|gamma: new "
                                          "arrivals at --rate with lengths resampled, with replacement, from "
                                          "the trace.")] = TraceArrivals.TRACE,
    cv: CvOpt = None,
    start: Annotated[float | None, typer.Option(
        "--start", help="Window start, seconds after the first arrival (applied before the rate).")] = None,
    duration: Annotated[float | None, typer.Option(
        "--duration", help="Window length in seconds; default to the end of the trace.")] = None,
    requests: Annotated[int | None, typer.Option(
        "--requests", help="Requests to draw with poisson/gamma; default as many as the trace.")] = None,
    seed: SeedOpt = 0,
    format: FormatOpt = None,
    sort: SortOpt = False,
    json: JsonOpt = False,
) -> None:
    """Window a trace, rescale its rate or give it new arrivals; write native CSV.

    Order: window (--start/--duration, seconds after the first arrival, then shifted to start at 0), then arrivals.
    With no options it converts any supported format to native CSV.
    """
    cv = _check_arrival_flags(arrivals, rate, cv, seed, requests)
    within("--start", start, 0, limits.MAX_TRACE_SECONDS)
    within("--duration", duration, 0, limits.MAX_TRACE_SECONDS, above=True)
    if requests is not None and arrivals == "trace":
        raise PdplanError("--requests applies only to --arrivals poisson|gamma")
    outputs = Outputs(trace)
    outputs.claim(out, "--out")
    workload = wl.load_trace(trace, format=format, sort=sort)
    if start is not None or duration is not None:
        workload = wl.window(workload, start_s=start or 0.0,
                             duration_s=math.inf if duration is None else duration)
    if arrivals != "trace":
        workload = wl.replace_arrivals(workload, rate_rps=rate, cv=cv, n_requests=requests, rng=seed)
    elif rate is not None:
        workload = wl.rescale_rate(workload, rate)
    outputs.put(out, wl.native_csv(workload))
    outputs.commit()
    summary = {"path": str(out), "source": str(trace), "arrivals": arrivals, "rate_rps": rate,
               "cv": cv if arrivals == "gamma" else None, "seed": seed, "start_s": start,
               "duration_s": duration, "stats": wl.trace_stats(workload).to_dict()}
    _print_written(summary, json)


@app.command()
def synth(
    out: OutOpt,
    requests: Annotated[int, typer.Option("--requests", help="Number of requests.", show_default=False)],
    rate: Annotated[float, typer.Option("--rate", help="Mean arrival rate, requests/s.", show_default=False)],
    prompt: Annotated[str, typer.Option("--prompt", help="Prompt length SPEC: " + wl.LENGTH_SPEC_HELP,
                                        show_default=False)],
    output: Annotated[str, typer.Option("--output", help="Output length SPEC, same kinds as --prompt.",
                                        show_default=False)],
    arrivals: Annotated[TraceArrivals, choice(
        "--arrivals", TraceArrivals, help="poisson or gamma (needs --cv).")] = TraceArrivals.POISSON,
    cv: CvOpt = None,
    diurnal: Annotated[float, typer.Option(
        "--diurnal", help="Peak-to-trough ratio of a day curve the rate follows (lowest at the start, highest "
                          "half a --period later; mean --rate); 1 keeps the rate flat.")] = 1.0,
    period: Annotated[float, typer.Option("--period", help="Length of the day curve, seconds.")] = 86_400.0,
    seed: SeedOpt = 0,
    json: JsonOpt = False,
) -> None:
    """Generate a synthetic trace as native CSV; the same arguments give the same bytes.

    Arrival times start at 0 and are rounded to whole microseconds.
    Draw order from the seeded generator: arrival gaps, prompt lengths, output lengths.
    """
    if arrivals == "trace":
        raise PdplanError("--arrivals for synth must be poisson or gamma, got 'trace'")
    cv = _check_arrival_flags(arrivals, rate, cv, seed, requests)
    within("--diurnal", diurnal, 1, 1000)
    within("--period", period, 0, 365 * 86_400, above=True)
    outputs = Outputs()
    outputs.claim(out, "--out")
    workload = wl.synthesize(n_requests=requests, rate_rps=rate, cv=cv, rng=seed, swing=diurnal, period_s=period,
                             prompt=wl.parse_length_dist(prompt, what="--prompt"),
                             output=wl.parse_length_dist(output, what="--output"))
    outputs.put(out, wl.native_csv(workload))
    outputs.commit()
    summary = {"path": str(out), "arrivals": arrivals, "rate_rps": rate,
               "cv": cv if arrivals == "gamma" else None, "diurnal": diurnal, "period_s": period,
               "seed": seed, "prompt": prompt,
               "output": output, "stats": wl.trace_stats(workload).to_dict()}
    _print_written(summary, json)


def _check_arrival_flags(arrivals: str, rate: float | None, cv: float | None, seed: int,
                         requests: int | None = None) -> float:
    """The CV to use (1 for poisson); rejects flag combinations that do not fit together and
    numbers outside what pdplan plans for."""
    within("--rate", rate, 0, limits.MAX_RATE_RPS, above=True)
    within("--cv", cv, 0, 100, above=True)
    within("--requests", requests, 1, limits.MAX_SYNTH_REQUESTS)
    check_seed(seed)
    if arrivals == "gamma" and cv is None:
        raise PdplanError("--arrivals gamma needs --cv")
    if arrivals != "gamma" and cv is not None:
        raise PdplanError("--cv applies only to --arrivals gamma")
    if arrivals != "trace" and rate is None:
        raise PdplanError(f"--arrivals {arrivals} needs --rate")
    return 1.0 if cv is None else cv


def _print_written(summary: dict, as_json: bool) -> None:
    if as_json:
        print_json(summary)
        return
    stdout.print(f"Wrote {summary['path']} ({summary['stats']['requests']:,} requests)",
                 markup=False, highlight=False)
    _print_stats_dict(summary["stats"], f"{summary['path']} (native)")


def _print_stats(result: wl.TraceStats) -> None:
    _print_stats_dict(result.to_dict(), f"{result.source} ({result.format})")


def _print_stats_dict(stats: dict, title: str) -> None:
    table = Table(title=title, title_justify="left")
    table.add_column("statistic")
    table.add_column("value", justify="right")
    table.add_row("requests", f"{stats['requests']:,}")
    table.add_row("failed requests (excluded)", f"{stats['failed_requests']:,}")
    table.add_row("duration", _num(stats["duration_s"], " s"))
    table.add_row("mean rate", _num(stats["mean_rate_rps"], " req/s"))
    table.add_row("peak rate (busiest 60 s)", _num(stats["peak_rate_rps"], " req/s"))
    table.add_row("inter-arrival CV", _num(stats["interarrival_cv"]))
    grid = stats["arrival_grid_s"]
    table.add_row("arrival-time grid", "— (continuous)" if grid is None else f"{grid:g} s")
    reuse = stats["prefix_reuse_fraction"]
    table.add_row("prefix reuse", "—" if reuse is None else f"{reuse:.1%}")
    stdout.print(table)
    lengths = Table(title="tokens per request", title_justify="left")
    lengths.add_column("")
    for key in LENGTH_KEYS:
        lengths.add_column(key, justify="right")
    for name in ("prompt_tokens", "output_tokens"):
        lengths.add_row(name.split("_")[0], *(f"{stats[name][key]:,.0f}" for key in LENGTH_KEYS))
    stdout.print(lengths)
    for note in stats["notes"]:
        stdout.print(f"note: {note}", markup=False, highlight=False)



def _num(value: float | None, unit: str = "") -> str:
    return "—" if value is None else f"{value:,.3f}{unit}"
