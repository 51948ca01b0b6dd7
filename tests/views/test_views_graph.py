"""GraphView and its plain data: layout, collapse, device filter, node specs, selection."""

from __future__ import annotations

import inspect
import os

import pytest
import torch
from matplotlib.figure import Figure

import workbench as wb
from workbench.views import GraphView, ViewInputError, graph_layout, node_spec
from workbench.views._style import format_bytes

from views_helpers import click, placed_graph, residual_fused, residual_plan, residual_two_devices, tiny_moe


def _graph_edges(dg):
    return {(a.name, n.name) for n in dg.graph.nodes for a in n.all_input_nodes}


# --- layout ------------------------------------------------------------------------


def test_layout_has_one_node_per_graph_node_and_every_edge():
    """Uncollapsed, the layout draws exactly the graph: same node names, same edges
    (a dropped placeholder, copy or edge would fail)."""
    _, _, dg = residual_two_devices()
    layout = graph_layout(dg)
    assert sorted(n.id for n in layout.nodes) == sorted(n.name for n in dg.graph.nodes)
    assert {(e.src, e.dst) for e in layout.edges} == _graph_edges(dg)
    assert layout.graph_nodes == len(dg.graph.nodes)


def test_layout_ranks_point_every_edge_down_and_weights_sit_above_their_first_user():
    """Graphviz ranks the graph top to bottom: every edge of the (acyclic) graph goes from
    a higher rank to a lower one, rank order is y order, and a weight sits exactly one
    rank above its first user (dot pulls a source node down to its users)."""
    _, _, dg = residual_two_devices()
    layout = graph_layout(dg)
    assert layout.engine == "dot"
    row = {n.id: n.layer for n in layout.nodes}
    y = {n.id: n.y for n in layout.nodes}
    for node in dg.graph.nodes:
        for a in node.all_input_nodes:
            assert row[a.name] < row[node.name] and y[a.name] < y[node.name]
        if node.name in dg.residency:
            assert row[node.name] == min(row[u.name] for u in node.users) - 1
    assert sorted({n.layer for n in layout.nodes}) == list(range(layout.depth))


def test_layout_positions_are_distinct():
    """No two drawn nodes share a position (they would hide each other)."""
    _, _, dg = residual_two_devices()
    layout = graph_layout(dg)
    positions = [(n.x, n.y) for n in layout.nodes]
    assert len(set(positions)) == len(positions)


def test_copy_nodes_are_labelled_with_kind_and_bytes():
    """Each copy record appears as a copy node labelled ``<kind> <bytes>`` with its kind's
    colour key; no other node is a copy."""
    _, _, dg = residual_two_devices()
    layout = graph_layout(dg)
    by_id = {n.id: n for n in layout.nodes}
    assert {c.kind for c in dg.copies} == {"h2d", "d2h", "d2d"}
    for c in dg.copies:
        n = by_id[c.name]
        assert (n.kind, n.copy_kind, n.nbytes) == ("copy", c.kind, c.nbytes)
        assert n.label == f"{c.kind} {format_bytes(c.nbytes)}"
        assert n.colour_key == f"copy:{c.kind}"
    assert sum(n.kind == "copy" for n in layout.nodes) == len(dg.copies)
    assert format_bytes(4096) == "4.0 KiB"


def test_nodes_are_coloured_by_their_device():
    """An op's colour key names the device propagation gave it."""
    _, _, dg = residual_two_devices()
    for n in graph_layout(dg).nodes:
        if n.kind == "op":
            assert n.colour_key == f"device:{dg.node_device[n.id]}"


def test_delegate_boxes_hold_their_members():
    """Uncollapsed, each delegate is a box around exactly its member nodes: every member
    lies inside it, whole."""
    _, _, dg = residual_fused()
    layout = graph_layout(dg)
    boxes = {b.name: b for b in layout.boxes}
    assert set(boxes) == {d.name for d in dg.placement.delegates}
    where = {n.id: n for n in layout.nodes}
    for d in dg.placement.delegates:
        box = boxes[d.name]
        assert set(box.members) == set(d.nodes)
        for m in d.nodes:
            n = where[m]
            assert box.x0 <= n.x - n.w / 2 and n.x + n.w / 2 <= box.x1
            assert box.y0 <= n.y - n.h / 2 and n.y + n.h / 2 <= box.y1


