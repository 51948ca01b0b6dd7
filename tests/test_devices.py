"""Device parsing: the accepted spellings and the errors for everything else."""

import pytest

from workbench import CPU, Device, DeviceError


@pytest.mark.parametrize(
    "text, expected",
    [
        ("cpu", Device("cpu", 0)),
        ("CPU", Device("cpu", 0)),
        ("cuda", Device("cuda", 0)),
        ("cuda:1", Device("cuda", 1)),
        (" Cuda:3 ", Device("cuda", 3)),
        ("cpu:0", Device("cpu", 0)),
    ],
)
def test_parse_accepts_valid_spellings(text, expected):
    """Device.parse is case-insensitive, strips blanks and reads 'cuda' as cuda:0."""
    assert Device.parse(text) == expected


def test_str_round_trips():
    """str(Device) is the canonical spelling that parses back to the same device."""
    for dev in (CPU, Device("cuda", 0), Device("cuda", 7)):
        assert Device.parse(str(dev)) == dev
    assert str(Device("cuda")) == "cuda:0" and str(CPU) == "cpu"


@pytest.mark.parametrize("text", ["tpu", "gpu:0", "", "mps"])
def test_unknown_type_lists_valid_types(text):
    """An unknown device type is an error that names the valid types."""
    with pytest.raises(DeviceError) as info:
        Device.parse(text)
    assert "cpu" in str(info.value) and "cuda" in str(info.value)


@pytest.mark.parametrize("text", ["cuda:-1", "cuda:x", "cuda:", "cuda:99", "cpu:1", "cuda:1.5"])
def test_bad_index_says_what_is_valid(text):
    """A bad index is an error that states the valid range for that type."""
    with pytest.raises(DeviceError) as info:
        Device.parse(text)
    assert "valid" in str(info.value)


def test_non_string_is_rejected():
    """Only strings and Device objects parse."""
    with pytest.raises(DeviceError):
        Device.parse(0)
    assert Device.parse(Device("cuda", 2)) == Device("cuda", 2)


def test_is_host_and_ordering():
    """Only cpu is the host; devices order by type then index (stable reports)."""
    assert CPU.is_host and not Device("cuda").is_host
    assert sorted([Device("cuda", 1), CPU, Device("cuda", 0)]) == [CPU, Device("cuda", 0), Device("cuda", 1)]
