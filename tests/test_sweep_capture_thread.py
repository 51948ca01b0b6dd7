"""A sweep's shape-only capture is immune to a sampling profiler holding the frames of
the thread that asks for it (``workbench.sweeps.source``, rule 3): Dask's worker
profiler does that to its task threads, and torch.export, run in such a thread, lifts
what ``torch.arange`` returns as a fake constant (``lifted_tensor_N``)."""

import dataclasses
import sys
import threading
import time

import pytest
import torch

import workbench.sweeps.source as source
from workbench.models import MoEConfig
from workbench.sweeps import ModelSource


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
    """Property: with a sampler holding the calling thread's frames throughout, one
    capture attempt (no retry) gives the model's program: its constants are the
    model's own, none lifted from inside ``forward`` (the tiny decoder calls
    ``torch.arange`` in its rotary tables and its attention mask)."""
    monkeypatch.setattr(source, "CAPTURE_ATTEMPTS", 1)
    config = dataclasses.replace(MoEConfig.tiny(), max_seq_len=48)  # a recipe no other test has captured
    with FrameHoldingSampler(threading.get_ident()) as sampler:
        program = ModelSource(config).program(hinted)
    assert sampler.samples > 10  # the sampler really watched the capture
    lifted = [name for name in program.exported.constants if "lifted_tensor" in name]
    assert lifted == []
    fake = [n for n, t in program.exported.constants.items() if isinstance(t, torch._subclasses.FakeTensor)]
    assert fake == []
