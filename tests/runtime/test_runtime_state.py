"""Programs that update their own buffers (a counter, BatchNorm's running statistics) or
write an input in place run with the state updated as in eager PyTorch, call after call,
on sim (and on cuda, marked gpu)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import workbench as wb
from workbench.planning.arena_execution import run_in_arenas
from workbench.runtime import cuda_available, cuda_unavailable_reason, load, to_host

gpu = pytest.mark.skipif(not cuda_available(), reason=cuda_unavailable_reason() or "no GPU")


class Counter(nn.Module):
    """Counts its calls in a buffer and adds the count to a linear layer's output."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        return self.lin(x) + self.count


class Normed(nn.Module):
    """A linear layer and a BatchNorm in training mode (running mean, variance, batch count)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.bn = nn.BatchNorm1d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.lin(x)) * 2


class Scaler(nn.Module):
    """Writes its input in place (the caller's tensor changes, as in eager)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + 1


RULES = {
    "host": {},
    "device": {"cuda:0": ["aten.linear", "aten.add", "aten._native_batch_norm_legit_functional", "aten.mul"]},
    "split": {"cuda:0": ["aten.linear"]},
}


def _pair(cls):
    torch.manual_seed(0)
    model = cls().train()
    return model, copy.deepcopy(model)


def _plan(model, x, rules):
    return wb.plan(wb.propagate(wb.place(wb.capture(model, (x,)), rules)))


def _same_state(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.allclose(p, q) for p, q in zip(a.buffers(), b.buffers()))


def test_capture_makes_buffer_updates_mutation_outputs():
    """Capture turns an in-place buffer update into a BUFFER_MUTATION output naming the
    buffer, so the executor sees the state the program writes."""
    model, _ = _pair(Counter)
    program = wb.capture(model, (torch.randn(2, 4),))
    assert list(program.buffer_mutations.values()) == ["b_count"]
    batchnorm = wb.capture(_pair(Normed)[0], (torch.randn(3, 4),))
    assert sorted(batchnorm.buffer_mutations.values()) == ["b_bn_num_batches_tracked", "b_bn_running_mean", "b_bn_running_var"]


@pytest.mark.parametrize("cls", [Counter, Normed], ids=["counter", "batchnorm"])
@pytest.mark.parametrize("rules", list(RULES), ids=list(RULES))
def test_state_updates_across_calls_as_in_eager(cls, rules):
    """Three calls of one session and a fourth ``run`` give eager's four outputs, and the
    model's buffers end where eager's do: state carries over calls and sessions."""
    model, eager_model = _pair(cls)
    x = torch.randn(3, 4)
    plan = _plan(model, x, RULES[rules])
    with load(plan, "sim") as session:
        got = [session.run(x).outputs for _ in range(3)]
    got.append(wb.run(plan, x, backend="sim").outputs)
    with torch.no_grad():
        want = [eager_model(x) for _ in range(4)]
    assert all(torch.allclose(g, w, atol=1e-5) for g, w in zip(got, want))
    assert _same_state(model, eager_model)


def test_state_is_written_to_every_resident_copy_as_timed_steps():
    """A buffer read on the host and on a device is written back into both resident copies
    after the call, each a write-back event on the timeline; the next call reads the new
    value on both devices."""

    class TwoReaders(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("step", torch.zeros(4))

        def forward(self, x):
            seen_on_host = torch.sigmoid(self.step)
            seen_on_device = torch.relu(self.step)
            self.step.add_(1)
            return x + seen_on_host + seen_on_device

    model = TwoReaders()
    eager_model = copy.deepcopy(model)
    x = torch.randn(2, 4)
    plan = _plan(model, x, {"cuda:0": ["aten.relu", "aten.add"]})
    assert set(plan.device_graph.residency["b_step"]) == {"cpu", "cuda:0"}
    with load(plan, "sim") as session:
        results = [session.run(x) for _ in range(3)]
    with torch.no_grad():
        want = [eager_model(x) for _ in range(3)]
    assert all(torch.allclose(r.outputs, w) for r, w in zip(results, want))
    names = [e.node for e in results[0].timeline.events]
    assert names[-2:] == ["b_step_state_cpu", "b_step_state_cuda0"]
    assert results[0].timeline.events[-1].kind == "h2d"


def test_state_is_planned_memory_until_the_call_ends():
    """The new value of a buffer is a planned tensor (host arena) live to the last step:
    the memory plan accounts for it."""
    model, _ = _pair(Counter)
    plan = _plan(model, torch.randn(2, 4), RULES["device"])
    value = next(name for name, buffer in plan.device_graph.program.buffer_mutations.items())
    owner = plan.storage_of[plan.device_graph.output_specs[0].arg.name]
    assert value and plan.allocations[owner].end == len(plan.steps) - 1
    assert plan.allocations[owner].device == "cpu"


def test_planned_execution_in_arenas_updates_state_too():
    """``run_in_arenas`` (the plan's proof run) applies the same state updates."""
    model, eager_model = _pair(Counter)
    x = torch.randn(2, 4)
    plan = _plan(model, x, RULES["split"])
    got = [run_in_arenas(plan, x) for _ in range(2)]
    with torch.no_grad():
        want = [eager_model(x) for _ in range(2)]
    assert all(torch.allclose(g, w) for g, w in zip(got, want)) and _same_state(model, eager_model)


def test_an_input_written_in_place_is_written_back_to_the_callers_tensor():
    """A program that writes its input in place leaves the caller's tensor as eager does."""
    x = torch.arange(4.0)
    plan = _plan(Scaler(), x.clone(), {"cuda:0": ["aten.mul", "aten.add"]})
    mine, theirs = x.clone(), x.clone()
    got = wb.run(plan, mine, backend="sim").outputs
    want = Scaler()(theirs)
    assert torch.equal(got, want) and torch.equal(mine, theirs)


def test_a_program_with_state_runs_one_call_at_a_time():
    """Calls must see each other's state in order, so a session of a stateful program
    serializes its calls whatever ``max_concurrent_calls`` asks for."""
    model, _ = _pair(Counter)
    plan = _plan(model, torch.randn(2, 4), {})
    with load(plan, "sim", max_concurrent_calls=4) as session:
        assert session.max_concurrent_calls == 1


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("cls", [Counter, Normed], ids=["counter", "batchnorm"])
def test_state_updates_across_calls_on_cuda(cls):
    """On the GPU, the write-back h2d of each call lands before the next call reads the
    buffer: four calls equal eager, and the model's buffers end where eager's do."""
    model, eager_model = _pair(cls)
    x = torch.randn(3, 4)
    plan = _plan(model, x, RULES["device"])
    with load(plan, "cuda") as session:
        got = [to_host(session.run(x).outputs) for _ in range(4)]
    with torch.no_grad():
        want = [eager_model(x) for _ in range(4)]
    assert all(torch.allclose(g, w, atol=1e-4) for g, w in zip(got, want))
    assert _same_state(model, eager_model)
