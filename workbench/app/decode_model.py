"""A decode-speed model for every regime of the published batch-1 runs, and its fits.

``predict_decode(run, fits)`` models one published run (a row of
``published_decode_runs()``): where the routed experts live (the run's regime and
``offload_detail``), how many bytes each part of the machine reads per token (from the
model family's published sizes and the run's weight format), the named parts of its GPU,
host CPU and link (``data/parts/parts.csv``) and its runtime's profile
(``data/runtimes/runtime_profiles.csv``). ``fit_regime_model(runs)`` fits the profile
terms marked ``fit:`` to the runs, each with its leave-one-out error.

Rules:

1. Time per token = GPU part + host part + copy part, less the overlapped share:
   ``t = t_gpu + t_side - overlap × min(t_gpu, t_side)`` with ``t_side = t_host + t_copy``.
2. GPU part: device time = the bytes the GPU reads (active non-expert weights and the
   active experts it computes) over ``gpu_bandwidth_fraction × datasheet bandwidth``, plus
   kernels × ``kernel_time``; kernels = layers × ``kernels_per_layer`` + (when the runtime
   loops over every expert) MoE layers × experts × ``kernels_per_visited_expert``. Eager
   runtimes add the host's issue time, kernels × ``per_launch_cost``, less the
   ``launch_overlap`` share of the shorter of the two (1: the step takes the longer).
3. Host part: the active expert bytes computed on the host (only the host layers' for
   partial offload; the host share of each layer's experts when some stay on the GPU)
   over ``host_bandwidth_fraction × the host's DRAM peak`` (channels × speed × 8 bytes),
   or, when longer, the same experts' weights over the rate the host's cores dequantize
   and multiply them, cores × ``dequant_rate`` (weights per second per core; 0: the
   runtime's rate is not known and only the memory term counts): a roofline of the two.
4. Copy part: misses × (active expert bytes / link bandwidth + copies × ``per_copy_cost``),
   one copy per missed expert. The GPU expert cache holds the stated resident experts,
   else the GPU's memory less the non-expert weights and a tenth kept for context,
   activations and the KV cache; a run that streams every expert has none. Its hit rate
   depends on the routing, which the prediction names (``DecodePrediction.routing``):
   a trace the caller passes (``RoutingRecorder`` or generated; its layers and experts
   must be the model's) or, when the routing table (``data/routing/locality.csv``) has
   the family's published statistics, a trace generated to match them
   (``moe.locality.locality_trace``, ``ROUTING_TOKENS`` tokens, seed 0): an LRU cache of
   the held share of each layer's experts replayed over it (``lru_hit_rate``); else
   uniform routing, under which the hit rate is the share of all expert bytes held.
5. Bytes: expert parameters = MoE layers × experts × ``expert_params`` (family facts,
   ``data/published/model_facts.json``), the rest of the published total is non-expert;
   active likewise with top-k. Bits per weight: a file size the run states (all weights
   alike); else the run's expert bits with the non-expert bits left over from a family
   GGUF file of that format; else the run's bits; else a family file; else the format's
   nominal bits (``data/formats/weight_formats.csv``).
6. A run the model cannot express is not modeled: it gets None and the reason (an unknown
   GPU, host or link where it matters, unknown sizes or bits, an unstated split, a model
   larger than an all-on-GPU card, several GPUs, experts read from storage).
7. A fitted term is fitted on the runs that depend on it and on no term not yet fitted (the
   first such term the profile table names whose runs suffice goes next), on at least 3 runs: the value at which the
   median of log(modeled / published) is 0 (bisection within the field's range; the
   bound when none inside makes it 0). Its leave-one-out error for a run: refit without
   it, predict it, ``|predicted / published - 1|``.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd

from ..file_reading import finite_number, parse_json, read_regular_file
from ..moe.locality import LocalityFit, locality_models, locality_trace, lru_hit_rate
from ..moe.routing import RoutingTrace
from ..runtime.parts import part_facts, part_figures, part_names
from .runtime_profiles import RuntimeProfile, RuntimeProfileError, profile_for, runtime_profiles
from ..weight_formats import weight_formats
from .published_runs import AnchorError, FittedTerm, gpu_part, published_decode_runs, published_dir

__all__ = ["CACHE_RESERVE", "ROUTING_TOKENS", "UNIFORM_ROUTING", "routing_for", "DecodeLayout", "DecodePrediction", "decode_layout", "ModelFamily", "RegimeModel", "fit_regime_model", "host_part",
           "link_part", "model_families", "predict_decode", "regime_model", "runtime_profile", "time_decode", "regime_model_tok_s", "weight_bits"]  # fmt: skip

#: A published run: a row of ``published_decode_runs()`` or a dict of its columns.
Run = Mapping[str, Any]

#: Tokens of the trace generated to match a family's published routing statistics (rule 4).
ROUTING_TOKENS = 2048

#: The share of a GPU's memory an expert cache leaves for the CUDA context, activations
#: and the KV cache (an estimate, rule 4).
CACHE_RESERVE = 0.1

#: The host part a run's ``cpu`` text names (whole phrases; two sockets first).
_HOST_PARTS: tuple[tuple[str, str], ...] = (
    (r"2 x AMD EPYC 9355", "epyc_9355_2s"), (r"EPYC 9355", "epyc_9355"), (r"2 x AMD EPYC 9654", "epyc_9654_2s"),
    (r"i3-8100", "core_i3_8100"), (r"E5-2650 v4", "xeon_e5_2650v4"), (r"i9-10900X", "core_i9_10900x"),
    (r"i5-14600KF", "core_i5_14600kf"), (r"i9-14900KF", "core_i9_14900kf_ddr5_4200"),
)  # fmt: skip


@dataclass(frozen=True)
class ModelFamily:
    """A model family's facts (rule 5), from ``data/published/model_facts.json``."""

    name: str
    matches: str
    layers: int
    first_dense: int
    num_experts: int
    top_k: int
    expert_params: int
    files: tuple[tuple[str, float, float], ...]  # (format, bytes, params)

    @property
    def moe_layers(self) -> int:
        return self.layers - self.first_dense


