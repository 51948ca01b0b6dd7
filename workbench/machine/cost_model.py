"""The cost model: how long a copy or an op takes on a modeled machine, and how kernels reach it.

The figures live here; the functions that turn work into time live in ``machine.costs``
(``copy_time_us``, ``reuse_copy_time_us`` and ``compute_time_us`` are those functions in
microseconds), so the event simulator and the decode timer charge one physics.

Rules:

1. A copy of N bytes takes ``latency + copy_overhead + N / bandwidth`` for its direction
   (h2d, d2h, d2d; ``copy_overhead`` is a runtime's own cost per copy, kept when the link
   is swapped);
   from or to pageable host memory the bandwidth is multiplied by ``pageable_factor``.
2. A device kernel runs ``max(min_kernel_time, FLOPs / peak FLOP/s, bytes touched / memory
   bandwidth)`` (the roofline with a floor), with the peak for the op's dtype class. A
   host op takes ``host_op_overhead + max(FLOPs / host FLOP/s, bytes / host bandwidth)``:
   the host thread runs it itself, so its overhead adds.
3. FLOPs are counted by ``torch.utils.flop_counter.FlopCounterMode``, never by hand;
   bytes touched are the bytes of the tensors an op reads plus those it writes. Except:
   a. Grouped matmuls (``aten._grouped_mm``, ``transformers::grouped_mm_fallback``),
      which FlopCounterMode does not know: x (S, in) against one (in, out) slab per group
      is 2·S·in·out FLOPs (every row meets its group's slab); bytes are x, the offsets, the
      output, and the slabs of the groups that have rows — counted from the offsets
      when they are real, else the expected count the caller gives (``expected_groups``:
      estimates pass the groups an index is expected to pick, ``register_group_estimate``),
      else every group that could have rows (min(G, S)).
   b. Row pickers (``index_select``, ``embedding``, ``index``…) read only the rows they
      pick, not their whole source.
   c. An op whose FLOPs cannot be counted — no meta kernel, or a custom op (outside
      ``aten``, ``prims`` and ``workbench``) or a matmul-like aten op with no formula — is
      costed as its bytes with 0 (or formula) FLOPs and named: ``op_cost`` warns
      (``CostModelWarning``); an estimate or a run collects such ops (``UncountedOps``)
      and warns once, listing each op name once.
4. Everything is deterministic: same inputs, same numbers, on every machine.
5. A reuse copy (``gather_h2d_reuse_copy``: rows a prefetch already holds are copied on
   the device, the rest come over the link) is one launch doing both at once: it takes
   ``h2d latency + max(link bytes / h2d bandwidth, 2 × device bytes / device memory
   bandwidth)``. How many rows a prefetch holds is the workload's, not the machine's: a
   shape-only estimate is told (``runtime.workload``), a run counts them.
6. Launch modes (``launch_mode``; the scheduling lives in ``sim_timing``). ``"eager"``:
   the host issues every device operation itself, a kernel or a copy, one per
   ``launch_overhead`` of host time, and the device runs each as soon as it has
   arrived, its stream is free (plus ``kernel_gap`` between kernels) and its inputs are
   ready: a run of short kernels costs about ``launch_overhead`` each (issue-bound), a
   run of long ones their own durations while the host runs ahead. ``"graph"``: the
   device operations between two host steps are one captured graph per device, launched
   with one ``graph_launch_overhead``; its kernels then run back to back, ``kernel_gap``
   apart. Copies stay separate events on their own streams in both modes and last the
   same (rule 1).
7. With ``graph_launch_overhead <= launch_overhead`` (every preset), graph replay is never
   slower than eager launches of the same steps: each device operation is released no
   later, and everything else is the same.
8. A cost model describes hardware and a runtime only. A figure that once described the
   workload (``prefetch_hit_rate``, in files written before it moved out) is ignored when a
   file is read (``RETIRED_FIELDS``).

What each figure means physically, and where the presets' values come from:

- ``h2d/d2h_bandwidth``, ``h2d/d2h_latency``: the host link per direction with pinned
  memory — sustained bytes/s of a large copy, and the fixed device-side cost of one copy
  (DMA set-up, completion; issuing it is a launch, rule 6). ``d2d_*``: the
  device↔device path. ``pageable_factor``: the share of the pinned bandwidth a copy
  from/to pageable memory reaches (it is staged through pinned buffers). Link presets: PCIe and NVLink-C2C peak rates with typical
  achieved shares; latencies are estimates.
- ``device_flops_<class>``: peak dense FLOP/s of the device's math units for a dtype
  class; ``device_memory_bandwidth``: peak HBM bytes/s. Datasheet figures, cited per preset.
- ``launch_overhead``: host time to issue one kernel (or copy) through the runtime and
  driver — the host's issue rate in eager mode. 3.8 µs: back-to-back stream launches
  of a short kernel ran at 3.8 µs per kernel in NVIDIA's "Getting Started with CUDA
  Graphs" (V100, CUDA 10); a host-side figure, taken for every GPU here.
- ``executor_overhead``: host time the workbench executor adds to every step it runs in
  eager mode, besides the launch itself (an interpreter over the planned graph: reading
  the step's arguments, binding its result, recording its timing events). 0 in the
  datasheet presets, which model a compiled runtime that issues kernels back to back;
  ``workbench.calibrate`` measures it, so a measured preset predicts runs of this
  executor on that machine (set it to 0 to forecast a compiled runtime there).
- ``graph_launch_overhead``: host time to launch one instantiated CUDA graph (one driver
  call, whatever its size). 2.5 µs, an estimate: of the order of one kernel launch.
- ``kernel_gap``: device time between the end of one kernel and the start of the next
  on the same stream when both are already queued (the front end fetching the next
  launch, its blocks being dispatched). 0.4 µs, an estimate: NVIDIA's same article
  shows a graph of short kernels at ~0.5 µs per kernel above the kernels' own time.
- ``min_kernel_time``: the shortest a kernel runs even when it touches a few bytes: one
  DRAM round trip for its loads, its stores drained, its blocks retired. 1.0 µs, an
  estimate. ``kernel_gap + min_kernel_time`` is the per-kernel floor of graph replay;
  it is the figure ExecuTorch's graph-replay decode anchor constrains (see
  ``workbench.app.anchors``), and ``workbench.calibrate`` measures both on a real GPU.
- ``host_flops``, ``host_memory_bandwidth``, ``host_op_overhead``: the CPU that runs host
  ops: sustained FLOP/s, DRAM bytes/s, and the per-op cost of the framework (estimates).

``CostModel.compose(gpu=, host=, link=, runtime=)`` builds a model from named parts, each
with the source of every figure (``machine.parts``, ``data/parts/parts.csv``); a measured
preset is a part too (``gpu="measured:h200"``). ``runtime`` may instead be any object
with the ``RuntimeTerms`` protocol: a runtime described by its own terms, which sets the
figures it knows on top of the composed machine (the core names no such runtime; the
application's runtime profiles of published engines are ones).

Figures in the presets are published datasheet peaks, published measurements or stated
estimates, as each comment says; ``workbench.calibrate(backend="cuda")`` measures every
one of them on the machine at hand and writes a measured preset under
``data/measured/``, loadable as ``CostModel.preset("measured:<name>")`` or
``CostModel.load(path)``.
"""

