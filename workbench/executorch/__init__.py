"""ExecuTorch programs in the workbench (optional dependency ``executorch``).

``from_executorch(program)`` reads a lowering (``ExecutorchProgramManager`` /
``EdgeProgramManager``) or a ``.pte`` file through ExecuTorch's own schema and
deserializer, and returns the workbench's plain data: delegate calls with their backend
and device, every ``et_copy`` with its bytes, tensors with their buffers and offsets.

- ``dependency``: the one place that imports ExecuTorch;
- ``source``: lowering or file → ExecuTorch's ``schema.Program``;
- ``reader``: ``schema.Program`` → ``ExecuTorchProgram`` (the one reader); ``program``: that
  plain data; ``errors``: what a bad program or file raises;
- ``operators``: ExecuTorch's operator names as torch operators;
- ``patterns``: what the program spends that the workbench's rules avoid;
- ``device_graph`` / ``memory``: the data as a ``DeviceGraph`` and a ``MemoryPlan``; ``ops``:
  the graph ops of calls whose work the workbench cannot see;
- ``imported``: ``from_executorch`` and its result.

This package imports without ExecuTorch; its functions import it on first use and say
how to install it when it is missing.
"""

from .dependency import (
    INSTALL_HINT,
    SUPPORTED_VERSION,
    ExecuTorchNotInstalled,
    ExecuTorchWithoutDeviceSupport,
    executorch_api,
    executorch_available,
    installed_version,
    quiet_executorch,
)
from .imported import ImportedProgram, from_executorch
from .patterns import PATTERNS, Pattern, find_patterns
from .errors import (
    ExecuTorchImportError,
    ExecuTorchImportTypeError,
    MissingDeviceMetadata,
    NotAnExecuTorchProgram,
    UnsupportedProgram,
)
from .program import ExecuTorchProgram, ProgramCall, ProgramTensor, TensorList
from .reader import read_program
from .source import schema_program

__all__ = [
    "INSTALL_HINT",
    "PATTERNS",
    "SUPPORTED_VERSION",
    "ExecuTorchImportError",
    "ExecuTorchImportTypeError",
    "ExecuTorchNotInstalled",
    "ExecuTorchProgram",
    "ExecuTorchWithoutDeviceSupport",
    "ImportedProgram",
    "MissingDeviceMetadata",
    "NotAnExecuTorchProgram",
    "Pattern",
    "ProgramCall",
    "ProgramTensor",
    "TensorList",
    "UnsupportedProgram",
    "executorch_api",
    "executorch_available",
    "find_patterns",
    "from_executorch",
    "installed_version",
    "quiet_executorch",
    "read_program",
    "schema_program",
]
