"""Routing locality: how often consecutive tokens reuse experts, measured on any trace,
published for real models, and reproduced by a fitted generator.

``measure_locality(trace)`` reads per layer, from any ``RoutingTrace`` (recorded by
``RoutingRecorder`` or generated): how often a token's first-choice expert repeats the
previous token's, how often two consecutive tokens share at least one expert, the share of
a token's experts the previous token (or any of the last ``window`` tokens) chose too, and
how skewed expert popularity is. ``published_locality()`` is the shipped table of the same
statistics as papers report them (``data/routing/locality.csv``, each row with its source
and quote); ``locality_trace(model, tokens, seed)`` generates a trace whose statistics match
them, fitting one reuse probability per rank group and layer, and says how close it got.

Rules:
  1. Statistics of consecutive tokens are taken over every pair ``(t - 1, t)`` of one layer,
     ``t >= 1``; ``reuse_within(w)`` over ``t >= w``. ``first_choice_repeat`` reads
     ``experts[t, l, 0]`` as the router's first choice: true of ``RoutingRecorder`` traces
     (the router's top-k order) and of ``locality_trace``; other generators store no rank.
  2. The table is data: read as text, never executed; every row has a model, its shape
     (layers, experts, top-k; at most ``MAX_LAYERS`` layers, ``MAX_EXPERTS`` experts and
     ``MAX_LAYER_EXPERTS`` of the two multiplied, checked before anything of that shape
     is made), a subset (the text the figure was measured on, or ``all``),
     a layer or an inclusive layer range, a statistic of ``STATISTICS``, a value in [0, 1]
     (``zipf_exponent``: >= 0), whether it was read from a table or a figure, a source URL
     and the quote it comes from. A table that breaks this is refused, naming the rows.
  3. Targets for layers the table does not name are interpolated linearly in the layer
     index between the nearest named layers (held flat beyond the ends); ``subset="mean"``
     averages the subsets of each (layer, statistic).
  4. ``locality_trace``, per layer: expert popularity is a Zipf law of the layer's exponent
     over a seeded ranking of the experts (0: uniform). Token 0 draws its k experts without
     replacement from the popularity law, in rank order. For ``t >= 1`` the expert the
     previous token held at rank ``j`` is kept at rank ``j`` with probability ``reuse[l, j]``
     (``reuse_first`` for rank 0, ``reuse_rest`` for the others); the other ranks are
     filled, best first, by draws from the popularity law among the experts not kept (a
     previous expert that was not kept may be drawn again, as under random routing).
  5. Fitting: ``reuse_first`` is fitted to ``first_choice_repeat`` and ``reuse_rest`` to
     ``any_overlap`` or ``reuse_rate`` (one of the two per layer); without a first-choice
     target the two are one probability. Each is found by a grid search refined three
     times (every candidate simulated on the same random numbers, ``fit_tokens`` tokens),
     two rounds when both are fitted. Only the layers the table names are fitted; the
     probabilities of the layers between them are interpolated linearly (held flat beyond
     the ends), as the targets are (rule 3). A target no probability in [0, 1] reaches
     (below the random-routing rate, say; or a first-choice rate too high for the
     overlap rate beside it) ends at the nearest setting; ``LocalityFit.comparison``
     shows the gap.
  6. Same arguments, same trace, on every machine.
  7. ``lru_hit_rate(trace, experts_per_layer)``: each layer has its own cache of that many
     experts; a layer's experts are requested one by one, token by token in the router's
     order, each admitted on a miss in place of the least recently requested. A request
     hits when fewer than that many distinct experts of its layer were requested since
     its own last request (its LRU stack distance). A fractional size is the mean of the
     two whole sizes around it, weighted by nearness (layers holding one more or one
     fewer expert).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np
import pandas as pd

from ..file_reading import cached_by_file, finite_number, read_csv_table
from .compiled import njit_cached
from .routing import RoutingTrace, TraceError

__all__ = [
    "FITTED",
    "STATISTICS",
    "LocalityError",
    "LocalityFit",
    "MAX_EXPERTS",
    "MAX_LAYERS",
    "MAX_LAYER_EXPERTS",
    "MAX_TRACE_IDS",
    "ModelLocality",
    "locality_models",
    "locality_path",
    "locality_trace",
    "lru_hit_rate",
    "measure_locality",
    "model_locality",
    "published_locality",
    "published_vs_measured",
]

#: The statistics the table may hold (rule 2).
STATISTICS: tuple[str, ...] = ("first_choice_repeat", "any_overlap", "reuse_rate", "zipf_exponent")
#: Statistics of consecutive tokens that ``locality_trace`` fits (rule 5).
FITTED: tuple[str, ...] = ("first_choice_repeat", "any_overlap", "reuse_rate")
_COLUMNS = ("model", "num_layers", "num_experts", "top_k", "subset", "layers", "statistic", "value", "kind", "source", "quote")
_KINDS = ("table", "figure")
#: Grid points per refinement of the fit (rule 5).
_GRID = 9
#: Cells (candidate rows × experts) simulated per token at most, so a fit stays small in memory.
_MAX_FIT_CELLS = 1 << 20
#: Rule 2: the largest model shape a row may state (published MoEs have at most a few
#: hundred layers and a few hundred experts); arrays of layers × experts are made from it.
MAX_LAYERS = 4096
MAX_EXPERTS = 1 << 16
MAX_LAYER_EXPERTS = 1 << 22
#: The most expert ids (tokens × layers × top-k) ``locality_trace`` makes (2 GiB of int64).
MAX_TRACE_IDS = 1 << 28


class LocalityError(TraceError):
    """Routing-locality statistics, or the arguments to fit them, that cannot be used."""


def locality_path() -> Path:
    """The shipped table: the repository's ``data/routing/locality.csv``."""
    return Path(__file__).resolve().parents[2] / "data" / "routing" / "locality.csv"


