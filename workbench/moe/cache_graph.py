"""Expert caches as graph rewrites: cache state as program buffers, reads through the caches.

``cached_program(program, spec)`` returns a copy of a program with one expert cache per
MoE layer added as buffers (and, for ``on_miss="host_compute"``, each layer's expert FFN
split between the cache on the device and the host); ``rewrite_reads(dg, cached, spec,
device)`` turns the device graph of that program into one whose expert reads go through
the caches, and inserts the cache updates.

Rules:
  1. Per MoE layer ``l`` (``experts.expert_layers``: found by ``find_experts``, so the
     built-in decoder and transformers models alike) and expert weight ``w``, the buffer
     ``expert_cache.layers.{l}.{w}`` ``(S, *row)`` holds the cached slabs; the slot
     table ``expert_cache.layers.{l}.slots`` ``(S,)`` which expert each slot holds (-1
     empty). A layer's attention experts (JetMoE) have a cache of their own,
     ``expert_cache.layers.{l}.attention.…`` (``experts.group_name``). Admitting policies add ``keys`` ``(S,)``, ``requests`` ``(E,)`` and
     ``clock`` ``(1,)`` (``cache_ops``). They are ordinary buffers of a new
     ``ExportedProgram``: resident on the device, counted in ``constant_bytes`` (so in
     a budget), placed once when a session loads and carried from call to call. A slab
     buffer is stored in its weight's format (``quantize``): a cache of 4-bit experts
     holds 4-bit slabs.
  2. Initial state: ``static_hot`` slots hold the ``S`` pinned experts (and the slabs
     their weights); ``lru``/``lfu`` caches start empty. Shape-only programs get meta
     buffers (no memory), like their weights.
  3. A layer's experts are read as rows of stacked weights selected by one index —
     ``index_select(w, 0, ids)``, ``select_rows(w, ids, hint)`` (the built-in decoder),
     or ``w[ids]`` (transformers' ``batched_mm`` experts, rewritten to the
     ``index_select`` it equals) — the form ``expert_reads.rows_program`` puts every
     layer in: a layer that reads its whole stack (Llama 4's dense batched matmul)
     reads all E rows each step, and one module per expert is stacked first. Such a
     layer's step needs all E experts, so an admitting cache needs E slots; a grouped
     matmul's experts are read by ``batched_mm`` instead (each a ``CacheGraphError``
     that says so).
  4. ``on_miss="copy"``: each gather of an expert weight's routed rows becomes
     ``gather_h2d_reuse_copy(w, ids, slabs, slots)``: rows the cache holds are copied on
     the device (the hits read the cache), the others cross the link. The executor
     counts each read's hits; ``estimate`` charges ``1 - CostModel.prefetch_hit_rate``
     of its rows to the link, so a shape-only estimate takes the expected hit rate from
     a replay (``sweeps`` passes the replayed rate).
  5. ``on_miss="host_compute"`` (Fiddler, ktransformers): each layer's expert computation
     is split between the cache and the host (``split_misses``, its rules 1-7): the ops
     that compute with the selected weight rows — the *row-wise expert region*, one row
     per routed row; for experts that are one module each, each expert's own subgraph —
     run twice with static shapes: on the device from the cache
     (``expert_cache_positions`` finds each row's slot, ``index_select(slabs, 0,
     positions)`` reads it in place: no link) and on the host from the host-resident
     weights; where a result leaves them, ``where(hits, device value, host value)`` keeps
     the device's value for a hit and the host's for a miss (``hits =
     expert_cache_hits(ids, slots)``), and a matmul over the rows that is linear in weight
     rows alone (lookup-table experts: ``sum_k g_k up_k``) is the device's matmul of the
     hit rows plus the host's of the missed rows. Propagation moves the activations: the
     inputs cross to the host (``d2h``), the results back (``h2d``); no expert weight
     crosses for a miss, and a form whose weights would have to (weight rows read by any
     other op than a row-wise one or such a matmul) is a ``CacheGraphError`` naming
     ``on_miss='copy'``. Every host op carries a ``RowShare`` of ``hits``
     (``workbench.node_facts``): a run charges it only the share of rows that really
     missed (a runtime that compacts the missed rows, as Fiddler does, computes only
     those; the static-shape graph computes and discards the rest), read from the mask
     as a reuse copy's hits are; ``estimate`` charges it the expected miss rate ``1 -
     CostModel.prefetch_hit_rate`` — the replayed trace's hit rate in a sweep —
     shape-only. Outputs equal eager: a hit row runs the same ops on the same bytes (rule
     4 of ``cache_ops``), a missed row is the original (a split matmul adds its terms in
     another order). A ``host_compute`` cache has at least one slot (with none, every
     expert runs on the host: ``experts_on_host``).
  6. Admitting policies update their cache with ``expert_cache_admit`` (``cache_ops``), a
     copy-stream op whose inputs carry its ordering as graph edges: ``copy`` — after
     the layer's reads, from their rows; ``host_compute`` — a miss is still admitted for
     later tokens (``cache_policies`` rule 5): the routed ids pass through
     ``ordered_after(ids, merges)``, so the admission's reuse copies (hits on the device,
     misses over the link, off the critical path) and the admit come after the layer's
     device reads of the cache and its results.
  7. Prefetch (a program with routing hints, ``lru``/``lfu`` only; layers with a hint —
     the first layer has nothing to predict it): the predicted
     experts are read through the cache (``gather_h2d_reuse_copy(w, hint, slabs,
     slots)``: predicted experts it holds are copied on the device, the others cross)
     and admitted (``requested=False``) before the layer's read: the read's slot table
     (or, with ``host_compute``, the lookups') is the admit's result, so the order is a
     graph edge, and a correctly predicted expert is a hit.
  8. The rewrite keeps every other node, name and device; copy records of the replaced
     gathers are replaced by records of the reuse copies, saying why they exist; the
     layer's reads (``copy``) or hit masks (``host_compute``) are marked
     (``cache_reads``), so ``decode`` counts hits per layer.
  9. The buffers are the program's state: ``strategy.apply`` makes a new program, so a
     new cold cache, every time; a session copies the buffers when it loads, so each
     session starts from the program's state, and calling ``DeviceGraph.module()``
     (eager) advances the program's own buffers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

import numpy as np
import torch
import torch.fx
from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument

from ..capture import Program
from ..copy_ops import GATHER_REUSE
from ..devices import CPU, CopyKind, Device
from ..graph_values import node_nbytes, value_of
from ..propagate import CopyRecord, CopyRole, DeviceGraph
from ..node_facts import mark_copy_stream, mark_stored_format, mark_tag, stored_format, tagged
from .cache_ops import ADMIT, ORDERED_AFTER
from .cache_policies import pinned_experts
from .expert_reads import CacheGraphError, fake_mode_of, layer_selections, rows_program
from .discovery import ExpertLayer, expert_layers, group_name
from .split_misses import split_misses

__all__ = ["CacheGraphError", "ExpertCacheSpec", "CacheState", "CachedProgram", "LayerPlan", "cache_reads", "cached_program", "rewrite_reads"]

_STATE_FIELDS = ("slots", "keys", "requests", "clock")
_READ_TAG = "expert_cache_read"  # rule 8: the node fact (a tag) naming the layer whose hits the node counts
_aten = torch.ops.aten


@dataclass(frozen=True)
class ExpertCacheSpec:
    """What to cache: slots per layer, the policy, what a miss does, prefetching."""

    slots_per_layer: int  # S
    policy: str  # "lru" | "lfu" | "static_hot"
    popularity: Optional[tuple[tuple[int, ...], ...]] = None  # static_hot: (L, E) counts; None pins experts 0..S-1
    on_miss: str = "copy"  # "copy" (rule 4) | "host_compute" (rule 5)
    prefetch: bool = False  # predicted experts are admitted before the layer's read (rule 7)

    @property
    def admits(self) -> bool:
        return self.policy != "static_hot"


@dataclass(frozen=True)
class CacheState:
    """The buffer FQNs of one layer's cache (rule 1)."""

    layer: int
    slabs: tuple[str, ...]  # one per expert weight, in the order of ExpertLayer.weights
    slots: str
    keys: Optional[str]  # admitting policies only, as the next two
    requests: Optional[str]
    clock: Optional[str]

    @property
    def fqns(self) -> tuple[str, ...]:
        return tuple(f for f in (*self.slabs, self.slots, self.keys, self.requests, self.clock) if f is not None)


