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

``modeled_vs_published`` sets a modeled decode speed beside each published run that a
model can express — by default the regime model of ``workbench.app.decode_model`` (GPU,
host and copy parts of a token's time from named hardware parts and runtime profiles,
a few terms fitted with leave-one-out errors); ``memory_bound_tok_s`` is the simplest
(the all-on-GPU rows only: every active weight read once per token at the GPU's datasheet
bandwidth, nothing fitted) — and ``ratios_by_regime`` gives the median modeled/published
ratio per regime over the modeled rows.

``published_decode_runs`` reads the wider table of published batch-1 decode runs
(``data/published/decode_anchors.csv``: every regime — all on the GPU, experts computed on
the host, experts copied in, partial offload — each row with its source and the phrase
quoted from it), checked on load; sources held back for validation are refused.

What differs between the ExecuTorch runs and the modeled graph, so that a ratio near 1
is a consistency check, not a proof: ExecuTorch ran 4-bit (HQQ) quantized weights — a
quarter of the bf16 bytes in the quantized layers — with fused Triton kernels for the
experts and the linear attention (fewer kernels); the workbench models the bf16 graph op
by op (3,020 kernels, 10.5 GB touched per token: every expert row it gathers is read,
written and read again). The eager anchor checks the host issue rate
(``launch_overhead``), the graph anchor the per-kernel floor of replay (``kernel_gap +
min_kernel_time``) together with the memory time. The PR does not say which A100; the
80 GB SXM part is modeled (the 40 GB part has 24% less memory bandwidth).

