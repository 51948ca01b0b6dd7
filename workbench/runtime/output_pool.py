"""A device pool for caller-owned outputs: after the first calls, a call allocates nothing.

A session loaded with ``outputs="pooled"`` (and every session with ``launch="graph"``)
takes the memory of its caller-owned device values — outputs that are not planned in
an arena, and copies of outputs out of the arena — from this pool instead of
allocating a fresh ``DeviceBuffer`` per value per call.

Ownership rule (what a caller may rely on):

1. The pool holds two sets of buffers, used by calls in turn (call 0, 2, 4, … the
   first; 1, 3, 5, … the second). A call's pooled device outputs therefore stay valid
   until the session's next call has returned (that call may take them as its inputs:
   a decode step fed the caches of the step before), and are overwritten by the call
   after it. Keep a value longer by copying it (``clone_to``/``to_host``).
2. A buffer is found by (set, node, device, bytes): the same value of the same call
   parity gets the same memory every time, so steady-state calls allocate nothing and
   a captured graph's output addresses stay fixed. A value whose size changes gets a
   new buffer (the old one is freed at once: its previous holder was two calls ago).
3. The session frees the pool at ``close``; a pooled output must not be used after it.
4. Each buffer's flat view is made once, when it is allocated: a call then makes no
   runtime call to hand out a value (a CUDA graph capture must not see one).
"""

from __future__ import annotations

import math
import threading
from typing import Optional

import torch

from ..devices import Device
from .allocators import AllocatorRegistry
from .device_buffers import DeviceBuffer
from .tensors import owned_tensor

__all__ = ["OUTPUT_MODES", "OutputPool"]

#: ``"fresh"``: every caller-owned device output gets a buffer of its own;
#: ``"pooled"``: they come from the session's ``OutputPool`` (module rules).
OUTPUT_MODES: tuple[str, ...] = ("fresh", "pooled")

#: Sets of buffers used in turn (rule 1).
SETS = 2


class OutputPool:
    """The buffers of caller-owned device values, two sets used in turn (module rules)."""

    def __init__(self, registry: AllocatorRegistry) -> None:
        self._registry = registry
        self._buffers: dict[tuple[int, str, Device], DeviceBuffer] = {}
        self._views: dict[tuple[int, str, Device], torch.Tensor] = {}  # rule 4
        self._lock = threading.Lock()
        self.allocations = 0  # buffers this pool has allocated, ever

    def tensor(self, call: int, name: str, device: Device, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        """A tensor of ``dtype``/``shape`` for value ``name`` on ``device`` in call number
        ``call``, over its pooled buffer (rules 2, 4)."""
        key = (call % SETS, name, device)
        nbytes = math.prod(shape) * dtype.itemsize
        with self._lock:
            held = self._buffers.get(key)
            if held is None or held.nbytes != nbytes or held.freed:
                if held is not None and not held.freed:
                    held.free()
                held = DeviceBuffer.on(device, nbytes, self._registry)
                self._buffers[key] = held
                self._views[key] = held.view()
                self.allocations += 1
            return owned_tensor(held, dtype, shape, self._views[key])

    def owns(self, buffer: Optional[DeviceBuffer]) -> bool:
        """True when ``buffer`` is one of the pool's."""
        return buffer is not None and any(b is buffer for b in self._buffers.values())

    @property
    def nbytes(self) -> int:
        """Bytes the pool holds."""
        return sum(b.nbytes for b in self._buffers.values() if not b.freed)

    def free(self) -> None:
        """Rule 3."""
        with self._lock:
            for buffer in self._buffers.values():
                if not buffer.freed:
                    buffer.free()
            self._buffers.clear()
            self._views.clear()
