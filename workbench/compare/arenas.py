"""Side-by-side: the workbench's memory plans vs ExecuTorch's ``MemoryPlanningPass``.

For one model, one placement and one setting of the two skip flags, both systems plan the
non-constant memory of every device; the result gives the bytes per device of each, the
workbench's lower bound, the tensors only one side plans (each with the reason), and the
workbench's algorithms run on ExecuTorch's own tensors (same tensors, same lifetimes:
the algorithms alone compared).

What each side plans:

- ExecuTorch: ``torch.export`` → ``to_edge`` (core-ATen decompositions, view ops replaced
  by their ``*_copy`` variants) → ``to_backend`` with ``rule_partitioner`` (when placed)
  → ``to_executorch`` with ``enable_non_cpu_memory_planning=True`` and the default
  ``MemoryPlanningPass``: ``MemoryPlanningAlgorithmSuite`` with its single algorithm
  ``greedy`` (largest first into shared objects; ``exir.memory_planning``), at the pass's
  default alignment ``exir.tensor.ALIGNMENT`` = 16 bytes, read off the pass and used on
  both sides. It plans the tensors of the final graph — the out-variant ops' outputs,
  the graph inputs and outputs, the copies, and each delegate call's inputs and outputs;
  the ops inside a delegate are the backend's business and are not planned.
- The workbench: ``capture(decompose=True)`` (the same core-ATen ops) → ``place`` with the
  same rules → ``propagate`` with the same flags → ``plan`` with ``greedy`` and ``best``,
  every tensor planned, delegate internals included. So device arenas are compared only
  when every device delegate holds one op (then "around the delegate" is "every tensor");
  host arenas always.

Both sides make the same decision on graph inputs/outputs: planned unless the matching
skip flag hands them to the caller (``alloc_graph_input=not skip_h2d``,
``alloc_graph_output=not skip_d2h``).

Rules:
1. ExecuTorch's bytes per device are the sum of its ``non_const_buffer_sizes`` whose
   ``non_const_buffer_device`` is that device (index 0 is reserved; unlisted indices are
   the host). A device with no buffer has 0 bytes.
2. ExecuTorch's tensors are read off the final graph's ``TensorSpec``s that got a
   ``mem_id``: one per storage (a spec backed by another's storage is not counted
   twice), each with its lifetime, offset and the node that writes it.
3. Every tensor planned by one side only is listed with the reason (``ARENA_REASONS``);
   a reason of None means the difference is unexplained, and a correct cross-check has
   none. Tensors are matched by (device, op, bytes), as a multiset.
4. Anything ExecuTorch raises after export is a result (``ExecuTorchArenas.error``);
   malformed rules and failures of the workbench's own code raise.
"""

from __future__ import annotations

import operator
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping, Optional, Sequence, cast

import pandas as pd
import torch

from ..capture import capture
from ..executorch.dependency import executorch_api
from ..executorch.operators import is_view_copy
from ..executorch.reader import read_program
from ..devices import Device, host_first
from ..place import Placement, place
from ..planning import Assignment, Buffer, assign_offsets, lower_bound, verify
from ..planning.memory_plan import MemoryPlan
from ..planning.memory_plan import plan as plan_memory
from ..propagate import DeviceGraph, propagate
from .cases import Case
from .lowering import (
    ET_COPY_KINDS,
    DelegateOps,
    delegate_ops,
    error_text,
    lower,
    rule_partitioner,
    short_op_name,
)
from .settings import (
    CrossCheckTypeError,
    FrozenRules,
    as_input_tuple,
    check_settings,
    freeze_rules,
    parse_edge_rules,
    rules_text,
)

_getitem = operator.getitem

__all__ = [
    "ARENA_REASONS",
    "ArenaComparison",
    "ETTensor",
    "ExecuTorchArenas",
    "OneSided",
    "arena_table",
    "compare_arena_case",
    "compare_arenas",
    "WorkbenchTensor",
    "executorch_arena_bytes",
    "workbench_plan",
    "workbench_tensors",
]

