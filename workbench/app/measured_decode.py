"""The tiny MoE decode step as measured on a GPU, beside what the cost model says of it.

``benchmarks/gpu_check.sh`` runs the tiny decode step of every placement strategy on
``backend="cuda"`` right after calibrating the GPU, and commits
``data/measured/<gpu>_moe_decode.csv``: the measured span (CUDA events, median of 20
calls) and what ``estimate`` said of the same step then, with the datasheet preset and
with the preset it had just measured. Notebooks 03 and 04 both show it, through this
module, so they show the same figures.

Rules:
1. Nothing is measured here: the figures are the committed file's, its GPU and date the
   calibration's of the same name (``measured:<name>``).
2. ``beside_model`` sets the measured span beside a model's span for the same strategies,
   with the ratio measured / modeled; a strategy is in the table only when both exist.
3. Ranks order the strategies fastest first (1 = fastest), by each column;
   ``rank_changes`` names the strategies whose measured rank differs from the modeled one.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from typing import Mapping, Optional

import pandas as pd

from ..errors import WorkbenchError
from ..file_reading import finite_number, read_regular_file
from ..machine.calibration.calibrate import measured_calibrations
from ..machine.cost_model import measured_dir

__all__ = ["MeasuredDecode", "MeasuredDecodeError", "beside_model", "measured_decode", "rank_changes"]

#: The committed file's columns this module reads.
_COLUMNS = ("strategy", "measured_span_us", "modeled_h200_us", "modeled_measured_us", "outputs_equal_eager")
_MAX_BYTES = 1 << 20


class MeasuredDecodeError(WorkbenchError, ValueError):
    """A committed decode measurement that cannot be read as one."""


@dataclass(frozen=True)
class MeasuredDecode:
    """The committed measurement of the tiny decode step on one GPU."""

    name: str  # the measured preset's name (``measured:<name>``)
    gpu: str  # the GPU as nvidia-smi named it
    date: str  # the calibration's date, UTC
    source: str  # the file, relative to the measured folder
    spans: pd.DataFrame  # index strategy; measured_us, datasheet_us and measured_preset_us (as modeled then), equal_eager


def measured_decode(name: str = "h200") -> Optional[MeasuredDecode]:
    """Rule 1: the committed measurement of ``name``'s GPU, or None when none is committed."""
    folder = measured_dir()
    path = folder / f"{name}_moe_decode.csv"
    calibration = next((c for c in measured_calibrations() if c.name == name), None)
    if calibration is None or not path.exists():
        return None  # a directory or pipe in its place is refused by the reader, never read
    data = read_regular_file(path, "decode measurement", MeasuredDecodeError, max_bytes=_MAX_BYTES)
    try:
        table = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise MeasuredDecodeError(f"{path} is not a readable CSV table: {exc}") from None
    missing = [c for c in _COLUMNS if c not in table.columns]
    if missing:
        raise MeasuredDecodeError(f"{path} lacks the columns {', '.join(missing)}; a decode measurement has "
                                  f"{', '.join(_COLUMNS)}")  # fmt: skip
    rows = {}
    for row in table.itertuples(index=False):
        measured = finite_number(row.measured_span_us)
        if measured is None or not 0 < measured < 1e9:
            continue  # a strategy the GPU run could not time (its error column says why)
        rows[str(row.strategy)] = {
            "measured_us": measured,
            "datasheet_us": finite_number(row.modeled_h200_us),
            "measured_preset_us": finite_number(row.modeled_measured_us),
            "equal_eager": row.outputs_equal_eager == "True",
        }
    if not rows:
        raise MeasuredDecodeError(f"{path} holds no strategy with a measured span")
    spans = pd.DataFrame.from_dict(rows, orient="index")
    spans.index.name = "strategy"
    return MeasuredDecode(name, str(calibration.machine.get("gpu", name)), calibration.date[:10], path.name, spans)


def beside_model(measured: MeasuredDecode, modeled: Mapping[str, float]) -> pd.DataFrame:
    """Rules 2, 3: per strategy, the measured span, ``modeled`` (strategy → µs), their ratio
    and both ranks."""
    common = [s for s in measured.spans.index if s in modeled and math.isfinite(float(modeled[s])) and modeled[s] > 0]
    if not common:
        raise MeasuredDecodeError(f"no strategy of {measured.source} is in the modeled ones: {', '.join(modeled) or 'none'}")
    table = pd.DataFrame({
        "measured µs": measured.spans.loc[common, "measured_us"],
        "modeled µs": pd.Series({s: float(modeled[s]) for s in common}),
    })
    table["measured / modeled"] = table["measured µs"] / table["modeled µs"]
    table["rank modeled"] = table["modeled µs"].rank(method="min").astype(int)
    table["rank measured"] = table["measured µs"].rank(method="min").astype(int)
    table.index.name = "strategy"
    return table


def rank_changes(table: pd.DataFrame) -> list[str]:
    """Rule 3: the strategies of a ``beside_model`` table ranked differently when measured."""
    return [s for s, row in table.iterrows() if row["rank modeled"] != row["rank measured"]]
