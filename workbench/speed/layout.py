"""What one decode token reads, moves and launches where: a ``DecodeLayout``, from facts.

A layout is plain data — the bytes and FLOPs of the GPU, its kernels, the weights the host
multiplies, the bytes and copies over the link, the host's share of the routed experts,
the expert cache's share — and holds no time: ``timer.time_decode`` times it with a
``CostModel``. It is built from a planned graph (``graph_layout.layout_of``) or from
structured facts: ``DecodeLayout.for_machine(gpu=, host=, link=, model=, formats=,
placement=)``, whose parts are named parts (``machine.parts``, a parts file of your own
by path included).

Rules of ``for_machine``:

1. Sizes (``ModelFacts``): routed-expert parameters = MoE layers × experts × expert
   parameters, the rest of the total is the non-expert part; per token the same with
   top-k (active). A model whose experts exceed its total or active size, whose top-k
   exceeds its experts, or with a size that is not a finite number in range, is refused
   naming the figure (``LayoutError``).
2. Bytes: each part at its bits per weight (``WeightBits``: a format of the format table,
   or bits in the table's range (0, 64]), plus the KV cache's bytes for the context.
3. Placements (``ExpertPlacement``): ``all_on_gpu``: the GPU reads every active byte, and the
   weights must fit its memory. ``experts_on_host_compute``: the host computes every
   active expert, or all but ``gpu_experts`` of each layer's experts. ``partial_offload``:
   the host computes the experts of ``host_layers`` of the MoE layers (the first layers,
   as llama.cpp's ``--n-cpu-moe`` does; leading dense layers hold none).
   ``experts_copied``: the GPU computes every active expert and those its cache misses
   cross the link first; the cache holds ``resident_expert_bytes`` (default: the GPU's
   memory less the non-expert weights and ``CACHE_RESERVE`` of it kept for the context,
   activations and the KV cache), none when ``cache=False``; its hit rate is the
   placement's routing's for the share held (uniform routing: the share). The experts
   not held (``experts_offloaded``) are what a runtime that loads every expert its loop
   visits copies in instead. A cache larger than the model's experts, or than the GPU
   beside the other weights, and a model without routed experts, are refused.
4. Each MoE layer whose experts the host computes makes one host call and four copies:
   the hidden state, the routed experts' ids and weights (4 bytes each) to the host, and
   the result back (``activation_bytes`` per element of the hidden state).
5. A part the facts need must be named: a host where the host computes, a link where
   anything crosses it (default: the GPU's own host interface, ``pcie_gen`` and
   ``pcie_lanes``). An unknown part is refused with the valid names.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Protocol, Union, runtime_checkable

import numpy as np

from ..errors import WorkbenchError
from ..weight_formats import weight_formats
from ..machine.parts import PartsFile, part_facts, part_names
from ..runtime.sim_timing import CallSchedule

__all__ = ["CACHE_RESERVE", "PLACEMENT_REGIMES", "CacheRouting", "DecodeLayout", "LayoutError", "ModelFacts", "OpGroup",
           "ExpertPlacement", "UniformRouting", "WeightBits"]  # fmt: skip

#: Where the routed experts live and are computed.
PLACEMENT_REGIMES = ("all_on_gpu", "experts_on_host_compute", "experts_copied", "partial_offload")
#: The share of a GPU's memory an expert cache leaves for the CUDA context, activations and
#: the KV cache (an estimate, rule 3).
CACHE_RESERVE = 0.1
#: Bits per weight a format may take: the format table's range (0, 64].
MAX_BITS = 64.0
_MAX_PARAMS = 1e15  # a thousand times the largest published model
_MAX_COUNT = 1_000_000  # layers, experts


class LayoutError(WorkbenchError, ValueError):
    """Facts that no decode can have, or a part or placement the facts cannot be laid out on."""


def _check_number(name: str, value: Any, low: float, high: float, *, whole: bool = False, low_open: bool = False) -> float:
    # any real number — a numpy count as much as a plain int — but never a truth value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise LayoutError(f"{name} must be a finite number, got {value!r}")
    number = float(value)
    if (number <= low if low_open else number < low) or number > high or (whole and number != int(number)):
        kind = "a whole number" if whole else "a number"
        raise LayoutError(f"{name} must be {kind} in {'(' if low_open else '['}{low:g}, {high:g}], got {value!r}")
    return number


@dataclass(frozen=True)
class ModelFacts:
    """A model's sizes, as a decode token sees them (rule 1)."""

    name: str  # what the model is called
    layers: int  # decoder layers
    total_params: float  # every parameter
    active_params: float  # parameters one token reads
    num_experts: int = 0  # routed experts per MoE layer (0: a dense model)
    top_k: int = 0  # routed experts each token uses per MoE layer
    expert_params: float = 0.0  # parameters of one routed expert
    first_dense: int = 0  # leading layers without routed experts
    hidden: int = 0  # width of the hidden state (the activations a host layer exchanges)
    kv_bytes_per_token: float = 0.0  # KV-cache bytes one token of context adds, all layers together
    activation_bytes: int = 2  # bytes per element of an exchanged activation

    def __post_init__(self) -> None:
        where = f"model {self.name!r}"
        _check_number(f"{where}: layers", self.layers, 1, _MAX_COUNT, whole=True)
        _check_number(f"{where}: first_dense", self.first_dense, 0, self.layers, whole=True)
        _check_number(f"{where}: num_experts", self.num_experts, 0, _MAX_COUNT, whole=True)
        _check_number(f"{where}: top_k", self.top_k, 0, _MAX_COUNT, whole=True)
        _check_number(f"{where}: expert_params", self.expert_params, 0, _MAX_PARAMS)
        total = _check_number(f"{where}: total_params", self.total_params, 0, _MAX_PARAMS, low_open=True)
        active = _check_number(f"{where}: active_params", self.active_params, 0, _MAX_PARAMS, low_open=True)
        _check_number(f"{where}: hidden", self.hidden, 0, _MAX_COUNT, whole=True)
        _check_number(f"{where}: kv_bytes_per_token", self.kv_bytes_per_token, 0, _MAX_PARAMS)
        _check_number(f"{where}: activation_bytes", self.activation_bytes, 1, 8, whole=True)
        if active > total:
            raise LayoutError(f"{where}: active parameters ({active:.4g}) exceed the total ({total:.4g})")
        if self.top_k > self.num_experts:
            raise LayoutError(f"{where}: top_k {self.top_k} exceeds num_experts {self.num_experts}")
        if self.num_experts and (not self.top_k or not self.expert_params or self.moe_layers < 1):
            raise LayoutError(f"{where}: a model with routed experts needs top_k >= 1, expert_params > 0 and a "
                              f"MoE layer (first_dense {self.first_dense} of {self.layers} layers)")
        if self.expert_total >= total or self.expert_active >= active:
            raise LayoutError(f"{where}: its routed experts ({self.expert_total:.4g} parameters, {self.expert_active:.4g} "
                              f"active) leave nothing of its total ({total:.4g}) or active ({active:.4g}) size for "
                              "the rest: the facts are inconsistent")

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts."""
        return self.layers - self.first_dense if self.num_experts else 0

    @property
    def expert_total(self) -> float:
        return self.moe_layers * self.num_experts * self.expert_params

    @property
    def expert_active(self) -> float:
        return self.moe_layers * self.top_k * self.expert_params

    @property
    def other_total(self) -> float:
        return self.total_params - self.expert_total

    @property
    def other_active(self) -> float:
        return self.active_params - self.expert_active


def _format_bits(value: Any, what: str) -> tuple[float, str, float]:
    """(bits, format name or "", dequantization operations per weight) of ``value``: a
    format of the format table, or a number of bits in (0, MAX_BITS] (rule 2)."""
    if isinstance(value, str):
        table = weight_formats()
        key = value.strip().lower()
        found = next((f for f in table.values() if key == f.name or key in f.aliases), None)
        if found is None:
            raise LayoutError(f"{what}: unknown weight format {value!r}; valid: {', '.join(sorted(table))}, or bits per "
                              f"weight as a number in (0, {MAX_BITS:g}]")
        return found.bits_per_weight, found.name, found.dequant_ops
    bits = _check_number(f"{what}: bits per weight", value, 0, MAX_BITS, low_open=True)
    return bits, "", 0.0


@dataclass(frozen=True)
class WeightBits:
    """Bits per weight of the routed experts and of the rest (rule 2)."""

    experts: float  # bits per routed-expert weight, block scales included
    other: float  # bits per other weight
    expert_format: str = ""  # the experts' stored format, "" when only bits are known
    expert_dequant_ops: float = 0.0  # operations to dequantize one expert weight
    how: str = ""  # where the figures come from

    def __post_init__(self) -> None:
        _check_number("expert bits per weight", self.experts, 0, MAX_BITS, low_open=True)
        _check_number("other bits per weight", self.other, 0, MAX_BITS, low_open=True)
        _check_number("expert dequantization operations", self.expert_dequant_ops, 0, 1e3)

    @classmethod
    def of(cls, formats: Union["WeightBits", Mapping[str, Any], str, float]) -> "WeightBits":
        """``formats`` as bits: a ``WeightBits``; one format or number of bits for every
        weight; or ``{"experts": ..., "other": ...}`` (each a format name or bits)."""
        if isinstance(formats, WeightBits):
            return formats
        if isinstance(formats, Mapping):
            unknown = sorted(set(map(str, formats)) - {"experts", "other"})
            if unknown or "experts" not in formats or "other" not in formats:
                raise LayoutError(f"formats must give 'experts' and 'other' (a weight format or bits each), got keys "
                                  f"{sorted(map(str, formats))}")
            experts, other = formats["experts"], formats["other"]
        else:
            experts = other = formats
        bits, name, ops = _format_bits(experts, "experts")
        other_bits = _format_bits(other, "other")[0]
        return cls(bits, other_bits, name, ops, f"experts {experts}, other {other}")


@runtime_checkable
class CacheRouting(Protocol):
    """The routing an expert cache sees: the hit rate of a cache holding ``share`` of each
    layer's experts (a replay over a trace, or a law), and what it is, in words."""

    @property
    def label(self) -> str: ...

    def hit_rate(self, share: float) -> float: ...


