"""Copy routing: which path the bytes of one copy take.

Rules:
1. A copy whose device side lies in workbench device memory (an arena, a constant region,
   a caller-owned buffer) goes through the allocator that owns that memory: the CuPy copy
   kernels on ``cuda`` (pinned or staged), a byte copy on ``sim``.
2. An h2d copy needs its destination located; a d2h copy its source, and a contiguous
   destination; a d2d copy both ends, in memory of the same kind.
3. Anything else (a strided tensor, memory from outside the workbench) is copied by
   torch on the same stream, so stream ordering is the same on either path.
"""

from __future__ import annotations

from typing import Any, Optional, Protocol

import torch

from .allocators import Allocation, AllocatorRegistry, DeviceAllocator, find_allocation

__all__ = ["CopyRouter", "TorchCopier"]


class TorchCopier(Protocol):
    """What the router needs from an executor backend for the torch path (rule 3)."""

    def torch_copy(self, dst: torch.Tensor, src: torch.Tensor, stream: Any) -> None: ...


class CopyRouter:
    """Moves the bytes of h2d, d2h and d2d copies (see module rules)."""

    def __init__(self, registry: AllocatorRegistry, fallback: TorchCopier) -> None:
        self.registry = registry
        self.fallback = fallback

    def locate(self, t: torch.Tensor) -> Optional[tuple[DeviceAllocator, Allocation, int]]:
        """(allocator, allocation, byte offset) of a contiguous tensor in workbench memory, or None."""
        if not t.is_contiguous():
            return None
        hit = find_allocation(t.data_ptr())
        if hit is None:
            return None
        allocation, offset = hit
        try:
            allocator = self.registry.get(allocation.device.type)
        except LookupError:
            return None
        if allocator.kind != allocation.kind or offset + t.numel() * t.element_size() > allocation.nbytes:
            return None
        return allocator, allocation, offset

    def transfer(self, kind: str, dst: torch.Tensor, src: torch.Tensor, stream: Any) -> None:
        """Copy ``src`` into ``dst`` for a copy of ``kind`` (rules 1-3)."""
        if src.numel() == 0:
            return
        if kind == "h2d":
            loc = self.locate(dst)
            if loc is not None:
                allocator, allocation, offset = loc
                allocator.copy_host_to_device(allocation, offset, src.contiguous(), stream)
                return
        elif kind == "d2h":
            loc = self.locate(src)
            if loc is not None and dst.is_contiguous():
                allocator, allocation, offset = loc
                allocator.copy_device_to_host(dst, allocation, offset, stream)
                return
        else:
            to, frm = self.locate(dst), self.locate(src)
            if to is not None and frm is not None and to[0].kind == frm[1].kind:
                to[0].copy_device_to_device(to[1], to[2], frm[1], frm[2], src.numel() * src.element_size(), stream)
                return
        self.fallback.torch_copy(dst, src, stream)
