"""The machine: every figure a modeled time comes from, and the functions that turn work into time.

- ``parts``: named GPUs, hosts, links and runtimes, one sourced figure a row
  (``data/parts/parts.csv``), and a user's own parts file.
- ``cost_model``: ``CostModel``, a machine composed of parts (or a measured preset) —
  hardware and runtime only, no workload.
- ``costs``: the cost functions — a copy, a kernel, a host op, launches — that the event
  simulator (``runtime.sim_timing``) and the decode timer (``workbench.speed``) both call.
- ``op_cost``: what an op costs in FLOPs and bytes, counted from its arguments' shapes.
- ``default_model``: the cost model used when none is given.
- ``runtime_profiles``: published inference runtimes as terms on a composed machine, and
  their fitted terms (``data/runtimes/``).
- ``calibration``: measure the machine at hand and write a measured preset (it runs the
  executor, so it sits above ``workbench.runtime``; nothing here imports it).
"""

from .cost_model import CostModel, CostModelWarning, OpCost, RuntimeTerms, dtype_class, op_cost
from .default_model import choose_default_cost_model, default_cost_model, gpu_at_hand

__all__ = [
    "CostModel",
    "CostModelWarning",
    "OpCost",
    "RuntimeTerms",
    "choose_default_cost_model",
    "default_cost_model",
    "dtype_class",
    "gpu_at_hand",
    "op_cost",
]