@dataclass(frozen=True)
class LayerPlan:
    """One MoE layer as the program-level rewrite left it (node names, which propagation keeps)."""

    state: CacheState
    weights: tuple[str, ...]  # weight placeholders, in the order of state.slabs
    index: str  # the routed experts' ids (N,)
    hint: Optional[str]  # the predicted ids (prefetching programs)
    hits: Optional[str] = None  # host_compute: expert_cache_hits node
    positions: Optional[str] = None  # host_compute: expert_cache_positions node
    merges: tuple[str, ...] = ()  # host_compute: the where() nodes that leave the region


@dataclass(frozen=True, eq=False)
class CachedProgram:
    """``cached_program``'s result: the program with its caches, and what the device-level
    rewrite needs to know of each layer."""

    program: Program
    layers: tuple[LayerPlan, ...]
    host_ops: frozenset[str]  # host_compute: the host copy of each region op (placed on the host)
    streamed: tuple[str, ...]  # weight FQNs the device reads by row gathers (copy mode)


# -- program level ------------------------------------------------------------------------


def _states(layers: tuple[tuple[int, ExpertLayer], ...], spec: ExpertCacheSpec) -> list[CacheState]:
    out = []
    for index, layer in layers:
        base = f"expert_cache.{group_name(index, layer)}"
        extra = {f: f"{base}.{f}" if spec.admits else None for f in _STATE_FIELDS[1:]}
        slabs = tuple(f"{base}.{w.removeprefix(layer.module + '.').replace('.', '_')}" for w in layer.weights)
        out.append(CacheState(index, slabs, f"{base}.slots", **extra))
    return out


