"""Misses computed on the host: one MoE layer's expert computation split between its cache
on the device and its host-resident weights (``cache_graph`` rule 5).

``split_misses(graph, layer, found, ids, slabs, slots, constants, per_expert)`` rewrites,
in place, the graph of a program with expert caches: the ops that compute with the expert
weights run twice, on the device from the cache slots and on the host from the host
weights, and every value that leaves them keeps the device's result for a hit and the
host's for a miss. It returns the ``Split`` (the lookups, the merges, the host ops).

Rules (``ids`` ``(N,)`` the routed rows' experts; ``found`` the selections of the layer's
weights by ``ids``, one row per routed row):
  1. *Row-wise values*: a value is row-wise with lead ``d`` when its leading ``d`` dims
     (of product N) index the routed rows, in order, and row ``r`` depends only on row
     ``r`` of the selected weights. The selections have lead 1; an op of the experts
     (``ExpertLayer.owns``) reading row-wise values is row-wise when it is: a
     ``view``/``reshape`` (its lead: the fewest leading dims of product N, rows stay
     contiguous); a shape op, reduction or softmax acting only on dims at or after the
     lead (``getitem`` of a split: its lead); a pointwise op whose row-wise inputs share
     the output's dims and leading sizes; ``linear(x, W, b)`` with ``x`` row-wise on dims
     before its last; a matmul (``matmul``, ``mm``, ``bmm``, ``baddbmm``) whose row-wise
     operands share one lead that leaves the contracted dim out (the left operand's last
     dim, the right's last two). Inputs from outside (activations, shared weights)
     broadcast over or align with the rows.
  2. *The region*: the row-wise values of the layer, from the selections on, in graph
     order; a region value is *activated* when it depends on a value from outside the
     region that is no constant of the program (the expert weights' rows alone are not).
     The region runs twice with static shapes: on the device, the selections read the
     cache in place (``index_select(slabs, 0, positions)``), and on the host, a copy of
     each op reads the host weights.
  3. *Merges*: an activated region value read outside the region becomes
     ``where(hits viewed on its lead, device value, host value)``; the host value crosses
     to the device, an activation.
  4. *Split contractions*: a region value that is weight rows alone may leave the region
     only as one operand of a matmul (``matmul``, ``mm``, ``bmm``) whose other operand is
     no such value: each term of the matmul's sum reads one element of it, so the matmul
     is linear in it, and it equals the sum of the matmul of its hit rows (the missed
     rows zero: ``where(hit, value, 0)``) on the device and the matmul of its missed rows
     (``where(hit, 0, host value)``) on the host; the other operand is the merged value
     on the device and the host value on the host (an outside value: itself on both).
     The device adds the two. Lookup-table experts (transformers' Doge) end so: a token's
     output is ``sum_k g_k up_k``, linear in the up table's rows. Every other reader of
     weight rows alone would need the weights on the device: a ``CacheGraphError`` naming
     the reader and what works (``on_miss='copy'``).
  5. *One module per expert* (``per_expert``: ``expert_reads`` stacked them; ``ids`` is
     ``arange(E)`` and expert ``e`` reads ``select(rows, 0, e)`` of each stacked weight):
     expert ``e``'s subgraph is its selects and the ops traced in its module
     (``{container}.{e}`` and below) that read them, transitively. On the device its
     selects read its slot (``select(index_select(slab, 0, positions[e:e+1]), 0, 0)``),
     on the host the host weight (``select(w, 0, e)``, a view: nothing is gathered); its
     activated values read outside it become ``where(hits[e], device value, host
     value)``. The row selections of the whole stack are removed. A value of weights
     alone leaving the subgraph is a ``CacheGraphError``.
  6. *Cost*: every host op carries a ``RowShare`` of ``hits`` (``where=False``): it is
     charged the share of rows that missed. An expert's subgraph (rule 5) is charged the
     layer's miss share: the stacked experts have one shape, so the layer's host time is
     the missed experts' time.
  7. Outputs equal eager: a hit row runs the same ops on the same bytes, a missed row is
     the original; a split contraction (rule 4) adds its terms in another order (exact
     up to the rounding of that sum).
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
from typing import Any, Optional

import torch
import torch.fx

from ..graph_values import call_node, value_of
from ..node_facts import mark_row_share
from ..place import module_paths
from .cache_ops import HITS, POSITIONS
from .discovery import ExpertLayer
from .expert_reads import CacheGraphError

__all__ = ["Split", "split_misses"]

_aten = torch.ops.aten


@dataclass(frozen=True)
class Split:
    """What ``split_misses`` added to one layer."""

    hits: torch.fx.Node  # expert_cache_hits (N,)
    positions: torch.fx.Node  # expert_cache_positions (N,)
    merges: tuple[torch.fx.Node, ...]  # device nodes where the layer's results leave the split
    host: frozenset[str]  # the host ops (placed on the host)


def split_misses(
    graph: torch.fx.Graph,
    layer: ExpertLayer,
    found: list[torch.fx.Node],
    ids: torch.fx.Node,
    slabs: dict[str, torch.fx.Node],
    slots: torch.fx.Node,
    constants: set[str],
    per_expert: bool,
) -> Split:
    """Rules 1-7 on one layer: ``found`` select rows ``ids`` of the layer's weights
    (placeholders, keys of ``slabs``); ``constants`` names the program's constants."""
    first = next(n for n in graph.nodes if n in set(found))
    base = layer.module.replace(".", "_")
    with graph.inserting_before(first):
        hits = call_node(graph, HITS, (ids, slots), f"{base}_cache_hits")
        positions = call_node(graph, POSITIONS, (ids, slots), f"{base}_cache_positions")
    split = _Splitter(graph, layer, hits, constants)
    if per_expert:
        split.experts(found, slabs, positions)
    else:
        split.rows(found, slabs, positions, int(value_of(ids).numel()))
    if not split.merges:
        raise CacheGraphError(f"{layer.module}: no expert output found to merge")
    return Split(hits, positions, tuple(split.merges), frozenset(n.name for n in split.host))


