"""Device buffers: one allocation with an owner that frees it exactly once.

Rules:

1. A ``DeviceBuffer`` owns exactly one ``Allocation`` from one allocator.
2. It is freed exactly once: by ``free()``, by leaving its ``with`` block (also on an
   exception), or by its finalizer when the buffer is garbage collected — whichever
   comes first. The others then do nothing (``with``/finalizer) or raise (``free()``).
3. Calling ``free()`` on a freed buffer raises ``DoubleFreeError``; any other use of a
   freed buffer raises ``UseAfterFreeError``.
4. Live bytes per device are the allocator module's process-wide counters
   (``live_bytes``), so a leaked buffer shows up there until it is collected.
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence

import torch

from ..devices import Device, DeviceLike
from ..errors import ArgumentTypeError
from .byte_views import typed_view
from .allocators import (
    AllocatorRegistry,
    Allocation,
    DeviceAllocator,
    DoubleFreeError,
    UseAfterFreeError,
    live_allocations,
    live_bytes,
    live_bytes_by_device,
)

__all__ = ["DeviceBuffer", "live_allocations", "live_bytes", "live_bytes_by_device"]


def _release(allocator: DeviceAllocator, allocation: Allocation) -> None:
    # Runs at most once (weakref.finalize guarantees it); must not reference the buffer.
    allocator.free(allocation)


class DeviceBuffer:
    """``nbytes`` of memory on one device, freed exactly once (see module rules)."""

    def __init__(self, allocator: DeviceAllocator, nbytes: int, index: int = 0) -> None:
        if not isinstance(allocator, DeviceAllocator):
            raise ArgumentTypeError(f"expected a DeviceAllocator, got {type(allocator).__name__}")
        self._allocator = allocator
        self._allocation = allocator.allocate(nbytes, index)
        self._finalizer = weakref.finalize(self, _release, allocator, self._allocation)
        # At interpreter exit the process's memory goes anyway; freeing then could run
        # into half-torn-down modules.
        self._finalizer.atexit = False

    @classmethod
    def on(cls, device: DeviceLike, nbytes: int, registry: AllocatorRegistry) -> "DeviceBuffer":
        """Allocate ``nbytes`` on ``device`` through the registry's allocator for its type."""
        dev = Device.parse(device)
        return cls(registry.get(dev.type), nbytes, dev.index)

    # -- state ---------------------------------------------------------------------------
    @property
    def freed(self) -> bool:
        """True once the buffer has been freed."""
        return not self._finalizer.alive

    @property
    def allocation(self) -> Allocation:
        """The owned allocation (raises once freed)."""
        self._check_live("read its allocation")
        return self._allocation

    @property
    def allocator(self) -> DeviceAllocator:
        return self._allocator

    @property
    def device(self) -> Device:
        return self._allocation.device

    @property
    def nbytes(self) -> int:
        return self._allocation.nbytes

    @property
    def ptr(self) -> int:
        """Address of byte 0 (raises once freed)."""
        return self.allocation.ptr

    # -- use -----------------------------------------------------------------------------
    def view(self, offset: int = 0, nbytes: int | None = None) -> torch.Tensor:
        """A flat uint8 tensor aliasing ``[offset, offset + nbytes)`` of the buffer."""
        self._check_live("view it")
        return self._allocator.view(self._allocation, offset, nbytes)

    def typed(self, dtype: torch.dtype, shape: Sequence[int], offset: int = 0) -> torch.Tensor:
        """A contiguous tensor of ``dtype`` and ``shape`` over the buffer's bytes at ``offset``."""
        numel = 1
        for d in shape:
            numel *= int(d)
        return typed_view(self.view(offset, numel * dtype.itemsize), dtype, tuple(shape))

    def copy_from_host(self, src: torch.Tensor, offset: int = 0, stream: Any = None) -> None:
        """Copy a contiguous host tensor's bytes into the buffer at ``offset``."""
        self._check_live("copy into it")
        self._allocator.copy_host_to_device(self._allocation, offset, src, stream)

    def copy_to_host(self, dst: torch.Tensor, offset: int = 0, stream: Any = None) -> None:
        """Fill a contiguous host tensor from the buffer's bytes at ``offset``."""
        self._check_live("copy from it")
        self._allocator.copy_device_to_host(dst, self._allocation, offset, stream)

    def copy_from(
        self,
        src: "DeviceBuffer",
        nbytes: int | None = None,
        dst_offset: int = 0,
        src_offset: int = 0,
        stream: Any = None,
    ) -> None:
        """Copy ``nbytes`` (default: all of ``src`` from ``src_offset``) from another buffer."""
        self._check_live("copy into it")
        src._check_live("copy from it")
        if nbytes is None:
            nbytes = src.nbytes - src_offset
        self._allocator.copy_device_to_device(
            self._allocation, dst_offset, src._allocation, src_offset, nbytes, stream
        )

    def free(self) -> None:
        """Free the buffer now; a second call raises ``DoubleFreeError``."""
        if not self._finalizer.alive:
            raise DoubleFreeError(f"{self!r} was already freed")
        self._finalizer()

    # -- context manager -----------------------------------------------------------------
    def __enter__(self) -> "DeviceBuffer":
        self._check_live("enter a with block")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._finalizer.alive:  # freed inside the block already is fine
            self._finalizer()

    def _check_live(self, action: str) -> None:
        if not self._finalizer.alive:
            raise UseAfterFreeError(f"cannot {action}: {self!r} was already freed")

    def __repr__(self) -> str:
        state = "freed" if self.freed else "live"
        return f"DeviceBuffer({self.nbytes} B on {self.device}, {self._allocation.kind}, {state})"