@functools.lru_cache(maxsize=2)
def model_families(path: Optional[Path] = None) -> tuple[ModelFamily, ...]:
    """The model families of the facts file (default: the shipped one), checked."""
    path = path or published_dir() / "model_facts.json"
    data = parse_json(read_regular_file(path, "model facts file (JSON)", AnchorError, max_bytes=1 << 20),
                      f"model facts file {path}", AnchorError)
    try:
        families = []
        for f in data["families"]:
            if not str(f.get("source", "")).strip() or any(not str(x.get("source", "")).strip() for x in f["files"]):
                raise AnchorError(f"{path}: family {f.get('name')!r} or one of its files has no source")
            families.append(ModelFamily(str(f["name"]), str(f["matches"]), int(f["layers"]), int(f["first_dense"]),
                                        int(f["num_experts"]), int(f["top_k"]), int(f["expert_params"]),
                                        tuple((str(x["format"]), float(x["bytes"]), float(x["params"])) for x in f["files"])))  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AnchorError(f"{path} is not a readable model facts file ({type(exc).__name__}: {exc}); it holds "
                          "{'families': [{name, matches, layers, first_dense, num_experts, top_k, expert_params, "
                          "files, source}]}") from None
    return tuple(families)


def _family(run: Run) -> Optional[ModelFamily]:
    text = run["model"] if isinstance(run["model"], str) else ""
    return next((f for f in model_families() if re.search(f.matches, text)), None)


def weight_bits(run: Run, family: ModelFamily, expert_params: float, other_params: float) -> Optional[tuple[float, float, str]]:
    """(expert bits, non-expert bits, how they were found) per weight for ``run`` (rule 5),
    or None when neither the run, its family nor the format table says."""
    text = run["weight_format"] if isinstance(run["weight_format"], str) else ""
    total = expert_params + other_params
    stated = re.search(r"\(~?([\d.]+)\s*(GiB|GB) file\)", text)
    if stated:
        size = float(stated.group(1)) * (2**30 if stated.group(2) == "GiB" else 1e9)
        return size * 8 / total, size * 8 / total, f"file size stated ({stated.group(0)[1:-1]})"
    bits = finite_number(run["bits_per_weight"])
    file = next(((fmt, b, p) for fmt, b, p in family.files if re.search(rf"\b{re.escape(fmt)}\b", text)), None)
    if bits is not None and file is not None:
        scale = file[2] / total  # the file's own parameter count
        other = (file[1] * 8 - bits * expert_params * scale) / (other_params * scale)
        return bits, other, f"{bits:g}-bit experts, the rest of the {file[0]} file ({file[1] / 2**30:.2f} GiB)"
    if bits is not None:
        return bits, bits, f"{bits:g} bits per weight stated"
    if file is not None:
        per_weight = file[1] * 8 / file[2]
        return per_weight, per_weight, f"family {file[0]} file ({file[1] / 2**30:.2f} GiB, {file[2] / 1e9:.2f} B params)"
    table = weight_formats()
    for word in re.findall(r"[A-Za-z0-9_]+", text.lower()):
        for fmt in table.values():
            if word == fmt.name or word in fmt.aliases:
                return fmt.bits_per_weight, fmt.bits_per_weight, f"format {fmt.name} ({fmt.bits_per_weight:g} bits)"
    return None


