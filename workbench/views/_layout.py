"""Graph layout as plain data: what GraphView draws, computed without matplotlib.

``graph_layout(dg, collapse=None, devices=None)`` returns a ``GraphLayout``: one
``LayoutNode`` per drawn node (a graph node, or a collapsed delegate / layer), the edges
between them and the delegate boxes, with top-to-bottom coordinates.

Rules:
1. Without ``collapse`` there is one layout node per node of ``dg.graph`` (placeholders
   and the output node included), after the device filter.
2. ``devices=[...]`` keeps the nodes that touch one of those devices: ops and inputs on
   them, copies from or to them, constants resident on them; the output node stays when
   something kept feeds it. Filtering happens before collapsing.
3. ``collapse="delegates"`` draws each delegate as one node (its members that are in the
   graph); ``collapse="layers"`` draws each repeated layer as one node. A node's layer is
   the first module path in its ``nn_module_stack`` that ends in an index (``layers.3``);
   a node that belongs to no module (a copy, a constant, an op traced at the root) joins
   a layer when all its users are in that layer, so a copy that only feeds ``layers.3``
   is drawn inside it; user inputs and the output always stay visible.
4. Layers of the layout (rows, ``y``; y grows downward) are longest paths from the
   sources, taken over the edges that go forward in graph order (contracting groups can
   make a back edge; it is still drawn). Constant placeholders sit one row above their
   first user so that weights do not crowd the top row.
5. Within a row, nodes are ordered by the mean ``x`` of their predecessors (ties: graph
   order) and spaced one unit apart, centred on 0.
6. Edges are deduplicated and never join a node to itself.
7. ``node_of`` maps every kept graph node to the layout node that draws it, so a
   selection of any graph node can be highlighted in any collapse mode.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import pandas as pd
import torch.fx

from ..graph_values import node_nbytes
from ..devices import Device
from ..propagate import DeviceGraph
from ._style import copy_label, format_bytes

COLLAPSE_MODES = (None, "delegates", "layers")
NODE_KINDS = ("input", "constant", "op", "copy", "output", "delegate", "layer")

_INDEXED_PATH = re.compile(r"(^|\.)\d+$")


@dataclass(frozen=True)
class LayoutNode:
    """One drawn node."""

    id: str  # graph node name, delegate name or layer path
    label: str  # text drawn next to it ("h2d 4.0 KiB" for a copy)
    kind: str  # one of NODE_KINDS
    colour_key: str  # "device:cuda:0" | "copy:h2d" | "constant"
    device: Optional[str]  # its device (the most common one for a group; None for output)
    devices: tuple[str, ...]  # every device among its members
    layer: int  # row, 0 at the top
    x: float
    y: float  # == layer; grows downward
    members: tuple[str, ...]  # graph nodes it stands for
    nbytes: int  # value bytes; bytes moved for a copy; copy bytes inside a group
    copy_kind: Optional[str]  # "h2d" | "d2h" | "d2d" for a copy node
    copies: int  # copies among its members
    device_counts: tuple[tuple[str, int], ...] = ()  # (device, ops and inputs on it), groups only


@dataclass(frozen=True)
class LayoutEdge:
    src: str  # layout node ids
    dst: str


@dataclass(frozen=True)
class GroupBox:
    """A delegate drawn as a box around its member nodes (uncollapsed delegates only)."""

    name: str
    device: str
    members: tuple[str, ...]  # layout node ids inside
    x0: float
    x1: float
    y0: float
    y1: float


@dataclass(frozen=True)
class GraphLayout:
    nodes: tuple[LayoutNode, ...]  # row by row, left to right
    edges: tuple[LayoutEdge, ...]
    boxes: tuple[GroupBox, ...]
    node_of: Mapping[str, str]  # graph node name → layout node id (rule 7)
    collapse: Optional[str]
    devices: Optional[tuple[str, ...]]  # the device filter, None for all
    graph_nodes: int  # graph nodes kept by the filter

    @property
    def depth(self) -> int:
        return 1 + max((n.layer for n in self.nodes), default=-1)

    @property
    def width(self) -> int:
        rows = Counter(n.layer for n in self.nodes)
        return max(rows.values(), default=0)

    def node(self, node_id: str) -> LayoutNode:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise KeyError(f"no layout node {node_id!r}")

    def to_dataframe(self) -> pd.DataFrame:
        """One row per drawn node."""
        columns = ["id", "label", "kind", "device", "layer", "x", "y", "members", "nbytes", "copy_kind", "copies"]
        rows = [
            {
                "id": n.id,
                "label": n.label,
                "kind": n.kind,
                "device": n.device,
                "layer": n.layer,
                "x": n.x,
                "y": n.y,
                "members": len(n.members),
                "nbytes": n.nbytes,
                "copy_kind": n.copy_kind,
                "copies": n.copies,
            }
            for n in self.nodes
        ]
        return pd.DataFrame(rows, columns=columns)


# --- public builder ----------------------------------------------------------------


def graph_layout(
    dg: DeviceGraph,
    collapse: Optional[str] = None,
    devices: Optional[Iterable[str]] = None,
) -> GraphLayout:
    """Lay ``dg`` out top to bottom (see the module rules)."""
    if collapse not in COLLAPSE_MODES:
        raise ValueError(
            f"unknown collapse mode {collapse!r}; valid modes are None, 'delegates' and 'layers'"
        )
    wanted = _parse_devices(dg, devices)
    nodes = [n for n in dg.graph.nodes if _keep(dg, n, wanted)]
    kept = {n.name for n in nodes}
    constants = set(dg.residency)
    if collapse == "delegates":
        group_of = _delegate_groups(dg, nodes)
    elif collapse == "layers":
        group_of = _layer_groups(nodes, kept, constants, dg.copy_table)
    else:
        group_of = {}
    groups = set(group_of.values())
    node_of = {n.name: group_of.get(n.name, n.name) for n in nodes}
    members: dict[str, list[torch.fx.Node]] = defaultdict(list)
    for n in nodes:
        members[node_of[n.name]].append(n)
    members = _in_graph_order(members, nodes, constants, dg.copy_table)
    edges = _edges(nodes, kept, node_of)
    layers = _rows(list(members), edges, members, constants)
    xs = _columns(list(members), edges, layers)
    layout_nodes = [
        _layout_node(dg, lid, ms, collapse if lid in groups else None, layers[lid], xs[lid])
        for lid, ms in members.items()
    ]
    layout_nodes.sort(key=lambda n: (n.layer, n.x))
    boxes = _boxes(dg, layout_nodes) if collapse is None else ()
    return GraphLayout(
        nodes=tuple(layout_nodes),
        edges=tuple(LayoutEdge(a, b) for a, b in edges),
        boxes=boxes,
        node_of=node_of,
        collapse=collapse,
        devices=tuple(sorted(wanted, key=Device.parse)) if wanted is not None else None,
        graph_nodes=len(nodes),
    )


# --- filtering (rule 2) ------------------------------------------------------------


def _parse_devices(dg: DeviceGraph, devices: Optional[Iterable[str]]) -> Optional[set[str]]:
    if devices is None:
        return None
    if isinstance(devices, (str, Device)):
        devices = [devices]
    present = [str(d) for d in dg.devices]
    parsed = set()
    for d in devices:
        dev = str(Device.parse(d))
        if dev not in present:
            raise ValueError(f"device filter {d!r}: this graph has no value on {dev}; its devices are {', '.join(present)}")
        parsed.add(dev)
    return parsed


def node_devices(dg: DeviceGraph, node: torch.fx.Node) -> set[str]:
    """Every device a node touches: copies both ends, constants every resident device."""
    record = dg.copy_table.get(node.name)
    if record is not None:
        return {str(record.src), str(record.dst)}
    if node.name in dg.residency:
        return {str(d) for d in dg.residency[node.name]}
    device = dg.node_device.get(node.name)
    return {str(device)} if device is not None else set()


def _keep(dg: DeviceGraph, node: torch.fx.Node, wanted: Optional[set[str]]) -> bool:
    if wanted is None:
        return True
    if node.op == "output":
        return any(_keep(dg, a, wanted) for a in node.all_input_nodes)
    return bool(node_devices(dg, node) & wanted)


# --- collapsing (rule 3) -----------------------------------------------------------


def _delegate_groups(dg: DeviceGraph, nodes: Sequence[torch.fx.Node]) -> dict[str, str]:
    delegate_of = dg.placement.node_delegate
    return {n.name: delegate_of[n.name] for n in nodes if n.name in delegate_of}


def layer_path(node: torch.fx.Node) -> Optional[str]:
    """The first module path of ``node``'s stack that ends in an index (``layers.3``)."""
    stack = node.meta.get("nn_module_stack") or {}
    for value in stack.values():
        path = value[0] if isinstance(value, tuple) else None
        if path and _INDEXED_PATH.search(path):
            return path
    return None


