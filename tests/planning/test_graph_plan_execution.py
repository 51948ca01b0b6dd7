"""Planned execution equals eager: every tensor in its arena, at its planned offset."""

import dataclasses
import random

import pytest
import torch

import workbench as wb
from workbench.planning.arena_execution import Slots, host_arenas, run_in_arenas

from conftest import captured

RULES = [
    {},
    {"cuda:0": ["aten.linear", "aten.addmm"]},
    {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu", "aten.relu", "aten.softmax", "aten.mul"]},
]


def _as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def _same(got, want):
    return all(
        g.shape == w.shape and torch.allclose(g, w, atol=1e-5, rtol=1e-5) for g, w in zip(_as_tuple(got), _as_tuple(want))
    )


@pytest.mark.parametrize("name", ["mlp", "residual", "fanout", "attention"])
@pytest.mark.parametrize("algorithm", ["greedy", "best"])
def test_planned_execution_equals_eager(name, algorithm):
    """For several models, placements and both skip settings, running with every planned
    tensor bound to its arena slot gives eager PyTorch's outputs."""
    model, inputs, prog = captured(name)
    expected = model(*inputs)
    for rules in RULES:
        for skip in (False, True):
            placed = wb.place(prog, rules)
            plan = wb.plan(wb.propagate(placed, skip, skip), algorithm)
            plan.verify()
            assert _same(run_in_arenas(plan, *inputs), expected), (rules, skip)


@pytest.mark.parametrize("seed", range(6))
def test_random_placements_in_arenas(seed):
    """Random three-device placements of the attention model run correctly in arenas."""
    model, inputs, prog = captured("attention", decompose=bool(seed % 2))
    rng = random.Random(seed)
    placed = wb.place(prog, lambda n: rng.choice(["cpu", "cuda:0", "cuda:1"]))
    plan = wb.plan(wb.propagate(placed), "best")
    assert _same(run_in_arenas(plan, *inputs), model(*inputs))


def test_a_wrong_offset_breaks_the_outputs():
    """The check has teeth: moving one tensor onto the bytes of another that is live at
    the same time changes the outputs."""
    model, inputs, prog = captured("residual")
    plan = wb.plan(wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear"]})), "best")
    expected = model(*inputs)
    assert _same(run_in_arenas(plan, *inputs), expected)
    broken_any = False
    allocs = [a for a in plan.allocations.values() if a.size]
    for a in allocs:
        for b in allocs:
            if a is b or a.device != b.device or not (a.start <= b.end and b.start <= a.end):
                continue
            bad = dict(plan.allocations)
            bad[b.name] = dataclasses.replace(b, offset=a.offset)
            broken = dataclasses.replace(plan, allocations=bad)
            broken_arenas = {d: torch.zeros(max(n, 1) * 2, dtype=torch.uint8) for d, n in plan.arena_bytes.items()}
            if not _same(run_in_arenas(broken, *inputs, arenas=broken_arenas), expected):
                broken_any = True
                break
        if broken_any:
            break
    assert broken_any


def test_arena_too_small_is_refused():
    """Slots refuse an arena smaller than the plan needs."""
    _, inputs, prog = captured("mlp")
    plan = wb.plan(wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear"]})))
    arenas = host_arenas(plan)
    arenas["cuda:0"] = torch.zeros(8, dtype=torch.uint8)
    with pytest.raises(ValueError, match="at least"):
        Slots(plan, arenas)


def test_moe_decode_step_in_arenas():
    """The tiny MoE decode step, placed with attention and experts on the device, runs
    correctly with every tensor in its planned slot."""
    from workbench.models import MoEConfig, QwenMoEDecoder

    model = QwenMoEDecoder(MoEConfig.tiny())
    inputs = model.example_inputs()
    prog = wb.capture(model, inputs)
    placed = wb.place(prog, {"cuda:0": ["aten.linear", "aten.bmm", "aten.matmul", "aten.index_select"]})
    for skip in (False, True):
        plan = wb.plan(wb.propagate(placed, skip, skip), "best")
        plan.verify()
        assert _same(run_in_arenas(plan, *inputs), model(*inputs))