def test_collapse_delegates_draws_each_delegate_as_one_node():
    """Collapsed by delegates: node count = graph nodes - delegate members + delegates,
    each member maps to its delegate, and no edge joins a delegate to itself."""
    _, _, dg = residual_fused()
    assert any(len(d.nodes) > 1 for d in dg.placement.delegates)
    layout = graph_layout(dg, collapse="delegates")
    members = sum(len(d.nodes) for d in dg.placement.delegates)
    assert len(layout.nodes) == len(dg.graph.nodes) - members + len(dg.placement.delegates)
    for d in dg.placement.delegates:
        node = layout.node(d.name)
        assert node.kind == "delegate" and set(node.members) == set(d.nodes)
        assert node.device == str(d.device)
        assert all(layout.node_of[m] == d.name for m in d.nodes)
    assert all(e.src != e.dst for e in layout.edges)
    assert layout.boxes == ()


def test_collapse_layers_groups_by_indexed_module_path():
    """Collapsed by layers (MLP: layers.0..2): every op traced in ``layers.i`` maps to
    that group, the ReLUs traced at the root join the layer that consumes them, and the
    user input stays its own node."""
    _, _, dg = placed_graph("mlp", (("cuda:0", ("aten.linear",)),))
    layout = graph_layout(dg, collapse="layers")
    groups = {n.id for n in layout.nodes if n.kind == "layer"}
    assert groups == {"layers.0", "layers.1", "layers.2"}
    for node in dg.graph.nodes:
        if node.op == "call_function" and str(node.target).startswith("aten.linear"):
            stack = [p for p, _ in node.meta["nn_module_stack"].values()]
            assert layout.node_of[node.name] in stack
        if node.op == "call_function" and str(node.target).startswith("aten.relu"):
            (user,) = node.users
            assert layout.node_of[node.name] == layout.node_of[user.name]
    assert layout.node_of["x"] == "x"
    assert sum(len(n.members) for n in layout.nodes) == len(dg.graph.nodes)
    # the layers are a chain: each one a row below the previous
    rows = [layout.node(f"layers.{i}").layer for i in range(3)]
    assert rows == sorted(rows) and len(set(rows)) == 3


def test_device_filter_keeps_exactly_the_nodes_touching_the_device():
    """devices=["cuda:1"] keeps the ops on cuda:1 and the copies into or out of it."""
    _, _, dg = residual_two_devices()
    layout = graph_layout(dg, devices=["cuda:1"])
    expected = {n for n, d in dg.node_device.items() if str(d) == "cuda:1" and n not in dg.residency}
    expected |= {c.name for c in dg.copies if "cuda:1" in (str(c.src), str(c.dst))}
    assert {n.id for n in layout.nodes} == expected
    assert layout.devices == ("cuda:1",)


def test_bad_options_are_clear_errors():
    """An unknown collapse mode or a device the graph does not use says what is valid."""
    _, _, dg = residual_two_devices()
    with pytest.raises(ValueError, match="valid modes are None, 'delegates' and 'layers'"):
        graph_layout(dg, collapse="modules")
    with pytest.raises(ValueError, match="its devices are cpu, cuda:0, cuda:1"):
        graph_layout(dg, devices=["cuda:3"])
    with pytest.raises(ViewInputError, match="DeviceGraph .* or a MemoryPlan"):
        GraphView("not a graph")


# --- node specs --------------------------------------------------------------------


def test_spec_of_a_planned_tensor_is_its_allocation():
    """With a plan, a node's lifetime, arena, offset and size are its storage's."""
    plan = residual_plan()
    dg = plan.device_graph
    for value, owner in plan.storage_of.items():
        spec = node_spec(dg, value, plan)
        a = plan.allocations[owner]
        assert spec.storage == owner
        assert (spec.lifetime, spec.arena, spec.offset, spec.size) == ((a.start, a.end), a.arena, a.offset, a.size)
        assert spec.device == str(dg.node_device[value])


def test_spec_of_a_copy_says_why_it_exists():
    """A copy's spec carries the reason, kind, ends and consumers recorded by propagation."""
    plan = residual_plan()
    for c in plan.device_graph.copies:
        spec = node_spec(plan.device_graph, c.name, plan)
        assert (spec.copy_kind, spec.copy_src, spec.copy_dst) == (c.kind, str(c.src), str(c.dst))
        assert spec.copy_reason == c.reason and spec.copy_consumers == c.consumers
        assert spec.role == "copy"


