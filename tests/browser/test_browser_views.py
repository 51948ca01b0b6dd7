"""Real browser: JupyterLab on localhost, headless Chromium driven by Playwright, the views
demo notebooks run cell by cell, and the views used the way a person uses them.

- ``views_demo.ipynb`` (tiny MoE under ``expert_streaming``): three linked views in one
  cell. The test clicks a gather copy in the graph and sees its buffer and its events
  highlighted (no kernel round trip needed), checks the kernel saw the same selection,
  zooms, searches, expands a layer in place, filters the timeline, and measures the
  click-to-highlight latency in the browser.
- ``views_full_size.ipynb`` (the 35B config, shape-only, collapsed): renders, and a click
  on a streamed expert gather highlights its buffer and events too.

Skips when Chromium or Playwright is missing, unless WORKBENCH_REQUIRE_BROWSER=1 (then
it fails). Screenshots go to $WORKBENCH_SCREENSHOT (a .png path; one picture per view is
saved beside it, ``<name>-graph.png`` …), or into pytest's tmp dir; the measured
latencies are printed and written beside them as ``<name>-timing.json``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pytest

from chromium import CHROMIUM_ARGS, find_chromium

pytestmark = pytest.mark.browser

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
DEMO = HERE / "views_demo.ipynb"
FULL = HERE / "views_full_size.ipynb"
VIEWS = {"graph": ".wbv-graph", "buffers": ".wbv-buffers", "timeline": ".wbv-timeline"}

# dispatch a click and wait for the frame that shows its effect; the time is the
# browser's own (no kernel involved: the linked views share the selection in the page)
_CLICK_AND_PAINT = """
async (sel) => {
  const el = document.querySelector(sel);
  if (!el) return -1;
  el.scrollIntoView({ block: "center" });
  await new Promise((r) => requestAnimationFrame(r));
  const t0 = performance.now();
  el.dispatchEvent(new MouseEvent("click", { bubbles: true }));
  await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - t0;
}
"""


def _require_or_skip(reason: str) -> None:
    if os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1":
        pytest.fail(f"WORKBENCH_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


@contextlib.contextmanager
def _lab_page(url: str, notebook: Path, shot: Path) -> Iterator:
    """A Chromium page on ``notebook`` in JupyterLab; a failure leaves a screenshot."""
    chromium = find_chromium()
    if chromium is None:
        _require_or_skip("Chromium is not installed (apt-get install chromium)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require_or_skip("Playwright is not installed (pip install playwright==1.64.1)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 1400})
        try:
            _open(page, url, notebook.name)
            yield page
            _no_errors(page)
        except Exception:
            page.screenshot(path=str(shot.with_name(f"{shot.stem}-failure.png")), full_page=True)
            raise
        finally:
            browser.close()


def _view_shots(page, shot: Path) -> None:
    page.evaluate("() => window.scrollTo(0, 0)")
    for name, css in VIEWS.items():
        page.locator(css).first.screenshot(path=str(shot.with_name(f"{shot.stem}-{name}.png")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_server(url: str, proc: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"JupyterLab exited with code {proc.returncode} before serving")
        try:
            with urllib.request.urlopen(url + "api/status", timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.3)
    raise TimeoutError(f"JupyterLab did not answer at {url} within {timeout_s:.0f} s")


@pytest.fixture
def jupyter_lab(tmp_path):
    """A JupyterLab server on a free localhost port, serving copies of the demo notebooks."""
    root = tmp_path / "lab"
    root.mkdir()
    for nb in (DEMO, FULL):
        shutil.copy(nb, root / nb.name)
    port = _free_port()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["JUPYTER_RUNTIME_DIR"] = str(tmp_path / "runtime")
    env["JUPYTERLAB_WORKSPACES_DIR"] = str(tmp_path / "workspaces")
    # fresh user settings; no "Jupyter news" toast (nothing is fetched, and it would cover the views)
    settings = tmp_path / "settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false"}')
    env["JUPYTERLAB_SETTINGS_DIR"] = str(tmp_path / "settings")
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.token=",
        "--ServerApp.password=", "--ServerApp.ip=127.0.0.1", "--allow-root", f"--ServerApp.root_dir={root}",
        "--ServerApp.port_retries=0",
    ]
    log = open(tmp_path / "jupyter.log", "wb")
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        _wait_for_server(url, proc, 60)
        yield url
    finally:
        try:
            urllib.request.urlopen(urllib.request.Request(url + "api/shutdown", method="POST"), timeout=5)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()


def _open(page, url: str, name: str) -> None:
    page.goto(url + f"lab/tree/{name}", wait_until="domcontentloaded")
    page.wait_for_selector(".jp-Notebook", timeout=45_000)
    try:  # "Select Kernel" dialog of a notebook that never ran here
        page.locator(".jp-Dialog .jp-mod-accept").click(timeout=10_000)
    except Exception:
        pass
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=15_000)
    page.wait_for_function(
        "() => document.querySelector('.jp-Notebook') && !document.querySelector('.jp-Dialog')", timeout=15_000
    )


def _run_cells(page, count: int) -> None:
    """Run the first ``count`` cells, one Shift+Enter each."""
    page.locator(".jp-Notebook .jp-Cell").first.click()
    page.keyboard.press("Escape")
    for _ in range(count):
        page.keyboard.press("Shift+Enter")


def _run_cell(page, index: int) -> None:
    """Run cell ``index`` again (command mode, select it, Shift+Enter)."""
    cell = page.locator(".jp-Notebook .jp-Cell").nth(index)
    cell.locator(".jp-InputArea-prompt").click()
    page.keyboard.press("Escape")
    page.keyboard.press("Shift+Enter")


def _kernel_reports(page, index: int, text: str, attempts: int = 6) -> None:
    """Run cell ``index`` until its output shows ``text``: the browser's state reaches the
    kernel asynchronously, so a cell run right after a click may still print the old one."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    check = (
        "() => [...document.querySelectorAll('.jp-OutputArea-output')].some("
        f"e => e.textContent.includes({json.dumps(text)}))"
    )
    for attempt in range(attempts):
        _run_cell(page, index)
        try:
            page.wait_for_function(check, timeout=10_000)
            return
        except PlaywrightTimeoutError:
            if attempt == attempts - 1:
                raise


