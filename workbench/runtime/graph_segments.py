"""Graph segments: which steps of a call graph replay may capture, and where it must stop.

``graph_segments(plan, steps)`` walks a plan's steps in issue order and splits them into
segments: maximal runs of device operations that one captured graph per device can hold
(captured once, replayed every call). A step that cannot be captured runs on its own,
launched per op, between two segments.

Rules:

1. A step is a device operation when it has an event (``Step.event``) that is not
   ``"host"``. Host steps run on the host thread: they cannot be in a device graph.
2. A device operation is capturable unless one of these holds (its reason is recorded):
   a. it binds a caller's input (a placeholder): the source is the caller's memory, at
      another address every call;
   b. it is a copy whose variant says ``capturable=False`` (``copy_variants``): its
      handler reads data on the host to choose what to move;
   c. it is a copy whose host side is pageable (``Step.pinned`` False): the host stages
      it through its own buffers, chunk by chunk;
   d. it is a copy of rows whose row ids lie in host memory: the host hands them to the
      kernel (row ids in device memory are read by the kernel, so such a gather is
      capturable); or a copy from a host input the caller keeps (no binding step): it
      is read at the caller's address, another every call;
   e. its value has a data-dependent shape (a size with no example value), or is not a
      tensor (a number the host reads back).
3. Steps without an event (caller-owned inputs, ``getitem``, the output) neither join
   nor end a segment.
4. A segment is a maximal run of capturable device operations with no non-capturable
   step between them; it holds one graph per device it touches. Segments are numbered
   in issue order from 0.
5. Everything here is decided from the plan alone, so the segments of a plan are the
   same for every call and every backend.
6. A call's ``RunResult.segments`` says where each segment ran (``segment_spans``): from
   the first start to the last end of its steps' events, or of the one event that
   stands for its replay when the backend replays it as one graph.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping, Optional

import torch
import torch.fx

from ..copy_variants import copy_variant
from ..devices import Device
from ..graph_values import value_of
from ..planning.memory_plan import MemoryPlan
from .steps import Step, Steps
from .timeline import Event

__all__ = ["GraphSegment", "GraphSegments", "REPLAY_PREFIX", "SegmentBreak", "SegmentSpan", "graph_segments", "replay_event_name", "segment_spans"]


@dataclass(frozen=True)
class GraphSegment:
    """One run of capturable steps (rule 4)."""

    index: int
    steps: tuple[str, ...]  # step (node) names, in issue order
    devices: tuple[Device, ...]  # one captured graph per device

    @property
    def first(self) -> str:
        return self.steps[0]

    @property
    def last(self) -> str:
        return self.steps[-1]


@dataclass(frozen=True)
class SegmentBreak:
    """A device or host step that runs on its own, and why (rules 1, 2)."""

    step: str
    reason: str


@dataclass(frozen=True)
class GraphSegments:
    """A plan's segments and the steps between them."""

    segments: tuple[GraphSegment, ...]
    breaks: tuple[SegmentBreak, ...]

    def segment_of(self) -> Mapping[str, int]:
        """Step name → the index of its segment, for every captured step."""
        return {name: s.index for s in self.segments for name in s.steps}

    @property
    def uncaptured(self) -> frozenset[str]:
        """Names of the device operations that run on their own (rule 2)."""
        return frozenset(b.step for b in self.breaks)

    def describe(self) -> str:
        """One line per segment and per step between segments, in issue order."""
        rows = []
        for s in self.segments:
            rows.append(f"segment {s.index}: {len(s.steps)} steps on {', '.join(map(str, s.devices))}, {s.first} .. {s.last}")
        for b in self.breaks:
            rows.append(f"not captured: {b.step} ({b.reason})")
        return "\n".join(rows)


def _data_dependent(node: torch.fx.Node) -> bool:
    val = value_of(node)
    tensors = val if isinstance(val, (tuple, list)) else (val,)
    for t in tensors:
        if isinstance(t, torch.Tensor):
            for d in t.shape:
                if not isinstance(d, int) and getattr(getattr(d, "node", None), "hint", None) is None:
                    return True
    return False


