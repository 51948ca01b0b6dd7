"""``naive``: no reuse. Buffers sit back to back in canonical order.

Rules:
    1. Offsets are the running sum of aligned sizes, so the arena is exactly the
       sum of all aligned sizes; a size-0 buffer gets the running offset and
       takes nothing.
"""

from __future__ import annotations

from .base import Problem


def plan_naive(problem: Problem) -> list[int]:
    """Back-to-back offsets (rule 1)."""
    offsets = []
    top = 0
    for size in problem.sizes:
        offsets.append(top)
        top += size
    return offsets
