"""Graph replay on ``cuda``: each graph segment captured once as a CUDA graph, then replayed.

A session loaded with ``launch="graph"`` on ``cuda`` holds a ``CudaGraphReplay``. The call
(``call.Call``) asks it at the first step of every graph segment (``graph_segments``)
whether to run the segment's steps one by one, to capture them, or to replay the graph
captured before.

Rules:

1. Warm-up: the session's first ``WARMUP_CALLS`` calls run every step per op (kernels
   compiled and loaded, library handles made, the output pool's two sets and the input
   buffers allocated: nothing may allocate device memory while a graph is captured).
2. Capture: the output pool hands out two sets of buffers in turn (``output_pool`` rule
   1), so each call parity has its own graphs, captured by the first call of that parity
   after the warm-up with ``torch.cuda.CUDAGraph`` on the device's compute stream. While
   a segment is captured, every operation of it, copies included, is issued on the
   compute stream (the graph is the chain of its steps in issue order; copies inside
   a segment do not overlap its kernels), and the clock records nothing.
3. Before a segment is captured or replayed, the compute stream waits for the end of
   every step outside the segment that a step inside it depends on; afterwards the
   segment's end stands for the end of each of its steps, for the steps after it.
4. Replay: the values the capture bound (slot views, tensors of the graph's private
   memory pool, pooled outputs, row-mask counts) are bound again and the graph is
   launched once; the steps are not interpreted. The timeline has one event per replay,
   named ``graph_segment_<k>`` (``graph_segments.replay_event_name``), on the compute lane.
5. Inputs the caller owns on the device (no binding step) are copied into the
   session's input buffers at the start of each call, so the graphs read fixed addresses;
   a call may pass the outputs of the call before as inputs.
6. Graph replay runs plans on one GPU; a plan on several is an ``ExecutorError`` at load.
7. A capture that fails (an operation the CUDA runtime refuses to capture) ends the
   capture, switches the session to per-op launches for its remaining calls, and raises
   an ``ExecutorError`` naming the segment and the reason; ``disabled`` says why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..devices import Device
from .call import ExecutorError
from .graph_segments import GraphSegment, replay_event_name

__all__ = ["WARMUP_CALLS", "CudaGraphReplay", "SegmentRun"]

#: Rule 1: per-op calls before the first capture (one per set of the output pool).
WARMUP_CALLS = 2


@dataclass
class SegmentRun:
    """One segment as the call walks it: where its entries start and stop, what it waits for."""

    segment: GraphSegment
    start: int  # index of its first step's entry in the session's entries
    stop: int  # one past its last step's entry
    external_deps: tuple[str, ...]  # rule 3: steps outside it that its steps wait for
    graphs: dict[int, Any] = field(default_factory=dict)  # call parity → torch.cuda.CUDAGraph
    bound: dict[int, dict[str, Any]] = field(default_factory=dict)  # parity → values bound in the capture
    masks: dict[int, dict[str, Any]] = field(default_factory=dict)  # parity → row-mask counts of the capture


class CudaGraphReplay:
    """The captured graphs of one session (module rules)."""

    def __init__(self, session: Any) -> None:
        devices = {d for d in session.plan.device_graph.node_device.values() if not d.is_host}
        if len(devices) > 1:  # rule 6
            raise ExecutorError(
                f"launch='graph' on cuda runs plans on one GPU; this plan uses {', '.join(sorted(map(str, devices)))}: "
                "place it on one, or use launch='eager'"
            )
        self.device: Optional[Device] = next(iter(devices), None)
        self.disabled: str = ""  # rule 7: why the session went back to per-op launches
        position = {entry.step.name: i for i, entry in enumerate(session.entries)}
        by_name = session.steps.by_name
        self.runs: dict[int, SegmentRun] = {}
        for seg in session.segments.segments:
            inside = set(seg.steps)
            deps = sorted({d for name in seg.steps for d in by_name[name].deps if d not in inside})
            start, stop = position[seg.first], position[seg.last] + 1
            self.runs[start] = SegmentRun(seg, start, stop, tuple(deps))

    def mode(self, call_number: int) -> str:
        """``"eager"``, ``"capture"`` or ``"replay"`` for the call (rules 1, 2, 7)."""
        if self.disabled or call_number < WARMUP_CALLS:
            return "eager"
        parity = call_number % 2
        return "replay" if all(parity in run.graphs for run in self.runs.values()) else "capture"

    # -- what the call does at a segment's first step -------------------------------------------
    def replay(self, call: Any, run: SegmentRun) -> None:
        """Rule 4: bind the capture's values again and launch the graph once."""
        parity = call.number % 2
        call.env.update(run.bound[parity])
        call.restore_masks(run.masks[parity])
        call.clock.replay(run.segment, replay_event_name(run.segment.index), run.external_deps, run.graphs[parity].replay)

    def capture(self, call: Any, run: SegmentRun, walk: Any) -> None:
        """Rules 2, 3, 7: capture the segment's steps (``walk(start, stop)`` runs them), then
        launch the new graph once for this call."""
        parity = call.number % 2
        before = set(call.env)
        masks_before = set(call.mask_names())
        graph = torch.cuda.CUDAGraph()
        stream = call.clock.capture_stream()
        call.clock.wait_for(run.external_deps)  # rule 3, issued before the capture begins
        call.exec.capturing = True
        call.clock.muted = True
        try:
            with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
                walk(run.start, run.stop)
        except Exception as exc:
            self.disabled = f"segment {run.segment.index} ({run.segment.first} .. {run.segment.last}): {exc}"
            raise ExecutorError(f"graph replay could not capture {self.disabled}; later calls launch per op") from exc
        finally:
            call.exec.capturing = False
            call.clock.muted = False
        run.graphs[parity] = graph
        run.bound[parity] = {k: v for k, v in call.env.items() if k not in before}
        run.masks[parity] = {k: v for k, v in call.mask_items() if k not in masks_before}
        call.clock.replay(run.segment, replay_event_name(run.segment.index), (), graph.replay)
