"""The fallback layout, when ``dot`` is not there (not installed, failed, or the graph is
too big for it): rows by longest path from the sources, constants one row above their
first user, each row ordered by the mean x of its nodes' predecessors (layout rule 5).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping

import torch.fx

from ._node_content import NodeContent
from ._positions import Cluster, Placed

_ROW_PT = 58.0  # row spacing of the fallback layout
_COLUMN_PT = 170.0


def rows_layout(
    drawn: Mapping[str, NodeContent],
    edges: list[tuple[str, str]],
    clusters: Mapping[str, Cluster],
    members: Mapping[str, list[torch.fx.Node]],
    constants: set[str],
    note: str,
) -> Placed:
    order = list(drawn)
    layers = _rows(order, edges, members, constants)
    xs = _columns(order, edges, layers)
    x_min = min(xs.values(), default=0.0)
    width = max((c.w for c in drawn.values()), default=0.0)
    centres = {lid: (round((xs[lid] - x_min) * _COLUMN_PT + width / 2 + 10, 1), round(layers[lid] * _ROW_PT + 40, 1)) for lid in order}
    boxes = {}
    for name, (_kind, _label, ms, _device) in clusters.items():
        inside = [centres[m] for m in ms]
        boxes[name] = (
            min(x for x, _ in inside) - _COLUMN_PT / 2 + 10,
            min(y for _, y in inside) - _ROW_PT / 2,
            max(x for x, _ in inside) + _COLUMN_PT / 2 - 10,
            max(y for _, y in inside) + _ROW_PT / 2,
        )
    extent = (
        round(max((x for x, _ in centres.values()), default=0.0) + width / 2 + 20, 1),
        round(max((y for _, y in centres.values()), default=0.0) + _ROW_PT, 1),
    )
    return Placed(centres, layers, {}, boxes, extent, "rows", note)


def _rows(
    order: list[str], edges: list[tuple[str, str]], members: Mapping[str, list], constants: set[str]
) -> dict[str, int]:
    """Longest paths from the sources over forward edges; constants one row above their
    first user."""
    position = {lid: i for i, lid in enumerate(order)}
    preds: dict[str, list[str]] = defaultdict(list)
    succs: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if position[a] < position[b]:
            preds[b].append(a)
            succs[a].append(b)
    layer: dict[str, int] = {}
    for lid in order:
        layer[lid] = max((layer[p] + 1 for p in preds[lid]), default=0)
    for lid in reversed(order):
        ms = members[lid]
        if len(ms) == 1 and ms[0].name in constants and succs[lid]:
            layer[lid] = max(0, min(layer[s] for s in succs[lid]) - 1)
    return layer


def _columns(order: list[str], edges: list[tuple[str, str]], layers: Mapping[str, int]) -> dict[str, float]:
    """Within a row, nodes ordered by the mean x of their predecessors, one unit apart."""
    preds: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if layers[a] < layers[b]:
            preds[b].append(a)
    rows: dict[int, list[str]] = defaultdict(list)
    for lid in order:
        rows[layers[lid]].append(lid)
    xs: dict[str, float] = {}
    rank = {lid: i for i, lid in enumerate(order)}
    for row in sorted(rows):
        ids = rows[row]

        def key(lid: str) -> tuple[float, int]:
            placed = [xs[p] for p in preds[lid] if p in xs]
            return (sum(placed) / len(placed) if placed else 0.0, rank[lid])

        ids.sort(key=key)
        offset = (len(ids) - 1) / 2.0
        for i, lid in enumerate(ids):
            xs[lid] = i - offset
    return xs
