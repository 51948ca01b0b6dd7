"""Predictions recorded before they are checked: the prospective log.

Held-out figures (leave-one-source-out, leave-one-runtime-out) are computed after every
run is known; a model can still be tuned, knowingly or not, to the runs it is judged on.
The prospective log closes that door. A new published run enters
``data/published/prospective_runs.csv`` with its setup and no speed; its prediction is
logged in ``data/published/prospective.csv`` with the model's version; only then is its
measured figure entered, beside the prediction, never into a fit.

Rules:

1. A prospective run is a row of the published table's columns whose ``decode_tok_s`` is
   empty (the published table's checks apply to every other cell); its source is neither
   a reserved one nor one the published table already uses (a new source is the point).
   The prediction never reads the published speed: the run is read with the floor speed
   ``MIN_TOK_S`` in its place, which no ceiling check trips.
2. The log is append-only. An entry holds the run's id, source and runtime profile, the
   day it was predicted, the model version, the predicted tok/s with the low and high
   ends of its earned interval (``speed.evidence``) and the evidence label, then the
   measured tok/s and its day, empty until entered. Each entry's ``entry`` is a hash
   chained over every earlier entry and its own prediction: a prediction edited after
   the fact (or an entry dropped or reordered) breaks the chain, and ``check_log``
   refuses the log.
3. ``model_version()`` is a hash of the code and the shipped tables that predict (every
   ``.py`` file of the package and every file under ``data/`` except the prospective
   files themselves and hidden files, such as the log's lock file): a prediction says
   which model made it.
4. A measured figure is entered once (``record_measured``) for a logged run, on or after
   the day it was predicted, within the published table's speed range; entering another
   value for a measured run is refused.
5. Files are written atomically under a lock (``atomic_files``); a refused change leaves
   the log as it was.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import pandas as pd

from ..atomic_files import locked
from ..csv_files import restore_cells, write_csv
from ..file_reading import finite_number, read_csv_table
from .published_runs import (MAX_TOK_S, MIN_TOK_S, PUBLISHED_COLUMNS, AnchorError, checked_published_table, published_dir,
                             published_runs, read_run, same_source, source_key)
from .regime_model import RegimeModel, regime_model

__all__ = ["LOG_COLUMNS", "check_log", "log_predictions", "model_version", "prospective_log", "prospective_log_path",
           "prospective_runs", "prospective_runs_path", "prospective_summary", "record_measured"]  # fmt: skip

#: The log's columns (rule 2).
LOG_COLUMNS = ("id", "source", "runtime", "predicted_on", "model_version", "predicted_tok_s", "low", "high", "evidence",
               "measured_tok_s", "measured_on", "entry")  # fmt: skip
_PREDICTION = LOG_COLUMNS[:9]  # what the chain seals
_ROOT = Path(__file__).resolve().parents[2]


def prospective_runs_path() -> Path:
    """The shipped prospective runs: ``data/published/prospective_runs.csv``."""
    return published_dir() / "prospective_runs.csv"


def prospective_log_path() -> Path:
    """The shipped log: ``data/published/prospective.csv``."""
    return published_dir() / "prospective.csv"


def model_version() -> str:
    """Rule 3: a hash of the package's code and the shipped tables (16 hex digits)."""
    digest = hashlib.sha256()
    files = sorted([*(_ROOT / "workbench").rglob("*.py"), *(p for p in (_ROOT / "data").rglob("*") if p.is_file())])
    files = [p for p in files if not any(part.startswith(".") for part in p.relative_to(_ROOT).parts)]  # lock files
    skip = {prospective_runs_path().resolve(), prospective_log_path().resolve()}
    for path in files:
        if path.resolve() in skip:
            continue
        digest.update(str(path.relative_to(_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def prospective_runs(path: Optional[Union[str, Path]] = None) -> pd.DataFrame:
    """Rule 1: the prospective runs at ``path`` (default: the shipped file), checked."""
    path = Path(path) if path is not None else prospective_runs_path()
    table = read_csv_table(path, "table of prospective runs", AnchorError, PUBLISHED_COLUMNS)
    measured = table["decode_tok_s"].str.strip() != ""
    if measured.any():
        raise AnchorError(f"{path}: rows {list(table.loc[measured, 'id'])[:10]} state a speed: a prospective run is "
                          "predicted before its measured figure is known; the figure goes in the log (record_measured)")
    used = {same_source(r.source) for r in published_runs()}
    checked = checked_published_table(table.assign(decode_tok_s=str(MIN_TOK_S)), str(path))
    old = [i for i, url in zip(checked["id"], checked["source_url"]) if same_source(source_key(url)) in used]
    if old:
        raise AnchorError(f"{path}: rows {old[:10]} come from sources the published table already uses: a prospective "
                          "run comes from a new source")
    return checked


def prospective_log(path: Optional[Union[str, Path]] = None) -> pd.DataFrame:
    """The log at ``path`` (default: the shipped one), checked (``check_log``); a missing
    file is an empty log."""
    path = Path(path) if path is not None else prospective_log_path()
    if not path.exists():
        return pd.DataFrame(columns=list(LOG_COLUMNS))
    log = restore_cells(read_csv_table(path, "prospective log", AnchorError, LOG_COLUMNS))
    check_log(log, str(path))
    return log


def _chain(previous: str, entry: Sequence[Any]) -> str:
    return hashlib.sha256("\x1f".join([previous, *map(str, entry)]).encode()).hexdigest()[:16]


def check_log(log: pd.DataFrame, where: str = "the prospective log") -> None:
    """Rules 2, 4: every entry's chain hash, unique ids, measured figures in range and
    on or after their prediction; an ``AnchorError`` naming the first bad entry."""
    previous = ""
    seen: set[str] = set()
    for i, row in enumerate(log.to_dict("records")):
        where_row = f"{where}: entry {i + 2} ({str(row['id'])[:40]})"
        if row["id"] in seen:
            raise AnchorError(f"{where_row}: the run is logged twice; a run is predicted once")
        seen.add(row["id"])
        expected = _chain(previous, [row[c] for c in _PREDICTION])
        if row["entry"] != expected:
            raise AnchorError(f"{where_row}: its chain hash does not match: a prediction was edited, dropped or "
                              "reordered after it was logged (the log is append-only; log a new model version instead)")
        previous = expected
        if str(row["measured_tok_s"]).strip():
            tok_s = finite_number(row["measured_tok_s"])
            if tok_s is None or not MIN_TOK_S <= tok_s <= MAX_TOK_S:
                raise AnchorError(f"{where_row}: measured_tok_s must be a number in [{MIN_TOK_S:g}, {MAX_TOK_S:g}]")
            if _day(row["measured_on"], where_row) < _day(row["predicted_on"], where_row):
                raise AnchorError(f"{where_row}: measured_on is before predicted_on: a prediction comes first")


def _day(text: Any, where: str) -> dt.date:
    try:
        return dt.date.fromisoformat(str(text))
    except ValueError:
        raise AnchorError(f"{where}: {str(text)[:20]!r} is not a day (YYYY-MM-DD)") from None


def log_predictions(runs: Optional[Union[str, Path]] = None, log: Optional[Union[str, Path]] = None,
                    model: Optional[RegimeModel] = None, today: Optional[dt.date] = None) -> pd.DataFrame:
    """Rules 1, 2, 5: predict every prospective run at ``runs`` not yet in the log at
    ``log`` (defaults: the shipped files) with ``model`` (default: the shipped one) and
    append the predictions; returns the entries added."""
    table = prospective_runs(runs)
    path = Path(log) if log is not None else prospective_log_path()
    model = model if model is not None else regime_model()
    day = (today or dt.date.today()).isoformat()
    version = model_version()
    with locked(path):
        current = prospective_log(path)
        previous = current["entry"].iloc[-1] if len(current) else ""
        added = []
        for row in table.to_dict("records"):
            if row["id"] in set(current["id"]):
                continue
            run = read_run(row)
            p = model.predict(run)
            if p.tok_s is None:
                raise AnchorError(f"prospective run {row['id']!r} cannot be predicted: {p.why}; a run the model cannot "
                                  "express is no test of it (fix the row, or leave it out)")
            entry = [row["id"], run.source, run.runtime, day, version, f"{p.tok_s:.6g}", f"{p.low:.6g}", f"{p.high:.6g}",
                     p.evidence]  # fmt: skip
            previous = _chain(previous, entry)
            added.append(dict(zip(LOG_COLUMNS, [*entry, "", "", previous])))
        if added:
            write_csv(pd.concat([current, pd.DataFrame(added, columns=list(LOG_COLUMNS))], ignore_index=True), path,
                      "the prospective log")
    return pd.DataFrame(added, columns=list(LOG_COLUMNS))


def record_measured(run_id: str, tok_s: float, measured_on: Optional[dt.date] = None,
                    log: Optional[Union[str, Path]] = None) -> None:
    """Rules 4, 5: enter the measured figure of the logged run ``run_id``."""
    if isinstance(tok_s, bool) or not isinstance(tok_s, (int, float)) or not MIN_TOK_S <= tok_s <= MAX_TOK_S:
        raise AnchorError(f"a measured speed is a number of tok/s in [{MIN_TOK_S:g}, {MAX_TOK_S:g}], got {tok_s!r}")
    path = Path(log) if log is not None else prospective_log_path()
    with locked(path):
        current = prospective_log(path)
        found = current.index[current["id"] == run_id]
        if not len(found):
            raise AnchorError(f"run {run_id!r} is not in the prospective log ({path}): log its prediction first "
                              f"(logged: {', '.join(current['id'][:10]) or 'none'})")
        i = found[0]
        if str(current.at[i, "measured_tok_s"]).strip():
            raise AnchorError(f"run {run_id!r} already has its measured figure ({current.at[i, 'measured_tok_s']} tok/s): "
                              "a figure is entered once")
        day = (measured_on or dt.date.today()).isoformat()
        updated = current.copy()
        updated.at[i, "measured_tok_s"], updated.at[i, "measured_on"] = f"{float(tok_s):.6g}", day
        check_log(updated, str(path))
        write_csv(updated, path, "the prospective log")


@dataclass(frozen=True)
class ProspectiveSummary:
    """How the logged predictions fared once measured (none of it in any fit)."""

    logged: int  # entries in the log
    measured: int  # entries with a measured figure
    within: float  # share of measured with predicted / measured in [0.5, 2]
    covered: float  # share of measured inside their logged interval
    median_ratio: float  # median predicted / measured
    versions: tuple[str, ...]  # model versions that made the predictions
    table: pd.DataFrame  # per entry: id, runtime, evidence, predicted, low, high, measured, ratio, covered


def prospective_summary(log: Optional[Union[str, Path]] = None) -> ProspectiveSummary:
    """The log at ``log`` (default: the shipped one) judged: predicted against measured."""
    entries = prospective_log(log)
    rows = []
    for r in entries.to_dict("records"):
        measured = finite_number(r["measured_tok_s"]) if str(r["measured_tok_s"]).strip() else None
        predicted, low, high = float(r["predicted_tok_s"]), finite_number(r["low"]), finite_number(r["high"])
        rows.append({"id": r["id"], "runtime": r["runtime"], "evidence": r["evidence"], "predicted tok/s": predicted,
                     "low": low, "high": high, "measured tok/s": measured,
                     "ratio": predicted / measured if measured else math.nan,
                     "covered": (low is not None and high is not None and low <= measured <= high) if measured else None,
                     "predicted_on": r["predicted_on"], "model_version": r["model_version"]})  # fmt: skip
    table = pd.DataFrame(rows, columns=["id", "runtime", "evidence", "predicted tok/s", "low", "high", "measured tok/s",
                                        "ratio", "covered", "predicted_on", "model_version"])  # fmt: skip
    done = table[table["measured tok/s"].notna()]
    ratios = done["ratio"].to_numpy(dtype=float)
    return ProspectiveSummary(
        logged=len(table), measured=len(done),
        within=float(np.mean((ratios >= 0.5) & (ratios <= 2))) if len(ratios) else math.nan,
        covered=float(np.mean(done["covered"].astype(bool))) if len(done) else math.nan,
        median_ratio=float(np.median(ratios)) if len(ratios) else math.nan,
        versions=tuple(dict.fromkeys(table["model_version"])), table=table)  # fmt: skip
