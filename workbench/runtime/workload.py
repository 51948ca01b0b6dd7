"""What a shape-only estimate assumes of the data it has not seen: the workload, not the machine.

A ``CostModel`` describes hardware and a runtime. How often a prefetch guesses the next
layer's experts, or how many of a cache's rows its mask selects, depends on the model's
routing over the tokens decoded: it is given beside the machine, never inside it
(``estimate(plan, cost_model, prefetch_hit_rate=...)``, ``layout_of(plan,
prefetch_hit_rate=...)``).

Rules:

1. ``prefetch_hit_rate`` is a share in [0, 1]: of a reuse copy's rows a prefetch is
   expected to hold, and of a cache's rows its mask is expected to select. 0.0, the
   default, is the pessimistic bound: every row crosses the link, as if nothing was
   prefetched or cached. A run never reads it: it counts the real hits.
2. A rate that is not a number in [0, 1] (a bool included) is refused, naming what is valid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import WorkbenchError

__all__ = ["Workload", "WorkloadError"]


class WorkloadError(WorkbenchError, ValueError):
    """An expected hit rate that is not a share."""


@dataclass(frozen=True)
class Workload:
    """The data a shape-only estimate expects (module rules)."""

    prefetch_hit_rate: float = 0.0  # share of a reuse copy's rows a prefetch holds, of a cache's rows its mask selects

    def __post_init__(self) -> None:
        rate = self.prefetch_hit_rate
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not math.isfinite(rate) or not 0.0 <= rate <= 1.0:
            raise WorkloadError(f"prefetch_hit_rate must be a number in [0, 1] (the share of a reuse copy's rows a "
                                f"prefetch holds, of a cache's rows its mask selects), got {rate!r}")
        object.__setattr__(self, "prefetch_hit_rate", float(rate))