class _Splitter:
    """The host copies, merges and split contractions of one layer."""

    def __init__(self, graph: torch.fx.Graph, layer: ExpertLayer, hits: torch.fx.Node, constants: set[str]) -> None:
        self.graph, self.layer, self.hits, self.constants = graph, layer, hits, constants
        self.host: list[torch.fx.Node] = []
        self.merges: list[torch.fx.Node] = []

    # -- rules 1-4 ------------------------------------------------------------------------

    def rows(self, found: list[torch.fx.Node], slabs: dict[str, torch.fx.Node], positions: torch.fx.Node, rows: int) -> None:
        """Rules 1-4: the region, its host copy, the device's reads of the cache, merges, splits."""
        lead = _region(self.graph, found, rows, self.layer)
        activated = self._activated(lead, set(found))
        splits = self._splits(lead, activated)
        host_of = self._host_copies(lead)
        for node in found:  # the device reads the cache in place: the slot of each row
            node.target = _aten.index_select.default
            weight = node.args[0]
            assert isinstance(weight, torch.fx.Node)
            node.args = (slabs[weight.name], 0, positions)
        merged = {}
        for node, d in lead.items():
            readers = [u for u in node.users if u not in lead and u not in self.host]
            if node in activated and readers:  # a tensor: a tuple's readers are its getitems, in the region
                merged[node] = self._merge(node, host_of[node], d, None, readers)
        host_value = {merged[n]: host_of[n] for n in merged} | host_of
        for reader, weight_rows in splits.items():
            self._split(reader, weight_rows, lead[weight_rows], host_value)

    def _activated(self, region: dict[torch.fx.Node, Any], found: set[torch.fx.Node]) -> set[torch.fx.Node]:
        """Rule 2: the region values that depend on a value from outside it, no constant."""
        out: set[torch.fx.Node] = set()
        for node in region:
            if node in found:
                continue
            for a in node.all_input_nodes:
                outside = a not in region and a.name not in self.constants and isinstance(value_of(a), torch.Tensor)
                if outside or a in out:
                    out.add(node)
                    break
        return out

    def _splits(self, lead: dict[torch.fx.Node, int], activated: set[torch.fx.Node]) -> dict[torch.fx.Node, torch.fx.Node]:
        """Rule 4: each outside reader of weight rows alone → those rows (or a CacheGraphError)."""
        out: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in lead:
            if node in activated:
                continue
            for reader in node.users:
                if reader in lead:
                    continue
                if not _linear_in(reader, node, lead, activated) or out.get(reader, node) is not node:
                    raise CacheGraphError(
                        f"{self.layer.module}: the selected expert rows reach {reader.name} ({reader.target}) through "
                        f"{node.name} without any activation, and {reader.name} is not row-wise (one row per routed "
                        "row) nor a matmul linear in them; host_compute would have to copy weights to the device. "
                        "host_compute splits row-wise expert ops and matmuls over the rows (cache_graph rule 5); "
                        "cache these experts with on_miss='copy'"
                    )
                out[reader] = node
        return out

    def _host_copies(self, region: dict[torch.fx.Node, Any]) -> dict[torch.fx.Node, torch.fx.Node]:
        """Rule 2: a host copy of each region op, right after it, charged the miss share."""
        host_of: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in region:
            with self.graph.inserting_after(node):
                clone = self.graph.node_copy(node, lambda a: host_of.get(a, a))
            host_of[node] = clone
            self._on_host(clone)
        return host_of

    def _on_host(self, node: torch.fx.Node) -> None:
        self.host.append(node)
        if isinstance(value_of(node), torch.Tensor) and node.target is not operator.getitem:
            mark_row_share(node, self.hits, where=False)

    def _row_mask(self, node: torch.fx.Node, lead: int, before: torch.fx.Node) -> torch.fx.Node:
        """``hits`` viewed on ``node``'s lead dims (rule 3), right before ``before``."""
        val = value_of(node)
        shape = list(val.shape[:lead]) + [1] * (val.dim() - lead)
        with self.graph.inserting_before(before):
            return call_node(self.graph, _aten.view.default, (self.hits, shape), f"{node.name}_hit_rows")

    def _merge(self, node: torch.fx.Node, host: torch.fx.Node, lead: Optional[int], flag: Optional[torch.fx.Node],
               readers: list[torch.fx.Node]) -> torch.fx.Node:  # fmt: skip
        """Rules 3, 5: ``where(mask, node, host)`` right after ``host``, read by ``readers`` in
        place of ``node``; the mask is ``hits`` on ``node``'s lead, or the expert's ``flag``."""
        after = host.next
        mask = flag if flag is not None else self._row_mask(node, lead or 1, after)
        with self.graph.inserting_before(after):
            merged = call_node(self.graph, _aten.where.self, (mask, node, host), f"{node.name}_merged")
        for reader in readers:
            reader.replace_input_with(node, merged)
        self.merges.append(merged)
        return merged

    def _split(self, reader: torch.fx.Node, rows: torch.fx.Node, lead: int,
               host_value: dict[torch.fx.Node, torch.fx.Node]) -> None:  # fmt: skip
        """Rule 4: ``reader`` (a matmul linear in ``rows``) as device hits + host misses."""
        mask = self._row_mask(rows, lead, reader)
        with self.graph.inserting_before(reader):
            hit_rows = call_node(self.graph, _aten.where.ScalarOther, (mask, rows, 0.0), f"{rows.name}_hit_rows_only")
        reader.replace_input_with(rows, hit_rows)
        after = reader.next
        with self.graph.inserting_before(after):
            missed = call_node(self.graph, _aten.where.ScalarSelf, (mask, 0.0, host_value[rows]), f"{rows.name}_missed_rows_only")
            self._on_host(missed)
            on_host = self.graph.node_copy(reader, lambda a: missed if a is hit_rows else host_value.get(a, a))
            self._on_host(on_host)
            total = call_node(self.graph, _aten.add.Tensor, (reader, on_host), f"{reader.name}_hits_and_misses")
        reader.replace_all_uses_with(total, delete_user_cb=lambda user: user is not total)
        self.merges.append(total)

    # -- rule 5 ---------------------------------------------------------------------------

    def experts(self, found: list[torch.fx.Node], slabs: dict[str, torch.fx.Node], positions: torch.fx.Node) -> None:
        """Rule 5: each expert's subgraph split; the whole stack's row selections removed."""
        selects: dict[int, list[torch.fx.Node]] = {}
        for node in found:
            for user in node.users:
                if user.target is not _aten.select.int or user.args[1] != 0 or not isinstance(user.args[2], int):
                    raise CacheGraphError(f"{self.layer.module}: the stacked expert rows {node.name} are read by "
                                          f"{user.name} ({user.target}), not by one expert's select")  # fmt: skip
                selects.setdefault(user.args[2], []).append(user)
        for e, picks in sorted(selects.items()):
            self._expert(e, picks, slabs, positions)
        for node in found:
            self.graph.erase_node(node)

    def _expert(self, e: int, picks: list[torch.fx.Node], slabs: dict[str, torch.fx.Node], positions: torch.fx.Node) -> None:
        """Rule 5 for expert ``e``, whose selects are ``picks``."""
        prefix = f"{self.layer.module}.{e}"
        region: dict[torch.fx.Node, None] = dict.fromkeys(picks)
        for node in self.graph.nodes:
            if node in region or node.op != "call_function" or not any(a in region for a in node.all_input_nodes):
                continue
            unpacks = node.target is operator.getitem  # of the expert's tuple, wherever it is traced
            if unpacks or any(p == prefix or p.startswith(prefix + ".") for p in module_paths(node)):
                region[node] = None
        region = {n: None for n in self.graph.nodes if n in region}  # graph order
        activated = self._activated(region, set(picks))
        host_of = self._host_copies(region)
        base = self.layer.module.replace(".", "_")
        first = next(n for n in self.graph.nodes if n in region)
        with self.graph.inserting_before(first):
            flag = call_node(self.graph, _aten.select.int, (self.hits, 0, e), f"{base}_expert_{e}_hit")
            slot = call_node(self.graph, _aten.slice.Tensor, (positions, 0, e, e + 1), f"{base}_expert_{e}_position")
        for pick in picks:
            stacked = pick.args[0]
            assert isinstance(stacked, torch.fx.Node)
            weight = stacked.args[0]
            assert isinstance(weight, torch.fx.Node)
            host_of[pick].args = (weight, 0, e)  # a view of the host weight: nothing gathered
            with self.graph.inserting_before(pick):
                read = call_node(self.graph, _aten.index_select.default, (slabs[weight.name], 0, slot), f"{pick.name}_slot")
            pick.args = (read, 0, 0)
        for node in region:
            readers = [u for u in node.users if u not in region and u not in self.host]
            if not readers:
                continue
            if node not in activated or not isinstance(value_of(node), torch.Tensor):
                raise CacheGraphError(
                    f"{self.layer.module}: expert {e}'s module gives {node.name} to {readers[0].name}, which is no "
                    "tensor computed from an activation (its weights alone, or a tuple); host_compute computes each "
                    "expert module on the host or the device and merges its output tensors; cache these experts with "
                    "on_miss='copy'"
                )
            self._merge(node, host_of[node], None, flag, readers)


