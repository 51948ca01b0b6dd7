"""Typed tensors over flat byte buffers: how arenas and device buffers are read and written."""

from __future__ import annotations

from typing import Sequence

import torch

from ..errors import WorkbenchError

__all__ = ["ByteViewError", "typed_view"]


class ByteViewError(WorkbenchError, ValueError):
    """A typed view that does not fit, or is misaligned in, its byte buffer."""


def typed_view(u8: torch.Tensor, dtype: torch.dtype, shape: Sequence[int], stride: Sequence[int] | None = None) -> torch.Tensor:
    """A tensor of ``dtype``/``shape`` (contiguous unless ``stride``) over the bytes of a flat uint8 view.

    The result shares ``u8``'s storage but is not a view of it: views made from the
    result keep *it* as their base (which is what lets the result own a buffer). The
    byte offset of ``u8`` must be a multiple of the dtype's size, and the tensor must
    fit inside ``u8``.
    """
    if u8.dtype != torch.uint8 or u8.dim() != 1:
        raise ByteViewError(f"expected a flat uint8 view, got {u8.dtype} of shape {tuple(u8.shape)}")
    shape = tuple(int(d) for d in shape)
    if stride is None:
        stride, acc = [], 1
        for d in reversed(shape):
            stride.append(acc)
            acc *= max(d, 1)
        stride = tuple(reversed(stride))
    stride = tuple(int(s) for s in stride)
    itemsize = dtype.itemsize
    if u8.storage_offset() % itemsize:
        raise ByteViewError(
            f"byte offset {u8.storage_offset()} is not a multiple of {dtype}'s size {itemsize}; "
            "align the offset (e.g. plan with alignment=16)"
        )
    extent = 0 if 0 in shape else 1 + sum((d - 1) * s for d, s in zip(shape, stride))
    if extent * itemsize > u8.numel():
        raise ByteViewError(
            f"a {dtype} tensor of shape {shape} needs {extent * itemsize} B but the view has {u8.numel()} B"
        )
    out = torch.empty(0, dtype=dtype, device=u8.device)
    return out.set_(u8.untyped_storage(), u8.storage_offset() // itemsize, shape, stride)