def _pinned(spec: ExpertCacheSpec, layers: int, experts: int) -> np.ndarray:
    """Rule 2: ``(L, S)`` experts a static cache pins."""
    if spec.popularity is None:
        return np.tile(np.arange(spec.slots_per_layer), (layers, 1))
    return pinned_experts(np.asarray(spec.popularity), spec.slots_per_layer)


def _initial(
    program: Program, by_fqn: dict[str, str], layers: tuple[tuple[int, ExpertLayer], ...], states: list[CacheState],
    spec: ExpertCacheSpec, experts: int,
) -> dict[str, torch.Tensor]:
    """Rule 2: the buffers' first values (meta tensors for a shape-only program)."""
    S = spec.slots_per_layer
    pinned = _pinned(spec, len(layers), experts) if not spec.admits else None
    meta = program.shape_only
    out: dict[str, torch.Tensor] = {}
    for i, ((_, layer), state) in enumerate(zip(layers, states)):
        ids = torch.as_tensor(pinned[i], dtype=torch.int64) if pinned is not None else torch.full((S,), -1)
        for fqn, weight_fqn in zip(state.slabs, layer.weights):
            w = program.constant_tensor(by_fqn[weight_fqn])
            if meta:
                out[fqn] = torch.empty((S, *w.shape[1:]), dtype=w.dtype, device="meta")
            elif pinned is not None:
                out[fqn] = w.detach()[ids].clone()
            else:
                out[fqn] = torch.zeros((S, *w.shape[1:]), dtype=w.dtype)
        tables = {"slots": ids, "keys": torch.full((S,), -1), "requests": torch.zeros(experts, dtype=torch.int64),
                  "clock": torch.zeros(1, dtype=torch.int64)}  # fmt: skip
        for field in _STATE_FIELDS:
            fqn = getattr(state, field)
            if fqn is not None:
                out[fqn] = tables[field].to("meta") if meta else tables[field]
    return out