#: Why a tensor is planned by one side only (rule 3).
ARENA_REASONS: Mapping[str, str] = {
    "view_copy": (
        "a view op materialized by ExecuTorch (edge '*_copy' variant); the workbench shares "
        "the base's storage, or keeps a view of a weight resident"
    ),
    "unread_output": (
        "an output of a multi-output op that nothing reads (native_layer_norm's mean/rstd, "
        "topk's values); the exported graph has no value for it, so the workbench plans none"
    ),
    "per_argument_copy": (
        "ExecuTorch copies a value to the device once per delegate argument; the workbench once per (value, device)"
    ),
    "resident_weight": (
        "ExecuTorch copies a weight (or a host-made view of one) to the device on every call; "
        "the workbench keeps it resident there (constant_bytes, not the arena)"
    ),
    "through_host": (
        "ExecuTorch moves a value between two devices through the host (d2h + h2d); the "
        "workbench copies it directly (d2d)"
    ),
    "delegate_internal": (
        "a tensor inside a multi-op delegate: the workbench plans it, ExecuTorch leaves it to the backend"
    ),
}

# --- results -----------------------------------------------------------------------


@dataclass(frozen=True)
class ETTensor:
    """One storage ExecuTorch planned: where, how big, when, and what writes it."""

    name: str  # "<writing node>" or "<writing node>[i]" for the i-th output of a multi-output op
    op: str  # "input", an aten op name ("addmm", "permute_copy"), "h2d_copy", "d2h_copy"
    kind: str  # "input" | "activation" | "view_copy" | "copy" | "delegate_output" | "unread_output"
    device: Device
    nbytes: int
    size: int  # aligned bytes reserved
    mem_id: int  # index into non_const_buffer_sizes
    offset: int  # byte offset in that buffer
    start: int  # lifetime over the final graph's node indices, inclusive
    end: int
    source: Optional[str] = None  # for a copy: the node it copies
    of_constant: bool = False  # a view of a weight, or a copy of a weight or such a view

    def buffer(self) -> Buffer:
        """This tensor as planning input: its bytes and lifetime."""
        return Buffer(self.name, self.nbytes, self.start, self.end)


@dataclass(frozen=True)
class ExecuTorchArenas:
    """ExecuTorch's memory plan for one placement, or why there is none.

    Invariants:
    1. ``error is None`` exactly when ``to_executorch`` produced a program; then
       ``arena_bytes`` has every device that owns a buffer (rule 1 of the module).
    2. ``stage`` names the pipeline step that raised, else None.
    """

    arena_bytes: Mapping[Device, int]  # device → planned non-constant bytes
    buffer_sizes: tuple[int, ...]  # non_const_buffer_sizes as emitted (index 0 reserved)
    buffer_devices: tuple[Device, ...]  # the device of each buffer index
    tensors: tuple[ETTensor, ...]
    alignment: int  # the MemoryPlanningPass alignment
    delegates: tuple[DelegateOps, ...]
    error: Optional[str] = None
    stage: Optional[str] = None
    detail: Optional[str] = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        return self.error is None

    def buffers(self, device: Device) -> list[Buffer]:
        """ExecuTorch's tensors of one device as planning input (same sizes and lifetimes)."""
        return [t.buffer() for t in self.tensors if t.device == device]

    def verify(self) -> None:
        """Check ExecuTorch's own plan with the workbench's verifier: no two of its tensors
        overlap in time and bytes in one buffer, offsets aligned, each inside its buffer.
        Raises ``PlanVerificationError``; a misread lifetime, size or buffer shows here."""
        by_buffer: dict[int, list[ETTensor]] = defaultdict(list)
        for t in self.tensors:
            by_buffer[t.mem_id].append(t)
        for mem_id, group in sorted(by_buffer.items()):
            buffers = [t.buffer() for t in group]
            offsets: dict[Hashable, int] = {t.name: t.offset for t in group}
            verify(
                buffers,
                Assignment(offsets, self.buffer_sizes[mem_id], "executorch"),
                self.alignment,
            )


@dataclass(frozen=True)
class OneSided:
    """A tensor planned by one side only (rule 3)."""

    side: str  # "executorch" | "workbench"
    device: Device
    name: str
    op: str
    nbytes: int
    reason: Optional[str]  # a key of ARENA_REASONS; None = unexplained


