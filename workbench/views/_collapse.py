"""Collapsing a graph into groups (layout rules 3 and 4): delegates, repeated layers, the
modules outside the layers, and the groups a caller asks to expand.

``layer_groups`` and ``delegate_groups`` map each graph node that a collapsed drawing
folds into a group to that group's id; a node left out is drawn on its own. See
``_layout`` for the rules these implement.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Iterable, Mapping, Optional, Sequence

import torch.fx

from ..indexed_names import ends_with_index
from ._inputs import ViewOptionError
from ._upstream import CopyRecord, DeviceGraph

_MIN_MODULE_GROUP = 3  # ops of a top-level module that is not a layer, to make it a box
#: The group of the ops traced at the root that no layer claims.
ROOT_GROUP = "(root)"


def delegate_groups(dg: DeviceGraph, nodes: Sequence[torch.fx.Node]) -> dict[str, str]:
    delegate_of = dg.placement.node_delegate
    return {n.name: delegate_of[n.name] for n in nodes if n.name in delegate_of}


def layer_path(node: torch.fx.Node) -> Optional[str]:
    """The first module path of ``node``'s stack that ends in an index (``layers.3``)."""
    stack = node.meta.get("nn_module_stack") or {}
    for value in stack.values():
        path = value[0] if isinstance(value, tuple) else None
        if path and ends_with_index(path):
            return path
    return None


def _module_paths(node: torch.fx.Node) -> list[str]:
    """The module paths of ``node``'s stack, outermost first."""
    stack = node.meta.get("nn_module_stack") or {}
    return [str(v[0]) for v in stack.values() if isinstance(v, tuple) and v and v[0]]


def _own_module(node: torch.fx.Node, containers: set[str]) -> Optional[str]:
    """The outermost module of ``node``'s stack that is not a container of the layers
    (``model``, ``model.layers``): ``model.embed_tokens``, ``model.norm``, ``lm_head``."""
    return next((p for p in _module_paths(node) if p not in containers), None)


def _unowned(node: torch.fx.Node, constants: set[str], records: Mapping[str, CopyRecord], containers: set[str]) -> bool:
    """True for nodes that belong to no module of their own: copies, constants, and
    ops traced at the root module or directly in a container of the layers. User inputs
    and the output stay visible."""
    if node.op == "placeholder":
        return node.name in constants
    if node.op != "call_function":
        return False
    if node.name in records:
        return True
    return _own_module(node, containers) is None


def _containers(paths: Iterable[str]) -> set[str]:
    """Every module path that holds a layer: ``model`` and ``model.layers`` for ``model.layers.3``."""
    out: set[str] = set()
    for path in paths:
        parts = path.split(".")
        out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    return out


def layer_groups(
    nodes: Sequence[torch.fx.Node], kept: set[str], constants: set[str], records: Mapping[str, CopyRecord]
) -> dict[str, str]:
    group: dict[str, str] = {}
    others: dict[str, list[str]] = defaultdict(list)
    paths = {n.name: layer_path(n) for n in nodes if n.name not in records}
    containers = _containers(p for p in paths.values() if p is not None)
    for n in nodes:
        if n.name in records:
            continue
        path = paths[n.name]
        if path is not None:
            group[n.name] = path
        elif n.op == "call_function" and (own := _own_module(n, containers)) is not None:
            others[own].append(n.name)
    for path, names in others.items():  # the embedding, the final norm, the LM head …: one box each
        if len(names) >= _MIN_MODULE_GROUP:
            group.update(dict.fromkeys(names, path))
    # users come after their inputs, so one reverse sweep settles chains of unowned nodes
    for n in reversed(nodes):
        if n.name in group or not _unowned(n, constants, records, containers):
            continue
        users = [u for u in n.users if u.name in kept]
        if n.name in constants and any(u.name in records for u in users):
            continue  # read through a copy: lives elsewhere, drawn outside (rule 3)
        owners = {group.get(u.name) for u in users}
        owner = owners.pop() if len(owners) == 1 else None
        if users and owner is not None:
            group[n.name] = owner
    # a copy stays inside only when the value it copies is computed in the same group
    for name, record in records.items():
        if name in group and group.get(record.value) != group[name]:
            del group[name]
    # ops of no module of their own that feed several groups (rotary tables, masks …):
    # one box before the layers and one after them, so no arrow runs back up
    layered = {name for name, g in group.items() if paths.get(name) == g}
    after: set[str] = set()
    for n in nodes:
        if any(a.name in layered or a.name in after for a in n.all_input_nodes):
            after.add(n.name)
    loose: dict[str, list[str]] = defaultdict(list)
    for n in nodes:
        if n.op == "call_function" and n.name not in group and n.name not in records and _own_module(n, containers) is None:
            base = next((p for p in reversed(_module_paths(n)) if p in containers), ROOT_GROUP)
            loose[f"{base} (after the layers)" if n.name in after else base].append(n.name)
    for name, names in loose.items():
        if len(names) >= _MIN_MODULE_GROUP:
            group.update(dict.fromkeys(names, name))
    return group


def check_expand(expand: Iterable[str], groups: set[str]) -> tuple[str, ...]:
    if isinstance(expand, str):
        expand = [expand]
    chosen = tuple(dict.fromkeys(str(g) for g in expand))
    unknown = [g for g in chosen if g not in groups]
    if unknown:
        valid = ", ".join(sorted(groups, key=natural_key)) or "none (collapse the graph first)"
        raise ViewOptionError(f"cannot expand {', '.join(map(repr, unknown))}: not a collapsed group here; groups are {valid}")
    return chosen


def natural_key(text: str) -> tuple:
    """``layers.10`` after ``layers.9``."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text))