def cached_program(program: Program, spec: ExpertCacheSpec) -> CachedProgram:
    """``program`` with one cache per MoE layer as buffers (rules 1-3, 5); a new program
    each call, so one program's cache state never leaks into another's."""
    per_expert = {layer.module for _, layer in expert_layers(program) if layer.layout == "modules"}
    program, layers, dense = rows_program(program, expert_layers(program))
    by_fqn = {fqn: name for name, fqn in program.constants.items()}  # parameter FQN → placeholder name
    selections = [layer_selections(program, layer) for _, layer in layers]
    top_k = max(int(value_of(ids).numel()) for _, ids, _ in selections)
    experts = layers[0][1].num_experts
    _check_fits(spec, top_k, experts, len(layers), bool(dense))
    states = _states(layers, spec)
    buffers = _initial(program, by_fqn, layers, states, spec, experts)
    ep = program.exported
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    user_inputs = set(program.user_inputs)
    specs = list(ep.graph_signature.input_specs)
    first_user = next((i for i, s in enumerate(specs) if s.arg.name in user_inputs), len(specs))
    new_specs: list[InputSpec] = []
    buffer_nodes: dict[str, torch.fx.Node] = {}  # cache buffer FQN → its placeholder in the new graph
    fake_mode = fake_mode_of(program)
    selected = {node for found, _, _ in selections for node in found}
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs and not new_specs:
            for fqn, value in buffers.items():
                name = "b_" + fqn.replace(".", "_")
                placeholder = graph.placeholder(name)
                placeholder.meta["val"] = fake_mode.from_tensor(value, static_shapes=True)
                buffer_nodes[fqn] = placeholder
                new_specs.append(InputSpec(InputKind.BUFFER, TensorArgument(name=placeholder.name), fqn, persistent=True))
        if node in selected and node.target is _aten.index.Tensor:  # rule 3: w[ids] is index_select(w, 0, ids)
            source, (ids,) = node.args[0], node.args[1]
            args = (env[source], 0, env[ids])
            env[node] = graph.create_node("call_function", _aten.index_select.default, args, {}, name=node.name)
            env[node].meta = dict(node.meta)
        else:
            env[node] = graph.node_copy(node, env.__getitem__)
    plans: list[LayerPlan] = []
    host_ops: set[str] = set()
    # parameters and lifted constants are no activations (split_misses rule 2); buffers may hold some (a KV cache)
    constants = {s.arg.name for s in specs if s.kind in (InputKind.PARAMETER, InputKind.CONSTANT_TENSOR)}
    for (index, layer), state, (found, ids, hint) in zip(layers, states, selections):
        weights = tuple(by_fqn[w] for w in layer.weights)
        plan = LayerPlan(state, weights, ids.name, hint.name if hint is not None else None)
        if spec.on_miss == "host_compute":  # rule 5
            slabs = {w: buffer_nodes[s] for w, s in zip(weights, state.slabs)}
            split = split_misses(graph, layer, [env[n] for n in found], env[ids], slabs, buffer_nodes[state.slots],
                                 constants, layer.module in per_expert)  # fmt: skip
            plan = dataclasses.replace(plan, hits=split.hits.name, positions=split.positions.name,
                                       merges=tuple(m.name for m in split.merges))  # fmt: skip
            host_ops |= split.host
        plans.append(plan)
    graph.lint()
    signature = ExportGraphSignature(specs[:first_user] + new_specs + specs[first_user:], list(ep.graph_signature.output_specs))
    formats = {slab: (fmt, buffers[slab] if by_fqn[w] in program.dequantized else None)
               for (_, layer), state in zip(layers, states) for slab, w in zip(state.slabs, layer.weights)
               if (fmt := program.stored_formats.get(by_fqn[w])) is not None}  # fmt: skip
    new = program.with_graph(graph, signature, {**ep.state_dict, **buffers}, formats)
    streamed = tuple(w for _, layer in layers for w in layer.weights) if spec.on_miss == "copy" else ()
    return CachedProgram(new, tuple(plans), frozenset(host_ops), streamed)