@dataclass(frozen=True)
class ArenaComparison:
    """One model, placement and flag setting: both systems' arena bytes per device."""

    model: str
    rules: FrozenRules  # () for CPU only
    skip_h2d: bool
    skip_d2h: bool
    alignment: int
    et: ExecuTorchArenas
    wb_greedy: Mapping[Device, int]  # device → arena bytes
    wb_best: Mapping[Device, int]
    wb_lower_bound: Mapping[Device, int]  # peak of live aligned bytes of the workbench's tensors
    wb_delegates: tuple[DelegateOps, ...]
    et_tensors_best: Mapping[Device, int]  # workbench ``best`` on ExecuTorch's tensors and lifetimes
    et_tensors_lower_bound: Mapping[Device, int]  # lower bound of ExecuTorch's tensors
    one_sided: tuple[OneSided, ...]  # empty when ExecuTorch failed

    @property
    def one_op_delegates(self) -> bool:
        """Every device delegate holds exactly one op (device arenas then compare)."""
        return all(len(d.ops) == 1 for d in self.wb_delegates)

    @property
    def devices(self) -> tuple[Device, ...]:
        """Devices either side planned, host first."""
        return tuple(host_first([*self.wb_best, *self.et.arena_bytes]))

    def comparable(self, device: Device) -> bool:
        """The host always; a device when every device delegate is one op."""
        return device.is_host or self.one_op_delegates

    @property
    def unexplained(self) -> tuple[OneSided, ...]:
        return tuple(t for t in self.one_sided if t.reason is None)

    @property
    def rules_text(self) -> str:
        return rules_text(self.rules) or "(cpu only)"

    def one_sided_bytes(self, side: str, device: Device) -> dict[str, int]:
        """Bytes planned by ``side`` only on ``device``, per reason."""
        out: Counter = Counter()
        for t in self.one_sided:
            if t.side == side and t.device == device:
                out[t.reason or "unexplained"] += t.nbytes
        return dict(out)

    def rows(self) -> list[dict[str, Any]]:
        """One flat dict per device (a DataFrame row each)."""
        rows = []
        for device in self.devices:
            et_bytes = self.et.arena_bytes.get(device, 0) if self.et.ok else None
            best = self.wb_best.get(device, 0)
            rows.append(
                {
                    "case": self.model,
                    "rules": self.rules_text,
                    "skip_h2d": self.skip_h2d,
                    "skip_d2h": self.skip_d2h,
                    "device": str(device),
                    "comparable": self.comparable(device),
                    "et_bytes": et_bytes,
                    "wb_greedy": self.wb_greedy.get(device, 0),
                    "wb_best": best,
                    "wb_lower_bound": self.wb_lower_bound.get(device, 0),
                    "et_over_wb": (et_bytes / best if best else None) if et_bytes is not None else None,
                    "wb_best_on_et_tensors": self.et_tensors_best.get(device) if self.et.ok else None,
                    "et_tensors_lower_bound": self.et_tensors_lower_bound.get(device) if self.et.ok else None,
                    "et_only_bytes": sum(self.one_sided_bytes("executorch", device).values()),
                    "wb_only_bytes": sum(self.one_sided_bytes("workbench", device).values()),
                    "unexplained": sum(1 for t in self.unexplained if t.device == device),
                    "et_error": self.et.error,
                }
            )
        return rows


# --- the ExecuTorch side -----------------------------------------------------------


