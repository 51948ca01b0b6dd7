"""The time of one decode token: a ``DecodeLayout`` timed by one function over a
``CostModel``'s figures.

Every tokens/s the workbench states — the budget sweep and its capacity answer, the
walkthrough's tables, the published-run fits and their validation — is
``time_decode(layout, cost_model)``, the layout built from a planned graph
(``graph_layout.layout_of``) or from facts (``DecodeLayout.for_machine``). A runtime
differs from another only by its figures (``CostModel.compose(runtime=...)``: launch
mode and costs, kernels per layer, per-copy cost, overlap, the host's achieved bandwidth
and matvec rates). A planned graph's token is its simulated timeline: the same
schedule ``estimate`` lays out op by op on streams, the one a timeline view shows
(rule 6).

Rules:

1. A layout from facts: ``t = gpu + side - overlap × min(gpu, side)``, ``side = host + copy``, ``overlap =
   cost_model.overlap × layout.overlappable``: the runtime's share of the shorter hidden
   under the longer, where the placement lets the work run side by side.
Every term is a cost function of ``machine.costs`` (the functions the event simulator
charges each step with), applied to the layout's totals:

2. GPU: ``kernels`` = the layout's own count when ``kernels_per_layer`` is 0, else
   ``layers × kernels_per_layer``; plus ``moe_layers × num_experts ×
   visited_expert_kernels`` (a loop over every expert). ``device = max(device_bytes /
   device_memory_bandwidth, device_flops / device_flops_bf16) + kernels × kernel_gap``
   (``costs`` rules 4, 7: the token's kernels as one roofline, without the one-kernel floor).
   A runtime that dequantizes a low-bit routed expert into a 16-bit copy before its
   matmul (``dequant_kernels_per_expert`` > 0; a layout from facts whose experts are
   stored with dequantization work, ``gpu_expert_dequant_ops`` > 0) adds, per expert
   weight the GPU computes, the copy's write and the matmul's read of it (2 + 2 bytes)
   and its dequantization operations, and ``gpu_experts × dequant_kernels_per_expert``
   kernels; a 16-bit expert, or a runtime that reads the stored format in its matmul,
   adds none.
   Eager launches: ``issue = kernels × (launch_overhead + executor_overhead)`` and
   ``gpu = device + issue - launch_overlap × min(device, issue)``; graph replay: ``gpu =
   device + graph_launch_overhead``.
3. Host: ``max(host_bytes / host_memory_bandwidth, host_weights / rate) + host_calls ×
   host_op_overhead``, ``rate`` = the runtime's matvec rate for the host's weight format
   (``CostModel.host_matvec_rate``), else ``host_flops / (2 + dequant ops per weight)``:
   a multiply-add and the dequantization of every weight at the host's FLOP rate.
   ``host_bound`` says which of the two terms is the longer.
4. Copy (``costs`` rule 2: times add, so pageable staging slows the bytes it holds): experts loaded = the layout's ``expert_loads``, or its ``experts_offloaded``
   for a runtime that loads every expert its loop visits (``loads_all_experts``); ``(link_bytes
   + loaded × expert_bytes) × (1 - pageable_copies) / h2d_bandwidth + (link_bytes + loaded ×
   expert_bytes) × pageable_copies / (h2d_bandwidth × pageable_factor) + (copies + expert
   copies) × (h2d_latency + copy_overhead)``; expert
   copies = loaded ×
   ``copies_per_expert`` when the runtime states its copies per expert, else the layout's
   own ``expert_copies`` (scaled to the experts loaded).
5. The time is a finite number > 0, or a ``DecodeTimeError`` names what made it not one;
   tokens/s is never negative, zero or NaN.
6. A planned graph's layout on a runtime that launches the graph's own kernels
   (``kernels_per_layer`` 0) is timed by the event simulator's schedule: its ``call``
   (``runtime.sim_timing.call_schedule``) replayed on the cost model
   (``runtime.sim_timing.replay_call``, kernels writing their planned memory, the call's
   inputs already in their slots as a decode loop leaves them), so the token's time is its simulated timeline's span — the copies
   issued ahead of the layers that wait for them, host work beside device work that does
   not need it and kernel gaps absorbed while a kernel waits all included — and
   ``hidden`` is the host-or-copy work the token does not wait for beyond the GPU's own
   time: ``side - min(side, max(0, t - gpu))``, as rule 1's is. The work is charged op by
   op, as the simulator charges each step (``runtime.sim_timing`` rule 12): the GPU's
   ``device`` is the sum over its kernel groups of ``count × share ×
   costs.kernel_seconds`` (its FLOPs at its dtype class's peak, its bytes — fused when
   the runtime fuses row picks — with the one-kernel floor), the host's the sum over its
   host groups of ``costs.host_op_seconds`` (each op's framework cost, and the runtime's
   matvec rate for the format of the weights it multiplies), and graph replay launches
   one graph per run of device work (``graphs``). Rule 1's overlap and rules 2 and 3's
   totals are for layouts from facts (no schedule is known), and for a runtime that
   states its own kernels per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import WorkbenchError
from ..machine import costs
from ..machine.cost_model import CostModel
from ..runtime.sim_timing import replay_call
from .layout import DecodeLayout, OpGroup

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
    hidden: float  # seconds of host-or-copy work hidden beside the GPU (rule 1; a planned graph's: rule 6)
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


#: Bytes per weight an unfused dequantization adds: its 16-bit copy written, then read by the matmul (rule 2).
_DEQUANT_COPY_BYTES = 2.0 + 2.0


def _unfused_dequant(layout: DecodeLayout, model: CostModel) -> tuple[float, float, float]:
    """Rule 2: (bytes, operations, kernels) a runtime's unfused dequantization adds per token."""
    if model.dequant_kernels_per_expert <= 0 or layout.gpu_expert_dequant_ops <= 0 or _per_op(layout, model):
        return 0.0, 0.0, 0.0
    weights = layout.gpu_expert_weights
    return (_DEQUANT_COPY_BYTES * weights, weights * layout.gpu_expert_dequant_ops,
            layout.gpu_experts * model.dequant_kernels_per_expert)  # fmt: skip


