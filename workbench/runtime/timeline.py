"""Timelines: what ran where and when, and a stream scheduler for modeled time.

An ``Event`` is one copy or compute step on one (device, stream) lane, with start and
end in microseconds. A ``Timeline`` summarises a run's events. ``StreamScheduler`` places
events in modeled time the way CUDA streams order work:

1. Work on one (device, stream) runs in issue order, one item at a time.
2. An item starts at the latest of: its stream being free, the end of each event it
   depends on (``deps``), and ``not_before_us`` (when its issuer released it).
3. Streams are otherwise independent, so a copy on a copy stream overlaps compute on the
   compute stream whenever rule 2 allows.
4. A ``Flow`` is a dependency worth an arrow: a copy (``src``) and an event that reads
   what it moved (``dst``). ``kind`` "copy" joins a copy to the op (or copy) that consumes
   it; "prefetch" joins a prefetch to the copy of the layer it serves, which takes its
   rows. A timeline's flows join events of that timeline, ``dst`` never starting before
   ``src`` ends; an item scheduled with ``flows_from`` records them.
5. A timeline says how its times were obtained (``source``): "modeled by <cost model>"
   for a schedule placed in modeled time, "measured with CUDA events on <GPU>" for a run
   timed on a device; "" only for a timeline built by hand, whose maker must say.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Iterable, Sequence, Union

import pandas as pd

from ..devices import CopyKind, Device, DeviceLike
from ..errors import ArgumentTypeError, WorkbenchError

#: Copy events are named by their ``CopyKind``; compute runs on a device or the host.
COPY_EVENT_KINDS: tuple[str, ...] = tuple(k.value for k in CopyKind)
COMPUTE_EVENT_KINDS: tuple[str, ...] = ("compute", "host")
EVENT_KINDS: tuple[str, ...] = COPY_EVENT_KINDS + COMPUTE_EVENT_KINDS
#: What a compute or host event does: the op itself, or the copy of its result into the
#: value's planned slot (an op without an ``out=`` variant computes into fresh memory).
ACTIVITIES: tuple[str, ...] = ("op", "slot_copy")
#: What a flow (rule 4) joins: a copy to its consumer, or a prefetch to the layer it serves.
FLOW_KINDS: tuple[str, ...] = ("copy", "prefetch")


class TimelineError(WorkbenchError, ValueError):
    """An event or a scheduled item that cannot be on a timeline."""


@dataclass(frozen=True)
class Event:
    """One step on one lane: ``kind`` in EVENT_KINDS, times in µs."""

    kind: str
    node: str  # the graph node (or label) this step belongs to
    device: Device  # a device string is parsed into its Device
    stream: str  # lane within the device, e.g. "compute", "copy"
    start_us: float
    end_us: float
    nbytes: int = 0  # bytes moved (copies) or touched (compute)
    flops: int = 0
    id: int = -1  # set by StreamScheduler; -1 for hand-made events
    activity: str = "op"  # "op": the step itself; "slot_copy": copying its result into its planned slot

    def __post_init__(self) -> None:
        if self.kind not in EVENT_KINDS:
            raise TimelineError(f"unknown event kind {self.kind!r}; valid: {', '.join(EVENT_KINDS)}")
        object.__setattr__(self, "kind", str(self.kind))
        object.__setattr__(self, "device", Device.parse(self.device))
        object.__setattr__(self, "stream", str(self.stream))
        if not self.end_us >= self.start_us:
            raise TimelineError(f"event {self.node!r} ends ({self.end_us} µs) before it starts ({self.start_us} µs)")
        if self.nbytes < 0 or self.flops < 0:
            raise TimelineError(f"event {self.node!r}: nbytes and flops must be >= 0")
        if self.activity not in ACTIVITIES:
            raise TimelineError(f"unknown event activity {self.activity!r}; valid: {', '.join(ACTIVITIES)}")

    @property
    def duration_us(self) -> float:
        return self.end_us - self.start_us

    @property
    def gb_per_s(self) -> float:
        """Bytes per nanosecond, i.e. GB/s (0 for an instantaneous event)."""
        return self.nbytes / (self.duration_us * 1e3) if self.duration_us > 0 else 0.0


@dataclass(frozen=True)
class Flow:
    """Rule 4: ``dst`` reads what copy ``src`` moved (an arrow from one to the other)."""

    src: Event
    dst: Event
    kind: str = "copy"  # one of FLOW_KINDS

    def __post_init__(self) -> None:
        if self.kind not in FLOW_KINDS:
            raise TimelineError(f"unknown flow kind {self.kind!r}; valid: {', '.join(FLOW_KINDS)}")
        if self.src.kind not in COPY_EVENT_KINDS:
            raise TimelineError(f"a flow starts at a copy; {self.src.node!r} is a {self.src.kind} event")
        if self.dst.start_us < self.src.end_us:
            raise TimelineError(
                f"flow {self.src.node!r} → {self.dst.node!r}: the reader starts ({self.dst.start_us} µs) "
                f"before the copy ends ({self.src.end_us} µs)"
            )


def _union(intervals: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def _length(intervals: Sequence[tuple[float, float]]) -> float:
    return sum(b - a for a, b in intervals)


def _intersection_length(xs: Sequence[tuple[float, float]], ys: Sequence[tuple[float, float]]) -> float:
    """Total length of the intersection of two sorted, disjoint interval lists."""
    total, i, j = 0.0, 0, 0
    while i < len(xs) and j < len(ys):
        lo, hi = max(xs[i][0], ys[j][0]), min(xs[i][1], ys[j][1])
        if hi > lo:
            total += hi - lo
        if xs[i][1] < ys[j][1]:
            i += 1
        else:
            j += 1
    return total


class Timeline:
    """The events of one run, sorted by start time (then end, then id)."""

    def __init__(self, events: Iterable[Event] = (), flows: Iterable[Flow] = (), source: str = "") -> None:
        if not isinstance(source, str):
            raise ArgumentTypeError(f"a Timeline's source is a string (how its times were obtained), got {type(source).__name__}")
        #: rule 5: "modeled by …", "measured with …", or "" (built by hand)
        self.source = source
        events = tuple(events)
        for e in events:
            if not isinstance(e, Event):
                raise ArgumentTypeError(f"a Timeline holds Events, got {type(e).__name__}")
        self.events: tuple[Event, ...] = tuple(sorted(events, key=lambda e: (e.start_us, e.end_us, e.id)))
        present = set(events)
        flows = tuple(flows)
        for f in flows:
            if not isinstance(f, Flow):
                raise ArgumentTypeError(f"a Timeline's flows are Flows, got {type(f).__name__}")
            if f.src not in present or f.dst not in present:
                raise TimelineError(f"flow {f.src.node!r} → {f.dst.node!r} joins an event that is not on this timeline")
        #: rule 4, by the copy's start
        self.flows: tuple[Flow, ...] = tuple(sorted(flows, key=lambda f: (f.src.start_us, f.dst.start_us)))

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self):
        return iter(self.events)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per event: kind, node, device, stream, start_us, end_us, duration_us, nbytes, flops, id, activity."""
        columns = ["kind", "node", "device", "stream", "start_us", "end_us", "duration_us", "nbytes", "flops", "id", "activity"]
        rows = [
            (e.kind, e.node, str(e.device), e.stream, e.start_us, e.end_us, e.duration_us, e.nbytes, e.flops, e.id, e.activity)
            for e in self.events
        ]
        return pd.DataFrame(rows, columns=columns)

    def totals_by_kind(self) -> dict[str, float]:
        """Summed durations (µs) per kind, every kind present (0.0 when none)."""
        totals = dict.fromkeys(EVENT_KINDS, 0.0)
        for e in self.events:
            totals[e.kind] += e.duration_us
        return totals

    def copy_counts(self) -> dict[str, int]:
        """Copy events per copy kind (h2d, d2h, d2d), every kind present."""
        counts = dict.fromkeys(COPY_EVENT_KINDS, 0)
        for e in self.events:
            if e.kind in counts:
                counts[e.kind] += 1
        return counts

    def bytes_moved(self) -> dict[str, int]:
        """Bytes copied per copy kind (h2d, d2h, d2d), every kind present."""
        moved = dict.fromkeys(COPY_EVENT_KINDS, 0)
        for e in self.events:
            if e.kind in moved:
                moved[e.kind] += e.nbytes
        return moved

    @property
    def span_us(self) -> float:
        """From the first start to the last end (0.0 when empty)."""
        if not self.events:
            return 0.0
        return max(e.end_us for e in self.events) - min(e.start_us for e in self.events)

    @property
    def end_us(self) -> float:
        """The last event's end (0.0 when empty): a call that starts at 0 spans this long,
        its first launch included."""
        return max((e.end_us for e in self.events), default=0.0)

    def streams(self) -> list[tuple[Device, str]]:
        """The (device, stream) lanes, sorted by device (cpu, cuda:0, cuda:1, ...) then stream."""
        lanes = {(e.device, e.stream) for e in self.events}
        return sorted(lanes)

    def overlap_fraction(self, compute_kinds: Sequence[str] = COMPUTE_EVENT_KINDS) -> float:
        """The share of copy time during which some compute runs concurrently.

        Let C be the union of the intervals of all copy events (h2d, d2h, d2d) and K the
        union of the intervals of all events whose kind is in ``compute_kinds`` (default:
        device compute and host work), on any lane. The result is |C ∩ K| / |C|, where |·|
        is total length; 0.0 when there is no copy time. Copies that run at the same time
        as each other count once; zero-length events count for nothing.
        """
        bad = [k for k in compute_kinds if k not in EVENT_KINDS]
        if bad:
            raise TimelineError(f"unknown event kinds {bad}; valid: {', '.join(EVENT_KINDS)}")
        copies = _union((e.start_us, e.end_us) for e in self.events if e.kind in COPY_EVENT_KINDS)
        total = _length(copies)
        if total == 0:
            return 0.0
        compute = _union((e.start_us, e.end_us) for e in self.events if e.kind in compute_kinds)
        return _intersection_length(copies, compute) / total

    def __repr__(self) -> str:
        return f"Timeline({len(self.events)} events, span {self.span_us:.3f} µs)"


