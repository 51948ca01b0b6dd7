"""PlacementExplorer: move op groups between devices, flip the skip flags, change the
planning algorithm, and watch copies, bytes, arenas and the three views follow.

The computation is the plain function ``explore``; the widget only gathers control
values, calls it and shows the result.

Rules:
1. The model is captured once; every change re-runs place → propagate → plan → ``run``
   on the simulated backend.
2. A group is a label and its placement patterns (``"aten.linear"`` or
   ``"module:layers.*.mlp"``). By default there is one group per op packet of the
   captured graph that placement can claim, most frequent first.
3. Groups assigned to ``cpu`` are simply left out of the rules (ops no rule claims run on
   the host), so a host group can never conflict with a device group.
4. A control change that makes the pipeline fail (e.g. two overlapping groups sent to
   different devices) shows the error and keeps the last good state and views.
5. The three views are built lazily, for the tab on screen, and rebuilt after a change.
6. With skip-h2d, the example inputs a graph wants on a device are staged there before
   the run (the caller's job the flag describes), so every point of the space can run.
"""

from __future__ import annotations

import html
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

import ipywidgets as widgets
import pandas as pd

from ..graph_values import packet_name, produces_tensors
from ..capture import Program, capture
from ..devices import CopyKind
from ..devices import Device
from ..place import place
from ..planning.algorithms import ALGORITHMS
from ..planning.memory_plan import MemoryPlan, plan
from ..propagate import DeviceGraph, propagate
from ..runtime.executor import RunResult, run
from ..runtime.tensors import stage_inputs
from ..runtime.timeline import Timeline
from ._style import format_bytes, format_us
from .buffers import BufferView
from .graph import LABEL_ALL_MAX, GraphView
from .timeline import TimelineView

_VIEW_NAMES = ("graph", "buffers", "timeline")

Groups = Union[Mapping[str, Union[str, Sequence[str]]], Sequence[str]]


@dataclass(frozen=True)
class ExplorerState:
    """One point of the explored space and everything computed for it."""

    rules: Mapping[str, tuple[str, ...]]  # device → patterns, as given to place
    graph: DeviceGraph
    plan: MemoryPlan
    run: Optional[RunResult]  # None without example inputs

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
    def copy_counts(self) -> dict[str, int]:
        """Copies per kind."""
        return self.graph.copy_counts()

    @property
    def copy_bytes(self) -> dict[str, int]:
        """Bytes moved per call, per copy kind."""
        return self.graph.copy_bytes()

    @property
    def copies(self) -> int:
        return len(self.graph.copies)

    @property
    def arena_bytes(self) -> Mapping[str, int]:
        """Per device."""
        return self.plan.arena_bytes

    @property
    def lower_bound(self) -> Mapping[str, int]:
        return self.plan.lower_bound

    @property
    def constant_bytes(self) -> Mapping[str, int]:
        return self.plan.constant_bytes

    @property
    def timeline(self) -> Optional[Timeline]:
        return self.run.timeline if self.run is not None else None

    def summary(self) -> pd.DataFrame:
        """Per device: arena, lower bound, resident constants (the plan's own table)."""
        return self.plan.summary()[["device", "arena_bytes", "lower_bound", "constant_bytes"]]


def explore(
    program: Program,
    rules: Mapping[str, Sequence[str]],
    skip_h2d: bool = False,
    skip_d2h: bool = False,
    algorithm: str = "greedy",
    inputs: Optional[Sequence[Any]] = None,
    backend: str = "sim",
) -> ExplorerState:
    """Place, propagate, plan (and run when ``inputs`` are given)."""
    if not isinstance(program, Program):
        raise TypeError(f"explore expects a Program from workbench.capture, got {type(program).__name__}")
    frozen_rules = {str(Device.parse(d)): tuple([p] if isinstance(p, str) else p) for d, p in rules.items()}
    placed = place(program, {d: list(p) for d, p in frozen_rules.items() if p})
    dg = propagate(placed, skip_h2d_for_method_inputs=bool(skip_h2d), skip_d2h_for_method_outputs=bool(skip_d2h))
    memory = plan(dg, algorithm=algorithm)
    result = None if inputs is None else run(memory, *stage_inputs(dg, inputs, backend), backend=backend)
    return ExplorerState(rules=frozen_rules, graph=dg, plan=memory, run=result)


