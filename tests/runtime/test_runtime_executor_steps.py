"""The executor's steps: which node is an event, on which lane, waiting for what."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import workbench as wb
from workbench.runtime.executor import run, steps_of
from workbench.runtime.steps import _ByteOwners

from conftest import captured


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 64), st.integers(0, 24)), min_size=1, max_size=30))
def test_byte_owners_report_the_previous_owner_of_every_claimed_byte(claims):
    """Claiming [lo, hi) returns exactly the distinct storages that owned some byte of it
    (checked against a byte-by-byte model), and afterwards owns those bytes."""
    owners = _ByteOwners()
    model = [None] * 100
    for i, (lo, length) in enumerate(claims):
        hi = lo + length
        name = f"s{i}"
        got = owners.claim(lo, hi, name)
        want = {model[b] for b in range(lo, hi)} - {None}
        assert set(got) == want and len(got) == len(set(got))
        for b in range(lo, hi):
            model[b] = name


def test_every_event_waits_for_its_producers_and_at_most_one_event_per_lane():
    """Rules 3 and 6 on a three-device placement: each event depends on (an event at or
    after) every producer of its inputs on each lane, with one dep per lane at most."""
    _, _, prog = captured("attention")
    placed = wb.place(prog, lambda n: ["cpu", "cuda:0", "cuda:1"][sum(map(ord, n.name)) % 3])
    plan = wb.plan(wb.propagate(placed), "best")
    steps = steps_of(plan)
    nodes = {n.name: n for n in plan.device_graph.graph.nodes}
    for step in steps.events:
        lanes = [steps.by_name[d].lane for d in step.deps]
        assert len(lanes) == len(set(lanes)), step
        assert all(steps.by_name[d].index < step.index for d in step.deps)
        for arg in nodes[step.name].all_input_nodes:
            source = steps.by_name[arg.name]
            if source.event is not None:  # a direct producer: some dep on its lane covers it
                covering = [d for d in step.deps if steps.by_name[d].lane == source.lane]
                assert covering and steps.by_name[covering[0]].index >= source.index, (step.name, arg.name)


def test_views_getitems_and_shape_checks_are_not_events():
    """Only real work is timed: no event for getitem, views of planned memory or of
    constants; the h2d copies, compute and d2h copies are events."""
    _, _, prog = captured("attention")
    plan = wb.plan(wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear", "aten.topk"]})))
    steps = steps_of(plan)
    nodes = {n.name: n for n in plan.device_graph.graph.nodes}
    for step in steps.steps:
        node = nodes[step.name]
        if node.op == "call_function" and (node.target.__name__ == "getitem" or "view" in str(node.target)):
            assert step.event is None, step
    kinds = {s.event for s in steps.events}
    assert {"h2d", "d2h", "compute", "host"} <= kinds


class InPlace(nn.Module):
    """y is read by a d2h copy (for the host's sum) and then written in place on the device."""

    def forward(self, x):
        y = x * 2
        z = y.sum()
        y.add_(1)
        return y * z


def test_an_in_place_write_waits_for_earlier_readers_on_other_streams():
    """Rule 5: ``add_`` on the device overwrites y, which the d2h copy for the host's sum
    reads on the copy stream; the write waits for that copy, and results equal eager."""
    x = torch.randn(64)
    plan = wb.plan(wb.propagate(wb.place(wb.capture(InPlace(), (x,)), {"cuda:0": ["aten.mul", "aten.add_"]})))
    steps = steps_of(plan)
    d2h = next(s for s in steps.events if s.event == "d2h" and s.name.startswith("mul_to"))
    assert d2h.name in steps.by_name["add_"].reuse_deps
    res = run(plan, x, backend="sim", validate=True)
    assert torch.allclose(res.outputs, InPlace()(x))
    events = {e.node: e for e in res.timeline}
    assert events["add_"].start_us >= events[d2h.name].end_us


@pytest.mark.slow
def test_estimate_schedules_the_full_size_model_from_shapes_alone():
    """The full-size (35B-parameter) decode step, captured shape-only, is scheduled by
    ``estimate`` without allocating its weights (they would not fit in this machine's
    memory): one op event per event step, one slot-copy event per step whose result is
    copied into its slot, no live device or host bytes, a positive span."""
    from workbench.models import MoEConfig, QwenMoEDecoder
    from workbench.runtime import live_bytes_by_device
    from workbench.runtime.executor import estimate

    with torch.device("meta"):
        model = QwenMoEDecoder(MoEConfig.full())
    prog = wb.capture(model, model.example_inputs(), shape_only=True)
    plan = wb.plan(wb.propagate(wb.place(prog, {"cuda:0": ["aten.*"]}), True, True), "greedy")
    assert len(plan.device_graph.graph.nodes) > 5000
    before = live_bytes_by_device()
    tl = estimate(plan)
    events = steps_of(plan).events
    ops = [e for e in tl if e.activity == "op"]
    assert len(ops) == len(events) and len(tl) - len(ops) == sum(s.slot_write == "copy" for s in events)
    assert tl.span_us > 0 and live_bytes_by_device() == before


class _Masked(nn.Module):
    def forward(self, x):
        mask = x[:, 0] > 0  # (N,) bool
        y = torch.relu(x) * 2.0
        z = y + 1.0
        return z, mask


def _masked_plan(share_node: str, mask_node: str):
    """A plan of ``_Masked`` on cuda:0 whose ``share_node`` is charged by ``mask_node``."""
    from workbench.node_facts import mark_row_share

    x = torch.randn(4, 3)
    dg = wb.propagate(wb.place(wb.capture(_Masked(), (x,)), {"cuda:0": ["aten.*"]}))
    nodes = {n.name: n for n in dg.graph.nodes}
    mark_row_share(nodes[share_node], nodes[mask_node], where=True)
    return wb.plan(dg), nodes, x


def test_a_row_share_read_from_an_earlier_bool_mask_is_a_step_fact():
    """Rule 11: a share whose mask is an earlier op step of bool value is on the share's
    step, and the mask's step is marked to be counted."""
    plan, nodes, _ = _masked_plan("mul", "gt")
    steps = steps_of(plan).by_name
    assert steps["mul"].share is not None and steps["mul"].share.mask == "gt" and steps["gt"].row_mask


@pytest.mark.parametrize(
    "share_node, mask_node, message",
    [("mul", "relu", "must be a bool tensor, got a torch.float32 tensor"), ("relu", "add", "no op step issued before it")],
)
def test_a_row_share_whose_mask_cannot_count_it_is_refused_when_steps_are_made(share_node, mask_node, message):
    """Rule 11: a mask that is no bool tensor, or runs after the step it charges, is a
    StepError when the steps are made (estimate and load alike), not at some later call."""
    from workbench.runtime.steps import StepError

    plan, *_ = _masked_plan(share_node, mask_node)
    with pytest.raises(StepError, match=message):
        steps_of(plan)
    with pytest.raises(StepError, match=message):
        wb.estimate(plan)