def _unowned(node: torch.fx.Node, constants: set[str], copies: Mapping[str, object]) -> bool:
    """True for nodes that belong to no module of their own: copies, constants, and
    ops traced at the root module. User inputs and the output stay visible."""
    if node.op == "placeholder":
        return node.name in constants
    if node.op != "call_function":
        return False
    if node.name in copies:
        return True
    stack = node.meta.get("nn_module_stack") or {}
    return not any(isinstance(v, tuple) and v and v[0] for v in stack.values())


def _layer_groups(
    nodes: Sequence[torch.fx.Node], kept: set[str], constants: set[str], copies: Mapping[str, object]
) -> dict[str, str]:
    group: dict[str, str] = {}
    for n in nodes:
        path = layer_path(n)
        if path is not None:
            group[n.name] = path
    # users come after their inputs, so one reverse sweep settles chains of unowned nodes
    for n in reversed(nodes):
        if n.name in group or not _unowned(n, constants, copies):
            continue
        users = [u for u in n.users if u.name in kept]
        owners = {group.get(u.name) for u in users}
        if users and len(owners) == 1 and None not in owners:
            group[n.name] = owners.pop()
    return group


# --- layout (rules 4-6) ------------------------------------------------------------


def _in_graph_order(
    members: Mapping[str, list[torch.fx.Node]],
    nodes: Sequence[torch.fx.Node],
    constants: set[str],
    copies: Mapping[str, object],
) -> dict[str, list[torch.fx.Node]]:
    """Layout nodes ordered by their first *anchor* member: a group that absorbed
    constants (placeholders, first in the graph) or root-level helpers sorts by its own
    first op, not by them, so the order stays close to a topological one."""
    index = {n.name: i for i, n in enumerate(nodes)}

    def anchor(item: tuple[str, list[torch.fx.Node]]) -> int:
        ms = item[1]
        own = [index[m.name] for m in ms if not _unowned(m, constants, copies)]
        return min(own) if own else min(index[m.name] for m in ms)

    return dict(sorted(members.items(), key=anchor))


