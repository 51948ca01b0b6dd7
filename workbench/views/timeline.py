"""TimelineView: a run's copies and compute on one lane per (device, stream), with a time
window, a kind filter, hover and click, and step boundaries for multi-step runs.

Rules:
1. What is drawn comes from ``timeline_data`` → ``timeline_scene`` (plain data); the front
   end and ``draw_timelines`` (the static figure) only render it.
2. Bars are coloured by copy kind (h2d, d2h, d2d) or, for compute and host work, by
   device, with a thin white border so back-to-back events stay distinct (a bar narrower
   than ``NARROW_BAR_PT`` is outlined in its own colour instead, so the border cannot
   hide it); a bar carries its label (bytes for a copy, the node for compute) only where
   the label fits.
3. Each run is titled with its label, how its times were obtained (modeled by which cost
   model, or measured on which GPU: ``timeline_data`` rule 8) and its summary: copy time,
   compute time, overlap.
4. ``compare=`` adds a second run drawn below on the same time axis; a mapping of
   named runs fills the comparison dropdown, and choosing "(none)" hides it.
5. Selecting a bar (by its index in the main run's bars) selects the graph value it ran
   for, so linked views highlight it and every bar of that value is outlined here; the
   bar's bytes, duration and GB/s go to the side panel, never over its neighbours.
6. ``set_window`` shows a time range, ``hide_kinds`` filters event kinds out; both are
   the same state the front end's zoom and filter set.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Optional, Sequence

import ipywidgets as widgets
from matplotlib.collections import LineCollection, PolyCollection
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ._inputs import UnknownNameError, ViewIndexError, ViewInputError, ViewOptionError, as_timeline
from ._style import FLOW_COLOURS, format_bytes, format_us, timeline_colour
from ._timeline_data import TimelineBar, TimelineData, timeline_data, visible_bars
from ._timeline_scene import timeline_scene
from ._upstream import COPY_EVENT_KINDS, EVENT_KINDS
from ._widget import NO_CHOICE, FigureView, as_choice, detail, new_figure
from .graph import search_names

_BAR_HALF = 0.38


class TimelineView(FigureView):
    """A run's timeline as an interactive widget (see the module rules).

    ``TimelineView(run_or_timeline, compare=None, label="run", steps=None)``: ``compare``
    is another run/Timeline, or a mapping ``{name: run}`` offered in the comparison
    dropdown; ``steps`` the start time (µs) of each step of a multi-step run (default:
    what the timeline records, see ``timeline_data``).
    """

    kind = "timeline"
    css_class = "wb-timeline-view"
    empty_text = "select an event to see its bytes, duration and GB/s"

    def __init__(
        self, run_or_timeline: Any, compare: Any = None, label: str = "run", steps: Optional[Sequence[float]] = None
    ) -> None:
        super().__init__()
        self.label = str(label)
        self.data = timeline_data(run_or_timeline, steps)
        self.comparisons: dict[str, TimelineData] = _comparisons(compare)
        self._compare: Optional[str] = next(iter(self.comparisons), None)
        self.compare_dropdown = widgets.Dropdown(
            options=[("(none)", NO_CHOICE)] + [(k, k) for k in self.comparisons], value=as_choice(self._compare), description="compare"
        )
        self.compare_dropdown.layout.display = "" if self.comparisons else "none"
        self._bind(self.compare_dropdown, self.set_compare)
        self._show(*([self.compare_dropdown] if self.comparisons else []))

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
            raise ViewIndexError(
                f"event index {index!r} is out of range; this run has {len(self.data.bars)} events (0..{len(self.data.bars) - 1})"
            )
        with self.canvas.hold_trait_notifications():
            self.canvas.selected = index
            self.canvas.focus = self.data.bars[index].node if index is not None else None
        self.set_focus(self.canvas.focus)

    def select_node(self, node: Optional[str]) -> None:
        """Select the first event of graph node ``node`` (None clears)."""
        if node is not None and not any(b.node == node for b in self.data.bars):
            raise UnknownNameError(f"no event of node {node!r} in this run; search(text) lists the nodes that ran")
        self.set_focus(node)

    def linked_bars(self) -> list[int]:
        """Indices of the main run's bars for the selected graph value (what is outlined)."""
        focus = self.canvas.focus
        return [i for i, b in enumerate(self.data.bars) if focus is not None and b.node == focus]

    def set_compare(self, name: Optional[str]) -> None:
        """Draw the comparison run ``name`` below (None hides it)."""
        if name is not None and name not in self.comparisons:
            valid = ", ".join(map(repr, self.comparisons)) or "none (pass compare= when building the view)"
            raise UnknownNameError(f"no comparison run {name!r}; valid ones are {valid}")
        self._compare = name
        self._redraw_with(self.compare_dropdown, name)

    def set_window(self, start_us: Optional[float] = None, end_us: Optional[float] = None) -> None:
        """Show ``start_us`` to ``end_us`` (rule 6); no arguments show the whole run."""
        if start_us is None and end_us is None:
            self.canvas.window = []
            return
        t0, t1 = self._span()
        start = t0 if start_us is None else float(start_us)
        end = t1 if end_us is None else float(end_us)
        if not end > start:
            raise ViewOptionError(f"a time window needs start < end, got {start}..{end} µs")
        self.canvas.window = [start, end]

    def hide_kinds(self, kinds: Iterable[str]) -> None:
        """Leave events of ``kinds`` out (rule 6); an empty list shows every kind."""
        hidden = [k for k in EVENT_KINDS if k in set(kinds)]
        unknown = set(kinds) - set(EVENT_KINDS)
        if unknown:
            raise ViewOptionError(f"unknown event kind(s) {', '.join(sorted(unknown))}; kinds are {', '.join(EVENT_KINDS)}")
        self.canvas.hidden_kinds = hidden

    def visible(self) -> list[TimelineBar]:
        """The main run's bars inside the window and not filtered out."""
        return visible_bars(self.data, self._window(), self.canvas.hidden_kinds)

    def search(self, text: str, limit: int = 20) -> list[str]:
        """Nodes of the main run's events whose name contains ``text``."""
        return search_names([b.node for b in self.data.bars], text, limit)

    # -- FigureView hooks -------------------------------------------------------------------
    def _span(self) -> tuple[float, float]:
        runs = self.shown
        return min(d.start_us for _l, d in runs), max(d.end_us for _l, d in runs)

    def _window(self) -> Optional[tuple[float, float]]:
        w = self.canvas.window
        return (float(w[0]), float(w[1])) if len(w) == 2 else None

    def _scene(self) -> dict:
        return timeline_scene(self.shown)

    def _draw(self) -> Figure:
        selected = self.canvas.selected if isinstance(self.canvas.selected, int) else None
        return draw_timelines(self.shown, selected, self._window(), self.canvas.hidden_kinds, self.linked_bars())

    def _key_for_focus(self, focus: Optional[str]) -> Any:
        if focus is None:
            return None
        current = self.canvas.selected
        if isinstance(current, int) and 0 <= current < len(self.data.bars) and self.data.bars[current].node == focus:
            return current
        return next((i for i, b in enumerate(self.data.bars) if b.node == focus), None)

    def _detail(self, key: Any) -> dict:
        if not isinstance(key, int) or not 0 <= key < len(self.data.bars):
            return {}
        b = self.data.bars[key]
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
        if b.activity != "op":
            rows.append(("activity", b.activity.replace("_", " ") + " (the op's result copied into its planned slot)"))
        others = len(self.linked_bars()) - 1
        if others > 0:
            rows.append(("same node", f"{others} more event(s), outlined"))
        return detail(key, b.text, rows)

    def _summary_html(self) -> str:
        return ""  # each run's summary heads its lanes in the drawing

    def _text(self) -> str:
        return " | ".join(f"{_heading(label, data)}: {data.summary.line}" for label, data in self.shown)


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