def _shape_problem(num_layers: int, num_experts: int, top_k: int) -> str:
    """Rule 2: what is wrong with a model shape (``""`` when nothing is), checked before any
    array of that shape is made."""
    if num_layers > MAX_LAYERS:
        return f"num_layers={num_layers} is more than the {MAX_LAYERS} layers accepted"
    if num_experts > MAX_EXPERTS:
        return f"num_experts={num_experts} is more than the {MAX_EXPERTS} experts accepted"
    if num_layers * num_experts > MAX_LAYER_EXPERTS:
        return f"num_layers × num_experts = {num_layers * num_experts} is more than the {MAX_LAYER_EXPERTS} accepted"
    if top_k > num_experts:
        return f"top_k={top_k} cannot exceed num_experts={num_experts}"
    return ""


def _layer_range(text: str) -> Optional[tuple[int, int]]:
    """``"15"`` → (15, 15); ``"0-31"`` → (0, 31); anything else None."""
    lo, sep, hi = text.partition("-")
    try:
        first, last = int(lo), int(hi) if sep else int(lo)
    except ValueError:
        return None
    return (first, last) if 0 <= first <= last else None


def published_locality(path: Union[str, Path, None] = None) -> pd.DataFrame:
    """The table of published routing statistics, checked (rule 2): one row per figure,
    ``value`` as a float, ``first_layer``/``last_layer`` as ints."""
    return _published(Path(path) if path is not None else locality_path()).copy()


