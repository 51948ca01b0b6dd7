"""Modeled time: what each step of a plan costs on the simulated machine, and ``estimate``.

Rules:

1. A copy of N bytes lasts ``CostModel.copy_time_us(kind, N, pinned)`` (latency + N /
   bandwidth); the gather copy is an h2d of the rows it moves. A reuse copy lasts
   ``CostModel.reuse_copy_time_us(link, device)``: in a run, ``link`` is the bytes of the
   rows its prefetch missed and ``device`` those of the rows it held; in ``estimate``
   (no data) ``link`` is ``(1 - prefetch_hit_rate)`` of its rows' bytes. Its event's
   ``nbytes`` is ``link``: the bytes that crossed the link. In ``estimate`` every copy
   is charged what its copy variant's ``cost`` says (``copy_variants``): a counted copy
   the expected number of its real rows.
2. An op lasts ``CostModel.compute_time_us(flops, bytes touched, device, dtype)``, its
   roofline, with FLOPs and bytes from ``op_cost`` and ``dtype`` the first floating-point
   input's (else the output's, else fp32). Binding a planned input on the host is a
   memcpy: 0 FLOPs, its bytes read and written. A grouped matmul reads the slabs of the
   groups that have rows: counted from its offsets in a run; in ``estimate``, the number
   the first registered group estimate gives (``register_group_estimate``), else as
   ``CostModel`` rule 3a says.
3. Costs are cached per (op, shapes, strides, dtypes, other arguments), so a graph of
   repeated layers counts each distinct op once, and a second run counts nothing —
   except costs that read data (a grouped matmul's real offsets), never cached. An op
   whose FLOPs cannot be counted is named in one ``CostModelWarning`` per estimate
   (and per run), each op once (``CostModel`` rule 3c).
4. Factory ops are costed with ``device="meta"``: costing never allocates memory.
5. ``SimClock`` places the events through a ``StreamScheduler`` with each step's
   ``deps``; the same steps and costs give the same timeline on every machine. A step
   that reads a copy node's value (``Step.reads``) records a flow from that copy (``timeline`` rule 4): "prefetch" from a prefetch copy, else
   "copy".
6. Launches (``CostModel`` rule 6). One host thread issues the steps in program order
   and runs the host steps itself; ``SimClock.host_us`` is where it stands. A host step
   starts no earlier than that and moves it to the step's end. Eager: every device
   operation — a kernel or a copy — costs the host ``launch_overhead`` and is released
   when issued. Graph: the device operations between two host steps form one captured
   graph per device (a copy belongs to the device whose copy stream runs it); the first
   of them costs the host ``graph_launch_overhead`` and releases them all. A released
   kernel starts once its stream has been free for ``kernel_gap`` (after a previous
   kernel) and its deps have ended; a released copy once its stream is free and its deps
   have ended. In eager mode the host also spends ``executor_overhead`` on every step
   before it issues (or runs) it: the executor's own work per step; a step's slot copy
   is part of its step and pays none. A device operation the clock is told cannot be
   captured (``uncaptured``: ``graph_segments`` rule 2) is, in graph mode, issued on its
   own like an eager launch (``executor_overhead`` included), and ends the open graphs as a host step does: the device
   operations after it form new graphs (one graph launch per segment and device).
7. A step whose result is copied into its planned slot (``Step.slot_write == "copy"``)
   has a second event right after its op, on the same lane, with activity
   ``slot_copy``: a memory copy kernel (or, on the host, a memcpy) that reads and writes
   its bytes once, launched like any other device operation (rule 6).
8. A copy-stream op (``Step.stream_bytes``) lasts as a memory copy of its bytes on its
   device (each byte read and written once, ``compute_time_us``), on the copy lane.
9. A step with a ``share`` (``node_facts.RowShare``) is charged that share of its op's
   time, bytes and FLOPs: in a run the share its mask really selects (``scaled``), in
   ``estimate`` the expected share, the mask being True with probability
   ``prefetch_hit_rate`` (the workload's expected hit rate, as for reuse copies).
10. ``estimate`` keeps, per plan object, what each op step's cost is made of apart from
   the machine (``op_facts``: FLOPs, bytes, dtype — shapes alone decide them), so the
   same plan estimated under another link, device or hit rate counts no op again.
11. A step whose arguments or result are stored in a weight format (``stored_of``: the
    ``node_facts.StoredFormat`` of its nodes) is costed at the stored bytes, with the
    dequantization work of the weights it computes with (``CostModel`` rule 3d); a copy's
    bytes are its record's, which propagation sized at the format's.
12. An op step is charged from its ``op_work.OpWork`` (its FLOPs, bytes and the weights it
    reads): a device kernel ``costs.kernel_seconds`` at its dtype class, a host op
    ``costs.host_op_seconds`` (at the runtime's matvec rate for the format of the weights it
    multiplies, when the model states one); the bytes are those of a runtime that fuses
    row picks into their readers when ``CostModel.fuses_row_picks`` is 1 (``op_work``
    rule 2). The decode timer charges a planned graph's token from the same records
    (``speed.graph_layout``).
13. One call's schedule apart from the machine is a ``CallSchedule`` (``call_schedule(plan,
    prefetch_hit_rate)``): its event steps in program order, each with what it costs on
    any machine, and the state it writes back. ``replay_call(call, model)`` places them on one
    ``SimClock``; ``estimate`` is that replay, and the decode timer times a planned
    graph's token by the same replay (``speed.timer`` rule 6), so a token has one time.
    ``bind_inputs=False`` leaves the call's inputs in their slots before it starts (a
    decode loop's are: the caller's), and a step that waits for one waits for nothing.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

import torch
import torch.fx
from torch.fx.immutable_collections import immutable_dict, immutable_list
from torch.utils._pytree import SUPPORTED_NODES, tree_flatten

from ..copy_variants import copy_variant
from ..devices import Device
from ..errors import ArgumentTypeError
from ..graph_values import gc_paused, node_nbytes, value_of
from ..planning.memory_plan import MemoryPlan
from ..node_facts import stored_format
from ..machine import costs
from ..machine.cost_model import CostModel, CountedCost, Stored, check_launch, UncountedOps, concrete_size, cost_depends_on_data, count_op_cost
from ..machine.default_model import default_cost_model
from .graph_segments import graph_segments
from .op_work import OpWork, op_work
from .workload import Workload
from .state import state_writes
from .steps import Lane, Step, event_of, steps_of
from .timeline import Event, StreamScheduler, Timeline

__all__ = [
    "CallSchedule",
    "SimClock",
    "work_cost",
    "cached_op_cost",
    "stored_of",
    "default_cost_model",
    "estimate",
    "expected_link_bytes",
    "expected_groups",
    "register_group_estimate",
    "memory_copy_cost",
    "reuse_cost",
    "scaled",
    "step_dtype",
    "step_work",
    "call_schedule",
    "replay_call",
]

#: A step's cost, computed when the clock places it: (µs, bytes, flops).
CostFn = Callable[[], tuple[float, int, int]]

_CACHE: dict[Any, CountedCost] = {}
_CACHE_LIMIT = 1 << 16
_LOCK = threading.Lock()


#: Rule 2's estimates: ``node -> expected groups read, or None`` (no opinion), asked in order.
_GROUP_ESTIMATES: list[Callable[[torch.fx.Node], Optional[float]]] = []


def register_group_estimate(estimate_groups: Callable[[torch.fx.Node], Optional[float]]) -> None:
    """Add a rule 2 estimate: how many groups a grouped matmul node is expected to read."""
    if estimate_groups not in _GROUP_ESTIMATES:
        _GROUP_ESTIMATES.append(estimate_groups)


def expected_groups(node: torch.fx.Node) -> Optional[float]:
    """Rule 2: the groups ``node`` is expected to read, from the first registered
    estimate that has one; None when none has."""
    for estimate_groups in _GROUP_ESTIMATES:
        groups = estimate_groups(node)
        if groups is not None:
            return groups
    return None




def _spec(x: Any) -> Any:
    """A hashable description of an argument: shapes and dtypes, never data."""
    if isinstance(x, torch.Tensor):
        return ("T", tuple(concrete_size(d) for d in x.shape), tuple(concrete_size(s) for s in x.stride()), x.dtype)
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, tuple(_spec(v) for v in x))
    if isinstance(x, dict):
        return ("dict", tuple((k, _spec(v)) for k, v in sorted(x.items(), key=lambda kv: str(kv[0]))))
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return concrete_size(x) if isinstance(x, torch.SymInt) else repr(x)
    try:
        hash(x)
    except TypeError:
        return ("repr", repr(x))
    return x


def _meta_factory(kwargs: dict) -> dict:
    if "device" in kwargs:
        kwargs = dict(kwargs, device=torch.device("meta"))
        kwargs.pop("pin_memory", None)
    return kwargs


def stored_of(node: torch.fx.Node) -> Optional[Stored]:
    """Rule 10: which of ``node``'s tensor arguments, and whether its result, are stored
    in a weight format; None when none is."""
    found: list[Optional[tuple[float, float]]] = []

    def visit(arg: torch.fx.Node) -> torch.fx.Node:
        if isinstance(value_of(arg), torch.Tensor):
            fact = stored_format(arg)
            found.append((fact.bits_per_weight, fact.dequant_ops) if fact is not None else None)
        return arg

    torch.fx.node.map_arg((node.args, node.kwargs), visit)
    own = stored_format(node)
    stored = Stored(tuple(found), own.bits_per_weight if own is not None else None)
    return stored if stored else None


def cached_op_cost(
    target: Any, args: tuple, kwargs: dict, expected_groups: Optional[float] = None, stored: Optional[Stored] = None
) -> CountedCost:
    """``count_op_cost`` of ``target(*args, **kwargs)``, cached per shapes unless it reads
    data (rules 3, 4)."""
    kwargs = _meta_factory(dict(kwargs))
    if cost_depends_on_data(target, tuple(args), kwargs):
        return count_op_cost(target, tuple(args), kwargs, expected_groups=expected_groups, stored=stored)
    key = (target, _spec(tuple(args)), _spec(kwargs), expected_groups, stored)
    with _LOCK:
        hit = _CACHE.get(key)
    if hit is not None:
        return hit
    cost = count_op_cost(target, tuple(args), kwargs, expected_groups=expected_groups, stored=stored)
    with _LOCK:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        _CACHE[key] = cost
    return cost


def _tensors(tree: Any) -> Iterator[torch.Tensor]:
    """The tensors among ``tree``'s leaves in ``tree_flatten``'s order, without building a
    tree spec: the plain containers of node arguments (tuples, lists, dicts and their fx
    immutable forms, which pytree flattens item by item, a dict by its values) are walked
    here, any other pytree node is flattened by pytree itself. Every op's facts ask this
    of its arguments, so it stays cheap."""
    kind = type(tree)
    if kind is tuple or kind is list or kind is immutable_list:
        for item in tree:
            yield from _tensors(item)
    elif kind is dict or kind is immutable_dict:
        for item in tree.values():
            yield from _tensors(item)
    elif kind in SUPPORTED_NODES or isinstance(tree, tuple):  # a namedtuple, an OrderedDict …
        yield from (t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor))
    elif isinstance(tree, torch.Tensor):
        yield tree


def step_dtype(args: Any, out: Any) -> torch.dtype:
    """Rule 2's dtype: the first floating-point input's, else the first output's, else fp32."""
    for t in _tensors(args):
        if t.dtype.is_floating_point:
            return t.dtype
    for t in _tensors(out):
        return t.dtype
    return torch.float32


