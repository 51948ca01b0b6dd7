"""TimelineView: a run's copies and compute on one lane per (device, stream).

Rules:
1. What is drawn comes from ``timeline_data`` (plain data); this module only renders it.
2. Bars are coloured by copy kind (h2d, d2h, d2d) or, for compute and host work, by
   device; wide enough copy bars carry their bytes and GB/s.
3. Each run's axes is titled with its summary: copy time, compute time, overlap.
4. ``compare=`` adds a second run drawn below on the same time axis; a mapping of
   named runs fills the comparison dropdown, and choosing "(none)" hides it.
5. Selecting a bar (by its index in the main run's bars) outlines it and shows its
   bytes, duration and GB/s in the spec panel.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import ipywidgets as widgets
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from ..devices import Device
from ..runtime.timeline import COPY_EVENT_KINDS
from ._inputs import ViewInputError, as_timeline
from ._style import COPY_COLOURS, HIGHLIGHT, device_colour, format_bytes, format_us, timeline_colour
from ._timeline_data import TimelineData, timeline_data
from ._widget import NO_CHOICE, FigureView, as_choice, new_figure, rows_html

_BAR_HALF = 0.38


def draw_timelines(runs: list[tuple[str, TimelineData]], selected: Optional[int] = None) -> Figure:
    """Render one axes per (label, data), all on one time axis; ``selected`` indexes the
    first run's bars."""
    heights = [max(len(d.lanes), 1) * 0.55 + 0.9 for _, d in runs]
    fig = new_figure(12.0, 0.8 + sum(heights))
    axes = fig.subplots(len(runs), 1, sharex=True, squeeze=False, height_ratios=heights)[:, 0]
    start = min((d.start_us for _, d in runs), default=0.0)
    end = max((d.end_us for _, d in runs), default=0.0)
    span = max(end - start, 1e-9)
    for i, (ax, (label, data)) in enumerate(zip(axes, runs)):
        _draw_run(ax, label, data, selected if i == 0 else None, span)
        ax.set_xlim(start, start + span * 1.02)
    axes[-1].set_xlabel("time (µs)")
    kinds = sorted({b.kind for _, d in runs for b in d.bars}, key=lambda k: (k not in COPY_EVENT_KINDS, k))
    devices = sorted({b.device for _, d in runs for b in d.bars if b.kind not in COPY_EVENT_KINDS}, key=Device.parse)
    handles = [Patch(color=COPY_COLOURS[k], label=k) for k in kinds if k in COPY_EVENT_KINDS]
    handles += [Patch(color=device_colour(d), label=f"compute on {d}") for d in devices]
    if handles:
        fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=8, frameon=False)
    return fig


def _draw_run(ax: Any, label: str, data: TimelineData, selected: Optional[int], span: float) -> None:
    verts, colours = [], []
    for b in data.bars:
        lo, hi = b.lane - _BAR_HALF, b.lane + _BAR_HALF
        # zero-length events stay visible as hairlines
        verts.append([(b.start_us, lo), (b.end_us, lo), (b.end_us, hi), (b.start_us, hi)])
        colours.append(timeline_colour(b.kind, b.device))
    ax.add_collection(PolyCollection(verts, facecolors=colours, edgecolors=colours, linewidths=0.3))
    for b in data.bars:
        if b.kind in COPY_EVENT_KINDS and b.duration_us >= 0.06 * span:
            ax.text(
                (b.start_us + b.end_us) / 2, b.lane, f"{format_bytes(b.nbytes)} · {b.gb_per_s:.1f} GB/s",
                ha="center", va="center", fontsize=6, clip_on=True,
            )
    if selected is not None and 0 <= selected < len(data.bars):
        b = data.bars[selected]
        ax.add_patch(
            Rectangle((b.start_us, b.lane - _BAR_HALF - 0.06), max(b.duration_us, span * 0.002), 2 * _BAR_HALF + 0.12,
                      facecolor="none", edgecolor=HIGHLIGHT, linewidth=1.8, zorder=5)
        )
        ax.annotate(b.text, (b.end_us, b.lane + _BAR_HALF), xytext=(3, -2), textcoords="offset points", fontsize=7, fontweight="bold", zorder=6)
    ax.set_yticks(range(len(data.lanes)), [f"{d} · {s}" for d, s in data.lanes], fontsize=8)
    ax.set_ylim(len(data.lanes) - 0.5, -0.5) if data.lanes else ax.set_ylim(0.5, -0.5)
    ax.grid(axis="x", linewidth=0.3, alpha=0.6)
    ax.set_title(f"{label}: {data.summary.line}", fontsize=8, loc="left")