def _reason(step: Step, node: torch.fx.Node, node_device: Mapping[str, Device], caller_inputs: frozenset[str]) -> Optional[str]:
    """Rule 2: why ``step`` cannot be captured, or None when it can."""
    if step.event == "host":
        return "a host step"
    if node.op == "placeholder":
        return "binds a caller's input"
    if step.copy is not None:
        if not copy_variant(step.copy.role).capturable:
            return f"a {step.copy.role} copy: its handler reads data on the host"
        if step.event in ("h2d", "d2h") and not step.pinned:
            return "a copy from or to pageable host memory"
        index = step.copy.index
        if index is not None and index in node_device and node_device[index].is_host:
            return f"its row ids {index!r} lie in host memory"
        source = step.copy.value
        if source in caller_inputs and node_device[source].is_host:
            return f"it reads the caller's host tensor {source!r} where the caller keeps it"
    val = value_of(node)
    if node.op == "call_function" and val is not None and not isinstance(val, (torch.Tensor, tuple, list)):
        return "its value is a number the host reads back"
    if _data_dependent(node):
        return "its shape depends on data"
    return None


def graph_segments(plan: MemoryPlan, steps: Steps) -> GraphSegments:
    """Split ``plan``'s steps (``steps_of(plan)``) into graph segments (module rules)."""
    nodes = {n.name: n for n in plan.device_graph.graph.nodes}
    node_device = plan.device_graph.node_device
    # inputs the caller keeps (no binding step): read where the caller has them
    caller_inputs = frozenset(s.name for s in steps.steps if s.op == "placeholder" and s.event is None)
    segments: list[GraphSegment] = []
    breaks: list[SegmentBreak] = []
    run: list[Step] = []

    def close() -> None:
        if run:
            devices = tuple(sorted({s.lane[0] for s in run if s.lane is not None}, key=str))
            segments.append(GraphSegment(len(segments), tuple(s.name for s in run), devices))
            run.clear()

    for step in steps.steps:
        if step.event is None:  # rule 3
            continue
        reason = _reason(step, nodes[step.name], node_device, caller_inputs)
        if reason is None:
            run.append(step)
        else:
            close()
            breaks.append(SegmentBreak(step.name, reason))
    close()
    return GraphSegments(tuple(segments), tuple(breaks))


@dataclass(frozen=True)
class SegmentSpan:
    """Where one graph segment ran in a call's timeline (µs from the call's start)."""

    index: int
    first: str  # its first step
    last: str  # its last step
    start_us: float  # the earliest start of its events
    end_us: float  # the latest end of its events
    events: int  # events of its steps on the timeline (one per replayed graph when replayed as one)


def segment_spans(segments: GraphSegments, timeline: Iterable[Event]) -> tuple[SegmentSpan, ...]:
    """Each segment's span on ``timeline``: over the events of its steps, or the event
    that stands for its replay (named ``replay_event_name(index)``)."""
    owner = segments.segment_of()
    found: dict[int, list[Event]] = {}
    for event in timeline:
        index = owner.get(event.node)
        if index is None and event.node.startswith(REPLAY_PREFIX):
            index = int(event.node[len(REPLAY_PREFIX):])
        if index is not None:
            found.setdefault(index, []).append(event)
    spans = []
    for s in segments.segments:
        mine = found.get(s.index, [])
        if mine:
            spans.append(SegmentSpan(s.index, s.first, s.last, min(e.start_us for e in mine), max(e.end_us for e in mine), len(mine)))
    return tuple(spans)


#: The node name of the timeline event that stands for one replay of a captured segment.
REPLAY_PREFIX = "graph_segment_"


def replay_event_name(index: int) -> str:
    """The timeline name of segment ``index``'s replay event."""
    return f"{REPLAY_PREFIX}{index}"
