"""The copy table's records: what one copy node moves, from where to where, and why.

A ``CopyRecord`` is the fact a copy node carries in its node record (``node_facts``);
``DeviceGraph.copies`` lists them in issue order. ``CopyRole`` names the copy variants
the workbench ships (``copy_variants`` holds their behaviour).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Optional

from .copy_variants import CopyVariantError, copy_variant
from .devices import CopyKind, Device, DeviceError
from .index_draws import Routing
from .json_fields import JsonFieldError, JsonObject

__all__ = ["CopyRecord", "CopyRole"]


class CopyRole(str, Enum):
    """The roles of the copy variants the workbench ships (``copy_variants``); a record's
    role may also be that of a variant registered elsewhere.

    ``plain`` moves a whole value; ``gather`` moves the rows of a streamed weight that an
    index selects, one per id; ``prefetch`` moves the rows a hint predicts, ahead of time;
    ``reuse`` moves the selected rows, taking those its prefetch holds from the device;
    the counted copy (``moe.streaming``) moves the rows its index lists, padded to a static
    length, of which its ``count`` (a device value) says how many are real: only those
    cross the link (the padding rows are zeros).
    """

    PLAIN = "plain"
    GATHER = "gather"
    PREFETCH = "prefetch"
    REUSE = "reuse"
    COUNTED = "routed"  # the name plan files store
    ROUTED = "routed"  # COUNTED under its earlier name (the same member)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)


@dataclass(frozen=True)
class CopyRecord:
    """One copy node: what it moves, from where to where, and why.

    The copy table: later stages (memory planning, the executor, the views) read a copy's
    facts from its record, never from the positions of its graph node's arguments.
    """

    name: str  # the copy node's name in DeviceGraph.graph
    kind: CopyKind  # h2d | d2h | d2d
    value: str  # name of the node whose value (or rows, for gathers) is copied
    src: Device  # where the value lives
    dst: Device  # where the consumers need it
    nbytes: int  # bytes moved per call: an upper bound for dynamic sizes (example size if unbounded), reuse and counted copies
    consumers: tuple[str, ...]  # nodes reading the copy ("output" for a returned value)
    reason: str  # one sentence: who needs it where, and where it lives
    role: str = CopyRole.PLAIN  # the role of its copy variant (``copy_variants``): plain, gather, prefetch, reuse …
    index: Optional[str] = None  # copies of rows: the node holding the row ids
    prefetch: Optional[str] = None  # reuse: the prefetch copy whose rows it may take
    prefetch_index: Optional[str] = None  # reuse: the row ids that prefetch holds
    count: Optional[str] = None  # counted copies: the node holding how many of the index's rows are real
    routing: Optional[Routing] = None  # counted copies: how the index was drawn (T draws of k of E rows), if known
    slots: int = 0  # counted copies: rows of its result (U: the real ones, then padding); nbytes covers them all

    @property
    def is_gather(self) -> bool:
        """True for copies that move rows selected by an index (every role but ``plain``)."""
        return self.role != CopyRole.PLAIN

    def expected_nbytes(self) -> float:
        """Bytes a counted copy is expected to move per call when its index is drawn
        uniformly (the expected distinct rows of its ``routing``, at most ``slots``, times
        one row's bytes); ``nbytes`` for every other copy, and for one whose draws are unknown."""
        if self.role != CopyRole.COUNTED or self.routing is None or not self.slots:
            return float(self.nbytes)
        return min(float(self.slots), self.routing.expected_distinct()) * (self.nbytes / self.slots)

    def inputs(self) -> tuple[str, ...]:
        """The nodes this copy reads: the value, then its index, prefetch and count inputs."""
        extra = (self.value, self.index, self.prefetch, self.prefetch_index, self.count)
        return tuple(n for n in extra if n is not None)

    def to_json(self) -> dict[str, Any]:
        """Plain JSON-able data (devices and kinds as strings)."""
        return {
            "name": self.name,
            "kind": str(self.kind),
            "value": self.value,
            "src": str(self.src),
            "dst": str(self.dst),
            "nbytes": self.nbytes,
            "consumers": list(self.consumers),
            "reason": self.reason,
            "role": str(self.role),
            "index": self.index,
            "prefetch": self.prefetch,
            "prefetch_index": self.prefetch_index,
            "count": self.count,
            "routing": self.routing.to_json() if self.routing is not None else None,
            "slots": self.slots,
        }

    @classmethod
    def from_json(cls, data: Any, path: str = "copy") -> "CopyRecord":
        """The record ``to_json`` wrote; a missing or mistyped field is a ``JsonFieldError``
        naming it. The counted-copy fields (``count``, ``routing``, ``slots``) may be absent:
        records written before counted copies existed have none."""
        obj = JsonObject(data, path)
        try:
            kind, role = CopyKind.parse(obj.text("kind")), _role(obj.text("role"))
            routing = obj.data.get("routing")
            drawn = Routing.from_json(routing, f"{path}.routing") if routing is not None else None
        except (ValueError, DeviceError, CopyVariantError) as exc:
            raise JsonFieldError(f"{path}: {exc}") from None
        has = obj.data.__contains__
        return cls(
            name=obj.text("name"),
            kind=kind,
            value=obj.text("value"),
            src=obj.device("src"),
            dst=obj.device("dst"),
            nbytes=obj.count("nbytes"),
            consumers=obj.texts("consumers"),
            reason=obj.text("reason"),
            role=role,
            index=obj.optional_text("index"),
            prefetch=obj.optional_text("prefetch"),
            prefetch_index=obj.optional_text("prefetch_index"),
            count=obj.optional_text("count") if has("count") else None,
            routing=drawn,
            slots=obj.count("slots") if has("slots") else 0,
        )


def _role(text: str) -> str:
    """A record's role as read from a file: a ``CopyRole`` for the built-in variants, else
    the role of a registered variant (an unknown role is a ``CopyVariantError``)."""
    try:
        return CopyRole(text)
    except ValueError:
        pass
    try:
        return copy_variant(text).role
    except CopyVariantError as exc:
        raise CopyVariantError(f"{text!r} is not a valid CopyRole; {exc}") from None