def host_part(cpu: object) -> Optional[str]:
    """The shipped host part a run's ``cpu`` text names, or None."""
    text = cpu if isinstance(cpu, str) else ""
    return next((part for phrase, part in _HOST_PARTS if re.search(phrase, text)), None)


def link_part(run: Run, gpu: str) -> tuple[Optional[str], str]:
    """The link part a run's copies cross and how it was chosen: the stated PCIe
    generation, else the GPU's own host interface (its datasheet bounds the link)."""
    text = run["link"] if isinstance(run["link"], str) else ""
    stated = re.search(r"PCIe (?:gen )?(\d)", text)
    facts = part_facts("gpu", gpu)
    gen = int(stated.group(1)) if stated else (int(facts["pcie_gen"]) if "pcie_gen" in facts else None)
    lanes = int(facts.get("pcie_lanes", 16))
    if gen is None:
        return None, "no link stated and no host interface for the GPU"
    name = f"pcie_gen{gen}" + ("" if lanes == 16 else f"_x{lanes}")
    if name not in part_names("link"):
        return None, f"no link part {name}"
    return name, "stated" if stated else "the GPU's interface"


@dataclass(frozen=True)
class DecodePrediction:
    """A modeled run: tok/s (None: not modeled, ``why`` says why) and what was used."""

    tok_s: Optional[float]
    why: str
    profile: str = ""
    parts: str = ""
    terms: tuple[str, ...] = ()  # the fitted terms the prediction depends on
    seconds: Mapping[str, float] = None  # type: ignore[assignment]  # gpu, host, copy parts
    routing: str = ""  # the routing the expert cache's hit rate assumes (rule 4); "" when no cache
    host_bound: str = ""  # what bounds the host part (rule 3): "memory" or "dequant_rate"; "" when no host part


def _offload_split(run: Run, family: ModelFamily) -> tuple[Optional[float], str]:
    """The share of the active expert bytes computed on the host, from ``offload_detail``."""
    detail = run["offload_detail"] if isinstance(run["offload_detail"], str) else ""
    if run["regime"] == "partial_offload":
        n = re.search(r"(?:--n-cpu-moe|ncmoe|-ncmoe) (\d+)", detail)
        if not n or "not stated" in detail or "N is in" in detail:
            return None, "which layers' experts are on the host is not stated"
        host_layers = max(0, min(int(n.group(1)), family.layers) - family.first_dense)
        return host_layers / family.moe_layers, f"{host_layers} of {family.moe_layers} MoE layers' experts on the host"
    gpu_experts = re.search(r"(\d+) GPU experts|--kt-num-gpu-experts (\d+)", detail)
    if gpu_experts:
        kept = int(gpu_experts.group(1) or gpu_experts.group(2))
        return 1 - kept / family.num_experts, f"{kept} of {family.num_experts} experts per layer on the GPU"
    return 1.0, "every routed expert on the host"


@dataclass(frozen=True)
class DecodeLayout:
    """What one run reads where per token, independent of any runtime term (rules 2-5)."""

    gpu: str
    parts: str  # the parts used, "gpu=... host=... link=..."
    expert_bytes: float  # active routed-expert bytes per token
    other_bytes: float  # active non-expert bytes per token
    host_share: float  # share of the active expert bytes computed on the host
    host_peak: float  # the host's DRAM peak, bytes/s (0: no host part used)
    host_cores: int  # the host part's cores (0: no host part used)
    expert_weights: float  # active routed-expert weights (parameters) per token
    gpu_bandwidth: float  # the GPU's datasheet memory bandwidth, bytes/s
    link_bandwidth: float  # the link's h2d bandwidth, bytes/s (0: no copies)
    copy_miss: float  # share of the active experts copied in per token
    layers: int
    moe_layers: int
    num_experts: int
    top_k: int
    cache_share: float = 0.0  # share of the experts the GPU cache holds (copied regime; 0: none)
    routing: str = ""  # the routing its hit rate assumed (rule 4)
    family: str = ""


