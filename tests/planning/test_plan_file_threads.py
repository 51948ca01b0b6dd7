"""Plan files saved and loaded from several threads at once.

Property: eight threads saving plans at the same moment (torch.export's save keeps
process-wide pickling state) all succeed, and every file loads back to the plan that was
saved; eight threads loading at once succeed the same way.
"""

from __future__ import annotations

import threading

import pytest

import workbench as wb

from conftest import captured

THREADS = 8


@pytest.fixture(scope="module")
def plan():
    return wb.plan(wb.propagate(wb.place(captured("residual")[2], {"cuda:0": ["aten.linear"]}), True, True), "best")


def _at_once(work, count=THREADS):
    """``work(i)`` in ``count`` threads released together; the exceptions raised, by thread."""
    barrier = threading.Barrier(count)
    errors: dict[int, BaseException] = {}

    def run(i):
        barrier.wait()
        try:
            for _ in range(3):
                work(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    return errors


def test_threads_saving_plans_at_once_all_succeed(plan, tmp_path):
    """Eight threads each save the plan three times: no error, and each file loads back
    with the plan's allocations and arenas."""
    errors = _at_once(lambda i: plan.save(tmp_path / f"plan{i}.wbplan"))
    assert errors == {}, {i: repr(e) for i, e in errors.items()}
    for i in range(THREADS):
        loaded = wb.load_plan(tmp_path / f"plan{i}.wbplan")
        assert loaded.allocations == plan.allocations and loaded.arena_bytes == plan.arena_bytes


def test_threads_loading_plans_at_once_all_succeed(plan, tmp_path):
    """Eight threads each load one saved plan three times: no error."""
    path = tmp_path / "plan.wbplan"
    plan.save(path)
    loaded: list = []
    errors = _at_once(lambda i: loaded.append(wb.load_plan(path)))
    assert errors == {}, {i: repr(e) for i, e in errors.items()}
    assert len(loaded) == 3 * THREADS and all(p.allocations == plan.allocations for p in loaded)
