"""GraphView at MoE size: what crosses a collapsed layer's border, copy badges, expand in
place, a selection's own edges, search, the Graphviz fallback, and the widget state the
front end syncs (no browser needed)."""

from __future__ import annotations

import pytest

import workbench as wb
from workbench.views import GraphView, LayoutWarning, graph_layout, graph_scene, search_names
from workbench.views import _graphviz
from workbench.views._graph_scene import own_edges

from views_helpers import click, placed_graph, residual_two_devices, tiny_moe, tiny_streaming


def _mlp():
    return placed_graph("mlp", (("cuda:0", ("aten.linear",)),))[2]


@pytest.mark.slow
def test_streamed_weights_and_their_gathers_are_drawn_outside_the_layers():
    """Under expert_streaming every gather copy crosses a layer's border (its weight lives
    on the host): each gather and the host weight it reads are drawn as their own nodes,
    the layers hold no copy, and the legend lists the h2d copies it draws."""
    plan, _ = tiny_streaming()
    dg = plan.device_graph
    layout = graph_layout(dg, collapse="layers")
    drawn = {n.id: n for n in layout.nodes}
    gathers = [c for c in dg.copies if str(c.role) == "gather"]
    assert len(gathers) == len(dg.copies) == 8
    for c in gathers:
        assert layout.node_of[c.name] == c.name and drawn[c.name].kind == "copy"
        assert layout.node_of[c.value] == c.value and drawn[c.value].kind == "constant"
        assert drawn[c.value].devices == ("cpu",)
        assert "gather" in drawn[c.name].lines[1]
    assert all(not n.badges for n in drawn.values())
    labels = [item["label"] for item in graph_scene(layout, dg, plan)["legend"]]
    assert "h2d copy (node)" in labels and "weight on cpu" in labels


@pytest.mark.slow
def test_copies_between_ops_of_one_layer_are_badges_per_kind():
    """With only the linears and bmms on cuda:0, most copies run between two ops of the
    same layer: each is counted on that layer's badge of its kind (count and bytes), the
    others are drawn as nodes, and together they are every copy exactly once."""
    _, _, prog = tiny_moe()
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear", "aten.bmm"]}))
    layout = graph_layout(dg, collapse="layers")
    by_kind: dict = {}
    for n in layout.nodes:
        for b in n.badges:
            inside = [dg.copy_table[m] for m in n.members if m in dg.copy_table and str(dg.copy_table[m].kind) == b.kind]
            assert (b.count, b.nbytes) == (len(inside), sum(c.nbytes for c in inside))
            by_kind[b.kind] = by_kind.get(b.kind, 0) + b.count
        if n.kind == "copy":
            by_kind[n.copy_kind] = by_kind.get(n.copy_kind, 0) + 1
    assert by_kind == {k: v for k, v in dg.copy_counts().items() if v}
    assert sum(b.count for n in layout.nodes for b in n.badges) > 0


def test_expand_draws_one_group_member_by_member_in_a_box():
    """Expanding layers.1 of the MLP draws its members as nodes inside a box labelled
    with it, the other layers stay collapsed; naming a group that is not drawn lists the
    groups; collapsing it again restores the collapsed drawing."""
    dg = _mlp()
    view = GraphView(dg, collapse="layers")
    view.expand("layers.1")
    layout = view.layout
    members = [n for n, g in graph_layout(dg, collapse="layers").node_of.items() if g == "layers.1"]
    (box,) = layout.boxes
    assert (box.name, box.kind) == ("layers.1", "layer") and set(box.members) == set(members)
    assert {n.id for n in layout.nodes if n.kind == "layer"} == {"layers.0", "layers.2"}
    where = {n.id: n for n in layout.nodes}
    for m in members:
        n = where[m]
        assert box.x0 <= n.x - n.w / 2 and n.x + n.w / 2 <= box.x1 and box.y0 <= n.y - n.h / 2 and n.y + n.h / 2 <= box.y1
    assert view.canvas.expanded == ["layers.1"]
    with pytest.raises(KeyError, match="groups are layers.0, layers.2"):
        view.expand("layers.7")
    view.collapse_group("layers.1")
    assert layout.boxes and not view.layout.boxes and "layers.1" in view.layout.groups


def test_a_double_click_in_the_browser_expands_through_the_synced_state():
    """The front end asks for an expansion by setting ``expanded``; the kernel relays the
    graph out and sends the new scene; a group that does not exist is dropped."""
    view = GraphView(_mlp(), collapse="layers")
    view.canvas.expanded = ["layers.0", "nope"]
    assert view.layout.expanded == ("layers.0",) and view.canvas.expanded == ["layers.0"]
    assert any(b["id"] == "layers.0" for b in view.canvas.scene["boxes"])