def _kernels(layout: DecodeLayout, model: CostModel) -> float:
    if model.kernels_per_layer > 0:
        kernels = layout.layers * model.kernels_per_layer
    elif layout.kernels is not None:
        kernels = layout.kernels
    else:
        raise DecodeTimeError(f"a layout from facts counts no kernels and the cost model {model.name!r} states no "
                              "kernels_per_layer: compose it with a runtime that states its kernels per layer")
    return kernels + layout.moe_layers * layout.num_experts * model.visited_expert_kernels + _unfused_dequant(layout, model)[2]


def _per_op(layout: DecodeLayout, model: CostModel) -> bool:
    """Rule 6: the layout's own ops are charged one by one (a graph's, on a runtime that
    launches the graph's own kernels)."""
    return bool(layout.kernel_groups or layout.host_groups) and model.kernels_per_layer == 0


def _group_bytes(group: OpGroup, model: CostModel) -> float:
    return group.fused_bytes if model.fuses_row_picks >= 0.5 else group.bytes


def _device_seconds(layout: DecodeLayout, model: CostModel) -> float:
    """The GPU's own time without gaps (rules 2, 6)."""
    if _per_op(layout, model):
        return sum(g.count * g.share * costs.kernel_seconds(model, g.flops, _group_bytes(g, model), g.dtype_class)
                   for g in layout.kernel_groups)  # fmt: skip
    # a layout from facts states totals: the token's kernels as one roofline
    extra_bytes, extra_flops, _ = _unfused_dequant(layout, model)
    return costs.roofline_seconds(model, layout.device_flops + extra_flops, layout.device_bytes + extra_bytes, "bf16")


