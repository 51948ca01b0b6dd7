"""What each node of a planned graph does at run time, where, and what it must wait for.

``steps_of(plan)`` reads a ``MemoryPlan`` (shapes and offsets only, never data) and
returns one ``Step`` per graph node. Every backend executes the same steps: the simulator
schedules them in modeled time, CUDA turns ``deps`` into stream waits, and ``estimate``
costs them from shapes alone.

Rules:

1. A step is an *event* (real work with a start and an end) when it copies (``h2d``,
   ``d2h``, ``d2d``; the gather copy is ``h2d``), computes a tensor (``compute`` on a
   device, ``host`` on the cpu), or binds a planned graph input into its slot (``host``
   on the cpu; ``d2d`` for an input planned in device memory). ``getitem``, view ops that
   own no planned memory and ops that return no tensor are not events: they move no bytes.
2. Lanes: device compute on ``(device, "compute")``; host work on ``("cpu", "main")``;
   every copy on a copy stream of its own, ``(device, "copy")``: an h2d or a d2d on the
   *destination* device's copy stream (it pulls into its own memory), a d2h on the
   *source* device's (it pushes out of its own memory).
3. Read-after-write: a step waits for the events that produced its tensor inputs, looked
   up through views and ``getitem`` to the event that wrote the bytes.
4. Write-after-read on reused memory: a step that writes a planned storage S waits until
   the previous occupants of S's bytes (from the plan's offsets and lifetimes) were
   written and had all their readers finish. Only the most recent occupant of each byte
   matters: its writer already waited for the occupants before it.
5. An in-place write into a storage waits for that storage's readers since its last write.
6. ``deps`` keeps, per lane, only the latest event (a lane runs in issue order, so
   waiting for it covers the earlier ones); ``reuse_deps`` are the deps rule 4 or 5 added.
7. A copy's ``pinned`` says whether its host side lies in planned (arena or constant)
   memory, which the ``cuda`` backend allocates page-locked; else it is pageable.
8. A gather copy (``gather_h2d_copy`` or ``gather_h2d_reuse_copy``) has ``gather``; the
   reuse copy also has ``reuse``: it reads its prefetched buffer on the destination
   device, so it waits for the prefetch like for any other input (rule 3).
9. A compute or host step whose value is planned writes it into its arena slot: through
   the op's ``out=`` variant (``slot_write == "direct"``, see ``out_variants``) when it
   has one and static shapes; a multi-output op when, besides, every result is planned.
   Else the op computes into fresh memory and its planned results are copied into their
   slots (``slot_write == "copy"``, ``slot_copy_bytes`` bytes: a memory copy the executor
   shows as its own event). A device value the caller owns (an output under
   ``skip_d2h_for_method_outputs``) is written the same way into the buffer it is
   returned in.
10. A copy-stream op (``node_facts.CopyStreamOp``) is a ``d2d`` event on its device's
    copy lane with ``stream_bytes``; its result is written into its slot like an op's
    (rule 9).
11. A compute or host step with a ``node_facts.RowShare`` has ``share``; the step of its
    mask has ``row_mask``. The mask must be an event step issued before the share's
    step, and its traced value a bool tensor: a graph where either fails is a
    ``StepError`` when its steps are made, so a call need not check them.
"""

from __future__ import annotations

import bisect
import operator
import weakref
from dataclasses import dataclass
from typing import Mapping, Optional

import torch.fx

from ..graph_values import aliased_input, gc_paused, is_inplace_op, is_view_op, node_nbytes, produces_tensors, value_of
from ..devices import CPU, CopyKind, Device
from ..errors import WorkbenchError
from ..planning.memory_plan import MemoryPlan
from ..propagate import CopyRecord, CopyRole
from ..node_facts import CopyStreamOp, RowShare, copy_stream_op, row_share
from .out_variants import out_variant

__all__ = ["HOST_LANE", "Lane", "Step", "StepError", "Steps", "event_of", "resident_write_step", "steps_of"]

class StepError(WorkbenchError, ValueError):
    """A step asked for something it does not have (an event's lane on a step that is none)."""


#: A stream of a device: ``(device, "compute" | "copy" | "main")``.
Lane = tuple[Device, str]

HOST_LANE: Lane = (CPU, "main")


