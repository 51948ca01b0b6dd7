"""The allocator registry: one allocator per device type, clear errors otherwise."""

import pytest

from workbench.runtime import (
    AllocatorRegistry,
    HostAllocator,
    SimDeviceAllocator,
    UnknownBackendError,
    UnregisteredDeviceTypeError,
    registry_for_backend,
)


def test_registering_a_type_twice_is_an_error_naming_the_type():
    """A second allocator for 'cuda' must not silently replace the first (the error names the type and the fix)."""
    reg = AllocatorRegistry([SimDeviceAllocator()])
    with pytest.raises(ValueError, match=r"'cuda'.*replace=True"):
        reg.register(SimDeviceAllocator())


def test_replace_true_swaps_the_allocator():
    """replace=True installs the new allocator and get() returns exactly it."""
    first, second = SimDeviceAllocator(), SimDeviceAllocator()
    reg = AllocatorRegistry([first])
    reg.register(second, replace=True)
    assert reg.get("cuda") is second


def test_get_accepts_type_device_string_and_case():
    """get() finds the allocator from 'cuda', 'CUDA:1' and a Device alike."""
    from workbench.devices import Device

    sim = SimDeviceAllocator()
    reg = AllocatorRegistry([HostAllocator(), sim])
    assert reg.get("cuda") is sim and reg.get("CUDA:1") is sim and reg.get(Device("cuda", 2)) is sim
    assert reg.types() == ("cpu", "cuda")


def test_unregistered_type_error_names_the_registered_ones():
    """Asking for 'cuda' in a host-only registry says which types are registered."""
    reg = AllocatorRegistry([HostAllocator()])
    with pytest.raises(UnregisteredDeviceTypeError) as info:
        reg.get("cuda")
    assert "'cuda'" in str(info.value) and "'cpu'" in str(info.value)


def test_unknown_backend_error_lists_valid_backends():
    """registry_for_backend('tpu') fails and lists 'cuda' and 'sim'."""
    with pytest.raises(UnknownBackendError) as info:
        registry_for_backend("tpu")
    assert "'tpu'" in str(info.value) and "'cuda'" in str(info.value) and "'sim'" in str(info.value)


def test_sim_registry_is_fresh_and_has_host_and_sim_cuda():
    """Each call returns a new registry with a host allocator and a simulated cuda allocator."""
    a, b = registry_for_backend("sim"), registry_for_backend("sim")
    assert a is not b and a.get("cuda") is not b.get("cuda")
    assert isinstance(a.get("cpu"), HostAllocator) and isinstance(a.get("cuda"), SimDeviceAllocator)
