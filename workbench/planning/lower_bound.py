"""The lower bound of an arena: the peak of simultaneously live aligned bytes.

At any step every live buffer needs its own bytes, so no placement can use
less than the largest total of aligned sizes live at one step.

Rules:
    1. A buffer adds its aligned size at ``start`` and removes it after ``end``
       (lifetimes are inclusive), so buffers that touch at a step add up there.
    2. The sweep sorts ``2n`` events once: O(n log n); sums are Python ints
       (exact for any size).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .buffers import Buffer, aligned_size, check_alignment, check_buffers


def lower_bound(buffers: Iterable[Buffer], alignment: int = 16) -> int:
    """Largest total of aligned bytes live at any one step (0 for no buffers)."""
    alignment = check_alignment(alignment)
    bufs = check_buffers(buffers)
    return peak_load(
        [b.start for b in bufs], [b.end for b in bufs], [aligned_size(b.size, alignment) for b in bufs]
    )


def peak_load(starts: Sequence[int], ends: Sequence[int], sizes: Sequence[int]) -> int:
    """Peak over steps of the summed ``sizes`` of the intervals ``[starts[i], ends[i]]``."""
    # A removal is keyed at end + 1 with a negative delta, so at equal keys it sorts
    # first: a buffer ending at t - 1 is gone before one starting at t arrives (rule 1).
    events = [(s, z) for s, z in zip(starts, sizes) if z]
    events += [(e + 1, -z) for e, z in zip(ends, sizes) if z]
    events.sort()
    live = peak = 0
    for _, delta in events:
        live += delta
        if live > peak:
            peak = live
    return peak
