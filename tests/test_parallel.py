"""Work on several processes: results in the items' order, and one pool for a run's stages."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time

import pytest

from pdplan.cache import ResultCache
from pdplan.parallel import _stop, run_each, shared_workers


def pid_and_square(x: int, *, cache: ResultCache) -> tuple[int, int]:
    return os.getpid(), x * x


def fail_on_three(x: int, *, cache: ResultCache) -> int:
    if x == 3:
        raise ValueError("three")
    return x


def deaf_to_sigterm(ready) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(60)


@pytest.fixture
def cache(tmp_path) -> ResultCache:
    return ResultCache(tmp_path / "cache", enabled=False)


def test_results_come_back_in_the_order_of_the_items(cache):
    found = run_each(pid_and_square, list(range(12)), jobs=2, cache=cache)
    assert [square for _, square in found] == [x * x for x in range(12)]
    assert os.getpid() not in {pid for pid, _ in found}


def test_stages_inside_shared_workers_run_on_the_same_two_processes(cache):
    with shared_workers(2):
        first = {pid for pid, _ in run_each(pid_and_square, list(range(8)), jobs=2, cache=cache)}
        second = {pid for pid, _ in run_each(pid_and_square, list(range(8)), jobs=2, cache=cache)}
    assert len(first | second) <= 2 and first & second


def test_the_shared_workers_stop_when_the_block_ends(cache):
    with shared_workers(2):
        workers = {pid for pid, _ in run_each(pid_and_square, list(range(8)), jobs=2, cache=cache)}
    assert not workers & {child.pid for child in multiprocessing.active_children()}


def test_a_failing_stage_stops_the_shared_workers_and_the_next_stage_starts_its_own(cache):
    with shared_workers(2):
        before = {pid for pid, _ in run_each(pid_and_square, list(range(4)), jobs=2, cache=cache)}
        with pytest.raises(ValueError, match="three"):
            run_each(fail_on_three, list(range(6)), jobs=2, cache=cache)
        left = [(c.pid, c.is_alive(), c.exitcode) for c in multiprocessing.active_children()]
        assert not before & {pid for pid, _, _ in left}, left
        after = run_each(pid_and_square, list(range(4)), jobs=2, cache=cache)
    assert [square for _, square in after] == [0, 1, 4, 9]


def test_one_job_runs_in_this_process(cache):
    with shared_workers(1):
        assert {pid for pid, _ in run_each(pid_and_square, [1, 2, 3], jobs=1, cache=cache)} == {os.getpid()}


def test_a_worker_still_alive_after_the_grace_period_is_killed():
    context = multiprocessing.get_context("spawn")
    ready = context.Event()
    worker = context.Process(target=deaf_to_sigterm, args=(ready,))
    worker.start()
    assert ready.wait(30)
    _stop({worker}, grace_s=0.2)
    assert not worker.is_alive() and worker.exitcode == -signal.SIGKILL
