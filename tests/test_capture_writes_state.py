"""Which exported programs capture functionalizes: those that write state, and no others."""

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.capture import writes_state


class Counter(nn.Module):
    """Counts its calls in a buffer (a write the op's schema declares)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        return x * 2


class Rotary(nn.Module):
    """Reads a buffer through composite ops only (as rotary embeddings read inv_freq)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("inv_freq", torch.arange(1.0, 5.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (T, 4)
        freq = self.inv_freq.to(x.device)
        return torch.matmul(x, torch.diag(freq)).cos()


class Scaled(nn.Module):
    """Scales a fresh tensor in place by a buffer (Gemma 4's ``hidden *= self.layer_scalar``):
    the buffer is the op's operand, not what it writes."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("layer_scalar", torch.full((1,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = x + 1
        hidden *= self.layer_scalar
        return hidden


class Norm(nn.Module):
    """BatchNorm in training mode: running statistics updated by a composite op."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4, track_running_stats=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(x)


def _exported(model: nn.Module) -> torch.export.ExportedProgram:
    return torch.export.export(model, (torch.randn(3, 4),))


@pytest.mark.parametrize(("model", "writes"), [(Counter(), True), (Norm().train(), True), (Rotary(), False), (Scaled(), False)])
def test_only_programs_that_write_state_are_seen_as_writing_it(model, writes):
    """A declared in-place write of a buffer and BatchNorm's silent update of its running
    statistics count as writing state; a buffer only read by composite ops (to, matmul)
    does not, so its program is not re-traced for nothing; nor does a buffer that is only
    the operand of an in-place op on a fresh tensor (only the arguments the op's schema
    marks written count)."""
    assert writes_state(_exported(model)) is writes


def test_a_program_that_only_reads_its_buffers_is_kept_as_exported_and_runs_as_eager():
    """Capturing the rotary reader records no mutation and its planned run equals eager."""
    model = Rotary().eval()
    x = torch.randn(3, 4)
    program = wb.capture(model, (x,))
    mutations = [s for s in program.exported.graph_signature.output_specs if s.kind.name.endswith("MUTATION")]
    assert mutations == []
    plan = wb.plan(wb.propagate(wb.place(program, {"cuda:0": ["*"]})), "greedy")
    got = wb.run(plan, x, backend="sim").outputs
    out = got[0] if isinstance(got, (tuple, list)) else got
    assert torch.allclose(wb.runtime.to_host(out), model(x))


def test_batchnorm_statistics_are_still_captured_as_mutations():
    """The narrower test still functionalizes BatchNorm: its running statistics come back
    as buffer mutations of the captured signature."""
    program = wb.capture(Norm().train(), (torch.randn(3, 4),))
    kinds = {s.kind.name for s in program.exported.graph_signature.output_specs}
    assert "BUFFER_MUTATION" in kinds


def test_an_in_place_op_reading_a_buffer_captures_and_runs_as_eager():
    """An in-place multiply of a fresh tensor by a buffer captures (no write of the buffer
    is reported), leaves the buffer as it was, and its planned run equals eager."""
    model = Scaled().eval()
    x = torch.randn(3, 4)
    program = wb.capture(model, (x,))
    plan = wb.plan(wb.propagate(wb.place(program, {"cuda:0": ["*"]})), "greedy")
    got = wb.run(plan, x, backend="sim").outputs
    out = got[0] if isinstance(got, (tuple, list)) else got
    assert torch.allclose(wb.runtime.to_host(out), model(x))
    assert torch.equal(model.layer_scalar, torch.full((1,), 0.5))
