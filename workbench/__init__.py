"""workbench: device placement of ML inference graphs, made visible.

capture → place → propagate → plan → run, with views for notebooks::

    import workbench as wb
    prog = wb.capture(model, example_inputs)
    placed = wb.place(prog, {"cuda:0": ["aten.mm", "aten.add"]})
    dg = wb.propagate(placed)
    dg.copies

Importing the package loads nothing heavy: every name is imported on first use, so a
command that only reads a model file (``python -m workbench plan``) never pays for torch,
the widgets or the plotting libraries. The first use of any stage also registers the
``workbench::`` copy ops with ``torch.library`` and the copy variants the workbench ships.
"""

import sys
from importlib import import_module
from types import ModuleType
from typing import Any

from .devices import CPU, CopyKind, Device, DeviceError
from .errors import WorkbenchError, WorkbenchWarning

#: Public name → the module that defines it, imported when the name is first asked for.
_LAZY_NAMES = {
    **dict.fromkeys(("CaptureError", "Program", "capture"), ".capture"),
    **dict.fromkeys(("Delegate", "Placement", "PlacementError", "PlacementWarning", "place"), ".place"),
    "PlanFileError": ".planning.archive",
    **dict.fromkeys(
        ("CapacityError", "MemoryPlan", "PlanError", "PlanSaveError", "TensorAllocation", "plan"), ".planning.memory_plan"
    ),
    "load_plan": ".planning.plan_file",
    **dict.fromkeys(("CopyRecord", "CopyRole", "DeviceGraph", "PropagationError", "propagate"), ".propagate"),
    "calibrate": ".machine.calibration.calibrate",
    **dict.fromkeys(("RunResult", "Session", "estimate", "load", "run"), ".runtime.executor"),
    **dict.fromkeys(("WeightFormatError", "quantize"), ".weight_formats"),
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

#: Modules served whole as attributes (``wb.views``, ``wb.copy_ops``).
_LAZY_MODULES = {"views": ".views", "copy_ops": ".copy_ops"}


def __getattr__(name: str) -> Any:
    if name in _LAZY_MODULES:
        value: Any = import_module(_LAZY_MODULES[name], __name__)
    elif name in _LAZY_NAMES:
        # The first use of any stage registers the ``workbench::`` ops and, through the
        # registry's first read, the shipped copy variants.
        import_module(".copy_ops", __name__)
        import_module(".copy_variants", __name__).copy_variants()
        value = getattr(import_module(_LAZY_NAMES[name], __name__), name)
    elif not name.startswith("_"):  # a subpackage or module, as ``wb.runtime`` or ``wb.machine``
        try:
            value = import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'workbench' has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module 'workbench' has no attribute {name!r}")
    globals()[name] = value  # later reads find it without this hook
    return value


class _Package(ModuleType):
    """The package's module type: ``capture``, ``place`` and ``propagate`` are both
    submodules and the public functions of the same name. The import system binds a
    submodule on its package when it first loads it; here that binding is dropped, so the
    public name stays the function (served by ``__getattr__``), as before the lazy import."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _LAZY_NAMES and isinstance(value, ModuleType) and not isinstance(self.__dict__.get(name), ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