def _run_key(run: Any) -> tuple[tuple[str, object], ...]:
    return tuple((c, None if isinstance(v, float) and math.isnan(v) else v) for c, v in run.items())


@functools.lru_cache(maxsize=256)
def _layout(key: tuple[tuple[str, object], ...]) -> tuple[Optional[DecodeLayout], str]:
    """The run's layout, or None and why it cannot be modeled (rule 6)."""
    run = dict(key)
    if (finite_number(run["gpu_count"]) or 1) > 1:
        return None, "split over several GPUs: not modeled"
    family = _family(run)
    total, active = finite_number(run["total_params_b"]), finite_number(run["active_params_b"])
    if total is None or active is None:
        return None, "model sizes (total and active parameters) not stated"
    if family is None:
        return None, f"no architecture facts (layers, experts, top-k) for {run['model']!r}"
    expert_total = family.moe_layers * family.num_experts * family.expert_params
    expert_active = family.moe_layers * family.top_k * family.expert_params
    other_total, other_active = total * 1e9 - expert_total, active * 1e9 - expert_active
    if other_total <= 0 or other_active <= 0:
        raise AnchorError(f"run {run['id']}: family {family.name}'s experts ({expert_total / 1e9:.2f} B, "
                          f"{expert_active / 1e9:.2f} B active) exceed the published size; the facts are wrong")
    bits = weight_bits(run, family, expert_total, other_total)
    if bits is None:
        return None, "bits per weight not stated (no file size, no known format)"
    expert_bits, other_bits, _ = bits
    host_share, copy_miss, host_peak, link_bandwidth, cache_share = 0.0, 0.0, 0.0, 0.0, 0.0
    host_cores = 0
    routing_note = ""
    host: Optional[str] = None
    detail = run["offload_detail"] if isinstance(run["offload_detail"], str) else ""
    regime = run["regime"]
    if regime in ("experts_on_host_compute", "partial_offload"):  # what the source leaves out first, then our parts
        share, why = _offload_split(run, family)
        if share is None:
            return None, why
        host_share = share
        host = host_part(run["cpu"])
        if host is None:
            stated = run["cpu"] if isinstance(run["cpu"], str) else ""
            return None, f"host CPU {'not a shipped part: ' + repr(stated) if stated else 'not stated'}"
    gpu = gpu_part(run["gpu"])
    if gpu is None:
        return None, f"no GPU part for {run['gpu']!r}"
    gpu_facts = part_facts("gpu", gpu)
    used = [f"gpu={gpu}"]
    if regime == "all_on_gpu":
        memory = gpu_facts.get("memory_bytes")
        size = (expert_total * expert_bits + other_total * other_bits) / 8
        if memory is not None and size > memory:
            return None, (f"{size / 1e9:.1f} GB of weights cannot all be on a {memory / 1e9:.0f} GB {gpu}: the run's "
                          "actual format is not stated")  # fmt: skip
    elif host is not None:
        stated_peak = part_facts("host", host).get("dram_peak_bandwidth")
        if stated_peak is None:
            return None, f"host part {host} states no DRAM peak"
        used.append(f"host={host}")
        host_peak = stated_peak
        host_cores = int(part_facts("host", host).get("cores", 0))
    elif regime == "experts_copied":
        if re.search(r"NVMe|SSD|ssd", f"{detail} {run['runtime']}"):
            return None, "experts read from storage: the model has no storage tier"
        link, how = link_part(run, gpu)
        if link is None:
            return None, how
        used.append(f"link={link}")
        link_bandwidth = part_figures("link", link)["h2d_bandwidth"]
        cache_share = _cache_share(run, gpu_facts, expert_total * expert_bits / 8, other_total * other_bits / 8)
        routing = routing_for(family.name)
        hit, routing_note = _hit_rate(cache_share, family, routing)
        copy_miss = 1.0 - hit
    else:
        raise AnchorError(f"run {run['id']}: unknown regime {regime!r}")
    return DecodeLayout(gpu, " ".join(used), expert_active * expert_bits / 8, other_active * other_bits / 8, host_share,
                        host_peak, host_cores, expert_active, part_figures("gpu", gpu)["device_memory_bandwidth"],
                        link_bandwidth, copy_miss,
                        family.layers, family.moe_layers, family.num_experts, family.top_k, cache_share,
                        routing_note, family.name), ""  # fmt: skip


