"""Hostile and faulty files for every reader and writer of the workbench.

Properties:
- Every path that is read (plan files, .pte files, routing traces, cost models, measured
  presets, model configs) is read only if it is a regular file: a named pipe is refused at once with the
  reader's ``WorkbenchError``, never waited on (each read runs under a timeout guard, so
  a regression fails instead of hanging the suite).
- Every file that is written (routing traces, Chrome traces, DOT files, view figures)
  is written atomically: when the disk fills mid-write (a file-size limit in a child
  process, with SIGXFSZ ignored so the write fails with EFBIG) the old file is left
  whole and no temporary file stays behind.
- Damaged and absurd routing traces are refused with ``TraceError``: ids beyond the
  stored dtype, absurd expert counts, absurd declared array sizes, flipped bits.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

import workbench as wb
from workbench.errors import WorkbenchError
from workbench.models import MoEConfig
from workbench.models.config import ConfigError
from workbench.moe import RoutingTrace, TraceError, synthetic_trace
from workbench.moe.cache_policies import CachePolicyError, replay
from workbench.machine.calibration.calibrate import Calibration, CalibrationError
from workbench.machine.cost_model import CostModel, CostModelError

from conftest import call_with_timeout

ROOT = Path(__file__).resolve().parents[1]


def _pte(path):
    from workbench.executorch import from_executorch

    return from_executorch(path)


READERS = {
    "plan file": (wb.load_plan, wb.PlanFileError),
    "routing trace": (RoutingTrace.load, TraceError),
    "cost model": (CostModel.load, CostModelError),
    "measured preset": (Calibration.load, CalibrationError),
    "model config": (MoEConfig.from_json, ConfigError),
    ".pte file": (_pte, WorkbenchError),
}


@pytest.mark.parametrize("kind", sorted(READERS))
def test_named_pipe_is_refused_at_once(kind, tmp_path):
    """A FIFO named as a file is refused with the reader's error, without blocking."""
    if kind == ".pte file":
        pytest.importorskip("executorch")
    reader, error = READERS[kind]
    suffix = {"plan file": ".wbplan", "routing trace": ".npz", ".pte file": ".pte"}.get(kind, ".json")
    fifo = tmp_path / f"pipe{suffix}"
    os.mkfifo(fifo)
    raised = call_with_timeout(reader, fifo)
    assert isinstance(raised, error), f"{kind}: got {raised!r}"
    assert "named pipe" in str(raised)


@pytest.mark.parametrize("kind", sorted(READERS))
def test_directory_is_refused_as_a_directory(kind, tmp_path):
    """A directory named as a file is called a directory, not a missing file."""
    if kind == ".pte file":
        pytest.importorskip("executorch")
    reader, error = READERS[kind]
    with pytest.raises(error, match="directory"):
        reader(tmp_path)


# --- routing traces ---------------------------------------------------------------------


def _trace_file(path: Path, experts: np.ndarray, header: dict) -> Path:
    with open(path, "wb") as f:
        np.savez(f, experts=experts, header=np.array(json.dumps(header)))
    return path


def _header(num_experts):
    return {"format": "workbench.routing_trace/1", "num_experts": num_experts, "synthetic": False, "label": "x"}


def test_ids_beyond_the_stored_dtype_are_refused_not_truncated(tmp_path):
    """The issue's case: 2**40 experts with ids 2**33, 2**33+1 used to load as 0, 1. Such a
    trace is refused, built or loaded; a trace that loads keeps its ids exactly."""
    ids = np.array([[[2**33, 2**33 + 1]]], dtype=np.int64)
    with pytest.raises(TraceError, match="num_experts"):
        RoutingTrace(ids, 2**40, False, "x")
    with pytest.raises(TraceError, match="num_experts"):
        RoutingTrace.load(_trace_file(tmp_path / "big.npz", ids, _header(2**40)))
    wide = np.array([[[70000, 3]]], dtype=np.int64)  # beyond int16
    loaded = RoutingTrace.load(_trace_file(tmp_path / "wide.npz", wide, _header(70001)))
    assert loaded.experts.tolist() == [[[70000, 3]]]


def test_absurd_declared_array_size_is_refused_before_allocating(tmp_path):
    """A .npy member whose header declares 2**40 ids but holds a few bytes is refused with
    TraceError (numpy alone would allocate the declared size: MemoryError)."""
    buffer = io.BytesIO()
    header = {"descr": "<i2", "fortran_order": False, "shape": (2**40, 1, 2)}
    np.lib.format.write_array_header_1_0(buffer, header)
    data = buffer.getvalue() + np.zeros(2, dtype=np.int16).tobytes()
    raw = io.BytesIO()
    np.save(raw, np.array(json.dumps(_header(4))))
    path = tmp_path / "absurd.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("experts.npy", data)
        archive.writestr("header.npy", raw.getvalue())
    with pytest.raises(TraceError, match="declares shape"):
        RoutingTrace.load(path)


def test_damaged_trace_files_raise_trace_error_only(tmp_path):
    """Flipping any one byte of a saved trace (stored compressed) gives a TraceError or a
    trace equal to the saved one, never another exception."""
    trace = synthetic_trace(40, 2, 8, 2, zipf=1.0, reuse=0.3, seed=1)
    good = trace.save(tmp_path / "good.npz").read_bytes()
    rng = np.random.default_rng(0)
    positions = sorted(set(rng.integers(0, len(good), 120).tolist()))
    others = []
    for i in positions:
        damaged = bytearray(good)
        damaged[i] ^= 0xFF
        path = tmp_path / "bad.npz"
        path.write_bytes(bytes(damaged))
        try:
            loaded = RoutingTrace.load(path)
        except TraceError:
            continue
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            others.append((i, type(exc).__name__, str(exc)[:80]))
            continue
        assert np.array_equal(loaded.experts, trace.experts)
    assert not others, others[:5]


