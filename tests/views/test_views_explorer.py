"""The placement explorer: ``explore`` (plain function) and the widget that drives it."""

from __future__ import annotations

import pytest

import workbench as wb
from workbench.views import PlacementExplorer, default_groups, explore, module_groups, op_groups, rules_for

from views_helpers import captured


def _input_h2d(state):
    return [c for c in state.graph.copies if c.kind == "h2d" and c.value in state.graph.program.user_inputs]


def test_explore_matches_the_pipeline():
    """explore is place → propagate → plan: its copies and arenas equal running the
    stages by hand."""
    _, _, prog = captured("residual")
    state = explore(prog, {"cuda:0": ["aten.linear"]}, algorithm="naive")
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear"]}))
    assert state.copy_counts == dg.copy_counts() and state.copy_bytes == dg.copy_bytes()
    assert state.plan.algorithm == "naive"
    assert state.arena_bytes == wb.plan(dg, algorithm="naive").arena_bytes
    assert set(state.summary()["device"]) == {"cpu", "cuda:0"}


def test_skip_h2d_removes_the_h2d_copies_of_inputs():
    """With the MLP's first linear on cuda:0 the input is copied in; skip-h2d removes
    exactly that copy and no other."""
    _, _, prog = captured("mlp")
    off = explore(prog, {"cuda:0": ["aten.linear"]})
    on = explore(prog, {"cuda:0": ["aten.linear"]}, skip_h2d=True)
    assert len(_input_h2d(off)) == 1 and _input_h2d(on) == []
    assert on.copy_counts["h2d"] == off.copy_counts["h2d"] - 1
    assert on.copy_counts["d2h"] == off.copy_counts["d2h"]


