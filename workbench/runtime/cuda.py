"""The real ``cuda`` backend: availability, pinned host memory, the CuPy allocator.

Rules:

1. Importing this module never touches the GPU, and neither does importing CuPy.
2. ``cuda_available()`` asks the CUDA runtime how many devices there are and whether
   torch was built with CUDA; it creates no stream, event or context-bound object, prints
   nothing, and caches its answer for the process.
3. Setting the environment variable ``WORKBENCH_DISABLE_CUDA=1`` makes CUDA unavailable
   (to run the simulator on a GPU machine, or to test the fallback).
4. Everything that needs the GPU checks availability first and raises
   ``CudaUnavailableError`` with the one-line reason otherwise.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

import torch

from ..devices import Device
from .allocators import DeviceAllocator, _Record
from ..errors import WorkbenchError

DISABLE_ENV = "WORKBENCH_DISABLE_CUDA"


class CudaUnavailableError(WorkbenchError, RuntimeError):
    """The ``cuda`` backend was asked for on a machine where it cannot run."""


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str, int]:
    """(usable, reason if not, device count). Runs once per process (rule 2)."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA library underneath
        return False, f"CuPy cannot be imported ({type(exc).__name__}: {_one_line(exc)})", 0
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError without a driver or device
        return False, f"the CUDA runtime finds no usable GPU ({_one_line(exc)})", 0
    if count < 1:
        return False, "the CUDA runtime reports 0 GPUs", 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns on stderr when its CUDA init fails
        torch_ok = torch.cuda.is_available()
    if not torch_ok:
        return (
            False,
            f"CuPy sees {count} GPU(s) but torch {torch.__version__} cannot use CUDA "
            "(a CPU-only build, or a CUDA version the driver does not support)",
            count,
        )
    return True, "", count


def cuda_available() -> bool:
    """True when the ``cuda`` backend can run here (CuPy and torch both see a GPU)."""
    if os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
        return False
    return _probe()[0]


def cuda_unavailable_reason() -> str:
    """Why ``cuda`` cannot run, in one line ("" when it can)."""
    if os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
        return f"CUDA is unavailable: disabled by {DISABLE_ENV}={os.environ[DISABLE_ENV]}"
    ok, reason, _ = _probe()
    return "" if ok else f"CUDA is unavailable: {reason}"


def default_backend() -> str:
    """``"cuda"`` where a GPU is usable, else ``"sim"``."""
    return "cuda" if cuda_available() else "sim"


def require_cuda(what: str) -> None:
    """Raise ``CudaUnavailableError`` naming ``what`` needed CUDA, unless it is available."""
    if not cuda_available():
        raise CudaUnavailableError(f"{what} needs a CUDA GPU. {cuda_unavailable_reason()}")


def device_count() -> int:
    """GPUs CUDA can use here (0 when unavailable)."""
    return _probe()[2] if cuda_available() else 0


def cupy_module() -> Any:
    """The ``cupy`` module, after checking that CUDA is available (rule 4)."""
    require_cuda("this operation")
    import cupy

    return cupy


def pinned_host_tensor(nbytes: int) -> torch.Tensor:
    """A flat uint8 CPU tensor in page-locked host memory (mapped into the device's
    address space on 64-bit systems with unified addressing)."""
    import numpy as np

    cp = cupy_module()
    memory = cp.cuda.alloc_pinned_memory(nbytes)
    # numpy keeps `memory` alive as the array's base, torch keeps the array alive.
    return torch.from_numpy(np.frombuffer(memory, dtype=np.uint8, count=nbytes))


def stream_ptr(stream: Any) -> int:
    """The raw ``cudaStream_t`` of a CuPy stream, a torch CUDA stream or an int (None: current)."""
    if stream is None:
        return int(cupy_module().cuda.get_current_stream().ptr)
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("ptr", "cuda_stream"):  # CuPy, then torch
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise TypeError(
        f"a stream is a cupy.cuda.Stream, a torch.cuda.Stream, a raw stream int or None, "
        f"not {type(stream).__name__}"
    )


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
            from ..kernels.copies import DEFAULT_CHUNK_BYTES, CopyEngine

            self._engines[index] = CopyEngine(index, self._chunk_bytes or DEFAULT_CHUNK_BYTES)
        return self._engines[index]

    def _check_device(self, device: Device) -> None:
        if device.index >= device_count():
            raise ValueError(
                f"{device} does not exist here; valid: cuda:0..cuda:{device_count() - 1}"
            )

    def _allocate(self, nbytes: int, device: Device) -> tuple[int, Any]:
        cp = cupy_module()
        with cp.cuda.Device(device.index):
            memory = cp.cuda.Memory(max(nbytes, 1))
        return int(memory.ptr), memory

    def _view(self, record: _Record, offset: int, nbytes: int) -> torch.Tensor:
        cp = cupy_module()
        with cp.cuda.Device(record.allocation.device.index):
            array = cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(record.memory, offset))
            return torch.from_dlpack(array)

    def _h2d(self, dst: _Record, dst_offset: int, src: torch.Tensor, stream: Any) -> None:
        self.engine(dst.allocation.device.index).h2d(dst.allocation.ptr + dst_offset, src, stream)

    def _d2h(self, dst: torch.Tensor, src: _Record, src_offset: int, stream: Any) -> None:
        self.engine(src.allocation.device.index).d2h(dst, src.allocation.ptr + src_offset, stream)

    def _d2d(
        self, dst: _Record, dst_offset: int, src: _Record, src_offset: int, nbytes: int, stream: Any
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
