"""What the executor itself costs per step: a chain of tiny ops run through a ``Session``.

``CostModel.launch_overhead`` is what the runtime and driver charge to issue one kernel;
the workbench executor, an interpreter over the planned graph, adds its own work per
step on top (reading the step's arguments, binding its result into its slot, recording
its timing events). ``executor_step_seconds`` measures the whole per-step cost the way a
run sees it, for ``calibrate``.

Rules:

1. The probe program is a chain of ``n`` tiny elementwise ops (``x = x + 1``, one
   element), captured with ``torch.export``, every op placed on ``cuda:0``, planned
   (``"greedy"``). Its input crosses to the device and its output back once: a fixed
   cost, the same for every ``n``, that a slope over ``n`` cancels.
2. A call's time is its span, ``RunResult.time_us`` (CUDA events on ``cuda``, the
   modeled clock on ``sim``): what the measured-vs-modeled comparison of a model
   compares. One warm-up call, then ``repeats`` timed calls of the same session.
3. The answer is checked: the chain's output must equal ``n + x``; a wrong answer is an
   error, never a time.
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

__all__ = ["ExecutorProbeError", "TinyOpChain", "executor_step_seconds"]


class ExecutorProbeError(WorkbenchError, RuntimeError):
    """The executor probe computed a wrong answer (the backend is broken)."""


class TinyOpChain(torch.nn.Module):
    """``n`` additions of 1 in a row (rule 1's program)."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.n):
            x = x + 1
        return x


def executor_step_seconds(
    backend: str, n: int, repeats: int, cost_model: Optional[CostModel] = None
) -> tuple[float, ...]:
    """Span in seconds of each of ``repeats`` calls of an ``n``-op chain on ``backend``
    (see the module rules); ``cost_model`` times ``sim`` calls."""
    x = torch.zeros(1)
    program = capture(TinyOpChain(n), (x,))
    device_graph = propagate(place(program, lambda node: "cuda:0"))
    memory_plan = plan_memory(device_graph, "greedy")
    staged = stage_inputs(device_graph, (x,), backend)
    spans = []
    with load(memory_plan, backend, cost_model) as session:
        first = session.run(*staged)
        out = first.outputs[0] if isinstance(first.outputs, (tuple, list)) else first.outputs
        got = float(to_host(out)[0])
        if got != float(n):
            raise ExecutorProbeError(f"a chain of {n} additions of 1 to 0 gave {got} on {backend!r}")
        for _ in range(repeats):
            spans.append(session.run(*staged).time_us * 1e-6)
    return tuple(spans)