@dataclass(frozen=True)
class UniformRouting:
    """Every expert equally likely and independent across tokens: the hit rate of a cache
    holding a share of the experts is that share."""

    label: str = "uniform routing"

    def hit_rate(self, share: float) -> float:
        return share


@dataclass(frozen=True)
class ExpertPlacement:
    """Where the routed experts live and are computed (rule 3)."""

    regime: str  # one of PLACEMENT_REGIMES
    host_layers: Optional[int] = None  # partial_offload: MoE layers whose experts the host computes
    gpu_experts: int = 0  # experts_on_host_compute: experts of each layer kept on the GPU
    resident_expert_bytes: Optional[float] = None  # experts_copied: bytes the GPU's expert cache holds (None: rule 3)
    cache: bool = True  # experts_copied: False when every routed expert is copied on every token
    routing: CacheRouting = UniformRouting()  # experts_copied: the cache's hit rate for a share held
    context_tokens: int = 0  # tokens already in the KV cache
    overlappable: float = 1.0  # share of the host-or-copy work the placement lets run beside the GPU

    def __post_init__(self) -> None:
        if self.regime not in PLACEMENT_REGIMES:
            raise LayoutError(f"placement regime {self.regime!r} is none of {', '.join(PLACEMENT_REGIMES)}")
        if self.regime == "partial_offload" and self.host_layers is None:
            raise LayoutError("a partial_offload placement names host_layers: the MoE layers whose experts the host "
                              "computes (llama.cpp's --n-cpu-moe N)")
        if self.host_layers is not None:
            _check_number("host_layers", self.host_layers, 0, _MAX_COUNT, whole=True)
        _check_number("gpu_experts", self.gpu_experts, 0, _MAX_COUNT, whole=True)
        if self.resident_expert_bytes is not None:
            _check_number("resident_expert_bytes", self.resident_expert_bytes, 0, _MAX_PARAMS * 8)
        _check_number("context_tokens", self.context_tokens, 0, 1e9, whole=True)
        _check_number("overlappable", self.overlappable, 0, 1)
        if not isinstance(self.routing, CacheRouting):
            raise LayoutError(f"routing must have a label and hit_rate(share) (CacheRouting), got {self.routing!r}")


