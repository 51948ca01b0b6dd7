"""Whether the real ``cuda`` backend can run here, and the CuPy handles it needs.

Rules:

1. Importing this module never touches the GPU, and neither does importing CuPy.
2. ``cuda_available()`` asks the CUDA runtime how many devices there are and whether
   torch was built with CUDA; it creates no stream, event or context-bound object, prints
   nothing, and caches its answer for the process.
3. Setting the environment variable ``WORKBENCH_DISABLE_CUDA=1`` makes CUDA unavailable
   (to run the simulator on a GPU machine, or to test the fallback).
4. Everything that needs the GPU checks availability first and raises
   ``CudaUnavailableError`` with the one-line reason otherwise.
"""

from __future__ import annotations

import functools
import os
import warnings
from typing import Any

import torch
import numpy as np

from ..errors import ArgumentTypeError, WorkbenchError

DISABLE_ENV = "WORKBENCH_DISABLE_CUDA"


class CudaUnavailableError(WorkbenchError, RuntimeError):
    """The ``cuda`` backend was asked for on a machine where it cannot run."""


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str, int]:
    """(usable, reason if not, device count). Runs once per process (rule 2)."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a broken CUDA library underneath
        return False, f"CuPy cannot be imported ({type(exc).__name__}: {_one_line(exc)})", 0
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError without a driver or device
        return False, f"the CUDA runtime finds no usable GPU ({_one_line(exc)})", 0
    if count < 1:
        return False, "the CUDA runtime reports 0 GPUs", 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns on stderr when its CUDA init fails
        torch_ok = torch.cuda.is_available()
    if not torch_ok:
        return (
            False,
            f"CuPy sees {count} GPU(s) but torch {torch.__version__} cannot use CUDA "
            "(a CPU-only build, or a CUDA version the driver does not support)",
            count,
        )
    return True, "", count


def cuda_available() -> bool:
    """True when the ``cuda`` backend can run here (CuPy and torch both see a GPU)."""
    if os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
        return False
    return _probe()[0]


def cuda_unavailable_reason() -> str:
    """Why ``cuda`` cannot run, in one line ("" when it can)."""
    if os.environ.get(DISABLE_ENV, "").strip() not in ("", "0"):
        return f"CUDA is unavailable: disabled by {DISABLE_ENV}={os.environ[DISABLE_ENV]}"
    ok, reason, _ = _probe()
    return "" if ok else f"CUDA is unavailable: {reason}"


def default_backend() -> str:
    """``"cuda"`` where a GPU is usable, else ``"sim"``."""
    return "cuda" if cuda_available() else "sim"


def require_cuda(what: str) -> None:
    """Raise ``CudaUnavailableError`` naming ``what`` needed CUDA, unless it is available."""
    if not cuda_available():
        raise CudaUnavailableError(f"{what} needs a CUDA GPU. {cuda_unavailable_reason()}")


def device_count() -> int:
    """GPUs CUDA can use here (0 when unavailable)."""
    return _probe()[2] if cuda_available() else 0


def cupy_module() -> Any:
    """The ``cupy`` module, after checking that CUDA is available (rule 4)."""
    require_cuda("this operation")
    import cupy

    return cupy


def pinned_host_tensor(nbytes: int) -> torch.Tensor:
    """A flat uint8 CPU tensor in page-locked host memory (mapped into the device's
    address space on 64-bit systems with unified addressing)."""
    cp = cupy_module()
    memory = cp.cuda.alloc_pinned_memory(nbytes)
    # numpy keeps `memory` alive as the array's base, torch keeps the array alive.
    return torch.from_numpy(np.frombuffer(memory, dtype=np.uint8, count=nbytes))


def stream_ptr(stream: Any) -> int:
    """The raw ``cudaStream_t`` of a CuPy stream, a torch CUDA stream or an int (None: current)."""
    if stream is None:
        return int(cupy_module().cuda.get_current_stream().ptr)
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("ptr", "cuda_stream"):  # CuPy, then torch
        if hasattr(stream, attr):
            return int(getattr(stream, attr))
    raise ArgumentTypeError(
        f"a stream is a cupy.cuda.Stream, a torch.cuda.Stream, a raw stream int or None, "
        f"not {type(stream).__name__}"
    )
