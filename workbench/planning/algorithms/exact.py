"""Exact branch and bound for tiny problems: the optimal arena, or give up.

Rules:
    1. Search space: sequences of buffers placed first-fit, whose offsets never
       decrease along the sequence. Some optimal plan is such a sequence: push an
       optimal plan down by re-placing first-fit in offset order until nothing
       moves (no pass raises an offset, see ``placement`` rule 4); then placing
       first-fit in offset order reproduces it, with offsets non-decreasing.
    2. Buffers at equal offsets do not overlap in time, so their order is
       irrelevant: among equal offsets only increasing indices are explored.
    3. Bound: every buffer still to place lands at or above the current offset
       (the floor) and those live at one step are disjoint, so any completion
       needs ``floor + max_t(remaining bytes live at t)``; a branch whose bound
       reaches the incumbent is cut.
    4. At most ``node_limit`` nodes are expanded; past that the result is the best
       found and ``proven`` is False. Deterministic: no clocks, no randomness.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Problem


@dataclass(frozen=True)
class ExactResult:
    """The best offsets found below the incumbent (None if none) and whether that is final.

    ``proven`` is True when the search finished or reached ``target``: then no
    plan beats ``offsets`` (or the incumbent, when ``offsets`` is None) by
    anything that matters.
    """

    offsets: tuple[int, ...] | None
    arena_bytes: int
    proven: bool


def solve_exact(
    problem: Problem,
    indices: list[int],
    incumbent: int,
    target: int = 0,
    node_limit: int = 50_000,
) -> ExactResult:
    """Search for offsets of the buffers ``indices`` with an arena below ``incumbent``.

    Stops early once an arena of at most ``target`` bytes is found (e.g. the
    lower bound: nothing can beat it). Offsets are indexed like ``problem.buffers``
    (0 for buffers outside ``indices``).
    """
    sizes, starts, ends = problem.sizes, problem.starts, problem.ends
    items = sorted((i for i in indices if sizes[i]), key=lambda i: (-sizes[i], starts[i], i))
    count = len(items)
    size = [sizes[i] for i in items]
    start = [starts[i] for i in items]
    end = [ends[i] for i in items]
    steps = sorted(set(start))  # loads only rise at starts, so peaks sit there
    live_at = [[k for k in range(count) if start[k] <= t <= end[k]] for t in steps]
    conflicts = [
        [m for m in range(count) if m != k and start[m] <= end[k] and start[k] <= end[m]]
        for k in range(count)
    ]

    offset = [-1] * count
    best: list[int] | None = None
    best_arena = incumbent
    nodes = 0
    exhausted = False

    def first_fit(k: int) -> int:
        ranges = sorted((offset[m], offset[m] + size[m]) for m in conflicts[k] if offset[m] >= 0)
        top = 0
        for lo, hi in ranges:
            if lo - top >= size[k]:
                return top
            top = max(top, hi)
        return top

    def bound(floor: int) -> int:
        return floor + max(
            (sum(size[k] for k in ks if offset[k] < 0) for ks in live_at), default=0
        )

    def dfs(placed: int, floor: int, last: int, top: int) -> None:
        nonlocal best, best_arena, nodes, exhausted
        if placed == count:
            if top < best_arena:
                best, best_arena = list(offset), top
            return
        nodes += 1
        if nodes > node_limit:
            exhausted = True
            return
        if max(top, bound(floor)) >= best_arena:
            return
        choices = []
        for k in range(count):
            if offset[k] >= 0:
                continue
            at = first_fit(k)
            if at < floor or (at == floor and k < last):
                continue  # not in canonical order (rules 1, 2)
            choices.append((at, k))
        choices.sort()  # lowest first: good plans early, so the bound cuts sooner
        for at, k in choices:
            new_top = max(top, at + size[k])
            if new_top >= best_arena:
                continue
            offset[k] = at
            dfs(placed + 1, at, k, new_top)
            offset[k] = -1
            if exhausted or best_arena <= target:
                return

    dfs(0, 0, -1, 0)
    proven = not exhausted or best_arena <= target
    if best is None:
        return ExactResult(None, incumbent, proven)
    result = [0] * len(sizes)
    for k, i in enumerate(items):
        result[i] = best[k]
    return ExactResult(tuple(result), best_arena, proven)