@dataclass(frozen=True)
class Step:
    """One graph node as the executor sees it (see module rules)."""

    index: int  # position in the graph's execution order
    name: str  # node name
    op: str  # "placeholder" | "call_function" | "output"
    device: Optional[Device]  # where the node's value lives (None for the output node)
    event: Optional[str]  # "h2d" | "d2h" | "d2d" | "compute" | "host", or None (rule 1)
    lane: Optional[Lane]  # (device, stream) of the event
    deps: tuple[str, ...] = ()  # event steps to wait for (rules 3-6)
    reuse_deps: tuple[str, ...] = ()  # the deps that come from memory reuse (rules 4, 5)
    src: Optional[Device] = None  # copies: the device read from
    dst: Optional[Device] = None  # copies: the device written to
    pinned: bool = True  # copies: host side in planned (page-locked on cuda) memory (rule 7)
    copy: Optional[CopyRecord] = None  # copy nodes: the record propagation made (rule 8)
    slot_write: Optional[str] = None  # planned compute/host results: "direct" (out=) or "copy" (rule 9)
    slot_copy_bytes: int = 0  # bytes copied into planned slots after the op (rule 9)
    stream_bytes: Optional[int] = None  # copy-stream ops: bytes moved within device memory (rule 10)
    share: Optional[RowShare] = None  # charged only the rows a mask selects (rule 11)
    row_mask: bool = False  # its value is a mask some step's share is read from (rule 11)
    reads: tuple[str, ...] = ()  # every event step whose bytes it reads (rule 3, before rule 6 keeps one per lane)

    @property
    def gather(self) -> bool:
        """A copy of rows selected by an index (gather, prefetch or reuse)."""
        return self.copy is not None and self.copy.is_gather

    @property
    def reuse(self) -> bool:
        """A reuse copy: rows its prefetch holds come from the device (rule 8)."""
        return self.copy is not None and self.copy.role == CopyRole.REUSE


def _describe_value(val: object) -> str:
    """A traced value in an error message: a tensor's dtype, else its type."""
    return f"a {val.dtype} tensor" if isinstance(val, torch.Tensor) else type(val).__name__


def _static(val: object) -> bool:
    """A traced tensor whose shape and strides are plain numbers."""
    return isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in (*val.shape, *val.stride()))


def event_of(step: Step) -> tuple[str, Lane]:
    """The kind and lane of an event step (rule 1); a step that is no event is refused."""
    if step.event is None or step.lane is None:
        raise StepError(f"step {step.name!r} ({step.op}) is not an event: it has no time or lane")
    return step.event, step.lane


def resident_write_step(index: int, name: str, device: Device, deps: tuple[str, ...] = (), pinned: bool = False) -> Step:
    """A step outside the graph that writes a constant's resident copy on ``device`` from
    the host (placing it at load, or a state write-back): a host copy on the cpu, else an
    h2d on the device's copy lane (rule 2)."""
    if device.is_host:
        return Step(index=index, name=name, op="placeholder", device=device, event="host", lane=HOST_LANE, deps=deps)
    return Step(
        index=index,
        name=name,
        op="placeholder",
        device=device,
        event=str(CopyKind.H2D),
        lane=(device, "copy"),
        deps=deps,
        src=CPU,
        dst=device,
        pinned=pinned,
    )


@dataclass(frozen=True, eq=False)
class Steps:
    """Every node's ``Step``, in execution order, and the events among them."""

    steps: tuple[Step, ...]
    by_name: Mapping[str, Step]

    @property
    def events(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.event is not None)

    def lanes(self) -> tuple[Lane, ...]:
        """Every (device, stream) an event runs on, in order of first use."""
        return tuple(dict.fromkeys(s.lane for s in self.steps if s.lane is not None))


