"""Loaded sessions: a plan's arenas and constants placed once, then called many times.

``load(plan, backend)`` allocates one arena per device and one resident constant region
per device through the backend's allocator registry, copies every constant once onto
each device it is resident on, and returns a ``Session``; ``session.run(*inputs)``
executes one call of the planned graph on those arenas (``call.Call``) and returns a
``RunResult``.

Rules:

1. Inputs are checked (``inputs.check_inputs``) before a call touches any memory.
2. Every planned tensor is bound to its arena slot (``planning.arena_execution.Slots``);
   the session makes each slot view once and every call reuses it.
3. Constants are copied once per (constant, resident device) at load, as events on
   ``load_timeline``; the host sources of gather copies stay resident on the host.
4. ``close()`` frees every arena and constant region exactly once; a call that fails
   midway frees whatever it allocated for the caller, so live bytes return to what they
   were (the session's own memory stays until ``close``).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
import torch.fx
from torch.export.graph_signature import OutputKind

from ..devices import CPU, CopyKind, Device, host_first
from ..errors import ArgumentTypeError, ArgumentValueError
from ..planning.arena_execution import Slots
from ..planning.buffers import aligned_size
from ..planning.memory_plan import MemoryPlan
from .allocators import AllocatorRegistry, find_allocation
from .backends import check_backend, shared_registry
from .buffers import DeviceBuffer
from .byte_views import typed_view
from .call import Call, ExecutorError, NodeEntry, RunNode, node_entries
from .cost_model import CostModel
from .cuda import CudaUnavailableError, cuda_available, cuda_unavailable_reason, device_count
from .exec_backends import make_exec_backend
from .inputs import check_inputs, flatten_inputs, input_specs
from .routing import CopyRouter
from .run_result import RunResult
from .sim_timing import CostFn, bind_cost, copy_cost, default_cost_model, op_step_cost
from .steps import HOST_LANE, Step, Steps, steps_of
from .timeline import Timeline

__all__ = ["ExecutorError", "RunNode", "Session", "check_plan", "load", "resolve_backend"]


def check_plan(plan: Any) -> MemoryPlan:
    """``plan`` if the executor can run it, else an error that says why."""
    if not isinstance(plan, MemoryPlan):
        raise ArgumentTypeError(f"expected a MemoryPlan from workbench.plan, got {type(plan).__name__}")
    program = plan.device_graph.program
    if program.shape_only:
        raise ExecutorError(
            "this plan is of a shape-only program (captured with shape_only=True): it has no "
            "weights to run; use workbench.runtime.estimate(plan) for its modeled timeline"
        )
    for spec in plan.device_graph.output_specs:
        if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION):
            raise ExecutorError(
                f"the program writes {spec.target!r} in place ({spec.kind.name}); the executor "
                "does not write state back: return updated state as outputs instead "
                "(as the MoE decoder does with its caches)"
            )
    return plan


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
) -> "Session":
    """Allocate ``plan``'s arenas and place its constants on ``backend``; return a ``Session``.

    Args:
        plan: a ``MemoryPlan`` from ``workbench.plan`` (of a program with real weights).
        backend: ``"sim"``, ``"cuda"``, or None for ``default_backend()``.
        cost_model: the model that times ``sim`` calls (default: H200 on PCIe Gen5).
        registry: the allocators to use (default: the process's registry for ``backend``).
        validate: check on every step that it reads only its own device's memory.
        run_node: ``(node, args, kwargs) -> value`` to run compute nodes (default: call
            the node's target), e.g. to trace or to inject a failure.
    """
    check_plan(plan)
    name = resolve_backend(backend)
    model = cost_model if cost_model is not None else default_cost_model()
    if not isinstance(model, CostModel):
        raise ArgumentTypeError(f"cost_model must be a CostModel (e.g. CostModel.preset('h200')), got {type(model).__name__}")
    reg = registry if registry is not None else shared_registry(name)
    if reg.backend is not None and reg.backend != name:
        raise ArgumentValueError(f"the registry serves backend {reg.backend!r}, not {name!r}")
    return Session(plan, name, model, reg, bool(validate), run_node)


class Session:
    """A plan loaded on a backend: arenas, resident constants, streams (see module rules).

    Use ``load(...)`` to make one, ``with`` (or ``close()``) to free it.
    """

    def __init__(
        self,
        plan: MemoryPlan,
        backend: str,
        cost_model: CostModel,
        registry: AllocatorRegistry,
        validate: bool,
        run_node: Optional[RunNode],
    ) -> None:
        self.plan = plan
        self.backend = backend
        self.cost_model = cost_model
        self.registry = registry
        self.validate = validate
        self.run_node = run_node
        self.steps: Steps = steps_of(plan)
        self.entries: tuple[NodeEntry, ...] = node_entries(self.steps, plan.device_graph.graph)
        self.arena_buffers: dict[Device, DeviceBuffer] = {}
        self.constant_buffers: dict[Device, DeviceBuffer] = {}
        self.constant_layout: dict[Device, dict[str, int]] = {}  # device → constant → offset
        self._constants: dict[tuple[str, Device], torch.Tensor] = {}
        self._own_ids: set[int] = set()
        self._closed = False
        self._slot_views: dict[tuple, torch.Tensor] = {}  # arena views, reused by every call
        self._op_times: dict[str, tuple[Any, tuple[float, int, int]]] = {}  # node → (signature, cost)
        self._inputs = input_specs(plan)
        self._slots: Optional[Slots] = None
        devices = _devices_of(plan)
        _check_devices(devices, backend)
        self.exec_backend = make_exec_backend(backend, registry, cost_model, devices)
        self.router = CopyRouter(registry, self.exec_backend)
        try:
            self._allocate_arenas(devices)
            self.load_timeline: Timeline = self._place_constants()
        except BaseException:
            self.close()
            raise

    # -- loading ---------------------------------------------------------------------------
    def _allocate_arenas(self, devices: list[Device]) -> None:
        arenas = {}
        for device in devices:
            nbytes = self.plan.arena_bytes.get(device, 0)
            buffer = DeviceBuffer.on(device, nbytes, self.registry) if nbytes else None
            if buffer is not None:
                self.arena_buffers[device] = buffer
                self._own_ids.add(buffer.allocation.id)
            arenas[device] = self.exec_backend.arena(device, buffer)
        self._slots = Slots(self.plan, arenas)

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
                src = program.constant_tensor(name).detach().cpu().contiguous()
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
                step = _load_step(index, name, device)
                index += 1
                clock.before(step)
                buffer.copy_from_host(src, layout[name], stream=stream)
                clock.after(step, _load_cost(self.cost_model, step, nbytes), nbytes)
                self._constants[(name, device)] = typed_view(
                    buffer.view(layout[name], nbytes), src.dtype, tuple(src.shape)
                )
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
            raise KeyError(
                f"constant {name!r} is not resident on {Device.parse(device)}; it is resident on "
                f"{', '.join(resident) or 'no device'}"
            )
        return found

    def resident(self, name: str, device: Device) -> Optional[torch.Tensor]:
        """The resident copy of constant ``name`` on ``device``, or None."""
        return self._constants.get((name, device))

    # -- calls -----------------------------------------------------------------------------
    def run(self, *inputs: Any) -> RunResult:
        """Execute one call; the arenas and constants are reused, never re-copied."""
        self._check_open()
        flat = flatten_inputs(self.plan, inputs)
        check_inputs(self.plan, self.backend, flat, self._inputs)
        call = Call(self)
        try:
            with torch.no_grad():
                outputs, timeline = call.execute(flat)
        except BaseException:
            call.abandon()
            raise
        return RunResult(
            outputs=outputs,
            timeline=timeline,
            backend=self.backend,
            load_timeline=self.load_timeline,
            cost_model=self.cost_model if self.backend == "sim" else None,
            prefetch=call.prefetch_stats(),
            slot_writes=call.slot_writes(),
        )

    # -- per-node caches shared by calls -------------------------------------------------------
    def slot(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """The arena view of storage ``name`` shaped like ``like`` (made once, then reused)."""
        key = (name, tuple(like.shape), like.dtype, tuple(like.stride()))
        view = self._slot_views.get(key)
        if view is None:
            if self._slots is None:
                raise ExecutorError("this session is closed; load the plan again to run it")
            view = self._slots.slot(name, like)
            self._slot_views[key] = view
        return view

    def op_time(self, step: Step, node: torch.fx.Node, args: tuple, kwargs: dict, out: Any) -> tuple[float, int, int]:
        """(µs, bytes, flops) of an op step, recomputed only when its argument shapes change."""
        signature = _signature((args, kwargs))
        hit = self._op_times.get(node.name)
        if hit is not None and hit[0] == signature:
            return hit[1]
        cost = op_step_cost(self.cost_model, step, node.target, args, kwargs, out)
        self._op_times[node.name] = (signature, cost)
        return cost

    # -- lifetime --------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Free the arenas and constant regions (rule 4); calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if hasattr(self, "exec_backend"):
                self.exec_backend.synchronize()  # nothing may still be copying into what we free
        finally:
            self._constants.clear()
            self._slot_views.clear()
            self._slots = None
            for buffer in list(self.arena_buffers.values()) + list(self.constant_buffers.values()):
                if not buffer.freed:
                    buffer.free()

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


def _load_step(index: int, name: str, device: Device) -> Step:
    if device.is_host:
        return Step(index=index, name=name, op="placeholder", device=device, event="host", lane=HOST_LANE)
    return Step(
        index=index,
        name=name,
        op="placeholder",
        device=device,
        event=str(CopyKind.H2D),
        lane=(device, "copy"),
        src=CPU,
        dst=device,
        pinned=False,
    )


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
