"""A constant read only by a metadata check is resident nowhere (propagate rule 7)."""

import pytest
import torch

import workbench as wb
from workbench.runtime import stage_inputs

from conftest import assert_matches_eager


class _Checked(torch.nn.Module):
    """``scale`` is only checked (shape, dtype, device), never read for its data."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(64))
        self.w = torch.nn.Parameter(torch.randn(8, 8, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        torch.ops.aten._assert_tensor_metadata(self.scale, dtype=torch.float32, device=torch.device("cpu"))
        return x @ self.w


@pytest.mark.parametrize(
    "rules", [lambda n: "cuda:0", {"cuda:0": ["aten.matmul"]}], ids=["check on the device", "check on the host"]
)
def test_a_metadata_check_makes_no_constant_resident(rules):
    """Wherever the check runs, the constant it reads is resident on no device (no bytes
    counted anywhere, no copy), and the planned run still checks it and equals eager."""
    model = _Checked()
    x = torch.randn(2, 8)
    prog = wb.capture(model, (x,))
    scale = next(name for name, fqn in prog.constants.items() if fqn == "scale")
    dg = wb.propagate(wb.place(prog, rules), True, True)
    assert dg.residency[scale] == ()
    assert not any(c.value == scale for c in dg.copies)
    assert dg.constant_bytes[wb.Device("cuda", 0)] == 8 * 8 * 4
    assert dg.constant_bytes.get(wb.CPU, 0) == 0
    plan = wb.plan(dg)
    result = wb.run(plan, *stage_inputs(dg, (x,), "sim"), backend="sim")
    assert_matches_eager(result.outputs, model(x))
