"""op_cost: FLOPs from FlopCounterMode and bytes touched, on real, meta and fake tensors."""

import warnings

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from workbench.machine import CostModelWarning, op_cost

aten = torch.ops.aten


def test_linear_flops_match_flop_counter_mode():
    """An 8×64 @ 64×64 linear counts 65,536 FLOPs, the same as FlopCounterMode on real data."""
    x, w = torch.randn(8, 64), torch.randn(64, 64)
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.linear(x, w)
    cost = op_cost(torch.nn.functional.linear, (x, w))
    assert cost.flops == counter.get_total_flops() == 65_536


def test_bytes_touched_are_inputs_plus_outputs():
    """mm reads both operands and writes the product: (8·64 + 64·32 + 8·32) · 4 bytes."""
    cost = op_cost(aten.mm.default, (torch.empty(8, 64), torch.empty(64, 32)))
    assert cost == (2 * 8 * 64 * 32, (8 * 64 + 64 * 32 + 8 * 32) * 4)


def test_meta_tensors_give_the_same_cost_without_data():
    """Shape-only analysis: meta inputs give the same FLOPs and bytes as real ones."""
    real = (torch.randn(4, 16, 32), torch.randn(4, 32, 8))
    meta = tuple(t.to("meta") for t in real)
    assert op_cost(aten.bmm.default, meta) == op_cost(aten.bmm.default, real)


def test_huge_shapes_cost_nothing_to_analyse():
    """A 64k×64k bf16 matmul (8 GiB per operand) is costed from meta tensors without allocating it."""
    a = torch.empty(65536, 65536, dtype=torch.bfloat16, device="meta")
    cost = op_cost(aten.mm.default, (a, a))
    assert cost.flops == 2 * 65536**3 and cost.bytes_touched == 3 * 65536**2 * 2


def test_fake_tensors_from_export_work():
    """Fake tensors (what torch.export records in node.meta['val']) are costed like real ones."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        a, b = torch.empty(8, 64), torch.empty(64, 64)
    assert mode is not None
    assert op_cost(aten.mm.default, (a, b)).flops == 65_536


def test_view_ops_touch_nothing():
    """A view moves no data: 0 FLOPs, 0 bytes."""
    assert op_cost(aten.view.default, (torch.empty(4, 4), [16])) == (0, 0)


def test_elementwise_op_is_all_bytes_no_matmul_flops():
    """add is not in the FLOP registry: 0 FLOPs, and bytes = two reads + one write."""
    cost = op_cost(aten.add.Tensor, (torch.empty(100), torch.empty(100)))
    assert cost == (0, 3 * 400)


def test_no_meta_kernel_on_meta_inputs_falls_back_with_a_warning():
    """nonzero has no meta kernel: with meta inputs the cost is inputs + given outputs, and a warning says so."""
    x = torch.empty(10, device="meta")
    out = torch.empty(3, 1, dtype=torch.long, device="meta")
    with pytest.warns(CostModelWarning, match="nonzero"):
        cost = op_cost(aten.nonzero.default, (x,), outputs=out)
    assert cost == (0, 40 + 24)


def test_no_meta_kernel_on_real_inputs_runs_the_op():
    """With real inputs the fallback runs the op itself and counts its real output, silently."""
    x = torch.tensor([0.0, 1.0, 0.0, 2.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cost = op_cost(aten.nonzero.default, (x,))
    assert cost == (0, 16 + 2 * 8)
