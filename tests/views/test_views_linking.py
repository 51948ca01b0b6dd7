"""Linked views: one selection shared by GraphView, BufferView and TimelineView, in the
kernel (what a browser click leads to, and ``select`` from code) — the browser half is
tests/browser."""

from __future__ import annotations

import html

import pytest

import workbench as wb
from workbench.views import BufferView, GraphView, TimelineView, ViewInputError, link

from views_helpers import click, residual_run


def _linked():
    plan, run = residual_run()
    views = GraphView(plan), BufferView(plan), TimelineView(run)
    return plan, run, views, link(*views)


def test_a_click_on_a_copy_selects_its_buffer_and_its_events():
    """Clicking a copy node in the graph makes it the focus of every linked view: the
    buffer view selects the storage holding the copy, the timeline selects the copy's
    event and outlines every event of that node; each view's spec is that item's."""
    plan, run, (graph, buffers, timeline), _ = _linked()
    copy = next(c for c in plan.device_graph.copies if c.kind == "d2d")
    click(graph, copy.name)
    assert graph.selected == buffers.focus == timeline.focus == copy.name
    assert buffers.selected == plan.storage_of[copy.name]
    events = [i for i, e in enumerate(run.timeline.events) if e.node == copy.name]
    assert timeline.selected == events[0] and timeline.linked_bars() == events
    assert copy.reason in html.unescape(graph.spec_html())
    assert f"{plan.allocations[buffers.selected].offset} (0x" in buffers.spec_html()
    assert "GB/s" in timeline.spec_html()


def test_a_click_in_the_buffers_or_the_timeline_selects_the_graph_node():
    """The link goes every way: a storage clicked in the buffer view, or an event clicked
    in the timeline, selects its graph node; a value with no item in a view clears that
    view's selection without an error."""
    plan, run, (graph, buffers, timeline), _ = _linked()
    storage = next(iter(plan.allocations))
    click(buffers, storage)
    assert graph.selected == storage and graph.focus == storage
    i = next(i for i, e in enumerate(run.timeline.events) if e.kind == "h2d")
    click(timeline, i, run.timeline.events[i].node)
    assert graph.selected == run.timeline.events[i].node and timeline.selected == i
    click(graph, "p_ups_0_weight")  # a weight: no arena slot, no event
    assert timeline.selected is None and buffers.selected == "p_ups_0_weight"


def test_select_from_code_reaches_every_view_and_unlink_stops_it():
    """``LinkedViews.select`` and each view's ``select`` set the focus everywhere; after
    ``unlink`` a selection stays in its own view."""
    plan, _run, (graph, buffers, timeline), linked = _linked()
    copy = plan.device_graph.copies[0].name
    linked.select(copy)
    assert (graph.focus, buffers.focus, timeline.focus) == (copy, copy, copy) == (linked.focus,) * 3
    buffers.select(None)
    assert graph.selected is None and timeline.selected is None
    linked.unlink()
    graph.select(copy)
    assert buffers.focus is None and graph.linked == ()


def test_show_displays_every_view_from_one_cell(monkeypatch):
    """``wb.views.show(a, b, c)`` links the views and displays each of them (each as the
    widget and its PNG); three views on three lines of a cell would show only the last."""
    plan, run = residual_run()
    views = GraphView(plan), BufferView(plan), TimelineView(run)
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    wb.views.show(*views)
    (group,) = shown
    assert isinstance(group, wb.views.LinkedViews) and group.views == views
    assert all(set(v.linked) == set(views) - {v} for v in views)
    shown.clear()
    group._ipython_display_()
    assert shown == list(views)


def test_link_needs_views():
    plan, _run, (graph, _b, _t), _ = _linked()
    with pytest.raises(ViewInputError, match="two or more views"):
        link(graph)
    with pytest.raises(ViewInputError, match="GraphView, BufferView and TimelineView"):
        link(graph, plan)


@pytest.mark.parametrize("state", [["linear"], {"node": "linear"}, 3.5, ("a", "b")], ids=["list", "dict", "float", "tuple"])
def test_a_selection_of_the_wrong_shape_from_the_front_end_selects_nothing(state):
    """A front end (or a stale saved widget state) that sends ``selected`` as a list, a
    mapping or a number gets an empty spec in every view, not a TypeError from the kernel's
    observer; a proper selection afterwards still works."""
    plan, _run, views, _ = _linked()
    for view in views:
        view.canvas.selected = state
        assert view.canvas.detail == {}
    graph = views[0]
    name = next(iter(plan.allocations))
    graph.canvas.selected = name
    assert graph.canvas.detail["key"] == name
