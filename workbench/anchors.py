"""Published decode measurements, and what the cost model says for the same runs.

An ``Anchor`` is a published time per token for a named model, runtime and GPU, with how
its kernels were launched. ``anchors_table`` models the same decode step — the built-in
Qwen3.5-MoE 35B-A3B configuration, captured shape-only, every op and weight on the
device — on the cost-model preset of that GPU, in that launch mode, and sets the modeled
time beside the published one. Nothing modeled is written in: change a ``CostModel``
figure and the table changes.

Rules:

1. One set of device figures for every row and every strategy: an anchor picks a preset
   and a launch mode, never a correction of its own.
2. The modeled time is ``estimate(plan, model, in_place_writes=True).span_us``: the
   modeled decode step from its first event to its last, every kernel writing its planned
   memory as ExecuTorch's compiled program does (the workbench's own executor copies the
   results of ops without an ``out=`` variant into their slots; ExecuTorch's does not).
3. Anchors whose run the built-in model cannot express (other weight formats, a GPU
   without a preset) are listed in ``UNMODELED_ANCHORS`` with the reason, not modeled.

What differs between the ExecuTorch runs and the modeled graph, so that a ratio near 1
is a consistency check, not a proof: ExecuTorch ran 4-bit (HQQ) quantized weights — a
quarter of the bf16 bytes in the quantized layers — with fused Triton kernels for the
experts and the linear attention (fewer kernels); the workbench models the bf16 graph op
by op (3,020 kernels, 10.5 GB touched per token: every expert row it gathers is read,
written and read again). The eager anchor checks the host issue rate
(``launch_overhead``), the graph anchor the per-kernel floor of replay (``kernel_gap +
min_kernel_time``) together with the memory time. The PR does not say which A100; the
80 GB SXM part is modeled (the 40 GB part has 24% less memory bandwidth).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import pandas as pd
import torch

from .capture import capture
from .errors import WorkbenchError
from .models import MoEConfig, QwenMoEDecoder
from .planning.memory_plan import MemoryPlan, plan
from .runtime.cost_model import CostModel
from .runtime.sim_timing import estimate
from .strategies import all_on_device

__all__ = ["ANCHORS", "UNMODELED_ANCHORS", "Anchor", "AnchorError", "anchors_table", "full_size_plan"]

_EXECUTORCH_PR = 'pytorch/executorch pull request "Add CUDA graph capture/replay for qwen 3.5 moe decode method"'


class AnchorError(WorkbenchError, ValueError):
    """An anchor cannot be modeled (the message says which and why)."""


@dataclass(frozen=True)
class Anchor:
    """A published decode measurement (rule 1)."""

    anchor: str  # what was measured: model, runtime, launch
    hardware: str  # the GPU, as published
    published_ms: float  # ms per token, as published (tok/s converted: 1000 / tok/s)
    launch_mode: str  # "eager" (per-kernel launches) or "graph" (CUDA-graph replay)
    preset: Optional[str]  # the CostModel device preset of that GPU; None: not modeled (rule 3)
    source: str  # where it was published
    reason: str = ""  # why it is not modeled (rule 3)


ANCHORS: tuple[Anchor, ...] = (
    Anchor("ExecuTorch CUDA, Qwen3.5-35B-A3B decode, per-kernel launches", "A100", 11.5, "eager", "a100_80gb",
           _EXECUTORCH_PR + ": the warm-up tokens, ~11.5 ms/token"),
    Anchor("ExecuTorch CUDA, Qwen3.5-35B-A3B decode, CUDA-graph replay", "A100", 7.60, "graph", "a100_80gb",
           _EXECUTORCH_PR + ": 508 replayed tokens, 7.60 ms/token (~132 tok/s)"),
)  # fmt: skip

UNMODELED_ANCHORS: tuple[Anchor, ...] = (
    Anchor("llama.cpp, Qwen3.6-35B-A3B Q4_K_M, all experts resident, CUDA graphs", "RTX 3090", 1000 / 110.8, "graph",
           None, "public single-stream measurement, 110.8 tok/s",
           "4-bit Q4_K_M weights and llama.cpp's fused kernels; the built-in model is bf16 (70 GB, not 24)"),
    Anchor("llama.cpp, Qwen3.6-35B-A3B Q4_K_M, all experts resident, no CUDA graphs", "RTX 3090", 1000 / 66.1, "eager",
           None, "public single-stream measurement, 66.1 tok/s",
           "4-bit Q4_K_M weights and llama.cpp's fused kernels; the built-in model is bf16 (70 GB, not 24)"),
)  # fmt: skip


def full_size_plan(config: Optional[MoEConfig] = None, algorithm: str = "greedy") -> MemoryPlan:
    """The decode step of ``config`` (default: the published 35B-A3B), captured shape-only
    with every op and weight on ``cuda:0`` and inputs/outputs already there (no copies)."""
    config = config or MoEConfig.full()
    with torch.device("meta"):
        model = QwenMoEDecoder(config)
        inputs = model.example_inputs()
    return plan(all_on_device(skip_copies=True).apply(capture(model, inputs, shape_only=True)), algorithm)


def anchors_table(
    decode_plan: Optional[MemoryPlan] = None,
    *,
    anchors: Sequence[Anchor] = ANCHORS,
    link: str = "pcie_gen4",
) -> pd.DataFrame:
    """One row per anchor: anchor, hardware, published ms/token, modeled ms/token, ratio
    (modeled / published) — rules 1, 2. ``decode_plan`` defaults to ``full_size_plan()``;
    ``link`` is the host link of the modeled machine (no copy crosses it all on device)."""
    unmodeled = [a.anchor for a in anchors if a.preset is None]
    if unmodeled:
        raise AnchorError(f"anchors without a preset cannot be modeled: {unmodeled}; see UNMODELED_ANCHORS")
    decode_plan = decode_plan if decode_plan is not None else full_size_plan()
    rows = []
    for a in anchors:
        model = CostModel.preset(str(a.preset), link=link).with_launch_mode(a.launch_mode)
        ms = estimate(decode_plan, model, in_place_writes=True).span_us / 1000
        rows.append(
            {
                "anchor": a.anchor,
                "hardware": f"{a.hardware} (modeled: {a.preset}, {a.launch_mode})",
                "published ms/token": a.published_ms,
                "modeled ms/token": round(ms, 3),
                "ratio": round(ms / a.published_ms, 3),
            }
        )
    return pd.DataFrame(rows, columns=["anchor", "hardware", "published ms/token", "modeled ms/token", "ratio"])
