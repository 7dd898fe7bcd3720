"""Independent, deterministic tasks in forked worker processes: compile's syntheses and simulations, and
simulate's sizes. Every task gives the same result in any process, so the answer never depends on ``jobs``."""

from __future__ import annotations

import multiprocessing
import os

_TASKS: list = []          # the tasks of :func:`in_processes`, for its worker processes (inherited when they fork)


def default_jobs() -> int:
    """The processors this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def in_processes(tasks: list, jobs: int, progress) -> list:
    """Each task's function called, results in order; ``tasks``: (progress line or None, function of no
    arguments). With ``jobs`` > 1 they run in that many forked processes (every task is deterministic: the
    results are the same), the slowest-looking first as given; the workers inherit what the tasks use (laid-out
    machines, caches) from the parent as it is when they fork."""
    global _TASKS
    if jobs > 1 and len(tasks) > 1 and "fork" in multiprocessing.get_all_start_methods():
        _TASKS = tasks
        try:
            with multiprocessing.get_context("fork").Pool(min(jobs, len(tasks))) as pool:
                return pool.map(_run_task, range(len(tasks)), chunksize=1)
        finally:
            _TASKS = []
    out = []
    for line, fn in tasks:
        if line:
            progress(line)
        out.append(fn())
    return out


def _run_task(i: int):
    return _TASKS[i][1]()
