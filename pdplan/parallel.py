"""Independent work on several processes: the per-shape stages and the searches of ``optimize``.

Composing each shape's profile, bisecting each shape's goodput, sampling each pool curve and a
fleet's verified searches (one per mode and node affinity) are independent of one another; with
``jobs`` above 1 they run on that many worker processes
(spawned, so a worker never inherits a progress bar's thread or a solver's state). Each worker
opens the result cache folder the run uses (writes are atomic, so two workers never tear an
entry), and its cache hits and misses are added to the run's. Results come back in the order of
the items, so the answer does not depend on the number of jobs or on which worker finishes first.

Starting a worker costs seconds (a fresh interpreter imports pdplan, numba's kernels, OR-Tools and
SciPy), so a run of several such stages opens :func:`shared_workers` once: every
:func:`run_each` inside it sends its items to the same processes.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence, TypeVar

from pdplan.cache import ResultCache
from pdplan.placement.recall import recalling

T = TypeVar("T")
R = TypeVar("R")


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the platform says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


#: The worker pool of the innermost :func:`shared_workers` (None outside one), its size, and the
#: child processes there were before it (its own are the others).
_shared: tuple[ProcessPoolExecutor, int, set] | None = None


@contextmanager
def shared_workers(jobs: int) -> Iterator[None]:
    """Within this block, :func:`run_each` with ``jobs`` above 1 runs on one pool of ``jobs``
    processes, started when first needed and stopped when the block ends."""
    global _shared
    outer = _shared
    _shared = None if jobs <= 1 else (_new_pool(jobs), jobs, set(multiprocessing.active_children()))
    try:
        yield
    finally:
        if _shared is not None:
            _shared[0].shutdown()
        _shared = outer


def _new_pool(jobs: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_ignore_interrupts)


def run_each(work: Callable[[T, ResultCache], R], items: Sequence[T], *, jobs: int, cache: ResultCache,
             on_start: Callable[[int], None] | None = None) -> list[R]:
    """``[work(item, cache=cache) for item in items]``, on ``jobs`` processes when there are several
    items (those of :func:`shared_workers` when it has that many). ``work`` must pickle (a
    module-level function, or a ``functools.partial`` of one); ``on_start(i)`` reports progress:
    before item i runs in one process, as its result arrives with several."""
    global _shared
    if jobs <= 1 or len(items) <= 1:
        results = []
        for i, item in enumerate(items):
            if on_start is not None:
                on_start(i)
            results.append(work(item, cache=cache))
        return results
    tasks = [(work, item, str(cache.folder), cache.enabled) for item in items]
    results = []
    shared = _shared is not None and _shared[1] == jobs
    before = _shared[2] if shared else set(multiprocessing.active_children())
    pool = _shared[0] if shared else _new_pool(min(jobs, len(items)))
    try:
        for i, (result, hits, misses) in enumerate(pool.map(_in_worker, tasks)):
            if on_start is not None:
                on_start(i)
            cache.hits += hits
            cache.misses += misses
            results.append(result)
    except BaseException:  # an error or Ctrl-C: stop the workers now rather than after their queue
        pool.shutdown(wait=False, cancel_futures=True)
        _stop(set(multiprocessing.active_children()) - before)
        if shared:  # the block goes on without it: later stages start a pool of their own
            _shared = None
        raise
    if not shared:
        pool.shutdown()
    return results


def _stop(workers: set, grace_s: float = 5.0) -> None:
    """Terminate the workers and wait until they have ended; one still running ``grace_s`` later (a
    loaded machine, a worker deaf to SIGTERM) is killed, so no stage's worker outlives the stage."""
    for worker in workers:
        worker.terminate()
    for worker in _running(workers, grace_s):
        worker.kill()
    _running(workers, None)
    for worker in workers:
        _reaped(worker)


def _reaped(worker, timeout_s: float = 1.0) -> None:
    """Wait for an ended worker's exit code. A pool's own thread reaps its workers too: when it gets
    there first, our wait finds no child and the exit code appears once that thread records it."""
    worker.join()
    deadline = time.monotonic() + timeout_s
    while worker.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.001)


def _running(workers: set, timeout_s: float | None) -> set:
    """The workers still running after up to ``timeout_s`` (None: until all have ended)."""
    pending = {worker.sentinel: worker for worker in workers}
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while pending:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            break
        for sentinel in multiprocessing.connection.wait(list(pending), left):
            del pending[sentinel]
    return set(pending.values())


def _ignore_interrupts() -> None:
    """Ctrl-C is the parent's to handle (it stops the workers and exits 130)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _in_worker(task: tuple) -> tuple:
    work, item, folder, enabled = task
    cache = ResultCache(folder, enabled=enabled)
    with recalling(cache):  # placement solves are kept in the run's cache, as in the parent
        return work(item, cache=cache), cache.hits, cache.misses