def copy_cost(model: CostModel, step: Step, nbytes: int) -> tuple[float, int, int]:
    """(µs, bytes, flops) of a copy step (rule 1)."""
    return model.copy_time_us(event_of(step)[0], int(nbytes), pinned=step.pinned), int(nbytes), 0


def reuse_cost(model: CostModel, step: Step, link_bytes: int, device_bytes: int) -> tuple[float, int, int]:
    """(µs, bytes over the link, flops) of a reuse copy step (rule 1)."""
    link_bytes, device_bytes = int(link_bytes), int(device_bytes)
    return model.reuse_copy_time_us(link_bytes, device_bytes, pinned=step.pinned), link_bytes, 0


def expected_link_bytes(workload: Workload, nbytes: int) -> int:
    """Bytes of a reuse copy of ``nbytes`` expected to cross the link: the share
    ``1 - prefetch_hit_rate`` its prefetch is expected to miss (rule 1)."""
    return int(round((1.0 - workload.prefetch_hit_rate) * int(nbytes)))


def bind_cost(model: CostModel, step: Step, nbytes: int) -> tuple[float, int, int]:
    """(µs, bytes, flops) of binding a planned input into its slot (rule 2)."""
    if step.event == "d2d":
        return model.copy_time_us("d2d", int(nbytes)), int(nbytes), 0
    return model.compute_time_us(0, 2 * int(nbytes), "cpu"), int(nbytes), 0


