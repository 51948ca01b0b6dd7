"""Buffer rectangles as plain data: what BufferView draws for a memory plan.

Rules:
1. One ``BufferPanel`` per (device, arena) of the plan, host first, in the plan's device
   order; a device with an arena but no tensors still gets its (empty) panel.
2. One ``BufferRect`` per allocation: ``x0 = start``, ``x1 = end + 1`` (lifetimes are
   inclusive, so a tensor live at one step is one step wide), ``y0 = offset``,
   ``y1 = offset + size`` (the aligned size reserved, not the tensor's bytes).
3. A panel carries the plan's ``arena_bytes`` and ``lower_bound`` for its device; every
   rectangle lies inside ``[0, arena_bytes]`` for a valid plan.
4. ``live_steps`` is the step range in which any planned tensor is live (the x range
   worth drawing: the steps before the first allocation only bind weights and inputs).
5. ``resident_weights`` lists, per device, every weight (parameter, buffer, constant)
   resident there, in graph order, with its bytes: what is loaded once, outside the arenas.
6. ``byte_ticks`` gives round tick values (1, 2, 2.5, 5 × 10^k of one unit) labelled in
   one unit (B, KiB, MiB or GiB) per axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from ..devices import Device
from ._style import format_bytes
from ._upstream import DeviceGraph, node_nbytes


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
    def empty(self) -> bool:
        """No tensor is planned in this arena."""
        return not self.rects

    @property
    def title(self) -> str:
        if self.empty:
            return f"{self.device} arena {self.arena}: empty ({format_bytes(self.arena_bytes)}, no tensor planned here)"
        return (
            f"{self.device} arena {self.arena}: {format_bytes(self.arena_bytes)} "
            f"(lower bound {format_bytes(self.lower_bound)}, {len(self.rects)} tensors, "
            f"constants {format_bytes(self.constant_bytes)})"
        )


@dataclass(frozen=True)
class ResidentWeights:
    """Rule 5: the weights one device holds."""

    device: str
    weights: tuple[tuple[str, int], ...]  # (graph node name, bytes), graph order

    @property
    def total(self) -> int:
        return sum(b for _n, b in self.weights)


def buffer_panels(plan: Any) -> tuple[BufferPanel, ...]:
    """Rules 1-3."""
    by_panel: dict[tuple[str, int], list[BufferRect]] = {}
    for device in plan.arena_bytes:
        by_panel.setdefault((str(device), 0), [])
    for a in plan.allocations.values():
        rect = BufferRect(
            a.name, str(a.device), a.arena, a.start, a.end + 1, a.offset, a.offset + a.size, a.kind, a.nbytes, tuple(a.aliases)
        )
        by_panel.setdefault((str(a.device), a.arena), []).append(rect)
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


def live_steps(panels: tuple[BufferPanel, ...]) -> tuple[int, int]:
    """Rule 4: ``(first step any tensor is live, last live step + 1)``; the whole plan
    when nothing is planned."""
    rects = [r for p in panels for r in p.rects]
    if not rects:
        return 0, max((p.steps for p in panels), default=1) or 1
    return min(r.x0 for r in rects), max(r.x1 for r in rects)


def resident_weights(dg: DeviceGraph) -> tuple[ResidentWeights, ...]:
    """Rule 5, host first."""
    per_device: dict[str, list[tuple[str, int]]] = {}
    for node in dg.graph.nodes:
        if node.op != "placeholder" or node.name not in dg.residency:
            continue
        nbytes = node_nbytes(node, unbounded="hint")
        for device in dg.residency[node.name]:
            per_device.setdefault(str(device), []).append((node.name, nbytes))
    keys = sorted(per_device, key=lambda d: (not Device.parse(d).is_host, Device.parse(d)))
    return tuple(ResidentWeights(d, tuple(per_device[d])) for d in keys)


_UNITS = (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10), ("B", 1))


def byte_ticks(top: float, target: int = 4) -> list[tuple[int, str]]:
    """Rule 6: ticks from 0 to at least ``top`` bytes, about ``target`` of them."""
    top = max(float(top), 1.0)
    unit, scale = next((u, s) for u, s in _UNITS if top >= s * 1.5 or s == 1)
    span = top / scale
    raw = span / max(1, target)
    mag = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    if unit == "B":
        step = max(1, math.ceil(step))
    ticks = []
    k = 0
    while True:
        v = k * step
        ticks.append((int(round(v * scale)), f"{_number(v)} {unit}" if v else "0"))
        if v >= span - 1e-9:
            break
        k += 1
    return ticks


def _number(v: float) -> str:
    text = f"{v:.2f}".rstrip("0").rstrip(".")
    return text


def find_rect(panels: tuple[BufferPanel, ...], name: str) -> Optional[BufferRect]:
    """The rectangle of storage ``name`` (None when it is not planned)."""
    for p in panels:
        for r in p.rects:
            if r.name == name:
                return r
    return None
