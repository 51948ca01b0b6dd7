"""Device tensors: which device a tensor is on, and moving tensors between devices."""

import gc

import pytest
import torch

from workbench.devices import Device
from workbench.runtime import (
    buffer_of,
    clone_to,
    device_of,
    live_bytes,
    registry_for_backend,
    to_device,
    to_host,
    typed_view,
)


def test_device_of_tells_sim_device_tensors_from_host_tensors():
    """A tensor made on sim cuda:1 is on cuda:1; the host tensor it came from is on cpu."""
    host = torch.arange(6.0).reshape(2, 3)
    dev = to_device(host, "cuda:1", "sim")
    assert device_of(dev, "sim") == Device("cuda", 1)
    assert device_of(dev[1, 1:], "sim") == Device("cuda", 1)  # views too
    assert device_of(host, "sim") == Device("cpu")
    assert device_of(torch.empty(0), "sim") == Device("cpu")


def test_device_of_rejects_meta_tensors_and_other_objects():
    """Meta tensors hold no data and a list is not a tensor: both are clear errors."""
    with pytest.raises(ValueError, match="meta"):
        device_of(torch.empty(2, device="meta"), "sim")
    with pytest.raises(TypeError, match="list"):
        device_of([1, 2], "sim")


def test_to_device_copies_values_and_is_independent_of_the_source():
    """Values match and later writes to the host tensor do not reach the device copy."""
    host = torch.randn(3, 4)
    dev = to_device(host, "cuda:0", "sim")
    expected = host.clone()
    host.zero_()
    assert dev.dtype == host.dtype and dev.shape == host.shape
    assert torch.equal(to_host(dev), expected)


def test_to_device_refuses_a_device_tensor():
    """to_device takes host data; a device tensor is pointed to clone_to."""
    dev = to_device(torch.ones(2), "cuda:0", "sim")
    with pytest.raises(ValueError, match="clone_to"):
        to_device(dev, "cuda:1", "sim")


def test_tensor_owns_its_buffer_until_it_and_its_views_are_gone():
    """The buffer lives while the tensor or a view of it lives, and is freed after."""
    before = live_bytes("cuda:2")
    dev = to_device(torch.zeros(16, dtype=torch.float64), "cuda:2", "sim")
    assert live_bytes("cuda:2") == before + 128 and buffer_of(dev) is not None
    view = dev[4:8]
    del dev
    gc.collect()
    assert live_bytes("cuda:2") == before + 128 and device_of(view, "sim") == Device("cuda", 2)
    del view
    gc.collect()
    assert live_bytes("cuda:2") == before


def test_clone_to_covers_every_direction():
    """host→device, device→device (other index), device→host all preserve values and land where asked."""
    host = torch.randn(5, 3)
    a = clone_to(host, "cuda:0", "sim")
    b = clone_to(a, "cuda:3", "sim")
    c = clone_to(b, "cpu", "sim")
    assert device_of(a, "sim") == Device("cuda", 0)
    assert device_of(b, "sim") == Device("cuda", 3)
    assert device_of(c, "sim") == Device("cpu")
    assert torch.equal(c, host)
    b.zero_()
    assert torch.equal(to_host(a), host)  # d2d made a separate copy


def test_clone_to_of_a_strided_device_view():
    """A non-contiguous view of a device tensor clones to another device with the right values."""
    host = torch.arange(12.0).reshape(3, 4)
    dev = to_device(host, "cuda:0", "sim")
    moved = clone_to(dev[:, 1], "cuda:1", "sim")
    assert torch.equal(to_host(moved), host[:, 1])
    assert torch.equal(to_host(dev.t()), host.t())


def test_clone_to_host_of_a_host_tensor_is_a_fresh_copy():
    """clone_to(host, 'cpu') never aliases its input."""
    host = torch.ones(3)
    out = clone_to(host, "cpu", "sim")
    out.zero_()
    assert host.tolist() == [1.0, 1.0, 1.0]


def test_to_host_returns_a_host_tensor_as_is():
    """to_host on a plain host tensor makes no copy."""
    host = torch.ones(3)
    assert to_host(host) is host


def test_helpers_use_the_registry_they_are_given():
    """With an explicit registry the memory comes from it (a fresh sim registry works the same)."""
    reg = registry_for_backend("sim")
    dev = to_device(torch.tensor([1, 2, 3]), "cuda:0", registry=reg)
    assert buffer_of(dev).allocator is reg.get("cuda")
    assert to_host(dev).tolist() == [1, 2, 3]


def test_typed_view_checks_alignment_and_size():
    """A misaligned byte offset or a tensor larger than the view is refused with the reason."""
    u8 = torch.zeros(32, dtype=torch.uint8)
    assert typed_view(u8[8:24], torch.float32, (2, 2)).shape == (2, 2)
    with pytest.raises(ValueError, match="multiple"):
        typed_view(u8[2:18], torch.float32, (4,))
    with pytest.raises(ValueError, match="needs 32 B"):
        typed_view(u8[:16], torch.float32, (8,))


def test_device_of_rejects_fake_tensors():
    """A fake tensor (shape-only capture) has no memory: asking where it lives is an error."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(3)
    with pytest.raises(ValueError, match="fake"):
        device_of(fake, "sim")
