"""The Graphviz ``dot`` engine of the layout (rule 5): the drawn nodes, at their sizes, and
the edges between them, laid out top to bottom; a node's rank is the index of its y among
the distinct y of the nodes dot placed.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ._graphviz import dot_positions
from ._node_content import GROUP_KINDS, NodeContent
from ._positions import Cluster, Placed

#: Above this many drawn nodes the layout uses rows instead of dot (dot needs minutes).
DOT_MAX_NODES = 1500


def dot_layout(drawn: Mapping[str, NodeContent], edges: Sequence[tuple[str, str]], clusters: Mapping[str, Cluster]) -> Placed:
    """``drawn`` laid out by dot, clusters kept together; ``GraphvizUnavailable`` when dot
    is missing or fails."""
    got = dot_positions(
        {lid: (c.w, c.h) for lid, c in drawn.items()},
        edges,
        {name: (label, ms) for name, (_kind, label, ms, _device) in clusters.items()},
        _beside(drawn, edges, clusters),
    )
    ys = sorted({y for _x, y in got.centres.values()})
    rank_of_y = {y: i for i, y in enumerate(ys)}
    rank = {lid: rank_of_y[got.centres[lid][1]] for lid in drawn}
    return Placed(got.centres, rank, got.edges, got.clusters, (got.width, got.height), "dot", "")


def _beside(
    drawn: Mapping[str, NodeContent], edges: Sequence[tuple[str, str]], clusters: Mapping[str, Cluster]
) -> list[tuple[str, str]]:
    """A node that reads from and feeds the same collapsed group (a gather whose index the
    group's router computes) is drawn beside the group rather than a rank below it."""
    pairs = set(edges)
    in_cluster = {m for _k, _l, ms, _d in clusters.values() for m in ms}
    return [
        (a, b)
        for a, b in edges
        if (b, a) in pairs and drawn[b].kind in GROUP_KINDS and drawn[a].kind not in GROUP_KINDS
        and a not in in_cluster and b not in in_cluster
    ]
