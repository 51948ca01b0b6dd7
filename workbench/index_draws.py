"""How an index tensor's rows were drawn: T draws, each of k distinct rows of E.

A copy of the rows an index selects moves, per call, the distinct rows its draws hit.
When the draws are known by their sizes alone (a shape-only estimate), the expected
number of distinct rows is what a cost model charges such a copy.

Rules:
1. ``Routing(experts=E, tokens=T, top_k=k)``: T draws, each of k distinct rows among E
   (a router sending each of T tokens to k of E groups); every figure is an int >= 1 and
   k <= E.
2. Expected distinct rows assume uniform draws: each draw picks k distinct rows
   uniformly at random, independently of the others, so a row is missed by one draw with
   probability 1 − k/E and by all T with (1 − k/E)^T: E · (1 − (1 − k/E)^T). One draw
   gives exactly k; many draws approach E.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .errors import WorkbenchError

__all__ = ["Routing", "RoutingError", "expected_distinct_rows"]


class RoutingError(WorkbenchError, ValueError):
    """Draw figures that cannot describe a draw (the message says which)."""


def expected_distinct_rows(rows: int, draws: int, per_draw: int) -> float:
    """Rule 2: E · (1 − (1 − k/E)^T), the rows T uniform draws of k of E rows each are
    expected to hit at least once (E = ``rows``, T = ``draws``, k = ``per_draw``)."""
    figures = (("rows (experts)", rows), ("draws (tokens)", draws), ("per_draw (top_k)", per_draw))
    for name, value in figures:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise RoutingError(f"{name} must be an int >= 1, got {value!r}")
    if per_draw > rows:
        raise RoutingError(f"per_draw (top_k)={per_draw} cannot exceed rows (experts)={rows}")
    return rows * (1.0 - (1.0 - per_draw / rows) ** draws)


@dataclass(frozen=True)
class Routing:
    """Rule 1: T draws (tokens), each of k (top_k) distinct rows among E (experts)."""

    experts: int  # E, experts scored per token
    tokens: int  # T, tokens routed
    top_k: int  # k, experts each token is sent to

    @property
    def rows(self) -> int:
        """S = T × k routed rows."""
        return self.tokens * self.top_k

    def expected_distinct(self) -> float:
        """Rows expected to be drawn at least once under uniform draws (rule 2)."""
        return expected_distinct_rows(self.experts, self.tokens, self.top_k)

    def to_json(self) -> dict[str, int]:
        return {"experts": self.experts, "tokens": self.tokens, "top_k": self.top_k}

    @classmethod
    def from_json(cls, data: Any, path: str = "routing") -> "Routing":
        """The routing ``to_json`` wrote; anything else is a ``RoutingError`` naming ``path``."""
        if not isinstance(data, dict) or set(data) != {"experts", "tokens", "top_k"}:
            raise RoutingError(f"{path} must be an object with experts, tokens and top_k, got {data!r}")
        values = [data[k] for k in ("experts", "tokens", "top_k")]
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise RoutingError(f"{path} holds {data!r}; each figure must be an int >= 1")
        return cls(*values)

