"""What a program writes besides its outputs: its buffers (state) and, rarely, its inputs.

``capture`` functionalizes such writes (``capture`` rule 2), so they are in the
signature: each ``BUFFER_MUTATION`` output is the new value of a buffer, each
``USER_INPUT_MUTATION`` output the new value of a user input. Every stage that runs a
program applies them after the call, as eager PyTorch would have written them in place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from torch.export.graph_signature import OutputKind

from .errors import WorkbenchError
from .propagate import DeviceGraph

__all__ = ["Mutation", "MutationError", "mutations"]


class MutationError(WorkbenchError, ValueError):
    """A mutation output that names no buffer or input of its program."""


@dataclass(frozen=True)
class Mutation:
    """One write the program makes to its state or its caller's input."""

    target: str  # the buffer's placeholder (kind "buffer") or the user input's (kind "input")
    value: str  # the node of the device graph holding the new value at the end of a call
    kind: str  # "buffer" | "input"


def mutations(dg: DeviceGraph) -> tuple[Mutation, ...]:
    """Every buffer and user-input mutation of ``dg``'s signature, in output order."""
    program = dg.program
    placeholder_of: Mapping[str, str] = {fqn: name for name, fqn in program.constants.items()}
    found = []
    for spec in dg.output_specs:
        if spec.kind == OutputKind.BUFFER_MUTATION:
            buffer = placeholder_of.get(spec.target or "")
            if buffer is None:
                raise MutationError(f"the program mutates {spec.target!r}, which is not one of its buffers")
            found.append(Mutation(buffer, spec.arg.name, "buffer"))
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            if spec.target not in program.user_inputs:
                raise MutationError(f"the program mutates input {spec.target!r}, which is not one of its inputs")
            found.append(Mutation(spec.target, spec.arg.name, "input"))
    return tuple(found)
