"""One record of facts per node: every fact under one key, tags included, saved once."""

import json

import pytest
import torch
import torch.fx

from workbench.json_fields import JsonFieldError
from workbench.node_facts import (
    FACTS_KEY,
    NodeFactError,
    NodeFacts,
    facts_of,
    facts_to_json,
    mark_copy_stream,
    mark_row_share,
    mark_tag,
    restore_facts,
    tag_of,
    tagged,
)


def _graph():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    mask = graph.call_function(torch.ne, (x, 0))
    host = graph.call_function(torch.neg, (x,))
    graph.output((host, mask))
    return graph, mask, host


def test_every_fact_of_a_node_lives_in_one_record_under_one_key():
    """A stream fact, a row share and two tags on one node are one NodeFacts under one
    meta key; other nodes have the empty record."""
    graph, mask, host = _graph()
    mark_copy_stream(host, 64)
    mark_row_share(host, mask, where=True)
    mark_tag(host, "layer", 3)
    mark_tag(host, "another", 1)
    keys = [k for k in host.meta if k.startswith("workbench")]
    assert keys == [FACTS_KEY]
    facts = facts_of(host)
    assert isinstance(facts, NodeFacts) and facts.copy_stream.nbytes == 64 and facts.row_share.mask == mask.name
    assert facts.tags == (("another", 1), ("layer", 3)) and tag_of(host, "layer") == 3
    assert facts_of(mask) == NodeFacts() and tag_of(mask, "layer") is None
    assert tagged(graph, "layer") == {host.name: 3}


def test_tags_round_trip_and_a_graph_without_tags_is_written_as_before():
    """Saved and restored, tags come back on the same nodes; with no tag the table has
    only the two tables files written before tags existed have."""
    graph, mask, host = _graph()
    mark_row_share(host, mask, where=False)
    assert set(facts_to_json(graph)) == {"copy_stream", "row_share"}
    mark_tag(host, "layer", 2)
    data = json.loads(json.dumps(facts_to_json(graph)))
    assert data["tags"] == {"layer": {host.name: 2}}
    fresh, fresh_mask, fresh_host = _graph()
    restore_facts(fresh, data)
    assert facts_of(fresh_host) == facts_of(host)


def test_bad_tags_are_refused():
    """A tag on a node the graph lacks is a JsonFieldError naming the field; a tag without
    a name or with a non-integer value is a NodeFactError."""
    graph, mask, host = _graph()
    with pytest.raises(JsonFieldError, match=r"node_facts\.tags\.layer names 'gone'"):
        restore_facts(graph, {"copy_stream": {}, "row_share": {}, "tags": {"layer": {"gone": 1}}})
    with pytest.raises(NodeFactError, match="non-empty string"):
        mark_tag(host, "", 1)
    with pytest.raises(NodeFactError, match="holds an integer"):
        mark_tag(host, "layer", 1.5)


def _device_graph():
    import workbench as wb
    from workbench.models.examples import example

    model, inputs = example("residual")
    program = wb.capture(model, inputs)
    return wb.propagate(wb.place(program, {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu"]}))


def test_a_device_graphs_tables_are_read_only_views_of_its_node_records():
    """Every entry of node_device, residency, input_devices and the copy table is the
    fact of that node's one record (and every record's placement fact is in a table);
    the tables cannot be written through."""
    dg = _device_graph()
    assert dg.copies, "the placement makes copies"
    for node in dg.graph.nodes:
        facts = facts_of(node)
        assert facts.device == dg.node_device.get(node.name)
        assert facts.copy == dg.copy_table.get(node.name)
        assert facts.resident == dg.residency.get(node.name)
        assert facts.input_device == dg.input_devices.get(node.name)
    with pytest.raises(TypeError):
        dg.node_device["x"] = dg.node_device[dg.copies[0].name]  # type: ignore[index]


def test_a_device_graph_made_from_other_tables_leaves_the_first_as_it_was():
    """A device graph built over the same graph with a copy record changed records it on
    its own copy of the graph: the first one's records and tables are unchanged."""
    import dataclasses

    dg = _device_graph()
    first = dg.copies[0]
    changed = dataclasses.replace(first, nbytes=first.nbytes + 1)
    other = dataclasses.replace(dg, copies=(changed, *dg.copies[1:]))
    assert other.copies[0] == changed and other.graph is not dg.graph
    assert dg.copies[0] == first and facts_of(next(n for n in dg.graph.nodes if n.name == first.name)).copy == first
    same = dataclasses.replace(dg, skip_d2h_for_method_outputs=dg.skip_d2h_for_method_outputs)
    assert same.graph is dg.graph  # the same records: nothing to copy


def test_tables_naming_no_node_of_the_graph_are_refused():
    """A node_device entry for a node the graph lacks, or a copy listed twice, is a
    DeviceGraphError naming it."""
    import dataclasses

    from workbench.device_graph import DeviceGraphError

    dg = _device_graph()
    with pytest.raises(DeviceGraphError, match="node_device names 'gone'"):
        dataclasses.replace(dg, node_device={**dg.node_device, "gone": dg.node_device[dg.copies[0].name]})
    with pytest.raises(DeviceGraphError, match="twice"):
        dataclasses.replace(dg, copies=(dg.copies[0], *dg.copies))
