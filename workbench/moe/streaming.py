"""MoE streaming: an expert matmul of a streamed weight reads only the experts its router chose.

The ``routed`` copy variant (``copy_variants``), declared here: the rows of a streamed
host weight that an index lists, of which only the first ``count`` are real. Its
rewrite hook serves propagation once the package is imported (``workbench`` imports it).

Rules:
1. A grouped expert matmul ``grouped(x, view(w), offs)`` (``aten._grouped_mm``,
   ``transformers::grouped_mm_fallback``; ``view`` a chain of view ops that keep dimension
   0, such as ``transpose(w, -2, -1)``, or none) of a streamed weight on a device
   multiplies each group's rows by its slab, and a group without rows multiplies nothing.
   So it becomes ``ids, count = present_groups(offs, U)`` (the groups with rows, padded to
   the static size U = min(E, S) for S routed rows), ``r = gather_h2d_routed_copy(w, ids,
   count)`` (only the ``count`` present slabs cross the link; padding rows are zeros), and
   ``grouped(x, view(r), offs[ids])``: the padding repeats the last present group, whose
   offset is S, so padding groups are empty and the result is the captured op's, exactly.
2. ``index.Tensor(view(w), [ids])`` (a batched expert matmul's gather, one slab per routed
   row, duplicates included) becomes ``u, count, inverse = unique_ids(ids, U)`` (U = min(E,
   len(ids))), ``r = gather_h2d_routed_copy(w, u, count)`` and ``index.Tensor(view(r),
   [inverse])``: each distinct slab crosses once, and rows are repeated on the device.
   A lookup ``embedding(w, ids)`` of a streamed table (rows of lookup tables as experts,
   ``discovery`` rule 1e) is the same gather, and becomes ``embedding(r, inverse)``.
3. ``present_groups`` and ``unique_ids`` are shared per (input, device); a routed copy per
   (weight, ids, device); the view chain is re-emitted on the routed rows, and a view of a
   streamed weight read only by rewritten ops is not emitted over the whole weight.
4. The routed copy's record holds ``count``, ``slots`` (U) and the ``routing`` (T tokens, k
   of E experts each, read from the router's ``topk``), from which ``estimate`` charges
   the expected distinct experts. A run moves ``count`` rows (its event's bytes) and
   zeroes the padding on the device; ``counted_gather_stats`` says how many. On ``cuda`` one
   kernel reads ``count`` on the device, so the host never waits for it; a pageable
   source falls back to torch (the host reads ``count``).
5. ``estimate`` charges a grouped expert matmul the slabs of the expected distinct experts
   under uniform routing, E·(1 − (1 − k/E)^T) for T tokens each routed to k of E experts
   (``workbench.index_draws`` rule 2; at most its groups), when its router is found
   (``sim_timing.register_group_estimate``).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import AbstractSet, Any, Callable, Mapping, Optional

import torch
import torch.fx

from ..builtin_copies import reads, rows_like, streamed_rows
from ..copy_ops import GATHER_COUNTED, PRESENT_GROUPS, UNIQUE_IDS, counted_rows
from ..copy_variants import CopyVariant, register_copy_variant
from ..devices import CPU, CopyKind, Device
from .expert_ops import Routing, grouped_operands, routing_of
from ..graph_values import is_view_op, packet_name, shape_upper_bound, value_of
from ..kernels.copies import pointer_kind
from ..propagate import CopyFacts, CopyRecord, CopyRole
from ..machine.cost_model import concrete_size
from ..runtime.sim_timing import copy_cost, register_group_estimate

__all__ = ["GATHER_ROUTED", "ROUTED", "expected_routed_groups"]

#: The op of a routed copy: the counted gather of the experts a router chose.
GATHER_ROUTED = GATHER_COUNTED

_ROLE = str(CopyRole.COUNTED)


@dataclass(frozen=True)
class _StreamedUse:
    """A device expert op that reads a streamed weight whole but uses only routed rows (rules 1, 2)."""

    form: str  # "grouped" (rule 1) or "index" (rule 2)
    weight: torch.fx.Node  # the streamed constant's placeholder (captured graph)
    views: tuple[torch.fx.Node, ...]  # view ops from the weight to what the op reads, in order
    operand: torch.fx.Node  # what the op reads in the weight's place: the last view, or the weight
    selector: torch.fx.Node  # grouped: the cumulative offsets; index: the ids
    slots: int  # U: the static number of rows gathered (real ones, then padding)
    routing: Optional[Routing]  # the router behind the op, if found


def _streamed_uses(
    program: Any, streamed: AbstractSet[str], placed: Mapping[str, Device]
) -> dict[torch.fx.Node, _StreamedUse]:
    """Rules 1, 2: every device op of the captured graph that can read only the routed rows
    of a streamed weight."""
    if not streamed:
        return {}
    uses = {}
    for node in program.graph.nodes:
        if node.op != "call_function" or placed[node.name].is_host:
            continue
        use = _grouped_use(node, streamed) or _index_use(node, streamed)
        if use is not None:
            uses[node] = use
    return uses


def _grouped_use(node: torch.fx.Node, streamed: AbstractSet[str]) -> Optional[_StreamedUse]:
    operands = grouped_operands(node)
    if operands is None or operands.bias is not None:
        return None  # a per-group bias would need its rows too: read whole
    chain = _weight_chain(operands.weight, streamed)
    if chain is None:
        return None
    weight, views = chain
    experts = value_of(weight).shape[0]
    x, offs = value_of(operands.x), value_of(operands.offs)
    if not isinstance(x, torch.Tensor) or x.dim() != 2 or not isinstance(offs, torch.Tensor) or tuple(offs.shape) != (experts,):
        return None
    rows = shape_upper_bound(x, f"value {operands.x.name!r}", unbounded="hint")[0]
    slots = max(1, min(experts, rows))
    return _StreamedUse("grouped", weight, views, operands.weight, operands.offs, slots, routing_of(operands.offs))


def _index_use(node: torch.fx.Node, streamed: AbstractSet[str]) -> Optional[_StreamedUse]:
    if node.target is torch.ops.aten.embedding.default and len(node.args) >= 2:
        source, ids = node.args[0], node.args[1]  # rule 2: a lookup is w[ids]
    elif node.target is torch.ops.aten.index.Tensor and len(node.args) == 2:
        source, indices = node.args
        if not isinstance(indices, (list, tuple)) or len(indices) != 1:
            return None
        ids = indices[0]
    else:
        return None
    if not isinstance(source, torch.fx.Node):
        return None
    if not isinstance(ids, torch.fx.Node):
        return None
    val = value_of(ids)
    if not isinstance(val, torch.Tensor) or val.dtype not in (torch.int64, torch.int32) or not 1 <= val.dim() <= 3:
        return None  # a boolean mask, or no index on dimension 0
    chain = _weight_chain(source, streamed)
    if chain is None:
        return None
    weight, views = chain
    count = math.prod(shape_upper_bound(val, f"value {ids.name!r}", unbounded="hint"))
    slots = max(1, min(value_of(weight).shape[0], count))
    return _StreamedUse("index", weight, views, source, ids, slots, routing_of(ids))


def _weight_chain(operand: torch.fx.Node, streamed: AbstractSet[str]) -> Optional[tuple[torch.fx.Node, tuple[torch.fx.Node, ...]]]:
    """(streamed placeholder, views) when ``operand`` is a streamed weight seen through view
    ops that keep its dimension 0 (its experts), else None."""
    views = []
    node = operand
    while node.op == "call_function":
        if not _keeps_rows(node):
            return None
        views.append(node)
        source = node.args[0]
        if not isinstance(source, torch.fx.Node):
            return None
        node = source
    if node.op != "placeholder" or node.name not in streamed:
        return None
    val = value_of(node)
    if not isinstance(val, torch.Tensor) or val.dim() < 1:
        return None
    return node, tuple(reversed(views))


def _keeps_rows(view: torch.fx.Node) -> bool:
    """True for a view op whose dimension 0 is its input's dimension 0 (it selects, reorders
    or adds only other dimensions), so it commutes with gathering rows."""
    if not is_view_op(view.target) or not view.args or not isinstance(view.args[0], torch.fx.Node):
        return False
    source = value_of(view.args[0])
    if not isinstance(source, torch.Tensor) or source.dim() == 0:
        return False
    rank, name = source.dim(), packet_name(view)

    def arg(position: int, key: str, default: Any) -> Any:
        return view.args[position] if len(view.args) > position else view.kwargs.get(key, default)

    if name == "aten.transpose":
        return arg(1, "dim0", 0) % rank != 0 and arg(2, "dim1", 0) % rank != 0
    if name == "aten.permute":
        dims = arg(1, "dims", [0])
        return bool(dims) and dims[0] % rank == 0
    if name in ("aten.slice", "aten.select"):
        return arg(1, "dim", 0) % rank != 0
    if name == "aten.unsqueeze":
        return arg(1, "dim", 0) % (rank + 1) != 0
    return name == "aten.alias"


def _absorbed_views(uses: Mapping[torch.fx.Node, _StreamedUse]) -> set[torch.fx.Node]:
    """Views of streamed weights that only rewritten ops (or other such views) read: they
    are emitted over the routed rows only (rule 3)."""
    absorbed = {view for use in uses.values() for view in use.views}
    changed = True
    while changed:
        changed = False
        for view in list(absorbed):
            if any(u not in uses and u not in absorbed for u in view.users):
                absorbed.discard(view)
                changed = True
    return absorbed




def _prepare(context: Any) -> None:
    """Find the ops rules 1 and 2 rewrite, and defer the views only they read (rule 3)."""
    uses = _streamed_uses(context.program, context.streamed, context.placement.op_device)
    state = context.state(_ROLE)
    state["uses"] = uses
    state["absorbed"] = _absorbed_views(uses)
    context.defer(state["absorbed"])


def _rewrite(context: Any, old: torch.fx.Node, target: Device) -> Optional[torch.fx.Node]:
    """Rules 1, 2: the captured expert op reading only the routed rows of its weight."""
    state = context.state(_ROLE)
    use = state.get("uses", {}).get(old)
    if use is None:
        return None
    selector = context.read(use.selector, target, old.name)
    distinct = _distinct(context, use, selector, target, old)
    ids, count = distinct[0], distinct[1]
    operand = _replay_views(context, use, _routed_copy(context, use, ids, count, target, old), target)
    if use.form == "grouped":
        swap = {use.operand: operand, use.selector: _routed_offsets(context, use, selector, ids, target, old)}
    else:
        swap = {use.operand: operand, use.selector: distinct[2]}
    return context.copy_of(old, target, swap)


def _distinct(context: Any, use: _StreamedUse, selector: torch.fx.Node, target: Device, old: torch.fx.Node) -> tuple[torch.fx.Node, ...]:
    """``present_groups`` (grouped) or ``unique_ids`` (index) of ``selector`` on ``target``,
    and its results: ids, count[, inverse] (shared per selector and device)."""
    memo = context.state(_ROLE).setdefault("distinct", {})
    key = (selector, target)
    if key not in memo:
        op, parts = (PRESENT_GROUPS, ("ids", "count")) if use.form == "grouped" else (UNIQUE_IDS, ("ids", "count", "inverse"))
        base = context.fresh_name(f"{use.selector.name}_distinct")
        node = context.emit_op(op, (selector, use.slots), base, target, old)
        memo[key] = tuple(
            context.emit_getitem(node, i, context.fresh_name(f"{base}_{part}"), target, old) for i, part in enumerate(parts)
        )
    return memo[key]


def _routed_copy(context: Any, use: _StreamedUse, ids: torch.fx.Node, count: torch.fx.Node, target: Device, old: torch.fx.Node) -> torch.fx.Node:
    """The routed copy of ``use``'s weight: the ``count`` real rows of ``ids`` (shared per
    weight, ids and device)."""
    memo = context.state(_ROLE).setdefault("copies", {})
    source = context.new_node(use.weight)
    key = (source, ids, target)
    found = memo.get(key)
    if found is None:
        facts = CopyFacts(
            CopyKind.H2D, CPU, target, source, CopyRole.COUNTED,
            index=ids, count=count, routing=use.routing, slots=int(value_of(ids).shape[0]),
        )  # fmt: skip
        found = context.emit_copy(GATHER_ROUTED, (source, ids, count, str(CPU), str(target)), context.fresh_name(f"{old.name}_gather"), facts)
        context.set_value(found, old, rows_like(value_of(source), value_of(ids)))
        memo[key] = found
    context.facts_of(found).serves.append(old.name)
    return found


def _replay_views(context: Any, use: _StreamedUse, rows: torch.fx.Node, target: Device) -> torch.fx.Node:
    """``use``'s chain of views, applied to the routed rows on ``target``; an absorbed view
    keeps its captured name the first time it is emitted."""
    absorbed = context.state(_ROLE)["absorbed"]
    current = rows
    for view in use.views:
        name = view.name if view in absorbed and context.claim_name(view.name) else context.fresh_name(f"{view.name}_routed")
        current = context.emit_op(view.target, (current, *view.args[1:]), name, target, view, view.kwargs)
    return current


def _routed_offsets(context: Any, use: _StreamedUse, offs: torch.fx.Node, ids: torch.fx.Node, target: Device, old: torch.fx.Node) -> torch.fx.Node:
    """``offs[ids]``: the cumulative row counts of the present groups (rule 1)."""
    memo = context.state(_ROLE).setdefault("offsets", {})
    key = (offs, ids)
    if key not in memo:
        name = context.fresh_name(f"{use.selector.name}_routed")
        memo[key] = context.emit_op(torch.ops.aten.index_select.default, (offs, 0, ids), name, target, old)
    return memo[key]


def _reason(context: Any, facts: CopyFacts, readers: list[str]) -> str:
    assert facts.index is not None and facts.count is not None  # a routed copy always has both
    routing = facts.routing
    chose = (
        f"{routing.tokens} token(s) routed to {routing.top_k} of {routing.experts} experts each"
        if routing is not None
        else "the router"
    )
    return (
        f"{', '.join(readers)} on {facts.dst} {reads(readers)} {streamed_rows(context, facts)} that {chose} chose, "
        f"for {', '.join(facts.serves)}: {facts.index.name!r} lists the distinct ones in {facts.slots} slots and "
        f"{facts.count.name!r} says how many are real; only those rows cross the link, once each (nbytes is the "
        "upper bound: every slot real)"
    )


# -- running it (rule 4) ---------------------------------------------------------------------


def _sim_move(dst: torch.Tensor, src: torch.Tensor, index: torch.Tensor, count: torch.Tensor, run: Any, stream: Any) -> Callable[[], int]:
    """Rows ``src[index[j]]`` for ``j < count`` into the device slot, zeros after."""
    rows = dst.view((-1,) + tuple(src.shape[1:]))  # (U, *row), the device slot
    n = counted_rows(count, rows.shape[0])
    if n:
        torch.index_select(src, 0, index.reshape(-1)[:n].to(torch.long), out=rows[:n])
    rows[n:].zero_()
    return lambda: n


def _cuda_move(dst: torch.Tensor, src: torch.Tensor, index: torch.Tensor, count: torch.Tensor, run: Any, stream: Any) -> Callable[[], int]:
    """One routed-gather kernel over mapped host memory, reading ``count`` on the device; a
    pageable source falls back to torch (the host reads ``count``)."""
    if src.device.type == "cpu" and src.numel() and pointer_kind(src.data_ptr()) != "pinned":
        rows = dst.view((-1,) + tuple(src.shape[1:]))
        n = counted_rows(count, rows.shape[0])  # synchronizes: the host must know which rows to read
        with torch.cuda.stream(stream):
            if n:
                fetched = torch.index_select(src, 0, index.reshape(-1)[:n].to(torch.long).cpu())
                rows[:n].copy_(fetched, non_blocking=False)
            rows[n:].zero_()
        return lambda: n
    moved = run.exec.engine(dst.device.index).gather_counted_rows(dst.data_ptr(), src, index.reshape(-1), count, stream)
    return functools.cache(lambda: int(moved[0]))  # read once, after the call has synchronized


def _handler(move: Callable[..., Callable[[], int]]) -> Callable[..., None]:
    """The ``count`` real rows cross, the padding is zeroed; the call's
    ``stats("routed")`` says how many moved."""

    def handler(run: Any, entry: Any, record: CopyRecord, dst: torch.Tensor, x: torch.Tensor, index: Any) -> None:
        step, node = entry.step, entry.node
        assert record.count is not None  # a routed copy always has its count
        count = run.value(record.count, record.dst)
        slots = index.numel()
        row_bytes = (dst.numel() * dst.element_size()) // slots if slots else 0
        run.clock.before(step)
        if slots and row_bytes:
            moved = move(dst, x, index, count, run, run.exec.copy_stream(entry.lane_device))
        else:
            moved = lambda: 0  # noqa: E731
        model = run.model
        link = lambda: moved() * row_bytes  # noqa: E731  (cuda: known once the call finished)
        run.clock.after(step, lambda: copy_cost(model, step, link()), link)
        run.stats(_ROLE).append((node.name, slots, row_bytes, moved))

    return handler


def _cost(model: Any, step: Any, node: torch.fx.Node, record: CopyRecord, workload: Any) -> Callable[[], tuple[float, int, int]]:
    """Rule 4: the expected distinct experts' rows under uniform routing."""
    nbytes = int(round(record.expected_nbytes()))
    return lambda: copy_cost(model, step, nbytes)


