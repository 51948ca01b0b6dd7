"""How well the decode model predicts published runs it was not fitted to.

Everything here reads out-of-sample predictions (``regime_model.leave_one_source_out``:
each source's runs predicted by terms fitted without any of them) and turns them into
the tables a reader judges the model by:

- ``regime_table``: per regime, the runs, sources, modeled runs, the median and range of
  predicted / published, the share within 0.5–2.0, the interval factor and how often the
  interval covers a held-out run (rule 2).
- ``ordering``: for every pair of runs on the same GPU, host and model family that
  differ in placement or runtime, whether the model orders them as published (rule 3).
- ``peer_table``: the same rows under a simple peer, llmfit's formula (rule 4), side by
  side with the model.

Rules:

1. Nothing here fits: predictions come from ``leave_one_source_out``.
2. Coverage is nested: a held-out source's runs are judged against the interval built
   from the *other* sources' out-of-sample errors (``regime_model.interval_factors``),
   so the interval is itself out of sample; a run is covered when ``1/f <= predicted /
   published <= f``.
3. A pair is ordered when both runs are modeled, their published speeds differ by more
   than 2%, and predicted and published agree on which is faster.
4. The peer (llmfit's ``estimate_tps``, ``llmfit-core/src/fit.rs``): with routed experts
   in host memory, ``tok/s = 0.8 / (A / DDR + A / (0.55 × GPU))``, ``A`` the active
   bytes, ``DDR`` the host's sustained bandwidth (the host part's, else llmfit's 50 GB/s
   fallback), ``GPU`` the GPU's datasheet bandwidth; all on the GPU, ``tok/s = GPU / A ×
   0.55 × m``, ``m`` its MoE overhead by expert count (0.90 up to 8, 0.85 to 16, 0.80 to
   32, 0.70 to 64, 0.40 above); experts copied in: not modeled (llmfit has no such mode).
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import pandas as pd

from ..machine.parts import part_figures
from .regime_model import OutOfSample, interval_factors
from .published_runs import PUBLISHED_REGIMES, PublishedRun

__all__ = ["REGIME_COLUMNS", "coverage", "llmfit_tok_s", "ordering", "peer_table", "regime_table"]

#: The columns of ``regime_table``.
REGIME_COLUMNS = ("regime", "runs", "sources", "modeled", "sources modeled", "median ratio", "min ratio", "max ratio", "within 0.5-2",
                  "interval ×/÷", "covered")  # fmt: skip
ROW_BAND = (0.5, 2.0)


def coverage(predictions: Sequence[OutOfSample]) -> dict[str, bool]:
    """Rule 2: run id → whether its nested out-of-sample interval covers it."""
    covered: dict[str, bool] = {}
    for source in dict.fromkeys(o.source for o in predictions):
        others = [o for o in predictions if o.source != source]
        factors = interval_factors(others)
        for o in predictions:
            if o.source == source and o.predicted is not None and o.regime in factors:
                f = factors[o.regime]
                covered[o.id] = 1 / f <= o.ratio <= f
    return covered


def regime_table(predictions: Sequence[OutOfSample]) -> pd.DataFrame:
    """Per regime and over all (rule 2): the out-of-sample figures a reader judges by."""
    covered = coverage(predictions)
    factors = interval_factors(predictions)
    rows = []
    for regime in (*PUBLISHED_REGIMES, "all"):
        part = [o for o in predictions if regime in ("all", o.regime)]
        ratios = np.array([o.ratio for o in part if o.predicted is not None])
        judged = [covered[o.id] for o in part if o.id in covered]
        rows.append({
            "regime": regime, "runs": len(part), "sources": len({o.source for o in part}),
            "modeled": len(ratios), "sources modeled": len({o.source for o in part if o.predicted is not None}),
            "median ratio": float(np.median(ratios)) if len(ratios) else math.nan,
            "min ratio": float(ratios.min()) if len(ratios) else math.nan,
            "max ratio": float(ratios.max()) if len(ratios) else math.nan,
            "within 0.5-2": float(np.mean((ratios >= ROW_BAND[0]) & (ratios <= ROW_BAND[1]))) if len(ratios) else math.nan,
            "interval ×/÷": factors.get(regime, math.nan) if regime != "all" else math.nan,
            "covered": float(np.mean(judged)) if judged else math.nan,
        })  # fmt: skip
    return pd.DataFrame(rows)


def ordering(predictions: Sequence[OutOfSample]) -> pd.DataFrame:
    """Rule 3: one row per pair of runs on the same GPU, host and family that differ in
    placement or runtime; ``ordered`` says whether the model agrees which is faster."""
    modeled = [o for o in predictions if o.predicted is not None]
    rows = []
    for i, a in enumerate(modeled):
        for b in modeled[i + 1:]:
            same_machine = (a.gpu, a.host, a.family) == (b.gpu, b.host, b.family)
            differ = (a.placement, a.runtime) != (b.placement, b.runtime)
            if not (same_machine and differ) or abs(math.log(a.published / b.published)) <= math.log(1.02):
                continue
            assert a.predicted is not None and b.predicted is not None
            rows.append({"faster (published)": a.id if a.published > b.published else b.id,
                         "slower (published)": b.id if a.published > b.published else a.id,
                         "published ratio": max(a.published, b.published) / min(a.published, b.published),
                         "predicted ratio": (a.predicted / b.predicted) ** (1 if a.published > b.published else -1),
                         "ordered": (a.published > b.published) == (a.predicted > b.predicted)})  # fmt: skip
    return pd.DataFrame(rows, columns=["faster (published)", "slower (published)", "published ratio", "predicted ratio", "ordered"])


_LLMFIT_EFFICIENCY = 0.55
_LLMFIT_OFFLOAD_FACTOR = 0.8
_LLMFIT_DDR_FALLBACK = 50e9


def _moe_overhead(experts: int) -> float:
    for limit, factor in ((8, 0.90), (16, 0.85), (32, 0.80), (64, 0.70)):
        if experts <= limit:
            return factor
    return 0.40


def llmfit_tok_s(run: PublishedRun) -> Optional[float]:
    """The peer's speed for ``run`` (rule 4), or None where it has no mode for it."""
    if run.why or run.model is None or run.formats is None or run.gpu is None:
        return None
    m, bits = run.model, run.formats
    active = m.expert_active * bits.experts / 8 + m.other_active * bits.other / 8
    gpu = part_figures("gpu", run.gpu)["device_memory_bandwidth"]
    if run.regime == "all_on_gpu":
        return gpu / active * _LLMFIT_EFFICIENCY * _moe_overhead(m.num_experts)
    if run.regime in ("experts_on_host_compute", "partial_offload"):
        ddr = part_figures("host", run.host)["host_memory_bandwidth"] if run.host else _LLMFIT_DDR_FALLBACK
        return _LLMFIT_OFFLOAD_FACTOR / (active / ddr + active / (gpu * _LLMFIT_EFFICIENCY))
    return None


