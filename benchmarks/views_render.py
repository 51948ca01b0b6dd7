"""Benchmark: the views at MoE size — build time in the kernel, first paint and
interaction latency in a real browser.

Builds the views of two models:

- the full-size (35B-A3B) configuration, captured shape-only, under ``expert_streaming``:
  GraphView collapsed by layers, BufferView, TimelineView of the modeled decode step;
- the tiny MoE under ``expert_streaming``, run on ``sim``: GraphView expanded (every node),
  GraphView collapsed, BufferView, TimelineView.

For each it prints the median build time (the view's constructor: layout, scene, widget
state) against the 1 s target. Then, when Chromium and Playwright are installed, it draws
the same scenes with the package's own front end (``views.js``) in headless Chromium —
no JupyterLab, no kernel: three linked views on one page, sharing their selection the
way ``jslink`` does — and prints the median first paint (render call to painted frame)
and the latency of a click that highlights the linked buffer and events, of a zoom step,
and of a search, against the 100 ms target. ``--screenshots DIR`` saves a picture of each
view.

    python benchmarks/views_render.py                 # 5 repeats
    python benchmarks/views_render.py --repeat 3 --screenshots /tmp/shots
    python benchmarks/views_render.py --no-browser
    python benchmarks/views_render.py --graph-only    # the 35B GraphView build alone: first and median
"""

from __future__ import annotations

import argparse
import base64
import sys
import statistics
import time
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

import workbench as wb
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.machine import CostModel
from workbench.moe.strategies import expert_streaming
from workbench.views import BufferView, GraphView, TimelineView
from workbench.views import FRONT_END, FRONT_END_STYLES

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "browser"))
from chromium import CHROMIUM_ARGS, find_chromium  # noqa: E402  (the browser test's launcher)

BUILD_TARGET_S = 1.0
INTERACTION_TARGET_MS = 100.0


