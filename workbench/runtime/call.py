"""One call of a loaded plan: the interpreter that walks the steps in issue order.

A ``Call`` holds the state of one ``Session.run``: the values of the call, the buffers
it allocated for the caller, and the clock. The session (its arenas, resident constants,
executor backend) is shared by every call and only read here.

Rules:
1. Memory: every planned value is written into its arena slot and later steps read the
   slot; constants are read from the resident copy on the device of the step reading them
   (an op that reads only metadata reads a constant wherever it is, even nowhere resident).
2. Copy steps move bytes as their ``CopyRecord`` says (never by the positions of the
   copy node's arguments), through the handler its copy variant declares for the
   session's backend (``copy_variants``): the call reads the source (and, for a copy of
   rows, the index) and finds the destination; the handler moves the bytes and times the
   event. A handler may keep figures in ``stats(role)`` (``prefetch_stats`` and
   ``counted_gather_stats`` read those of the reuse and counted variants).
3. Caller-owned memory: inputs are used as supplied; a caller-owned device output is
   written into a fresh ``DeviceBuffer`` that the returned tensor owns — or, in a session
   with pooled outputs, into a buffer of its ``OutputPool`` (``output_pool`` rules say
   how long it stays the caller's).
4. Outputs never alias the session's arenas or constants: host outputs are copied out of
   the arena, device outputs own their buffer (or lie in the output pool), so fresh
   outputs outlive the session.
5. A call that fails midway frees what it allocated for the caller (``abandon``); the
   exception keeps its type and gains a note naming the node, its op and its device.
6. With ``validate``, every step checks it reads only memory of its own device.
7. A planned value (or a caller-owned device output) is written straight into its slot
   (or its buffer) by the op's ``out=`` variant when its step says ``slot_write ==
   "direct"``; otherwise the op computes into fresh memory and the result is copied in,
   and the clock shows that copy as its own ``slot_copy`` event.
8. In-place ops that change only autograd metadata (``detach_``) leave an arena-bound
   value as it is: a call runs without autograd, so there is nothing to detach, and
   torch refuses to detach a view (every slot is a view of its arena) in place.
9. State (``state``): after the last step, each buffer the program updates is written
   into its resident copies (timed write-back steps); once the call has finished, into
   the program's own tensor; an input the program writes, into the caller's tensor.
10. A copy-stream op (``Step.stream_bytes``) runs in its device's copy-stream context,
    after its deps (``steps`` rule 10). A row mask's True entries are counted when its
    step has run, on the same stream, and read once the call has finished; a step with a
    ``share`` is charged that share of its op (``sim_timing`` rule 9).
11. Graph replay (``graph_replay``, on ``cuda`` with ``launch="graph"``): at the first
    step of each graph segment the session's ``CudaGraphReplay`` runs the segment per op
    (warm-up), captures it, or replays it; a caller's device input is first copied into a
    fixed buffer, so a captured graph reads the same address every call.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Protocol

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.export.graph_signature import OutputKind

from ..devices import Device
from ..errors import WorkbenchError
from ..graph_values import op_name, output_values, reads_metadata_only, value_of
from ..copy_variants import copy_variant
from ..planning.memory_plan import MemoryPlan
from ..propagate import CopyRecord, CopyRole
from .allocators import AllocatorRegistry
from .device_buffers import DeviceBuffer
from ..machine.cost_model import CostModel, UncountedOps
from .out_variants import out_variant
from .output_pool import OutputPool
from .copy_router import CopyRouter
from .run_result import CountedGatherStat, PrefetchStat, RowMaskStat, SlotWrites
from .sim_timing import bind_cost, copy_cost, memory_copy_cost, scaled
from ..device_graph import Mutation
from .state import StateError, StateWrite
from .steps import Step, Steps
from .tensors import buffer_of, clone_to, owned_tensor
from .timeline import Timeline

__all__ = ["Call", "ExecutorError", "NodeEntry", "RunNode", "SessionState", "node_entries"]

#: In-place ops that change only autograd metadata: without autograd they change nothing (rule 8).
METADATA_INPLACE_OPS = frozenset({torch.ops.aten.detach_.default})

#: ``(node, args, kwargs) -> value``: how a compute node is run (default: call its target).
RunNode = Callable[[torch.fx.Node, tuple, dict], Any]


class ExecutorError(WorkbenchError, RuntimeError):
    """The executor cannot run this plan, or a step broke one of its rules."""


@dataclass(frozen=True, eq=False)
class NodeEntry:
    """What a call needs to know about one node, worked out once per session."""

    step: Step
    node: torch.fx.Node
    copy: Optional[CopyRecord]  # copy nodes: their record
    lane_device: Optional[Device]  # the device whose stream the event runs on
    is_getitem: bool
    metadata_only: bool  # reads shapes only (propagation lets it read any device)


def node_entries(steps: Steps, graph: torch.fx.Graph) -> tuple[NodeEntry, ...]:
    """One ``NodeEntry`` per node of ``graph`` (whose steps ``steps`` are, in order)."""
    entries = []
    for step, node in zip(steps.steps, graph.nodes):
        call = node.op == "call_function"
        entries.append(
            NodeEntry(
                step=step,
                node=node,
                copy=step.copy,
                lane_device=step.lane[0] if step.lane else None,
                is_getitem=call and node.target is operator.getitem,
                metadata_only=reads_metadata_only(node),
            )
        )
    return tuple(entries)


class SessionState(Protocol):
    """What a call reads from its session (``Session`` provides it)."""

    plan: MemoryPlan
    backend: str
    registry: AllocatorRegistry
    cost_model: CostModel
    validate: bool
    run_node: Optional[RunNode]
    exec_backend: Any
    entries: tuple[NodeEntry, ...]
    router: CopyRouter
    mutations: tuple[Mutation, ...]
    state_writes: tuple[StateWrite, ...]
    output_pool: Optional[OutputPool]  # rule 3: None when every output gets a fresh buffer

    def slot(self, name: str, like: torch.Tensor) -> torch.Tensor: ...

    def resident(self, name: str, device: Device) -> Optional[torch.Tensor]: ...

    def op_time(
        self, step: Step, node: torch.fx.Node, args: tuple, kwargs: dict, out: Any, uncounted: Optional[UncountedOps] = None
    ) -> tuple[float, int, int]: ...

    def in_session_memory(self, t: torch.Tensor) -> bool: ...


class Call:
    """The state of one ``Session.run``: values, caller-owned buffers, the clock."""

    def __init__(self, session: SessionState, number: int = 0) -> None:
        self.s = session
        self.number = number  # the session's count of calls before this one (output pool rule 1)
        self.plan = session.plan
        self.exec = session.exec_backend
        self.constants = self.plan.device_graph.program.constants
        self.env: dict[str, Any] = {}
        self.owned: list[DeviceBuffer] = []
        self.clock = self.exec.clock()
        self.model = session.cost_model
        self._stats: dict[str, list[Any]] = {}  # copy variant role → what its handler kept (rule 2)
        self._masks: dict[str, tuple[int, Callable[[], int]]] = {}  # row mask → (rows, True rows) (rule 10)
        self._direct = 0  # values written straight into their slots (rule 7)
        self._copied: list[int] = []  # bytes of each op's slot copy (rule 7)
        self.inputs: list = []  # the caller's flattened inputs
        self._user: Iterator[Any] = iter(())  # the caller's inputs not yet bound
        self.uncounted = UncountedOps()  # ops whose FLOPs the cost model could not count (sim)

    def execute(self, flat: list) -> tuple[Any, Timeline]:
        """Run every step with the flattened user inputs; the outputs and the timeline."""
        self.clock.begin()
        self.inputs = flat
        with self.exec.calling():
            return self._execute(iter(flat))

    def _execute(self, user: Iterator[Any]) -> tuple[Any, Timeline]:
        self._user = user
        entries = self.s.entries
        graphs = getattr(self.s, "graph_replay", None)  # rule 11
        mode = graphs.mode(self.number) if graphs is not None else "eager"
        i = 0
        while i < len(entries):
            run = graphs.runs.get(i) if graphs is not None and mode != "eager" else None
            if run is not None and graphs is not None:
                if mode == "replay":
                    graphs.replay(self, run)
                else:
                    graphs.capture(self, run, self._walk)
                i = run.stop
                continue
            node = entries[i].node
            if node.op == "output":
                try:
                    outs = self._collect(node)
                    timeline = self.clock.finish()
                    self.uncounted.warn("run", stacklevel=4)
                    result = self._finalize(outs)
                except Exception as exc:  # rule 5
                    _add_note(exc, f"workbench: while collecting the outputs (node {node.name!r})")
                    raise
                self.owned.clear()  # the returned tensors own these buffers now
                return result, timeline
            self._walk(i, i + 1)
            i += 1
        raise ExecutorError("the graph has no output node")

    def _walk(self, start: int, stop: int) -> None:
        """Run the steps of entries ``start .. stop - 1`` one by one."""
        for entry in self.s.entries[start:stop]:
            node = entry.node
            try:
                if node.op == "placeholder":
                    if node.name not in self.constants:
                        self._bind_input(entry, next(self._user))
                elif entry.copy is not None:
                    self._copy(entry, entry.copy)
                elif node.op == "call_function":
                    self._compute(entry)
            except Exception as exc:  # rule 5: keep the type, say where it happened
                _add_note(
                    exc,
                    f"workbench: while running node {node.name!r} ({op_name(node)}) on "
                    f"{entry.step.device or 'the host'}, step {entry.step.index} of the planned graph"
                    + _issued_at(node)
                )
                raise

    # -- what graph replay reads and restores (rule 11) ------------------------------------------
    def mask_names(self) -> list[str]:
        return list(self._masks)

    def mask_items(self) -> list[tuple[str, Any]]:
        return list(self._masks.items())

    def restore_masks(self, masks: dict[str, Any]) -> None:
        """Row masks a replayed segment counts: the capture's counts, which the replay refreshes."""
        for name, (rows, count) in masks.items():
            self._masks[name] = (rows, functools.cache(count.__wrapped__) if hasattr(count, "__wrapped__") else count)

    def slot_writes(self) -> SlotWrites:
        """Rule 7's count for the finished call."""
        return SlotWrites(direct=self._direct, copied=len(self._copied), copied_bytes=sum(self._copied))

    def row_mask_stats(self) -> tuple[RowMaskStat, ...]:
        """What each row mask of the finished call selected (rule 10)."""
        return tuple(RowMaskStat(name, rows, true()) for name, (rows, true) in self._masks.items())

    def prefetch_stats(self) -> tuple[PrefetchStat, ...]:
        """What each reuse copy of the finished call did (hits are read only now)."""
        return tuple(PrefetchStat(name, rows, hits(), row_bytes) for name, rows, row_bytes, hits in self.stats(CopyRole.REUSE))

    def counted_gather_stats(self) -> tuple[CountedGatherStat, ...]:
        """What each counted copy of the finished call moved (counts are read only now)."""
        return tuple(
            CountedGatherStat(name, slots, moved(), row_bytes) for name, slots, row_bytes, moved in self.stats(CopyRole.COUNTED)
        )

    # -- what a copy variant's handler uses (rule 2) -----------------------------------------
    def stats(self, role: str) -> list[Any]:
        """The figures the handlers of copy variant ``role`` kept in this call."""
        return self._stats.setdefault(str(role), [])

    @property
    def validate(self) -> bool:
        """Rule 6 is on."""
        return self.s.validate

    @property
    def router(self) -> CopyRouter:
        """How whole values cross between devices."""
        return self.s.router

    def value(self, name: str, device: Device) -> Any:
        """The value of node ``name`` as read on ``device`` (rule 1)."""
        return self._value(name, device)

    def check_reads(self, node: torch.fx.Node, values: Any, expected: Device, what: str) -> None:
        """Rule 6 for ``values`` a step reads."""
        self._check_reads(node, values, expected, what)

    def abandon(self) -> None:
        """Rule 5: free what this call allocated for the caller."""
        try:
            self.exec.synchronize()
        finally:
            self.env.clear()
            for buffer in self.owned:
                if not buffer.freed:
                    buffer.free()
            self.owned.clear()

    # -- values --------------------------------------------------------------------------
    def _value(self, name: str, device: Device) -> Any:
        if name in self.constants:
            value = self.s.resident(name, device)
            if value is None:
                raise ExecutorError(f"constant {name!r} is read on {device} but is not resident there")
            return value
        return self.env[name]

    def _args(self, node: torch.fx.Node, device: Device, metadata_only: bool = False) -> tuple[Any, Any]:
        read = (lambda n: self._metadata_value(n.name, device)) if metadata_only else (lambda n: self._value(n.name, device))
        return torch.fx.node.map_arg(node.args, read), torch.fx.node.map_arg(node.kwargs, read)

    def _metadata_value(self, name: str, device: Device) -> Any:
        """Rule 1 for an op that reads only metadata: a constant is resident nowhere for it
        (propagation rule 7), so it reads the resident copy on its device if there is one,
        else the program's own tensor (same shape and dtype)."""
        if name in self.constants:
            value = self.s.resident(name, device)
            return value if value is not None else self.plan.device_graph.program.constant_tensor(name)
        return self.env[name]

    def _check_reads(self, node: torch.fx.Node, values: Any, expected: Device, what: str) -> None:
        """Rule 6."""
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
    def _bind_input(self, entry: NodeEntry, raw: Any) -> None:
        step, node = entry.step, entry.node
        value = self.exec.as_tensor(raw)
        if step.event is None:  # caller-owned (rule 3)
            if getattr(self.s, "graph_replay", None) is not None and isinstance(value, torch.Tensor) and value.is_cuda:
                value = self._fixed_input(node.name, value)  # rule 11
            self.env[node.name] = value
            return
        slot = self.s.slot(node.name, value)
        nbytes = value.numel() * value.element_size()
        self.clock.before(step)
        if step.event == "host":
            slot.copy_(value)
        else:
            self.s.router.transfer(step.event, slot, value, self.exec.copy_stream(entry.lane_device))
        self.clock.after(step, lambda: bind_cost(self.model, step, nbytes), nbytes)
        self.env[node.name] = slot

    def _fixed_input(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """Rule 11: a caller's device input copied into the session's buffer for it (the
        output pool's first set, under the input's own name)."""
        device = self.exec.device_of(value)
        fixed = self._caller_tensor(f"input {name}", device, value.dtype, tuple(value.shape), number=0)
        if fixed.data_ptr() != value.data_ptr() and value.numel():
            fixed.copy_(value)
        return fixed

    def _compute(self, entry: NodeEntry) -> None:
        step, node, device = entry.step, entry.node, entry.step.device
        assert device is not None  # every call_function node has a device
        args, kwargs = self._args(node, device, entry.metadata_only)
        if entry.is_getitem:  # its producer bound it already
            self.env[node.name] = node.target(*args, **kwargs)  # type: ignore[operator]
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
        on_copy_stream = step.stream_bytes is not None  # rule 10
        with self.exec.copy_stream_context(device) if on_copy_stream else self.exec.compute(device):
            if node.target in METADATA_INPLACE_OPS:  # rule 8
                result = args[0]
            elif step.slot_write == "direct" and self.s.run_node is None:  # rule 7
                variant = out_variant(node.target)
                assert variant is not None  # steps chose "direct" because it has one
                outs = self._direct_destinations(node, device)
                variant(args, kwargs, outs)
                result = outs[0] if variant.results == 1 else tuple(outs)
                self._direct += 1
            else:
                if self.s.run_node is not None:
                    result = self.s.run_node(node, args, kwargs)
                else:
                    result = node.target(*args, **kwargs)  # type: ignore[operator]
                copied = self._slot_copy_bytes(node, device, result, args, kwargs)
                if copied and step.event is not None:
                    self.clock.split(step, copied)
                    self._copied.append(copied)
                if isinstance(result, (tuple, list)):
                    result = self._bind_elements(node, device, result, args, kwargs)
                else:
                    result = self._bind(node, device, result, args, kwargs)
            if step.row_mask:
                self._count_mask(node.name, result)
        if step.event is not None:
            self.clock.after(step, self._cost(step, node, args, kwargs, result), step.stream_bytes or 0)
        self.env[node.name] = result

    def _cost(self, step: Step, node: torch.fx.Node, args: tuple, kwargs: dict, result: Any) -> Callable[[], tuple[float, int, int]]:
        """What a compute, host or copy-stream step costs (rule 10)."""
        model, session, uncounted = self.model, self.s, self.uncounted
        if step.stream_bytes is not None:
            moved = step.stream_bytes
            return lambda: memory_copy_cost(model, step, moved)
        share = step.share
        if share is None:
            return lambda: session.op_time(step, node, args, kwargs, result, uncounted)
        rows, true = self._masks[share.mask]  # its mask ran before it (steps rule 11)
        return lambda: scaled(session.op_time(step, node, args, kwargs, result, uncounted), share.share(rows, true()))

    def _count_mask(self, name: str, mask: Any) -> None:
        """Rule 10: the mask's True entries, counted where it was written (read later); a
        bool tensor (steps rule 11)."""
        count = mask.reshape(-1).sum()  # on the device, on the stream that wrote the mask
        self._masks[name] = (mask.numel(), functools.cache(lambda: int(count)))  # read once, after the call

    def _direct_destinations(self, node: torch.fx.Node, device: Device) -> list[torch.Tensor]:
        """Where an ``out=`` op writes, one tensor per result: the planned slots (of the
        value, or of its ``getitem`` users for a multi-output op), or a fresh buffer the
        caller owns."""
        if isinstance(value_of(node), (tuple, list)):
            slots = {u.args[1]: self.s.slot(u.name, value_of(u)) for u in node.users if u.target is operator.getitem}
            return [slots[i] for i in range(len(slots))]
        like = value_of(node)
        if node.name in self.plan.allocations:
            return [self.s.slot(node.name, like)]
        return [self._caller_tensor(node.name, device, like.dtype, tuple(like.shape))]

    def _caller_tensor(self, name: str, device: Device, dtype: torch.dtype, shape: tuple, number: Optional[int] = None) -> torch.Tensor:
        """Rule 3: device memory for a caller-owned value ``name``: from the session's output
        pool (its set for call ``number``, default this call), else a fresh buffer this
        call frees if it fails."""
        pool = self.s.output_pool
        if pool is not None:
            return pool.tensor(self.number if number is None else number, name, device, dtype, tuple(int(d) for d in shape))
        buffer = DeviceBuffer.on(device, math.prod(shape) * dtype.itemsize, self.s.registry)
        self.owned.append(buffer)
        return owned_tensor(buffer, dtype, shape)

    def _slot_copy_bytes(self, node: torch.fx.Node, device: Device, result: Any, args: tuple, kwargs: dict) -> int:
        """Bytes that binding ``result`` will copy into slots or caller-owned buffers (rule 7)."""
        if isinstance(result, (tuple, list)):
            return sum(
                self.plan.allocations[u.name].nbytes
                for u in node.users
                if u.target is operator.getitem and u.name in self.plan.allocations
            )
        if not isinstance(result, torch.Tensor):
            return 0
        if node.name in self.plan.allocations:
            return self.plan.allocations[node.name].nbytes
        if device.is_host or node.name in self.plan.storage_of or _aliases_an_argument(result, (args, kwargs)):
            return 0
        return result.numel() * result.element_size()

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
            slot = self.s.slot(node.name, result)
            slot.copy_(result)
            return slot
        if device.is_host or node.name in self.plan.storage_of or _aliases_an_argument(result, (args, kwargs)):
            return result
        return self._caller_owned(node.name, result, device)

    def _caller_owned(self, name: str, value: torch.Tensor, device: Device) -> torch.Tensor:
        out = self._caller_tensor(name, device, value.dtype, tuple(value.shape))
        if value.numel():
            out.copy_(value)
        return out

    def _copy(self, entry: NodeEntry, record: CopyRecord) -> None:
        """Rule 2."""
        node = entry.node
        x = self._value(record.value, record.src)
        if record.index is not None:
            index = self._value(record.index, record.dst)
            shape = tuple(index.shape) + tuple(x.shape[1:])
        else:
            index = None
            shape = tuple(x.shape)
        if self.s.validate:
            self._check_reads(node, x, record.src, "copy")
        dst = self._destination(node, record.dst, x.dtype, shape)
        copy_variant(record.role).handler(self.exec.name)(self, entry, record, dst, x, index)
        self.env[node.name] = dst

    def _destination(self, node: torch.fx.Node, device: Device, dtype: torch.dtype, shape: tuple) -> torch.Tensor:
        if node.name in self.plan.allocations:
            return self.s.slot(node.name, torch.empty(shape, dtype=dtype, device="meta"))
        if device.is_host:
            return self.exec.new_host(shape, dtype)
        return self._caller_tensor(node.name, device, dtype, shape)

    # -- outputs -------------------------------------------------------------------------
    def _collect(self, node: torch.fx.Node) -> list:
        program = self.plan.device_graph.program
        outs = []
        for arg, spec in zip(output_values(node), self.plan.device_graph.output_specs):
            if spec.kind != OutputKind.USER_OUTPUT:
                continue
            if isinstance(arg, torch.fx.Node):
                if arg.name in self.constants:
                    outs.append(program.constant_tensor(arg.name).detach().clone())
                else:
                    outs.append(self.env[arg.name])
            else:
                outs.append(arg)
        self._write_state()
        return outs

    def _new_value(self, mutation: Mutation | StateWrite) -> torch.Tensor:
        """The value a mutation leaves at the end of the call."""
        if mutation.value in self.constants:
            return self.plan.device_graph.program.constant_tensor(mutation.value)
        return self.env[mutation.value]

    def _write_state(self) -> None:
        """Rule 9: the new value of each buffer into its resident copy on every device."""
        for write in self.s.state_writes:
            value = self._new_value(write)
            resident = self.s.resident(write.buffer, write.device)
            if resident is None or tuple(resident.shape) != tuple(value.shape) or resident.dtype != value.dtype:
                raise StateError(
                    f"buffer {write.buffer!r} cannot take its new value {write.value!r} on {write.device}: "
                    f"{'it is not resident there' if resident is None else 'shape or dtype differ'}"
                )
            step, nbytes = write.step, value.numel() * value.element_size()
            self.clock.before(step)
            if write.device.is_host:
                resident.copy_(value)
                cost = lambda step=step, nbytes=nbytes: bind_cost(self.model, step, nbytes)  # noqa: E731
            else:
                self.s.router.transfer("h2d", resident, value, self.exec.copy_stream(write.device))
                cost = lambda step=step, nbytes=nbytes: copy_cost(self.model, step, nbytes)  # noqa: E731
            self.clock.after(step, cost, nbytes)

    def _write_back(self) -> None:
        """Rule 9, once the call has finished: the program's own buffers and the caller's inputs."""
        program = self.plan.device_graph.program
        for mutation in self.s.mutations:
            value = self._new_value(mutation)
            if mutation.kind == "buffer":
                target = program.constant_tensor(mutation.target)
            else:
                target = self.exec.as_tensor(self.inputs[program.user_inputs.index(mutation.target)])
            if target is not value:
                target.copy_(value)

    def _finalize(self, outs: list) -> Any:
        """Rule 4: copy out of the session's memory what lies in it."""
        done = []
        for i, value in enumerate(outs):
            if isinstance(value, torch.Tensor) and self.s.in_session_memory(value):
                device = self.exec.device_of(value)
                if device.is_host:
                    value = value.clone()
                elif self.s.output_pool is not None:  # rule 3: the pool's copy of output i
                    out = self._caller_tensor(f"output {i}", device, value.dtype, tuple(value.shape))
                    if value.numel():
                        out.copy_(value)
                    value = out
                else:
                    value = clone_to(value, device, self.s.backend, registry=self.s.registry)
                    owner = buffer_of(value)
                    if owner is not None:  # clone_to always returns a tensor that owns its buffer
                        self.owned.append(owner)
            done.append(value)
        self._write_back()
        return pytree.tree_unflatten(done, self.plan.device_graph.program.exported.call_spec.out_spec)


def _issued_at(node: torch.fx.Node) -> str:
    """The model source that issued the node's op, as capture recorded it; empty for a
    node the workbench inserted (a copy) or a shape-only capture."""
    stack = node.meta.get("stack_trace")
    return f"; the model issued it at:\n{stack.rstrip()}" if isinstance(stack, str) and stack.strip() else ""


def _add_note(exc: BaseException, note: str) -> None:
    """PEP 678 notes (Python 3.11+); older interpreters show the exception as it is."""
    if hasattr(exc, "add_note"):
        exc.add_note(note)


def _aliases_an_argument(result: torch.Tensor, args: Any) -> bool:
    """True when ``result`` shares storage with a tensor argument (a view or in-place result)."""
    ptr = result.untyped_storage().data_ptr()
    for t in pytree.tree_flatten(args)[0]:
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr:
            return True
    return False