def memory_copy_cost(model: CostModel, step: Step, nbytes: int) -> tuple[float, int, int]:
    """(µs, bytes, flops) of a memory copy of ``nbytes`` on the step's device, every byte
    read and written once: a result copied into its planned slot (rule 7) or a
    copy-stream op (rule 8, whose copy lane is on its own device)."""
    device = event_of(step)[1][0] if step.device is None else step.device
    return model.compute_time_us(0, 2 * int(nbytes), device), int(nbytes), 0


def scaled(cost: tuple[float, int, int], share: float) -> tuple[float, int, int]:
    """Rule 9: a cost for ``share`` of the rows (time, bytes and FLOPs alike)."""
    duration, nbytes, flops = cost
    return duration * share, int(round(nbytes * share)), int(round(flops * share))


#: What an op step costs on any machine: its counted FLOPs and bytes, and rule 2's dtype.
OpFacts = tuple[CountedCost, torch.dtype]


def op_facts(
    target: Any, args: tuple, kwargs: dict, out: Any, expected_groups: Optional[float] = None, stored: Optional[Stored] = None
) -> OpFacts:
    """The machine-independent part of an op step's cost (rules 2, 3, 11)."""
    return cached_op_cost(target, args, kwargs, expected_groups, stored), step_dtype((args, kwargs), out)


