"""Calibration: measure the machine at hand (copies, kernels, launches, the executor's own
cost) and write a measured preset that ``CostModel.preset("measured:<name>")`` loads.

It runs plans through the executor, so it sits above ``workbench.runtime``.
"""

from .calibrate import Calibration, CalibrationError, CalibrationPlan, calibrate

__all__ = ["Calibration", "CalibrationError", "CalibrationPlan", "calibrate"]
