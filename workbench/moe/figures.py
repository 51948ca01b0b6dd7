"""Figures of multi-token decode: plain data in, a matplotlib figure out.

Rules:
  1. ``decode_figure``: top, the hit-rate heat map, one row per MoE layer and one column
     per step (white where a layer read nothing through a cache); bottom, the link bytes
     of each step. Nothing is computed here that the ``DecodeResult`` does not hold.
     Layers and steps are whole numbers, and so are their ticks.
"""

from __future__ import annotations

from typing import Any, Optional

# pyplot under whatever backend the caller chose (inline in a notebook, Agg in a script
# without a display): a library never switches it, or the caller's figures stop showing
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import MaxNLocator

__all__ = ["decode_figure"]


def decode_figure(result: Any, *, title: Optional[str] = None) -> Any:
    """Rule 1; returns a ``matplotlib.figure.Figure``."""
    matrix = result.hit_rate_matrix()  # (L, steps)
    steps = np.arange(result.n_tokens)
    # a narrow column on the right holds the colour bar; the bar panel leaves it empty, so
    # both panels keep one width (removing a colour bar afterwards breaks the layout)
    fig = plt.figure(figsize=(max(5.0, 0.25 * result.n_tokens + 2.5), 5.2), layout="constrained")
    grid = fig.add_gridspec(2, 2, height_ratios=[3, 1.4], width_ratios=[1, 0.035])
    top = fig.add_subplot(grid[0, 0])
    bottom = fig.add_subplot(grid[1, 0], sharex=top)
    image = top.imshow(np.ma.masked_invalid(matrix), aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0,
                       origin="lower", interpolation="nearest", extent=(-0.5, result.n_tokens - 0.5, -0.5, len(matrix) - 0.5))  # fmt: skip
    top.set_ylabel("MoE layer")
    top.set_yticks(np.arange(len(matrix)))  # one tick per layer: no half layers
    bottom.xaxis.set_major_locator(MaxNLocator(integer=True))
    top.set_title(title or "expert hit rate per layer and decode step")
    top.tick_params(labelbottom=False)
    fig.colorbar(image, cax=fig.add_subplot(grid[0, 1]), label="hit rate")
    bottom.bar(steps, np.asarray(result.link_bytes) / 2**10, color="tab:orange")
    bottom.set_ylabel("link KiB")
    bottom.set_xlabel("decode step")
    return fig
