"""TimelineView and its plain data: lanes per (device, stream), bars with bytes and GB/s,
the summary line, comparison runs on one time axis, event selection."""

from __future__ import annotations

import pytest

from workbench.runtime import Event, StreamScheduler, Timeline
from workbench.views import TimelineView, ViewInputError, timeline_data

from views_helpers import click, residual_run


def _timeline():
    return residual_run()[1].timeline


def test_lanes_equal_the_timelines_streams_and_bars_its_events():
    """One lane per (device, stream) in the timeline's order; one bar per event on the
    lane of its device and stream, with the event's times and bytes."""
    tl = _timeline()
    data = timeline_data(tl)
    assert list(data.lanes) == tl.streams()
    assert ("cuda:1", "copy") in data.lanes and ("cuda:0", "compute") in data.lanes
    assert len(data.bars) == len(tl.events)
    for bar, e in zip(data.bars, tl.events):
        assert data.lanes[bar.lane] == (e.device, e.stream)
        assert (bar.kind, bar.node, bar.start_us, bar.end_us, bar.nbytes) == (e.kind, e.node, e.start_us, e.end_us, e.nbytes)


def test_a_real_run_shows_one_copy_bar_per_copy_node():
    """The run of a planned graph draws each copy node of the graph as one bar of its kind
    and bytes, on a lane of the device it moves data to or from."""
    plan, run = residual_run()
    data = timeline_data(run)
    copies = {b.node: b for b in data.bars if b.kind in ("h2d", "d2h", "d2d")}
    assert set(copies) == {c.name for c in plan.device_graph.copies}
    for c in plan.device_graph.copies:
        bar = copies[c.name]
        assert (bar.kind, bar.nbytes) == (c.kind, c.nbytes)
        assert bar.device in (str(c.src), str(c.dst))


def test_copy_bandwidth_is_bytes_over_duration():
    """A copy bar's GB/s is its bytes divided by its duration (bytes per ns)."""
    data = timeline_data(_timeline())
    copies = [b for b in data.bars if b.kind in ("h2d", "d2h", "d2d")]
    assert copies
    for b in copies:
        assert b.gb_per_s == pytest.approx(b.nbytes / ((b.end_us - b.start_us) * 1e3))
        assert f"{b.gb_per_s:.2f} GB/s" in b.text


def test_summary_totals_and_overlap():
    """Copy time sums copy durations, compute time sums compute and host durations,
    and the overlap fraction is computed on a schedule where it is known: a 10 µs copy
    with 4 µs of compute running beside it overlaps 40%."""
    s = StreamScheduler()
    s.schedule("h2d", "x_to_cuda0", "cuda:0", "copy", 10.0, nbytes=10_000)
    s.schedule("compute", "mm", "cuda:0", "compute", 4.0)
    s.schedule("host", "add", "cpu", "compute", 3.0)
    data = timeline_data(s.timeline())
    assert data.summary.copy_us == pytest.approx(10.0)
    assert data.summary.compute_us == pytest.approx(7.0)
    assert data.summary.overlap_fraction == pytest.approx(0.4)
    assert data.summary.copy_counts["h2d"] == 1 and data.summary.bytes_moved["h2d"] == 10_000
    assert "overlap 40.0%" in data.summary.line and "copy time 10.000 µs" in data.summary.line


def test_compare_draws_a_second_run_on_the_same_time_axis():
    """With compare=, the figure has one axes per run and both share the x range, which
    covers the longer run; the comparison dropdown hides and shows it."""
    run = residual_run()[1]
    tl = run.timeline
    short = Timeline([Event("compute", "a", "cuda:0", "compute", 0.0, 5.0)])
    view = TimelineView(run, compare={"short": short}, label="residual")
    assert [label for label, _ in view.shown] == ["residual", "short"]
    axes = view.figure().get_axes()
    assert len(axes) == 2 and axes[0].get_xlim() == axes[1].get_xlim()
    assert axes[0].get_xlim()[1] >= tl.span_us
    assert [(r["label"], r["summary"]) for r in view.canvas.scene["runs"]] == [("residual", view.data.summary.line), ("short", view.comparisons["short"].summary.line)]
    view.compare_dropdown.value = ""  # the "(none)" entry
    assert len(view.figure().get_axes()) == 1
    with pytest.raises(KeyError, match="valid ones are 'short'"):
        view.set_compare("long")


def test_every_rendering_says_whether_a_run_was_modeled_and_by_what():
    """Rule 8: a sim run's source (the cost model that timed it) heads its panel in the
    static figure, its entry in the front end's scene and the view's text; a hand-built
    timeline, which claims no source, is titled by its label alone."""
    run = residual_run()[1]
    short = Timeline([Event("compute", "a", "cuda:0", "compute", 0.0, 5.0)])
    view = TimelineView(run, compare={"short": short}, label="residual")
    source = f"modeled by {run.cost_model.name}"
    assert view.data.source == source and view.comparisons["short"].source == ""
    titles = [ax.get_title(loc="left") for ax in view.figure().get_axes()]
    assert titles[0].startswith(f"residual · {source}:\n") and titles[1].startswith("short: span")
    assert [r["source"] for r in view.canvas.scene["runs"]] == [source, ""]
    text = view._repr_mimebundle_()["text/plain"]  # what a notebook shows as text
    assert f"residual · {source}: span" in text and "| short: span" in text