def op_step_cost(
    model: CostModel,
    step: Step,
    target: Any,
    args: tuple,
    kwargs: dict,
    out: Any,
    *,
    expected_groups: Optional[float] = None,
    uncounted: Optional[UncountedOps] = None,
    facts: Optional[OpFacts] = None,
    stored: Optional[Stored] = None,
    node: Optional[torch.fx.Node] = None,
    events: Optional[Mapping[str, Step]] = None,
) -> tuple[float, int, int]:
    """(µs, bytes touched, flops) of a compute or host step (rule 2); an op whose FLOPs
    cannot be counted is added to ``uncounted`` (rule 3). ``facts``: the step's
    ``op_facts``, when they are known already (then ``args``, ``kwargs`` and ``out``
    are not read); ``stored``: its tensors kept in a weight format (rule 11); ``node``
    and ``events`` (the plan's event steps by name): its graph node, so the weights it
    reads are known (rule 12)."""
    counted, dtype = facts if facts is not None else op_facts(target, args, kwargs, out, expected_groups, stored)
    if uncounted is not None:
        uncounted.add(target, counted.uncounted)
    if node is not None and events is not None:
        return work_cost(model, step, op_work(node, counted, dtype, events))
    cost = counted.cost
    device = event_of(step)[1][0] if step.device is None else step.device
    return model.compute_time_us(cost.flops, cost.bytes_touched, device, dtype), cost.bytes_touched, cost.flops


def work_cost(model: CostModel, step: Step, work: OpWork) -> tuple[float, int, int]:
    """(µs, bytes touched, flops) of an op step doing ``work`` (rule 12): a kernel
    (``costs.kernel_seconds``) or a host op (``costs.host_op_seconds``), its bytes those
    of a runtime that fuses row picks when the model's does."""
    device = event_of(step)[1][0] if step.device is None else step.device
    nbytes = work.fused_bytes if model.fuses_row_picks >= 0.5 else work.bytes
    if Device.parse(device).is_host:
        seconds = costs.host_op_seconds(model, work.flops, nbytes, work.weights, work.weight_format)
    else:
        seconds = costs.kernel_seconds(model, work.flops, nbytes, work.dtype_class)
    return seconds * 1e6, int(round(nbytes)), int(round(work.flops))


