"""A call's inputs: what each must be, checked before any memory is touched.

Rules:
1. Inputs are flattened with the program's captured signature; another structure is an
   ``InputError`` that shows the expected one.
2. Every tensor input is checked against its traced value: a tensor (or a CuPy array on
   ``cuda``), on the device the plan expects it on, with its dtype and shape; a planned
   input must fit its slot (the plan's upper bound for dynamic sizes).
3. A host tensor where the plan wants a device tensor (a caller-owned input under
   ``skip_h2d_for_method_inputs``) is an error that says how to stage it, never a silent
   copy; a device tensor where the plan wants a host tensor likewise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

from ..capture import InputSignatureError
from ..devices import Device
from ..errors import WorkbenchError
from ..graph_values import value_of
from ..planning.memory_plan import MemoryPlan
from .tensors import device_of, is_cupy_array

__all__ = ["InputError", "InputSpec", "check_inputs", "flatten_inputs", "input_specs"]


class InputError(WorkbenchError, ValueError):
    """A caller's input is not what the plan expects (device, dtype, shape, count)."""


@dataclass(frozen=True)
class InputSpec:
    """What one user input of a plan must be."""

    name: str  # the input's placeholder
    device: Device  # where the caller supplies it
    planned: bool  # True: copied into its planned slot; False: the caller owns it
    val: Any  # the traced value (fake tensor), or a non-tensor


def input_specs(plan: MemoryPlan) -> tuple[InputSpec, ...]:
    """One ``InputSpec`` per user input, in call order."""
    dg = plan.device_graph
    placeholders = {n.name: n for n in dg.graph.nodes if n.op == "placeholder"}
    return tuple(
        InputSpec(name, dg.node_device[name], name in plan.storage_of, value_of(placeholders[name]))
        for name in dg.program.user_inputs
    )


def flatten_inputs(plan: MemoryPlan, inputs: tuple) -> list:
    """Rule 1: the call's inputs as the flat list the user-input placeholders take."""
    try:
        return plan.device_graph.program.flatten_inputs(inputs)
    except InputSignatureError as exc:
        raise InputError(str(exc)) from None


def check_inputs(plan: MemoryPlan, backend: str, flat: list, specs: Optional[Sequence[InputSpec]] = None) -> None:
    """Rules 2 and 3, for every flattened input, without touching memory."""
    for spec, value in zip(specs if specs is not None else input_specs(plan), flat):
        if not isinstance(spec.val, torch.Tensor):
            continue
        if not (isinstance(value, torch.Tensor) or (backend == "cuda" and is_cupy_array(value))):
            raise InputError(f"input {spec.name!r} must be a tensor, got {type(value).__name__}")
        try:
            found = device_of(value, backend)
        except (TypeError, ValueError) as exc:
            raise InputError(f"input {spec.name!r}: {exc}") from None
        if found != spec.device:
            raise InputError(_device_message(spec, found, backend))
        dtype = value.dtype if isinstance(value, torch.Tensor) else torch.from_dlpack(value).dtype
        shape = tuple(value.shape)
        want = tuple(spec.val.shape)
        if dtype != spec.val.dtype:
            raise InputError(f"input {spec.name!r} must have dtype {spec.val.dtype}, got {dtype}")
        if len(shape) != len(want) or any(isinstance(w, int) and w != s for w, s in zip(want, shape)):
            raise InputError(f"input {spec.name!r} must have shape {tuple(str(w) for w in want)}, got {shape}")
        if spec.planned:
            nbytes = math.prod(shape) * dtype.itemsize
            room = plan.allocations[plan.storage_of[spec.name]].nbytes
            if nbytes > room:
                raise InputError(
                    f"input {spec.name!r} of shape {shape} needs {nbytes} B but its planned "
                    f"slot holds {room} B (the plan's upper bound)"
                )


def _staging_hint(device: Device, backend: str) -> str:
    hint = f"stage it with workbench.runtime.to_device(x, {str(device)!r}, backend={backend!r})"
    if backend == "cuda":
        hint += f", or pass a CUDA torch tensor or CuPy array on {device}"
    return hint


def _device_message(spec: InputSpec, found: Device, backend: str) -> str:
    if spec.device.is_host:
        return (
            f"input {spec.name!r} must be a host (cpu) tensor, but it is on {found}; "
            "copy it to the host first (workbench.runtime.to_host)"
        )
    why = (
        "it is copied from there into its planned device slot"
        if spec.planned
        else "the plan was propagated with skip_h2d_for_method_inputs, so the caller owns it on the device and no h2d copy runs"
    )
    got = "a host tensor" if found.is_host else f"a tensor on {found}"
    return f"input {spec.name!r} must be supplied on {spec.device} ({why}), but got {got}; {_staging_hint(spec.device, backend)}"
