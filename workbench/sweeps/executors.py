"""Executors a sweep runs its tasks on: any ``concurrent.futures.Executor``.

- ``InlineExecutor``: runs each task when it is submitted, in the caller's thread (the
  in-process reference; it needs nothing pickled, so it also takes a caller's program).
- ``process_pool(workers)``: processes on this machine, started with ``spawn`` (a fresh
  interpreter per worker: no forked torch threads), the sweep's default.
- A Dask cluster: ``distributed.Client(...).get_executor()`` is a ``concurrent.futures``
  executor too, so the same sweep runs across machines unchanged.
"""

from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from typing import Any, Callable, Optional

from ..arguments import describe
from ..errors import ArgumentTypeError, ArgumentValueError

__all__ = ["InlineExecutor", "pool_size", "process_pool"]


class InlineExecutor(Executor):
    """Runs every submitted call at once, in the calling thread."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # the future carries it, as a pool's would
            future.set_exception(exc)
        return future


def _check_workers(workers: Any) -> Optional[int]:
    """``workers`` if it is None (one process per CPU) or an integer >= 1."""
    valid = "a positive integer, or None for one process per CPU"
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)):
        raise ArgumentTypeError(f"workers must be {valid}; got {describe(workers)}")
    if workers is not None and workers < 1:
        raise ArgumentValueError(f"workers must be {valid}; got {workers}")
    return workers


def pool_size(workers: Optional[int], tasks: int) -> int:
    """Processes of the default pool: ``workers`` (default: one per CPU), never more than
    there are tasks, at least one."""
    return max(1, min(_check_workers(workers) or os.cpu_count() or 1, tasks))


def process_pool(workers: Optional[int] = None) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes (default: the CPU count) started with ``spawn``."""
    _check_workers(workers)
    return ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1, mp_context=multiprocessing.get_context("spawn"))
