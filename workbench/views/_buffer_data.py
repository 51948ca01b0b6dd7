"""Buffer rectangles as plain data: what BufferView draws for a memory plan.

Rules:
1. One ``BufferPanel`` per (device, arena) of the plan, host first, in the plan's device
   order; a device with an arena but no tensors still gets its (empty) panel.
2. One ``BufferRect`` per allocation: ``x0 = start``, ``x1 = end + 1`` (lifetimes are
   inclusive, so a tensor live at one step is one step wide), ``y0 = offset``,
   ``y1 = offset + size`` (the aligned size reserved, not the tensor's bytes).
3. A panel carries the plan's ``arena_bytes`` and ``lower_bound`` for its device; every
   rectangle lies inside ``[0, arena_bytes]`` for a valid plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from ..devices import Device
from ._style import format_bytes


@dataclass(frozen=True)
class BufferRect:
    name: str  # the storage-owning value
    device: str
    arena: int
    x0: int  # first step live
    x1: int  # last step live + 1
    y0: int  # offset
    y1: int  # offset + aligned size
    kind: str  # "input" | "output" | "activation" | "copy"
    nbytes: int  # tensor bytes (<= y1 - y0)
    aliases: tuple[str, ...]


@dataclass(frozen=True)
class BufferPanel:
    device: str
    arena: int
    arena_bytes: int
    lower_bound: int
    constant_bytes: int
    steps: int  # x extent: number of execution steps
    rects: tuple[BufferRect, ...]

    @property
    def title(self) -> str:
        return (
            f"{self.device} arena {self.arena}: {format_bytes(self.arena_bytes)} "
            f"(lower bound {format_bytes(self.lower_bound)}, {len(self.rects)} tensors, "
            f"constants {format_bytes(self.constant_bytes)})"
        )


def buffer_panels(plan: Any) -> tuple[BufferPanel, ...]:
    """Rules 1-3."""
    by_panel: dict[tuple[str, int], list[BufferRect]] = {}
    for device in plan.arena_bytes:
        by_panel.setdefault((str(device), 0), [])
    for a in plan.allocations.values():
        rect = BufferRect(
            a.name, a.device, a.arena, a.start, a.end + 1, a.offset, a.offset + a.size, a.kind, a.nbytes, tuple(a.aliases)
        )
        by_panel.setdefault((a.device, a.arena), []).append(rect)
    keys = sorted(by_panel, key=lambda k: (not Device.parse(k[0]).is_host, Device.parse(k[0]), k[1]))
    steps = len(plan.steps)
    return tuple(
        BufferPanel(
            device=device,
            arena=arena,
            arena_bytes=int(plan.arena_bytes.get(device, 0)),
            lower_bound=int(plan.lower_bound.get(device, 0)),
            constant_bytes=int(plan.constant_bytes.get(device, 0)),
            steps=steps,
            rects=tuple(by_panel[(device, arena)]),
        )
        for device, arena in keys
    )


def find_rect(panels: tuple[BufferPanel, ...], name: str) -> Optional[BufferRect]:
    """The rectangle of storage ``name`` (None when it is not planned)."""
    for p in panels:
        for r in p.rects:
            if r.name == name:
                return r
    return None
