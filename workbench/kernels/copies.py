"""CuPy copy kernels: host↔device, device↔device, and a one-launch gather of rows.

Everything that touches the GPU lives in ``CopyEngine`` and ``MappedHost``; the plans
they follow are plain functions that run anywhere (``staging_schedule``,
``gather_row_offsets``, ``gather_variant``, ``gather_launch_config``). Importing this
module never touches the GPU.

Rules:

1. Pinned host memory is copied directly with ``cudaMemcpyAsync`` on the caller's stream.
2. Pageable host memory goes through two pinned staging buffers of ``chunk_bytes``
   each, used in turn (``staging_schedule``). Host→device: copying chunk i into its
   staging buffer overlaps the DMA of chunk i-1 out of the other one; a buffer is
   refilled only after the event recorded behind its previous DMA has completed.
   Device→host: the DMA of chunk i overlaps draining chunk i-1 into the destination.
3. A pageable h2d returns once every byte has left the source (the source may then be
   freed); a pageable d2h returns once the destination is filled.
4. With ``stream=None`` every copy has completed on return; with a stream, pinned and
   device-side copies may still run, and the caller synchronizes before reuse.
5. The gather copies rows ``src[indices[k]]`` to ``dst[k]`` in one kernel launch, reading
   a pinned, mapped host tensor (or device memory) through its device address. It uses
   16-byte loads when the source, destination, row size and row stride are all 16-byte
   aligned, else byte loads. A row whose offset is out of bounds is written as zeros and
   never read (host indices are checked before launch and raise instead).
6. The reuse gather writes the same rows in one launch, but each output row first scans
   ``cached_indices`` (a prefetch's row ids; a linear scan, at most
   ``MAX_CACHED_ROWS``): on a match the row is copied from the prefetched device buffer
   ``cached`` (its first matching slot), else from the source as in rule 5. It records
   per row whether it hit, so the caller learns how many rows crossed the link.
7. The routed gather writes ``len(indices)`` rows in one launch: output row j < n, with
   n = ``*count`` read on the device (clamped to [0, rows]), is the source row
   ``indices[j]`` as in rule 5; the rows from n on are zeros and read nothing. The block
   of row 0 records n, so the caller learns how many rows crossed without the host
   waiting for ``count`` before the launch.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from ..runtime.cuda import cupy_module, pinned_host_tensor, stream_ptr
from ..errors import ArgumentTypeError, WorkbenchError

#: Bytes per pinned staging buffer (two are used in turn).
DEFAULT_CHUNK_BYTES = 8 << 20
#: Threads per block of the gather kernel.
GATHER_THREADS = 256
#: CUDA's limit on gridDim.y, which indexes the gathered rows.
MAX_GATHER_ROWS = 65535
#: Most prefetched rows a reuse gather scans per output row (rule 6; a router's top-k is 8-16).
MAX_CACHED_ROWS = 1024


class KernelArgumentError(WorkbenchError, ValueError):
    """An argument a copy kernel (or its launch plan) cannot take; the message says what is valid."""


class GatherIndexError(WorkbenchError, IndexError):
    """A gather index outside the rows of its source."""


# -- pure plans (CPU-testable) -------------------------------------------------------------


@dataclass(frozen=True)
class StagingChunk:
    """One step of a staged copy: bytes [offset, offset + nbytes) through buffer ``slot``."""

    index: int
    offset: int
    nbytes: int
    slot: int


def staging_schedule(nbytes: int, chunk_bytes: int = DEFAULT_CHUNK_BYTES, slots: int = 2) -> tuple[StagingChunk, ...]:
    """Split a copy of ``nbytes`` into chunks of at most ``chunk_bytes``, staging buffers in turn.

    The chunks cover [0, nbytes) exactly once, in order; chunk i uses slot ``i % slots``.
    """
    for name, value, low in (("nbytes", nbytes, 0), ("chunk_bytes", chunk_bytes, 1), ("slots", slots, 1)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise KernelArgumentError(f"{name} must be an int >= {low}, got {value!r}")
    return tuple(
        StagingChunk(i, offset, min(chunk_bytes, nbytes - offset), i % slots)
        for i, offset in enumerate(range(0, nbytes, chunk_bytes))
    )


def gather_row_offsets(indices: Any, num_rows: int, row_stride_bytes: int) -> np.ndarray:
    """Byte offsets (int64) of rows ``indices`` in a source of ``num_rows`` rows.

    ``indices`` is a 1-D sequence of ints (list, numpy array or CPU torch tensor) in
    ``[0, num_rows)``; anything else is an error saying what was wrong.
    """
    if isinstance(indices, torch.Tensor):
        if indices.device.type != "cpu":
            raise KernelArgumentError("gather_row_offsets takes host indices; device indices are offset on the device")
        indices = indices.numpy()
    idx = np.asarray(indices)
    if idx.ndim != 1:
        raise KernelArgumentError(f"indices must be 1-D, got shape {tuple(idx.shape)}")
    if idx.size and not np.issubdtype(idx.dtype, np.integer):
        raise ArgumentTypeError(f"indices must be integers, got dtype {idx.dtype}")
    if idx.size > MAX_GATHER_ROWS:
        raise KernelArgumentError(f"at most {MAX_GATHER_ROWS} rows per gather, got {idx.size}")
    if idx.size and (idx.min() < 0 or idx.max() >= num_rows):
        bad = idx[(idx < 0) | (idx >= num_rows)]
        raise GatherIndexError(f"gather indices {bad[:8].tolist()} are out of range; valid: 0..{num_rows - 1}")
    return idx.astype(np.int64) * np.int64(row_stride_bytes)


def gather_variant(src_ptr: int, dst_ptr: int, row_bytes: int, row_stride_bytes: int) -> str:
    """``"v16"`` (16-byte loads) when every address involved is 16-byte aligned, else ``"b1"``."""
    aligned = all(v % 16 == 0 for v in (src_ptr, dst_ptr, row_bytes, row_stride_bytes))
    return "v16" if aligned else "b1"


def gather_reuse_variant(src_ptr: int, cached_ptr: int, dst_ptr: int, row_bytes: int, row_stride_bytes: int) -> str:
    """``"v16"`` when the source, the prefetched buffer and the destination all allow
    16-byte loads (rule 6), else ``"b1"``."""
    aligned = gather_variant(src_ptr, dst_ptr, row_bytes, row_stride_bytes) == "v16" and cached_ptr % 16 == 0
    return "v16" if aligned else "b1"


def gather_launch_config(
    row_bytes: int, n_rows: int, variant: str, sm_count: int, threads: int = GATHER_THREADS
) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) for a gather: grid.y = rows; grid.x spreads each row so that about
    8 blocks per multiprocessor are in flight (enough loads outstanding to cover the
    latency of reads over the host link), but never more blocks than a row has work."""
    if variant not in ("v16", "b1"):
        raise KernelArgumentError(f"variant must be 'v16' or 'b1', got {variant!r}")
    if not 1 <= n_rows <= MAX_GATHER_ROWS:
        raise KernelArgumentError(f"n_rows must be in 1..{MAX_GATHER_ROWS}, got {n_rows}")
    items = row_bytes // 16 if variant == "v16" else row_bytes
    most = max(1, -(-items // threads))
    wanted = max(1, -(-(8 * max(sm_count, 1)) // n_rows))
    return (min(most, wanted), n_rows, 1), (threads, 1, 1)


# Each block row (grid.y) writes one output row; thread i of the row's blocks moves items
# i, i + step, ... of it (16-byte items for v16, bytes for b1).
_ROW_COPY_SOURCE = r"""
__device__ __forceinline__ void wb_copy_v16(
    uint4* __restrict__ d, const uint4* __restrict__ s, long long i, long long n, long long step)
{
    // Four independent loads before their stores keep more reads in flight.
    for (; i + 3 * step < n; i += 4 * step) {
        const uint4 a = s[i], b = s[i + step], c = s[i + 2 * step], e = s[i + 3 * step];
        d[i] = a; d[i + step] = b; d[i + 2 * step] = c; d[i + 3 * step] = e;
    }
    for (; i < n; i += step) d[i] = s[i];
}

__device__ __forceinline__ void wb_zero_v16(uint4* __restrict__ d, long long i, long long n, long long step)
{
    for (; i < n; i += step) d[i] = make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ void wb_copy_b1(
    unsigned char* __restrict__ d, const unsigned char* __restrict__ s, long long i, long long n, long long step)
{
    for (; i < n; i += step) d[i] = s[i];
}

__device__ __forceinline__ void wb_zero_b1(unsigned char* __restrict__ d, long long i, long long n, long long step)
{
    for (; i < n; i += step) d[i] = 0;
}
"""

_GATHER_SOURCE = _ROW_COPY_SOURCE + r"""
extern "C" __global__ void wb_gather_rows_v16(
    const unsigned char* __restrict__ src, long long src_span,
    const long long* __restrict__ offsets, unsigned char* __restrict__ dst, long long row_bytes)
{
    const long long row = blockIdx.y;
    const long long off = offsets[row];
    uint4* d = reinterpret_cast<uint4*>(dst + row * row_bytes);
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (off < 0 || off > src_span - row_bytes) {  // bad index: zeros, and no stray read
        wb_zero_v16(d, i, row_bytes >> 4, step);
        return;
    }
    wb_copy_v16(d, reinterpret_cast<const uint4*>(src + off), i, row_bytes >> 4, step);
}

extern "C" __global__ void wb_gather_rows_b1(
    const unsigned char* __restrict__ src, long long src_span,
    const long long* __restrict__ offsets, unsigned char* __restrict__ dst, long long row_bytes)
{
    const long long row = blockIdx.y;
    const long long off = offsets[row];
    unsigned char* d = dst + row * row_bytes;
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (off < 0 || off > src_span - row_bytes) {
        wb_zero_b1(d, i, row_bytes, step);
        return;
    }
    wb_copy_b1(d, src + off, i, row_bytes, step);
}
"""


# Rule 6. One block row per output row (grid.y); every thread of it scans the few cached
# ids (the same addresses for the whole warp, so the loads are broadcast from cache).
_GATHER_REUSE_SOURCE = _ROW_COPY_SOURCE + r"""
__device__ __forceinline__ int wb_cached_slot(
    const long long* __restrict__ cached_index, int n_cached, long long id)
{
    for (int c = 0; c < n_cached; ++c) {
        if (cached_index[c] == id) return c;
    }
    return -1;
}

// Where output row ``row`` comes from: the prefetched buffer (a hit, flagged), the mapped
// host source (a miss), or nowhere (a bad index: the row is zeroed).
__device__ __forceinline__ const unsigned char* wb_reuse_source(
    const unsigned char* __restrict__ src, long long src_span, long long row_stride,
    const long long* __restrict__ index,
    const unsigned char* __restrict__ cached, const long long* __restrict__ cached_index, int n_cached,
    long long row_bytes, int* __restrict__ hit_flags)
{
    const long long row = blockIdx.y;
    const long long id = index[row];
    const int slot = wb_cached_slot(cached_index, n_cached, id);
    if (blockIdx.x == 0 && threadIdx.x == 0) hit_flags[row] = slot >= 0 ? 1 : 0;
    if (slot >= 0) return cached + (long long)slot * row_bytes;  // prefetched: device memory
    const long long off = id * row_stride;
    if (id < 0 || off > src_span - row_bytes) return nullptr;  // bad index: zeros, and no stray read
    return src + off;  // missed: over the link from mapped host memory
}

extern "C" __global__ void wb_gather_reuse_rows_v16(
    const unsigned char* __restrict__ src, long long src_span, long long row_stride,
    const long long* __restrict__ index,
    const unsigned char* __restrict__ cached, const long long* __restrict__ cached_index, int n_cached,
    unsigned char* __restrict__ dst, long long row_bytes, int* __restrict__ hit_flags)
{
    const unsigned char* from = wb_reuse_source(
        src, src_span, row_stride, index, cached, cached_index, n_cached, row_bytes, hit_flags);
    uint4* d = reinterpret_cast<uint4*>(dst + (long long)blockIdx.y * row_bytes);
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (from == nullptr) wb_zero_v16(d, i, row_bytes >> 4, step);
    else wb_copy_v16(d, reinterpret_cast<const uint4*>(from), i, row_bytes >> 4, step);
}

extern "C" __global__ void wb_gather_reuse_rows_b1(
    const unsigned char* __restrict__ src, long long src_span, long long row_stride,
    const long long* __restrict__ index,
    const unsigned char* __restrict__ cached, const long long* __restrict__ cached_index, int n_cached,
    unsigned char* __restrict__ dst, long long row_bytes, int* __restrict__ hit_flags)
{
    const unsigned char* from = wb_reuse_source(
        src, src_span, row_stride, index, cached, cached_index, n_cached, row_bytes, hit_flags);
    unsigned char* d = dst + (long long)blockIdx.y * row_bytes;
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (from == nullptr) wb_zero_b1(d, i, row_bytes, step);
    else wb_copy_b1(d, from, i, row_bytes, step);
}
"""


# Rule 7. A row at or past the device-side count is padding: zeros, no read.
_GATHER_ROUTED_SOURCE = _ROW_COPY_SOURCE + r"""
// Where output row ``row`` comes from: the mapped host source, or nowhere (padding past
// the count, or a bad index: the row is zeroed). Row 0 records the count it used.
__device__ __forceinline__ const unsigned char* wb_routed_source(
    const unsigned char* __restrict__ src, long long src_span, long long row_stride,
    const long long* __restrict__ index, const long long* __restrict__ count,
    long long row_bytes, long long* __restrict__ moved)
{
    const long long row = blockIdx.y;
    const long long rows = (long long)gridDim.y;
    const long long n = *count < 0 ? 0 : (*count > rows ? rows : *count);
    if (row == 0 && blockIdx.x == 0 && threadIdx.x == 0) *moved = n;
    if (row >= n) return nullptr;
    const long long id = index[row];
    const long long off = id * row_stride;
    if (id < 0 || off > src_span - row_bytes) return nullptr;
    return src + off;
}

extern "C" __global__ void wb_gather_routed_rows_v16(
    const unsigned char* __restrict__ src, long long src_span, long long row_stride,
    const long long* __restrict__ index, const long long* __restrict__ count,
    unsigned char* __restrict__ dst, long long row_bytes, long long* __restrict__ moved)
{
    const unsigned char* from = wb_routed_source(src, src_span, row_stride, index, count, row_bytes, moved);
    uint4* d = reinterpret_cast<uint4*>(dst + (long long)blockIdx.y * row_bytes);
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (from == nullptr) wb_zero_v16(d, i, row_bytes >> 4, step);
    else wb_copy_v16(d, reinterpret_cast<const uint4*>(from), i, row_bytes >> 4, step);
}

extern "C" __global__ void wb_gather_routed_rows_b1(
    const unsigned char* __restrict__ src, long long src_span, long long row_stride,
    const long long* __restrict__ index, const long long* __restrict__ count,
    unsigned char* __restrict__ dst, long long row_bytes, long long* __restrict__ moved)
{
    const unsigned char* from = wb_routed_source(src, src_span, row_stride, index, count, row_bytes, moved);
    unsigned char* d = dst + (long long)blockIdx.y * row_bytes;
    const long long step = (long long)gridDim.x * blockDim.x;
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (from == nullptr) wb_zero_b1(d, i, row_bytes, step);
    else wb_copy_b1(d, from, i, row_bytes, step);
}
"""


# -- GPU parts -------------------------------------------------------------------------------


def _cp() -> Any:
    return cupy_module()


class _RawStream:
    """A raw ``cudaStream_t`` speaking the CUDA stream protocol (so CuPy can wrap it)."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


def _stream(stream: Any) -> tuple[Any, bool]:
    """(a CuPy stream for ``stream``, whether to synchronize before returning) — rule 4."""
    cp = _cp()
    if stream is None:
        return cp.cuda.get_current_stream(), True
    if isinstance(stream, cp.cuda.Stream):
        return stream, False
    ptr = stream_ptr(stream)
    if hasattr(cp.cuda.Stream, "from_external"):
        return cp.cuda.Stream.from_external(_RawStream(ptr)), False
    with warnings.catch_warnings():  # CuPy < 14 has only ExternalStream
        warnings.simplefilter("ignore", DeprecationWarning)
        return cp.cuda.ExternalStream(ptr), False


def _host_u8(t: torch.Tensor, what: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
        raise KernelArgumentError(f"{what} must be a CPU torch tensor")
    if not t.is_contiguous():
        raise KernelArgumentError(f"{what} must be contiguous; call .contiguous() first")
    flat = t.detach().reshape(-1)
    return flat if flat.dtype == torch.uint8 else flat.view(torch.uint8)


def pointer_kind(ptr: int) -> str:
    """``"pinned"`` (page-locked host), ``"device"``, ``"managed"`` or ``"pageable"``."""
    cp = _cp()
    rt = cp.cuda.runtime
    try:
        kind = rt.pointerGetAttributes(ptr).type
    except Exception:  # older runtimes reject unregistered host pointers
        return "pageable"
    return {rt.memoryTypeHost: "pinned", rt.memoryTypeDevice: "device", rt.memoryTypeManaged: "managed"}.get(
        kind, "pageable"
    )


def device_address(host_ptr: int) -> int:
    """The device-side address of pinned, mapped host memory (for kernels that read it)."""
    cp = _cp()
    attrs = cp.cuda.runtime.pointerGetAttributes(host_ptr)
    if attrs.type != cp.cuda.runtime.memoryTypeHost or not attrs.devicePointer:
        raise KernelArgumentError(
            "host memory at this address is not pinned and mapped; allocate it pinned "
            "(e.g. torch.empty(..., pin_memory=True)) or wrap it in MappedHost"
        )
    return int(attrs.devicePointer)


class MappedHost:
    """Page-locks and maps a host tensor for the life of a ``with`` block (or until ``close``).

    Memory that is already pinned is used as is and left pinned afterwards.
    """

    _REGISTER_FLAGS = 0x01 | 0x02  # cudaHostRegisterPortable | cudaHostRegisterMapped

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor
        u8 = _host_u8(tensor, "the tensor to map")
        self._ptr = u8.data_ptr()
        self._registered = False
        if u8.numel() and pointer_kind(self._ptr) != "pinned":
            _cp().cuda.runtime.hostRegister(self._ptr, u8.numel(), self._REGISTER_FLAGS)
            self._registered = True

    def close(self) -> None:
        """Unpin memory this object pinned (idempotent)."""
        if self._registered:
            self._registered = False
            _cp().cuda.runtime.hostUnregister(self._ptr)

    def __enter__(self) -> "MappedHost":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CopyEngine:
    """Copies for one GPU: staging buffers, their events and the gather kernels.

    Not thread-safe: one engine serves one thread of copies at a time (the staging
    buffers are shared by consecutive pageable copies, ordered by their events).
    """

    def __init__(self, device_index: int = 0, chunk_bytes: int = DEFAULT_CHUNK_BYTES) -> None:
        if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 4096:
            raise KernelArgumentError(f"chunk_bytes must be an int >= 4096, got {chunk_bytes!r}")
        cp = _cp()
        self.device_index = device_index
        self.chunk_bytes = chunk_bytes
        self._device = cp.cuda.Device(device_index)
        self._staging: list[torch.Tensor] = []
        self._events: list[Any] = []
        self._kernels: dict[str, Any] = {}
        self.sm_count = int(cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMultiProcessorCount, device_index))

    # -- host -> device ---------------------------------------------------------------------
    def h2d(self, dst_ptr: int, src: torch.Tensor, stream: Any = None) -> None:
        """Copy a contiguous host tensor to device address ``dst_ptr`` (pinned or staged)."""
        u8 = _host_u8(src, "the source of a host-to-device copy")
        if not u8.numel():
            return
        if pointer_kind(u8.data_ptr()) == "pinned":
            self.h2d_pinned(dst_ptr, u8.data_ptr(), u8.numel(), stream)
        else:
            self.h2d_pageable(dst_ptr, u8, stream)

    def h2d_pinned(self, dst_ptr: int, src_ptr: int, nbytes: int, stream: Any = None) -> None:
        """One ``cudaMemcpyAsync`` from pinned host memory (rule 1)."""
        self._memcpy_pinned(dst_ptr, src_ptr, nbytes, "memcpyHostToDevice", stream)

    def h2d_pageable(self, dst_ptr: int, src: torch.Tensor, stream: Any = None) -> None:
        """Double-buffered staged copy from pageable host memory (rules 2, 3)."""
        cp = _cp()
        u8 = _host_u8(src, "the source of a host-to-device copy")
        s, sync = _stream(stream)
        with self._device:
            staging, events = self._staging_buffers()
            for c in staging_schedule(u8.numel(), self.chunk_bytes):
                events[c.slot].synchronize()  # the last copy that used this buffer is done
                staging[c.slot][: c.nbytes].copy_(u8[c.offset : c.offset + c.nbytes])
                cp.cuda.runtime.memcpyAsync(
                    dst_ptr + c.offset, staging[c.slot].data_ptr(), c.nbytes, cp.cuda.runtime.memcpyHostToDevice, s.ptr
                )
                events[c.slot].record(s)
            if sync:
                s.synchronize()

    # -- device -> host ---------------------------------------------------------------------
    def d2h(self, dst: torch.Tensor, src_ptr: int, stream: Any = None) -> None:
        """Fill a contiguous host tensor from device address ``src_ptr`` (pinned or staged)."""
        u8 = _host_u8(dst, "the destination of a device-to-host copy")
        if not u8.numel():
            return
        if pointer_kind(u8.data_ptr()) == "pinned":
            self.d2h_pinned(u8.data_ptr(), src_ptr, u8.numel(), stream)
        else:
            self.d2h_pageable(u8, src_ptr, stream)

    def d2h_pinned(self, dst_ptr: int, src_ptr: int, nbytes: int, stream: Any = None) -> None:
        """One ``cudaMemcpyAsync`` into pinned host memory (rule 1)."""
        self._memcpy_pinned(dst_ptr, src_ptr, nbytes, "memcpyDeviceToHost", stream)

    def d2h_pageable(self, dst: torch.Tensor, src_ptr: int, stream: Any = None) -> None:
        """Double-buffered staged copy into pageable host memory (rules 2, 3)."""
        cp = _cp()
        u8 = _host_u8(dst, "the destination of a device-to-host copy")
        s, _ = _stream(stream)
        with self._device:
            staging, events = self._staging_buffers()
            pending: StagingChunk | None = None
            for c in staging_schedule(u8.numel(), self.chunk_bytes):
                # Free once its last copy is done: an earlier h2d may still be reading it
                # (a chunk of this copy was drained synchronously, so then it is instant).
                events[c.slot].synchronize()
                cp.cuda.runtime.memcpyAsync(
                    staging[c.slot].data_ptr(), src_ptr + c.offset, c.nbytes, cp.cuda.runtime.memcpyDeviceToHost, s.ptr
                )
                events[c.slot].record(s)
                if pending is not None:
                    self._drain(u8, pending, staging, events)
                pending = c
            if pending is not None:
                self._drain(u8, pending, staging, events)

    @staticmethod
    def _drain(dst: torch.Tensor, c: StagingChunk, staging: list[torch.Tensor], events: list[Any]) -> None:
        events[c.slot].synchronize()
        dst[c.offset : c.offset + c.nbytes].copy_(staging[c.slot][: c.nbytes])

    def _memcpy_pinned(self, dst_ptr: int, src_ptr: int, nbytes: int, kind: str, stream: Any) -> None:
        """One ``cudaMemcpyAsync`` of direction ``kind`` (a ``cudaMemcpyKind`` name on
        ``cp.cuda.runtime``) between pinned host and device memory, synchronized as rule 4
        says; both pinned directions differ only in that name.
        """
        cp = _cp()
        s, sync = _stream(stream)
        with self._device:
            cp.cuda.runtime.memcpyAsync(dst_ptr, src_ptr, nbytes, getattr(cp.cuda.runtime, kind), s.ptr)
            if sync:
                s.synchronize()

    # -- device -> device -------------------------------------------------------------------
    def d2d(self, dst_ptr: int, src_ptr: int, nbytes: int, stream: Any = None, src_device: int | None = None) -> None:
        """Copy between device addresses; across GPUs with a peer copy."""
        cp = _cp()
        rt = cp.cuda.runtime
        s, sync = _stream(stream)
        with self._device:
            if src_device is None or src_device == self.device_index:
                rt.memcpyAsync(dst_ptr, src_ptr, nbytes, rt.memcpyDeviceToDevice, s.ptr)
            else:
                rt.memcpyPeerAsync(dst_ptr, self.device_index, src_ptr, src_device, nbytes, s.ptr)
            if sync:
                s.synchronize()

    # -- gather -----------------------------------------------------------------------------
    def gather_rows(self, dst_ptr: int, src: torch.Tensor, indices: Any, stream: Any = None) -> int:
        """Copy ``src[indices[k]]`` to ``dst[k]`` (contiguous rows at ``dst_ptr``) in one launch.

        ``src`` is a pinned host tensor (mapped; see ``MappedHost``) or a CUDA tensor whose
        rows (first dimension) are each contiguous. ``indices``: host ints (checked) or a
        CUDA/CuPy int array (not checked; bad rows become zeros — rule 5). Returns the
        number of bytes written.
        """
        cp = _cp()
        if not isinstance(src, torch.Tensor) or src.dim() < 1:
            raise KernelArgumentError("src must be a torch tensor with at least one dimension (the rows)")
        num_rows, row_bytes, row_stride, src_dev_ptr, src_span = self._gather_source(src)
        s, sync = _stream(stream)
        with self._device, s:
            offsets = self._device_ids(cp, indices, num_rows, "indices", scale=row_stride)
            n = int(offsets.size)
            if n == 0 or row_bytes == 0:
                return 0
            variant = gather_variant(src_dev_ptr, dst_ptr, row_bytes, row_stride)
            grid, block = gather_launch_config(row_bytes, n, variant, self.sm_count)
            self._kernel(_GATHER_SOURCE, f"wb_gather_rows_{variant}")(
                grid,
                block,
                (np.uint64(src_dev_ptr), np.int64(src_span), offsets, np.uint64(dst_ptr), np.int64(row_bytes)),
            )
            if sync:
                s.synchronize()
        return n * row_bytes

    def gather_reuse_rows(
        self,
        dst_ptr: int,
        src: torch.Tensor,
        indices: Any,
        cached: torch.Tensor,
        cached_indices: Any,
        stream: Any = None,
    ) -> Any:
        """Rows ``src[indices[k]]`` to ``dst[k]`` in one launch, taking a row from the
        prefetched device tensor ``cached`` (rows ``src[cached_indices]``) when its id is in
        ``cached_indices``, else from ``src`` (rule 6).

        ``src`` as for ``gather_rows``; ``cached`` a contiguous CUDA tensor of
        ``len(cached_indices)`` rows of ``src``'s row size; the indices host ints or CUDA
        int arrays. Returns a CuPy int32 array, one flag per row (1: taken from ``cached``),
        filled when the launch completes on ``stream``.
        """
        cp = _cp()
        if not isinstance(src, torch.Tensor) or src.dim() < 1:
            raise KernelArgumentError("src must be a torch tensor with at least one dimension (the rows)")
        if not isinstance(cached, torch.Tensor) or cached.device.type != "cuda" or not cached.is_contiguous():
            raise KernelArgumentError("cached must be a contiguous CUDA tensor holding the prefetched rows")
        num_rows, row_bytes, row_stride, src_dev_ptr, src_span = self._gather_source(src)
        s, sync = _stream(stream)
        with self._device, s:
            ids = self._device_ids(cp, indices, num_rows, "indices")
            pool = self._device_ids(cp, cached_indices, num_rows, "cached_indices")
            n, n_cached = int(ids.size), int(pool.size)
            if n_cached > MAX_CACHED_ROWS:
                raise KernelArgumentError(
                    f"at most {MAX_CACHED_ROWS} prefetched rows can be scanned per row, got {n_cached}"
                )
            if cached.numel() * cached.element_size() != n_cached * row_bytes:
                raise KernelArgumentError(
                    f"cached holds {cached.numel() * cached.element_size()} B but {n_cached} prefetched "
                    f"rows of {row_bytes} B need {n_cached * row_bytes} B"
                )
            flags = cp.zeros(n, dtype=cp.int32)
            if n == 0 or row_bytes == 0:
                return flags
            if n > MAX_GATHER_ROWS:
                raise KernelArgumentError(f"at most {MAX_GATHER_ROWS} rows per gather, got {n}")
            variant = gather_reuse_variant(src_dev_ptr, cached.data_ptr(), dst_ptr, row_bytes, row_stride)
            grid, block = gather_launch_config(row_bytes, n, variant, self.sm_count)
            self._kernel(_GATHER_REUSE_SOURCE, f"wb_gather_reuse_rows_{variant}")(
                grid,
                block,
                (
                    np.uint64(src_dev_ptr), np.int64(src_span), np.int64(row_stride), ids,
                    np.uint64(cached.data_ptr()), pool, np.int32(n_cached),
                    np.uint64(dst_ptr), np.int64(row_bytes), flags,
                ),
            )  # fmt: skip
            if sync:
                s.synchronize()
        return flags

    def gather_routed_rows(self, dst_ptr: int, src: torch.Tensor, indices: Any, count: Any, stream: Any = None) -> Any:
        """Rows ``src[indices[j]]`` to ``dst[j]`` for ``j < count``, zeros for the other
        rows, in one launch (rule 7).

        ``src`` as for ``gather_rows``; ``indices`` host ints or a CUDA/CuPy int array (one
        slot per output row); ``count`` a one-element CUDA/CuPy integer array, read on the
        device. Returns a CuPy int64 array of one element, the rows that crossed, filled
        when the launch completes on ``stream``.
        """
        cp = _cp()
        if not isinstance(src, torch.Tensor) or src.dim() < 1:
            raise KernelArgumentError("src must be a torch tensor with at least one dimension (the rows)")
        num_rows, row_bytes, row_stride, src_dev_ptr, src_span = self._gather_source(src)
        s, sync = _stream(stream)
        with self._device, s:
            ids = self._device_ids(cp, indices, num_rows, "indices")
            n = int(ids.size)
            moved = cp.zeros(1, dtype=cp.int64)
            if n == 0 or row_bytes == 0:
                return moved
            if n > MAX_GATHER_ROWS:
                raise KernelArgumentError(f"at most {MAX_GATHER_ROWS} rows per gather, got {n}")
            real = self._device_count(cp, count)
            variant = gather_variant(src_dev_ptr, dst_ptr, row_bytes, row_stride)
            grid, block = gather_launch_config(row_bytes, n, variant, self.sm_count)
            self._kernel(_GATHER_ROUTED_SOURCE, f"wb_gather_routed_rows_{variant}")(
                grid,
                block,
                (
                    np.uint64(src_dev_ptr), np.int64(src_span), np.int64(row_stride), ids, real,
                    np.uint64(dst_ptr), np.int64(row_bytes), moved,
                ),
            )  # fmt: skip
            if sync:
                s.synchronize()
        return moved

    @staticmethod
    def _device_count(cp: Any, count: Any) -> Any:
        """A routed gather's row count as a one-element int64 device array (rule 7)."""
        if isinstance(count, torch.Tensor):
            if count.device.type != "cuda":
                raise KernelArgumentError("count must live on the GPU (the kernel reads it there), got a host tensor")
            count = cp.from_dlpack(count.reshape(1))
        if not isinstance(count, cp.ndarray) or count.size != 1 or count.dtype.kind not in "iu":
            raise KernelArgumentError("count must be a one-element integer array on the GPU")
        return cp.ascontiguousarray(count.reshape(1).astype(cp.int64))

    @staticmethod
    def _gather_source(src: torch.Tensor) -> tuple[int, int, int, int, int]:
        """``(num_rows, row_bytes, row_stride, src_dev_ptr, src_span)`` of a gather's ``src``.

        Both gathers read their source the same way (rule 5), so its row geometry, its
        checks and its device address are worked out here once. Sizes are in bytes;
        ``src_span`` is how far the kernel may read past ``src_dev_ptr``.
        """
        num_rows = src.shape[0]
        row_bytes = (src[0].numel() if num_rows else 0) * src.element_size()
        row_stride = src.stride(0) * src.element_size()
        if num_rows and not src[0].is_contiguous():
            raise KernelArgumentError("each row of src (src[i]) must be contiguous")
        if src.device.type == "cpu":
            src_dev_ptr = device_address(src.data_ptr())
        elif src.device.type == "cuda":
            src_dev_ptr = src.data_ptr()
        else:
            raise KernelArgumentError(f"src must be a pinned host tensor or a CUDA tensor, not one on {src.device}")
        src_span = (num_rows - 1) * row_stride + row_bytes if num_rows else 0
        return num_rows, row_bytes, row_stride, src_dev_ptr, src_span

    @staticmethod
    def _device_ids(cp: Any, indices: Any, num_rows: int, what: str, scale: int = 1) -> Any:
        """Row ids times ``scale`` (1: the ids; a row stride: byte offsets) as a 1-D int64
        device array; host ids are range-checked first."""
        if isinstance(indices, torch.Tensor) and indices.device.type == "cuda":
            indices = cp.from_dlpack(indices.reshape(-1))
        if isinstance(indices, cp.ndarray):
            if indices.ndim != 1:
                raise KernelArgumentError(f"{what} must be 1-D, got shape {indices.shape}")
            ids = indices.astype(cp.int64)
            return ids * scale if scale != 1 else cp.ascontiguousarray(ids)
        return cp.asarray(gather_row_offsets(indices, num_rows, scale))  # checks: 1-D ints in range

    def _kernel(self, source: str, name: str) -> Any:
        """The compiled kernel ``name`` of ``source`` (compiled once per engine)."""
        if name not in self._kernels:
            self._kernels[name] = _cp().RawKernel(source, name)
        return self._kernels[name]

    def _staging_buffers(self) -> tuple[list[torch.Tensor], list[Any]]:
        if not self._staging:
            cp = _cp()
            self._staging = [pinned_host_tensor(self.chunk_bytes) for _ in range(2)]
            self._events = [cp.cuda.Event(disable_timing=True) for _ in range(2)]
        return self._staging, self._events