from __future__ import annotations

import functools
import json
import math
import os
from types import MappingProxyType
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping, Optional, Protocol, Union, runtime_checkable

import torch

from ..devices import CopyKind, Device, DeviceError, DeviceLike
from ..file_reading import parse_json, read_regular_file
from ..json_fields import dataclass_fields_of
from ..plain_names import PLAIN_NAME_RULE, is_plain_name
from . import costs
from .parts import PART_FIELDS, PartsFile, link_host, part_facts, part_figures, part_names, parts_file_key
# What an op costs is counted in ``op_cost``; its names stay importable from here.
from .op_cost import (
    CostModelError,
    CostModelTypeError,
    CostModelWarning,
    CountedCost,
    OpCost,
    Stored,
    UncountedOps,
    concrete_size,
    cost_depends_on_data,
    count_op_cost,
    grouped_mm_cost,
    op_cost,
    op_label,
    present_groups_count,
)

DTYPE_CLASSES: tuple[str, ...] = ("fp64", "fp32", "bf16", "fp8")
LAUNCH_MODES: tuple[str, ...] = ("eager", "graph")


def check_launch(launch: Any) -> str:
    """``launch`` if it names a launch mode (rule 6), else an error listing the valid ones."""
    if not isinstance(launch, str) or launch not in LAUNCH_MODES:
        raise LaunchModeError(
            f"launch must be one of {', '.join(map(repr, LAUNCH_MODES))} ('eager': one launch per "
            f"operation; 'graph': the call's device operations captured once and replayed), got {launch!r}"
        )
    return launch


