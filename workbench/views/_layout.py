"""Graph layout as plain data: what GraphView draws, computed without a front end.

``graph_layout(dg, collapse=None, devices=None, expand=())`` returns a ``GraphLayout``:
one ``LayoutNode`` per drawn node (a graph node, or a collapsed delegate / layer) with
its position and size in points, the edges between them with their routes, and the
boxes drawn around delegates and expanded groups.

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
   layer read) sits on that layer's row, at the layer's y, in a column right of the rest
   of the drawing, each weight before the copies that read it; and the edges from the
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

import re
import warnings
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Iterable, Mapping, Optional, Sequence

import pandas as pd
import torch.fx

from ..devices import Device
from ..errors import WorkbenchWarning
from ._graphviz import GraphvizUnavailable, dot_positions
from ._inputs import UnknownNameError, ViewOptionError
from ._style import copies_of_kind, copy_label, format_bytes
from ._upstream import CopyRecord, DeviceGraph, node_nbytes, reads_metadata_only

COLLAPSE_MODES = (None, "delegates", "layers")
NODE_KINDS = ("input", "constant", "op", "copy", "output", "delegate", "layer")
GROUP_KINDS = ("delegate", "layer")
#: Above this many drawn nodes the layout uses rows instead of dot (dot needs minutes).
DOT_MAX_NODES = 1500

_INDEXED_PATH = re.compile(r"(^|\.)\d+$")

# drawn sizes (points): what the front end and the static figure draw, so dot packs them
FONT_PT = 10.0
CHAR_PT = 6.1  # average advance of a 10 pt sans-serif character
BADGE_GAP_PT = 4.0
_LINE_PT = 13.0
_PAD_PT = 10.0
_BOX_PAD_PT = 5.0
_MIN_MODULE_GROUP = 3  # ops of a top-level module that is not a layer, to make it a box
#: The group of the ops traced at the root that no layer claims.
ROOT_GROUP = "(root)"
_ROW_PT = 58.0  # row spacing of the fallback layout
_COLUMN_PT = 170.0


class LayoutWarning(WorkbenchWarning):
    """The graph was laid out without Graphviz (rows instead)."""


@dataclass(frozen=True)
class CopyBadge:
    """Copies of one kind inside a collapsed group."""

    kind: str  # "h2d" | "d2h" | "d2d"
    count: int
    nbytes: int  # bytes moved per call by these copies

    @property
    def text(self) -> str:
        return copies_of_kind(self.kind, self.count, self.nbytes)


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
        group_of = _delegate_groups(dg, nodes)
    elif collapse == "layers":
        group_of = _layer_groups(nodes, kept, constants, records)
    else:
        group_of = {}
    expanded = _check_expand(expand, set(group_of.values()))
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
        lid: _node_content(dg, lid, ms, collapse if lid in groups else None, records)
        for lid, ms in members.items()
    }
    # expanded groups are dot clusters (kept together, nothing else inside); a delegate
    # is boxed around its members afterwards (its members are connected by data, and
    # clusters cost dot more time than the whole rest of the layout)
    clusters = _expanded_clusters(dg, open_group, expanded) if collapse is not None else {}
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


# --- collapsing (rules 3 and 4) ----------------------------------------------------


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


def _layer_groups(
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


def _check_expand(expand: Iterable[str], groups: set[str]) -> tuple[str, ...]:
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


# --- node contents and sizes -------------------------------------------------------


def text_width(text: str, char_pt: float = CHAR_PT) -> float:
    """Points a line of text takes at the views' font size (an estimate that errs wide)."""
    return len(text) * char_pt


