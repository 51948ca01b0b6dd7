"""The output bus (layout rule 5): collapsed by layers, the edges from the layers into the
output (each layer's cache updates, long edges that cost dot most of its time) are left
out of dot's layout and routed along one line down the drawing's left side.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from ._node_content import NodeContent
from ._positions import TIP_PT, Placed, rounded


_BUS_PT = 24.0  # from the leftmost node to the bus line
_CORNER_PT = 8.0  # radius of a bus route's corners


def bus_edges(drawn: Mapping[str, NodeContent], edges: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
    """Edges from collapsed layers into the output (each layer's cache updates), but the
    last layer's: they are routed along one line down the drawing's left side instead of
    by dot, each past every rank below its layer."""
    into = [(a, b) for a, b in edges if drawn[b].kind == "output" and drawn[a].kind == "layer"]
    return set(into[:-1])


def _shifted(placed: Placed, dx: float) -> Placed:
    """``placed`` moved ``dx`` points to the right."""
    return Placed(
        {k: (round(x + dx, 2), y) for k, (x, y) in placed.centres.items()},
        placed.rank,
        {k: tuple((round(x + dx, 2), y) for x, y in pts) for k, pts in placed.routes.items()},
        {k: (x0 + dx, y0, x1 + dx, y1) for k, (x0, y0, x1, y1) in placed.clusters.items()},
        (round(placed.extent[0] + dx, 1), placed.extent[1]),
        placed.engine,
        placed.note,
    )


def route_bus(placed: Placed, drawn: Mapping[str, NodeContent], bus: Iterable[tuple[str, str]]) -> Placed:
    """Each bus edge: from its layer's bottom left, along the gap below the layer's row to
    the bus line left of every node, down it, and across to the output's left side."""
    lefts = [x - drawn[k].w / 2 for k, (x, _y) in placed.centres.items()]
    lefts += [x0 for x0, _y0, _x1, _y1 in placed.clusters.values()]
    shift = max(0.0, _BUS_PT + _CORNER_PT + 4.0 - min(lefts, default=0.0))
    if shift:
        placed = _shifted(placed, shift)
        lefts = [v + shift for v in lefts]
    lane = min(lefts) - _BUS_PT
    r = _CORNER_PT
    routes = dict(placed.routes)
    for a, b in bus:
        (xa, ya), (xb, yb) = placed.centres[a], placed.centres[b]
        ca, cb = drawn[a], drawn[b]
        ax, top = xa - ca.w / 2 + 14.0, ya + ca.h / 2
        gap = top + 10.0
        tip = (xb - cb.w / 2, yb)
        end = (tip[0] - TIP_PT, yb)
        points = [
            (ax, top), (ax, gap), (ax, gap), (lane + r, gap),  # down out of the layer, then left
            (lane, gap), (lane, gap), (lane, gap + r),  # the corner onto the bus
            (lane, gap + r), (lane, yb - r), (lane, yb - r),  # down the bus
            (lane, yb), (lane, yb), (lane + r, yb),  # the corner off it
            (lane + r, yb), end, end, tip,  # across to the output
        ]
        routes[(a, b)] = rounded(points)
    return Placed(placed.centres, placed.rank, routes, placed.clusters, placed.extent, placed.engine, placed.note)