#: What ``routing_for`` answers for a family without published routing statistics.
UNIFORM_ROUTING = "uniform"


@functools.lru_cache(maxsize=16)
def _published_routing(family: str) -> LocalityFit:
    return locality_trace(family, ROUTING_TOKENS, seed=0)


def routing_for(family: str) -> Union[LocalityFit, str]:
    """The routing the regime model assumes for ``family`` (rule 4): a trace fitted to its
    published statistics when the routing table has them, else ``UNIFORM_ROUTING``."""
    return _published_routing(family) if family in locality_models() else UNIFORM_ROUTING


def _hit_rate(share: float, family: ModelFamily, routing: Union[LocalityFit, RoutingTrace, str]) -> tuple[float, str]:
    """The expert cache's hit rate holding ``share`` of every layer's experts, and the
    routing it assumed, in words (rule 4)."""
    if share <= 0:
        return 0.0, "no expert cache"
    if isinstance(routing, str):
        return share, f"uniform routing (no published routing statistics for {family.name}): hit rate = share held {share:.3f}"
    trace = routing.trace if isinstance(routing, LocalityFit) else routing
    hit = lru_hit_rate(trace, share * family.num_experts)
    where = (f"a trace matching {family.name}'s published routing statistics (largest gap {routing.max_abs_error:.3f})"
             if isinstance(routing, LocalityFit) else f"the trace {trace.label!r}")  # fmt: skip
    return hit, (f"LRU of {share * family.num_experts:.2f} of {family.num_experts} experts per layer over {where}: "
                 f"hit rate {hit:.3f} (uniform routing: {share:.3f})")


def decode_layout(run: Run, routing: Optional[RoutingTrace] = None) -> tuple[Optional[DecodeLayout], str]:
    """What ``run`` reads where per token (rules 2-5), or None and why it is not modeled;
    ``routing``: a trace of the run's model for the expert cache (rule 4)."""
    layout, why = _layout(_run_key(run))
    if routing is None or layout is None:
        return layout, why
    if not isinstance(routing, RoutingTrace):
        raise AnchorError(f"routing must be a RoutingTrace (RoutingRecorder, locality_trace…), got {type(routing).__name__}")
    family = next(f for f in model_families() if f.name == layout.family)
    if (routing.num_layers, routing.num_experts, routing.top_k) != (family.moe_layers, family.num_experts, family.top_k):
        raise AnchorError(f"the routing trace has {routing.num_layers} layers of {routing.num_experts} experts, top-"
                          f"{routing.top_k}; {family.name} has {family.moe_layers} MoE layers of {family.num_experts}, "
                          f"top-{family.top_k}: pass a trace of that model")
    if layout.cache_share <= 0:
        return layout, why
    hit, note = _hit_rate(layout.cache_share, family, routing)
    return dataclasses.replace(layout, copy_miss=1.0 - hit, routing=note), why


def predict_decode(run: Run, fits: Mapping[str, float], profiles: Optional[tuple[RuntimeProfile, ...]] = None,
                   routing: Optional[RoutingTrace] = None) -> DecodePrediction:
    """The modeled decode speed of one published run with the fitted terms ``fits``
    (rules 1-6); ``routing``: a trace of the run's model for its expert cache (rule 4)."""
    profile = profile_for(run["runtime"], profiles)
    if profile is None:
        return DecodePrediction(None, f"no runtime profile matches {run['runtime']!r}")
    layout, why = decode_layout(run, routing)
    if layout is None:
        return DecodePrediction(None, why, profile.name)
    return time_decode(layout, profile, fits)


