"""Expert caches as a graph rewrite: cache state as program buffers, reads as reuse copies.

``cached_program(program, spec)`` returns a copy of a program with one expert cache per
MoE layer added as buffers; ``rewrite_reads(dg, spec)`` turns the device graph of that
program, propagated with the experts streamed, into one that reads experts through the
caches.

Rules:
  1. Per MoE layer ``l`` and expert weight ``w`` (``w1``, ``w2``), the buffer
     ``expert_cache.layers.{l}.{w}`` ``(S, *row)`` holds the cached slabs; the slot
     table ``expert_cache.layers.{l}.slots`` ``(S,)`` which expert each slot holds (-1
     empty). Admitting policies add ``keys`` ``(S,)``, ``requests`` ``(E,)`` and
     ``clock`` ``(1,)`` (``cache_ops``). They are ordinary buffers of a new
     ``ExportedProgram``: resident on the device, counted in ``constant_bytes`` (so in
     a budget), placed once when a session loads and carried from call to call.
  2. Initial state: ``static_hot`` slots hold the ``S`` pinned experts (and the slabs
     their weights); ``lru``/``lfu`` caches start empty. Shape-only programs get meta
     buffers (no memory), like their weights.
  3. Each gather copy of an expert weight's routed rows (``gather_h2d_copy(w, index)``,
     from streaming) becomes ``gather_h2d_reuse_copy(w, index, slabs, slots)``: rows
     the cache holds are copied on the device (as an all-on-device model's row gather
     reads resident weights), the others cross the link. The executor counts each
     read's hits; ``estimate`` charges ``1 - CostModel.prefetch_hit_rate`` of its rows
     to the link, so a shape-only estimate takes the expected hit rate from a replay.
  4. For an admitting policy, ``expert_cache_admit`` follows the layer's last reader of
     its cache reads in graph order and updates the cache in place (``cache_ops``),
     from the rows the reads brought in.
  5. The rewrite keeps every other node, name and device; copy records of the replaced
     gathers are replaced by records of the reuse copies, saying why they exist.
  6. The buffers are the program's state: ``strategy.apply`` makes a new program, so a
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
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument

from ..graph_values import value_of
from ..capture import Program
from ..copy_ops import GATHER_H2D, GATHER_REUSE
from ..devices import CPU, Device
from ..propagate import CopyRole
from .cache_ops import ADMIT
from .cache_policies import pinned_experts
from .experts import ExpertLayer, expert_layers

__all__ = ["CacheSpec", "CacheState", "cached_program", "rewrite_reads"]

_STATE_FIELDS = ("slots", "keys", "requests", "clock")


@dataclass(frozen=True)
class CacheSpec:
    """What to cache: slots per layer and the policy."""

    slots_per_layer: int  # S
    policy: str  # "lru" | "lfu" | "static_hot"
    popularity: Optional[tuple[tuple[int, ...], ...]] = None  # static_hot: (L, E) counts; None pins experts 0..S-1

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


def _states(layers: tuple[ExpertLayer, ...], spec: CacheSpec) -> list[CacheState]:
    out = []
    for layer in layers:
        base = f"expert_cache.layers.{layer.layer}"
        extra = {f: f"{base}.{f}" if spec.admits else None for f in _STATE_FIELDS[1:]}
        slabs = tuple(f"{base}.{w.rsplit('.', 1)[1]}" for w in layer.weights)
        out.append(CacheState(layer.layer, slabs, f"{base}.slots", **extra))
    return out


def _pinned(spec: CacheSpec, layers: int, experts: int) -> np.ndarray:
    """Rule 2: ``(L, S)`` experts a static cache pins."""
    if spec.popularity is None:
        return np.tile(np.arange(spec.slots_per_layer), (layers, 1))
    return pinned_experts(np.asarray(spec.popularity), spec.slots_per_layer)


def _initial(program: Program, layers: tuple[ExpertLayer, ...], states: list[CacheState], spec: CacheSpec) -> dict[str, torch.Tensor]:
    """Rule 2: the buffers' first values (meta tensors for a shape-only program)."""
    by_fqn = {fqn: name for name, fqn in program.constants.items()}
    S = spec.slots_per_layer
    experts = program.constant_tensor(by_fqn[layers[0].weights[0]]).shape[0]
    pinned = _pinned(spec, len(layers), experts) if not spec.admits else None
    meta = program.shape_only
    out: dict[str, torch.Tensor] = {}
    for i, (layer, state) in enumerate(zip(layers, states)):
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


def cached_program(program: Program, spec: CacheSpec) -> tuple[Program, list[CacheState]]:
    """``program`` with one cache per MoE layer as buffers (rules 1, 2); a new program
    each call, so one program's cache state never leaks into another's."""
    layers = expert_layers(program.constants)
    states = _states(layers, spec)
    buffers = _initial(program, layers, states, spec)
    ep = program.exported
    fake_mode = _fake_mode(program)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    user_inputs = set(program.user_inputs)
    specs = list(ep.graph_signature.input_specs)
    first_user = next((i for i, s in enumerate(specs) if s.arg.name in user_inputs), len(specs))
    new_specs: list[InputSpec] = []
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in user_inputs and not new_specs:
            for fqn, value in buffers.items():
                name = "b_" + fqn.replace(".", "_")
                placeholder = graph.placeholder(name)
                placeholder.meta["val"] = fake_mode.from_tensor(value, static_shapes=True)
                new_specs.append(InputSpec(InputKind.BUFFER, TensorArgument(name=placeholder.name), fqn, persistent=True))
        env[node] = graph.node_copy(node, env.__getitem__)
    signature = ExportGraphSignature(specs[:first_user] + new_specs + specs[first_user:], list(ep.graph_signature.output_specs))
    new = ExportedProgram(
        root=ep.graph_module,
        graph=graph,
        graph_signature=signature,
        state_dict={**ep.state_dict, **buffers},
        range_constraints=ep.range_constraints,
        module_call_graph=ep.module_call_graph,
        example_inputs=ep.example_inputs,
        constants=ep.constants,
    )
    return Program(new, program.shape_only), states


