"""The tiny MoE decode step and the expert gather as measured on a GPU, beside what the
cost model says of them.

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
4. ``measured_gathers`` reads the same GPU's gather timings (``<gpu>_copy_bandwidth.csv``,
   the ``gather`` rows): per slab size in bytes, the median µs of each way of bringing 8 of
   256 expert slabs to the device; notebook 03 shows them and its exercise checks against them.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional

import pandas as pd

from ..errors import WorkbenchError
from ..file_reading import finite_number, read_regular_file
from ..machine.calibration.calibrate import measured_calibrations
from ..machine.cost_model import measured_dir

__all__ = ["GATHER_COLUMNS", "MeasuredDecode", "MeasuredDecodeError", "beside_model", "measured_decode",
           "measured_gathers", "rank_changes"]

#: The committed file's columns this module reads.
_COLUMNS = ("strategy", "measured_span_us", "modeled_h200_us", "modeled_measured_us", "outputs_equal_eager")
_MAX_BYTES = 1 << 20
#: The ways of moving 8 expert slabs that the gather rows time (µs, median): the automatic
#: choice, the gather kernel, the copy engine, the kernel with ids already on the device, a
#: loop of this workbench's per-expert copies and a loop of torch's.
GATHER_COLUMNS = ("gather_auto", "gather_kernel", "gather_dma", "gather_device_ids", "loop_ours", "loop_torch")


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


def _committed_table(path: Path, what: str, columns: tuple[str, ...]) -> pd.DataFrame:
    """A committed CSV file of measurements as text, refused when it is not one or lacks ``columns``."""
    data = read_regular_file(path, what, MeasuredDecodeError, max_bytes=_MAX_BYTES)
    try:
        table = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise MeasuredDecodeError(f"{path} is not a readable CSV table: {exc}") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise MeasuredDecodeError(f"{path} lacks the columns {', '.join(missing)}; a {what} has {', '.join(columns)}")
    return table


def measured_decode(name: str = "h200") -> Optional[MeasuredDecode]:
    """Rule 1: the committed measurement of ``name``'s GPU, or None when none is committed."""
    folder = measured_dir()
    path = folder / f"{name}_moe_decode.csv"
    calibration = next((c for c in measured_calibrations() if c.name == name), None)
    if calibration is None or not path.exists():
        return None  # a directory or pipe in its place is refused by the reader, never read
    table = _committed_table(path, "decode measurement", _COLUMNS)
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


def measured_gathers(name: str = "h200") -> Optional[pd.DataFrame]:
    """Rule 4: index the slab size in bytes, one column per ``GATHER_COLUMNS`` (µs), or None
    when ``name`` has no committed copy-bandwidth file."""
    path = measured_dir() / f"{name}_copy_bandwidth.csv"
    if not path.exists():
        return None
    table = _committed_table(path, "copy-bandwidth measurement", ("direction", "size", *GATHER_COLUMNS))
    rows = {}
    for row in table[table["direction"] == "gather"].itertuples(index=False):
        size = finite_number(row.size)
        times = [finite_number(getattr(row, c)) for c in GATHER_COLUMNS]
        if size is None or not 0 < size < 2**40 or size != int(size):
            raise MeasuredDecodeError(f"{path}: a gather row's size {row.size!r} is not a whole number of bytes")
        if any(t is None or not 0 < t < 1e9 for t in times):
            raise MeasuredDecodeError(f"{path}: the gather row of {int(size)} B has a time that is not a "
                                      f"positive number of µs below 1e9")  # fmt: skip
        rows[int(size)] = dict(zip(GATHER_COLUMNS, times))
    if not rows:
        raise MeasuredDecodeError(f"{path} holds no gather row")
    gathers = pd.DataFrame.from_dict(rows, orient="index").sort_index(ascending=False)
    gathers.index.name = "slab_bytes"
    return gathers


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
