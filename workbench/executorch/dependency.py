"""The optional ``executorch`` package: one place that imports it, and the error without it.

Everything in the workbench that touches ExecuTorch gets its names from
``executorch_api()``, so a missing or too-old package is reported the same way
everywhere, with the command that installs the supported version.

Rules:
1. ``executorch`` is imported on first use, never at module import: the workbench
   imports and runs without it.
2. A missing package, or one whose compiler lacks a name the workbench needs, raises
   ``ExecuTorchNotInstalled`` (a ``WorkbenchError`` and an ``ImportError``) naming what
   failed to import and how to install the supported version.
3. The noise ExecuTorch prints while importing (optional native kernels missing on a
   CPU-only machine, deprecation notices) is silenced; nothing else is.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import logging
import types
import warnings
from typing import Any, Iterator, Sequence

from ..errors import WorkbenchError

__all__ = [
    "INSTALL_HINT",
    "SUPPORTED_VERSION",
    "ExecuTorchNotInstalled",
    "ExecuTorchWithoutDeviceSupport",
    "executorch_api",
    "executorch_available",
    "installed_version",
    "quiet_executorch",
]

#: The ExecuTorch release the workbench is built and tested against.
SUPPORTED_VERSION = "1.5.1"
INSTALL_HINT = f"pip install executorch=={SUPPORTED_VERSION}"

# The demo backend that lowers any subgraph; a test-tree path, so the likeliest to move
# between ExecuTorch versions.
DEMO_BACKEND_MODULE = "executorch.exir.backend.test.demos.rpc.executor_backend_preprocess"

# Loggers that report optional native kernels missing on a CPU-only machine and a torch
# deprecation while ExecuTorch imports: noise around the workbench's results, never part of them.
_NOISY_LOGGERS = ("torchao", "torch.utils._pytree")


class ExecuTorchNotInstalled(WorkbenchError, ImportError):
    """The optional ``executorch`` package is not importable."""


class ExecuTorchWithoutDeviceSupport(ExecuTorchNotInstalled):
    """The installed ``executorch`` predates device support (no device propagation, no
    per-device memory planning, no buffer device metadata in its program schema)."""


@contextlib.contextmanager
def quiet_executorch(loggers: Sequence[str] = ()) -> Iterator[None]:
    """Ignore warnings, and log only errors on the loggers named, inside the block."""
    handles = [logging.getLogger(name) for name in loggers]
    levels = [handle.level for handle in handles]
    for handle in handles:
        handle.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for handle, level in zip(handles, levels):
            handle.setLevel(level)


@functools.cache
def executorch_api() -> Any:
    """The ExecuTorch names the workbench uses, imported once, on first use (rule 1).

    Raises ``ExecuTorchNotInstalled`` without the package, and
    ``ExecuTorchWithoutDeviceSupport`` when it lacks the device names (rule 2).
    """
    try:
        with quiet_executorch(_NOISY_LOGGERS):
            import executorch.exir  # noqa: F401 - the first import is where the noise is

        from executorch.exir import (
            EdgeCompileConfig,
            EdgeProgramManager,
            ExecutorchBackendConfig,
            ExecutorchProgramManager,
            memory,
            schema,
            to_edge,
        )
        from executorch.exir._serialize._program import deserialize_pte_binary
        from executorch.exir._serialize.generated.executorch_flatbuffer.Program import (
            Program as FlatbufferProgram,
        )
        from executorch.exir.backend.compile_spec_schema import CompileSpec
        from executorch.exir.backend.partitioner import (
            DelegationSpec,
            Partitioner,
            PartitionResult,
        )
        from executorch.exir.delegate import executorch_call_delegate
        from executorch.exir.memory_planning import get_node_tensor_specs
        from executorch.exir.passes import MemoryPlanningPass
        from executorch.exir.tensor import get_scalar_type

        backend = importlib.import_module(DEMO_BACKEND_MODULE).ExecutorBackend
    except ImportError as exc:
        raise ExecuTorchNotInstalled(
            f"this needs the optional package executorch ({type(exc).__name__}: {exc}); install it with: {INSTALL_HINT}"
        ) from exc
    propagate_config = _device_support(ExecutorchBackendConfig, schema)
    return types.SimpleNamespace(
        EdgeCompileConfig=EdgeCompileConfig,
        EdgeProgramManager=EdgeProgramManager,
        ExecutorchBackendConfig=ExecutorchBackendConfig,
        ExecutorchProgramManager=ExecutorchProgramManager,
        to_edge=to_edge,
        schema=schema,
        deserialize_pte_binary=deserialize_pte_binary,
        has_program_identifier=FlatbufferProgram.ProgramBufferHasIdentifier,
        get_scalar_type=get_scalar_type,
        CompileSpec=CompileSpec,
        DelegationSpec=DelegationSpec,
        Partitioner=Partitioner,
        PartitionResult=PartitionResult,
        MemoryPlanningPass=MemoryPlanningPass,
        PropagateDeviceConfig=propagate_config,
        ExecutorBackend=backend,
        alloc=memory.alloc,
        view=memory.view,
        call_delegate=executorch_call_delegate,
        tensor_specs=get_node_tensor_specs,
    )


def _device_support(backend_config: type, schema: types.ModuleType) -> type:
    """``PropagateDeviceConfig``, after checking every device name the workbench reads."""
    missing = []
    try:
        from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig
    except ImportError:
        PropagateDeviceConfig = None
        missing.append("executorch.exir.passes.propagate_device_config.PropagateDeviceConfig")
    fields = {f.name for f in dataclasses.fields(backend_config)}
    missing += [
        f"ExecutorchBackendConfig.{name}"
        for name in ("enable_non_cpu_memory_planning", "propagate_device_config")
        if name not in fields
    ]
    if not hasattr(schema, "NonConstBufferDevice"):
        missing.append("executorch.exir.schema.NonConstBufferDevice")
    if missing:
        raise ExecuTorchWithoutDeviceSupport(
            f"the installed executorch {installed_version()} has no device support: "
            f"{', '.join(missing)} missing; the workbench reads ExecuTorch's device placement "
            f"from version {SUPPORTED_VERSION}: {INSTALL_HINT}"
        )
    return PropagateDeviceConfig


def installed_version() -> str:
    """The installed ExecuTorch version string, or ``"(unknown version)"``."""
    try:
        from executorch.version import __version__
    except ImportError:
        return "(unknown version)"
    return str(__version__)


def executorch_available() -> bool:
    """True when ``executorch`` (with the compiler names the workbench uses) can be imported."""
    try:
        executorch_api()
    except ExecuTorchNotInstalled:
        return False
    return True
