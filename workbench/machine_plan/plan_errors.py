"""The errors of planning a user's machine: one base, one class per kind of bad input."""

from __future__ import annotations

from ..errors import WorkbenchError

__all__ = ["MachineError", "ModelFileError", "PlacementDoesNotFit", "MachinePlanError"]


class MachinePlanError(WorkbenchError, ValueError):
    """A plan that cannot be made from the inputs given."""


class ModelFileError(MachinePlanError):
    """A model file that cannot be read as a model: not a GGUF, damaged, or impossible."""


class MachineError(MachinePlanError):
    """A machine the planner cannot size or hold the model on: an unknown part, a figure it
    lacks, or too little memory."""


class PlacementDoesNotFit(MachinePlanError):
    """A machine none of whose placements holds the model: says how much is missing where."""
