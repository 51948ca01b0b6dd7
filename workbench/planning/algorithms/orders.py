"""Orders in which to place buffers: each is a key, and ties fall to (start, index).

Rules:
    1. Every order lists each buffer of nonzero size exactly once; size-0
       buffers are left out (placement puts them at 0).
    2. Orders are total and use only problem data, so they are deterministic.
    3. ``breadth`` follows TFLite's "greedy by breadth": steps are visited by
       their load (bytes live there) from highest to lowest, and at each step
       its not yet placed buffers go largest first. Equivalently a buffer is
       keyed by the highest load over its lifetime (the first step reaching it
       breaks ties), then by size.
"""

from __future__ import annotations

from collections.abc import Callable

from .base import Problem


def _nonzero(problem: Problem) -> list[int]:
    return [i for i, z in enumerate(problem.sizes) if z]


def by_size(problem: Problem) -> list[int]:
    """Largest first (the order of ExecuTorch's and TFLite's greedy)."""
    sizes, starts = problem.sizes, problem.starts
    return sorted(_nonzero(problem), key=lambda i: (-sizes[i], starts[i], i))


def _range_max(values: list[int]) -> Callable[[int, int], int]:
    """Sparse table: O(T log T) to build, O(1) max over ``values[a..b]``."""
    table = [values]
    width = 1
    while 2 * width <= len(values):
        prev = table[-1]
        table.append([max(prev[j], prev[j + width]) for j in range(len(prev) - width)])
        width *= 2

    def query(a: int, b: int) -> int:
        k = (b - a + 1).bit_length() - 1
        row = table[k]
        return max(row[a], row[b - (1 << k) + 1])

    return query


def by_breadth(problem: Problem) -> list[int]:
    """Buffers live at the busiest steps first, largest first within a step (rule 3)."""
    loads = problem.loads
    span = len(loads) + 1
    # One int per step orders by load, then earlier step first: load * span + (span - 1 - t).
    peak = _range_max([load * span + (span - 1 - t) for t, load in enumerate(loads)])
    sizes, starts, ends = problem.sizes, problem.starts, problem.ends
    key = {i: peak(starts[i], ends[i]) for i in _nonzero(problem)}
    return sorted(key, key=lambda i: (-key[i], -sizes[i], starts[i], i))


def by_length(problem: Problem) -> list[int]:
    """Longest-lived first (graph inputs, caches), then largest."""
    bufs, sizes, starts = problem.buffers, problem.sizes, problem.starts
    return sorted(
        _nonzero(problem), key=lambda i: (bufs[i].start - bufs[i].end, -sizes[i], starts[i], i)
    )


def by_area(problem: Problem) -> list[int]:
    """Largest size x lifetime first: the buffers that block the most space-time."""
    bufs, sizes, starts = problem.buffers, problem.sizes, problem.starts
    return sorted(
        _nonzero(problem), key=lambda i: (-sizes[i] * bufs[i].steps, starts[i], i)
    )


def by_start(problem: Problem) -> list[int]:
    """Execution order (as an online allocator sees them), largest first at a step."""
    sizes, starts = problem.sizes, problem.starts
    return sorted(_nonzero(problem), key=lambda i: (starts[i], -sizes[i], i))


ORDERS: dict[str, Callable[[Problem], list[int]]] = {
    "size": by_size,
    "breadth": by_breadth,
    "length": by_length,
    "area": by_area,
    "start": by_start,
}

#: The starts of ``search``, in the order tried (it stops at the lower bound):
#: (order, fit) pairs for ``placement.place`` and ("skyline", rule) for
#: ``skyline.skyline``. Each of these was the only winner on some benchmark
#: input; "start" (execution order) never was, so it is not tried.
STARTS: tuple[tuple[str, str], ...] = (
    ("size", "best"),  # greedy itself: search is never worse than greedy
    ("skyline", "long"),
    ("skyline", "size"),
    ("size", "first"),
    ("breadth", "best"),
    ("breadth", "first"),
    ("length", "best"),
    ("area", "first"),
)