def _shot_paths(tmp_path: Path, stem: str) -> Path:
    base = os.environ.get("WORKBENCH_SCREENSHOT")
    shot = Path(base) if base else tmp_path / "views.png"
    shot = shot.with_name(f"{shot.stem}-{stem}.png")
    shot.parent.mkdir(parents=True, exist_ok=True)
    return shot


def _no_errors(page) -> None:
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
    assert not any("Traceback" in e or "Error" in e for e in errors), errors


def _wait_for_views(page) -> None:
    for css in VIEWS.values():
        page.wait_for_selector(f"{css} .wbv-svg", timeout=120_000)
    page.wait_for_selector(".wbv-graph .wbv-node", timeout=30_000)
    page.wait_for_selector(".wbv-buffers .wbv-rect", timeout=30_000)
    page.wait_for_selector(".wbv-timeline .wbv-bar", timeout=30_000)


def test_views_link_zoom_search_expand_in_jupyterlab(jupyter_lab, tmp_path):
    """The tiny MoE's three linked views in a real browser: a click on a gather copy
    highlights its buffer and its events (measured, no kernel round trip), the kernel
    sees the same selection, the graph zooms, search selects a layer, a layer expands in
    place, and the timeline's kind filter hides compute."""
    shot = _shot_paths(tmp_path, "tiny")
    timings: dict[str, object] = {}
    with _lab_page(jupyter_lab, DEMO, shot) as page:
        _run_cells(page, 4)
        _wait_for_views(page)
        assert page.locator(".jupyter-widgets.wb-view").count() >= 3
        gather = '.wbv-graph .wbv-node[data-id="index_select_gather"]'
        page.wait_for_selector(gather, timeout=10_000)
        # a click: the buffer rectangle and the timeline events of that value light up
        clicks = [page.evaluate(_CLICK_AND_PAINT, sel) for sel in (gather, '.wbv-graph .wbv-node[data-id="layers.1"]', gather)]
        assert min(clicks) >= 0, clicks
        timings["click_to_linked_paint_ms"] = clicks
        page.wait_for_selector('.wbv-buffers .wbv-rect.wbv-sel[data-id="index_select_gather"]', timeout=5_000)
        page.wait_for_selector(".wbv-timeline .wbv-bar.wbv-sel, .wbv-timeline .wbv-bar.wbv-linked", timeout=5_000)
        page.wait_for_function(
            "() => { const t = document.querySelector('.wbv-graph .wbv-side').textContent;"
            " return t.includes('index_select_gather') && t.includes('copy reason') && t.includes('streamed host weight'); }",
            timeout=10_000,
        )
        # the kernel got the selection the browser made
        _kernel_reports(page, 3, "focus=index_select_gather buffer=index_select_gather event=")
        # zoom: the wheel scales the drawing, and the visible rectangle reaches the kernel
        before = page.locator(".wbv-graph").get_attribute("data-zoom")
        stage = page.locator(".wbv-graph .wbv-stage")
        stage.hover()
        t0 = time.perf_counter()
        page.mouse.wheel(0, -400)
        page.wait_for_function(f"() => document.querySelector('.wbv-graph').dataset.zoom !== '{before}'", timeout=5_000)
        timings["wheel_to_zoom_s"] = round(time.perf_counter() - t0, 4)
        # search: type a layer's name, Enter selects it and shows its spec
        search = page.locator(".wbv-graph .wbv-search")
        search.fill("layers.2")
        search.press("Enter")
        page.wait_for_selector('.wbv-graph .wbv-node.wbv-sel[data-id="layers.2"]', timeout=5_000)
        page.wait_for_function(
            "() => document.querySelector('.wbv-graph .wbv-side').textContent.includes('layers.2 (collapsed layer)')",
            timeout=10_000,
        )
        # expand layers.2 in place (a kernel relayout): its members appear inside a box
        page.locator(".wbv-graph .wbv-tools .wbv-button", has_text="expand").click()
        page.wait_for_selector(".wbv-graph .wbv-box-layer", timeout=30_000)
        assert page.locator('.wbv-graph .wbv-node[data-id="layers.2"]').count() == 0
        # the kind filter hides every compute bar
        compute = page.locator(".wbv-timeline .wbv-filter input[data-kind='compute']")
        shown = page.locator(".wbv-timeline .wbv-bar").count()
        compute.uncheck()
        page.wait_for_function(
            f"() => document.querySelectorAll('.wbv-timeline .wbv-bar').length < {shown}", timeout=5_000
        )
        assert page.locator(".wbv-timeline .wbv-bar").count() == 8  # the eight expert gathers
        _kernel_reports(page, 3, "expanded=['layers.2'] hidden=['compute'] zoomed=True")
        compute.check()
        # the first click again, for the pictures
        page.evaluate(_CLICK_AND_PAINT, '.wbv-graph .wbv-node[data-id="index_select_2_gather"]')
        _view_shots(page, shot)
        page.screenshot(path=str(shot), full_page=True)
        timings["browser_timing"] = page.evaluate("() => window.wbViewsTiming || []")
    ms = [c for c in timings["click_to_linked_paint_ms"] if isinstance(c, (int, float))]
    print(f"\nclick → linked highlight painted: median {statistics.median(ms):.1f} ms ({', '.join(f'{c:.1f}' for c in ms)})")
    shot.with_name(f"{shot.stem}-timing.json").write_text(json.dumps(timings, indent=1))
    assert shot.stat().st_size > 10_000


