"""The sweep's default process pool: its size."""

import os

import pytest

from workbench.errors import ArgumentTypeError, ArgumentValueError
from workbench.sweeps.executors import pool_size, process_pool


def test_the_default_pool_has_one_process_per_cpu_never_one_per_task(monkeypatch):
    """Without workers= a sweep of many tasks starts one process per CPU (not one per
    task: 150 interpreters on a 2-core machine would only contend for memory), fewer when
    there are fewer tasks, and what the caller asks for otherwise."""
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert pool_size(None, 153) == 2
    assert pool_size(None, 1) == 1
    assert pool_size(8, 153) == 8 and pool_size(8, 3) == 3
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert pool_size(None, 153) == 1


@pytest.mark.parametrize(
    "workers, error",
    [(-3, ArgumentValueError), (0, ArgumentValueError), (True, ArgumentTypeError), (2.0, ArgumentTypeError), ("2", ArgumentTypeError)],
)
def test_bad_workers_are_refused_not_turned_into_one_process(workers, error):
    """A workers count that is not a positive integer is an error naming what is valid,
    from the pool size as from the pool (it used to become one process silently: -3 and
    True clamped to 1)."""
    for call in (lambda: pool_size(workers, 153), lambda: process_pool(workers)):
        with pytest.raises(error, match="workers must be a positive integer, or None for one process per CPU"):
            call()
