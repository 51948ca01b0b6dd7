"""GraphView: the propagated graph, laid out by Graphviz, with zoom, hover, search, click
to select, and collapsed groups that expand in place.

Rules:
1. What is drawn comes from ``graph_layout`` → ``graph_scene`` (plain data); the front
   end and ``draw_graph_scene`` (the static figure) only render it.
2. Any graph node can be selected (``select`` or a click); a selection inside a collapsed
   group outlines the group dashed and highlights only the edges that carry the node's
   own inputs and users; the side panel shows the node's ``NodeSpec``.
3. ``collapse`` and ``devices`` re-lay the graph out; ``expand(group)`` draws one
   collapsed group's members in place (a double-click on the group does the same).
4. The static figure draws the whole scene at a scale that keeps it under
   ``MAX_WIDTH_IN`` × ``MAX_HEIGHT_IN``; text too small to read at that scale is left
   out (the live widget zooms instead).
"""

from __future__ import annotations

import html
from typing import Any, Iterable, Optional

import ipywidgets as widgets
import numpy as np
from matplotlib.collections import PatchCollection, PathCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Ellipse, FancyBboxPatch, Patch, Rectangle
from matplotlib.path import Path as MplPath

from ._collapse import natural_key
from ._graph_scene import drawn_id, format_copies, graph_scene, group_rows, group_title, own_edges, search_terms
from ._inputs import UnknownNameError, as_graph_and_plan
from ._layout import COLLAPSE_MODES, GraphLayout, graph_layout, metadata_check
from ._spec import NodeSpec, find_node, node_spec
from ._widget import NO_CHOICE, FigureView, as_choice, detail, new_figure

MAX_WIDTH_IN = 14.0
MAX_HEIGHT_IN = 40.0
_MIN_FONT_PT = 4.5
#: kept for callers that sized their own decisions on it (the explorer): above this many
#: graph nodes a view should start collapsed
LABEL_ALL_MAX = 120