# -- rule 1 ----------------------------------------------------------------------------------

#: Shape ops that keep the rows when they act on no dim before the lead (``_dims``).
_SHAPE_OPS = frozenset({
    _aten.unsqueeze.default, _aten.squeeze.dim, _aten.squeeze.dims, _aten.chunk.default, _aten.split.Tensor,
    _aten.split_with_sizes.default, _aten.select.int, _aten.slice.Tensor, _aten.expand.default, _aten.transpose.int,
    _aten.permute.default, _aten.clone.default, _aten.contiguous.default, _aten.alias.default, _aten._to_copy.default,
    _aten.to.dtype, _aten.detach.default, _aten.sum.dim_IntList, _aten.mean.dim, _aten.amax.default,
    _aten.amin.default, _aten.softmax.int, _aten._softmax.default, _aten.log_softmax.int,
})  # fmt: skip
_VIEWS = frozenset({_aten.view.default, _aten.reshape.default, _aten._unsafe_view.default})
#: Matmuls: (the operands' positions, how many trailing dims of each operand the rows must leave out).
_MATMULS: dict[Any, tuple[tuple[int, int], ...]] = {
    _aten.matmul.default: ((0, 1), (1, 2)),
    _aten.mm.default: ((0, 1), (1, 2)),
    _aten.bmm.default: ((0, 1), (1, 2)),
    _aten.baddbmm.default: ((0, 2), (1, 1), (2, 2)),
}
#: Matmuls linear in each operand, which rule 4 splits.
_BILINEAR = frozenset({_aten.matmul.default, _aten.mm.default, _aten.bmm.default})

