"""Measured time on the ``cuda`` backend: CUDA events around every step, stream waits.

Rules:

1. Each device has a compute stream and a copy stream (torch streams, so torch ops and
   the CuPy copy kernels run on the same queues). A device step records a start event,
   runs, and records an end event on its lane's stream.
2. Before a device step, its stream waits (``wait_event``) for the end event of every
   dep on another lane; deps on its own stream are ordered already. Deps on the host
   lane need nothing: host steps run synchronously, so they finished before the issue.
3. Before a host step, the host blocks on the end event of every device dep (a d2h into
   the slot it reads, a copy still reading the slot it overwrites).
4. At the call's start every device is idle (synchronized) and a start event is recorded
   on each; device times are ``start.elapsed_time(event)``, host times are wall clock
   since the same instant, both in µs.
5. FLOPs and bytes touched of compute steps come from the cost callables, evaluated
   only after the call has finished, so counting never delays a launch. A copy whose
   bytes the device decides (a reuse copy: only missed rows cross) passes ``nbytes`` as
   a callable, also evaluated after the call has finished.
6. ``split(step, nbytes)`` marks, between ``before`` and ``after``, where the op ended
   and the copy of its result into its planned slot began: the step becomes two events,
   the op and a ``slot_copy`` of ``nbytes``.
7. Timing events come from a pool kept by the streams and are reused call after call
   (``finish`` has synchronized, so every event of the call has completed): creating a
   CUDA event is a driver call that would otherwise be paid twice per step.
8. The timeline carries a flow (``timeline`` rule 4) from each copy to every step that
   reads it, as the simulator records them.
9. Graph replay (``graph_replay``): while a segment is captured the clock is ``muted``
   (it records nothing: a capture runs nothing). ``replay`` launches a captured graph
   between two marks on the compute stream, after the stream has waited for the
   segment's outside deps (rule 2); the timeline gets one compute event for it, and its
   end stands for the end of each of the segment's steps.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterable, Mapping, Optional, Union

import torch

from ..devices import Device
from ..errors import WorkbenchError
from .steps import HOST_LANE, Lane, Step, event_of
from .timeline import Event, Flow, Timeline

__all__ = ["ClockError", "CudaClock", "CudaStreams"]


def _flows_into(step: Step, event: Event, copies: Mapping[str, tuple[Event, str]]) -> list[Flow]:
    """Flows from the copies ``step`` reads (``timeline`` rule 4); none where the measured
    marks put the reader first."""
    out = []
    for dep in step.reads:
        if dep in copies and event.start_us >= copies[dep][0].end_us:
            out.append(Flow(copies[dep][0], event, copies[dep][1]))
    return out


class ClockError(WorkbenchError, RuntimeError):
    """The clock was driven out of order (an ``after`` without its ``before``)."""


class CudaStreams:
    """A compute and a copy stream per device index (rule 1), and the pool of timing
    events (rule 7)."""

    def __init__(self, indices: Iterable[int]) -> None:
        self.indices = tuple(sorted(set(indices)))
        self._compute = {i: torch.cuda.Stream(device=i) for i in self.indices}
        self._copy = {i: torch.cuda.Stream(device=i) for i in self.indices}
        self._free_events: list[Any] = []
        #: the GPUs' names, asked once: every call's timeline says where it was measured
        self.gpu_names = ", ".join(dict.fromkeys(torch.cuda.get_device_name(i) for i in self.indices))

    def event(self) -> Any:
        """A timing event from the pool (rule 7)."""
        return self._free_events.pop() if self._free_events else torch.cuda.Event(enable_timing=True)

    def release(self, events: Iterable[Any]) -> None:
        """Give completed events back to the pool (rule 7)."""
        self._free_events.extend(events)

    def compute(self, index: int) -> "torch.cuda.Stream":
        return self._compute[index]

    def copy(self, index: int) -> "torch.cuda.Stream":
        return self._copy[index]

    def for_lane(self, lane: Lane) -> "torch.cuda.Stream":
        index = _index(lane)
        return self._copy[index] if lane[1] == "copy" else self._compute[index]

    def synchronize(self) -> None:
        for i in self.indices:
            torch.cuda.synchronize(i)


def _index(lane: Lane) -> int:
    return lane[0].index


class CudaClock:
    """Records one call's steps with CUDA events (see module rules)."""

    def __init__(self, streams: CudaStreams) -> None:
        self._streams = streams
        self._start: dict[int, Any] = {}
        self._t0 = 0.0
        # (step, start, end, bytes or their callable, cost): start/end are CUDA events, or
        # wall-clock seconds for host steps
        self._records: list[tuple[Step, Any, Any, Union[int, Callable[[], int]], Callable[[], tuple[float, int, int]]]] = []
        self._ends: dict[str, tuple[Lane, Optional[Any]]] = {}
        self._open: Optional[tuple[Step, Any]] = None  # the step between before() and after()
        self._splits: dict[str, tuple[Any, int]] = {}  # step → (mark where its slot copy began, bytes)
        self._taken: list[torch.cuda.Event] = []  # every event taken from the pool (rule 7)
        self.muted = False  # rule 9: a segment is being captured
        self._replays: list[tuple[str, Lane, Any, Any]] = []  # (event name, lane, start, end) per replay

    def _event(self) -> torch.cuda.Event:
        """An event from the pool, given back when the call finishes (rule 7)."""
        event = self._streams.event()
        self._taken.append(event)
        return event

    def begin(self) -> None:
        """Rule 4."""
        self._streams.synchronize()
        for i in self._streams.indices:
            event = self._event()
            event.record(self._streams.compute(i))
            self._start[i] = event
        for event in self._start.values():
            event.synchronize()
        self._t0 = time.perf_counter()

    def before(self, step: Step) -> None:
        """Rules 2, 3: wait for the deps, then mark the start."""
        if self.muted:
            return
        lane = event_of(step)[1]
        if lane == HOST_LANE:
            for dep in step.deps:
                _, event = self._ends.get(dep, (HOST_LANE, None))
                if event is not None:
                    event.synchronize()
            self._open = (step, time.perf_counter())
            return
        stream = self._streams.for_lane(lane)
        for dep in step.deps:
            dep_lane, event = self._ends.get(dep, (HOST_LANE, None))
            if event is not None and dep_lane != lane:
                stream.wait_event(event)
        start = self._event()
        start.record(stream)
        self._open = (step, start)

    def split(self, step: Step, nbytes: int) -> None:
        """Rule 6: the op of the open step is done; its slot copy starts now."""
        if self.muted:
            return
        if self._open is None or self._open[0] is not step:
            raise ClockError(f"split({step.name}) outside before()/after() of that step")
        lane = event_of(step)[1]
        if lane == HOST_LANE:
            self._splits[step.name] = (time.perf_counter(), int(nbytes))
            return
        mark = self._event()
        mark.record(self._streams.for_lane(lane))
        self._splits[step.name] = (mark, int(nbytes))

    def after(
        self, step: Step, cost: Callable[[], tuple[float, int, int]], nbytes: Union[int, Callable[[], int]]
    ) -> None:
        """Mark the end of the step opened by ``before``."""
        if self.muted:
            return
        if self._open is None or self._open[0] is not step:
            raise ClockError(f"after({step.name}) does not close the step opened by before()")
        start = self._open[1]
        self._open = None
        lane = event_of(step)[1]
        if lane == HOST_LANE:
            self._records.append((step, start, time.perf_counter(), nbytes, cost))
            self._ends[step.name] = (lane, None)
            return
        end = self._event()
        end.record(self._streams.for_lane(lane))
        self._records.append((step, start, end, nbytes, cost))
        self._ends[step.name] = (lane, end)

    def capture_stream(self) -> "torch.cuda.Stream":
        """The stream graph segments are captured on: the first device's compute stream."""
        return self._streams.compute(self._streams.indices[0])

    def wait_for(self, deps: Iterable[str]) -> None:
        """Rule 9: the capture stream waits for the ends of ``deps`` on other lanes."""
        stream = self.capture_stream()
        lane = (Device("cuda", self._streams.indices[0]), "compute")
        for dep in deps:
            dep_lane, event = self._ends.get(dep, (HOST_LANE, None))
            if event is not None and dep_lane != lane:
                stream.wait_event(event)

    def replay(self, segment: Any, name: str, deps: Iterable[str], launch: Callable[[], None]) -> None:
        """Rule 9: launch a captured segment's graph between two marks."""
        self.wait_for(deps)
        stream = self.capture_stream()
        lane = (Device("cuda", self._streams.indices[0]), "compute")
        start, end = self._event(), self._event()
        start.record(stream)
        with torch.cuda.stream(stream):
            launch()
        end.record(stream)
        self._replays.append((name, lane, start, end))
        for step in segment.steps:
            self._ends[step] = (lane, end)

    def finish(self) -> Timeline:
        """Wait for the device, then turn the events into a ``Timeline`` (rules 4, 5)."""
        self._streams.synchronize()
        events = []
        flows: list[Flow] = []
        copies: dict[str, tuple[Event, str]] = {}  # copy step → its event and the kind of flow from it
        for step, start, end, moved, cost in self._records:
            kind, lane = event_of(step)
            split = self._splits.get(step.name)
            t0, t1 = self._times(lane, start, end if split is None else split[0])
            flops = 0
            nbytes = moved() if callable(moved) else moved
            if kind in ("compute", "host") and step.op == "call_function":
                _, nbytes, flops = cost()
            device, stream = lane
            events.append(Event(kind, step.name, device, stream, t0, max(t0, t1), int(nbytes), int(flops), step.index))
            flows += _flows_into(step, events[-1], copies)
            if step.copy is not None:
                copies[step.name] = (events[-1], "prefetch" if str(step.copy.role) == "prefetch" else "copy")
            if split is not None:
                _, s1 = self._times(lane, split[0], end)
                events.append(Event(kind, step.name, device, stream, max(t0, t1), max(t0, t1, s1), split[1], 0, step.index, "slot_copy"))
        for name, lane, start, end in self._replays:  # rule 9
            t0, t1 = self._times(lane, start, end)
            events.append(Event("compute", name, lane[0], lane[1], t0, max(t0, t1)))
        self._streams.release(self._taken)  # rule 7: every mark of this call has completed
        return Timeline(events, flows, f"measured with CUDA events on {self._streams.gpu_names or 'the host'}")

    def _times(self, lane: Lane, start: Any, end: Any) -> tuple[float, float]:
        """µs since the call began of two marks of ``lane`` (rule 4)."""
        if lane == HOST_LANE:
            return (start - self._t0) * 1e6, (end - self._t0) * 1e6
        origin = self._start[_index(lane)]
        return origin.elapsed_time(start) * 1e3, origin.elapsed_time(end) * 1e3
