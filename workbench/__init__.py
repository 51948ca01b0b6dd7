"""workbench: device placement of ML inference graphs, made visible.

capture → place → propagate → plan → run, with views for notebooks::

    import workbench as wb
    prog = wb.capture(model, example_inputs)
    placed = wb.place(prog, {"cuda:0": ["aten.mm", "aten.add"]})
    dg = wb.propagate(placed)
    dg.copies

The views (``GraphView``, ``BufferView``, ``TimelineView``, ``PlacementExplorer``,
``explore``, ``to_chrome_trace``, ``to_dot``) are loaded on first use, so a script that
only plans or runs never imports the widget and plotting libraries.
"""

from importlib import import_module
from typing import Any

from . import copy_ops  # registers the workbench:: copy ops with torch.library
from . import builtin_copies  # registers the copy variants the workbench ships
from .moe import streaming  # registers the copy of only the rows an index lists as real
from .capture import CaptureError, Program, capture
from .devices import CPU, CopyKind, Device, DeviceError
from .errors import WorkbenchError, WorkbenchWarning
from .place import Delegate, Placement, PlacementError, PlacementWarning, place
from .planning.archive import PlanFileError
from .planning.memory_plan import CapacityError, MemoryPlan, PlanError, PlanSaveError, TensorAllocation, plan
from .planning.plan_file import load_plan
from .propagate import CopyRecord, CopyRole, DeviceGraph, PropagationError, propagate
from .machine.calibration.calibrate import calibrate
from .runtime.executor import RunResult, Session, estimate, load, run
from .weight_formats import WeightFormatError, quantize

#: Names served by other modules, imported when first asked for: the views (widgets and
#: plotting), the ExecuTorch entry points (``executorch`` is optional), and the MoE
#: capacity tools (compiled cache-policy replay); a script that only plans never pays for them.
_LAZY_NAMES = {
    **dict.fromkeys(
        ("BufferView", "GraphView", "PlacementExplorer", "TimelineView", "explore", "to_chrome_trace", "to_dot"),
        ".views",
    ),
    "from_executorch": ".executorch",
    "compare_with_executorch": ".compare",
    "decode": ".moe.decode",
    "DecodeResult": ".moe.decode",
    "sweep": ".sweeps",
    "SweepResult": ".sweeps",
}


def __getattr__(name: str) -> Any:
    if name == "views":
        return import_module(".views", __name__)
    if name in _LAZY_NAMES:
        return getattr(import_module(_LAZY_NAMES[name], __name__), name)
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "DecodeResult",
    "SweepResult",
    "decode",
    "sweep",
    "BufferView",
    "CPU",
    "CapacityError",
    "CaptureError",
    "CopyKind",
    "CopyRecord",
    "CopyRole",
    "Delegate",
    "Device",
    "DeviceError",
    "DeviceGraph",
    "GraphView",
    "MemoryPlan",
    "PlacementError",
    "PlacementExplorer",
    "PlacementWarning",
    "Placement",
    "PlanError",
    "PlanFileError",
    "PlanSaveError",
    "Program",
    "PropagationError",
    "RunResult",
    "Session",
    "TensorAllocation",
    "TimelineView",
    "WeightFormatError",
    "WorkbenchError",
    "WorkbenchWarning",
    "calibrate",
    "capture",
    "compare_with_executorch",
    "copy_ops",
    "estimate",
    "explore",
    "from_executorch",
    "load",
    "load_plan",
    "place",
    "plan",
    "propagate",
    "quantize",
    "run",
    "to_chrome_trace",
    "to_dot",
    "views",
]
