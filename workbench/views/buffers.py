"""BufferView: each device's arena as execution step × byte offset, one rectangle per tensor.

Rules:
1. What is drawn comes from ``buffer_panels`` → ``buffer_scene`` (plain data); the front
   end and ``draw_buffer_scene`` (the static figure) only render it.
2. Panels are sized by arena bytes; an empty arena is one line; rectangles are coloured
   by kind (input, output, activation, copy); the arena size is a solid line and the
   lower bound a dashed red one drawn on top (both visible when equal, and labelled);
   the resident weights of each device are one bar below the arenas.
3. The algorithm dropdown re-plans the same graph with ``plan.with_algorithm(name)``
   when first chosen and keeps the result: choosing it again costs nothing.
4. Selecting a tensor (its storage, or any value that aliases it) selects its storage's
   rectangle and shows its allocation; a weight selects its segment of the resident bar.
5. ``window`` shows a range of steps (zoom); empty shows the live steps.
"""

from __future__ import annotations

import html
from typing import Any, Iterable, Optional, Sequence

import ipywidgets as widgets
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ._buffer_data import BufferRect, buffer_panels, find_rect
from ._buffer_scene import allocation_rows, buffer_scene
from ._inputs import UnknownNameError, ViewOptionError, as_plan
from ._style import format_bytes
from ._upstream import ALGORITHMS, graph_of
from ._widget import FigureView, detail, new_figure
from .graph import search_names


class BufferView(FigureView):
    """A memory plan's arenas as an interactive widget (see the module rules).

    ``BufferView(plan, algorithms=None)``: ``algorithms`` lists the names offered in the
    algorithm dropdown (default: every registered planning algorithm).
    """

    kind = "buffers"
    css_class = "wb-buffer-view"
    empty_text = "select a tensor to see its allocation"

    def __init__(self, plan: Any, algorithms: Optional[Iterable[str]] = None) -> None:
        super().__init__()
        plan = as_plan(plan, "BufferView")
        names = list(algorithms) if algorithms is not None else list(ALGORITHMS)
        if plan.algorithm not in names:
            names.insert(0, plan.algorithm)
        unknown = [n for n in names if n not in ALGORITHMS and n != plan.algorithm]  # a plan read from elsewhere keeps its own
        if unknown:
            raise ViewOptionError(
                f"unknown planning algorithm(s) {', '.join(map(repr, unknown))}; valid ones are {', '.join(ALGORITHMS)}"
            )
        self._plans: dict[str, Any] = {plan.algorithm: plan}
        self.plan = plan
        self.graph = graph_of(plan)
        self.panels = buffer_panels(plan)
        self.algorithm_dropdown = widgets.Dropdown(options=names, value=plan.algorithm, description="algorithm")
        self._bind(self.algorithm_dropdown, self.set_algorithm)
        self._show(self.algorithm_dropdown)

    @property
    def planned(self) -> dict[str, Any]:
        """The plans computed so far, by algorithm (rule 3)."""
        return dict(self._plans)

    def set_algorithm(self, name: str) -> None:
        """Show the plan made by algorithm ``name`` (computed once, then cached)."""
        if name not in self._plans:
            self._plans[name] = self.plan.with_algorithm(name)  # a PlanError (ValueError) names the valid ones
        self.plan = self._plans[name]
        self.panels = buffer_panels(self.plan)
        if self.algorithm_dropdown.value != name:
            self.algorithm_dropdown.value = name  # its observer re-enters, then redraws
            return
        self.refresh()

    def select(self, name: Optional[str]) -> None:
        """Select a tensor by storage or value name, or a resident weight (None clears)."""
        if name is not None and self._key_for_focus(name) is None:
            why = self.plan.unplanned.get(name)
            some = ", ".join(list(self.plan.allocations)[:6])
            hint = f": {why}" if why else f"; planned tensors are named like {some}"
            raise UnknownNameError(f"{name!r} has no planned memory{hint}")
        self.set_focus(name)
        key = self._key_for_focus(name)
        if self.canvas.selected != key:
            self.canvas.selected = key

    def set_window(self, first: Optional[float] = None, last: Optional[float] = None) -> None:
        """Show steps ``first`` to ``last`` (rule 5); no arguments show all live steps."""
        if first is None and last is None:
            self.canvas.window = []
            return
        lo, hi = self._scene_x()
        first = lo if first is None else first
        last = hi if last is None else last
        if not last > first:
            raise ViewOptionError(f"a step window needs first < last, got {first}..{last}")
        self.canvas.window = [float(first), float(last)]

    def search(self, text: str, limit: int = 20) -> list[str]:
        """Planned values and resident weights whose name contains ``text``."""
        weights = [n for n in self.graph.residency]
        return search_names(list(self.plan.allocations) + list(self.plan.storage_of) + weights, text, limit)

    def rect_of(self, name: str) -> Optional[BufferRect]:
        """The rectangle drawn for storage ``name`` in the current plan."""
        return find_rect(self.panels, name)

    # -- FigureView hooks -------------------------------------------------------------------
    def _scene_x(self) -> tuple[float, float]:
        x = self.canvas.scene.get("x") or {"lo": 0, "hi": 1}
        return x["lo"], x["hi"]

    def _title(self) -> str:
        return f"memory plan · algorithm {self.plan.algorithm} · alignment {self.plan.alignment}"

    def _scene(self) -> dict:
        return buffer_scene(self.panels, self.plan, self.graph, self._title())

    def _draw(self) -> Figure:
        window = tuple(self.canvas.window) if len(self.canvas.window) == 2 else None
        return draw_buffer_scene(self._scene(), self.canvas.selected, window)

    def _key_for_focus(self, focus: Optional[str]) -> Any:
        if focus is None:
            return None
        storage = self.plan.storage_of.get(focus, focus if focus in self.plan.allocations else None)
        if storage is not None:
            return storage
        return focus if focus in self.graph.residency else None

    def _detail(self, key: Any) -> dict:
        if not isinstance(key, str):  # front-end state of another shape names nothing here
            return {}
        if key in self.plan.allocations:
            a = self.plan.allocations[key]
            return detail(key, f"{a.name} · {a.device} · {format_bytes(a.nbytes)}", allocation_rows(a, self.plan.steps))
        if key in self.graph.residency:
            held = ", ".join(str(d) for d in self.graph.residency[key])
            rows = [("resident on", held), ("why no arena slot", self.plan.unplanned.get(key, "a weight, loaded once"))]
            return detail(key, f"{key} (weight)", rows)
        return {}

    def _summary_html(self) -> str:
        parts = [
            f"{html.escape(str(p.device))}: arena {format_bytes(p.arena_bytes)} / lower bound {format_bytes(p.lower_bound)}"
            + (f" ({p.arena_bytes / p.lower_bound:.2f}×)" if p.lower_bound else "")
            for p in self.panels
        ]
        algorithm = html.escape(str(self.plan.algorithm))
        return f"<span class='wb-summary'>algorithm <b>{algorithm}</b> · " + " · ".join(parts) + "</span>"


