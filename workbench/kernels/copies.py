"""CuPy copy kernels: host↔device, device↔device, and a one-launch gather of rows.

Everything that touches the GPU lives in ``CopyEngine`` and ``MappedHost``; the plans
they follow are plain functions that run anywhere (``launches``: ``staging_schedule``,
``gather_row_offsets``, ``gather_variant``, ``gather_launch_config``), and the kernels'
CUDA source is in ``sources``. Importing this module never touches the GPU.

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
   never read (host indices are checked before launch and raise instead). The kernel
   reads the row ids where they are: device ids in place (no conversion kernels); up to
   ``SCALAR_IDS`` host ids as scalar launch parameters, up to ``INLINE_IDS`` as one
   struct passed by value; more host ids from a
   slot of a small ring of pinned, mapped buffers (no upload, no host sync), a slot
   being refilled only after the event recorded behind its last gather completed.
   Host ids of rows of at least ``dma_row_bytes`` are copied by the copy engines
   instead, one ``cudaMemcpyAsync`` per run of consecutive ids (``dma_runs``): for big
   rows the DMA engines' bandwidth beats the kernel's loads over the link, and the
   per-copy launch cost is small beside the row's own time.
6. The reuse gather writes the same rows in one launch, but each output row first scans
   ``cached_indices`` (a prefetch's row ids; a linear scan, at most
   ``MAX_CACHED_ROWS``): on a match the row is copied from the prefetched device buffer
   ``cached`` (its first matching slot), else from the source as in rule 5. It records
   per row whether it hit, so the caller learns how many rows crossed the link.
7. The counted gather writes ``len(indices)`` rows in one launch: output row j < n, with
   n = ``*count`` read on the device (clamped to [0, rows]), is the source row
   ``indices[j]`` as in rule 5; the rows from n on are zeros and read nothing. The block
   of row 0 records n, so the caller learns how many rows crossed without the host
   waiting for ``count`` before the launch. Its ids and count are device arrays (a
   choice made on the device), so it always runs as one kernel, never by DMA.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Sequence

import numpy as np
import torch

from .cuda import cupy_module, pinned_host_tensor, stream_ptr
from .launches import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_DMA_ROW_BYTES,
    GATHER_METHODS,
    ID_RING_CAPACITY,
    ID_RING_SLOTS,
    INLINE_IDS,
    MAX_CACHED_ROWS,
    MAX_GATHER_ROWS,
    SCALAR_IDS,
    GatherIndexError,
    KernelArgumentError,
    KernelWarning,
    StagingChunk,
    dma_runs,
    gather_launch_config,
    gather_reuse_variant,
    gather_row_ids,
    gather_row_offsets,
    gather_variant,
    inline_ids,
    staging_schedule,
)
from .sources import GATHER_COUNTED_SOURCE, GATHER_REUSE_SOURCE, GATHER_SOURCE

# -- GPU parts -------------------------------------------------------------------------------


def _cp() -> Any:
    return cupy_module()


class _RawStream:
    """A raw ``cudaStream_t`` speaking the CUDA stream protocol (so CuPy can wrap it)."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, self.ptr)


_EXTERNAL_STREAMS: dict[int, Any] = {}  # raw cudaStream_t → its CuPy wrapper


def _stream(stream: Any) -> tuple[Any, bool]:
    """(a CuPy stream for ``stream``, whether to synchronize before returning) — rule 4."""
    cp = _cp()
    if stream is None:
        return cp.cuda.get_current_stream(), True
    if isinstance(stream, cp.cuda.Stream):
        return stream, False
    ptr = stream_ptr(stream)
    wrapped = _EXTERNAL_STREAMS.get(ptr)
    if wrapped is None:  # a non-owning wrapper of a raw stream: made once per stream
        if hasattr(cp.cuda.Stream, "from_external"):
            wrapped = cp.cuda.Stream.from_external(_RawStream(ptr))
        else:
            with warnings.catch_warnings():  # CuPy < 14 has only ExternalStream
                warnings.simplefilter("ignore", DeprecationWarning)
                wrapped = cp.cuda.ExternalStream(ptr)
        if len(_EXTERNAL_STREAMS) >= 256:
            _EXTERNAL_STREAMS.clear()
        _EXTERNAL_STREAMS[ptr] = wrapped
    return wrapped, False


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


