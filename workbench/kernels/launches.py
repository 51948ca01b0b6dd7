"""Copy launches worked out on the host: staging chunks, row ids and offsets, DMA runs,
kernel variants and launch configurations (rules 2 and 5 of ``kernels.copies``).

Plain functions over numbers and arrays: they run anywhere, without a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import ArgumentTypeError, WorkbenchError, WorkbenchWarning

#: Bytes per pinned staging buffer (two are used in turn).
DEFAULT_CHUNK_BYTES = 8 << 20
#: Threads per block of the gather kernel.
GATHER_THREADS = 256
#: CUDA's limit on gridDim.y, which indexes the gathered rows.
MAX_GATHER_ROWS = 65535
#: Most prefetched rows a reuse gather scans per output row (rule 6; a router's top-k is 8-16).
MAX_CACHED_ROWS = 1024
#: Rows of at least this many bytes are gathered by DMA when their ids are on the host (rule 5).
DEFAULT_DMA_ROW_BYTES = 256 << 10
#: Ways a gather may copy: ``"auto"`` (rule 5 chooses), ``"kernel"`` or ``"dma"`` (host ids only).
GATHER_METHODS: tuple[str, ...] = ("auto", "kernel", "dma")
#: Most host row ids passed as plain scalar launch parameters (rule 5; a router's top-k).
SCALAR_IDS = 8
#: Most host row ids passed by value in a gather launch's parameters (rule 5; 512 bytes).
INLINE_IDS = 64
#: Slots of the ring of pinned buffers host row ids are read from, and ids per slot (rule 5).
ID_RING_SLOTS = 8
ID_RING_CAPACITY = 4096


class KernelArgumentError(WorkbenchError, ValueError):
    """An argument a copy kernel (or its launch plan) cannot take; the message says what is valid."""


class KernelWarning(WorkbenchWarning):
    """A copy kernel took a slower path than it should have (the message says why)."""


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


def gather_row_ids(indices: Any, num_rows: int) -> np.ndarray:
    """``indices`` as checked row ids (a new int64 array) of a source of ``num_rows`` rows.

    ``indices`` is a 1-D sequence of ints (list, numpy array or CPU torch tensor) in
    ``[0, num_rows)``; anything else is an error saying what was wrong.
    """
    if isinstance(indices, torch.Tensor):
        if indices.device.type != "cpu":
            raise KernelArgumentError("gather_row_offsets takes host indices; device indices are offset on the device")
        indices = indices.numpy()
    idx = indices if isinstance(indices, np.ndarray) else np.asarray(indices)
    if idx.ndim != 1:
        raise KernelArgumentError(f"indices must be 1-D, got shape {tuple(idx.shape)}")
    if idx.size and not np.issubdtype(idx.dtype, np.integer):
        raise ArgumentTypeError(f"indices must be integers, got dtype {idx.dtype}")
    if idx.size > MAX_GATHER_ROWS:
        raise KernelArgumentError(f"at most {MAX_GATHER_ROWS} rows per gather, got {idx.size}")
    if idx.size and (idx.min() < 0 or idx.max() >= num_rows):
        bad = idx[(idx < 0) | (idx >= num_rows)]
        raise GatherIndexError(f"gather indices {bad[:8].tolist()} are out of range; valid: 0..{num_rows - 1}")
    # Always a new array, never a view of the caller's: the GPU path hands it to
    # torch.from_numpy, which refuses negative strides and warns on read-only arrays.
    return idx.astype(np.int64)


def gather_row_offsets(indices: Any, num_rows: int, row_stride_bytes: int) -> np.ndarray:
    """Byte offsets (int64) of rows ``indices`` in a source of ``num_rows`` rows whose rows
    are ``row_stride_bytes`` apart (``indices`` as for ``gather_row_ids``)."""
    return gather_row_ids(indices, num_rows) * np.int64(row_stride_bytes)


#: The by-value parameter of the inline gather kernels: ``struct { long long v[INLINE_IDS]; }``.
INLINE_IDS_DTYPE = np.dtype([("v", np.int64, (INLINE_IDS,))])


def inline_ids(ids: np.ndarray) -> np.void:
    """Up to ``INLINE_IDS`` row ids as the struct the inline gather kernels take by value
    (unused entries are -1, never read: the grid has one row per id)."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if ids.size > INLINE_IDS:
        raise KernelArgumentError(f"at most {INLINE_IDS} ids go by value, got {ids.size}")
    packed = np.full(1, -1, dtype=INLINE_IDS_DTYPE)
    packed["v"][0, : ids.size] = ids
    return packed[0]


def dma_runs(ids: np.ndarray) -> tuple[tuple[int, int, int], ...]:
    """``(first output row, first source row, rows)`` per run of consecutive ids: the
    copies a DMA gather issues (rule 5), in output order, covering every row once."""
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    if not ids.size:
        return ()
    runs, values = [], ids.tolist()
    start = 0
    for k in range(1, len(values) + 1):
        if k == len(values) or values[k] != values[k - 1] + 1:
            runs.append((start, values[start], k - start))
            start = k
    return tuple(runs)


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