def executorch_arena_bytes(
    model: torch.nn.Module,
    example_inputs: tuple,
    rules: Optional[Mapping[str, Sequence[str] | str]] = None,
    skip_h2d: bool = False,
    skip_d2h: bool = False,
) -> ExecuTorchArenas:
    """Lower ``model`` with ExecuTorch and read its memory plan, per device.

    Args:
        model, example_inputs: as for ``torch.export.export``.
        rules: ``{device: [op patterns]}`` as ``workbench.place`` takes them, delegated
            with ``rule_partitioner``; None (or empty) lowers without a partitioner.
        skip_h2d, skip_d2h: ExecuTorch's ``skip_h2d_for_method_inputs`` /
            ``skip_d2h_for_method_outputs``, paired with not planning graph inputs /
            outputs, as its docs ask.

    Non-CPU memory planning is on; the planner is the pass's default (``greedy``,
    alignment 16). Raises ``ExecuTorchNotInstalled`` without executorch and
    ``PlacementError`` for malformed rules; an ExecuTorch failure is in ``.error``.
    """
    check_settings(((skip_h2d, skip_d2h),))
    if rules:
        parse_edge_rules(rules)  # bad rules fail before ExecuTorch runs
    mem = executorch_api()
    partitioner = rule_partitioner(rules) if rules else None

    def delegates() -> tuple[DelegateOps, ...]:  # as the partitioner tagged them, once it ran
        return partitioner.delegates if partitioner is not None else ()

    def read(program: Any, config: Any) -> ExecuTorchArenas:
        # rule 1: the import's reader of ExecuTorch's program gives the buffers and their devices
        buffers = read_program(program.executorch_program, host_only=True)
        devices = buffers.buffer_devices
        tensors = _read_tensors(program.exported_program().graph_module, devices, mem)
        return ExecuTorchArenas(
            buffers.arena_bytes, buffers.buffer_sizes, devices, tensors, _alignment(config), delegates()
        )

    def failed(exc: BaseException, stage: str, config: Any) -> ExecuTorchArenas:
        error, detail = error_text(exc)
        return ExecuTorchArenas({}, (), (), (), _alignment(config), delegates(), error, stage, detail)

    return lower(model, example_inputs, partitioner, ((skip_h2d, skip_d2h),), read, failed)[0]


def _alignment(config: Any) -> int:
    """The alignment of the config's ``MemoryPlanningPass`` (its default, 16 bytes)."""
    return int(config.memory_planning_pass.alignment)


def _delegate_output_ops(graph_module: torch.fx.GraphModule, call: torch.fx.Node) -> list[str]:
    """The op writing each output of a delegate, read off its original program."""
    lowered_module = cast(torch.fx.Node, call.args[0])  # the get_attr node of the lowered module
    lowered = getattr(graph_module, str(lowered_module.target))
    graph = lowered.original_module.graph_module.graph
    outputs = next(n for n in graph.nodes if n.op == "output").args[0]
    outputs = outputs if isinstance(outputs, (list, tuple)) else (outputs,)
    return [short_op_name(o) if isinstance(o, torch.fx.Node) and o.op == "call_function" else "input" for o in outputs]


def _read_tensors(graph_module: torch.fx.GraphModule, devices: tuple[Device, ...], mem: Any) -> tuple[ETTensor, ...]:
    """Every storage with a ``mem_id``, named by the node that writes it (rule 2)."""
    skip = {mem.alloc, mem.view}
    nodes = list(graph_module.graph.nodes)
    # An output of a multi-output op is read through a getitem, whose spec is that
    # output's; the getitem may hang off the op or off its ``out`` allocation.
    read = {id(s) for n in nodes if n.target is _getitem for s in mem.tensor_specs(n)}
    # weights, and the values ExecuTorch derives from them per call (permute_copy of a weight)
    constant = {n.name for n in nodes if n.op == "placeholder" and getattr(n.meta.get("spec"), "const", False)}
    seen: set[int] = set()
    out = []
    for node in nodes:
        if node.op in ("output", "get_attr") or node.target in skip or node.target is _getitem:
            continue
        specs = node.meta.get("spec")
        multi = isinstance(specs, (list, tuple))
        specs = list(specs) if multi else [specs]
        delegate_ops = _delegate_output_ops(graph_module, node) if node.target is mem.call_delegate else None
        for index, spec in enumerate(specs):
            if (
                spec is None
                or not hasattr(spec, "mem_id")
                or spec.mem_id is None
                or spec.const
                or spec.storage_base is not None  # shares another spec's storage
                or id(spec) in seen
            ):
                continue
            seen.add(id(spec))
            if node.op == "placeholder":
                op, kind = "input", "input"
            elif delegate_ops is not None:
                op, kind = delegate_ops[index], "delegate_output"
            else:
                op = short_op_name(node)
                kind = "copy" if op in ET_COPY_KINDS else "view_copy" if is_view_copy(op) else "activation"
            if multi and kind != "view_copy" and id(spec) not in read:
                kind = "unread_output"
            first = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
            source = first.name if kind == "copy" and first is not None else None
            of_constant = kind in ("view_copy", "copy") and first is not None and first.name in constant
            if of_constant:
                constant.add(node.name)
            out.append(
                ETTensor(
                    name=f"{node.name}[{index}]" if multi else node.name,
                    op=op,
                    kind=kind,
                    device=devices[spec.mem_id],
                    nbytes=int(spec.nbytes()),
                    size=int(spec.allocated_memory),
                    mem_id=int(spec.mem_id),
                    offset=int(spec.mem_offset),
                    start=int(spec.lifetime[0]),
                    end=int(spec.lifetime[1]),
                    source=source,
                    of_constant=of_constant,
                )
            )
    return tuple(out)


