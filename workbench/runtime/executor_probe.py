"""What the executor itself costs per step: a chain of tiny ops run through a ``Session``.

``CostModel.launch_overhead`` is what the runtime and driver charge to issue one kernel;
the workbench executor, an interpreter over the planned graph, adds its own work per
step on top (reading the step's arguments, binding its result into its slot, recording
its timing events). ``executor_steps`` measures the whole per-step cost the way a run
sees it, for ``calibrate``.

Rules:

1. The probe program is ``n`` small decoder blocks in a row (``DecoderOpMix``: an RMS
   norm, a gated MLP, a softmax router with its top-k; 64 wide, seeded weights), the op
   mix a decoder step is made of, captured with ``torch.export``, every op placed on
   ``cuda:0``, planned (``"greedy"``). Its input crosses to the device and its output
   back once: a fixed cost, the same for every ``n``, that a slope over the number of
   steps cancels. Every op of the mix writes its planned slot directly (it has an
   ``out=`` variant), so each step is one launch as the cost model counts them; what a
   real op launches beyond that (a matmul's extra kernels) is part of what is measured.
2. A call's time is its span, ``RunResult.time_us`` (CUDA events on ``cuda``, the
   modeled clock on ``sim``): what the measured-vs-modeled comparison of a model
   compares. One warm-up call, then ``repeats`` timed calls of the same session.
3. The answer is checked against eager torch on the host; a wrong answer is an error,
   never a time.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..capture import capture
from ..errors import WorkbenchError
from ..place import place
from ..planning.memory_plan import plan as plan_memory
from ..propagate import propagate
from .cost_model import CostModel
from .session import load
from .tensors import stage_inputs, to_host

__all__ = ["DecoderOpMix", "ExecutorProbeError", "TinyOpChain", "executor_steps"]


class ExecutorProbeError(WorkbenchError, RuntimeError):
    """The executor probe computed a wrong answer (the backend is broken)."""


class TinyOpChain(torch.nn.Module):
    """``n`` additions of 1 in a row: the cheapest step there is."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.n):
            x = x + 1
        return x


class DecoderOpMix(torch.nn.Module):
    """``n`` small decoder blocks (rule 1): RMS norm, router softmax + top-k, gated MLP."""

    def __init__(self, n: int, width: int = 64, experts: int = 8, top_k: int = 2) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        weight = lambda *shape: torch.nn.Parameter(torch.randn(*shape, generator=generator) * 0.05)  # noqa: E731
        self.n, self.top_k = n, top_k
        self.norm = torch.nn.ParameterList([weight(width) for _ in range(n)])
        self.router = torch.nn.ParameterList([weight(experts, width) for _ in range(n)])
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


def executor_steps(
    backend: str, n: int, repeats: int, cost_model: Optional[CostModel] = None
) -> tuple[int, tuple[float, ...]]:
    """(steps, span in seconds of each of ``repeats`` calls) of ``n`` ``DecoderOpMix``
    blocks on ``backend`` (see the module rules); ``cost_model`` times ``sim`` calls."""
    model = DecoderOpMix(n).eval()
    x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(x)
    program = capture(model, (x,))
    device_graph = propagate(place(program, lambda node: "cuda:0"))
    memory_plan = plan_memory(device_graph, "greedy")
    staged = stage_inputs(device_graph, (x,), backend)
    spans = []
    with load(memory_plan, backend, cost_model) as session:
        first = session.run(*staged)
        out = first.outputs[0] if isinstance(first.outputs, (tuple, list)) else first.outputs
        if not torch.allclose(to_host(out), expected, rtol=1e-4, atol=1e-5):
            raise ExecutorProbeError(f"{n} decoder blocks on {backend!r} do not compute what eager torch does")
        for _ in range(repeats):
            spans.append(session.run(*staged).time_us * 1e-6)
    return len(first.timeline), tuple(spans)
