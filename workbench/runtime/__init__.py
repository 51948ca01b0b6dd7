"""The runtime: device memory, copies, execution and timelines.

- ``allocators``: ``DeviceAllocator`` (host, simulated cuda, CuPy cuda) and the registry;
  ``backend_registry``: the backend names and the allocator registry of each.
- ``device_buffers``: ``DeviceBuffer``, one allocation freed exactly once; live-byte counters.
- ``tensors``: which device a tensor is on; ``to_device``/``clone_to``/``to_host``.
- The machine a modeled time comes from (``CostModel``, parts, calibration) is
  ``workbench.machine``; the runtime reads its figures and owns none.
- ``timeline``: ``Event``, ``Timeline`` and the ``StreamScheduler`` for modeled time.
- ``workbench.node_facts`` (re-exported here): what a graph rewrite records on its own
  ops for the runtime (a copy-stream op; a row share charged by a mask).
- ``cuda``: whether CUDA can run here, and the CuPy allocator.
- ``executor``: ``run`` a plan, ``load`` it into a ``Session`` for many calls, ``estimate``
  its modeled timeline from shapes alone; ``RunResult``. Built from ``steps`` (what each
  node does, where, waiting for what), ``session``, ``call``, ``copy_router``
  (which path a copy's bytes take), ``exec_backends``, ``sim_timing`` and ``cuda_timing``.
"""

from .allocators import (
    Allocation,
    AllocatorArgumentError,
    AllocatorError,
    AllocatorRegistry,
    DeviceAllocator,
    DoubleFreeError,
    HostAllocator,
    SimDeviceAllocator,
    UnregisteredDeviceTypeError,
    UseAfterFreeError,
    find_allocation,
    live_allocations,
    live_bytes,
    live_bytes_by_device,
)
from .backend_registry import BACKENDS, UnknownBackendError, check_backend, registry_for_backend, shared_registry
from .device_buffers import DeviceBuffer
from .byte_views import typed_view
from ..kernels.cuda import CudaUnavailableError, cuda_available, cuda_unavailable_reason, default_backend
from .cupy_allocator import CupyDeviceAllocator
from .tensors import buffer_of, clone_to, device_of, stage_inputs, to_device, to_host
from .timeline import EVENT_KINDS, Event, StreamScheduler, Timeline
from .executor import ExecutorError, InputError, PrefetchStat, RunResult, Session, estimate, load, run, steps_of
from .run_result import CountedGatherStat, RoutedStat, RowMaskStat, SlotWrites
from ..node_facts import CopyStreamOp, NodeFactError, RowShare, mark_copy_stream, mark_row_share

__all__ = [
    "BACKENDS",
    "EVENT_KINDS",
    "ExecutorError",
    "InputError",
    "PrefetchStat",
    "CountedGatherStat",
    "RoutedStat",
    "RunResult",
    "RowMaskStat",
    "SlotWrites",
    "CopyStreamOp",
    "NodeFactError",
    "RowShare",
    "mark_copy_stream",
    "mark_row_share",
    "Session",
    "Allocation",
    "AllocatorArgumentError",
    "AllocatorError",
    "AllocatorRegistry",
    "CudaUnavailableError",
    "CupyDeviceAllocator",
    "DeviceAllocator",
    "DeviceBuffer",
    "DoubleFreeError",
    "Event",
    "HostAllocator",
    "SimDeviceAllocator",
    "StreamScheduler",
    "Timeline",
    "UnknownBackendError",
    "UnregisteredDeviceTypeError",
    "UseAfterFreeError",
    "buffer_of",
    "check_backend",
    "clone_to",
    "cuda_available",
    "cuda_unavailable_reason",
    "default_backend",
    "device_of",
    "estimate",
    "load",
    "find_allocation",
    "live_allocations",
    "live_bytes",
    "live_bytes_by_device",
    "registry_for_backend",
    "run",
    "shared_registry",
    "steps_of",
    "stage_inputs",
    "to_device",
    "to_host",
    "typed_view",
]
