"""Intervals earned by evidence: how far off a decode prediction may be, read from the
errors of the held-out predictions behind it.

Two kinds of held-out prediction judge the decode model (``regime_model``):

- leave-one-source-out (LOSO): a publication's runs predicted by terms fitted without
  them. The runtime's other sources stay in the fit: what a new run of a runtime the
  model has seen faces.
- leave-one-runtime-out (LORO): every run of one engine (all its profiles: versions,
  builds, launch modes) predicted by terms fitted without any of them. What a new engine,
  or a runtime none of whose runs is modeled, faces.

Rules:

1. An interval ``×/÷ f`` around a prediction ``p`` claims that a share ``level``
   (``INTERVAL_LEVEL``, the nominal level) of predictions like it fall in ``[p / f, p·f]``.
2. The factor from n held-out errors ``|log(predicted / published)|`` is their
   split-conformal quantile: the ⌈(n + 1)·level⌉-th smallest. When that rank exceeds n
   the errors cannot bound the level, and there is no factor (NaN).
3. A runtime profile with at least ``MIN_OWN_SOURCES`` independent modeled sources whose
   own LOSO errors give a factor (rule 2) uses that factor, labelled
   ``validated on N sources``.
4. Any other profile takes its regime's LORO errors (rule 5), the factor raised to
   ``1 + 1/k`` (the log half-width that much wider), k the engines those errors come
   from: how engines scatter around the model is known from k of them, and the fewer
   they are the less a new one is likely to fall inside their spread (one engine: twice
   as wide in log; ten: a tenth wider). The label is
   ``unvalidated runtime`` when none of the profile's runs is modeled, else
   ``validated on N source(s)`` — too few to bound its own errors. The widening is
   checked, not assumed: ``earned_coverage`` says how often it covers.
5. A regime's held-out errors stand for that regime only when they come from at least
   ``MIN_ENGINES`` engines and give a factor (rule 2); else every regime's errors are used
   (the same held-out set, all regimes pooled). One engine's errors are that engine's
   scatter around the model: they say nothing of how a different engine scatters, which
   is what an interval for a new engine (or a nested judgement of one) has to claim.
6. Coverage is nested: a held-out run is judged against the interval built without its
   own source (LOSO) or its own engine (LORO), so the interval is itself out of sample.
7. Sources are counted as ``published_runs.same_source`` does: one publication however
   its URL is spelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

from .published_errors import AnchorError
from .published_runs import same_source

__all__ = ["INTERVAL_LEVEL", "MIN_ENGINES", "MIN_OWN_SOURCES", "EarnedInterval", "OutOfSample", "conformal_factor",
           "earned_coverage", "earned_interval", "nested_coverage", "regime_factors", "runtime_sources"]  # fmt: skip

#: The nominal level every interval claims (rule 1).
INTERVAL_LEVEL = 0.8
#: Independent modeled sources a profile needs for an interval of its own errors (rule 3).
MIN_OWN_SOURCES = 3
#: Engines a regime's held-out errors must come from to stand for that regime (rule 5).
MIN_ENGINES = 2


@dataclass(frozen=True)
class OutOfSample:
    """One run predicted by a model fitted without it: without every run of its source
    (leave-one-source-out) or of its engine (leave-one-runtime-out), by ``regime_model``."""

    id: str
    regime: str
    source: str
    published: float
    predicted: Optional[float]  # None: not modeled
    why: str = ""
    runtime: str = ""
    gpu: str = ""
    host: str = ""
    family: str = ""
    placement: str = ""
    engine: str = ""  # the runtime profile's engine (what leave-one-runtime-out holds out together)
    settings: tuple[tuple[str, str], ...] = ()  # the run's setup, setting by setting (validation.ordering)

    @property
    def ratio(self) -> float:
        return self.predicted / self.published if self.predicted is not None else math.nan


@dataclass(frozen=True)
class EarnedInterval:
    """The interval a prediction carries, and the evidence it was earned on (rules 3, 4)."""

    factor: float  # ×/÷; NaN: no interval (too few held-out runs)
    evidence: str  # "validated on N sources" or "unvalidated runtime"
    basis: str  # which held-out errors, how many, and any widening
    sources: int  # independent modeled sources of the runtime profile
    level: float = INTERVAL_LEVEL  # the nominal share of predictions it claims to cover
    own: bool = False  # True: from the profile's own LOSO errors (rule 3); False: widened LORO (rule 4)

    def bounds(self, tok_s: float) -> tuple[float, float]:
        """(low, high) tok/s around a prediction; NaN without an interval."""
        if not math.isfinite(self.factor):
            return math.nan, math.nan
        return tok_s / self.factor, tok_s * self.factor

    def __str__(self) -> str:
        if not math.isfinite(self.factor):
            return f"no interval: too few held-out runs; {self.evidence}"
        return f"{self.level:.0%} interval ×/÷ {self.factor:.2f}, {self.evidence}"


def conformal_factor(errors: Sequence[float], level: float = INTERVAL_LEVEL) -> float:
    """Rule 2: the ×/÷ factor from held-out ``|log ratio|`` errors, NaN when too few."""
    if not 0 < level < 1:
        raise AnchorError(f"an interval's level is a share in (0, 1), got {level!r}")
    ordered = sorted(e for e in errors if math.isfinite(e))
    rank = math.ceil((len(ordered) + 1) * level)
    if rank > len(ordered):
        return math.nan
    return math.exp(ordered[rank - 1])


def _errors(predictions: Sequence[OutOfSample]) -> list[float]:
    return [abs(math.log(o.ratio)) for o in predictions if o.predicted is not None]


def runtime_sources(profile: str, loso: Sequence[OutOfSample]) -> int:
    """Independent sources with a modeled run of ``profile`` (rule 7)."""
    return len({same_source(o.source) for o in loso if o.runtime == profile and o.predicted is not None})


def _engines(predictions: Sequence[OutOfSample]) -> int:
    """Engines with a modeled run among ``predictions``."""
    return len({o.engine or o.runtime for o in predictions if o.predicted is not None})


def _regime_factor(regime: str, predictions: Sequence[OutOfSample],
                   level: float = INTERVAL_LEVEL) -> tuple[float, Sequence[OutOfSample], bool]:
    """Rule 5: the factor of ``regime``'s held-out errors when they come from enough
    engines, else every regime's; the predictions it was read from; whether they are the
    regime's own."""
    own = [o for o in predictions if o.regime == regime]
    factor = conformal_factor(_errors(own), level) if _engines(own) >= MIN_ENGINES else math.nan
    if math.isfinite(factor):
        return factor, own, True
    return conformal_factor(_errors(predictions), level), predictions, False