class GraphView(FigureView):
    """The propagated graph as an interactive widget (see the module rules).

    ``GraphView(dg_or_plan, collapse=None | "delegates" | "layers", devices=None,
    expand=())``; ``.select(name)`` picks a node, ``.expand(group)`` opens a collapsed
    group in place, ``.search(text)`` lists matching names; ``.figure()`` / ``.save(path)``
    give the static picture.
    """

    kind = "graph"
    css_class = "wb-graph-view"
    empty_text = "select a node to see its spec"

    def __init__(
        self,
        dg_or_plan: Any,
        collapse: Optional[str] = None,
        devices: Optional[Iterable[str]] = None,
        expand: Iterable[str] = (),
    ) -> None:
        super().__init__()
        self.graph, self.plan = as_graph_and_plan(dg_or_plan, "GraphView")
        self.layout: GraphLayout = graph_layout(self.graph, collapse, devices, expand)  # checks the options
        self._names = {n.name for n in self.graph.graph.nodes}
        self.collapse_dropdown = widgets.Dropdown(
            options=[("none", NO_CHOICE), ("delegates", "delegates"), ("layers", "layers")],
            value=as_choice(collapse),
            description="collapse",
        )
        present = [str(d) for d in self.graph.devices]
        shown = self.layout.devices
        self.device_dropdown = widgets.Dropdown(
            options=[("all", NO_CHOICE)] + [(d, d) for d in present],
            value=shown[0] if shown and len(shown) == 1 else NO_CHOICE,
            description="devices",
        )
        self._bind(self.collapse_dropdown, lambda mode: self.set_options(collapse=mode))
        self._bind(self.device_dropdown, lambda device: self.set_options(devices=device and [device]))
        self.canvas.expanded = list(self.layout.expanded)
        self.canvas.observe(self._on_expanded, names="expanded")
        self._show(self.collapse_dropdown, self.device_dropdown)

    # -- selection ----------------------------------------------------------------------
    def select(self, name: Optional[str]) -> None:
        """Select graph node (or drawn group) ``name``; None clears. Unknown names are an
        ``UnknownNameError`` (a KeyError) that lists real ones."""
        if name is not None and name not in self._drawn_groups():
            find_node(self.graph, name)  # raises, listing valid names
        self.set_focus(name)
        if self.canvas.selected != name:  # a focus already set keeps its item
            self.canvas.selected = name

    def search(self, text: str, limit: int = 20) -> list[str]:
        """Graph nodes and drawn groups whose name contains ``text`` (case-insensitive),
        names that start with it first, then those whose op, device, module or copy kind
        contains it — what the search box lists."""
        groups = sorted(self._drawn_groups(), key=natural_key)
        names = groups + [n.name for n in self.graph.graph.nodes if not metadata_check(n)]
        hits = search_names(names, text, len(names))
        q, found = text.strip().lower(), set(hits)
        terms = search_terms(self.graph, names)
        return (hits + [n for n in names if n not in found and q and q in terms.get(n, "")])[:limit]

    def spec_of(self, name: str) -> NodeSpec:
        return node_spec(self.graph, name, self.plan)

    # -- options --------------------------------------------------------------------------
    def set_options(self, collapse: Any = "unchanged", devices: Any = "unchanged") -> None:
        """Change the collapse mode and/or the device filter (falsy: every device), then
        redraw. Groups expanded under the old mode are closed."""
        if collapse == "unchanged":
            collapse = self.layout.collapse
        if devices == "unchanged":
            devices = self.layout.devices
        elif not devices:
            devices = None
        if collapse not in COLLAPSE_MODES:
            graph_layout(self.graph, collapse)  # raises the option error
        keep = [g for g in self.layout.expanded if collapse == self.layout.collapse]
        self.layout = graph_layout(self.graph, collapse, devices, self._still_groups(collapse, devices, keep))
        self._sync_expanded()
        self.refresh()

    def expand(self, group: str) -> None:
        """Draw the members of collapsed group ``group`` in place (the rest stays collapsed)."""
        if group not in self.layout.groups:
            valid = ", ".join(self.layout.groups) or "none (collapse the graph first)"
            raise UnknownNameError(f"no collapsed group {group!r} is drawn; groups are {valid}")
        self._relayout(list(self.layout.expanded) + [group])

    def collapse_group(self, group: str) -> None:
        """Draw expanded group ``group`` as one node again."""
        if group not in self.layout.expanded:
            valid = ", ".join(self.layout.expanded) or "none"
            raise UnknownNameError(f"{group!r} is not expanded; expanded groups are {valid}")
        self._relayout([g for g in self.layout.expanded if g != group])

    def _relayout(self, expanded: list[str]) -> None:
        self.layout = graph_layout(self.graph, self.layout.collapse, self.layout.devices, expanded)
        self._sync_expanded()
        self.refresh()

    def _on_expanded(self, change: dict) -> None:
        """The front end asked for another set of expanded groups (a double-click)."""
        wanted = [g for g in change["new"] if g in self.layout.groups or g in self.layout.expanded]
        if tuple(wanted) != self.layout.expanded:
            self._relayout(wanted)
        elif list(change["new"]) != wanted:
            self._sync_expanded()

    def _sync_expanded(self) -> None:
        if list(self.canvas.expanded) != list(self.layout.expanded):
            self.canvas.expanded = list(self.layout.expanded)

    def _still_groups(self, collapse: Optional[str], devices: Any, groups: list[str]) -> list[str]:
        if not groups:
            return []
        present = set(graph_layout(self.graph, collapse, devices).groups)
        return [g for g in groups if g in present]

    def _drawn_groups(self) -> set[str]:
        return set(self.layout.groups) | set(self.layout.expanded)

    # -- FigureView hooks -------------------------------------------------------------------
    def _scene(self) -> dict:
        return graph_scene(self.layout, self.graph, self.plan, self._title())

    def _draw(self) -> Figure:
        return draw_graph_scene(self._scene(), self.canvas.focus)

    def _key_for_focus(self, focus: Optional[str]) -> Any:
        if focus is None:
            return None
        return focus if focus in self._names or focus in self._drawn_groups() else None

    def _detail(self, key: Any) -> dict:
        if not isinstance(key, str):  # front-end state of another shape names nothing here
            return {}
        if key in self._drawn_groups() and key not in self._names:
            if key in self.layout.groups:
                node = self.layout.node(key)
                return detail(key, group_title(node), group_rows(node))
            return detail(key, f"{key} (expanded group)", [("drawn", "member by member in its box; collapse to draw it as one node")])
        spec = self.spec_of(key)
        rows = spec.rows()
        shown = self.layout.node_of.get(key)
        if shown is None:
            hidden = metadata_check(find_node(self.graph, key))
            rows.append(("shown", "not drawn: a metadata-only check (reads no data, produces nothing)" if hidden else "hidden by the device filter"))
        elif shown != key:
            rows.append(("shown", f"inside {shown}"))
        return detail(key, f"{spec.name} ({spec.role})", rows)

    def _title(self) -> str:
        layout = self.layout
        mode = f", collapsed by {layout.collapse}" if layout.collapse else ""
        opened = f" ({', '.join(layout.expanded)} expanded)" if layout.expanded else ""
        filt = f", devices {', '.join(layout.devices)}" if layout.devices else ""
        filt += f", {layout.hidden} metadata-only check{'s' if layout.hidden != 1 else ''} not drawn" if layout.hidden else ""
        return (
            f"{layout.graph_nodes} graph nodes as {len(layout.nodes)} drawn{mode}{opened}{filt} · "
            f"{_count(len(self.graph.placement.delegates), 'delegate')} · {format_copies(layout)}"
        )

    def _summary_html(self) -> str:
        # group names and the note come from the model's module names: escaped, never markup
        note = f" · <span style='color:#B00020'>{html.escape(self.layout.note)}</span>" if self.layout.note else ""
        return f"<span class='wb-summary'>{html.escape(self._title())}{note}</span>"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def search_names(names: Iterable[str], text: str, limit: int = 20) -> list[str]:
    """Names containing ``text`` (case-insensitive), those starting with it first, each
    once, in their given order — the views' search boxes do the same in the browser."""
    q = text.strip().lower()
    if not q:
        return []
    seen: dict[str, None] = {}
    starts = [n for n in names if n.lower().startswith(q) and not (n in seen or seen.setdefault(n))]
    contains = [n for n in names if q in n.lower() and not (n in seen or seen.setdefault(n))]
    return (starts + contains)[:limit]


