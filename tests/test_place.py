"""Placement: rules → a device per op, fused into acyclic delegates."""

import random
import warnings

import pytest
import torch
import torch.fx

import workbench as wb
from workbench import Device
from workbench.models.examples import example
from workbench.place import fuse_delegates

from conftest import captured, moe_tiny
from workbench.place import module_paths

CUDA0, CUDA1 = Device("cuda", 0), Device("cuda", 1)


def _prog(name="fanout"):
    return captured(name)[2]


def test_unmatched_ops_run_on_cpu():
    """Rule 1: ops that no pattern claims are placed on cpu and are in no delegate."""
    placed = wb.place(_prog(), {"cuda:0": ["aten.linear"]})
    for node, dev in placed.op_device.items():
        op = str(next(n for n in placed.program.graph.nodes if n.name == node).target)
        assert dev == (CUDA0 if "linear" in op else wb.CPU)
        assert (node in placed.node_delegate) == (dev != wb.CPU)


def test_packet_name_full_name_and_glob_match():
    """'aten.mul' matches aten.mul.Tensor; full names and globs match too."""
    prog = _prog()
    for pattern in ["aten.mul", "aten.mul.Tensor", "aten.mu*", "torch.ops.aten.mul.Tensor"]:
        placed = wb.place(prog, {"cuda:0": [pattern]})
        assert placed.ops_on("cuda:0") == ("mul",), pattern


def test_module_and_node_patterns():
    """'module:' matches the module an op was traced in; 'node:' matches node names."""
    prog = _prog("residual")
    placed = wb.place(prog, {"cuda:0": ["module:ups.*"]})
    assert set(placed.ops_on("cuda:0")) == {"linear", "linear_2"}
    placed = wb.place(prog, {"cuda:0": ["node:gelu*"]})
    assert set(placed.ops_on("cuda:0")) == {"gelu", "gelu_1"}


def test_getitem_follows_its_producer():
    """Rule 2 of placement: getitem nodes run where their tuple was produced."""
    placed = wb.place(_prog("attention"), {"cuda:0": ["aten.topk", "aten.chunk"]})
    graph = placed.program.graph
    for node in graph.nodes:
        if node.op == "call_function" and node.target.__name__ == "getitem":
            assert placed.op_device[node.name] == placed.op_device[node.args[0].name]
            assert placed.node_delegate[node.name] == placed.node_delegate[node.args[0].name]


def test_callable_rules():
    """A callable node -> device | None places exactly the nodes it names."""
    prog = _prog()
    placed = wb.place(prog, lambda n: "CUDA:1" if n.name.startswith("linear") else None)
    assert set(placed.ops_on("cuda:1")) == {"linear", "linear_1"}
    assert all(d in (wb.CPU, CUDA1) for d in placed.op_device.values())


def test_adjacent_same_device_ops_fuse():
    """Connected ops on one device form one delegate; a host op in between splits them."""
    prog = _prog("mlp")
    placed = wb.place(prog, {"cuda:0": ["aten.linear", "aten.relu"]})
    assert len(placed.delegates) == 1 and len(placed.delegates[0].nodes) == 5
    placed = wb.place(prog, {"cuda:0": ["aten.linear"]})
    assert [d.nodes for d in placed.delegates] == [("linear",), ("linear_1",), ("linear_2",)]


