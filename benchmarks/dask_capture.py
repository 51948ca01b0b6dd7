"""Shape-only captures in Dask workers: how many list a fake constant (``lifted_tensor_N``).

A Dask worker's profiler samples its task threads' stacks and holds the frames it
took; torch.export, run in a sampled thread, then loses track of what ``torch.arange``
returns and lifts it as a fake constant (``workbench.sweeps.source``, rule 3). Each
task captures the tiny MoE decoder once, either in the task thread itself (as sweeps
did before) or through ``ConfigSource`` (which captures in a thread of its own), and
counts the captures that fail so.

The profiler holds the frames while it describes them; describing a frame reads its
source line, from disk the first time (``linecache``), and the read lets the task
thread run on while its frames are held. That is why fresh workers fail and warm ones
rarely do. ``--interval``/``--cycle`` set the profiler's sampling period and how often
it describes frames anew (Dask's defaults: 10ms, 1000ms); ``--cold`` empties the
line cache every 5 ms in each task, so every description reads from disk again.

    python benchmarks/dask_capture.py --tasks 6 --interval 1ms --cycle 10ms --cold
"""

from __future__ import annotations

import argparse
import dataclasses
import linecache
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import dask
import torch
from distributed import Client, LocalCluster

from workbench.capture import CaptureError, capture
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.sweeps.source import ConfigSource


def _config(i: int) -> MoEConfig:
    # a distinct config per task, so no worker reuses a cached capture
    return dataclasses.replace(MoEConfig.tiny(), max_seq_len=64 + i)


@contextmanager
def _cold_linecache(cold: bool) -> Iterator[None]:
    """With ``cold``, the line cache emptied every 5 ms while the block runs."""
    done = threading.Event()

    def clear() -> None:
        while not done.wait(0.005):
            linecache.clearcache()

    clearer = threading.Thread(target=clear, daemon=True)
    if cold:
        clearer.start()
    try:
        yield
    finally:
        done.set()


def in_task_thread(i: int, cold: bool) -> str:
    """Capture as sweeps did before: in the thread the worker runs the task in."""
    with torch.device("meta"):
        model = QwenMoEDecoder(_config(i))
        inputs = model.example_inputs()
    try:
        with _cold_linecache(cold):
            capture(model, inputs, shape_only=True)
        return "ok"
    except CaptureError as exc:
        return "fake constant" if "fake tensor" in str(exc).lower() else f"other: {exc}"


def through_source(i: int, cold: bool) -> str:
    """Capture through ``ConfigSource`` with a single attempt (no retry)."""
    import workbench.sweeps.source as source

    source.CAPTURE_ATTEMPTS = 1
    try:
        with _cold_linecache(cold):
            ConfigSource(_config(i)).program(False)
        return "ok"
    except CaptureError as exc:
        return "fake constant" if "fake tensor" in str(exc).lower() else f"other: {exc}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=12, help="captures per arm")
    parser.add_argument("--interval", default="10ms", help="the worker profiler's sampling period")
    parser.add_argument("--cycle", default="1000ms", help="how often the profiler starts a new profile")
    parser.add_argument("--cold", action="store_true", help="empty the line cache every 5 ms in each task")
    args = parser.parse_args()
    settings = {"distributed.worker.profile.interval": args.interval, "distributed.worker.profile.cycle": args.cycle}
    with dask.config.set(settings):
        with LocalCluster(n_workers=2, threads_per_worker=1, dashboard_address=None) as cluster, Client(cluster) as client:
            for name, fn, offset in (("task thread", in_task_thread, 0), ("ConfigSource", through_source, 10_000)):
                start = time.perf_counter()
                futures = [client.submit(fn, offset + i, args.cold, pure=False) for i in range(args.tasks)]
                outcomes = client.gather(futures)
                failed = sum(o != "ok" for o in outcomes)
                others = sorted({o for o in outcomes if o.startswith("other")})
                print(
                    f"{name:12s} profiler {args.interval}/{args.cycle}{' cold' if args.cold else ''}: {failed} of {args.tasks} captures failed "
                    f"({time.perf_counter() - start:.0f} s){'; ' + '; '.join(others) if others else ''}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
