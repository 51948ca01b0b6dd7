"""The placements a runtime can express for a model on a machine: those that fit, ranked by predicted decode speed.

``plan_machine(model, gpus=, host=, runtime=, context=)`` enumerates what the runtime's
own flags can say — llama.cpp: every ``--n-cpu-moe N`` with every layer on the GPUs
(layers split over several GPUs in order, ``--tensor-split``); KTransformers: how many
experts of each layer stay on the GPU (``--kt-num-gpu-experts``); vLLM: how many GiB of
weights are offloaded to the host (``--cpu-offload-gb``); ExecuTorch: the whole model on
the GPU — keeps those whose bytes fit every device (``budgets``), and ranks them by the
decode model's tok/s (``speed.regime_model``: the same timer, runtime profile and fitted
terms as every published run) with the interval that runtime's evidence earns.

Rules:

1. A placement fits when every device's bytes — weights where the runtime puts them, the
   KV cache for ``context`` tokens, the runtime's compute buffers — are at most that
   device's usable bytes (``DeviceBudget.usable_bytes``; vLLM keeps its own
   ``VLLM_GPU_UTILIZATION`` share of each GPU instead of llama.cpp's margin).
2. When even the smallest GPU share a runtime can express (every routed expert on the
   host) does not fit, the machine is refused with how many bytes are missing on which
   device; when no placement fits the host, likewise.
3. A placement's time is ``time_decode`` of its layout: llama.cpp's as ``partial_offload``
   with ``host_layers = N`` (all_on_gpu for N = 0), KTransformers' as
   ``experts_on_host_compute`` with its GPU experts, vLLM's as ``experts_copied`` whose
   offloaded bytes all cross the link every token (its offload streams them to the GPU
   for each forward pass), ExecuTorch's as ``all_on_gpu``. Layers split over GPUs take
   the layer-weighted sum of each GPU's time (they run one after another). The interval
   is the runtime profile's earned one for that regime (``speed.evidence``).
4. Plans are ranked by predicted tok/s; within 0.1% the one with fewer GPU bytes first.
5. With no GPU (llama.cpp only, ``-ngl 0``) the host reads and multiplies every weight a
   token reads, with one host call per layer: the timer's host term over the whole token.
   No host-only run is modeled, so its interval is the runtime's host-compute one and its
   label says the placement is unvalidated.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import pandas as pd

from ..machine.cost_model import CostModel
from ..machine.parts import PartsFile, part_names
from ..speed.layout import DecodeLayout, ExpertPlacement, LayoutError
from ..speed.regime_model import RegimeModel, regime_model, runtime_profile
from ..speed.timer import DecodeTimeError, time_decode
from .budgets import DeviceBudget, machine_budgets
from .llama_cpp import LlamaCppPlacement, gpu_compute_buffer, host_compute_buffer, placement_memory
from .model_tensors import PlanModel
from .plan_errors import MachineError, PlacementDoesNotFit, MachinePlanError
from .runtimes import RUNTIMES

__all__ = ["MachinePlan", "RankedPlan", "VLLM_GPU_UTILIZATION", "plan_machine"]

#: vLLM's default ``--gpu-memory-utilization``: the share of each GPU it takes (rule 1).
VLLM_GPU_UTILIZATION = 0.9
_MAX_CANDIDATES = 128
#: The GPU capacity a candidate's decode layout is given. What fits is the planner's own
#: accounting (llama.cpp keeps the token embedding on the host, which the layout would count
#: on the GPU); the layout's capacity serves only its own fit check and a cache sized by
#: capacity, which no planned placement uses (vLLM's states its resident bytes). So every
#: candidate is timed, a placement that does not fit as if its GPUs were as large as it needs
#: (the curve beyond the card).
_NEVER_BINDS = 1e15
_TIE = 1e-3


@dataclass(frozen=True)
class RankedPlan:
    """One placement that fits, with its predicted speed (module rules)."""

    placement: str  # in words
    settings: tuple[tuple[str, Any], ...]  # the placement's knobs, e.g. (("n_cpu_moe", 30),)
    memory: tuple[tuple[str, float, float], ...]  # (device, used bytes, usable bytes)
    tok_s: float
    low: float
    high: float
    evidence: str  # "validated on N sources" or "unvalidated runtime"
    regime: str  # the decode model's placement regime
    link_bytes: float  # bytes over the host link per token, both directions
    runtime_args: tuple[str, ...]  # the runtime's own arguments
    alternative_args: tuple[str, ...] = ()  # the same placement said another way (llama.cpp: one -ot rule)

    @property
    def gpu_bytes(self) -> float:
        return sum(used for device, used, _ in self.memory if device != "CPU")


@dataclass(frozen=True)
class MachinePlan:
    """Every placement that fits, best first."""

    model: PlanModel
    runtime: str
    profile: str  # the runtime profile that timed them
    context: int
    budgets: tuple[DeviceBudget, ...]
    plans: tuple[RankedPlan, ...]
    considered: int  # placements tried
    link: str  # the host link the copies cross
    unfit: tuple[RankedPlan, ...] = ()  # the placements that do not fit, timed too: the rest of the trade-off curve

    def table(self, top: Optional[int] = None) -> pd.DataFrame:
        """The ranked plans as a table: rank, the placement's settings, tok/s with its
        interval and evidence, GiB per device, KB over the link per token, and the flags."""
        rows = []
        for i, p in enumerate(self.plans[:top] if top else self.plans):
            row: dict[str, Any] = {"rank": i + 1}
            row.update({k: (",".join(map(str, v)) if isinstance(v, list) else v) for k, v in p.settings})
            row.update({"tok/s": round(p.tok_s, 2), "low": round(p.low, 2), "high": round(p.high, 2),
                        "evidence": p.evidence})  # fmt: skip
            row.update({f"{d} GiB": round(used / 2**30, 2) for d, used, _ in p.memory})
            row["link KB/token"] = round(p.link_bytes / 1e3, 1)
            row["arguments"] = " ".join(p.runtime_args)
            rows.append(row)
        return pd.DataFrame(rows)

    def to_json(self, top: Optional[int] = None) -> dict[str, Any]:
        """One object: ``model``, ``machine``, ``runtime`` and ``plans`` (module doc)."""
        m = self.model
        return {
            "model": {"name": m.name, "source": m.source, "architecture": m.architecture, "layers": m.layers,
                      "experts": m.num_experts, "experts_used": m.top_k, "bytes": m.bytes_where(),
                      "expert_bytes": m.bytes_where(expert=True)},
            "machine": {b.device: {"part": b.part, "capacity_bytes": b.capacity_bytes, "reserved_bytes": b.reserved_bytes,
                                   "source": b.source} for b in self.budgets} | {"link": self.link},
            "runtime": {"name": self.runtime, "profile": self.profile, "context": self.context},
            "considered": self.considered,
            "plans": [{"rank": i + 1, "placement": p.placement, "settings": dict(p.settings),
                       "memory": {d: {"used_bytes": used, "capacity_bytes": usable} for d, used, usable in p.memory},
                       "tok_s": {"predicted": p.tok_s, "low": _finite(p.low), "high": _finite(p.high),
                                 "evidence": p.evidence},
                       "link_bytes_per_token": p.link_bytes, "runtime_args": list(p.runtime_args),
                       "alternative_args": list(p.alternative_args)}
                      for i, p in enumerate(self.plans[:top] if top else self.plans)],
        }  # fmt: skip


def _finite(value: float) -> Optional[float]:
    return value if math.isfinite(value) else None


@dataclass(frozen=True)
class _Candidate:
    placement: str
    settings: tuple[tuple[str, Any], ...]
    memory: dict[str, float]
    regime: ExpertPlacement
    split: tuple[int, ...]  # layers per GPU
    args: tuple[str, ...]
    alternative: tuple[str, ...] = ()
    loads_all: bool = False  # every offloaded byte crosses the link each token (vLLM's offload)
    host_only: bool = False  # no GPU: the host computes every layer (rule 5)


def plan_machine(model: PlanModel, *, gpus: Sequence[str], host: str, runtime: str = "llama.cpp", context: int = 4096,
                 parts: PartsFile = None, link: Optional[str] = None, fitted: Optional[RegimeModel] = None) -> MachinePlan:
    """Every placement ``runtime`` can express for ``model`` on the machine that fits,
    ranked by predicted decode tok/s (module rules)."""
    if runtime not in RUNTIMES:
        raise MachinePlanError(f"unknown runtime {runtime!r}; valid: {', '.join(RUNTIMES)}")
    if isinstance(context, bool) or not isinstance(context, int) or not 1 <= context <= 10_000_000:
        raise MachinePlanError(f"context must be a whole number of tokens in [1, 10000000], got {context!r}")
    if not gpus and runtime != "llama.cpp":
        raise MachineError(f"no GPU named: {runtime} needs one (--gpu); llama.cpp plans a host-only machine")
    budgets = machine_budgets(gpus=gpus, host=host, parts=parts)
    if runtime == "vllm":
        budgets = tuple(dataclasses.replace(b, reserved_bytes=(1 - VLLM_GPU_UTILIZATION) * b.capacity_bytes,
                                            source=f"{b.part} memory_bytes; vLLM takes {VLLM_GPU_UTILIZATION:.0%} "
                                                   "(--gpu-memory-utilization)")
                        if b.device != "CPU" else b for b in budgets)  # fmt: skip
    usable = {b.device: b.usable_bytes for b in budgets}
    candidates = _CANDIDATES[runtime](model, usable, context) if gpus else [_host_only(model, context)]
    fitting = [c for c in candidates if _fits(c.memory, usable)]
    if not fitting:
        raise PlacementDoesNotFit(_shortfall(candidates, usable, runtime, model))
    fits = fitted if fitted is not None else regime_model()
    timer = _Timer(model, list(gpus), host, link, parts, fits, RUNTIMES[runtime])
    plans = [timer.ranked(c, usable) for c in fitting]
    plans.sort(key=lambda p: (-p.tok_s, p.gpu_bytes))
    plans = _tie_broken(plans)
    unfit = sorted((timer.ranked(c, usable) for c in candidates if not _fits(c.memory, usable)), key=lambda p: p.gpu_bytes)
    return MachinePlan(model, runtime, RUNTIMES[runtime], context, budgets, tuple(plans), len(candidates),
                       timer.link_name, tuple(unfit))  # fmt: skip


def _tie_broken(plans: list[RankedPlan]) -> list[RankedPlan]:
    """Rule 4: sorted by tok/s; plans within 0.1% of each other by fewer GPU bytes."""
    ordered: list[RankedPlan] = []
    for p in plans:  # plans arrive fastest first
        i = len(ordered)
        while i > 0 and ordered[i - 1].tok_s <= p.tok_s * (1 + _TIE) and ordered[i - 1].gpu_bytes > p.gpu_bytes:
            i -= 1
        ordered.insert(i, p)
    return ordered


def _fits(memory: dict[str, float], usable: dict[str, float]) -> bool:
    return all(used <= usable[device] for device, used in memory.items())


def _shortfall(candidates: list[_Candidate], usable: dict[str, float], runtime: str, model: PlanModel) -> str:
    """Rule 2: what the least-GPU placement lacks, device by device."""
    least = min(candidates, key=lambda c: sum(v for d, v in c.memory.items() if d != "CPU"))
    missing = {d: used - usable[d] for d, used in least.memory.items() if used > usable[d]}
    if not missing:  # the least-GPU placement fits the GPUs but another device fails in every candidate
        least = min(candidates, key=lambda c: max(c.memory[d] - usable[d] for d in c.memory))
        missing = {d: used - usable[d] for d, used in least.memory.items() if used > usable[d]}
    said = "; ".join(f"{d} needs {need / 2**30:.2f} GiB more ({least.memory[d] / 2**30:.2f} GiB of "
                     f"{usable[d] / 2**30:.2f} GiB usable)" for d, need in missing.items())  # fmt: skip
    what = ("the non-expert weights, the KV cache and the compute buffers" if least.memory and runtime != "executorch"
            else "the whole model, its KV cache and buffers")
    return (f"no {runtime} placement of {model.name} fits this machine: even with {least.placement}, {what} do not fit: "
            f"{said}. Use a GPU with more memory, more GPUs, a smaller format or a shorter context")


class _Timer:
    """Rule 3: a candidate's layout timed on the machine its runtime profile composes."""

    def __init__(self, model: PlanModel, gpus: list[str], host: str, link: Optional[str], parts: PartsFile,
                 fits: RegimeModel, profile: str) -> None:
        self.model, self.gpus, self.host, self.link, self.parts, self.fits = model, gpus, host, link, parts, fits
        self.profile = profile
        self.facts, self.bits = model.facts(), model.bits()
        self.resolved = runtime_profile(profile, fits.fits, fits.profiles)
        self.machines: dict[tuple[str, str, bool], CostModel] = {}
        self.link_name = link or ""

    def _machine(self, gpu: str, link: str, loads_all: bool) -> CostModel:
        key = (gpu, link, loads_all)
        if key not in self.machines:
            profile = self.resolved
            if loads_all:  # vLLM's offload copies every offloaded weight in for each forward pass
                profile = dataclasses.replace(profile, values={**profile.values, "loads_all_experts": 1.0})
            self.machines[key] = CostModel.compose(gpu=gpu, host=self.host, link=link or "pcie_gen4", runtime=profile,
                                                   parts=self.parts)  # fmt: skip
        return self.machines[key]

    def _host_only(self, c: _Candidate, usable: dict[str, float]) -> RankedPlan:
        """Rule 5: every weight a token reads, read and multiplied by the host, one host call
        per layer; the GPU part of the cost model does nothing (eager, no kernels)."""
        f, bits = self.facts, self.bits
        host_bytes = f.other_active * bits.other / 8 + f.expert_active * bits.experts / 8 + f.kv_bytes_per_token * c.regime.context_tokens
        layout = DecodeLayout(device_bytes=0.0, device_flops=0.0, kernels=0.0, layers=f.layers, moe_layers=f.moe_layers,
                              num_experts=f.num_experts, top_k=f.top_k, host_bytes=host_bytes,
                              host_weights=f.active_params, host_format=bits.expert_format,
                              host_dequant_ops=bits.expert_dequant_ops, host_calls=float(f.layers), host_share=1.0,
                              host=self.host, origin="facts", notes=("host only: every layer on the CPU",))  # fmt: skip
        profile = dataclasses.replace(self.resolved, launch_mode="eager",
                                      values={**self.resolved.values, "kernels_per_layer": 0.0})  # fmt: skip
        gpu = next(iter(part_names("gpu", self.parts)))  # no GPU work: any part's figures go unused
        try:
            timed = time_decode(layout, CostModel.compose(gpu=gpu, host=self.host, link="pcie_gen4", runtime=profile,
                                                          parts=self.parts))  # fmt: skip
        except DecodeTimeError as exc:
            raise MachinePlanError(f"{c.placement}: {exc}") from None
        earned = self.fits.interval(self.profile, "experts_on_host_compute")
        low, high = earned.bounds(timed.tok_s) if earned is not None else (math.nan, math.nan)
        evidence = ("unvalidated placement: no host-only run is modeled (the interval of its host-compute runs, "
                    f"{earned.evidence if earned is not None else 'none'})")
        memory = tuple((d, c.memory[d], usable[d]) for d in c.memory)
        return RankedPlan(c.placement, c.settings, memory, timed.tok_s, low, high, evidence, "host_only", 0.0, c.args)

    def ranked(self, c: _Candidate, usable: dict[str, float]) -> RankedPlan:
        if c.host_only:
            return self._host_only(c, usable)
        seconds, link_bytes = 0.0, 0.0
        for g, layers in enumerate(c.split):
            if not layers:
                continue
            try:
                layout = DecodeLayout.for_machine(gpu=self.gpus[g], host=self.host, link=self.link, model=self.facts,
                                                  formats=self.bits, placement=c.regime, parts=self.parts,
                                                  gpu_memory_bytes=_NEVER_BINDS)  # fmt: skip
                timed = time_decode(layout, self._machine(self.gpus[g], layout.link, c.loads_all))
            except (LayoutError, DecodeTimeError) as exc:
                raise MachinePlanError(f"{c.placement}: {exc}") from None
            share = layers / self.model.layers
            seconds += share / timed.tok_s
            loads = layout.experts_offloaded if c.loads_all else layout.expert_loads
            link_bytes += share * (layout.link_bytes + loads * layout.expert_bytes)
            self.link_name = self.link_name or layout.link
        tok_s = 1 / seconds
        earned = self.fits.interval(self.profile, c.regime.regime)
        low, high = earned.bounds(tok_s) if earned is not None else (math.nan, math.nan)
        evidence = earned.evidence if earned is not None else "no held-out evidence"
        memory = tuple((d, c.memory[d], usable[d]) for d in sorted(c.memory, key=lambda d: (d == "CPU", d)))
        return RankedPlan(c.placement, c.settings, memory, tok_s, low, high, evidence, c.regime.regime, link_bytes,
                          c.args, c.alternative)  # fmt: skip


