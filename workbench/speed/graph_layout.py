"""A planned graph's decode token as a ``DecodeLayout``: ``layout_of(plan)``, and its time.

``layout_of`` reads what one call of a plan reads, moves and launches where, from shapes
alone (the same counts ``estimate`` charges: ``op_cost``'s FLOPs and bytes, copy
variants' bytes, row shares), and ``plan_decode_time(plan, cost_model)`` times it with
``timer.time_decode`` — the one function every tokens/s comes from.

Rules:

1. The GPU is the plan's one non-host device (``device=`` names it when there are
   several). Its ``device_bytes`` and ``device_flops`` are those of its compute steps and
   copy-stream ops; ``kernels`` counts them, one each.
2. The totals read each weight byte once: a step that picks or copies rows of a constant
   is charged what it reads and not the rows it writes, and a step that reads those rows
   again is not charged for them — what a runtime that fuses the pick into its matmul
   reads (``runtime.op_work`` rule 2). Rows a copy brought over the link are read from
   device memory like any other value.
3. Host compute steps (``host``) give ``host_bytes`` and FLOPs the same way (``host_share``:
   the share of the weight bytes read that the host reads);
   ``host_weights`` counts the weight elements they multiply (picked rows, or whole
   constants), ``host_format`` is the weight format most of those bytes are stored in,
   (a dtype's own name, bf16 or fp16, for weights stored as their dtype), and
   ``host_calls`` counts the runs of consecutive host steps (one call of the host
   each). Placeholder bindings are the caller's, not the token's.
4. Copies: h2d, d2h and d2d bytes as their variants charge them (a reuse copy's expected
   link share at ``prefetch_hit_rate``; a counted copy its expected rows). Copies of rows
   selected by an index carry experts (``expert_copies``); ``expert_loads`` is the
   expected rows moved per distinct index (the weights of one expert, stacked in several
   tensors, share an index and count once), ``expert_bytes`` their bytes per load, and a
   graph loads nothing beyond them (``experts_offloaded`` = ``expert_loads``). Other
   copies count in ``copies`` and ``link_bytes``. A step with a row share is charged its expected share.
5. ``layers``: the most distinct indices of one module list among the constants'
   qualified names (``layers.0…``, ``model.layers.17…``), or ``layers=``. The graph's own
   kernel and copy counts are its runtime's unless a cost model states its own
   (``speed.timer`` rules 2, 4).
6. ``overlappable`` is the share of link bytes issued by a prefetch (a copy whose rows
   are chosen ahead of the layer that reads them): only those can run beside compute.
7. Each op step's work (``runtime.op_work.OpWork``: the records the event simulator
   charges it from) is kept, grouped by what it does: ``kernel_groups`` for the GPU's
   kernels and copy-stream ops, ``host_groups`` for the host's ops; the timer charges each
   as the simulator charges one step (``speed.timer`` rules 2, 3). ``graphs`` counts the
   runs of device work (kernels and copies) between host steps: a replay launches one
   captured graph per run.
8. ``call`` is the plan's call as the event simulator schedules it
   (``runtime.sim_timing.call_schedule``): the timer replays it, so a planned token's time is its
   simulated timeline's span, with the call's inputs already in their slots
   (``speed.timer`` rule 6).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Optional

import torch
import torch.fx

from ..copy_records import CopyRole
from ..copy_variants import copy_variant
from ..devices import CopyKind, Device, DeviceLike
from ..errors import ArgumentTypeError
from ..graph_values import value_of
from ..indexed_names import list_entries
from ..planning.memory_plan import MemoryPlan
from ..weight_formats import weight_formats
from ..machine.cost_model import CostModel
from .layout import DecodeLayout, LayoutError, OpGroup
from .timer import DecodeTime, time_decode
from ..machine.default_model import default_cost_model
from ..runtime.op_work import numel
from ..runtime.workload import Workload
from ..runtime.sim_timing import call_schedule, step_work
from ..runtime.steps import Step, steps_of

__all__ = ["plan_decode_time", "layout_of"]



def _layers(plan: MemoryPlan) -> int:
    """Rule 5: the most distinct indices of one module list among the constants' names."""
    indices: dict[str, set[int]] = defaultdict(set)
    for fqn in plan.device_graph.program.constants.values():
        for prefix, index in list_entries(str(fqn)):
            indices[prefix].add(index)
    return max((len(v) for v in indices.values()), default=1) or 1


