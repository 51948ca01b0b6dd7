"""Figures of multi-token decode: plain data in, a matplotlib figure out.

Rules:
  1. ``decode_figure``: top, the hit-rate heat map, one row per MoE layer and one column
     per step (white where a layer read nothing through a cache); bottom, the link bytes
     of each step. Nothing is computed here that the ``DecodeResult`` does not hold.
"""

from __future__ import annotations

from typing import Any, Optional

# pyplot under whatever backend the caller chose (inline in a notebook, Agg in a script
# without a display): a library never switches it, or the caller's figures stop showing
import matplotlib.pyplot as plt
import numpy as np

__all__ = ["decode_figure"]


def decode_figure(result: Any, *, title: Optional[str] = None) -> Any:
    """Rule 1; returns a ``matplotlib.figure.Figure``."""
    matrix = result.hit_rate_matrix()  # (L, steps)
    steps = np.arange(result.n_tokens)
    fig, (top, bottom) = plt.subplots(
        2, 1, figsize=(max(5.0, 0.25 * result.n_tokens + 2.5), 5.2), sharex=True, gridspec_kw={"height_ratios": [3, 1.4]}
    )
    image = top.imshow(np.ma.masked_invalid(matrix), aspect="auto", cmap="viridis", vmin=0.0, vmax=1.0,
                       origin="lower", interpolation="nearest", extent=(-0.5, result.n_tokens - 0.5, -0.5, len(matrix) - 0.5))  # fmt: skip
    top.set_ylabel("MoE layer")
    top.set_title(title or "expert hit rate per layer and decode step")
    fig.colorbar(image, ax=top, label="hit rate")
    bottom.bar(steps, np.asarray(result.link_bytes) / 2**10, color="tab:orange")
    bottom.set_ylabel("link KiB")
    bottom.set_xlabel("decode step")
    fig.colorbar(image, ax=bottom).remove()  # keep the two panels the same width
    fig.tight_layout()
    return fig
