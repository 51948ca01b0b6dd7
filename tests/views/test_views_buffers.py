"""BufferView and its plain data: one rectangle per allocation, per-device panels,
algorithm switching with a cache, tensor selection."""

from __future__ import annotations

import pytest

import workbench as wb
from workbench.models.examples import example
from workbench.views import BufferView, ViewInputError, buffer_panels, byte_ticks, live_steps, resident_weights

from views_helpers import click, planned, residual_plan, residual_two_devices


def test_rectangles_equal_the_plans_offsets_sizes_and_lifetimes():
    """Every allocation is one rectangle: x from start to end + 1, y from offset to
    offset + size, on its device's panel; nothing else is drawn."""
    plan = residual_plan()
    panels = buffer_panels(plan)
    rects = {r.name: r for p in panels for r in p.rects}
    assert set(rects) == set(plan.allocations)
    for name, a in plan.allocations.items():
        r = rects[name]
        assert (r.device, r.arena, r.x0, r.x1, r.y0, r.y1) == (a.device, a.arena, a.start, a.end + 1, a.offset, a.offset + a.size)
        assert (r.kind, r.nbytes, r.aliases) == (a.kind, a.nbytes, tuple(a.aliases))
    for p in panels:
        assert all(r.device == p.device for r in p.rects)


def test_one_panel_per_device_with_arena_and_lower_bound():
    """Panels follow the plan's devices, host first, and carry its arena and lower bound;
    in a valid plan every rectangle lies inside its arena."""
    plan = residual_plan()
    panels = buffer_panels(plan)
    assert [p.device for p in panels] == ["cpu", "cuda:0", "cuda:1"]
    for p in panels:
        assert p.arena_bytes == plan.arena_bytes[p.device]
        assert p.lower_bound == plan.lower_bound[p.device] <= p.arena_bytes
        assert p.steps == len(plan.steps)
        assert all(0 <= r.y0 and r.y1 <= p.arena_bytes and 0 <= r.x0 < r.x1 <= p.steps for r in p.rects)


def test_algorithm_dropdown_replans_once_and_caches():
    """Choosing another algorithm shows that algorithm's plan of the same graph (equal to
    planning it directly); choosing it again reuses the cached plan object."""
    plan = residual_plan()
    view = BufferView(plan)
    assert view.algorithm_dropdown.value == "greedy"
    view.algorithm_dropdown.value = "naive"
    naive = view.plan
    assert naive.algorithm == "naive" and naive.device_graph is plan.device_graph
    direct = wb.plan(plan.device_graph, algorithm="naive")
    assert {n: (a.offset, a.size) for n, a in naive.allocations.items()} == {
        n: (a.offset, a.size) for n, a in direct.allocations.items()
    }
    assert {r.name: r.y0 for p in view.panels for r in p.rects} == {n: a.offset for n, a in naive.allocations.items()}
    assert "naive" in view.summary.value
    view.algorithm_dropdown.value = "greedy"
    assert view.plan is plan
    view.algorithm_dropdown.value = "naive"
    assert view.plan is naive
    assert set(view.planned) == {"greedy", "naive"}


def test_selecting_a_tensor_or_an_alias_highlights_its_storage():
    """Clicking a storage shows its offset and lifetime; selecting a value that shares a
    storage selects that storage; a weight selects its resident segment and says why it
    has no arena slot; a name the plan does not know is an error."""
    plan = residual_plan()
    view = BufferView(plan)
    name, a = next((n, a) for n, a in plan.allocations.items() if a.device == "cuda:0")
    click(view, name)
    assert view.selected == name
    assert f"{a.offset} (0x{a.offset:x})" in view.spec_html() and f"steps {a.start}..{a.end}" in view.spec_html()
    attention = planned("attention", (("cuda:0", ("aten.linear", "aten.matmul")),))
    view = BufferView(attention)
    alias, owner = next((v, o) for v, o in attention.storage_of.items() if v != o)
    view.select(alias)
    assert view.selected == owner and view.focus == alias
    assert view.rect_of(owner).y0 == attention.allocations[owner].offset
    view.select("p_qkv_weight")
    assert view.selected == "p_qkv_weight" and "constant" in view.spec_html()
    with pytest.raises(KeyError, match="has no planned memory"):
        view.select("no_such_tensor")


def test_buffer_view_needs_a_plan_and_known_algorithms():
    _, _, dg = residual_two_devices()
    with pytest.raises(ViewInputError, match=r"wb.plan\(dg\)"):
        BufferView(dg)
    with pytest.raises(ValueError, match="valid ones are"):
        BufferView(residual_plan(), algorithms=["fastest"])


