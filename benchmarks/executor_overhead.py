"""What the executor costs per step, beside the kernels: a chain of tiny ops, small decoder
blocks (the calibration's op mix) and the tiny MoE decode step, run through a ``Session``
and eagerly through torch.

    python benchmarks/executor_overhead.py [--backend sim|cuda] [--profile 25] [--repeats 20]

For each workload it prints the median span (``RunResult.time_us``) and host wall time
per call, per step, and the same model run eagerly by torch on the same device (per
op), so the executor's own share stands out. ``--profile N`` adds the N functions with
the most own time under ``cProfile`` over the timed calls (where the host time goes).
The decoder blocks' slope over their steps is what ``workbench.calibrate`` stores as
``executor_overhead`` (plus the launch). On ``cuda`` it first prints what single runtime
calls cost the host here (median µs of 300 calls each): the floor under any step.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import workbench as wb  # noqa: E402
from workbench.models import MoEConfig, QwenMoEDecoder  # noqa: E402
from workbench.runtime import cuda_available, cuda_unavailable_reason  # noqa: E402
from workbench.machine.calibration.executor_probe import DecoderOpMix, timed_calls  # noqa: E402
from workbench.moe.strategies import strategy_variants  # noqa: E402


class TinyOpChain(torch.nn.Module):
    """``n`` additions of 1 in a row: the cheapest step there is."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.n):
            x = x + 1
        return x


def _sync(backend: str) -> None:
    if backend == "cuda":
        torch.cuda.synchronize()


def _eager_us(model: torch.nn.Module, inputs: tuple, backend: str, repeats: int) -> float:
    """Median wall µs of one eager call of ``model`` on the backend's device."""
    device = "cuda" if backend == "cuda" else "cpu"
    model = model.to(device)
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in inputs)
    walls = []
    with torch.no_grad():
        model(*args)
        for _ in range(repeats):
            _sync(backend)
            t = time.perf_counter()
            model(*args)
            _sync(backend)
            walls.append((time.perf_counter() - t) * 1e6)
    return statistics.median(walls)


def measure(name: str, model: torch.nn.Module, inputs: tuple, plan_fn, backend: str, repeats: int, profile: int) -> None:
    program = wb.capture(model, inputs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dg = plan_fn(program)
    profiler = cProfile.Profile() if profile else None
    calls = timed_calls(dg, inputs, backend, repeats, profiler=profiler)
    first, spans, walls = calls.first, calls.spans_us, calls.walls_us
    steps = len(first.timeline)
    span, wall = statistics.median(spans), statistics.median(walls)
    eager = _eager_us(model, inputs, backend, repeats)
    ops = sum(1 for n in program.graph.nodes if n.op == "call_function")
    print(f"{name:>10} {backend:>5}: {steps:4d} steps  span {span:10.1f} µs ({span / steps:6.1f}/step)  "
          f"wall {wall:10.1f} µs ({wall / steps:6.1f}/step)  eager torch {eager:9.1f} µs ({eager / max(ops, 1):6.1f}/op, {ops} ops)",
          flush=True)
    if profiler:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(profile)
        print(out.getvalue(), flush=True)


def call_costs() -> None:
    """Host µs per call of the runtime calls a step is made of (cuda only)."""
    import cupy as cp

    from workbench.kernels import CopyEngine
    from workbench.kernels.copies import pointer_kind

    engine = CopyEngine(0)
    stream = torch.cuda.Stream()
    a = torch.zeros(1, device="cuda")
    b = torch.empty_like(a)
    host = torch.zeros(1024, dtype=torch.uint8).pin_memory()
    dev = cp.zeros(1024, dtype=cp.uint8)
    rows = torch.zeros(64, 1024, dtype=torch.uint8).pin_memory()
    event = torch.cuda.Event(enable_timing=True)
    ids = torch.tensor([3, 9, 1, 60, 5, 7, 0, 2])
    calls = {
        "torch add (launch)": lambda: torch.add(a, 1),
        "torch add out=": lambda: torch.add(a, 1, out=b),
        "torch.cuda.Event.record": lambda: event.record(stream),
        "cudaPointerGetAttributes": lambda: pointer_kind(host.data_ptr()),
        "cupy Device enter/exit": lambda: _enter_exit(cp.cuda.Device(0)),
        "cudaMemcpyAsync 1 KiB h2d pinned": lambda: engine.h2d_pinned(dev.data.ptr, host.data_ptr(), 1024, stream),
        "gather 8 x 1 KiB (ids by value)": lambda: engine.gather_rows(dev.data.ptr, rows, ids, stream, method="kernel"),
        "torch.cuda.stream enter/exit": lambda: _enter_exit(torch.cuda.stream(stream)),
    }
    print("host µs per call (median of 300):")
    for name, fn in calls.items():
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(300):
            t = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t) * 1e6)
        torch.cuda.synchronize()
        print(f"  {name:<36} {statistics.median(times):7.2f}")


def _enter_exit(context) -> None:
    with context:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="sim", choices=["sim", "cuda"])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--profile", type=int, default=0, help="print the N functions with the most own time")
    args = parser.parse_args()
    if args.backend == "cuda" and not cuda_available():
        print(f"no GPU: {cuda_unavailable_reason()}")
        return 0
    if args.backend == "cuda":
        call_costs()
    on_device = lambda program: wb.propagate(wb.place(program, lambda node: "cuda:0"))  # noqa: E731
    for n in (16, 64, 256):
        measure(f"chain {n}", TinyOpChain(n).eval(), (torch.zeros(1),), on_device, args.backend, args.repeats, 0)
    for n in (2, 8):
        x = torch.randn(4, 64, generator=torch.Generator().manual_seed(1))
        measure(f"blocks {n}", DecoderOpMix(n).eval(), (x,), on_device, args.backend, args.repeats, 0)
    torch.manual_seed(0)
    moe = QwenMoEDecoder(MoEConfig.tiny()).eval()
    strategy = strategy_variants()[0]
    measure(f"moe {strategy.label}", moe, moe.example_inputs(), strategy.apply, args.backend, args.repeats, args.profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
