"""Benchmark: one ``Session`` called from several threads — calls taking turns on one set
of arenas (``max_concurrent_calls=1``, a lock) against calls on arenas of their own from a
pool (``max_concurrent_calls=T``).

For each model (the small attention example and two MLPs, one small and one wide enough
that its matmuls dominate Python's per-step overhead) and each thread count, T threads
share one session on ``sim`` and run ``CALLS`` calls each; every output is checked against
eager PyTorch. It prints the median wall time of ``REPEATS`` rounds (after a warm-up round),
calls per second, the pool's speed-up over the lock and the arena bytes each way holds.

    python benchmarks/session_threads.py           # 3 models, 1/2/4 threads, 5 rounds
    python benchmarks/session_threads.py --quick   # 1 round, 4 threads only

The figures depend on the cores the process gets: torch releases the GIL inside large
kernels only, so small graphs (Python-bound) gain little from running calls at once.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import torch

import workbench as wb
from workbench.models.examples import MLP, example

CALLS = 50
REPEATS = 5


def _models() -> list[tuple[str, torch.nn.Module, tuple, dict]]:
    attention, inputs = example("attention")
    torch.manual_seed(0)
    small = MLP(width=32, depth=3)
    wide = MLP(width=1024, depth=4)
    rules = {"cuda:0": ["aten.linear", "aten.relu"]}
    return [
        ("attention (6x16)", attention, inputs, {"cuda:0": ["aten.linear", "aten.matmul", "aten.softmax"]}),
        ("mlp 32 wide", small, (torch.randn(4, 32),), rules),
        ("mlp 1024 wide", wide, (torch.randn(64, 1024),), rules),
    ]


def _round(session: wb.Session, threads: int, inputs: list[tuple], want: list) -> float:
    """Wall seconds for ``threads`` threads × ``CALLS`` calls; every output checked."""
    wrong: list[int] = []

    def work(k: int) -> None:
        for i in range(CALLS):
            j = (k + i) % len(inputs)
            got = session.run(*inputs[j]).outputs
            got = got if isinstance(got, tuple) else (got,)
            if not all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want[j])):
                wrong.append(j)

    started = time.perf_counter()
    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    if wrong:
        raise SystemExit(f"{len(wrong)} outputs differ from eager")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round, 4 threads only")
    args = parser.parse_args()
    repeats = 1 if args.quick else REPEATS
    thread_counts = (4,) if args.quick else (1, 2, 4)
    print(f"torch threads per op: {torch.get_num_threads()}; {CALLS} calls per thread; median of {repeats} rounds")
    print(f"{'model':<18} {'threads':>7} {'lock s':>8} {'pool s':>8} {'lock c/s':>9} {'pool c/s':>9} {'pool/lock':>9} {'arena B lock':>13} {'arena B pool':>13}")
    for label, model, example_inputs, rules in _models():
        plan = wb.plan(wb.propagate(wb.place(wb.capture(model, example_inputs), rules)))
        inputs = [tuple(torch.randn_like(x) for x in example_inputs) for _ in range(8)]
        with torch.no_grad():
            want = [model(*x) for x in inputs]
        want = [w if isinstance(w, tuple) else (w,) for w in want]
        for threads in thread_counts:
            times, arena = {}, {}
            for mode, limit in (("lock", 1), ("pool", threads)):
                with wb.load(plan, "sim", max_concurrent_calls=limit) as session:
                    _round(session, threads, inputs, want)  # warm-up: slot views, op costs
                    times[mode] = statistics.median(_round(session, threads, inputs, want) for _ in range(repeats))
                    arena[mode] = session.arena_bytes_held()
            calls = threads * CALLS
            print(
                f"{label:<18} {threads:>7} {times['lock']:>8.3f} {times['pool']:>8.3f} "
                f"{calls / times['lock']:>9.0f} {calls / times['pool']:>9.0f} "
                f"{times['lock'] / times['pool']:>9.2f} {arena['lock']:>13,} {arena['pool']:>13,}"
            )


if __name__ == "__main__":
    main()