def _fake_mode(program: Program) -> Any:
    for node in program.graph.nodes:
        mode = getattr(value_of(node), "fake_mode", None)
        if mode is not None:
            return mode
    raise ValueError("the program's graph carries no fake tensors to size new buffers with")


def rewrite_reads(dg: Any, states: list[CacheState], spec: CacheSpec, device: Device) -> Any:
    """Rules 3-5 on a device graph of a ``cached_program`` propagated with the experts
    streamed; returns a new ``DeviceGraph``."""
    graph = dg.graph
    program = dg.program
    placeholder = {n.name: n for n in graph.nodes if n.op == "placeholder"}
    by_fqn = {fqn: placeholder[name] for name, fqn in program.constants.items()}
    cache_of: dict[str, tuple[CacheState, torch.fx.Node]] = {}  # weight placeholder → (state, slab)
    for layer, state in zip(expert_layers(program.constants), states):
        for weight_fqn, slab_fqn in zip(layer.weights, state.slabs):
            cache_of[by_fqn[weight_fqn].name] = (state, by_fqn[slab_fqn])
    node_device = dict(dg.node_device)
    records = {c.name: c for c in dg.copies}
    reads: dict[int, list[torch.fx.Node]] = {}  # layer → the reads of its routed experts
    for node in list(graph.nodes):
        source = node.args[0] if node.op == "call_function" and node.args else None
        if not isinstance(source, torch.fx.Node) or source.name not in cache_of:
            continue
        if node.target is not GATHER_H2D:
            continue
        state, slab = cache_of[source.name]
        index = node.args[1]  # gather_h2d_copy(x, index, src, dst)
        args = (source, index, slab, by_fqn[state.slots], str(CPU), str(device))
        with graph.inserting_before(node):
            read = graph.create_node("call_function", GATHER_REUSE, args, {}, name=f"{node.name}_cached")
        read.meta = dict(node.meta)
        node.replace_all_uses_with(read)
        graph.erase_node(node)
        node_device.pop(node.name, None)
        node_device[read.name] = device
        old = records.pop(node.name)
        records[read.name] = dataclasses.replace(
            old,
            name=read.name,
            role=CopyRole.REUSE,
            index=_node(index).name,
            prefetch=slab.name,  # the rows it may take from the device: the cache's slabs
            prefetch_index=by_fqn[state.slots].name,
            consumers=tuple(u.name for u in read.users),
            reason=f"{old.reason}; through the layer-{state.layer} expert cache ({spec.slots_per_layer} slots, "
            f"{spec.policy}): cached rows are copied on {device}, only the others cross the link (nbytes is "
            "the upper bound: every row missed)",
        )
        reads.setdefault(state.layer, []).append(read)
    if spec.admits:
        slab_of = {weight: slab for weight, (_, slab) in cache_of.items()}
        _insert_admits(graph, reads, states, by_fqn, slab_of, node_device, device, spec.policy)
    residency = dict(dg.residency)
    for state in states:
        for fqn in state.fqns:
            residency[by_fqn[fqn].name] = (device,)
            node_device[by_fqn[fqn].name] = device
    graph.lint()
    copies = tuple(records[n.name] for n in graph.nodes if n.name in records)
    return dataclasses.replace(dg, graph=graph, node_device=node_device, copies=copies, residency=residency)


def _insert_admits(
    graph: torch.fx.Graph,
    reads: dict[int, list[torch.fx.Node]],
    states: list[CacheState],
    by_fqn: dict[str, torch.fx.Node],
    cache_slab: dict[str, torch.fx.Node],
    node_device: dict[str, Device],
    device: Device,
    policy: str,
) -> None:
    """Rule 4."""
    position = {n: i for i, n in enumerate(graph.nodes)}
    for state in states:
        layer_reads = reads.get(state.layer, [])
        if not layer_reads:
            continue
        last = max((u for r in layer_reads for u in r.users), key=position.__getitem__, default=layer_reads[-1])
        index = layer_reads[0].args[1]  # the routed experts: every read of the layer selects them
        slabs = [cache_slab[_node(r.args[0]).name] for r in layer_reads]
        args = (index, list(layer_reads), slabs, *(by_fqn[getattr(state, f)] for f in _STATE_FIELDS), policy)
        with graph.inserting_after(last):
            admit = graph.create_node("call_function", ADMIT, args, {}, name=f"expert_cache_admit_{state.layer}")
        admit.meta["val"] = None
        node_device[admit.name] = device


def _node(arg: Any) -> torch.fx.Node:
    if not isinstance(arg, torch.fx.Node):
        raise TypeError(f"expected a graph node, got {type(arg).__name__}")
    return arg