class TimelineView(FigureView):
    """A run's timeline as a widget (see the module rules).

    ``TimelineView(run_or_timeline, compare=None, label="run")``: ``compare`` is another
    run/Timeline, or a mapping ``{name: run}`` offered in the comparison dropdown.
    """

    css_class = "wb-timeline-view"

    def __init__(self, run_or_timeline: Any, compare: Any = None, label: str = "run") -> None:
        super().__init__()
        self.label = str(label)
        self.data = timeline_data(run_or_timeline)
        self.comparisons: dict[str, TimelineData] = _comparisons(compare)
        self._compare: Optional[str] = next(iter(self.comparisons), None)
        self.event_dropdown = widgets.Dropdown(
            options=[("(no event)", NO_CHOICE)] + [(f"#{i} {b.kind} {b.node} · {b.device}/{b.stream}", i) for i, b in enumerate(self.data.bars)],
            description="event",
        )
        self.compare_dropdown = widgets.Dropdown(
            options=[("(none)", NO_CHOICE)] + [(k, k) for k in self.comparisons], value=as_choice(self._compare), description="compare"
        )
        self.compare_dropdown.layout.display = "" if self.comparisons else "none"
        self._bind(self.event_dropdown, self.select)
        self._bind(self.compare_dropdown, self.set_compare)
        self._show(self.event_dropdown, self.compare_dropdown)

    @property
    def shown(self) -> list[tuple[str, TimelineData]]:
        """The runs drawn now, top to bottom."""
        runs = [(self.label, self.data)]
        if self._compare is not None:
            runs.append((self._compare, self.comparisons[self._compare]))
        return runs

    def select(self, index: Optional[int]) -> None:
        """Select the ``index``-th bar of the main run (None clears)."""
        if index is not None and not (isinstance(index, int) and 0 <= index < len(self.data.bars)):
            raise IndexError(f"event index {index!r} is out of range; this run has {len(self.data.bars)} events (0..{len(self.data.bars) - 1})")
        self._selected = index
        self._redraw_with(self.event_dropdown, index)

    def set_compare(self, name: Optional[str]) -> None:
        """Draw the comparison run ``name`` below (None hides it)."""
        if name is not None and name not in self.comparisons:
            valid = ", ".join(map(repr, self.comparisons)) or "none (pass compare= when building the view)"
            raise KeyError(f"no comparison run {name!r}; valid ones are {valid}")
        self._compare = name
        self._redraw_with(self.compare_dropdown, name)

    def _draw(self) -> Figure:
        return draw_timelines(self.shown, self._selected)

    def _summary_html(self) -> str:
        lines = "".join(f"<div><b>{label}</b>: {data.summary.line}</div>" for label, data in self.shown)
        return f"<div class='wb-summary'>{lines}</div>"

    def _spec_html(self) -> str:
        if self._selected is None:
            return "<i>select an event to see its bytes, duration and GB/s</i>"
        b = self.data.bars[self._selected]
        rows = [
            ("kind", b.kind),
            ("node", b.node),
            ("lane", f"{b.device} · {b.stream}"),
            ("start", format_us(b.start_us)),
            ("end", format_us(b.end_us)),
            ("duration", format_us(b.duration_us)),
            ("bytes", f"{b.nbytes} ({format_bytes(b.nbytes)})"),
        ]
        if b.kind in COPY_EVENT_KINDS:
            rows.append(("bandwidth", f"{b.gb_per_s:.2f} GB/s"))
        if b.flops:
            rows.append(("flops", f"{b.flops:,}"))
        return rows_html(b.text, rows)


def _comparisons(compare: Any) -> dict[str, TimelineData]:
    if compare is None:
        return {}
    if isinstance(compare, Mapping):
        out = {}
        for name, run in compare.items():
            try:
                out[str(name)] = timeline_data(run)
            except ViewInputError as exc:
                raise ViewInputError(f"compare[{name!r}]: {exc}") from None
        return out
    return {"compare": timeline_data(as_timeline(compare, "TimelineView's compare="))}
