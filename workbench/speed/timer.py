"""The time of one decode token: a ``DecodeLayout`` timed by one function over a
``CostModel``'s figures.

Every tokens/s the workbench states — the budget sweep and its capacity answer, the
walkthrough's tables, the published-run fits and their validation — is
``time_decode(layout, cost_model)``, the layout built from a planned graph
(``graph_layout.layout_of``) or from facts (``DecodeLayout.for_machine``). A runtime
differs from another only by its figures (``CostModel.compose(runtime=...)``: launch
mode and costs, kernels per layer, per-copy cost, overlap, the host's achieved bandwidth
and matvec rates); ``estimate`` lays the same graph out op by op on streams, the schedule
a timeline view shows.

Rules:

1. ``t = gpu + side - overlap × min(gpu, side)``, ``side = host + copy``, ``overlap =
   cost_model.overlap × layout.overlappable``: the runtime's share of the shorter hidden
   under the longer, where the placement lets the work run side by side.
2. GPU: ``kernels`` = the layout's own count when ``kernels_per_layer`` is 0, else
   ``layers × kernels_per_layer``; plus ``moe_layers × num_experts ×
   visited_expert_kernels`` (a loop over every expert). ``device = max(device_bytes /
   device_memory_bandwidth, device_flops / device_flops_bf16) + kernels × kernel_gap``.
   Eager launches: ``issue = kernels × (launch_overhead + executor_overhead)`` and
   ``gpu = device + issue - launch_overlap × min(device, issue)``; graph replay: ``gpu =
   device + graph_launch_overhead``.
3. Host: ``max(host_bytes / host_memory_bandwidth, host_weights / rate) + host_calls ×
   host_op_overhead``, ``rate`` = the runtime's matvec rate for the host's weight format
   (``CostModel.host_matvec_rate``), else ``host_flops / (2 + dequant ops per weight)``:
   a multiply-add and the dequantization of every weight at the host's FLOP rate.
   ``host_bound`` says which of the two terms is the longer.
4. Copy: experts loaded = the layout's ``expert_loads``, or its ``experts_offloaded``
   for a runtime that loads every expert its loop visits (``loads_all_experts``); ``(link_bytes
   + loaded × expert_bytes) / (h2d_bandwidth × (1 - pageable_copies × (1 -
   pageable_factor))) + (copies + expert copies) × (h2d_latency + copy_overhead)``; expert
   copies = loaded ×
   ``copies_per_expert`` when the runtime states its copies per expert, else the layout's
   own ``expert_copies`` (scaled to the experts loaded).
5. The time is a finite number > 0, or a ``DecodeTimeError`` names what made it not one;
   tokens/s is never negative, zero or NaN.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import WorkbenchError
from ..machine.cost_model import CostModel
from .layout import DecodeLayout

__all__ = ["DecodeTime", "DecodeTimeError", "time_decode"]


class DecodeTimeError(WorkbenchError, ValueError):
    """A layout and cost model that give no finite, positive time per token."""


@dataclass(frozen=True)
class DecodeTime:
    """One decode token's time, and its parts (module rules), in seconds."""

    seconds: float  # the token's time (rule 1)
    gpu: float  # the GPU part: device time and launches (rule 2)
    device: float  # of which the device's own time
    issue: float  # of which the host's launches
    host: float  # the host part (rule 3)
    copy: float  # the copy part (rule 4)
    hidden: float  # seconds of host-or-copy work hidden beside the GPU (rule 1)
    link_bytes: float  # bytes over the host link per token, experts loaded included (rule 4)
    kernels: float  # device kernels per token
    host_bound: str  # "memory" or "compute" when the host computes, else ""
    cost_model: str  # the name of the cost model that timed it

    @property
    def tok_s(self) -> float:
        """Tokens per second: one decode token per step."""
        return 1.0 / self.seconds

    @property
    def ms(self) -> float:
        """Milliseconds per token."""
        return self.seconds * 1e3


