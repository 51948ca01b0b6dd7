"""Importing the workbench, figure modules included, leaves matplotlib's backend alone."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_SCRIPT = """
import matplotlib
matplotlib.use("svg")  # the caller's choice (a notebook's would be inline)
import workbench, workbench.views, workbench.moe.figures, workbench.sweeps.figures, workbench.app.walkthrough
import matplotlib.pyplot as plt
print(matplotlib.get_backend())
"""


def test_figure_modules_keep_the_callers_backend():
    """A module that switched to Agg at import would take a notebook off its inline
    backend (no figure, the user's own included, would show): the backend the caller set
    before importing is the backend after."""
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT], cwd=REPO, capture_output=True, text=True, timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "MPLBACKEND": ""},
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1].lower() == "svg"
