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
