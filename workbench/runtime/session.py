"""Loaded sessions: a plan's arenas and constants placed once, then called many times.

``load(plan, backend)`` allocates one arena per device and one resident constant region
per device through the backend's allocator registry, copies every constant once onto
each device it is resident on, and returns a ``Session``; ``session.run(*inputs)``
executes one call of the planned graph on those arenas (``call.Call``) and returns a
``RunResult``.

Rules:

1. Inputs are checked (``inputs.check_inputs``) before a call touches any memory.
2. Every planned tensor is bound to its arena slot (``planning.arena_execution.Slots``);
   each set of arenas makes each slot view once and every call on it reuses it.
3. Constants are copied once per (constant, resident device) at load, as events on
   ``load_timeline``; the host sources of gather copies stay resident on the host.
4. ``close()`` frees every arena and constant region exactly once; a call that fails
   midway frees whatever it allocated for the caller, so live bytes return to what they
   were (the session's own memory stays until ``close``).
5. Threads: ``run`` may be called from several threads at once. With
   ``max_concurrent_calls=1`` (the default) calls take turns on the one set of arenas;
   with ``N > 1`` (``sim`` only) up to N calls run at once, each on a set of arenas of its
   own, taken from a pool that grows on demand to N sets. A program with state (buffers
   it updates, ``state``) always runs one call at a time. ``close`` waits for running
   calls; a call after ``close`` is an error.
6. The model behind the program is checked at load and at every call
   (``model_source``): a replaced weight, or one edited in place after load, is a
   ``ModelChangedError``, never a silently stale result.
7. A user ``run_node`` must return what the node's target returns (a tensor of the
   traced dtype and shape, a tuple of them, a number); anything else is an
   ``ExecutorError`` naming the node (``run_node_check``).
8. Launch modes (``launch``): ``"eager"`` launches every device operation on its own;
   ``"graph"`` splits the call into graph segments (``graph_segments``) and launches each
   segment as one captured graph per device, the steps between segments on their own.
   Both run the same operations on the same memory, so their outputs are the same
   bits on ``sim``; there the clock charges one graph launch per segment and device
   (``sim_timing`` rule 6). On ``cuda`` the segments are captured as CUDA graphs on the
   first calls and replayed after (``graph_replay``). ``RunResult.segments`` says where
   each segment ran. Graph launch implies pooled outputs (rule 9): a captured graph
   writes the same addresses every call.
9. Outputs (``outputs``): ``"fresh"`` (the default in eager mode) gives every caller-owned
   device output a buffer of its own; ``"pooled"`` takes them from the session's
   ``OutputPool``, so that after the first two calls a call allocates nothing; its
   ownership rule is ``output_pool`` rule 1 (valid until the next call has returned).
10. Weights made in place (``weights``, a ``materialise.WeightSource``): instead of
    copying each constant from the program (rule 3), the session allocates the same
    resident regions and has ``weights.fill`` write each constant's values straight
    into its resident memory on each device (a device constant never crosses the link;
    a host-resident one is filled in host memory). A shape-only plan then runs; the
    load timeline holds no event for a filled constant, since nothing is copied.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from typing import Any, Optional

import torch
import torch.fx

from ..arguments import check_callable, check_flag, check_int, describe
from ..devices import CPU, Device, host_first
from ..errors import ArgumentTypeError, ArgumentValueError, WorkbenchError
from ..graph_values import is_view_op, value_of
from ..node_facts import facts_of
from ..weight_formats import weight_formats
from ..model_source import ModelChangedError
from ..planning.arena_execution import Slots
from ..planning.buffers import aligned_size
from ..planning.memory_plan import MemoryPlan
from .allocators import AllocatorRegistry, find_allocation
from .backend_registry import check_backend, shared_registry
from .device_buffers import DeviceBuffer
from .byte_views import typed_view
from .call import Call, ExecutorError, NodeEntry, RunNode, node_entries
from .run_node_check import checked_run_node
from ..machine.cost_model import CostModel, check_launch
from .graph_replay import CudaGraphReplay
from .graph_segments import GraphSegments, graph_segments, segment_spans
from .materialise import WeightSource
from .output_pool import OUTPUT_MODES, OutputPool
from ..kernels.cuda import CudaUnavailableError, cuda_available, cuda_unavailable_reason, device_count
from .exec_backends import make_exec_backend
from .inputs import check_inputs, flatten_inputs, input_specs
from .copy_router import CopyRouter
from .run_result import RunResult
from ..machine.cost_model import UncountedOps, cost_depends_on_data
from .sim_timing import CostFn, bind_cost, copy_cost, default_cost_model, op_step_cost, stored_of
from ..device_graph import Mutation, mutations
from .state import StateWrite, state_writes
from .steps import Step, Steps, resident_write_step, steps_of
from .timeline import Timeline

__all__ = ["ConstantNotResidentError", "ExecutorError", "MAX_CONCURRENT_CALLS", "RunNode", "Session", "check_plan", "load", "resolve_backend"]

#: The most calls one session runs at once (each holds a set of arenas).
MAX_CONCURRENT_CALLS = 64


class ConstantNotResidentError(WorkbenchError, KeyError):
    """A constant asked for on a device where the session holds no copy of it."""

    def __str__(self) -> str:  # KeyError would quote the message like a key
        return str(self.args[0]) if self.args else ""


def check_plan(plan: Any, weights: Optional[WeightSource] = None) -> MemoryPlan:
    """``plan`` if the executor can run it, else an error that says why; with ``weights``
    (rule 10) a shape-only plan runs too."""
    if not isinstance(plan, MemoryPlan):
        raise ArgumentTypeError(f"plan must be a MemoryPlan from workbench.plan, got {describe(plan)}")
    if weights is not None:
        return plan
    program = plan.device_graph.program
    if program.shape_only:
        raise ExecutorError(
            "this plan is of a shape-only program (captured with shape_only=True): it has no "
            "weights to run; use workbench.runtime.estimate(plan) for its modeled timeline, or load "
            "it with weights=SeededWeights(seed) (workbench.runtime.materialise) for seeded random weights"
        )
    meta = [program.constants[n] for n in program.constants if program.constant_tensor(n).is_meta]
    if meta:
        raise ExecutorError(
            f"the program's weights {', '.join(map(repr, meta[:3]))} are meta tensors, so there is "
            "nothing to run: capture with shape_only=True and use workbench.runtime.estimate(plan), "
            "or capture a model with real weights, or load it with weights=SeededWeights(seed) "
            "(workbench.runtime.materialise) to make seeded random weights on the device"
        )
    _check_stored_formats(plan)
    return plan


def _check_stored_formats(plan: MemoryPlan) -> None:
    """Rule 3 of ``weight_formats``: a plan runs only if every constant stored in a weight
    format has the values the executor computes with, and no such value is copied into
    an arena (its slot is sized for the stored bytes; the executor holds dequantized ones)."""
    dg = plan.device_graph
    program = dg.program
    shape_only = sorted({f.name for n, f in program.stored_formats.items() if n not in program.dequantized})
    stored_nodes = {n.name: n for n in dg.graph.nodes if facts_of(n).stored is not None}
    if not shape_only and stored_nodes and not program.stored_formats:
        shape_only = sorted({str(getattr(facts_of(n).stored, "name", "")) for n in stored_nodes.values()})  # a plan read back
    if shape_only:
        raise ExecutorError(
            f"the program stores constants in weight format(s) {', '.join(shape_only)}, which the workbench "
            "plans and estimates but does not compute with (shape-only); formats it runs: "
            f"{', '.join(f.name for f in weight_formats().values() if f.executable)}; use "
            "workbench.runtime.estimate(plan) for its modeled timeline"
        )
    in_arena = [n.name for n in stored_nodes.values() if n.op == "call_function" and not is_view_op(n.target)]
    if in_arena:
        raise ExecutorError(
            f"{', '.join(in_arena[:3])} copy or pick rows of constants stored in a weight format into planned "
            "memory; the executor computes with dequantized values, which do not fit slots sized for the "
            "stored bytes: quantize only weights that ops read in place where they are resident (e.g. "
            "'aten.linear'), or estimate(plan) this one"
        )


def resolve_backend(backend: Optional[str]) -> str:
    """The backend name to run on (None: the default), usable here or an error saying why not."""
    name = check_backend(backend)
    if name == "cuda" and not cuda_available():
        raise CudaUnavailableError(f"backend='cuda' needs a CUDA GPU. {cuda_unavailable_reason()}")
    return name


def _devices_of(plan: MemoryPlan) -> list[Device]:
    devices = set(plan.arena_bytes) | {d for d, n in plan.constant_bytes.items() if n}
    return host_first(devices | set(plan.device_graph.node_device.values()))


def _check_devices(devices: list[Device], backend: str) -> None:
    if backend != "cuda":
        return
    count = device_count()
    missing = [str(d) for d in devices if not d.is_host and d.index >= count]
    if missing:
        raise ExecutorError(
            f"the plan uses {', '.join(missing)} but this machine has {count} GPU(s) "
            f"(valid: cuda:0..cuda:{count - 1}); place onto those, or run it on backend='sim'"
        )


def load(
    plan: MemoryPlan,
    backend: Optional[str] = None,
    cost_model: Optional[CostModel] = None,
    *,
    registry: Optional[AllocatorRegistry] = None,
    validate: bool = False,
    run_node: Optional[RunNode] = None,
    max_concurrent_calls: int = 1,
    launch: Optional[str] = None,
    outputs: Optional[str] = None,
    weights: Optional[WeightSource] = None,
) -> "Session":
    """Allocate ``plan``'s arenas and place its constants on ``backend``; return a ``Session``.

    Args:
        plan: a ``MemoryPlan`` from ``workbench.plan`` (of a program with real weights).
        backend: ``"sim"``, ``"cuda"``, or None for ``default_backend()``.
        cost_model: the model that times ``sim`` calls (default: H200 on PCIe Gen5).
        registry: the allocators to use (default: the process's registry for ``backend``).
        validate: check on every step that it reads only its own device's memory.
        run_node: ``(node, args, kwargs) -> value`` to run compute nodes (default: call
            the node's target), e.g. to trace or to inject a failure (rule 7).
        max_concurrent_calls: how many calls from different threads may run at once
            (rule 5); each running call beyond the first holds its own set of arenas.
            Only large, compute-bound graphs gain (``benchmarks/session_threads.py``:
            1.3x for a 1024-wide MLP with 2-4 threads on 2 cores, but 0.7x for small
            graphs, whose Python overhead contends for the GIL), so calls take turns by default.
        launch: ``"eager"`` or ``"graph"`` (rule 8), and the cost model times that mode;
            None: per-op launches, timed in the cost model's own ``launch_mode`` (a model of
            another runtime, which may replay graphs of its own).
        outputs: ``"fresh"`` or ``"pooled"`` (rule 9); None: pooled with graph launch, else fresh.
        weights: make every constant in place instead of copying the program's (rule 10).
    """
    if weights is not None and not isinstance(weights, WeightSource):
        raise ArgumentTypeError(f"weights must be a WeightSource (e.g. SeededWeights(seed=0)), got {describe(weights)}")
    check_plan(plan, weights)
    name = resolve_backend(backend)
    model = cost_model if cost_model is not None else default_cost_model()
    if not isinstance(model, CostModel):
        raise ArgumentTypeError(f"cost_model must be a CostModel (e.g. CostModel.preset('h200')), got {describe(model)}")
    if registry is not None and not isinstance(registry, AllocatorRegistry):
        raise ArgumentTypeError(
            f"registry must be an AllocatorRegistry (e.g. workbench.runtime.registry_for_backend('sim')), "
            f"got {describe(registry)}; to choose the backend, pass backend='sim' or 'cuda'"
        )
    reg = registry if registry is not None else shared_registry(name)
    if reg.backend is not None and reg.backend != name:
        raise ArgumentValueError(f"the registry serves backend {reg.backend!r}, not {name!r}")
    check_flag(validate, "validate")
    if run_node is not None:
        check_callable(run_node, "run_node", "(node, args, kwargs) -> value")
    check_int(max_concurrent_calls, "max_concurrent_calls", 1, MAX_CONCURRENT_CALLS)
    if max_concurrent_calls > 1 and name == "cuda":
        raise ArgumentValueError(
            "max_concurrent_calls must be 1 on backend 'cuda': a CUDA session's streams and "
            "clock serve one call at a time (load one session per thread instead)"
        )
    mode = check_launch(launch) if launch is not None else "eager"
    pooled = _check_outputs(outputs, mode)
    if mode == "graph" and max_concurrent_calls > 1:
        raise ArgumentValueError(
            "max_concurrent_calls must be 1 with launch='graph': a session's graphs and output pool serve one call at a time"
        )
    plan.device_graph.program.check_source()
    timing = model.with_launch_mode(mode) if launch is not None else model
    return Session(plan, name, timing, reg, validate, run_node, max_concurrent_calls, pooled, weights, mode)


def _check_outputs(outputs: Any, launch: str) -> bool:
    """Rule 9: whether outputs are pooled; an error naming the valid values."""
    if outputs is None:
        return launch == "graph"
    if not isinstance(outputs, str) or outputs not in OUTPUT_MODES:
        raise ArgumentValueError(
            f"outputs must be one of {', '.join(map(repr, OUTPUT_MODES))} (a fresh buffer per output, or the "
            f"session's output pool), got {outputs!r}"
        )
    if outputs == "fresh" and launch == "graph":
        raise ArgumentValueError("outputs='fresh' cannot go with launch='graph': a captured graph writes the same "
                                 "output addresses every call; use outputs='pooled' (or leave it unset)")
    return outputs == "pooled"



class _Arenas:
    """One set of arenas, one per device, and the slot views made over them (rule 2)."""

    def __init__(self, session: "Session", devices: list[Device]) -> None:
        self.buffers: dict[Device, DeviceBuffer] = {}
        self.views: dict[tuple, torch.Tensor] = {}
        arenas = {}
        try:
            for device in devices:
                nbytes = session.plan.arena_bytes.get(device, 0)
                buffer = DeviceBuffer.on(device, nbytes, session.registry) if nbytes else None
                if buffer is not None:
                    self.buffers[device] = buffer
                arenas[device] = session.exec_backend.arena(device, buffer)
        except BaseException:
            self.free()
            raise
        self.slots: Optional[Slots] = Slots(session.plan, arenas)

    def slot(self, name: str, like: torch.Tensor) -> torch.Tensor:
        key = (name, tuple(like.shape), like.dtype, tuple(like.stride()))
        view = self.views.get(key)
        if view is None:
            if self.slots is None:
                raise ExecutorError("this session is closed; load the plan again to run it")
            view = self.slots.slot(name, like)
            self.views[key] = view
        return view

    def free(self) -> None:
        self.views.clear()
        self.slots = None
        for buffer in self.buffers.values():
            if not buffer.freed:
                buffer.free()


class _OnArenas:
    """What one call sees of its session: everything, with the slots of its own arenas."""

    def __init__(self, session: "Session", arenas: _Arenas) -> None:
        self._session = session
        self._arenas = arenas

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)

    def slot(self, name: str, like: torch.Tensor) -> torch.Tensor:
        return self._arenas.slot(name, like)


class Session:
    """A plan loaded on a backend: arenas, resident constants, streams (see module rules).

    Use ``load(...)`` to make one, ``with`` (or ``close()``) to free it. Safe to call from
    several threads (rule 5): outputs are the caller's own and never alias the session.
    """

    def __init__(
        self,
        plan: MemoryPlan,
        backend: str,
        cost_model: CostModel,
        registry: AllocatorRegistry,
        validate: bool,
        run_node: Optional[RunNode],
        max_concurrent_calls: int = 1,
        pooled: bool = False,
        weights: Optional[WeightSource] = None,
        launch: str = "eager",
    ) -> None:
        self.plan = plan
        self.weights = weights  # rule 10
        self.backend = backend
        self.cost_model = cost_model
        self.registry = registry
        self.validate = validate
        self.run_node = checked_run_node(run_node) if run_node is not None else None
        self.steps: Steps = steps_of(plan)
        self._events = {step.name: step for step in self.steps.steps if step.event is not None}  # op costs read them
        self.entries: tuple[NodeEntry, ...] = node_entries(self.steps, plan.device_graph.graph)
        self.mutations: tuple[Mutation, ...] = mutations(plan.device_graph)
        self.state_writes: tuple[StateWrite, ...] = state_writes(plan, self.steps)
        self.max_concurrent_calls = 1 if self.mutations else max_concurrent_calls
        self.launch = launch  # rule 8
        self.segments: GraphSegments = graph_segments(plan, self.steps)
        self.output_pool: Optional[OutputPool] = OutputPool(registry) if pooled else None  # rule 9
        self._calls = 0  # calls run so far (the output pool's turn, the graphs' warm-up)
        self.constant_buffers: dict[Device, DeviceBuffer] = {}
        self.constant_layout: dict[Device, dict[str, int]] = {}  # device → constant → offset
        self._constants: dict[tuple[str, Device], torch.Tensor] = {}
        self._own_ids: set[int] = set()
        self._closed = False
        self._op_times: dict[str, tuple[Any, tuple[float, int, int], dict[str, str]]] = {}  # node → (signature, cost, uncounted)
        self._inputs = input_specs(plan)
        self._source = plan.device_graph.program.source
        self._versions = self._source.versions() if self._source is not None else ()
        self._turn = threading.RLock()  # one call at a time (rule 5); re-entrant, so a run_node may close
        self._idle: "queue.SimpleQueue[_Arenas]" = queue.SimpleQueue()  # arena sets not in use
        self._arena_sets: list[_Arenas] = []
        self._pool_lock = threading.Lock()
        self._running = threading.Semaphore(self.max_concurrent_calls)
        self._devices = _devices_of(plan)
        _check_devices(self._devices, backend)
        # rule 8: on cuda the segments are captured as CUDA graphs and replayed
        self.graph_replay: Optional[CudaGraphReplay] = CudaGraphReplay(self) if backend == "cuda" and self.launch == "graph" else None
        uncaptured = self.segments.uncaptured | {w.step.name for w in self.state_writes} if launch == "graph" else frozenset()
        self.exec_backend = make_exec_backend(backend, registry, cost_model, self._devices, uncaptured)
        self.router = CopyRouter(registry, self.exec_backend)
        try:
            self._primary = self._new_arenas()
            if self.max_concurrent_calls > 1:
                self._idle.put(self._primary)
            self.load_timeline: Timeline = self._place_constants()
        except BaseException:
            self.close()
            raise

    # -- loading ---------------------------------------------------------------------------
    def _new_arenas(self) -> _Arenas:
        arenas = _Arenas(self, self._devices)
        self._own_ids.update(b.allocation.id for b in arenas.buffers.values())
        self._arena_sets.append(arenas)
        return arenas

    @property
    def arena_buffers(self) -> dict[Device, DeviceBuffer]:
        """The buffer of each device's arena (of the first set, the one a lone caller uses)."""
        return self._primary.buffers

    def arena_bytes_held(self) -> int:
        """Bytes of every set of arenas the session holds (one set per call it ran at once)."""
        return sum(b.nbytes for arenas in self._arena_sets for b in arenas.buffers.values())

    def _residency(self) -> dict[Device, list[str]]:
        """Device → constants resident there, in graph order (plus gather sources on the host)."""
        dg = self.plan.device_graph
        held: dict[Device, dict[str, None]] = {}  # device → constants (a dict: ordered, no repeats)
        for name, devices in dg.residency.items():
            for device in devices:
                held.setdefault(device, {})[name] = None
        for record in dg.copies:
            if record.is_gather and record.value in dg.program.constants:
                held.setdefault(CPU, {})[record.value] = None
        return {device: list(names) for device, names in held.items()}

    def _place_constants(self) -> Timeline:
        """Rule 3: one copy per (constant, resident device), recorded on the load timeline."""
        program = self.plan.device_graph.program
        align = self.plan.alignment
        clock = self.exec_backend.clock()
        clock.begin()
        index = 0
        for device, names in self._residency().items():
            layout, offset = {}, 0
            sources = {}
            for name in names:
                src = program.constant_tensor(name).detach()
                src = src.contiguous() if self.weights is not None else src.cpu().contiguous()  # rule 10: only its shape
                sources[name] = src
                layout[name] = offset
                offset += aligned_size(src.numel() * src.element_size(), align)
            buffer = DeviceBuffer.on(device, offset, self.registry)
            self.constant_buffers[device] = buffer
            self._own_ids.add(buffer.allocation.id)
            self.constant_layout[device] = layout
            stream = None if device.is_host else self.exec_backend.copy_stream(device)
            for name in names:
                src = sources[name]
                nbytes = src.numel() * src.element_size()
                resident = typed_view(buffer.view(layout[name], nbytes), src.dtype, tuple(src.shape))
                self._constants[(name, device)] = resident
                if self.weights is not None:  # rule 10
                    with self.exec_backend.copy_stream_context(device) if not device.is_host else contextlib.nullcontext():
                        self.weights.fill(name, resident, device, self.backend)
                    continue
                step = resident_write_step(index, name, device)
                index += 1
                clock.before(step)
                buffer.copy_from_host(src, layout[name], stream=stream)
                clock.after(step, _load_cost(self.cost_model, step, nbytes), nbytes)
        if self.weights is not None:
            self.exec_backend.synchronize()  # rule 10: every constant made before the first call
        return clock.finish()

    @property
    def constant_region_bytes(self) -> dict[Device, int]:
        """Bytes of the resident constant region per device (constants plus alignment)."""
        return {d: b.nbytes for d, b in self.constant_buffers.items()}

    def constant(self, name: str, device: str | Device) -> torch.Tensor:
        """The resident copy of constant placeholder ``name`` on ``device``."""
        self._check_open()
        found = self.resident(name, Device.parse(device))
        if found is None:
            resident = sorted(str(d) for n, d in self._constants if n == name)
            raise ConstantNotResidentError(
                f"constant {name!r} is not resident on {Device.parse(device)}; it is resident on "
                f"{', '.join(resident) or 'no device'}"
            )
        return found

    def resident_constants(self) -> dict[tuple[str, Device], torch.Tensor]:
        """Every resident copy: (constant, device) → its tensor in the session's memory."""
        self._check_open()
        return dict(self._constants)

    def resident(self, name: str, device: Device) -> Optional[torch.Tensor]:
        """The resident copy of constant ``name`` on ``device``, or None."""
        return self._constants.get((name, device))

    # -- calls -----------------------------------------------------------------------------
    def run(self, *inputs: Any) -> RunResult:
        """Execute one call; the arenas and constants are reused, never re-copied.

        Safe from several threads at once (rule 5); each call's outputs are its own."""
        self._check_open()
        flat = flatten_inputs(self.plan, inputs)
        check_inputs(self.plan, self.backend, flat, self._inputs)
        if self.max_concurrent_calls == 1:
            with self._turn:
                self._check_open()
                self._check_model()
                return self._call(self._primary, flat)
        with self._running:
            self._check_open()
            self._check_model()
            arenas = self._take_arenas()
            try:
                return self._call(arenas, flat)
            finally:
                self._idle.put(arenas)

    def _take_arenas(self) -> _Arenas:
        """An idle set of arenas, or a new one while fewer than the limit exist (rule 5)."""
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            with self._pool_lock:
                self._check_open()
                return self._new_arenas()

    def _call(self, arenas: _Arenas, flat: list) -> RunResult:
        call = Call(_OnArenas(self, arenas) if arenas is not self._primary else self, self._calls)
        try:
            with torch.no_grad():
                outputs, timeline = call.execute(flat)
        except BaseException:
            call.abandon()
            raise
        finally:
            self._calls += 1
        if self.mutations and self._source is not None:
            self._versions = self._source.versions()  # rule 6: the call's own writes are no edit
        return RunResult(
            outputs=outputs,
            timeline=timeline,
            backend=self.backend,
            load_timeline=self.load_timeline,
            cost_model=self.cost_model if self.backend == "sim" else None,
            prefetch=call.prefetch_stats(),
            counted_gathers=call.counted_gather_stats(),
            slot_writes=call.slot_writes(),
            row_masks=call.row_mask_stats(),
            launch=self.launch,
            segments=segment_spans(self.segments, timeline) if self.launch == "graph" else (),
        )

    def _check_model(self) -> None:
        """Rule 6."""
        if self._source is None:
            return
        self._source.check()
        edited = self._source.edited_since(self._versions)
        if edited:
            raise ModelChangedError(
                f"{', '.join(map(repr, edited[:5]))} changed in place after this session loaded "
                "the weights; the session holds the values of load time: load the plan again to use the new ones"
            )

    # -- per-node caches shared by calls -------------------------------------------------------
    def slot(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """The arena view of storage ``name`` shaped like ``like`` (made once, then reused)."""
        return self._primary.slot(name, like)

    def op_time(
        self, step: Step, node: torch.fx.Node, args: tuple, kwargs: dict, out: Any, uncounted: Optional[UncountedOps] = None
    ) -> tuple[float, int, int]:
        """(µs, bytes, flops) of an op step, recomputed only when its argument shapes change
        (or always, when its cost reads data); ops whose FLOPs cannot be counted are added
        to ``uncounted``."""
        stored = stored_of(node)
        if cost_depends_on_data(node.target, args, kwargs):
            return op_step_cost(self.cost_model, step, node.target, args, kwargs, out, uncounted=uncounted, stored=stored,
                                node=node, events=self._events)
        signature = _signature((args, kwargs))
        hit = self._op_times.get(node.name)
        if hit is None or hit[0] != signature:
            found = UncountedOps()
            cost = op_step_cost(self.cost_model, step, node.target, args, kwargs, out, uncounted=found, stored=stored,
                                node=node, events=self._events)
            hit = (signature, cost, found.reasons)
            self._op_times[node.name] = hit
        if uncounted is not None:
            for reason in hit[2].values():
                uncounted.add(node.target, reason)
        return hit[1]

    # -- lifetime --------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Free the arenas and constant regions (rule 4) once running calls have finished;
        calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        held = self._hold_every_call()
        try:
            if hasattr(self, "exec_backend"):
                self.exec_backend.synchronize()  # nothing may still be copying into what we free
        finally:
            self._constants.clear()
            for arenas in self._arena_sets:
                arenas.free()
            for buffer in self.constant_buffers.values():
                if not buffer.freed:
                    buffer.free()
            pool = getattr(self, "output_pool", None)
            if pool is not None:
                pool.free()
            for release in held:
                release()

    def _hold_every_call(self) -> list:
        """Wait until no call runs (rule 5); the releases to call afterwards."""
        if not hasattr(self, "_running"):
            return []
        self._turn.acquire()
        for _ in range(self.max_concurrent_calls):
            self._running.acquire()
        return [self._turn.release] + [self._running.release] * self.max_concurrent_calls

    def __enter__(self) -> "Session":
        self._check_open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ExecutorError("this session is closed; load the plan again to run it")

    def in_session_memory(self, t: torch.Tensor) -> bool:
        """True when ``t``'s bytes lie in one of this session's arenas or constant regions."""
        hit = find_allocation(t.untyped_storage().data_ptr())
        return hit is not None and hit[0].id in self._own_ids

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        arenas = ", ".join(f"{d}: {b.nbytes} B" for d, b in self.arena_buffers.items())
        return f"Session(backend={self.backend!r}, {state}, arenas {{{arenas}}})"


def _load_cost(model: CostModel, step: Step, nbytes: int) -> CostFn:
    """A constant placed on the host is bound like a planned host input; else an h2d copy."""
    cost = bind_cost if step.event == "host" else copy_cost
    return lambda: cost(model, step, nbytes)


def _signature(x: Any) -> Any:
    """Shapes and dtypes of tensors, plain values as they are: what an op's cost depends on."""
    if isinstance(x, torch.Tensor):
        return (tuple(x.shape), x.dtype)
    if isinstance(x, (tuple, list)):
        return tuple(_signature(v) for v in x)
    if isinstance(x, dict):
        return tuple((k, _signature(v)) for k, v in x.items())
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return type(x).__name__