class SimClock:
    """Modeled time for one call: events placed by a ``StreamScheduler`` (rules 5-7)."""

    def __init__(self, model: CostModel, uncaptured: frozenset[str] = frozenset(), in_place: frozenset[str] = frozenset()) -> None:
        self.model = model
        self._uncaptured = uncaptured  # device operations issued on their own in graph mode (rule 6)
        self._in_place = in_place  # steps whose values are in their slots before the call (rule 13)
        self._scheduler = StreamScheduler()
        self._events: dict[str, Event] = {}
        self._flow_kind: dict[str, str] = {}  # copy step → the kind of flow from it
        self._host_us = 0.0  # where the host thread stands (rule 6)
        self._graphs: dict[Device, float] = {}  # device → release time of its open captured graph
        self._kernel_lanes: set[Lane] = set()  # lanes that have run a kernel

    @property
    def host_us(self) -> float:
        """Where the host thread stands: the end of its last launch or host step (rule 6)."""
        return self._host_us

    def _release_us(self, kind: str, lane: Lane, new_step: bool = True, alone: bool = False) -> float:
        """When an operation of ``kind`` on ``lane`` may start as far as the host is
        concerned; charges its launch and, for a new step, the executor's work (rule 6);
        ``alone``: an operation graph replay cannot capture."""
        if new_step and (self.model.launch_mode == "eager" or alone):
            self._host_us += self.model.executor_overhead * 1e6
        if kind == "host":
            return self._host_us
        device = lane[0]
        if self.model.launch_mode == "graph" and alone:
            self._graphs.clear()  # the graphs before it are closed; those after it are new
            self._host_us += self.model.launch_overhead * 1e6
            released = self._host_us
        elif self.model.launch_mode == "graph":
            if device not in self._graphs:
                self._host_us += self.model.graph_launch_overhead * 1e6
                self._graphs[device] = self._host_us
            released = self._graphs[device]
        else:
            self._host_us += self.model.launch_overhead * 1e6
            released = self._host_us
        if kind == "compute":
            if lane in self._kernel_lanes:
                released = max(released, self._scheduler.stream_free_us(*lane) + self.model.kernel_gap * 1e6)
            self._kernel_lanes.add(lane)
        return released

    def _place(
        self, step: Step, duration: float, deps: list[Event], nbytes: int, flops: int, activity: str,
        flows_from: Sequence[tuple[Event, str]] = (),
    ) -> Event:
        kind, lane = event_of(step)
        event = self._scheduler.schedule(
            kind,
            step.name,
            *lane,
            duration,
            deps=deps,
            nbytes=nbytes,
            flops=flops,
            activity=activity,
            not_before_us=self._release_us(kind, lane, new_step=activity != "slot_copy", alone=step.name in self._uncaptured),
            flows_from=flows_from,
        )
        if step.copy is not None:  # what a flow from it is (timeline rule 4)
            self._flow_kind[step.name] = "prefetch" if str(step.copy.role) == "prefetch" else "copy"
        if kind == "host":  # the host thread ran it: later launches come after it
            self._host_us = event.end_us
            self._graphs.clear()
        self._events[step.name] = event
        return event

    def add(self, step: Step, cost: CostFn) -> Event:
        """Schedule ``step`` after its deps and its launch; ``cost()`` gives (µs, bytes, flops)."""
        duration, nbytes, flops = cost()
        # arrows from every copy it reads, not only the latest per lane it waits for
        flows = [(self._events[d], self._flow_kind[d]) for d in step.reads if d in self._flow_kind]
        deps = [self._events[d] for d in step.deps if d not in self._in_place]
        return self._place(step, duration, deps, nbytes, flops, "op", flows)

    def add_slot_copy(self, step: Step, nbytes: int) -> Event:
        """Schedule the copy of ``step``'s result into its slot, right after the op on the
        same lane; later steps that wait for ``step`` wait for this copy (rule 7)."""
        duration, moved, _ = memory_copy_cost(self.model, step, nbytes)
        return self._place(step, duration, [self._events[step.name]], moved, 0, "slot_copy")

    def timeline(self) -> Timeline:
        return self._scheduler.timeline(f"modeled by {self.model.name}")  # timeline rule 5


# -- estimate: the same schedule from shapes alone ---------------------------------------------


