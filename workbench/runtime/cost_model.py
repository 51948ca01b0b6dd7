"""The cost model: how long a copy or an op takes on the simulated machine.

Rules:

1. A copy of N bytes takes ``latency + N / bandwidth`` for its direction (h2d, d2h, d2d);
   from or to pageable host memory the bandwidth is multiplied by ``pageable_factor``.
2. An op takes ``launch overhead + max(FLOPs / peak FLOP/s, bytes touched / memory
   bandwidth)`` on its device (the roofline), with the peak for the op's dtype class.
3. FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode``, never by hand;
   bytes touched are the bytes of the tensors an op reads plus those it writes.
4. Everything is deterministic: same inputs, same numbers, on every machine.
5. A reuse copy (``gather_h2d_reuse_copy``: rows a prefetch already holds are copied on
   the device, the rest come over the link) is one launch doing both at once: it takes
   ``h2d latency + max(link bytes / h2d bandwidth, 2 × device bytes / device memory
   bandwidth)``. Shape-only estimates do not know which rows the prefetch holds; they
   charge ``(1 - prefetch_hit_rate)`` of the rows to the link. ``prefetch_hit_rate``
   defaults to 0.0, the pessimistic bound: every row crosses, as if nothing was prefetched.

Figures in the presets are published datasheet peaks or typical achieved rates, as each
comment says; they are leads for modeling, not measurements of this machine.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, NamedTuple

import torch
from torch.utils._pytree import tree_flatten, tree_map
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils.flop_counter import FlopCounterMode

from ..devices import CopyKind, Device, DeviceLike
from ..copy_ops import SELECT_ROWS
from ..errors import WorkbenchWarning

DTYPE_CLASSES: tuple[str, ...] = ("fp64", "fp32", "bf16", "fp8")


class CostModelWarning(WorkbenchWarning):
    """An op's cost could not be counted exactly (it had no meta kernel)."""


# Link presets: the host↔device link, and the device↔device path of that system.
_LINKS: dict[str, dict[str, float]] = {
    # PCIe Gen4 x16: 32 GB/s raw, ~25 GB/s achieved per direction with pinned memory.
    "pcie_gen4": dict(
        h2d_bandwidth=25e9, d2h_bandwidth=25e9, d2d_bandwidth=25e9,
        h2d_latency=10e-6, d2h_latency=10e-6, d2d_latency=10e-6, pageable_factor=0.5,
    ),
    # PCIe Gen5 x16: 64 GB/s raw, ~50 GB/s achieved per direction.
    "pcie_gen5": dict(
        h2d_bandwidth=50e9, d2h_bandwidth=50e9, d2d_bandwidth=50e9,
        h2d_latency=8e-6, d2h_latency=8e-6, d2d_latency=8e-6, pageable_factor=0.5,
    ),
    # NVLink-C2C (Grace Hopper): 900 GB/s total, 450 GB/s per direction; d2d over NVLink 4.
    "nvlink_c2c": dict(
        h2d_bandwidth=450e9, d2h_bandwidth=450e9, d2d_bandwidth=450e9,
        h2d_latency=4e-6, d2h_latency=4e-6, d2d_latency=4e-6, pageable_factor=0.5,
    ),
}

# Device presets. Latencies above and launch overheads here are estimates of the fixed
# cost of one CUDA API call plus its setup (a few microseconds), not measurements.
_DEVICES: dict[str, dict[str, float]] = {
    # NVIDIA H200 SXM datasheet peaks (dense): fp64 tensor 67 TFLOP/s, fp32 67,
    # bf16/fp16 989 (989.5), fp8 1979; HBM3e 4.8 TB/s.
    "h200": dict(
        device_flops_fp64=67e12, device_flops_fp32=67e12, device_flops_bf16=989e12,
        device_flops_fp8=1979e12, device_memory_bandwidth=4.8e12, launch_overhead=5e-6,
    ),
    # Achieved on one H200: an 8192^3 bf16 matmul through torch at ~790 TFLOP/s and a
    # device copy at ~4.3 TB/s (bytes read + written); fp32/fp64/fp8 scaled by the same 0.8.
    "h200_measured": dict(
        device_flops_fp64=53.6e12, device_flops_fp32=53.6e12, device_flops_bf16=790e12,
        device_flops_fp8=1583e12, device_memory_bandwidth=4.3e12, launch_overhead=5e-6,
    ),
}