# --- the static figure -----------------------------------------------------------------


def draw_timelines(
    runs: list[tuple[str, TimelineData]],
    selected: Optional[int] = None,
    window: Optional[Sequence[float]] = None,
    hidden: Iterable[str] = (),
    linked: Sequence[int] = (),
) -> Figure:
    """Render one axes per (label, data), all on one time axis; ``selected`` and
    ``linked`` index the first run's bars."""
    scene = timeline_scene(runs)
    heights = [max(len(d.lanes), 1) * 0.45 + (0.85 if d.source else 0.7) for _, d in runs]  # a source is a second title line
    fig = new_figure(12.0, 0.8 + sum(heights))
    axes = fig.subplots(len(runs), 1, sharex=True, squeeze=False, height_ratios=heights)[:, 0]
    lo, hi = (scene["t0"], scene["t1"]) if window is None else (float(window[0]), float(window[1]))
    span = max(hi - lo, 1e-9)
    hidden = list(hidden)
    for i, (ax, (label, data)) in enumerate(zip(axes, runs)):
        _draw_run(ax, label, data, visible_bars(data, (lo, hi), hidden), span, selected if i == 0 else None, linked if i == 0 else ())
        for step in scene["steps"] if i == 0 else ():
            if lo <= step["t"] <= hi:
                ax.axvline(step["t"], color="#555555", linewidth=0.8, linestyle=(0, (3, 3)))
                ax.text(step["t"], -0.5, f" {step['label']}", fontsize=6.5, color="#555555", va="bottom")
        ax.set_xlim(lo, lo + span * 1.02 if window is None else hi)
    axes[-1].set_xlabel("time (µs)")
    handles = [Patch(color=item["fill"], label=item["label"]) for item in scene["legend"]]
    if handles:
        fig.legend(handles=handles, loc="outside upper center", ncol=len(handles), fontsize=8, frameon=False)
    return fig