# --- what each runtime can express ---

def _filled_split(model: PlanModel, usable: dict[str, float], gpu_bytes_of_layer: list[float],
                fixed_last: float) -> Optional[tuple[int, ...]]:
    """Layers over the GPUs in order, each GPU filled up to its usable bytes before the
    next (the last also holds ``fixed_last``); None when they do not fit."""
    gpus = sorted(d for d in usable if d != "CPU")
    split, g, room = [0] * len(gpus), 0, [usable[d] for d in gpus]
    room[-1] -= fixed_last
    for layer_bytes in gpu_bytes_of_layer:
        while g < len(gpus) and layer_bytes > room[g]:
            g += 1
        if g == len(gpus):
            return None
        room[g] -= layer_bytes
        split[g] += 1
    return tuple(split)


def _llama_cpp(model: PlanModel, usable: dict[str, float], context: int) -> list[_Candidate]:
    gpus = sorted(d for d in usable if d != "CPU")
    moe = model.moe_layers
    counts = [0] + [layer + 1 for layer in moe]  # --n-cpu-moe N for 0 and each MoE layer's end
    out = []
    for n in counts:
        split = (model.layers,) if len(gpus) == 1 else _split_for(model, n, usable, context)
        placement = LlamaCppPlacement(n, split)
        host_layers = sum(1 for layer in moe if layer < n)
        regime = (ExpertPlacement("all_on_gpu", context_tokens=context) if host_layers == 0 else
                  ExpertPlacement("partial_offload", host_layers=n, context_tokens=context))
        where = ("every tensor on the GPU" if host_layers == 0 else
                 f"the routed experts of {host_layers} of {len(moe)} MoE layers on the CPU (layers {moe[0]}–{n - 1})")
        if len(split) > 1:
            where += f"; layers split {'/'.join(map(str, split))} over {len(split)} GPUs"
        out.append(_Candidate(where, (("n_cpu_moe", n), ("layer_split", list(split))),
                              placement_memory(model, placement, context), regime, split,
                              tuple(placement.args(model, context)),
                              tuple(placement.override_args(model, context)) if host_layers else ()))
    return out