@cached_by_file
def _published(path: Path) -> pd.DataFrame:
    table = read_csv_table(path, "table of routing statistics", LocalityError, _COLUMNS)
    problems: list[str] = []
    values, firsts, lasts = [], [], []
    for i, row in enumerate(table.itertuples(index=False)):
        where = f"row {i + 2} ({row.model}/{row.subset}/{row.layers}/{row.statistic})"
        shape = [finite_number(x) for x in (row.num_layers, row.num_experts, row.top_k)]
        num_layers = 1
        if any(v is None or v < 1 or v != int(v) for v in shape):
            problems.append(f"{where}: num_layers, num_experts and top_k must be positive integers")
        else:
            wrong = _shape_problem(*(int(v or 0) for v in shape))
            if wrong:
                problems.append(f"{where}: {wrong}")
            else:
                num_layers = int(shape[0] or 1)
        layers = _layer_range(row.layers)
        if layers is None or layers[1] >= num_layers:
            problems.append(f"{where}: layers must be a layer or a range 'a-b' within [0, {num_layers})")
            layers = (0, 0)
        value = finite_number(row.value)
        if row.statistic not in STATISTICS:
            problems.append(f"{where}: statistic is none of {', '.join(STATISTICS)}")
        elif value is None or value < 0 or (row.statistic != "zipf_exponent" and value > 1):
            problems.append(f"{where}: value {row.value!r} must be " + ("a number >= 0" if row.statistic == "zipf_exponent" else "a probability in [0, 1]"))
        if row.kind not in _KINDS:
            problems.append(f"{where}: kind must be one of {', '.join(_KINDS)}")
        if not row.source.strip() or not row.quote.strip():
            problems.append(f"{where}: every figure needs a source and a quote")
        values.append(value if value is not None else float("nan"))
        firsts.append(layers[0])
        lasts.append(layers[1])
    for model, group in table.groupby("model"):
        if len(group[["num_layers", "num_experts", "top_k"]].drop_duplicates()) > 1:
            problems.append(f"model {model!r} is given more than one shape (layers, experts, top-k)")
    dup = table[table.duplicated(["model", "subset", "layers", "statistic"])]
    problems += [f"{r.model}/{r.subset}/{r.layers}/{r.statistic} is given twice" for r in dup.itertuples(index=False)]
    if problems:
        raise LocalityError(f"{path}: " + "; ".join(problems))
    out = table.assign(value=values, first_layer=firsts, last_layer=lasts)
    return out.astype({"num_layers": int, "num_experts": int, "top_k": int})


def locality_models(path: Union[str, Path, None] = None) -> tuple[str, ...]:
    """The models the table has statistics for."""
    return tuple(sorted(set(published_locality(path)["model"])))


@dataclass(frozen=True, eq=False)
class ModelLocality:
    """One model's published statistics, as per-layer targets (rules 2, 3)."""

    model: str
    subset: str  # a subset of the table, or "mean" (every subset averaged)
    num_layers: int
    num_experts: int
    top_k: int
    rows: pd.DataFrame  # the table's rows used (with source and quote)

    def __post_init__(self) -> None:
        shape = (self.num_layers, self.num_experts, self.top_k)
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1 for v in shape):
            raise LocalityError(f"{self.model}: num_layers, num_experts and top_k must be positive integers, got {shape}")
        wrong = _shape_problem(*(int(v) for v in shape))
        if wrong:
            raise LocalityError(f"{self.model}: {wrong}")

    def named_layers(self, statistic: str) -> np.ndarray:
        """The layers the table names for ``statistic`` (sorted)."""
        rows = self.rows[self.rows["statistic"] == statistic]
        layers = {layer for a, b in zip(rows["first_layer"], rows["last_layer"]) for layer in range(a, b + 1)}
        return np.array(sorted(layers), dtype=np.int64)

    def target(self, statistic: str) -> Optional[np.ndarray]:
        """``(num_layers,)`` target per layer for ``statistic`` (rule 3), None when not published."""
        if statistic not in STATISTICS:
            raise LocalityError(f"unknown statistic {statistic!r}; valid: {', '.join(STATISTICS)}")
        rows = self.rows[self.rows["statistic"] == statistic]
        if rows.empty:
            return None
        per_layer: dict[int, list[float]] = {}
        for a, b, v in zip(rows["first_layer"], rows["last_layer"], rows["value"]):
            for layer in range(a, b + 1):
                per_layer.setdefault(layer, []).append(float(v))
        known = np.array(sorted(per_layer), dtype=np.float64)
        values = np.array([np.mean(per_layer[int(x)]) for x in known])
        return np.interp(np.arange(self.num_layers, dtype=np.float64), known, values)


def model_locality(model: str, subset: str = "mean", path: Union[str, Path, None] = None) -> ModelLocality:
    """``model``'s published statistics (``subset``: one of the table's subsets for it, or
    ``"mean"``, or ``"all"`` for rows measured on everything)."""
    table = published_locality(path)
    if not isinstance(model, str) or model not in set(table["model"]):
        raise LocalityError(f"no routing statistics for model {model!r}; the table has: {', '.join(locality_models(path))}")
    rows = table[table["model"] == model]
    subsets = sorted(set(rows["subset"]) - {"all"})
    if subset != "mean":
        if not isinstance(subset, str) or subset not in set(rows["subset"]):
            raise LocalityError(f"model {model!r} has no subset {subset!r}; valid: mean, {', '.join(sorted(set(rows['subset'])))}")
        rows = rows[rows["subset"].isin([subset, "all"])]
    first = rows.iloc[0]
    return ModelLocality(model, subset if subsets else "all", int(first["num_layers"]), int(first["num_experts"]),
                         int(first["top_k"]), rows.reset_index(drop=True))


