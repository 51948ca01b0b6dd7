"""Benchmark: how long each view takes to render the tiny MoE decoder.

Captures the tiny MoE once, places its linears and batched matmuls on ``cuda:0``,
propagates, plans and runs it on the simulated backend. Then, for each view, prints the
median over ``--repeat`` runs of building the view (layout + first PNG) and of one
re-render after a selection change. Target: under 2 s each.

    python benchmarks/views_render.py            # 5 repeats
    python benchmarks/views_render.py --repeat 3
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import workbench as wb
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.views import BufferView, GraphView, TimelineView

TARGET_S = 2.0


def median_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    t0 = time.perf_counter()
    model = QwenMoEDecoder(MoEConfig.tiny())
    inputs = model.example_inputs()
    prog = wb.capture(model, inputs)
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear", "aten.bmm"]}))
    plan = wb.plan(dg)
    timeline = wb.run(plan, *inputs, backend="sim").timeline
    print(f"tiny MoE: {len(dg.graph.nodes)} graph nodes, {len(dg.copies)} copies, {len(plan.allocations)} planned tensors, "
          f"{len(timeline)} timeline events (sim run); set-up {time.perf_counter() - t0:.1f} s")

    some_copy = dg.copies[len(dg.copies) // 2].name
    some_tensor = next(iter(plan.allocations))
    cases = [
        ("GraphView collapse=None", lambda: GraphView(plan), lambda v: v.select(some_copy)),
        ("GraphView collapse='delegates'", lambda: GraphView(plan, collapse="delegates"), lambda v: v.select(some_copy)),
        ("GraphView collapse='layers'", lambda: GraphView(plan, collapse="layers"), lambda v: v.select(some_copy)),
        ("BufferView", lambda: BufferView(plan), lambda v: v.select(some_tensor)),
        ("TimelineView", lambda: TimelineView(timeline), lambda v: v.select(len(timeline) // 2)),
        ("TimelineView compare=", lambda: TimelineView(timeline, compare={"same": timeline}), lambda v: v.select(1)),
    ]
    print(f"\n{'view':34s} {'build (median)':>15s} {'re-render (median)':>19s}  target < {TARGET_S:.0f} s")
    worst = 0.0
    for name, build, change in cases:
        built = median_s(build, args.repeat)
        view = build()
        rerender = median_s(lambda: change(view) or view.select(None), args.repeat) / 2  # two renders per call
        worst = max(worst, built, rerender)
        print(f"{name:34s} {built:13.3f} s {rerender:17.3f} s  {'ok' if max(built, rerender) < TARGET_S else 'SLOW'}")
    print(f"\nslowest: {worst:.3f} s ({'within' if worst < TARGET_S else 'over'} the {TARGET_S:.0f} s target)")


if __name__ == "__main__":
    main()