#: Where a shape op takes the dim(s) it acts on: (position, keyword, default).
_DIM_ARG: dict[Any, tuple[int, str, Any]] = {
    _aten.unsqueeze.default: (1, "dim", 0), _aten.squeeze.dim: (1, "dim", 0), _aten.select.int: (1, "dim", 0),
    _aten.softmax.int: (1, "dim", 0), _aten._softmax.default: (1, "dim", 0), _aten.log_softmax.int: (1, "dim", 0),
    _aten.chunk.default: (2, "dim", 0), _aten.split.Tensor: (2, "dim", 0), _aten.split_with_sizes.default: (2, "dim", 0),
    _aten.squeeze.dims: (1, "dim", None), _aten.sum.dim_IntList: (1, "dim", None), _aten.mean.dim: (1, "dim", None),
    _aten.amax.default: (1, "dim", None), _aten.amin.default: (1, "dim", None),
}  # fmt: skip


def _region(graph: torch.fx.Graph, found: list[torch.fx.Node], rows: int, layer: ExpertLayer) -> dict[torch.fx.Node, int]:
    """Rules 1-2: the region, node → lead, in graph order, from the selections on."""
    lead = {node: 1 for node in found}
    for node in graph.nodes:
        if node in lead or node.op != "call_function" or not any(a in lead for a in node.all_input_nodes):
            continue
        if layer.owns(node) or node.target is operator.getitem:  # a region tuple is read by its getitems only
            d = _row_lead(node, lead, rows)
            if d is not None:
                lead[node] = d
    return {n: lead[n] for n in graph.nodes if n in lead}


