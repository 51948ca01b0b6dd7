"""Facts a graph rewrite records on a node for the runtime: which stream it runs on, which rows it works on.

Propagation records copies in the ``DeviceGraph``'s copy table. A rewrite that adds ops
of its own (``workbench.moe``'s expert caches) records the two facts the runtime needs
about them in ``node.meta`` — where ``torch.fx`` keeps what a pass knows of a node
(``val``, ``nn_module_stack``), which ``node_copy`` carries through propagation and
scheduling — through the functions here; ``steps`` reads them back the same way.

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
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch.fx

from ..errors import WorkbenchError

__all__ = ["CopyStreamOp", "NodeFactError", "RowShare", "copy_stream_op", "mark_copy_stream", "mark_row_share", "row_share"]

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
