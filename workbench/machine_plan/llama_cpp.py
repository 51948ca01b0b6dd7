"""llama.cpp's placement flags, applied to a model's tensors the way llama.cpp applies them.

A ``LlamaCppPlacement`` is what ``-ngl``, ``--n-cpu-moe``, ``-ot`` and ``--tensor-split``
express: every layer on a GPU (layers split over the GPUs in order), the routed experts of
the first MoE layers on the CPU. ``tensor_devices`` says where each tensor of a model
lands; ``placement_memory`` what each device then holds.

Rules (llama.cpp's own, ``llama-model.cpp`` and ``common/arg.cpp``):

1. A tensor-buffer override is a (pattern, device) pair; for each tensor the overrides are
   tried in order, the pattern *searched* in the tensor's name, and the first that
   matches wins (``override_devices``). ``--n-cpu-moe N`` adds, for each ``i < N``, the
   override ``blk\\.{i}`` + the expert pattern ``=CPU``: the first N *layers'* expert
   tensors (leading dense layers count, and hold none).
2. With every layer offloaded (``-ngl`` above the layer count), block ``i``'s other tensors
   live on the GPU its layer is split to; the output tensor and its norm on the last
   GPU; the input embedding (``token_embd``) stays on the CPU. A model without an output
   tensor (tied) is given a second copy of the embedding on the last GPU.
3. ``--tensor-split`` takes proportions over the layers and the output: counts
   ``c_0, …, c_{G-1} + 1`` put layer ``i`` on the first GPU whose running count exceeds ``i``.
4. Each layer's KV cache lives with its layer (``-ngl`` all, the default ``--kv-offload``),
   at ``context`` tokens. Each GPU holds a compute buffer of
   ``UBATCH × (vocabulary + 8 × hidden) × 4`` bytes (logits and activations of one
   micro-batch of ``UBATCH`` tokens, an estimate); the CPU one of
   ``UBATCH × 8 × hidden × 4`` bytes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from .model_tensors import EXPERT_TENSOR_PATTERN, PlanModel
from .plan_errors import MachinePlanError

__all__ = ["LlamaCppPlacement", "UBATCH", "cpu_moe_overrides", "gpu_compute_buffer", "host_compute_buffer",
           "layers_pattern", "override_devices", "placement_memory", "tensor_devices"]  # fmt: skip

#: llama.cpp's default micro-batch (``-ub``), which sizes the compute buffers (rule 4).
UBATCH = 512


def gpu_compute_buffer(model: PlanModel) -> float:
    """Rule 4: the bytes of one GPU's compute buffer (logits and activations of a micro-batch)."""
    return UBATCH * (model.vocab + 8 * model.hidden) * 4.0


def host_compute_buffer(model: PlanModel) -> float:
    """Rule 4: the bytes of the CPU's compute buffer (activations of a micro-batch)."""
    return UBATCH * 8 * model.hidden * 4.0


@dataclass(frozen=True)
class LlamaCppPlacement:
    """Every layer on the GPUs (``layer_split[g]`` layers on GPU g, in order); the expert
    tensors of the first ``n_cpu_moe`` layers on the CPU."""

    n_cpu_moe: int  # --n-cpu-moe: layers (counted from 0, dense ones included) whose experts stay on the CPU
    layer_split: tuple[int, ...]  # layers per GPU, in order; sums to the model's layers

    def args(self, model: PlanModel, context: int) -> list[str]:
        """The llama.cpp arguments, with ``--n-cpu-moe``."""
        out = ["-ngl", str(max(99, model.layers + 1))]
        if self.n_cpu_moe:
            out += ["--n-cpu-moe", str(self.n_cpu_moe)]
        return out + self._split_args() + ["-c", str(context)]

    def override_args(self, model: PlanModel, context: int) -> list[str]:
        """The same placement as one ``-ot`` rule (a layer-number pattern) instead of
        ``--n-cpu-moe``."""
        out = ["-ngl", str(max(99, model.layers + 1))]
        layers = [i for i in model.moe_layers if i < self.n_cpu_moe]
        if layers:
            out += ["-ot", f"{layers_pattern(layers)}{EXPERT_TENSOR_PATTERN}=CPU"]
        return out + self._split_args() + ["-c", str(context)]

    def _split_args(self) -> list[str]:
        if len(self.layer_split) < 2:
            return []
        counts = list(self.layer_split)
        counts[-1] += 1  # the output layer (rule 3)
        return ["-ts", ",".join(map(str, counts))]


def cpu_moe_overrides(n: int) -> list[tuple[str, str]]:
    """The overrides ``--n-cpu-moe n`` adds (rule 1)."""
    return [(rf"blk\.{i}{EXPERT_TENSOR_PATTERN}", "CPU") for i in range(n)]


