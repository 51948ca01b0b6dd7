"""Model-supplied strings never reach the page as markup: a model whose module names are
HTML tags shows them as text in every ipywidgets HTML value of every view (ipywidgets
renders those values with ``innerHTML``, so a raw tag would run its handler)."""

from __future__ import annotations

import ipywidgets as widgets
import torch

import workbench as wb
from workbench.views import BufferView, GraphView, PlacementExplorer, TimelineView

TAG = "<img src=x onerror=alert(1)>"


class _Hostile(torch.nn.Module):
    """Two linears inside a module list whose attribute name is an HTML tag."""

    def __init__(self) -> None:
        super().__init__()
        self.add_module(TAG, torch.nn.ModuleList([torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)]))

    def forward(self, x):
        for layer in getattr(self, TAG):
            x = torch.relu(layer(x))
        return x


def _html_values(widget, seen=None):
    """The value of every ``widgets.HTML`` under ``widget``."""
    seen = set() if seen is None else seen
    if id(widget) in seen:
        return []
    seen.add(id(widget))
    found = [widget.value] if isinstance(widget, (widgets.HTML, widgets.HTMLMath)) else []
    for child in getattr(widget, "children", ()) or ():
        found += _html_values(child, seen)
    return found


def _view_widgets(view):
    found = []
    for name in ("summary", "detail", "widget"):
        part = getattr(view, name, None)
        if isinstance(part, widgets.Widget):
            found += _html_values(part)
    return found


def test_no_view_puts_a_module_name_into_html_raw():
    """Graph (collapsed by layers, the hostile group expanded, a node selected), buffer,
    timeline and explorer views of the model: every HTML widget value holds the tag only
    escaped. The test checks it really reached the page (escaped), so it cannot pass
    vacuously."""
    model = _Hostile()
    inputs = (torch.randn(2, 8),)
    program = wb.capture(model, inputs)
    dg = wb.propagate(wb.place(program, {"cuda:0": ["aten.linear"]}))
    plan = wb.plan(dg)
    run = wb.run(plan, *inputs, backend="sim")

    graph = GraphView(dg, collapse="layers")
    groups = [g for g in graph.layout.groups if "<img" in g]
    assert groups, f"the hostile module is not a group: {list(graph.layout.groups)}"
    graph.expand(groups[0])
    assert any("<img" in g for g in graph.layout.expanded)
    values = _view_widgets(graph)
    for name in [n.name for n in dg.graph.nodes][:3]:
        graph.select(name)
        values += _view_widgets(graph)
    values += _view_widgets(BufferView(plan))
    values += _view_widgets(TimelineView(run))
    explorer = PlacementExplorer(program, inputs)
    values += _html_values(explorer.widget) + [explorer.status.value, explorer.history_html.value]
    for view in explorer.views.values():
        values += _view_widgets(view)

    raw = [v for v in values if "<img" in v]
    assert not raw, f"a raw tag reached an HTML widget: {raw[0][:300]}"
    assert any("&lt;img" in v for v in values), "the hostile name never reached the page, so nothing was checked"