# the drawn nodes of the first graph view whose box lies inside its stage (by ``kind``)
_NODES_IN_STAGE = """
() => {
  const view = document.querySelector(".wbv-graph");
  const stage = view.querySelector(".wbv-stage").getBoundingClientRect();
  const out = { inside: [], outside: [] };
  for (const el of view.querySelectorAll(".wbv-nodes .wbv-node")) {
    const r = el.getBoundingClientRect();
    const ok = r.left >= stage.left - 1 && r.right <= stage.right + 1 && r.top >= stage.top - 1 && r.bottom <= stage.bottom + 1;
    (ok ? out.inside : out.outside).push(el.dataset.id);
  }
  return out;
}
"""


# every gather of the first graph view beside the layer its label names: its centre's y
# and that layer box's top and bottom, in screen pixels
_GATHER_ROWS = """
() => {
  const view = document.querySelector(".wbv-graph");
  const out = [];
  for (const el of view.querySelectorAll('.wbv-nodes .wbv-node[data-id$="_gather"]')) {
    const layer = el.querySelector("text").textContent.split("→ ")[1];
    const box = view.querySelector(`.wbv-nodes .wbv-node[data-id="${layer}"]`).getBoundingClientRect();
    const r = el.getBoundingClientRect();
    out.push({ id: el.dataset.id, layer, centre: (r.top + r.bottom) / 2, top: box.top, bottom: box.bottom });
  }
  return out;
}
"""


