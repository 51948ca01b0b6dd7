"""Dynamic shapes: planned at their export upper bound; unbounded sizes refused."""

import pytest
import torch
from torch.export import Dim

import workbench as wb
from workbench.graph_values import UnboundedShapeError


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2.0


def test_symbolic_sizes_are_planned_at_their_upper_bound():
    """A batch dimension bounded by max=64 is planned as 64 rows, and the plan runs for
    a smaller batch."""
    from workbench.planning.arena_execution import run_in_arenas

    batch = Dim("batch", min=1, max=64)
    prog = wb.capture(Scale(), (torch.randn(4, 16),), dynamic_shapes=({0: batch},))
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear"]}))
    plan = wb.plan(dg)
    assert plan.allocations["x"].nbytes == 64 * 16 * 4
    assert all(c.nbytes == 64 * 16 * 4 for c in dg.copies)
    model = Scale()
    model.load_state_dict(prog.exported.module().state_dict())
    x = torch.randn(5, 16)
    with torch.no_grad():
        assert torch.allclose(dg.module()(x), prog.exported.module()(x), atol=1e-6)


def test_unbounded_size_is_a_clear_error():
    """A dynamic size without a maximum cannot be planned; the error says how to bound it."""
    prog = wb.capture(Scale(), (torch.randn(4, 16),), dynamic_shapes=({0: Dim("batch")},))
    with pytest.raises(UnboundedShapeError, match="max="):
        wb.plan(wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear"]})))
