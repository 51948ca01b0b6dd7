"""Overlap scheduling: a valid reorder that issues copies early and keeps results."""

import pytest
import torch

import workbench as wb
from workbench.copy_ops import is_copy_node
from workbench.schedule import overlap_schedule, schedule

from conftest import captured


def _dg(name="residual"):
    return wb.propagate(wb.place(captured(name)[2], {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu"]}))


def test_order_is_topological_and_complete():
    """Rule 1: same nodes, same names and devices, every input before its user."""
    dg = _dg()
    out = overlap_schedule(dg)
    nodes = list(out.graph.nodes)
    assert sorted(n.name for n in nodes) == sorted(n.name for n in dg.graph.nodes)
    seen = set()
    for n in nodes:
        assert all(a.name in seen for a in n.all_input_nodes), n.name
        seen.add(n.name)
    assert nodes[-1].op == "output" and out.node_device == dg.node_device and out.copies == dg.copies
    assert [out.order_of(n.name) for n in nodes] == list(range(len(nodes)))


def test_copies_issue_as_soon_as_their_input_exists():
    """Rule 2: each copy directly follows its input, or other copies/placeholders that
    became ready at the same time."""
    out = overlap_schedule(_dg("attention"))
    nodes = list(out.graph.nodes)
    pos = {n: i for i, n in enumerate(nodes)}
    for n in nodes:
        if is_copy_node(n):
            source = n.args[0]
            between = nodes[pos[source] + 1 : pos[n]]
            assert all(is_copy_node(b) or b.op == "placeholder" for b in between), n.name


def test_copy_consumers_wait_for_independent_compute():
    """Rule 3: an op reading a fresh copy is issued after compute that was ready with it."""

    class TwoBranches(torch.nn.Module):
        def forward(self, x, y):
            a = torch.relu(x) * 2.0  # needs x on the device
            b = torch.sigmoid(y) + 1.0  # independent host-free work on the device
            return a + b

    prog = wb.capture(TwoBranches(), (torch.randn(4), torch.randn(4)))
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.relu", "aten.mul", "aten.add"], "cuda:1": []}))
    out = overlap_schedule(dg)
    names = [n.name for n in out.graph.nodes]
    assert names.index("x_to_cuda0") < names.index("sigmoid") < names.index("relu")


@pytest.mark.parametrize("name", ["mlp", "residual", "fanout", "attention"])
def test_scheduled_graph_computes_the_same(name):
    """The reordered graph, planned and run in arenas, equals eager."""
    from workbench.planning.arena_execution import run_in_arenas

    model, inputs, _ = captured(name)
    dg = overlap_schedule(_dg(name))
    plan = wb.plan(dg, "best")
    plan.verify()
    got, want = run_in_arenas(plan, *inputs), model(*inputs)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        assert torch.allclose(g, w, atol=1e-5)


def test_unknown_schedule():
    """An unknown order name lists the valid ones."""
    with pytest.raises(ValueError, match="captured, overlap"):
        schedule(_dg(), "fastest")
