"""Device allocators: where the bytes of a device live, and how they move.

A ``DeviceAllocator`` hands out ``Allocation`` handles for one device type and copies
bytes into, out of and between them. Three kinds exist:

- ``HostAllocator`` (``"cpu"``): host memory, optionally pinned.
- ``SimDeviceAllocator`` (``"cuda"``, simulated): each allocation is its own block of
  host memory, so "device" and host bytes never share storage and copies really move
  bytes; time is modeled elsewhere (``cost_model``).
- ``CupyDeviceAllocator`` (``"cuda"``, real; in ``cupy_allocator.py``): CuPy device memory.

Rules (every allocator keeps them; the base class enforces them):

1. ``allocate(nbytes, index)`` returns a fresh ``Allocation``; its ``id`` is never reused.
2. ``free(a)`` frees ``a`` exactly once; freeing it again raises ``DoubleFreeError``.
3. Any use of a freed allocation (copy, view) raises ``UseAfterFreeError``.
4. Copies are bounds-checked: ``offset + nbytes <= allocation.nbytes``, offsets ``>= 0``.
5. The host side of an h2d/d2h copy is a contiguous host tensor; a tensor that lies in
   (simulated) device memory is refused there, never silently treated as host memory.
6. Live bytes are counted per device from allocate to free, process-wide, so tests can prove nothing leaks (``live_bytes``).
7. Allocations are process-wide, like real device memory: any allocator of the same
   ``kind`` may copy to or from any live allocation of that kind.

A copy given ``stream=None`` has completed when it returns. A copy given a stream may
still be running on return (real CUDA only); the caller keeps both sides alive and
synchronizes the stream before reading or freeing them. The simulator ignores streams.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from ..devices import Device, DeviceLike
from ..arguments import check_flag
from ..errors import ArgumentTypeError, WorkbenchError
from ..kernels.cuda import pinned_host_tensor

class AllocatorError(WorkbenchError, RuntimeError):
    """Misuse of device memory (double free, use after free, foreign allocation)."""


class AllocatorArgumentError(WorkbenchError, ValueError):
    """A copy or allocation asked for with an invalid value: out of range, overlapping, not contiguous."""


class AllocatorOutOfMemory(AllocatorError):
    """An allocation larger than the memory behind it can hold."""


class DoubleFreeError(AllocatorError):
    """An allocation or buffer was freed a second time."""


class UseAfterFreeError(AllocatorError):
    """A freed allocation or buffer was used."""


class UnregisteredDeviceTypeError(WorkbenchError, LookupError):
    """No allocator is registered for the device type asked for."""

    def __str__(self) -> str:  # LookupError would quote the message like a key
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class Allocation:
    """A handle to one block of memory; plain data, safe to copy around.

    ``kind`` names the memory space (``"host"``, ``"sim"``, ``"cupy"``); ``ptr`` is the
    block's address in that space (a host address for host and sim memory).
    """

    kind: str
    device: Device
    nbytes: int  # bytes requested (the block may be larger; never used beyond nbytes)
    ptr: int  # address of byte 0
    id: int  # unique for the life of the process

    def __str__(self) -> str:
        return f"{self.kind} allocation #{self.id} of {self.nbytes} B on {self.device}"


@dataclass
class AllocationRecord:
    """A live allocation and what keeps its bytes alive (allocators' own bookkeeping)."""

    allocation: Allocation
    memory: Any  # what keeps the bytes alive: a torch uint8 tensor, or a CuPy Memory


# Process-wide tables (rule 6, 7). One lock guards all of them.
_LOCK = threading.RLock()
_IDS = itertools.count(1)
_LIVE: dict[int, AllocationRecord] = {}
_LIVE_BYTES: dict[Device, int] = {}
_LIVE_COUNT: dict[Device, int] = {}
# Address book: sorted starts and, parallel to them, (end, id). Blocks never overlap.
_STARTS: list[int] = []
_SPANS: list[tuple[int, int]] = []


def live_bytes(device: DeviceLike | None = None) -> int:
    """Bytes allocated and not yet freed on ``device`` (all devices when None)."""
    with _LOCK:
        if device is None:
            return sum(_LIVE_BYTES.values())
        return _LIVE_BYTES.get(Device.parse(device), 0)


def live_bytes_by_device() -> dict[Device, int]:
    """Live bytes of every device with live allocations, by device (cpu, cuda:0, ...)."""
    with _LOCK:
        return dict(sorted(_LIVE_BYTES.items()))  # entries go when their last allocation does


def live_allocations(device: DeviceLike | None = None) -> int:
    """Number of allocations not yet freed on ``device`` (all devices when None)."""
    with _LOCK:
        if device is None:
            return sum(_LIVE_COUNT.values())
        return _LIVE_COUNT.get(Device.parse(device), 0)


def find_allocation(ptr: int) -> tuple[Allocation, int] | None:
    """The live allocation whose block holds address ``ptr``, and the offset in it."""
    with _LOCK:
        i = bisect.bisect_right(_STARTS, ptr) - 1
        if i < 0:
            return None
        end, alloc_id = _SPANS[i]
        if ptr >= end:
            return None
        return _LIVE[alloc_id].allocation, ptr - _STARTS[i]


def _host_bytes(t: torch.Tensor, what: str) -> torch.Tensor:
    """A flat uint8 view of a contiguous host tensor's bytes (no copy)."""
    if not isinstance(t, torch.Tensor):
        raise ArgumentTypeError(f"{what} must be a torch.Tensor on the host, not {type(t).__name__}")
    if t.device.type != "cpu":
        raise AllocatorArgumentError(
            f"{what} must be a host (cpu) tensor, not one on {t.device}; "
            "use copy_device_to_device for device memory"
        )
    if not t.is_contiguous():
        raise AllocatorArgumentError(f"{what} must be contiguous; call .contiguous() first")
    if t.numel() and (hit := find_allocation(t.data_ptr())) is not None and hit[0].kind != "host":
        raise AllocatorArgumentError(
            f"{what} lies in {hit[0]} (device memory), not in host memory; "
            "use copy_device_to_device or to_host()"
        )
    flat = t.detach().reshape(-1)
    return flat.view(torch.uint8) if flat.dtype != torch.uint8 else flat


def _check_int(value: Any, name: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be an int, not {type(value).__name__} {value!r}")
    if value < minimum:
        raise AllocatorArgumentError(f"{name} must be >= {minimum}, got {value}")
    return value


class DeviceAllocator(ABC):
    """Allocates memory of one device type and copies bytes in, out and across.

    Subclasses set ``device_type`` and ``kind`` and implement the ``_``-prefixed hooks;
    the public methods validate arguments and keep the module's rules (see module doc).
    """

    device_type: str = ""  # "cpu" or "cuda"
    kind: str = ""  # memory space: "host", "sim", "cupy"

    # -- hooks -------------------------------------------------------------------------
    @abstractmethod
    def _allocate(self, nbytes: int, device: Device) -> tuple[int, Any]:
        """Reserve at least max(nbytes, 1) bytes; return (address, keep-alive object)."""

    def _release(self, record: AllocationRecord) -> None:
        """Give the block back (dropping the record's reference is enough by default)."""

    @abstractmethod
    def _view(self, record: AllocationRecord, offset: int, nbytes: int) -> torch.Tensor:
        """A flat uint8 torch tensor aliasing ``nbytes`` of the block at ``offset``."""

    @abstractmethod
    def _h2d(self, dst: AllocationRecord, dst_offset: int, src: torch.Tensor, stream: Any) -> None:
        """Copy the flat uint8 host tensor ``src`` into ``dst`` at ``dst_offset``."""

    @abstractmethod
    def _d2h(self, dst: torch.Tensor, src: AllocationRecord, src_offset: int, stream: Any) -> None:
        """Fill the flat uint8 host tensor ``dst`` from ``src`` at ``src_offset``."""

    @abstractmethod
    def _d2d(
        self, dst: AllocationRecord, dst_offset: int, src: AllocationRecord, src_offset: int, nbytes: int, stream: Any
    ) -> None:
        """Copy ``nbytes`` between two blocks of this kind."""

    def _check_device(self, device: Device) -> None:
        """Refuse a device this allocator cannot serve (e.g. a GPU index that does not exist)."""

    # -- public API --------------------------------------------------------------------
    def allocate(self, nbytes: int, index: int = 0) -> Allocation:
        """Allocate ``nbytes`` on ``<device_type>:<index>`` (rule 1)."""
        _check_int(nbytes, "nbytes")
        device = Device(self.device_type, _check_int(index, "index"))
        self._check_device(device)
        ptr, memory = self._allocate(nbytes, device)
        with _LOCK:
            alloc = Allocation(self.kind, device, nbytes, int(ptr), next(_IDS))
            _LIVE[alloc.id] = AllocationRecord(alloc, memory)
            key = device
            _LIVE_BYTES[key] = _LIVE_BYTES.get(key, 0) + nbytes
            _LIVE_COUNT[key] = _LIVE_COUNT.get(key, 0) + 1
            # Blocks are at least one byte, so every allocation has its own address range.
            i = bisect.bisect_right(_STARTS, alloc.ptr)
            _STARTS.insert(i, alloc.ptr)
            _SPANS.insert(i, (alloc.ptr + max(nbytes, 1), alloc.id))
        return alloc

    def free(self, allocation: Allocation) -> None:
        """Free ``allocation`` (rule 2)."""
        with _LOCK:
            record = self._record(allocation, "free", freed_error=DoubleFreeError)
            del _LIVE[allocation.id]
            key = allocation.device
            _LIVE_BYTES[key] -= allocation.nbytes
            _LIVE_COUNT[key] -= 1
            if not _LIVE_COUNT[key]:
                del _LIVE_COUNT[key], _LIVE_BYTES[key]
            i = bisect.bisect_left(_STARTS, allocation.ptr)
            while _SPANS[i][1] != allocation.id:  # equal starts cannot happen; be safe anyway
                i += 1
            del _STARTS[i], _SPANS[i]
        self._release(record)

    def view(self, allocation: Allocation, offset: int = 0, nbytes: int | None = None) -> torch.Tensor:
        """A flat ``torch.uint8`` tensor aliasing ``allocation[offset:offset+nbytes]``.

        Writes through the view change the allocation's bytes. On the simulator the view
        is a CPU tensor; on CUDA it is a CUDA tensor over the same memory (zero-copy).
        The view keeps the bytes alive, but once the allocation is freed the view is no
        longer counted or recognised as device memory.
        """
        record = self._record(allocation, "view")
        _check_int(offset, "offset")
        if nbytes is None:
            nbytes = allocation.nbytes - offset
        self._check_range(allocation, offset, nbytes, "view")
        return self._view(record, offset, nbytes)

    def copy_host_to_device(
        self, dst: Allocation, dst_offset: int, src_host_tensor: torch.Tensor, stream: Any = None
    ) -> None:
        """Copy all bytes of a contiguous host tensor into ``dst`` at ``dst_offset``."""
        record = self._record(dst, "copy into")
        src = _host_bytes(src_host_tensor, "the source of a host-to-device copy")
        self._check_range(dst, dst_offset, src.numel(), "host-to-device copy")
        if src.numel():
            self._h2d(record, dst_offset, src, stream)

    def copy_device_to_host(
        self, dst_host_tensor: torch.Tensor, src: Allocation, src_offset: int, stream: Any = None
    ) -> None:
        """Fill a contiguous host tensor with bytes of ``src`` from ``src_offset``."""
        record = self._record(src, "copy from")
        dst = _host_bytes(dst_host_tensor, "the destination of a device-to-host copy")
        self._check_range(src, src_offset, dst.numel(), "device-to-host copy")
        if dst.numel():
            self._d2h(dst, record, src_offset, stream)

    def copy_device_to_device(
        self,
        dst: Allocation,
        dst_offset: int,
        src: Allocation,
        src_offset: int,
        nbytes: int,
        stream: Any = None,
    ) -> None:
        """Copy ``nbytes`` from ``src`` at ``src_offset`` to ``dst`` at ``dst_offset``.

        The two ranges must not overlap when both lie in the same allocation.
        """
        dst_rec = self._record(dst, "copy into")
        src_rec = self._record(src, "copy from")
        _check_int(nbytes, "nbytes")
        self._check_range(dst, dst_offset, nbytes, "device-to-device copy (destination)")
        self._check_range(src, src_offset, nbytes, "device-to-device copy (source)")
        if dst.id == src.id and nbytes and abs(dst_offset - src_offset) < nbytes:
            raise AllocatorArgumentError(
                f"device-to-device copy within {dst} overlaps itself: "
                f"[{src_offset}, {src_offset + nbytes}) -> [{dst_offset}, {dst_offset + nbytes})"
            )
        if nbytes:
            self._d2d(dst_rec, dst_offset, src_rec, src_offset, nbytes, stream)

    def synchronize(self, stream: Any = None) -> None:
        """Wait until copies issued on ``stream`` (all, when None) have finished."""

    # -- helpers -----------------------------------------------------------------------
    def _record(
        self, allocation: Allocation, action: str, freed_error: type[AllocatorError] = UseAfterFreeError
    ) -> AllocationRecord:
        if not isinstance(allocation, Allocation):
            raise ArgumentTypeError(f"expected an Allocation, got {type(allocation).__name__}")
        if allocation.kind != self.kind:
            raise AllocatorError(
                f"cannot {action} {allocation} with a {type(self).__name__} "
                f"(it serves {self.kind!r} memory)"
            )
        with _LOCK:
            record = _LIVE.get(allocation.id)
        if record is None:
            verb = "freed twice" if freed_error is DoubleFreeError else f"used ({action}) after it was freed"
            raise freed_error(f"{allocation} was {verb}")
        return record

    @staticmethod
    def _check_range(allocation: Allocation, offset: int, nbytes: int, what: str) -> None:
        _check_int(offset, "offset")
        _check_int(nbytes, "nbytes")
        if offset + nbytes > allocation.nbytes:
            raise AllocatorArgumentError(
                f"{what} of {nbytes} B at offset {offset} runs past the end of {allocation} "
                f"(valid: offset + nbytes <= {allocation.nbytes})"
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(device_type={self.device_type!r})"


class _HostMemoryAllocator(DeviceAllocator):
    """Shared code for allocators whose blocks are host memory held by torch tensors."""

    def _view(self, record: AllocationRecord, offset: int, nbytes: int) -> torch.Tensor:
        return record.memory[offset : offset + nbytes]

    def _h2d(self, dst: AllocationRecord, dst_offset: int, src: torch.Tensor, stream: Any) -> None:
        dst.memory[dst_offset : dst_offset + src.numel()].copy_(src)

    def _d2h(self, dst: torch.Tensor, src: AllocationRecord, src_offset: int, stream: Any) -> None:
        dst.copy_(src.memory[src_offset : src_offset + dst.numel()])

    def _d2d(
        self, dst: AllocationRecord, dst_offset: int, src: AllocationRecord, src_offset: int, nbytes: int, stream: Any
    ) -> None:
        dst.memory[dst_offset : dst_offset + nbytes].copy_(src.memory[src_offset : src_offset + nbytes])


class HostAllocator(_HostMemoryAllocator):
    """Host (``cpu``) memory; ``pinned=True`` page-locks it for fast device copies (needs CUDA)."""

    device_type = "cpu"
    kind = "host"

    def __init__(self, pinned: bool = False) -> None:
        self.pinned = check_flag(pinned, "pinned")

    def _allocate(self, nbytes: int, device: Device) -> tuple[int, Any]:
        if self.pinned:
            memory = pinned_host_tensor(max(nbytes, 1))
        else:
            memory = _host_block(nbytes, device, self.kind)
        return memory.data_ptr(), memory

    def __repr__(self) -> str:
        return f"HostAllocator(pinned={self.pinned})"


class SimDeviceAllocator(_HostMemoryAllocator):
    """A simulated ``cuda`` device: every allocation is its own block of host memory.

    A tensor "on sim cuda:0" is a CPU torch tensor whose bytes lie in a live allocation of
    this kind for cuda:0 (``find_allocation`` tells them apart from host tensors).
    """

    device_type = "cuda"
    kind = "sim"

    def _allocate(self, nbytes: int, device: Device) -> tuple[int, Any]:
        memory = _host_block(nbytes, device, self.kind)
        return memory.data_ptr(), memory


def _host_block(nbytes: int, device: Device, kind: str) -> torch.Tensor:
    """``nbytes`` of host memory for a block on ``device``; a size the machine cannot
    hold is an ``AllocatorOutOfMemory`` naming it, not the allocator's raw error."""
    try:
        return torch.empty(max(nbytes, 1), dtype=torch.uint8)
    except (RuntimeError, MemoryError) as exc:
        raise AllocatorOutOfMemory(
            f"cannot allocate {nbytes} bytes ({nbytes / 2**30:.1f} GiB) for a {kind} block on {device}: "
            f"this machine's memory cannot hold it ({type(exc).__name__}); plan less memory or run fewer devices"
        ) from None


class AllocatorRegistry:
    """Maps a device type (``"cpu"``, ``"cuda"``) to the allocator that serves it.

    Rules: 1. one allocator per device type; registering a type again is an error unless
    ``replace=True``. 2. Asking for an unregistered type is an error naming the registered
    ones. 3. ``get`` accepts a type (``"cuda"``), a device string (``"cuda:1"``) or a Device.
    """

    def __init__(self, allocators: Iterable[DeviceAllocator] = (), backend: str | None = None) -> None:
        self.backend = backend
        self._by_type: dict[str, DeviceAllocator] = {}
        for allocator in allocators:
            self.register(allocator)

    def register(self, allocator: DeviceAllocator, replace: bool = False) -> None:
        """Register ``allocator`` for its ``device_type``."""
        if not isinstance(allocator, DeviceAllocator):
            raise ArgumentTypeError(f"expected a DeviceAllocator, got {type(allocator).__name__}")
        device_type = Device(allocator.device_type).type  # validates the type
        existing = self._by_type.get(device_type)
        if existing is not None and not replace:
            raise AllocatorArgumentError(
                f"device type {device_type!r} already has {existing!r}; "
                "pass replace=True to replace it"
            )
        self._by_type[device_type] = allocator

    def get(self, device_type: DeviceLike) -> DeviceAllocator:
        """The allocator for a device type, device string or Device."""
        if isinstance(device_type, Device):
            key = device_type.type
        elif isinstance(device_type, str):
            key = device_type.strip().lower().partition(":")[0]
        else:
            raise ArgumentTypeError(
                f"a device type is a string such as 'cpu' or 'cuda', not {type(device_type).__name__}"
            )
        try:
            return self._by_type[key]
        except KeyError:
            registered = ", ".join(repr(t) for t in self.types()) or "none"
            raise UnregisteredDeviceTypeError(
                f"no allocator is registered for device type {key!r}; registered types: {registered}"
            ) from None

    def types(self) -> tuple[str, ...]:
        """The registered device types, sorted."""
        return tuple(sorted(self._by_type))

    def __contains__(self, device_type: object) -> bool:
        return isinstance(device_type, str) and device_type.strip().lower().partition(":")[0] in self._by_type

    def __repr__(self) -> str:
        inner = ", ".join(f"{t!r}: {a!r}" for t, a in sorted(self._by_type.items()))
        return f"AllocatorRegistry(backend={self.backend!r}, {{{inner}}})"
