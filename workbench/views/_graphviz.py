"""Node positions from Graphviz ``dot``: one run, positions read back from its JSON.

``dot_positions(nodes, edges, clusters)`` lays out boxes of given sizes top to bottom and
returns their centres, the edges' spline points and the clusters' bounding boxes.

Rules:
1. Every node is given its drawn size (``fixedsize``, no label), so dot packs exactly
   what the views draw and spends no time on text; a cluster gets its label so dot keeps
   room for it above its members.
2. Coordinates come back in points with the origin at the top left and y growing
   downward (dot's y grows upward; it is flipped here).
3. An edge's points, keyed by (tail, head), are dot's cubic B-spline control points
   (1 + 3k of them) from the tail to the head, then the arrow tip when dot drew one.
   Edges are given once per (tail, head).
4. Nodes and edges are written in the order given, so the same input gives the same
   output (dot is deterministic for a given input text).
5. Without a ``dot`` executable on PATH, or when dot fails or runs past its time limit,
   ``GraphvizUnavailable`` says why; the caller decides what to do instead.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from ..errors import WorkbenchError

#: How long one layout may take before the caller falls back.
DOT_TIMEOUT_S = 60.0
POINTS_PER_INCH = 72.0

# Ranks close together, a little more room between nodes of one rank, and bounded effort
# for crossing minimisation and ranking: the graphs are long chains (layers), where
# dot's default effort costs seconds for no visible gain.
_GRAPH_ATTRS = {
    "rankdir": "TB",
    "nodesep": "0.22",
    "ranksep": "0.32",
    "splines": "spline",
    "mclimit": "0.5",
    "nslimit": "4",
    "nslimit1": "4",
    "searchsize": "20",
}
# Above this many nodes, less effort still: the x-coordinate pass (network simplex over
# every node and every edge's virtual nodes) is most of dot's time on a long graph.
LARGE_GRAPH_NODES = 300
_LARGE_GRAPH_ATTRS = {"mclimit": "0.2", "nslimit": "1", "nslimit1": "1"}


class GraphvizUnavailable(WorkbenchError, RuntimeError):
    """Graphviz ``dot`` is missing, failed, or ran past its time limit."""


@dataclass(frozen=True)
class DotLayout:
    """What dot decided, in points, origin top left, y down."""

    centres: Mapping[str, tuple[float, float]]  # node id → centre
    edges: Mapping[tuple[str, str], tuple[tuple[float, float], ...]]  # (tail, head) → points
    clusters: Mapping[str, tuple[float, float, float, float]]  # name → (x0, y0, x1, y1)
    width: float
    height: float


def dot_executable() -> Optional[str]:
    """The ``dot`` found on PATH, or None."""
    return shutil.which("dot")


def dot_positions(
    sizes: Mapping[str, tuple[float, float]],
    edges: Sequence[tuple[str, str]],
    clusters: Mapping[str, tuple[str, Sequence[str]]] = {},
    same_rank: Sequence[tuple[str, str]] = (),
    timeout_s: float = DOT_TIMEOUT_S,
) -> DotLayout:
    """Lay out nodes of ``sizes`` (id → (width, height) in points) joined by ``edges``;
    ``clusters`` maps a cluster name to (label, member ids); each pair of ``same_rank``
    is drawn side by side."""
    exe = dot_executable()
    if exe is None:
        raise GraphvizUnavailable(
            "Graphviz 'dot' is not on PATH; install Graphviz (Debian/Ubuntu: apt-get install graphviz, "
            "conda: conda install -c conda-forge graphviz, macOS: brew install graphviz)"
        )
    text = dot_text(sizes, edges, clusters, same_rank)
    try:
        done = subprocess.run([exe, "-Tjson0"], input=text.encode(), capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise GraphvizUnavailable(f"dot took longer than {timeout_s:.0f} s for {len(sizes)} nodes") from None
    if done.returncode != 0:
        raise GraphvizUnavailable(f"dot failed (exit {done.returncode}): {done.stderr.decode(errors='replace').strip()[:500]}")
    return _read(json.loads(done.stdout), list(sizes), list(clusters))


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot_text(
    sizes: Mapping[str, tuple[float, float]],
    edges: Sequence[tuple[str, str]],
    clusters: Mapping[str, tuple[str, Sequence[str]]] = {},
    same_rank: Sequence[tuple[str, str]] = (),
) -> str:
    """Rule 1 and 4: the DOT text handed to dot."""
    chosen = {**_GRAPH_ATTRS, **(_LARGE_GRAPH_ATTRS if len(sizes) > LARGE_GRAPH_NODES else {})}
    attrs = "; ".join(f"{k}={v}" for k, v in chosen.items())
    lines = [f"digraph g {{ {attrs};", 'node [shape=box, fixedsize=true, label=""];']
    in_cluster = {m for _label, members in clusters.values() for m in members}

    def node(nid: str) -> str:
        w, h = sizes[nid]
        return f"{_quote(nid)} [width={w / POINTS_PER_INCH:.4f}, height={h / POINTS_PER_INCH:.4f}];"

    for i, (name, (label, members)) in enumerate(clusters.items()):
        lines.append(f"subgraph {_quote('cluster_' + str(i))} {{ label={_quote(label)}; fontsize=11; margin=10;")
        lines += [node(m) for m in members]
        lines.append("}")
    lines += [node(nid) for nid in sizes if nid not in in_cluster]
    lines += [f"{_quote(a)} -> {_quote(b)};" for a, b in edges]
    lines += [f"{{rank=same; {_quote(a)}; {_quote(b)};}}" for a, b in same_rank]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _point(text: str) -> tuple[float, float]:
    x, y = text.split(",")[:2]
    return float(x), float(y)


def _read(out: dict, order: list[str], cluster_names: list[str]) -> DotLayout:
    """Rules 2 and 3."""
    x0, y0, x1, y1 = (float(v) for v in out["bb"].split(","))
    height = y1 - y0

    def flip(p: tuple[float, float]) -> tuple[float, float]:
        return (round(p[0] - x0, 2), round(y1 - p[1], 2))

    centres: dict[str, tuple[float, float]] = {}
    clusters: dict[str, tuple[float, float, float, float]] = {}
    gvid: dict[int, str] = {}
    for obj in out.get("objects", []):
        if "bb" in obj:  # a cluster: (x0, y0, x1, y1) with y up
            a, b, c, d = (float(v) for v in obj["bb"].split(","))
            (ax, ay), (cx, cy) = flip((a, d)), flip((c, b))
            index = int(obj["name"].removeprefix("cluster_"))
            clusters[cluster_names[index]] = (ax, ay, cx, cy)
        elif "pos" in obj:
            gvid[obj["_gvid"]] = obj["name"]
            centres[obj["name"]] = flip(_point(obj["pos"]))
    missing = [n for n in order if n not in centres]
    if missing:
        raise GraphvizUnavailable(f"dot placed no position for {len(missing)} nodes (first: {missing[0]!r})")
    edges: dict[tuple[str, str], tuple[tuple[float, float], ...]] = {}
    for e in out.get("edges", []):
        ends = (gvid[e["tail"]], gvid[e["head"]])
        pos = e.get("pos", "")
        parts = pos.split()
        tip = None
        points = []
        for part in parts:
            if part.startswith("e,"):
                tip = flip(_point(part[2:]))
            elif part.startswith("s,"):
                continue
            else:
                points.append(flip(_point(part)))
        if not points:  # no route: a straight line between the centres
            points = [centres[ends[0]], centres[ends[1]]]
        if tip is not None:
            points.append(tip)
        edges[ends] = tuple(points)
    return DotLayout(centres, edges, clusters, round(x1 - x0, 2), round(height, 2))
