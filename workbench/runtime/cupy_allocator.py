"""The real ``cuda`` allocator: CuPy device memory, copies through the copy kernels.

Rules (besides the ``DeviceAllocator`` rules every allocator keeps):
1. Creating one needs a usable GPU (``CudaUnavailableError`` otherwise).
2. One plain ``cudaMalloc`` block per allocation; views are torch CUDA tensors over the
   same memory via DLPack (zero-copy).
3. Copies go through one ``CopyEngine`` per device (``workbench.kernels``).
"""

from __future__ import annotations

from typing import Any

import torch

from ..devices import Device
from ..kernels.copies import DEFAULT_CHUNK_BYTES, CopyEngine
from .allocators import AllocationRecord, AllocatorError, DeviceAllocator
from ..kernels.cuda import cupy_module, device_count, require_cuda, stream_ptr

__all__ = ["CupyDeviceAllocator"]


class CupyDeviceAllocator(DeviceAllocator):
    """Real ``cuda`` memory from CuPy (plain cudaMalloc, one block per allocation).

    Views are torch CUDA tensors over the same memory via DLPack (zero-copy); they keep
    the block alive even after ``free`` (then it is no longer counted). Copies go through
    ``workbench.kernels.copies.CopyEngine``: pinned host memory is copied directly,
    pageable memory through double-buffered pinned staging.
    """

    device_type = "cuda"
    kind = "cupy"

    def __init__(self, chunk_bytes: int | None = None) -> None:
        require_cuda("CupyDeviceAllocator")
        self._chunk_bytes = chunk_bytes
        self._engines: dict[int, Any] = {}

    def engine(self, index: int = 0) -> Any:
        """The copy engine (staging buffers, events, kernels) of ``cuda:<index>``."""
        if index not in self._engines:
            self._engines[index] = CopyEngine(index, self._chunk_bytes or DEFAULT_CHUNK_BYTES)
        return self._engines[index]

    def _check_device(self, device: Device) -> None:
        if device.index >= device_count():
            raise AllocatorError(
                f"{device} does not exist here; valid: cuda:0..cuda:{device_count() - 1}"
            )

    def _allocate(self, nbytes: int, device: Device) -> tuple[int, Any]:
        cp = cupy_module()
        with cp.cuda.Device(device.index):
            memory = cp.cuda.Memory(max(nbytes, 1))
        return int(memory.ptr), memory

    def _view(self, record: AllocationRecord, offset: int, nbytes: int) -> torch.Tensor:
        cp = cupy_module()
        with cp.cuda.Device(record.allocation.device.index):
            array = cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(record.memory, offset))
            return torch.from_dlpack(array)

    def _h2d(self, dst: AllocationRecord, dst_offset: int, src: torch.Tensor, stream: Any) -> None:
        self.engine(dst.allocation.device.index).h2d(dst.allocation.ptr + dst_offset, src, stream)

    def _d2h(self, dst: torch.Tensor, src: AllocationRecord, src_offset: int, stream: Any) -> None:
        self.engine(src.allocation.device.index).d2h(dst, src.allocation.ptr + src_offset, stream)

    def _d2d(
        self, dst: AllocationRecord, dst_offset: int, src: AllocationRecord, src_offset: int, nbytes: int, stream: Any
    ) -> None:
        self.engine(dst.allocation.device.index).d2d(
            dst.allocation.ptr + dst_offset,
            src.allocation.ptr + src_offset,
            nbytes,
            stream,
            src_device=src.allocation.device.index,
        )

    def synchronize(self, stream: Any = None) -> None:
        cp = cupy_module()
        if stream is not None:
            cp.cuda.runtime.streamSynchronize(stream_ptr(stream))
            return
        for index in range(device_count()):  # torch may have queued work where no engine ran
            with cp.cuda.Device(index):
                cp.cuda.runtime.deviceSynchronize()
