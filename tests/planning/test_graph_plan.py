"""wb.plan on propagated graphs: storages, lifetimes, per-device arenas, flags, errors."""

import dataclasses

import pytest
import torch

import workbench as wb
from workbench.planning import ALGORITHMS, PlanVerificationError
from workbench.planning.lifetimes import tensor_lifetimes

from conftest import captured


def _dg(name, rules, **flags):
    return wb.propagate(wb.place(captured(name)[2], rules), **flags)


class ViewChain(torch.nn.Module):
    """A base whose last direct use is early, read later only through views."""

    def forward(self, x):
        base = x * 2.0  # (4, 6)
        v = base.view(24)  # alias of base
        t = base.t()  # alias of base
        y = x + 1.0
        z = y * 3.0
        return v.sum() + t.sum() + z.sum()


def test_views_share_and_extend_their_base_lifetime():
    """A view owns no memory; its base stays live until the view's last reader."""
    prog = wb.capture(ViewChain(), (torch.randn(4, 6),))
    lt = tensor_lifetimes(wb.propagate(wb.place(prog, {})))
    assert lt.storage_of["view"] == "mul" and lt.storage_of["t"] == "mul"
    assert "view" not in lt.storages and "t" not in lt.storages
    readers = [lt.steps.index(n) for n in ("sum_1", "sum_2")]
    assert lt.storages["mul"].end >= max(readers)
    assert set(lt.storages["mul"].aliases) == {"view", "t"}


class Reshapes(torch.nn.Module):
    def forward(self, x):
        a = x.t().reshape(-1)  # copies: x.t() is not contiguous
        b = x.reshape(-1)  # a view
        return a + 1.0, b + 1.0


def test_reshape_aliases_only_when_it_does_not_copy():
    """Aliasing is read from the trace: reshape of a transposed tensor owns new memory,
    reshape of a contiguous one is a view."""
    prog = wb.capture(Reshapes(), (torch.randn(4, 6),))
    lt = tensor_lifetimes(wb.propagate(wb.place(prog, {})))
    assert "reshape" in lt.storages and lt.storage_of["reshape_1"] == "x"


def test_split_outputs_alias_and_topk_outputs_do_not():
    """getitems of chunk/split share the chunked tensor; getitems of topk own memory
    written at the topk step."""
    dg = _dg("attention", {})
    lt = tensor_lifetimes(dg)
    assert {lt.storage_of[g] for g in ("getitem", "getitem_1", "getitem_2")} == {"linear"}
    for g in ("getitem_3", "getitem_4"):
        assert g in lt.storages and lt.storages[g].start == lt.steps.index("topk")


def test_copies_own_memory_on_their_target_device():
    """Rule 3 of lifetimes: a copy's output is a new storage on its destination."""
    dg = _dg("residual", {"cuda:0": ["aten.linear"]})
    plan = wb.plan(dg)
    for c in dg.copies:
        alloc = plan.allocations[c.name]
        assert alloc.kind in ("copy", "output") and alloc.device == str(c.dst)


def test_inputs_from_step_zero_outputs_to_the_end():
    """Graph inputs are live from step 0 and outputs to the last step."""
    plan = wb.plan(_dg("fanout", {"cuda:0": ["aten.linear"]}))
    last = len(plan.steps) - 1
    for name in ("x", "y"):
        assert plan.allocations[name].start == 0 and plan.allocations[name].kind == "input"
    for out in plan.device_graph.user_outputs:
        assert plan.allocations[plan.storage_of[out]].end == last


