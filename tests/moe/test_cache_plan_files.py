"""Expert-cache plans saved and loaded: the node facts the runtime charges by survive the
file, so a loaded plan estimates and runs exactly as the one that was saved; a plan the
file format cannot hold is refused before anything is written."""

import json
import zipfile

import pytest
import torch

import workbench as wb
from workbench.json_fields import JsonFieldError
from workbench.moe.strategies import expert_cache
from workbench.node_facts import copy_stream_op, facts_to_json, mark_copy_stream, mark_row_share, restore_facts, row_share
from workbench.planning.memory_plan import PlanSaveError
from workbench.runtime import stage_inputs
from workbench.machine import CostModel

from conftest import moe_tiny


def _facts(plan):
    return {n.name: (copy_stream_op(n), row_share(n)) for n in plan.device_graph.graph.nodes}


@pytest.mark.parametrize("on_miss", ["host_compute", "copy"])
def test_a_loaded_expert_cache_plan_estimates_and_runs_as_saved(tmp_path, on_miss):
    """A static_hot cache plan read back from its file carries the same node facts (row
    shares of the host-computed misses), estimates the same timeline at a partial hit
    rate and, run on sim,
    gives the same outputs, timeline and row-mask figures as the plan that was saved."""
    _, _, inputs, program = moe_tiny()
    plan = wb.plan(expert_cache(3, "static_hot", on_miss=on_miss).apply(program), "greedy")
    path = tmp_path / "cache.wbplan"
    plan.save(path)
    loaded = wb.load_plan(path)
    assert _facts(loaded) == _facts(plan)
    if on_miss == "host_compute":
        assert any(share is not None for _, share in _facts(plan).values())
    # a row share changes the estimate only below a full miss rate
    assert wb.estimate(loaded, CostModel(), prefetch_hit_rate=0.5).events == wb.estimate(plan, CostModel(), prefetch_hit_rate=0.5).events
    saved_run, loaded_run = (wb.run(p, *stage_inputs(p.device_graph, inputs, "sim"), backend="sim") for p in (plan, loaded))
    assert loaded_run.timeline.events == saved_run.timeline.events
    assert loaded_run.row_masks == saved_run.row_masks and loaded_run.prefetch == saved_run.prefetch
    assert bool(saved_run.row_masks) == (on_miss == "host_compute")
    for got, want in zip(loaded_run.outputs, saved_run.outputs):
        assert torch.equal(wb.runtime.to_host(got), wb.runtime.to_host(want))


def test_a_plan_with_in_place_ops_is_refused_before_writing(tmp_path):
    """An admitting cache (lru) updates its state in place, which a plan file cannot hold:
    save names the op in a PlanSaveError (a WorkbenchError) and writes no file."""
    _, _, _, program = moe_tiny()
    plan = wb.plan(expert_cache(3, "lru").apply(program), "greedy")
    path = tmp_path / "lru.wbplan"
    with pytest.raises(PlanSaveError, match="expert_cache_admit") as info:
        plan.save(path)
    assert isinstance(info.value, wb.WorkbenchError)
    assert not path.exists()


def test_a_node_facts_table_naming_a_missing_node_is_refused(tmp_path):
    """A plan file whose node-facts table names a node the saved graph lacks does not
    load: the error names the field."""
    _, _, _, program = moe_tiny()
    plan = wb.plan(expert_cache(3, "static_hot", on_miss="host_compute").apply(program), "greedy")
    path = tmp_path / "cache.wbplan"
    plan.save(path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    document = json.loads(members["plan.json"])
    shares = document["device_graph"]["node_facts"]["row_share"]
    name = next(iter(shares))
    shares["no_such_node"] = shares.pop(name)
    members["plan.json"] = json.dumps(document).encode()
    bad = tmp_path / "bad.wbplan"
    with zipfile.ZipFile(bad, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
    with pytest.raises(wb.WorkbenchError, match=r"node_facts\.row_share.*no_such_node"):
        wb.load_plan(bad)


def _graph():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    mask = graph.call_function(torch.ne, (x, 0))
    host = graph.call_function(torch.neg, (x,))
    write = graph.call_function(torch.abs, (x,))
    graph.output((host, write, mask))
    return graph, mask, host, write


def test_node_facts_round_trip_through_json():
    """facts_to_json then restore_facts on a copy of the graph without meta gives every
    node the fact it had, and no other node one."""
    graph, mask, host, write = _graph()
    mark_row_share(host, mask, where=False)
    mark_copy_stream(write, 96)
    data = json.loads(json.dumps(facts_to_json(graph)))
    fresh, *_ = _graph()
    restore_facts(fresh, data)
    assert {n.name: (copy_stream_op(n), row_share(n)) for n in fresh.nodes} == {
        n.name: (copy_stream_op(n), row_share(n)) for n in graph.nodes
    }


def test_a_bad_node_facts_table_changes_no_node():
    """A mask naming no node is a JsonFieldError naming the field, and the facts listed
    before it are not recorded either."""
    graph, mask, host, write = _graph()
    data = {"copy_stream": {write.name: 8}, "row_share": {host.name: {"mask": "gone", "where": True}}}
    with pytest.raises(JsonFieldError, match="mask"):
        restore_facts(graph, data)
    assert all(copy_stream_op(n) is None and row_share(n) is None for n in graph.nodes)
