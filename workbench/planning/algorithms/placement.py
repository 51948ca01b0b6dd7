"""Place buffers one at a time, in a given order, into the lowest-conflict gap.

This is the engine shared by ``greedy`` and ``search``: an order plus a fit
rule determines an assignment.

Rules:
    1. A buffer may only look at already placed buffers that overlap it in time;
       among their byte ranges (sorted by offset) it takes a gap that fits:
       ``"best"`` — the smallest such gap (the lowest of equal ones);
       ``"first"`` — the lowest such gap.
       With no gap that fits it goes on top of them (their highest end), and
       at 0 when nothing overlaps.
    2. Placed buffers are indexed by time so a query costs
       O(log T + k) for k overlapping buffers, never a scan of all placed ones.
       A buffer overlapping ``[s, e]`` is either live at step ``s`` or starts in
       ``(s, e]`` — two disjoint cases, each answered by one segment tree over
       steps:
         * ``_live``: a buffer is stored at the O(log T) nodes that tile its
           lifetime; the nodes on the path from leaf ``s`` to the root hold
           exactly the buffers live at ``s``.
         * ``_born``: a buffer is stored at its start leaf and every ancestor;
           the O(log T) nodes that tile ``(s, e]`` hold exactly the buffers
           starting there, each once.
    3. Size-0 buffers are not placed through the index: they sit at offset 0.
    4. Re-placing any safe plan first fit, in order of its offsets, gives each
       buffer an offset no higher than before: by induction, every earlier
       buffer that overlaps it in time ended at or below its old offset, and
       can only have moved down. So re-placing never grows a plan, and first
       fit over *some* order reaches the optimum. ``search`` and ``exact``
       rely on this.
"""

from __future__ import annotations

from collections.abc import Sequence

from .base import Problem

_SHORT = 4  # up to this many steps, walking leaves beats walking canonical nodes


class TimeIndex:
    """Placed byte ranges indexed by lifetime (rule 2), each packed in one int.

    A range ``[lo, hi)`` is stored as ``lo << shift | hi``: ints sort about twice
    as fast as tuples, and sorting the overlapping ranges is the inner loop.
    """

    __slots__ = ("_size", "_live", "_born")

    def __init__(self, n_steps: int) -> None:
        size = 1
        while size < max(n_steps, 1):
            size *= 2
        self._size = size
        self._live: list[list[int]] = [[] for _ in range(2 * size)]
        self._born: list[list[int]] = [[] for _ in range(2 * size)]

    def add(self, start: int, end: int, packed: int) -> None:
        """Record a packed range as live over steps ``start..end``."""
        live, born = self._live, self._born
        node = start + self._size
        while node:
            born[node].append(packed)
            node >>= 1
        lo, hi = start + self._size, end + 1 + self._size
        while lo < hi:
            if lo & 1:
                live[lo].append(packed)
                lo += 1
            if hi & 1:
                hi -= 1
                live[hi].append(packed)
            lo >>= 1
            hi >>= 1

    def overlapping(self, start: int, end: int) -> list[int]:
        """Packed ranges of every recorded buffer live at some step in ``start..end``."""
        live, born, size = self._live, self._born, self._size
        found: list[int] = []
        node = start + size
        while node:
            found += live[node]
            node >>= 1
        if end - start <= _SHORT:
            for leaf in range(start + 1 + size, end + 1 + size):
                found += born[leaf]
            return found
        lo, hi = start + 1 + size, end + 1 + size
        while lo < hi:
            if lo & 1:
                found += born[lo]
                lo += 1
            if hi & 1:
                hi -= 1
                found += born[hi]
            lo >>= 1
            hi >>= 1
        return found


def _best_gap(ranges: list[int], need: int, shift: int, mask: int) -> int:
    ranges.sort()
    top = 0
    best_at, best_gap = -1, -1
    for packed in ranges:
        gap = (packed >> shift) - top
        if gap >= need and (best_at < 0 or gap < best_gap):
            best_at, best_gap = top, gap
        hi = packed & mask
        if hi > top:
            top = hi
    return best_at if best_at >= 0 else top


def _first_gap(ranges: list[int], need: int, shift: int, mask: int) -> int:
    ranges.sort()
    top = 0
    for packed in ranges:
        if (packed >> shift) - top >= need:
            return top
        hi = packed & mask
        if hi > top:
            top = hi
    return top


FITS = {"best": _best_gap, "first": _first_gap}


def place_blocks(
    problem: Problem,
    order: Sequence[int],
    fit: str = "best",
    keep: int = 0,
    kept: Sequence[int] | None = None,
) -> list[int]:
    """Offsets (indexed like ``problem.buffers``) from placing ``order`` with ``fit``.

    ``order`` lists every buffer of nonzero size exactly once (size-0 buffers may
    be listed or not, rule 3). The first ``keep`` buffers of ``order`` take their
    offsets from ``kept`` instead of being placed: a placement depends only on
    the buffers before it, so re-placing an order that shares a prefix with an
    earlier one can start where they differ.
    """
    choose = FITS[fit]
    unit = problem.alignment
    # Work in alignment units: smaller ints, and every offset stays aligned.
    sizes = [z // unit for z in problem.sizes]
    starts, ends = problem.starts, problem.ends
    shift = max(sum(sizes).bit_length(), 1)  # no range can end above the sum
    mask = (1 << shift) - 1
    offsets = [0] * len(sizes)
    index = TimeIndex(problem.n_steps)
    add, overlapping = index.add, index.overlapping
    if keep:
        assert kept is not None
        for i in order[:keep]:
            size = sizes[i]
            if size:
                offset = offsets[i] = kept[i] // unit
                add(starts[i], ends[i], offset << shift | (offset + size))
    for i in order[keep:] if keep else order:
        size = sizes[i]
        if not size:
            continue
        s, e = starts[i], ends[i]
        ranges = overlapping(s, e)
        offset = choose(ranges, size, shift, mask) if ranges else 0
        offsets[i] = offset
        add(s, e, offset << shift | (offset + size))
    return [o * unit for o in offsets]