def time_decode(layout: DecodeLayout, profile: RuntimeProfile, fits: Mapping[str, float]) -> DecodePrediction:
    """The decode speed of ``layout`` under ``profile`` with the fitted terms ``fits``
    (rules 1-4)."""
    seconds = {"gpu": 0.0, "host": 0.0, "copy": 0.0}
    host_bound = ""
    if layout.host_share > 0:
        memory = layout.host_share * layout.expert_bytes / (layout.host_peak * profile.value("host_bandwidth_fraction", fits))
        rate = layout.host_cores * profile.value("dequant_rate", fits)
        compute = layout.host_share * layout.expert_weights / rate if rate > 0 else 0.0
        seconds["host"] = max(memory, compute)
        host_bound = "dequant_rate" if compute > memory else "memory"
    gpu_bytes = layout.other_bytes + (1 - layout.host_share) * layout.expert_bytes
    bandwidth = layout.gpu_bandwidth * profile.value("gpu_bandwidth_fraction", fits)
    kernels = layout.layers * profile.value("kernels_per_layer", fits)
    if profile.value("visits_every_expert", fits):
        kernels += layout.moe_layers * layout.num_experts * profile.value("kernels_per_visited_expert", fits)
    device = gpu_bytes / bandwidth + kernels * profile.value("kernel_time", fits)
    issue = kernels * profile.value("per_launch_cost", fits) if profile.launch_mode == "eager" else 0.0
    seconds["gpu"] = device + issue - profile.value("launch_overlap", fits) * min(device, issue)
    if layout.copy_miss > 0:
        copies = layout.copy_miss * layout.moe_layers * layout.top_k
        seconds["copy"] = (layout.copy_miss * layout.expert_bytes / layout.link_bandwidth
                           + copies * profile.value("per_copy_cost", fits))  # fmt: skip
    side = seconds["host"] + seconds["copy"]
    t = seconds["gpu"] + side - profile.value("overlap", fits) * min(seconds["gpu"], side)
    used = _fields_used(layout.host_share, layout.copy_miss)
    terms = tuple(sorted({profile.fitted[f] for f in used if f in profile.fitted}))
    return DecodePrediction(1.0 / t, "", profile.name, layout.parts, terms, seconds, layout.routing, host_bound)


def _fields_used(host_share: float, copy_miss: float) -> tuple[str, ...]:
    fields = ["gpu_bandwidth_fraction", "per_launch_cost", "kernel_time"]
    if host_share > 0:
        fields += ["host_bandwidth_fraction", "dequant_rate"]
    if copy_miss > 0:
        fields.append("per_copy_cost")
    return tuple(fields)


def _cache_share(run: Run, gpu_facts: Mapping[str, float], expert_bytes: float, other_bytes: float) -> float:
    """The share of the expert bytes the GPU expert cache holds (rule 4)."""
    text = f"{run['offload_detail']} {run['runtime']}"
    if re.search(r"no expert cache|re-uploads all selected experts", text):
        return 0.0
    resident = re.search(r"([\d.]+) GB of experts resident", text)
    if resident:
        held = float(resident.group(1)) * 1e9
    else:
        held = gpu_facts.get("memory_bytes", 0.0) * (1 - CACHE_RESERVE) - other_bytes
    return float(min(1.0, max(0.0, held / expert_bytes)))


# --- fits (rule 7) ---

#: Fitted fields' search range (low, high) for the bisection.
_BOUNDS = {"gpu_bandwidth_fraction": (0.02, 1.0), "host_bandwidth_fraction": (0.02, 1.0), "dequant_rate": (1e7, 1e12),
           "per_launch_cost": (1e-8, 1e-3), "kernel_time": (1e-8, 1e-3), "per_copy_cost": (1e-7, 1e-1)}  # fmt: skip
_MIN_FIT_ROWS = 3


@dataclass(frozen=True)
class RegimeModel:
    """Fitted terms and the profiles they fill in: ``tok_s(run)`` models one run."""

    fits: Mapping[str, float]
    terms: tuple[FittedTerm, ...]
    profiles: tuple[RuntimeProfile, ...]

    def predict(self, run: Run, routing: Optional[RoutingTrace] = None) -> DecodePrediction:
        """One run modeled; ``routing``: a trace of its model for the expert cache (rule 4)."""
        return predict_decode(run, self.fits, self.profiles, routing)

    def tok_s(self, run: Run) -> tuple[Optional[float], str, str, str, str]:
        """(modeled tok/s or None, why not, runtime profile, parts, routing) — the shape
        ``modeled_vs_published`` takes."""
        p = self.predict(run)
        return p.tok_s, p.why, p.profile, p.parts, p.routing


def _term_order(profiles: Sequence[RuntimeProfile]) -> list[tuple[str, str]]:
    order: list[tuple[str, str]] = []
    for profile in profiles:
        for field_, term in profile.fitted.items():
            if term not in [t for t, _ in order]:
                order.append((term, field_))
    return order


