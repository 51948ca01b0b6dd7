"""Tensors on devices: which device a tensor is on, and moving tensors between devices.

For users who stage inputs themselves (the skip-h2d flag expects device tensors).

What a device tensor is, per backend:

- ``sim``: a CPU torch tensor whose bytes lie in a live ``SimDeviceAllocator``
  allocation for that device (found by address, so a plain host tensor is ``cpu``).
- ``cuda``: a CUDA torch tensor or a CuPy array, on ``cuda:N``.

Ownership rule: ``to_device`` and ``clone_to`` return a plain torch tensor that owns the
``DeviceBuffer`` holding its bytes. The buffer is freed when that tensor — and every
view made from it by view ops (slicing, ``view``, ``reshape`` of contiguous data) — is
gone, or earlier by ``buffer_of(t).free()``. A freed buffer's tensor still reads valid
memory but is no longer counted as live nor recognised as device memory.
(``detach()`` makes a tensor that does not keep the buffer alive; keep the original.)
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, overload

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import is_fake

from ..devices import CPU, Device, DeviceLike
from ..errors import ArgumentTypeError, WorkbenchError
from .allocators import AllocatorRegistry, find_allocation
from .backend_registry import check_backend, shared_registry
from .device_buffers import DeviceBuffer
from .byte_views import typed_view

_OWNER_ATTR = "_workbench_buffer"


class DeviceTensorError(WorkbenchError, ValueError):
    """A tensor that is not where (or what) a device operation needs it to be."""


def is_cupy_array(x: Any) -> bool:
    return type(x).__module__.startswith("cupy") and hasattr(x, "__cuda_array_interface__")


def device_of(tensor: Any, backend: str | None = None) -> Device:
    """The device ``tensor`` is on under ``backend`` (default: ``default_backend()``).

    A CUDA torch tensor or CuPy array is on ``cuda:N``; a CPU tensor is on a simulated
    device when ``backend="sim"`` and its bytes lie in a live sim allocation, else on
    ``cpu``. Meta tensors have no memory and are an error.
    """
    backend = check_backend(backend)
    if is_cupy_array(tensor):
        return Device("cuda", int(tensor.device.id))
    if not isinstance(tensor, torch.Tensor):
        raise ArgumentTypeError(f"expected a torch.Tensor or CuPy array, got {type(tensor).__name__}")
    if tensor.device.type == "cuda":
        return Device("cuda", tensor.device.index or 0)
    if tensor.device.type != "cpu" or is_fake(tensor):
        raise DeviceTensorError(
            f"a {'fake' if is_fake(tensor) else tensor.device.type} tensor holds no data on any workbench device; "
            "valid tensors are on the host (cpu), on cuda, or sim device tensors"
        )
    if backend == "sim":
        hit = find_allocation(tensor.untyped_storage().data_ptr())
        if hit is not None and hit[0].kind == "sim":
            return hit[0].device
    return CPU


def buffer_of(tensor: torch.Tensor) -> DeviceBuffer | None:
    """The buffer a tensor made by ``to_device``/``clone_to`` owns (via its view base too)."""
    for t in (tensor, getattr(tensor, "_base", None)):
        if t is not None and isinstance(getattr(t, _OWNER_ATTR, None), DeviceBuffer):
            return getattr(t, _OWNER_ATTR)
    return None


def _registry(backend: str | None, registry: AllocatorRegistry | None) -> AllocatorRegistry:
    return registry if registry is not None else shared_registry(backend)


def owned_tensor(buffer: DeviceBuffer, dtype: torch.dtype, shape: Sequence[int], flat: Optional[torch.Tensor] = None) -> torch.Tensor:
    """A tensor of ``dtype``/``shape`` over ``buffer`` that owns it: ``buffer_of`` finds the
    buffer again, and the tensor keeps it alive. ``flat``: a flat uint8 view of the whole
    buffer made before (making one is a runtime call that a graph capture must not see)."""
    out = typed_view(buffer.view() if flat is None else flat, dtype, shape)
    setattr(out, _OWNER_ATTR, buffer)
    return out


def to_device(
    host_tensor: torch.Tensor,
    device: DeviceLike,
    backend: str | None = None,
    *,
    registry: AllocatorRegistry | None = None,
) -> torch.Tensor:
    """A new tensor on ``device`` holding ``host_tensor``'s values (contiguous).

    Memory comes from ``registry`` (default: the process's shared registry for
    ``backend``); the result owns its buffer (see the module's ownership rule). For
    ``device="cpu"`` the copy lands in the host allocator's memory (pinned on ``cuda``).
    """
    reg = _registry(backend, registry)
    backend = reg.backend or check_backend(backend)
    if not isinstance(host_tensor, torch.Tensor):
        raise ArgumentTypeError(f"to_device takes a host torch.Tensor, not {type(host_tensor).__name__}")
    src_device = device_of(host_tensor, backend)
    if not src_device.is_host:
        raise DeviceTensorError(f"to_device takes a host tensor, but this one is on {src_device}; use clone_to")
    dst = Device.parse(device)
    src = host_tensor.detach().contiguous()
    buffer = DeviceBuffer.on(dst, src.numel() * src.element_size(), reg)
    try:
        buffer.copy_from_host(src)
        return owned_tensor(buffer, src.dtype, src.shape)
    except BaseException:
        buffer.free()
        raise


@overload
def to_host(tensor: torch.Tensor) -> torch.Tensor: ...


@overload
def to_host(tensor: tuple[Any, ...] | list[Any]) -> tuple[torch.Tensor, ...]: ...


@overload
def to_host(tensor: Any) -> torch.Tensor: ...


def to_host(tensor: Any) -> Any:
    """A host torch tensor with ``tensor``'s values; a host tensor is returned as is.
    A tuple or list (a run's ``outputs``) gives a tuple, each one on the host.

    Sim device tensors are copied out through the sim allocator; CUDA tensors and CuPy
    arrays are copied with a device-to-host copy.
    """
    if isinstance(tensor, (tuple, list)):
        return tuple(to_host(t) for t in tensor)
    if is_cupy_array(tensor):
        import cupy

        return torch.from_numpy(cupy.asnumpy(tensor))
    if not isinstance(tensor, torch.Tensor):
        raise ArgumentTypeError(f"expected a torch.Tensor or CuPy array, got {type(tensor).__name__}")
    if tensor.device.type == "cuda":
        return tensor.detach().to("cpu")
    hit = find_allocation(tensor.untyped_storage().data_ptr()) if tensor.device.type == "cpu" else None
    if hit is None or hit[0].kind != "sim":
        if tensor.device.type != "cpu":
            raise DeviceTensorError(f"a tensor on {tensor.device} has no data to copy to the host")
        return tensor
    out = torch.empty(tensor.shape, dtype=tensor.dtype)
    if tensor.is_contiguous():
        allocation, base_offset = hit
        offset = base_offset + int(tensor.storage_offset()) * tensor.element_size()
        shared_registry("sim").get(allocation.device.type).copy_device_to_host(out, allocation, offset)
    else:
        out.copy_(tensor)  # sim device memory is host memory; strided reads are a gather
    return out


def clone_to(
    tensor: Any,
    device: DeviceLike,
    backend: str | None = None,
    *,
    registry: AllocatorRegistry | None = None,
) -> torch.Tensor:
    """A copy of ``tensor`` on ``device``: host→device, device→host or device→device.

    Device results own their buffer (module ownership rule); a host result is a plain
    host tensor (a fresh copy even when ``tensor`` already was on the host).
    """
    reg = _registry(backend, registry)
    backend = reg.backend or check_backend(backend)
    src_device = device_of(tensor, backend)
    dst = Device.parse(device)
    if dst.is_host:
        host = to_host(tensor)
        return host.clone() if host is tensor else host
    if src_device.is_host:
        return to_device(tensor, dst, backend, registry=reg)
    return _device_to_device(tensor, src_device, dst, backend, reg)


def _device_to_device(
    tensor: Any, src_device: Device, dst: Device, backend: str, reg: AllocatorRegistry
) -> torch.Tensor:
    if is_cupy_array(tensor):
        tensor = torch.from_dlpack(tensor)
    src = tensor.detach()
    nbytes = src.numel() * src.element_size()
    allocator = reg.get(dst.type)
    buffer = DeviceBuffer(allocator, nbytes, dst.index)
    try:
        hit = find_allocation(src.data_ptr()) if src.is_contiguous() and nbytes else None
        if hit is not None and hit[0].kind == allocator.kind:
            allocation, offset = hit
            allocator.copy_device_to_device(buffer.allocation, 0, allocation, offset, nbytes)
        elif nbytes:
            # Not from a workbench allocator (or strided): let torch copy into our memory.
            typed_view(buffer.view(), src.dtype, src.shape).copy_(src)
            allocator.synchronize()
        return owned_tensor(buffer, src.dtype, src.shape)
    except BaseException:
        buffer.free()
        raise


def stage_inputs(dg: Any, inputs: Sequence[Any], backend: str | None = None) -> tuple:
    """The model's inputs, each put where the propagated graph ``dg`` expects the caller
    to supply it: graph inputs moved to a device by ``skip_h2d_for_method_inputs`` are
    copied there with ``to_device`` (as a user staging inputs would), the rest are left as
    they are. Inputs that do not match the captured signature are returned unchanged, so
    the run reports the mismatch with its own message."""
    flat, spec = pytree.tree_flatten(tuple(inputs))
    names = dg.program.user_inputs
    if len(flat) != len(names):
        return tuple(inputs)
    staged = [
        to_device(value, dg.input_devices[name], backend)
        if isinstance(value, torch.Tensor) and not dg.input_devices[name].is_host
        else value
        for value, name in zip(flat, names)
    ]
    return tuple(pytree.tree_unflatten(staged, spec))
