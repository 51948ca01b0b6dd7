"""Lifetimes: which tensors need memory, on which device, over which execution steps.

``tensor_lifetimes(dg)`` walks a propagated graph in execution order and returns one
``TensorLifetime`` per *storage* — a tensor that owns memory — plus, for every other
tensor value, either the storage it aliases or the reason it needs no planned memory.

Rules:
1. Step ``i`` is the ``i``-th node of ``dg.graph`` (placeholders first, output last).
2. A value shares its input's storage when torch.export traced it that way: the fake
   tensors of views (``view``, ``permute``, ``split`` …) and of in-place or no-op results
   (``to`` to the same dtype) share their base's fake storage, while ``reshape`` of a
   non-contiguous tensor does not. So aliasing is read from the trace, not from op lists.
3. Copy nodes always own new memory on their target device.
4. A storage lives from the step that writes it to the last step that reads it or any
   alias of it; the value of a multi-output op (``topk``) is written at that op's step.
5. Graph inputs are live from step 0; graph outputs until the last step.
6. Constants and views of them are resident, not planned. Graph inputs are not planned
   when the caller owns them (``alloc_graph_inputs=False``), likewise outputs.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Mapping

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef

from ..graph_values import node_nbytes, value_of
from ..devices import Device
from ..propagate import DeviceGraph

__all__ = ["TensorLifetime", "Lifetimes", "tensor_lifetimes"]

KINDS = ("input", "output", "activation", "copy")


@dataclass(frozen=True)
class TensorLifetime:
    """A tensor that owns memory: where, how big, and when it is live."""

    name: str  # the value that writes the storage
    device: Device
    nbytes: int  # bytes of the tensor (upper bound for dynamic sizes)
    start: int  # first step live
    end: int  # last step live (inclusive)
    kind: str  # "input" | "output" | "activation" | "copy"
    aliases: tuple[str, ...]  # other values that share this storage


@dataclass(frozen=True)
class Lifetimes:
    """The result of ``tensor_lifetimes``."""

    steps: tuple[str, ...]  # node names in execution order
    storages: Mapping[str, TensorLifetime]  # planned storages, in order of definition
    storage_of: Mapping[str, str]  # every planned tensor value → its storage
    unplanned: Mapping[str, str]  # tensor values with no planned memory → why


def _storage_key(val: Any) -> int | None:
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return StorageWeakRef(val.untyped_storage()).cdata
    except (RuntimeError, NotImplementedError):  # tensors without storage
        return None


def _aliased(
    node: torch.fx.Node, keys: dict[torch.fx.Node, int | None], copies: Mapping[str, Any]
) -> torch.fx.Node | None:
    """The input whose traced storage ``node``'s value shares (rule 2), or None.

    ``keys`` caches each node's storage key: a node is read by all its users."""

    def key_of(n: torch.fx.Node) -> int | None:
        if n not in keys:
            keys[n] = _storage_key(value_of(n))
        return keys[n]

    key = key_of(node)
    if key is None or node.name in copies:
        return None
    inputs = node.all_input_nodes
    if node.target is operator.getitem and inputs:
        inputs = inputs[0].all_input_nodes  # the tuple's producer's inputs
    for arg in inputs:
        if key_of(arg) == key:
            return arg
    return None


def tensor_lifetimes(
    dg: DeviceGraph, alloc_graph_inputs: bool = True, alloc_graph_outputs: bool = True
) -> Lifetimes:
    """Storages and lifetimes of every tensor in ``dg`` (see the module rules)."""
    nodes = list(dg.graph.nodes)
    steps = tuple(n.name for n in nodes)
    index = {n: i for i, n in enumerate(nodes)}
    program = dg.program
    base: dict[torch.fx.Node, torch.fx.Node] = {}  # tensor value → storage-owning value
    unplanned: dict[str, str] = {}
    start: dict[torch.fx.Node, int] = {}
    end: dict[torch.fx.Node, int] = {}
    kind: dict[torch.fx.Node, str] = {}
    constant_bases: set[torch.fx.Node] = set()
    storage_keys: dict[torch.fx.Node, int | None] = {}

    for node in nodes:
        if node.op == "output":
            continue
        val = value_of(node)
        if not isinstance(val, torch.Tensor):
            continue
        if node.op == "placeholder":
            base[node] = node
            if node.name in program.constants:
                constant_bases.add(node)
            else:
                start[node], kind[node] = 0, "input"
            continue
        source = _aliased(node, storage_keys, dg.copy_table)
        if source is not None and source in base:
            base[node] = base[source]
            continue
        base[node] = node
        producer = node.args[0] if node.target is operator.getitem else node
        start[node] = index[producer]
        kind[node] = "copy" if node.name in dg.copy_table else "activation"

    for node in nodes:  # rule 4: last reads
        for arg in node.all_input_nodes:
            owner = base.get(arg)
            if owner is None and isinstance(value_of(arg), (tuple, list)):
                continue  # a multi-output op: read through its getitems
            if owner is not None:
                end[owner] = max(end.get(owner, 0), index[node])
    last = len(nodes) - 1
    output_names = set(dg.user_outputs)
    for node in nodes:  # rule 5
        if node.name in output_names and node in base:
            owner = base[node]
            end[owner] = last
            if kind.get(owner) in ("activation", "copy"):
                kind[owner] = "output"

    storages: dict[str, TensorLifetime] = {}
    storage_of: dict[str, str] = {}
    aliases: dict[torch.fx.Node, list[str]] = {}
    for node, owner in base.items():
        if node is not owner:
            aliases.setdefault(owner, []).append(node.name)
    for node, owner in base.items():
        if owner in constant_bases:
            unplanned[node.name] = (
                f"constant {program.constants[owner.name]!r}, resident on "
                f"{', '.join(str(d) for d in dg.residency.get(owner.name, ())) or 'no device'}"
                if node is owner
                else f"view of constant {owner.name!r} (resident)"
            )
            continue
        if kind[owner] == "input" and not alloc_graph_inputs:
            unplanned[node.name] = f"graph input memory owned by the caller (on {dg.node_device[owner.name]})"
            continue
        if kind[owner] == "output" and not alloc_graph_outputs:
            unplanned[node.name] = f"graph output memory owned by the caller (on {dg.node_device[owner.name]})"
            continue
        storage_of[node.name] = owner.name
        if node is owner:
            storages[node.name] = TensorLifetime(
                name=node.name,
                device=dg.node_device[node.name],
                nbytes=node_nbytes(node),
                start=start[node],
                end=max(end.get(node, start[node]), start[node]),
                kind=kind[node],
                aliases=tuple(aliases.get(node, ())),
            )
    return Lifetimes(steps, storages, storage_of, unplanned)
