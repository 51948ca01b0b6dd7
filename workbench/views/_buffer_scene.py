"""BufferView's scene: a plan's panels turned into what the front end and the static
figure draw (plain, JSON-able data).

Rules:
1. A non-empty panel's height is proportional to its arena bytes (at least
   ``MIN_PANEL_PX``), so a large arena reads as large; an empty arena is one line.
2. The x range is the live steps (``live_steps``), shared by every panel.
3. Y ticks are round numbers in one unit (``byte_ticks``); the top of the axis leaves room
   above the higher of the arena line and the lower bound.
4. Each rectangle carries its storage's name, a title and the allocation rows (device,
   arena, offset, size, bytes, lifetime with the first and last step's names, kind,
   aliases) shown on hover and in the side panel.
5. ``storage_of`` maps each planned value that shares another's storage to that storage,
   so selecting any value finds its rectangle.
6. ``resident`` lists each device's resident weights (name, bytes), drawn as one bar.
"""

from __future__ import annotations

from typing import Any

from ._buffer_data import BufferPanel, BufferRect, byte_ticks, live_steps, resident_weights
from ._style import BUFFER_COLOURS, format_bytes
from ._upstream import DeviceGraph

MIN_PANEL_PX = 70
MAX_PANEL_PX = 300


def allocation_rows(a: Any, steps: Any) -> list[tuple[str, str]]:
    """Rule 4: an allocation's rows."""
    rows = [
        ("device", str(a.device)),
        ("arena", str(a.arena)),
        ("offset", f"{a.offset} (0x{a.offset:x})"),
        ("size", f"{a.size} ({format_bytes(a.size)}, aligned)"),
        ("nbytes", f"{a.nbytes} ({format_bytes(a.nbytes)})"),
        ("lifetime", f"steps {a.start}..{a.end}: {steps[a.start]} … {steps[a.end]}"),
        ("kind", a.kind),
    ]
    if a.aliases:
        rows.append(("aliases", ", ".join(a.aliases)))
    return rows


def buffer_scene(panels: tuple[BufferPanel, ...], plan: Any, dg: DeviceGraph, title: str = "") -> dict:
    """Rules 1-6."""
    lo, hi = live_steps(panels)
    biggest = max((p.arena_bytes for p in panels if not p.empty), default=1) or 1
    out_panels = []
    for i, p in enumerate(panels):
        entry: dict[str, Any] = {
            "id": i,
            "device": p.device,
            "arena": p.arena,
            "title": p.title,
            "empty": p.empty,
            "arena_bytes": p.arena_bytes,
            "lower_bound": p.lower_bound,
        }
        if not p.empty:
            top = max(p.arena_bytes, p.lower_bound, max(r.y1 for r in p.rects), 1)
            ticks = byte_ticks(top)
            entry.update(
                h=int(max(MIN_PANEL_PX, MAX_PANEL_PX * p.arena_bytes / biggest)),
                ymax=max(ticks[-1][0], int(top * 1.08)),
                yticks=[[v, label] for v, label in ticks],
                rects=[_rect(r, plan) for r in p.rects],
            )
        out_panels.append(entry)
    resident = [
        {
            "device": w.device,
            "total": w.total,
            "label": f"{format_bytes(w.total)} in {len(w.weights)} weights",
            "segments": [[name, nbytes] for name, nbytes in w.weights],
        }
        for w in resident_weights(dg)
        if w.weights
    ]
    kinds = sorted({r.kind for p in panels for r in p.rects})
    legend: list[dict[str, Any]] = [{"label": k, "fill": BUFFER_COLOURS[k], "stroke": BUFFER_COLOURS[k]} for k in kinds]
    legend += [
        {"label": "arena size", "fill": "transparent", "stroke": "#222222", "shape": "line"},
        {"label": "lower bound", "fill": "transparent", "stroke": "#D62728", "shape": "line", "dashed": True},
    ]
    if resident:
        legend.append({"label": "resident weights", "fill": "#BDBDBD", "stroke": "#A5A5A5"})
    return {
        "title": title,
        "x": {"lo": lo, "hi": hi},
        "panels": out_panels,
        "resident": resident,
        "storage_of": {v: s for v, s in plan.storage_of.items() if v != s},
        "legend": legend,
    }


def _rect(r: BufferRect, plan: Any) -> dict:
    a = plan.allocations[r.name]
    return {
        "id": r.name,
        "x0": r.x0,
        "x1": r.x1,
        "y0": r.y0,
        "y1": r.y1,
        "fill": BUFFER_COLOURS[r.kind],
        "label": r.name,
        "title": f"{r.name} · {r.device} · {format_bytes(r.nbytes)}",
        "rows": [[k, v] for k, v in allocation_rows(a, plan.steps)],
    }
