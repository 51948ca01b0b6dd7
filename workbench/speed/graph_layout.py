"""A planned graph's decode token as a ``DecodeLayout``: ``layout_of(plan)``, and its time.

``layout_of`` reads what one call of a plan reads, moves and launches where, from shapes
alone (the same counts ``estimate`` charges: ``op_cost``'s FLOPs and bytes, copy
variants' bytes, row shares), and ``plan_decode_time(plan, cost_model)`` times it with
``timer.time_decode`` — the one function every tokens/s comes from.

Rules:

1. The GPU is the plan's one non-host device (``device=`` names it when there are
   several). Its ``device_bytes`` and ``device_flops`` are those of its compute steps and
   copy-stream ops; ``kernels`` counts them, one each.
2. A token reads each weight byte once: a step that picks or copies rows of a constant
   (a row pick, a view or copy of one, ``weight_formats.stored_source``) is charged what
   it reads and not the rows it writes, and a step that reads those rows again is not
   charged for them — what a runtime that fuses the pick into its matmul reads. Rows a
   copy brought over the link are read from device memory like any other value.
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
   (``plan_decode_time`` rules 2, 4).
6. ``overlappable`` is the share of link bytes issued by a prefetch (a copy whose rows
   are chosen ahead of the layer that reads them): only those can run beside compute.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Optional

import torch
import torch.fx

from ..copy_records import CopyRole
from ..copy_variants import copy_variant
from ..devices import CopyKind, Device, DeviceLike
from ..errors import ArgumentTypeError
from ..graph_values import aliased_input, is_view_op, node_nbytes, value_of
from ..node_facts import facts_of, stored_format
from ..planning.memory_plan import MemoryPlan
from ..weight_formats import stored_source, weight_formats
from ..machine.cost_model import CostModel
from .layout import DecodeLayout, LayoutError
from .timer import DecodeTime, time_decode
from ..machine.default_model import default_cost_model
from ..runtime.sim_timing import expected_groups, op_facts, stored_of
from ..runtime.steps import Step, steps_of

__all__ = ["plan_decode_time", "layout_of"]

#: The weight format a tensor's own dtype is (rule 3: ``host_format``), where the table has it.
_DTYPE_FORMATS = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_LAYER = re.compile(r"(?:^|\.)([A-Za-z_][A-Za-z0-9_]*)\.(\d+)\.")


def _constant(node: torch.fx.Node) -> bool:
    return node.op == "placeholder" and facts_of(node).resident is not None


def _weight_root(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The constant whose elements ``node`` holds (through views, copies and row picks),
    or None (rule 2)."""
    seen = 0
    while node is not None and seen < 64:
        if _constant(node):
            return node
        node = stored_source(node) if node.op == "call_function" else None  # type: ignore[assignment]
        seen += 1
    return None


def _materialised_by_step(node: torch.fx.Node, events: dict[str, Step]) -> bool:
    """True when ``node``'s bytes were written by a compute or host step (not a copy and
    not a constant): a pick whose rows rule 2 already charged."""
    while node.op == "call_function" and is_view_op(node.target):
        base = aliased_input(node)
        if base is None:
            break
        node = base
    step = events.get(node.name)
    return step is not None and step.copy is None and step.event in ("compute", "host")


def _stored_bytes(node: torch.fx.Node) -> float:
    val = value_of(node)
    if not isinstance(val, torch.Tensor):
        return 0.0
    fact = stored_format(node)
    if fact is not None:
        return _numel(val) * fact.bits_per_weight / 8
    return float(node_nbytes(node, unbounded="hint"))


def _numel(val: torch.Tensor) -> float:
    n = 1.0
    for d in val.shape:
        n *= int(getattr(getattr(d, "node", None), "hint", d)) if not isinstance(d, int) else d
    return n


def _note_weights(node: torch.fx.Node, nbytes: float, formats: defaultdict[str, float], bits: dict[str, float]) -> None:
    """Add ``nbytes`` of the weights ``node`` holds to ``formats`` under their format's
    name ("" for a dtype), remembering their bits per element."""
    fact = stored_format(node)
    val = value_of(node)
    name = fact.name if fact is not None else (_DTYPE_FORMATS.get(val.dtype, "") if isinstance(val, torch.Tensor) else "")
    bits[name] = fact.bits_per_weight if fact is not None else (val.element_size() * 8 if isinstance(val, torch.Tensor) else 0.0)
    formats[name] += nbytes


def _tensor_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    found: list[torch.fx.Node] = []
    torch.fx.node.map_arg((node.args, node.kwargs), lambda a: found.append(a) or a)  # type: ignore[func-returns-value]
    return [a for a in found if isinstance(value_of(a), torch.Tensor)]


