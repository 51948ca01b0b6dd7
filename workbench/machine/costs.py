"""The cost functions: what one copy, one kernel, one host op and one launch take on a machine.

Every modeled time the workbench shows calls these and nothing else: the event simulator
per step (``runtime.sim_timing``: copy timelines, ``estimate``, sim runs) and the decode
timer per layout (``speed.timer``: tokens/s, sweeps, published runs). A change to how one
copy or one kernel is costed is made here, once, and both see it.

Rules (times in seconds; figures are ``CostModel`` fields):

1. A copy of ``nbytes`` in direction ``kind`` (h2d, d2h, d2d): ``{kind}_latency +
   copy_overhead + nbytes / bandwidth``, the bandwidth being ``{kind}_bandwidth``, times
   ``pageable_factor`` for an h2d or d2h copy from or to pageable host memory.
2. Many copies at once (``link_seconds``): the sum of rule 1 over them, written for
   totals: ``copies × (latency + copy_overhead) + pinned bytes / bandwidth + pageable
   bytes / (bandwidth × pageable_factor)`` — times add, so a pageable share slows the
   bytes it holds and no others.
3. A reuse copy (rows a prefetch holds copied on the device, the rest over the link, one
   launch): ``h2d_latency + copy_overhead + max(link bytes / h2d bandwidth (rule 1's),
   2 × device bytes / device_memory_bandwidth)``.
4. A device kernel: ``max(min_kernel_time, flops / peak FLOP/s of its dtype class, bytes
   touched / device_memory_bandwidth)`` — the roofline with a floor; launches and the gap
   between kernels are charged by whoever schedules it (rules 6, 7).
5. A host op: ``host_op_overhead + max(compute, bytes / host_memory_bandwidth)``: the host
   thread runs it itself, so its framework cost adds; ``compute`` is ``weights / rate``
   for an op multiplying weights stored in a format the runtime states a matvec rate for
   (``CostModel.host_matvec_rate``), else ``flops / host_flops``. A token's host work
   given as totals (``host_compute_seconds``: no per-op count) takes ``max(bytes /
   host_memory_bandwidth, weights / rate)``, the rate being the stated one or ``host_flops /
   (2 + dequant ops per weight)`` (a multiply-add and the dequantization of every weight).
6. Issue: an eager launch costs the host ``launch_overhead + executor_overhead`` per device
   operation; a graph launch ``graph_launch_overhead`` per captured graph.
7. Between two kernels already queued on one stream the device idles ``kernel_gap``.
"""

from __future__ import annotations

from typing import Optional, Protocol


class Figures(Protocol):
    """The figures the cost functions read (``CostModel`` has them all; these functions
    import no model, so the cost model can call them)."""

    @property
    def h2d_bandwidth(self) -> float: ...
    @property
    def d2h_bandwidth(self) -> float: ...
    @property
    def d2d_bandwidth(self) -> float: ...
    @property
    def h2d_latency(self) -> float: ...
    @property
    def d2h_latency(self) -> float: ...
    @property
    def d2d_latency(self) -> float: ...
    @property
    def pageable_factor(self) -> float: ...
    @property
    def copy_overhead(self) -> float: ...
    @property
    def device_flops_fp64(self) -> float: ...
    @property
    def device_flops_fp32(self) -> float: ...
    @property
    def device_flops_bf16(self) -> float: ...
    @property
    def device_flops_fp8(self) -> float: ...
    @property
    def device_memory_bandwidth(self) -> float: ...
    @property
    def min_kernel_time(self) -> float: ...
    @property
    def host_flops(self) -> float: ...
    @property
    def host_memory_bandwidth(self) -> float: ...
    @property
    def host_op_overhead(self) -> float: ...
    @property
    def launch_overhead(self) -> float: ...
    @property
    def executor_overhead(self) -> float: ...
    @property
    def graph_launch_overhead(self) -> float: ...

    def host_matvec_rate(self, weight_format: str) -> Optional[float]: ...

