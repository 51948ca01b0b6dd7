"""Devices: where a value lives or an op runs.

A device is a type and an index: ``cpu`` (the host, always index 0) or
``cuda:N``. Strings are parsed case-insensitively; ``"cuda"`` means
``cuda:0``. Anything else is an error that says what is valid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Union
from .errors import WorkbenchError

#: Device types the workbench knows, and the largest index each accepts.
DEVICE_TYPES: dict[str, int] = {"cpu": 0, "cuda": 15}

DeviceLike = Union["Device", str]


class DeviceError(WorkbenchError, ValueError):
    """A device string or index that the workbench does not accept."""


@dataclass(frozen=True, order=True)
class Device:
    """A device: ``Device("cpu")`` or ``Device("cuda", 1)``."""

    type: str
    index: int = 0

    def __post_init__(self) -> None:
        if self.type not in DEVICE_TYPES:
            raise DeviceError(
                f"unknown device type {self.type!r}; valid types are "
                f"{', '.join(sorted(DEVICE_TYPES))}"
            )
        top = DEVICE_TYPES[self.type]
        if not isinstance(self.index, int) or isinstance(self.index, bool) or not 0 <= self.index <= top:
            valid = "0" if top == 0 else f"0..{top}"
            raise DeviceError(
                f"bad index {self.index!r} for device type {self.type!r}; valid indices are {valid}"
            )

    @classmethod
    def parse(cls, spec: DeviceLike) -> "Device":
        """Parse ``"cpu"``, ``"cuda"``, ``"CUDA:1"`` (or pass a Device through)."""
        if isinstance(spec, Device):
            return spec
        if not isinstance(spec, str):
            raise DeviceError(
                f"a device is a string such as 'cpu' or 'cuda:0', not {type(spec).__name__} {spec!r}"
            )
        text = spec.strip().lower()
        type_, sep, index_text = text.partition(":")
        if type_ not in DEVICE_TYPES:
            raise DeviceError(
                f"unknown device type {type_!r} in {spec!r}; valid types are "
                f"{', '.join(sorted(DEVICE_TYPES))} (e.g. 'cpu', 'cuda', 'cuda:1')"
            )
        if not sep:
            return cls(type_, 0)
        if not index_text.isdigit():
            top = DEVICE_TYPES[type_]
            valid = "0" if top == 0 else f"0..{top}"
            raise DeviceError(
                f"bad device index {index_text!r} in {spec!r}; valid indices for {type_!r} are {valid}"
            )
        return cls(type_, int(index_text))

    @property
    def is_host(self) -> bool:
        """True for the host CPU."""
        return self.type == "cpu"

    def __str__(self) -> str:
        return "cpu" if self.type == "cpu" else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"Device({str(self)!r})"


CPU = Device("cpu")
