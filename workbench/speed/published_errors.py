"""The one error of the published-run tables and the models fitted to them."""

from __future__ import annotations

from ..errors import WorkbenchError

__all__ = ["AnchorError"]


class AnchorError(WorkbenchError, ValueError):
    """A published run, table or facts file that cannot be read or modeled (the message
    says which and why)."""