@dataclass(frozen=True)
class OpGroup:
    """Ops of a planned graph's token that do the same work (``runtime.op_work.OpWork``):
    the decode timer charges each as the event simulator charges one step."""

    count: float  # steps in the group
    share: float  # share of each step's time charged (a row share's expected share; 1 otherwise)
    flops: float  # FLOPs of one step
    bytes: float  # bytes one step touches, as counted
    fused_bytes: float  # the same when row picks are fused into their readers
    dtype_class: str  # the peak-FLOP/s class of its dtype
    weights: float = 0.0  # weight elements one step multiplies
    weight_format: str = ""  # the format they are stored in


@dataclass(frozen=True)
class DecodeLayout:
    """What one decode token reads, moves and launches where; no times (module doc)."""

    device_bytes: float  # bytes the GPU reads and writes per token: weights at their stored bits, state, activations
    device_flops: float  # FLOPs the GPU computes per token
    kernels: Optional[float]  # device kernels per token counted in a graph; None: the runtime's per-layer count
    layers: int  # decoder layers (a runtime's kernels per layer multiply these)
    moe_layers: int = 0  # layers with routed experts
    num_experts: int = 0  # routed experts per MoE layer
    top_k: int = 0  # routed experts per token per MoE layer
    host_bytes: float = 0.0  # bytes the host reads computing per token (the routed experts it computes)
    host_weights: float = 0.0  # weights the host multiplies per token
    host_format: str = ""  # their stored weight format ("" when only bits are known)
    host_dequant_ops: float = 0.0  # operations to dequantize one of them
    host_calls: float = 0.0  # calls the host makes per token (one per host layer, or one per host op of a graph)
    link_bytes: float = 0.0  # bytes over the host link per token that carry no expert weights, both directions
    copies: float = 0.0  # copies per token that carry no expert weights (activations, states)
    expert_loads: float = 0.0  # routed experts copied in per token
    expert_bytes: float = 0.0  # bytes of one expert copied in
    expert_copies: float = 0.0  # copies that carry them: a graph's own, or one per expert loaded
    experts_offloaded: float = 0.0  # experts per token not held on the GPU: what a loop visiting every expert loads
    host_share: float = 0.0  # share of the active expert bytes the host computes
    gpu_experts: float = 0.0  # routed experts the GPU computes per token
    gpu_expert_weights: float = 0.0  # their weights
    gpu_expert_dequant_ops: float = 0.0  # operations to dequantize one of them (0: a 16-bit format)
    cache_share: float = 0.0  # share of the experts the GPU's expert cache holds
    hit_rate: float = 0.0  # share of the active experts found on the GPU (copied regime)
    overlappable: float = 1.0  # share of the host-or-copy work that may run beside the GPU
    gpu: str = ""  # the parts it was laid out on ("" when not known)
    host: str = ""
    link: str = ""
    origin: str = "facts"  # "facts" or "graph"
    notes: tuple[str, ...] = field(default=())  # how each figure was found
    # A planned graph's own ops, grouped by their work (empty for a layout from facts: its
    # totals are all that is known), and the graphs a replay launches per token.
    kernel_groups: tuple[OpGroup, ...] = ()  # the GPU's kernels
    host_groups: tuple[OpGroup, ...] = ()  # the host's ops
    graphs: float = 1.0  # runs of device work between host work: one captured graph each
    # A planned graph's call, step by step, as the event simulator schedules it (None for
    # a layout from facts): the timer replays it on the machine it times (timer rule 6).
    call: Optional[CallSchedule] = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("device_bytes", "device_flops", "host_bytes", "host_weights", "host_dequant_ops", "host_calls",
                     "link_bytes", "copies", "expert_loads", "expert_bytes", "expert_copies", "experts_offloaded",
                     "gpu_experts", "gpu_expert_weights", "gpu_expert_dequant_ops"):
            _check_number(f"layout {name}", getattr(self, name), 0, 1e18)
        if self.kernels is not None:
            _check_number("layout kernels", self.kernels, 0, 1e9)
        _check_number("layout layers", self.layers, 1, _MAX_COUNT, whole=True)
        for name in ("host_share", "cache_share", "hit_rate", "overlappable"):
            _check_number(f"layout {name}", getattr(self, name), 0, 1)
        _check_number("layout graphs", self.graphs, 0, 1e9)
        for group in self.kernel_groups + self.host_groups:
            if not isinstance(group, OpGroup):
                raise LayoutError(f"a layout's op groups are OpGroup records, got {type(group).__name__}")
        if self.call is not None and not isinstance(self.call, CallSchedule):
            raise LayoutError(f"a layout's call is a CallSchedule (runtime.call_schedule(plan)), got {type(self.call).__name__}")

    @property
    def parts(self) -> str:
        """The parts it was laid out on, in words: ``gpu=... host=... link=...``."""
        return " ".join(f"{k}={v}" for k, v in (("gpu", self.gpu), ("host", self.host), ("link", self.link)) if v)

    @classmethod
    def for_machine(
        cls,
        *,
        gpu: str,
        model: ModelFacts,
        formats: Union[WeightBits, Mapping[str, Any], str, float],
        placement: ExpertPlacement,
        host: Optional[str] = None,
        link: Optional[str] = None,
        parts: PartsFile = None,
        gpu_memory_bytes: Optional[float] = None,
    ) -> "DecodeLayout":
        """The layout of one decode token of ``model`` stored in ``formats``, its experts
        placed by ``placement``, on the named ``gpu``, ``host`` and ``link`` parts (module
        rules); ``parts``: a parts file of your own, by path; ``gpu_memory_bytes``: the
        device memory the weights and an expert cache may take (default: the GPU part's
        ``memory_bytes``; layers split over several GPUs pool theirs)."""
        if not isinstance(model, ModelFacts):
            raise LayoutError(f"model must be ModelFacts (layers, sizes, experts), got {type(model).__name__}")
        if not isinstance(placement, ExpertPlacement):
            raise LayoutError(f"placement must be a ExpertPlacement (regime and split), got {type(placement).__name__}")
        bits = WeightBits.of(formats)
        if gpu_memory_bytes is not None:
            _check_number("gpu_memory_bytes", gpu_memory_bytes, 0, 1e15, low_open=True)
        return _laid_out(gpu, host, link, model, bits, placement, parts, gpu_memory_bytes)


