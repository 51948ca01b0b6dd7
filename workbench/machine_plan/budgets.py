"""What each device of a user's machine can hold: capacity as the device reports it, less what is kept free.

``machine_budgets(gpus=, host=, parts=)`` returns one ``DeviceBudget`` per device —
``CUDA0``, ``CUDA1``, … (llama.cpp's names for them) and ``CPU`` — from the parts table
(a user's parts file joins it, ``machine.parts``).

Rules:

1. A GPU's capacity is its part's ``memory_bytes``, stated as the device reports it
   (memory sold as "24 GB" is 24 GiB; the measured H200's figure is CUDA's own). Each GPU
   keeps ``GPU_MARGIN_BYTES`` free: llama.cpp's ``--fit`` default margin per device,
   which covers the CUDA context and the driver's reservations.
2. The host's capacity is its part's ``memory_bytes`` (RAM); it keeps
   ``HOST_RESERVE_SHARE`` of it, at least ``HOST_RESERVE_MIN_BYTES``, for the operating
   system and other programs (an estimate).
3. A part that does not exist, or states no ``memory_bytes``, is refused naming the row to
   add to a parts file; zero GPUs is a host-only machine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..machine.op_cost import CostModelError
from ..machine.parts import PartsFile, part_facts, part_names
from .plan_errors import MachineError

__all__ = ["DeviceBudget", "GPU_MARGIN_BYTES", "HOST_RESERVE_MIN_BYTES", "HOST_RESERVE_SHARE", "machine_budgets"]  # fmt: skip

#: llama.cpp's ``--fit-target`` default: 1024 MiB kept free on every device (rule 1).
GPU_MARGIN_BYTES = 1024 * 2**20
#: The host RAM kept for the system and other programs (rule 2, an estimate).
HOST_RESERVE_SHARE = 0.10
HOST_RESERVE_MIN_BYTES = 4 * 2**30


@dataclass(frozen=True)
class DeviceBudget:
    """One device's memory for a plan (module rules)."""

    device: str  # CUDA0, CUDA1, ... or CPU
    part: str  # the part it is
    capacity_bytes: float  # as the device reports it
    reserved_bytes: float  # kept free (rules 1, 2)
    source: str  # where the capacity and the reserve come from

    @property
    def usable_bytes(self) -> float:
        return max(0.0, self.capacity_bytes - self.reserved_bytes)


def _memory(kind: str, name: str, parts: PartsFile) -> float:
    if not isinstance(name, str) or name not in part_names(kind, parts):
        where = f" (shipped, or in {parts})" if parts is not None else ""
        raise MachineError(f"unknown {kind} part {str(name)[:80]!r}{where}; valid: {', '.join(part_names(kind, parts))}, "
                           "or a part of your own in a parts file (--parts)")
    try:
        facts = part_facts(kind, name, parts)
    except CostModelError as exc:
        raise MachineError(str(exc)) from None
    if "memory_bytes" not in facts:
        raise MachineError(f"the {kind} part {name!r} states no memory_bytes: add the row "
                           f"'{kind},{name},memory_bytes,<bytes as the device reports them>,<source>' to a parts file "
                           "(--parts) to plan on it")
    return facts["memory_bytes"]


def machine_budgets(*, gpus: Sequence[str], host: str, parts: PartsFile = None) -> tuple[DeviceBudget, ...]:
    """Each GPU's budget (``CUDA0``… in the order given), then the host's (``CPU``)."""
    budgets = []
    for i, gpu in enumerate(gpus):
        capacity = _memory("gpu", gpu, parts)
        if capacity <= GPU_MARGIN_BYTES:
            raise MachineError(f"the gpu part {gpu!r} states {capacity / 2**20:.0f} MiB, no more than the "
                               f"{GPU_MARGIN_BYTES / 2**20:.0f} MiB kept free: nothing could be placed on it")
        budgets.append(DeviceBudget(f"CUDA{i}", gpu, capacity, float(GPU_MARGIN_BYTES),
                                    f"{gpu} memory_bytes; {GPU_MARGIN_BYTES // 2**20} MiB kept free (llama.cpp's --fit "
                                    "margin)"))  # fmt: skip
    ram = _memory("host", host, parts)
    reserve = max(HOST_RESERVE_SHARE * ram, float(HOST_RESERVE_MIN_BYTES))
    if ram <= reserve:
        raise MachineError(f"the host part {host!r} states {ram / 2**30:.1f} GiB of RAM, no more than the "
                           f"{reserve / 2**30:.1f} GiB kept for the system")
    budgets.append(DeviceBudget("CPU", host, ram, reserve,
                                f"{host} memory_bytes; {HOST_RESERVE_SHARE:.0%} (at least "
                                f"{HOST_RESERVE_MIN_BYTES // 2**30} GiB) kept for the system"))  # fmt: skip
    return tuple(budgets)
