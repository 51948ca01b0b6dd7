"""The explorer's groups and history: module groups found from the module hierarchy
(the MoE's routed experts, attention, shared expert, router, embedding, LM head),
op groups behind the toggle, and the table of placements tried."""

from __future__ import annotations

import fnmatch

import pytest

from workbench.place import module_paths
from workbench.moe.strategies import EXPERT_MODULES, experts_on_host
from workbench.views import PlacementExplorer, explore, expert_container_names, module_groups
from workbench.views.explorer import placement_text

from views_helpers import captured, tiny_moe


@pytest.mark.slow
def test_moe_module_groups_name_the_parts_of_the_model():
    """The tiny MoE's module groups are the roles a researcher asks about; the routed
    experts are exactly the ops the strategies place as experts (EXPERT_MODULES; getitem
    nodes follow their producer and are never claimed), and every claimable op is in one
    group."""
    _, _, prog = tiny_moe()
    groups = module_groups(prog)
    for role in ("routed experts", "shared expert", "router", "attention", "embedding", "LM head", "norms"):
        assert role in groups.labels, groups.labels
    assert expert_container_names(prog) == ("layers.*.mlp.experts",)
    in_experts = {
        n.name for n in prog.graph.nodes
        if n.op == "call_function" and "getitem" not in str(n.target)
        and any(fnmatch.fnmatchcase(p, EXPERT_MODULES) for p in module_paths(n))
    }
    assert set(groups.members["routed experts"]) == in_experts
    members = [m for ms in groups.members.values() for m in ms]
    assert len(members) == len(set(members))
    lm_head = {n.name for n in prog.graph.nodes if n.op == "call_function" and "lm_head" in module_paths(n)}
    assert set(groups.members["LM head"]) == lm_head


@pytest.mark.slow
def test_experts_on_the_host_by_module_group_is_the_experts_on_host_strategy():
    """Every group on cuda:0 but the routed experts gives the same copies as the
    experts_on_host strategy (same placement rule, found from the module hierarchy)."""
    _, inputs, prog = tiny_moe()
    groups = module_groups(prog)
    assignment = {g: ("cpu" if g == "routed experts" else "cuda:0") for g in groups.labels}
    state = explore(prog, groups.rules(assignment), assignment=assignment)
    want = experts_on_host(skip_copies=False).apply(prog)
    assert state.copy_counts == want.copy_counts() and state.copy_bytes == want.copy_bytes()


def test_op_groups_toggle_and_history_of_placements_tried():
    """The toggle swaps module groups for op groups (each where most of its ops were); every
    placement computed is one row of the history, once per distinct setting, with its
    copies, bytes, arenas and modeled time; restore brings a row back."""
    _, inputs, prog = captured("residual")
    ex = PlacementExplorer(prog, inputs)
    assert ex.group_set.kind == "module" and "ups.*" in ex.groups
    ex.set_group("ups.*", "cuda:0")
    ex.set_flags(skip_h2d=True)
    ex.set_group("ups.*", "cpu")
    ex.set_flags(skip_h2d=False)  # the first setting again: no new row
    history = ex.history
    assert list(history["placement"]) == ["all on cpu", "ups.* on cuda:0, the rest on cpu", "ups.* on cuda:0, the rest on cpu", "all on cpu"]
    assert list(history["skip_h2d"]) == [False, False, True, True]
    row = history.iloc[1]
    state = explore(prog, {"cuda:0": ["module:ups.*"]})
    assert row["copies"] == state.copies and row["h2d_bytes"] == state.copy_bytes["h2d"]
    assert row["arena_cuda:0"] == state.arena_bytes["cuda:0"] and row["time_us"] > 0
    assert "▶" in ex.history_html.value and "ups.* on cuda:0" in ex.history_html.value
    bundle = ex._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle and "placements tried" not in bundle["text/html"]
    assert "ups.* on cuda:0" in bundle["text/html"] and bundle["text/plain"].startswith("PlacementExplorer: 4 module groups")
    ex.restore(1)
    assert ex.assignment()["ups.*"] == "cuda:0" and not ex.state.skip_h2d and len(ex.history) == 4
    ex.grouping_toggle.value = "op"
    assert ex.group_set.kind == "op" and {d for g, d in ex.assignment().items() if g != "aten.linear"} == {"cpu"}
    assert "aten.linear" in ex.group_controls
    with pytest.raises(ValueError, match="other groups"):
        ex.restore(1)


def test_explorer_links_its_views():
    """The explorer's graph, buffer and timeline views share one selection."""
    _, inputs, prog = captured("residual")
    ex = PlacementExplorer(prog, inputs, initial={"aten.linear": "cuda:0"}, grouping="op")
    graph, buffers = ex.view("graph"), ex.view("buffers")
    copy = ex.state.graph.copies[0].name
    graph.select(copy)
    assert buffers.focus == copy and buffers.selected == ex.state.plan.storage_of[copy]


def test_a_placement_in_words_names_the_exceptions_to_the_rest():
    """The device with the most groups is "the rest"; the others are named."""
    assert placement_text({}) == "all on cpu"
    assert placement_text({"a": "cuda:0", "b": "cuda:0"}) == "all on cuda:0"
    assert placement_text({"experts": "cpu", "attention": "cuda:0", "router": "cuda:0"}) == "experts on cpu, the rest on cuda:0"
    assert placement_text({"a": "cuda:1", "b": "cpu", "c": "cpu", "d": "cuda:0"}) == "d on cuda:0; a on cuda:1, the rest on cpu"