def rows_contiguous(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether each ``src[i]`` is contiguous, read off the strides (no tensor is made):
    dimensions of size 1 may have any stride, the others the row-major ones."""
    expected = 1
    for extent, stride in zip(reversed(shape[1:]), reversed(strides[1:])):
        if extent != 1 and stride != expected:
            return False
        expected *= extent
    return True


def _device_array(cp: Any, indices: Any) -> Any:
    """Device row ids as a 1-D contiguous int64 CuPy array (no copy when they already are
    one), or None for host ids."""
    if isinstance(indices, torch.Tensor) and indices.device.type == "cuda":
        indices = cp.from_dlpack(indices.reshape(-1))
    if not isinstance(indices, cp.ndarray):
        return None
    if indices.ndim != 1:
        raise KernelArgumentError(f"indices must be 1-D, got shape {indices.shape}")
    return cp.ascontiguousarray(indices.astype(cp.int64, copy=False))


class _IdRing:
    """Pinned, mapped buffers that gather kernels read host row ids from (rule 5)."""

    def __init__(self, slots: int, capacity: int) -> None:
        cp = _cp()
        self._buffers = [pinned_host_tensor(capacity * 8).view(torch.int64) for _ in range(slots)]
        self._addresses = [device_address(b.data_ptr()) for b in self._buffers]
        self._events = [cp.cuda.Event(disable_timing=True) for _ in range(slots)]
        self._recorded = [False] * slots
        self._next = 0

    def put(self, ids: np.ndarray) -> tuple[int, int]:
        """Copy ``ids`` into the next free slot; (slot, its device address)."""
        slot = self._next
        self._next = (slot + 1) % len(self._buffers)
        if self._recorded[slot]:
            self._events[slot].synchronize()  # the kernel that last read this slot is done
        self._buffers[slot][: ids.size].copy_(torch.from_numpy(ids))
        return slot, self._addresses[slot]

    def used(self, slot: int, stream: Any) -> None:
        """Mark ``slot`` busy until the work now queued on ``stream`` completes."""
        self._events[slot].record(stream)
        self._recorded[slot] = True


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
        self._ids: "_IdRing | None" = None  # pinned slots for host row ids (rule 5)
        self._inline_ok = True  # host ids may go by value (rule 5)
        self.dma_row_bytes = DEFAULT_DMA_ROW_BYTES  # rows at least this big gather by DMA (rule 5)
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
    def gather_rows(
        self, dst_ptr: int, src: torch.Tensor, indices: Any, stream: Any = None, method: str = "auto"
    ) -> int:
        """Copy ``src[indices[k]]`` to ``dst[k]`` (contiguous rows at ``dst_ptr``) — rule 5.

        ``src`` is a pinned host tensor (mapped; see ``MappedHost``) or a CUDA tensor whose
        rows (first dimension) are each contiguous. ``indices``: host ints (checked) or a
        CUDA/CuPy int array (not checked; bad rows become zeros). ``method``: ``"auto"``
        (DMA for host ids of rows of at least ``dma_row_bytes``, else one kernel),
        ``"kernel"``, or ``"dma"`` (host ids only). Returns the number of bytes written.
        """
        cp = _cp()
        if method not in GATHER_METHODS:
            raise KernelArgumentError(f"method must be one of {', '.join(map(repr, GATHER_METHODS))}, got {method!r}")
        if not isinstance(src, torch.Tensor) or src.dim() < 1:
            raise KernelArgumentError("src must be a torch tensor with at least one dimension (the rows)")
        num_rows, row_bytes, row_stride, src_dev_ptr, src_span = self._gather_source(src)
        s, sync = _stream(stream)
        with s:  # device ids are taken on the stream that reads them: no cross-stream event
            on_device = _device_array(cp, indices)  # (which a CUDA graph capture would refuse)
        if on_device is None:
            host_ids = gather_row_ids(indices, num_rows)
            n = int(host_ids.size)
        else:
            if method == "dma":
                raise KernelArgumentError("a DMA gather needs its row ids on the host; device ids gather by kernel")
            n = int(on_device.size)
        if n == 0 or row_bytes == 0:
            return 0
        with self._device, s:
            if on_device is None and (method == "dma" or (method == "auto" and row_bytes >= self.dma_row_bytes)):
                self._gather_dma(dst_ptr, src.data_ptr(), src.device.type == "cpu", host_ids, row_bytes, row_stride, s)
            else:
                slot, name = None, "wb_gather_rows"
                ids_arg: Any
                if on_device is not None:
                    ids_arg = np.uint64(on_device.data.ptr)
                elif n <= SCALAR_IDS:
                    ids_arg, name = None, "wb_gather_rows_k8"
                elif n <= INLINE_IDS and self._inline_ok:
                    ids_arg, name = inline_ids(host_ids), "wb_gather_rows_inline"
                elif n <= ID_RING_CAPACITY:
                    slot, address = self._id_ring().put(host_ids)
                    ids_arg = np.uint64(address)
                else:  # too many for a ring slot: upload them (stream-ordered pool memory)
                    on_device = cp.asarray(host_ids)
                    ids_arg = np.uint64(on_device.data.ptr)
                variant = gather_variant(src_dev_ptr, dst_ptr, row_bytes, row_stride)
                grid, block = gather_launch_config(row_bytes, n, variant, self.sm_count)
                head = (np.uint64(src_dev_ptr), np.int64(src_span), np.int64(row_stride))
                tail = (np.uint64(dst_ptr), np.int64(row_bytes))
                if ids_arg is None:  # scalar ids: padded to 8, the rows past n are never launched
                    scalars = host_ids.tolist() + [-1] * (SCALAR_IDS - n)
                    args = (*head, *(np.int64(v) for v in scalars), *tail)
                else:
                    args = (*head, ids_arg, *tail)
                try:
                    self._kernel(GATHER_SOURCE, f"{name}_{variant}")(grid, block, args)
                except TypeError as exc:  # a CuPy that cannot pass a struct by value
                    if name != "wb_gather_rows_inline":
                        raise
                    self._inline_ok = False
                    warnings.warn(
                        f"this CuPy cannot pass gather ids by value ({exc}); host ids go through pinned buffers",
                        KernelWarning,
                        stacklevel=2,
                    )
                    return self.gather_rows(dst_ptr, src, indices, stream, method)
                if slot is not None:
                    self._id_ring().used(slot, s)
            if sync:
                s.synchronize()
        return n * row_bytes

    @staticmethod
    def _gather_dma(
        dst_ptr: int, src_ptr: int, on_host: bool, ids: np.ndarray, row_bytes: int, row_stride: int, s: Any
    ) -> None:
        """Rule 5's DMA gather: one copy per run of consecutive ids (a run of rows is
        contiguous in the source only when its stride is the row size)."""
        rt = _cp().cuda.runtime
        kind = rt.memcpyHostToDevice if on_host else rt.memcpyDeviceToDevice  # named: cheaper than memcpyDefault
        runs = dma_runs(ids) if row_stride == row_bytes else tuple((k, int(i), 1) for k, i in enumerate(ids))
        for out_row, first, rows in runs:
            rt.memcpyAsync(dst_ptr + out_row * row_bytes, src_ptr + first * row_stride, rows * row_bytes, kind, s.ptr)

    def _id_ring(self) -> "_IdRing":
        if self._ids is None:
            self._ids = _IdRing(ID_RING_SLOTS, ID_RING_CAPACITY)
        return self._ids

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
            self._kernel(GATHER_REUSE_SOURCE, f"wb_gather_reuse_rows_{variant}")(
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

    def gather_counted_rows(self, dst_ptr: int, src: torch.Tensor, indices: Any, count: Any, stream: Any = None) -> Any:
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
            self._kernel(GATHER_COUNTED_SOURCE, f"wb_gather_counted_rows_{variant}")(
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
        """A counted gather's row count as a one-element int64 device array (rule 7)."""
        if isinstance(count, torch.Tensor):
            if count.device.type != "cuda":
                raise KernelArgumentError("count must live on the GPU (the kernel reads it there), got a host tensor")
            count = cp.from_dlpack(count.reshape(1))
        if not isinstance(count, cp.ndarray) or count.size != 1 or count.dtype.kind not in "iu":
            raise KernelArgumentError("count must be a one-element integer array on the GPU")
        return cp.ascontiguousarray(count.reshape(1).astype(cp.int64, copy=False))

    @staticmethod
    def _gather_source(src: torch.Tensor) -> tuple[int, int, int, int, int]:
        """``(num_rows, row_bytes, row_stride, src_dev_ptr, src_span)`` of a gather's ``src``.

        Every gather reads its source the same way (rule 5), so its row geometry, its
        checks and its device address are worked out here once. Sizes are in bytes;
        ``src_span`` is how far the kernel may read past ``src_dev_ptr``.
        """
        shape, strides, size = src.shape, src.stride(), src.element_size()
        num_rows = shape[0]
        row_elements = math.prod(shape[1:])
        row_bytes = (row_elements if num_rows else 0) * size
        row_stride = strides[0] * size
        if num_rows and row_elements > 1 and not rows_contiguous(shape, strides):
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
            ids = indices.astype(cp.int64, copy=False)
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