def _solve(rows: Sequence[Run], term: str, field_: str, fits: dict[str, float],
           profiles: tuple[RuntimeProfile, ...]) -> float:
    """The value of ``term`` at which the median log(modeled / published) over ``rows`` is 0."""
    low, high = _BOUNDS[field_]

    def gap(log_value: float) -> float:
        trial = {**fits, term: math.exp(log_value)}
        logs = [math.log(predict_decode(r, trial, profiles).tok_s / float(r["decode_tok_s"])) for r in rows]  # type: ignore[operator]
        return float(np.median(logs))

    a, b = math.log(low), math.log(high)
    ga, gb = gap(a), gap(b)
    if ga * gb > 0:  # no root inside: the bound nearer to one
        return math.exp(a if abs(ga) < abs(gb) else b)
    for _ in range(40):
        mid = (a + b) / 2
        gm = gap(mid)
        if (gm > 0) == (ga > 0):
            a, ga = mid, gm
        else:
            b = mid
    return math.exp((a + b) / 2)


def fit_regime_model(runs: Optional[pd.DataFrame] = None, profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> RegimeModel:
    """Fit every ``fit:`` term of the runtime profiles to ``runs`` (default: the shipped
    published table), in order, each on the runs that depend on it and on no term not
    yet fitted; every term with its leave-one-out errors (rule 7). A term with fewer than
    3 such runs is refused with an ``AnchorError``."""
    runs = runs if runs is not None else published_decode_runs()
    profiles = profiles if profiles is not None else runtime_profiles()
    order = _term_order(profiles)
    probe = {term: 0.5 * (_BOUNDS[f][0] + _BOUNDS[f][1]) if "fraction" in f else 1e-6 for term, f in order}
    needs: list[tuple[Run, tuple[str, ...]]] = []
    for _, series in runs.iterrows():
        run = series.to_dict()  # plain dicts: the fits predict each run thousands of times
        p = predict_decode(run, probe, profiles)
        if p.tok_s is not None:
            needs.append((run, p.terms))
    fits: dict[str, float] = {}
    terms = []
    pending = list(order)
    while pending:
        eligible = {term: [r for r, t in needs if term in t and set(t) <= set(fits) | {term}] for term, _ in pending}
        ready = [(term, f) for term, f in pending if len(eligible[term]) >= _MIN_FIT_ROWS]
        if not ready:
            raise AnchorError("fitted terms " + "; ".join(
                f"{term!r} has {len(eligible[term])} modeled runs that depend on it and on fitted terms only "
                f"({', '.join(r['id'] for r in eligible[term]) or 'none'})" for term, _ in pending)
                + f"; a fit needs at least {_MIN_FIT_ROWS}")
        term, field_ = ready[0]
        pending.remove((term, field_))
        rows = eligible[term]
        fits[term] = _solve(rows, term, field_, fits, profiles)
        errors = []
        for i, row in enumerate(rows):
            held_out = _solve(rows[:i] + rows[i + 1:], term, field_, fits, profiles)
            predicted = predict_decode(row, {**fits, term: held_out}, profiles).tok_s
            errors.append(abs(float(predicted) / float(row["decode_tok_s"]) - 1))  # type: ignore[arg-type]
        terms.append(FittedTerm(term if term == field_ else f"{term} ({field_})", fits[term], tuple(r["id"] for r in rows), tuple(errors)))
    return RegimeModel(dict(fits), tuple(terms), profiles)


@functools.lru_cache(maxsize=1)
def regime_model() -> RegimeModel:
    """The model fitted on the shipped published table and runtime profiles."""
    return fit_regime_model()


def runtime_profile(name: str, fits: Optional[Mapping[str, float]] = None,
                    profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> RuntimeProfile:
    """The runtime profile ``name`` with its fitted terms filled in — from ``fits``, by
    default the shipped regime model's — ready for ``CostModel.compose(gpu=, host=, link=,
    runtime=runtime_profile("executorch_graph"))``. An unknown name is refused with a
    ``RuntimeProfileError`` listing the valid ones."""
    table = profiles if profiles is not None else runtime_profiles()
    found = next((p for p in table if p.name == name), None)
    if found is None:
        raise RuntimeProfileError(f"no runtime profile {name!r}; valid: {', '.join(p.name for p in table)}")
    return found.resolved(fits if fits is not None else regime_model().fits)


def regime_model_tok_s(run: Run) -> tuple[Optional[float], str, str, str, str]:
    """The shipped regime model's answer for one run (``modeled_vs_published``'s default)."""
    return regime_model().tok_s(run)

