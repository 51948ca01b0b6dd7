"""Offset assignment for one arena, by algorithm name.

``assign_offsets(buffers, algorithm, alignment)`` is the entry point;
``ALGORITHMS`` maps each name to a function ``Problem -> list[int]``.

=========  ==============================================================
``naive``  no reuse: buffers back to back (the arena is the sum of sizes)
``greedy`` largest first, best fit (the ExecuTorch / TFLite baseline)
``search`` greedy orders with best / first fit and skyline placement, an
           exact branch and bound when tiny, local search on the order;
           never worse than ``greedy`` (see ``search``)
``best``   every other registered algorithm; the smallest arena wins, ties
           to the earlier name in ``ALGORITHMS``
=========  ==============================================================

Rules:
    1. The arena of an assignment is computed here from the offsets (highest
       offset + aligned size), never taken from the algorithm.
    2. Same buffers, algorithm and alignment give the same offsets, whatever
       the order the buffers come in (``base`` rule 1).
    3. An algorithm added to ``ALGORITHMS`` is run by ``best`` too; it must
       return safe offsets (``verify`` checks that), and non-negative aligned
       ints are checked here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from ...errors import WorkbenchError
from ..buffers import Buffer, PlanningInputError
from .base import Assignment, Problem, make_problem, smallest
from .greedy import plan_greedy
from .naive import plan_naive
from .search import plan_search

Algorithm = Callable[[Problem], list[int]]


class PlanningAlgorithmError(WorkbenchError, RuntimeError):
    """A registered planning algorithm broke its contract (rule 3): wrong count or unaligned offsets."""


def plan_best(problem: Problem) -> list[int]:
    """The smallest arena among all other registered algorithms (rule 3)."""
    runs = (
        _checked(name, algorithm(problem), problem)
        for name, algorithm in ALGORITHMS.items()
        if name != "best"
    )
    chosen = smallest(problem, runs)
    return chosen if chosen is not None else [0] * len(problem)


ALGORITHMS: dict[str, Algorithm] = {
    "naive": plan_naive,
    "greedy": plan_greedy,
    "search": plan_search,
    "best": plan_best,
}


def _checked(name: str, offsets: list[int], problem: Problem) -> list[int]:
    """Cheap sanity checks of an algorithm's output (overlaps are ``verify``'s job)."""
    if len(offsets) != len(problem):
        raise PlanningAlgorithmError(
            f"planning algorithm {name!r} returned {len(offsets)} offsets for {len(problem)} buffers"
        )
    unit = problem.alignment
    for buf, offset in zip(problem.buffers, offsets):
        if not isinstance(offset, int) or offset < 0 or offset % unit:
            raise PlanningAlgorithmError(
                f"planning algorithm {name!r} gave buffer {buf.id!r} offset {offset!r}; "
                f"offsets must be non-negative multiples of the alignment {unit}"
            )
    return offsets


def _lookup(algorithm: object) -> Algorithm:
    if not isinstance(algorithm, str) or algorithm not in ALGORITHMS:
        raise PlanningInputError(
            f"unknown planning algorithm {algorithm!r}; valid algorithms are "
            f"{', '.join(sorted(ALGORITHMS))}"
        )
    return ALGORITHMS[algorithm]


def assign_offsets(
    buffers: Iterable[Buffer], algorithm: str = "greedy", alignment: int = 16
) -> Assignment:
    """Byte offsets for ``buffers`` sharing one arena, by the named algorithm."""
    run = _lookup(algorithm)
    problem = make_problem(buffers, alignment)
    offsets = _checked(algorithm, run(problem), problem)
    return Assignment(
        offsets={b.id: o for b, o in zip(problem.buffers, offsets)},
        arena_bytes=problem.arena_of(offsets),
        algorithm=algorithm,
    )


__all__ = ["ALGORITHMS", "Algorithm", "Assignment", "PlanningAlgorithmError", "Problem", "assign_offsets", "make_problem"]