def _split_for(model: PlanModel, n_cpu_moe: int, usable: dict[str, float], context: int) -> tuple[int, ...]:
    """Multi-GPU: the layer split that fills the GPUs in order (rule 1's bytes per layer)."""
    per_layer = [sum(t.nbytes for t in model.tensors if t.layer == i and not (t.expert and i < n_cpu_moe))
                 + model.kv_bytes_per_token[i] * context for i in range(model.layers)]  # fmt: skip
    output = sum(t.nbytes for t in model.tensors if t.layer is None and not t.name.startswith("token_embd."))
    buffer = gpu_compute_buffer(model)
    shrunk = {d: (v - buffer if d != "CPU" else v) for d, v in usable.items()}
    split = _filled_split(model, shrunk, per_layer, output)
    gpus = len([d for d in usable if d != "CPU"])
    return split if split is not None else tuple([model.layers] + [0] * (gpus - 1))


def _host_only(model: PlanModel, context: int) -> _Candidate:
    """Rule 5: llama.cpp with no layer offloaded (``-ngl 0``): every tensor, the KV cache
    and the compute buffer in host memory (the one a GPU would hold, logits included: the CPU
    computes the output here)."""
    memory = {"CPU": model.bytes_where() + sum(model.kv_bytes_per_token) * context
              + gpu_compute_buffer(model)}  # fmt: skip
    return _Candidate("every tensor on the CPU (no GPU)", (("n_gpu_layers", 0),), memory,
                      ExpertPlacement("experts_on_host_compute", context_tokens=context), (), ("-ngl", "0", "-c", str(context)),
                      host_only=True)  # fmt: skip


