"""Reading saved JSON with field-level checks: every saved type's ``from_json`` reads
through a ``JsonObject``, so a missing or mistyped field is an error that names it.

Rules:
1. A field is read by its expected kind (``text``, ``count``, ``flag``, ``number``,
   ``mapping``, ``items``); anything else is a ``JsonFieldError`` naming the field's full
   path (``device_graph.copies[3].nbytes``), what it should be, and what it is.
2. Booleans are never numbers and numbers are never booleans (JSON ``true`` is not 1).
3. Nothing is coerced: ``"12"`` is not a count.
4. A frozen dataclass saved as an object of its fields (``dataclass_fields_of``) is read
   back from exactly those fields: an unknown or missing one is an error that lists what
   is valid (a file that lacks a field would silently take another default).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Iterator, Mapping, Optional

from .devices import Device, DeviceError
from .errors import WorkbenchError

__all__ = ["JsonFieldError", "JsonObject", "dataclass_fields_of"]


class JsonFieldError(WorkbenchError, ValueError):
    """A saved field is missing or has the wrong type or range."""


def _describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


class JsonObject:
    """A JSON object (a ``dict``) and where it sits in its document, for error messages."""

    def __init__(self, data: Any, path: str = "") -> None:
        if not isinstance(data, Mapping):
            raise JsonFieldError(f"{path or 'the document'} must be an object, got {_describe(data)}")
        self.data = data
        self.path = path

    def _where(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def raw(self, key: str) -> Any:
        """The field as it is; missing is an error."""
        if key not in self.data:
            raise JsonFieldError(f"{self._where(key)} is missing")
        return self.data[key]

    def fail(self, key: str, expected: str) -> JsonFieldError:
        """The error for field ``key`` that is not ``expected``."""
        return JsonFieldError(f"{self._where(key)} must be {expected}, got {_describe(self.data.get(key))}")

    def text(self, key: str) -> str:
        value = self.raw(key)
        if not isinstance(value, str):
            raise self.fail(key, "a string")
        return value

    def optional_text(self, key: str) -> Optional[str]:
        value = self.raw(key)
        if value is not None and not isinstance(value, str):
            raise self.fail(key, "a string or null")
        return value

    def count(self, key: str, positive: bool = False) -> int:
        """A non-negative (or, with ``positive``, positive) integer."""
        value = self.raw(key)
        low = 1 if positive else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise self.fail(key, "a positive integer" if positive else "a non-negative integer")
        return value

    def flag(self, key: str) -> bool:
        value = self.raw(key)
        if not isinstance(value, bool):
            raise self.fail(key, "true or false")
        return value

    def mapping(self, key: str) -> "JsonObject":
        """A nested object."""
        return JsonObject(self.raw(key), self._where(key))

    def optional_mapping(self, key: str) -> Optional["JsonObject"]:
        return None if self.raw(key) is None else self.mapping(key)

    def items(self, key: str) -> list[Any]:
        """A list, as it is (check its elements with ``elements``/``texts``)."""
        value = self.raw(key)
        if not isinstance(value, list):
            raise self.fail(key, "a list")
        return value

    def elements(self, key: str) -> Iterator["JsonObject"]:
        """A list of objects, each with its path (``copies[3]``)."""
        for i, item in enumerate(self.items(key)):
            yield JsonObject(item, f"{self._where(key)}[{i}]")

    def texts(self, key: str) -> tuple[str, ...]:
        """A list of strings."""
        values = self.items(key)
        for i, v in enumerate(values):
            if not isinstance(v, str):
                raise JsonFieldError(f"{self._where(key)}[{i}] must be a string, got {_describe(v)}")
        return tuple(values)

    def text_map(self, key: str) -> dict[str, str]:
        """An object of string values."""
        obj = self.mapping(key)
        return {k: obj.text(k) for k in obj.data}

    def count_map(self, key: str) -> dict[str, int]:
        """An object of non-negative integers."""
        obj = self.mapping(key)
        return {k: obj.count(k) for k in obj.data}

    def device(self, key: str) -> Device:
        """A device string (``"cuda:0"``)."""
        try:
            return Device.parse(self.text(key))
        except DeviceError as exc:
            raise JsonFieldError(f"{self._where(key)}: {exc}") from None

    def devices(self, key: str) -> tuple[Device, ...]:
        """A list of device strings."""
        texts = self.texts(key)
        try:
            return tuple(Device.parse(t) for t in texts)
        except DeviceError as exc:
            raise JsonFieldError(f"{self._where(key)}: {exc}") from None

    def device_map(self, key: str) -> dict[str, Device]:
        """An object of device strings (``{"linear": "cuda:0"}``)."""
        obj = self.mapping(key)
        return {k: obj.device(k) for k in obj.data}

    def count_by_device(self, key: str) -> dict[Device, int]:
        """An object from device strings to non-negative integers (``{"cuda:0": 4096}``)."""
        counts = self.count_map(key)
        try:
            return {Device.parse(d): n for d, n in counts.items()}
        except DeviceError as exc:
            raise JsonFieldError(f"{self._where(key)}: {exc}") from None

    def keys(self) -> list[str]:
        return list(self.data)


def dataclass_fields_of(cls: Any, values: Any, what: str, error: type[Exception], *, optional: Iterable[str] = (),
                        ignored: Iterable[str] = ()) -> dict[str, Any]:
    """Rule 4: ``values`` (a JSON object) as the keyword arguments of dataclass ``cls``:
    exactly its fields — every one not ``optional`` present, none unknown; ``ignored`` keys
    (retired fields) are dropped. Anything else is ``error`` naming what is unknown, what is
    missing and what is valid; the dataclass checks the values themselves."""
    if not isinstance(values, Mapping):
        raise error(f"{what} is a JSON object of its fields, got {_describe(values)}")
    dropped = frozenset(ignored)
    kept = {k: v for k, v in values.items() if k not in dropped}
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(map(str, set(kept) - known))
    missing = sorted(known - set(kept) - set(optional))
    if unknown or missing:
        raise error(f"{what}: fields do not match: " + (f"unknown {unknown}; " if unknown else "")
                    + (f"missing {missing}; " if missing else "") + f"valid: {', '.join(sorted(known))}")  # fmt: skip
    return kept