def _layers(plan: MemoryPlan) -> int:
    """Rule 5: the most distinct indices of one module list among the constants' names."""
    indices: dict[str, set[str]] = defaultdict(set)
    for fqn in plan.device_graph.program.constants.values():
        for match in _LAYER.finditer(str(fqn)):
            indices[fqn[: match.start(2)]].add(match.group(2))
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


def _op_step(tally: _Tally, step: Step, node: torch.fx.Node, events: dict[str, Step], on_host: bool, rate: float) -> None:
    args = torch.fx.node.map_arg(node.args, value_of)
    kwargs = torch.fx.node.map_arg(node.kwargs, value_of)
    counted, _ = op_facts(node.target, args, kwargs, value_of(node), expected_groups(node), stored_of(node))
    share = 1.0 if step.share is None else step.share.expected_share(rate)
    nbytes = float(counted.cost.bytes_touched)
    formats: defaultdict[str, float] = defaultdict(float)
    bits: dict[str, float] = {}
    picks = _weight_root(node) is not None
    if picks:  # rule 2: a pick is charged what it reads, not the rows it writes
        nbytes -= _stored_bytes(node)
        _note_weights(node, _stored_bytes(node), formats, bits)
    for arg in _tensor_args(node):
        if _weight_root(arg) is None:
            continue
        if _materialised_by_step(arg, events):  # rule 2: read again, charged at the pick
            nbytes -= _stored_bytes(arg)
        elif not picks and _constant(_weight_root(arg)):  # type: ignore[arg-type]
            # what the op reads of it: all of it, or the groups an index selects (op_cost)
            _note_weights(arg, min(_stored_bytes(arg), float(counted.cost.bytes_touched)), formats, bits)
    nbytes = max(0.0, nbytes) * share
    weights = sum(b * 8 / bits[f] for f, b in formats.items() if bits[f] > 0)
    prefix = "host" if on_host else "device"
    tally.sums[f"{prefix}_bytes"] += nbytes
    tally.sums[f"{prefix}_flops"] += counted.cost.flops * share
    tally.sums[f"{prefix}_weight_bytes"] += sum(formats.values()) * share
    if on_host:
        tally.sums["host_weights"] += weights * share
        for name, nbytes_stored in formats.items():
            tally.host_formats[name] += nbytes_stored * share
        if not tally.in_host_run:
            tally.sums["host_calls"] += 1
    else:
        tally.sums["kernels"] += 1
    tally.in_host_run = on_host


def _copy_step(tally: _Tally, step: Step, node: torch.fx.Node, reference: CostModel) -> None:
    record = step.copy
    assert record is not None
    _, moved, _ = copy_variant(record.role).cost(reference, step, node, record)()
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
    rows = _numel(val) / _numel(val[0]) if isinstance(val, torch.Tensor) and val.dim() and _numel(val) else 0.0
    share = moved / record.nbytes if record.nbytes else 0.0
    tally.loads[index] = max(tally.loads.get(index, 0.0), float(rows) * share)


def layout_of(plan: MemoryPlan, *, device: Optional[DeviceLike] = None, prefetch_hit_rate: float = 0.0,
              layers: Optional[int] = None) -> DecodeLayout:
    """What one call of ``plan`` reads, moves and launches where (module rules);
    ``prefetch_hit_rate``: the share of a reuse copy's rows a prefetch is expected to hold
    (and of a cache's rows a mask selects)."""
    if not isinstance(plan, MemoryPlan):
        raise ArgumentTypeError(f"layout_of expects a MemoryPlan from workbench.plan, got {type(plan).__name__}")
    reference = CostModel().with_prefetch_hit_rate(prefetch_hit_rate)  # only its hit rate shapes bytes
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
                _copy_step(tally, step, node, reference)
        elif step.stream_bytes is not None:
            tally.sums["device_bytes"] += 2.0 * step.stream_bytes
            tally.sums["kernels"] += 1
        elif step.event in ("compute", "host"):
            on_host = step.event == "host" or (step.device is not None and step.device.is_host)
            _op_step(tally, step, node, events, on_host, prefetch_hit_rate)
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
    )  # fmt: skip



def _dequant_ops(name: str) -> float:
    found = weight_formats().get(name) if name else None
    return found.dequant_ops if found is not None else 0.0


def plan_decode_time(plan: MemoryPlan, cost_model: Optional[CostModel] = None, *, prefetch_hit_rate: Optional[float] = None,
                device: Optional[DeviceLike] = None) -> DecodeTime:
    """The time of one decode token of ``plan`` on ``cost_model`` (default
    ``default_cost_model()``): ``time_decode(layout_of(plan), cost_model)``; the prefetch
    hit rate defaults to the cost model's."""
    model = cost_model if cost_model is not None else default_cost_model()
    rate = model.prefetch_hit_rate if prefetch_hit_rate is None else prefetch_hit_rate
    return time_decode(layout_of(plan, device=device, prefetch_hit_rate=rate), model)
