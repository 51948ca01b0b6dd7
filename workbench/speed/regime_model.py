"""The decode model of published runs: each run timed by the one decode physics, a few
terms fitted, and every prediction judged on sources it was not fitted to.

``RegimeModel.predict(run)`` lays a published run out from its structured parts
(``speed.layout.DecodeLayout.for_machine``: the model's sizes, its weight bits,
where its experts live, the named GPU, host and link) and times it on the machine its
runtime profile composes (``CostModel.compose(gpu=, host=, link=, runtime=profile)``)
with ``speed.timer.time_decode`` — the same function that times the sweep's and
the walkthrough's graphs. ``predict_machine`` does the same for a machine of your own,
given as parts. ``fit_regime_model`` fits the profile terms marked ``fit:``;
``leave_one_source_out`` refits without every run of one source and predicts them, per
source; ``leave_one_runtime_out`` does the same per engine. ``regime_model()`` carries
both, so every prediction says how far off it may be and on what evidence
(``31 tok/s (80% interval 21–46, validated on 12 sources)``).

Rules:

1. A run's time is ``time_decode(layout, cost_model)``; a run that cannot be laid out
   (``PublishedRun.why``, a ``LayoutError``) or timed gets None and the reason, never a
   negative, zero or non-finite speed.
2. A term (``fitted_terms.csv``) is fitted on the modeled runs whose time depends on it
   (a relative change of the term moves their time by at least a tenth as much: it is a
   material part of their time) and on no term not yet fitted, taken in the order the
   profiles name them, when at least 3 runs do: the value at which the median of
   log(modeled / published) over them is 0 (bisection in the term's range; the bound
   nearer to 0 when none inside makes it 0). With fewer runs the term keeps its prior,
   the physical default its row cites, and says so (``FittedTerm.prior``). The terms are
   fitted twice over: the second pass refits each with the others at their first-pass
   values.
3. Each fitted term's leave-one-out error for a run: refit without it, predict it,
   ``|predicted / published - 1|`` (in-sample diagnostics of one term).
4. Held out twice over. Leave-one-source-out (LOSO): for each source, every term
   refitted on the other sources' runs (rule 2), and that source's runs predicted.
   Leave-one-runtime-out (LORO, the headline): for each engine (a runtime profile with
   all its versions, builds and launch modes: ``RuntimeProfile.engine_name``), every term
   refitted without any of its runs — a term only its runs fit keeps its prior — and its
   runs predicted. A prediction's interval is earned from these errors
   (``speed.evidence``): its profile's own LOSO errors when it has enough independent
   sources, else its regime's LORO errors, widened, and the label says which. Sources
   are compared as ``published_runs.same_source`` does: one source however its URL is
   spelled.
5. The runs given — the shipped table, a table in memory or a sequence of runs — pass
   the published table's one validation path (``published_runs`` rule 1) with unique
   ids; a fit on fewer than 3 runs the model can express is refused (every term would
   keep its prior). A run read with a parts file of your own (``read_run(row,
   parts=...)``) is laid out and timed on those parts.
6. A run whose published speed is more than ``CEILING_SLACK`` times its machine's ceiling
   (every active byte read once, the GPU's and the host's memories at their peaks side
   by side) is not modeled and not fitted to: it says why.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd

from ..errors import WorkbenchWarning
from ..machine.cost_model import CostModel
from .layout import DecodeLayout, LayoutError, ModelFacts, ExpertPlacement, WeightBits
from .timer import DecodeTimeError, time_decode
from ..machine.op_cost import CostModelError
from ..machine.parts import PartsFile, parts_file_key, parts_path
from .evidence import EarnedInterval, OutOfSample, earned_interval
from .evidence_file import EvidenceFile, evidence_inputs_hash, read_evidence_file
from .published_runs import (AnchorError, FittedTerm, PublishedRun, published_dir, published_runs, read_run, read_runs,
                             same_source)
from ..machine.runtime_profiles import FittedTermSpec, checked_fit, RuntimeProfile, RuntimeProfileError, fitted_terms, runtime_profiles, runtime_profiles_path

__all__ = ["DecodePrediction", "EvidenceRefitted", "OutOfSample", "RegimeModel", "fit_regime_model", "fitted_regime_model",
           "leave_one_runtime_out", "leave_one_source_out", "predict_decode", "regime_evidence", "regime_model",
           "regime_model_tok_s", "runtime_profile"]  # fmt: skip

_MIN_FIT_ROWS = 3
#: A run depends on a term when its time moves by at least this share of the term's own
#: relative change (rule 2): the term is a material part of its time.
_ELASTICITY = 0.25
#: Halvings of a term's log range in a fit: 2^-26 of a range of 1e4 is a relative error of 1e-7.
_BISECTIONS = 26


@dataclass(frozen=True)
class DecodePrediction:
    """A modeled run: tok/s (None: not modeled, ``why`` says why) and what was used."""

    tok_s: Optional[float]
    why: str
    profile: str = ""
    parts: str = ""
    terms: tuple[str, ...] = ()  # the fitted terms the prediction depends on
    seconds: Mapping[str, float] = field(default_factory=dict)  # gpu, host, copy parts
    routing: str = ""  # the routing the expert cache's hit rate assumes; "" when no cache
    host_bound: str = ""  # "memory" or "compute" when the host computes experts
    regime: str = ""
    earned: Optional[EarnedInterval] = None  # the interval and the evidence behind it (rule 4); None: not known

    @property
    def interval(self) -> float:
        """The ×/÷ factor of the earned interval; NaN: none."""
        return self.earned.factor if self.earned is not None else math.nan

    @property
    def evidence(self) -> str:
        """``validated on N sources`` or ``unvalidated runtime`` ("" when not modeled)."""
        return self.earned.evidence if self.earned is not None and self.tok_s is not None else ""

    @property
    def low(self) -> float:
        return self.earned.bounds(self.tok_s)[0] if self.earned is not None and self.tok_s is not None else math.nan

    @property
    def high(self) -> float:
        return self.earned.bounds(self.tok_s)[1] if self.earned is not None and self.tok_s is not None else math.nan

    def __str__(self) -> str:
        if self.tok_s is None:
            return f"not modeled: {self.why}"
        if self.earned is None or not math.isfinite(self.earned.factor):
            evidence = f"; {self.earned.evidence}" if self.earned is not None else ""
            return f"{self.tok_s:.3g} tok/s (no interval: too few held-out runs{evidence})"
        return (f"{self.tok_s:.3g} tok/s ({self.earned.level:.0%} interval {self.low:.3g}–{self.high:.3g}, "
                f"{self.earned.evidence})")


def _as_run(run: Union[PublishedRun, Mapping[str, Any]]) -> PublishedRun:
    return run if isinstance(run, PublishedRun) else read_run(run)


def _layout(run: PublishedRun) -> tuple[Optional[DecodeLayout], str]:
    """The run's layout on its parts (the parts file it was read with, if any: a user's
    part is never replaced by a shipped one of the same name), or why there is none."""
    return _cached_layout(run, parts_file_key(run.parts))


@functools.lru_cache(maxsize=4096)
def _cached_layout(run: PublishedRun, _parts_key: Any) -> tuple[Optional[DecodeLayout], str]:
    if run.why:
        return None, run.why
    assert run.model is not None and run.formats is not None and run.placement is not None and run.gpu is not None
    try:
        return DecodeLayout.for_machine(gpu=run.gpu, host=run.host, link=run.link, model=run.model,
                                        formats=run.formats, placement=run.placement, parts=run.parts), ""  # fmt: skip
    except LayoutError as exc:
        return None, str(exc)


def _machine(run: PublishedRun, layout: DecodeLayout, profile: RuntimeProfile) -> CostModel:
    return CostModel.compose(gpu=layout.gpu, host=layout.host or "x86_server", link=layout.link or "pcie_gen4",
                             runtime=profile.with_settings(run.threads, run.sockets, pageable=run.pageable, numa=run.numa,
                                                           copy_rate=run.copy_rate), parts=run.parts)  # fmt: skip


#: A published speed above this many times its machine's ceiling (rule 6) is no batch-1 decode.
CEILING_SLACK = 2.0


def _beyond_the_machine(run: PublishedRun, layout: DecodeLayout, machine: CostModel) -> str:
    """Rule 6: why ``run``'s published speed is beyond what its machine can do, or "".
    The ceiling reads every active byte once with the GPU's and the host's memories both
    at their peaks, side by side: no placement, runtime or cache does better."""
    bandwidth = machine.device_memory_bandwidth + (machine.host_memory_bandwidth if layout.host_bytes > 0 else 0.0)
    active = layout.device_bytes + layout.host_bytes
    if active <= 0:
        return ""
    ceiling = bandwidth / active
    if run.tok_s > CEILING_SLACK * ceiling:
        return (f"published {run.tok_s:.4g} tok/s is more than {CEILING_SLACK:g}× the machine's ceiling of {ceiling:.4g} "
                f"tok/s (its {active / 1e9:.3g} GB of active bytes read once at {bandwidth / 1e9:.4g} GB/s): not a "
                "batch-1 decode this machine can run")
    return ""


def _timed(layout: DecodeLayout, model: CostModel, profile: RuntimeProfile, terms: tuple[str, ...], routing: str,
           regime: str, interval: Optional[EarnedInterval]) -> DecodePrediction:
    try:
        t = time_decode(layout, model)
    except DecodeTimeError as exc:
        return DecodePrediction(None, str(exc), profile.name, layout.parts, regime=regime)
    return DecodePrediction(t.tok_s, "", profile.name, layout.parts, terms, {"gpu": t.gpu, "host": t.host, "copy": t.copy},
                            routing, t.host_bound, regime, interval)  # fmt: skip


@dataclass(frozen=True)
class RegimeModel:
    """Fitted terms, the profiles they fill in, and the held-out predictions its intervals
    are earned from (rule 4): ``predict(run)`` models one run."""

    fits: Mapping[str, float]
    terms: tuple[FittedTerm, ...]
    profiles: tuple[RuntimeProfile, ...]
    out_of_sample: tuple[OutOfSample, ...] = ()  # leave-one-source-out
    out_of_runtime: tuple[OutOfSample, ...] = ()  # leave-one-runtime-out

    def interval(self, profile: str, regime: str) -> Optional[EarnedInterval]:
        """The interval a prediction of runtime profile ``profile`` in ``regime`` earns
        (``speed.evidence`` rules 3, 4); None when the model carries no held-out runs."""
        if not self.out_of_sample and not self.out_of_runtime:
            return None
        return earned_interval(profile, regime, self.out_of_sample, self.out_of_runtime)

    def __post_init__(self) -> None:
        for term, value in self.fits.items():  # a term outside its range is no machine (a kernel time of 0)
            checked_fit(term, value)

    def _profile(self, name: str) -> Optional[RuntimeProfile]:
        return next((p for p in self.profiles if p.name == name), None)

    def machine(self, run: Union[PublishedRun, Mapping[str, Any]]) -> tuple[DecodeLayout, CostModel]:
        """The layout of ``run`` and the machine its runtime profile composes (with this
        model's fits): what ``predict`` times with ``time_decode``. A run that cannot be
        modeled is an ``AnchorError`` saying why."""
        run = _as_run(run)
        profile = self._profile(run.runtime)
        layout, why = _layout(run)
        if profile is None or layout is None:
            raise AnchorError(f"run {run.id!r} is not modeled: {why or run.why or 'no runtime profile'}")
        return layout, _machine(run, layout, profile.resolved(self.fits))

    def predict(self, run: Union[PublishedRun, Mapping[str, Any]]) -> DecodePrediction:
        """One run modeled (rules 1, 4); a table row (a mapping of its columns) is read
        into parts first (``published_runs.read_run``)."""
        run = _as_run(run)
        profile = self._profile(run.runtime)
        if profile is None:
            return DecodePrediction(None, run.why or f"no runtime profile {run.runtime!r}", regime=run.regime)
        layout, why = _layout(run)
        if layout is None:
            return DecodePrediction(None, why, profile.name, regime=run.regime)
        resolved = profile.resolved(self.fits)
        used = tuple(sorted(set(profile.fitted.values())))
        assert run.placement is not None
        routing = run.placement.routing.label if run.regime == "experts_copied" and layout.cache_share > 0 else ""
        machine = _machine(run, layout, resolved)
        impossible = _beyond_the_machine(run, layout, machine)
        if impossible:
            return DecodePrediction(None, impossible, profile.name, layout.parts, regime=run.regime)
        return _timed(layout, machine, resolved, used, routing, run.regime, self.interval(profile.name, run.regime))

    def predict_machine(self, *, gpu: str, model: ModelFacts, formats: Union[WeightBits, Mapping[str, Any], str, float],
                        placement: ExpertPlacement, runtime: str, host: Optional[str] = None, link: Optional[str] = None,
                        parts: PartsFile = None, threads: Optional[int] = None) -> DecodePrediction:
        """The decode speed of a machine of your own, given as parts: ``model`` stored in
        ``formats`` with ``placement`` on the named parts (``parts``: your own parts file,
        by path), run by the runtime profile ``runtime``."""
        profile = self._profile(runtime)
        if profile is None:
            raise RuntimeProfileError(f"no runtime profile {runtime!r}; valid: {', '.join(p.name for p in self.profiles)}")
        layout = DecodeLayout.for_machine(gpu=gpu, host=host, link=link, model=model, formats=formats,
                                          placement=placement, parts=parts)  # fmt: skip
        resolved = profile.resolved(self.fits).with_settings(threads)
        machine = CostModel.compose(gpu=layout.gpu, host=layout.host or "x86_server", link=layout.link or "pcie_gen4",
                                    runtime=resolved, parts=parts)  # fmt: skip
        return _timed(layout, machine, resolved, tuple(sorted(set(profile.fitted.values()))), "",
                      placement.regime, self.interval(profile.name, placement.regime))  # fmt: skip

    def tok_s(self, run: Union[PublishedRun, Mapping[str, Any]]) -> tuple[Optional[float], str, str, str, str]:
        """(modeled tok/s or None, why not, runtime profile, parts, routing) — the shape
        ``modeled_vs_published`` takes."""
        p = self.predict(run)
        return p.tok_s, p.why, p.profile, p.parts, p.routing


def predict_decode(run: Union[PublishedRun, Mapping[str, Any]], fits: Mapping[str, float],
                   profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> DecodePrediction:
    """One run modeled with the fitted terms ``fits`` (rule 1)."""
    return RegimeModel(dict(fits), (), profiles if profiles is not None else runtime_profiles()).predict(run)


# --- fits (rules 2, 3) ---

class _Rows:
    """The modeled runs of a fit: each with its layout, profile and the terms it depends on."""

    def __init__(self, runs: Sequence[PublishedRun], profiles: tuple[RuntimeProfile, ...],
                 specs: Mapping[str, FittedTermSpec]) -> None:
        self.profiles = {p.name: p for p in profiles}
        self.specs = specs
        priors = self.priors = {t: s.prior for t, s in specs.items()}
        self.rows: list[tuple[PublishedRun, DecodeLayout, RuntimeProfile, frozenset[str]]] = []
        for run in runs:
            profile = self.profiles.get(run.runtime)
            layout = _layout(run)[0] if profile is not None else None
            if profile is None or layout is None or self.tok_s(run, layout, profile, priors) is None or \
                    _beyond_the_machine(run, layout, _machine(run, layout, profile.resolved(priors))):
                continue
            self.rows.append((run, layout, profile, self._depends(run, layout, profile, priors)))

    def tok_s(self, run: PublishedRun, layout: DecodeLayout, profile: RuntimeProfile, fits: Mapping[str, float]) -> Optional[float]:
        """The run's speed with ``fits``, terms not yet fitted at their priors."""
        try:
            return time_decode(layout, _machine(run, layout, profile.resolved({**self.priors, **fits}))).tok_s
        except (DecodeTimeError, CostModelError):
            return None

    def _depends(self, run: PublishedRun, layout: DecodeLayout, profile: RuntimeProfile,
                 priors: Mapping[str, float]) -> frozenset[str]:
        """The fitted terms the run's time changes with (rule 2)."""
        base = self.tok_s(run, layout, profile, priors)
        found = set()
        for term in set(profile.fitted.values()):
            spec = self.specs[term]
            trial = min(spec.high, spec.prior * 1.5) if spec.prior * 1.5 <= spec.high else max(spec.low, spec.prior / 1.5)
            moved = self.tok_s(run, layout, profile, {**priors, term: trial})
            if moved is not None and base is not None and abs(math.log(moved / base) / math.log(trial / spec.prior)) >= _ELASTICITY:
                found.add(term)
        return frozenset(found)

    def log_gap(self, rows: Sequence[int], fits: Mapping[str, float]) -> float:
        logs = []
        for i in rows:
            run, layout, profile, _ = self.rows[i]
            speed = self.tok_s(run, layout, profile, fits)
            logs.append(math.log(speed / run.tok_s) if speed else math.inf)
        return float(np.median(logs))


def _solve(data: _Rows, rows: Sequence[int], spec: FittedTermSpec, fits: Mapping[str, float]) -> float:
    """The value of ``spec``'s term at which the median log(modeled / published) over
    ``rows`` is 0 (rule 2)."""
    a, b = math.log(spec.low), math.log(spec.high)
    ga = data.log_gap(rows, {**fits, spec.term: spec.low})
    gb = data.log_gap(rows, {**fits, spec.term: spec.high})
    if not (ga * gb <= 0):  # no root inside (or an unmodelable end): the bound nearer to 0
        return spec.low if abs(ga) < abs(gb) else spec.high
    for _ in range(_BISECTIONS):
        mid = (a + b) / 2
        gm = data.log_gap(rows, {**fits, spec.term: math.exp(mid)})
        if (gm > 0) == (ga > 0):
            a, ga = mid, gm
        else:
            b = mid
    return math.exp((a + b) / 2)


def _fit(data: _Rows, order: Sequence[str], loo: bool) -> tuple[dict[str, float], list[FittedTerm]]:
    """Rule 2, twice: the second pass refits each term with every other at its first-pass
    value (a run that barely depends on a term still sees its fitted value, not its prior)."""
    first, _ = _fit_pass(data, order, False, {})
    return _fit_pass(data, order, loo, first)


def _fit_pass(data: _Rows, order: Sequence[str], loo: bool, earlier: Mapping[str, float]) -> tuple[dict[str, float], list[FittedTerm]]:
    fits: dict[str, float] = {}
    terms: list[FittedTerm] = []
    pending = list(order)
    while pending:
        eligible = {t: [i for i, r in enumerate(data.rows) if t in r[3] and r[3] <= set(fits) | {t}] for t in pending}
        ready = [t for t in pending if len(eligible[t]) >= _MIN_FIT_ROWS]
        if not ready:  # rule 2: too few runs: the priors
            for t in pending:
                fits[t] = data.specs[t].prior
                terms.append(FittedTerm(f"{t} ({data.specs[t].field})", fits[t],
                                        tuple(data.rows[i][0].id for i in eligible[t]), (), prior=True))  # fmt: skip
            break
        term = ready[0]
        pending.remove(term)
        rows = eligible[term]
        spec = data.specs[term]
        context = {**earlier, **fits}
        fits[term] = _solve(data, rows, spec, context)
        errors = []
        if loo:  # rule 3
            for k, i in enumerate(rows):
                held = _solve(data, rows[:k] + rows[k + 1:], spec, context)
                run, layout, profile, _ = data.rows[i]
                speed = data.tok_s(run, layout, profile, {**context, term: held})
                errors.append(abs(speed / run.tok_s - 1) if speed else math.inf)
        terms.append(FittedTerm(f"{term} ({spec.field})", fits[term], tuple(data.rows[i][0].id for i in rows), tuple(errors)))
    return fits, terms


def _order(profiles: Iterable[RuntimeProfile]) -> list[str]:
    order: list[str] = []
    for profile in profiles:
        order += [t for t in profile.fitted.values() if t not in order]
    return order


def _runs(runs: Union[None, pd.DataFrame, Sequence[PublishedRun]], profiles: tuple[RuntimeProfile, ...]) -> tuple[PublishedRun, ...]:
    """The runs a fit or a hold-out is given, through the published table's one validation
    path (``published_runs`` rule 1) whatever their origin; ids unique."""
    if runs is None:
        return published_runs(profiles=profiles)
    if isinstance(runs, pd.DataFrame):
        return read_runs(runs, profiles=profiles)
    if isinstance(runs, (str, bytes, Mapping)) or not isinstance(runs, Sequence):
        raise AnchorError(f"runs are a DataFrame of the published table's columns or a sequence of PublishedRun, got "
                          f"{type(runs).__name__}")
    found = tuple(_as_run(r) for r in runs)
    seen: set[str] = set()
    twice = [r.id for r in found if r.id in seen or seen.add(r.id)]  # type: ignore[func-returns-value]
    if twice:
        raise AnchorError(f"run ids {sorted(set(twice))[:10]} are given more than once: each run is one published "
                          "figure, with an id of its own")
    return found


def fit_regime_model(runs: Union[None, pd.DataFrame, Sequence[PublishedRun]] = None,
                     profiles: Optional[tuple[RuntimeProfile, ...]] = None, *, loo: bool = True) -> RegimeModel:
    """Fit every ``fit:`` term of the runtime profiles to ``runs`` (default: the shipped
    published table), each term with its leave-one-out errors (rules 2, 3); no
    intervals (``regime_model()`` adds the held-out predictions they are earned from)."""
    profiles = profiles if profiles is not None else runtime_profiles()
    given = _runs(runs, profiles)
    data = _Rows(given, profiles, fitted_terms())
    if len(data.rows) < _MIN_FIT_ROWS:
        raise AnchorError(f"a fit needs at least {_MIN_FIT_ROWS} runs the model can express; of the {len(given)} given, "
                          f"{len(data.rows)} are: with fewer every term would stay at its prior, a fit in name only")
    fits, terms = _fit(data, _order(profiles), loo)
    return RegimeModel(fits, tuple(terms), profiles)


def leave_one_source_out(runs: Union[None, pd.DataFrame, Sequence[PublishedRun]] = None,
                         profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> tuple[OutOfSample, ...]:
    """Every run predicted by the terms fitted on the other sources' runs (rule 4); runs
    the model cannot express are kept with why."""
    return _held_out(runs, profiles, lambda run, _: same_source(run.source))


def leave_one_runtime_out(runs: Union[None, pd.DataFrame, Sequence[PublishedRun]] = None,
                          profiles: Optional[tuple[RuntimeProfile, ...]] = None) -> tuple[OutOfSample, ...]:
    """Every run predicted by the terms fitted without any run of its engine — its
    runtime profile with every version, build and launch mode (rule 4); runs the model
    cannot express are kept with why."""
    return _held_out(runs, profiles, lambda run, engines: engines.get(run.runtime, run.runtime))


def _held_out(runs: Union[None, pd.DataFrame, Sequence[PublishedRun]], profiles: Optional[tuple[RuntimeProfile, ...]],
              group: Callable[[PublishedRun, Mapping[str, str]], str]) -> tuple[OutOfSample, ...]:
    """Rule 4: for each group of runs, every term refitted without them, and they predicted."""
    profiles = profiles if profiles is not None else runtime_profiles()
    engines = {p.name: p.engine_name for p in profiles}
    every = _runs(runs, profiles)
    specs = fitted_terms()
    order = _order(profiles)
    out: list[OutOfSample] = []
    for held_group in dict.fromkeys(group(r, engines) for r in every):
        held = [r for r in every if group(r, engines) == held_group]
        fits, _ = _fit(_Rows([r for r in every if group(r, engines) != held_group], profiles, specs), order, loo=False)
        model = RegimeModel(fits, (), profiles)
        for run in held:
            p = model.predict(run)
            placement = run.placement.regime if run.placement is not None else ""
            if run.placement is not None and run.placement.host_layers is not None:
                placement += f" {run.placement.host_layers}"
            out.append(OutOfSample(run.id, run.regime, run.source, run.tok_s, p.tok_s, p.why, run.runtime, run.gpu or "",
                                   run.host or "", run.family, placement, engines.get(run.runtime, ""),
                                   _settings(run, engines)))  # fmt: skip
    order_ids = {r.id: i for i, r in enumerate(every)}
    return tuple(sorted(out, key=lambda o: order_ids[o.id]))


def _settings(run: PublishedRun, engines: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The run's setup, one setting at a time: what ``validation.ordering`` compares pairs by."""
    placement, formats = run.placement, run.formats
    cache = ""
    if placement is not None and placement.regime == "experts_copied":
        cache = "none" if not placement.cache else (f"{placement.resident_expert_bytes:.4g} B"
                                                     if placement.resident_expert_bytes is not None else "default")
    return (("GPU", run.gpu or ""), ("host", run.host or ""), ("link", run.link or ""),
            ("engine", engines.get(run.runtime, run.runtime)), ("engine version or mode", run.runtime),
            ("format", f"{formats.expert_format or ''} {formats.experts:.3g}/{formats.other:.3g} bits" if formats else ""),
            ("placement", placement.regime if placement is not None else ""),
            ("host layers", str(placement.host_layers) if placement is not None and placement.host_layers is not None else ""),
            ("GPU experts", str(placement.gpu_experts) if placement is not None else ""),
            ("cache size", cache),
            ("context", str(placement.context_tokens) if placement is not None else ""),
            ("threads", str(run.threads or "")), ("sockets", str(run.sockets or "")), ("NUMA", run.numa or ""),
            ("staging", {True: "pageable", False: "pinned", None: ""}[run.pageable]))  # fmt: skip


@functools.lru_cache(maxsize=2)
def _shipped(_key: Any) -> RegimeModel:
    kept, why = read_evidence_file()
    if kept is not None:
        return RegimeModel(kept.fits, kept.terms, runtime_profiles(), kept.out_of_sample, kept.out_of_runtime)
    warnings.warn(f"{why}: fitting the decode model afresh (about a minute and a half); `make evidence` keeps the "
                  "result for the next time", EvidenceRefitted, stacklevel=3)
    return fitted_regime_model()


class EvidenceRefitted(WorkbenchWarning):
    """The kept fits and held-out predictions were not used (missing, stale or damaged):
    the model was fitted afresh."""


def fitted_regime_model() -> RegimeModel:
    """The shipped model made afresh: every term fitted, every run predicted held out by
    source and by engine (about a minute and a half; ``regime_model()`` reads the kept
    result instead when its inputs are unchanged, ``evidence_file``)."""
    return dataclasses.replace(fit_regime_model(), out_of_sample=leave_one_source_out(),
                               out_of_runtime=leave_one_runtime_out())


def regime_evidence(model: RegimeModel) -> EvidenceFile:
    """``model``'s fits and held-out predictions as the evidence file keeps them."""
    return EvidenceFile(evidence_inputs_hash(), dict(model.fits), model.terms, model.out_of_sample, model.out_of_runtime)


def regime_model() -> RegimeModel:
    """The model fitted on the shipped published table and runtime profiles, with the
    held-out predictions its intervals are earned from (rule 4); read from the evidence
    file when that was made from the same code and tables, made again otherwise and when
    a shipped table changes."""
    return _shipped(_data_key())


def _data_key() -> tuple[Any, ...]:
    paths = [published_dir() / "decode_anchors.csv", published_dir() / "model_facts.json", runtime_profiles_path(),
             runtime_profiles_path().parent / "fitted_terms.csv", runtime_profiles_path().parent / "host_matvec.csv", parts_path()]
    key = []
    for p in paths:
        try:
            info = os.stat(p)
            key.append((str(p), info.st_size, info.st_mtime_ns))
        except OSError:
            key.append((str(p), -1, -1))
    return tuple(key)


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


def regime_model_tok_s(run: Union[PublishedRun, Mapping[str, Any]]) -> tuple[Optional[float], str, str, str, str]:
    """The shipped regime model's answer for one run (``modeled_vs_published``'s default)."""
    return regime_model().tok_s(run)

