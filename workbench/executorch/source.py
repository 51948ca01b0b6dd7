"""Where an ExecuTorch program comes from: a lowering in memory, or a ``.pte`` file.

``schema_program`` turns every accepted source into ExecuTorch's own
``executorch.exir.schema.Program``, so one reader (``reader.read_program``) serves all.

Rules:
1. An ``ExecutorchProgramManager`` gives its ``executorch_program``; an
   ``EdgeProgramManager`` is finished first with ``to_executorch`` on a deep copy (the
   caller's object is left as it was), with non-CPU memory planning on unless a config is
   given; a ``schema.Program`` is taken as it is.
2. A path or bytes is read with ExecuTorch's own deserializer, after ExecuTorch's own
   check of the flatbuffer file identifier: nothing here parses the format.
3. Anything else is an ``ExecuTorchImportTypeError``; a file that is missing, or is not an
   ExecuTorch program, a ``NotAnExecuTorchProgram`` naming the file.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Optional, Union

from .dependency import executorch_api, quiet_executorch
from ..file_reading import read_regular_file
from .errors import ExecuTorchImportTypeError, NotAnExecuTorchProgram

__all__ = [
    "ExecuTorchImportTypeError",
    "NotAnExecuTorchProgram",
    "ProgramSource",
    "schema_program",
]

#: What ``schema_program`` accepts.
ProgramSource = Union[str, os.PathLike, bytes, bytearray, memoryview, Any]

_IDENTIFIER_BYTES = 8  # a flatbuffer's root offset and its file identifier


def schema_program(source: ProgramSource, config: Optional[Any] = None) -> tuple[Any, str]:
    """``(schema.Program, a short description of the source)`` for any accepted source."""
    et = executorch_api()
    if isinstance(source, et.ExecutorchProgramManager):
        return source.executorch_program, "ExecutorchProgramManager"
    if isinstance(source, et.EdgeProgramManager):
        config = config if config is not None else et.ExecutorchBackendConfig(enable_non_cpu_memory_planning=True)
        with quiet_executorch():
            finished = copy.deepcopy(source).to_executorch(config)
        return (
            finished.executorch_program,
            "EdgeProgramManager (finished with to_executorch)",
        )
    if isinstance(source, et.schema.Program):
        return source, "schema.Program"
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        data = read_regular_file(path, ".pte file written by ExecuTorch", NotAnExecuTorchProgram)
        return _deserialize(et, data, str(path)), str(path)
    if isinstance(source, (bytes, bytearray, memoryview)):
        return _deserialize(et, bytes(source), "the bytes given"), "bytes"
    raise ExecuTorchImportTypeError(
        "from_executorch reads an ExecutorchProgramManager or an EdgeProgramManager (from "
        "to_edge(...).to_backend(...)), an executorch.exir.schema.Program, or a .pte file (a path or "
        f"its bytes); got {type(source).__name__}"
    )


def _deserialize(et: Any, data: bytes, what: str) -> Any:
    """Rule 2."""
    if len(data) < _IDENTIFIER_BYTES or not et.has_program_identifier(data, 0):
        head = data[:_IDENTIFIER_BYTES]
        raise NotAnExecuTorchProgram(
            f"{what} is not an ExecuTorch program (.pte): it lacks the ExecuTorch flatbuffer file "
            f"identifier ({len(data)} bytes, starting {head!r}); write one with "
            "ExecutorchProgramManager.write_to_file or save its .buffer"
        )
    try:
        with quiet_executorch():
            return et.deserialize_pte_binary(data).program
    except Exception as exc:  # a truncated or corrupt file: ExecuTorch's own reader says why
        raise NotAnExecuTorchProgram(
            f"{what} has the ExecuTorch identifier but ExecuTorch's deserializer cannot read it "
            f"({type(exc).__name__}: {exc}); the file may be truncated or written by another version"
        ) from exc
