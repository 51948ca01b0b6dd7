"""Positions as plain data: what a layout engine (dot, or the fallback rows) returns, and
what the nodes and routes placed after it (the output bus, the side nodes) update.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

#: A cluster: (kind, label, member ids, device or None for "most common among members").
Cluster = tuple[str, str, tuple[str, ...], Optional[str]]

TIP_PT = 7.0  # an arrow head's length: where a route's spline stops short of its head


@dataclass(frozen=True)
class Placed:
    """Where everything drawn sits: node centres and ranks, edge routes, cluster boxes
    (x0, y0, x1, y1), the drawing's extent (points), and which engine placed it and why."""

    centres: Mapping[str, tuple[float, float]]
    rank: Mapping[str, int]
    routes: Mapping[tuple[str, str], tuple[tuple[float, float], ...]]
    clusters: Mapping[str, tuple[float, float, float, float]]
    extent: tuple[float, float]
    engine: str
    note: str


def rounded(points: Sequence[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """A route's points to 0.01 pt."""
    return tuple((round(x, 2), round(y, 2)) for x, y in points)