class LaunchModeError(CostModelError):
    """A launch mode that is not one of ``LAUNCH_MODES``."""


#: Figures a cost model no longer has, ignored when a file holds them (rule 8): the
#: workload's, not the machine's.
RETIRED_FIELDS = frozenset({"prefetch_hit_rate"})
#: Prefix of a measured preset's name: ``CostModel.preset("measured:h200")``.
MEASURED_PREFIX = "measured:"
#: Environment variable naming another folder of measured presets (default: ``data/measured``).
MEASURED_DIR_ENV = "WORKBENCH_MEASURED_DIR"


#: A cost model file is a few kilobytes; anything this large is not one.
_MAX_FILE_BYTES = 16 << 20


# Datasheet presets are the shipped parts (``machine.parts``, ``data/parts/parts.csv``):
# a device preset is a gpu part, a link preset a link part, a host preset a host part; every
# preset launches as the "compiled" runtime part. Each figure's source is in that table.
_PRESET_RUNTIME = "compiled"


# Figures that may be 0 (a fixed cost can vanish); every other number must be > 0.
_MAY_BE_ZERO = frozenset(
    {"h2d_latency", "d2h_latency", "d2d_latency", "launch_overhead", "executor_overhead",
     "graph_launch_overhead", "kernel_gap", "min_kernel_time", "host_op_overhead", "kernels_per_layer",
     "visited_expert_kernels", "copies_per_expert", "copy_overhead", "dequant_kernels_per_expert"}
)  # fmt: skip
# Figures that are shares in [0, 1].
_SHARES = frozenset({"overlap", "launch_overlap", "pageable_copies", "loads_all_experts", "fuses_row_picks"})
# Runtime terms added after measured presets were first written: a file without them
# takes the defaults (this executor's own terms), which no measurement sets.
_LATER_TERMS = frozenset({"overlap", "launch_overlap", "kernels_per_layer", "visited_expert_kernels",
                          "copies_per_expert", "pageable_copies", "loads_all_experts", "copy_overhead",
                          "host_matvec_rates", "fuses_row_picks", "dequant_kernels_per_expert"})  # fmt: skip


_CHECKED_RATES: set[Any] = set()


def _check_rates(rates: Any) -> None:
    """``host_matvec_rates`` is a tuple of (format name, weights/s > 0), one per format
    (a tuple already checked is not checked again)."""
    try:
        if rates in _CHECKED_RATES:
            return
    except TypeError:  # unhashable: not a tuple of pairs
        pass
    ok = isinstance(rates, tuple) and all(
        isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) and pair[0]
        and not isinstance(pair[1], bool) and isinstance(pair[1], (int, float)) and math.isfinite(pair[1]) and pair[1] > 0
        for pair in rates)  # fmt: skip
    if not ok or len({name for name, _ in rates}) != len(rates):
        raise CostModelError(f"CostModel.host_matvec_rates must be a tuple of (weight format, weights/s > 0) pairs, "
                             f"one per format, got {rates!r}")
    if len(_CHECKED_RATES) < 4096:
        _CHECKED_RATES.add(rates)


def _choice(kind: str, name: str) -> dict[str, Any]:
    """The figures of preset ``name`` of ``kind`` ("device", "link" or "host")."""
    part = "gpu" if kind == "device" else kind
    if not isinstance(name, str) or name not in part_names(part):
        raise CostModelError(f"unknown {kind} preset {name!r}; valid: {', '.join(part_names(part))}")
    return part_figures(part, name)


def measured_dir() -> Path:
    """The folder of measured presets: ``$WORKBENCH_MEASURED_DIR`` if set, else the
    repository's ``data/measured``."""
    override = os.environ.get(MEASURED_DIR_ENV, "").strip()
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2] / "data" / "measured"


def measured_preset_names() -> tuple[str, ...]:
    """Names of the measured presets in ``measured_dir()`` (``h200`` for ``h200.json``;
    hidden files, such as a save's temporary file, are none)."""
    folder = measured_dir()
    return tuple(sorted(p.stem for p in folder.glob("*.json") if is_plain_name(p.stem))) if folder.is_dir() else ()


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


