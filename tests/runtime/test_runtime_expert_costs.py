"""Costs of expert matmuls (cost model rule 3a) and of ops the cost model cannot count (3c)."""

import warnings

import pytest
import torch

import workbench as wb
from toy_experts import WEIGHTS, distinct_experts, toy
from workbench.moe.expert_ops import expected_distinct_experts
from workbench.runtime import stage_inputs
from workbench.machine import CostModelWarning, op_cost
from workbench.machine.cost_model import cost_depends_on_data, grouped_mm_cost

aten = torch.ops.aten


def _grouped_args(device="cpu"):
    x = torch.empty(6, 32, dtype=torch.bfloat16, device=device)  # S = 6 rows
    w = torch.empty(8, 32, 16, dtype=torch.bfloat16, device=device)  # G = 8 slabs of 32 x 16
    offs = torch.tensor([0, 2, 2, 2, 5, 5, 6, 6], dtype=torch.int32, device=device if device == "meta" else "cpu")
    return x, w, offs


def test_grouped_mm_flops_and_the_slabs_of_present_groups():
    """2·S·in·out FLOPs; bytes: x, offsets, output and the slabs of the 3 groups with rows."""
    x, w, offs = _grouped_args()
    slab, out = 32 * 16 * 2, 6 * 16 * 2
    cost = grouped_mm_cost(x, w, offs, out)
    assert cost.flops == 2 * 6 * 32 * 16
    assert cost.bytes_touched == x.numel() * 2 + offs.numel() * 4 + out + 3 * slab


def test_grouped_mm_without_real_offsets_reads_the_expected_or_the_possible_groups():
    """Meta offsets: the expected groups the caller gives (at most G), else min(G, S)."""
    x, w, offs = _grouped_args("meta")
    slab, base = 32 * 16 * 2, 6 * 32 * 2 + 8 * 4 + 6 * 16 * 2
    assert grouped_mm_cost(x, w, offs, 6 * 16 * 2, expected_groups=2.5).bytes_touched == round(base + 2.5 * slab)
    assert grouped_mm_cost(x, w, offs, 6 * 16 * 2, expected_groups=99).bytes_touched == base + 8 * slab
    assert grouped_mm_cost(x, w, offs, 6 * 16 * 2).bytes_touched == base + 6 * slab


def test_op_cost_counts_grouped_mm_without_a_warning():
    """aten._grouped_mm has no FlopCounterMode formula; op_cost counts it from its shapes
    (meta inputs) and says nothing; its cost reads data only when the offsets are real."""
    x, w, offs = _grouped_args("meta")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cost = op_cost(aten._grouped_mm.default, (x, w.transpose(-2, -1).transpose(-2, -1), offs), expected_groups=3)
    assert cost.flops == 2 * 6 * 32 * 16
    assert not cost_depends_on_data(aten._grouped_mm.default, (x, w, offs), {})
    assert cost_depends_on_data(aten._grouped_mm.default, _grouped_args(), {})
    assert not cost_depends_on_data(aten.mm.default, (x[0:1], w[0]), {})


def test_a_run_charges_the_slabs_of_the_experts_the_router_chose():
    """On sim, each streamed grouped matmul's event reads exactly the distinct experts'
    slabs (its offsets are real), and the estimate the expected number."""
    model, inputs, prog = toy("grouped", 6, torch.bfloat16)
    dg = wb.propagate(wb.place(prog, lambda n: "cuda:0"), True, True, stream_constants=WEIGHTS)
    plan = wb.plan(dg)
    result = wb.run(plan, *stage_inputs(dg, inputs, "sim"), backend="sim")
    estimated = wb.estimate(plan)
    distinct = distinct_experts(model, inputs[0])
    grouped = [n for n in dg.graph.nodes if n.target is aten._grouped_mm.default]
    assert len(grouped) == 2
    for node in grouped:
        x, w, offs = (a.meta["val"] for a in node.args[:3])
        rest = (x.numel() + node.meta["val"].numel()) * 2 + offs.numel() * 4
        slab = w[0].numel() * 2
        (ran,) = [e for e in result.timeline.events if e.node == node.name and e.activity == "op"]
        (est,) = [e for e in estimated.events if e.node == node.name and e.activity == "op"]
        assert ran.nbytes == rest + distinct * slab
        assert est.nbytes == round(rest + expected_distinct_experts(8, 6, 2) * slab)
        assert ran.flops == est.flops == 2 * x.shape[0] * x.shape[1] * w.shape[-1]


@torch.library.custom_op("wbtest::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    """A custom op whose FLOPs nobody knows."""
    return x * 2


@mystery.register_fake
def _(x):
    return torch.empty_like(x)


class _Mystery(torch.nn.Module):
    def forward(self, x):
        return torch.ops.wbtest.mystery(torch.ops.wbtest.mystery(x) + 1)


def _only(caught, category):
    return [w for w in caught if issubclass(w.category, category)]


def test_an_op_the_model_cannot_count_is_named_once_per_estimate_and_run():
    """A custom op (twice in the graph) is costed by its bytes and named in one
    CostModelWarning per estimate and per run, once; ops the model can count are not named."""
    prog = wb.capture(_Mystery(), (torch.ones(4, 4),))
    dg = wb.propagate(wb.place(prog, lambda n: "cuda:0"))
    plan = wb.plan(dg)
    for call in (lambda: wb.estimate(plan), lambda: wb.run(plan, torch.ones(4, 4), backend="sim")) * 2:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            call()
        (warning,) = _only(caught, CostModelWarning)
        text = str(warning.message)
        assert text.count("wbtest.mystery.default") == 1 and "aten.add" not in text
        assert "1 op(s)" in text


def test_op_cost_names_a_custom_op():
    """Called directly, op_cost warns that it could not count the custom op's FLOPs."""
    with pytest.warns(CostModelWarning, match="wbtest.mystery.default.*custom wbtest op"):
        cost = op_cost(torch.ops.wbtest.mystery.default, (torch.ones(4, 4),))
    assert cost == (0, 2 * 64)
