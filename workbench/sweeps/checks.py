"""What a sweep checks of its budgets and links, and the error it raises: shared by
``sweep`` and by ``SweepResult.from_points`` (a result rebuilt from saved points)."""

from __future__ import annotations

from typing import Sequence

from ..errors import WorkbenchError
from ..machine import CostModel

__all__ = ["MAX_BUDGET_GIB", "SweepError", "check_budgets", "check_links"]

#: No device holds more (an exbibyte); a larger budget is a typo, and 10**400 would
#: overflow a float only after the sweep's work.
MAX_BUDGET_GIB = float(2**30)


class SweepError(WorkbenchError, ValueError):
    """A sweep that cannot run as asked."""


def check_budgets(budgets: Sequence[float]) -> tuple[float, ...]:
    """The budgets as a tuple: positive numbers of GiB, at least one."""
    out = tuple(budgets)
    if not out or any(isinstance(b, bool) or not isinstance(b, (int, float)) or not 0 < b <= MAX_BUDGET_GIB for b in out):
        raise SweepError(f"budgets must be positive numbers of GiB up to {MAX_BUDGET_GIB:.0e}, got {list(out)}")
    return out


def check_links(links: Sequence[str]) -> tuple[str, ...]:
    """The links as a tuple: ``CostModel`` link presets, at least one (a single name is one link)."""
    valid = CostModel.presets()["link"]
    out = tuple([links] if isinstance(links, str) else links)
    unknown = [link for link in out if link not in valid]
    if not out or unknown:
        raise SweepError(f"unknown link preset(s) {unknown or '(none given)'}; valid: {', '.join(valid)}")
    return out