class _ByteOwners:
    """Which storage last claimed each byte of one arena (disjoint, sorted segments)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        self._names: list[str] = []

    def claim(self, lo: int, hi: int, name: str) -> list[str]:
        """Give [lo, hi) to ``name``; return the storages that held any of it before."""
        if hi <= lo:
            return []
        i = bisect.bisect_right(self._starts, lo) - 1
        if i < 0 or self._ends[i] <= lo:
            i += 1
        j = i
        while j < len(self._starts) and self._starts[j] < hi:
            j += 1
        previous = self._names[i:j]
        pieces: list[tuple[int, int, str]] = []
        if i < j and self._starts[i] < lo:
            pieces.append((self._starts[i], lo, self._names[i]))
        pieces.append((lo, hi, name))
        if i < j and self._ends[j - 1] > hi:
            pieces.append((hi, self._ends[j - 1], self._names[j - 1]))
        self._starts[i:j] = [p[0] for p in pieces]
        self._ends[i:j] = [p[1] for p in pieces]
        self._names[i:j] = [p[2] for p in pieces]
        return list(dict.fromkeys(previous))


def _lane(kind: str, device: Device, src: Device, dst: Device) -> Lane:
    """Rule 2."""
    if kind == "compute":
        return (device, "compute")
    if kind == "host":
        return HOST_LANE
    if kind == "d2h":
        return (src, "copy")
    return (dst, "copy")  # h2d, d2d


_CACHE: "weakref.WeakKeyDictionary[object, Steps]" = weakref.WeakKeyDictionary()


def steps_of(plan: MemoryPlan) -> Steps:
    """The steps of ``plan`` (computed once per plan object; pure, shape-only)."""
    try:
        return _CACHE[plan]
    except (KeyError, TypeError):
        pass
    with gc_paused():  # one record per node of a large graph, and no cycles among them
        result = _Analysis(plan).run()
    try:
        _CACHE[plan] = result
    except TypeError:  # an object that cannot be weakly referenced: just do not cache
        pass
    return result


class _Analysis:
    """One pass over the graph in execution order (rules 1-7)."""

    def __init__(self, plan) -> None:
        self.plan = plan
        self.dg = plan.device_graph
        self.constants = self.dg.program.constants
        self.copies = self.dg.copy_table
        self.allocations = plan.allocations
        self.storage_of = plan.storage_of
        self.owners: dict[str, _ByteOwners] = {}
        self.writer: dict[str, str] = {}  # storage → event that wrote it
        self.readers: dict[str, list[str]] = {}  # storage → events that read it
        self.readers_since_write: dict[str, list[str]] = {}
        self.producers: dict[str, frozenset[str]] = {}  # value → events that wrote its bytes
        self.steps: dict[str, Step] = {}
        self.masks = {f.mask for f in map(row_share, self.dg.graph.nodes) if f is not None}  # rule 11

    def run(self) -> Steps:
        for index, node in enumerate(self.dg.graph.nodes):
            self.steps[node.name] = self._step(index, node)
        ordered = tuple(self.steps.values())
        return Steps(ordered, dict(self.steps))

    # -- classification (rules 1, 2, 7) -------------------------------------------------------
    def _kind(self, node: torch.fx.Node, stream: Optional[CopyStreamOp]) -> Optional[str]:
        if node.op == "placeholder":
            if node.name in self.constants or node.name not in self.allocations:
                return None
            return "host" if self.dg.node_device[node.name].is_host else "d2d"
        if node.op != "call_function":
            return None
        if node.name in self.copies:
            return str(self.copies[node.name].kind)
        if stream is not None:  # rule 10
            return str(CopyKind.D2D)
        if node.target is operator.getitem or not produces_tensors(node):
            return None
        if is_view_op(node.target) and node.name not in self.allocations:
            return None
        return "host" if self.dg.node_device[node.name].is_host else "compute"

    def _pinned(self, record: CopyRecord) -> bool:
        """Rule 7: is the host side of this copy planned (or a resident constant)?"""
        if record.kind == "h2d":
            return record.value in self.constants or record.value in self.storage_of
        if record.kind == "d2h":
            return record.name in self.storage_of
        return True

    # -- the step ---------------------------------------------------------------------------
    def _step(self, index: int, node: torch.fx.Node) -> Step:
        name = node.name
        device = self.dg.node_device.get(name, CPU) if node.op != "output" else None
        stream = copy_stream_op(node)
        kind = self._kind(node, stream)
        if kind is None:
            self.producers[name] = self._producers_of_inputs(node)
            return Step(index=index, name=name, op=node.op, device=device, event=None, lane=None)
        assert device is not None  # only the output node has none, and it is no event
        record = self.copies.get(name)
        # a device-planned input (d2d) is bound from the caller's tensor on its own device
        src, dst = (record.src, record.dst) if record is not None else (device, device)
        lane = _lane(kind, device, src, dst)
        reads = tuple(sorted(self._producers_of_inputs(node)))
        deps: dict[str, None] = dict.fromkeys(reads)
        reuse: dict[str, None] = {}
        for storage in self._written(node):
            for earlier in self._claim(storage):
                for event in (self.writer.get(earlier), *self.readers.get(earlier, ())):
                    if event is not None and event != name:
                        reuse[event] = None
            self.writer[storage] = name
            self.readers_since_write[storage] = []
        target = self._inplace_target(node)
        if target is not None:
            for event in self.readers_since_write.get(target, ()):
                if event != name:
                    reuse[event] = None
            self.readers_since_write[target] = []
        for event in reuse:
            deps[event] = None
        for storage in self._read(node):
            self.readers.setdefault(storage, []).append(name)
            self.readers_since_write.setdefault(storage, []).append(name)
        self.producers[name] = frozenset((name,))
        return Step(
            index=index,
            name=name,
            op=node.op,
            device=device,
            event=kind,
            lane=lane,
            deps=self._latest_per_lane(deps),
            reuse_deps=self._latest_per_lane(reuse),
            reads=reads,
            src=src if record is not None or stream is not None else None,
            dst=dst if record is not None or stream is not None else None,
            pinned=self._pinned(record) if record is not None else True,
            copy=record,
            **self._slot_write(node, kind, stream),
            **self._facts(node, kind, stream),
        )

    def _facts(self, node: torch.fx.Node, kind: str, stream: Optional[CopyStreamOp]) -> dict:
        """Rules 10, 11."""
        out: dict = {}
        if stream is not None:
            out["stream_bytes"] = stream.nbytes
        share = row_share(node)
        if share is not None and kind in ("compute", "host"):
            mask = self.steps.get(share.mask)
            if mask is None or not mask.row_mask:
                raise StepError(f"{node.name} is charged by the row mask {share.mask!r}, which is no op step issued before it")
            out["share"] = share
        if node.name in self.masks:
            val = value_of(node)
            if not isinstance(val, torch.Tensor) or val.dtype != torch.bool:
                raise StepError(f"{node.name} is a row mask, so it must be a bool tensor, got {_describe_value(val)}")
            out["row_mask"] = True
        return out

    def _slot_write(self, node: torch.fx.Node, kind: str, stream: Optional[CopyStreamOp]) -> dict:
        """Rule 9 (a copy-stream op's result, like any op's)."""
        if node.op != "call_function" or (kind not in ("compute", "host") and stream is None):
            return {}
        variant = out_variant(node.target) if not is_inplace_op(node.target) else None
        val = value_of(node)
        if node.name in self.allocations:
            if variant is not None and variant.results == 1 and _static(val):
                return {"slot_write": "direct"}
            return {"slot_write": "copy", "slot_copy_bytes": self.allocations[node.name].nbytes}
        elements = {u.args[1]: u.name for u in node.users if u.target is operator.getitem and u.name in self.allocations}
        if elements:
            every = isinstance(val, (tuple, list)) and set(elements) == set(range(len(val)))
            if every and variant is not None and variant.results == len(val) and all(_static(v) for v in val):
                return {"slot_write": "direct"}
            return {"slot_write": "copy", "slot_copy_bytes": sum(self.allocations[e].nbytes for e in elements.values())}
        caller_owned = (
            kind == "compute"
            and node.name not in self.storage_of
            and isinstance(val, torch.Tensor)
            and not is_inplace_op(node.target)
        )
        if not caller_owned:
            return {}
        if variant is not None and variant.results == 1 and _static(val):
            return {"slot_write": "direct"}
        return {"slot_write": "copy", "slot_copy_bytes": node_nbytes(node, unbounded="hint")}

    def _producers_of_inputs(self, node: torch.fx.Node) -> frozenset[str]:
        found: set[str] = set()
        for arg in node.all_input_nodes:
            found |= self.producers.get(arg.name, frozenset())
        return frozenset(found)

    def _written(self, node: torch.fx.Node) -> list[str]:
        """Planned storages this event writes as their owner."""
        written = [node.name] if node.name in self.allocations else []
        if node.op == "call_function" and not isinstance(node.meta.get("val"), torch.Tensor):
            written += [u.name for u in node.users if u.target is operator.getitem and u.name in self.allocations]
        return written

    def _read(self, node: torch.fx.Node) -> list[str]:
        reads = []
        for arg in node.all_input_nodes:
            storage = self.storage_of.get(arg.name)
            if storage is not None:
                reads.append(storage)
        return list(dict.fromkeys(reads))

    def _inplace_target(self, node: torch.fx.Node) -> Optional[str]:
        if node.op != "call_function" or not is_inplace_op(node.target):
            return None
        base = aliased_input(node)
        return self.storage_of.get(base.name) if base is not None else None

    def _claim(self, storage: str) -> list[str]:
        alloc = self.allocations[storage]
        owners = self.owners.setdefault(alloc.device, _ByteOwners())
        return owners.claim(alloc.offset, alloc.offset + alloc.nbytes, storage)

    def _latest_per_lane(self, events: Mapping[str, None]) -> tuple[str, ...]:
        latest: dict[Lane, Step] = {}
        for name in events:
            step = self.steps[name]
            lane = event_of(step)[1]
            kept = latest.get(lane)
            if kept is None or step.index > kept.index:
                latest[lane] = step
        return tuple(s.name for s in sorted(latest.values(), key=lambda s: s.index))
