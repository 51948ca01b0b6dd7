"""Facts a graph rewrite records on a node for the runtime: which stream it runs on, which rows it works on.

Propagation records copies in the ``DeviceGraph``'s copy table. A rewrite that adds ops
of its own (``workbench.moe``'s expert caches) records the two facts the runtime needs
about them in ``node.meta`` — where ``torch.fx`` keeps what a pass knows of a node
(``val``, ``nn_module_stack``), which ``node_copy`` carries through propagation and
scheduling — through the functions here; ``runtime.steps`` reads them back the same way.
``torch.export.save`` keeps no custom ``node.meta`` keys, so a saved ``DeviceGraph``
writes the facts of its graph as a table of its own (``facts_to_json``) and restores them
on the loaded graph (``restore_facts``).

Rules:
  1. ``CopyStreamOp(nbytes)``: a device op that runs on its device's copy stream (an
     update of device memory that must be ordered with the copies, e.g. writing rows into
     a cache), moving ``nbytes`` within device memory per call. It is a ``d2d`` event of
     its device's copy lane, timed as a memory copy of ``nbytes`` (read and written once).
  2. ``RowShare(mask, where)``: a compute or host op whose tensors have one row per entry
     of the ``(N,)`` boolean value of node ``mask``, of which only the rows where
     ``mask == where`` are needed (the others are computed for static shapes and
     discarded). It is charged that share of its time, bytes and FLOPs: in a run the
     share the mask really selects, in ``estimate`` the expected one
     (``CostModel.prefetch_hit_rate`` selects ``True``).
  3. A node has at most one fact of each kind; ``mask`` names a node of the same graph.
  4. Saved and loaded, a graph's nodes carry the same facts as before: the table names
     each node with a fact, and a name that is no node of the loaded graph (or a mask
     that is none) is a ``JsonFieldError`` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import torch.fx

from .errors import WorkbenchError
from .json_fields import JsonFieldError, JsonObject

__all__ = [
    "CopyStreamOp",
    "NodeFactError",
    "RowShare",
    "copy_stream_op",
    "facts_to_json",
    "mark_copy_stream",
    "mark_row_share",
    "restore_facts",
    "row_share",
]

_STREAM_KEY = "workbench_copy_stream"
_SHARE_KEY = "workbench_row_share"


class NodeFactError(WorkbenchError, ValueError):
    """A node fact that cannot hold (negative bytes, a mask that is no node)."""


@dataclass(frozen=True)
class CopyStreamOp:
    """Rule 1."""

    nbytes: int  # bytes the op moves within device memory per call


@dataclass(frozen=True)
class RowShare:
    """Rule 2."""

    mask: str  # node whose (N,) bool value says which rows are needed
    where: bool  # the op's rows are those where the mask equals this

    def share(self, rows: int, true_rows: int) -> float:
        """The share of ``rows`` this op works on, given how many mask entries are True."""
        if rows <= 0:
            return 0.0
        selected = true_rows if self.where else rows - true_rows
        return selected / rows

    def expected_share(self, true_rate: float) -> float:
        """The share expected when a mask entry is True with probability ``true_rate``."""
        return true_rate if self.where else 1.0 - true_rate


def mark_copy_stream(node: torch.fx.Node, nbytes: int) -> None:
    """Record rule 1 on ``node``."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise NodeFactError(f"a copy-stream op moves a whole number of bytes >= 0, got {nbytes!r}")
    node.meta[_STREAM_KEY] = CopyStreamOp(nbytes)


def mark_row_share(node: torch.fx.Node, mask: torch.fx.Node, where: bool) -> None:
    """Record rule 2 on ``node``: its rows are those where ``mask``'s value equals ``where``."""
    if not isinstance(mask, torch.fx.Node) or mask.graph is not node.graph:
        raise NodeFactError(f"the mask of {node.name!r} must be a node of its graph, got {mask!r}")
    node.meta[_SHARE_KEY] = RowShare(mask.name, bool(where))


def copy_stream_op(node: torch.fx.Node) -> Optional[CopyStreamOp]:
    """Rule 1's fact on ``node``, if recorded."""
    fact = node.meta.get(_STREAM_KEY)
    return fact if isinstance(fact, CopyStreamOp) else None


def row_share(node: torch.fx.Node) -> Optional[RowShare]:
    """Rule 2's fact on ``node``, if recorded."""
    fact = node.meta.get(_SHARE_KEY)
    return fact if isinstance(fact, RowShare) else None


def facts_to_json(graph: torch.fx.Graph) -> dict[str, Any]:
    """Rule 4: the facts recorded on ``graph``'s nodes as plain JSON data."""
    streams: dict[str, int] = {}
    shares: dict[str, dict[str, Any]] = {}
    for node in graph.nodes:
        stream, share = copy_stream_op(node), row_share(node)
        if stream is not None:
            streams[node.name] = stream.nbytes
        if share is not None:
            shares[node.name] = {"mask": share.mask, "where": share.where}
    return {"copy_stream": streams, "row_share": shares}


def restore_facts(graph: torch.fx.Graph, data: Any, path: str = "node_facts") -> None:
    """Rule 4: record on ``graph``'s nodes the facts ``facts_to_json`` wrote. Everything is
    checked before any node is changed, so a bad table leaves the graph as it was."""
    obj = JsonObject(data, path)
    nodes = {n.name: n for n in graph.nodes}

    def node_at(name: str, where: str) -> torch.fx.Node:
        if name not in nodes:
            raise JsonFieldError(f"{where} names {name!r}, which is no node of the saved graph")
        return nodes[name]

    streams = obj.count_map("copy_stream")
    shares_obj = obj.mapping("row_share")
    marks: list[tuple[torch.fx.Node, str, Any]] = []
    for name, nbytes in streams.items():
        marks.append((node_at(name, f"{path}.copy_stream"), _STREAM_KEY, CopyStreamOp(nbytes)))
    for name in shares_obj.keys():
        share = shares_obj.mapping(name)
        mask = node_at(share.text("mask"), f"{share.path}.mask")
        marks.append((node_at(name, f"{path}.row_share"), _SHARE_KEY, RowShare(mask.name, share.flag("where"))))
    for node, key, fact in marks:
        node.meta[key] = fact