def _gpu(plan: MemoryPlan, device: Optional[DeviceLike]) -> Optional[Device]:
    if device is not None:
        return Device.parse(device)
    found = sorted({d for d in plan.device_graph.node_device.values() if not d.is_host}, key=str)
    if len(found) > 1:
        raise LayoutError(f"the plan runs on {', '.join(map(str, found))}: name the GPU of the token with device=")
    return found[0] if found else None


class _Tally:
    """The sums rule 1-4 build, step by step."""

    def __init__(self) -> None:
        self.sums: defaultdict[str, float] = defaultdict(float)
        self.host_formats: defaultdict[str, float] = defaultdict(float)
        self.loads: dict[str, float] = {}
        self.prefetched = 0.0
        self.in_host_run = False
        self.in_device_run = False
        self.kernel_groups: defaultdict[tuple, float] = defaultdict(float)
        self.host_groups: defaultdict[tuple, float] = defaultdict(float)

    def device_work(self) -> None:
        """A device operation: it opens a run of device work unless one is open (rule 7)."""
        if not self.in_device_run:
            self.sums["graphs"] += 1
        self.in_device_run, self.in_host_run = True, False


def _groups(found: defaultdict[tuple, float]) -> tuple[OpGroup, ...]:
    return tuple(OpGroup(count, *key) for key, count in sorted(found.items(), key=lambda kv: repr(kv[0])))


def _op_step(tally: _Tally, plan: MemoryPlan, step: Step, node: torch.fx.Node, events: dict[str, Step], on_host: bool,
             rate: float) -> None:
    _, work = step_work(plan, step, node, events)  # the records the simulator charges
    share = 1.0 if step.share is None else step.share.expected_share(rate)
    key = (share, work.flops, work.bytes, work.fused_bytes, work.dtype_class, work.weights, work.weight_format)
    prefix = "host" if on_host else "device"
    tally.sums[f"{prefix}_bytes"] += work.fused_bytes * share  # rule 2
    tally.sums[f"{prefix}_flops"] += work.flops * share
    tally.sums[f"{prefix}_weight_bytes"] += work.weight_bytes * share
    if on_host:
        tally.sums["host_weights"] += work.weights * share
        tally.host_formats[work.weight_format] += work.weight_bytes * share
        tally.host_groups[key] += 1
        if not tally.in_host_run:
            tally.sums["host_calls"] += 1
        tally.in_host_run, tally.in_device_run = True, False
    else:
        tally.sums["kernels"] += 1
        tally.kernel_groups[key] += 1
        tally.device_work()


def _copy_step(tally: _Tally, step: Step, node: torch.fx.Node, reference: CostModel, workload: Workload) -> None:
    record = step.copy
    assert record is not None
    _, moved, _ = copy_variant(record.role).cost(reference, step, node, record, workload)()
    if not record.is_gather:
        tally.sums["link_bytes"] += moved
        tally.sums["copies"] += 1
        return
    tally.sums["expert_link_bytes"] += moved
    tally.sums["expert_copies"] += 1
    if record.role == CopyRole.PREFETCH:
        tally.prefetched += moved
    index = record.index or record.name
    val = value_of(node)
    rows = numel(val) / numel(val[0]) if isinstance(val, torch.Tensor) and val.dim() and numel(val) else 0.0
    share = moved / record.nbytes if record.nbytes else 0.0
    tally.loads[index] = max(tally.loads.get(index, 0.0), float(rows) * share)


