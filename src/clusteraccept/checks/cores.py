"""Judging spread over the cores: forked workers, each on a contiguous range, results in their order.

The judges are pure and the run's evidence is already in the parent's memory, so a worker is a fork that
reads it copy-on-write (nothing is pickled on the way in) and sends back only what it judged. Forking is
safe only where no other Python thread runs (:func:`may_fork`); elsewhere the same work runs serially,
with the same result.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

R = TypeVar("R")
# nodes: below, a pool for a per-node judge (~5-15 ms a node) costs more than it saves
NODES_MIN = 128

# what the forked workers of :func:`in_order` run (read copy-on-write, never pickled)
_WORK: Callable[[int], list[Any]] | None = None


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))  # the CPUs this process may use (a Slurm/cgroup allocation)
    except AttributeError:
        return os.cpu_count() or 1


def may_fork() -> bool:
    """Fork only where no other Python thread runs: a lock one holds at fork time stays held in the child
    (a pytest-xdist worker has execnet's I/O thread; it judges serially). Native threads do not count:
    numpy's OpenBLAS starts one at import (so every process that imports pandas has two) and stops its pool
    around fork (openblas_fork_handler: pthread_atfork(blas_thread_shutdown_, ...), OpenBLAS
    driver/others/memory.c), and a worker does no linear algebra; counting them (the task list under
    /proc) left every run judging on one core."""
    return "fork" in mp.get_all_start_methods() and threading.active_count() == 1


def ranges(n: int, parts: int) -> list[tuple[int, int]]:
    chunk = -(-n // parts) if n else 1
    return [(i, min(i + chunk, n)) for i in range(0, n, chunk)]


@contextmanager
def frozen() -> Iterator[None]:
    """The parent's objects out of the cyclic collector's way while workers run: the collector would walk
    every object the parent holds (the whole run's evidence) in each worker, copying every page it touches
    (gc.freeze's own advice for fork). Where something had frozen objects already (the pytest plugin
    freezes its items for the session), they stay frozen after: ``gc.unfreeze`` cannot tell whose they
    are, and un-freezing the plugin's items would have them walked again at each full collection."""
    already = gc.get_freeze_count() > 0
    gc.freeze()
    try:
        yield
    finally:
        if not already:
            gc.unfreeze()


def _range(bounds: tuple[int, int]) -> list[Any]:
    assert _WORK is not None
    out: list[Any] = []
    for i in range(*bounds):
        out.extend(_WORK(i))
    return out


def in_order(fn: Callable[[int], list[R]], n: int, *, min_n: int) -> list[R]:
    """``fn(0) + fn(1) + ... + fn(n - 1)``, spread over forked workers when ``n >= min_n`` (below it a
    pool costs more than it saves: forking a parent of some GB copies its page tables) and forking is
    safe. ``fn`` may be a closure: the workers inherit it. What it returns must pickle."""
    global _WORK
    workers = min(cpus(), n)
    _WORK = fn
    try:
        if workers < 2 or n < min_n or not may_fork():
            return _range((0, n))
        with frozen(), mp.get_context("fork").Pool(workers) as pool:
            parts = pool.map(_range, ranges(n, workers * 4))
    finally:
        _WORK = None
    return [r for part in parts for r in part]