def _check_fits(spec: ExpertCacheSpec, top_k: int, experts: int, layers: int, dense: bool) -> None:
    """Slots between what a step needs resident together and the experts there are."""
    low = top_k if spec.admits else int(spec.on_miss == "host_compute")
    if not low <= spec.slots_per_layer <= experts:
        need = f"a step's {top_k} routed rows are resident together; " if spec.admits else ""
        if low == 1 and not spec.admits:  # the device's half of a split reads a slot (split_misses rule 2)
            need = ("with on_miss='host_compute' the device computes hits from a slot, and a cache of none computes "
                    "every expert on the host: that is experts_on_host; ")
        if dense and spec.admits:
            need = (f"the layers' ops read every expert's weights (a dense batched matmul over every expert, or one "
                    f"module per expert computing every token), so a step reads all {top_k}, and an admitting cache "
                    "holds a step's experts together; 'static_hot' pins any number of them; ")
        raise CacheGraphError(
            f"slots_per_layer={spec.slots_per_layer} must be in [{low}, {experts}] for {spec.policy!r} "
            f"({need}the layers have {experts} experts)"
        )
    if spec.popularity is not None and np.asarray(spec.popularity).shape != (layers, experts):
        raise CacheGraphError(f"popularity must be (layers, experts) = {(layers, experts)}")


# -- device level ------------------------------------------------------------------------


def cache_reads(graph: torch.fx.Graph) -> dict[str, int]:
    """Rule 8: node name → MoE layer, for each layer's marked read (a reuse copy whose hits,
    or a mask whose True entries, are the layer's cache hits)."""
    return tagged(graph, _READ_TAG)


class _Rewriter:
    """Builds the device-level nodes of one device graph, with their devices and copy records."""

    def __init__(self, dg: DeviceGraph, spec: ExpertCacheSpec, device: Device) -> None:
        self.graph = dg.graph
        self.spec = spec
        self.device = device
        self.node_device = dict(dg.node_device)
        self.records = {c.name: c for c in dg.copies}

    def read(self, weight: torch.fx.Node, index: torch.fx.Node, slab: torch.fx.Node, table: torch.fx.Node,
             name: str, why: str) -> torch.fx.Node:  # fmt: skip
        """A reuse copy of ``weight``'s rows ``index`` through the cache ``slab`` / ``table``,
        at the graph's insertion point."""
        node = self.graph.create_node(
            "call_function", GATHER_REUSE, (weight, index, slab, table, str(CPU), str(self.device)), {}, name=name
        )
        val = value_of(weight)
        node.meta["val"] = val.new_empty(tuple(value_of(index).shape) + tuple(val.shape[1:]))
        stored = stored_format(weight)
        if stored is not None:  # the rows cross as the weight is stored (weight_formats rule 2)
            mark_stored_format(node, stored)
        self.node_device[node.name] = self.device
        self.records[node.name] = CopyRecord(
            name=node.name,
            kind=CopyKind.H2D,
            value=weight.name,
            src=CPU,
            dst=self.device,
            nbytes=node_nbytes(node),
            consumers=(),
            reason=f"{why} through the cache {slab.name!r} ({self.spec.slots_per_layer} slots, {self.spec.policy}): "
            f"rows the cache holds are copied on {self.device}, only the others cross the link (nbytes is the "
            "upper bound: every row missed)",
            role=CopyRole.REUSE,
            index=index.name,
            prefetch=slab.name,
            prefetch_index=table.name,
        )
        return node

    def replace(self, old: torch.fx.Node, new: torch.fx.Node) -> None:
        """``new`` takes the place of the copy ``old`` (rule 8)."""
        old.replace_all_uses_with(new)
        self.graph.erase_node(old)
        self.node_device.pop(old.name, None)
        self.records.pop(old.name, None)

    def admit(self, state: CacheState, index: torch.fx.Node, rows: list[torch.fx.Node], slabs: list[torch.fx.Node],
              tables: list[torch.fx.Node], requested: bool, after: torch.fx.Node) -> torch.fx.Node:  # fmt: skip
        """``expert_cache_admit`` right after ``after``: a copy-stream op (rule 6)."""
        args: tuple[Any, ...] = (index, list(rows), list(slabs), *tables, self.spec.policy, requested)
        kind = "admit" if requested else "admit_predicted"
        with self.graph.inserting_after(after):
            node = self.graph.create_node("call_function", ADMIT, args, {}, name=f"expert_cache_{kind}_{state.layer}")
        node.meta["val"] = value_of(tables[0]).new_empty(tuple(value_of(tables[0]).shape))
        mark_copy_stream(node, sum(node_nbytes(r) for r in rows))
        self.node_device[node.name] = self.device
        return node

    def last(self, nodes: list[torch.fx.Node]) -> torch.fx.Node:
        return self._in_order(nodes)[-1]

    def first(self, nodes: list[torch.fx.Node]) -> torch.fx.Node:
        return self._in_order(nodes)[0]

    def _in_order(self, nodes: list[torch.fx.Node]) -> list[torch.fx.Node]:
        """``nodes`` in graph order (the graph changes between calls: positions are read anew)."""
        wanted = set(nodes)
        return [n for n in self.graph.nodes if n in wanted]