def test_host_and_device_never_share_an_arena():
    """Every storage is planned in the arena of the device its value lives on."""
    dg = _dg("residual", {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu"]})
    plan = wb.plan(dg, "best")
    assert set(plan.arena_bytes) == {"cpu", "cuda:0", "cuda:1"}
    for value, owner in plan.storage_of.items():
        assert plan.allocations[owner].device == str(dg.node_device[value])


@pytest.mark.parametrize("name", ["mlp", "residual", "fanout", "attention"])
def test_every_algorithm_is_safe_and_above_the_lower_bound(name):
    """Each algorithm's plan verifies, lies at or above the lower bound, and best is the
    smallest on every device; naive is the sum of aligned sizes."""
    dg = _dg(name, {"cuda:0": ["aten.linear", "aten.softmax", "aten.gelu"]})
    plans = {alg: wb.plan(dg, alg) for alg in ALGORITHMS}
    for alg, p in plans.items():
        p.verify()
        for d in p.arena_bytes:
            assert p.lower_bound[d] <= p.arena_bytes[d], (alg, d)
            assert plans["best"].arena_bytes[d] <= p.arena_bytes[d], (alg, d)
    for d, total in plans["naive"].arena_bytes.items():
        assert total == sum(a.size for a in plans["naive"].allocations.values() if a.device == d)


def test_skip_flags_make_the_caller_own_inputs_and_outputs():
    """Graph inputs/outputs are planned by default and not when the skip flags hand them
    to the caller; explicit arguments override."""
    rules = {"cuda:0": ["aten.linear", "aten.relu"]}
    planned = wb.plan(_dg("mlp", rules))
    assert "x" in planned.allocations and planned.allocations["x"].device == "cpu"
    owned = wb.plan(_dg("mlp", rules, skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True))
    assert "x" not in owned.allocations and "caller" in owned.unplanned["x"]
    out = owned.device_graph.user_outputs[0]
    assert out not in owned.storage_of and "caller" in owned.unplanned[out]
    forced = wb.plan(owned.device_graph, alloc_graph_inputs=True, alloc_graph_outputs=True)
    assert forced.allocations["x"].device == "cuda:0"


def test_constants_are_not_in_arenas_but_counted():
    """Weights are resident: absent from the arenas, present in constant_bytes."""
    plan = wb.plan(_dg("mlp", {"cuda:0": ["aten.linear"]}))
    for name in plan.device_graph.residency:
        assert name not in plan.allocations and "constant" in plan.unplanned[name]
    assert plan.constant_bytes["cuda:0"] == 3 * (32 * 32 + 32) * 4


def test_verify_catches_a_planted_overlap():
    """Moving one storage onto another that is live at the same time makes verify fail
    and name both."""
    plan = wb.plan(_dg("residual", {}), "best")
    allocs = list(plan.allocations.values())
    a, b = next((a, b) for a in allocs for b in allocs if a is not b and a.start <= b.end and b.start <= a.end and a.size and b.size)
    bad = dict(plan.allocations)
    bad[b.name] = dataclasses.replace(b, offset=a.offset)
    broken = dataclasses.replace(plan, allocations=bad)
    with pytest.raises(PlanVerificationError) as info:
        broken.verify()
    assert a.name in str(info.value) and b.name in str(info.value)


def test_capacity_error_names_device_bytes_and_largest_tensors():
    """A plan that does not fit a device's capacity names the device, the bytes needed and
    available, and its largest tensors; a plan that fits passes."""
    dg = _dg("mlp", {"cuda:0": ["aten.linear"]})
    fine = wb.plan(dg, capacity={"cuda:0": 141 * 2**30})
    needed = fine.total_bytes()["cuda:0"]
    with pytest.raises(wb.CapacityError) as info:
        wb.plan(dg, capacity={"CUDA:0": needed - 1})
    text = str(info.value)
    assert "cuda:0" in text and str(needed) in text and str(needed - 1) in text
    assert "layers.0.weight (constant)" in text


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"algorithm": "magic"}, "naive"),
        ({"alignment": 3}, "power of two"),
        ({"alignment": 0}, "power of two"),
        ({"capacity": {"tpu": 5}}, "unknown device type"),
        ({"capacity": {"cuda:0": -1}}, "non-negative"),
        ({"capacity": 7}, "mapping"),
    ],
)
def test_bad_arguments(kwargs, message):
    """Bad planning arguments are errors that say what is valid."""
    dg = _dg("mlp", {"cuda:0": ["aten.linear"]})
    with pytest.raises(ValueError, match=message):
        wb.plan(dg, **kwargs)


def test_plan_needs_a_device_graph():
    """plan rejects anything but a DeviceGraph."""
    with pytest.raises(wb.PlanError, match="DeviceGraph"):
        wb.plan(captured("mlp")[2])


def test_with_algorithm_reuses_lifetimes():
    """Re-planning keeps every storage and lifetime and only moves offsets."""
    plan = wb.plan(_dg("attention", {"cuda:0": ["aten.linear"]}), "naive")
    other = plan.with_algorithm("best")
    assert [(a.name, a.start, a.end, a.nbytes) for a in plan.allocations.values()] == [
        (a.name, a.start, a.end, a.nbytes) for a in other.allocations.values()
    ]
    assert sum(other.arena_bytes.values()) < sum(plan.arena_bytes.values())


def test_shape_only_plans_like_real():
    """A shape-only capture plans to the same arenas as a real one."""
    rules = {"cuda:0": ["aten.linear"]}
    real = wb.plan(wb.propagate(wb.place(captured("residual")[2], rules)), "best")
    meta = wb.plan(wb.propagate(wb.place(captured("residual", shape_only=True)[2], rules)), "best")
    assert real.arena_bytes == meta.arena_bytes and real.constant_bytes == meta.constant_bytes


def test_dataframes():
    """to_dataframe has one row per storage; summary one row per device."""
    plan = wb.plan(_dg("fanout", {"cuda:0": ["aten.linear"]}))
    assert len(plan.to_dataframe()) == len(plan.allocations)
    summary = plan.summary()
    assert list(summary.device) == ["cpu", "cuda:0"]
    assert (summary.arena_bytes >= summary.lower_bound).all()
