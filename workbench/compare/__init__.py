"""Cross-checks of the workbench against reference systems.

``executorch`` compares the copies the workbench inserts with those of ExecuTorch's
device propagation, on the small models of ``models``; ``executorch_memory`` compares
the per-device arena bytes of the two memory planners. The ``executorch`` package is
optional: this package imports without it, and its functions say how to install it.
"""

from .executorch import (
    FLAG_LABELS,
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
from .executorch_memory import (
    ARENA_CASES,
    ARENA_REASONS,
    ArenaCase,
    ArenaComparison,
    ETTensor,
    ExecuTorchArenas,
    OneSided,
    arena_case,
    arena_table,
    compare_arena_case,
    compare_arenas,
    executorch_arena_bytes,
)
from .models import CASES, Case, case, case_names

__all__ = [
    "ARENA_CASES",
    "ARENA_REASONS",
    "ArenaCase",
    "ArenaComparison",
    "CASES",
    "FLAG_LABELS",
    "FLAG_SETTINGS",
    "INSTALL_HINT",
    "Case",
    "CopyComparison",
    "DelegateOps",
    "ETCopy",
    "ETTensor",
    "ExecuTorchArenas",
    "ExecuTorchCopies",
    "ExecuTorchNotInstalled",
    "OneSided",
    "arena_case",
    "arena_table",
    "case",
    "case_names",
    "compare_arena_case",
    "compare_arenas",
    "compare_case",
    "compare_copies",
    "compare_settings",
    "comparison_table",
    "executorch_arena_bytes",
    "executorch_available",
    "executorch_copies",
    "executorch_copies_for",
    "rule_partitioner",
]