def test_moving_a_group_to_a_second_device_creates_d2d_copies():
    """gelu on cuda:1 between linears on cuda:0: every linear → gelu → linear crossing is
    one direct d2d copy (two per block), replacing host round trips."""
    _, _, prog = captured("residual")
    one = explore(prog, {"cuda:0": ["aten.linear", "aten.gelu"]})
    two = explore(prog, {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu"]})
    assert one.copy_counts["d2d"] == 0
    assert two.copy_counts["d2d"] == 4
    assert {(str(c.src), str(c.dst)) for c in two.graph.copies if c.kind == "d2d"} == {("cuda:0", "cuda:1"), ("cuda:1", "cuda:0")}


def test_op_groups_are_the_claimable_op_packets():
    """One op group per op packet of the graph, most frequent first (ties by name); the
    rules they make leave host groups out."""
    _, _, prog = captured("residual")
    groups = op_groups(prog).patterns
    assert list(groups) == ["aten.linear", "aten.add", "aten.gelu", "aten.layer_norm"]
    assert all(groups[g] == (g,) for g in groups)
    assert rules_for(groups, {"aten.gelu": "cuda:1", "aten.add": "cpu"}) == {"cuda:1": ["aten.gelu"]}
    with pytest.raises(KeyError, match="unknown group"):
        rules_for(groups, {"aten.nothing": "cuda:0"})


def test_default_groups_come_from_the_module_hierarchy():
    """The default groups are module groups: for the residual example the norms (found
    by their class), the ups.* and downs.* linears (by module path), and the root ops;
    every claimable op is in exactly one group."""
    _, _, prog = captured("residual")
    groups = module_groups(prog)
    assert list(groups.patterns) == list(default_groups(prog)) == ["norms", "downs.*", "ups.*", "other ops"]
    claimable = [n.name for n in prog.graph.nodes if n.op == "call_function" and not str(n.target).endswith("getitem")]
    members = [m for ms in groups.members.values() for m in ms]
    assert sorted(members) == sorted(claimable)
    linears = {n.name for n in prog.graph.nodes if "linear" in str(n.target)}
    assert set(groups.members["ups.*"]) | set(groups.members["downs.*"]) == linears


def test_explorer_controls_change_the_copy_count_as_explore_says():
    """Each control change recomputes the state; the copy counts equal explore's for the
    same settings."""
    model, inputs, prog = captured("residual")
    ex = PlacementExplorer(prog, inputs, initial={"aten.linear": "cuda:0"}, grouping="op")
    assert ex.state.copy_counts == explore(prog, {"cuda:0": ["aten.linear"]}).copy_counts
    ex.set_group("aten.gelu", "cuda:1")
    assert ex.state.copy_counts["d2d"] == 4
    ex.set_flags(skip_h2d=True)
    want = explore(prog, {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu"]}, skip_h2d=True)
    assert ex.state.copy_counts == want.copy_counts and ex.state.skip_h2d
    ex.set_algorithm("naive")
    assert ex.state.plan.algorithm == "naive"
    assert f"{ex.state.copies} copies" in ex.status.value
    assert "wb-placement-explorer" in ex.widget._dom_classes


def test_explore_runs_every_point_including_skip_h2d():
    """With inputs, explore runs the plan on the simulated backend; the run's copies are
    the graph's copies, and with skip-h2d the input is staged on the device so the run
    moves no bytes for it."""
    _, inputs, prog = captured("mlp")
    for skip in (False, True):
        state = explore(prog, {"cuda:0": ["aten.linear"]}, skip_h2d=skip, inputs=inputs)
        assert state.run is not None
        assert state.run.copy_counts() == state.copy_counts
        assert state.timeline.bytes_moved() == state.copy_bytes
        assert any(e.node == "x_to_cuda0" for e in state.timeline.events) is not skip


def test_explorer_views_follow_the_state():
    """The views are built for the current state: the buffer view shows its plan; after a
    change the graph view shows the new graph."""
    model, inputs, prog = captured("residual")
    ex = PlacementExplorer(prog, inputs, initial={"aten.linear": "cuda:0"}, grouping="op")
    assert ex.view("graph").graph is ex.state.graph
    assert ex.view("buffers").plan is ex.state.plan
    assert ex.view("timeline").data.summary.events == len(ex.state.run.timeline)
    ex.tabs.selected_index = 1
    assert ex.tabs.children[1] is ex.views["buffers"].widget
    ex.set_group("aten.gelu", "cuda:0")
    assert ex.view("graph").graph is ex.state.graph
    assert ex.tabs.children[1] is ex.views["buffers"].widget


def test_a_failing_placement_is_shown_and_the_last_state_kept():
    """Two groups that claim the same ops equally specifically, sent to different devices,
    conflict: the error is shown, the previous state stays. (A more specific pattern would
    simply win: placement's precedence.)"""
    model, inputs, prog = captured("residual")
    groups = {"linear": ["aten.linear"], "everything": ["aten.linear", "aten.*"]}
    ex = PlacementExplorer(prog, inputs, groups=groups, initial={"linear": "cuda:0"})
    before = ex.state
    ex.set_group("everything", "cuda:1")
    assert ex.state is before and "claimed by pattern" in ex.error
    assert "cannot compute this placement" in ex.status.value
    ex.set_group("everything", "cpu")
    assert ex.error is None and ex.state is not before


def test_switching_groupings_keeps_the_placement():
    """Module groups → op groups → module groups: each new group starts where most of its
    ops were placed, so a placement of every linear on cuda:0 survives both switches (the
    same copies), instead of every group going back to the host."""
    model, inputs, prog = captured("residual")
    ex = PlacementExplorer(prog, inputs, initial={"ups.*": "cuda:0", "downs.*": "cuda:0"})
    before = ex.state.copy_counts
    assert sum(before.values()) > 0
    ex.set_grouping("op")
    assert ex.assignment()["aten.linear"] == "cuda:0"
    assert {d for g, d in ex.assignment().items() if g != "aten.linear"} == {"cpu"}
    assert ex.state.copy_counts == before
    ex.set_grouping("module")
    assert ex.assignment()["ups.*"] == ex.assignment()["downs.*"] == "cuda:0"
    assert ex.state.copy_counts == before
    assert "max-width:100%" in ex.history_html.value