# --- the comparison ------------------------------------------------------------------


def compare_arenas(
    model: torch.nn.Module,
    example_inputs: tuple,
    rules: Optional[Mapping[str, Sequence[str] | str]] = None,
    skip_h2d: bool = False,
    skip_d2h: bool = False,
    *,
    name: Optional[str] = None,
) -> ArenaComparison:
    """Plan ``model`` under ``rules`` in both systems and compare the bytes per device.

    The workbench side plans the graph captured with ``decompose=True`` (the ops
    ``to_edge`` produces), placed with the same rules and propagated with the same flags,
    with ``greedy`` and ``best`` at ExecuTorch's alignment, graph inputs/outputs planned
    unless the matching flag hands them to the caller. ``et_tensors_best`` runs the
    workbench's ``best`` on ExecuTorch's own tensors and lifetimes, so the algorithms
    compare on identical input; ``one_sided`` lists the tensors that differ.

    The lifetimes of the tensors both sides plan need not agree: a tensor ExecuTorch
    materializes (a ``split_with_sizes_copy`` chunk) can end a base's life that the
    workbench extends through its views, and ExecuTorch's node order can differ. So the
    one-sided tensors say *what* differs, not a byte-exact split of the gap.
    """
    inputs = as_input_tuple(example_inputs)
    parsed = parse_edge_rules(rules) if rules else []
    et_result = executorch_arena_bytes(model, inputs, rules, skip_h2d, skip_d2h)
    alignment = et_result.alignment
    program = capture(model, inputs, decompose=True)
    placement = place(program, dict(rules) if rules else {})
    dg, greedy = workbench_plan(placement, skip_h2d, skip_d2h, "greedy", alignment)
    best = greedy.with_algorithm("best")
    et_best, et_lb = {}, {}
    one_sided: tuple[OneSided, ...] = ()
    if et_result.ok:
        one_sided = _account(et_result.tensors, workbench_tensors(best, dg, placement))
        for device in host_first(t.device for t in et_result.tensors):
            buffers = et_result.buffers(device)
            et_best[device] = assign_offsets(buffers, "best", alignment).arena_bytes
            et_lb[device] = lower_bound(buffers, alignment)
    return ArenaComparison(
        model=name or type(model).__name__,
        rules=freeze_rules(parsed),
        skip_h2d=skip_h2d,
        skip_d2h=skip_d2h,
        alignment=alignment,
        et=et_result,
        wb_greedy=dict(greedy.arena_bytes),
        wb_best=dict(best.arena_bytes),
        wb_lower_bound=dict(best.lower_bound),
        wb_delegates=delegate_ops(placement),
        et_tensors_best=et_best,
        et_tensors_lower_bound=et_lb,
        one_sided=one_sided,
    )


def workbench_plan(
    placement: Placement, skip_h2d: bool, skip_d2h: bool, algorithm: str, alignment: int
) -> tuple[DeviceGraph, MemoryPlan]:
    """The workbench's side of a memory comparison: ``placement`` propagated with the skip
    flags and planned by ``algorithm``, graph inputs / outputs left to the caller exactly
    when the matching flag hands them over (as on ExecuTorch's side)."""
    dg = propagate(
        placement,
        skip_h2d_for_method_inputs=skip_h2d,
        skip_d2h_for_method_outputs=skip_d2h,
    )
    memory = plan_memory(
        dg,
        algorithm,
        alignment=alignment,
        alloc_graph_inputs=not skip_h2d,
        alloc_graph_outputs=not skip_d2h,
    )
    return dg, memory


@dataclass(frozen=True)
class WorkbenchTensor:
    """One storage the workbench planned, with the op that writes it."""

    name: str
    op: str
    device: Device
    nbytes: int
    internal: bool  # written and read only inside one multi-op delegate


