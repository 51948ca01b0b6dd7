"""Headless Chromium for the browser test and the views benchmark: where it is and how
it is started (the system's Chromium, driven by Playwright; no `playwright install`)."""

from __future__ import annotations

import os
import shutil
from typing import Optional

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


def find_chromium() -> Optional[str]:
    """$WORKBENCH_CHROMIUM, else ``chromium`` on PATH, else /usr/bin/chromium; None if none."""
    path = os.environ.get("WORKBENCH_CHROMIUM") or shutil.which("chromium")
    if path:
        return path
    return CHROMIUM if os.path.exists(CHROMIUM) else None
