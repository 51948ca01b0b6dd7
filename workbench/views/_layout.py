"""Graph layout as plain data: what GraphView draws, computed without a front end.

``graph_layout(dg, collapse=None, devices=None, expand=())`` returns a ``GraphLayout``:
one ``LayoutNode`` per drawn node (a graph node, or a collapsed delegate / layer) with
its position and size in points, the edges between them with their routes, and the
boxes drawn around delegates and expanded groups.

Here: the builder, filtering (rule 2) and edges (rule 6). Collapsing (rules 3 and 4) is
in ``_collapse``; what a node shows and its size in ``_node_content``; positions (rule 5)
come from ``_dot_layout`` or, without dot, ``_rows_layout``, then ``_bus`` routes the
layers' edges into the output and ``_side_nodes`` places the copies on their layers'
rows, all exchanging ``_positions.Placed``.

Rules:
1. Without ``collapse`` there is one layout node per node of ``dg.graph`` (placeholders
   and the output node included), after the device filter — except metadata-only checks
   (``_assert_tensor_metadata``: they read no data, produce nothing, and sit on the host
   whatever their input's device), which are not drawn; ``hidden`` counts them.
2. ``devices=[...]`` keeps the nodes that touch one of those devices: ops and inputs on
   them, copies from or to them, constants resident on them; the output node stays when
   something kept feeds it. Filtering happens before collapsing.
3. ``collapse="delegates"`` draws each delegate as one node (its members that are in the
   graph); ``collapse="layers"`` draws each repeated layer as one node. A node's layer is
   the first module path in its ``nn_module_stack`` that ends in an index (``layers.3``);
   the ops of another module (the outermost that does not hold the layers: the
   embedding, the final norm, the rotary tables, the LM head) form one group per module
   when there are at least three of them. A node that belongs to no module of its own (a
   constant, an op traced at the root or directly in the model that holds the layers)
   joins a layer when all its users are in that layer; those left over (three or more:
   masks every attention layer reads …) form the group ``(root)`` (or the holding
   module's path), split in two — those computed from a layer's result form
   ``… (after the layers)`` — so no drawn arrow runs from the layers back up. What crosses a layer's border stays outside it: a copy is drawn inside a
   layer only when the value it copies is computed in that layer and all its consumers
   are there (a copy between two of the layer's ops, counted on the layer's copy
   badges); any other copy is drawn on its own, and so is a constant read through a
   copy (a streamed weight), so the weights and copies that feed a layer from another
   device are visible. User inputs and the output always stay visible.
4. ``expand=(group, …)`` draws the members of those collapsed groups one by one inside a
   box labelled with the group, the rest of the graph staying collapsed; naming a group
   that is not drawn is an error that lists the groups.
5. Positions come from Graphviz ``dot`` (ranks top to bottom, each node sized for what it
   shows, delegates and expanded groups as clusters). ``layer`` is a node's rank: the
   index of its y among the distinct y of the drawn nodes. Without ``dot`` (not
   installed, failed, or above ``DOT_MAX_NODES`` drawn nodes) the layout falls back to
   rows by longest path from the sources, ordered by the mean x of their predecessors,
   and says so (``engine == "rows"``, ``LayoutWarning`` when dot is missing or fails).
   Collapsed by layers, two kinds of things are placed after dot, not by it: a copy
   drawn on its own that serves a collapsed layer (and a weight only such copies of one
   layer read) sits on that layer's row, at the layer's y, right of everything else in that
   row (not of the whole drawing), each weight before the copies that read it (such a weight shows its
   name relative to that layer, ``mlp.experts.w1``: its row says which layer; its
   ``label`` stays the full name); and the edges from the
   layers into the output (each layer's cache updates, long edges that cost dot most of
   its time) run along one bus line down the drawing's left side. A node's rank counts
   the rows dot made; a side node has its layer's.
6. Edges are deduplicated and never join a node to itself; each carries the graph nodes
   at its two ends whose graph edges it stands for, so a selection highlights only the
   drawn edges that carry the selected node's own inputs and users.
7. ``node_of`` maps every kept graph node to the layout node that draws it, so a
   selection of any graph node can be found in any collapse mode.
8. Copy facts (kind, ends, bytes) are read from the DeviceGraph's copy records, never
   from the copy ops' arguments.
"""

from __future__ import annotations

import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import pandas as pd
import torch.fx

from ..devices import Device
from ..errors import WorkbenchWarning
from ._bus import bus_edges, route_bus
from ._collapse import check_expand, delegate_groups, layer_groups
from ._dot_layout import DOT_MAX_NODES, dot_layout
from ._graphviz import GraphvizUnavailable
from ._inputs import UnknownNameError, ViewOptionError
from ._node_content import GROUP_KINDS, LINE_PT, CopyBadge, NodeContent, node_content, relabelled
from ._positions import Cluster, Placed
from ._rows_layout import rows_layout
from ._side_nodes import place_side, side_rows
from ._upstream import CopyRecord, DeviceGraph, reads_metadata_only