def test_delegates_do_not_fuse_across_devices():
    """Every delegate holds ops of one device only."""
    placed = wb.place(_prog("residual"), {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu", "aten.add"]})
    for d in placed.delegates:
        assert {placed.op_device[n] for n in d.nodes} == {d.device}


def test_unmatched_pattern_warns_and_strict_raises():
    """Rule 3: a pattern that claims nothing is reported; strict makes it an error."""
    prog = _prog()
    with pytest.warns(wb.PlacementWarning, match="aten.conv2d"):
        wb.place(prog, {"cuda:0": ["aten.mul", "aten.conv2d"]})
    with pytest.raises(wb.PlacementError, match="aten.conv2d"):
        wb.place(prog, {"cuda:0": ["aten.conv2d"]}, strict=True)


def test_equally_specific_patterns_for_two_devices_are_an_error():
    """Rule 3: an op claimed for two devices by equally specific patterns names both."""
    with pytest.raises(wb.PlacementError, match="aten.mu\\*.*aten.m\\*l|aten.m\\*l.*aten.mu\\*"):
        wb.place(_prog(), {"cuda:0": ["aten.mu*"], "cuda:1": ["aten.m*l"]})
    with pytest.raises(wb.PlacementError, match="equally specific"):
        wb.place(_prog(), {"cuda:0": ["node:mul"], "cuda:1": ["node:mul"]})


def test_more_literal_op_pattern_wins():
    """Precedence 3: 'aten.mul' beats 'aten.*' for the mul op; 'aten.*' keeps the rest."""
    placed = wb.place(_prog(), {"cuda:0": ["aten.mul"], "cuda:1": ["aten.*"]})
    ops = {n.name: op for n, op in ((n, str(n.target)) for n in placed.program.graph.nodes if n.op == "call_function")}
    for name, device in placed.op_device.items():
        if "getitem" in ops[name]:
            continue
        assert device == (CUDA0 if "mul" in ops[name] else CUDA1), name


def test_all_except_a_module():
    """Precedence 1: {device: ['*'], cpu: ['module:X']} puts X's ops on the host and every
    other op on the device; both patterns claim ops, so nothing is reported."""
    prog = _prog("residual")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        placed = wb.place(prog, {"cuda:0": ["*"], "cpu": ["module:ups.*"]}, strict=True)
    assert set(placed.ops_on("cpu")) == {"linear", "linear_2"}
    assert set(placed.ops_on("cuda:0")) == set(placed.op_device) - {"linear", "linear_2"}


def test_node_pattern_beats_module_patterns():
    """Precedence 1: a node pattern beats module patterns, whatever the order of the rules;
    the module pattern it overrode everywhere is reported."""
    prog = _prog("residual")
    rules = {"cuda:1": ["node:linear_2"], "cuda:0": ["module:ups.1"], "cpu": ["module:*"]}
    with pytest.warns(wb.PlacementWarning, match="'module:ups.1'"):
        placed = wb.place(prog, rules)
    assert placed.op_device["linear"] == wb.CPU  # ups.0: only module:* matches
    assert placed.op_device["linear_2"] == CUDA1  # in ups.1, but named by node:


def test_deeper_module_pattern_wins_over_more_literal_one():
    """Precedence 2 before 3: '*.experts' (depth 4) beats 'layers.*.mlp' (depth 3) for the
    experts' ops although it has fewer literal characters; the rest of the MoE block stays
    with the shallower pattern."""
    *_, prog = moe_tiny()
    placed = wb.place(prog, {"cuda:0": ["module:layers.*.mlp"], "cuda:1": ["module:*.experts"]})
    for node in prog.graph.nodes:
        if node.name not in placed.op_device or node.name not in {n for d in placed.delegates for n in d.nodes}:
            continue
        paths = module_paths(node)
        in_experts = any(p.endswith(".mlp.experts") for p in paths)
        assert placed.op_device[node.name] == (CUDA1 if in_experts else CUDA0), node.name
    assert placed.ops_on("cuda:1") and placed.ops_on("cuda:0")


def test_pattern_that_always_loses_is_reported():
    """Rule 3: a pattern whose every match went to a more specific pattern's device claimed
    nothing, and is reported like one that matched nothing."""
    with pytest.warns(wb.PlacementWarning, match="'aten.mu\\*'"):
        wb.place(_prog(), {"cuda:0": ["aten.mul"], "cuda:1": ["aten.mu*"]})


def test_callable_that_claims_nothing_warns():
    """Rule 3: a callable answering None for every op is reported (an error if strict)."""
    def nowhere(node):
        return None

    with pytest.warns(wb.PlacementWarning, match="nowhere"):
        wb.place(_prog(), nowhere)
    with pytest.raises(wb.PlacementError, match="nowhere"):
        wb.place(_prog(), nowhere, strict=True)


@pytest.mark.parametrize(
    "rules, message",
    [
        ({"tpu:0": ["aten.mul"]}, "unknown device type"),
        ({"cuda:x": ["aten.mul"]}, "bad device index"),
        ({"cuda:0": [3]}, "non-empty string"),
        ({"cuda:0": [""]}, "non-empty string"),
        ({"cuda:0": 5}, "list of op patterns"),
        ({"cuda:0": ["bogus:thing"]}, "unknown prefix"),
        (["aten.mul"], "mapping"),
        ("cuda:0", "mapping"),
    ],
)
def test_malformed_rules(rules, message):
    """Malformed rules are errors that say what is valid."""
    with pytest.raises(wb.PlacementError, match=message):
        wb.place(_prog(), rules)


@pytest.mark.parametrize("answer, message", [(42, "must return a device string"), ("tpu", "unknown device type"), (["cuda"], "must return")])
def test_callable_returning_garbage(answer, message):
    """A callable that returns something that is not a device is a clear error naming the node."""
    with pytest.raises(wb.PlacementError, match=message):
        wb.place(_prog(), lambda n: answer)


def test_callable_that_raises_is_reported():
    """An exception inside the callable is wrapped with the node it failed on."""

    def rule(node):
        raise RuntimeError("boom")

    with pytest.raises(wb.PlacementError, match="boom"):
        wb.place(_prog(), rule)


def test_not_a_program_is_rejected():
    """place needs a Program; an nn.Module is a clear error."""
    model, _ = example("mlp")
    with pytest.raises(wb.PlacementError, match="Program"):
        wb.place(model, {"cuda:0": ["aten.mul"]})


def test_empty_graph():
    """A graph with no ops places to nothing: a warning for the rule, an error if strict."""

    class Identity(torch.nn.Module):
        def forward(self, x):
            return x

    prog = wb.capture(Identity(), (torch.zeros(3),))
    with pytest.warns(wb.PlacementWarning):
        placed = wb.place(prog, {"cuda:0": ["aten.mul"]})
    assert placed.delegates == () and placed.op_device == {}
    with pytest.raises(wb.PlacementError):
        wb.place(prog, {"cuda:0": ["aten.mul"]}, strict=True)
    dg = wb.propagate(placed)
    assert dg.copies == ()
    assert torch.equal(dg.module()(torch.arange(3.0)), torch.arange(3.0))


def _random_graph(n, seed, devices=("cpu", "cuda:0", "cuda:1")):
    rng = random.Random(seed)
    g = torch.fx.Graph()
    vals = [g.placeholder("x")]
    place = {}
    for i in range(n):
        a, b = rng.choice(vals[-6:]), rng.choice(vals[-6:])
        node = g.call_function(torch.ops.aten.add.Tensor, (a, b))
        vals.append(node)
        place[node.name] = Device.parse(rng.choice(devices))
    g.output(vals[-1])
    return g, place


def _quotient_is_acyclic(graph, groups):
    owner = {n: i for i, (_, names) in enumerate(groups) for n in names}
    key = lambda node: ("g", owner[node.name]) if node.name in owner else ("n", node.name)
    edges = {}
    for node in graph.nodes:
        for user in node.users:
            a, b = key(node), key(user)
            if a != b:
                edges.setdefault(a, set()).add(b)
    state = {}

    def visit(v):  # iterative DFS cycle check
        stack = [(v, iter(edges.get(v, ())))]
        state[v] = 1
        while stack:
            u, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[u] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return False
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(edges.get(nxt, ()))))
        return True

    return all(visit(v) for v in list(edges) if v not in state)


