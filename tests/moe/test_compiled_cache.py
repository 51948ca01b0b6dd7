"""numba's compiled replay caches itself in the user's cache directory, never beside the
source: a fresh process that imports the workbench and replays a trace writes no file
under workbench/."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "workbench"

SCRIPT = """
from workbench.moe import replay
from workbench.moe.compiled import cache_dir
from workbench.moe.routing import synthetic_trace

trace = synthetic_trace(64, 2, 8, 2, seed=0)
for policy in ("lru", "lfu"):
    replay(trace, policy, 3, 1)
print(cache_dir())
"""


def _files(folder: Path) -> dict[Path, tuple[int, int]]:
    """Every file under ``folder``, with its size and modification time (a rewrite shows too)."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


def test_replay_writes_its_numba_cache_outside_the_source_tree(tmp_path):
    """Importing and running the LRU/LFU replay (numba, cached) in a fresh interpreter
    leaves every file under workbench/ as it was, and the compiled cache lands in the
    user cache directory ($XDG_CACHE_HOME here)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONDONTWRITEBYTECODE="1", PYTHONPATH=str(ROOT))
    before = _files(PACKAGE)
    done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert _files(PACKAGE) == before
    where = Path(done.stdout.strip().splitlines()[-1])
    assert where == tmp_path / "cache" / "workbench" / "numba"
    assert any(p.suffix == ".nbi" for p in _files(where)), sorted(_files(tmp_path))
