"""Published decode measurements beside the one decode physics.

An ``Anchor`` is a published time per token of the built-in Qwen3.5-MoE 35B-A3B model,
for a named runtime and GPU: a row of the published table. ``anchors_table`` times the
same decode step two ways with ``speed.timer.time_decode`` on the same machine
(the GPU part, and the runtime profile with the fitted terms of ``speed.regime_model``): laid
out from the workbench's own graph of it (``full_size_plan``: captured shape-only, all on
the device, its weights stored in the format the run used) and laid out from the run's
facts (``speed.regime_model``, as every published run is). One physics: the two differ only as
much as the graph's bytes and kernels differ from the facts'.

``modeled_vs_published`` sets the regime model's speed beside every published run — in
sample (fitted on every run) and out of sample (its terms fitted without the run's
source: ``regime_model.leave_one_source_out``) — with why a run is not modeled;
``ratios_by_regime`` gives the median in-sample ratio per regime; ``memory_bound_tok_s``
is the simplest peer (the all-on-GPU rows only: every active weight read once per token
at the GPU's datasheet bandwidth, nothing fitted). ``decode_validation`` judges the
out-of-sample figures.

Rules:

1. One set of figures for every row: an anchor names a runtime profile and a GPU part,
   never a correction of its own.
2. Anchors whose run the built-in model cannot express are listed in
   ``UNMODELED_ANCHORS`` with the reason, not modeled.
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
from ..machine.cost_model import CostModel
from ..speed.graph_layout import layout_of
from ..speed.timer import time_decode
from ..strategy import all_on_device
from ..weight_formats import quantize
from ..speed.regime_model import (DecodePrediction, OutOfSample, RegimeModel, fit_regime_model, predict_decode, regime_model,
                           runtime_profile)  # fmt: skip
from ..speed.published_runs import (
    PUBLISHED_COLUMNS,
    PUBLISHED_REGIMES,
    RESERVED_SOURCES,
    AnchorError,
    FittedTerm,
    checked_published_table,
    gpu_part,
    published_decode_runs,
    published_dir,
    published_runs,
    same_source,
    source_key,
)

__all__ = [
    "ANCHORS", "ANCHOR_FORMATS", "PUBLISHED_COLUMNS", "PUBLISHED_REGIMES", "RESERVED_SOURCES", "UNMODELED_ANCHORS",
    "Anchor", "AnchorError", "MODELED_COLUMNS", "DecodePrediction", "FittedTerm", "RegimeModel", "anchors_table",
    "fit_bandwidth_fraction", "fit_regime_model", "full_size_plan", "gpu_part", "memory_bound_tok_s",
    "modeled_vs_published", "predict_decode", "published_decode_runs", "published_dir", "ratios_by_regime",
    "regime_model",
]  # fmt: skip

_EXECUTORCH_PR = 'pytorch/executorch pull request #18809 "Add CUDA graph capture/replay for qwen 3.5 moe decode method"'
#: ExecuTorch's qwen3_5_moe export: linear layers and experts 4-bit in groups of 128 (its
#: README's ``--qlinear 4w --qlinear-group-size 128``); the embedding, 8-bit there, is
#: int4 here too: one row of it is read per token.
ANCHOR_FORMATS: Mapping[str, Sequence[str]] = {"int4_g128": ["module:*"]}


@dataclass(frozen=True)
class Anchor:
    """A published decode measurement of the built-in model (rule 1)."""

    anchor: str  # what was measured: model, runtime, launch
    hardware: str  # the GPU, as published
    runtime: Optional[str]  # the runtime profile it ran as; None: not modeled (rule 2)
    gpu: str  # the GPU part
    run_id: str  # its row in the published table (data/published/decode_anchors.csv)
    source: str  # where it was published
    reason: str = ""  # why it is not modeled (rule 2)

    @property
    def published_ms(self) -> float:
        """Milliseconds per token as published: its row's decode tok/s in the published
        table, as 1000 / tok/s to the 10 µs the sources quote (one figure, one place)."""
        return round(1000.0 / _published_tok_s(self.run_id), 2)


def _published_tok_s(run_id: str) -> float:
    table = published_decode_runs()
    rows = table[table["id"] == run_id]
    if len(rows) != 1:
        raise AnchorError(f"anchor run {run_id!r} is not one row of the published table ({published_dir()})")
    return float(rows["decode_tok_s"].iloc[0])


ANCHORS: tuple[Anchor, ...] = (
    Anchor("ExecuTorch CUDA, Qwen3.5-35B-A3B int4 decode, per-kernel launches", "A100", "executorch_eager",
           "a100_80gb", "et_qwen35moe_a100_eager", _EXECUTORCH_PR + ": the warm-up tokens, ~11.5 ms/token"),
    Anchor("ExecuTorch CUDA, Qwen3.5-35B-A3B int4 decode, CUDA-graph replay", "A100", "executorch_graph",
           "a100_80gb", "et_qwen35moe_a100_cudagraph", _EXECUTORCH_PR + ": 508 replayed tokens, 7.60 ms/token (~132 tok/s)"),
)  # fmt: skip

UNMODELED_ANCHORS: tuple[Anchor, ...] = (
    Anchor("llama.cpp, Qwen3.6-35B-A3B Q4_K_M, all experts resident, CUDA graphs", "RTX 3090", None,
           "rtx_3090", "lucebox332_qwen36_3090_graphs", "lucebox PR #332, 110.8 tok/s",
           "Q4_K_M's mixed K-quant blocks are not one format of the graph; the published table models the run from facts"),
)  # fmt: skip


def full_size_plan(config: Optional[MoEConfig] = None, algorithm: str = "greedy",
                   formats: Optional[Mapping[str, Any]] = None) -> MemoryPlan:
    """The decode step of ``config`` (default: the published 35B-A3B), captured shape-only
    with every op and weight on ``cuda:0`` and inputs/outputs already there (no copies);
    ``formats``: weight-format rules for ``quantize`` (default: the captured dtype)."""
    config = config or MoEConfig.full()
    with torch.device("meta"):
        model = QwenMoEDecoder(config)
        inputs = model.example_inputs()
    program = capture(model, inputs, shape_only=True)
    if formats is not None:
        program = quantize(program, formats)
    return plan(all_on_device(skip_copies=True).apply(program), algorithm)


def anchors_table(decode_plan: Optional[MemoryPlan] = None, *, anchors: Sequence[Anchor] = ANCHORS,
                  model: Optional[RegimeModel] = None) -> pd.DataFrame:
    """One row per anchor: the weights' format in the graph and as the run states it,
    published ms/token, the graph's and the facts' ms/token on the same machine
    (``time_decode``), and each over the published (rules 1, 2).
    ``decode_plan`` defaults to ``full_size_plan(formats=ANCHOR_FORMATS)``."""
    unmodeled = [a.anchor for a in anchors if a.runtime is None]
    if unmodeled:
        raise AnchorError(f"anchors without a runtime cannot be modeled: {unmodeled}; see UNMODELED_ANCHORS")
    decode_plan = decode_plan if decode_plan is not None else full_size_plan(formats=ANCHOR_FORMATS)
    model = model if model is not None else regime_model()
    layout = layout_of(decode_plan)
    runs = {r.id: r for r in published_runs()}
    rows = []
    for a in anchors:
        assert a.runtime is not None
        machine = CostModel.compose(gpu=a.gpu, runtime=runtime_profile(a.runtime, model.fits))
        graph_ms = time_decode(layout, machine).ms
        facts = model.predict(runs[a.run_id]) if a.run_id in runs else None
        facts_ms = 1e3 / facts.tok_s if facts is not None and facts.tok_s else float("nan")
        stated = runs[a.run_id].formats if a.run_id in runs else None
        published = a.published_ms  # read once: it comes from the published table
        rows.append({"anchor": a.anchor, "hardware": f"{a.hardware} ({a.gpu}, {a.runtime})",
                     "weights (graph; run)": f"{_formats_of(decode_plan)}; {stated.how if stated is not None else 'not stated'}",
                     "published ms/token": published, "graph ms/token": round(graph_ms, 3),
                     "facts ms/token": round(facts_ms, 3), "graph / published": round(graph_ms / published, 3),
                     "facts / published": round(facts_ms / published, 3)})  # fmt: skip
    return pd.DataFrame(rows)


def _formats_of(memory: MemoryPlan) -> str:
    """The weight formats a plan's constants are stored in, in words."""
    stored = sorted({f.name for f in memory.device_graph.program.stored_formats.values()})
    return ", ".join(stored) if stored else "as captured (no weight format)"


