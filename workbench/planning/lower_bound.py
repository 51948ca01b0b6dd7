"""The lower bound of an arena: the peak of simultaneously live aligned bytes.

At any step every live buffer needs its own bytes, so no placement can use
less than the largest total of aligned sizes live at one step.

Rules:
    1. A buffer adds its aligned size at every step of its inclusive lifetime,
       so buffers that touch at a step add up there.
    2. It is the peak of the step loads the algorithms plan with
       (``algorithms.base``: steps compressed to the ranks of distinct starts,
       which keeps every peak): O(n log n) for sorting the starts; sums are
       Python ints (exact for any size).
"""

from __future__ import annotations

from collections.abc import Iterable

from .algorithms.base import compress_steps, step_loads
from .buffers import Buffer, aligned_size, check_alignment, check_buffers


def lower_bound(buffers: Iterable[Buffer], alignment: int = 16) -> int:
    """Largest total of aligned bytes live at any one step (0 for no buffers)."""
    alignment = check_alignment(alignment)
    bufs = check_buffers(buffers)
    starts, ends, n_steps = compress_steps([b.start for b in bufs], [b.end for b in bufs])
    sizes = [aligned_size(b.size, alignment) for b in bufs]
    return max(step_loads(starts, ends, sizes, n_steps), default=0)
