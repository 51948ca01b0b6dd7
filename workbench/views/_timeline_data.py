"""Timeline lanes and bars as plain data: what TimelineView draws for a run.

Rules:
1. One lane per (device, stream) of the timeline, in ``Timeline.streams()`` order (host
   first, then cuda:0, cuda:1 …; streams by name); lane ``i`` is drawn at ``y = i``.
2. One ``TimelineBar`` per event, in the timeline's order (by start time).
3. A bar's GB/s is bytes / duration (bytes per ns); 0 for a zero-length event.
4. The summary's copy time is the summed duration of h2d, d2h and d2d events, its compute
   time that of compute and host events; the overlap fraction is the timeline's own.
5. Step boundaries of a multi-step run (the hook for any producer of such runs): the
   ``steps`` argument (start time of each step, µs), else the timeline's
   ``step_starts_us`` attribute, else the events' ``step`` attribute (a step starts with
   its earliest event); a single-step run has none.
6. ``visible_bars`` keeps the bars that overlap a time window and whose kind is not
   hidden: what a zoomed, filtered view draws.
7. ``flows`` are the timeline's flows as ``(src bar, dst bar, kind)``: a copy's bar, the
   bar of an event that reads what it moved, and "copy" or "prefetch" (a prefetch to the
   copy of the layer it serves). The views draw them as arrows.
8. ``source`` is how the run's times were obtained, as its timeline records it ("modeled
   by <cost model>", "measured with CUDA events on <GPU>"); every rendering shows it
   beside the run's label, so no figure leaves a reader to guess which.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

from ._inputs import ViewOptionError, as_timeline
from ._style import copies_text, format_bytes, format_us
from ._upstream import COMPUTE_EVENT_KINDS, COPY_EVENT_KINDS, EVENT_KINDS, Timeline


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
    activity: str = "op"  # "op", or "slot_copy": the copy of an op's result into its planned slot

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
    step_starts_us: tuple[float, ...] = ()  # rule 5: start of step i at index i
    flows: tuple[tuple[int, int, str], ...] = ()  # rule 7: (src bar, dst bar, kind)
    source: str = ""  # rule 8: "modeled by …", "measured with …"; "" for a timeline built by hand


def timeline_data(run_or_timeline: Any, steps: Optional[Sequence[float]] = None) -> TimelineData:
    """Rules 1-5, 7 and 8 for a ``Timeline`` or a run result with ``.timeline``."""
    timeline: Timeline = as_timeline(run_or_timeline, "TimelineView")
    lanes = tuple((str(d), str(s)) for d, s in timeline.streams())  # strings: the data leaves here
    lane_of = {lane: i for i, lane in enumerate(lanes)}
    bars = tuple(
        TimelineBar(
            lane=lane_of[(str(e.device), str(e.stream))],
            device=str(e.device),
            stream=e.stream,
            kind=e.kind,
            node=e.node,
            start_us=e.start_us,
            end_us=e.end_us,
            nbytes=e.nbytes,
            flops=e.flops,
            gb_per_s=e.gb_per_s,
            id=e.id,
            activity=str(getattr(e, "activity", "op")),
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
    index = {e: i for i, e in enumerate(timeline.events)}
    flows = tuple((index[f.src], index[f.dst], f.kind) for f in getattr(timeline, "flows", ()))
    return TimelineData(lanes, bars, summary, start, end, step_starts(timeline, steps), flows, timeline.source)


def step_starts(timeline: Timeline, steps: Optional[Sequence[float]] = None) -> tuple[float, ...]:
    """Rule 5."""
    if steps is None:
        steps = getattr(timeline, "step_starts_us", None)
    if steps is not None:
        out = tuple(float(t) for t in steps)
        if any(b < a for a, b in zip(out, out[1:])):
            raise ViewOptionError(f"step start times must not decrease, got {list(out)}")
        return out
    first: dict[int, float] = {}
    for e in timeline.events:
        step = getattr(e, "step", None)
        if step is None:
            return ()
        first[int(step)] = min(first.get(int(step), e.start_us), e.start_us)
    return tuple(first[k] for k in sorted(first)) if len(first) > 1 else ()


def visible_bars(
    data: TimelineData, window: Optional[Sequence[float]] = None, hidden: Iterable[str] = ()
) -> list[TimelineBar]:
    """Rule 6: ``window`` is ``(start_us, end_us)`` or None for the whole run."""
    hide = set(hidden)
    unknown = hide - set(EVENT_KINDS)
    if unknown:
        raise ViewOptionError(f"unknown event kind(s) {', '.join(sorted(unknown))}; kinds are {', '.join(EVENT_KINDS)}")
    lo, hi = (data.start_us, data.end_us) if window is None or len(window) != 2 else (float(window[0]), float(window[1]))
    return [b for b in data.bars if b.kind not in hide and b.end_us >= lo and b.start_us <= hi]