def _size(lines: Sequence[str], badges: Sequence[CopyBadge], kind: str) -> tuple[float, float]:
    title_pt = CHAR_PT * (1.12 if kind in GROUP_KINDS else 1.0)
    widths = [text_width(lines[0], title_pt)] + [text_width(t) for t in lines[1:]]
    if badges:
        widths.append(sum(text_width(b.text, CHAR_PT * 0.9) + 10 + BADGE_GAP_PT for b in badges))
    w = max(widths, default=0.0) + 2 * _PAD_PT
    h = _LINE_PT * len(lines) + 10
    if kind in GROUP_KINDS:
        h += 8 + (18 if badges else 0)  # device bar, badge row
        w = max(w, 120.0)
    if kind == "constant":
        w += 12  # an ellipse needs room at its ends
    return round(max(w, 44.0), 1), round(h, 1)


@dataclass(frozen=True)
class _Content:
    """A layout node before it has a position."""

    id: str
    label: str
    kind: str
    colour_key: str
    device: Optional[str]
    devices: tuple[str, ...]
    members: tuple[str, ...]
    nbytes: int
    copy_kind: Optional[str]
    copies: int
    device_counts: tuple[tuple[str, int], ...]
    lines: tuple[str, ...]
    badges: tuple[CopyBadge, ...]
    w: float
    h: float
    serves: Optional[str] = None  # a copy: the layer it serves (its row, rule 5)


def _content(
    lid: str, label: str, kind: str, key: str, device: Optional[str], devices: tuple[str, ...], members: tuple[str, ...],
    nbytes: int, copy_kind: Optional[str] = None, copies: int = 0, counts: tuple[tuple[str, int], ...] = (),
    lines: Sequence[str] = (), badges: tuple[CopyBadge, ...] = (), serves: Optional[str] = None,
) -> _Content:
    drawn = tuple(lines) or (label,)
    w, h = _size(drawn, badges, kind)
    return _Content(lid, label, kind, key, device, devices, members, nbytes, copy_kind, copies, counts, drawn, badges, w, h, serves)


def _node_content(
    dg: DeviceGraph, lid: str, members: list[torch.fx.Node], group_kind: Optional[str], records: Mapping[str, CopyRecord]
) -> _Content:
    names = tuple(m.name for m in members)
    copies = [records[m.name] for m in members if m.name in records]
    copy_bytes = sum(c.nbytes for c in copies)
    devs: Counter = Counter()
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
        share = ", ".join(f"{n} on {d}" for d, n in counts)
        badges = _badges(copies)
        return _content(
            lid, label, kind, key, common, devices, names, copy_bytes, None, len(copies), counts,
            (lid, f"{what}: ops {share}" if share else what), badges,
        )
    node = members[0]
    record = records.get(node.name)
    if record is not None:
        kind = str(record.kind)
        label = copy_label(kind, record.nbytes)
        role = str(record.role)
        layer = served_layer(dg, node, records)
        return _content(
            lid, label, "copy", f"copy:{kind}", common, devices, names, record.nbytes, kind, 1,
            lines=(f"{label} → {layer}" if layer else label, node.name if role == "plain" else f"{role} · {node.name}"),
            serves=layer,
        )
    if node.op == "output":
        return _content(lid, "output", "output", "constant", None, (), names, 0)
    if node.op == "placeholder" and node.name in dg.residency:
        held = tuple(sorted((str(d) for d in dg.residency[node.name]), key=Device.parse))
        first = next((d for d in held if d != "cpu"), held[0] if held else None)
        return _content(lid, node.name, "constant", "constant", first, held, names, node_nbytes(node, unbounded="hint"))
    kind = "input" if node.op == "placeholder" else "op"
    key = f"device:{common}" if common else "constant"
    return _content(lid, node.name, kind, key, common, devices, names, node_nbytes(node, unbounded="hint"))


def served_layer(dg: DeviceGraph, node: torch.fx.Node, records: Mapping[str, CopyRecord]) -> Optional[str]:
    """The layer a copy serves: that of the ops reading it (through a copy reading it: a
    prefetch serves its reuse copy's layer), else that of the weight it copies."""
    for user in node.users:
        path = layer_path(user) if user.name not in records else served_layer(dg, user, records)
        if path is not None:
            return path
    weight = dg.program.constants.get(records[node.name].value) if node.name in records else None
    match = re.match(r"^(.*?\.\d+)(\.|$)", weight) if isinstance(weight, str) else None
    return match.group(1) if match else None


