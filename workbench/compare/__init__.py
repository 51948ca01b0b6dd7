"""Cross-checks of the workbench against ExecuTorch's device support.

- ``cases``: the one registry of cases (a model, its inputs, a placement) by unique name;
  ``models``: the small models some cases use;
- ``settings``: flag settings, placement rules and inputs as the cross-checks take them;
- ``lowering``: ExecuTorch's device pipeline under workbench placement rules;
- ``copies``: the copies each system inserts; ``arenas``: the memory each plans;
- ``with_executorch``: ``compare_with_executorch``, one model in both systems, every
  difference with its reason; ``two_columns``: its view.

The ``executorch`` package is optional: this package imports without it, and its
functions say how to install it.
"""

from ..executorch.dependency import (
    INSTALL_HINT,
    ExecuTorchNotInstalled,
    ExecuTorchWithoutDeviceSupport,
    executorch_available,
)
from .arenas import (
    ARENA_REASONS,
    ArenaComparison,
    ETTensor,
    ExecuTorchArenas,
    OneSided,
    arena_table,
    compare_arena_case,
    compare_arenas,
    executorch_arena_bytes,
)
from .cases import (
    ARENA_CASES,
    CASES,
    COPY_CASES,
    Case,
    UnknownCaseError,
    case,
    case_names,
)
from .copies import (
    CopyComparison,
    ETCopy,
    ExecuTorchCopies,
    compare_case,
    compare_copies,
    compare_settings,
    comparison_table,
    executorch_copies,
    executorch_copies_for,
)
from .lowering import DelegateOps, rule_partitioner
from .settings import (
    FLAG_LABELS,
    FLAG_SETTINGS,
    CrossCheckInputError,
    CrossCheckTypeError,
)
from .with_executorch import SideBySide, compare_with_executorch
from .two_columns import side_by_side_view

__all__ = [
    "ARENA_CASES",
    "ARENA_REASONS",
    "ArenaComparison",
    "CASES",
    "COPY_CASES",
    "FLAG_LABELS",
    "FLAG_SETTINGS",
    "INSTALL_HINT",
    "Case",
    "CopyComparison",
    "CrossCheckInputError",
    "CrossCheckTypeError",
    "DelegateOps",
    "ETCopy",
    "ETTensor",
    "ExecuTorchArenas",
    "ExecuTorchCopies",
    "ExecuTorchNotInstalled",
    "ExecuTorchWithoutDeviceSupport",
    "OneSided",
    "SideBySide",
    "SideBySide",
    "UnknownCaseError",
    "arena_table",
    "case",
    "case_names",
    "compare_arena_case",
    "compare_arenas",
    "compare_case",
    "compare_copies",
    "compare_settings",
    "compare_with_executorch",
    "comparison_table",
    "executorch_arena_bytes",
    "executorch_available",
    "executorch_copies",
    "executorch_copies_for",
    "rule_partitioner",
    "side_by_side_view",
]
