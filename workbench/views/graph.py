"""GraphView: the propagated graph, top to bottom, coloured by device, copies highlighted.

Rules:
1. What is drawn comes from ``graph_layout`` (plain data); this module only renders it.
2. Nodes are coloured by device, copies by copy kind and labelled ``h2d 4.0 KiB``;
   delegates are dashed boxes (or single nodes when collapsed); a legend lists the
   devices, copy kinds and node kinds present.
3. Any graph node can be selected; the layout node that draws it (itself, or its
   collapsed group) is ringed and its edges drawn dark; the spec panel shows the node's
   ``NodeSpec`` (op, shape, dtype, device, delegate, lifetime, arena, offset, copy reason).
4. Large graphs stay legible: above ``LABEL_ALL_MAX`` drawn nodes only copies, groups,
   inputs and the selection are labelled, and the figure's row height shrinks so the
   picture stays under ``MAX_HEIGHT_IN``.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import ipywidgets as widgets
import numpy as np
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.colors import to_rgba
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import ScaledTranslation

from ..devices import Device
from ._inputs import as_graph_and_plan
from ._layout import GraphLayout, LayoutNode, graph_layout
from ._spec import NodeSpec, find_node, node_spec
from ._style import COPY_COLOURS, EDGE_COLOUR, HIGHLIGHT, colour_for_key, copies_text, device_colour
from ._widget import NO_CHOICE, FigureView, as_choice, new_figure, rows_html

LABEL_ALL_MAX = 120
_GROUP_HALF_WIDTH = {"layer": 0.25, "delegate": 0.17}
MAX_HEIGHT_IN = 40.0

_MARKERS = {"input": "v", "constant": "o", "op": "s", "copy": "D", "output": "^", "delegate": "s", "layer": "s"}
_SIZES = {"input": 70, "constant": 22, "op": 55, "copy": 75, "output": 80, "delegate": 260, "layer": 520}


def draw_graph(layout: GraphLayout, selected: Optional[str] = None, title: str = "") -> Figure:
    """Render a layout (rules 2-4). ``selected`` is a graph node name or None."""
    many = len(layout.nodes) > LABEL_ALL_MAX
    depth = max(layout.depth, 1)
    row_in = min(0.45, (MAX_HEIGHT_IN - 1.5) / depth)
    width_in = min(12.0, max(7.0, 3.0 + 1.0 * layout.width))
    handles = _legend_handles(layout)
    ncol = max(1, min(len(handles), int(width_in / 1.0)))
    legend_in = 0.08 + 0.2 * -(-len(handles) // ncol)
    head_in = legend_in + (0.35 if title else 0.1)
    height_in = head_in + 0.3 + row_in * depth
    # fixed margins instead of a layout engine: the axes carry no ticks, and a layout
    # engine would lay every label out twice (a third of the time on large graphs)
    fig = new_figure(width_in, height_in, constrained=False)
    fig.subplots_adjust(left=0.01, right=0.99, bottom=0.15 / height_in, top=1.0 - head_in / height_in)
    ax = fig.add_subplot()
    ax.set_axis_off()
    if handles:
        fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 1.0), ncol=ncol, fontsize=7, frameon=False)
    if title:
        fig.text(0.01, 1.0 - (legend_in + 0.05) / height_in, title, fontsize=9, ha="left", va="top")
    if not layout.nodes:
        ax.text(0.5, 0.5, "no nodes on the selected devices", ha="center", va="center", transform=ax.transAxes)
        return fig
    where = {n.id: n for n in layout.nodes}
    target = layout.node_of.get(selected) if selected is not None else None

    if layout.boxes:
        colours = [device_colour(b.device) for b in layout.boxes]
        ax.add_collection(
            PolyCollection(
                [_rect(b.x0 - 0.35, b.y0 - 0.35, b.x1 + 0.35, b.y1 + 0.35) for b in layout.boxes],
                facecolors=[to_rgba(c, 0.12) for c in colours], edgecolors=colours, linestyles="--", linewidths=0.8, zorder=0,
            )
        )
    segments, dark = [], []
    for i, e in enumerate(layout.edges):
        seg = _edge_path(where[e.src], where[e.dst], i)
        (dark if target in (e.src, e.dst) else segments).append(seg)
    ax.add_collection(LineCollection(segments, colors=EDGE_COLOUR, linewidths=0.6, alpha=0.7, zorder=1))
    if dark:
        ax.add_collection(LineCollection(dark, colors=HIGHLIGHT, linewidths=1.4, zorder=2))

    groups = [n for n in layout.nodes if n.kind in ("delegate", "layer")]
    if groups:
        _draw_groups(ax, groups)
    by_kind: dict[str, list[LayoutNode]] = {}
    for n in layout.nodes:
        if n.kind not in ("delegate", "layer"):
            by_kind.setdefault(n.kind, []).append(n)
    for kind, nodes in by_kind.items():
        ax.scatter(
            [n.x for n in nodes], [n.y for n in nodes], s=_SIZES[kind], marker=_MARKERS[kind],
            c=[colour_for_key(n.colour_key) for n in nodes],
            edgecolors="#333333" if kind == "copy" else "none", linewidths=0.6, zorder=3,
        )
    if target is not None:
        t = where[target]
        ax.scatter([t.x], [t.y], s=_SIZES[t.kind] * 3.5, marker="o", facecolors="none", edgecolors=HIGHLIGHT, linewidths=2.0, zorder=4)

    fontsize = 7 if not many else 6
    xs = [n.x for n in layout.nodes]
    # labels longer than the gap to the next column would run into their neighbours
    unit_pt = 72.0 * width_in / (max(xs) - min(xs) + 3.0)
    max_chars = max(8, int(unit_pt / (0.62 * fontsize)))
    beside = ax.transData + ScaledTranslation(7 / 72, 0, fig.dpi_scale_trans)
    after_box = ax.transData + ScaledTranslation(4 / 72, 0, fig.dpi_scale_trans)
    for n in layout.nodes:
        if many and n.kind not in ("copy", "delegate", "layer", "input", "output") and n.id != target:
            continue
        half = _GROUP_HALF_WIDTH.get(n.kind)
        label = n.label if half is not None or len(n.label) <= max_chars else n.label[: max_chars - 1] + "…"
        ax.text(
            n.x + (half or 0.0), n.y, label, transform=after_box if half is not None else beside, va="center",
            fontsize=fontsize, color=COPY_COLOURS[n.copy_kind] if n.copy_kind else "#222222",
            fontweight="bold" if n.id == target else "normal", zorder=5, clip_on=False,
        )
    ax.set_xlim(min(xs) - 0.8, max(xs) + 2.2)
    ax.set_ylim(layout.depth - 0.4, -0.8)  # top to bottom
    return fig


def _rect(x0: float, y0: float, x1: float, y1: float) -> list[tuple[float, float]]:
    return [(x0, y0), (x1, y0), (x1, y1), (x0, y1)]


def _edge_path(a: LayoutNode, b: LayoutNode, i: int) -> list[tuple[float, float]]:
    """A straight segment between adjacent rows; an edge that skips rows bows sideways
    (a quadratic curve) so it does not run hidden along the nodes in between."""
    span = abs(b.y - a.y)
    if span <= 1.0:
        return [(a.x, a.y), (b.x, b.y)]
    bow = min(0.25 * span, 1.5) * (1 if i % 2 else -1)
    cx, cy = (a.x + b.x) / 2 + bow, (a.y + b.y) / 2
    pts = []
    for k in range(13):
        t = k / 12
        pts.append(((1 - t) ** 2 * a.x + 2 * (1 - t) * t * cx + t * t * b.x, (1 - t) ** 2 * a.y + 2 * (1 - t) * t * cy + t * t * b.y))
    return pts


def _draw_groups(ax: Any, groups: list[LayoutNode]) -> None:
    """Collapsed groups: boxes split by the share of their members on each device."""
    shares, colours, outlines = [], [], []
    for n in groups:
        half, half_h = _GROUP_HALF_WIDTH[n.kind], (0.31 if n.kind == "layer" else 0.23)
        counts = n.device_counts or ((n.device or "cpu", 1),)
        total = sum(c for _, c in counts)
        x = n.x - half
        for device, count in counts:
            w = 2 * half * count / total
            shares.append(_rect(x, n.y - half_h, x + w, n.y + half_h))
            colours.append(device_colour(device))
            x += w
        outlines.append(_rect(n.x - half, n.y - half_h, n.x + half, n.y + half_h))
    # (N, 4, 2) arrays take PolyCollection's fast path (no per-polygon shape checks)
    ax.add_collection(PolyCollection(np.asarray(shares), facecolors=colours, edgecolors="none", zorder=3))
    ax.add_collection(PolyCollection(np.asarray(outlines), facecolors="none", edgecolors="#333333", linewidths=0.8, zorder=3))


def _legend_handles(layout: GraphLayout) -> list:
    devices = sorted({d for n in layout.nodes for d in n.devices}, key=Device.parse)
    kinds = sorted({n.copy_kind for n in layout.nodes if n.copy_kind})
    handles = [Patch(color=device_colour(d), label=d) for d in devices]
    handles += [Line2D([], [], marker="D", linestyle="", color=COPY_COLOURS[k], label=k) for k in kinds]
    present = {n.kind for n in layout.nodes}
    for kind, text in (("input", "input"), ("constant", "weight"), ("output", "output")):
        if kind in present:
            colour = "#888888"
            handles.append(Line2D([], [], marker=_MARKERS[kind], linestyle="", color=colour, label=text))
    if layout.boxes:
        handles.append(Patch(facecolor="none", edgecolor="#555555", linestyle="--", label="delegate"))
    return handles


class GraphView(FigureView):
    """The propagated graph as a widget (see the module rules).

    ``GraphView(dg_or_plan, collapse=None | "delegates" | "layers", devices=None)``;
    ``.select(name)`` or the node dropdown picks a node; ``.figure()`` / ``.save(path)``
    give the static picture.
    """

    css_class = "wb-graph-view"

    def __init__(self, dg_or_plan: Any, collapse: Optional[str] = None, devices: Optional[Iterable[str]] = None) -> None:
        super().__init__()
        self.graph, self.plan = as_graph_and_plan(dg_or_plan, "GraphView")
        self.layout = graph_layout(self.graph, collapse, devices)  # checks the mode and the devices
        names = [n.name for n in self.graph.graph.nodes]
        self.node_dropdown = widgets.Dropdown(options=[("(no node)", NO_CHOICE)] + [(n, n) for n in names], description="node")
        self.collapse_dropdown = widgets.Dropdown(
            options=[("none", NO_CHOICE), ("delegates", "delegates"), ("layers", "layers")], value=as_choice(collapse), description="collapse"
        )
        present = [str(d) for d in self.graph.devices]
        shown = self.layout.devices
        self.device_dropdown = widgets.Dropdown(
            options=[("all", NO_CHOICE)] + [(d, d) for d in present],
            value=shown[0] if shown and len(shown) == 1 else NO_CHOICE,
            description="devices",
        )
        self._bind(self.node_dropdown, self.select)
        self._bind(self.collapse_dropdown, lambda mode: self.set_options(collapse=mode))
        self._bind(self.device_dropdown, lambda device: self.set_options(devices=device and [device]))
        self._show(self.node_dropdown, self.collapse_dropdown, self.device_dropdown)

    def select(self, name: Optional[str]) -> None:
        """Select graph node ``name`` (None clears); unknown names are a KeyError."""
        if name is not None:
            find_node(self.graph, name)  # raises KeyError listing valid names
        self._selected = name
        self._redraw_with(self.node_dropdown, name)

    def set_options(self, collapse: Any = "unchanged", devices: Any = "unchanged") -> None:
        """Change the collapse mode and/or the device filter (falsy: every device), then redraw."""
        if collapse == "unchanged":
            collapse = self.layout.collapse
        if devices == "unchanged":
            devices = self.layout.devices
        elif not devices:
            devices = None
        self.layout = graph_layout(self.graph, collapse, devices)
        self.refresh()

    def spec_of(self, name: str) -> NodeSpec:
        return node_spec(self.graph, name, self.plan)

    def _draw(self) -> Figure:
        return draw_graph(self.layout, self._selected, self._title())

    def _title(self) -> str:
        dg = self.graph
        copies = copies_text(dg.copy_counts(), dg.copy_bytes())
        mode = f", collapsed by {self.layout.collapse}" if self.layout.collapse else ""
        filt = f", devices {', '.join(self.layout.devices)}" if self.layout.devices else ""
        return (
            f"{self.layout.graph_nodes} graph nodes as {len(self.layout.nodes)} drawn{mode}{filt} · "
            f"{len(dg.placement.delegates)} delegates · {copies}"
        )

    def _spec_html(self) -> str:
        if self._selected is None:
            return "<i>select a node to see its spec</i>"
        spec = self.spec_of(self._selected)
        rows = spec.rows()
        shown = self.layout.node_of.get(self._selected)
        if shown is None:
            rows.append(("shown", "hidden by the device filter"))
        elif shown != self._selected:
            rows.append(("shown", f"inside {shown}"))
        return rows_html(f"{spec.name} ({spec.role})", rows)
