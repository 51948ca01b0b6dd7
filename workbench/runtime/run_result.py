"""The result of one call of a planned program: outputs, timeline and summaries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .cost_model import CostModel
from .timeline import COPY_EVENT_KINDS, Timeline

__all__ = ["RunResult"]


@dataclass(frozen=True, eq=False)
class RunResult:
    """What ``run`` / ``Session.run`` returns.

    ``outputs`` are structured like the model's outputs and never alias the session's
    arenas: host outputs are fresh host tensors, device outputs own their ``DeviceBuffer``
    (see ``workbench.runtime.buffer_of``), so they stay valid after the session closes.
    ``timeline`` holds one event per copy and compute step of the call (modeled on
    ``sim``, measured with CUDA events on ``cuda``); ``load_timeline`` the placement of
    the constants when the session was loaded (once per session, shared by its calls).
    """

    outputs: Any
    timeline: Timeline
    backend: str  # "sim" | "cuda"
    load_timeline: Timeline
    cost_model: Optional[CostModel] = None  # the model that timed a sim run (None on cuda)

    def copy_bytes_by_kind(self) -> dict[str, int]:
        """Bytes moved by the call's copies, per kind (h2d, d2h, d2d; every kind present)."""
        return self.timeline.bytes_moved()

    def copy_counts(self) -> dict[str, int]:
        """Number of copy events per kind (h2d, d2h, d2d; every kind present)."""
        counts = dict.fromkeys(COPY_EVENT_KINDS, 0)
        for e in self.timeline.events:
            if e.kind in counts:
                counts[e.kind] += 1
        return counts

    @property
    def time_us(self) -> float:
        """The call's span: first start to last end, in µs."""
        return self.timeline.span_us

    @property
    def overlap_fraction(self) -> float:
        """Share of copy time during which some compute ran (``Timeline.overlap_fraction``)."""
        return self.timeline.overlap_fraction()

    def __repr__(self) -> str:
        moved = self.copy_bytes_by_kind()
        copies = ", ".join(f"{k} {v} B" for k, v in moved.items() if v) or "no copies"
        return (
            f"RunResult(backend={self.backend!r}, {len(self.timeline)} events, "
            f"{self.time_us:.3f} µs, {copies}, overlap {100 * self.overlap_fraction:.1f}%)"
        )
