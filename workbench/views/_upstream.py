"""Everything the views import from the pipeline's modules, in one place, so a rename
upstream touches one file of the views."""

from __future__ import annotations

from ..capture import Program, capture
from ..moe.discovery import find_experts
from ..graph_values import node_nbytes, op_name, packet_name, produces_tensors, reads_metadata_only, value_of
from ..place import module_paths, place
from ..planning.algorithms import ALGORITHMS
from ..planning.memory_plan import MemoryPlan, plan
from ..propagate import CopyRecord, DeviceGraph, node_role, propagate
from ..runtime.executor import RunResult, run
from ..runtime.tensors import stage_inputs
from ..runtime.timeline import COMPUTE_EVENT_KINDS, COPY_EVENT_KINDS, EVENT_KINDS, FLOW_KINDS, Timeline
from ..units import format_bytes, format_us



def graph_of(memory_plan: MemoryPlan) -> DeviceGraph:
    """The DeviceGraph a memory plan was made for."""
    return memory_plan.device_graph


__all__ = [
    "ALGORITHMS",
    "COMPUTE_EVENT_KINDS",
    "COPY_EVENT_KINDS",
    "CopyRecord",
    "DeviceGraph",
    "EVENT_KINDS",
    "FLOW_KINDS",
    "MemoryPlan",
    "Program",
    "RunResult",
    "Timeline",
    "capture",
    "find_experts",
    "format_bytes",
    "format_us",
    "graph_of",
    "module_paths",
    "node_nbytes",
    "node_role",
    "op_name",
    "packet_name",
    "place",
    "plan",
    "produces_tensors",
    "propagate",
    "reads_metadata_only",
    "run",
    "stage_inputs",
    "value_of",
]
