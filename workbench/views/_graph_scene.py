"""GraphView's scene: a ``GraphLayout`` turned into what the front end and the static
figure draw (plain, JSON-able data).

Rules:
1. One scene node per layout node, with its position, size, text lines, shape, colours,
   a title and the spec rows shown on hover and in the side panel: a graph node's
   ``NodeSpec`` rows (the full copy reason included), a group's members, devices and
   copies.
2. Ops and inputs are filled with a tint of their device's colour and outlined in it;
   copies are filled with their kind's colour; weights are grey ellipses outlined in the
   colour of the device that holds them; a collapsed group is tinted by its most common
   device, with a bar of its members' device shares and one badge per copy kind inside
   it (count and bytes).
3. The legend lists every device, copy kind (as nodes or badges), node kind and box kind
   drawn, and nothing else.
4. ``node_of`` lists the graph nodes drawn inside another node (the rest are drawn as
   themselves), so search and linked selection find every graph node.
5. An edge carries its route as a flat [x0, y0, x1, y1, …] list, and the graph nodes at
   its ends only when they differ from the drawn nodes it joins.
6. A selection's own edges (``own_edges``): for a drawn node, every edge at it; for a
   graph node drawn inside a group, only the edges that carry that node's own inputs
   and users — the front end highlights the same ones.
7. ``terms`` gives each graph node the words search matches besides its name: its op,
   device(s), innermost module and, for a copy, its kind and role (``search_terms``).
8. ``initial`` is where the view opens when the whole graph does not fit at a readable
   zoom: the copies of the first rank that has any, with the nodes beside them on that
   rank they read from or feed, and the copies alone (``initial_region``); None without
   copies.
"""

from __future__ import annotations

from typing import Any, Optional

from ..devices import Device
from ._layout import GraphLayout, LayoutNode
from ._node_content import GROUP_KINDS
from ._spec import NodeSpec, node_specs
from ._style import COPY_COLOURS, CONSTANT_COLOUR, colour_for_key, copies_text, copy_colour, device_colour, format_bytes, tint
from ._upstream import DeviceGraph, op_name

_NODE_LEGEND = (
    ("input", "input", "input"),
    ("constant", "weight (outline: where it lives)", "ellipse"),
    ("output", "output", "box"),
)


def graph_scene(layout: GraphLayout, dg: DeviceGraph, plan: Any = None, title: str = "") -> dict:
    """Rules 1-5."""
    specs = node_specs(dg, [n.id for n in layout.nodes if n.kind not in GROUP_KINDS], plan)
    expanded_from = {m: b.name for b in layout.boxes if b.kind == "layer" or b.name in layout.expanded for m in b.members}
    nodes = [_node(n, specs.get(n.id), expanded_from.get(n.id)) for n in layout.nodes]
    edges = []
    for e in layout.edges:
        edge: dict[str, Any] = {"s": e.src, "d": e.dst, "p": [round(v, 1) for pt in e.points for v in pt]}
        if e.src_members and list(e.src_members) != [e.src]:
            edge["m"] = list(e.src_members)
        if e.dst_members and list(e.dst_members) != [e.dst]:
            edge["n"] = list(e.dst_members)
        if not edge["p"]:
            a, b = layout.node(e.src), layout.node(e.dst)
            edge["p"] = [a.x, a.y + a.h / 2, b.x, b.y - b.h / 2]
        edges.append(edge)
    boxes = [
        {
            "id": b.name,
            "label": b.label or b.name,
            "kind": b.kind,
            "x0": b.x0,
            "y0": b.y0,
            "x1": b.x1,
            "y1": b.y1,
            "fill": tint(device_colour(b.device), 0.08),
            "stroke": device_colour(b.device),
        }
        for b in layout.boxes
    ]
    return {
        "title": title,
        "extent": list(layout.extent),
        "engine": layout.engine,
        "note": layout.note,
        "nodes": nodes,
        "edges": edges,
        "boxes": boxes,
        "node_of": {name: drawn for name, drawn in layout.node_of.items() if name != drawn},
        "legend": _legend(layout),
        "expanded": list(layout.expanded),
        "terms": search_terms(dg, layout.node_of),
        "initial": initial_region(layout),
    }