def test_buffer_figure_has_one_axes_per_arena_and_a_resident_bar(tmp_path):
    """The static figure draws one axes per non-empty arena, each with its arena and
    lower-bound lines, and one axes of resident weights with a bar per device."""
    plan = residual_plan()
    view = BufferView(plan)
    fig = view.figure()
    by_gid = {ax.get_gid(): ax for ax in fig.get_axes()}
    panels = [p for p in buffer_panels(plan) if not p.empty]
    assert set(by_gid) == {f"arena:{p.device}:{p.arena}" for p in panels} | {"resident"}
    for panel in panels:
        ax = by_gid[f"arena:{panel.device}:{panel.arena}"]
        ys = sorted(line.get_ydata()[0] for line in ax.get_lines())
        assert ys == sorted([panel.arena_bytes, panel.lower_bound])
    resident = by_gid["resident"]
    assert [t.get_text() for t in resident.get_yticklabels()] == sorted({str(d) for held in plan.device_graph.residency.values() for d in held})
    assert view.save(tmp_path / "b.svg").read_text().lstrip().startswith("<?xml")


def test_arena_labels_stay_inside_their_panels():
    """Drawn, each arena panel's labels (arena size, lower bound) lie inside the panel and
    clear of its title, however short the panel: a label that fits above its line goes
    there, else under it."""
    model, inputs = example("residual")
    everything = wb.plan(wb.propagate(wb.place(wb.capture(model, inputs), {"cuda:0": ["aten.*"]})), algorithm="greedy")
    for plan in (residual_plan(), everything):  # the second's host arena is one short panel
        fig = BufferView(plan).figure()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        for ax in (a for a in fig.get_axes() if a.get_gid().startswith("arena:")):
            box, title = ax.get_window_extent(renderer), ax.title.get_window_extent(renderer)
            for text in ax.texts:
                if not text.get_text().startswith(("arena", "lower bound")):
                    continue
                t = text.get_window_extent(renderer)
                assert box.y0 - 0.5 <= t.y0 and t.y1 <= box.y1 + 0.5, (ax.get_gid(), text.get_text())
                assert not t.overlaps(title), (ax.get_gid(), text.get_text())


def test_panels_are_sized_by_arena_bytes_and_empty_arenas_are_one_line():
    """A panel's drawn height grows with its arena's bytes (a floor keeps small arenas
    readable); an arena with no tensor has no panel body, just its title line."""
    plan = residual_plan()
    scene = BufferView(plan).canvas.scene
    drawn = [p for p in scene["panels"] if not p["empty"]]
    assert len(drawn) >= 2
    for a, b in zip(drawn, drawn[1:]):
        if a["arena_bytes"] < b["arena_bytes"]:
            assert a["h"] <= b["h"]
    biggest = max(drawn, key=lambda p: p["arena_bytes"])
    assert biggest["h"] == max(p["h"] for p in drawn)
    from workbench.views import BufferPanel

    empty = BufferPanel("cpu", 0, 0, 0, 0, 5, ())
    assert empty.empty and "empty" in empty.title


def test_the_x_range_is_the_live_steps():
    """The step axis starts at the first step a planned tensor is live, not at 0 (the
    steps before only bind weights and inputs), and ends after the last."""
    plan = residual_plan()
    x = BufferView(plan).canvas.scene["x"]
    assert x == {"lo": min(a.start for a in plan.allocations.values()), "hi": max(a.end for a in plan.allocations.values()) + 1}
    assert live_steps(buffer_panels(plan)) == (x["lo"], x["hi"])


def test_byte_ticks_are_round_and_in_one_unit():
    """Ticks are multiples of 1, 2, 2.5 or 5 × 10^k of one unit, start at 0, reach the
    top, and never mix units (no "1000 B" next to "1.5 KiB")."""
    for top in (1, 7, 1000, 1500, 5000, 49.4 * 1024, 48.1 * 2**20, 3 * 2**30):
        ticks = byte_ticks(top)
        values, labels = zip(*ticks)
        assert values[0] == 0 and values[-1] >= top and list(values) == sorted(values)
        units = {label.split()[-1] for label in labels[1:]}
        assert len(units) == 1, labels
        steps = {round(float(label.split()[0]) / float(labels[1].split()[0]), 6) for label in labels[1:]}
        assert steps == set(range(1, len(labels))), labels
    assert [label for _v, label in byte_ticks(1500)] == ["0", "500 B", "1000 B", "1500 B"]


def test_resident_weights_per_device_add_up_to_the_constant_bytes():
    """The resident bar of each device lists the weights held there; their bytes add up
    to the plan's constant bytes for that device."""
    plan = residual_plan()
    bars = resident_weights(plan.device_graph)
    assert {b.device for b in bars} == {d for d, n in plan.constant_bytes.items() if n}
    for b in bars:
        assert b.total == plan.constant_bytes[b.device]


def test_a_step_window_is_kept_and_checked():
    """``set_window`` is the zoom the front end sets; an empty window shows every live step."""
    view = BufferView(residual_plan())
    view.set_window(3, 9)
    assert view.canvas.window == [3.0, 9.0]
    ax = next(a for a in view.figure().get_axes() if a.get_gid().startswith("arena:"))
    assert ax.get_xlim() == (3.0, 9.0)
    view.set_window()
    assert view.canvas.window == []
    with pytest.raises(ValueError, match="first < last"):
        view.set_window(5, 5)
