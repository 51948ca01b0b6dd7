"""The plan of a user's machine in a notebook: the trade-off curve and a widget to try machines.

``tradeoff_figure(plan)`` draws predicted tok/s against the GPU memory each placement uses —
those that fit, those that do not, and the GPU's usable memory — the curve a memory fit
alone never shows. ``plan_explorer(models, gpus=, hosts=)`` is an ipywidgets panel: choose
the model, GPU(s), host, runtime and context, and it shows the ranked table, the curve and
the flags of the best plan. The planning is ``machine_plan.search.plan_machine``; this
module only renders its plain results (model-supplied names are escaped before HTML).
"""

from __future__ import annotations

import html
import io
from typing import Any, Mapping, Optional, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
from matplotlib.figure import Figure

from ..errors import WorkbenchError
from ..machine.parts import PartsFile
from ..machine_plan.model_tensors import PlanModel
from ..machine_plan.runtimes import RUNTIMES
from ..machine_plan.search import MachinePlan, plan_machine

__all__ = ["plan_explorer", "tradeoff_figure"]


def tradeoff_figure(plan: MachinePlan, ax: Optional[Any] = None) -> Figure:
    """Predicted tok/s (with its interval) against the GPU GiB each placement uses: the
    placements that fit, those that do not, and the GPUs' usable memory as a line."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 4.2), layout="constrained")
    else:
        fig = ax.figure
    usable = sum(b.usable_bytes for b in plan.budgets if b.device != "CPU") / 2**30
    for group, label, marker in ((plan.plans, "fits", "o"), (plan.unfit, "does not fit", "x")):
        if not group:
            continue
        gib = [p.gpu_bytes / 2**30 for p in group]
        speed = [p.tok_s for p in group]
        ax.plot(gib, speed, marker, label=f"{label} ({len(group)})", markersize=4)
        ordered = sorted(group, key=lambda q: q.gpu_bytes)
        if all(p.low == p.low for p in ordered):  # an interval for every point (NaN: none earned)
            ax.fill_between([p.gpu_bytes / 2**30 for p in ordered], [p.low for p in ordered], [p.high for p in ordered],
                            alpha=0.12)  # fmt: skip
    ax.axvline(usable, color="black", linestyle="--", linewidth=1, label=f"usable GPU memory ({usable:.1f} GiB)")
    best = plan.plans[0]
    ax.annotate("best plan", (best.gpu_bytes / 2**30, best.tok_s), textcoords="offset points", xytext=(-60, 10),
                arrowprops={"arrowstyle": "->"})  # fmt: skip
    gpus = "+".join(b.part for b in plan.budgets if b.device != "CPU")
    ax.set_title(f"{plan.model.name[:40]} on {gpus}, {plan.runtime}, context {plan.context}")
    ax.set_xlabel("GPU memory used (GiB): weights, KV cache, buffers")
    ax.set_ylabel("predicted decode tok/s (shaded: 80% interval)")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    return fig


def _curve_png(plan: MachinePlan) -> bytes:
    """The curve drawn on a figure of its own (never pyplot's: a notebook's inline figures
    are left alone) as PNG bytes."""
    fig = Figure(figsize=(7.5, 4.2), layout="constrained")
    tradeoff_figure(plan, fig.subplots())
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    return buffer.getvalue()


def plan_explorer(models: Mapping[str, PlanModel], *, gpus: Sequence[str], hosts: Sequence[str], parts: PartsFile = None,
                  contexts: Sequence[int] = (2048, 8192, 32768, 131072), top: int = 8) -> widgets.VBox:
    """A panel to plan ``models`` on machines of the named parts (``parts``: the user's
    parts file): choose, and the ranked table, the trade-off curve and the best flags follow."""
    model_box = widgets.Dropdown(options=list(models), description="model")
    gpu_box = widgets.SelectMultiple(options=list(gpus), value=(gpus[0],), description="GPU(s)", rows=min(6, len(gpus)))
    host_box = widgets.Dropdown(options=list(hosts), description="host")
    runtime_box = widgets.Dropdown(options=list(RUNTIMES), description="runtime")
    context_box = widgets.SelectionSlider(options=list(contexts), value=contexts[min(1, len(contexts) - 1)],
                                          description="context")  # fmt: skip
    table = widgets.HTML()
    picture = widgets.Image(format="png")
    flags = widgets.HTML()

    def update(_: Any = None) -> None:
        try:
            plan = plan_machine(models[model_box.value], gpus=list(gpu_box.value), host=host_box.value,
                                runtime=runtime_box.value, context=int(context_box.value), parts=parts)  # fmt: skip
        except WorkbenchError as exc:
            table.value = f"<p><b>No plan:</b> {html.escape(str(exc))}</p>"
            picture.value, flags.value = b"", ""
            return
        table.value = plan.table(top).to_html(index=False, escape=True)
        picture.value = _curve_png(plan)
        best = plan.plans[0]
        flags.value = f"<p><b>Flags of the best plan:</b> <code>{html.escape(' '.join(best.runtime_args))}</code></p>"

    for box in (model_box, gpu_box, host_box, runtime_box, context_box):
        box.observe(update, names="value")
    update()
    return widgets.VBox([widgets.HBox([model_box, host_box, runtime_box]), widgets.HBox([gpu_box, context_box]), flags,
                         table, picture])  # fmt: skip
