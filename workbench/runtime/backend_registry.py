"""Backends: the names a program runs on, and the allocator registry behind each.

Rules:
1. A backend is ``"cuda"`` (the real GPU through CuPy) or ``"sim"`` (the simulated
   accelerator); ``None`` means ``default_backend()``: ``"cuda"`` where a GPU is usable,
   else ``"sim"``. Any other name is an ``UnknownBackendError`` listing the valid ones.
2. ``registry_for_backend`` makes a fresh registry: host + simulated cuda memory for
   ``"sim"``; pinned host + CuPy memory for ``"cuda"`` (``CudaUnavailableError`` without
   a usable GPU). ``shared_registry`` keeps one per backend for the whole process.
"""

from __future__ import annotations

import threading

from ..errors import WorkbenchError
from .allocators import AllocatorRegistry, HostAllocator, SimDeviceAllocator
from ..kernels.cuda import default_backend
from .cupy_allocator import CupyDeviceAllocator

__all__ = ["BACKENDS", "UnknownBackendError", "check_backend", "registry_for_backend", "shared_registry"]

#: Backends a program can run on: the real GPU through CuPy, or the simulator.
BACKENDS: tuple[str, ...] = ("cuda", "sim")


class UnknownBackendError(WorkbenchError, ValueError):
    """A backend name that the workbench does not know."""


def check_backend(backend: str | None) -> str:
    """Validate a backend name; None means ``default_backend()`` (rule 1)."""
    if backend is None:
        return default_backend()
    if not isinstance(backend, str) or backend.strip().lower() not in BACKENDS:
        raise UnknownBackendError(
            f"unknown backend {backend!r}; valid backends are {', '.join(repr(b) for b in BACKENDS)}"
        )
    return backend.strip().lower()


def registry_for_backend(backend: str | None = None) -> AllocatorRegistry:
    """A fresh registry for ``"sim"`` (host + simulated cuda) or ``"cuda"`` (pinned host + CuPy).

    ``"cuda"`` without a usable GPU raises ``CudaUnavailableError`` with the reason.
    """
    backend = check_backend(backend)
    if backend == "sim":
        return AllocatorRegistry([HostAllocator(), SimDeviceAllocator()], backend="sim")
    cuda_allocator = CupyDeviceAllocator()  # raises first when CUDA is unavailable
    return AllocatorRegistry([HostAllocator(pinned=True), cuda_allocator], backend="cuda")


_SHARED: dict[str, AllocatorRegistry] = {}
_LOCK = threading.Lock()


def shared_registry(backend: str | None = None) -> AllocatorRegistry:
    """One registry per backend for the whole process (rule 2)."""
    backend = check_backend(backend)
    with _LOCK:
        if backend not in _SHARED:
            _SHARED[backend] = registry_for_backend(backend)
        return _SHARED[backend]