def rewrite_reads(dg: DeviceGraph, cached: CachedProgram, spec: ExpertCacheSpec, device: Device) -> DeviceGraph:
    """Rules 4-8 on a device graph of ``cached.program`` (propagated with ``cached.streamed``
    streamed); returns a new ``DeviceGraph``."""
    graph = dg.graph
    nodes = {n.name: n for n in graph.nodes}
    constant = {fqn: nodes[name] for name, fqn in dg.program.constants.items()}
    rw = _Rewriter(dg, spec, device)
    for plan in cached.layers:
        state = plan.state
        slabs = {w: constant[s] for w, s in zip(plan.weights, state.slabs)}
        tables = [constant[getattr(state, f)] for f in _STATE_FIELDS] if spec.admits else []
        slots = constant[state.slots]
        gathers = [c for c in dg.copies if c.value in slabs and c.is_gather]
        table = slots
        if spec.prefetch and plan.hint is not None:  # the first layer has nothing to predict it
            table = _prefetch(rw, plan, gathers, slabs, slots, tables, nodes)
        if spec.on_miss == "copy":
            _copy_reads(rw, plan, gathers, slabs, table, tables, nodes)
        else:
            _host_compute_reads(rw, plan, slabs, slots, table, tables, nodes)
    residency = dict(dg.residency)
    for plan in cached.layers:
        for fqn in plan.state.fqns:
            residency[constant[fqn].name] = (device,)
            rw.node_device[constant[fqn].name] = device
    graph.lint()
    copies = tuple(
        dataclasses.replace(rw.records[n.name], consumers=tuple(u.name for u in n.users))
        if rw.records[n.name].role is CopyRole.REUSE else rw.records[n.name]
        for n in graph.nodes if n.name in rw.records
    )  # fmt: skip
    return dataclasses.replace(dg, graph=graph, node_device=rw.node_device, copies=copies, residency=residency)