def _gpu_other_bytes(model: PlanModel, context: int) -> float:
    """What a runtime that keeps every non-expert weight on the GPU holds there besides experts."""
    other = model.bytes_where(expert=False) - sum(t.nbytes for t in model.tensors if t.name.startswith("token_embd."))
    return other + sum(model.kv_bytes_per_token) * context + gpu_compute_buffer(model)


def _steps(total: int) -> list[int]:
    step = max(1, math.ceil(total / _MAX_CANDIDATES))
    return sorted(set(range(0, total + 1, step)) | {total})


def _ktransformers(model: PlanModel, usable: dict[str, float], context: int) -> list[_Candidate]:
    if len([d for d in usable if d != "CPU"]) != 1:
        raise MachinePlanError("the ktransformers plans are for one GPU (its GPU experts per layer); name one --gpu")
    if not model.num_experts:
        raise MachinePlanError(f"{model.name} has no routed experts: KTransformers places experts; plan it for llama.cpp")
    experts = model.bytes_where(expert=True)
    embedding = sum(t.nbytes for t in model.tensors if t.name.startswith("token_embd."))
    out = []
    for kept in _steps(model.num_experts):
        share = kept / model.num_experts
        memory = {"CUDA0": _gpu_other_bytes(model, context) + share * experts,
                  "CPU": (1 - share) * experts + embedding + host_compute_buffer(model)}  # fmt: skip
        regime = ExpertPlacement("experts_on_host_compute", gpu_experts=kept, context_tokens=context)
        out.append(_Candidate(f"{kept} of each layer's {model.num_experts} experts on the GPU, the rest computed on the CPU",
                              (("gpu_experts", kept),), memory, regime, (model.layers,),
                              ("--kt-num-gpu-experts", str(kept), "--context-length", str(context))))  # fmt: skip
    return out


