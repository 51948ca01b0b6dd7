"""PlacementExplorer: move module (or op) groups between devices, flip the skip flags,
change the planning algorithm, and watch copies, bytes, arenas, time and the three
linked views follow; every placement tried is kept in a history table.

The computation is the plain function ``explore``; the widget only gathers control
values, calls it and shows the result.

Rules:
1. The model is captured once; every change re-runs place → propagate → plan → ``run``
   on the simulated backend.
2. The groups are module groups by default (``groups.module_groups``: routed experts,
   attention, shared expert, router, embedding, LM head, norms …); the "op groups" toggle
   switches to one group per op packet, each starting where most of its ops are placed
   (``GroupSet.carried``); ``groups=`` gives your own (label → patterns).
3. Groups assigned to ``cpu`` are left out of the rules (ops no rule claims run on the
   host), so a host group can never conflict with a device group.
4. A control change that makes the pipeline fail (e.g. two overlapping groups sent to
   different devices) shows the error and keeps the last good state and views.
5. The three views are built lazily, for the tab on screen, rebuilt after a change, and
   linked: a selection in one highlights the same value in the others.
6. With skip-h2d, the example inputs a graph wants on a device are staged there before
   the run (the caller's job the flag describes), so every point of the space can run.
7. Every placement computed is a row of ``history`` (once per distinct setting, in the
   order first tried): the placement in words, the flags, the algorithm, copies and
   bytes per call, arena and resident bytes per device, modeled time; ``restore(i)``
   goes back to row ``i``.
8. Displayed, the explorer is the live widget; a static viewer (a stored notebook) shows
   its summary and history table instead.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional, Sequence

import IPython.display
import ipywidgets as widgets
import pandas as pd

from ..devices import CopyKind, Device
from ._inputs import UnknownNameError, ViewOptionError
from ._style import format_bytes, format_us
from ._upstream import (
    ALGORITHMS,
    DeviceGraph,
    MemoryPlan,
    Program,
    RunResult,
    Timeline,
    capture,
    place,
    plan,
    propagate,
    run,
    stage_inputs,
)
from .buffers import BufferView
from .graph import LABEL_ALL_MAX, GraphView
from .groups import GROUPINGS, Groups, GroupSet, default_groups, given_groups, rules_for
from .linking import LinkedViews
from .timeline import TimelineView

__all__ = ["ExplorerState", "PlacementExplorer", "default_groups", "explore", "placement_text", "rules_for"]

_VIEW_NAMES = ("graph", "buffers", "timeline")
_GROUPINGS = (("module groups", "module"), ("op groups", "op"))


@dataclass(frozen=True)
class ExplorerState:
    """One point of the explored space and everything computed for it."""

    rules: Any  # as given to place: {device: patterns}, or a callable node → device
    graph: DeviceGraph
    plan: MemoryPlan
    run: Optional[RunResult]  # None without example inputs
    assignment: Mapping[str, str] = field(default_factory=dict)  # group → device (the explorer's)

    @property
    def skip_h2d(self) -> bool:
        return self.graph.skip_h2d_for_method_inputs

    @property
    def skip_d2h(self) -> bool:
        return self.graph.skip_d2h_for_method_outputs

    @property
    def algorithm(self) -> str:
        return self.plan.algorithm

    @property
    def copy_counts(self) -> Mapping[str, int]:
        """Copies per kind."""
        return self.graph.copy_counts()

    @property
    def copy_bytes(self) -> Mapping[str, int]:
        """Bytes moved per call, per copy kind."""
        return self.graph.copy_bytes()

    @property
    def copies(self) -> int:
        return len(self.graph.copies)

    @property
    def arena_bytes(self) -> Mapping[Device, int]:
        """Per device."""
        return self.plan.arena_bytes

    @property
    def lower_bound(self) -> Mapping[Device, int]:
        return self.plan.lower_bound

    @property
    def constant_bytes(self) -> Mapping[Device, int]:
        return self.plan.constant_bytes

    @property
    def timeline(self) -> Optional[Timeline]:
        return self.run.timeline if self.run is not None else None

    def summary(self) -> pd.DataFrame:
        """Per device: arena, lower bound, resident constants (the plan's own table)."""
        return self.plan.summary()[["device", "arena_bytes", "lower_bound", "constant_bytes"]]

    def history_row(self) -> dict[str, Any]:
        """Rule 7: this state as one row of the explorer's history."""
        row: dict[str, Any] = {
            "placement": placement_text(self.assignment),
            "skip_h2d": self.skip_h2d,
            "skip_d2h": self.skip_d2h,
            "algorithm": self.algorithm,
            "copies": self.copies,
        }
        moved = self.copy_bytes
        for kind in CopyKind:
            row[f"{kind}_bytes"] = moved[kind]
        for d in sorted(self.arena_bytes, key=Device.parse):
            row[f"arena_{d}"] = int(self.arena_bytes[d])
        for d, b in sorted(self.constant_bytes.items(), key=lambda kv: Device.parse(kv[0])):
            row[f"resident_{d}"] = int(b)
        row["time_us"] = round(self.timeline.span_us, 3) if self.timeline is not None else None
        return row


def placement_text(assignment: Mapping[str, str]) -> str:
    """A placement in words: ``"routed experts on cpu, the rest on cuda:0"``; the device
    holding the most groups is "the rest" (``"all on cpu"`` when there is one device)."""
    by_device: dict[str, list[str]] = {}
    for group, device in assignment.items():
        by_device.setdefault(str(Device.parse(device)), []).append(group)
    if not by_device:
        return "all on cpu"
    if len(by_device) == 1:
        return f"all on {next(iter(by_device))}"
    rest = max(by_device, key=lambda d: (len(by_device[d]), Device.parse(d).is_host))
    named = [f"{', '.join(gs)} on {d}" for d, gs in sorted(by_device.items(), key=lambda kv: Device.parse(kv[0])) if d != rest]
    return f"{'; '.join(named)}, the rest on {rest}"


def explore(
    program: Program,
    rules: Any,
    skip_h2d: bool = False,
    skip_d2h: bool = False,
    algorithm: str = "greedy",
    inputs: Optional[Sequence[Any]] = None,
    backend: str = "sim",
    assignment: Optional[Mapping[str, str]] = None,
) -> ExplorerState:
    """Place, propagate, plan (and run when ``inputs`` are given). ``rules`` is what
    ``place`` takes: ``{device: patterns}`` or a callable node → device | None."""
    if not isinstance(program, Program):
        raise ViewOptionError(f"explore expects a Program from workbench.capture, got {type(program).__name__}")
    if isinstance(rules, Mapping):
        rules = {str(Device.parse(d)): tuple([p] if isinstance(p, str) else p) for d, p in rules.items()}
        placed = place(program, {d: list(p) for d, p in rules.items() if p})
    else:
        placed = place(program, rules)
    dg = propagate(placed, skip_h2d_for_method_inputs=bool(skip_h2d), skip_d2h_for_method_outputs=bool(skip_d2h))
    memory = plan(dg, algorithm=algorithm)
    result = None if inputs is None else run(memory, *stage_inputs(dg, inputs, backend), backend=backend)
    return ExplorerState(rules=rules, graph=dg, plan=memory, run=result, assignment=dict(assignment or {}))


class PlacementExplorer:
    """Controls for placement, skip flags and planning, with live summary, a history of
    the placements tried, and the three linked views.

    ``PlacementExplorer(model, example_inputs, groups=None, devices=("cpu", "cuda:0",
    "cuda:1"), initial=None, algorithm="greedy", skip_h2d=False, skip_d2h=False,
    collapse="auto", grouping="module")``: ``groups`` gives your own {label: patterns}
    (then the toggle is hidden); ``initial`` maps group labels to devices (default:
    every group on the host). ``.set_group``, ``.set_flags``, ``.set_algorithm`` and
    ``.set_grouping`` drive the same controls from code.
    """

    css_class = "wb-placement-explorer"

    def __init__(
        self,
        model: Any,
        example_inputs: Any,
        groups: Optional[Groups] = None,
        devices: Iterable[str] = ("cpu", "cuda:0", "cuda:1"),
        initial: Optional[Mapping[str, str]] = None,
        algorithm: str = "greedy",
        skip_h2d: bool = False,
        skip_d2h: bool = False,
        collapse: Optional[str] = "auto",
        grouping: str = "module",
    ) -> None:
        self.program = model if isinstance(model, Program) else capture(model, example_inputs)
        self.inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        self.devices = [str(Device.parse(d)) for d in devices]
        if algorithm not in ALGORITHMS:
            raise ViewOptionError(f"unknown planning algorithm {algorithm!r}; valid ones are {', '.join(ALGORITHMS)}")
        if grouping not in GROUPINGS:
            raise ViewOptionError(f"unknown grouping {grouping!r}; valid ones are {', '.join(GROUPINGS)}")
        self._given = groups is not None
        self._sets: dict[str, GroupSet] = {}
        self.group_set = given_groups(groups) if groups is not None else self._grouping(grouping)
        self._collapse = collapse
        self.grouping_toggle = widgets.ToggleButtons(
            options=_GROUPINGS, value=self.group_set.kind if not self._given else "module", description="groups"
        )
        self.grouping_toggle.layout.display = "none" if self._given else ""
        self.group_box = widgets.GridBox(layout=widgets.Layout(grid_template_columns="repeat(3, auto)"))
        self.group_controls: dict[str, widgets.Dropdown] = {}
        self._fill_group_controls({**dict.fromkeys(self.group_set.labels, "cpu"), **self._check_initial(initial or {})})
        self.skip_h2d_box = widgets.Checkbox(value=bool(skip_h2d), description="skip h2d for method inputs")
        self.skip_d2h_box = widgets.Checkbox(value=bool(skip_d2h), description="skip d2h for method outputs")
        self.algorithm_dropdown = widgets.Dropdown(options=list(ALGORITHMS), value=algorithm, description="algorithm")
        self.status = widgets.HTML()
        self.status.add_class("wb-explorer-status")
        self.history_html = widgets.HTML(layout=widgets.Layout(width="100%", overflow="auto"))
        self.history_html.add_class("wb-explorer-history")
        self.tabs = widgets.Tab(children=[widgets.VBox(), widgets.VBox(), widgets.VBox()])
        for i, title in enumerate(_VIEW_NAMES):
            self.tabs.set_title(i, title)
        self.widget = widgets.VBox(
            [
                self.grouping_toggle,
                self.group_box,
                widgets.HBox([self.skip_h2d_box, self.skip_d2h_box, self.algorithm_dropdown]),
                self.status,
                widgets.Accordion(children=[self.history_html], titles=("placements tried",)),
                self.tabs,
            ]
        )
        self.widget.add_class(self.css_class)
        self.widget.add_class("wb-view")
        self.state: Optional[ExplorerState] = None
        self.error: Optional[str] = None
        self.views: dict[str, Any] = {}
        self._linked: Optional[LinkedViews] = None
        self._history: list[ExplorerState] = []
        self._muted = False
        for w in (self.skip_h2d_box, self.skip_d2h_box, self.algorithm_dropdown):
            w.observe(self._changed, names="value")
        self.grouping_toggle.observe(lambda change: self.set_grouping(change["new"]), names="value")
        self.tabs.observe(lambda _change: self._show_tab(), names="selected_index")
        self.update()

    # -- groups -----------------------------------------------------------------------
    @property
    def groups(self) -> dict[str, tuple[str, ...]]:
        """The current groups, label → patterns."""
        return dict(self.group_set.patterns)

    def _grouping(self, kind: str) -> GroupSet:
        if kind not in self._sets:
            self._sets[kind] = GROUPINGS[kind](self.program)
        return self._sets[kind]

    def set_grouping(self, kind: str) -> None:
        """Switch between module groups and op groups; each new group starts where most of
        its ops are placed now (the placement is kept, not reset to the host)."""
        if self._given:
            raise ViewOptionError("this explorer was given its own groups (groups=); there is no grouping to switch")
        if kind not in GROUPINGS:
            raise ViewOptionError(f"unknown grouping {kind!r}; valid ones are {', '.join(GROUPINGS)}")
        if kind == self.group_set.kind:
            return
        self.group_set = self._grouping(kind)
        placed = self.state.graph.node_device if self.state is not None else {}
        self._fill_group_controls(self.group_set.carried(self.program, placed, self.devices))
        if self.grouping_toggle.value != kind:
            self._muted = True
            self.grouping_toggle.value = kind
            self._muted = False
        self.update()

    def _fill_group_controls(self, assignment: Mapping[str, str]) -> None:
        controls = {}
        for g in self.group_set.labels:
            value = assignment.get(g, "cpu")
            dropdown = widgets.Dropdown(
                options=self.devices if value in self.devices else self.devices + [value],
                value=value,
                description=g,
                style={"description_width": "initial"},
                layout=widgets.Layout(width="auto"),
            )
            dropdown.add_class("wb-group-control")
            dropdown.observe(self._changed, names="value")
            controls[g] = dropdown
        self.group_controls = controls
        self.group_box.children = list(controls.values())

    def _check_initial(self, initial: Mapping[str, str]) -> dict[str, str]:
        """``initial`` validated: known groups, parseable devices."""
        unknown = [g for g in initial if g not in self.group_set.patterns]
        if unknown:
            raise UnknownNameError(
                f"initial names unknown group(s) {', '.join(map(repr, unknown))}; groups are "
                f"{', '.join(map(repr, self.group_set.patterns))}"
            )
        return {g: str(Device.parse(d)) for g, d in initial.items()}

    # -- programmatic controls --------------------------------------------------------
    def assignment(self) -> dict[str, str]:
        return {g: w.value for g, w in self.group_controls.items()}

    def set_group(self, group: str, device: str) -> None:
        """Send ``group`` to ``device`` (recomputes)."""
        if group not in self.group_controls:
            raise UnknownNameError(f"unknown group {group!r}; groups are {', '.join(map(repr, self.group_controls))}")
        dev = str(Device.parse(device))
        control = self.group_controls[group]
        if dev not in control.options:
            raise ViewOptionError(f"device {dev!r} is not offered; devices are {', '.join(control.options)}")
        control.value = dev

    def set_flags(self, skip_h2d: Optional[bool] = None, skip_d2h: Optional[bool] = None) -> None:
        if skip_h2d is not None:
            self.skip_h2d_box.value = bool(skip_h2d)
        if skip_d2h is not None:
            self.skip_d2h_box.value = bool(skip_d2h)

    def set_algorithm(self, name: str) -> None:
        self.algorithm_dropdown.value = name

    # -- history (rule 7) ---------------------------------------------------------------
    @property
    def history(self) -> pd.DataFrame:
        """One row per distinct placement tried, in the order first tried."""
        return pd.DataFrame([s.history_row() for s in self._history])

    def restore(self, index: int) -> None:
        """Set the controls back to history row ``index`` (recomputes once)."""
        if not 0 <= index < len(self._history):
            raise ViewOptionError(f"history has {len(self._history)} rows; index {index} is out of range")
        old = self._history[index]
        missing = [g for g in old.assignment if g not in self.group_controls]
        if missing:
            raise ViewOptionError(f"row {index} was made with other groups ({', '.join(missing)}); switch the grouping back first")
        self._muted = True
        try:
            for g, control in self.group_controls.items():
                control.value = old.assignment.get(g, "cpu")
            self.skip_h2d_box.value = old.skip_h2d
            self.skip_d2h_box.value = old.skip_d2h
            self.algorithm_dropdown.value = old.algorithm
        finally:
            self._muted = False
        self.update()

    # -- recompute ------------------------------------------------------------------
    def _changed(self, _change: Any = None) -> None:
        if not self._muted:
            self.update()

    def update(self) -> Optional[ExplorerState]:
        """Rules 1 and 4: recompute from the controls; on failure keep the last state."""
        assignment = self.assignment()
        try:
            state = explore(
                self.program,
                self.group_set.rules(assignment),
                self.skip_h2d_box.value,
                self.skip_d2h_box.value,
                self.algorithm_dropdown.value,
                inputs=self.inputs,
                assignment=assignment,
            )
        except Exception as exc:  # shown to the user; the last good state stays
            self.error = f"{type(exc).__name__}: {exc}"
            self.status.value = f"<div style='color:#B00020'><b>cannot compute this placement</b>: {html.escape(self.error)}</div>"
            return None
        self.error = None
        self.state = state
        self._remember(state)
        if self._linked is not None:
            self._linked.unlink()
            self._linked = None
        self.views = {}
        self.status.value = _status_html(state)
        self.history_html.value = self._history_table()
        self._show_tab()
        return state

    def _remember(self, state: ExplorerState) -> None:
        key = _setting(state)
        for i, old in enumerate(self._history):
            if _setting(old) == key:
                self._history[i] = state
                self._current = i
                return
        self._history.append(state)
        self._current = len(self._history) - 1

    def _history_table(self) -> str:
        table = self.history.copy()
        for col in table.columns:
            if col.endswith("_bytes") or col.startswith(("arena_", "resident_")):
                table[col] = [format_bytes(v) if pd.notna(v) else "" for v in table[col]]
        if "time_us" in table:
            table["time_us"] = [format_us(v) if pd.notna(v) else "" for v in table["time_us"]]
            table = table.rename(columns={"time_us": "modeled time"})
        table.insert(0, "", ["▶" if i == self._current else "" for i in range(len(table))])
        # scrolls inside the explorer's width instead of running off to the right
        return (
            "<div class='wb-history' style='max-height:240px;max-width:100%;overflow:auto;font-size:11px'>"
            + table.to_html(index=True, escape=True, border=0)
            + "</div>"
        )

    def _show_tab(self) -> None:
        """Rule 5: build the view of the visible tab if it is not built yet."""
        index = self.tabs.selected_index or 0
        shown = self.view(_VIEW_NAMES[index]).widget
        if self.tabs.children[index] is not shown:
            children = list(self.tabs.children)
            children[index] = shown
            self.tabs.children = children
            self.tabs.selected_index = index  # replacing children may reset the selection

    def view(self, name: str) -> Any:
        """The ``graph``, ``buffers`` or ``timeline`` view of the current state (built on
        demand, linked to the others built so far)."""
        if name not in _VIEW_NAMES:
            raise UnknownNameError(f"unknown view {name!r}; views are 'graph', 'buffers', 'timeline'")
        if name not in self.views:
            self.views[name] = self._build(name)
            built = [self.views[n] for n in _VIEW_NAMES if n in self.views]
            if self._linked is not None:
                self._linked.unlink()
            self._linked = LinkedViews(*built) if len(built) > 1 else None
        return self.views[name]

    def _build(self, name: str) -> Any:
        state = self.state
        assert state is not None  # update() ran in __init__ and keeps the last good state
        if name == "graph":
            collapse = self._collapse
            if collapse == "auto":
                collapse = "layers" if len(state.graph.graph.nodes) > LABEL_ALL_MAX else None
            return GraphView(state.plan, collapse=collapse)
        if name == "buffers":
            return BufferView(state.plan)
        return TimelineView(state.run, label=f"sim run · {state.algorithm}")

    def _repr_mimebundle_(self, **kwargs: Any) -> dict:
        """The live widget, and for a static viewer the summary and the history table."""
        bundle = self.widget._repr_mimebundle_(**kwargs)
        data = dict(bundle[0] if isinstance(bundle, tuple) else bundle)
        data["text/html"] = self.status.value + self.history_html.value
        data["text/plain"] = f"PlacementExplorer: {len(self.group_controls)} {self.group_set.kind} groups, {len(self._history)} placements tried"
        return data

    def _ipython_display_(self) -> None:
        IPython.display.display(self._repr_mimebundle_(), raw=True)


def _setting(state: ExplorerState) -> tuple:
    return (tuple(sorted(state.assignment.items())), state.skip_h2d, state.skip_d2h, state.algorithm)


def _status_html(state: ExplorerState) -> str:
    counts, moved = state.copy_counts, state.copy_bytes
    copies = " · ".join(f"{k}: {counts[k]} ({format_bytes(moved[k])})" for k in CopyKind)
    arenas = " · ".join(
        f"{html.escape(str(d))}: arena {format_bytes(state.arena_bytes[d])} (lower bound {format_bytes(state.lower_bound.get(d, 0))}), "
        f"constants {format_bytes(state.constant_bytes.get(d, 0))}"
        for d in sorted(state.arena_bytes, key=Device.parse)
    )
    parts = [
        f"<b>{state.copies} copies</b> per call — {copies}",
        f"<b>memory</b> ({html.escape(state.algorithm)}) — {arenas}",
    ]
    timeline = state.timeline
    if timeline is not None:
        parts.append(f"<b>modeled time</b> — span {format_us(timeline.span_us)}, overlap {100 * timeline.overlap_fraction():.1f}%")
    return "<div class='wb-summary'>" + "<br>".join(parts) + "</div>"
