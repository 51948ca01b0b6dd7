"""The two-column view of a ``SideBySide``: ExecuTorch's program on the left, the workbench's on the right.

The widget only lays out what ``SideBySide`` computed: its table on top, then one column
per system with the workbench's own views of that system's graph and memory plan, and
the modeled timeline of each. Nothing is computed here.

Rules:
1. Left column: the imported ExecuTorch program (``from_executorch``): its graph (devices,
   delegates, copies), its buffers per device against their lower bound, its modeled
   timeline labelled as a model. Right column: the same for the workbench's plan.
2. When ExecuTorch refused or crashed, the left column says so instead.
"""

from __future__ import annotations

import html

import ipywidgets as widgets

from ..planning.memory_plan import MemoryPlan
from ..views import GraphView, TimelineView
from .settings import CrossCheckTypeError
from .with_executorch import SideBySide

__all__ = ["side_by_side_view"]


def side_by_side_view(result: SideBySide) -> widgets.VBox:
    """Rule 1's layout of ``result`` as an ipywidgets box."""
    if not isinstance(result, SideBySide):
        raise CrossCheckTypeError(
            f"side_by_side_view shows a SideBySide (from compare_with_executorch), got {type(result).__name__}"
        )
    title = (
        f"<b>{html.escape(result.model)}</b> · {html.escape(result.rules_text)} · skip_h2d={result.skip_h2d}, "
        f"skip_d2h={result.skip_d2h}"
    )
    table = widgets.HTML(title + result.table().to_html(index=False, na_rep="—"))
    return widgets.VBox([table, widgets.HBox([_executorch_column(result), _workbench_column(result)])])


def _column(heading: str, *children: widgets.Widget) -> widgets.VBox:
    box = widgets.VBox([widgets.HTML(f"<h4>{html.escape(heading)}</h4>"), *children])
    box.layout.width = "50%"
    return box


def _memory(plan: MemoryPlan) -> widgets.HTML:
    return widgets.HTML(plan.summary().to_html(index=False))


def _executorch_column(result: SideBySide) -> widgets.VBox:
    """Rules 1, 2."""
    if result.executorch is None or result.executorch_estimate is None:
        failed = widgets.HTML(f"<p>ExecuTorch failed in {result.et_stage}: {html.escape(str(result.et_error))}</p>")
        return _column("ExecuTorch", failed)
    plan, modeled = result.executorch.memory_plan, result.executorch_estimate
    return _column(
        "ExecuTorch (imported program)",
        GraphView(plan).widget,
        _memory(plan),
        TimelineView(modeled, label=modeled.label).widget,
    )


def _workbench_column(result: SideBySide) -> widgets.VBox:
    plan = result.workbench
    return _column(
        "workbench",
        GraphView(plan).widget,
        _memory(plan),
        TimelineView(result.workbench_timeline, label="model of the workbench's plan").widget,
    )