def _arg(node: torch.fx.Node, position: int, keyword: str, default: Any) -> Any:
    return node.args[position] if len(node.args) > position else node.kwargs.get(keyword, default)


def _dims(node: torch.fx.Node, ndim: int) -> list[int]:
    """The dims a shape op acts on, normalised; [] for ops that act on none (expand, clone:
    the caller compares the leading sizes)."""
    target = node.target
    if target in _DIM_ARG:
        position, keyword, default = _DIM_ARG[target]
        dims = _arg(node, position, keyword, default)
        if dims is None or dims == []:  # every dim
            return list(range(ndim))
        size = ndim + 1 if target is _aten.unsqueeze.default else ndim
        return [int(d) % size for d in (dims if isinstance(dims, (list, tuple)) else [dims])]
    if target is _aten.transpose.int:
        return [int(_arg(node, 1, "dim0", 0)) % ndim, int(_arg(node, 2, "dim1", 0)) % ndim]
    if target is _aten.permute.default:
        return [i for i, d in enumerate(_arg(node, 1, "dims", [])) if int(d) % ndim != i]
    if target is _aten.slice.Tensor:
        dim, start, step = int(_arg(node, 1, "dim", 0)) % ndim, _arg(node, 2, "start", None), _arg(node, 4, "step", 1)
        source, out = value_of(_arg(node, 0, "self", None)), value_of(node)
        whole = start in (None, 0) and step == 1 and out.shape[dim] == source.shape[dim]
        return [] if whole else [dim]
    return []


