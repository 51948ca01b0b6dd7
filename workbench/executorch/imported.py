"""``from_executorch``: an ExecuTorch program, from a lowering or a ``.pte`` file, in the workbench.

Rules:
1. Every source goes through ExecuTorch's own ``schema.Program`` and the one reader
   (``reader.read_program``), so a ``.pte`` file and the lowering it was written from give
   equal ``ImportedProgram.program`` data.
2. The result is the workbench's own types: ``program`` (plain data), ``device_graph`` (a
   ``DeviceGraph``) and ``memory_plan`` (a ``MemoryPlan`` with ExecuTorch's offsets), so
   ``GraphView``, ``BufferView``, ``to_dot`` and the DataFrames work on it unchanged.
   Nothing in it refers back to ExecuTorch's objects.
3. ``estimate`` is the workbench's cost model applied to ExecuTorch's calls, copies and
   devices — a model, labelled as one, never a measurement of ExecuTorch. A delegate's
   work is unknown to the workbench: it is charged the bytes it reads and writes, no FLOPs.
   Every call writes its results straight into the memory ExecuTorch planned for them, as
   ExecuTorch's kernels and delegates do (``estimate(..., in_place_writes=True)``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pandas as pd

from ..planning.memory_plan import MemoryPlan
from ..propagate import DeviceGraph
from ..runtime import Timeline
from ..machine import CostModel
from ..runtime import estimate as estimate_timeline
from .device_graph import to_device_graph
from .memory import to_memory_plan
from .program import ExecuTorchProgram
from .reader import read_program
from .source import ProgramSource, schema_program

__all__ = ["ExecuTorchEstimate", "ImportedProgram", "from_executorch"]


@dataclass(frozen=True, eq=False)
class ExecuTorchEstimate:
    """Rule 3: a modeled timeline of one call of an imported ExecuTorch program."""

    timeline: Timeline
    label: str  # a short title for plots: "model of an ExecuTorch program"
    note: str  # one sentence: what was modeled from what, and that it is not a measurement


@dataclass(frozen=True, eq=False)
class ImportedProgram:
    """An ExecuTorch program as the workbench sees it (rule 2)."""

    program: ExecuTorchProgram  # the method's tensors, calls, copies and buffers
    source: str  # where it came from: a path, "bytes" or the manager's type
    device_graph: DeviceGraph  # one node per call, copies as copy nodes, delegates as delegates
    memory_plan: MemoryPlan  # ExecuTorch's buffers and offsets, over device_graph's steps

    def copies_dataframe(self) -> pd.DataFrame:
        """One row per ``et_copy``: name, kind, value, source and target devices, bytes, consumers, reason."""
        return self.device_graph.copies_dataframe()

    def estimate(self, cost_model: Optional[CostModel] = None) -> ExecuTorchEstimate:
        """Rule 3: the modeled timeline of one call (``wb.estimate`` on ``memory_plan``)."""
        note = (
            f"The workbench's cost model applied to the ExecuTorch program read from {self.source}: its "
            "kernels, delegate calls and et_copy copies on the devices ExecuTorch placed them, delegates "
            "charged the bytes they read and write, every result written in place. A model, not a measurement "
            "of ExecuTorch."
        )
        timeline = estimate_timeline(self.memory_plan, cost_model, in_place_writes=True)
        return ExecuTorchEstimate(timeline, "model of an ExecuTorch program", note)


def from_executorch(
    program: ProgramSource,
    method: Optional[str] = None,
    *,
    host_only: bool = False,
    config: Optional[Any] = None,
) -> ImportedProgram:
    """Import an ExecuTorch program: its delegates, ``et_copy`` copies, buffers and devices.

    Args:
        program: an ``ExecutorchProgramManager`` (``to_edge(...).to_backend(...).to_executorch(...)``),
            an ``EdgeProgramManager`` (finished here with ``to_executorch(config)``; by
            default with non-CPU memory planning), an ``executorch.exir.schema.Program``,
            or a ``.pte`` file: its path or its bytes.
        method: the method to read (default: the only one, else ``"forward"``).
        host_only: import a program that carries no device metadata, instead of refusing it.
        config: the ``ExecutorchBackendConfig`` that finishes an ``EdgeProgramManager``.

    Raises ``ExecuTorchNotInstalled`` / ``ExecuTorchWithoutDeviceSupport`` without a
    usable executorch, ``NotAnExecuTorchProgram`` for a file that is not a ``.pte``,
    ``MissingDeviceMetadata`` for a program without device metadata, and
    ``UnsupportedProgram`` for control flow.
    """
    schema, source = schema_program(program, config)
    data = read_program(schema, method, host_only=host_only)
    dg = to_device_graph(data)
    return ImportedProgram(data, source, dg, to_memory_plan(data, dg))