def _badges(copies: Sequence[CopyRecord]) -> tuple[CopyBadge, ...]:
    count: Counter = Counter()
    moved: Counter = Counter()
    for c in copies:
        count[str(c.kind)] += 1
        moved[str(c.kind)] += c.nbytes
    return tuple(CopyBadge(k, count[k], moved[k]) for k in ("h2d", "d2h", "d2d") if count[k])


# --- clusters ----------------------------------------------------------------------


#: A cluster: (kind, label, member ids, device or None for "most common among members").
Cluster = tuple[str, str, tuple[str, ...], Optional[str]]


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
                round(min(n.y - n.h / 2 for n in inside) - _BOX_PAD_PT - _LINE_PT, 1),
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


# --- positions (rule 5) ------------------------------------------------------------


@dataclass(frozen=True)
class _Placed:
    centres: Mapping[str, tuple[float, float]]
    rank: Mapping[str, int]
    routes: Mapping[tuple[str, str], tuple[tuple[float, float], ...]]
    clusters: Mapping[str, tuple[float, float, float, float]]
    extent: tuple[float, float]
    engine: str
    note: str


def _place(
    drawn: Mapping[str, _Content],
    edges: list[tuple[str, str]],
    clusters: Mapping[str, Cluster],
    members: Mapping[str, list[torch.fx.Node]],
    constants: set[str],
) -> _Placed:
    """Rule 5: the graph without its side nodes and bus edges by dot (or rows), then the
    bus edges, then the side nodes on their layers' rows."""
    side = side_rows(drawn, edges)
    spine = {lid: c for lid, c in drawn.items() if lid not in side}
    spine_edges = [(a, b) for a, b in edges if a in spine and b in spine]
    bus = _bus_edges(spine, spine_edges)
    spine_edges = [e for e in spine_edges if e not in bus]
    placed: Optional[_Placed] = None
    note = ""
    if len(spine) <= DOT_MAX_NODES:
        try:
            got = dot_positions(
                {lid: (c.w, c.h) for lid, c in spine.items()},
                spine_edges,
                {name: (label, ms) for name, (_kind, label, ms, _device) in clusters.items()},
                _beside(spine, spine_edges, clusters),
            )
        except GraphvizUnavailable as exc:
            note = f"laid out in rows: {exc}"
            warnings.warn(LayoutWarning(note), stacklevel=3)
        else:
            ys = sorted({y for _x, y in got.centres.values()})
            rank_of_y = {y: i for i, y in enumerate(ys)}
            rank = {lid: rank_of_y[got.centres[lid][1]] for lid in spine}
            placed = _Placed(got.centres, rank, got.edges, got.clusters, (got.width, got.height), "dot", "")
    else:
        note = f"laid out in rows: {len(spine)} drawn nodes is more than dot lays out quickly ({DOT_MAX_NODES}); collapse the graph"
    if placed is None:
        placed = _rows_layout(spine, spine_edges, clusters, members, constants, note)
    if bus:
        placed = _route_bus(placed, drawn, bus)
    return _place_side(placed, drawn, edges, side) if side else placed


# --- the output bus: what the layers return (rule 5) ---------------------------------

_BUS_PT = 24.0  # from the leftmost node to the bus line
_CORNER_PT = 8.0  # radius of a bus route's corners


