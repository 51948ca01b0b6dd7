"""Loaded sessions: a plan's arenas and constants placed once, then called many times.

``load(plan, backend)`` allocates one arena per device and one resident constant region
per device through the backend's allocator registry, copies every constant once onto
each device it is resident on, and returns a ``Session``; ``session.run(*inputs)``
executes one call of the planned graph on those arenas and returns a ``RunResult``.

Rules:

1. Memory: every planned tensor is bound to its arena slot (``planning.bound.Slots``):
   the value an op computes is written into its slot and later ops read the slot.
   Constants are read from the resident copy on the device of the step that reads them.
2. Copy nodes are real copies through the registered allocators (CuPy copy kernels on
   ``cuda``); ``gather_h2d_copy`` is one gather of rows into the device slot;
   ``gather_h2d_reuse_copy`` one gather that takes the rows its prefetch holds from the
   prefetched device buffer and only the others from the host: its event's ``nbytes``
   is the bytes that crossed the link, and ``RunResult.prefetch`` counts its hits.
3. Caller-owned memory (``plan.unplanned``): inputs are used where the caller supplied
   them and must already be on the input's device — a host tensor where a device tensor
   is required is an error, never a silent copy; caller-owned device outputs are written
   into a fresh ``DeviceBuffer`` that the returned tensor owns.
4. Every copy and compute step is an event on the call's timeline (``steps``); the load
   copies are events on ``load_timeline``, recorded once per session.
5. Outputs never alias the session's memory (host outputs are copied out of the arena,
   device outputs own their buffer), so they outlive the session.
6. ``close()`` frees every arena and constant region exactly once; a call that fails
   midway frees whatever it allocated for the caller, so live bytes return to what they
   were (the session's own memory stays until ``close``).
7. With ``validate=True`` every step checks that it reads only memory of its own device:
   a device op only that device's memory or its resident constants, a host op only host
   memory, a copy its source device's memory. A violation is a propagation bug.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export.graph_signature import OutputKind

from .._tensors import value_of
from ..capture import InputSignatureError
from ..copy_ops import is_copy_node
from ..devices import Device
from ..planning.bound import Slots
from ..planning.buffers import aligned_size
from ..propagate import _reads_metadata_only  # the propagation rule: these ops read no data
from .allocators import AllocatorRegistry, check_backend, find_allocation, shared_registry
from .buffers import DeviceBuffer
from .cost_model import CostModel
from .exec_backends import make_exec_backend
from .run_result import PrefetchStat, RunResult
from .sim_timing import bind_cost, copy_cost, default_cost_model, op_step_cost, reuse_cost
from .steps import HOST_LANE, Step, Steps, steps_of
from .tensors import _is_cupy_array, _owned, buffer_of, clone_to, device_of, typed_view
from .timeline import Timeline
from ..errors import WorkbenchError

__all__ = ["ExecutorError", "InputError", "Session", "check_inputs", "load"]

RunNode = Callable[[torch.fx.Node, tuple, dict], Any]


class ExecutorError(WorkbenchError, RuntimeError):
    """The executor cannot run this plan, or a step broke one of its rules."""


class InputError(WorkbenchError, ValueError):
    """A caller's input is not what the plan expects (device, dtype, shape, count)."""


# -- inputs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _InputSpec:
    name: str
    device: Device  # where the caller supplies it
    planned: bool  # True: copied into its planned slot; False: the caller owns it
    val: Any  # the traced value (fake tensor), or a non-tensor


def _input_specs(plan) -> tuple[_InputSpec, ...]:
    dg = plan.graph
    placeholders = {n.name: n for n in dg.graph.nodes if n.op == "placeholder"}
    return tuple(
        _InputSpec(name, dg.node_device[name], name in plan.storage_of, value_of(placeholders[name]))
        for name in dg.program.user_inputs
    )


def _flatten(plan, inputs: tuple) -> list:
    try:
        return plan.graph.program.flatten_inputs(inputs)
    except InputSignatureError as exc:
        raise InputError(str(exc)) from None