def median_s(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def full_size() -> tuple[Any, Any]:
    """(plan, modeled timeline) of the 35B config under expert_streaming, shape-only."""
    with torch.device("meta"):
        model = QwenMoEDecoder(MoEConfig.full())
        inputs = model.example_inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = wb.capture(model, inputs, shape_only=True)
    plan = wb.plan(expert_streaming().apply(program))
    return plan, wb.estimate(plan, CostModel.preset("h200", link="pcie_gen5"))


def tiny() -> tuple[Any, Any]:
    """(plan, sim run) of the tiny MoE under expert_streaming."""
    from workbench.runtime.tensors import stage_inputs

    model = QwenMoEDecoder(MoEConfig.tiny())
    inputs = model.example_inputs()
    dg = expert_streaming().apply(wb.capture(model, inputs))
    plan = wb.plan(dg)
    return plan, wb.run(plan, *stage_inputs(dg, inputs, "sim"), backend="sim")


# --- the browser page ------------------------------------------------------------------

_PAGE = """<!doctype html><html><head><meta charset="utf-8"><style>{css}
body {{ margin: 8px; background: #fff; }} .cell {{ width: 1380px; margin-bottom: 18px; }}</style></head>
<body><div id="g" class="cell"></div><div id="b" class="cell"></div><div id="t" class="cell"></div></body></html>"""

# A minimal stand-in for the anywidget model: get / set / on / off / save_changes, with
# change events fired synchronously on set, and "focus" shared the way jslink shares it.
_MOUNT = """
async ([src, states]) => {
  const mod = await import("data:text/javascript;base64," + src);
  class Model {
    constructor(state) { this.state = state; this.handlers = {}; this.links = []; }
    get(k) { return this.state[k]; }
    set(k, v) {
      const old = this.state[k];
      if (JSON.stringify(old) === JSON.stringify(v)) return;
      this.state[k] = v;
      for (const fn of this.handlers["change:" + k] || []) fn();
      if (k === "focus") for (const other of this.links) other.set("focus", v);
    }
    on(e, fn) { (this.handlers[e] = this.handlers[e] || []).push(fn); }
    off(e, fn) { this.handlers[e] = (this.handlers[e] || []).filter((f) => f !== fn); }
    save_changes() {}
  }
  const models = {};
  for (const [id, state] of Object.entries(states)) {
    if (!state) { document.getElementById(id).replaceChildren(); continue; }
    models[id] = new Model(state);
  }
  const all = Object.values(models);
  for (const m of all) m.links = all.filter((o) => o !== m);
  window.wbModels = models;
  window.wbViewsTiming = [];
  const out = {};
  for (const [id, m] of Object.entries(models)) {  // one at a time: each paint measured alone
    const el = document.getElementById(id);
    el.replaceChildren();
    mod.default.render({ model: m, el });
    await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
    out[id] = Number(el.dataset.firstPaintMs);
  }
  return out;
}
"""

_CLICK = """
async ([sel, linked]) => {
  const el = document.querySelector(sel);
  const t0 = performance.now();
  el.dispatchEvent(new MouseEvent("click", { bubbles: true }));
  const ok = linked.every((s) => document.querySelector(s));
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return { ms: performance.now() - t0, linked: ok };
}
"""

_WHEEL = """
async (sel) => {
  const el = document.querySelector(sel);
  const box = el.getBoundingClientRect();
  const t0 = performance.now();
  el.dispatchEvent(new WheelEvent("wheel", { deltaY: -240, clientX: box.left + box.width / 2, clientY: box.top + 60, bubbles: true, cancelable: true }));
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t0;
}
"""

_SEARCH = """
async ([sel, text]) => {
  const input = document.querySelector(sel);
  const t0 = performance.now();
  input.value = text;
  input.dispatchEvent(new Event("input"));
  input.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter" }));
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t0;
}
"""


def _state(view: Any) -> dict:
    c = view.canvas
    return {
        "kind": c.kind, "scene": c.scene, "focus": c.focus, "selected": c.selected, "detail": c.detail, "window": c.window,
        "viewbox": c.viewbox, "hidden_kinds": c.hidden_kinds, "expanded": c.expanded, "query": c.query,
    }


def browser_figures(cases: list[tuple[str, dict, str, str]], repeat: int, shots: Path | None) -> None:
    """Each case: (name, {"g": view, "b": view, "t": view}, a graph node to click, search text)."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("\n(no Playwright: browser figures skipped)")
        return
    chromium = find_chromium()
    if chromium is None:
        print("\n(no Chromium: browser figures skipped)")
        return
    src = base64.b64encode(FRONT_END.read_bytes()).decode()
    page_html = _PAGE.format(css=FRONT_END_STYLES.read_text())
    print(f"\n{'browser (headless Chromium, views.js)':44s} {'median':>9s}  target < {INTERACTION_TARGET_MS:.0f} ms")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1420, "height": 1000})
            for name, views, node, query in cases:
                states = {k: (_state(v) if v is not None else None) for k, v in views.items()}
                paints: dict[str, list[float]] = {k: [] for k, v in views.items() if v is not None}
                clicks, zooms, searches = [], [], []
                linked_ok = True
                for _ in range(repeat):
                    page.set_content(page_html)
                    first = page.evaluate(_MOUNT, [src, states])
                    for k, ms in first.items():
                        paints[k].append(ms)
                    linked = [s for s, k in (("#b .wbv-rect.wbv-sel, #b .wbv-seg.wbv-sel", "b"), ("#t .wbv-bar.wbv-linked, #t .wbv-bar.wbv-sel", "t")) if states.get(k)]
                    got = page.evaluate(_CLICK, [f'#g .wbv-node[data-id="{node}"]', linked])
                    clicks.append(got["ms"])
                    linked_ok = linked_ok and got["linked"]
                    zooms.append(page.evaluate(_WHEEL, "#g .wbv-stage"))
                    searches.append(page.evaluate(_SEARCH, ["#g .wbv-search", query]))
                for k, values in paints.items():
                    kind = views[k].kind
                    print(f"{name + ' · ' + kind + ' first paint':44s} {statistics.median(values):7.1f} ms")
                for what, values in (("click → linked highlight", clicks), ("zoom step", zooms), (f"search {query!r} + select", searches)):
                    ms = statistics.median(values)
                    print(f"{name + ' · ' + what:44s} {ms:7.1f} ms  {'ok' if ms < INTERACTION_TARGET_MS else 'SLOW'}")
                print(f"{name + ' · linked buffer/events highlighted':44s} {'yes' if linked_ok else 'NO'}")
                if shots is not None:
                    shots.mkdir(parents=True, exist_ok=True)
                    page.set_content(page_html)
                    page.evaluate(_MOUNT, [src, states])
                    page.evaluate(_CLICK, [f'#g .wbv-node[data-id="{node}"]', []])
                    for k in paints:
                        path = shots / f"{name}-{views[k].kind}.png"
                        page.locator(f"#{k}").screenshot(path=str(path))
                        print(f"  screenshot {path}")
        finally:
            browser.close()


def graph_only(repeat: int) -> None:
    """The full-size GraphView collapsed by layers: its first build, then the median of
    ``repeat`` more, and of its layout alone."""
    from workbench.views import graph_layout

    t0 = time.perf_counter()
    plan, _timeline = full_size()
    print(f"set-up {time.perf_counter() - t0:.1f} s: full size {len(plan.device_graph.graph.nodes)} graph nodes")
    t0 = time.perf_counter()
    view = GraphView(plan, collapse="layers")
    first = time.perf_counter() - t0
    build = median_s(lambda: GraphView(plan, collapse="layers"), repeat)
    layout = median_s(lambda: graph_layout(plan.device_graph, collapse="layers"), repeat)
    print(f"{'full 35B · GraphView collapse=layers, first':44s} {first:7.3f} s")
    print(f"{'full 35B · GraphView collapse=layers, median':44s} {build:7.3f} s   "
          f"{'ok' if build < BUILD_TARGET_S else 'SLOW'} (target < {BUILD_TARGET_S:.0f} s)")
    print(f"{'  of which the layout (median)':44s} {layout:7.3f} s   ({len(view.layout.nodes)} drawn nodes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-browser", action="store_true")
    parser.add_argument("--screenshots", type=Path, default=None)
    parser.add_argument("--graph-only", action="store_true", help="time the full-size GraphView build alone")
    args = parser.parse_args()
    if args.graph_only:
        graph_only(args.repeat)
        return

    t0 = time.perf_counter()
    full_plan, full_timeline = full_size()
    tiny_plan, tiny_run = tiny()
    print(f"set-up {time.perf_counter() - t0:.1f} s: full size {len(full_plan.device_graph.graph.nodes)} graph nodes, "
          f"{len(full_timeline)} modeled events; tiny {len(tiny_plan.device_graph.graph.nodes)} graph nodes, {len(tiny_run.timeline)} events")

    builds = [
        ("full 35B · GraphView collapse='layers'", lambda: GraphView(full_plan, collapse="layers")),
        ("full 35B · BufferView", lambda: BufferView(full_plan, algorithms=["greedy"])),
        ("full 35B · TimelineView", lambda: TimelineView(full_timeline)),
        ("tiny MoE · GraphView expanded", lambda: GraphView(tiny_plan)),
        ("tiny MoE · GraphView collapse='layers'", lambda: GraphView(tiny_plan, collapse="layers")),
        ("tiny MoE · BufferView", lambda: BufferView(tiny_plan, algorithms=["greedy"])),
        ("tiny MoE · TimelineView", lambda: TimelineView(tiny_run)),
    ]
    print(f"\n{'kernel: build (constructor)':44s} {'median':>9s}  target < {BUILD_TARGET_S:.0f} s")
    for name, build in builds:
        s = median_s(build, args.repeat)
        print(f"{name:44s} {s:7.3f} s   {'ok' if s < BUILD_TARGET_S else 'SLOW'}")
    graph = GraphView(full_plan, collapse="layers")
    s = median_s(lambda: graph.expand("layers.20"), 1)
    print(f"{'full 35B · expand layers.20 in place':44s} {s:7.3f} s")
    s = median_s(graph.png, 1)
    print(f"{'full 35B · static PNG fallback (collapsed+1)':44s} {s:7.3f} s")

    if args.no_browser:
        return
    gather = next(c.name for c in tiny_plan.device_graph.copies if c.kind == "h2d")
    full_gather = next(c.name for c in full_plan.device_graph.copies if c.kind == "h2d")
    cases = [
        ("full-35B", {"g": GraphView(full_plan, collapse="layers"), "b": BufferView(full_plan, algorithms=["greedy"]),
                      "t": TimelineView(full_timeline, label="modeled decode step (h200 + PCIe Gen5)")}, full_gather, "gather"),
        ("tiny-expanded", {"g": GraphView(tiny_plan), "b": BufferView(tiny_plan, algorithms=["greedy"]),
                           "t": TimelineView(tiny_run, label="sim run")}, gather, "gather"),
        ("tiny-collapsed", {"g": GraphView(tiny_plan, collapse="layers"), "b": None, "t": None}, gather, "layers.2"),
    ]
    browser_figures(cases, args.repeat, args.screenshots)


if __name__ == "__main__":
    main()