@pytest.mark.slow
def test_full_size_views_render_collapsed_in_jupyterlab(jupyter_lab, tmp_path):
    """The 35B config, shape-only: 40 collapsed layers with their expert gathers drawn
    outside. The graph opens on the first layer's copies (on screen at first paint, named
    with the layer they serve), "fit" puts every node inside the stage, each gather
    level with the layer it names, and the overview
    outlines what is shown; a click on a gather highlights its 32 MiB buffer and its copy
    event, and the timeline draws the arrows from that copy to what reads it."""
    shot = _shot_paths(tmp_path, "full")
    timings: dict[str, object] = {}
    with _lab_page(jupyter_lab, FULL, shot) as page:
        _run_cells(page, 3)
        _wait_for_views(page)
        assert page.locator('.wbv-graph .wbv-node-layer[data-id^="layers."]').count() == 40
        page.wait_for_function("() => document.querySelector('.wbv-graph').dataset.firstPaintMs", timeout=10_000)
        timings["first_paint_ms"] = {
            k: float(page.locator(css).first.get_attribute("data-first-paint-ms") or -1) for k, css in VIEWS.items()
        }
        first = page.evaluate(_NODES_IN_STAGE)
        copies_on_screen = [i for i in first["inside"] if i.endswith("_gather")]
        assert {"index_select_gather", "index_select_1_gather"} <= set(copies_on_screen), first
        label = page.locator('.wbv-graph .wbv-node[data-id="index_select_gather"] text').first.text_content()
        assert label.endswith("→ layers.0"), label
        assert page.locator(".wbv-graph .wbv-overview .wbv-ov-view").count() == 1
        page.locator(".wbv-graph").first.screenshot(path=str(shot.with_name(f"{shot.stem}-graph-first-paint.png")))
        # fit: every node inside the stage
        page.locator(".wbv-graph .wbv-tools .wbv-button", has_text="fit").click()
        fitted = page.evaluate(_NODES_IN_STAGE)
        assert not fitted["outside"] and len(fitted["inside"]) > 200, fitted["outside"][:10]
        # each layer's two gathers are drawn on that layer's row, level with its box
        rows = page.evaluate(_GATHER_ROWS)
        assert len(rows) == 80 and all(r["centre"] >= r["top"] and r["centre"] <= r["bottom"] for r in rows), rows
        page.locator(".wbv-graph").first.screenshot(path=str(shot.with_name(f"{shot.stem}-graph-fit.png")))
        # back on the copies through the overview: a click on its first layer
        box = page.locator(".wbv-graph .wbv-overview svg").bounding_box()
        page.mouse.click(box["x"] + box["width"] * 0.3, box["y"] + 6)
        gather = '.wbv-graph .wbv-node[data-id="index_select_gather"]'
        clicks = [page.evaluate(_CLICK_AND_PAINT, sel) for sel in (gather, '.wbv-graph .wbv-node[data-id="layers.5"]', gather)]
        assert min(clicks) >= 0, clicks
        timings["click_to_linked_paint_ms"] = clicks
        page.wait_for_selector('.wbv-buffers .wbv-rect.wbv-sel[data-id="index_select_gather"]', timeout=5_000)
        page.wait_for_selector(".wbv-timeline .wbv-bar.wbv-sel", timeout=5_000)
        # the selected copy's arrows to what reads it
        page.wait_for_function(
            "() => [...document.querySelectorAll('.wbv-timeline .wbv-flow.wbv-flow-sel')].some(e => e.style.display !== 'none')",
            timeout=5_000,
        )
        print(f"\nfull size: first paint {timings['first_paint_ms']} ms; click → linked highlight painted "
              f"{', '.join(f'{c:.1f}' for c in clicks)} ms")
        _view_shots(page, shot)
        timings["browser_timing"] = page.evaluate("() => window.wbViewsTiming || []")
    shot.with_name(f"{shot.stem}-timing.json").write_text(json.dumps(timings, indent=1))