def _kernels(layout: DecodeLayout, model: CostModel) -> float:
    if model.kernels_per_layer > 0:
        kernels = layout.layers * model.kernels_per_layer
    elif layout.kernels is not None:
        kernels = layout.kernels
    else:
        raise DecodeTimeError(f"a layout from facts counts no kernels and the cost model {model.name!r} states no "
                              "kernels_per_layer: compose it with a runtime that states its kernels per layer")
    return kernels + layout.moe_layers * layout.num_experts * model.visited_expert_kernels


def _host_seconds(layout: DecodeLayout, model: CostModel) -> tuple[float, str]:
    if layout.host_bytes <= 0 and layout.host_weights <= 0:
        return layout.host_calls * model.host_op_overhead, ""
    rate = model.host_matvec_rate(layout.host_format) if layout.host_format else None
    if rate is None:
        rate = model.host_flops / (2.0 + layout.host_dequant_ops)
    memory = layout.host_bytes / model.host_memory_bandwidth
    compute = layout.host_weights / rate
    bound = "compute" if compute > memory else "memory"
    return max(memory, compute) + layout.host_calls * model.host_op_overhead, bound


def _link_bytes(layout: DecodeLayout, model: CostModel) -> tuple[float, float]:
    """(bytes over the link, experts loaded) per token (rule 4)."""
    loads = layout.experts_offloaded if model.loads_all_experts >= 0.5 and layout.experts_offloaded else layout.expert_loads
    return layout.link_bytes + loads * layout.expert_bytes, loads


def _copy_seconds(layout: DecodeLayout, model: CostModel) -> float:
    bandwidth = model.h2d_bandwidth * (1.0 - model.pageable_copies * (1.0 - model.pageable_factor))
    nbytes, loads = _link_bytes(layout, model)
    expert_copies = loads * model.copies_per_expert if model.copies_per_expert > 0 else layout.expert_copies * (
        loads / layout.expert_loads if layout.expert_loads else 1.0)
    return nbytes / bandwidth + (layout.copies + expert_copies) * (model.h2d_latency + model.copy_overhead)


def time_decode(layout: DecodeLayout, cost_model: CostModel) -> DecodeTime:
    """The time of one decode token of ``layout`` on ``cost_model`` (module rules)."""
    if not isinstance(layout, DecodeLayout):
        raise DecodeTimeError(f"layout must be a DecodeLayout (layout_of(plan) or DecodeLayout.for_machine), got "
                              f"{type(layout).__name__}")
    if not isinstance(cost_model, CostModel):
        raise DecodeTimeError(f"cost_model must be a CostModel (CostModel.compose(...)), got {type(cost_model).__name__}")
    kernels = _kernels(layout, cost_model)
    device = max(layout.device_bytes / cost_model.device_memory_bandwidth,
                 layout.device_flops / cost_model.device_flops_bf16) + kernels * cost_model.kernel_gap  # fmt: skip
    if cost_model.launch_mode == "eager":
        issue = kernels * (cost_model.launch_overhead + cost_model.executor_overhead)
        gpu = device + issue - cost_model.launch_overlap * min(device, issue)
    else:
        issue = cost_model.graph_launch_overhead
        gpu = device + issue
    host, bound = _host_seconds(layout, cost_model)
    copy = _copy_seconds(layout, cost_model)
    side = host + copy
    hidden = cost_model.overlap * layout.overlappable * min(gpu, side)
    seconds = gpu + side - hidden
    if not (math.isfinite(seconds) and seconds > 0):
        raise DecodeTimeError(f"the layout on {cost_model.name!r} gives {seconds!r} s per token (gpu {gpu!r}, host "
                              f"{host!r}, copy {copy!r}): a layout with no bytes and no kernels has no decode time")
    return DecodeTime(seconds, gpu, device, issue, host, copy, hidden, _link_bytes(layout, cost_model)[0], kernels, bound,
                      cost_model.name)
