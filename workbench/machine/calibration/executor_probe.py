"""What the executor itself costs per step: small decoder blocks run through a ``Session``.

``CostModel.launch_overhead`` is what the runtime and driver charge to issue one kernel;
the workbench executor, an interpreter over the planned graph, adds its own work per
step on top (reading the step's arguments, binding its result into its slot, recording
its timing events). ``executor_steps`` measures the whole per-step cost the way a run
sees it, for ``calibrate``.

Rules:

1. The probe program is ``n`` small decoder blocks in a row (``DecoderOpMix``: an RMS
   norm, a gated MLP, a softmax router with its top-k; 64 wide, seeded weights), the op
   mix a decoder step is made of, captured with ``torch.export``, every op placed on
   one device (``cuda:0`` unless asked), planned (``"greedy"``). Its input crosses to the device and its output
   back once: a fixed cost, the same for every ``n``, that a slope over the number of
   steps cancels. Every op of the mix writes its planned slot directly (it has an
   ``out=`` variant), so each step is one launch as the cost model counts them; what a
   real op launches beyond that (a matmul's extra kernels) is part of what is measured.
2. A call's time is its span, ``RunResult.time_us`` (CUDA events on ``cuda``, the
   modeled clock on ``sim``): what the measured-vs-modeled comparison of a model
   compares. One warm-up call, then ``repeats`` timed calls of the same session
   (``timed_calls``, which the executor benchmark runs too).
3. The answer is checked against eager torch on the host; a wrong answer is an error,
   never a time.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch

from ...capture import capture
from ...errors import WorkbenchError
from ...place import place
from ...planning.memory_plan import plan as plan_memory
from ...devices import Device, DeviceLike
from ...propagate import DeviceGraph, propagate
from ..cost_model import CostModel
from ...runtime.run_result import RunResult
from ...runtime.session import load
from ...runtime.tensors import stage_inputs, to_host

__all__ = ["DecoderOpMix", "ExecutorProbeError", "TimedCalls", "executor_steps", "timed_calls"]


class ExecutorProbeError(WorkbenchError, RuntimeError):
    """The executor probe computed a wrong answer (the backend is broken)."""


class DecoderOpMix(torch.nn.Module):
    """``n`` small decoder blocks (rule 1): RMS norm, router softmax + top-k, gated MLP."""

    def __init__(self, n: int, width: int = 64, choices: int = 8, top_k: int = 2) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        weight = lambda *shape: torch.nn.Parameter(torch.randn(*shape, generator=generator) * 0.05)  # noqa: E731
        self.n, self.top_k = n, top_k
        self.norm = torch.nn.ParameterList([weight(width) for _ in range(n)])
        self.router = torch.nn.ParameterList([weight(choices, width) for _ in range(n)])
        self.gate = torch.nn.ParameterList([weight(2 * width, width) for _ in range(n)])
        self.up = torch.nn.ParameterList([weight(2 * width, width) for _ in range(n)])
        self.down = torch.nn.ParameterList([weight(width, 2 * width) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: (T, width)
        for i in range(self.n):
            h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.norm[i]
            scores = torch.softmax(torch.nn.functional.linear(h, self.router[i]), dim=-1)  # (T, E)
            weights, _ = torch.topk(scores, self.top_k, dim=-1)  # (T, k)
            mlp = torch.nn.functional.silu(torch.nn.functional.linear(h, self.gate[i]))
            mlp = mlp * torch.nn.functional.linear(h, self.up[i])  # (T, 2 width)
            x = x + torch.nn.functional.linear(mlp, self.down[i]) * weights.sum(-1, keepdim=True)
        return x


@dataclass(frozen=True)
class TimedCalls:
    """One warm-up call and the timed calls after it, of one session (rule 2)."""

    first: RunResult  # the warm-up call
    spans_us: tuple[float, ...]  # RunResult.time_us of each timed call
    walls_us: tuple[float, ...]  # host wall-clock µs of each timed call


def timed_calls(
    device_graph: DeviceGraph,
    inputs: Sequence[object],
    backend: str,
    repeats: int,
    cost_model: Optional[CostModel] = None,
    check: Optional[Callable[[RunResult], None]] = None,
    profiler: Optional[contextlib.AbstractContextManager] = None,
) -> TimedCalls:
    """Plan ``device_graph`` (``"greedy"``), stage ``inputs`` where it expects them, load
    one session on ``backend`` and run one warm-up call, which ``check`` may refuse by
    raising, then ``repeats`` timed calls (rule 2). ``profiler`` (a ``cProfile.Profile``)
    is entered around each timed call only."""
    memory_plan = plan_memory(device_graph, "greedy")
    staged = stage_inputs(device_graph, inputs, backend)
    around = profiler if profiler is not None else contextlib.nullcontext()
    spans, walls = [], []
    with load(memory_plan, backend, cost_model) as session:
        first = session.run(*staged)
        if check is not None:
            check(first)
        for _ in range(repeats):
            with around:
                t = time.perf_counter()
                result = session.run(*staged)
                walls.append((time.perf_counter() - t) * 1e6)
            spans.append(result.time_us)
    return TimedCalls(first, tuple(spans), tuple(walls))


def executor_steps(
    backend: str, n: int, repeats: int, cost_model: Optional[CostModel] = None, device: DeviceLike = "cuda:0"
) -> tuple[int, tuple[float, ...]]:
    """(steps, span in seconds of each of ``repeats`` calls) of ``n`` ``DecoderOpMix``
    blocks on ``device`` with ``backend`` (see the module rules); ``cost_model`` times
    ``sim`` calls."""
    model = DecoderOpMix(n).eval()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x)
    target = Device.parse(device)

    def check(first: RunResult) -> None:
        out = first.outputs[0] if isinstance(first.outputs, (tuple, list)) else first.outputs
        if not torch.allclose(to_host(out), expected, rtol=1e-4, atol=1e-5):
            raise ExecutorProbeError(f"{n} decoder blocks on {backend!r} do not compute what eager torch does")

    device_graph = propagate(place(capture(model, (x,)), lambda node: target))
    calls = timed_calls(device_graph, (x,), backend, repeats, cost_model, check)
    return len(calls.first.timeline), tuple(span * 1e-6 for span in calls.spans_us)