def peer_table(predictions: Sequence[OutOfSample], runs: Sequence[PublishedRun]) -> pd.DataFrame:
    """Rule 4, per regime and over all, on the rows both model: the model's out-of-sample
    median ratio and share within 0.5–2 beside the peer's."""
    by_id = {r.id: r for r in runs}
    pairs = []
    for o in predictions:
        speed = llmfit_tok_s(by_id[o.id]) if o.id in by_id else None
        if o.predicted is not None and speed is not None:
            pairs.append((o.regime, o.ratio, speed / o.published))
    rows = []
    for regime in (*PUBLISHED_REGIMES, "all"):
        part = [(w, p) for r, w, p in pairs if regime in ("all", r)]
        if not part:
            continue
        ours, peer = np.array([w for w, _ in part]), np.array([p for _, p in part])
        rows.append({"regime": regime, "rows": len(part),
                     "workbench median": float(np.median(ours)), "workbench within 0.5-2": float(np.mean((ours >= 0.5) & (ours <= 2))),
                     "workbench median |log|": float(np.median(np.abs(np.log(ours)))),
                     "llmfit median": float(np.median(peer)), "llmfit within 0.5-2": float(np.mean((peer >= 0.5) & (peer <= 2))),
                     "llmfit median |log|": float(np.median(np.abs(np.log(peer))))})  # fmt: skip
    return pd.DataFrame(rows)

