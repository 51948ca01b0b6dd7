"""BufferView: each device's arena as execution step × byte offset, one rectangle per tensor.

Rules:
1. What is drawn comes from ``buffer_panels`` (plain data); this module only renders it.
2. One panel per (device, arena); rectangles coloured by kind (input, output,
   activation, copy); the arena size a solid line, the lower bound a dashed red one.
3. The algorithm dropdown re-plans the same graph with ``plan.with_algorithm(name)``
   when first chosen and keeps the result: choosing it again costs nothing.
4. Selecting a tensor (its storage, or any value that aliases it) outlines its
   rectangle in black and shows its allocation in the spec panel.
"""

from __future__ import annotations

from typing import Any, Iterable, Optional

import ipywidgets as widgets
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle
from matplotlib.ticker import FuncFormatter

from ..planning.algorithms import ALGORITHMS
from ._buffer_data import BufferPanel, BufferRect, buffer_panels, find_rect
from ._inputs import as_plan
from ._style import BUFFER_COLOURS, HIGHLIGHT, format_bytes
from ._widget import NO_CHOICE, FigureView, as_choice, new_figure, rows_html

_MAX_LABELS = 40


def draw_buffers(panels: tuple[BufferPanel, ...], selected: Optional[str] = None, title: str = "") -> Figure:
    """Render the panels of one plan (rules 2 and 4); ``selected`` is a storage name."""
    fig = new_figure(12.0, 1.0 + 2.6 * max(len(panels), 1))
    if not panels:
        ax = fig.add_subplot()
        ax.set_axis_off()
        ax.text(0.5, 0.5, "the plan has no arenas", ha="center", va="center", transform=ax.transAxes)
        return fig
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    for ax, panel in zip(axes, panels):
        _draw_panel(ax, panel, selected)
    axes[-1].set_xlabel("execution step")
    kinds = sorted({r.kind for p in panels for r in p.rects})
    handles = [Patch(color=BUFFER_COLOURS[k], label=k) for k in kinds]
    handles += [
        Patch(facecolor="none", edgecolor="#333333", label="arena size"),
        Patch(facecolor="none", edgecolor="#D62728", linestyle="--", label="lower bound"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=9, x=0.01, ha="left")
    return fig


def _draw_panel(ax: Any, panel: BufferPanel, selected: Optional[str]) -> None:
    verts = [[(r.x0, r.y0), (r.x1, r.y0), (r.x1, r.y1), (r.x0, r.y1)] for r in panel.rects]
    colours = [BUFFER_COLOURS[r.kind] for r in panel.rects]
    ax.add_collection(PolyCollection(verts, facecolors=colours, edgecolors="white", linewidths=0.4))
    top = max(panel.arena_bytes, panel.lower_bound, max((r.y1 for r in panel.rects), default=0), 1)
    ax.axhline(panel.arena_bytes, color="#333333", linewidth=1.0)
    ax.axhline(panel.lower_bound, color="#D62728", linewidth=1.0, linestyle="--")
    labelled = 0
    for r in sorted(panel.rects, key=lambda r: -(r.x1 - r.x0) * (r.y1 - r.y0)):
        if labelled >= _MAX_LABELS:
            break
        if (r.x1 - r.x0) >= 0.06 * panel.steps and (r.y1 - r.y0) >= 0.08 * top:
            ax.text((r.x0 + r.x1) / 2, (r.y0 + r.y1) / 2, r.name, ha="center", va="center", fontsize=6, clip_on=True)
            labelled += 1
    chosen = next((r for r in panel.rects if r.name == selected), None)
    if chosen is not None:
        ax.add_patch(
            Rectangle((chosen.x0, chosen.y0), chosen.x1 - chosen.x0, chosen.y1 - chosen.y0, facecolor="none", edgecolor=HIGHLIGHT, linewidth=2.0, zorder=5)
        )
        ax.annotate(
            f"{chosen.name} {format_bytes(chosen.nbytes)}", (chosen.x1, chosen.y1), xytext=(4, 2),
            textcoords="offset points", fontsize=7, fontweight="bold", zorder=6,
        )
    ax.set_xlim(0, max(panel.steps, 1))
    ax.set_ylim(0, top * 1.05)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: format_bytes(v)))
    ax.set_ylabel("offset")
    ax.set_title(panel.title, fontsize=8, loc="left")


