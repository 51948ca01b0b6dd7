"""How the executor touches memory and time on each backend.

The executor (``session``) is written once; what differs between the simulator and the
real GPU lives here, behind the same small surface:

- ``arena(device, buffer)``: the flat uint8 tensor over an arena (sim: a CPU view of a
  sim allocation; cuda: a CUDA tensor over CuPy memory via DLPack, zero-copy).
- ``compute(device)``: the context device ops run in (cuda: that device's compute stream).
- ``calling()``: the context a whole call runs in (cuda: the first device's compute
  stream is made current once, so ``compute`` for that device costs nothing per op).
- ``copy_stream_context(device)``: the context a copy-stream op runs in (cuda: that
  device's copy stream, so it is ordered with the copies).
- ``copy_stream(device)``: the stream copies on that lane are issued on (sim: None).
- ``patch_kwargs``: factory ops of device steps allocate on the device they run on.
- ``device_of``, ``as_tensor``: what a caller's tensor is and where it lives.
- ``torch_copy``: a torch copy on a lane's stream; ``engine(index)`` (cuda): the copy
  kernels of a device. The copy variants' handlers (``copy_variants``) move rows with them.
- ``clock()``: modeled time (sim) or CUDA events (cuda).

Rules:
1. Device ops on ``sim`` run as CPU torch ops on sim device memory (host memory in
   separate allocations); on ``cuda`` as CUDA torch ops on the device's compute stream.
2. A torch fallback copy (strided source, memory from outside the workbench) runs on the
   lane's copy stream, like the kernel path, so stream ordering is the same.
3. While a graph segment is captured (``capturing``, ``graph_replay``), the copy stream
   of a device is its compute stream: the capture holds one stream.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterable, Iterator, Optional, Union

import torch

from ..devices import Device
from ..errors import ArgumentTypeError
from ..kernels.copies import CopyEngine
from .allocators import AllocatorRegistry
from ..machine.cost_model import CostModel
from .cuda_timing import CudaClock, CudaStreams
from .cupy_allocator import CupyDeviceAllocator
from .sim_timing import CostFn, SimClock
from .steps import Step
from .tensors import is_cupy_array, device_of
from .timeline import Timeline

__all__ = ["CudaExecBackend", "SimExecBackend", "make_exec_backend"]


class _SimRunClock:
    """Modeled time for one call (the run-time face of ``SimClock``)."""

    def __init__(self, model: CostModel, uncaptured: frozenset[str] = frozenset()) -> None:
        self._clock = SimClock(model, uncaptured)
        self._slot_copies: dict[str, int] = {}  # step → bytes copied into its slot after the op

    def begin(self) -> None:
        pass

    def before(self, step: Step) -> None:
        pass

    def split(self, step: Step, nbytes: int) -> None:
        """The op of ``step`` is done; what follows until ``after`` copies ``nbytes`` into its slot."""
        self._slot_copies[step.name] = int(nbytes)

    def after(self, step: Step, cost: CostFn, nbytes: Union[int, Callable[[], int]]) -> None:
        self._clock.add(step, cost)
        copied = self._slot_copies.pop(step.name, None)
        if copied is not None:
            self._clock.add_slot_copy(step, copied)

    def finish(self) -> Timeline:
        return self._clock.timeline()


class _ExecBackend:
    """What both backends do alike."""

    name: str

    def device_of(self, t: Any) -> Device:
        return device_of(t, self.name)

    def new_host(self, shape, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype)


class SimExecBackend(_ExecBackend):
    """The simulated accelerator (rule 1)."""

    name = "sim"

    def __init__(self, cost_model: CostModel, uncaptured: frozenset[str] = frozenset()) -> None:
        self.cost_model = cost_model
        self.uncaptured = uncaptured  # steps graph launch issues on their own (``graph_segments``)

    def arena(self, device: Device, buffer: Any) -> torch.Tensor:
        return buffer.view() if buffer is not None else torch.empty(0, dtype=torch.uint8)

    def compute(self, device: Device) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def calling(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def copy_stream_context(self, device: Device) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def copy_stream(self, device: Device) -> Optional[Any]:
        return None

    def patch_kwargs(self, kwargs: dict, device: Device) -> dict:
        return kwargs  # sim device memory is host memory: cpu factories are right

    def as_tensor(self, x: Any) -> Any:
        return x

    def torch_copy(self, dst: torch.Tensor, src: torch.Tensor, stream: Any) -> None:
        dst.copy_(src)

    def clock(self) -> _SimRunClock:
        return _SimRunClock(self.cost_model, self.uncaptured)

    def synchronize(self) -> None:
        pass


class CudaExecBackend(_ExecBackend):
    """The real GPU through CuPy memory and torch CUDA streams (rule 1)."""

    name = "cuda"

    def __init__(self, registry: AllocatorRegistry, indices: Iterable[int]) -> None:
        self.registry = registry
        self.streams = CudaStreams(indices)
        self._current: Optional[int] = None  # the device whose compute stream ``calling`` made current
        # A graph segment is being captured: every operation goes on the compute stream (rule 3).
        self.capturing = False

    def arena(self, device: Device, buffer: Any) -> torch.Tensor:
        if buffer is not None:
            return buffer.view()
        return torch.empty(0, dtype=torch.uint8, device="cpu" if device.is_host else f"cuda:{device.index}")

    def compute(self, device: Device) -> contextlib.AbstractContextManager:
        if device.is_host or device.index == self._current:
            return contextlib.nullcontext()
        return self._on_compute_stream(device.index)

    @contextlib.contextmanager
    def calling(self) -> Iterator[None]:
        """The first device's compute stream current for the whole call: a device op then
        switches no device and no stream (each a runtime call) on its way in and out."""
        index = self.streams.indices[0]
        with self._on_compute_stream(index):
            self._current = index
            try:
                yield
            finally:
                self._current = None

    def _on_stream(self, index: int, stream: Any) -> contextlib.ExitStack:
        """``cuda:<index>`` and ``stream`` (one of its streams) current."""
        stack = contextlib.ExitStack()
        stack.enter_context(torch.cuda.device(index))
        stack.enter_context(torch.cuda.stream(stream))
        return stack

    def _on_compute_stream(self, index: int) -> contextlib.ExitStack:
        return self._on_stream(index, self.streams.compute(index))

    def copy_stream_context(self, device: Device) -> contextlib.AbstractContextManager:
        if self.capturing:
            return contextlib.nullcontext()
        return self._on_stream(device.index, self.streams.copy(device.index))

    def copy_stream(self, device: Device) -> Optional[Any]:
        if self.capturing:
            return self.streams.compute(device.index)
        return self.streams.copy(device.index)

    def patch_kwargs(self, kwargs: dict, device: Device) -> dict:
        value = kwargs.get("device")
        if value is None or device.is_host:
            return kwargs
        if torch.device(value).type == "cpu":
            return dict(kwargs, device=torch.device("cuda", device.index))
        return kwargs

    def as_tensor(self, x: Any) -> Any:
        return torch.from_dlpack(x) if is_cupy_array(x) else x

    def torch_copy(self, dst: torch.Tensor, src: torch.Tensor, stream: Any) -> None:
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)

    def engine(self, index: int) -> CopyEngine:
        """The copy engine of ``cuda:<index>`` (its gather kernels)."""
        allocator = self.registry.get("cuda")
        if not isinstance(allocator, CupyDeviceAllocator):
            raise ArgumentTypeError(f"the cuda backend needs the CuPy allocator for cuda, got {type(allocator).__name__}")
        return allocator.engine(index)

    def clock(self) -> CudaClock:
        return CudaClock(self.streams)

    def synchronize(self) -> None:
        self.streams.synchronize()


def make_exec_backend(
    name: str, registry: AllocatorRegistry, cost_model: CostModel, devices: Iterable[Device],
    uncaptured: frozenset[str] = frozenset(),
) -> Union[SimExecBackend, CudaExecBackend]:
    """The executor backend for ``name`` ("sim" or "cuda") serving ``devices``;
    ``uncaptured``: the steps graph launch issues on their own (``graph_segments``)."""
    if name == "sim":
        return SimExecBackend(cost_model, uncaptured)
    indices = sorted({d.index for d in devices if not d.is_host})
    return CudaExecBackend(registry, indices or [0])