# -- measuring --------------------------------------------------------------------------------


def _check_trace(trace: Any) -> RoutingTrace:
    if not isinstance(trace, RoutingTrace):
        raise LocalityError(f"trace must be a RoutingTrace (RoutingRecorder, record_decode, locality_trace…), got {type(trace).__name__}")
    if trace.num_tokens < 2:
        raise LocalityError("a trace of one token has no consecutive tokens to measure; record or generate at least 2")
    return trace


def _window(window: Any, trace: RoutingTrace) -> int:
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or not 1 <= window < trace.num_tokens:
        raise LocalityError(f"window must be an integer in [1, {trace.num_tokens - 1}] (tokens looked back), got {window!r}")
    return int(window)


def measure_locality(trace: RoutingTrace, window: int = 4) -> pd.DataFrame:
    """Per layer of ``trace`` (rule 1): ``first_choice_repeat``, ``any_overlap``,
    ``reuse_rate``, ``reuse_within_<window>`` (share of a token's experts chosen by any of
    the last ``window`` tokens), ``top_share`` (the most chosen expert's share of the
    layer's choices) and ``norm_entropy`` (popularity entropy over ln E: 1 is uniform)."""
    trace = _check_trace(trace)
    w = _window(window, trace)
    ids = trace.experts.astype(np.int64)
    now, before = ids[1:], ids[:-1]
    again = (now[:, :, :, None] == before[:, :, None, :]).any(axis=3)  # (T-1, L, k)
    recent = np.zeros(ids[w:].shape, dtype=bool)
    for back in range(1, w + 1):
        recent |= (ids[w:, :, :, None] == ids[w - back : len(ids) - back, :, None, :]).any(axis=3)
    counts = trace.counts().astype(np.float64)
    share = counts / counts.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -np.where(share > 0, share * np.log(share), 0.0).sum(axis=1)
    norm = entropy / math.log(trace.num_experts) if trace.num_experts > 1 else np.ones(trace.num_layers)
    return pd.DataFrame(
        {
            "layer": np.arange(trace.num_layers),
            "first_choice_repeat": (now[:, :, 0] == before[:, :, 0]).mean(axis=0),
            "any_overlap": again.any(axis=2).mean(axis=0),
            "reuse_rate": again.mean(axis=(0, 2)),
            f"reuse_within_{w}": recent.mean(axis=(0, 2)),
            "top_share": share.max(axis=1),
            "norm_entropy": norm,
        }
    )


def published_vs_measured(trace: RoutingTrace, published: ModelLocality) -> pd.DataFrame:
    """One row per (layer, statistic) the table names for a fitted statistic: published,
    measured on ``trace``, and the difference (measured - published). ``trace`` must have
    the model's layers; a ``RoutingRecorder`` trace of that model plugs in as it is."""
    trace = _check_trace(trace)
    if not isinstance(published, ModelLocality):
        raise LocalityError(f"published must be a ModelLocality (e.g. model_locality('mixtral_8x7b')), got {type(published).__name__}")
    if trace.num_layers != published.num_layers:
        raise LocalityError(
            f"the trace has {trace.num_layers} layers, {published.model} has {published.num_layers}: compare a trace of that model"
        )
    measured = measure_locality(trace, window=1)
    rows = []
    for statistic in FITTED:
        target = published.target(statistic)
        if target is None:
            continue
        for layer in published.named_layers(statistic):
            got = float(measured.loc[layer, statistic])
            rows.append({"layer": int(layer), "statistic": statistic, "published": round(float(target[layer]), 4),
                         "measured": round(got, 4), "difference": round(got - float(target[layer]), 4)})
    return pd.DataFrame(rows, columns=["layer", "statistic", "published", "measured", "difference"])


