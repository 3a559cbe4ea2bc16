"""Running a grid: every combination of the dimensions' values is a cell, run locally in a process
pool or as Ray tasks, with results in cell order whichever executor ran them.

Cells that share what per-shape goodput depends on (the workload and the SLO) share its cache:
one cell of each such group runs first, then the rest, which then reuse every goodput and pool
curve sample through the on-disk cache. The cache returns exactly what was computed, so the
order cells run in never changes a number.
"""

from __future__ import annotations

import csv
import io
import itertools
import multiprocessing
import signal
import socket
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Callable

from pdplan import limits
from pdplan.errors import PdplanError
from pdplan.interrupts import interrupts_held
from pdplan.sensitivity.cell import Base, CellResult, run_cell
from pdplan.sensitivity.coordinates import cell_cluster
from pdplan.sensitivity.summary import summary_text
from pdplan.vocabulary import Executor

EXECUTORS = tuple(Executor)
#: Dimensions that change neither the workload nor the SLO: their cells share per-shape goodput.
SHARED_MEASUREMENT = ("bandwidth", "failure_rate", "route_ms", "price_ratio", "rate")

Progress = Callable[[int, int], None]


@dataclass(frozen=True, kw_only=True)
class GridResult:
    """The cells of a grid, in cell order."""

    dimensions: tuple[tuple[str, tuple], ...]
    cells: tuple[CellResult, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.dimensions)

    def rows(self) -> list[dict]:
        return [cell.row(self.names) for cell in self.cells]

    def to_dict(self, base: Base) -> dict:
        """The ``pdplan sensitivity grid --json`` document: the dimensions, how plans were compared
        from ``base``, the summary sentence and every cell's row."""
        return {"dimensions": {n: list(v) for n, v in self.dimensions}, "compare": base.compare,
                "margin_ms": base.margin_ms, "target_rps": base.target_rps,
                "summary": summary_text(self.dimensions, self.cells), "cells": self.rows()}

    def csv(self) -> str:
        """The rows as CSV (written by the csv module: a GPU count stays an integer even in a
        column with empty cells, where a table library would turn it into a float)."""
        rows = self.rows()
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()


def cell_coordinates(dimensions: tuple[tuple[str, tuple], ...]) -> list[dict]:
    """Every combination of the values, the first dimension varying slowest."""
    names = [name for name, _ in dimensions]
    return [dict(zip(names, values)) for values in itertools.product(*(v for _, v in dimensions))]


def check_executor(executor: str, address: str | None) -> None:
    """Refuse, before any work, an executor that cannot run: an unknown one, an --address without
    Ray, or a Ray address where nothing accepts a connection (ray.init would retry for minutes,
    printing its log)."""
    if executor not in EXECUTORS:
        raise PdplanError(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}", field="executor")
    if address is None:
        return
    if executor != "ray":
        raise PdplanError("--address applies to --executor ray", field="address")
    if address not in ("auto", "local"):  # Ray's own words: a running local cluster, or a new one
        _answers(address)