@pytest.mark.parametrize("seed", range(40))
def test_fusion_is_acyclic_and_complete(seed):
    """Rule 4: every device op is in exactly one delegate of its device, and contracting
    each delegate to one node leaves the graph acyclic (so delegates can run in order)."""
    graph, place = _random_graph(60, seed)
    groups = fuse_delegates(graph, place)
    names = [n for _, ns in groups for n in ns]
    assert sorted(names) == sorted(n for n, d in place.items() if not d.is_host)
    for device, ns in groups:
        assert all(place[n] == device for n in ns)
    assert _quotient_is_acyclic(graph, groups)


def test_fusion_refuses_a_cycle():
    """a(dev) → b(cpu) → c(dev) with a → c directly: a and c must not fuse."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(torch.ops.aten.relu.default, (x,))
    b = g.call_function(torch.ops.aten.neg.default, (a,))
    c = g.call_function(torch.ops.aten.add.Tensor, (a, b))
    g.output(c)
    groups = fuse_delegates(g, {a.name: CUDA0, b.name: wb.CPU, c.name: CUDA0})
    assert [ns for _, ns in groups] == [[a.name], [c.name]]


def test_fx_partitioner_agrees_on_chains():
    """torch.fx's CapabilityBasedPartitioner and ours give the same delegates on models
    whose device ops form chains, and both are valid."""
    for name, rules in [("mlp", {"cuda:0": ["aten.linear", "aten.relu"]}), ("residual", {"cuda:0": ["aten.linear", "aten.gelu"]})]:
        prog = _prog(name)
        ours = wb.place(prog, rules)
        theirs = wb.place(prog, rules, partitioner="fx")
        assert sorted(d.nodes for d in ours.delegates) == sorted(d.nodes for d in theirs.delegates)


def test_unknown_partitioner():
    """An unknown partitioner name lists the valid ones."""
    with pytest.raises(wb.PlacementError, match="workbench, fx"):
        wb.place(_prog(), {"cuda:0": ["aten.mul"]}, partitioner="magic")


def test_placement_dataframe():
    """to_dataframe has one row per op with its device and delegate."""
    placed = wb.place(_prog(), {"cuda:0": ["aten.linear"]})
    df = placed.to_dataframe()
    assert len(df) == placed.program.num_ops()
    assert set(df[df.device == "cuda:0"].node) == {"linear", "linear_1"}


def test_acyclicity_check_can_fail():
    """The quotient check used above reports a grouping that really is cyclic."""
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(torch.ops.aten.relu.default, (x,))
    b = g.call_function(torch.ops.aten.neg.default, (a,))
    c = g.call_function(torch.ops.aten.add.Tensor, (a, b))
    g.output(c)
    assert not _quotient_is_acyclic(g, [(CUDA0, [a.name, c.name])])


def test_wrapped_ops_are_named_and_placed_like_the_op_they_wrap():
    """An op object wrapping an aten overload in ``_op`` (as ExecuTorch's edge ops do) is
    named by that overload, so op patterns place it without special cases."""
    from workbench.graph_values import op_name, packet_name

    class Wrapped:
        __name__ = "wrapped"

        def __init__(self, op):
            self._op = op

        def __call__(self, *args):
            return self._op(*args)

    add = Wrapped(torch.ops.aten.add.Tensor)
    g = torch.fx.Graph()
    x = g.placeholder("x")
    node = g.call_function(add, (x, x))
    assert op_name(node) == "aten.add.Tensor" and packet_name(node) == "aten.add"
    from workbench.place import pattern_matches

    assert pattern_matches(node, "op", "aten.add") and not pattern_matches(node, "op", "aten.mul")