def _bus_edges(drawn: Mapping[str, _Content], edges: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Edges from collapsed layers into the output (each layer's cache updates), but the
    last layer's: they are routed along one line down the drawing's left side instead of
    by dot, each past every rank below its layer."""
    into = [(a, b) for a, b in edges if drawn[b].kind == "output" and drawn[a].kind == "layer"]
    return set(into[:-1])


def _shifted(placed: _Placed, dx: float) -> _Placed:
    """``placed`` moved ``dx`` points to the right."""
    return _Placed(
        {k: (round(x + dx, 2), y) for k, (x, y) in placed.centres.items()},
        placed.rank,
        {k: tuple((round(x + dx, 2), y) for x, y in pts) for k, pts in placed.routes.items()},
        {k: (x0 + dx, y0, x1 + dx, y1) for k, (x0, y0, x1, y1) in placed.clusters.items()},
        (round(placed.extent[0] + dx, 1), placed.extent[1]),
        placed.engine,
        placed.note,
    )


def _route_bus(placed: _Placed, drawn: Mapping[str, _Content], bus: Iterable[tuple[str, str]]) -> _Placed:
    """Each bus edge: from its layer's bottom left, along the gap below the layer's row to
    the bus line left of every node, down it, and across to the output's left side."""
    lefts = [x - drawn[k].w / 2 for k, (x, _y) in placed.centres.items()]
    lefts += [x0 for x0, _y0, _x1, _y1 in placed.clusters.values()]
    shift = max(0.0, _BUS_PT + _CORNER_PT + 4.0 - min(lefts, default=0.0))
    if shift:
        placed = _shifted(placed, shift)
        lefts = [v + shift for v in lefts]
    lane = min(lefts) - _BUS_PT
    r = _CORNER_PT
    routes = dict(placed.routes)
    for a, b in bus:
        (xa, ya), (xb, yb) = placed.centres[a], placed.centres[b]
        ca, cb = drawn[a], drawn[b]
        ax, top = xa - ca.w / 2 + 14.0, ya + ca.h / 2
        gap = top + 10.0
        tip = (xb - cb.w / 2, yb)
        end = (tip[0] - _TIP_PT, yb)
        points = [
            (ax, top), (ax, gap), (ax, gap), (lane + r, gap),  # down out of the layer, then left
            (lane, gap), (lane, gap), (lane, gap + r),  # the corner onto the bus
            (lane, gap + r), (lane, yb - r), (lane, yb - r),  # down the bus
            (lane, yb), (lane, yb), (lane + r, yb),  # the corner off it
            (lane + r, yb), end, end, tip,  # across to the output
        ]
        routes[(a, b)] = _rounded(points)
    return _Placed(placed.centres, placed.rank, routes, placed.clusters, placed.extent, placed.engine, placed.note)


# --- side nodes: copies on their layer's row (rule 5) -------------------------------

_SIDE_GAP_PT = 48.0  # between the rest of the drawing and the side nodes
_SIDE_SEP_PT = 16.0  # between two side nodes of one chain
_CHAIN_SEP_PT = 36.0  # between two chains of one row
_TIP_PT = 7.0  # an arrow head's length: where a route's spline stops short of its head
_LIFT_PT = (12.0, 28.0)  # how far an arc between two nodes of one row bows out, nearest to farthest


def side_rows(drawn: Mapping[str, _Content], edges: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The side nodes and the drawn layer whose row each sits on: every copy drawn on its
    own that serves a collapsed layer drawn as one node, and every weight read only by
    the side copies of one layer."""
    layers = {lid for lid, c in drawn.items() if c.kind == "layer"}
    row = {lid: c.serves for lid, c in drawn.items() if c.kind == "copy" and c.serves in layers}
    users: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        users[a].add(b)
    for lid, c in drawn.items():
        rows = {row.get(u) for u in users[lid]}
        if c.kind == "constant" and len(rows) == 1 and None not in rows:
            row[lid] = rows.pop()  # type: ignore[assignment]  # None was ruled out
    return {lid: layer for lid, layer in row.items() if layer is not None}


def _chains(ids: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    """One row's side nodes in drawing order: each weight followed by the copies that read
    it (a prefetch before the reuse copy it feeds), chains in graph order."""
    on_row = set(ids)
    preds: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if a in on_row and b in on_row:
            preds[b].append(a)
    root: dict[str, str] = {}
    for lid in ids:  # drawn in graph order (weights first): a node's inputs are rooted before it
        roots = [root[p] for p in preds[lid] if p in root]
        root[lid] = min(roots, key=ids.index) if roots else lid
    chains: dict[str, list[str]] = {}
    for lid in ids:
        chains.setdefault(root[lid], []).append(lid)
    return list(chains.values())


def _place_side(
    placed: _Placed, drawn: Mapping[str, _Content], edges: Sequence[tuple[str, str]], side: Mapping[str, str]
) -> _Placed:
    """Each side node on its layer's row (the layer's y), in chains to the right of
    everything else, and routes for every edge that touches one."""
    centres = dict(placed.centres)
    x0 = placed.extent[0] + _SIDE_GAP_PT
    right = placed.extent[0]
    by_layer: dict[str, list[str]] = defaultdict(list)
    for lid in drawn:
        if lid in side:
            by_layer[side[lid]].append(lid)
    order: dict[str, int] = {}  # place in its row, from the left
    for layer, ids in by_layer.items():
        y = centres[layer][1]
        cursor = x0
        first = len(order)
        for chain in _chains(ids, edges):
            for lid in chain:
                w = drawn[lid].w
                centres[lid] = (round(cursor + w / 2, 1), y)
                order[lid] = len(order) - first
                cursor += w + _SIDE_SEP_PT
            right = max(right, cursor - _SIDE_SEP_PT)
            cursor += _CHAIN_SEP_PT - _SIDE_SEP_PT
    rank = dict(placed.rank)
    rank.update({lid: placed.rank[layer] for lid, layer in side.items()})
    routes = dict(placed.routes)
    for a, b in edges:
        if a in side or b in side:
            routes[(a, b)] = _route(drawn[a], centres[a], drawn[b], centres[b], order)
    extent = (round(right + 10.0, 1), placed.extent[1])
    return _Placed(centres, rank, routes, placed.clusters, extent, placed.engine, placed.note)


def _anchor_x(c: _Content, x: float, toward: float) -> float:
    """Where an edge leaves or enters a node's top or bottom: a wide group near its end
    facing the other node, anything else at its centre."""
    if c.kind not in GROUP_KINDS:
        return x
    return x + (1 if toward > x else -1) * (c.w / 2 - 14.0)


def _route(
    a: _Content, pa: tuple[float, float], b: _Content, pb: tuple[float, float], order: Mapping[str, int]
) -> tuple[tuple[float, float], ...]:
    """A route in dot's form (one cubic Bézier segment, then the arrow tip at the head's
    border): straight between neighbours of one chain, an arc over the row from left to
    right and under it from right to left, an S from one row down (or up) to another."""
    (xa, ya), (xb, yb) = pa, pb
    if abs(ya - yb) < 0.5:
        sign = 1.0 if xb > xa else -1.0
        gap = abs(xb - xa) - (a.w + b.w) / 2
        if gap <= _SIDE_SEP_PT + 0.5 and a.kind not in GROUP_KINDS and b.kind not in GROUP_KINDS:  # neighbours: straight
            start, tip = (xa + sign * a.w / 2, ya), (xb - sign * b.w / 2, yb)
            end = (tip[0] - sign * _TIP_PT, yb)
            third = (end[0] - start[0]) / 3
            return _rounded((start, (start[0] + third, ya), (start[0] + 2 * third, ya), end, tip))
        out = -1.0 if sign > 0 else 1.0  # over the row going right, under it going left
        far = max(order.get(a.id, 0), order.get(b.id, 0))
        lift = min(_LIFT_PT[0] + 4.0 * far, _LIFT_PT[1])
        sx, ex = _anchor_x(a, xa, xb), _anchor_x(b, xb, xa)
        start, tip = (sx, ya + out * a.h / 2), (ex, yb + out * b.h / 2)
        end = (ex, tip[1] + out * _TIP_PT)
        bow = min(start[1], tip[1]) - lift if out < 0 else max(start[1], tip[1]) + lift
        return _rounded((start, (sx, bow), (ex, bow), end, tip))
    down = 1.0 if yb > ya else -1.0
    sx, ex = _anchor_x(a, xa, xb), _anchor_x(b, xb, xa)
    start, tip = (sx, ya + down * a.h / 2), (ex, yb - down * b.h / 2)
    end = (ex, tip[1] - down * _TIP_PT)
    half = (end[1] - start[1]) / 2
    return _rounded((start, (sx, start[1] + half), (ex, end[1] - half), end, tip))


def _rounded(points: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    return tuple((round(x, 2), round(y, 2)) for x, y in points)


def _beside(
    drawn: Mapping[str, _Content], edges: Sequence[tuple[str, str]], clusters: Mapping[str, Cluster]
) -> list[tuple[str, str]]:
    """A node that reads from and feeds the same collapsed group (a gather whose index the
    group's router computes) is drawn beside the group rather than a rank below it."""
    pairs = set(edges)
    in_cluster = {m for _k, _l, ms, _d in clusters.values() for m in ms}
    return [
        (a, b)
        for a, b in edges
        if (b, a) in pairs and drawn[b].kind in GROUP_KINDS and drawn[a].kind not in GROUP_KINDS
        and a not in in_cluster and b not in in_cluster
    ]


def _rows_layout(
    drawn: Mapping[str, _Content],
    edges: list[tuple[str, str]],
    clusters: Mapping[str, Cluster],
    members: Mapping[str, list[torch.fx.Node]],
    constants: set[str],
    note: str,
) -> _Placed:
    order = list(drawn)
    layers = _rows(order, edges, members, constants)
    xs = _columns(order, edges, layers)
    x_min = min(xs.values(), default=0.0)
    width = max((c.w for c in drawn.values()), default=0.0)
    centres = {lid: (round((xs[lid] - x_min) * _COLUMN_PT + width / 2 + 10, 1), round(layers[lid] * _ROW_PT + 40, 1)) for lid in order}
    boxes = {}
    for name, (_kind, _label, ms, _device) in clusters.items():
        inside = [centres[m] for m in ms]
        boxes[name] = (
            min(x for x, _ in inside) - _COLUMN_PT / 2 + 10,
            min(y for _, y in inside) - _ROW_PT / 2,
            max(x for x, _ in inside) + _COLUMN_PT / 2 - 10,
            max(y for _, y in inside) + _ROW_PT / 2,
        )
    extent = (
        round(max((x for x, _ in centres.values()), default=0.0) + width / 2 + 20, 1),
        round(max((y for _, y in centres.values()), default=0.0) + _ROW_PT, 1),
    )
    return _Placed(centres, layers, {}, boxes, extent, "rows", note)


def _rows(
    order: list[str], edges: list[tuple[str, str]], members: Mapping[str, list], constants: set[str]
) -> dict[str, int]:
    """Longest paths from the sources over forward edges; constants one row above their
    first user."""
    position = {lid: i for i, lid in enumerate(order)}
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if position[a] < position[b]:
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
    """Within a row, nodes ordered by the mean x of their predecessors, one unit apart."""
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


def _positioned(c: _Content, centre: tuple[float, float], rank: int) -> LayoutNode:
    return LayoutNode(
        id=c.id, label=c.label, kind=c.kind, colour_key=c.colour_key, device=c.device, devices=c.devices,
        layer=rank, x=centre[0], y=centre[1], members=c.members, nbytes=c.nbytes, copy_kind=c.copy_kind,
        copies=c.copies, device_counts=c.device_counts, lines=c.lines, w=c.w, h=c.h, badges=c.badges,
    )


def _boxes(clusters: Mapping[str, Cluster], placed: _Placed, where: Mapping[str, LayoutNode]) -> tuple[GroupBox, ...]:
    boxes = []
    for name, (kind, label, inside, device) in clusters.items():
        x0, y0, x1, y1 = placed.clusters[name]
        if device is None:
            devs = Counter(d for d in (where[m].device for m in inside) if d is not None)
            device = devs.most_common(1)[0][0] if devs else "cpu"
        boxes.append(GroupBox(name, device, inside, x0, x1, y0, y1, kind, label))
    return tuple(boxes)
