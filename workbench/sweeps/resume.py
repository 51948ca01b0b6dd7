"""A sweep's ``out=`` file: which saved points a re-run may reuse, and writers that lose nothing.

Rules:
  1. Every point written to ``out=`` carries the sweep's key in four columns (``KEY_COLUMNS``):
     ``key.program`` (what was swept: every field of the config, or a captured program's
     graph, input shapes and stored formats), ``key.weights`` (the ``weights=`` rules),
     ``key.cost_model`` (every figure of the cost model; its name aside) and ``key.point``
     (the grid entry — strategy and parameters — with the planning algorithm and the
     expected hit rate and its source). Each is a digest (SHA-256, 16 hex digits) of a
     canonical JSON form of what it covers.
  2. A re-run reads the file first, before any work. A point is reused only when its four
     keys equal this sweep's and it has a row for every link. A file holding points of
     another program, other weights or another cost model, or a point of this grid swept
     with other settings, is refused, naming each part that differs and how to go on (a
     new ``out=`` path to keep both, or deleting the file to sweep again). A file without
     the key columns (written by hand, or before keys existed) is refused the same way:
     its points cannot be told apart.
  3. Points of other grid entries of the same program, weights and cost model stay in the
     file; a later sweep of a larger grid reuses them.
  4. After each finished task its points are merged into the file under the file's lock
     (``atomic_files`` rule 5): the file is read again and checked as in rule 2, this
     writer's rows replace the rows of the same (label, link), every other row is kept,
     and the whole is written atomically. Writers in several processes (or threads)
     sweeping into one file therefore lose none of each other's points.
  5. The file is written by ``csv_files`` (text a spreadsheet would evaluate is marked as
     text); the points handed back to the caller hold no key columns.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

import numpy as np
import pandas as pd

from ..atomic_files import locked
from ..csv_files import write_csv
from ..machine import CostModel
from .checks import SweepError
from .result import read_points
from .source import ConfigSource, Source
from .spec import StrategySpec

__all__ = ["KEY_COLUMNS", "PointWriter", "SweepKey", "done_points", "sweep_key"]

#: Rule 1: the key columns of a saved point, and what each covers (in messages).
KEY_COLUMNS = ("key.program", "key.weights", "key.cost_model", "key.point")
_WHAT = "sweep points"


def _plain(value: Any) -> Any:
    """A JSON form of what ``json`` cannot write itself (rule 1)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return repr(value)


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=_plain, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _program_form(source: Source) -> Any:
    """Rule 1: what ``key.program`` covers."""
    if isinstance(source, ConfigSource):
        return {"config": dataclasses.asdict(source.config)}
    program = source.captured
    inputs = [
        (n.name, str(tuple(n.meta["val"].shape)), str(n.meta["val"].dtype))
        for n in program.graph.nodes
        if n.op == "placeholder" and hasattr(n.meta.get("val"), "shape")
    ]
    stored = {name: dataclasses.asdict(fmt) for name, fmt in program.stored_formats.items()}
    return {"graph": str(program.graph), "inputs": inputs, "stored_formats": stored}


@dataclasses.dataclass(frozen=True)
class SweepKey:
    """Rule 1: this sweep's key, and words for each part (for messages)."""

    program: str
    weights: str
    cost_model: str
    points: Mapping[str, str]  # spec label → key.point
    rates: Mapping[str, tuple[Optional[float], str]]  # spec label → expected hit rate and its source
    algorithm: str
    program_words: str
    weights_words: str
    cost_model_words: str

    def columns(self, label: str) -> dict[str, str]:
        """The key columns of a point of grid entry ``label``."""
        return dict(zip(KEY_COLUMNS, (self.program, self.weights, self.cost_model, self.points[label])))

    def differences(self, table: pd.DataFrame) -> list[str]:
        """Rule 2: what in ``table`` (saved points with key columns) differs from this key."""
        found = []
        for column, ours, words in (
            ("key.program", self.program, f"another program (this sweep's: {self.program_words})"),
            ("key.weights", self.weights, f"other weight formats (this sweep's: {self.weights_words})"),
            ("key.cost_model", self.cost_model, f"another cost model (this sweep's: {self.cost_model_words})"),
        ):
            other = int((table[column].astype(str) != ours).sum())
            if other:
                found.append(f"{other} of its {len(table)} points were swept with {words}")
        ours_by_row = table["label"].map(lambda label: self.points.get(label))
        changed = table[ours_by_row.notna() & (table["key.point"].astype(str) != ours_by_row)]
        if len(changed):
            first = changed.iloc[0]
            labels = list(dict.fromkeys(changed["label"]))
            more = f" and {len(labels) - 3} more" if len(labels) > 3 else ""
            found.append(f"point(s) {', '.join(labels[:3])}{more} were swept with {self._other_settings(first)}")
        return found

    def _other_settings(self, row: pd.Series) -> str:
        """Rule 2: which setting of a saved point differs, as far as its columns tell."""
        rate, source = self.rates[row["label"]]
        saved_rate = None if pd.isna(row["expected_hit_rate"]) else float(row["expected_hit_rate"])
        saved_source = "" if pd.isna(row["hit_rate_source"]) else str(row["hit_rate_source"])
        if (saved_rate, saved_source) != (rate, source):
            return (f"another expected hit rate ({saved_rate} from {saved_source or 'nothing'!r}; this sweep's: "
                    f"{rate} from {source or 'nothing'!r}: another trace= or prefetch_hit_rate=)")
        return f"another planning algorithm or strategy parameters (this sweep's algorithm: {self.algorithm!r})"