def default_groups(program: Program) -> dict[str, tuple[str, ...]]:
    """Rule 2: one group per claimable op packet, most frequent first."""
    counts = Counter(
        packet_name(node) for node in program.graph.nodes if node.op == "call_function" and produces_tensors(node)
    )
    counts.pop("getitem", None)
    return {name: (name,) for name, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))}


def normalize_groups(groups: Optional[Groups], program: Program) -> dict[str, tuple[str, ...]]:
    """Groups as ``{label: patterns}``: a list of patterns makes one group per pattern."""
    if groups is None:
        return default_groups(program)
    if isinstance(groups, str):
        groups = [groups]
    if isinstance(groups, Mapping):
        out = {}
        for label, patterns in groups.items():
            pats = (patterns,) if isinstance(patterns, str) else tuple(patterns)
            if not pats or not all(isinstance(p, str) and p.strip() for p in pats):
                raise ValueError(f"group {label!r} needs one or more non-empty pattern strings, got {patterns!r}")
            out[str(label)] = pats
        return out
    out = {}
    for p in groups:
        if not isinstance(p, str) or not p.strip():
            raise ValueError(f"a group is a placement pattern string such as 'aten.linear' or 'module:layers.*'; got {p!r}")
        out[p] = (p,)
    return out


def rules_for(groups: Mapping[str, Sequence[str]], assignment: Mapping[str, str]) -> dict[str, list[str]]:
    """Rule 3: ``{device: patterns}`` for the groups assigned to a non-host device."""
    unknown = [g for g in assignment if g not in groups]
    if unknown:
        raise KeyError(f"unknown group(s) {', '.join(map(repr, unknown))}; groups are {', '.join(map(repr, groups))}")
    rules: dict[str, list[str]] = {}
    for group, device in assignment.items():
        dev = Device.parse(device)
        if dev.is_host:
            continue
        rules.setdefault(str(dev), []).extend(groups[group])
    return rules