# --- modeled vs published, per row and per regime ---

def memory_bound_tok_s(row: Union[pd.Series, Mapping[str, Any]]) -> tuple[Optional[float], str]:
    """The decode speed of a run whose every active weight is read once per token at its
    GPU's datasheet bandwidth: ``bandwidth / (active params × bits / 8)``, and "" — or None
    and why the run is not modeled (not all on one GPU, a GPU without a part, an unstated
    size or bits per weight)."""
    if row["regime"] != "all_on_gpu":
        return None, f"regime {row['regime']}: not modeled (only all_on_gpu rows are)"
    part = gpu_part(row["gpu"])
    if part is None:
        return None, f"no GPU part for {row['gpu']!r}"
    active, bits = pd.to_numeric(row["active_params_b"], errors="coerce"), pd.to_numeric(row["bits_per_weight"], errors="coerce")
    if not (np.isfinite(active) and np.isfinite(bits)):
        return None, "active parameters or bits per weight not stated"
    bandwidth = CostModel.compose(gpu=part).device_memory_bandwidth
    return bandwidth / (float(active) * 1e9 * float(bits) / 8), ""


#: The columns of a ``modeled_vs_published`` table.
MODELED_COLUMNS = ("id", "regime", "source", "published tok/s", "modeled tok/s", "ratio", "held-out tok/s", "held-out ratio",
                   "LORO tok/s", "LORO ratio", "interval ×/÷", "low tok/s", "high tok/s", "evidence", "not modeled because",
                   "runtime profile", "parts", "routing")  # fmt: skip
