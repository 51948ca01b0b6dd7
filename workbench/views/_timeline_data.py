"""Timeline lanes and bars as plain data: what TimelineView draws for a run.

Rules:
1. One lane per (device, stream) of the timeline, in ``Timeline.streams()`` order (host
   first, then cuda:0, cuda:1 …; streams by name); lane ``i`` is drawn at ``y = i``.
2. One ``TimelineBar`` per event, in the timeline's order (by start time).
3. A bar's GB/s is bytes / duration (bytes per ns); 0 for a zero-length event.
4. The summary's copy time is the summed duration of h2d, d2h and d2d events, its compute
   time that of compute and host events; the overlap fraction is the timeline's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..runtime.timeline import COMPUTE_EVENT_KINDS, COPY_EVENT_KINDS, Timeline
from ._inputs import as_timeline
from ._style import copies_text, format_bytes, format_us


@dataclass(frozen=True)
class TimelineBar:
    lane: int
    device: str
    stream: str
    kind: str  # "h2d" | "d2h" | "d2d" | "compute" | "host"
    node: str
    start_us: float
    end_us: float
    nbytes: int
    flops: int
    gb_per_s: float
    id: int

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def text(self) -> str:
        """The hover / spec line: ``h2d x_to_cuda0 on cuda:0/copy: 4.0 KiB in 0.400 µs, 10.24 GB/s``."""
        head = f"{self.kind} {self.node} on {self.device}/{self.stream}: "
        if self.kind in COPY_EVENT_KINDS:
            return head + f"{format_bytes(self.nbytes)} in {format_us(self.duration_us)}, {self.gb_per_s:.2f} GB/s"
        extra = f", {self.flops:,} FLOP" if self.flops else ""
        return head + f"{format_us(self.duration_us)}, {format_bytes(self.nbytes)} touched{extra}"


@dataclass(frozen=True)
class TimelineSummary:
    events: int
    span_us: float
    copy_us: float
    compute_us: float
    overlap_fraction: float
    copy_counts: Mapping[str, int]
    bytes_moved: Mapping[str, int]

    @property
    def line(self) -> str:
        copies = copies_text(self.copy_counts, self.bytes_moved)
        return (
            f"span {format_us(self.span_us)} · copy time {format_us(self.copy_us)} ({copies}) · "
            f"compute time {format_us(self.compute_us)} · overlap {100 * self.overlap_fraction:.1f}%"
        )


@dataclass(frozen=True)
class TimelineData:
    lanes: tuple[tuple[str, str], ...]  # (device, stream), lane i at y = i
    bars: tuple[TimelineBar, ...]
    summary: TimelineSummary
    start_us: float  # first start (0.0 when empty)
    end_us: float  # last end


def timeline_data(run_or_timeline: Any) -> TimelineData:
    """Rules 1-4 for a ``Timeline`` or a run result with ``.timeline``."""
    timeline: Timeline = as_timeline(run_or_timeline, "TimelineView")
    lanes = tuple(timeline.streams())
    lane_of = {lane: i for i, lane in enumerate(lanes)}
    bars = tuple(
        TimelineBar(
            lane=lane_of[(e.device, e.stream)],
            device=e.device,
            stream=e.stream,
            kind=e.kind,
            node=e.node,
            start_us=e.start_us,
            end_us=e.end_us,
            nbytes=e.nbytes,
            flops=e.flops,
            gb_per_s=e.gb_per_s,
            id=e.id,
        )
        for e in timeline.events
    )
    totals = timeline.totals_by_kind()
    counts = timeline.copy_counts()
    summary = TimelineSummary(
        events=len(bars),
        span_us=timeline.span_us,
        copy_us=sum(totals[k] for k in COPY_EVENT_KINDS),
        compute_us=sum(totals[k] for k in COMPUTE_EVENT_KINDS),
        overlap_fraction=timeline.overlap_fraction(),
        copy_counts=counts,
        bytes_moved=timeline.bytes_moved(),
    )
    start = min((b.start_us for b in bars), default=0.0)
    end = max((b.end_us for b in bars), default=0.0)
    return TimelineData(lanes, bars, summary, start, end)