def _named(kind: str, name: Optional[str], parts: PartsFile, why: str) -> str:
    if not isinstance(name, str) or name not in part_names(kind, parts):
        raise LayoutError(f"{why}: give {kind}= one of {', '.join(part_names(kind, parts))} (or a part of your own in "
                          f"a parts file passed as parts=), got {name!r}")
    return name


def _link_of(gpu: str, link: Optional[str], parts: PartsFile) -> str:
    """The link part: as named, else the GPU's own host interface (rule 5)."""
    if link is not None:
        return _named("link", link, parts, "the link the copies cross")
    facts = part_facts("gpu", gpu, parts)
    if "pcie_gen" not in facts:
        raise LayoutError(f"copies cross a link and the gpu part {gpu!r} states no host interface: name link=")
    lanes = int(facts.get("pcie_lanes", 16))
    name = f"pcie_gen{int(facts['pcie_gen'])}" + ("" if lanes == 16 else f"_x{lanes}")
    return _named("link", name, parts, f"the {gpu}'s host interface")


def _laid_out(gpu: str, host: Optional[str], link: Optional[str], model: ModelFacts, bits: WeightBits,
              placement: ExpertPlacement, parts: PartsFile, gpu_memory_bytes: Optional[float] = None) -> DecodeLayout:
    gpu = _named("gpu", gpu, parts, "the GPU that runs the dense part")
    memory = gpu_memory_bytes if gpu_memory_bytes is not None else part_facts("gpu", gpu, parts).get("memory_bytes")
    expert_bytes_total = model.expert_total * bits.experts / 8
    other_bytes_total = model.other_total * bits.other / 8
    expert_active = model.expert_active * bits.experts / 8
    kv = model.kv_bytes_per_token * placement.context_tokens
    notes = [f"bits: {bits.how or f'{bits.experts:g} / {bits.other:g}'}"]
    host_share, cache_share, hit, loads, offloaded, link_name, host_name = 0.0, 0.0, 0.0, 0.0, 0.0, "", ""
    regime = placement.regime
    if regime == "all_on_gpu":
        if memory is not None and expert_bytes_total + other_bytes_total > memory:
            raise LayoutError(f"{(expert_bytes_total + other_bytes_total) / 2**30:.1f} GiB of weights do not fit the "
                              f"{memory / 2**30:.1f} GiB of a {gpu}: place the experts elsewhere or store them smaller")
    elif regime in ("experts_on_host_compute", "partial_offload"):
        host_share = _host_share(model, placement)
        notes.append(f"host computes {host_share:.3f} of the active expert bytes")
    elif regime == "experts_copied":
        if not model.num_experts:
            raise LayoutError(f"model {model.name!r} has no routed experts to copy in: lay a dense model out all_on_gpu")
        link_name = _link_of(gpu, link, parts)
        cache_share = _cache_share(placement, memory, expert_bytes_total, other_bytes_total)
        hit = float(placement.routing.hit_rate(cache_share)) if cache_share > 0 else 0.0
        _check_number("routing hit rate", hit, 0, 1)
        loads = (1 - hit) * model.moe_layers * model.top_k
        offloaded = (1 - cache_share) * model.moe_layers * model.num_experts
        notes.append(f"expert cache holds {cache_share:.3f} of the experts; {placement.routing.label}: hit rate {hit:.3f}")
    host_calls = copies = activation = 0.0
    if host_share > 0:
        host_name = _named("host", host, parts, "the host computes routed experts")
        link_name = _link_of(gpu, link, parts)
        host_layers = round(host_share * model.moe_layers) if regime == "partial_offload" else model.moe_layers
        host_calls = float(host_layers)
        copies = 4.0 * host_layers  # rule 4: the hidden state, the experts' ids and weights, the result
        activation = host_layers * (2 * model.hidden * model.activation_bytes + 2 * model.top_k * 4)
    gpu_expert = (1 - host_share) * expert_active
    return DecodeLayout(
        device_bytes=model.other_active * bits.other / 8 + gpu_expert + kv,
        device_flops=2.0 * (model.other_active + (1 - host_share) * model.expert_active),
        kernels=None, layers=model.layers, moe_layers=model.moe_layers, num_experts=model.num_experts,
        top_k=model.top_k, host_bytes=host_share * expert_active, host_weights=host_share * model.expert_active,
        host_format=bits.expert_format if host_share > 0 else "",
        host_dequant_ops=bits.expert_dequant_ops if host_share > 0 else 0.0, host_calls=host_calls,
        link_bytes=activation, copies=copies, expert_loads=loads,
        expert_bytes=model.expert_params * bits.experts / 8 if regime == "experts_copied" else 0.0,
        expert_copies=loads, experts_offloaded=offloaded, host_share=host_share, cache_share=cache_share, hit_rate=hit,
        gpu_experts=(1 - host_share) * model.moe_layers * model.top_k,
        gpu_expert_weights=(1 - host_share) * model.expert_active, gpu_expert_dequant_ops=bits.expert_dequant_ops,
        overlappable=placement.overlappable, gpu=gpu, host=host_name, link=link_name, origin="facts",
        notes=tuple(notes),
    )  # fmt: skip


