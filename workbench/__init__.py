"""workbench: device placement of ML inference graphs, made visible.

capture → place → propagate → plan → run, with views for notebooks::

    import workbench as wb
    prog = wb.capture(model, example_inputs)
    placed = wb.place(prog, {"cuda:0": ["aten.mm", "aten.add"]})
    dg = wb.propagate(placed)
    dg.copies
"""

from . import copy_ops  # registers the workbench:: copy ops with torch.library
from .capture import CaptureError, Program, capture
from .devices import CPU, Device, DeviceError
from .errors import WorkbenchError, WorkbenchWarning
from .place import Delegate, Placement, PlacementError, PlacementWarning, place
from .propagate import CopyRecord, DeviceGraph, PropagationError, propagate
from .planning.plan import CapacityError, MemoryPlan, PlanError, TensorAllocation, plan
from .planning.serialize import PlanFileError, load_plan
from .runtime.executor import RunResult, Session, estimate, load, run
from .runtime.calibrate import calibrate
from . import views
from .views import BufferView, GraphView, PlacementExplorer, TimelineView, explore, to_chrome_trace, to_dot

__all__ = [
    "BufferView",
    "RunResult",
    "calibrate",
    "Session",
    "estimate",
    "load",
    "run",
    "CPU",
    "GraphView",
    "PlacementExplorer",
    "TimelineView",
    "explore",
    "to_chrome_trace",
    "to_dot",
    "views",
    "CapacityError",
    "MemoryPlan",
    "PlanError",
    "PlanFileError",
    "TensorAllocation",
    "load_plan",
    "plan",
    "CaptureError",
    "CopyRecord",
    "Delegate",
    "Device",
    "DeviceError",
    "DeviceGraph",
    "WorkbenchError",
    "WorkbenchWarning",
    "Placement",
    "PlacementError",
    "PlacementWarning",
    "Program",
    "PropagationError",
    "capture",
    "copy_ops",
    "place",
    "propagate",
]