def search_terms(dg: DeviceGraph, names: Any) -> dict[str, str]:
    """Rule 7: graph node → its op, device(s), module and copy kind, lower case."""
    records = dg.copy_table
    wanted = set(names)
    out = {}
    for node in dg.graph.nodes:
        if node.name not in wanted:
            continue
        words = [op_name(node) if node.op == "call_function" else node.op]
        record = records.get(node.name)
        if record is not None:
            words += [str(record.kind), str(record.role), "copy", str(record.src), str(record.dst)]
        elif (device := dg.node_device.get(node.name)) is not None:
            words.append(str(device))
        stack = node.meta.get("nn_module_stack") or {}
        innermost = next((v[0] for v in reversed(stack.values()) if isinstance(v, tuple) and v and v[0]), None)
        if innermost:
            words.append(str(innermost))
        out[node.name] = " ".join(words).lower()
    return out


def initial_region(layout: GraphLayout) -> Optional[dict[str, list[float]]]:
    """Rule 8: ``{"region": [x0, y0, x1, y1], "copies": [x0, y0, x1, y1]}`` in points (the
    copies alone, for a view too narrow for the whole region), or None."""
    copies = [n for n in layout.nodes if n.kind == "copy"]
    if not copies:
        return None
    first = min(n.layer for n in copies)
    row = [n for n in copies if n.layer == first]
    ids = {n.id for n in row}
    linked = {e.src for e in layout.edges if e.dst in ids} | {e.dst for e in layout.edges if e.src in ids}
    near = [n for n in layout.nodes if n.id in linked and n.layer == first and n.id not in ids]
    return {"region": _bounds(row + near), "copies": _bounds(row)}


def _bounds(nodes: list[LayoutNode]) -> list[float]:
    return [
        round(min(n.x - n.w / 2 for n in nodes), 1), round(min(n.y - n.h / 2 for n in nodes), 1),
        round(max(n.x + n.w / 2 for n in nodes), 1), round(max(n.y + n.h / 2 for n in nodes), 1),
    ]


def _node(n: LayoutNode, spec: Optional[NodeSpec], expanded_from: Optional[str]) -> dict:
    out: dict[str, Any] = {
        "id": n.id,
        "kind": n.kind,
        "x": n.x,
        "y": n.y,
        "w": n.w,
        "h": n.h,
        "lines": list(n.lines or (n.label,)),
    }
    if n.kind in GROUP_KINDS:
        colour = device_colour(n.device) if n.device else CONSTANT_COLOUR
        total = sum(c for _d, c in n.device_counts) or 1
        out.update(
            group=True,
            shape="box",
            fill=tint(colour, 0.22),
            stroke=colour,
            bands=[[device_colour(d), round(c / total, 4)] for d, c in n.device_counts],
            badges=[{"text": b.text, "fill": copy_colour(b.kind)} for b in n.badges],
            title=group_title(n),
            rows=_group_rows(n),
        )
        return out
    if n.kind == "copy":
        colour = copy_colour(n.copy_kind or "h2d")
        out.update(shape="box", fill=colour, stroke=tint(colour, 1.0), text="#FFFFFF")
    elif n.kind == "constant":
        where = device_colour(n.device) if n.device else "#777777"
        out.update(shape="ellipse", fill="#EEEEEE", stroke=where)
    elif n.kind == "output":
        out.update(shape="box", fill="#FFFFFF", stroke="#333333")
    else:
        colour = colour_for_key(n.colour_key)
        out.update(shape="input" if n.kind == "input" else "box", fill=tint(colour, 0.35), stroke=colour)
    if spec is not None:
        out["title"] = f"{spec.name} ({spec.role})"
        out["rows"] = [[k, v] for k, v in spec.rows()]
    else:
        out["title"] = n.id
        out["rows"] = []
    if expanded_from is not None:
        out["expanded_from"] = expanded_from
    return out


def group_title(n: LayoutNode) -> str:
    """The title of a collapsed group's spec."""
    return f"{n.id} ({'collapsed layer' if n.kind == 'layer' else 'collapsed delegate'})"