def layout_of(plan: MemoryPlan, *, device: Optional[DeviceLike] = None, prefetch_hit_rate: float = 0.0,
              layers: Optional[int] = None) -> DecodeLayout:
    """What one call of ``plan`` reads, moves and launches where (module rules);
    ``prefetch_hit_rate``: the share of a reuse copy's rows a prefetch is expected to hold
    (and of a cache's rows a mask selects)."""
    if not isinstance(plan, MemoryPlan):
        raise ArgumentTypeError(f"layout_of expects a MemoryPlan from workbench.plan, got {type(plan).__name__}")
    reference, workload = CostModel(), Workload(prefetch_hit_rate)  # a copy's bytes depend on the workload alone
    gpu = _gpu(plan, device)
    steps = steps_of(plan)
    nodes = {n.name: n for n in plan.device_graph.graph.nodes}
    events = {s.name: s for s in steps.steps if s.event is not None}
    tally = _Tally()
    for step in steps.steps:
        node = nodes.get(step.name)
        if step.event is None or node is None or node.op == "placeholder":
            continue
        if step.copy is not None:
            if step.copy.kind in (CopyKind.H2D, CopyKind.D2H, CopyKind.D2D):
                _copy_step(tally, step, node, reference, workload)
                tally.device_work()
        elif step.stream_bytes is not None:
            tally.sums["device_bytes"] += 2.0 * step.stream_bytes
            tally.sums["kernels"] += 1
            tally.kernel_groups[(1.0, 0.0, 2.0 * step.stream_bytes, 2.0 * step.stream_bytes, "bf16", 0.0, "")] += 1
            tally.device_work()
        elif step.event in ("compute", "host"):
            on_host = step.event == "host" or (step.device is not None and step.device.is_host)
            _op_step(tally, plan, step, node, events, on_host, workload.prefetch_hit_rate)
    s = tally.sums
    weight_bytes = s["host_weight_bytes"] + s["device_weight_bytes"]
    host_format = max(tally.host_formats, key=lambda k: tally.host_formats[k]) if tally.host_formats else ""
    dequant = _dequant_ops(host_format)
    link = s["link_bytes"] + s["expert_link_bytes"]
    loads = sum(tally.loads.values())
    return DecodeLayout(
        device_bytes=s["device_bytes"], device_flops=s["device_flops"], kernels=float(s["kernels"]),
        layers=int(layers) if layers is not None else _layers(plan), host_bytes=s["host_bytes"],
        host_weights=s["host_weights"], host_format=host_format, host_dequant_ops=dequant, host_calls=s["host_calls"],
        link_bytes=s["link_bytes"], copies=s["copies"], expert_loads=loads,
        expert_bytes=s["expert_link_bytes"] / loads if loads else 0.0, expert_copies=s["expert_copies"],
        experts_offloaded=loads,
        host_share=s["host_weight_bytes"] / weight_bytes if weight_bytes else 0.0,
        overlappable=min(1.0, tally.prefetched / link) if link else 1.0, gpu=str(gpu) if gpu is not None else "",
        origin="graph", notes=(f"counted from {len(events)} steps of the plan",),
        kernel_groups=_groups(tally.kernel_groups), host_groups=_groups(tally.host_groups), graphs=max(1.0, s["graphs"]),
        call=call_schedule(plan, workload.prefetch_hit_rate),
    )  # fmt: skip



def _dequant_ops(name: str) -> float:
    found = weight_formats().get(name) if name else None
    return found.dequant_ops if found is not None else 0.0


def plan_decode_time(plan: MemoryPlan, cost_model: Optional[CostModel] = None, *, prefetch_hit_rate: float = 0.0,
                     device: Optional[DeviceLike] = None) -> DecodeTime:
    """The time of one decode token of ``plan`` on ``cost_model`` (default
    ``default_cost_model()``): ``time_decode(layout_of(plan), cost_model)``, the layout
    expecting ``prefetch_hit_rate`` of its prefetched and cached rows on the device."""
    model = cost_model if cost_model is not None else default_cost_model()
    return time_decode(layout_of(plan, device=device, prefetch_hit_rate=prefetch_hit_rate), model)
