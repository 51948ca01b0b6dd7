"""The table of published batch-1 decode runs, read and checked, and what modeling it shares.

``published_decode_runs`` reads ``data/published/decode_anchors.csv`` (every regime — all
on the GPU, experts computed on the host, experts copied in, partial offload — each row
with its source and the phrase quoted from it), checked on load; sources held back for
validation are refused. ``gpu_part`` names the shipped GPU part a run's text names;
``FittedTerm`` is a term fitted to runs with its leave-one-out errors. ``workbench.anchors``
models the runs; ``workbench.app.decode_model`` is the model of every regime.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import re
from typing import Optional

import numpy as np
import pandas as pd

from ..errors import WorkbenchError

__all__ = ["AnchorError", "FittedTerm", "GPU_PARTS", "PUBLISHED_COLUMNS", "PUBLISHED_REGIMES", "RESERVED_SOURCES",
           "gpu_part", "published_decode_runs", "published_dir"]  # fmt: skip


class AnchorError(WorkbenchError, ValueError):
    """An anchor cannot be modeled (the message says which and why)."""


# --- published batch-1 decode runs (the table the capacity answers are checked against) ---

PUBLISHED_REGIMES = ("all_on_gpu", "experts_on_host_compute", "experts_copied", "partial_offload")
PUBLISHED_COLUMNS = (
    "id", "regime", "model", "total_params_b", "active_params_b", "weight_format", "bits_per_weight", "runtime",
    "runtime_version", "gpu", "gpu_count", "cpu", "host_memory", "link", "offload_detail", "context_tokens",
    "decode_tok_s", "source_url", "source_kind", "source_date", "quote",
)  # fmt: skip
# Sources held back to validate predictions independently: no row may come from them.
RESERVED_SOURCES = (
    "arxiv.org/abs/2312.17238", "arxiv.org/pdf/2312.17238",  # Eliseev & Mazur, Table 2
    "efeslab/fiddler",  # the Fiddler README's results figure
    "llmfit/pull/755", "llmfit/pull/775",
    "DeepSeek-R1_V3_tutorial",  # the ktransformers tutorial's V0.2 table
    "tt-inference-server/issues/340",
)  # fmt: skip
_MAX_QUOTE_CHARS = 200


def published_dir() -> Path:
    """The folder of published measurements: the repository's ``data/published``."""
    return Path(__file__).resolve().parents[2] / "data" / "published"


def published_decode_runs(path: Optional[Path] = None) -> pd.DataFrame:
    """Published batch-1 MoE decode runs, one row per published figure, checked:

    1. the columns are exactly ``PUBLISHED_COLUMNS``; ids are unique;
    2. ``regime`` is one of ``PUBLISHED_REGIMES``; ``decode_tok_s`` is a finite positive number;
    3. every row names an https source and quotes it (at most 200 characters);
    4. no row comes from a source in ``RESERVED_SOURCES``.

    ``path`` defaults to ``data/published/decode_anchors.csv``. A file that breaks a rule is
    refused with an ``AnchorError`` naming the rows and what is valid.
    """
    path = Path(path) if path is not None else published_dir() / "decode_anchors.csv"
    if not path.is_file():  # also refuses a directory or a named pipe (never opened)
        raise AnchorError(f"{path} is not a regular file; expected the published decode table (a CSV file)")
    try:
        table = pd.read_csv(path, dtype={"id": str, "regime": str, "source_url": str, "quote": str})
    except (ValueError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise AnchorError(f"{path} is not a readable CSV table: {exc}") from None
    if tuple(table.columns) != PUBLISHED_COLUMNS:
        missing = [c for c in PUBLISHED_COLUMNS if c not in table.columns]
        extra = [c for c in table.columns if c not in PUBLISHED_COLUMNS]
        raise AnchorError(f"{path}: columns differ from the published table's (missing {missing}, unexpected {extra}); "
                          f"valid columns, in order: {', '.join(PUBLISHED_COLUMNS)}")
    problems: list[str] = []
    dup = table["id"][table["id"].duplicated()].tolist()
    if dup:
        problems.append(f"duplicate ids {dup}")
    bad_regime = table.loc[~table["regime"].isin(PUBLISHED_REGIMES), "id"].tolist()
    if bad_regime:
        problems.append(f"rows {bad_regime} have a regime outside {', '.join(PUBLISHED_REGIMES)}")
    speed = pd.to_numeric(table["decode_tok_s"], errors="coerce")
    bad_speed = table.loc[~(np.isfinite(speed) & (speed > 0)), "id"].tolist()
    if bad_speed:
        problems.append(f"rows {bad_speed} have no finite positive decode_tok_s")
    url = table["source_url"].fillna("")
    quote = table["quote"].fillna("")
    unsourced = table.loc[~url.str.startswith("https://") | (quote.str.strip() == ""), "id"].tolist()
    if unsourced:
        problems.append(f"rows {unsourced} lack an https source_url or a quote")
    long_quote = table.loc[quote.str.len() > _MAX_QUOTE_CHARS, "id"].tolist()
    if long_quote:
        problems.append(f"rows {long_quote} quote more than {_MAX_QUOTE_CHARS} characters")
    reserved = table.loc[url.map(lambda u: any(r.lower() in u.lower() for r in RESERVED_SOURCES)), "id"].tolist()
    if reserved:
        problems.append(f"rows {reserved} come from a source reserved for validation ({', '.join(RESERVED_SOURCES)})")
    if problems:
        raise AnchorError(f"{path}: " + "; ".join(problems))
    return table.assign(decode_tok_s=speed.astype(float))


#: The GPU part of a published run, by a whole-word phrase of its ``gpu`` column.
GPU_PARTS: tuple[tuple[str, str], ...] = (
    (r"\bRTX 4090\b(?!D)", "rtx_4090"), (r"\bRTX 3090\b", "rtx_3090"), (r"\bA100 80GB\b", "a100_80gb"),
    (r"\bH20\b", "h20"), (r"\bL4\b", "l4"), (r"\bT4\b", "t4"), (r"\bH100\b", "h100_sxm"),
    (r"\bRTX 5090\b", "rtx_5090"), (r"\bRTX 5060 Ti 16GB\b", "rtx_5060_ti_16gb"), (r"\bRTX A5000\b", "rtx_a5000"),
    (r"\bRTX 4060\b(?! Ti)", "rtx_4060"), (r"\bRTX 2080 Ti\b", "rtx_2080_ti"), (r"\bRTX 2080\b(?! Ti)", "rtx_2080"), (r"\bRadeon PRO W7800\b(?! 48)", "radeon_pro_w7800"),
)  # fmt: skip


def gpu_part(gpu: object) -> Optional[str]:
    """The shipped GPU part a run's ``gpu`` text names, or None."""
    text = gpu if isinstance(gpu, str) else ""
    return next((part for phrase, part in GPU_PARTS if re.search(phrase, text)), None)


@dataclass(frozen=True)
class FittedTerm:
    """A term fitted to published runs, with its leave-one-out check."""

    name: str  # what the term is, in words
    value: float  # fitted on every given row
    rows: tuple[str, ...]  # the runs it was fitted to
    loo_errors: tuple[float, ...]  # per row: |prediction with the term fitted on the others / published - 1|

    @property
    def median_loo_error(self) -> float:
        return float(np.median(self.loo_errors))