# --- the static figure -----------------------------------------------------------------


def draw_buffer_scene(scene: dict, selected: Optional[str] = None, window: Optional[Sequence[float]] = None) -> Figure:
    """Render a buffer scene with matplotlib: one axes per non-empty arena (heights by
    arena bytes), the empty ones as a line of text, the resident weights as bars."""
    panels = [p for p in scene["panels"] if not p["empty"]]
    empty = [p["title"] for p in scene["panels"] if p["empty"]]
    resident = scene.get("resident", [])
    heights = [p["h"] / 100 for p in panels] + ([0.3 + 0.28 * len(resident)] if resident else [])
    fig = new_figure(12.0, 0.9 + sum(heights) + 0.5 * len(panels) + 0.2 * len(empty))
    if not heights:
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, "\n".join(empty) or "the plan has no arenas", ha="center", va="center", transform=ax.transAxes)
        return fig
    axes = fig.subplots(len(heights), 1, squeeze=False, height_ratios=heights)[:, 0]
    lo, hi = window if window is not None else (scene["x"]["lo"], scene["x"]["hi"])
    for ax, p in zip(axes, panels):
        _draw_panel(ax, p, selected, lo, hi)
    if panels:
        axes[len(panels) - 1].set_xlabel("execution step")
    if resident:
        _draw_resident(axes[-1], resident, selected)
    if empty:  # one line each, under the last axes
        axes[-1].set_xlabel(("execution step\n" if not resident else "") + "\n".join(empty), fontsize=8, color="#555555", loc="left")
    handles = [
        Patch(facecolor=i["fill"] if i["fill"] != "transparent" else "none", edgecolor=i["stroke"],
              linestyle="--" if i.get("dashed") else "-", label=i["label"])
        for i in scene.get("legend", [])
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    if scene.get("title"):
        fig.suptitle(scene["title"], fontsize=9, x=0.01, ha="left")
    return fig


def _draw_panel(ax: Any, p: dict, selected: Optional[str], lo: float, hi: float) -> None:
    ax.set_gid(f"arena:{p['device']}:{p['arena']}")
    rects = p["rects"]
    verts = [[(r["x0"], r["y0"]), (r["x1"], r["y0"]), (r["x1"], r["y1"]), (r["x0"], r["y1"])] for r in rects]
    ax.add_collection(PolyCollection(verts, facecolors=[r["fill"] for r in rects], edgecolors="white", linewidths=0.4))
    chosen = [v for v, r in zip(verts, rects) if r["id"] == selected]
    if chosen:
        ax.add_collection(PolyCollection(chosen, facecolors="none", edgecolors="black", linewidths=2.0, zorder=5))
    ax.axhline(p["arena_bytes"], color="#222222", linewidth=1.2, zorder=6)
    ax.axhline(p["lower_bound"], color="#D62728", linewidth=1.4, linestyle=(0, (4, 3)), zorder=7)
    equal = p["arena_bytes"] == p["lower_bound"]
    arena_text = ("arena = lower bound " if equal else "arena ") + format_bytes(p["arena_bytes"])
    # above the line when the headroom holds the text (7 pt and a gap), else under it: a
    # short panel's label must not run into its top edge and title
    headroom_pt = (p["ymax"] - p["arena_bytes"]) / p["ymax"] * p["h"] / 100 * 72  # the axes are h/100 inches tall
    above = headroom_pt >= 11
    ax.annotate(arena_text, (1.0, p["arena_bytes"]), xycoords=("axes fraction", "data"), xytext=(-4, 3 if above else -3),
                textcoords="offset points", ha="right", va="bottom" if above else "top", fontsize=7)
    if not equal:
        ax.annotate(f"lower bound {format_bytes(p['lower_bound'])}", (1.0, p["lower_bound"]), xycoords=("axes fraction", "data"),
                    xytext=(-4, -3), textcoords="offset points", ha="right", va="top", fontsize=7, color="#D62728")
    span = max(hi - lo, 1)
    labelled = 0
    for r in sorted(rects, key=lambda r: -(r["x1"] - r["x0"]) * (r["y1"] - r["y0"])):
        if labelled >= 30:
            break
        if (r["x1"] - r["x0"]) >= 0.08 * span and (r["y1"] - r["y0"]) >= 0.1 * p["ymax"] and lo <= r["x0"] < hi:
            ax.text((r["x0"] + min(r["x1"], hi)) / 2, (r["y0"] + r["y1"]) / 2, r["label"], ha="center", va="center", fontsize=6.5, clip_on=True)
            labelled += 1
    ax.set_xlim(lo, hi)
    ax.set_ylim(0, p["ymax"])
    ax.set_yticks([v for v, _ in p["yticks"]], [label for _, label in p["yticks"]], fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_ylabel("offset (bytes)", fontsize=8)
    ax.set_title(p["title"], fontsize=8, loc="left")


def _draw_resident(ax: Any, resident: list, selected: Optional[str]) -> None:
    ax.set_gid("resident")
    biggest = max(r["total"] for r in resident) or 1
    for i, r in enumerate(resident):
        spans, colours, edges, widths = [], [], [], []
        left = 0.0
        for j, (name, nbytes) in enumerate(r["segments"]):
            spans.append((left, nbytes / biggest))
            colours.append("#BDBDBD" if j % 2 else "#A5A5A5")
            edges.append("black" if name == selected else "white")
            widths.append(2.0 if name == selected else 0.2)
            left += nbytes / biggest
        ax.broken_barh(spans, (i - 0.3, 0.6), facecolors=colours, edgecolors=edges, linewidths=widths)
        ax.text(min(left, 0.7) + 0.01, i, r["label"], va="center", fontsize=7)
    ax.set_yticks(range(len(resident)), [r["device"] for r in resident], fontsize=7)
    ax.set_xlim(0, 1.0)
    ax.set_ylim(len(resident) - 0.5, -0.5)
    ax.set_xticks([])
    ax.set_title("resident weights (loaded once, outside the arenas)", fontsize=8, loc="left")