#: The parts a ``CostModel()`` given no figures is made of: its defaults are these parts'
#: figures in the parts table (``data/parts/parts.csv``), never constants of this module.
DEFAULT_PARTS: Mapping[str, str] = MappingProxyType({"gpu": "h200", "host": "x86_server", "link": "pcie_gen5",
                                                     "runtime": _PRESET_RUNTIME})
_DEFAULT: Mapping[str, Any] = MappingProxyType({field: value for kind, name in DEFAULT_PARTS.items()
                                               for field, value in part_figures(kind, name).items()})  # fmt: skip


@runtime_checkable
class RuntimeTerms(Protocol):
    """A runtime given by its own terms, for ``CostModel.compose(runtime=...)``.

    ``cost_model_figures(machine, parts)`` gets the figures composed so far (the GPU, host
    and link parts' and the ``compiled`` runtime part's, by field name, and the gpu and
    host parts' descriptive facts as ``"host.sockets"``, ``"gpu.memory_bytes"`` and the
    like) and the part names (``{"gpu": ..., "host": ..., "link": ...}``), and returns a
    mapping of the figures the runtime sets (``CostModel`` field names; the rest stay the
    parts'): its launch mode and costs, its overlap, its kernels per layer, its per-copy
    cost, the host's achieved bandwidth and matvec rates. ``name`` ends the model's name.
    """

    @property
    def name(self) -> str: ...

    def cost_model_figures(self, machine: Mapping[str, Any], parts: Mapping[str, str]) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class CostModel:
    """Link, device, launch and host figures of a modeled machine, and the times they imply.

    What each figure means physically and where the preset values come from: see the
    module docstring.
    """

    # Host↔device link, per direction, and the device↔device path.
    h2d_bandwidth: float = _DEFAULT["h2d_bandwidth"]  # bytes/s
    d2h_bandwidth: float = _DEFAULT["d2h_bandwidth"]  # bytes/s
    d2d_bandwidth: float = _DEFAULT["d2d_bandwidth"]  # bytes/s
    h2d_latency: float = _DEFAULT["h2d_latency"]  # s per copy
    d2h_latency: float = _DEFAULT["d2h_latency"]  # s per copy
    d2d_latency: float = _DEFAULT["d2d_latency"]  # s per copy
    pageable_factor: float = _DEFAULT["pageable_factor"]  # bandwidth multiplier for pageable host memory (0, 1]
    # Device.
    device_flops_fp64: float = _DEFAULT["device_flops_fp64"]  # FLOP/s
    device_flops_fp32: float = _DEFAULT["device_flops_fp32"]  # FLOP/s
    device_flops_bf16: float = _DEFAULT["device_flops_bf16"]  # FLOP/s, bf16 and fp16
    device_flops_fp8: float = _DEFAULT["device_flops_fp8"]  # FLOP/s
    device_memory_bandwidth: float = _DEFAULT["device_memory_bandwidth"]  # bytes/s
    # Launch (rules 6, 7).
    launch_mode: str = _DEFAULT["launch_mode"]  # "eager": one host launch per kernel; "graph": one per captured graph
    launch_overhead: float = _DEFAULT["launch_overhead"]  # s of host time per kernel launch (eager)
    executor_overhead: float = _DEFAULT["executor_overhead"]  # s of host time the workbench executor adds per step (eager)
    graph_launch_overhead: float = _DEFAULT["graph_launch_overhead"]  # s of host time per graph launch (graph)
    kernel_gap: float = _DEFAULT["kernel_gap"]  # s between back-to-back kernels on one stream
    min_kernel_time: float = _DEFAULT["min_kernel_time"]  # s, the shortest a kernel runs
    # A runtime's own terms for the time of a decode token (``speed.timer``); the defaults
    # are this workbench's executor running a graph.
    overlap: float = _DEFAULT["overlap"]  # share of the shorter of GPU and host-or-copy time hidden under the other
    launch_overlap: float = _DEFAULT["launch_overlap"]  # share of the shorter of host issue and device time hidden (eager)
    kernels_per_layer: float = _DEFAULT["kernels_per_layer"]  # kernels the runtime launches per decoder layer; 0: a graph's own count
    visited_expert_kernels: float = _DEFAULT["visited_expert_kernels"]  # kernels per expert of a loop visiting every expert of a layer; 0: none
    copies_per_expert: float = _DEFAULT["copies_per_expert"]  # copies the runtime makes per routed expert it loads; 0: a graph's own copies
    pageable_copies: float = _DEFAULT["pageable_copies"]  # share of copied bytes staged from pageable host memory
    loads_all_experts: float = _DEFAULT["loads_all_experts"]  # 1: the runtime loads every expert its loop visits that the GPU does not hold
    copy_overhead: float = _DEFAULT["copy_overhead"]  # s a runtime adds to every copy beyond the link's latency (hooks, allocation, sync)
    fuses_row_picks: float = _DEFAULT["fuses_row_picks"]  # 1: the runtime fuses a pick of weight rows into the op reading them (op_work rule 2)
    # kernels that dequantize a low-bit routed expert into a 16-bit copy before its matmul
    # reads it (an unfused dequantization, speed.timer rule 2); 0: dequantized inside the matmul
    dequant_kernels_per_expert: float = 0.0
    host_matvec_rates: tuple[tuple[str, float], ...] = ()  # (weight format, weights/s the host multiplies), per format
    # Host.
    host_flops: float = _DEFAULT["host_flops"]  # FLOP/s, any dtype
    host_memory_bandwidth: float = _DEFAULT["host_memory_bandwidth"]  # bytes/s
    host_op_overhead: float = _DEFAULT["host_op_overhead"]  # s per host op
    name: str = "+".join(DEFAULT_PARTS[k] for k in ("gpu", "link", "host"))

    def __post_init__(self) -> None:
        for f in _FIELDS:
            value = getattr(self, f.name)
            if f.name == "name":
                if not isinstance(value, str):
                    raise CostModelTypeError(f"CostModel.name must be a string, got {value!r}")
                continue
            if f.name == "launch_mode":
                if value not in LAUNCH_MODES:
                    raise CostModelError(
                        f"CostModel.launch_mode must be one of {', '.join(LAUNCH_MODES)} "
                        f"(per-kernel launches or CUDA-graph replay), got {value!r}"
                    )
                continue
            number = not isinstance(value, bool) and isinstance(value, (int, float))
            if f.name == "host_matvec_rates":
                _check_rates(value)
                continue
            if f.name in _SHARES:
                if not number or not 0.0 <= value <= 1.0:
                    raise CostModelError(f"CostModel.{f.name} must be a share in [0, 1], got {value!r}")
                continue
            if not number:
                raise CostModelTypeError(f"CostModel.{f.name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise CostModelError(f"CostModel.{f.name} must be finite, got {value}")
            if f.name in _MAY_BE_ZERO:
                if value < 0:
                    raise CostModelError(f"CostModel.{f.name} must be >= 0, got {value}")
            elif value <= 0:
                raise CostModelError(f"CostModel.{f.name} must be > 0, got {value}")
        if self.pageable_factor > 1:
            raise CostModelError(f"CostModel.pageable_factor must be in (0, 1], got {self.pageable_factor}")

    # -- presets and files -----------------------------------------------------------------
    @classmethod
    def preset(
        cls, device: str = "h200", link: Optional[str] = None, host: Optional[str] = None
    ) -> "CostModel":
        """A model from named presets, e.g. ``CostModel.preset("a100_80gb", link="pcie_gen4")``.

        ``device`` is a datasheet preset or ``"measured:<name>"``, a measured preset from
        ``measured_dir()`` (written by ``workbench.calibrate``). Datasheet presets default
        to ``link="pcie_gen5"`` and ``host="x86_server"`` — the link's own host for a link
        that exists with one host only (NVLink-C2C: ``grace``, a GH200); a measured preset
        keeps its own link and host figures unless ``link`` or ``host`` names a preset to
        put instead (a link with its own host brings that host).
        """
        if isinstance(device, str) and device.startswith(MEASURED_PREFIX):
            stem = device[len(MEASURED_PREFIX) :]
            if not is_plain_name(stem):
                raise CostModelError(
                    f"measured preset name {stem!r} is not a plain name: give the name of a preset in {measured_dir()} "
                    f"({PLAIN_NAME_RULE}), not a path; load a file elsewhere with CostModel.load(path)"
                )
            path = measured_dir() / f"{stem}.json"
            if not stem or not path.is_file():
                found = ", ".join(MEASURED_PREFIX + n for n in measured_preset_names()) or "none yet"
                raise CostModelError(f"no measured preset {device!r} (looked for {path}); measured presets: {found}")
            model = cls.load(path)
            if link is not None:
                model = model.with_link(link)
            if host is not None:
                model = replace(model, **_choice("host", host))
            return model
        link = "pcie_gen5" if link is None else link
        host = _host_for(link, host, None)
        values = {
            **_choice("device", device),
            **_choice("link", link),
            **_choice("host", host),
            **part_figures("runtime", _PRESET_RUNTIME),
        }
        return cls(**values, name=f"{device}+{link}+{host}")

    @classmethod
    def compose(
        cls,
        gpu: str = "h200",
        host: Optional[str] = None,
        link: str = "pcie_gen5",
        runtime: Union[str, RuntimeTerms] = "compiled",
        parts: PartsFile = None,
    ) -> "CostModel":
        """A model of a machine put together from named parts (``machine.parts``): each
        part sets its own figures, e.g. ``CostModel.compose(gpu="rtx_4090",
        host="epyc_9355", link="pcie_gen4", runtime="compiled_graph")``.

        Any part may be ``"measured:<name>"``: that part's figures from the measured preset
        ``<name>`` (``gpu="measured:h200"`` takes the measured H200's math and memory
        figures, and so on). ``runtime`` may also be a ``RuntimeTerms`` object: the
        ``compiled`` runtime part first, then the figures the object sets. ``parts``: the
        path of a parts file of your own (``machine.parts``): its parts join the shipped
        ones. ``host`` defaults to ``x86_server``, or to the link's own host when the link
        exists with one host only (NVLink-C2C joins a Hopper GPU to a Grace CPU: ``grace``);
        naming another host with such a link is refused. The name is ``gpu+link+host+runtime``."""
        terms: Optional[RuntimeTerms] = None
        if not isinstance(runtime, str):
            if not (callable(getattr(runtime, "cost_model_figures", None)) and isinstance(getattr(runtime, "name", None), str)):
                raise CostModelTypeError(f"runtime must be a runtime part name (a string) or an object with "
                                         f"name and cost_model_figures (RuntimeTerms), got {runtime!r}")
            terms, runtime = runtime, _PRESET_RUNTIME
        for kind, name in (("gpu", gpu), ("link", link), ("runtime", runtime)):
            if not isinstance(name, str):
                raise CostModelTypeError(f"{kind} must be a part name (a string), got {name!r}")
        if host is not None and not isinstance(host, str):
            raise CostModelTypeError(f"host must be a part name (a string), got {host!r}")
        host = _host_for(link, host, parts)
        values = dict(_composed(gpu, host, link, runtime, parts))
        if terms is None:
            return cls(**values, name=f"{gpu}+{link}+{host}+{runtime}")
        machine = {**values, **_facts_of(gpu, host, parts)}
        figures = _runtime_figures(terms, machine, {"gpu": gpu, "host": host, "link": link})
        return cls(**{**values, **figures}, name=f"{gpu}+{link}+{host}+{terms.name}")

    @staticmethod
    def presets() -> dict[str, tuple[str, ...]]:
        """The preset names: ``{"device": (...), "link": (...), "host": (...), "measured": (...)}``."""
        return {
            "device": part_names("gpu"),
            "link": part_names("link"),
            "host": part_names("host"),
            "measured": tuple(MEASURED_PREFIX + n for n in measured_preset_names()),
        }

    def to_dict(self) -> dict[str, Any]:
        """Every figure by field name (plain floats and strings; the host's matvec rates as
        a mapping of format to weights/s: JSON-ready)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values["host_matvec_rates"] = dict(self.host_matvec_rates)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> "CostModel":
        """The model with exactly these figures: every field but ``name`` must be present
        (a file that lacks one would silently take another machine's figure)."""
        if not isinstance(values, dict):
            raise CostModelTypeError(f"a cost model is a dict of figures, got {type(values).__name__}")
        values = dataclass_fields_of(cls, values, "cost model figures", CostModelError, optional={"name", *_LATER_TERMS},
                                     ignored=RETIRED_FIELDS)  # rule 8        values = dict(values)
        if "host_matvec_rates" in values:
            values["host_matvec_rates"] = _rates_from(values["host_matvec_rates"])
        return cls(**values)

    def host_matvec_rate(self, weight_format: str) -> Optional[float]:
        """Weights per second the host multiplies when they are stored in ``weight_format``
        (dequantizing them on the way), as the runtime states it; None when it states none."""
        return dict(self.host_matvec_rates).get(weight_format)

    def to_json(self) -> str:
        """``to_dict()`` as JSON text."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "CostModel":
        """The model a ``to_json()`` text (or a measured preset file's text) describes."""
        data = parse_json(text, "cost model JSON", CostModelError)
        if isinstance(data, dict) and "cost_model" in data:  # a measured preset file
            data = data["cost_model"]
        return cls.from_dict(data)

    @classmethod
    def load(cls, path: Union[str, Path]) -> "CostModel":
        """The model saved at ``path``: a measured preset (``workbench.calibrate``) or a
        ``to_json()`` file."""
        path = Path(path)
        data = read_regular_file(path, "cost model file", CostModelError, max_bytes=_MAX_FILE_BYTES)
        try:
            return cls.from_json(data.decode("utf-8"))
        except UnicodeDecodeError:
            raise CostModelError(f"cost model file {path} is not text (not UTF-8); it must hold JSON") from None
        except RecursionError:
            raise CostModelError(f"cost model file {path} nests JSON too deeply; it is not a cost model") from None
        except (OverflowError, ValueError, TypeError) as exc:
            if isinstance(exc, CostModelError):
                raise
            raise CostModelError(f"cost model file {path} holds a value out of range ({type(exc).__name__}: {exc})") from None

    def with_link(self, link: str) -> "CostModel":
        """This model with another link preset; a link that exists with one host only
        brings that host too (NVLink-C2C: a GH200's Grace CPU, never an x86 server's)."""
        name = self.name.split("+")
        if len(name) >= 2:
            name[1:2] = [link]
        else:
            name.append(link)
        figures = _choice("link", link)
        own_host = link_host(link)
        if own_host is not None:
            figures.update(_choice("host", own_host))
            if len(name) >= 3:
                name[2] = own_host
        return replace(self, **figures, name="+".join(name))

    def with_launch_mode(self, mode: str) -> "CostModel":
        """This model launching kernels per op (``"eager"``) or by graph replay (``"graph"``)."""
        return replace(self, launch_mode=mode)

    # -- times -----------------------------------------------------------------------------
    def copy_time_us(self, kind: str, nbytes: int, pinned: bool = True) -> float:
        """Microseconds to copy ``nbytes`` in direction ``kind`` (rule 1)."""
        try:
            kind = CopyKind.parse(kind).value
        except DeviceError as exc:
            raise CostModelError(str(exc)) from None
        if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
            raise CostModelError(f"nbytes must be an int >= 0, got {nbytes!r}")
        return costs.copy_seconds(self, kind, nbytes, pinned) * 1e6

    def reuse_copy_time_us(self, link_bytes: int, device_bytes: int, pinned: bool = True) -> float:
        """Microseconds for a reuse copy moving ``link_bytes`` over h2d and ``device_bytes``
        within device memory, in one launch (rule 5)."""
        for name, value in (("link_bytes", link_bytes), ("device_bytes", device_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise CostModelError(f"{name} must be an int >= 0, got {value!r}")
        return costs.reuse_copy_seconds(self, link_bytes, device_bytes, pinned) * 1e6

    def peak_flops(self, device: DeviceLike, dtype: torch.dtype) -> float:
        """Peak FLOP/s for ``dtype`` ops on ``device`` (host: ``host_flops``)."""
        if Device.parse(device).is_host:
            return self.host_flops
        return getattr(self, f"device_flops_{dtype_class(dtype)}")

    def memory_bandwidth(self, device: DeviceLike) -> float:
        """Memory bandwidth (bytes/s) of ``device``."""
        return self.host_memory_bandwidth if Device.parse(device).is_host else self.device_memory_bandwidth

    def compute_time_us(self, flops: int, bytes_touched: int, device: DeviceLike, dtype: torch.dtype = torch.float32) -> float:
        """Microseconds an op runs on ``device`` (rule 2): a device kernel's own duration,
        without its launch (the scheduler charges launches, rule 6); a host op with its
        overhead."""
        for name, value in (("flops", flops), ("bytes_touched", bytes_touched)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise CostModelError(f"{name} must be a number >= 0, got {value!r}")
        if Device.parse(device).is_host:
            return costs.host_op_seconds(self, flops, bytes_touched) * 1e6
        return costs.kernel_seconds(self, flops, bytes_touched, dtype_class(dtype)) * 1e6

    def link_breakeven_flops_per_byte(self, dtype: torch.dtype = torch.bfloat16) -> float:
        """FLOPs per byte streamed over h2d needed to hide the copy behind compute."""
        return self.peak_flops("cuda", dtype) / self.h2d_bandwidth


def _rates_from(value: Any) -> tuple[tuple[str, float], ...]:
    """``host_matvec_rates`` as a file holds it (a mapping, or pairs) as the field's tuple."""
    pairs = value.items() if isinstance(value, Mapping) else value
    try:
        return tuple(sorted((name, rate) for name, rate in pairs))
    except (TypeError, ValueError):
        raise CostModelError(f"host_matvec_rates must map weight formats to weights/s, got {value!r}") from None


def _host_for(link: str, host: Optional[str], parts: PartsFile) -> str:
    """The host a machine with ``link`` has: ``host`` as given, else the link's own host
    (a link that exists with one host only) or ``x86_server``; another host than the
    link's own is refused (no such machine exists)."""
    own = link_host(link, parts) if not link.startswith(MEASURED_PREFIX) and link in part_names("link", parts) else None
    if host is None:
        return own or "x86_server"
    if own is not None and host != own:
        raise CostModelError(f"the link {link!r} exists only with the {own!r} host (NVLink-C2C joins a Hopper GPU to "
                             f"a Grace CPU in one superchip, a GH200); host {host!r} with it is no machine: give "
                             f"host={own!r} or leave host out")
    return host


def _composed(gpu: str, host: str, link: str, runtime: str, parts: PartsFile) -> Mapping[str, Any]:
    """The figures the named parts set, by field: read once per parts and file version."""
    key = parts_file_key(parts)
    return _composed_cached(gpu, host, link, runtime, str(parts) if parts is not None else None, key)


@functools.lru_cache(maxsize=1024)
def _composed_cached(gpu: str, host: str, link: str, runtime: str, parts: Optional[str], _key: Any) -> Mapping[str, Any]:
    values: dict[str, Any] = {}
    for kind, name in (("gpu", gpu), ("host", host), ("link", link), ("runtime", runtime)):
        if name.startswith(MEASURED_PREFIX):
            measured = CostModel.preset(name).to_dict()
            values.update({field: measured[field] for field in PART_FIELDS[kind]})
        else:
            values.update(part_figures(kind, name, parts))
    return MappingProxyType(values)


def _facts_of(gpu: str, host: str, parts: PartsFile) -> Mapping[str, float]:
    """The descriptive facts of the gpu and host parts, as ``"gpu.memory_bytes"`` and the
    like (a measured part states none)."""
    return _facts_cached(gpu, host, str(parts) if parts is not None else None, parts_file_key(parts))


@functools.lru_cache(maxsize=1024)
def _facts_cached(gpu: str, host: str, parts: Optional[str], _key: Any) -> Mapping[str, float]:
    facts: dict[str, float] = {}
    for kind, name in (("gpu", gpu), ("host", host)):
        if not name.startswith(MEASURED_PREFIX):
            facts.update({f"{kind}.{field}": value for field, value in part_facts(kind, name, parts).items()})
    return MappingProxyType(facts)


def _runtime_figures(terms: RuntimeTerms, machine: Mapping[str, Any], parts: Mapping[str, str]) -> dict[str, Any]:
    """The figures ``terms`` sets on a composed machine, checked: a mapping of known
    ``CostModel`` fields (their values are checked when the model is built)."""
    figures = terms.cost_model_figures(dict(machine), dict(parts))
    if not isinstance(figures, Mapping) or not all(isinstance(k, str) for k in figures):
        raise CostModelTypeError(f"runtime {terms.name!r}: cost_model_figures must return a mapping of CostModel field "
                                 f"names to figures, got {type(figures).__name__}")
    known = {f.name for f in fields(CostModel)} - {"name"}
    unknown = sorted(set(figures) - known)
    if unknown:
        raise CostModelError(f"runtime {terms.name!r} sets figures a cost model does not have: {unknown}; "
                             f"valid: {', '.join(sorted(known))}")
    return dict(figures)


_FIELDS = fields(CostModel)  # the checks of __post_init__ walk these, once per model made
