"""The errors of importing an ExecuTorch program: each says what is missing and what is valid.

A missing or too-old ``executorch`` package is ``dependency.ExecuTorchNotInstalled`` /
``ExecuTorchWithoutDeviceSupport``; everything wrong with a program or a file is here.
"""

from __future__ import annotations

from ..errors import WorkbenchError

__all__ = [
    "ExecuTorchImportError",
    "ExecuTorchImportTypeError",
    "MissingDeviceMetadata",
    "NotAnExecuTorchProgram",
    "UnsupportedProgram",
]


class ExecuTorchImportError(WorkbenchError, ValueError):
    """An ExecuTorch program the workbench cannot import; the message says what is missing."""


class MissingDeviceMetadata(ExecuTorchImportError):
    """The program carries no device placement (rule 7)."""


class UnsupportedProgram(ExecuTorchImportError):
    """The program uses something the import does not represent (control flow, an unknown device)."""


class NotAnExecuTorchProgram(ExecuTorchImportError):
    """A file or bytes that are not a serialized ExecuTorch program (``.pte``)."""


class ExecuTorchImportTypeError(WorkbenchError, TypeError):
    """``from_executorch`` was given an object that is no ExecuTorch program."""