def _edges(nodes: Sequence[torch.fx.Node], kept: set[str], node_of: Mapping[str, str]) -> list[tuple[str, str]]:
    seen: dict[tuple[str, str], None] = {}
    for n in nodes:
        for a in n.all_input_nodes:
            if a.name not in kept:
                continue
            edge = (node_of[a.name], node_of[n.name])
            if edge[0] != edge[1]:
                seen[edge] = None
    return list(seen)


def _rows(
    order: list[str], edges: list[tuple[str, str]], members: Mapping[str, list], constants: set[str]
) -> dict[str, int]:
    position = {lid: i for i, lid in enumerate(order)}
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if position[a] < position[b]:  # forward edges only (rule 4)
            preds[b].append(a)
            succs[a].append(b)
    layer: dict[str, int] = {}
    for lid in order:
        layer[lid] = max((layer[p] + 1 for p in preds[lid]), default=0)
    for lid in reversed(order):
        ms = members[lid]
        if len(ms) == 1 and ms[0].name in constants and succs[lid]:
            layer[lid] = max(0, min(layer[s] for s in succs[lid]) - 1)
    return layer


def _columns(order: list[str], edges: list[tuple[str, str]], layers: Mapping[str, int]) -> dict[str, float]:
    preds: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if layers[a] < layers[b]:
            preds[b].append(a)
    rows: dict[int, list[str]] = defaultdict(list)
    for lid in order:
        rows[layers[lid]].append(lid)
    xs: dict[str, float] = {}
    rank = {lid: i for i, lid in enumerate(order)}
    for row in sorted(rows):
        ids = rows[row]

        def key(lid: str) -> tuple[float, int]:
            placed = [xs[p] for p in preds[lid] if p in xs]
            return (sum(placed) / len(placed) if placed else 0.0, rank[lid])

        ids.sort(key=key)
        offset = (len(ids) - 1) / 2.0
        for i, lid in enumerate(ids):
            xs[lid] = i - offset
    return xs