def test_lane_labels_in_the_figure_match_the_lanes():
    tl = _timeline()
    ax = TimelineView(tl).figure().get_axes()[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"{d} · {s}" for d, s in tl.streams()]


def test_selecting_an_event_shows_bytes_duration_and_bandwidth():
    tl = _timeline()
    view = TimelineView(tl)
    i = next(i for i, e in enumerate(tl.events) if e.kind == "d2d")
    click(view, i, tl.events[i].node)
    e = tl.events[i]
    assert view.selected == i and view.focus == e.node
    assert f"{e.gb_per_s:.2f} GB/s" in view.spec_html() and e.node in view.spec_html()
    with pytest.raises(IndexError, match="out of range"):
        view.select(len(tl.events))


def test_timeline_view_rejects_what_is_not_a_run():
    with pytest.raises(ViewInputError, match="Timeline or a run result"):
        TimelineView([1, 2, 3])
    with pytest.raises(ViewInputError, match=r"compare\['b'\]"):
        TimelineView(_timeline(), compare={"b": "nope"})


def _steps_timeline():
    """Two decode steps of a copy then a compute each."""
    return Timeline([
        Event("h2d", "w_gather", "cuda:0", "copy", 0.0, 4.0, nbytes=4096),
        Event("compute", "mm", "cuda:0", "compute", 4.0, 9.0),
        Event("h2d", "w_gather", "cuda:0", "copy", 9.0, 13.0, nbytes=4096),
        Event("compute", "mm", "cuda:0", "compute", 13.0, 18.0),
    ])