# -- generating -------------------------------------------------------------------------------


def _inverse_popularity(zipf: np.ndarray, num_experts: int, rng: np.random.Generator) -> np.ndarray:
    """``(L, E)`` 1 / p per expert, unnormalised: Zipf over a seeded ranking (rule 4)."""
    ranks = np.argsort(rng.random((len(zipf), num_experts)), axis=1)
    return np.exp(zipf[:, None] * np.log1p(ranks))


def _simulate(
    tokens: int, inv_p: np.ndarray, k: int, reuse: np.ndarray, seed: int, *, keep_ids: bool
) -> tuple[Optional[np.ndarray], np.ndarray]:
    """Rule 4 for ``reuse`` ``(L, B, k)``: B candidate settings per layer, all on the same
    random numbers (keys and coin flips are drawn per layer and shared by its candidates).

    Returns the ids ``(T, L, k)`` when ``keep_ids`` (B must be 1), and ``(L, B, 3)`` counts
    over consecutive pairs: first-choice repeats, pairs sharing an expert, experts reused."""
    L, B, _ = reuse.shape
    E = inv_p.shape[1]
    rng = np.random.default_rng([seed, 1])  # never the draws of the popularity ranking
    counts = np.zeros((L, B, 3), dtype=np.int64)
    out = np.empty((tokens, L, k), dtype=np.int64) if keep_ids else np.empty((0, L, k), dtype=np.int64)
    previous = np.full((L, B, k), -1, dtype=np.int64)
    chunk = max(1, min(tokens, _MAX_FIT_CELLS // max(1, L * E)))
    for start in range(0, tokens, chunk):
        n = min(chunk, tokens - start)
        keys = rng.standard_exponential((n, L, E)) * inv_p
        coins = rng.random((n, L, k))
        _chain_kernel(keys, coins, np.ascontiguousarray(reuse, dtype=np.float64), previous, counts, out, start)
    return (out if keep_ids else None), counts


@njit_cached(nogil=True)
def _chain_kernel(
    keys: np.ndarray, coins: np.ndarray, reuse: np.ndarray, previous: np.ndarray, counts: np.ndarray,
    out: np.ndarray, start: int,
) -> None:
    """Rule 4, ``len(keys)`` tokens from ``start``: ``previous`` (L, B, k) carries each
    chain's last token (-1 before the first); ``counts`` (L, B, 3) accumulates; ``out``
    (T, L, k) receives candidate 0's ids when it is not empty. Fresh ranks take, best
    first, the smallest keys (Exp(1) / p: draws without replacement ∝ p) among experts
    neither kept nor drawn already."""
    n, L, E = keys.shape
    B, k = reuse.shape[1], reuse.shape[2]
    now = np.empty(k, dtype=np.int64)
    keep = np.empty(k, dtype=np.bool_)
    for t in range(n):
        for layer in range(L):
            for b in range(B):
                first_token = previous[layer, b, 0] < 0
                for j in range(k):
                    keep[j] = (not first_token) and coins[t, layer, j] < reuse[layer, b, j]
                    now[j] = previous[layer, b, j] if keep[j] else -1
                for j in range(k):
                    if keep[j]:
                        continue
                    best, best_key = -1, np.inf
                    for e in range(E):
                        taken = False
                        for i in range(k):
                            if now[i] == e:
                                taken = True
                        if not taken and keys[t, layer, e] < best_key:
                            best, best_key = e, keys[t, layer, e]
                    now[j] = best
                if not first_token:
                    shared = 0
                    for j in range(k):
                        for i in range(k):
                            if now[j] == previous[layer, b, i]:
                                shared += 1
                    counts[layer, b, 0] += now[0] == previous[layer, b, 0]
                    counts[layer, b, 1] += shared > 0
                    counts[layer, b, 2] += shared
                for j in range(k):
                    previous[layer, b, j] = now[j]
                if out.shape[0] > 0 and b == 0:
                    for j in range(k):
                        out[start + t, layer, j] = now[j]


def _fit_grid(
    targets: dict[str, np.ndarray], inv_p: np.ndarray, k: int, fit_tokens: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Rule 5: ``(reuse_first, reuse_rest)`` per layer."""
    L = inv_p.shape[0]
    pairs = fit_tokens - 1
    first_t = targets.get("first_choice_repeat")
    rest_name = "any_overlap" if "any_overlap" in targets else ("reuse_rate" if "reuse_rate" in targets else None)
    rest_t = targets.get(rest_name) if rest_name else None
    r_first = np.zeros(L)
    r_rest = np.zeros(L)
    tied = first_t is None
    plan: list[str] = []
    if rest_t is not None:
        plan.append("rest")
    if first_t is not None:
        plan.append("first")
    if rest_t is not None and first_t is not None:
        plan += ["rest", "first"]  # two rounds: each probability moves the other's statistic
    for which in plan:
        lo, hi = np.zeros(L), np.ones(L)
        for _ in range(3):
            grid = lo[:, None] + (hi - lo)[:, None] * np.linspace(0.0, 1.0, _GRID)[None, :]  # (L, G)
            reuse = np.empty((L, _GRID, k))
            if which == "first":
                reuse[:, :, 0] = grid
                reuse[:, :, 1:] = r_rest[:, None, None]
            else:
                reuse[:, :, 0] = grid if tied else r_first[:, None]
                reuse[:, :, 1:] = grid[:, :, None]
            _, counts = _simulate(fit_tokens, inv_p, k, reuse, seed, keep_ids=False)
            first, overlap, reused = counts[..., 0], counts[..., 1], counts[..., 2]
            if which == "first":
                got, want = first / pairs, first_t
            elif rest_name == "any_overlap":
                got, want = overlap / pairs, rest_t
            else:
                got, want = reused / (pairs * k), rest_t
            assert want is not None
            best = np.abs(got - want[:, None]).argmin(axis=1)  # (L,)
            chosen = grid[np.arange(L), best]
            step = (hi - lo) / (_GRID - 1)
            lo, hi = np.clip(chosen - step, 0.0, 1.0), np.clip(chosen + step, 0.0, 1.0)
            if which == "first":
                r_first = chosen
            else:
                r_rest = chosen
                if tied:
                    r_first = chosen
    return r_first, r_rest


@dataclass(frozen=True, eq=False)
class LocalityFit:
    """A trace generated to match a model's published statistics, and how close it got."""

    trace: RoutingTrace
    published: ModelLocality
    zipf: np.ndarray  # (L,) popularity exponent per layer
    reuse_first: np.ndarray  # (L,) probability the previous first choice stays first
    reuse_rest: np.ndarray  # (L,) probability each other previous expert stays at its rank
    comparison: pd.DataFrame  # published vs measured on ``trace``, per named layer and statistic

    @property
    def max_abs_error(self) -> float:
        """The largest |generated - published| over the comparison (0 when nothing to compare)."""
        return float(self.comparison["difference"].abs().max()) if len(self.comparison) else 0.0

    def summary(self) -> str:
        """One line: model, subset, tokens, the fitted probabilities' range and the worst gap."""
        return (
            f"{self.published.model} ({self.published.subset}): {self.trace.num_tokens} tokens, reuse_first "
            f"{self.reuse_first.min():.3f}-{self.reuse_first.max():.3f}, reuse_rest {self.reuse_rest.min():.3f}-"
            f"{self.reuse_rest.max():.3f}; largest gap to the published figures {self.max_abs_error:.4f}"
        )


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 2:
        raise LocalityError(f"{name} must be an integer >= 2 (consecutive tokens are measured), got {value!r}")
    return int(value)


def locality_trace(
    model: Union[str, ModelLocality],
    tokens: int,
    seed: int = 0,
    *,
    subset: str = "mean",
    fit_tokens: int = 16384,
) -> LocalityFit:
    """A trace of ``tokens`` tokens shaped like ``model`` (a name in the table, or its
    ``ModelLocality``) whose popularity and reuse match the published statistics (rules
    3-5); ``fit.comparison`` shows published against measured on the trace."""
    published = model_locality(model, subset) if isinstance(model, str) else model
    if not isinstance(published, ModelLocality):
        raise LocalityError(f"model must be a model name or a ModelLocality, got {type(model).__name__}")
    T, fit_T = _positive("tokens", tokens), _positive("fit_tokens", fit_tokens)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise LocalityError(f"seed must be an integer >= 0, got {seed!r}")
    targets = {s: t for s in FITTED if (t := published.target(s)) is not None}
    if "any_overlap" in targets and "reuse_rate" in targets:
        raise LocalityError(f"{published.model}: give any_overlap or reuse_rate, not both (both set the same probability)")
    if "first_choice_repeat" in targets and published.top_k == 1:
        targets.pop("any_overlap", None)
        targets.pop("reuse_rate", None)
    L, E, k = published.num_layers, published.num_experts, published.top_k
    if T * L * k > MAX_TRACE_IDS:
        raise LocalityError(
            f"tokens={T}: a trace of {T} tokens × {L} layers × top-{k} holds {T * L * k} expert ids, more than the "
            f"{MAX_TRACE_IDS} accepted; generate at most {MAX_TRACE_IDS // (L * k)} tokens"
        )
    zipf_t = published.target("zipf_exponent")
    zipf = zipf_t if zipf_t is not None else np.zeros(published.num_layers)
    inv_p = _inverse_popularity(zipf, E, np.random.default_rng([int(seed), 0]))
    # Fit the layers the table names; the probabilities of the others are interpolated (rule 3).
    named = np.unique(np.concatenate([published.named_layers(s) for s in targets] or [np.zeros(0, dtype=np.int64)]))
    r_first, r_rest = np.zeros(L), np.zeros(L)
    if len(named):
        at = {s: t[named] for s, t in targets.items()}
        fitted_first, fitted_rest = _fit_grid(at, inv_p[named], k, fit_T, int(seed))
        layers = np.arange(L, dtype=np.float64)
        r_first = np.interp(layers, named.astype(np.float64), fitted_first)
        r_rest = np.interp(layers, named.astype(np.float64), fitted_rest)
    reuse = np.empty((L, 1, k))
    reuse[:, 0, 0] = r_first
    reuse[:, 0, 1:] = r_rest[:, None]
    ids, *_ = _simulate(T, inv_p, k, reuse, int(seed) + 1, keep_ids=True)  # other draws than the fit's
    assert ids is not None
    label = f"synthetic (locality of {published.model}, {published.subset}, seed {seed})"
    trace = RoutingTrace(ids, E, True, label)
    return LocalityFit(trace, published, zipf, r_first, r_rest, published_vs_measured(trace, published))


# -- caching ---------------------------------------------------------------------------------


def _stack_distances(experts: np.ndarray) -> np.ndarray:
    """Rule 7: every request's LRU stack distance in its layer (-1: its first request)."""
    T, L, k = experts.shape
    out = np.empty((T, L, k), dtype=np.int64)
    for layer in range(L):
        recent: list[int] = []  # most recent first
        for t in range(T):
            for j in range(k):
                e = int(experts[t, layer, j])
                try:
                    d = recent.index(e)
                    del recent[d]
                except ValueError:
                    d = -1
                recent.insert(0, e)
                out[t, layer, j] = d
    return out


def lru_hit_rate(trace: RoutingTrace, experts_per_layer: float) -> float:
    """The hit rate of a per-layer LRU expert cache of ``experts_per_layer`` experts
    (fractional allowed) over ``trace`` (rule 7): recorded (``RoutingRecorder``) or generated."""
    if not isinstance(trace, RoutingTrace):
        raise LocalityError(f"trace must be a RoutingTrace (RoutingRecorder, locality_trace…), got {type(trace).__name__}")
    number = isinstance(experts_per_layer, (int, float, np.integer, np.floating)) and not isinstance(experts_per_layer, bool)
    size = float(experts_per_layer) if number else math.nan
    if not 0 <= size <= trace.num_experts:
        raise LocalityError(f"experts_per_layer must be a number in [0, {trace.num_experts}] (the experts each "
                            f"layer's cache holds), got {experts_per_layer!r}")
    distances = _stack_distances(np.asarray(trace.experts)).ravel()
    low = math.floor(size)
    hits = [float(np.mean((distances >= 0) & (distances < s))) for s in (low, low + 1)]
    return (1 - (size - low)) * hits[0] + (size - low) * hits[1]