def _vllm(model: PlanModel, usable: dict[str, float], context: int) -> list[_Candidate]:
    if len([d for d in usable if d != "CPU"]) != 1:
        raise MachinePlanError("the vllm plans are for one GPU (--cpu-offload-gb per GPU); name one --gpu")
    experts = model.bytes_where(expert=True)
    gib = math.ceil(experts / 2**30)
    out = []
    for offload in _steps(gib):
        offloaded = min(experts, offload * 2**30)
        memory = {"CUDA0": _gpu_other_bytes(model, context) + experts - offloaded,
                  "CPU": offloaded + host_compute_buffer(model)}  # fmt: skip
        if offload == 0 or not model.num_experts:
            regime = ExpertPlacement("all_on_gpu", context_tokens=context)
        else:
            regime = ExpertPlacement("experts_copied", resident_expert_bytes=experts - offloaded, context_tokens=context)
        out.append(_Candidate("every weight on the GPU" if offload == 0 else
                              f"{offload} GiB of expert weights offloaded to the host, streamed in every forward pass",
                              (("cpu_offload_gb", offload),), memory, regime, (model.layers,),
                              ("--cpu-offload-gb", str(offload), "--max-model-len", str(context)), (),
                              offload > 0))  # fmt: skip
        if not model.num_experts:
            break
    return out


def _executorch(model: PlanModel, usable: dict[str, float], context: int) -> list[_Candidate]:
    if len([d for d in usable if d != "CPU"]) != 1:
        raise MachinePlanError("the executorch plan is for one GPU; name one --gpu")
    embedding = sum(t.nbytes for t in model.tensors if t.name.startswith("token_embd."))
    memory = {"CUDA0": _gpu_other_bytes(model, context) + model.bytes_where(expert=True) + embedding, "CPU": 0.0}
    return [_Candidate("every weight on the GPU (ExecuTorch's CUDA backend; it has no expert offload flag)", (),
                       memory, ExpertPlacement("all_on_gpu", context_tokens=context), (model.layers,), ())]


_CANDIDATES = {"llama.cpp": _llama_cpp, "ktransformers": _ktransformers, "vllm": _vllm, "executorch": _executorch}