def sweep_key(
    source: Source,
    weights: Optional[Mapping[str, Sequence[str]]],
    cost_model: CostModel,
    specs: Sequence[StrategySpec],
    algorithm: str,
    rates: Mapping[StrategySpec, tuple[Optional[float], str]],
) -> SweepKey:
    """Rule 1 for a sweep of ``source`` (before ``weights`` are applied)."""
    rules = {} if weights is None else {str(f): [p] if isinstance(p, str) else list(p) for f, p in weights.items()}
    figures = {k: v for k, v in cost_model.to_dict().items() if k != "name"}
    points = {
        s.label: _digest({"strategy": s.name, "params": s.params, "algorithm": algorithm, "rate": rates[s]})
        for s in specs
    }
    return SweepKey(
        program=_digest(_program_form(source)),
        weights=_digest(rules),
        cost_model=_digest(figures),
        points=points,
        rates={s.label: rates[s] for s in specs},
        algorithm=algorithm,
        program_words=source.label,
        weights_words="; ".join(f"{f}: {', '.join(p)}" for f, p in rules.items()) or "none",
        cost_model_words=cost_model.name,
    )


def _saved(path: Path, key: SweepKey) -> pd.DataFrame:
    """Rule 2: the points saved at ``path`` (key columns kept), or an error naming what differs."""
    table = read_points(path)
    missing = [c for c in KEY_COLUMNS if c not in table.columns]
    problems = (
        [f"it has no key columns ({', '.join(missing)}): it was written by hand or by an older workbench, so "
         "what its points were swept with cannot be told"]
        if missing
        else key.differences(table)
    )  # fmt: skip
    if problems:
        raise SweepError(
            f"cannot resume the sweep from out={path}: {'; '.join(problems)}. Give a new out= path to keep both "
            f"sweeps, or delete {path} to sweep again"
        )
    return table


def _as_evaluated(row: dict[str, Any]) -> dict[str, Any]:
    """A row read back from CSV as ``evaluate`` made it: no key columns, no empty
    parameters of other strategies, no rate as None, no rate source as ""."""
    out = {k: v for k, v in row.items() if k not in KEY_COLUMNS and not (k.startswith("param.") and pd.isna(v))}
    if pd.isna(out.get("expected_hit_rate")):
        out["expected_hit_rate"] = None
    if pd.isna(out.get("hit_rate_source")):
        out["hit_rate_source"] = ""
    return out


def done_points(path: Optional[Path], links: tuple[str, ...], key: SweepKey) -> dict[str, list[dict[str, Any]]]:
    """Rule 2: the saved rows this sweep reuses, by spec label (specs of this grid with a
    row for every link)."""
    if path is None or not path.exists():
        return {}
    by_label: dict[str, list[dict[str, Any]]] = {}
    for row in _saved(path, key).to_dict("records"):
        if row["label"] in key.points:
            by_label.setdefault(row["label"], []).append(_as_evaluated(row))
    return {
        label: [r for link in links for r in found if r["link"] == link]
        for label, found in by_label.items()
        if set(links) <= {r["link"] for r in found}
    }


class PointWriter:
    """Rule 4: this sweep's finished points merged into ``path`` after each task."""

    def __init__(self, path: Optional[Path], key: SweepKey, rows: Sequence[dict[str, Any]]) -> None:
        self.path, self.key, self.rows = path, key, list(rows)

    def add(self, rows: Sequence[dict[str, Any]]) -> None:
        self.rows.extend(rows)
        if self.path is None:
            return
        with locked(self.path, _WHAT):
            current = _saved(self.path, self.key).to_dict("records") if self.path.exists() else []
            mine = {(r["label"], r["link"]) for r in self.rows}
            kept = [r for r in current if (r["label"], r["link"]) not in mine]
            keyed = [{**r, **self.key.columns(r["label"])} for r in self.rows]
            write_csv(pd.DataFrame(kept + keyed), self.path, _WHAT)
