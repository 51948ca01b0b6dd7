"""An imported ExecuTorch program's memory plan as a real ``MemoryPlan``: ExecuTorch's own offsets.

``to_memory_plan(program, dg)`` places every tensor ExecuTorch planned at the buffer and
offset ExecuTorch gave it, with lifetimes over the imported graph's steps, so
``BufferView``, the verifier and the workbench's algorithms (``with_algorithm``) work on
ExecuTorch's plan unchanged.

Rules:
1. A planned storage is a tensor with a buffer that is no view; a view ExecuTorch elided
   shares its base's storage and is listed among the base's aliases.
2. Lifetime: from the step that writes the storage (its placeholder for an input or
   state) to the last step that reads it or one of its views; outputs live to the last
   step. Steps are the imported graph's nodes, in order.
3. Buffers: a device's arena is its buffers stacked in index order; a tensor's offset is
   its buffer's base plus ExecuTorch's offset, so ``arena_bytes`` per device is the sum of
   its ``non_const_buffer_sizes``.
4. Alignment: ExecuTorch does not store it; the plan uses ExecuTorch's default (16 bytes)
   when every offset is a multiple of it, else the largest power of two dividing them all.
5. Everything else is unplanned, with the reason: constants (held in the program), and
   inputs or outputs the caller owns (skip flags).
"""

from __future__ import annotations

import math
from typing import Optional

from ..planning import Buffer, aligned_size, lower_bound
from ..planning.memory_plan import MemoryPlan, TensorAllocation
from ..devices import Device
from ..propagate import DeviceGraph
from .program import ExecuTorchProgram, ProgramTensor

__all__ = [
    "DEFAULT_ALIGNMENT",
    "EXECUTORCH_ALGORITHM",
    "plan_alignment",
    "to_memory_plan",
]

#: ExecuTorch's memory-planning alignment by default (``exir.tensor.ALIGNMENT``).
DEFAULT_ALIGNMENT = 16

#: The ``MemoryPlan.algorithm`` of an imported plan: ExecuTorch's offsets, as emitted.
EXECUTORCH_ALGORITHM = "executorch"


def plan_alignment(program: ExecuTorchProgram) -> int:
    """Rule 4."""
    offsets = [t.offset for t in program.tensors.values() if t.offset]
    common = math.gcd(*offsets) if offsets else 0
    if common % DEFAULT_ALIGNMENT == 0:
        return DEFAULT_ALIGNMENT
    return common & -common  # the largest power of two dividing every offset


def to_memory_plan(program: ExecuTorchProgram, dg: DeviceGraph) -> MemoryPlan:
    """ExecuTorch's memory plan of ``program`` over ``dg`` (its imported graph); see the rules."""
    alignment = plan_alignment(program)
    steps = tuple(n.name for n in dg.graph.nodes if n.op != "output")
    step = {name: k for k, name in enumerate(steps)}
    base = _buffer_bases(program)
    aliases: dict[int, list[str]] = {}
    storage_of: dict[str, str] = {}
    for t in program.tensors.values():
        if t.memory_id is not None:
            owner = program.tensors[program.storage(t.index)]
            storage_of[t.name] = owner.name
            if owner.index != t.index:
                aliases.setdefault(owner.index, []).append(t.name)
    returned = {program.storage(i) for i in program.outputs if i in program.tensors}
    copied = {index for call in program.copies for index in call.writes}
    allocations = {}
    for index, (start, end) in _spans(program, step, returned).items():
        t = program.tensors[index]
        buffer = t.memory_id if t.memory_id is not None else 0  # every spanned storage is planned
        allocations[t.name] = TensorAllocation(
            name=t.name,
            device=t.device,
            arena=_arena_index(program, t),
            offset=base[buffer] + int(t.offset or 0),  # rule 3
            size=aligned_size(t.nbytes, alignment),
            nbytes=t.nbytes,
            start=start,
            end=end,
            kind=_kind(t, returned, copied),
            aliases=tuple(aliases.get(index, ())),
        )
    by_device: dict[Device, list[Buffer]] = {}
    for a in allocations.values():
        by_device.setdefault(a.device, []).append(Buffer(a.name, a.nbytes, a.start, a.end))
    arena_bytes = program.arena_bytes
    return MemoryPlan(
        device_graph=dg,
        algorithm=EXECUTORCH_ALGORITHM,
        alignment=alignment,
        steps=steps,
        allocations=allocations,
        storage_of=storage_of,
        unplanned=_unplanned(program, returned),
        arena_bytes=arena_bytes,
        lower_bound={d: lower_bound(by_device.get(d, []), alignment) for d in arena_bytes},
        constant_bytes=program.constant_bytes,
        alloc_graph_inputs=all(
            program.tensors[i].memory_id is not None for i in program.inputs if i in program.tensors
        ),
        alloc_graph_outputs=all(program.tensors[i].memory_id is not None for i in returned),
    )


def _spans(program: ExecuTorchProgram, step: dict[str, int], returned: set[int]) -> dict[int, tuple[int, int]]:
    """Rule 2: ``ExecuTorchProgram.lifetimes`` (over calls) mapped onto the graph's steps."""
    call_step = [step[c.name] for c in program.calls]
    last_step = max(step.values(), default=0)
    spans = {}
    for owner, (first, last) in program.lifetimes().items():
        t = program.tensors[owner]
        start = step[t.name] if t.role in ("input", "state") else call_step[first]
        end = last_step if owner in returned else (call_step[last] if call_step else start)
        spans[owner] = (start, max(start, end))
    return spans


def _buffer_bases(program: ExecuTorchProgram) -> dict[int, int]:
    """Rule 3: buffer index → its base offset in its device's arena."""
    base: dict[int, int] = {}
    top: dict[Device, int] = {}
    for index in range(1, len(program.buffer_sizes)):
        device = program.buffer_devices[index]
        base[index] = top.get(device, 0)
        top[device] = base[index] + program.buffer_sizes[index]
    return base


def _arena_index(program: ExecuTorchProgram, t: ProgramTensor) -> int:
    same = [i for i in range(1, len(program.buffer_sizes)) if program.buffer_devices[i] == t.device]
    return same.index(int(t.memory_id)) if t.memory_id in same else 0


def _kind(t: ProgramTensor, returned: set[int], copied: set[int]) -> str:
    if t.role == "input":
        return "input"
    if t.index in returned:
        return "output"
    if t.index in copied:
        return "copy"
    return "activation"


def _unplanned(program: ExecuTorchProgram, returned: set[int]) -> dict[str, str]:
    """Rule 5."""
    out: dict[str, str] = {}
    for t in program.tensors.values():
        if t.memory_id is not None or t.role == "unused":
            continue
        reason: Optional[str] = None
        if t.role == "constant":
            reason = f"a constant ExecuTorch holds in the program, on {t.device}"
        elif t.role == "input":
            reason = f"an input the caller supplies on {t.device}; ExecuTorch plans no memory for it"
        elif t.index in returned:
            reason = f"an output returned on {t.device}; the caller owns its memory"
        else:
            reason = "ExecuTorch planned no memory for it"
        out[t.name] = reason
    return out
