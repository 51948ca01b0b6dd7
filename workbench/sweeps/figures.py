"""The Pareto plot of a sweep: tokens/s against device memory, one panel per link.

Rules:
  1. One panel per link; in each, one line per strategy setting (``StrategySpec.line``),
     its points sorted by device GiB, so a strategy with an axis parameter (host layers,
     cache slots) draws a curve and one without it a single marker.
  2. The Pareto frontier (the most tokens/s reachable within each amount of device
     memory) is a black step line; each budget is a dotted vertical line.
  3. When any point's hit rate comes from a synthetic trace, the figure's title says so.
"""

from __future__ import annotations

from typing import Any, Optional

# pyplot under whatever backend the caller chose (inline in a notebook, Agg in a script
# without a display): a library never switches it, or the caller's figures stop showing
import matplotlib.pyplot as plt

__all__ = ["pareto_figure"]


def pareto_figure(result: Any, *, title: Optional[str] = None, width: float = 5.0) -> Any:
    """Rules 1-3; returns a ``matplotlib.figure.Figure``."""
    points = result.points
    links = list(result.links)
    fig, axes = plt.subplots(1, len(links), figsize=(width * len(links), 4.2), sharey=False, squeeze=False)
    lines = list(dict.fromkeys(points["line"]))
    colors = {line: plt.get_cmap("tab10" if len(lines) <= 10 else "tab20")(i % 20) for i, line in enumerate(lines)}
    for ax, link in zip(axes[0], links):
        here = points[points["link"] == link]
        for line in lines:
            group = here[here["line"] == line].sort_values("device_GiB", kind="stable")
            if group.empty:
                continue
            ax.plot(group["device_GiB"], group["tok/s"], marker="o", markersize=3.5, linewidth=1.2,
                    color=colors[line], label=line)  # fmt: skip
        frontier = here.sort_values(["device_bytes", "tok/s"], ascending=[True, False], kind="stable")
        best = frontier["tok/s"].cummax()
        keep = best.diff().fillna(best) > 0
        ax.step(frontier["device_GiB"][keep], best[keep], where="post", color="black", linewidth=1.0,
                alpha=0.7, label="Pareto frontier")  # fmt: skip
        for budget in result.budgets_GiB:
            ax.axvline(budget, color="grey", linestyle=":", linewidth=0.8)
        ax.set_title(link)
        ax.set_xlabel("device memory (GiB): resident weights + arena")
        ax.set_ylabel("tokens/s (modeled)")
        ax.grid(alpha=0.3)
    handles, labels = axes[0][-1].get_legend_handles_labels()
    columns = min(len(labels), 4) or 1
    # below the panels, off the curves: one legend for every panel
    fig.legend(handles, labels, fontsize=7, loc="lower center", ncol=columns, frameon=False)
    synthetic = sorted({s for s in points["hit_rate_source"] if isinstance(s, str) and s.startswith("synthetic")})
    heading = title or f"{result.source}: tokens/s against device memory"
    if synthetic:
        heading += f"\ncache hit rates from a {synthetic[0]} trace"
    fig.suptitle(heading, fontsize=10)
    rows = -(-len(labels) // columns)
    fig.tight_layout(rect=(0, 0.035 * rows + 0.02, 1, 1))
    return fig
