"""The executor's entry points: ``run`` a plan once, ``load`` it for many calls, ``estimate`` it.

::

    res = run(plan, *inputs, backend="sim")      # load, one call, close
    res.outputs, res.timeline, res.time_us, res.copy_bytes_by_kind()

    with load(plan, backend="sim") as session:   # arenas and constants placed once
        for _ in range(steps):
            res = session.run(*inputs)

    timeline = estimate(plan)                    # shapes only: no data, no memory

Rules:

1. ``run`` checks the inputs before allocating anything, so a bad input (a host tensor
   where the plan wants a device tensor) leaves nothing allocated.
2. ``run`` closes its session on every path; its outputs outlive it (host outputs are
   copied out of the arena, device outputs own their ``DeviceBuffer``).
3. ``backend=None`` means ``default_backend()`` ("cuda" with a usable GPU, else "sim");
   ``"cuda"`` without one is a ``CudaUnavailableError`` with the reason in one line; an
   unknown name is an error listing the valid ones.
4. Separate ``run`` calls from several threads are independent; one ``Session`` may be
   shared by threads too (``session`` rule 5). A program that updates its buffers carries
   its state from call to call (``state``), as eager PyTorch does.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch
from torch.utils._pytree import tree_map

from ..planning.memory_plan import MemoryPlan
from .allocators import AllocatorRegistry
from ..machine.cost_model import CostModel
from .run_result import PrefetchStat, RunResult
from .call import ExecutorError, RunNode
from .inputs import InputError, check_inputs, flatten_inputs
from .session import Session, check_plan, load, resolve_backend
from .sim_timing import default_cost_model, estimate
from .steps import Step, Steps, steps_of
from .tensors import clone_to, device_of

__all__ = [
    "ExecutorError",
    "InputError",
    "PrefetchStat",
    "RunResult",
    "Session",
    "Step",
    "Steps",
    "default_cost_model",
    "estimate",
    "load",
    "run",
    "steps_of",
]


def run(
    plan: MemoryPlan,
    *inputs: Any,
    backend: Optional[str] = None,
    cost_model: Optional[CostModel] = None,
    registry: Optional[AllocatorRegistry] = None,
    validate: bool = False,
    run_node: Optional[RunNode] = None,
    launch: Optional[str] = None,
) -> RunResult:
    """Load ``plan`` on ``backend``, run one call with ``inputs``, close; see ``load``
    (``launch``: ``"eager"`` or ``"graph"``, ``session`` rule 8). Its outputs are always
    fresh: they outlive the session."""
    check_plan(plan)
    name = resolve_backend(backend)
    check_inputs(plan, name, flatten_inputs(plan, inputs))  # rule 1
    outputs = "pooled" if launch == "graph" else "fresh"
    with load(plan, name, cost_model, registry=registry, validate=validate, run_node=run_node, launch=launch, outputs=outputs) as session:
        if launch == "graph":  # pooled outputs die with the session: hand out copies
            result = session.run(*inputs)
            return dataclasses.replace(result, outputs=_fresh(result.outputs, name, registry))
        return session.run(*inputs)


def _fresh(outputs: Any, backend: str, registry: Optional[AllocatorRegistry]) -> Any:
    """Copies of pooled device outputs that own their buffers (rule 2)."""

    def fresh(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            device = device_of(value, backend)
            if not device.is_host:
                return clone_to(value, device, backend, registry=registry)
        return value

    return tree_map(fresh, outputs)
