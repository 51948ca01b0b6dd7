"""What a drawn node shows and how big it is, before it has a position: its label, text
lines, colour key, devices, copy facts and badges, and its size in points (sized for what
the front end and the static figure draw, so dot packs exactly that).

Copy facts (kind, ends, bytes) are read from the DeviceGraph's copy records, never from
the copy ops' arguments (layout rule 8).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence

import torch.fx

from ..devices import Device
from ._collapse import layer_path
from ._style import copies_of_kind, copy_label, format_bytes
from ._upstream import CopyRecord, DeviceGraph, node_nbytes

NODE_KINDS = ("input", "constant", "op", "copy", "output", "delegate", "layer")
GROUP_KINDS = ("delegate", "layer")

# drawn sizes (points): what the front end and the static figure draw, so dot packs them
FONT_PT = 10.0
CHAR_PT = 6.1  # average advance of a 10 pt sans-serif character
BADGE_GAP_PT = 4.0
LINE_PT = 13.0
_PAD_PT = 10.0


@dataclass(frozen=True)
class CopyBadge:
    """Copies of one kind inside a collapsed group."""

    kind: str  # "h2d" | "d2h" | "d2d"
    count: int
    nbytes: int  # bytes moved per call by these copies

    @property
    def text(self) -> str:
        return copies_of_kind(self.kind, self.count, self.nbytes)



def text_width(text: str, char_pt: float = CHAR_PT) -> float:
    """Points a line of text takes at the views' font size (an estimate that errs wide)."""
    return len(text) * char_pt


def _size(lines: Sequence[str], badges: Sequence[CopyBadge], kind: str) -> tuple[float, float]:
    title_pt = CHAR_PT * (1.12 if kind in GROUP_KINDS else 1.0)
    widths = [text_width(lines[0], title_pt)] + [text_width(t) for t in lines[1:]]
    if badges:
        widths.append(sum(text_width(b.text, CHAR_PT * 0.9) + 10 + BADGE_GAP_PT for b in badges))
    w = max(widths, default=0.0) + 2 * _PAD_PT
    h = LINE_PT * len(lines) + 10
    if kind in GROUP_KINDS:
        h += 8 + (18 if badges else 0)  # device bar, badge row
        w = max(w, 120.0)
    if kind == "constant":
        w += 12  # an ellipse needs room at its ends
    return round(max(w, 44.0), 1), round(h, 1)


@dataclass(frozen=True)
class NodeContent:
    """A layout node before it has a position."""

    id: str
    label: str
    kind: str
    colour_key: str
    device: Optional[str]
    devices: tuple[str, ...]
    members: tuple[str, ...]
    nbytes: int
    copy_kind: Optional[str]
    copies: int
    device_counts: tuple[tuple[str, int], ...]
    lines: tuple[str, ...]
    badges: tuple[CopyBadge, ...]
    w: float
    h: float
    serves: Optional[str] = None  # a copy: the layer it serves (its row, rule 5)


def _content(
    lid: str, label: str, kind: str, key: str, device: Optional[str], devices: tuple[str, ...], members: tuple[str, ...],
    nbytes: int, copy_kind: Optional[str] = None, copies: int = 0, counts: tuple[tuple[str, int], ...] = (),
    lines: Sequence[str] = (), badges: tuple[CopyBadge, ...] = (), serves: Optional[str] = None,
) -> NodeContent:
    drawn = tuple(lines) or (label,)
    w, h = _size(drawn, badges, kind)
    return NodeContent(lid, label, kind, key, device, devices, members, nbytes, copy_kind, copies, counts, drawn, badges, w, h, serves)


def relabelled(c: NodeContent, lines: Sequence[str]) -> NodeContent:
    """``c`` drawing ``lines`` instead of its own, resized for them (its label unchanged)."""
    w, h = _size(tuple(lines), c.badges, c.kind)
    return replace(c, lines=tuple(lines), w=w, h=h)


def node_content(
    dg: DeviceGraph, lid: str, members: list[torch.fx.Node], group_kind: Optional[str], records: Mapping[str, CopyRecord]
) -> NodeContent:
    names = tuple(m.name for m in members)
    copies = [records[m.name] for m in members if m.name in records]
    copy_bytes = sum(c.nbytes for c in copies)
    devs: Counter = Counter()
    for m in members:
        if m.op == "call_function" or (m.op == "placeholder" and m.name not in dg.residency):
            device = dg.node_device.get(m.name)
            if device is not None:
                devs[str(device)] += 1
    devices = tuple(sorted(devs, key=Device.parse))
    common = max(devs, key=lambda d: (devs[d], -devices.index(d))) if devs else None
    if group_kind is not None:
        kind = "delegate" if group_kind == "delegates" else "layer"
        what = f"{len(members)} ops" if kind == "delegate" else f"{len(members)} nodes"
        label = f"{lid} · {common} · {what}" if kind == "delegate" else f"{lid} · {what}"
        if copies:
            label += f" · {len(copies)} {'copy' if len(copies) == 1 else 'copies'} {format_bytes(copy_bytes)}"
        key = f"device:{common}" if common else "constant"
        counts = tuple((d, devs[d]) for d in devices)
        share = ", ".join(f"{n} on {d}" for d, n in counts)
        badges = _badges(copies)
        return _content(
            lid, label, kind, key, common, devices, names, copy_bytes, None, len(copies), counts,
            (lid, f"{what}: ops {share}" if share else what), badges,
        )
    node = members[0]
    record = records.get(node.name)
    if record is not None:
        kind = str(record.kind)
        label = copy_label(kind, record.nbytes)
        role = str(record.role)
        layer = served_layer(dg, node, records)
        return _content(
            lid, label, "copy", f"copy:{kind}", common, devices, names, record.nbytes, kind, 1,
            lines=(f"{label} → {layer}" if layer else label, node.name if role == "plain" else f"{role} · {node.name}"),
            serves=layer,
        )
    if node.op == "output":
        return _content(lid, "output", "output", "constant", None, (), names, 0)
    if node.op == "placeholder" and node.name in dg.residency:
        held = tuple(sorted((str(d) for d in dg.residency[node.name]), key=Device.parse))
        first = next((d for d in held if d != "cpu"), held[0] if held else None)
        return _content(lid, node.name, "constant", "constant", first, held, names, node_nbytes(node, unbounded="hint"))
    kind = "input" if node.op == "placeholder" else "op"
    key = f"device:{common}" if common else "constant"
    return _content(lid, node.name, kind, key, common, devices, names, node_nbytes(node, unbounded="hint"))


def served_layer(dg: DeviceGraph, node: torch.fx.Node, records: Mapping[str, CopyRecord]) -> Optional[str]:
    """The layer a copy serves: that of the ops reading it (through a copy reading it: a
    prefetch serves its reuse copy's layer), else that of the weight it copies."""
    for user in node.users:
        path = layer_path(user) if user.name not in records else served_layer(dg, user, records)
        if path is not None:
            return path
    weight = dg.program.constants.get(records[node.name].value) if node.name in records else None
    match = re.match(r"^(.*?\.\d+)(\.|$)", weight) if isinstance(weight, str) else None
    return match.group(1) if match else None


def _badges(copies: Sequence[CopyRecord]) -> tuple[CopyBadge, ...]:
    count: Counter = Counter()
    moved: Counter = Counter()
    for c in copies:
        count[str(c.kind)] += 1
        moved[str(c.kind)] += c.nbytes
    return tuple(CopyBadge(k, count[k], moved[k]) for k in ("h2d", "d2h", "d2d") if count[k])