The same two ExecuTorch runs are rows of the published table too, modeled there by the
regime model (``workbench.app.decode_model``). The two paths agree in direction — both
model ExecuTorch as slower than published (this table's ratio is modeled/published
*time*, the regime table's modeled/published *speed*) — and differ in how: this table
charges the bf16 graph's 10.5 GB per token and a per-kernel floor of replay of 1.4 µs
(``kernel_gap + min_kernel_time``, estimates) to 3,110 kernels; the regime model charges
the int4 bytes ExecuTorch read (1.6 GB) and its fitted per-kernel time (2.9 µs) to the
same 3,110. Quantized to int4 (``full_size_plan(formats={"int4_g128": ["module:*"]})``,
as ``benchmarks/anchors.py`` shows), this table's graph replay falls to ~5.3 ms: its match at
bf16 rests on bytes ExecuTorch did not read. ExecuTorch's replayed step implies ~2.2 µs
per kernel beyond the bytes if it ran 3,110 kernels; it ran fewer (AOTInductor fuses
pointwise chains, and the experts are one fused kernel), so each cost more — ExecuTorch's
launch count is not published, and neither model can pin its per-kernel time closer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd
import torch

from ..capture import capture
from ..models import MoEConfig, QwenMoEDecoder
from ..planning.memory_plan import MemoryPlan, plan
from ..runtime.cost_model import CostModel
from ..runtime.sim_timing import estimate
from ..strategy import all_on_device
from ..weight_formats import quantize
from .decode_model import DecodePrediction, RegimeModel, fit_regime_model, predict_decode, regime_model, regime_model_tok_s
from .published_runs import (
    GPU_PARTS,
    PUBLISHED_COLUMNS,
    PUBLISHED_REGIMES,
    RESERVED_SOURCES,
    AnchorError,
    FittedTerm,
    gpu_part,
    published_decode_runs,
    published_dir,
)

__all__ = [
    "ANCHORS", "PUBLISHED_COLUMNS", "PUBLISHED_REGIMES", "RESERVED_SOURCES", "UNMODELED_ANCHORS", "Anchor", "AnchorError",
    "GPU_PARTS", "MODELED_COLUMNS", "DecodePrediction", "FittedTerm", "RegimeModel", "fit_regime_model", "predict_decode", "regime_model", "anchors_table", "fit_bandwidth_fraction", "full_size_plan", "gpu_part", "memory_bound_tok_s", "modeled_vs_published", "published_decode_runs",
    "published_dir", "ratios_by_regime",
]  # fmt: skip

_EXECUTORCH_PR = 'pytorch/executorch pull request "Add CUDA graph capture/replay for qwen 3.5 moe decode method"'


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


def full_size_plan(config: Optional[MoEConfig] = None, algorithm: str = "greedy",
                   formats: Optional[Mapping[str, Any]] = None) -> MemoryPlan:
    """The decode step of ``config`` (default: the published 35B-A3B), captured shape-only
    with every op and weight on ``cuda:0`` and inputs/outputs already there (no copies);
    ``formats``: weight-format rules for ``quantize`` (default: the captured bf16)."""
    config = config or MoEConfig.full()
    with torch.device("meta"):
        model = QwenMoEDecoder(config)
        inputs = model.example_inputs()
    program = capture(model, inputs, shape_only=True)
    if formats is not None:
        program = quantize(program, formats)
    return plan(all_on_device(skip_copies=True).apply(program), algorithm)


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


# --- modeled vs published, per row and per regime ---

def memory_bound_tok_s(row: pd.Series) -> tuple[Optional[float], str]:
    """The decode speed of a run whose every active weight is read once per token at its
    GPU's datasheet memory bandwidth: ``bandwidth / (active params × bits / 8)``, and ""
    — or None and why the run is not modeled (not all on one GPU, a GPU without a part,
    an unstated size or bits per weight)."""
    if row["regime"] != "all_on_gpu":
        return None, f"regime {row['regime']}: not modeled yet (only all_on_gpu rows are)"
    part = gpu_part(row["gpu"])
    if part is None:
        return None, f"no GPU part for {row['gpu']!r}"
    active, bits = pd.to_numeric(row["active_params_b"], errors="coerce"), pd.to_numeric(row["bits_per_weight"], errors="coerce")
    if not (np.isfinite(active) and np.isfinite(bits)):
        return None, "active parameters or bits per weight not stated"
    bandwidth = CostModel.compose(gpu=part).device_memory_bandwidth
    return bandwidth / (float(active) * 1e9 * float(bits) / 8), ""


#: The columns of a ``modeled_vs_published`` table.
MODELED_COLUMNS = ("id", "regime", "published tok/s", "modeled tok/s", "ratio", "not modeled because", "runtime profile",
                   "parts", "routing")  # fmt: skip
ModelAnswer = Union[tuple[Optional[float], str], tuple[Optional[float], str, str, str],
                    tuple[Optional[float], str, str, str, str]]


def modeled_vs_published(
    runs: Optional[pd.DataFrame] = None,
    model: Optional[Callable[[pd.Series], ModelAnswer]] = None,
) -> pd.DataFrame:
    """One row per published run: id, regime, published tok/s, modeled tok/s (NaN when
    ``model`` cannot express it), ratio (modeled / published), why a row is not modeled,
    the runtime profile and parts the model used (names; "" when it says none), and the
    routing its expert cache's hit rate assumed ("" when there is no cache).

    ``model`` defaults to the regime model (``workbench.app.decode_model``: every regime,
    its terms fitted on the shipped table); it may be any callable returning
    ``(tok/s or None, why)`` — such as ``memory_bound_tok_s`` — or
    ``(tok/s or None, why, runtime profile, parts[, routing])``."""
    if model is None:
        model = regime_model_tok_s
    runs = runs if runs is not None else published_decode_runs()
    rows = []
    for _, run in runs.iterrows():
        answer = model(run)
        modeled, why = answer[0], answer[1]
        profile, parts_used = (answer[2], answer[3]) if len(answer) >= 4 else ("", "")
        routing = answer[4] if len(answer) == 5 else ""
        rows.append({"id": run["id"], "regime": run["regime"], "published tok/s": float(run["decode_tok_s"]),
                     "modeled tok/s": np.nan if modeled is None else float(modeled),
                     "ratio": np.nan if modeled is None else float(modeled) / float(run["decode_tok_s"]),
                     "not modeled because": why, "runtime profile": profile, "parts": parts_used,
                     "routing": routing})  # fmt: skip
    return pd.DataFrame(rows, columns=list(MODELED_COLUMNS))


def ratios_by_regime(table: pd.DataFrame) -> pd.DataFrame:
    """Per regime of a ``modeled_vs_published`` table: rows, modeled rows, and the median,
    smallest and largest ratio over the modeled ones (NaN when none is modeled)."""
    out = []
    for regime in PUBLISHED_REGIMES:
        part = table[table["regime"] == regime]
        ratios = part["ratio"].dropna()
        out.append({"regime": regime, "rows": len(part), "modeled": len(ratios),
                    "median ratio": float(ratios.median()) if len(ratios) else np.nan,
                    "min ratio": float(ratios.min()) if len(ratios) else np.nan,
                    "max ratio": float(ratios.max()) if len(ratios) else np.nan})  # fmt: skip
    return pd.DataFrame(out)


def fit_bandwidth_fraction(table: pd.DataFrame, ids: Sequence[str]) -> FittedTerm:
    """The achieved fraction of datasheet memory bandwidth that makes ``memory_bound_tok_s``
    meet the published runs ``ids`` of a ``modeled_vs_published`` table: the median of
    published / modeled over them. Leave-one-out: each row predicted with the fraction
    fitted on the others. At least 3 modeled rows, so that no fit rests on a single row."""
    chosen = table.set_index("id").loc[list(ids)]
    if chosen["modeled tok/s"].isna().any() or len(chosen) < 3:
        raise AnchorError(f"fit_bandwidth_fraction needs at least 3 modeled rows (each leave-one-out fit on >= 2), "
                          f"got {len(chosen)} of which {int(chosen['modeled tok/s'].isna().sum())} unmodeled")
    share = (chosen["published tok/s"] / chosen["modeled tok/s"]).to_numpy(dtype=float)
    errors = []
    for i in range(len(share)):
        fitted = float(np.median(np.delete(share, i)))
        errors.append(float(abs(fitted / share[i] - 1)))
    return FittedTerm("achieved fraction of datasheet memory bandwidth", float(np.median(share)),
                      tuple(chosen.index), tuple(errors))