class BufferView(FigureView):
    """A memory plan's arenas as a widget (see the module rules).

    ``BufferView(plan, algorithms=None)``: ``algorithms`` lists the names offered in the
    algorithm dropdown (default: every registered planning algorithm).
    """

    css_class = "wb-buffer-view"

    def __init__(self, plan: Any, algorithms: Optional[Iterable[str]] = None) -> None:
        super().__init__()
        plan = as_plan(plan, "BufferView")
        names = list(algorithms) if algorithms is not None else list(ALGORITHMS)
        if plan.algorithm not in names:
            names.insert(0, plan.algorithm)
        unknown = [n for n in names if n not in ALGORITHMS]
        if unknown:
            raise ValueError(
                f"unknown planning algorithm(s) {', '.join(map(repr, unknown))}; valid ones are {', '.join(ALGORITHMS)}"
            )
        self._plans: dict[str, Any] = {plan.algorithm: plan}
        self.plan = plan
        self.panels = buffer_panels(plan)
        self.algorithm_dropdown = widgets.Dropdown(options=names, value=plan.algorithm, description="algorithm")
        self.tensor_dropdown = widgets.Dropdown(description="tensor")
        self._fill_tensors()
        self._bind(self.algorithm_dropdown, self.set_algorithm)
        self._bind(self.tensor_dropdown, self.select)
        self._show(self.algorithm_dropdown, self.tensor_dropdown)

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
        self._redraw_with(self.algorithm_dropdown, name)

    def select(self, name: Optional[str]) -> None:
        """Select a tensor by storage or value name (None clears)."""
        storage = None
        if name is not None:
            storage = self.plan.storage_of.get(name, name if name in self.plan.allocations else None)
            if storage is None:
                why = self.plan.unplanned.get(name)
                some = ", ".join(list(self.plan.allocations)[:6])
                hint = f": {why}" if why else f"; planned tensors are named like {some}"
                raise KeyError(f"{name!r} has no planned memory{hint}")
        self._selected = storage
        self._redraw_with(self.tensor_dropdown, storage)

    def rect_of(self, name: str) -> Optional[BufferRect]:
        """The rectangle drawn for storage ``name`` in the current plan."""
        return find_rect(self.panels, name)

    def _fill_tensors(self) -> None:
        options = [("(no tensor)", NO_CHOICE)] + [
            (f"{a.name} · {a.device} · {format_bytes(a.size)}", a.name) for a in self.plan.allocations.values()
        ]
        self.tensor_dropdown.options = options
        self.tensor_dropdown.value = as_choice(self._selected)  # new options leave no value chosen

    def _draw(self) -> Figure:
        return draw_buffers(self.panels, self._selected, f"memory plan · algorithm {self.plan.algorithm} · alignment {self.plan.alignment}")

    def _summary_html(self) -> str:
        parts = [
            f"{p.device}: arena {format_bytes(p.arena_bytes)} / lower bound {format_bytes(p.lower_bound)}"
            + (f" ({p.arena_bytes / p.lower_bound:.2f}×)" if p.lower_bound else "")
            for p in self.panels
        ]
        return f"<span class='wb-summary'>algorithm <b>{self.plan.algorithm}</b> · " + " · ".join(parts) + "</span>"

    def _spec_html(self) -> str:
        if self._selected is None:
            return "<i>select a tensor to see its allocation</i>"
        a = self.plan.allocations[self._selected]
        rows = [
            ("device", a.device),
            ("arena", str(a.arena)),
            ("offset", f"{a.offset} (0x{a.offset:x})"),
            ("size", f"{a.size} ({format_bytes(a.size)}, aligned)"),
            ("nbytes", f"{a.nbytes} ({format_bytes(a.nbytes)})"),
            ("lifetime", f"steps {a.start}..{a.end}: {self.plan.steps[a.start]} … {self.plan.steps[a.end]}"),
            ("kind", a.kind),
        ]
        if a.aliases:
            rows.append(("aliases", ", ".join(a.aliases)))
        return rows_html(a.name, rows)
