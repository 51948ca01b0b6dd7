"""BufferView and its plain data: one rectangle per allocation, per-device panels,
algorithm switching with a cache, tensor selection."""

from __future__ import annotations

import pytest

import workbench as wb
from workbench.views import BufferView, ViewInputError, buffer_panels

from views_helpers import planned, residual_plan, residual_two_devices


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
    """Selecting a storage shows its offset and lifetime; selecting a value that shares a
    storage selects that storage."""
    plan = residual_plan()
    view = BufferView(plan)
    name, a = next((n, a) for n, a in plan.allocations.items() if a.device == "cuda:0")
    view.tensor_dropdown.value = name
    assert view.selected == name
    assert f"{a.offset} (0x{a.offset:x})" in view.spec.value and f"steps {a.start}..{a.end}" in view.spec.value
    attention = planned("attention", (("cuda:0", ("aten.linear", "aten.matmul")),))
    view = BufferView(attention)
    alias, owner = next((v, o) for v, o in attention.storage_of.items() if v != o)
    view.select(alias)
    assert view.selected == owner and view.tensor_dropdown.value == owner
    assert view.rect_of(owner).y0 == attention.allocations[owner].offset
    with pytest.raises(KeyError, match="has no planned memory: constant"):
        view.select("p_qkv_weight")


def test_buffer_view_needs_a_plan_and_known_algorithms():
    _, _, dg = residual_two_devices()
    with pytest.raises(ViewInputError, match=r"wb.plan\(dg\)"):
        BufferView(dg)
    with pytest.raises(ValueError, match="valid ones are"):
        BufferView(residual_plan(), algorithms=["fastest"])


def test_buffer_figure_has_one_axes_per_panel(tmp_path):
    """The static figure draws one axes per arena, each with its arena and lower-bound lines."""
    plan = residual_plan()
    view = BufferView(plan)
    fig = view.figure()
    axes = fig.get_axes()
    assert len(axes) == len(buffer_panels(plan))
    for ax, panel in zip(axes, buffer_panels(plan)):
        ys = sorted(line.get_ydata()[0] for line in ax.get_lines())
        assert ys == sorted([panel.arena_bytes, panel.lower_bound])
    assert view.save(tmp_path / "b.svg").read_text().lstrip().startswith("<?xml")
