"""The result of one call of a planned program: outputs, timeline and summaries."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..machine.cost_model import CostModel
from .graph_segments import SegmentSpan
from .timeline import Timeline

__all__ = ["CountedGatherStat", "PrefetchStat", "RoutedStat", "RowMaskStat", "RunResult", "SlotWrites"]


@dataclass(frozen=True)
class PrefetchStat:
    """What one reuse copy (``gather_h2d_reuse_copy``) of a call did.

    Rules: ``0 <= hits <= rows``; ``link_bytes + device_bytes == rows * row_bytes``; the
    copy's timeline event carries ``link_bytes`` (the bytes that crossed the link).
    """

    node: str  # the reuse copy's node name
    rows: int  # rows selected
    hits: int  # rows found in the prefetched buffer (copied on the device)
    row_bytes: int  # bytes of one row

    @property
    def misses(self) -> int:
        return self.rows - self.hits

    @property
    def link_bytes(self) -> int:
        """Bytes that crossed the host→device link: the missed rows."""
        return self.misses * self.row_bytes

    @property
    def device_bytes(self) -> int:
        """Bytes copied within device memory from the prefetched buffer: the hit rows."""
        return self.hits * self.row_bytes

    @property
    def hit_rate(self) -> float:
        return self.hits / self.rows if self.rows else 0.0


@dataclass(frozen=True)
class CountedGatherStat:
    """What one counted copy (a gather of the rows its index lists, of which its ``count``
    says how many are real) of a call did.

    Rules: ``0 <= rows <= slots``; the copy's timeline event carries ``link_bytes`` (the
    bytes that crossed the link): the ``rows`` real rows the index listed, never the
    padding ``slots - rows``.
    """

    node: str  # the counted copy's node name
    slots: int  # rows its result holds (U: the static bound, real rows then padding)
    rows: int  # distinct real rows the index listed: the ones that crossed
    row_bytes: int  # bytes of one row (one slab of this weight)

    @property
    def link_bytes(self) -> int:
        """Bytes that crossed the host→device link."""
        return self.rows * self.row_bytes

    @property
    def bound_bytes(self) -> int:
        """Bytes the copy's record promises at most (every slot real)."""
        return self.slots * self.row_bytes


#: ``CountedGatherStat`` under its earlier name.
RoutedStat = CountedGatherStat


@dataclass(frozen=True)
class RowMaskStat:
    """What one row mask of a call held (``node_facts.RowShare``: the steps charged by it
    ran ``true_rows`` or ``rows - true_rows`` of their rows). Rule: ``0 <= true_rows <= rows``."""

    node: str  # the mask's node name
    rows: int  # entries of the mask
    true_rows: int  # entries that were True


@dataclass(frozen=True)
class SlotWrites:
    """How a call's computed values reached their planned slots (or caller-owned buffers).

    ``direct``: written in place by the op's ``out=`` variant; ``copied``: computed into
    fresh memory, then copied over (each copy is a ``slot_copy`` event on the timeline).
    """

    direct: int  # values written straight into their slot
    copied: int  # ops whose results were copied into their slots afterwards
    copied_bytes: int  # bytes those copies moved


@dataclass(frozen=True, eq=False)
class RunResult:
    """What ``run`` / ``Session.run`` returns.

    ``outputs`` are structured like the model's outputs and never alias the session's
    arenas: host outputs are fresh host tensors, device outputs own their ``DeviceBuffer``
    (see ``workbench.runtime.buffer_of``), so they stay valid after the session closes.
    ``timeline`` holds one event per copy and compute step of the call (modeled on
    ``sim``, measured with CUDA events on ``cuda``); ``load_timeline`` the placement of
    the constants when the session was loaded (once per session, shared by its calls).
    ``prefetch`` says, per reuse copy, how many selected rows the prefetch already held;
    ``counted_gathers``, per counted copy, how many real rows crossed;
    ``row_masks``, per row mask (``workbench.node_facts``), how many rows it selected.
    With ``launch == "graph"``, ``segments`` says where each graph segment started and
    ended on ``timeline`` (``graph_segments``); with pooled outputs, device outputs lie in
    the session's output pool instead (``output_pool`` rule 1 says for how long).
    """

    outputs: Any
    timeline: Timeline
    backend: str  # "sim" | "cuda"
    load_timeline: Timeline
    cost_model: Optional[CostModel] = None  # the model that timed a sim run (None on cuda)
    prefetch: tuple[PrefetchStat, ...] = ()  # one per reuse copy of the call, in issue order
    slot_writes: SlotWrites = SlotWrites(0, 0, 0)  # how computed values reached their slots
    counted_gathers: tuple[CountedGatherStat, ...] = ()  # one per counted copy of the call, in issue order
    row_masks: tuple[RowMaskStat, ...] = ()  # one per row mask of the call, in issue order
    launch: str = "eager"  # the session's launch mode ("eager" or "graph")
    segments: tuple[SegmentSpan, ...] = ()  # graph launch: where each graph segment ran

    @property
    def routed(self) -> tuple[CountedGatherStat, ...]:
        """``counted_gathers`` under its earlier name."""
        return self.counted_gathers

    @property
    def prefetch_hit_rate(self) -> Optional[float]:
        """Hits over rows summed over every reuse copy of the call; None without any."""
        rows = sum(p.rows for p in self.prefetch)
        return sum(p.hits for p in self.prefetch) / rows if rows else None

    def copy_bytes_by_kind(self) -> dict[str, int]:
        """Bytes moved by the call's copies, per kind (h2d, d2h, d2d; every kind present)."""
        return self.timeline.bytes_moved()

    def copy_counts(self) -> dict[str, int]:
        """Number of copy events per kind (h2d, d2h, d2d; every kind present)."""
        return self.timeline.copy_counts()

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
        rate = self.prefetch_hit_rate
        prefetch = f", prefetch hits {100 * rate:.1f}%" if rate is not None else ""
        return (
            f"RunResult(backend={self.backend!r}, {len(self.timeline)} events, "
            f"{self.time_us:.3f} µs, {copies}, overlap {100 * self.overlap_fraction:.1f}%{prefetch})"
        )
