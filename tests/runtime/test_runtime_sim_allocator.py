"""The simulated device allocator: copies really move bytes, views alias device memory."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.runtime import AllocatorError, HostAllocator, SimDeviceAllocator, find_allocation


def _bytes(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)


@settings(max_examples=40, deadline=None)
@given(size=st.integers(1, 300), dst_off=st.integers(0, 64), src_off=st.integers(0, 64), seed=st.integers(0, 99))
def test_h2d_d2d_d2h_round_trip_moves_exact_bytes(size, dst_off, src_off, seed):
    """Bytes written at an odd offset come back identical through d2d and d2h, and nothing else changes."""
    alloc = SimDeviceAllocator()
    a = alloc.allocate(src_off + size + 7)
    b = alloc.allocate(dst_off + size + 5, index=1)
    try:
        alloc.view(a).fill_(0xAA)
        alloc.view(b).fill_(0x55)
        data = _bytes(size, seed)
        alloc.copy_host_to_device(a, src_off, data)
        alloc.copy_device_to_device(b, dst_off, a, src_off, size)
        out = torch.empty(size, dtype=torch.uint8)
        alloc.copy_device_to_host(out, b, dst_off)
        assert torch.equal(out, data)
        whole = alloc.view(b)
        assert bool((whole[:dst_off] == 0x55).all()) and bool((whole[dst_off + size :] == 0x55).all())
    finally:
        alloc.free(a)
        alloc.free(b)


def test_copies_of_typed_tensors_move_their_bytes():
    """A float32 host tensor copied in and read back as float32 has the same values."""
    alloc = SimDeviceAllocator()
    a = alloc.allocate(4 * 6)
    src = torch.randn(2, 3)
    alloc.copy_host_to_device(a, 0, src)
    out = torch.empty(2, 3)
    alloc.copy_device_to_host(out, a, 0)
    alloc.free(a)
    assert torch.equal(out, src)


def test_device_memory_is_separate_from_the_host_source():
    """After h2d, changing the host tensor does not change device bytes (a real copy, not an alias)."""
    alloc = SimDeviceAllocator()
    a = alloc.allocate(8)
    src = torch.arange(8, dtype=torch.uint8)
    alloc.copy_host_to_device(a, 0, src)
    src.zero_()
    assert alloc.view(a).tolist() == list(range(8))
    alloc.free(a)


def test_write_through_view_is_visible_after_d2h():
    """A view aliases device memory: writing through it changes what d2h reads."""
    alloc = SimDeviceAllocator()
    a = alloc.allocate(32)
    alloc.view(a).zero_()
    alloc.view(a, 8, 8).view(torch.float32).copy_(torch.tensor([1.5, -2.0]))
    out = torch.empty(8, dtype=torch.float32)
    alloc.copy_device_to_host(out, a, 0)
    alloc.free(a)
    assert out.tolist() == [0.0, 0.0, 1.5, -2.0, 0.0, 0.0, 0.0, 0.0]


def test_out_of_bounds_copies_are_refused_with_the_limit():
    """A copy running past the end names the allocation size; nothing is written."""
    alloc = SimDeviceAllocator()
    a = alloc.allocate(10)
    alloc.view(a).zero_()
    with pytest.raises(ValueError, match="<= 10"):
        alloc.copy_host_to_device(a, 5, torch.ones(6, dtype=torch.uint8))
    with pytest.raises(ValueError, match="<= 10"):
        alloc.copy_device_to_host(torch.empty(11, dtype=torch.uint8), a, 0)
    with pytest.raises(ValueError, match="<= 10"):
        alloc.view(a, 4, 7)
    assert int(alloc.view(a).sum()) == 0
    alloc.free(a)


def test_a_device_tensor_is_not_accepted_as_host_source():
    """h2d refuses a source that lies in sim device memory (it would be a d2d in disguise)."""
    alloc = SimDeviceAllocator()
    a, b = alloc.allocate(8), alloc.allocate(8)
    with pytest.raises(ValueError, match="device memory"):
        alloc.copy_host_to_device(b, 0, alloc.view(a))
    alloc.free(a)
    alloc.free(b)


def test_non_contiguous_host_tensor_is_refused():
    """A strided host tensor is refused with the fix, not copied wrongly."""
    alloc = SimDeviceAllocator()
    a = alloc.allocate(64)
    with pytest.raises(ValueError, match="contiguous"):
        alloc.copy_host_to_device(a, 0, torch.zeros(4, 4)[:, 0])
    alloc.free(a)


def test_overlapping_d2d_within_one_allocation_is_refused():
    """A self-overlapping d2d in one block would smear bytes; it is an error."""
    alloc = SimDeviceAllocator()
    a = alloc.allocate(16)
    with pytest.raises(ValueError, match="overlaps"):
        alloc.copy_device_to_device(a, 2, a, 0, 8)
    alloc.copy_device_to_device(a, 8, a, 0, 8)  # disjoint halves are fine
    alloc.free(a)


def test_allocations_of_another_kind_are_refused():
    """A host allocation given to the sim allocator is an error naming both."""
    host, sim = HostAllocator(), SimDeviceAllocator()
    h = host.allocate(8)
    with pytest.raises(AllocatorError, match="host"):
        sim.copy_host_to_device(h, 0, torch.zeros(1, dtype=torch.uint8))
    host.free(h)


def test_address_lookup_finds_the_allocation_and_offset():
    """find_allocation maps an address inside a block to (allocation, offset), and nothing after free."""
    alloc = SimDeviceAllocator()
    a = alloc.allocate(100, index=3)
    v = alloc.view(a, 40, 10)
    found, offset = find_allocation(v.data_ptr())
    assert found == a and offset == 40
    alloc.free(a)
    assert find_allocation(v.data_ptr()) is None or find_allocation(v.data_ptr())[0] != a


def test_zero_byte_allocations_have_distinct_addresses():
    """Zero-byte blocks still get their own address, so lookups never confuse two allocations."""
    alloc = SimDeviceAllocator()
    a, b = alloc.allocate(0), alloc.allocate(0)
    assert a.ptr != b.ptr and find_allocation(a.ptr)[0] == a and find_allocation(b.ptr)[0] == b
    alloc.free(a)
    alloc.free(b)