def _host_share(model: ModelFacts, placement: ExpertPlacement) -> float:
    """The share of the active expert bytes the host computes (rule 3)."""
    if not model.num_experts:
        raise LayoutError(f"model {model.name!r} has no routed experts for the host to compute")
    if placement.regime == "partial_offload":
        assert placement.host_layers is not None  # ExpertPlacement's check
        host_layers = max(0, min(placement.host_layers, model.layers) - model.first_dense)
        return host_layers / model.moe_layers
    if placement.gpu_experts > model.num_experts:
        raise LayoutError(f"gpu_experts {placement.gpu_experts} exceeds the model's {model.num_experts} experts per layer")
    return 1.0 - placement.gpu_experts / model.num_experts


def _cache_share(placement: ExpertPlacement, memory: Optional[float], expert_bytes: float, other_bytes: float) -> float:
    """The share of the expert bytes the GPU expert cache holds (rule 3)."""
    if not placement.cache:
        return 0.0
    if placement.resident_expert_bytes is not None:
        held = placement.resident_expert_bytes
        if held > expert_bytes * (1 + 1e-9):
            raise LayoutError(f"resident_expert_bytes {held:.4g} exceed the model's {expert_bytes:.4g} bytes of routed "
                              "experts: a cache cannot hold more than there is; valid: [0, the experts' bytes]")
        if memory is not None and held + other_bytes > memory:
            raise LayoutError(f"resident_expert_bytes {held:.4g} and the {other_bytes:.4g} bytes of the other weights "
                              f"exceed the GPU's {memory:.4g} bytes of memory; valid: at most {max(0.0, memory - other_bytes):.4g}")
    elif memory is not None:
        held = memory * (1 - CACHE_RESERVE) - other_bytes
    else:
        raise LayoutError("the gpu part states no memory_bytes: give the placement's resident_expert_bytes")
    return float(min(1.0, max(0.0, held / expert_bytes)))