def _host_seconds(layout: DecodeLayout, model: CostModel) -> tuple[float, str]:
    if _per_op(layout, model) and layout.host_groups:  # rule 6
        memory = sum(g.count * g.share * _group_bytes(g, model) for g in layout.host_groups) / model.host_memory_bandwidth
        seconds = sum(g.count * g.share * costs.host_op_seconds(model, g.flops, _group_bytes(g, model), g.weights,
                                                                g.weight_format) for g in layout.host_groups)  # fmt: skip
        overhead = sum(g.count * g.share for g in layout.host_groups) * model.host_op_overhead
        return seconds, "compute" if seconds - overhead > memory else "memory"
    if layout.host_bytes <= 0 and layout.host_weights <= 0:
        return layout.host_calls * model.host_op_overhead, ""
    memory = layout.host_bytes / model.host_memory_bandwidth
    work = costs.host_compute_seconds(model, layout.host_bytes, layout.host_weights, layout.host_format,
                                      layout.host_dequant_ops)  # fmt: skip
    bound = "compute" if work > memory else "memory"
    return work + layout.host_calls * model.host_op_overhead, bound


def _link_bytes(layout: DecodeLayout, model: CostModel) -> tuple[float, float]:
    """(bytes over the link, experts loaded) per token (rule 4)."""
    loads = layout.experts_offloaded if model.loads_all_experts >= 0.5 and layout.experts_offloaded else layout.expert_loads
    return layout.link_bytes + loads * layout.expert_bytes, loads


def _scheduled_seconds(layout: DecodeLayout, model: CostModel) -> float | None:
    """Rule 6: the span of the planned call's replay on ``model``; None without one."""
    if layout.call is None or not _per_op(layout, model):
        return None
    return replay_call(layout.call, model, in_place_writes=True, bind_inputs=False).end_us * 1e-6


def _copy_seconds(layout: DecodeLayout, model: CostModel) -> float:
    nbytes, loads = _link_bytes(layout, model)
    expert_copies = loads * model.copies_per_expert if model.copies_per_expert > 0 else layout.expert_copies * (
        loads / layout.expert_loads if layout.expert_loads else 1.0)
    return costs.link_seconds(model, nbytes, layout.copies + expert_copies, model.pageable_copies)


def time_decode(layout: DecodeLayout, cost_model: CostModel) -> DecodeTime:
    """The time of one decode token of ``layout`` on ``cost_model`` (module rules)."""
    if not isinstance(layout, DecodeLayout):
        raise DecodeTimeError(f"layout must be a DecodeLayout (layout_of(plan) or DecodeLayout.for_machine), got "
                              f"{type(layout).__name__}")
    if not isinstance(cost_model, CostModel):
        raise DecodeTimeError(f"cost_model must be a CostModel (CostModel.compose(...)), got {type(cost_model).__name__}")
    kernels = _kernels(layout, cost_model)
    device = _device_seconds(layout, cost_model) + kernels * cost_model.kernel_gap
    if cost_model.launch_mode == "eager":
        issue = costs.eager_issue_seconds(cost_model, kernels)
        gpu = device + issue - cost_model.launch_overlap * min(device, issue)
    else:
        issue = costs.graph_issue_seconds(cost_model, layout.graphs if _per_op(layout, cost_model) else 1.0)
        gpu = device + issue
    host, bound = _host_seconds(layout, cost_model)
    copy = _copy_seconds(layout, cost_model)
    side = host + copy
    scheduled = _scheduled_seconds(layout, cost_model)
    if scheduled is not None:  # rule 6: the schedule decides what runs side by side
        # what of the host-or-copy work the token does not wait for beyond the GPU's own
        seconds, hidden = scheduled, side - min(side, max(0.0, scheduled - gpu))
    else:
        hidden = cost_model.overlap * layout.overlappable * min(gpu, side)
        seconds = gpu + side - hidden
    if not (math.isfinite(seconds) and seconds > 0):
        raise DecodeTimeError(f"the layout on {cost_model.name!r} gives {seconds!r} s per token (gpu {gpu!r}, host "
                              f"{host!r}, copy {copy!r}): a layout with no bytes and no kernels has no decode time")
    return DecodeTime(seconds, gpu, device, issue, host, copy, hidden, _link_bytes(layout, cost_model)[0], kernels, bound,
                      cost_model.name)
