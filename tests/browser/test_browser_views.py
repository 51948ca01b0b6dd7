"""Real browser: JupyterLab on localhost, headless Chromium driven by Playwright, the
views demo notebook (tiny MoE: GraphView, BufferView, TimelineView) run cell by cell.

Skips when Chromium or Playwright is missing, unless WORKBENCH_REQUIRE_BROWSER=1 (then
it fails). The screenshot goes to $WORKBENCH_SCREENSHOT, or into pytest's tmp dir; a
picture of each view is saved beside it (``<name>-wb-graph-view.png`` …).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
NOTEBOOK = HERE / "views_demo.ipynb"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEW_CLASSES = ("wb-graph-view", "wb-buffer-view", "wb-timeline-view")


def _require_or_skip(reason: str) -> None:
    if os.environ.get("WORKBENCH_REQUIRE_BROWSER") == "1":
        pytest.fail(f"WORKBENCH_REQUIRE_BROWSER=1 but {reason}")
    pytest.skip(reason)


def _chromium() -> str:
    path = os.environ.get("WORKBENCH_CHROMIUM") or shutil.which("chromium") or (CHROMIUM if os.path.exists(CHROMIUM) else None)
    if path is None:
        _require_or_skip("Chromium is not installed (apt-get install chromium)")
    return path


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
    """A JupyterLab server on a free localhost port, serving a copy of the demo notebook."""
    root = tmp_path / "lab"
    root.mkdir()
    shutil.copy(NOTEBOOK, root / NOTEBOOK.name)
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


def _run_all_cells(page) -> None:
    """Run → Run All Cells from the menu bar; Shift+Enter on each cell if the menu fails."""
    try:
        page.locator(".lm-MenuBar-item", has_text="Run").first.click(timeout=5000)
        page.locator(".lm-Menu-item", has_text="Run All Cells").first.click(timeout=5000)
    except Exception:  # a changed menu layout: fall back to running cell by cell
        page.keyboard.press("Escape")
        cells = page.locator(".jp-Notebook .jp-Cell")
        cells.first.click()
        for _ in range(cells.count()):
            page.keyboard.press("Shift+Enter")


def test_views_render_in_jupyterlab(jupyter_lab, tmp_path):
    """The three views of the tiny MoE render as live widgets in a real browser: their
    containers, dropdowns and figure images are in the DOM, the images decoded, and
    choosing a node in GraphView's dropdown round-trips through the kernel to the spec
    panel."""
    chromium = _chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _require_or_skip("Playwright is not installed (pip install playwright==1.64.1)")
    shot = Path(os.environ.get("WORKBENCH_SCREENSHOT") or tmp_path / "views_demo.png")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1900})
            page.goto(jupyter_lab + f"lab/tree/{NOTEBOOK.name}", wait_until="domcontentloaded")
            page.wait_for_selector(".jp-Notebook", timeout=45_000)
            try:  # "Select Kernel" dialog of a notebook that never ran here
                page.locator(".jp-Dialog .jp-mod-accept").click(timeout=10_000)
            except Exception:
                pass
            page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=15_000)
            page.wait_for_function(
                "() => document.querySelector('.jp-Notebook') && !document.querySelector('.jp-Dialog')",
                timeout=15_000,
            )
            _run_all_cells(page)
            for css in VIEW_CLASSES:
                page.wait_for_selector(f".{css}", timeout=60_000)
            # every view's figure is a decoded PNG and it has its dropdowns
            for css in VIEW_CLASSES:
                page.wait_for_function(
                    f"() => {{ const i = document.querySelector('.{css} img'); return i && i.complete && i.naturalWidth > 100; }}",
                    timeout=30_000,
                )
                assert page.locator(f".{css} .widget-dropdown").count() >= 2, css
            assert page.locator(".jupyter-widgets.wb-view").count() >= 3
            # a live round trip: select a node, the kernel answers with its spec
            select = page.locator(".wb-graph-view .widget-dropdown select").first
            select.select_option("linear_3")
            page.wait_for_function(
                "() => { const s = document.querySelector('.wb-graph-view .wb-graph-view-spec');"
                " return s && s.textContent.includes('linear_3') && s.textContent.includes('inside layers.'); }",
                timeout=30_000,
            )
            page.locator(".wb-graph-view").first.scroll_into_view_if_needed()
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot))
            for css in VIEW_CLASSES:  # one picture per view next to the page shot
                page.locator(f".{css}").first.screenshot(path=str(shot.with_name(f"{shot.stem}-{css}.png")))
            errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']").all_inner_texts()
            assert not any("Traceback" in e or "Error" in e for e in errors), errors
        finally:
            browser.close()
    assert shot.stat().st_size > 10_000