#: bars narrower than this many points get no white border (it would hide them; rule 2)
NARROW_BAR_PT = 2.0

#: more arrows than this in the window: only those of the selection are drawn (as in the widget)
FLOW_MAX = 400


def _draw_flows(ax: Any, data: TimelineData, bars: list[TimelineBar], marked: set[int]) -> None:
    """Lines from each copy's end to the start of what reads it (both bars drawn)."""
    shown = {id(b) for b in bars}
    flows = [(a, b, k) for a, b, k in data.flows if id(data.bars[a]) in shown and id(data.bars[b]) in shown]
    if len(flows) > FLOW_MAX:
        flows = [f for f in flows if f[0] in marked or f[1] in marked]
    if not flows:
        return
    segments = [[(data.bars[a].end_us, data.bars[a].lane), (data.bars[b].start_us, data.bars[b].lane)] for a, b, _k in flows]
    colours = [FLOW_COLOURS[k] for _a, _b, k in flows]
    ax.add_collection(LineCollection(segments, colors=colours, linewidths=0.7, alpha=0.7, zorder=4))


def _draw_run(
    ax: Any, label: str, data: TimelineData, bars: list[TimelineBar], span: float, selected: Optional[int], linked: Sequence[int]
) -> None:
    width_pt = 12.0 * 72 * 0.85  # the axes' width in points, near enough for fitting labels
    wide: tuple[list, list] = ([], [])
    narrow: tuple[list, list] = ([], [])
    for b in bars:
        lo, hi = b.lane - _BAR_HALF, b.lane + _BAR_HALF
        into = narrow if b.duration_us / span * width_pt < NARROW_BAR_PT else wide
        into[0].append([(b.start_us, lo), (b.end_us, lo), (b.end_us, hi), (b.start_us, hi)])
        into[1].append(timeline_colour(b.kind, b.device))
    # a white border keeps back-to-back events of one kind apart (rule 2); a bar too narrow
    # for one is outlined in its own colour instead, so it stays visible at full colour
    ax.add_collection(PolyCollection(wide[0], facecolors=wide[1], edgecolors="white", linewidths=0.5))
    ax.add_collection(PolyCollection(narrow[0], facecolors=narrow[1], edgecolors=narrow[1], linewidths=0.6))
    for b in bars:
        text = format_bytes(b.nbytes) if b.kind in COPY_EVENT_KINDS else b.node
        if b.duration_us / span * width_pt > len(text) * 4.2 + 4:
            ax.text((b.start_us + b.end_us) / 2, b.lane, text, ha="center", va="center", fontsize=6, clip_on=True)
    marked = [(i, 1.2) for i in linked if i != selected] + ([(selected, 2.2)] if selected is not None else [])
    _draw_flows(ax, data, bars, {i for i, _w in marked})
    for i, width in marked:
        if 0 <= i < len(data.bars):
            b = data.bars[i]
            lo, hi = b.lane - _BAR_HALF - 0.05, b.lane + _BAR_HALF + 0.05
            end = max(b.end_us, b.start_us + span * 0.002)
            ax.add_collection(
                PolyCollection([[(b.start_us, lo), (end, lo), (end, hi), (b.start_us, hi)]], facecolors="none", edgecolors="black", linewidths=width, zorder=5)
            )
    ax.set_yticks(range(len(data.lanes)), [f"{d} · {s}" for d, s in data.lanes], fontsize=8)
    ax.set_ylim(len(data.lanes) - 0.5, -0.5) if data.lanes else ax.set_ylim(0.5, -0.5)
    ax.grid(axis="x", linewidth=0.3, alpha=0.6)
    gap = "\n" if data.source else " "  # with a source in the heading, the summary takes a line of its own
    ax.set_title(f"{_heading(label, data)}:{gap}{data.summary.line}", fontsize=8, loc="left")


def _heading(label: str, data: TimelineData) -> str:
    """A run's label with how its times were obtained (rule 3)."""
    return f"{label} · {data.source}" if data.source else label