COLLAPSE_MODES = (None, "delegates", "layers")

_BOX_PAD_PT = 5.0


class LayoutWarning(WorkbenchWarning):
    """The graph was laid out without Graphviz (rows instead)."""


@dataclass(frozen=True)
class LayoutNode:
    """One drawn node."""

    id: str  # graph node name, delegate name or layer path
    label: str  # its name in short ("h2d 4.0 KiB" for a copy, drawn first with "→ layers.3": the layer it serves)
    kind: str  # one of NODE_KINDS
    colour_key: str  # "device:cuda:0" | "copy:h2d" | "constant"
    device: Optional[str]  # its device (the most common one for a group; None for output)
    devices: tuple[str, ...]  # every device among its members
    layer: int  # rank, 0 at the top
    x: float  # centre, points from the left
    y: float  # centre, points from the top
    members: tuple[str, ...]  # graph nodes it stands for
    nbytes: int  # value bytes; bytes moved for a copy; copy bytes inside a group
    copy_kind: Optional[str]  # "h2d" | "d2h" | "d2d" for a copy node
    copies: int  # copies among its members
    device_counts: tuple[tuple[str, int], ...] = ()  # (device, ops and inputs on it), groups only
    lines: tuple[str, ...] = ()  # every text line drawn, first = label
    w: float = 0.0  # drawn width, points
    h: float = 0.0  # drawn height, points
    badges: tuple[CopyBadge, ...] = ()  # copies inside a group, per kind


@dataclass(frozen=True)
class LayoutEdge:
    src: str  # layout node ids
    dst: str
    points: tuple[tuple[float, float], ...] = ()  # route (rule 5), empty: straight
    src_members: tuple[str, ...] = ()  # graph nodes at the tail whose edges it carries
    dst_members: tuple[str, ...] = ()  # and at the head


@dataclass(frozen=True)
class GroupBox:
    """A box around member nodes: a delegate (uncollapsed) or an expanded group."""

    name: str
    device: str
    members: tuple[str, ...]  # layout node ids inside
    x0: float
    x1: float
    y0: float
    y1: float
    kind: str = "delegate"  # "delegate" | "layer"
    label: str = ""