def test_spec_of_a_weight_says_why_it_is_not_planned():
    """A parameter has no arena slot; its spec gives the plan's reason."""
    plan = residual_plan()
    spec = node_spec(plan.device_graph, "p_ups_0_weight", plan)
    assert spec.role == "parameter" and spec.offset is None
    assert spec.unplanned == plan.unplanned["p_ups_0_weight"]
    assert spec.shape == (64, 32) and spec.dtype == "float32" and spec.nbytes == 64 * 32 * 4


def test_spec_without_a_plan_uses_graph_order_lifetimes():
    """Without a plan a lifetime is [defining step, last use] in graph order."""
    _, _, dg = residual_two_devices()
    for node in dg.graph.nodes:
        if node.op == "output":
            continue
        spec = node_spec(dg, node.name)
        last = max((dg.order_of(u.name) for u in node.users), default=dg.order_of(node.name))
        assert spec.lifetime == (dg.order_of(node.name), last)
        assert spec.offset is None


class _Inner(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2  # the inner line


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _Inner()

    def forward(self, x):
        return self.inner(x) + 1


@pytest.mark.parametrize("shape_only", [False, True])
def test_spec_of_an_op_names_the_module_and_line_that_issued_it(shape_only):
    """An op's spec names the innermost module it was traced in and, for a runnable capture,
    the exact model line (file name, number, function, code); a shape-only capture records
    no stack, and a plain copy between devices has neither."""
    prog = wb.capture(_Outer(), (torch.randn(2, 3),), shape_only=shape_only)
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.relu"]}))
    relu = next(n.name for n in dg.graph.nodes if n.target is torch.ops.aten.relu.default)
    add = next(n.name for n in dg.graph.nodes if n.target is torch.ops.aten.add.Tensor)
    lines, first = inspect.getsourcelines(_Inner.forward)
    line = first + next(i for i, text in enumerate(lines) if "the inner line" in text)
    inner, outer = node_spec(dg, relu), node_spec(dg, add)
    assert inner.module == "inner (_Inner)" and outer.module is None  # the root module has no path
    if shape_only:
        assert inner.source is None
    else:
        assert inner.source == f"{os.path.basename(__file__)}:{line} in forward: return torch.relu(x) * 2  # the inner line"
        assert outer.source.endswith("in forward: return self.inner(x) + 1")
    for c in dg.copies:
        spec = node_spec(dg, c.name)
        assert spec.module is None and spec.source is None


def test_spec_of_an_unknown_node_lists_real_names():
    _, _, dg = residual_two_devices()
    with pytest.raises(KeyError, match="no node named 'nope'"):
        node_spec(dg, "nope")


# --- the widget --------------------------------------------------------------------


def test_selecting_a_node_updates_the_spec_panel_and_highlight():
    """Clicking a node shows its spec (offset, device, reason) and marks it selected;
    clearing the selection clears the panel."""
    plan = residual_plan()
    view = GraphView(plan)
    copy = next(c for c in plan.device_graph.copies if c.kind == "d2d")
    click(view, copy.name)
    assert view.selected == copy.name
    html = view.spec_html()
    owner = plan.storage_of[copy.name]
    assert copy.name in html and "d2d" in html and str(plan.allocations[owner].offset) in html
    assert "read" in html  # the reason sentence
    view.select(None)
    assert view.focus is None and view.selected is None and "select a node" in view.spec_html()


def test_selection_inside_a_collapsed_group_names_the_group():
    """With delegates collapsed, a member's spec says which drawn node holds it."""
    _, _, dg = residual_fused()
    view = GraphView(dg, collapse="delegates")
    delegate = next(d for d in dg.placement.delegates if len(d.nodes) > 1)
    view.select(delegate.nodes[1])
    assert f"inside {delegate.name}" in view.spec_html()


def test_collapse_and_device_controls_relayout():
    """Changing the collapse dropdown or the device dropdown rebuilds the layout."""
    _, _, dg = residual_fused()
    view = GraphView(dg)
    full = len(view.layout.nodes)
    view.collapse_dropdown.value = "delegates"
    assert view.layout.collapse == "delegates" and len(view.layout.nodes) < full
    view.device_dropdown.value = "cuda:0"
    assert view.layout.devices == ("cuda:0",)
    view.device_dropdown.value = ""  # the "all" entry
    assert view.layout.devices is None


def test_static_figure_png_and_display_bundle(tmp_path, monkeypatch):
    """figure() is a matplotlib Figure, save() writes a real PNG, and displaying the view
    publishes the live widget and the same PNG as a static fallback."""
    _, _, dg = residual_two_devices()
    view = GraphView(dg)
    assert isinstance(view.figure(), Figure)
    path = view.save(tmp_path / "graph.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert view.png()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match=r"\.png, \.svg or \.pdf"):
        view.save(tmp_path / "graph.txt")
    shown = []
    import IPython.display

    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    view._ipython_display_()
    (bundle, raw), = shown
    assert raw and "application/vnd.jupyter.widget-view+json" in bundle and "image/png" in bundle
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == view.widget.model_id
    assert "wb-graph-view" in view.widget._dom_classes


@pytest.mark.slow
def test_tiny_moe_layout_collapses_to_its_layers():
    """The tiny MoE (hundreds of nodes) stays drawable: uncollapsed it has one node per
    graph node; collapsed by layers it shows its four decoder layers (and the final norm,
    a top-level module of several ops) as groups that together hold most of the graph,
    and every graph node maps to a drawn node."""
    _, _, prog = tiny_moe()
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear", "aten.bmm"]}))
    full = graph_layout(dg)
    checks = {n.name for n in dg.graph.nodes if "_assert_tensor_metadata" in str(n.target)}
    assert full.hidden == len(checks)  # metadata-only asserts are not drawn
    assert len(full.nodes) == len(dg.graph.nodes) - len(checks) > 300
    layout = graph_layout(dg, collapse="layers")
    groups = [n for n in layout.nodes if n.kind == "layer"]
    assert sorted(n.id for n in groups) == ["layers.0", "layers.1", "layers.2", "layers.3", "norm"]
    assert sum(len(n.members) for n in groups) > 0.8 * len(dg.graph.nodes)
    assert len(layout.nodes) < 60
    assert set(layout.node_of) == {n.name for n in dg.graph.nodes} - checks
    assert sum(n.copies for n in layout.nodes) == len(dg.copies)
    view = GraphView(dg, collapse="layers")
    view.select("linear_3")
    assert "inside layers." in view.spec_html()


def test_gather_copies_touch_host_and_device():
    """A gather copy (x, index, src, dst) is drawn as touching its two devices, not its
    index argument."""
    import workbench as wb
    from workbench.models import MoEConfig, QwenMoEDecoder
    from workbench.moe.strategies import expert_streaming
    from workbench.views._layout import node_devices

    model = QwenMoEDecoder(MoEConfig.tiny())
    dg = expert_streaming().apply(wb.capture(model, model.example_inputs()))
    gathers = [n for n in dg.graph.nodes if n.name.endswith("_gather")]
    assert gathers and all(node_devices(dg, n) == {"cpu", "cuda:0"} for n in gathers)


def _served_group(layout, node):
    """The drawn group of the first op reading ``node``, through copies reading it."""
    for user in node.users:
        drawn = layout.node(layout.node_of[user.name])
        found = drawn.id if drawn.kind == "layer" else _served_group(layout, user) if drawn.kind == "copy" else None
        if found is not None:
            return found
    return None


@pytest.mark.slow
@pytest.mark.parametrize("prefetch", [False, True], ids=["streaming", "prefetch"])
def test_collapsed_layers_draw_each_copy_on_the_row_of_the_layer_it_serves(prefetch):
    """Collapsed by layers, every copy drawn on its own sits on the row of the layer whose
    ops read it (through a reuse copy for a prefetch, which reads the layer above's
    routing hint): its centre inside that layer box's height, the same rank, and its first
    line names the layer; a host weight read only by one layer's copies sits on that row
    too, named within the layer; side nodes sit right of everything else in their row; no
    two drawn nodes overlap; every edge has a route."""
    from workbench.models import MoEConfig, QwenMoEDecoder
    from workbench.moe.strategies import expert_streaming

    model = QwenMoEDecoder(MoEConfig.tiny(), expert_prefetch=prefetch)
    dg = expert_streaming(prefetch=prefetch).apply(wb.capture(model, model.example_inputs()))
    layout = graph_layout(dg, collapse="layers")
    graph = {n.name: n for n in dg.graph.nodes}
    copies = [n for n in layout.nodes if n.kind == "copy"]
    assert len(copies) == (14 if prefetch else 8)  # a plain gather and, after layer 0, a prefetch + a reuse copy per weight
    row_of = {}
    for c in copies:
        served = _served_group(layout, graph[c.id])
        assert served is not None and served.startswith("layers."), c.id
        layer = layout.node(served)
        assert abs(c.y - layer.y) <= (layer.h - c.h) / 2 and c.layer == layer.layer, (c.id, c.y, served, layer.y)
        assert c.lines[0].endswith(f"→ {served}"), c.lines
        row_of[c.id] = served
    weights = [n for n in layout.nodes if n.kind == "constant" and graph[n.id].users
               and all(u.name in row_of for u in graph[n.id].users)]
    assert len(weights) == 8
    for w in weights:
        (served,) = {row_of[u.name] for u in graph[w.id].users}
        assert w.y == layout.node(served).y, (w.id, served)
        # its row names the layer, so it shows its name within the layer; the label stays whole
        assert w.lines == (dg.program.constants[w.id].removeprefix(served + "."),) and w.label == w.id
        assert w.lines[0].startswith("mlp.experts.")
    side = set(row_of) | {w.id for w in weights}
    for s_node in (n for n in layout.nodes if n.id in side):  # right of everything else in its row
        in_row = [n for n in layout.nodes if n.id not in side and abs(n.y - s_node.y) < (n.h + s_node.h) / 2]
        assert all(n.x + n.w / 2 < s_node.x - s_node.w / 2 for n in in_row), s_node.id
    nodes = list(layout.nodes)
    for i, a in enumerate(nodes):
        for b in nodes[i + 1:]:
            apart = abs(a.x - b.x) >= (a.w + b.w) / 2 or abs(a.y - b.y) >= (a.h + b.h) / 2
            assert apart, (a.id, b.id)
    assert all(len(e.points) >= 4 for e in layout.edges), [(e.src, e.dst) for e in layout.edges if len(e.points) < 4]
    width, height = layout.extent
    assert all(0 <= x <= width and 0 <= y <= height for n in nodes for x, y in ((n.x - n.w / 2, n.y), (n.x + n.w / 2, n.y)))


@pytest.mark.slow
def test_transformers_model_groups_its_top_level_modules_apart_and_hides_asserts():
    """Collapsed by layers, a transformers decoder's embedding, rotary tables, final norm
    and the ops of the model itself are separate groups (not one ``model`` box), no group
    both reads from a layer and feeds one (an arrow running back up), every gather names
    the layer it serves, and metadata-only asserts are not drawn (their spec says why)."""
    from workbench import hf
    from workbench.moe.strategies import expert_streaming

    step = hf.capture_decode(hf.load_model("qwen3_moe"), "static", past=4, max_cache_len=8)
    dg = expert_streaming().apply(step.program)
    layout = graph_layout(dg, collapse="layers")
    groups = {n.id for n in layout.nodes if n.kind == "layer"}
    layers = {g for g in groups if g.startswith("model.layers.")}
    assert {"model.rotary_emb", "model.norm"} <= groups - layers
    assert layout.node_of["embedding"] not in {"model.rotary_emb", "model.norm"}
    into = {e.dst for e in layout.edges if e.src in layers}
    out_of = {e.src for e in layout.edges if e.dst in layers}
    assert not (into & out_of) & (groups - layers), "a group between the layers that loops back"
    for n in layout.nodes:
        if n.kind == "copy" and "gather" in n.lines[1]:
            assert n.lines[0].endswith(tuple(f"→ {g}" for g in layers)), n.lines
    checks = [n.name for n in dg.graph.nodes if "_assert_tensor_metadata" in str(n.target)]
    assert checks and layout.hidden == len(checks) and not set(checks) & set(layout.node_of)
    view = GraphView(dg, collapse="layers")
    view.select(checks[0])
    assert "metadata-only check" in view.spec_html()


def test_copy_headers_give_a_count_and_a_total():
    """A header's copies read as a count and the bytes they move between them, never as
    count × size: two h2d copies of 4 KiB each read "2 h2d copies, 8.0 KiB in all", one
    copy reads "1 d2h copy, 4.0 KiB", and kinds are separated so counts cannot run together."""
    from workbench.views._style import copies_text

    text = copies_text({"h2d": 2, "d2h": 1, "d2d": 0}, {"h2d": 8192, "d2h": 4096, "d2d": 0})
    assert text == "2 h2d copies, 8.0 KiB in all; 1 d2h copy, 4.0 KiB"
    assert "×" not in text
    assert copies_text({}, {}) == "no copies"