def test_replay_refuses_sizes_no_machine_holds():
    """slab_bytes of 2**62 used to wrap to negative bytes per token; it is refused, and a
    size whose total traffic would overflow int64 is refused too."""
    trace = synthetic_trace(20, 2, 8, 2, seed=0)
    with pytest.raises(CachePolicyError, match="slab_bytes"):
        replay(trace, "lru", 2, 2**62)
    big = synthetic_trace(3000, 4, 8, 2, seed=0)
    with pytest.raises(CachePolicyError, match="overflows"):
        replay(big, "lru", 2, 2**49)
    ok = replay(trace, "lru", 2, 2**40)
    assert ok.bytes_per_token() > 0


# --- atomic writes under a full disk ----------------------------------------------------

_FULL_DISK = r"""
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
import numpy as np
import workbench as wb
from workbench.moe import synthetic_trace
kind, target = sys.argv[1], sys.argv[2]
if kind == "trace":
    obj = synthetic_trace(20000, 8, 64, 4, seed=3)
    write = lambda: obj.save(target)
else:
    from views_helpers import residual_run
    plan, run = residual_run()
    if kind == "chrome":
        write = lambda: wb.to_chrome_trace(run, target)
    elif kind == "dot":
        write = lambda: wb.to_dot(plan, path=target)
    else:
        view = wb.GraphView(plan)
        write = lambda: view.save(target)
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
try:
    write()
except wb.WorkbenchError as exc:
    print("REFUSED", type(exc).__name__, exc)
    sys.exit(3)
print("WROTE")
"""


@pytest.mark.parametrize("kind,name", [("trace", "t.npz"), ("chrome", "t.json"), ("dot", "g.dot"), ("figure", "g.png")])
def test_full_disk_leaves_the_old_file_whole(kind, name, tmp_path):
    """A write that fails for lack of space (EFBIG under RLIMIT_FSIZE) raises a
    WorkbenchError, keeps the old file byte for byte, and leaves no temporary file."""
    target = tmp_path / name
    old = b"the old file, " * 20
    target.write_bytes(old)
    script = _FULL_DISK.format(root=str(ROOT), tests=str(ROOT / "tests" / "views"))
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    done = subprocess.run(
        [sys.executable, "-c", script, kind, str(target)], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 3, (done.stdout[-2000:], done.stderr[-2000:])
    assert "REFUSED" in done.stdout
    assert target.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_killed_writers_temporary_file_is_removed_by_the_next_save(tmp_path):
    """A temporary file left by a writer killed mid-save (its process is gone) is removed
    by the next complete save of the same target; one of a live writer is kept."""
    trace = synthetic_trace(10, 2, 8, 2, seed=0)
    target = tmp_path / "t.npz"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan = tmp_path / f".t.npz.{int(dead.stdout)}-0123456789ab.tmp.npz"
    live = tmp_path / f".t.npz.{os.getpid()}-ba9876543210.tmp.npz"
    orphan.write_bytes(b"half")
    live.write_bytes(b"in progress")
    trace.save(target)
    assert not orphan.exists()
    assert live.exists()
    assert RoutingTrace.load(target).experts.tolist() == trace.experts.tolist()


def test_an_arena_no_machine_holds_is_a_clear_error():
    """A 2 TiB simulated block is refused with AllocatorOutOfMemory (a WorkbenchError), not
    the allocator's raw RuntimeError."""
    from workbench.runtime.allocators import AllocatorOutOfMemory, SimDeviceAllocator

    with pytest.raises(AllocatorOutOfMemory, match="cannot allocate"):
        SimDeviceAllocator().allocate(2 * 2**40)


def test_ctrl_c_in_the_cli_is_one_line(monkeypatch, capsys):
    """Ctrl-C during a command prints one line and exits 130, with no traceback."""
    from workbench.app import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_cmd_propagate", interrupted)
    assert cli.main(["propagate"]) == 130
    err = capsys.readouterr().err
    assert err.strip().endswith("interrupted") and "Traceback" not in err and len(err.strip().splitlines()) == 1


DEEP = "[" * 200_000 + "]" * 200_000


@pytest.mark.parametrize("kind", ["cost model", "model config"])
def test_deeply_nested_or_binary_json_is_the_readers_error(kind, tmp_path):
    """JSON nested past the parser's recursion limit, and bytes that are not UTF-8, are the
    reader's own error (RecursionError and UnicodeDecodeError used to escape)."""
    reader, error = READERS[kind]
    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    with pytest.raises(error, match="deep"):
        reader(deep)
    binary = tmp_path / "binary.json"
    binary.write_bytes(bytes(range(256)))
    with pytest.raises(error, match="not a text file|not text"):
        reader(binary)


def test_cli_config_nested_too_deeply_is_a_usage_error(tmp_path, capsys):
    """``--config`` of deeply nested JSON is the one-line usage error, exit status 2."""
    from workbench.app import cli

    deep = tmp_path / "deep.json"
    deep.write_text(DEEP)
    assert cli.main(["walkthrough", "--config", str(deep), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