def _answers(address: str) -> None:
    """A TCP connection to the address's host and port opens within limits.RAY_CONNECT_S."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise PdplanError(f"--address must read HOST:PORT or ray://HOST:PORT, got {address!r}", field="address")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=limits.RAY_CONNECT_S):
            return
    except TimeoutError:
        reason = f"no answer within {limits.RAY_CONNECT_S:g} s"
    except OSError as err:
        reason = (err.strerror or str(err)).lower()
    raise PdplanError(f"--address {address}: no Ray cluster is reachable there ({reason})", field="address")


def check_cells(base: Base, cells: list[dict]) -> None:
    """Refuse, before any work, coordinates the base inputs cannot take: a GPU the cluster lacks,
    a target rate when a budget sets the rate."""
    if base.budget_usd_per_hour is not None and any("rate" in c for c in cells):
        raise PdplanError("vary.rate: with --budget each mode's rate is the highest it serves within the budget; "
                          "drop the rate dimension", field="vary.rate")
    for gpu in sorted({c["gpu"] for c in cells if "gpu" in c}):
        cell_cluster(base.cluster, {"gpu": gpu})


def run_order(cells: list[dict]) -> tuple[list[int], list[int]]:
    """Cell indices in two phases: one cell of each measurement group, then the others (see the
    module docstring). With a burstiness dimension, the rate shapes the arrivals, so it counts."""
    bursty = any("burstiness" in c for c in cells)
    leaders, followers, seen = [], [], set()
    for i, coords in enumerate(cells):
        key = tuple(sorted((k, v) for k, v in coords.items()
                           if k not in SHARED_MEASUREMENT or (k == "rate" and bursty)))
        (followers if key in seen else leaders).append(i)
        seen.add(key)
    return leaders, followers


def run_grid(base: Base, dimensions: tuple[tuple[str, tuple], ...], *, jobs: int = 1, executor: str = "local",
             address: str | None = None, progress: Progress | None = None) -> GridResult:
    """Run every cell; ``executor`` "local" (``jobs`` processes) or "ray" (tasks on the Ray
    cluster at ``address``, or on a local Ray of ``jobs`` CPUs when none is given)."""
    check_executor(executor, address)
    cells = cell_coordinates(dimensions)
    check_cells(base, cells)
    order = run_order(cells)
    run = _run_ray if executor == "ray" else _run_local
    results = run(base, cells, order, jobs=jobs, address=address, progress=progress or (lambda done, total: None))
    return GridResult(dimensions=dimensions, cells=tuple(results[i] for i in range(len(cells))))


def _run_local(base: Base, cells: list[dict], order: tuple[list[int], list[int]], *, jobs: int, address: str | None,
               progress: Progress) -> dict[int, CellResult]:
    results: dict[int, CellResult] = {}
    if jobs <= 1:
        for i in order[0] + order[1]:
            results[i] = run_cell(base, i, cells[i])
            progress(len(results), len(cells))
        return results
    context = multiprocessing.get_context("spawn")  # no fork of a process that holds threads
    # Workers ignore Ctrl-C: the terminal sends it to them too, and the parent alone ends the run.
    with ProcessPoolExecutor(max_workers=min(jobs, len(cells)), mp_context=context, initializer=signal.signal,
                             initargs=(signal.SIGINT, signal.SIG_IGN)) as pool:
        try:
            for phase in order:
                with interrupts_held():  # a worker cut off while it starts would print a traceback
                    pending = {pool.submit(run_cell, base, i, cells[i]): i for i in phase}
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        results[pending.pop(future)] = future.result()
                        progress(len(results), len(cells))
        except BaseException:  # Ctrl-C or a failed cell: the cells still running are not awaited
            _stop(pool)
            raise
    return results


def _stop(pool: ProcessPoolExecutor) -> None:
    """End a pool's workers now, dropping the cells they run (leaving the ``with`` block would wait
    for each to finish, minutes for a large cell)."""
    for process in list((pool._processes or {}).values()):  # terminate_workers() from Python 3.14 on
        process.terminate()  # first: a worker still starting would find the pool's queues gone
    pool.shutdown(wait=False, cancel_futures=True)


def _run_ray(base: Base, cells: list[dict], order: tuple[list[int], list[int]], *, jobs: int, address: str | None,
             progress: Progress) -> dict[int, CellResult]:
    try:
        import ray
    except ImportError:
        raise PdplanError("--executor ray needs Ray: pip install 'pdplan[ray]'", field="executor") from None
    started = not ray.is_initialized()
    if started:
        options = {"address": address} if address is not None else {"num_cpus": max(1, jobs)}
        ray.init(**options, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        task = ray.remote(run_cell)
        shared = ray.put(base)
        results: dict[int, CellResult] = {}
        for phase in order:
            pending = {task.remote(shared, i, cells[i]): i for i in phase}
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    results[pending.pop(ref)] = ray.get(ref)
                    progress(len(results), len(cells))
        return results
    finally:
        if started:
            ray.shutdown()