class PlacementExplorer:
    """Controls for placement, skip flags and planning, with live summary and views.

    ``PlacementExplorer(model, example_inputs, groups=None, devices=("cpu", "cuda:0",
    "cuda:1"), initial=None, algorithm="greedy")``: ``initial`` maps group labels to
    devices (default: every group on the host). ``.set_group``, ``.set_flags`` and
    ``.set_algorithm`` drive the same controls from code.
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
    ) -> None:
        self.program = model if isinstance(model, Program) else capture(model, example_inputs)
        self.inputs = tuple(example_inputs) if isinstance(example_inputs, (tuple, list)) else (example_inputs,)
        self.groups = normalize_groups(groups, self.program)
        self.devices = [str(Device.parse(d)) for d in devices]
        assignment = {**dict.fromkeys(self.groups, "cpu"), **_check_initial(self.groups, initial or {})}
        self._collapse = collapse
        self.group_controls = {
            g: widgets.Dropdown(
                options=self.devices if assignment[g] in self.devices else self.devices + [assignment[g]],
                value=assignment[g],
                description=g,
                style={"description_width": "initial"},
                layout=widgets.Layout(width="auto"),
            )
            for g in self.groups
        }
        self.skip_h2d_box = widgets.Checkbox(value=bool(skip_h2d), description="skip h2d for method inputs")
        self.skip_d2h_box = widgets.Checkbox(value=bool(skip_d2h), description="skip d2h for method outputs")
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown planning algorithm {algorithm!r}; valid ones are {', '.join(ALGORITHMS)}")
        self.algorithm_dropdown = widgets.Dropdown(options=list(ALGORITHMS), value=algorithm, description="algorithm")
        self.status = widgets.HTML()
        self.status.add_class("wb-explorer-status")
        self.tabs = widgets.Tab(children=[widgets.VBox(), widgets.VBox(), widgets.VBox()])
        for i, title in enumerate(_VIEW_NAMES):
            self.tabs.set_title(i, title)
        self.widget = widgets.VBox(
            [
                widgets.HTML("<b>op groups → device</b>"),
                widgets.GridBox(list(self.group_controls.values()), layout=widgets.Layout(grid_template_columns="repeat(3, auto)")),
                widgets.HBox([self.skip_h2d_box, self.skip_d2h_box, self.algorithm_dropdown]),
                self.status,
                self.tabs,
            ]
        )
        self.widget.add_class(self.css_class)
        self.widget.add_class("wb-view")
        self.state: Optional[ExplorerState] = None
        self.error: Optional[str] = None
        self.views: dict[str, Any] = {}
        for w in list(self.group_controls.values()) + [self.skip_h2d_box, self.skip_d2h_box, self.algorithm_dropdown]:
            w.observe(lambda _change: self.update(), names="value")
        self.tabs.observe(lambda _change: self._show_tab(), names="selected_index")
        self.update()

    # -- programmatic controls --------------------------------------------------------
    def assignment(self) -> dict[str, str]:
        return {g: w.value for g, w in self.group_controls.items()}

    def set_group(self, group: str, device: str) -> None:
        """Send ``group`` to ``device`` (recomputes)."""
        if group not in self.group_controls:
            raise KeyError(f"unknown group {group!r}; groups are {', '.join(map(repr, self.group_controls))}")
        dev = str(Device.parse(device))
        control = self.group_controls[group]
        if dev not in control.options:
            raise ValueError(f"device {dev!r} is not offered; devices are {', '.join(control.options)}")
        control.value = dev

    def set_flags(self, skip_h2d: Optional[bool] = None, skip_d2h: Optional[bool] = None) -> None:
        if skip_h2d is not None:
            self.skip_h2d_box.value = bool(skip_h2d)
        if skip_d2h is not None:
            self.skip_d2h_box.value = bool(skip_d2h)

    def set_algorithm(self, name: str) -> None:
        self.algorithm_dropdown.value = name

    # -- recompute ------------------------------------------------------------------
    def update(self) -> Optional[ExplorerState]:
        """Rule 1 and 4: recompute from the controls; on failure keep the last state."""
        try:
            state = explore(
                self.program,
                rules_for(self.groups, self.assignment()),
                self.skip_h2d_box.value,
                self.skip_d2h_box.value,
                self.algorithm_dropdown.value,
                inputs=self.inputs,
            )
        except Exception as exc:  # shown to the user; the last good state stays
            self.error = f"{type(exc).__name__}: {exc}"
            self.status.value = f"<div style='color:#B00020'><b>cannot compute this placement</b>: {html.escape(self.error)}</div>"
            return None
        self.error = None
        self.state = state
        self.views = {}
        self.status.value = _status_html(state)
        self._show_tab()
        return state

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
        """The ``graph``, ``buffers`` or ``timeline`` view of the current state (built on demand)."""
        if name not in _VIEW_NAMES:
            raise KeyError(f"unknown view {name!r}; views are 'graph', 'buffers', 'timeline'")
        if name not in self.views:
            self.views[name] = self._build(name)
        return self.views[name]

    def _build(self, name: str) -> Any:
        state = self.state
        if name == "graph":
            collapse = self._collapse
            if collapse == "auto":
                collapse = "layers" if len(state.graph.graph.nodes) > LABEL_ALL_MAX else None
            return GraphView(state.plan, collapse=collapse)
        if name == "buffers":
            return BufferView(state.plan)
        return TimelineView(state.run, label=f"sim run · {state.algorithm}")

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.widget)


def _check_initial(groups: Mapping[str, Sequence[str]], initial: Mapping[str, str]) -> dict[str, str]:
    """``initial`` validated: known groups, parseable devices."""
    unknown = [g for g in initial if g not in groups]
    if unknown:
        raise KeyError(f"initial names unknown group(s) {', '.join(map(repr, unknown))}; groups are {', '.join(map(repr, groups))}")
    return {g: str(Device.parse(d)) for g, d in initial.items()}


def _status_html(state: ExplorerState) -> str:
    counts, moved = state.copy_counts, state.copy_bytes
    copies = " · ".join(f"{k}: {counts[k]} ({format_bytes(moved[k])})" for k in CopyKind)
    arenas = " · ".join(
        f"{d}: arena {format_bytes(state.arena_bytes[d])} (lower bound {format_bytes(state.lower_bound.get(d, 0))}), "
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