# --- the static figure (rule 4) ----------------------------------------------------------


def draw_graph_scene(scene: dict, focus: Optional[str] = None) -> Figure:
    """Render a graph scene with matplotlib; ``focus`` (a graph node or group) is outlined."""
    ew, eh = scene.get("extent") or (100.0, 100.0)
    ew, eh = max(ew, 1.0), max(eh, 1.0)
    scale = min(1.0, MAX_WIDTH_IN * 72 / ew, MAX_HEIGHT_IN * 72 / eh)
    legend = scene.get("legend", [])
    ncol = max(1, min(len(legend), 5))
    head_in = 0.35 + 0.2 * -(-len(legend) // ncol)
    width_in = max(6.0, ew * scale / 72 + 0.3)
    height_in = eh * scale / 72 + head_in + 0.2
    fig = new_figure(width_in, height_in, constrained=False)
    ax = fig.add_axes((0.15 / width_in, 0.1 / height_in, (ew * scale / 72) / width_in, (eh * scale / 72) / height_in))
    ax.set_axis_off()
    ax.set_xlim(0, ew)
    ax.set_ylim(eh, 0)
    if legend:
        fig.legend(
            handles=[_legend_handle(item) for item in legend], loc="upper left", bbox_to_anchor=(0.0, 1.0 - 0.3 / height_in),
            ncol=ncol, fontsize=7, frameon=False,
        )
    if scene.get("title"):
        fig.text(0.01, 1.0 - 0.05 / height_in, scene["title"], fontsize=8.5, ha="left", va="top")
    nodes = scene.get("nodes", [])
    if not nodes:
        ax.text(0.5, 0.5, "no nodes on the selected devices", ha="center", va="center", transform=ax.transAxes)
        return fig
    font = 10.0 * scale
    for b in scene.get("boxes", []):
        ax.add_patch(
            Rectangle((b["x0"], b["y0"]), b["x1"] - b["x0"], b["y1"] - b["y0"], facecolor=b["fill"], edgecolor=b["stroke"],
                      linestyle="--" if b["kind"] == "delegate" else "-", linewidth=0.9, zorder=0)
        )
        if font >= _MIN_FONT_PT:
            ax.text(b["x0"] + 4, b["y0"] + 3, b["label"], fontsize=font * (1.05 if b["kind"] == "layer" else 0.9), va="top",
                    ha="left", color="#444444", zorder=1)
    own = set(own_edges(scene, focus))
    paths: list[MplPath] = []
    dark: list[MplPath] = []
    for i, e in enumerate(scene.get("edges", [])):
        (dark if i in own else paths).append(_edge_path(e["p"]))
    ax.add_collection(PathCollection(paths, facecolors="none", edgecolors="#9A9A9A", linewidths=0.7, zorder=1))
    if dark:
        ax.add_collection(PathCollection(dark, facecolors="none", edgecolors="#111111", linewidths=1.6, zorder=2))
    heads = [(_arrow_head(e["p"]), i in own) for i, e in enumerate(scene.get("edges", []))]
    ax.add_collection(
        PolyCollection(
            [h for h, _ in heads if h is not None], facecolors=["#111111" if d else "#8A8A8A" for h, d in heads if h is not None],
            edgecolors="none", zorder=2,
        )
    )
    patches, faces, edges_, widths = [], [], [], []
    drawn = drawn_id(scene, focus)
    for n in nodes:
        x0, y0 = n["x"] - n["w"] / 2, n["y"] - n["h"] / 2
        patch: Patch
        if n.get("shape") == "ellipse":
            patch = Ellipse((n["x"], n["y"]), n["w"], n["h"])
        else:
            patch = FancyBboxPatch((x0, y0), n["w"], n["h"], boxstyle="round,pad=0,rounding_size=4")
        patches.append(patch)
        faces.append(n["fill"])
        edges_.append("#111111" if n["id"] == drawn else n["stroke"])
        widths.append(2.6 if n["id"] == drawn else (1.4 if n.get("group") or n["kind"] == "copy" else 0.9))
    ax.add_collection(PatchCollection(patches, facecolors=faces, edgecolors=edges_, linewidths=np.asarray(widths) * max(scale, 0.4), zorder=3))
    bars = []
    for n in nodes:
        _node_text(ax, n, font)
        if n.get("bands"):
            bx, top = n["x"] - n["w"] / 2 + 6, n["y"] - n["h"] / 2 + 13 * len(n["lines"]) + 2
            for colour, frac in n["bands"]:
                bars.append((Rectangle((bx, top), (n["w"] - 12) * frac, 5), colour))
                bx += (n["w"] - 12) * frac
    if bars:
        ax.add_collection(PatchCollection([p for p, _ in bars], facecolors=[c for _, c in bars], edgecolors="none", zorder=4))
    return fig


def _edge_path(flat: list) -> MplPath:
    pts = list(zip(flat[0::2], flat[1::2]))
    spline = pts if (len(pts) - 1) % 3 == 0 else pts[:-1]
    tip = None if len(spline) == len(pts) else pts[-1]
    if len(spline) >= 4 and (len(spline) - 1) % 3 == 0:
        codes = [MplPath.MOVETO] + [MplPath.CURVE4] * (len(spline) - 1)
    else:
        codes = [MplPath.MOVETO] + [MplPath.LINETO] * (len(spline) - 1)
    verts = list(spline)
    if tip is not None:
        verts.append(tip)
        codes.append(MplPath.LINETO)
    return MplPath(verts, codes)


def _arrow_head(flat: list, length: float = 7.0, half_width: float = 3.0) -> Optional[list[tuple[float, float]]]:
    """A triangle at the edge's head, pointing along its last segment."""
    if len(flat) < 4:
        return None
    (x0, y0), (x1, y1) = (flat[-4], flat[-3]), (flat[-2], flat[-1])
    dx, dy = x1 - x0, y1 - y0
    norm = (dx * dx + dy * dy) ** 0.5
    if norm == 0:
        return None
    ux, uy = dx / norm, dy / norm
    bx, by = x1 - ux * length, y1 - uy * length
    return [(x1, y1), (bx - uy * half_width, by + ux * half_width), (bx + uy * half_width, by - ux * half_width)]


def _node_text(ax: Any, n: dict, font: float) -> None:
    group = bool(n.get("group"))
    if font < _MIN_FONT_PT and not group:
        return
    size = max(font, _MIN_FONT_PT) if group else font
    top = n["y"] - n["h"] / 2
    for i, line in enumerate(n["lines"]):
        bold = i == 0 and (group or n["kind"] == "copy")
        ax.text(n["x"], top + 10 + 13 * i, line, fontsize=size * (1.05 if bold else 0.95), ha="center", va="center",
                fontweight="bold" if bold else "normal", color=n.get("text", "#1D1D1D"), zorder=5, clip_on=True)
    if n.get("badges") and font >= _MIN_FONT_PT:
        bx = n["x"] - n["w"] / 2 + 8
        by = top + 13 * len(n["lines"]) + 12
        for b in n["badges"]:
            w = len(b["text"]) * 5.5 + 10
            ax.add_patch(FancyBboxPatch((bx, by - 2), w, 14, boxstyle="round,pad=0,rounding_size=6", facecolor=b["fill"], edgecolor="none", zorder=5))
            ax.text(bx + w / 2, by + 5, b["text"], fontsize=size * 0.9, ha="center", va="center", color="white", fontweight="bold", zorder=6)
            bx += w + 4


def _legend_handle(item: dict) -> Patch:
    return Patch(
        facecolor=item.get("fill", "none") if item.get("fill") != "transparent" else "none",
        edgecolor=item.get("stroke", item.get("fill", "#555555")),
        linestyle="--" if item.get("dashed") else "-",
        label=item["label"],
    )
