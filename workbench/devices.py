"""Devices: where a value lives or an op runs, and the kinds of copies between them.

A device is a type and an index: ``cpu`` (the host, always index 0) or
``cuda:N``. Strings are parsed case-insensitively; ``"cuda"`` means
``cuda:0``. Anything else is an error that says what is valid. A copy between two
devices has a ``CopyKind``: ``h2d``, ``d2h`` or ``d2d``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from enum import Enum
from typing import Iterable, Union
from .errors import WorkbenchError

#: Device types the workbench knows, and the largest index each accepts.
DEVICE_TYPES: dict[str, int] = {"cpu": 0, "cuda": 15}

__all__ = ["CPU", "CopyKind", "DEVICE_TYPES", "Device", "DeviceError", "DeviceLike", "host_first"]

DeviceLike = Union["Device", str]


class DeviceError(WorkbenchError, ValueError):
    """A device string or index that the workbench does not accept."""


@functools.total_ordering
@dataclass(frozen=True, eq=False)
class Device:
    """A device: ``Device("cpu")`` or ``Device("cuda", 1)``.

    Rules:
    1. Two devices are equal when type and index are; devices order by (type, index),
       so ``cpu`` sorts before ``cuda:0`` before ``cuda:1``.
    2. A device also equals its canonical string (``Device("cuda", 0) == "cuda:0"``) and
       hashes like it, so a mapping keyed by ``Device`` answers ``mapping["cuda:0"]``:
       stages key everything by ``Device``, and a reader may still index with the text.
    3. ``str(device)`` is the canonical string, used only where data leaves the
       workbench (DataFrames, JSON, traces); ``repr(device)`` is that string quoted, so a
       mapping keyed by devices prints as it reads (``{'cuda:0': 4096}``), and
       ``eval(repr(device)) == device`` by rule 2.
    """

    type: str
    index: int = 0
    text: str = field(init=False, repr=False)  # the canonical string, made once

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
        object.__setattr__(self, "text", "cpu" if self.type == "cpu" else f"{self.type}:{self.index}")

    @classmethod
    def parse(cls, spec: DeviceLike) -> "Device":
        """Parse ``"cpu"``, ``"cuda"``, ``"CUDA:1"`` (or pass a Device through)."""
        if isinstance(spec, Device):
            return spec
        if not isinstance(spec, str):
            raise DeviceError(
                f"a device is a string such as 'cpu' or 'cuda:0', not {type(spec).__name__} {spec!r}"
            )
        known = _CANONICAL.get(spec)
        if known is not None:
            return known
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

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Device):
            return self.text == other.text
        if isinstance(other, str):
            return self.text == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Device):
            return NotImplemented
        return (self.type, self.index) < (other.type, other.index)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return repr(self.text)


def host_first(devices: Iterable[Device]) -> list[Device]:
    """``devices`` without repeats, the host first, then by type and index."""
    return sorted(set(devices), key=lambda d: (not d.is_host, d))


class CopyKind(str, Enum):
    """The direction of a copy: host→device, device→host, device→device.

    A ``str`` enum, so ``CopyKind.H2D == "h2d"``; ``str()`` gives the value and
    ``repr()`` the value quoted, as for ``Device``, so counts keyed by kind print as
    ``{'h2d': 2}``.
    """

    H2D = "h2d"
    D2H = "d2h"
    D2D = "d2d"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @classmethod
    def between(cls, src: Device, dst: Device) -> "CopyKind":
        """The kind of a copy from ``src`` to ``dst`` (two different devices)."""
        if src == dst:
            raise DeviceError(f"no copy is needed from {src} to itself")
        if src.is_host:
            return cls.H2D
        return cls.D2H if dst.is_host else cls.D2D

    @classmethod
    def parse(cls, value: Union["CopyKind", str]) -> "CopyKind":
        """``"h2d"`` → ``CopyKind.H2D``; anything else is an error listing the kinds."""
        try:
            return cls(value)
        except ValueError:
            raise DeviceError(
                f"unknown copy kind {value!r}; valid kinds are {', '.join(k.value for k in cls)}"
            ) from None


CPU = Device("cpu")

#: Devices already parsed from their canonical string (parsing is on hot paths).
_CANONICAL: dict[str, Device] = {"cpu": CPU}
for _index in range(DEVICE_TYPES["cuda"] + 1):
    _CANONICAL[f"cuda:{_index}"] = Device("cuda", _index)