@dataclass(frozen=True)
class GraphLayout:
    nodes: tuple[LayoutNode, ...]  # rank by rank, left to right
    edges: tuple[LayoutEdge, ...]
    boxes: tuple[GroupBox, ...]
    node_of: Mapping[str, str]  # graph node name → layout node id (rule 7)
    collapse: Optional[str]
    devices: Optional[tuple[str, ...]]  # the device filter, None for all
    graph_nodes: int  # graph nodes kept by the filter
    expanded: tuple[str, ...] = ()  # groups drawn member by member (rule 4)
    engine: str = "dot"  # "dot" | "rows" (rule 5)
    extent: tuple[float, float] = (0.0, 0.0)  # (width, height) of the drawing, points
    note: str = ""  # why the fallback engine was used
    hidden: int = 0  # metadata-only checks not drawn (rule 1)

    @property
    def depth(self) -> int:
        return 1 + max((n.layer for n in self.nodes), default=-1)

    @property
    def width(self) -> int:
        rows = Counter(n.layer for n in self.nodes)
        return max(rows.values(), default=0)

    @property
    def groups(self) -> tuple[str, ...]:
        """Ids of the collapsed groups drawn (what ``expand`` may name)."""
        return tuple(n.id for n in self.nodes if n.kind in GROUP_KINDS)

    def node(self, node_id: str) -> LayoutNode:
        for n in self.nodes:
            if n.id == node_id:
                return n
        raise UnknownNameError(f"no layout node {node_id!r}; drawn nodes are {', '.join(n.id for n in self.nodes[:8])}…")

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
    expand: Iterable[str] = (),
) -> GraphLayout:
    """Lay ``dg`` out top to bottom (see the module rules)."""
    if collapse not in COLLAPSE_MODES:
        raise ViewOptionError(
            f"unknown collapse mode {collapse!r}; valid modes are None, 'delegates' and 'layers'"
        )
    wanted = _parse_devices(dg, devices)
    records = dg.copy_table
    shown = [n for n in dg.graph.nodes if not metadata_check(n)]
    nodes = [n for n in shown if _keep(dg, n, wanted, records)]
    kept = {n.name for n in nodes}
    constants = set(dg.residency)
    if collapse == "delegates":
        group_of = delegate_groups(dg, nodes)
    elif collapse == "layers":
        group_of = layer_groups(nodes, kept, constants, records)
    else:
        group_of = {}
    expanded = check_expand(expand, set(group_of.values()))
    open_group = {n: g for n, g in group_of.items() if g in expanded}
    group_of = {n: g for n, g in group_of.items() if g not in expanded}
    groups = set(group_of.values())
    node_of = {n.name: group_of.get(n.name, n.name) for n in nodes}
    members: dict[str, list[torch.fx.Node]] = defaultdict(list)
    for n in nodes:
        members[node_of[n.name]].append(n)
    members = _in_graph_order(members, nodes, constants)
    edges, ends = _edges(nodes, kept, node_of)
    drawn = {
        lid: node_content(dg, lid, ms, collapse if lid in groups else None, records)
        for lid, ms in members.items()
    }
    # expanded groups are dot clusters (kept together, nothing else inside); a delegate
    # is boxed around its members afterwards (its members are connected by data, and
    # clusters cost dot more time than the whole rest of the layout)
    clusters = _expanded_clusters(dg, open_group, expanded) if collapse is not None else {}
    drawn = _short_side_weights(dg, drawn, edges)
    placed = _place(drawn, edges, clusters, members, constants)
    layout_nodes = sorted(
        (_positioned(c, placed.centres[lid], placed.rank[lid]) for lid, c in drawn.items()),
        key=lambda n: (n.layer, n.x),
    )
    where = {n.id: n for n in layout_nodes}
    boxes = _boxes(clusters, placed, where) if collapse is not None else _delegate_boxes(dg, where)
    return GraphLayout(
        nodes=tuple(layout_nodes),
        edges=tuple(
            LayoutEdge(a, b, placed.routes.get((a, b), ()), tuple(ends[(a, b)][0]), tuple(ends[(a, b)][1]))
            for a, b in edges
        ),
        boxes=boxes,
        node_of=node_of,
        collapse=collapse,
        devices=tuple(sorted(wanted, key=Device.parse)) if wanted is not None else None,
        graph_nodes=len(nodes),
        expanded=tuple(expanded),
        engine=placed.engine,
        extent=placed.extent,
        note=placed.note,
        hidden=len(dg.graph.nodes) - len(shown),
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
            raise ViewOptionError(
                f"device filter {d!r}: this graph has no value on {dev}; its devices are {', '.join(present)}"
            )
        parsed.add(dev)
    return parsed


def node_devices(dg: DeviceGraph, node: torch.fx.Node, records: Optional[Mapping[str, CopyRecord]] = None) -> set[str]:
    """Every device a node touches: copies both ends, constants every resident device."""
    record = (records if records is not None else dg.copy_table).get(node.name)
    if record is not None:
        return {str(record.src), str(record.dst)}
    if node.name in dg.residency:
        return {str(d) for d in dg.residency[node.name]}
    device = dg.node_device.get(node.name)
    return {str(device)} if device is not None else set()


def metadata_check(node: torch.fx.Node) -> bool:
    """Rule 1: an op that reads only metadata and has no users (an assert)."""
    return not node.users and reads_metadata_only(node)


def _keep(dg: DeviceGraph, node: torch.fx.Node, wanted: Optional[set[str]], records: Mapping[str, CopyRecord]) -> bool:
    if wanted is None:
        return True
    if node.op == "output":
        return any(_keep(dg, a, wanted, records) for a in node.all_input_nodes)
    return bool(node_devices(dg, node, records) & wanted)



# --- edges (rule 6) ----------------------------------------------------------------


def _in_graph_order(
    members: Mapping[str, list[torch.fx.Node]], nodes: Sequence[torch.fx.Node], constants: set[str]
) -> dict[str, list[torch.fx.Node]]:
    """Layout nodes ordered by their first *anchor* member: a group that absorbed
    constants (placeholders, first in the graph) sorts by its own first op, not by them,
    so the order stays close to a topological one."""
    index = {n.name: i for i, n in enumerate(nodes)}

    def anchor(item: tuple[str, list[torch.fx.Node]]) -> int:
        ms = item[1]
        own = [index[m.name] for m in ms if not (m.op == "placeholder" and m.name in constants)]
        return min(own) if own else min(index[m.name] for m in ms)

    return dict(sorted(members.items(), key=anchor))


def _edges(
    nodes: Sequence[torch.fx.Node], kept: set[str], node_of: Mapping[str, str]
) -> tuple[list[tuple[str, str]], dict[tuple[str, str], tuple[list[str], list[str]]]]:
    ends: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
    for n in nodes:
        for a in n.all_input_nodes:
            if a.name not in kept:
                continue
            edge = (node_of[a.name], node_of[n.name])
            if edge[0] == edge[1]:
                continue
            tails, heads = ends.setdefault(edge, ([], []))
            if a.name not in tails:
                tails.append(a.name)
            if n.name not in heads:
                heads.append(n.name)
    return list(ends), ends


# --- clusters and boxes ------------------------------------------------------------


def _delegate_boxes(dg: DeviceGraph, where: Mapping[str, LayoutNode]) -> tuple[GroupBox, ...]:
    """Uncollapsed: one box per delegate around its drawn members."""
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
                round(min(n.x - n.w / 2 for n in inside) - _BOX_PAD_PT, 1),
                round(max(n.x + n.w / 2 for n in inside) + _BOX_PAD_PT, 1),
                round(min(n.y - n.h / 2 for n in inside) - _BOX_PAD_PT - LINE_PT, 1),
                round(max(n.y + n.h / 2 for n in inside) + _BOX_PAD_PT, 1),
                "delegate",
                d.name,  # the device is the box's colour; a longer label would not fit one op
            )
        )
    return tuple(boxes)


