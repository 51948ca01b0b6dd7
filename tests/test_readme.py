"""Every ```python block of README.md runs as a script on its own and prints what it
promises: exit status 0, no "False" where it prints a check, no bare object repr, and none
of the noise third-party imports print (torchao's "Failed to load", deprecation warnings)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.S | re.M)
#: What must never reach a README reader's terminal.
NOISE = re.compile(r"Failed to load|[Dd]eprecat|FutureWarning|UserWarning|object at 0x[0-9a-f]+|Traceback")


def test_the_readme_has_its_snippets():
    """The quick start, the transformers model and the family without a shipped config."""
    assert len(BLOCKS) >= 3
    assert any('"model_type"' in block for block in BLOCKS)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_snippet_runs_and_prints_what_it_promises(index, tmp_path):
    """Snippet ``index`` exits 0 in a fresh interpreter (a temporary working folder, no GPU),
    prints something, every check it prints is True, and no import noise or repr shows."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"}
    script = tmp_path / "snippet.py"
    script.write_text(BLOCKS[index])
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert done.stdout.strip(), "the snippet printed nothing"
    assert not re.search(r"\bFalse\b", done.stdout), done.stdout
    noise = NOISE.search(output)
    assert noise is None, f"{noise.group(0)!r} in:\n{output}"