ModelAnswer = Union[tuple[Optional[float], str], tuple[Optional[float], str, str, str],
                    tuple[Optional[float], str, str, str, str]]


def modeled_vs_published(
    runs: Optional[pd.DataFrame] = None,
    model: Optional[Callable[[pd.Series], ModelAnswer]] = None,
) -> pd.DataFrame:
    """One row per published run: its source, published tok/s, the model's tok/s in sample
    and held out (fitted without the run's source, and without its engine — LORO; NaN
    when not modeled), their ratios over the published, the interval the prediction
    earned (``speed.evidence``: ×/÷, low and high tok/s, and the evidence label), why a
    row is not modeled, the runtime profile and parts used, and the routing its expert
    cache's hit rate assumed.

    ``model`` defaults to the shipped regime model (``decode_model.regime_model()``); it
    may be any callable returning ``(tok/s or None, why)`` — such as
    ``memory_bound_tok_s`` — or ``(tok/s or None, why, runtime profile, parts[,
    routing])``: then the held-out columns are NaN (that model has no held-out fits)."""
    table = checked_published_table(runs, "the runs given") if runs is not None else published_decode_runs()
    shipped = model is None
    fitted = regime_model() if shipped else None
    held: dict[str, OutOfSample] = {o.id: o for o in fitted.out_of_sample} if fitted is not None else {}
    unseen: dict[str, OutOfSample] = {o.id: o for o in fitted.out_of_runtime} if fitted is not None else {}
    rows = []
    for run in table.to_dict("records"):
        band: tuple[float, float, float, str] = (np.nan, np.nan, np.nan, "")
        if fitted is not None:
            p = fitted.predict(run)
            answer: tuple = (p.tok_s, p.why, p.profile, p.parts, p.routing)
            band = (p.interval, p.low, p.high, p.evidence)
        else:
            assert model is not None
            answer = tuple(model(pd.Series(run)))
        modeled, why = answer[0], answer[1]
        profile, parts_used = (answer[2], answer[3]) if len(answer) >= 4 else ("", "")
        out = held.get(str(run["id"]))
        published = float(run["decode_tok_s"])
        if out is not None and (same_source(out.source) != same_source(source_key(run["source_url"]))
                                or out.published != published):
            out = None  # a row of your own that reuses a shipped id is not the shipped run
        loro = unseen.get(str(run["id"])) if out is not None else None
        rows.append({"id": run["id"], "regime": run["regime"], "source": out.source if out is not None else "",
                     "published tok/s": published, "modeled tok/s": np.nan if modeled is None else float(modeled),
                     "ratio": np.nan if modeled is None else float(modeled) / published,
                     "held-out tok/s": np.nan if out is None or out.predicted is None else out.predicted,
                     "held-out ratio": np.nan if out is None or out.predicted is None else out.ratio,
                     "LORO tok/s": np.nan if loro is None or loro.predicted is None else loro.predicted,
                     "LORO ratio": np.nan if loro is None or loro.predicted is None else loro.ratio,
                     "interval ×/÷": band[0] if modeled is not None else np.nan, "low tok/s": band[1], "high tok/s": band[2],
                     "evidence": band[3], "not modeled because": why, "runtime profile": profile,
                     "parts": parts_used, "routing": answer[4] if len(answer) == 5 else ""})  # fmt: skip
    return pd.DataFrame(rows, columns=list(MODELED_COLUMNS))


def ratios_by_regime(table: pd.DataFrame, column: str = "ratio") -> pd.DataFrame:
    """Per regime of a ``modeled_vs_published`` table: rows, modeled rows, and the median,
    smallest and largest of ``column`` (``"ratio"``: in sample; ``"held-out ratio"``: out
    of sample) over the modeled ones (NaN when none is modeled)."""
    out = []
    for regime in PUBLISHED_REGIMES:
        part = table[table["regime"] == regime]
        ratios = part[column].dropna()
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