def _runs(values: Sequence[int]) -> list[list[int]]:
    """Sorted ``values`` cut into runs of consecutive numbers."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][-1] + 1:
            runs[-1].append(v)
        else:
            runs.append([v])
    return runs


def _digits(numbers: Sequence[int]) -> str:
    """Alternatives matching exactly ``numbers``: one per run of numbers sharing all but the
    last digit (``2[0-9]``), whole decades 10-99 in a row merged (``[1-3][0-9]``)."""
    by_prefix: dict[int, list[int]] = {}
    for n in sorted(set(numbers)):
        by_prefix.setdefault(n // 10, []).append(n % 10)
    full = [p for p in sorted(by_prefix) if 1 <= p <= 9 and by_prefix[p] == list(range(10))]
    parts: list[str] = []
    decades = _runs(full)
    merged = {p for run in decades if len(run) > 1 for p in run}
    for prefix, lasts in by_prefix.items():
        if prefix in merged:
            run = next(r for r in decades if prefix in r)
            if prefix == run[0]:
                parts.append(f"[{run[0]}-{run[-1]}][0-9]")
            continue
        head = str(prefix) if prefix else ""
        for r in _runs(lasts):
            parts.append(f"{head}{r[0]}" if len(r) == 1 else f"{head}[{r[0]}-{r[-1]}]")
    return "|".join(parts)


def layers_pattern(layers: Sequence[int]) -> str:
    """``blk\\.(…)`` matching exactly the block numbers ``layers`` (followed by a dot in
    the name, so ``1`` never matches block 10)."""
    if not layers:
        raise MachinePlanError("a layer pattern needs at least one layer")
    return rf"blk\.({_digits(layers)})"


def override_devices(overrides: Sequence[tuple[str, str]], names: Sequence[str]) -> dict[str, str]:
    """Rule 1: the device the first override whose pattern is found in each name gives it;
    names no override matches are left out."""
    compiled = []
    for pattern, device in overrides:
        try:
            compiled.append((re.compile(pattern), device))
        except re.error as exc:
            raise MachinePlanError(f"override pattern {pattern!r} is not a regular expression: {exc}") from None
    found = {}
    for name in names:
        hit = next((device for regex, device in compiled if regex.search(name)), None)
        if hit is not None:
            found[name] = hit
    return found


def _gpu_of_layer(split: Sequence[int]) -> list[int]:
    return [g for g, count in enumerate(split) for _ in range(count)]


def tensor_devices(model: PlanModel, placement: LlamaCppPlacement) -> dict[str, str]:
    """Where each tensor lands (rules 1-3): ``CUDA<g>`` or ``CPU``."""
    if sum(placement.layer_split) != model.layers or not placement.layer_split or min(placement.layer_split) < 0:
        raise MachinePlanError(f"a layer split {placement.layer_split} must give each of the {model.layers} layers a GPU")
    names = [t.name for t in model.tensors]
    moved = override_devices(cpu_moe_overrides(placement.n_cpu_moe), names)
    gpu_of = _gpu_of_layer(placement.layer_split)
    last = f"CUDA{len(placement.layer_split) - 1}"
    devices = {}
    for t in model.tensors:
        if t.name in moved:
            devices[t.name] = moved[t.name]
        elif t.layer is not None:
            devices[t.name] = f"CUDA{gpu_of[t.layer]}"
        else:
            devices[t.name] = "CPU" if t.name.startswith("token_embd.") else last
    return devices


def placement_memory(model: PlanModel, placement: LlamaCppPlacement, context: int) -> dict[str, float]:
    """Bytes each device holds (rules 2-4): weights, KV cache, compute buffers. Counted from
    each tensor's layer and kind (what rule 1's overrides select), not by matching names,
    so a search can try every placement; ``tensor_devices`` is the same by name."""
    gpus = len(placement.layer_split)
    if sum(placement.layer_split) != model.layers or not gpus or min(placement.layer_split) < 0:
        raise MachinePlanError(f"a layer split {placement.layer_split} must give each of the {model.layers} layers a GPU")
    used: dict[str, float] = {f"CUDA{g}": 0.0 for g in range(gpus)}
    used["CPU"] = 0.0
    gpu_of = _gpu_of_layer(placement.layer_split)
    last = f"CUDA{gpus - 1}"
    for t in model.tensors:
        if t.layer is None:
            used["CPU" if t.name.startswith("token_embd.") else last] += t.nbytes
        elif t.expert and t.layer < placement.n_cpu_moe:
            used["CPU"] += t.nbytes
        else:
            used[f"CUDA{gpu_of[t.layer]}"] += t.nbytes
    if model.tied_output:
        used[last] += sum(t.nbytes for t in model.tensors if t.name.startswith("token_embd."))
    for layer, gpu in enumerate(gpu_of):
        used[f"CUDA{gpu}"] += model.kv_bytes_per_token[layer] * context
    for g in range(gpus):
        used[f"CUDA{g}"] += gpu_compute_buffer(model)
    used["CPU"] += host_compute_buffer(model)
    return used
