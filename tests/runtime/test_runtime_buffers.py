"""Device buffers: freed exactly once, misuse is an error, nothing leaks."""

import gc

import pytest
import torch

from workbench.runtime import (
    DeviceBuffer,
    DoubleFreeError,
    SimDeviceAllocator,
    UseAfterFreeError,
    live_allocations,
    live_bytes,
)


class CountingSim(SimDeviceAllocator):
    """A sim allocator that counts how often its blocks are given back."""

    def __init__(self):
        self.released = 0

    def _release(self, record):
        self.released += 1


def test_explicit_free_then_collection_frees_once():
    """free() followed by garbage collection of the buffer releases the block exactly once."""
    alloc = CountingSim()
    buf = DeviceBuffer(alloc, 100)
    buf.free()
    del buf
    gc.collect()
    assert alloc.released == 1


def test_finalizer_frees_an_unreferenced_buffer_once():
    """A buffer dropped without free() is released by its finalizer, exactly once."""
    alloc = CountingSim()
    before = live_bytes("cuda:0")
    buf = DeviceBuffer(alloc, 64)
    assert live_bytes("cuda:0") == before + 64
    del buf
    gc.collect()
    assert alloc.released == 1 and live_bytes("cuda:0") == before


def test_double_free_raises():
    """A second free() is an error, not a silent no-op or a second release."""
    alloc = CountingSim()
    buf = DeviceBuffer(alloc, 8)
    buf.free()
    with pytest.raises(DoubleFreeError, match="already freed"):
        buf.free()
    assert alloc.released == 1


def test_use_after_free_raises_for_every_use():
    """view, typed, copies and the allocation handle all refuse a freed buffer."""
    buf = DeviceBuffer(SimDeviceAllocator(), 16)
    other = DeviceBuffer(SimDeviceAllocator(), 16)
    buf.free()
    host = torch.zeros(4, dtype=torch.uint8)
    for use in (
        lambda: buf.view(),
        lambda: buf.typed(torch.float32, (2,)),
        lambda: buf.copy_from_host(host),
        lambda: buf.copy_to_host(host),
        lambda: buf.allocation,
        lambda: other.copy_from(buf, 4),
        lambda: buf.__enter__(),
    ):
        with pytest.raises(UseAfterFreeError):
            use()
    other.free()


def test_allocator_refuses_a_freed_allocation():
    """The allocator itself rejects copies into and a second free of a freed allocation."""
    alloc = SimDeviceAllocator()
    a = alloc.allocate(8)
    alloc.free(a)
    with pytest.raises(UseAfterFreeError):
        alloc.copy_host_to_device(a, 0, torch.zeros(2, dtype=torch.uint8))
    with pytest.raises(DoubleFreeError):
        alloc.free(a)


def test_live_bytes_return_to_zero_per_device():
    """Bytes are counted on the right device while live and return to their start after free."""
    alloc = SimDeviceAllocator()
    start = {d: live_bytes(d) for d in ("cuda:0", "cuda:1", "cpu")}
    bufs = [DeviceBuffer(alloc, 10, 0), DeviceBuffer(alloc, 30, 1), DeviceBuffer(alloc, 5, 1)]
    assert live_bytes("cuda:0") == start["cuda:0"] + 10
    assert live_bytes("cuda:1") == start["cuda:1"] + 35
    assert live_bytes("cpu") == start["cpu"]
    for b in bufs:
        b.free()
    assert {d: live_bytes(d) for d in start} == start


def test_context_manager_frees_on_exception():
    """Leaving a with block by an exception frees the buffer; the exception propagates."""
    before, count = live_bytes(), live_allocations()
    with pytest.raises(RuntimeError, match="boom"):
        with DeviceBuffer(SimDeviceAllocator(), 1000) as buf:
            assert live_bytes() == before + 1000
            raise RuntimeError("boom")
    assert buf.freed and live_bytes() == before and live_allocations() == count


def test_free_inside_with_block_is_not_a_double_free():
    """An explicit free() inside the block is fine; leaving the block does not free again."""
    alloc = CountingSim()
    with DeviceBuffer(alloc, 4) as buf:
        buf.free()
    assert alloc.released == 1


def test_bad_sizes_are_clear_errors():
    """Negative or non-int sizes and indices are refused with the valid range."""
    alloc = SimDeviceAllocator()
    with pytest.raises(ValueError, match=">= 0"):
        DeviceBuffer(alloc, -1)
    with pytest.raises(TypeError, match="int"):
        DeviceBuffer(alloc, 1.5)
    with pytest.raises(ValueError, match="0..15"):
        DeviceBuffer(alloc, 4, index=99)
