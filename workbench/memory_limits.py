"""Weights too large for the memory they would be made in, refused before anything is allocated.

Rules:
1. Weights are made on the device torch allocates new tensors on (a ``torch.device(...)``
   block or ``torch.set_default_device`` choose it; otherwise the CPU). On the meta
   device nothing is allocated, so nothing is checked.
2. The memory there is the machine's physical memory for the CPU and the GPU's total
   memory for a CUDA device; weights needing more cannot be made, and are refused. A
   device whose memory cannot be read is not checked.
3. A caller may also cap the parameters it builds with real weights (``max_params``: the
   command line's ``MAX_RUN_PARAMETERS``).
4. A refusal is the caller's error (a ``WorkbenchError``) naming what was to be built,
   the parameters and bytes it needs, the limit it passes, and how to build it
   shape-only instead (the caller's hint).
"""

from __future__ import annotations

import os
from typing import Optional

import torch

from .units import format_bytes

__all__ = ["allocation_device", "check_weights_fit", "device_memory"]


def allocation_device() -> torch.device:
    """Rule 1: where a tensor made now, without a device, would live."""
    return torch.empty(0).device


def device_memory(device: torch.device) -> Optional[int]:
    """Rule 2: bytes of memory ``device`` has, or None when they cannot be read."""
    try:
        if device.type == "cpu":
            return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory)
    except (AttributeError, ValueError, OSError, RuntimeError, AssertionError):
        return None
    return None


def check_weights_fit(
    params: int,
    nbytes: int,
    what: str,
    error: type[Exception],
    hint: str,
    *,
    max_params: Optional[float] = None,
) -> None:
    """Refuse (rule 4) to make ``params`` parameters taking ``nbytes`` bytes on the
    allocation device when they pass ``max_params`` (rule 3) or the device's memory (rule 2)."""
    device = allocation_device()
    if device.type == "meta":
        return
    if max_params is not None and params > max_params:
        raise error(
            f"{what}: {params / 1e9:.1f} B parameters ({format_bytes(nbytes)} of weights) is more than the "
            f"{max_params / 1e9:.1f} B built with real weights here; {hint}"
        )
    memory = device_memory(device)
    if memory is not None and nbytes > memory:
        raise error(
            f"{what}: {params:,} parameters need {format_bytes(nbytes)} ({nbytes:,} bytes) of weights, more than the "
            f"{format_bytes(memory)} of memory device {device} has; {hint}"
        )