__all__ = [
    "Figures",
    "copy_seconds",
    "eager_issue_seconds",
    "graph_issue_seconds",
    "host_compute_seconds",
    "host_op_seconds",
    "kernel_seconds",
    "link_seconds",
    "reuse_copy_seconds",
    "roofline_seconds",
]



def _bandwidth(model: Figures, kind: str, pinned: bool) -> float:
    bandwidth: float = getattr(model, f"{kind}_bandwidth")
    return bandwidth if pinned or kind == "d2d" else bandwidth * model.pageable_factor


def copy_seconds(model: Figures, kind: str, nbytes: float, pinned: bool = True) -> float:
    """Rule 1: one copy of ``nbytes`` in direction ``kind``."""
    return getattr(model, f"{kind}_latency") + model.copy_overhead + nbytes / _bandwidth(model, kind, pinned)


def link_seconds(model: Figures, nbytes: float, copies: float, pageable_share: float = 0.0, kind: str = "h2d") -> float:
    """Rule 2: ``copies`` copies of ``nbytes`` in all over one direction, ``pageable_share``
    of the bytes from pageable host memory (the sum of rule 1 over them)."""
    pinned = nbytes * (1.0 - pageable_share) / _bandwidth(model, kind, True)
    pageable = nbytes * pageable_share / _bandwidth(model, kind, False) if pageable_share else 0.0
    return copies * (getattr(model, f"{kind}_latency") + model.copy_overhead) + pinned + pageable


def reuse_copy_seconds(model: Figures, link_bytes: float, device_bytes: float, pinned: bool = True) -> float:
    """Rule 3: a reuse copy moving ``link_bytes`` over h2d and ``device_bytes`` within device memory."""
    moving = max(link_bytes / _bandwidth(model, "h2d", pinned), 2 * device_bytes / model.device_memory_bandwidth)
    return model.h2d_latency + model.copy_overhead + moving


def roofline_seconds(model: Figures, flops: float, nbytes: float, dtype_class: str = "bf16") -> float:
    """Rule 4 without its floor: the longer of the FLOPs at peak and the bytes at bandwidth."""
    peak: float = getattr(model, f"device_flops_{dtype_class}")
    return max(flops / peak, nbytes / model.device_memory_bandwidth)


def kernel_seconds(model: Figures, flops: float, nbytes: float, dtype_class: str = "bf16") -> float:
    """Rule 4: a device kernel's own duration (its launch and gap are the scheduler's)."""
    return max(model.min_kernel_time, roofline_seconds(model, flops, nbytes, dtype_class))


def host_op_seconds(model: Figures, flops: float, nbytes: float, weights: float = 0.0, weight_format: str = "") -> float:
    """Rule 5: one op the host thread runs itself, its framework cost included; an op that
    multiplies ``weights`` stored in a format the runtime states a matvec rate for runs at
    that rate, any other at the host's FLOP rate."""
    rate = model.host_matvec_rate(weight_format) if weights > 0 and weight_format else None
    compute = weights / rate if rate is not None else flops / model.host_flops
    return model.host_op_overhead + max(compute, nbytes / model.host_memory_bandwidth)


def host_compute_seconds(model: Figures, nbytes: float, weights: float, weight_format: str = "",
                         dequant_ops: float = 0.0) -> float:
    """Rule 5: the host multiplying ``weights`` (reading ``nbytes``) stored in
    ``weight_format``, at the runtime's matvec rate for it, else at the host's FLOP rate
    (a multiply-add and the dequantization of every weight); no per-op cost."""
    rate = model.host_matvec_rate(weight_format) if weight_format else None
    if rate is None:
        rate = model.host_flops / (2.0 + dequant_ops)
    return max(nbytes / model.host_memory_bandwidth, weights / rate)


def eager_issue_seconds(model: Figures, operations: float) -> float:
    """Rule 6: host time to issue ``operations`` device operations one by one."""
    return operations * (model.launch_overhead + model.executor_overhead)


def graph_issue_seconds(model: Figures, graphs: float = 1.0) -> float:
    """Rule 6: host time to launch ``graphs`` captured graphs."""
    return graphs * model.graph_launch_overhead
