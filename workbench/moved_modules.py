"""Public import paths of modules that moved, kept working.

``import workbench.anchors`` (or ``from workbench import walkthrough``) gives the very
module that now lives at its new path: the application's modules moved into
``workbench.app``, the small example models into ``workbench.models``, the expert code
into the MoE package (discovery, expert ops, strategies: ``workbench.moe``).

Rules:
1. Only the paths in ``MOVED`` are served; every other name is left to the import system.
2. A moved module is imported when its old path is first imported, never at package
   import (the application layer stays unloaded for a script that only plans).
3. The old path and the new one name the same module object, whose own ``__spec__``
   (its new path) is kept, so classes, ``isinstance`` and reloading see one module.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Optional, Sequence

__all__ = ["MOVED", "MovedModuleFinder", "install"]

#: Old public path → the module's path now.
MOVED = {
    "workbench.anchors": "workbench.app.anchors",
    "workbench.walkthrough": "workbench.app.walkthrough",
    "workbench.examples": "workbench.models.examples",
    "workbench.experts": "workbench.moe.discovery",
    "workbench.moe.experts": "workbench.moe.discovery",
    "workbench.expert_ops": "workbench.moe.expert_ops",
    "workbench.strategies": "workbench.moe.strategies",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of ``MOVED`` and loads it as the module at its new path."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def __init__(self) -> None:
        self._own_specs: dict[str, Optional[importlib.machinery.ModuleSpec]] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        self._own_specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The module ran at its new path (its __name__); importlib has just stamped the old
        # path's spec on it, so put back its own (rule 3).
        module.__spec__ = self._own_specs[module.__name__]


def install() -> None:
    """Serve the old paths (once per process, however often it is called)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())  # before any finder that might see a stale copy