def workbench_tensors(memory: MemoryPlan, dg: DeviceGraph, placement: Placement) -> list[WorkbenchTensor]:
    """The workbench's planned storages (of ``memory``, a plan of ``dg``) with the op that writes each."""
    nodes = {n.name: n for n in dg.graph.nodes}
    outputs = set(dg.user_outputs)
    sizes = {d.name: len(d.nodes) for d in placement.delegates}
    out = []
    for alloc in memory.allocations.values():
        node = nodes[alloc.name]
        writer = node.args[0] if node.target is _getitem else node
        if node.op == "placeholder":
            op = "input"
        elif writer.name in dg.copy_table:
            op = f"{dg.copy_table[writer.name].kind}_copy"
        else:
            op = short_op_name(writer)
        delegate = placement.node_delegate.get(writer.name)
        readers = [u for name in (alloc.name, *alloc.aliases) for u in nodes[name].users]
        internal = (
            delegate is not None
            and sizes[delegate] > 1
            and alloc.name not in outputs
            and all(placement.node_delegate.get(u.name) == delegate for u in readers)
        )
        out.append(WorkbenchTensor(alloc.name, op, alloc.device, alloc.nbytes, internal))
    return out


def _account(et_tensors: Sequence[ETTensor], wb_tensors: Sequence[WorkbenchTensor]) -> tuple[OneSided, ...]:
    """Tensors planned by one side only, each with its reason (rule 3)."""
    result: list[OneSided] = []
    pending: list[ETTensor] = []
    for t in et_tensors:
        if t.kind in ("view_copy", "unread_output"):
            result.append(OneSided("executorch", t.device, t.name, t.op, t.nbytes, t.kind))
        else:
            pending.append(t)
    # match the rest as a multiset of (device, op, bytes); order does not matter
    wb_left: dict[tuple, list[WorkbenchTensor]] = defaultdict(list)
    for w in wb_tensors:
        wb_left[(w.device, w.op, w.nbytes)].append(w)
    et_left = []
    for t in pending:
        bucket = wb_left.get((t.device, t.op, t.nbytes))
        if bucket:
            bucket.pop()
        else:
            et_left.append(t)
    wb_rest = [w for bucket in wb_left.values() for w in bucket]
    direct = any(w.op == "d2d_copy" for w in wb_rest)
    host_legs = {t.name for t in et_tensors if t.op == "d2h_copy"}
    for t in et_left:
        reason = None
        if direct and (t.op == "d2h_copy" or (t.op == "h2d_copy" and t.source in host_legs)):
            reason = "through_host"
        elif t.op == "h2d_copy" and t.of_constant:
            reason = "resident_weight"
        elif t.op == "h2d_copy":
            reason = "per_argument_copy"
        result.append(OneSided("executorch", t.device, t.name, t.op, t.nbytes, reason))
    for w in wb_rest:
        reason = "through_host" if w.op == "d2d_copy" else "delegate_internal" if w.internal else None
        result.append(OneSided("workbench", w.device, w.name, w.op, w.nbytes, reason))
    return tuple(result)


def arena_table(comparisons: Iterable[ArenaComparison]) -> pd.DataFrame:
    """One row per (comparison, device); see ``ArenaComparison.rows`` for the columns."""
    rows = []
    for item in comparisons:
        if not isinstance(item, ArenaComparison):
            raise CrossCheckTypeError(
                f"arena_table takes ArenaComparison results (from compare_arenas), got {type(item).__name__}"
            )
        rows.extend(item.rows())
    return pd.DataFrame(rows)


# --- the cases -------------------------------------------------------------------------


def compare_arena_case(
    case: Case, settings: Sequence[tuple[bool, bool]] = ((False, False),)
) -> tuple[ArenaComparison, ...]:
    """``compare_arenas`` on one of ``ARENA_CASES`` under each ``(skip_h2d, skip_d2h)``."""
    if not isinstance(case, Case):
        raise CrossCheckTypeError(
            f"compare_arena_case takes a workbench.compare.Case (see ARENA_CASES), got {type(case).__name__}"
        )
    out = []
    for skip_h2d, skip_d2h in check_settings(settings):
        model, inputs = case.build()
        out.append(compare_arenas(model, inputs, case.rules, skip_h2d, skip_d2h, name=case.name))
    return tuple(out)