def _loro_factor(regime: str, loro: Sequence[OutOfSample]) -> tuple[float, int, str]:
    """The regime's LORO factor (rule 5), the engines its errors come from, and what it is."""
    factor, used, own = _regime_factor(regime, loro)
    n, engines = len(_errors(used)), _engines(used)
    where = f"{regime}'s" if own else "every regime's"
    return factor, engines, f"{where} leave-one-runtime-out errors ({n} runs of {engines} engines)"


def earned_interval(profile: str, regime: str, loso: Sequence[OutOfSample],
                    loro: Sequence[OutOfSample]) -> EarnedInterval:
    """Rules 3, 4: the interval a prediction of runtime ``profile`` in ``regime`` earns
    from the held-out predictions ``loso`` and ``loro``."""
    sources = runtime_sources(profile, loso)
    if sources >= MIN_OWN_SOURCES:
        own = _errors([o for o in loso if o.runtime == profile])
        factor = conformal_factor(own)
        if math.isfinite(factor):
            return EarnedInterval(factor, f"validated on {sources} sources",
                                  f"its own leave-one-source-out errors ({len(own)} runs)", sources, own=True)  # fmt: skip
    factor, engines, basis = _loro_factor(regime, loro)
    evidence = "unvalidated runtime" if sources == 0 else _validated(sources)
    if not math.isfinite(factor):
        return EarnedInterval(math.nan, evidence, "no held-out runs", sources)
    widening = 1 + 1 / engines
    return EarnedInterval(factor ** widening, evidence, f"{basis}, widened ×{widening:.3g} in log", sources)


def _validated(sources: int) -> str:
    return f"validated on {sources} source{'s' if sources != 1 else ''}"


def regime_factors(predictions: Sequence[OutOfSample], level: float = INTERVAL_LEVEL) -> dict[str, float]:
    """Per regime, the factor of its held-out errors at ``level`` (rules 2, 5): its own when
    they come from enough engines and give one, else every regime's; absent when neither
    gives one."""
    factors = {}
    for regime in dict.fromkeys(o.regime for o in predictions):
        factor, _, _ = _regime_factor(regime, predictions, level)
        if math.isfinite(factor):
            factors[regime] = factor
    return factors


def nested_coverage(predictions: Sequence[OutOfSample], group: Callable[[OutOfSample], str],
                    level: float = INTERVAL_LEVEL) -> dict[str, bool]:
    """Rule 6: run id → whether its regime's interval, built from the other groups'
    held-out errors (``group``: a run's source for LOSO, its engine for LORO), covers it."""
    covered: dict[str, bool] = {}
    for held in dict.fromkeys(group(o) for o in predictions):
        factors = regime_factors([o for o in predictions if group(o) != held], level)
        for o in predictions:
            if group(o) == held and o.predicted is not None and o.regime in factors:
                covered[o.id] = 1 / factors[o.regime] <= o.ratio <= factors[o.regime]
    return covered


def earned_coverage(loso: Sequence[OutOfSample], loro: Sequence[OutOfSample]) -> dict[str, tuple[bool, str]]:
    """Rules 3–6 judged on the held-out runs: run id → (covered, the evidence label). A
    run whose profile keeps ``MIN_OWN_SOURCES`` sources without its own is judged as a
    new source of a known runtime (its LOSO prediction against the interval of its
    profile's other sources); any other as a new runtime (its LORO prediction against the
    widened interval of the other engines' LORO errors)."""
    by_id: Mapping[str, OutOfSample] = {o.id: o for o in loro}
    out: dict[str, tuple[bool, str]] = {}
    for o in loso:
        if o.predicted is None:
            continue
        source = same_source(o.source)
        others = [p for p in loso if same_source(p.source) != source]
        interval = earned_interval(o.runtime, o.regime, others, [p for p in loro if p.engine != o.engine])
        judged: Optional[OutOfSample] = o if interval.own else by_id.get(o.id)
        if judged is None or judged.predicted is None or not math.isfinite(interval.factor):
            continue
        out[o.id] = (1 / interval.factor <= judged.ratio <= interval.factor, interval.evidence)
    return out

