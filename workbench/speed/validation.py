"""How well the decode model predicts published runs it was not fitted to.

Everything here reads held-out predictions (``regime_model.leave_one_runtime_out``: each
engine's runs predicted by terms fitted without any of them; ``leave_one_source_out``: the
same per source) and turns them into the tables a reader judges the model by:

- ``regime_table``: per regime, the runs, sources, engines, modeled runs, the median and
  range of predicted / published, the share within 0.5–2.0, the interval factor at the
  nominal level and how often the nested interval covers a held-out run (rule 2).
- ``profile_table``: per runtime profile, the same under both hold-outs, the evidence its
  intervals are earned on and how often they cover (``speed.evidence``).
- ``ordering``: every pair of runs of one model family that differ in one setting only
  (GPU, host, engine, engine version, format, placement, host layers, cache size,
  context, threads, sockets...), and whether the model orders them as published (rule
  3); ``ordering_by_setting`` sums it per setting.
- ``peer_table``: the same rows under a simple peer, llmfit's formula (rule 4), side by
  side with the model.

Rules:

1. Nothing here fits: predictions come from the hold-outs.
2. Coverage is nested (``evidence`` rule 6): a held-out run is judged against its
   regime's interval at the nominal level built from the *other* groups' held-out errors
   (other sources for LOSO, other engines for LORO), so the interval is itself out of
   sample; a run is covered when ``1/f <= predicted / published <= f``.
3. A pair is ordered when both runs are modeled, their published speeds differ by more
   than 2%, and predicted and published agree on which is faster. Settings that follow
   from another are not counted apart: a different engine is one setting (not also a
   different version), a different placement is one (not also its layers or cache).
4. The peer (llmfit's ``estimate_tps``, ``llmfit-core/src/fit.rs``): with routed experts
   in host memory, ``tok/s = 0.8 / (A / DDR + A / (0.55 × GPU))``, ``A`` the active
   bytes, ``DDR`` the host's sustained bandwidth (the host part's, else llmfit's 50 GB/s
   fallback), ``GPU`` the GPU's datasheet bandwidth; all on the GPU, ``tok/s = GPU / A ×
   0.55 × m``, ``m`` its MoE overhead by expert count (0.90 up to 8, 0.85 to 16, 0.80 to
   32, 0.70 to 64, 0.40 above); experts copied in: not modeled (llmfit has no such mode).
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Sequence

import numpy as np
import pandas as pd

from ..machine.parts import part_figures
from ..machine.runtime_profiles import RuntimeProfile
from .evidence import earned_coverage, earned_interval, nested_coverage, regime_factors
from .regime_model import OutOfSample
from .published_runs import PUBLISHED_REGIMES, AnchorError, PublishedRun, same_source

__all__ = ["HOLD_OUTS", "PROFILE_COLUMNS", "REGIME_COLUMNS", "coverage", "llmfit_tok_s", "ordering", "ordering_by_setting",
           "peer_table", "profile_table", "regime_table"]  # fmt: skip

#: The columns of ``regime_table``.
REGIME_COLUMNS = ("regime", "runs", "sources", "engines", "modeled", "sources modeled", "engines modeled", "median ratio",
                  "min ratio", "max ratio", "within 0.5-2", "interval ×/÷", "covered")  # fmt: skip
#: The columns of ``profile_table``.
PROFILE_COLUMNS = ("profile", "engine", "runs", "modeled", "sources modeled", "LORO median", "LORO within 0.5-2",
                   "LOSO median", "LOSO within 0.5-2", "evidence", "interval ×/÷", "covered", "judged")  # fmt: skip
ROW_BAND = (0.5, 2.0)
#: What each hold-out keeps apart: a run's source (LOSO) or its engine (LORO).
HOLD_OUTS: dict[str, Callable[[OutOfSample], str]] = {
    "source": lambda o: same_source(o.source),
    "engine": lambda o: o.engine or o.runtime,
}


def coverage(predictions: Sequence[OutOfSample], held_out_by: str = "source") -> dict[str, bool]:
    """Rule 2: run id → whether its nested held-out interval covers it; ``held_out_by``
    is ``"source"`` for leave-one-source-out predictions, ``"engine"`` for
    leave-one-runtime-out ones."""
    if held_out_by not in HOLD_OUTS:
        raise AnchorError(f"held_out_by is one of {', '.join(HOLD_OUTS)}, got {held_out_by!r}")
    return nested_coverage(predictions, HOLD_OUTS[held_out_by])


def _within(ratios: np.ndarray) -> float:
    return float(np.mean((ratios >= ROW_BAND[0]) & (ratios <= ROW_BAND[1]))) if len(ratios) else math.nan


def regime_table(predictions: Sequence[OutOfSample], held_out_by: str = "source") -> pd.DataFrame:
    """Per regime and over all (rule 2): the held-out figures a reader judges by, the
    interval at the nominal level (``evidence.INTERVAL_LEVEL``) and its nested coverage."""
    covered = coverage(predictions, held_out_by)
    factors = regime_factors(predictions)
    rows = []
    for regime in (*PUBLISHED_REGIMES, "all"):
        part = [o for o in predictions if regime in ("all", o.regime)]
        ratios = np.array([o.ratio for o in part if o.predicted is not None])
        judged = [covered[o.id] for o in part if o.id in covered]
        rows.append({
            "regime": regime, "runs": len(part), "sources": len({same_source(o.source) for o in part}),
            "engines": len({o.engine or o.runtime for o in part if o.runtime}),
            "modeled": len(ratios), "sources modeled": len({same_source(o.source) for o in part if o.predicted is not None}),
            "engines modeled": len({o.engine or o.runtime for o in part if o.predicted is not None}),
            "median ratio": float(np.median(ratios)) if len(ratios) else math.nan,
            "min ratio": float(ratios.min()) if len(ratios) else math.nan,
            "max ratio": float(ratios.max()) if len(ratios) else math.nan,
            "within 0.5-2": _within(ratios),
            "interval ×/÷": factors.get(regime, math.nan) if regime != "all" else math.nan,
            "covered": float(np.mean(judged)) if judged else math.nan,
        })  # fmt: skip
    return pd.DataFrame(rows)


def profile_table(loso: Sequence[OutOfSample], loro: Sequence[OutOfSample],
                  profiles: Sequence[RuntimeProfile] = ()) -> pd.DataFrame:
    """Per runtime profile (every one of ``profiles`` too, runs or none): its runs under both
    hold-outs, the evidence its intervals are earned on (``evidence`` rules 3, 4: the
    interval of its most common regime) and how often the earned, nested interval covers
    its held-out runs (``covered`` over ``judged`` runs)."""
    earned = earned_coverage(loso, loro)
    held = {o.id: o for o in loro}
    engines = {p.name: p.engine_name for p in profiles}
    names = list(dict.fromkeys([*(o.runtime for o in loso if o.runtime), *engines]))
    rows = []
    for name in names:
        part = [o for o in loso if o.runtime == name]
        own = np.array([o.ratio for o in part if o.predicted is not None])
        out = np.array([held[o.id].ratio for o in part if o.id in held and held[o.id].predicted is not None])
        regimes = [o.regime for o in part if o.predicted is not None] or [o.regime for o in part] or ["all_on_gpu"]
        regime = max(dict.fromkeys(regimes), key=regimes.count)
        interval = earned_interval(name, regime, loso, loro)
        judged = [earned[o.id][0] for o in part if o.id in earned]
        rows.append({"profile": name, "engine": next((o.engine for o in part if o.engine), engines.get(name, "")), "runs": len(part),
                     "modeled": len(own), "sources modeled": interval.sources,
                     "LORO median": float(np.median(out)) if len(out) else math.nan, "LORO within 0.5-2": _within(out),
                     "LOSO median": float(np.median(own)) if len(own) else math.nan, "LOSO within 0.5-2": _within(own),
                     "evidence": interval.evidence, "interval ×/÷": interval.factor,
                     "covered": float(np.mean(judged)) if judged else math.nan, "judged": len(judged)})  # fmt: skip
    return pd.DataFrame(rows, columns=list(PROFILE_COLUMNS))


#: Settings whose difference implies another's: the implied ones are not counted apart (rule 3).
_IMPLIES = {"engine": ("engine version or mode",), "placement": ("host layers", "GPU experts", "cache size"),
            "NUMA": ("sockets",)}


def _one_setting(a: OutOfSample, b: OutOfSample) -> str:
    """The one setting ``a`` and ``b`` differ in (rule 3), or "" when none or several."""
    left, right = dict(a.settings), dict(b.settings)
    diffs = {k for k in left if left.get(k) != right.get(k)}
    for setting, implied in _IMPLIES.items():
        if setting in diffs:
            diffs -= set(implied)
    return diffs.pop() if len(diffs) == 1 else ""


def ordering(predictions: Sequence[OutOfSample]) -> pd.DataFrame:
    """Rule 3: one row per pair of modeled runs of one model family that differ in one
    setting only; ``ordered`` says whether the model agrees which is faster."""
    modeled = [o for o in predictions if o.predicted is not None]
    rows = []
    for i, a in enumerate(modeled):
        for b in modeled[i + 1:]:
            if a.family != b.family or abs(math.log(a.published / b.published)) <= math.log(1.02):
                continue
            setting = _one_setting(a, b)
            if not setting:
                continue
            fast, slow = (a, b) if a.published > b.published else (b, a)
            assert fast.predicted is not None and slow.predicted is not None
            rows.append({"setting": setting, "faster (published)": fast.id, "slower (published)": slow.id,
                         "published ratio": fast.published / slow.published,
                         "predicted ratio": fast.predicted / slow.predicted,
                         "ordered": fast.predicted > slow.predicted})  # fmt: skip
    return pd.DataFrame(rows, columns=["setting", "faster (published)", "slower (published)", "published ratio",
                                       "predicted ratio", "ordered"])  # fmt: skip


def ordering_by_setting(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per setting of an ``ordering`` table: pairs, pairs ordered as published, and the share."""
    if not len(pairs):
        return pd.DataFrame(columns=["setting", "pairs", "ordered", "share"])
    grouped = pairs.groupby("setting", sort=True)["ordered"]
    out = pd.DataFrame({"pairs": grouped.size(), "ordered": grouped.sum().astype(int)}).reset_index()
    out["share"] = out["ordered"] / out["pairs"]
    return out


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

