"""TimelineView and its plain data: lanes per (device, stream), bars with bytes and GB/s,
the summary line, comparison runs on one time axis, event selection."""

from __future__ import annotations

import pytest

from workbench.runtime import Event, StreamScheduler, Timeline
from workbench.views import TimelineView, ViewInputError, timeline_data

from views_helpers import residual_run


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
    assert "short" in view.summary.value
    view.compare_dropdown.value = ""  # the "(none)" entry
    assert len(view.figure().get_axes()) == 1
    with pytest.raises(KeyError, match="valid ones are 'short'"):
        view.set_compare("long")


def test_lane_labels_in_the_figure_match_the_lanes():
    tl = _timeline()
    ax = TimelineView(tl).figure().get_axes()[0]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"{d} · {s}" for d, s in tl.streams()]


def test_selecting_an_event_shows_bytes_duration_and_bandwidth():
    tl = _timeline()
    view = TimelineView(tl)
    i = next(i for i, e in enumerate(tl.events) if e.kind == "d2d")
    view.event_dropdown.value = i
    e = tl.events[i]
    assert view.selected == i
    assert f"{e.gb_per_s:.2f} GB/s" in view.spec.value and e.node in view.spec.value
    with pytest.raises(IndexError, match="out of range"):
        view.select(len(tl.events))


def test_timeline_view_rejects_what_is_not_a_run():
    with pytest.raises(ViewInputError, match="Timeline or a run result"):
        TimelineView([1, 2, 3])
    with pytest.raises(ViewInputError, match=r"compare\['b'\]"):
        TimelineView(_timeline(), compare={"b": "nope"})
