"""Side nodes (layout rule 5): collapsed by layers, a copy drawn on its own that serves a
collapsed layer (and a weight only such copies of one layer read) is placed after dot,
not by it: on that layer's row, at the layer's y, right of everything else in that row
(not of the whole drawing: a wide row elsewhere leaves the others narrow), each weight
before the copies that read it, with routes for its edges.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Mapping, Sequence

from ._node_content import GROUP_KINDS, NodeContent
from ._positions import TIP_PT, Placed, rounded

_SIDE_GAP_PT = 48.0  # between the rest of the drawing and the side nodes
_SIDE_SEP_PT = 16.0  # between two side nodes of one chain
_CHAIN_SEP_PT = 36.0  # between two chains of one row
_ROW_MARGIN_PT = 6.0  # what is nearer than this above or below a row counts as in it
_LIFT_PT = (12.0, 28.0)  # how far an arc between two nodes of one row bows out, nearest to farthest


def side_rows(drawn: Mapping[str, NodeContent], edges: Sequence[tuple[str, str]]) -> dict[str, str]:
    """The side nodes and the drawn layer whose row each sits on: every copy drawn on its
    own that serves a collapsed layer drawn as one node, and every weight read only by
    the side copies of one layer."""
    layers = {lid for lid, c in drawn.items() if c.kind == "layer"}
    row = {lid: c.serves for lid, c in drawn.items() if c.kind == "copy" and c.serves in layers}
    users: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        users[a].add(b)
    for lid, c in drawn.items():
        rows = {row.get(u) for u in users[lid]}
        if c.kind == "constant" and len(rows) == 1 and None not in rows:
            row[lid] = rows.pop()  # type: ignore[assignment]  # None was ruled out
    return {lid: layer for lid, layer in row.items() if layer is not None}


def _chains(ids: Sequence[str], edges: Sequence[tuple[str, str]]) -> list[list[str]]:
    """One row's side nodes in drawing order: each weight followed by the copies that read
    it (a prefetch before the reuse copy it feeds), chains in graph order."""
    on_row = set(ids)
    preds: dict[str, list[str]] = defaultdict(list)
    for a, b in edges:
        if a in on_row and b in on_row:
            preds[b].append(a)
    root: dict[str, str] = {}
    for lid in ids:  # drawn in graph order (weights first): a node's inputs are rooted before it
        roots = [root[p] for p in preds[lid] if p in root]
        root[lid] = min(roots, key=ids.index) if roots else lid
    chains: dict[str, list[str]] = {}
    for lid in ids:
        chains.setdefault(root[lid], []).append(lid)
    return list(chains.values())


def place_side(
    placed: Placed, drawn: Mapping[str, NodeContent], edges: Sequence[tuple[str, str]], side: Mapping[str, str]
) -> Placed:
    """Each side node on its layer's row (the layer's y), in chains to the right of
    everything else, and routes for every edge that touches one."""
    centres = dict(placed.centres)
    right = placed.extent[0]
    by_layer: dict[str, list[str]] = defaultdict(list)
    for lid in drawn:
        if lid in side:
            by_layer[side[lid]].append(lid)
    order: dict[str, int] = {}  # place in its row, from the left
    for layer, ids in by_layer.items():
        y = centres[layer][1]
        cursor = _row_start(placed, drawn, side, y, max(drawn[lid].h for lid in ids)) + _SIDE_GAP_PT
        first = len(order)
        for chain in _chains(ids, edges):
            for lid in chain:
                w = drawn[lid].w
                centres[lid] = (round(cursor + w / 2, 1), y)
                order[lid] = len(order) - first
                cursor += w + _SIDE_SEP_PT
            right = max(right, cursor - _SIDE_SEP_PT)
            cursor += _CHAIN_SEP_PT - _SIDE_SEP_PT
    rank = dict(placed.rank)
    rank.update({lid: placed.rank[layer] for lid, layer in side.items()})
    routes = dict(placed.routes)
    for a, b in edges:
        if a in side or b in side:
            routes[(a, b)] = _route(drawn[a], centres[a], drawn[b], centres[b], order)
    extent = (round(right + 10.0, 1), placed.extent[1])
    return Placed(centres, rank, routes, placed.clusters, extent, placed.engine, placed.note)


def _row_start(placed: Placed, drawn: Mapping[str, NodeContent], side: Mapping[str, str], y: float, h: float) -> float:
    """The right edge of what the layout placed in the band of height ``h`` around ``y``
    (nodes and cluster boxes): a row's side nodes start after it, not after the widest
    row of the whole drawing."""
    half = h / 2 + _ROW_MARGIN_PT
    edges = [
        cx + drawn[lid].w / 2
        for lid, (cx, cy) in placed.centres.items()
        if lid not in side and lid in drawn and abs(cy - y) < drawn[lid].h / 2 + half
    ]
    edges += [x1 for x0, y0, x1, y1 in placed.clusters.values() if y0 < y + half and y1 > y - half]
    return max(edges, default=0.0)


def _anchor_x(c: NodeContent, x: float, toward: float) -> float:
    """Where an edge leaves or enters a node's top or bottom: a wide group near its end
    facing the other node, anything else at its centre."""
    if c.kind not in GROUP_KINDS:
        return x
    return x + (1 if toward > x else -1) * (c.w / 2 - 14.0)


def _route(
    a: NodeContent, pa: tuple[float, float], b: NodeContent, pb: tuple[float, float], order: Mapping[str, int]
) -> tuple[tuple[float, float], ...]:
    """A route in dot's form (one cubic Bézier segment, then the arrow tip at the head's
    border): straight between neighbours of one chain, an arc over the row from left to
    right and under it from right to left, an S from one row down (or up) to another."""
    (xa, ya), (xb, yb) = pa, pb
    if abs(ya - yb) < 0.5:
        sign = 1.0 if xb > xa else -1.0
        gap = abs(xb - xa) - (a.w + b.w) / 2
        if gap <= _SIDE_SEP_PT + 0.5 and a.kind not in GROUP_KINDS and b.kind not in GROUP_KINDS:  # neighbours: straight
            start, tip = (xa + sign * a.w / 2, ya), (xb - sign * b.w / 2, yb)
            end = (tip[0] - sign * TIP_PT, yb)
            third = (end[0] - start[0]) / 3
            return rounded((start, (start[0] + third, ya), (start[0] + 2 * third, ya), end, tip))
        out = -1.0 if sign > 0 else 1.0  # over the row going right, under it going left
        far = max(order.get(a.id, 0), order.get(b.id, 0))
        lift = min(_LIFT_PT[0] + 4.0 * far, _LIFT_PT[1])
        sx, ex = _anchor_x(a, xa, xb), _anchor_x(b, xb, xa)
        start, tip = (sx, ya + out * a.h / 2), (ex, yb + out * b.h / 2)
        end = (ex, tip[1] + out * TIP_PT)
        bow = min(start[1], tip[1]) - lift if out < 0 else max(start[1], tip[1]) + lift
        return rounded((start, (sx, bow), (ex, bow), end, tip))
    down = 1.0 if yb > ya else -1.0
    sx, ex = _anchor_x(a, xa, xb), _anchor_x(b, xb, xa)
    start, tip = (sx, ya + down * a.h / 2), (ex, yb - down * b.h / 2)
    end = (ex, tip[1] - down * TIP_PT)
    half = (end[1] - start[1]) / 2
    return rounded((start, (sx, start[1] + half), (ex, end[1] - half), end, tip))