def estimate(
    plan: MemoryPlan, cost_model: Optional[CostModel] = None, *, in_place_writes: bool = False, launch: Optional[str] = None,
    prefetch_hit_rate: float = 0.0, bind_inputs: bool = True,
) -> Timeline:
    """The modeled timeline of one call of ``plan``, from shapes alone.

    Runs no op and allocates no memory: FLOPs and bytes come from ``op_cost`` on meta
    copies of the traced values, so it works on shape-only plans (a full-size model) and
    gives, for a program with static shapes, exactly the timeline ``run(plan, ...,
    backend="sim")`` records — except reuse copies, whose bytes depend on which rows the
    prefetch holds: they are charged ``prefetch_hit_rate`` (rule 1; the workload's, never the
    machine's: ``runtime.workload``); and counted
    copies and grouped matmuls, whose bytes depend on which rows an index lists: they
    are charged an expected count (rules 1, 2); and steps
    charged by a row share, whose rows depend on a mask: the expected share under
    ``prefetch_hit_rate`` (rule 9). Ops whose FLOPs cannot be counted are named
    in one ``CostModelWarning`` (rule 3).

    ``in_place_writes=True`` models a runtime whose kernels all write their planned
    memory directly — a compiled program, such as ExecuTorch's — instead of this
    executor, which copies the results of ops without an ``out=`` variant into their
    slots (rule 7): no ``slot_copy`` events.

    ``launch`` (``"eager"`` or ``"graph"``, default the model's ``launch_mode``) models a
    session loaded with that launch mode: ``"graph"`` launches each graph segment once
    and the steps between segments one by one (``graph_segments``, rule 6), as
    ``load(plan, "sim", launch="graph")`` does.

    ``bind_inputs=False``: the call's inputs are in their slots when it starts, as a
    decode loop leaves them (rule 13); by default the call binds them first, as ``run``
    does.
    """
    if not isinstance(plan, MemoryPlan):
        raise ArgumentTypeError(f"estimate expects a MemoryPlan from workbench.plan, got {type(plan).__name__}")
    model = cost_model if cost_model is not None else default_cost_model()
    if not isinstance(model, CostModel):
        raise ArgumentTypeError(f"cost_model must be a CostModel (e.g. CostModel.preset('h200')), got {type(model).__name__}")
    uncounted = UncountedOps()
    uncaptured: frozenset[str] = frozenset()
    if launch is not None:
        mode = check_launch(launch)
        model = model.with_launch_mode(mode)
        if mode == "graph":
            steps = steps_of(plan)
            uncaptured = graph_segments(plan, steps).uncaptured | {w.step.name for w in state_writes(plan, steps)}
    with gc_paused():  # tens of thousands of events and cost records, and no cycles among them
        timeline = replay_call(call_schedule(plan, prefetch_hit_rate), model, in_place_writes=in_place_writes,
                          bind_inputs=bind_inputs, uncaptured=uncaptured, uncounted=uncounted)  # fmt: skip
    uncounted.warn("estimate")
    return timeline


#: What a step costs on a machine: given the machine, and where to name the ops whose
#: FLOPs cannot be counted (rule 3), its ``CostFn``.
StepCost = Callable[[CostModel, UncountedOps], CostFn]


@dataclass(frozen=True)
class CallSchedule:
    """One call of a plan as the simulator schedules it, apart from the machine (rule 13)."""

    steps: tuple[Step, ...]  # the event steps, in program order
    costs: tuple[StepCost, ...]  # what each costs on a machine
    inputs: frozenset[str]  # the steps that bind the call's inputs into their slots
    writes: tuple[tuple[Step, StepCost], ...]  # the program's state, written back after the call


def call_schedule(plan: MemoryPlan, prefetch_hit_rate: float = 0.0) -> CallSchedule:
    """Rule 13: one call of ``plan``, expecting ``prefetch_hit_rate`` of its reuse copies'
    (and masked shares') rows on the device."""
    if not isinstance(plan, MemoryPlan):
        raise ArgumentTypeError(f"call_schedule expects a MemoryPlan from workbench.plan, got {type(plan).__name__}")
    workload = Workload(prefetch_hit_rate)
    steps = steps_of(plan)
    nodes = {node.name: node for node in plan.device_graph.graph.nodes}
    events = {s.name: s for s in steps.steps if s.event is not None}
    placed = tuple(s for s in steps.steps if s.event is not None)  # one step per node, in order
    writes = tuple((w.step, _write_back_cost(w.step, w.device, node_nbytes(nodes[w.value], unbounded="hint")))
                   for w in state_writes(plan, steps))  # fmt: skip
    return CallSchedule(
        steps=placed, costs=tuple(_static_cost(workload, s, nodes[s.name], plan, events) for s in placed),
        inputs=frozenset(s.name for s in placed if s.op == "placeholder"), writes=writes,
    )  # fmt: skip