EventRef = Union[Event, int]


class StreamScheduler:
    """Places work in modeled time on (device, stream) lanes (see module rules)."""

    def __init__(self, start_us: float = 0.0) -> None:
        self._start_us = float(start_us)
        self._free: dict[tuple[Device, str], float] = {}
        self._events: list[Event] = []
        self._by_id: dict[int, Event] = {}
        self._ids = itertools.count()
        self._flows: list[Flow] = []

    def schedule(
        self,
        kind: str,
        node: str,
        device: DeviceLike,
        stream: str,
        duration_us: float,
        deps: Iterable[EventRef] = (),
        nbytes: int = 0,
        flops: int = 0,
        activity: str = "op",
        not_before_us: float = 0.0,
        flows_from: Iterable[tuple[EventRef, str]] = (),
    ) -> Event:
        """Add an item; it starts at max(its lane free, end of every dep, ``not_before_us``)
        and lasts ``duration_us``. ``flows_from`` lists (copy, flow kind) pairs it reads
        from (rule 4); each copy should be among ``deps``."""
        if not duration_us >= 0:
            raise TimelineError(f"duration_us must be >= 0, got {duration_us!r}")
        lane = (Device.parse(device), str(stream))
        start = max(self._free.get(lane, self._start_us), float(not_before_us))
        for dep in deps:
            start = max(start, self._resolve(dep).end_us)
        event = Event(kind, node, lane[0], lane[1], start, start + duration_us, nbytes, flops, next(self._ids), activity)
        self._free[lane] = event.end_us
        self._events.append(event)
        self._by_id[event.id] = event
        self._flows += [Flow(self._resolve(ref), event, kind) for ref, kind in flows_from]
        return event

    def _resolve(self, dep: EventRef) -> Event:
        if isinstance(dep, Event):
            return dep
        if isinstance(dep, int) and not isinstance(dep, bool) and dep in self._by_id:
            return self._by_id[dep]
        raise TimelineError(f"unknown dependency {dep!r}: pass an Event or the id of one scheduled here")

    def stream_free_us(self, device: DeviceLike, stream: str) -> float:
        """When the lane (device, stream) next becomes free."""
        return self._free.get((Device.parse(device), str(stream)), self._start_us)

    @property
    def now_us(self) -> float:
        """The end of the last item on any lane (the start time when empty)."""
        return max(self._free.values(), default=self._start_us)

    @property
    def events(self) -> tuple[Event, ...]:
        return tuple(self._events)

    def timeline(self, source: str = "modeled") -> Timeline:
        """The events placed so far; ``source`` names the model that timed them (rule 5)."""
        return Timeline(self._events, self._flows, source)