def test_a_node_inside_a_group_highlights_only_its_own_edges():
    """Selecting the first op of layers.1 (collapsed) highlights the edge that brings its
    input into layers.1, not the edge that leaves layers.1 (another op's output);
    selecting the group itself highlights every edge at it."""
    dg = _mlp()
    scene = graph_scene(graph_layout(dg, collapse="layers"), dg)
    node_of = scene["node_of"]
    first = next(n for n in dg.graph.nodes if node_of.get(n.name) == "layers.1" and n.op == "call_function")
    inputs = {node_of.get(a.name, a.name) for a in first.all_input_nodes} - {"layers.1"}
    edges = scene["edges"]
    own = {(edges[i]["s"], edges[i]["d"]) for i in own_edges(scene, first.name)}
    assert own and own == {(s, "layers.1") for s in inputs}
    group = {(edges[i]["s"], edges[i]["d"]) for i in own_edges(scene, "layers.1")}
    assert group == {(e["s"], e["d"]) for e in edges if "layers.1" in (e["s"], e["d"])}
    leaving = {e for e in group if e[0] == "layers.1"}
    assert leaving and not leaving & own


def test_search_finds_names_containing_the_text_prefix_first():
    """Search is case-insensitive, lists names starting with the text first, each once."""
    assert search_names(["add_1", "linear", "Add", "padd", "add_1"], "ADD") == ["add_1", "Add", "padd"]
    assert search_names(["a"], "  ") == []
    view = GraphView(_mlp(), collapse="layers")
    assert view.search("layers.")[:3] == ["layers.0", "layers.1", "layers.2"]
    assert view.search("linear")[0].startswith("linear")


def test_without_graphviz_the_layout_falls_back_to_rows_and_says_so(monkeypatch):
    """No ``dot`` on PATH: a LayoutWarning says how to install Graphviz, the layout uses
    rows (every edge still points down, no two nodes overlap), and the view says why."""
    monkeypatch.setattr(_graphviz, "dot_executable", lambda: None)
    _, _, dg = residual_two_devices()
    with pytest.warns(LayoutWarning, match="apt-get install graphviz"):
        layout = graph_layout(dg)
    assert layout.engine == "rows" and "Graphviz" in layout.note
    row = {n.id: n.layer for n in layout.nodes}
    assert all(row[a.name] < row[n.name] for n in dg.graph.nodes for a in n.all_input_nodes)
    assert len({(n.x, n.y) for n in layout.nodes}) == len(layout.nodes)
    with pytest.warns(LayoutWarning):
        view = GraphView(dg)
    assert "laid out in rows" in view.summary.value


def test_graph_widget_state_follows_a_click_and_a_zoom():
    """A click (selected + focus from the browser) gives the kernel the node's spec; a
    zoom sets the viewbox; neither needs a redraw of the scene."""
    _, _, dg = residual_two_devices()
    view = GraphView(dg)
    scene = view.canvas.scene
    copy = dg.copies[0]
    click(view, copy.name)
    assert view.canvas.detail["key"] == copy.name and copy.reason in str(view.canvas.detail["rows"])
    view.canvas.viewbox = [10.0, 20.0, 300.0, 200.0]
    assert view.canvas.scene is scene
    with pytest.raises(KeyError, match="no node named"):
        view.select("nope")


def test_the_canvas_ships_its_front_end_and_a_short_text_repr():
    """The widget's front end is the package's own ES module and stylesheet (nothing
    fetched at run time); the scene goes out as JSON; a plain-text front end sees one
    line, not the widget tree; an unknown drawing kind is refused."""
    import json

    import traitlets

    from workbench.views import ViewCanvas

    _, _, dg = residual_two_devices()
    view = GraphView(dg)
    esm = str(view.canvas._esm)
    assert "export default" in esm and "http" not in esm.replace("http://www.w3.org/2000/svg", "")
    state = view.canvas.get_state()
    assert isinstance(state["scene"], str) and json.loads(state["scene"])["nodes"]
    text = view._repr_mimebundle_()["text/plain"]
    assert text.startswith("GraphView: ") and "\n" not in text and len(text) < 300
    with pytest.raises(traitlets.TraitError, match="unknown view kind"):
        ViewCanvas(kind="sankey")
