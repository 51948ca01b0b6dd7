"""The sweep's default process pool: its size."""

import os

from workbench.sweeps.executors import pool_size


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
