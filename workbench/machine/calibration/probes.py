"""Probes: primitive operations timed on one backend, for ``workbench.machine.calibration.calibrate``.

A probe answers in seconds per repeat. ``SimProbe`` times the simulated machine through
``SimClock`` and the executor's op costing (so its answers are the model's own);
``CudaProbe`` times a CUDA GPU and its host: copies through the CuPy copy kernels,
torch CUDA ops and CUDA graphs (``torch.cuda.CUDAGraph``), device times from CUDA events
on one stream, host times from the wall clock. Importing this module never touches the
GPU.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
import subprocess
import time
from dataclasses import replace
from typing import Any, Callable, Iterator, Optional, Protocol

import torch

from ...devices import CPU, Device
from ...kernels.copies import CopyEngine
from ..cost_model import CostModel
from ...kernels.cuda import require_cuda
from .executor_probe import executor_steps
from ...runtime.sim_timing import SimClock, copy_cost, op_step_cost
from ...runtime.steps import HOST_LANE, Step

CUDA0 = Device("cuda", 0)

__all__ = [
    "COPY_PATHS",
    "NVIDIA_SMI_QUERY",
    "TINY_ELEMENTS",
    "CudaProbe",
    "Probe",
    "SimProbe",
    "gpu_slug",
    "matmul_args",
    "meta_tensor",
    "nvidia_smi",
]

#: Copy paths measured: direction, then host memory kind (or d2d).
COPY_PATHS: tuple[str, ...] = ("h2d_pinned", "h2d_staged", "h2d_plain", "d2h_pinned", "d2h_staged", "d2h_plain", "d2d")
#: What ``nvidia-smi --query-gpu`` is asked for the machine line of a measured preset.
NVIDIA_SMI_QUERY = "name,driver_version,pcie.link.gen.current,pcie.link.width.current"
#: Elements of a tiny kernel's tensors.
TINY_ELEMENTS = 1


class Probe(Protocol):
    """Times primitives on one backend; every method returns seconds per repeat."""

    backend: str

    def copy(self, path: str, nbytes: int, repeats: int) -> tuple[float, ...]: ...
    def launches(self, n: int, repeats: int) -> tuple[float, ...]: ...
    def graph_launch(self, kernels: int, repeats: int) -> tuple[float, ...]: ...
    def graph_chain(self, kernels: int, nbytes: int, repeats: int) -> tuple[float, ...]: ...
    def copy_kernel(self, nbytes: int, repeats: int) -> tuple[float, ...]: ...
    def matmul(self, dtype: torch.dtype, n: int, repeats: int) -> Optional[tuple[float, ...]]: ...
    def host_op(self, repeats: int) -> tuple[float, ...]: ...
    def executor_steps(self, n: int, repeats: int) -> tuple[int, tuple[float, ...]]: ...
    def host_copy(self, nbytes: int, repeats: int) -> tuple[float, ...]: ...
    def host_matmul(self, n: int, repeats: int) -> tuple[float, ...]: ...
    def machine(self) -> dict[str, Any]: ...
    def name(self) -> str: ...


def meta_tensor(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def matmul_args(n: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    return meta_tensor(n, n, dtype=dtype), meta_tensor(n, n, dtype=dtype)


class SimProbe:
    """The simulated machine, timed through ``SimClock`` and ``op_step_cost``: each answer
    is what the sim executor would record for that primitive."""

    backend = "sim"

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self._aten = torch.ops.aten

    def _clock(self, mode: str) -> SimClock:
        """A clock of the bare machine: primitives are timed without the executor's own
        per-step work, which only ``executor_steps`` sees."""
        return SimClock(replace(self.model, executor_overhead=0.0).with_launch_mode(mode))

    def _kernel(self, index: int, target: Any, args: tuple, device: str = "cuda:0") -> tuple[Step, Callable]:
        """A compute (or host) step running ``target(*args)`` and its cost, as the executor costs it."""
        where = Device.parse(device)
        step = Step(
            index=index, name=f"k{index}", op="call_function", device=where, event="host" if where.is_host else "compute",
            lane=HOST_LANE if where.is_host else (where, "compute"), deps=(), reuse_deps=(),
        )  # fmt: skip
        out = target(*args)
        return step, lambda: op_step_cost(self.model, step, target, args, {}, out)

    def _tiny(self, index: int) -> tuple[Step, Callable]:
        return self._kernel(index, self._aten.add.Tensor, (meta_tensor(TINY_ELEMENTS), meta_tensor(TINY_ELEMENTS)))

    def _copy_kernel(self, index: int, nbytes: int, device: str = "cuda:0") -> tuple[Step, Callable]:
        return self._kernel(index, self._aten.clone.default, (meta_tensor(nbytes, dtype=torch.uint8),), device)

    def _one(self, step: Step, cost: Callable, mode: str = "eager") -> float:
        clock = self._clock(mode)
        event = clock.add(step, cost)
        return event.duration_us * 1e-6

    def copy(self, path: str, nbytes: int, repeats: int) -> tuple[float, ...]:
        kind, memory = path.partition("_")[::2]
        src, dst = {"h2d": (CPU, CUDA0), "d2h": (CUDA0, CPU), "d2d": (CUDA0, CUDA0)}[kind]
        lane = (dst if kind != "d2h" else src, "copy")
        step = Step(
            index=0, name=path, op="call_function", device=dst, event=kind, lane=lane, deps=(), reuse_deps=(),
            src=src, dst=dst, pinned=memory in ("pinned", ""),
        )  # fmt: skip
        return (self._one(step, lambda: copy_cost(self.model, step, nbytes)),) * repeats

    def launches(self, n: int, repeats: int) -> tuple[float, ...]:
        clock = self._clock("eager")
        for i in range(n):
            clock.add(*self._tiny(i))
        return (clock.host_us * 1e-6,) * repeats

    def graph_launch(self, kernels: int, repeats: int) -> tuple[float, ...]:
        clock = self._clock("graph")
        for i in range(kernels):
            clock.add(*self._tiny(i))
        return (clock.host_us * 1e-6,) * repeats

    def graph_chain(self, kernels: int, nbytes: int, repeats: int) -> tuple[float, ...]:
        clock = self._clock("graph")
        for i in range(kernels):
            clock.add(*(self._copy_kernel(i, nbytes) if nbytes else self._tiny(i)))
        events = clock.timeline().events
        return ((max(e.end_us for e in events) - min(e.start_us for e in events)) * 1e-6,) * repeats

    def copy_kernel(self, nbytes: int, repeats: int) -> tuple[float, ...]:
        return (self._one(*self._copy_kernel(0, nbytes)),) * repeats

    def matmul(self, dtype: torch.dtype, n: int, repeats: int) -> Optional[tuple[float, ...]]:
        return (self._one(*self._kernel(0, self._aten.mm.default, matmul_args(n, dtype))),) * repeats

    def host_op(self, repeats: int) -> tuple[float, ...]:
        step, cost = self._kernel(0, self._aten.add.Tensor, (meta_tensor(TINY_ELEMENTS), meta_tensor(TINY_ELEMENTS)), "cpu")
        return (self._one(step, cost),) * repeats

    def host_copy(self, nbytes: int, repeats: int) -> tuple[float, ...]:
        return (self._one(*self._copy_kernel(0, nbytes, "cpu")),) * repeats

    def host_matmul(self, n: int, repeats: int) -> tuple[float, ...]:
        return (self._one(*self._kernel(0, self._aten.mm.default, matmul_args(n, torch.float32), "cpu")),) * repeats

    def executor_steps(self, n: int, repeats: int) -> tuple[int, tuple[float, ...]]:
        return executor_steps("sim", n, repeats, self.model.with_launch_mode("eager"))

    def machine(self) -> dict[str, Any]:
        return {"simulated": self.model.name, "torch": torch.__version__}

    def name(self) -> str:
        return "sim"


@contextlib.contextmanager
def _ieee_fp32() -> Iterator[str]:
    """fp32 matmuls without TF32 for the block; yields the setting used."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        old = matmul.fp32_precision
        matmul.fp32_precision = "ieee"
        try:
            yield "ieee"
        finally:
            matmul.fp32_precision = old
    else:  # torch before the fp32_precision setting
        old_flag = matmul.allow_tf32
        matmul.allow_tf32 = False
        try:
            yield "allow_tf32=False"
        finally:
            matmul.allow_tf32 = old_flag