def _check(record: CopyRecord, node: torch.fx.Node, nodes: Mapping[str, torch.fx.Node]) -> str:
    """Rule 4 as plan files are checked: ``slots`` are the rows of the node's result, and
    ``routing`` is what the router behind its index gives."""
    val = value_of(node)
    rows = int(val.shape[0]) if isinstance(val, torch.Tensor) and val.dim() else 0
    if record.slots != rows:
        return f".slots is {record.slots}, but node {node.name!r} gathers {rows} rows"
    routing = routing_of(nodes[record.index]) if record.index is not None else record.routing
    if record.routing != routing:
        return f".routing is {record.routing}, but the router behind {record.index!r} gives {routing}"
    return ""


def expected_routed_groups(node: torch.fx.Node) -> Optional[float]:
    """Rule 5: the groups a grouped expert matmul is expected to read under uniform
    routing (at most its groups), or None for any other node or an unknown router."""
    operands = grouped_operands(node)
    if operands is None:
        return None
    routing = routing_of(operands.offs)
    weight = value_of(operands.weight)
    if routing is None or not isinstance(weight, torch.Tensor) or weight.dim() == 0:
        return None
    return min(float(concrete_size(weight.shape[0])), routing.expected_distinct())


register_group_estimate(expected_routed_groups)


ROUTED = register_copy_variant(
    CopyVariant(
        role=_ROLE,
        ops={GATHER_ROUTED: CopyKind.H2D},
        inputs=("value", "index", "count"),
        handlers={"sim": _handler(_sim_move), "cuda": _handler(_cuda_move)},
        cost=_cost,
        render=lambda record: f"the rows of {record.value} that {record.index} lists, {record.count} of them real",
        rewrite=_rewrite,
        prepare=_prepare,
        reason=_reason,
        check=_check,
        capturable=False,  # the host reads the count of real rows to know how many to move
    )
)