def _prefetch(rw: _Rewriter, plan: LayerPlan, copies: list[CopyRecord], slabs: dict[str, torch.fx.Node],
              slots: torch.fx.Node, tables: list[torch.fx.Node], nodes: dict[str, torch.fx.Node]) -> torch.fx.Node:  # fmt: skip
    """Rule 7: the predicted experts read through the cache and admitted; the new slot table."""
    assert plan.hint is not None  # the caller checks
    hint = nodes[plan.hint]
    by_weight = {c.value: nodes[c.name] for c in copies if c.role is CopyRole.PREFETCH}
    olds = [by_weight[w] for w in plan.weights if w in by_weight]
    # all of the layer's prefetches, then the admit, where the first one was (or after the hint)
    anchor = rw.graph.inserting_before(rw.first(olds)) if olds else rw.graph.inserting_after(hint)
    reads = []
    with anchor:
        for w in plan.weights:
            old = by_weight.get(w)
            name = f"{old.name}_cached" if old is not None else f"{w}_prefetch_cached"
            reads.append(rw.read(nodes[w], hint, slabs[w], slots, name, f"prefetches the predicted rows {hint.name!r}"))
    for w, read in zip(plan.weights, reads):
        if w in by_weight:
            rw.replace(by_weight[w], read)
    return rw.admit(plan.state, hint, reads, list(slabs.values()), tables, False, rw.last(reads))


def _copy_reads(rw: _Rewriter, plan: LayerPlan, copies: list[CopyRecord], slabs: dict[str, torch.fx.Node],
                table: torch.fx.Node, tables: list[torch.fx.Node], nodes: dict[str, torch.fx.Node]) -> None:  # fmt: skip
    """Rule 4 (and 6): each read of the routed rows through the cache, then the admit."""
    reads = []
    for record in copies:
        if record.role is CopyRole.PREFETCH:
            continue
        old, weight = nodes[record.name], nodes[record.value]
        assert record.index is not None  # a gather or reuse copy has an index
        with rw.graph.inserting_before(old):
            read = rw.read(weight, nodes[record.index], slabs[record.value], table, f"{old.name}_cached",
                           f"reads the routed rows {record.index!r}")  # fmt: skip
        rw.replace(old, read)
        reads.append(read)
    if not reads:
        raise CacheGraphError(f"layer {plan.state.layer}: no gather of its experts was found to read through the cache")
    reads.sort(key=lambda r: plan.weights.index(rw.records[r.name].value))
    mark_tag(reads[0], _READ_TAG, plan.state.layer)
    if rw.spec.admits:
        readers = [u for r in reads for u in r.users] or reads
        index = nodes[plan.index]
        rw.admit(plan.state, index, reads, [slabs[rw.records[r.name].value] for r in reads], tables, True, rw.last(readers))


def _host_compute_reads(rw: _Rewriter, plan: LayerPlan, slabs: dict[str, torch.fx.Node], slots: torch.fx.Node,
                        table: torch.fx.Node, tables: list[torch.fx.Node], nodes: dict[str, torch.fx.Node]) -> None:  # fmt: skip
    """Rules 5-7 on the device graph: lookups on the current table; admission after the merges."""
    assert plan.hits is not None and plan.positions is not None
    hits, positions = nodes[plan.hits], nodes[plan.positions]
    if table is not slots:
        for lookup in (hits, positions):
            lookup.replace_input_with(slots, table)
    mark_tag(hits, _READ_TAG, plan.state.layer)
    if not rw.spec.admits:
        return
    merges = [nodes[m] for m in plan.merges]
    last = rw.last(merges)
    index = nodes[plan.index]
    with rw.graph.inserting_after(last):
        ordered = rw.graph.create_node("call_function", ORDERED_AFTER, (index, merges), {}, name=f"{plan.index}_after_layer_{plan.state.layer}")
    ordered.meta["val"] = value_of(index).new_empty(tuple(value_of(index).shape))
    rw.node_device[ordered.name] = rw.device
    with rw.graph.inserting_after(ordered):
        reads = [
            rw.read(nodes[w], ordered, slabs[w], table, f"{w}_admission",
                    "brings the missed experts into the cache for later tokens (their rows were computed on the host)")
            for w in plan.weights
        ]  # fmt: skip
    rw.admit(plan.state, ordered, reads, [slabs[w] for w in plan.weights], tables, True, rw.last(reads))