class CudaProbe:
    """One CUDA GPU and its host (torch CUDA ops, CUDA graphs through ``torch.cuda``,
    the CuPy copy kernels); device times from CUDA events on one stream."""

    backend = "cuda"

    def __init__(self, device_index: int = 0) -> None:
        require_cuda("calibrate(backend='cuda')")
        import cupy

        self.cp = cupy
        self.index = device_index
        self.device = torch.device("cuda", device_index)
        self.stream = torch.cuda.Stream(device=self.device)
        self.engine = CopyEngine(device_index)
        self._graphs: list[Any] = []  # keep captured graphs (and their memory) alive

    # -- timing ----------------------------------------------------------------------------
    def _device_seconds(self, fn: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[float, ...]:
        """Seconds between CUDA events recorded around ``fn`` on the probe's stream."""
        s = self.stream
        out = []
        with torch.cuda.device(self.device), torch.cuda.stream(s):
            for _ in range(warmup):
                fn()
            s.synchronize()
            for _ in range(repeats):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record(s)
                fn()
                end.record(s)
                end.synchronize()
                out.append(start.elapsed_time(end) * 1e-3)
        return tuple(out)

    def _host_seconds(self, fn: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[float, ...]:
        """Host wall seconds of issuing ``fn`` with the device idle before each repeat."""
        s = self.stream
        out = []
        with torch.cuda.device(self.device), torch.cuda.stream(s):
            for _ in range(warmup):
                fn()
            for _ in range(repeats):
                s.synchronize()
                t0 = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t0)
            s.synchronize()
        return tuple(out)

    # -- probes ----------------------------------------------------------------------------
    def copy(self, path: str, nbytes: int, repeats: int) -> tuple[float, ...]:
        rt = self.cp.cuda.runtime
        kind, memory = path.partition("_")[::2]
        dev = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        s = self.stream
        if kind == "d2d":
            other = torch.empty_like(dev)
            return self._device_seconds(lambda: self.engine.d2d(other.data_ptr(), dev.data_ptr(), nbytes, s), repeats)
        host = torch.ones(nbytes, dtype=torch.uint8)  # touched: no first-use page faults
        if memory == "pinned":
            host = host.pin_memory()
        ops: dict[str, Callable[[], Any]] = {
            "h2d_pinned": lambda: self.engine.h2d_pinned(dev.data_ptr(), host.data_ptr(), nbytes, s),
            "h2d_staged": lambda: self.engine.h2d_pageable(dev.data_ptr(), host, s),
            "h2d_plain": lambda: rt.memcpyAsync(dev.data_ptr(), host.data_ptr(), nbytes, rt.memcpyHostToDevice, s.cuda_stream),
            "d2h_pinned": lambda: self.engine.d2h_pinned(host.data_ptr(), dev.data_ptr(), nbytes, s),
            "d2h_staged": lambda: self.engine.d2h_pageable(host, dev.data_ptr(), s),
            "d2h_plain": lambda: rt.memcpyAsync(host.data_ptr(), dev.data_ptr(), nbytes, rt.memcpyDeviceToHost, s.cuda_stream),
        }  # fmt: skip
        return self._device_seconds(ops[path], repeats)

    def _tiny_op(self) -> Callable[[], Any]:
        a = torch.zeros(TINY_ELEMENTS, device=self.device)
        b = torch.empty_like(a)
        return lambda: torch.add(a, 1, out=b)

    def _copy_op(self, nbytes: int) -> Callable[[], Any]:
        """A kernel reading ``nbytes`` and writing ``nbytes`` (an elementwise add: a plain
        ``copy_`` would become a memcpy, not a kernel)."""
        src = torch.ones(nbytes, dtype=torch.uint8, device=self.device)
        dst = torch.empty_like(src)
        return lambda: torch.add(src, 1, out=dst)

    def _capture(self, op: Callable[[], Any], kernels: int) -> Any:
        """A CUDA graph of ``kernels`` launches of ``op`` (warmed up on a side stream first)."""
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(3):
                op()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(kernels):
                op()
        self._graphs.append(graph)
        return graph

    def launches(self, n: int, repeats: int) -> tuple[float, ...]:
        op = self._tiny_op()

        def issue() -> None:
            for _ in range(n):
                op()

        return self._host_seconds(issue, repeats)

    def graph_launch(self, kernels: int, repeats: int) -> tuple[float, ...]:
        with torch.cuda.device(self.device):
            graph = self._capture(self._tiny_op(), kernels)
        return self._host_seconds(graph.replay, repeats)

    def graph_chain(self, kernels: int, nbytes: int, repeats: int) -> tuple[float, ...]:
        with torch.cuda.device(self.device):
            graph = self._capture(self._copy_op(nbytes) if nbytes else self._tiny_op(), kernels)
        return self._device_seconds(graph.replay, repeats)

    def copy_kernel(self, nbytes: int, repeats: int) -> tuple[float, ...]:
        return self._device_seconds(self._copy_op(nbytes), repeats)

    def matmul(self, dtype: torch.dtype, n: int, repeats: int) -> Optional[tuple[float, ...]]:
        gen = torch.Generator(device=self.device).manual_seed(0)
        if dtype.itemsize == 1:  # fp8: a scaled matmul where the GPU has fp8 units
            if not hasattr(torch, "_scaled_mm") or torch.cuda.get_device_capability(self.device) < (8, 9):
                return None
            a = torch.randn(n, n, device=self.device, generator=gen).to(dtype)
            b = torch.randn(n, n, device=self.device, generator=gen).to(dtype).t()  # column-major
            one = torch.ones((), device=self.device)

            def op() -> Any:
                return torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

            try:
                op()
            except (RuntimeError, TypeError):  # no fp8 kernel for this GPU or build
                return None
            return self._device_seconds(op, repeats)
        a = torch.randn(n, n, device=self.device, generator=gen).to(dtype)
        b = torch.randn(n, n, device=self.device, generator=gen).to(dtype)
        out = torch.empty(n, n, dtype=dtype, device=self.device)
        with _ieee_fp32():
            return self._device_seconds(lambda: torch.mm(a, b, out=out), repeats)

    def executor_steps(self, n: int, repeats: int) -> tuple[int, tuple[float, ...]]:
        with torch.cuda.device(self.device):
            return executor_steps("cuda", n, repeats, device=str(self.device))

    def host_op(self, repeats: int) -> tuple[float, ...]:
        a, b, n = torch.zeros(TINY_ELEMENTS), torch.empty(TINY_ELEMENTS), 1000
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(n):
                torch.add(a, 1, out=b)
            times.append((time.perf_counter() - t0) / n)
        return tuple(times)

    def host_copy(self, nbytes: int, repeats: int) -> tuple[float, ...]:
        src, dst = torch.ones(nbytes, dtype=torch.uint8), torch.ones(nbytes, dtype=torch.uint8)
        return _wall(lambda: dst.copy_(src), repeats)

    def host_matmul(self, n: int, repeats: int) -> tuple[float, ...]:
        gen = torch.Generator().manual_seed(0)
        a, b, out = torch.randn(n, n, generator=gen), torch.randn(n, n, generator=gen), torch.empty(n, n)
        return _wall(lambda: torch.mm(a, b, out=out), repeats)

    def machine(self) -> dict[str, Any]:
        rt = self.cp.cuda.runtime
        props = torch.cuda.get_device_properties(self.device)
        info: dict[str, Any] = {
            "gpu": props.name,
            "gpu_memory_bytes": int(props.total_memory),
            "multiprocessors": int(props.multi_processor_count),
            "compute_capability": f"{props.major}.{props.minor}",
            "gpus": torch.cuda.device_count(),
            "cuda_runtime": _cuda_version(rt.runtimeGetVersion()),
            "cuda_driver": _cuda_version(rt.driverGetVersion()),
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "cupy": self.cp.__version__,
            "host_cpus": os.cpu_count(),
            "host_machine": platform.machine(),
            "torch_threads": torch.get_num_threads(),
        }
        info.update(nvidia_smi())
        info.update(nvidia_smi("pcie.link.gen.max,pcie.link.width.max,memory.total", prefix="nvidia_smi_max"))
        return info

    def name(self) -> str:
        return gpu_slug(torch.cuda.get_device_properties(self.device).name)


def _wall(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> tuple[float, ...]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return tuple(times)


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def gpu_slug(gpu_name: str) -> str:
    """``"NVIDIA H200"`` → ``"h200"``; ``"NVIDIA A100-SXM4-80GB"`` → ``"a100_sxm4_80gb"``."""
    name = re.sub(r"^nvidia\s+", "", gpu_name.strip().lower())
    return re.sub(r"[^a-z0-9]+", "_", name).strip("_") or "gpu"


def nvidia_smi(query: str = NVIDIA_SMI_QUERY, prefix: str = "nvidia_smi") -> dict[str, Any]:
    """What ``nvidia-smi --query-gpu=<query> --format=csv`` reports: its output verbatim
    (``<prefix>_csv``) and the first GPU's fields by name (``<prefix>.<field>``), or
    ``<prefix>_error`` saying why it could not run."""
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {f"{prefix}_error": f"{type(exc).__name__}: {exc}"}
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or len(lines) < 2:
        return {f"{prefix}_error": f"exit {done.returncode}: {' '.join((done.stdout + done.stderr).split())[:300]}"}
    values = [v.strip() for v in lines[1].split(",")]
    return {
        f"{prefix}_query": query,
        f"{prefix}_csv": "\n".join(lines),
        **{f"{prefix}.{k}": v for k, v in zip(query.split(","), values)},
    }