def _expanded_clusters(dg: DeviceGraph, open_group: Mapping[str, str], expanded: Sequence[str]) -> dict[str, Cluster]:
    delegates = {d.name: str(d.device) for d in dg.placement.delegates}
    out: dict[str, Cluster] = {}
    for g in expanded:
        inside = tuple(n for n, owner in open_group.items() if owner == g)
        kind = "delegate" if g in delegates else "layer"
        out[g] = (kind, f"{g} (expanded)", inside, delegates.get(g))
    return out


# --- positions (rule 5): dot or rows, then the bus, then the side nodes -------------


def _short_side_weights(
    dg: DeviceGraph, drawn: dict[str, NodeContent], edges: Sequence[tuple[str, str]]
) -> dict[str, NodeContent]:
    """Rule 5: a weight placed beside its layer shows its name relative to that layer."""
    out = dict(drawn)
    for lid, layer in side_rows(drawn, edges).items():
        c = drawn[lid]
        fqn = dg.program.constants.get(c.members[0], "") if c.kind == "constant" and len(c.members) == 1 else ""
        if fqn.startswith(layer + "."):
            out[lid] = relabelled(c, (fqn[len(layer) + 1 :],))
    return out


def _place(
    drawn: Mapping[str, NodeContent],
    edges: list[tuple[str, str]],
    clusters: Mapping[str, Cluster],
    members: Mapping[str, list[torch.fx.Node]],
    constants: set[str],
) -> Placed:
    """Rule 5: the graph without its side nodes and bus edges by dot (or rows), then the
    bus edges, then the side nodes on their layers' rows."""
    side = side_rows(drawn, edges)
    spine = {lid: c for lid, c in drawn.items() if lid not in side}
    spine_edges = [(a, b) for a, b in edges if a in spine and b in spine]
    bus = bus_edges(spine, spine_edges)
    spine_edges = [e for e in spine_edges if e not in bus]
    placed: Optional[Placed] = None
    note = ""
    if len(spine) <= DOT_MAX_NODES:
        try:
            placed = dot_layout(spine, spine_edges, clusters)
        except GraphvizUnavailable as exc:
            note = f"laid out in rows: {exc}"
            warnings.warn(LayoutWarning(note), stacklevel=3)
    else:
        note = f"laid out in rows: {len(spine)} drawn nodes is more than dot lays out quickly ({DOT_MAX_NODES}); collapse the graph"
    if placed is None:
        placed = rows_layout(spine, spine_edges, clusters, members, constants, note)
    if bus:
        placed = route_bus(placed, drawn, bus)
    return place_side(placed, drawn, edges, side) if side else placed


def _positioned(c: NodeContent, centre: tuple[float, float], rank: int) -> LayoutNode:
    return LayoutNode(
        id=c.id, label=c.label, kind=c.kind, colour_key=c.colour_key, device=c.device, devices=c.devices,
        layer=rank, x=centre[0], y=centre[1], members=c.members, nbytes=c.nbytes, copy_kind=c.copy_kind,
        copies=c.copies, device_counts=c.device_counts, lines=c.lines, w=c.w, h=c.h, badges=c.badges,
    )


def _boxes(clusters: Mapping[str, Cluster], placed: Placed, where: Mapping[str, LayoutNode]) -> tuple[GroupBox, ...]:
    boxes = []
    for name, (kind, label, inside, device) in clusters.items():
        x0, y0, x1, y1 = placed.clusters[name]
        if device is None:
            devs = Counter(d for d in (where[m].device for m in inside) if d is not None)
            device = devs.most_common(1)[0][0] if devs else "cpu"
        boxes.append(GroupBox(name, device, inside, x0, x1, y0, y1, kind, label))
    return tuple(boxes)