# --- node contents -----------------------------------------------------------------


def _layout_node(
    dg: DeviceGraph, lid: str, members: list[torch.fx.Node], group_kind: Optional[str], layer: int, x: float
) -> LayoutNode:
    names = tuple(m.name for m in members)
    copies = [m for m in members if m.name in dg.copy_table]
    copy_bytes = sum(node_nbytes(m) for m in copies)
    devs = Counter()
    for m in members:
        if m.op == "call_function" or (m.op == "placeholder" and m.name not in dg.residency):
            device = dg.node_device.get(m.name)
            if device is not None:
                devs[str(device)] += 1
    devices = tuple(sorted(devs, key=Device.parse))
    common = max(devs, key=lambda d: (devs[d], -devices.index(d))) if devs else None
    if group_kind is not None:
        kind = "delegate" if group_kind == "delegates" else "layer"
        what = f"{len(members)} ops" if kind == "delegate" else f"{len(members)} nodes"
        label = f"{lid} · {common} · {what}" if kind == "delegate" else f"{lid} · {what}"
        if copies:
            label += f" · {len(copies)} {'copy' if len(copies) == 1 else 'copies'} {format_bytes(copy_bytes)}"
        key = f"device:{common}" if common else "constant"
        counts = tuple((d, devs[d]) for d in devices)
        return LayoutNode(
            lid, label, kind, key, common, devices, layer, x, float(layer), names, copy_bytes, None, len(copies), counts
        )
    node = members[0]
    record = dg.copy_table.get(node.name)
    if record is not None:
        kind_ = str(record.kind)
        nbytes = node_nbytes(node)
        return LayoutNode(
            lid, copy_label(kind_, nbytes), "copy", f"copy:{kind_}", common, devices, layer, x, float(layer),
            names, nbytes, kind_, 1,
        )
    if node.op == "output":
        return LayoutNode(lid, "output", "output", "constant", None, (), layer, x, float(layer), names, 0, None, 0)
    if node.op == "placeholder" and node.name in dg.residency:
        held = tuple(sorted((str(d) for d in dg.residency[node.name]), key=Device.parse))
        first = next((d for d in held if d != "cpu"), held[0] if held else None)
        return LayoutNode(
            lid, node.name, "constant", "constant", first, held, layer, x, float(layer), names, node_nbytes(node), None, 0
        )
    kind = "input" if node.op == "placeholder" else "op"
    label = node.name
    key = f"device:{common}" if common else "constant"
    return LayoutNode(lid, label, kind, key, common, devices, layer, x, float(layer), names, node_nbytes(node), None, 0)


def _boxes(dg: DeviceGraph, nodes: Sequence[LayoutNode]) -> tuple[GroupBox, ...]:
    where = {n.id: n for n in nodes}
    boxes = []
    for d in dg.placement.delegates:
        inside = [where[m] for m in d.nodes if m in where]
        if not inside:
            continue
        boxes.append(
            GroupBox(
                d.name,
                str(d.device),
                tuple(n.id for n in inside),
                min(n.x for n in inside),
                max(n.x for n in inside),
                min(n.y for n in inside),
                max(n.y for n in inside),
            )
        )
    return tuple(boxes)
