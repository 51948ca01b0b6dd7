"""Run a planned graph with every planned tensor living in its arena, at its offset.

This is the proof that a plan is right: each value that owns memory is written into a
view of its device's byte arena at the planned offset, and every later op reads it from
there. If two tensors that are live together were given overlapping bytes, one
overwrites the other and the outputs stop matching eager PyTorch.

Rules:
1. ``Slots.bind(name, value)`` copies a freshly computed value into its planned slot
   and returns the slot; values that alias a storage (views, no-op ``to``) are the op's
   own result computed from the slot, so they alias the arena too.
2. Unplanned values (constants, caller-owned inputs and outputs) are used as they are.
3. A slot has the traced strides of its value when they are dense, else contiguous ones.
4. After the call, buffers and inputs the program writes (``mutations``) take their new
   values, as in eager PyTorch.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Mapping, Optional

import torch
import torch.fx
import torch.utils._pytree as pytree

from ..devices import Device
from ..errors import WorkbenchError
from ..graph_values import output_values
from ..device_graph import mutations
from .memory_plan import MemoryPlan

__all__ = ["ArenaError", "Slots", "host_arenas", "run_in_arenas"]


class ArenaError(WorkbenchError, ValueError):
    """Arenas that do not match the plan: missing, too small, or not bytes."""


def host_arenas(plan: MemoryPlan) -> dict[Device, torch.Tensor]:
    """One zero-filled host byte tensor per device arena (the simulated memory)."""
    return {device: torch.zeros(nbytes, dtype=torch.uint8) for device, nbytes in plan.arena_bytes.items()}


def _dense_strides(val: torch.Tensor) -> Optional[tuple[int, ...]]:
    """The traced strides when they describe a dense, non-overlapping layout."""
    shape, stride = tuple(val.shape), tuple(val.stride())
    if not all(isinstance(d, int) for d in shape + stride):
        return None
    numel = 1
    for d in shape:
        numel *= d
    span = 1 + sum((d - 1) * s for d, s in zip(shape, stride) if d > 0)
    return stride if numel == 0 or span == numel else None


class Slots:
    """Typed views of planned storages in a set of byte arenas (one per device)."""

    def __init__(self, plan: MemoryPlan, arenas: Mapping[Device, torch.Tensor]) -> None:
        missing = [str(d) for d, n in plan.arena_bytes.items() if n and d not in arenas]
        if missing:
            raise ArenaError(f"no arena given for device(s) {', '.join(missing)}")
        for device, nbytes in plan.arena_bytes.items():
            arena = arenas.get(device)
            if arena is not None and (arena.dtype != torch.uint8 or arena.numel() < nbytes):
                raise ArenaError(
                    f"arena for {device} must be a uint8 tensor of at least {nbytes} bytes, got "
                    f"{arena.dtype} with {arena.numel()} elements"
                )
        self.plan = plan
        self.arenas = arenas

    def slot(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """The arena view where storage ``name`` lives, shaped like ``like``."""
        alloc = self.plan.allocations[name]
        arena = self.arenas[alloc.device]
        raw = arena[alloc.offset : alloc.offset + alloc.nbytes]
        shape = tuple(like.shape)
        typed = raw.view(like.dtype) if alloc.nbytes else torch.empty(0, dtype=like.dtype, device=arena.device)
        stride = _dense_strides(like)
        if stride is None:
            return typed.view(shape) if typed.numel() else typed.reshape(shape)
        return typed.as_strided(shape, stride)

    def bind(self, name: str, value: Any) -> Any:
        """Rule 1: put a value that owns memory into its slot; return what later ops read."""
        if name not in self.plan.allocations or not isinstance(value, torch.Tensor):
            return value
        slot = self.slot(name, value)
        slot.copy_(value)
        return slot


def _write_back(plan: MemoryPlan, env: Mapping[torch.fx.Node, Any], flat: list) -> None:
    """Rule 4: the program's buffers and the caller's inputs take their new values."""
    program = plan.device_graph.program
    by_name = {node.name: value for node, value in env.items()}
    for mutation in mutations(plan.device_graph):
        value = by_name[mutation.value]
        if mutation.kind == "buffer":
            target = program.constant_tensor(mutation.target)
        else:
            target = flat[program.user_inputs.index(mutation.target)]
        if target is not value:
            target.copy_(value)


def run_in_arenas(
    plan: MemoryPlan,
    *inputs: Any,
    arenas: Optional[Mapping[Device, torch.Tensor]] = None,
    run_node: Optional[Callable[[torch.fx.Node, tuple, dict], Any]] = None,
) -> Any:
    """Execute ``plan.device_graph`` with every planned tensor bound to its arena slot.

    Args:
        plan: the memory plan.
        inputs: the model's inputs, as given to the original module.
        arenas: ``{device: uint8 tensor}``; host memory from ``host_arenas`` by default.
        run_node: how to execute one node (defaults to calling its target).
    Returns the model's outputs, structured like the original module's.
    """
    # no autograd: slots are views of one arena, and autograd's view tracking forbids
    # writing a base while multi-output views of it (split, chunk) are alive
    with torch.no_grad():
        return _run(plan, inputs, arenas, run_node)


def _run(
    plan: MemoryPlan,
    inputs: tuple,
    arenas: Optional[Mapping[Device, torch.Tensor]],
    run_node: Optional[Callable[[torch.fx.Node, tuple, dict], Any]],
) -> Any:
    dg = plan.device_graph
    program = dg.program
    ep = program.exported
    slots = Slots(plan, dict(arenas) if arenas is not None else host_arenas(plan))
    flat = program.flatten_inputs(inputs)
    user = iter(flat)
    env: dict[torch.fx.Node, Any] = {}
    for node in dg.graph.nodes:
        if node.op == "placeholder":
            if node.name in program.constants:
                env[node] = program.constant_tensor(node.name)
            else:
                env[node] = slots.bind(node.name, next(user))
        elif node.op == "call_function":
            args = torch.fx.node.map_arg(node.args, env.__getitem__)
            kwargs = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
            result = run_node(node, args, kwargs) if run_node else node.target(*args, **kwargs)
            if node.target is operator.getitem or node.name in plan.allocations:
                result = slots.bind(node.name, result)
            env[node] = result
        elif node.op == "output":
            outs = [torch.fx.node.map_arg(o, env.__getitem__) for o in output_values(node)]
            user_outs = [
                o.clone() if isinstance(o, torch.Tensor) else o
                for o, s in zip(outs, dg.output_specs)
                if s.kind.name == "USER_OUTPUT"
            ]
            _write_back(plan, env, flat)
            return pytree.tree_unflatten(user_outs, ep.call_spec.out_spec)
    raise ArenaError("the graph has no output node")
