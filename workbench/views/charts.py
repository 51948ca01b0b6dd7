"""Charts of tables the analyses produce (plain data in, a matplotlib Figure out).

Rules:
1. ``link_throughput_figure(table)`` draws tokens per second by host↔device link: one
   group of bars per row of ``table`` (a strategy), one bar per ``tok/s <link>`` column,
   each labelled with its value; rows are labelled by the ``label`` column (and a
   ``skip_copies`` column when the table has rows that differ only by it).
2. A table without ``tok/s …`` columns, or without the label column, is a clear error.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from ._inputs import ViewOptionError
from ._widget import new_figure

_LINK_COLOURS = ("#4E79A7", "#59A14F", "#B07AA1", "#F28E2B", "#76B7B2", "#E15759")


def link_throughput_figure(table: pd.DataFrame, label: str = "strategy", title: str = "") -> Figure:
    """Rule 1."""
    links = [c for c in table.columns if isinstance(c, str) and c.startswith("tok/s ")]
    if not links:
        raise ViewOptionError(f"the table has no 'tok/s <link>' columns; its columns are {', '.join(map(str, table.columns))}")
    if label not in table.columns:
        raise ViewOptionError(f"the table has no {label!r} column to label its rows; its columns are {', '.join(map(str, table.columns))}")
    names = [str(v) for v in table[label]]
    if "skip_copies" in table.columns and len(set(names)) < len(names):
        names = [f"{n} ({'skip' if s else 'copies'})" for n, s in zip(names, table["skip_copies"])]
    rows = len(table)
    fig = new_figure(10.0, 0.9 + 0.28 * rows * len(links) + 0.25 * rows)
    ax = fig.add_subplot()
    height = 0.8 / len(links)
    y = np.arange(rows)
    top = float(np.nanmax(table[links].to_numpy(dtype=float))) if rows else 1.0
    for j, column in enumerate(links):
        values = table[column].to_numpy(dtype=float)
        pos = y - 0.4 + height * (j + 0.5)
        ax.barh(pos, np.nan_to_num(values), height=height * 0.92, color=_LINK_COLOURS[j % len(_LINK_COLOURS)],
                label=column.removeprefix("tok/s "))
        for p, v in zip(pos, values):
            if not np.isnan(v):
                ax.text(v + top * 0.01, p, f"{v:.1f}", va="center", fontsize=7.5)
    ax.set_yticks(y, names, fontsize=8.5)
    ax.set_ylim(rows - 0.5, -0.5)
    ax.set_xlim(0, top * 1.12 if top > 0 else 1)
    ax.set_xlabel("tokens / s (modeled)")
    ax.grid(axis="x", linewidth=0.3, alpha=0.6)
    ax.legend(title="link", fontsize=8, title_fontsize=8, loc="lower right", frameon=False)
    if title:
        ax.set_title(title, fontsize=9, loc="left")
    return fig