def _staging_hint(device: Device, backend: str) -> str:
    hint = f"stage it with workbench.runtime.to_device(x, {str(device)!r}, backend={backend!r})"
    if backend == "cuda":
        hint += f", or pass a CUDA torch tensor or CuPy array on {device}"
    return hint


def check_inputs(plan, backend: str, flat: list, specs: Optional[tuple[_InputSpec, ...]] = None) -> None:
    """Check every flattened input against the plan without touching memory (rule 3)."""
    for spec, value in zip(specs if specs is not None else _input_specs(plan), flat):
        if not isinstance(spec.val, torch.Tensor):
            continue
        if not (isinstance(value, torch.Tensor) or (backend == "cuda" and _is_cupy_array(value))):
            raise InputError(f"input {spec.name!r} must be a tensor, got {type(value).__name__}")
        try:
            found = device_of(value, backend)
        except (TypeError, ValueError) as exc:
            raise InputError(f"input {spec.name!r}: {exc}") from None
        if found != spec.device:
            raise InputError(_device_message(spec, found, backend))
        dtype = value.dtype if isinstance(value, torch.Tensor) else torch.from_dlpack(value).dtype
        shape = tuple(value.shape)
        want = tuple(spec.val.shape)
        if dtype != spec.val.dtype:
            raise InputError(f"input {spec.name!r} must have dtype {spec.val.dtype}, got {dtype}")
        if len(shape) != len(want) or any(isinstance(w, int) and w != s for w, s in zip(want, shape)):
            raise InputError(f"input {spec.name!r} must have shape {tuple(str(w) for w in want)}, got {shape}")
        if spec.planned:
            nbytes = math.prod(shape) * dtype.itemsize
            room = plan.allocations[plan.storage_of[spec.name]].nbytes
            if nbytes > room:
                raise InputError(
                    f"input {spec.name!r} of shape {shape} needs {nbytes} B but its planned "
                    f"slot holds {room} B (the plan's upper bound)"
                )


def _device_message(spec: _InputSpec, found: Device, backend: str) -> str:
    if spec.device.is_host:
        return (
            f"input {spec.name!r} must be a host (cpu) tensor, but it is on {found}; "
            "copy it to the host first (workbench.runtime.to_host)"
        )
    why = (
        "it is copied from there into its planned device slot"
        if spec.planned
        else "the plan was propagated with skip_h2d_for_method_inputs, so the caller owns it on the device and no h2d copy runs"
    )
    got = "a host tensor" if found.is_host else f"a tensor on {found}"
    return f"input {spec.name!r} must be supplied on {spec.device} ({why}), but got {got}; {_staging_hint(spec.device, backend)}"


# -- the session -----------------------------------------------------------------------------


def _check_plan(plan) -> None:
    from ..planning.plan import MemoryPlan

    if not isinstance(plan, MemoryPlan):
        raise TypeError(f"expected a MemoryPlan from workbench.plan, got {type(plan).__name__}")
    program = plan.graph.program
    if program.shape_only:
        raise ExecutorError(
            "this plan is of a shape-only program (captured with shape_only=True): it has no "
            "weights to run; use workbench.runtime.estimate(plan) for its modeled timeline"
        )
    for spec in plan.graph.output_specs:
        if spec.kind in (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION):
            raise ExecutorError(
                f"the program writes {spec.target!r} in place ({spec.kind.name}); the executor "
                "does not write state back: return updated state as outputs instead "
                "(as the MoE decoder does with its caches)"
            )


def _resolve_backend(backend: Optional[str]) -> str:
    name = check_backend(backend)
    if name == "cuda":
        from .cuda import CudaUnavailableError, cuda_available, cuda_unavailable_reason

        if not cuda_available():
            raise CudaUnavailableError(f"backend='cuda' needs a CUDA GPU. {cuda_unavailable_reason()}")
    return name


def _devices_of(plan) -> list[Device]:
    names = set(plan.arena_bytes) | {d for d, n in plan.constant_bytes.items() if n}
    names |= {str(d) for d in plan.graph.node_device.values()}
    return sorted((Device.parse(d) for d in names), key=lambda d: (not d.is_host, d))