def group_rows(n: LayoutNode) -> list[tuple[str, str]]:
    """The spec rows of a collapsed group (rule 1)."""
    rows = [("members", f"{len(n.members)} graph nodes")]
    if n.device_counts:
        rows.append(("ops by device", ", ".join(f"{d}: {c}" for d, c in n.device_counts)))
    if n.badges:
        rows.append(("copies inside", ", ".join(b.text for b in n.badges)))
    else:
        rows.append(("copies inside", "none"))
    rows.append(("drawn", "as one box; double-click (or expand) to draw its members in place"))
    return rows


def _group_rows(n: LayoutNode) -> list[list[str]]:
    return [[k, v] for k, v in group_rows(n)]


def _legend(layout: GraphLayout) -> list[dict]:
    """Rule 3."""
    devices = sorted({d for n in layout.nodes for d in n.devices if n.kind != "constant"}, key=Device.parse)
    held = sorted({d for n in layout.nodes if n.kind == "constant" for d in n.devices}, key=Device.parse)
    items: list[dict[str, Any]] = [{"label": d, "fill": tint(device_colour(d), 0.35), "stroke": device_colour(d)} for d in devices]
    items += [
        {"label": f"weight on {d}", "fill": "#EEEEEE", "stroke": device_colour(d), "shape": "ellipse"}
        for d in held
    ]
    copy_kinds = {n.copy_kind for n in layout.nodes if n.copy_kind} | {b.kind for n in layout.nodes for b in n.badges}
    for kind in COPY_COLOURS:
        if kind in copy_kinds:
            where = []
            if any(n.copy_kind == kind for n in layout.nodes):
                where.append("node")
            if any(b.kind == kind for n in layout.nodes for b in n.badges):
                where.append("badge in a group")
            items.append({"label": f"{kind} copy ({' / '.join(where)})", "fill": COPY_COLOURS[kind]})
    present = {n.kind for n in layout.nodes}
    items += [
        {"label": text, "fill": "#FFFFFF", "stroke": "#555555", "shape": shape}
        for kind, text, shape in _NODE_LEGEND
        if kind in present and kind != "constant"
    ]
    if "layer" in present:
        items.append({"label": "collapsed layer (bar: ops per device)", "fill": "#F4F4F4", "stroke": "#555555"})
    if "delegate" in present:
        items.append({"label": "collapsed delegate", "fill": "#F4F4F4", "stroke": "#555555"})
    if any(b.kind == "delegate" for b in layout.boxes):
        items.append({"label": "delegate (box)", "fill": "transparent", "stroke": "#555555", "dashed": True})
    if any(b.kind == "layer" for b in layout.boxes):
        items.append({"label": "expanded group (box)", "fill": "transparent", "stroke": "#555555"})
    return items


def format_copies(layout: GraphLayout) -> str:
    """Copies drawn, per kind: ``"8 h2d copies, 192.0 KiB in all"`` (for titles)."""
    count: dict[str, int] = {}
    moved: dict[str, int] = {}
    for n in layout.nodes:
        if n.copy_kind:
            count[n.copy_kind] = count.get(n.copy_kind, 0) + 1
            moved[n.copy_kind] = moved.get(n.copy_kind, 0) + n.nbytes
        for b in n.badges:
            count[b.kind] = count.get(b.kind, 0) + b.count
            moved[b.kind] = moved.get(b.kind, 0) + b.nbytes
    return copies_text({k: count[k] for k in COPY_COLOURS if k in count}, moved)


def drawn_id(scene: dict, focus: Optional[str]) -> Optional[str]:
    """The drawn node that shows graph node (or group) ``focus``; None when not drawn."""
    if focus is None:
        return None
    if any(n["id"] == focus for n in scene.get("nodes", [])):
        return focus
    return scene.get("node_of", {}).get(focus)


def own_edges(scene: dict, focus: Optional[str]) -> list[int]:
    """Rule 6: indices of the scene's edges to highlight for ``focus``."""
    drawn = drawn_id(scene, focus)
    if drawn is None:
        return []
    out = []
    for i, e in enumerate(scene.get("edges", [])):
        if drawn == focus:
            hit = drawn in (e["s"], e["d"])
        else:
            hit = focus in e.get("m", [e["s"]]) or focus in e.get("n", [e["d"]])
        if hit:
            out.append(i)
    return out
