"""One ``Session`` called from several threads: every call's outputs equal the same session's
single-threaded outputs bit for bit (which equal eager PyTorch's within the suite's tolerance),
whether calls take turns (the default) or run on arena sets of their own (a pool)."""

from __future__ import annotations

import threading

import pytest
import torch

import workbench as wb
from workbench.runtime import ExecutorError, load

from conftest import assert_matches_eager, captured

RULES = {"cuda:0": ["aten.linear", "aten.matmul", "aten.softmax"]}


@pytest.fixture(scope="module")
def attention():
    """The attention example placed across host and device, eight inputs, and their outputs
    from one single-threaded session (checked against eager). Threaded calls are compared
    with these bit for bit: the same plan on the same inputs must give the same bits, so any
    difference is a race, not rounding."""
    model, _, program = captured("attention")
    plan = wb.plan(wb.propagate(wb.place(program, RULES)))
    torch.manual_seed(1)
    xs = [torch.randn(6, 16) for _ in range(8)]
    with torch.no_grad():
        eager = [model(x) for x in xs]
    with load(plan, "sim") as session:
        want = [tuple(o.clone() for o in session.run(x).outputs) for x in xs]
    for got, ref in zip(want, eager):
        assert_matches_eager(got, ref)
    return plan, xs, want


def _hammer(session, xs, want, threads=4, calls=50) -> list[str]:
    """``threads`` threads × ``calls`` calls on one session; what went wrong, if anything."""
    wrong: list[str] = []

    def work(k: int) -> None:
        try:
            for i in range(calls):
                j = (k * 3 + i) % len(xs)
                got = session.run(xs[j]).outputs
                if not all(torch.equal(g, w) for g, w in zip(got, want[j])):
                    wrong.append(f"thread {k} call {i}: outputs differ from the single-threaded run")
        except Exception as exc:  # a failed call is a wrong result too
            wrong.append(f"thread {k}: {type(exc).__name__}: {exc}")

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return wrong


@pytest.mark.parametrize("limit", [1, 4], ids=["calls-take-turns", "pool-of-4"])
def test_four_threads_fifty_calls_each_equal_the_single_threaded_run(attention, limit):
    """4 threads × 50 calls with different inputs on one session: every output equals the
    single-threaded run's bit for bit (before sessions were thread-safe, most were wrong and some raised IndexError)."""
    plan, xs, want = attention
    with load(plan, "sim", max_concurrent_calls=limit) as session:
        assert _hammer(session, xs, want) == []
        held = session.arena_bytes_held()
    arena = sum(plan.arena_bytes.values())
    assert held == arena if limit == 1 else arena <= held <= limit * arena


def test_close_waits_for_running_calls_and_later_calls_are_refused(attention):
    """``close`` while threads call: calls that started finish with right outputs, calls
    after it are refused with a clear error, and no memory stays allocated."""
    plan, xs, want = attention
    session = load(plan, "sim")
    started = threading.Event()
    results: list[object] = []

    def work() -> None:
        for _ in range(200):
            started.set()
            try:
                results.append(torch.equal(session.run(xs[0]).outputs[0], want[0][0]))
            except ExecutorError as exc:
                results.append(str(exc))
                return

    thread = threading.Thread(target=work)
    thread.start()
    started.wait()
    session.close()
    thread.join()
    assert results and results[-1] == "this session is closed; load the plan again to run it"
    assert all(r is True for r in results[:-1])
    assert all(b.freed for b in session.arena_buffers.values())