# Host presets (the CPU that runs host ops).
_HOSTS: dict[str, dict[str, float]] = {
    # A two-socket x86 server: ~3 TFLOP/s fp32 with AVX-512 on all cores, ~300 GB/s achieved DRAM.
    "x86_server": dict(host_flops=3e12, host_memory_bandwidth=300e9, host_op_overhead=2e-6),
    # Grace (72 Arm cores, LPDDR5X): ~3.5 TFLOP/s fp32, ~450 GB/s achieved.
    "grace": dict(host_flops=3.5e12, host_memory_bandwidth=450e9, host_op_overhead=2e-6),
    # A laptop: ~0.5 TFLOP/s fp32, ~60 GB/s.
    "laptop": dict(host_flops=0.5e12, host_memory_bandwidth=60e9, host_op_overhead=2e-6),
}


def _choice(kind: str, name: str, table: dict[str, Any]) -> dict[str, Any]:
    try:
        return table[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown {kind} preset {name!r}; valid: {', '.join(sorted(table))}") from None


def dtype_class(dtype: torch.dtype) -> str:
    """The peak-FLOP/s class of a dtype: ``fp64``, ``fp32``, ``bf16`` (bf16/fp16) or ``fp8``.

    Integer, bool and complex64 ops count against the fp32 peak, complex128 against fp64.
    """
    if dtype in (torch.float64, torch.complex128):
        return "fp64"
    if dtype in (torch.bfloat16, torch.float16):
        return "bf16"
    if dtype.is_floating_point and dtype.itemsize == 1:
        return "fp8"
    return "fp32"


@dataclass(frozen=True)
class CostModel:
    """Link, device and host figures of a modeled machine, and the times they imply."""

    # Host↔device link, per direction, and the device↔device path.
    h2d_bandwidth: float = 50e9  # bytes/s
    d2h_bandwidth: float = 50e9  # bytes/s
    d2d_bandwidth: float = 50e9  # bytes/s
    h2d_latency: float = 8e-6  # s per copy
    d2h_latency: float = 8e-6  # s per copy
    d2d_latency: float = 8e-6  # s per copy
    pageable_factor: float = 0.5  # bandwidth multiplier for pageable host memory (0, 1]
    # Device.
    device_flops_fp64: float = 67e12  # FLOP/s
    device_flops_fp32: float = 67e12  # FLOP/s
    device_flops_bf16: float = 989e12  # FLOP/s, bf16 and fp16
    device_flops_fp8: float = 1979e12  # FLOP/s
    device_memory_bandwidth: float = 4.8e12  # bytes/s
    launch_overhead: float = 5e-6  # s per device op
    # Host.
    host_flops: float = 3e12  # FLOP/s, any dtype
    host_memory_bandwidth: float = 300e9  # bytes/s
    host_op_overhead: float = 2e-6  # s per host op
    # Expert prefetch: the share of a reuse copy's rows a prefetch is expected to hold, for
    # shape-only estimates (a run counts the real hits). 0.0 = every row crosses (rule 5).
    prefetch_hit_rate: float = 0.0
    name: str = "h200+pcie_gen5+x86_server"

    def __post_init__(self) -> None:
        for f in fields(self):
            if f.name == "name":
                continue
            if f.name == "prefetch_hit_rate":
                value = self.prefetch_hit_rate
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                    raise ValueError(
                        f"CostModel.prefetch_hit_rate must be a number in [0, 1] (the share of a reuse "
                        f"copy's rows a prefetch holds), got {value!r}"
                    )
                continue
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"CostModel.{f.name} must be a number, got {value!r}")
            low_ok = value >= 0 if f.name.endswith(("latency", "overhead")) else value > 0
            if not low_ok:
                raise ValueError(f"CostModel.{f.name} must be {'>= 0' if f.name.endswith(('latency', 'overhead')) else '> 0'}, got {value}")
        if self.pageable_factor > 1:
            raise ValueError(f"CostModel.pageable_factor must be in (0, 1], got {self.pageable_factor}")

    @classmethod
    def preset(cls, device: str = "h200", link: str = "pcie_gen5", host: str = "x86_server") -> "CostModel":
        """A model from named presets, e.g. ``CostModel.preset("h200", link="nvlink_c2c", host="grace")``."""
        values = {
            **_choice("device", device, _DEVICES),
            **_choice("link", link, _LINKS),
            **_choice("host", host, _HOSTS),
        }
        return cls(**values, name=f"{device}+{link}+{host}")

    @staticmethod
    def presets() -> dict[str, tuple[str, ...]]:
        """The preset names: ``{"device": (...), "link": (...), "host": (...)}``."""
        return {"device": tuple(sorted(_DEVICES)), "link": tuple(sorted(_LINKS)), "host": tuple(sorted(_HOSTS))}

    def with_link(self, link: str) -> "CostModel":
        """This model with another link preset."""
        name = self.name.split("+")
        name[1:2] = [link]
        return replace(self, **_choice("link", link, _LINKS), name="+".join(name))

    def with_prefetch_hit_rate(self, rate: float) -> "CostModel":
        """This model expecting a prefetch to hold ``rate`` of a reuse copy's rows (rule 5)."""
        return replace(self, prefetch_hit_rate=rate)

    # -- times -----------------------------------------------------------------------------
    def copy_time_us(self, kind: str, nbytes: int, pinned: bool = True) -> float:
        """Microseconds to copy ``nbytes`` in direction ``kind`` (rule 1)."""
        kind = CopyKind.parse(kind).value
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise ValueError(f"nbytes must be an int >= 0, got {nbytes!r}")
        bandwidth = getattr(self, f"{kind}_bandwidth")
        if not pinned and kind != "d2d":
            bandwidth *= self.pageable_factor
        return (getattr(self, f"{kind}_latency") + nbytes / bandwidth) * 1e6

    def reuse_copy_time_us(self, link_bytes: int, device_bytes: int, pinned: bool = True) -> float:
        """Microseconds for a reuse copy moving ``link_bytes`` over h2d and ``device_bytes``
        within device memory, in one launch (rule 5)."""
        for name, value in (("link_bytes", link_bytes), ("device_bytes", device_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        bandwidth = self.h2d_bandwidth * (1.0 if pinned else self.pageable_factor)
        moving = max(link_bytes / bandwidth, 2 * device_bytes / self.device_memory_bandwidth)
        return (self.h2d_latency + moving) * 1e6

    def peak_flops(self, device: DeviceLike, dtype: torch.dtype) -> float:
        """Peak FLOP/s for ``dtype`` ops on ``device`` (host: ``host_flops``)."""
        if Device.parse(device).is_host:
            return self.host_flops
        return getattr(self, f"device_flops_{dtype_class(dtype)}")

    def memory_bandwidth(self, device: DeviceLike) -> float:
        """Memory bandwidth (bytes/s) of ``device``."""
        return self.host_memory_bandwidth if Device.parse(device).is_host else self.device_memory_bandwidth

    def compute_time_us(self, flops: int, bytes_touched: int, device: DeviceLike, dtype: torch.dtype = torch.float32) -> float:
        """Microseconds for an op on ``device``: overhead + roofline (rule 2)."""
        for name, value in (("flops", flops), ("bytes_touched", bytes_touched)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0, got {value!r}")
        dev = Device.parse(device)
        overhead = self.host_op_overhead if dev.is_host else self.launch_overhead
        roofline = max(flops / self.peak_flops(dev, dtype), bytes_touched / self.memory_bandwidth(dev))
        return (overhead + roofline) * 1e6

    def ridge_flops_per_byte(self, dtype: torch.dtype = torch.bfloat16) -> float:
        """Device FLOPs per byte of memory traffic where compute and memory time are equal."""
        return self.peak_flops("cuda", dtype) / self.device_memory_bandwidth

    def link_breakeven_flops_per_byte(self, dtype: torch.dtype = torch.bfloat16) -> float:
        """FLOPs per byte streamed over h2d needed to hide the copy behind compute."""
        return self.peak_flops("cuda", dtype) / self.h2d_bandwidth


# -- op cost ---------------------------------------------------------------------------------


class OpCost(NamedTuple):
    """FLOPs and bytes touched (read + written) by one op."""

    flops: int
    bytes_touched: int


def _nbytes(t: torch.Tensor) -> int:
    return math.prod(concrete_size(d) for d in t.shape) * t.element_size()


def concrete_size(d: Any) -> int:
    if isinstance(d, int):
        return d
    hint = getattr(getattr(d, "node", None), "hint", None)  # a backed SymInt's example value
    if hint is None:
        raise ValueError(f"size {d} has no concrete value")
    return int(hint)


def _to_meta(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    shape = tuple(concrete_size(d) for d in x.shape)
    stride = tuple(concrete_size(s) for s in x.stride())
    return torch.empty_strided(shape, stride, dtype=x.dtype, device="meta")


def _tensors(tree: Any) -> list[torch.Tensor]:
    return [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]


def _is_view_op(fn: Any) -> bool:
    return isinstance(fn, torch._ops.OpOverload) and bool(getattr(fn, "is_view", False))


def _counted(fn: Callable[..., Any], args: tuple, kwargs: dict) -> tuple[int, Any]:
    with FlopCounterMode(display=False) as counter:
        out = fn(*args, **kwargs)
    return int(counter.get_total_flops()), out


def _formula_flops(fn: Any, args: tuple, kwargs: dict, outputs: Any) -> int:
    """FLOPs from FlopCounterMode's own formula for ``fn``, given its outputs (0 if none)."""
    packet = getattr(fn, "overloadpacket", None)
    formula = FlopCounterMode(display=False).flop_registry.get(packet) if packet is not None else None
    if formula is None or outputs is None:
        return 0
    return int(formula(*args, **kwargs, out_val=outputs))


def op_cost(
    fn: Callable[..., Any] | Any,
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    outputs: Any = None,
) -> OpCost:
    """FLOPs and bytes touched by ``fn(*args, **kwargs)`` (an aten op or any torch callable).

    Inputs may be real, meta or fake tensors; the op runs on meta copies of them under
    ``FlopCounterMode``, so no real data is read and no memory is allocated. Bytes touched
    = bytes of every input tensor argument (one passed twice counts twice) + bytes of
    every output tensor; view ops touch none.
    If the op has no meta kernel (data-dependent output shapes), it runs on the real
    inputs when they are real, else FLOPs come from FlopCounterMode's formula applied to
    ``outputs`` (e.g. ``node.meta["val"]``), or 0, with a ``CostModelWarning``.
    """
    kwargs = dict(kwargs or {})
    if _is_view_op(fn):
        return OpCost(0, 0)
    read = sum(_nbytes(t) for t in _tensors((args, kwargs)))
    try:
        meta_args, meta_kwargs = tree_map(_to_meta, (tuple(args), kwargs))
        flops, out = _counted(fn, meta_args, meta_kwargs)
        written = sum(_nbytes(t) for t in _tensors(out))
        return OpCost(flops, _row_gather_read(fn, args, read, written) + written)
    except Exception as meta_error:  # no meta kernel, data-dependent shape, unbacked size
        reason = f"{type(meta_error).__name__}: {' '.join(str(meta_error).split())[:160]}"
    inputs = _tensors((args, kwargs))
    name = getattr(fn, "__name__", repr(fn))
    if inputs and all(t.device.type not in ("meta",) and not _is_fake(t) for t in inputs):
        flops, out = _counted(fn, tuple(args), kwargs)
        return OpCost(flops, read + sum(_nbytes(t) for t in _tensors(out)))
    written = sum(_nbytes(t) for t in _tensors(outputs)) if outputs is not None else 0
    try:
        flops = _formula_flops(fn, tuple(args), kwargs, outputs)
    except Exception:
        flops = 0
    warnings.warn(
        f"op_cost({name}): cannot run on meta tensors ({reason}); "
        f"FLOPs {'from the formula for the given outputs' if flops else 'counted as 0'}",
        CostModelWarning,
        stacklevel=2,
    )
    return OpCost(flops, read + written)


@functools.lru_cache(maxsize=1)
def _row_gather_ops() -> frozenset:
    """Ops whose first argument is the source they pick rows of (built once)."""
    aten = torch.ops.aten
    return frozenset({
        aten.index_select.default,  # index_select(source, dim, index)
        aten.embedding.default,  # embedding(weight, indices)
        aten.gather.default,  # gather(source, dim, index)
        aten.index.Tensor,  # source[indices]
        SELECT_ROWS,
    })  # fmt: skip


def _row_gather_read(fn: Any, args: tuple, read: int, written: int) -> int:
    """Ops that pick rows out of a big source read only the rows they pick: counting the
    whole source (an embedding table, a stack of 256 experts) as read would charge a
    decode step gigabytes it never touches."""
    if fn not in _row_gather_ops() or not args or not isinstance(args[0], torch.Tensor):
        return read
    return read - _nbytes(args[0]) + min(written, _nbytes(args[0]))


def _is_fake(t: torch.Tensor) -> bool:
    return isinstance(t, FakeTensor)
