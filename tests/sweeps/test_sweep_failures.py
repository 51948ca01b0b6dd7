"""A failing point never loses a sweep: the finished points are returned (and written as
they finish to ``out=``), each failed point is named with its error, a re-run skips what
is done; saved points that are not a sweep's are refused."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import Executor, ProcessPoolExecutor

import numpy as np
import pandas as pd
import pytest
import torch

from workbench.models import MoEConfig
from workbench.sweeps import InlineExecutor, SweepError, SweepResult, SweepWarning, expand, sweep
from workbench.sweeps.result import read_points

TINY = MoEConfig.tiny()
GRID = {"all_on_device": {}, "experts_on_host": {}, "partial_offload": {"n_host_layers": [1, 3]}}
LINKS = ("pcie_gen4", "nvlink_c2c")
BUDGETS = (0.0004, 0.0014, 1.0)
LABELS = [s.label for s in expand(GRID)]


class _Failing(Executor):
    """Runs tasks inline, but the task of spec ``bad`` raises; counts what it ran."""

    def __init__(self, bad=None):
        self.bad, self.inline, self.ran = bad, InlineExecutor(), []

    def submit(self, fn, /, *args, **kwargs):
        task = args[0]
        self.ran.append(task.spec.label)
        if task.spec.label == self.bad:
            return self.inline.submit(_raise, task.spec.label)
        return self.inline.submit(fn, *args, **kwargs)


def _raise(label):
    raise RuntimeError(f"planted failure in {label}")


def _kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


class _KillingPool(Executor):
    """One spawned worker process; the third task submitted kills it instead of running."""

    def __init__(self):
        self.pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))
        self.count = 0

    def submit(self, fn, /, *args, **kwargs):
        self.count += 1
        if self.count == 3:
            return self.pool.submit(_kill_self)
        return self.pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait=True, **kwargs):
        self.pool.shutdown(wait=wait)


def _norm(frame: pd.DataFrame) -> pd.DataFrame:
    """A table as it reads back from CSV: empty text and None both missing."""
    frame = frame.reset_index(drop=True).replace({"": None}).astype(object)
    return frame.where(frame.notna(), None)


@pytest.fixture(scope="module")
def reference():
    return sweep(TINY, BUDGETS, LINKS, GRID, InlineExecutor())


def test_a_raising_point_keeps_the_others_and_a_rerun_finishes(reference, tmp_path):
    """One task raises: the sweep warns, returns every other point (equal to the full
    sweep's), names the failed point and its error, and has written the finished points to
    ``out``; a re-run with the same ``out`` runs only the failed point and gives the full
    result."""
    out = tmp_path / "points.csv"
    bad = LABELS[1]
    executor = _Failing(bad)
    with pytest.warns(SweepWarning, match="1 of 4 sweep points failed"):
        partial = sweep(TINY, BUDGETS, LINKS, GRID, executor, out=out)
    assert partial.failed["label"].tolist() == [bad]
    assert "planted failure" in partial.failed["error"].iloc[0]
    kept = reference.points[reference.points["label"] != bad].reset_index(drop=True)
    pd.testing.assert_frame_equal(partial.points.reset_index(drop=True), kept)
    assert set(read_points(out)["label"]) == set(LABELS) - {bad}

    again = _Failing()
    full = sweep(TINY, BUDGETS, LINKS, GRID, again, out=out)
    assert again.ran == [bad]
    assert full.failed.empty
    pd.testing.assert_frame_equal(_norm(full.points), _norm(reference.points), check_dtype=False)
    pd.testing.assert_frame_equal(_norm(full.best), _norm(reference.best), check_dtype=False)


def test_a_killed_worker_keeps_the_finished_points(reference):
    """A process-pool worker killed mid-sweep (SIGKILL) breaks the pool: the two points that
    finished before are returned, the rest are named as failed with BrokenProcessPool."""
    pool = _KillingPool()
    try:
        with pytest.warns(SweepWarning):
            result = sweep(TINY, BUDGETS, LINKS, GRID, pool)
    finally:
        pool.shutdown()
    assert sorted(result.points["label"].unique()) == sorted(LABELS[:2])
    assert result.failed["label"].tolist() == LABELS[2:]
    assert all("BrokenProcessPool" in e for e in result.failed["error"])


@pytest.mark.parametrize(
    "damage,column",
    [
        (lambda p: p.assign(device_bytes=p["device_bytes"].astype(object).where(p.index != 0, "many")), "device_bytes"),
        (lambda p: p.assign(device_bytes=p["device_bytes"].where(p.index != 0, -1)), "device_bytes"),
        (lambda p: p.assign(**{"tok/s": np.nan}), "tok/s"),
    ],
    ids=["text size", "negative size", "all-NaN throughput"],
)
def test_points_that_are_not_a_sweeps_are_refused(reference, damage, column):
    """Text or negative device_bytes (a negative size fits every budget) and missing
    throughput are refused by from_points, never ranked."""
    with pytest.raises(SweepError, match=column):
        SweepResult.from_points(damage(reference.points.copy()), BUDGETS, LINKS, "saved")


def test_a_half_written_points_file_is_refused(reference, tmp_path):
    """A CSV cut off mid-row is refused with the damaged rows named."""
    path = tmp_path / "points.csv"
    text = reference.points.to_csv(index=False)
    path.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 40])
    with pytest.raises(SweepError, match="half-written"):
        read_points(path)


@pytest.mark.parametrize("budget", [10**400, float("inf"), float("nan")])
def test_budgets_beyond_any_device_are_refused_before_the_work(budget):
    """A budget no device has (10**400 GiB would overflow a float after the work) is refused
    up front."""
    with pytest.raises(SweepError, match="budgets"):
        sweep(TINY, (1.0, budget), LINKS, GRID, InlineExecutor())


def test_a_capture_that_lifts_a_traced_value_as_a_fake_constant_is_made_again(monkeypatch):
    """The Dask workers' intermittent failure: a shape-only capture raising the
    fake-constant ``lifted_tensor_0`` error is made again (the capture is deterministic)
    and the sweep's program is the real one; any other capture error is raised at once."""
    from workbench.capture import CaptureError
    from workbench.sweeps import ConfigSource, source

    real = source.capture
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise CaptureError(
                "torch.export could not capture QwenMoEDecoder: AssertionError: Found a fake tensor in the "
                "exported program constant's list: lifted_tensor_0"
            )
        return real(*args, **kwargs)

    monkeypatch.setattr(source, "capture", flaky)
    monkeypatch.setattr(source, "_CACHE", {})
    program = ConfigSource(TINY).program(False)
    assert len(calls) == 2 and program.shape_only and program.num_ops() > 0

    def broken(*args, **kwargs):
        calls.append(1)
        raise CaptureError("torch.export could not capture QwenMoEDecoder: some other error")

    calls.clear()
    monkeypatch.setattr(source, "capture", broken)
    monkeypatch.setattr(source, "_CACHE", {})
    with pytest.raises(CaptureError, match="some other error"):
        ConfigSource(TINY).program(False)
    assert len(calls) == 1


class FrameHoldingSampler:
    """Like Dask's worker profiler, but holding each frame longer: every millisecond it
    takes the watched thread's current frame and keeps it for ``hold`` seconds."""

    def __init__(self, thread_id: int, hold: float = 0.005) -> None:
        self.thread_id, self.hold = thread_id, hold
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        held: list = []
        while not self._stop.wait(0.001):
            frame = sys._current_frames().get(self.thread_id)
            if frame is not None:
                held.append((time.perf_counter() + self.hold, frame))
                self.samples += 1
            del frame
            while held and held[0][0] <= time.perf_counter():
                held.pop(0)

    def __enter__(self) -> "FrameHoldingSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@pytest.mark.slow
@pytest.mark.parametrize("hinted", [False, True])
def test_capture_under_a_frame_holding_profiler_lists_no_fake_constant(monkeypatch, hinted):
    """The Dask workers' intermittent failure, made certain: Dask's profiler holds the
    frames of the task thread it samples, and torch.export in that thread lifted what
    ``torch.arange`` returned as a fake constant. With a sampler holding the calling
    thread's frames throughout, one
    capture attempt (no retry) gives the model's program: its constants are the
    model's own, none lifted from inside ``forward`` (the tiny decoder calls
    ``torch.arange`` in its rotary tables and its attention mask)."""
    from workbench.sweeps import ConfigSource, source

    monkeypatch.setattr(source, "CAPTURE_ATTEMPTS", 1)
    monkeypatch.setattr(source, "_CACHE", {})
    with FrameHoldingSampler(threading.get_ident()) as sampler:
        program = ConfigSource(TINY).program(hinted)
    assert sampler.samples > 10  # the sampler really watched the capture
    lifted = [name for name in program.exported.constants if "lifted_tensor" in name]
    assert lifted == []
    fake = [n for n, t in program.exported.constants.items() if isinstance(t, torch._subclasses.FakeTensor)]
    assert fake == []
