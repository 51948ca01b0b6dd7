"""``greedy``: largest first, best fit — the ExecuTorch / TFLite baseline.

Rules:
    1. Buffers go in order of aligned size, largest first; ties by start step,
       then id (``orders.by_size``).
    2. Each takes the smallest gap between the already placed buffers that
       overlap it in time, the lowest of equal gaps; with none that fits it goes
       on top of them (``placement`` rule 1, fit ``"best"``).
    3. Kept faithful on purpose: comparisons against it are only honest if it is
       the algorithm that others ship.
"""

from __future__ import annotations

from .base import Problem
from .orders import by_size
from .placement import place_blocks


def plan_greedy(problem: Problem) -> list[int]:
    """Largest first, best fit (rules 1-2)."""
    return place_blocks(problem, by_size(problem), "best")
