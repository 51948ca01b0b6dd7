"""Program state: the buffers a program updates, written back after every call.

Rules:
1. A program's state is the buffers its signature mutates (``BUFFER_MUTATION`` outputs;
   ``capture`` turns a model's in-place buffer updates into such outputs).
2. Where state lives: a buffer is a constant, so a session holds it resident in its
   constant region on every device that reads it (propagation rule 7); the program's
   own tensor — the captured module's buffer — is its master copy on the host.
3. Within a call every read of a buffer sees its value from the start of the call: the
   graph is functional, so the new value is a separate planned tensor (a graph output
   that propagation brings to the host), never the resident copy.
4. After the call's last step, the new value is copied into every resident copy: one
   write-back step per (buffer, device) — an ``h2d`` on the device's copy lane, or a
   ``host`` copy on the cpu — that waits for every earlier event of the call (so every
   read of the old value has finished). Then it is copied into the master copy, so the
   next call, the next session and eager PyTorch all continue from the same state.
5. Calls of a program with state run one at a time (``Session.run`` serializes them), so
   each call sees the state the previous one left.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..devices import CPU, Device, host_first
from ..errors import WorkbenchError
from ..device_graph import mutations
from ..planning.memory_plan import MemoryPlan
from .steps import Lane, Step, Steps, event_of, resident_write_step

__all__ = ["StateError", "StateWrite", "state_writes"]


class StateError(WorkbenchError, RuntimeError):
    """A program's state update that the executor cannot carry out."""


@dataclass(frozen=True)
class StateWrite:
    """One write-back step: the new value of a buffer into its resident copy on ``device``."""

    buffer: str  # the buffer's placeholder (a constant of the program)
    value: str  # the node holding the buffer's new value at the end of a call
    device: Device  # where the resident copy being written lives
    step: Step  # its event: an h2d onto a device, a host copy on the cpu (rule 4)


def _tag(device: Device) -> str:
    return "cpu" if device.is_host else f"{device.type}{device.index}"


def _latest_per_lane(steps: Steps) -> tuple[str, ...]:
    """The last event of every lane: waiting for them waits for every event of the call."""
    latest: dict[Lane, Step] = {}
    for step in steps.events:
        latest[event_of(step)[1]] = step
    return tuple(s.name for s in sorted(latest.values(), key=lambda s: s.index))


def state_writes(plan: MemoryPlan, steps: Steps) -> tuple[StateWrite, ...]:
    """Rule 4's write-back steps of ``plan``, in order after its graph's steps."""
    dg = plan.device_graph
    program = dg.program
    deps = _latest_per_lane(steps)
    writes = []
    index = len(steps.steps)
    for mutation in mutations(dg):
        if mutation.kind != "buffer":
            continue
        buffer, value = mutation.target, mutation.value
        where = dg.node_device.get(value, CPU) if value not in program.constants else CPU
        if not where.is_host:
            raise StateError(
                f"the new value of buffer {program.constants[buffer]!r} ({value!r}) is on {where}; "
                "propagation brings buffer mutations to the host, so this device graph was not made by propagate"
            )
        for device in host_first(dg.residency.get(buffer, ())):
            # pinned: the new value lies in the planned host arena (or is a constant)
            step = resident_write_step(index, f"{buffer}_state_{_tag(device)}", device, deps, pinned=True)
            writes.append(StateWrite(buffer, value, device, step))
            index += 1
    return tuple(writes)
