"""Cross-checks of the workbench against reference systems.

``executorch`` compares the copies the workbench inserts with those of ExecuTorch's
device propagation, on the small models of ``models``. The ``executorch`` package is
optional: this package imports without it, and its functions say how to install it.
"""

from .executorch import (
    FLAG_SETTINGS,
    INSTALL_HINT,
    CopyComparison,
    DelegateOps,
    ETCopy,
    ExecuTorchCopies,
    ExecuTorchNotInstalled,
    compare_case,
    compare_copies,
    compare_settings,
    comparison_table,
    executorch_available,
    executorch_copies,
    executorch_copies_for,
    rule_partitioner,
)
from .models import CASES, Case, case, case_names

__all__ = [
    "CASES",
    "FLAG_SETTINGS",
    "INSTALL_HINT",
    "Case",
    "CopyComparison",
    "DelegateOps",
    "ETCopy",
    "ExecuTorchCopies",
    "ExecuTorchNotInstalled",
    "case",
    "case_names",
    "compare_case",
    "compare_copies",
    "compare_settings",
    "comparison_table",
    "executorch_available",
    "executorch_copies",
    "executorch_copies_for",
    "rule_partitioner",
]
