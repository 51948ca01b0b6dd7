"""A sweep's result as plain tables: every point, the best per budget, the workers.

Rules:
  1. ``points``: one row per (strategy spec, link), in the order the specs and links were
     given (``worker`` rule 3 for the columns).
  2. ``best``: one row per (budget, link). Among the points of that link whose
     ``device_bytes`` fit in ``budget_GiB * 2**30``, the one with the most tokens/s. A
     point within ``TIE_RTOL`` of the most tokens/s ties with it, and a tie goes to the
     simpler strategy (``SIMPLICITY``, simplest first; a name not listed comes last);
     among the tied points of that strategy, the most tokens/s, then fewer device bytes,
     then the earlier point. ``tied_with`` names the other strategies of the tie (""
     when there is none). ``fits`` is False, and the strategy columns empty, when no
     point fits. So a best row never uses more device memory than its budget.
  3. ``workers``: one row per process that ran tasks: tasks, busy seconds and peak
     resident memory (MiB) — the figure a cluster's worker memory must cover.
  4. ``SweepResult.from_points`` rebuilds a result from saved points (the CLI's
     ``sweep.csv``): ``best`` is chosen again by rule 2; no workers ran it, so
     ``workers`` is empty and ``seconds`` 0. Saved points are checked first: the
     columns are there, ``device_bytes`` is a finite number >= 0 and ``tok/s`` a number
     > 0 (or inf) in every row, so text, a negative size (which would fit any budget), a
     missing throughput or a half-written row is refused, never ranked. ``read_points``
     gives text cells back as they were before ``csv_files`` marked formula-like text.
  5. ``failed``: one row per point that did not finish (its label and error; ``sweep``
     rule 5); empty when every point finished.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from importlib import import_module
from typing import Any, Sequence, Union

import pandas as pd

from ..csv_files import restore_cells
from ..file_reading import read_regular_file
from .checks import SweepError, check_budgets, check_links

__all__ = ["SIMPLICITY", "TIE_RTOL", "WORKER_COLUMNS", "SweepResult", "best_per_budget", "read_points"]

_BEST_COLUMNS = (
    "label", "strategy", "line", "device_GiB", "device_bytes", "resident_GiB", "arena_MiB", "host_GiB",
    "ms/token", "tok/s", "link_MiB/token", "overlap", "expected_hit_rate", "hit_rate_source",
)  # fmt: skip
#: Rule 4: what saved points must hold (the columns ``best_per_budget`` reads).
_POINT_COLUMNS = ("link", *_BEST_COLUMNS)
#: Rule 3: the columns of ``SweepResult.workers``.
WORKER_COLUMNS = ("pid", "tasks", "busy_s", "peak_rss_MiB")
#: Rule 2: strategies from the fewest moving parts to the most (what a tie goes to).
SIMPLICITY = ("all_on_device", "partial_offload", "experts_on_host", "expert_streaming", "expert_cache")
#: Rule 2: tokens/s this close to the most (relative) are a tie.
TIE_RTOL = 1e-3


def best_per_budget(points: pd.DataFrame, budgets_GiB: Sequence[float], links: Sequence[str]) -> pd.DataFrame:
    """Rule 2."""
    params = [c for c in points.columns if c.startswith("param.")]
    rows: list[dict[str, Any]] = []
    for budget in budgets_GiB:
        limit = float(budget) * 2**30
        for link in links:
            fit = points[(points["link"] == link) & (points["device_bytes"] <= limit)]
            row: dict[str, Any] = {"budget_GiB": budget, "link": link, "fits": not fit.empty}
            if not fit.empty:
                chosen, tied = _choose(fit)
                row.update({c: chosen[c] for c in _BEST_COLUMNS + tuple(params)})
                row["tied_with"] = ", ".join(tied)
            rows.append(row)
    columns = ["budget_GiB", "link", "fits", *_BEST_COLUMNS, "tied_with", *params]
    return pd.DataFrame(rows, columns=columns)


def _check_points(points: Any) -> None:
    """Rule 4."""
    if not isinstance(points, pd.DataFrame):
        raise SweepError(f"points must be a pandas DataFrame (e.g. pandas.read_csv('sweep.csv')), got {type(points).__name__}")
    missing = sorted(set(_POINT_COLUMNS) - set(points.columns))
    if missing:
        raise SweepError(f"points lack the columns {missing}; give the points a sweep wrote (sweep.csv)")
    for column, valid, what in (
        ("device_bytes", lambda v: math.isfinite(v) and v >= 0, "a finite number of bytes >= 0"),
        ("tok/s", lambda v: v > 0, "a number > 0 (inf for a step that takes no time)"),
    ):
        values = pd.to_numeric(points[column], errors="coerce")
        bad = [i for i, (raw, v) in enumerate(zip(points[column], values)) if isinstance(raw, (bool, str)) or not valid(float(v))]
        if bad:
            shown = ", ".join(f"row {i} ({points[column].iloc[i]!r})" for i in bad[:3])
            raise SweepError(
                f"points column {column!r} must hold {what} in every row; {len(bad)} do not: {shown}"
                " (a damaged or half-written points file?)"
            )


def read_points(path: Union[str, Path]) -> pd.DataFrame:
    """The points saved at ``path`` (a sweep's ``.csv``), checked (rule 4)."""
    data = read_regular_file(path, "sweep points file (.csv)", SweepError)
    try:
        points = restore_cells(pd.read_csv(io.BytesIO(data)))  # text as written, before csv_files marked it
    except (ValueError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise SweepError(f"{path} is not a sweep points file ({type(exc).__name__}: {exc})") from None
    try:
        _check_points(points)
    except SweepError as exc:
        raise SweepError(f"{path}: {exc}") from None
    return points


def _choose(fit: pd.DataFrame) -> tuple[pd.Series, list[str]]:
    """Rule 2 among the points that fit: the chosen point, and the other strategies it ties with."""
    rank = {name: i for i, name in enumerate(SIMPLICITY)}
    tied = fit[fit["tok/s"] >= fit["tok/s"].max() * (1 - TIE_RTOL)]
    ranked = tied.assign(
        _simplicity=[rank.get(name, len(rank)) for name in tied["strategy"]], _order=range(len(tied))
    ).sort_values(
        ["_simplicity", "tok/s", "device_bytes", "_order"], ascending=[True, False, True, True], kind="stable"
    )
    chosen = ranked.iloc[0]
    others = sorted(set(tied["strategy"]) - {chosen["strategy"]}, key=lambda name: (rank.get(name, len(rank)), name))
    return chosen, others


@dataclass(frozen=True, eq=False)
class SweepResult:
    """Every point, the best per budget, and what the workers used (module rules)."""

    points: pd.DataFrame  # rule 1
    best: pd.DataFrame  # rule 2
    workers: pd.DataFrame  # rule 3
    budgets_GiB: tuple[float, ...]
    links: tuple[str, ...]
    source: str  # what was swept, one line
    seconds: float  # wall time of the whole sweep
    failed: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["label", "error"]))  # rule 5

    @classmethod
    def from_points(
        cls, points: pd.DataFrame, budgets_GiB: Sequence[float], links: Sequence[str], source: str
    ) -> "SweepResult":
        """Rule 4: the result of saved ``points`` (e.g. ``pandas.read_csv("sweep.csv")``)
        for ``budgets_GiB`` × ``links``; ``source`` says where the points come from."""
        _check_points(points)
        budgets, links = check_budgets(budgets_GiB), check_links(links)
        absent = sorted(set(links) - set(points["link"]))
        if absent:
            raise SweepError(f"no point was estimated under the link(s) {absent}; the points hold {sorted(set(points['link']))}")
        return cls(
            points=points,
            best=best_per_budget(points, budgets, links),
            workers=pd.DataFrame(columns=list(WORKER_COLUMNS)),
            budgets_GiB=budgets,
            links=links,
            source=source,
            seconds=0.0,
        )

    def pareto_figure(self, **kwargs: Any) -> Any:
        """tok/s against device GiB, one line per strategy setting, one panel per link
        (``workbench.sweeps.figures.pareto_figure``)."""
        # matplotlib loads on first use, like the views: planning alone never imports it
        return import_module(".figures", __package__).pareto_figure(self, **kwargs)

    def __repr__(self) -> str:
        return (
            f"SweepResult({self.source}: {len(self.points)} points, {len(self.budgets_GiB)} budgets × "
            f"{len(self.links)} links, {len(self.workers)} worker(s), {self.seconds:.1f} s)"
        )
