"""Every saved type reads back what it wrote: Placement, CopyRecord, DeviceGraph, MemoryPlan."""

import json

import pytest
import torch
import torch.utils._pytree as pytree
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import workbench as wb
from workbench.models.examples import EXAMPLES
from workbench.json_fields import JsonFieldError
from workbench.planning.algorithms import ALGORITHMS

from conftest import captured

DEVICES = ("cpu", "cuda:0", "cuda:1")


@st.composite
def plans(draw):
    """A random placement of a built-in example, propagated with random flags and
    planned by a random algorithm and alignment."""
    name = draw(st.sampled_from(sorted(EXAMPLES)))
    _, _, program = captured(name)
    ops = [n.name for n in program.graph.nodes if n.op == "call_function"]
    chosen = draw(st.lists(st.sampled_from(DEVICES), min_size=len(ops), max_size=len(ops)))
    rules = lambda node: dict(zip(ops, chosen)).get(node.name)  # noqa: E731
    placed = wb.place(program, rules)
    dg = wb.propagate(placed, draw(st.booleans()), draw(st.booleans()))
    algorithm = draw(st.sampled_from([a for a in ALGORITHMS if a != "best"]))
    return wb.plan(dg, algorithm, alignment=draw(st.sampled_from([1, 8, 16, 64])))


def _through_json(data):
    """What a file would hold: JSON text, read back."""
    return json.loads(json.dumps(data))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_every_saved_type_reads_back_what_it_wrote(plan):
    """``from_json(to_json(x))`` equals ``x`` field by field, through real JSON text, for the
    placement, the copy table, the device graph and the plan — devices, kinds and roles
    come back typed, not as strings that merely compare equal."""
    dg = plan.device_graph
    placement = wb.Placement.from_json(_through_json(dg.placement.to_json()), dg.program)
    assert placement.op_device == dg.placement.op_device
    assert placement.delegates == dg.placement.delegates and placement.unmatched == dg.placement.unmatched
    assert all(type(d) is wb.Device for d in placement.op_device.values())

    graph = wb.DeviceGraph.from_json(_through_json(dg.to_json()), placement, dg.exported_program())
    assert graph.copies == dg.copies
    assert all(type(c.kind) is wb.CopyKind and type(c.role) is wb.CopyRole for c in graph.copies)
    assert graph.node_device == dg.node_device and graph.residency == dg.residency
    assert graph.input_devices == dg.input_devices and graph.user_outputs == dg.user_outputs
    assert (graph.skip_h2d_for_method_inputs, graph.skip_d2h_for_method_outputs) == (
        dg.skip_h2d_for_method_inputs,
        dg.skip_d2h_for_method_outputs,
    )

    back = wb.MemoryPlan.from_json(_through_json(plan.to_json()), graph)
    for field in ("algorithm", "alignment", "steps", "allocations", "storage_of", "unplanned", "capacity"):
        assert getattr(back, field) == getattr(plan, field), field
    for field in ("arena_bytes", "lower_bound", "constant_bytes"):
        assert dict(getattr(back, field)) == dict(getattr(plan, field)), field
        assert all(type(d) is wb.Device for d in getattr(back, field)), field
    back.verify()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans())
def test_a_plan_file_runs_like_the_plan_it_was_saved_from(tmp_path_factory, plan):
    """A saved and loaded plan runs in its arenas to the same outputs as eager PyTorch."""
    from workbench.planning.arena_execution import run_in_arenas

    path = tmp_path_factory.mktemp("plans") / "p.wbplan"
    plan.save(path)
    loaded = wb.load_plan(path)
    name = next(n for n in EXAMPLES if captured(n)[2] is plan.device_graph.program)
    model, inputs, _ = captured(name)
    with torch.no_grad():
        got, want = pytree.tree_leaves(run_in_arenas(loaded, *inputs)), pytree.tree_leaves(model(*inputs))
    assert len(got) == len(want) and all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want))


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d.pop("kind"), "copy.kind is missing"),
        (lambda d: d.update(kind="h2x"), "unknown copy kind 'h2x'"),
        (lambda d: d.update(role="scatter"), "'scatter' is not a valid CopyRole"),
        (lambda d: d.update(nbytes=-1), "copy.nbytes must be a non-negative integer"),
        (lambda d: d.update(nbytes="12"), "copy.nbytes must be a non-negative integer"),
        (lambda d: d.update(src="tpu:0"), "copy.src: unknown device type 'tpu'"),
        (lambda d: d.update(consumers=[1]), "copy.consumers[0] must be a string"),
    ],
)
def test_a_bad_copy_record_names_its_field(edit, field):
    """A copy record with a missing, mistyped or unknown field is refused with its path."""
    _, _, program = captured("residual")
    dg = wb.propagate(wb.place(program, {"cuda:0": ["aten.linear"]}))
    data = dg.copies[0].to_json()
    edit(data)
    with pytest.raises(JsonFieldError) as info:
        wb.CopyRecord.from_json(data)
    assert field in str(info.value)