def replay_call(call: CallSchedule, model: CostModel, *, in_place_writes: bool = False, bind_inputs: bool = True,
           uncaptured: frozenset[str] = frozenset(), uncounted: Optional[UncountedOps] = None) -> Timeline:
    """Rule 13: ``call``'s steps on one ``SimClock`` of ``model`` (``estimate``'s
    arguments); ops whose FLOPs cannot be counted go to ``uncounted``."""
    if not isinstance(call, CallSchedule):
        raise ArgumentTypeError(f"replay_call expects a CallSchedule from call_schedule(plan), got {type(call).__name__}")
    if not isinstance(model, CostModel):
        raise ArgumentTypeError(f"cost_model must be a CostModel, got {type(model).__name__}")
    found = uncounted if uncounted is not None else UncountedOps()
    clock = SimClock(model, uncaptured, frozenset() if bind_inputs else call.inputs)
    for step, cost in zip(call.steps, call.costs):
        if not bind_inputs and step.name in call.inputs:
            continue
        clock.add(step, cost(model, found))
        if step.slot_write == "copy" and not in_place_writes:
            clock.add_slot_copy(step, step.slot_copy_bytes)
    for step, cost in call.writes:
        clock.add(step, cost(model, found))
    return clock.timeline()


def _write_back_cost(step: Step, device: Device, nbytes: int) -> StepCost:
    """A state write-back: a host copy on the cpu, an h2d onto a device."""
    if device.is_host:
        return lambda model, _: lambda: bind_cost(model, step, nbytes)
    return lambda model, _: lambda: copy_cost(model, step, nbytes)


# Rule 10: per plan, each op step's ``op_facts``, found by its first estimate: a plan
# estimated under several links or hit rates counts its ops once.
_FACTS: "weakref.WeakKeyDictionary[MemoryPlan, dict[str, OpFacts]]" = weakref.WeakKeyDictionary()


def _plan_facts(plan: MemoryPlan) -> dict[str, OpFacts]:
    with _LOCK:
        return _FACTS.setdefault(plan, {})


_WORKS: "weakref.WeakKeyDictionary[MemoryPlan, dict[str, OpWork]]" = weakref.WeakKeyDictionary()


def _plan_works(plan: MemoryPlan) -> dict[str, OpWork]:
    with _LOCK:
        return _WORKS.setdefault(plan, {})


def step_work(plan: MemoryPlan, step: Step, node: torch.fx.Node, events: Mapping[str, Step]) -> tuple[OpFacts, OpWork]:
    """Rules 10, 12: the ``op_facts`` and ``OpWork`` of op step ``step`` (of ``node``) of
    ``plan``, counted once per plan whatever the machine; ``events``: the plan's event steps
    by name. The simulator's estimate and a planned graph's decode layout both read them."""
    facts, works = _plan_facts(plan), _plan_works(plan)
    found = facts.get(step.name)
    if found is None:
        args = torch.fx.node.map_arg(node.args, value_of)
        kwargs = torch.fx.node.map_arg(node.kwargs, value_of)
        found = facts[step.name] = op_facts(node.target, args, kwargs, value_of(node), expected_groups(node), stored_of(node))
    work = works.get(step.name)
    if work is None:
        work = works[step.name] = op_work(node, found[0], found[1], events)
    return found, work


def _static_cost(workload: Workload, step: Step, node: torch.fx.Node, plan: MemoryPlan,
                 events: Mapping[str, Step]) -> StepCost:
    if node.op == "placeholder":
        nbytes = node_nbytes(node, unbounded="hint")
        return lambda model, _: lambda: bind_cost(model, step, nbytes)
    record = step.copy
    if record is not None:  # its copy variant says what it costs (rule 1)
        variant = copy_variant(record.role)
        return lambda model, _: variant.cost(model, step, node, record, workload)
    if step.stream_bytes is not None:  # rule 8
        moved = step.stream_bytes
        return lambda model, _: lambda: memory_copy_cost(model, step, moved)
    share = 1.0 if step.share is None else step.share.expected_share(workload.prefetch_hit_rate)  # rule 9

    def cost_on(model: CostModel, uncounted: UncountedOps) -> CostFn:
        def cost() -> tuple[float, int, int]:
            found, work = step_work(plan, step, node, events)
            uncounted.add(node.target, found[0].uncounted)
            return scaled(work_cost(model, step, work), share)

        return cost

    return cost_on