def _check_devices(devices: list[Device], backend: str) -> None:
    if backend != "cuda":
        return
    from .cuda import device_count

    count = device_count()
    missing = [str(d) for d in devices if not d.is_host and d.index >= count]
    if missing:
        raise ExecutorError(
            f"the plan uses {', '.join(missing)} but this machine has {count} GPU(s) "
            f"(valid: cuda:0..cuda:{count - 1}); place onto those, or run it on backend='sim'"
        )


def load(
    plan,
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
        validate: check on every step that it reads only its own device's memory (rule 7).
        run_node: ``(node, args, kwargs) -> value`` to run compute nodes (default: call
            the node's target), e.g. to trace or to inject a failure.
    """
    _check_plan(plan)
    name = _resolve_backend(backend)
    model = cost_model if cost_model is not None else default_cost_model()
    if not isinstance(model, CostModel):
        raise TypeError(f"cost_model must be a CostModel (e.g. CostModel.preset('h200')), got {type(model).__name__}")
    reg = registry if registry is not None else shared_registry(name)
    if reg.backend is not None and reg.backend != name:
        raise ValueError(f"the registry serves backend {reg.backend!r}, not {name!r}")
    return Session(plan, name, model, reg, bool(validate), run_node)


class Session:
    """A plan loaded on a backend: arenas, resident constants, streams (see module rules).

    Use ``load(...)`` to make one, ``with`` (or ``close()``) to free it.
    """

    def __init__(
        self,
        plan,
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
        self.arena_buffers: dict[str, DeviceBuffer] = {}
        self.constant_buffers: dict[str, DeviceBuffer] = {}
        self.constant_layout: dict[str, dict[str, int]] = {}  # device → constant → offset
        self._constants: dict[tuple[str, str], torch.Tensor] = {}
        self._own_ids: set[int] = set()
        self._closed = False
        self._entries = tuple(_Entry.of(step, node) for step, node in zip(self.steps.steps, plan.graph.graph.nodes))
        self._slot_views: dict[tuple, torch.Tensor] = {}  # arena views, reused by every call
        self._op_times: dict[str, tuple[Any, tuple[float, int, int]]] = {}  # node → (signature, cost)
        self._inputs = _input_specs(plan)
        devices = _devices_of(plan)
        _check_devices(devices, backend)
        self._exec = make_exec_backend(backend, registry, cost_model, devices)
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
            key = str(device)
            nbytes = self.plan.arena_bytes.get(key, 0)
            buffer = DeviceBuffer.on(device, nbytes, self.registry) if nbytes else None
            if buffer is not None:
                self.arena_buffers[key] = buffer
                self._own_ids.add(buffer.allocation.id)
            arenas[key] = self._exec.arena(device, buffer)
        self._slots = Slots(self.plan, arenas)

    def _residency(self) -> dict[str, list[str]]:
        """Device → constants resident there, in graph order (plus gather sources on the host)."""
        dg = self.plan.graph
        held: dict[str, dict[str, None]] = {}  # device → constants (a dict: ordered, no repeats)
        for name, devices in dg.residency.items():
            for device in devices:
                held.setdefault(str(device), {})[name] = None
        for entry in self._entries:
            if entry.step.gather and entry.node.args[0].name in dg.program.constants:
                held.setdefault("cpu", {})[entry.node.args[0].name] = None
        return {device: list(names) for device, names in held.items()}

    def _place_constants(self) -> Timeline:
        """Rule 4: one copy per (constant, resident device), recorded on the load timeline."""
        program = self.plan.graph.program
        align = self.plan.alignment
        clock = self._exec.clock()
        clock.begin()
        index = 0
        for key, names in self._residency().items():
            device = Device.parse(key)
            layout, offset = {}, 0
            sources = {}
            for name in names:
                src = program.constant_tensor(name).detach().cpu().contiguous()
                sources[name] = src
                layout[name] = offset
                offset += aligned_size(src.numel() * src.element_size(), align)
            buffer = DeviceBuffer.on(device, offset, self.registry)
            self.constant_buffers[key] = buffer
            self._own_ids.add(buffer.allocation.id)
            self.constant_layout[key] = layout
            stream = None if device.is_host else self._exec.copy_stream(device)
            for name in names:
                src = sources[name]
                nbytes = src.numel() * src.element_size()
                step = _load_step(index, name, device)
                index += 1
                clock.before(step)
                buffer.copy_from_host(src, layout[name], stream=stream)
                clock.after(step, _load_cost(self.cost_model, step, nbytes), nbytes)
                self._constants[(name, key)] = typed_view(
                    buffer.view(layout[name], nbytes), src.dtype, tuple(src.shape)
                )
        return clock.finish()

    @property
    def constant_region_bytes(self) -> dict[str, int]:
        """Bytes of the resident constant region per device (constants plus alignment)."""
        return {d: b.nbytes for d, b in self.constant_buffers.items()}

    def constant(self, name: str, device: str) -> torch.Tensor:
        """The resident copy of constant placeholder ``name`` on ``device``."""
        self._check_open()
        key = str(Device.parse(device))
        try:
            return self._constants[(name, key)]
        except KeyError:
            resident = sorted(d for n, d in self._constants if n == name)
            raise KeyError(
                f"constant {name!r} is not resident on {key}; it is resident on {', '.join(resident) or 'no device'}"
            ) from None

    # -- calls -----------------------------------------------------------------------------
    def run(self, *inputs: Any) -> RunResult:
        """Execute one call; the arenas and constants are reused, never re-copied."""
        self._check_open()
        flat = _flatten(self.plan, inputs)
        check_inputs(self.plan, self.backend, flat, self._inputs)
        call = _Call(self)
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
        )

    # -- per-node caches shared by calls -------------------------------------------------------
    def _slot(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """The arena view of storage ``name`` shaped like ``like`` (made once, then reused)."""
        key = (name, tuple(like.shape), like.dtype, tuple(like.stride()))
        view = self._slot_views.get(key)
        if view is None:
            view = self._slots.slot(name, like)
            self._slot_views[key] = view
        return view

    def _op_time(self, step: Step, node: torch.fx.Node, args: tuple, kwargs: dict, out: Any) -> tuple[float, int, int]:
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
        """Free the arenas and constant regions (rule 6); calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            if hasattr(self, "_exec"):
                self._exec.synchronize()  # nothing may still be copying into what we free
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
        return Step(index, name, "placeholder", str(device), "host", HOST_LANE, (), ())
    return Step(index, name, "placeholder", str(device), "h2d", (str(device), "copy"), (), (), "cpu", str(device), False)


def _load_cost(model: CostModel, step: Step, nbytes: int):
    """A constant placed on the host is bound like a planned host input; else an h2d copy."""
    cost = bind_cost if step.event == "host" else copy_cost
    return lambda: cost(model, step, nbytes)


@dataclass(frozen=True, eq=False)
class _Entry:
    """What a call needs to know about one node, worked out once per session."""

    step: Step
    node: torch.fx.Node
    device: Optional[Device]  # where the node's value lives
    src: Optional[Device]  # copies: read from
    dst: Optional[Device]  # copies: written to
    lane: Optional[Device]  # the device whose stream the event runs on
    is_copy: bool
    is_getitem: bool
    metadata_only: bool  # reads shapes only (propagation lets it read any device)

    @classmethod
    def of(cls, step: Step, node: torch.fx.Node) -> "_Entry":
        call = node.op == "call_function"
        return cls(
            step=step,
            node=node,
            device=Device.parse(step.device) if step.device else None,
            src=Device.parse(step.src) if step.src else None,
            dst=Device.parse(step.dst) if step.dst else None,
            lane=Device.parse(step.lane[0]) if step.lane else None,
            is_copy=is_copy_node(node),
            is_getitem=call and node.target is operator.getitem,
            metadata_only=call and _reads_metadata_only(node),
        )


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


# -- one call ---------------------------------------------------------------------------------


class _Call:
    """The state of one ``Session.run``: values, caller-owned buffers, the clock."""

    def __init__(self, session: Session) -> None:
        self.s = session
        self.plan = session.plan
        self.exec = session._exec
        self.constants = self.plan.graph.program.constants
        self.env: dict[str, Any] = {}
        self.owned: list[DeviceBuffer] = []
        self.clock = self.exec.clock()
        self.model = session.cost_model
        self._reuses: list[tuple[str, int, int, Callable[[], int]]] = []  # (node, rows, row bytes, hits)

    def execute(self, flat: list) -> tuple[Any, Timeline]:
        self.clock.begin()
        user = iter(flat)
        for entry in self.s._entries:
            node = entry.node
            if node.op == "placeholder":
                if node.name not in self.constants:
                    self._bind_input(entry, next(user))
            elif entry.is_copy:
                self._copy(entry)
            elif node.op == "call_function":
                self._compute(entry)
            elif node.op == "output":
                outs = self._collect(node)
                timeline = self.clock.finish()
                result = self._finalize(outs)
                self.owned.clear()  # the returned tensors own these buffers now
                return result, timeline
        raise ExecutorError("the graph has no output node")

    def prefetch_stats(self) -> tuple[PrefetchStat, ...]:
        """What each reuse copy of the finished call did (hits are read only now)."""
        return tuple(PrefetchStat(name, rows, hits(), row_bytes) for name, rows, row_bytes, hits in self._reuses)

    def abandon(self) -> None:
        """Rule 6: free what this call allocated for the caller."""
        try:
            self.exec.synchronize()
        finally:
            self.env.clear()
            for buffer in self.owned:
                if not buffer.freed:
                    buffer.free()
            self.owned.clear()

    # -- values --------------------------------------------------------------------------
    def _value(self, node: torch.fx.Node, device: str) -> Any:
        if node.name in self.constants:
            try:
                return self.s._constants[(node.name, device)]
            except KeyError:
                raise ExecutorError(
                    f"constant {node.name!r} is read on {device} but is not resident there"
                ) from None
        return self.env[node.name]

    def _args(self, node: torch.fx.Node, device: str) -> tuple[tuple, dict]:
        read = lambda n: self._value(n, device)  # noqa: E731
        return torch.fx.node.map_arg(node.args, read), torch.fx.node.map_arg(node.kwargs, read)

    def _check_reads(self, node: torch.fx.Node, values: Any, expected: Device, what: str) -> None:
        """Rule 7."""
        for i, t in enumerate(pytree.tree_flatten(values)[0]):
            if not isinstance(t, torch.Tensor) or t.numel() == 0:
                continue
            found = self.exec.device_of(t)
            if found != expected:
                raise ExecutorError(
                    f"{node.name} ({node.target}) is a {what} on {expected} but its tensor argument #{i} "
                    f"lies in {found} memory; propagation should have inserted a copy"
                )

    # -- steps ---------------------------------------------------------------------------
    def _bind_input(self, entry: "_Entry", raw: Any) -> None:
        step, node = entry.step, entry.node
        value = self.exec.as_tensor(raw)
        if step.event is None:  # caller-owned (rule 3)
            self.env[node.name] = value
            return
        slot = self.s._slot(node.name, value)
        nbytes = value.numel() * value.element_size()
        self.clock.before(step)
        if step.event == "host":
            slot.copy_(value)
        else:
            self._transfer(entry, slot, value)
        self.clock.after(step, lambda: bind_cost(self.model, step, nbytes), nbytes)
        self.env[node.name] = slot

    def _compute(self, entry: "_Entry") -> None:
        step, node, device = entry.step, entry.node, entry.device
        args, kwargs = self._args(node, step.device)
        if entry.is_getitem:  # its producer bound it already
            self.env[node.name] = node.target(*args, **kwargs)
            return
        if step.event is not None and not device.is_host:
            kwargs = self.exec.patch_kwargs(kwargs, device)
        if entry.metadata_only and "device" in kwargs:  # it checks the value where it lies
            first = next((t for t in pytree.tree_flatten(args)[0] if isinstance(t, torch.Tensor)), None)
            if first is not None:
                kwargs = dict(kwargs, device=first.device)
        if self.s.validate and not entry.metadata_only:
            self._check_reads(node, (args, kwargs), device, "host op" if device.is_host else "device op")
        if step.event is not None:
            self.clock.before(step)
        with self.exec.compute(device):
            if self.s.run_node is not None:
                result = self.s.run_node(node, args, kwargs)
            else:
                result = node.target(*args, **kwargs)
            if isinstance(result, (tuple, list)):
                result = self._bind_elements(node, device, result, args, kwargs)
            else:
                result = self._bind(node, device, result, args, kwargs)
        if step.event is not None:
            session = self.s
            self.clock.after(step, lambda: session._op_time(step, node, args, kwargs, result), 0)
        self.env[node.name] = result

    def _bind_elements(self, node: torch.fx.Node, device: Device, result: Any, args: tuple, kwargs: dict) -> Any:
        """A multi-output op binds each element its ``getitem`` users read, inside its own
        step, so that the step's end event covers the writes into the slots."""
        bound = list(result)
        for user in node.users:
            if user.target is operator.getitem and isinstance(user.args[1], int):
                i = user.args[1]
                bound[i] = self._bind(user, device, result[i], args, kwargs)
        return type(result)(bound) if isinstance(result, tuple) else bound

    def _bind(self, node: torch.fx.Node, device: Device, result: Any, args: tuple, kwargs: dict) -> Any:
        """Rule 1 (planned: into the slot) and rule 3 (a device output the caller owns)."""
        if not isinstance(result, torch.Tensor):
            return result
        if node.name in self.plan.allocations:
            slot = self.s._slot(node.name, result)
            slot.copy_(result)
            return slot
        if device.is_host or node.name in self.plan.storage_of or _aliases_an_argument(result, (args, kwargs)):
            return result
        return self._caller_owned(result, device)

    def _caller_owned(self, value: torch.Tensor, device: Device) -> torch.Tensor:
        buffer = DeviceBuffer.on(device, value.numel() * value.element_size(), self.s.registry)
        self.owned.append(buffer)
        out = _owned(buffer, value.dtype, tuple(value.shape))
        if value.numel():
            out.copy_(value)
        return out

    def _copy(self, entry: "_Entry") -> None:
        step, node = entry.step, entry.node
        x = self._value(node.args[0], step.src)
        if step.gather:
            index = self._value(node.args[1], step.dst)
            shape = tuple(index.shape) + tuple(x.shape[1:])
        else:
            index = None
            shape = tuple(x.shape)
        if self.s.validate:
            self._check_reads(node, x, entry.src, "copy")
        dst = self._destination(node, entry.dst, x.dtype, shape)
        nbytes = dst.numel() * dst.element_size()
        if step.reuse:
            self._reuse_copy(entry, dst, x, index)
            return
        self.clock.before(step)
        if step.gather:
            if nbytes:
                self.exec.gather(dst, x, index, self.exec.copy_stream(entry.lane))
        else:
            self._transfer(entry, dst, x)
        self.clock.after(step, lambda: copy_cost(self.model, step, nbytes), nbytes)
        self.env[node.name] = dst

    def _reuse_copy(self, entry: "_Entry", dst: torch.Tensor, x: torch.Tensor, index: torch.Tensor) -> None:
        """Rule 2 for ``gather_h2d_reuse_copy(x, index, cached, cached_index, src, dst)``."""
        step, node = entry.step, entry.node
        cached = self._value(node.args[2], step.dst)
        cached_index = self._value(node.args[3], step.dst)
        if self.s.validate:
            self._check_reads(node, cached, entry.dst, "reuse copy reading its prefetched rows")
        rows = index.numel()
        row_bytes = (dst.numel() * dst.element_size()) // rows if rows else 0
        self.clock.before(step)
        if rows and row_bytes:
            hits = self.exec.gather_reuse(dst, x, index, cached, cached_index, self.exec.copy_stream(entry.lane))
        else:
            hits = lambda: 0  # noqa: E731
        model = self.model
        link = lambda: (rows - hits()) * row_bytes  # noqa: E731  (cuda: known once the call finished)
        self.clock.after(step, lambda: reuse_cost(model, step, link(), hits() * row_bytes), link)
        self._reuses.append((node.name, rows, row_bytes, hits))
        self.env[node.name] = dst

    def _destination(self, node: torch.fx.Node, device: Device, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
        if node.name in self.plan.allocations:
            return self.s._slot(node.name, torch.empty(shape, dtype=dtype, device="meta"))
        if device.is_host:
            return self.exec.new_host(shape, dtype)
        buffer = DeviceBuffer.on(device, math.prod(shape) * dtype.itemsize, self.s.registry)
        self.owned.append(buffer)
        return _owned(buffer, dtype, shape)

    def _locate(self, t: torch.Tensor):
        """(allocator, allocation, offset) of a contiguous tensor in workbench device memory."""
        if not t.is_contiguous():
            return None
        hit = find_allocation(t.data_ptr())
        if hit is None:
            return None
        allocation, offset = hit
        try:
            allocator = self.s.registry.get(allocation.device.type)
        except LookupError:
            return None
        if allocator.kind != allocation.kind or offset + t.numel() * t.element_size() > allocation.nbytes:
            return None
        return allocator, allocation, offset

    def _transfer(self, entry: "_Entry", dst: torch.Tensor, src: torch.Tensor) -> None:
        """Rule 2: h2d, d2h or d2d through the allocators; torch copies what they cannot take."""
        if src.numel() == 0:
            return
        stream = self.exec.copy_stream(entry.lane)
        kind = entry.step.event
        if kind == "h2d":
            loc = self._locate(dst)
            if loc is not None:
                allocator, allocation, offset = loc
                allocator.copy_host_to_device(allocation, offset, src.contiguous(), stream)
                return
        elif kind == "d2h":
            loc = self._locate(src)
            if loc is not None and dst.is_contiguous():
                allocator, allocation, offset = loc
                allocator.copy_device_to_host(dst, allocation, offset, stream)
                return
        else:
            to, frm = self._locate(dst), self._locate(src)
            if to is not None and frm is not None and to[0].kind == frm[1].kind:
                to[0].copy_device_to_device(to[1], to[2], frm[1], frm[2], src.numel() * src.element_size(), stream)
                return
        self.exec.torch_copy(dst, src, stream)

    # -- outputs -------------------------------------------------------------------------
    def _collect(self, node: torch.fx.Node) -> list:
        program = self.plan.graph.program
        outs = []
        for arg, spec in zip(node.args[0], self.plan.graph.output_specs):
            if spec.kind != OutputKind.USER_OUTPUT:
                continue
            if isinstance(arg, torch.fx.Node):
                if arg.name in self.constants:
                    outs.append(program.constant_tensor(arg.name).detach().clone())
                else:
                    outs.append(self.env[arg.name])
            else:
                outs.append(arg)
        return outs

    def _finalize(self, outs: list) -> Any:
        """Rule 5: copy out of the session's memory what lies in it."""
        done = []
        for value in outs:
            if isinstance(value, torch.Tensor) and self.s.in_session_memory(value):
                device = self.exec.device_of(value)
                if device.is_host:
                    value = value.clone()
                else:
                    value = clone_to(value, device, self.s.backend, registry=self.s.registry)
                    self.owned.append(buffer_of(value))
            done.append(value)
        return pytree.tree_unflatten(done, self.plan.graph.program.exported.call_spec.out_spec)


def _aliases_an_argument(result: torch.Tensor, args: Any) -> bool:
    """True when ``result`` shares storage with a tensor argument (a view or in-place result)."""
    ptr = result.untyped_storage().data_ptr()
    for t in pytree.tree_flatten(args)[0]:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr:
            return True
    return False