def _leading(shape: Any, rows: int) -> Optional[int]:
    """The fewest leading dims of ``shape`` whose sizes multiply to ``rows``."""
    for d in range(1, len(shape) + 1):
        if math.prod(int(s) for s in shape[:d]) == rows:
            return d
    return None


def _shapes(val: Any) -> list[tuple[int, ...]]:
    """The shapes of a tensor or of each tensor of a tuple ([] for anything else)."""
    if isinstance(val, torch.Tensor):
        return [tuple(val.shape)]
    if isinstance(val, (tuple, list)) and val and all(isinstance(v, torch.Tensor) for v in val):
        return [tuple(v.shape) for v in val]
    return []


def _row_lead(node: torch.fx.Node, lead: dict[torch.fx.Node, int], rows: int) -> Optional[int]:
    """Rule 1: ``node``'s lead when it is row-wise over the region ``lead``, else None."""
    target, out = node.target, _shapes(value_of(node))
    source = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
    if not out:
        return None
    if target is operator.getitem:
        return lead.get(source) if source is not None else None
    inputs = [a for a in node.all_input_nodes if a in lead]
    if target in _VIEWS:
        return _leading(out[0], rows) if inputs == [source] else None
    if target in _SHAPE_OPS:
        if source is None or inputs != [source]:
            return None
        d, shape = lead[source], tuple(value_of(source).shape)
        keeps = all(len(s) >= d and s[:d] == shape[:d] for s in out)
        return d if keeps and all(dim >= d for dim in _dims(node, len(shape))) else None
    if target is _aten.linear.default:  # x @ W^T + b, with W and b shared by every row
        if source is None or inputs != [source] or lead[source] >= value_of(source).dim():
            return None
        return _same_rows(inputs, lead, out[0])
    if target in _MATMULS:
        operands = {node.args[i]: keep for i, keep in _MATMULS[target] if i < len(node.args)}
        if any(a not in operands or lead[a] > value_of(a).dim() - operands[a] for a in inputs):
            return None
        return _same_rows(inputs, lead, out[0])
    if torch.Tag.pointwise in getattr(target, "tags", ()):
        return _same_rows(inputs, lead, out[0])
    return None


def _same_rows(inputs: list[torch.fx.Node], lead: dict[torch.fx.Node, int], out: tuple[int, ...]) -> Optional[int]:
    """The one lead of ``inputs`` when each has the output's dims and leading sizes."""
    leads = {lead[a] for a in inputs}
    if len(leads) != 1:
        return None
    d = leads.pop()
    same = all(value_of(a).dim() == len(out) and tuple(value_of(a).shape[:d]) == out[:d] for a in inputs)
    return d if same else None


def _linear_in(reader: torch.fx.Node, rows: torch.fx.Node, lead: dict[torch.fx.Node, int], activated: set[torch.fx.Node]) -> bool:
    """Rule 4: ``reader`` is a matmul with ``rows`` as one operand and no other weight-only value."""
    if reader.target not in _BILINEAR or reader.kwargs or len(reader.args) != 2 or list(reader.args).count(rows) != 1:
        return False
    other = reader.args[1] if reader.args[0] is rows else reader.args[0]
    return other not in lead or other in activated
