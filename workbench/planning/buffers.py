"""The input of memory planning: one buffer per planned tensor of one arena.

A :class:`Buffer` is an id, a size in bytes and an inclusive lifetime
``[start, end]`` over execution steps. Planning works on aligned sizes; this
module owns the alignment arithmetic and the checks every entry point shares.

Rules:
    1. ``size >= 0`` and ``start <= end``; all three are plain ints (bools are
       rejected: ``True`` as a size is almost surely a bug).
    2. Lifetimes are inclusive: buffers with ``a.end == b.start`` are live
       together at that step and must not share bytes.
    3. ``aligned_size(size, A) = ceil(size / A) * A``; a size-0 buffer takes
       no space.
    4. An alignment is a power of two from 1 to ``MAX_ALIGNMENT`` (4096, a page):
       a larger one only rounds every size up to waste.
    5. Ids are hashable and unique within one call.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from ..errors import WorkbenchError


class PlanningInputError(WorkbenchError, ValueError):
    """Input to planning that cannot be planned: it says what was wrong and what is valid."""


def is_int(value: object) -> bool:
    """An int that is not a bool (rule 1)."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Buffer:
    """One planned tensor: ``size`` bytes live over steps ``start..end`` (inclusive)."""

    id: Hashable
    size: int
    start: int
    end: int

    def __post_init__(self) -> None:
        try:
            hash(self.id)
        except TypeError:
            raise PlanningInputError(
                f"buffer id {self.id!r} is not hashable; use a str, int or tuple"
            ) from None
        for field_name in ("size", "start", "end"):
            value = getattr(self, field_name)
            if not is_int(value):
                raise PlanningInputError(
                    f"buffer {self.id!r}: {field_name} must be an int, "
                    f"got {type(value).__name__} {value!r}"
                )
        if self.size < 0:
            raise PlanningInputError(
                f"buffer {self.id!r}: size is {self.size} bytes; a size must be >= 0"
            )
        if self.end < self.start:
            raise PlanningInputError(
                f"buffer {self.id!r}: lifetime [{self.start}, {self.end}] ends before it "
                f"starts; a lifetime is an inclusive step range with start <= end"
            )

    @property
    def steps(self) -> int:
        """Number of execution steps the buffer is live (inclusive range)."""
        return self.end - self.start + 1


#: The largest alignment planning takes (rule 4).
MAX_ALIGNMENT = 4096


def check_alignment(alignment: object) -> int:
    """Return ``alignment`` if it is a power of two in 1..``MAX_ALIGNMENT`` (rule 4), else raise."""
    if (
        not isinstance(alignment, int)
        or not is_int(alignment)
        or not 0 < alignment <= MAX_ALIGNMENT
        or alignment & (alignment - 1)
    ):
        raise PlanningInputError(
            f"alignment must be a positive power of two up to {MAX_ALIGNMENT} (1, 2, 4, 8, 16, ...), got {alignment!r}"
        )
    return alignment


def aligned_size(size: int, alignment: int) -> int:
    """``size`` rounded up to a multiple of ``alignment`` (rule 3)."""
    return -(-size // alignment) * alignment


def check_buffers(buffers: Iterable[Buffer]) -> tuple[Buffer, ...]:
    """Return the buffers as a tuple after checking types and unique ids (rule 5)."""
    if isinstance(buffers, (str, bytes, Buffer)) or not isinstance(buffers, Iterable):
        raise PlanningInputError(
            f"expected an iterable of Buffer, got {type(buffers).__name__}"
        )
    result = tuple(buffers)
    seen: set[Hashable] = set()
    duplicates: list[Hashable] = []
    for position, buf in enumerate(result):
        if not isinstance(buf, Buffer):
            raise PlanningInputError(
                f"item {position} is a {type(buf).__name__}, not a Buffer; build inputs "
                f"with Buffer(id, size, start, end)"
            )
        if buf.id in seen:
            duplicates.append(buf.id)
        seen.add(buf.id)
    if duplicates:
        shown = ", ".join(repr(d) for d in duplicates[:10])
        more = f" (and {len(duplicates) - 10} more)" if len(duplicates) > 10 else ""
        raise PlanningInputError(
            f"duplicate buffer ids: {shown}{more}; every buffer of one arena needs its own id"
        )
    return result
