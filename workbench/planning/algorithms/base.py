"""What every planning algorithm sees and returns.

An algorithm is a function ``Problem -> list[int]``: the offset of each buffer,
indexed like ``problem.buffers``. :func:`assign_offsets` turns that into an
:class:`Assignment`, computing the arena itself so no algorithm can misreport it.

Rules:
    1. ``Problem.buffers`` are in a canonical order that depends only on the set
       of buffers, not on the order they were given in: sorted by id when ids
       are mutually comparable, else by (type name, repr). Every algorithm works
       in that order, so the same buffers always give the same offsets.
    2. Steps are compressed to ranks ``0..n_steps-1`` of the distinct start
       steps: a start maps to its rank, an end to the rank of the last start at
       or before it. Then ``a.start <= b.end`` holds after compression exactly
       when it held before, so no conflict changes, and loads peak at starts,
       so the lower bound (the peak of ``Problem.loads``, which ``lower_bound``
       computes the same way) is unchanged; time indexes stay as small as the
       number of distinct starts.
    3. Sizes in a Problem are aligned (a multiple of ``alignment``); size-0
       buffers keep size 0 and are placed at offset 0 by every algorithm.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import accumulate

from ..buffers import Buffer, aligned_size, check_alignment, check_buffers


@dataclass(frozen=True)
class Assignment:
    """Byte offsets for one arena: ``offsets[id]``, the arena size, the algorithm used."""

    offsets: Mapping[Hashable, int] = field(hash=False)
    arena_bytes: int
    algorithm: str


@dataclass(frozen=True, eq=False)
class Problem:
    """One arena's buffers, normalized for the algorithms (see module rules)."""

    buffers: tuple[Buffer, ...]  # canonical order (rule 1)
    alignment: int
    sizes: tuple[int, ...]  # aligned bytes (rule 3)
    starts: tuple[int, ...]  # compressed step ranks (rule 2)
    ends: tuple[int, ...]
    loads: tuple[int, ...]  # aligned bytes live at each compressed step

    @classmethod
    def build(
        cls, buffers: Sequence[Buffer], alignment: int, sizes: Sequence[int],
        starts: Sequence[int], ends: Sequence[int],
    ) -> "Problem":
        """The problem of ``buffers`` (in order) with aligned ``sizes`` and the given steps,
        which are compressed here (rule 2)."""
        starts, ends, n_steps = compress_steps(starts, ends)
        return cls(
            buffers=tuple(buffers),
            alignment=alignment,
            sizes=tuple(sizes),
            starts=tuple(starts),
            ends=tuple(ends),
            loads=tuple(step_loads(starts, ends, sizes, n_steps)),
        )

    def __len__(self) -> int:
        return len(self.buffers)

    @property
    def n_steps(self) -> int:
        return len(self.loads)

    @property
    def lower_bound(self) -> int:
        """The peak load: no plan's arena is smaller."""
        return max(self.loads, default=0)

    def arena_of(self, offsets: list[int]) -> int:
        """The arena an offset vector needs: the highest aligned end (0 if nothing)."""
        return max((o + z for o, z in zip(offsets, self.sizes)), default=0)


def _canonical(buffers: tuple[Buffer, ...]) -> tuple[Buffer, ...]:
    try:
        return tuple(sorted(buffers, key=lambda b: b.id))  # type: ignore[arg-type,return-value]  # ids of one type compare
    except TypeError:
        # Mixed id types (e.g. str and int) do not compare; repr is still stable.
        indexed = sorted(enumerate(buffers), key=lambda p: (type(p[1].id).__name__, repr(p[1].id), p[0]))
        return tuple(b for _, b in indexed)


def compress_steps(starts: Sequence[int], ends: Sequence[int]) -> tuple[list[int], list[int], int]:
    """Ranked starts, ranked ends and the number of ranks (rule 2)."""
    points = sorted(set(starts))
    rank = {p: r for r, p in enumerate(points)}
    # bisect_right - 1: the rank of the last start at or before each end.
    return [rank[s] for s in starts], [bisect_right(points, e) - 1 for e in ends], len(points)


def step_loads(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int], n_steps: int) -> list[int]:
    """Summed ``sizes`` live at each of the compressed steps ``0..n_steps-1`` (inclusive lifetimes)."""
    diff = [0] * (n_steps + 1)
    for s, e, z in zip(starts, ends, sizes):
        diff[s] += z
        diff[e + 1] -= z
    return list(accumulate(diff[:-1]))


def smallest(
    problem: Problem, candidates: Iterable[list[int]], target: int | None = None
) -> list[int] | None:
    """The first of ``candidates`` with the smallest arena (None if there are none);
    stops early once that arena is at most ``target``."""
    best: list[int] | None = None
    best_arena = 0
    for offsets in candidates:
        arena = problem.arena_of(offsets)
        if best is None or arena < best_arena:
            best, best_arena = offsets, arena
        if target is not None and best_arena <= target:
            break
    return best


def make_problem(buffers: Iterable[Buffer], alignment: int) -> Problem:
    """Check the input and build the normalized :class:`Problem`."""
    alignment = check_alignment(alignment)
    bufs = _canonical(check_buffers(buffers))
    return Problem.build(
        bufs, alignment, [aligned_size(b.size, alignment) for b in bufs],
        [b.start for b in bufs], [b.end for b in bufs],
    )
