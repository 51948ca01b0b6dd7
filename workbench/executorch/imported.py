"""``from_executorch``: an ExecuTorch program, from a lowering or a ``.pte`` file, in the workbench.

Rules:
1. Every source goes through ExecuTorch's own ``schema.Program`` and the one reader
   (``program.read_program``), so a ``.pte`` file and the lowering it was written from give
   equal ``ImportedProgram.program`` data.
2. The result is plain data; nothing in it refers back to ExecuTorch's objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from .program import ExecuTorchProgram, read_program
from .source import ProgramSource, schema_program

__all__ = ["ImportedProgram", "from_executorch"]


@dataclass(frozen=True, eq=False)
class ImportedProgram:
    """An ExecuTorch program as the workbench sees it."""

    program: ExecuTorchProgram  # the method's tensors, calls, copies and buffers
    source: str  # where it came from: a path, "bytes" or the manager's type


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
    return ImportedProgram(read_program(schema, method, host_only=host_only), source)