def test_step_boundaries_come_from_the_run():
    """Step starts are given (``steps=``), or read from the timeline's
    ``step_starts_us``, or from the events' ``step``; a single-step run has none, and
    decreasing step times are an error."""
    from dataclasses import dataclass

    tl = _steps_timeline()
    assert timeline_data(tl).step_starts_us == ()
    assert timeline_data(tl, steps=[0.0, 9.0]).step_starts_us == (0.0, 9.0)
    tl.step_starts_us = (0.0, 9.0)
    assert timeline_data(tl).step_starts_us == (0.0, 9.0)

    @dataclass(frozen=True)
    class StepEvent(Event):
        step: int = 0

    stepped = Timeline([StepEvent(e.kind, e.node, e.device, e.stream, e.start_us, e.end_us, e.nbytes, step=i // 2) for i, e in enumerate(_steps_timeline())])
    assert timeline_data(stepped).step_starts_us == (0.0, 9.0)
    view = TimelineView(stepped)
    assert [s["label"] for s in view.canvas.scene["steps"]] == ["step 0", "step 1"]
    with pytest.raises(ValueError, match="must not decrease"):
        timeline_data(tl, steps=[9.0, 0.0])


def test_back_to_back_events_stay_separate_bars():
    """Two copies of one kind back to back are two bars (one per event), each drawn
    with a border; the window and the kind filter pick what is drawn."""
    tl = _steps_timeline()
    view = TimelineView(tl)
    bars = view.canvas.scene["runs"][0]["bars"]
    assert len(bars) == 4 and [b[1] for b in bars] == [0.0, 4.0, 9.0, 13.0]
    view.set_window(8.0, 14.0)
    assert [b.start_us for b in view.visible()] == [4.0, 9.0, 13.0]
    view.hide_kinds(["compute"])
    assert [b.kind for b in view.visible()] == ["h2d"]
    assert view.canvas.hidden_kinds == ["compute"] and view.canvas.window == [8.0, 14.0]
    ax = view.figure().get_axes()[0]
    assert ax.get_xlim() == (8.0, 14.0)
    with pytest.raises(ValueError, match="unknown event kind"):
        view.hide_kinds(["gpu"])
    with pytest.raises(ValueError, match="start < end"):
        view.set_window(5, 1)


def test_a_bar_too_narrow_for_its_border_is_drawn_in_its_own_colour():
    """Among a thousand microseconds, a 0.5 µs kernel is narrower than the white border
    that separates wider bars: it is outlined in its own colour, so it shows at full colour;
    the wide copy keeps its white border."""
    from matplotlib.collections import PolyCollection
    from matplotlib.colors import to_rgba

    from workbench.views.timeline import NARROW_BAR_PT

    s = StreamScheduler()
    s.schedule("h2d", "weights", "cuda:0", "copy", 1000.0, nbytes=1 << 20)
    s.schedule("compute", "tiny_kernel", "cuda:0", "compute", 0.5)
    ax = TimelineView(s.timeline()).figure().get_axes()[0]
    bars = [c for c in ax.collections if isinstance(c, PolyCollection) and len(c.get_paths())]
    by_edge = {tuple(c.get_edgecolor()[0]): c for c in bars}
    assert to_rgba("white") in by_edge  # the wide copy
    narrow = [c for edge, c in by_edge.items() if edge != to_rgba("white")]
    assert len(narrow) == 1 and len(narrow[0].get_paths()) == 1
    assert tuple(narrow[0].get_facecolor()[0]) == tuple(narrow[0].get_edgecolor()[0])
    assert 0.5 / 1000.0 * 12.0 * 72 < NARROW_BAR_PT


def test_selecting_an_event_selects_its_node_and_outlines_its_other_events():
    """Clicking one of a node's events focuses the node: its other events are outlined
    (``linked_bars``) and the spec says how many; ``select_node`` picks its first."""
    view = TimelineView(_steps_timeline())
    click(view, 2, "w_gather")
    assert view.focus == "w_gather" and view.selected == 2 and view.linked_bars() == [0, 2]
    assert "1 more event" in view.spec_html()
    view.select_node("mm")
    assert view.selected == 1
    assert view.search("gat") == ["w_gather"]
    with pytest.raises(KeyError, match="no event of node"):
        view.select_node("nope")


def test_flows_join_each_copy_to_the_ops_that_read_it():
    """Every copy node read by an op has a flow from its copy event to that op's event,
    which starts after the copy ends; no flow starts at anything but a copy, and the
    view's data carries the same pairs as bar indices."""
    plan, run = residual_run()
    tl = run.timeline
    graph = plan.device_graph.graph
    users = {n.name: {u.name for u in n.users} for n in graph.nodes}
    copies = {c.name for c in plan.device_graph.copies}
    pairs = {(f.src.node, f.dst.node) for f in tl.flows}
    wanted = {(c, u) for c in copies for u in users[c] if any(e.node == u for e in tl.events)}
    assert wanted and pairs == wanted
    assert all(f.kind == "copy" and f.dst.start_us >= f.src.end_us for f in tl.flows)
    data = timeline_data(run)
    assert {(data.bars[a].node, data.bars[b].node) for a, b, _k in data.flows} == pairs
    scene = TimelineView(run)._scene()
    assert len(scene["runs"][0]["flows"]) == len(tl.flows)
    assert any("copy → what reads it" in item["label"] for item in scene["legend"])


def test_a_flow_must_join_a_copy_to_a_later_event_of_its_timeline():
    """A flow from a compute event, one whose reader starts before the copy ends, and one
    to an event not on the timeline are refused with a TimelineError."""
    from workbench.runtime.timeline import Flow, TimelineError

    copy = Event("h2d", "x_to_cuda0", "cuda:0", "copy", 0.0, 2.0, 64)
    op = Event("compute", "linear", "cuda:0", "compute", 2.0, 3.0)
    early = Event("compute", "gelu", "cuda:0", "compute", 1.0, 3.0)
    assert Timeline([copy, op], [Flow(copy, op)]).flows[0].dst is op
    with pytest.raises(TimelineError, match="starts at a copy"):
        Flow(op, copy)
    with pytest.raises(TimelineError, match="before the copy ends"):
        Flow(copy, early)
    with pytest.raises(TimelineError, match="not on this timeline"):
        Timeline([copy], [Flow(copy, op)])
    with pytest.raises(TimelineError, match="unknown flow kind"):
        Flow(copy, op, "push")


@pytest.mark.slow
def test_prefetch_flows_reach_the_layer_they_serve_in_every_decode_step():
    """With expert prefetch, each prefetch copy has a "prefetch" flow to the reuse copy of
    the next layer (the layer it serves), which in turn flows to the op reading it; a
    multi-token decode keeps every step's flows, between that step's events."""
    import workbench as wb
    from workbench.models import MoEConfig, QwenMoEDecoder
    from workbench.moe.decode import decode
    from workbench.moe.strategies import expert_streaming

    model = QwenMoEDecoder(MoEConfig.tiny(), expert_prefetch=True).eval()
    dg = expert_streaming(prefetch=True).apply(wb.capture(model, model.example_inputs()))
    plan = wb.plan(dg)
    records = {c.name: c for c in dg.copies}
    one = wb.estimate(plan)
    prefetch = [f for f in one.flows if f.kind == "prefetch"]
    assert prefetch and all(f.src.node.endswith("_prefetch") for f in prefetch)
    for f in prefetch:
        reuse = records[f.dst.node]
        assert str(reuse.role) == "reuse" and reuse.prefetch == f.src.node
        layer = lambda name: dg.program.constants[records[name].value].split(".")[1]  # noqa: E731
        assert int(layer(f.dst.node)) == int(layer(f.src.node))  # the rows of the layer it serves
        assert any(g.src is f.dst and g.kind == "copy" for g in one.flows)
    result = decode(plan, n_tokens=2)
    per_step = [len(r.timeline.flows) for r in result.steps]
    assert len(result.timeline.flows) == sum(per_step) and per_step[0] > 0
    events = set(result.timeline.events)
    assert all(f.src in events and f.dst in events for f in result.timeline.flows)
