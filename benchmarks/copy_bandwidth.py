"""Copy bandwidth: our CuPy copy kernels against CuPy's and torch's own copies.

    python benchmarks/copy_bandwidth.py [--out results.csv] [--max-size 1GiB] [--repeats N]
    python benchmarks/copy_bandwidth.py --sim [--link pcie_gen5]   # the cost model's figures

Measures GB/s (10^9 bytes/s) for sizes 4 KiB … 1 GiB (powers of 4), each figure the
median over repeats timed with CUDA events on one stream:

- h2d / d2h: ours pinned, ours pageable (double-buffered staging), ``cupy.ndarray.set/get``
  from pinned and pageable numpy arrays, torch ``.to("cuda", non_blocking=True)`` (h2d)
  and ``host.copy_(dev, non_blocking=True)`` (d2h) with pinned and pageable host memory;
- gather: 8 of 256 expert slabs from pinned host memory into one device buffer: our
  gather (``auto``: the kernel for small slabs, DMA copies of runs of consecutive ids for
  big ones), each method forced (``kernel``, ``dma``), the kernel with its ids already on
  the device (as the executor has them, routed on the GPU), against a loop of per-expert
  copies (ours and torch's), for the full Qwen slab (2·512·2048 bf16 = 4 MiB) and smaller
  ones.

Then it prints the targets with PASS/FAIL:
  pinned ≥ 90% of the best pinned baseline at every size ≥ 64 MiB (each direction);
  pageable ≥ 1.5× the best plain pageable baseline at every size ≥ 64 MiB (each direction);
  gather (auto) at least as fast as the fastest per-expert loop (each slab size), and
  ≥ 2× faster for 16 KiB slabs.

Without a GPU it prints one line saying so and exits 0. The whole GPU run takes about a
minute on an H200.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.units import format_bytes  # noqa: E402

SIZES = [4 << 10 << (2 * i) for i in range(10)]  # 4 KiB, 16 KiB, ..., 1 GiB
BIG = 64 << 20
EXPERTS, TOP_K = 256, 8
SLABS = [2 * 512 * 2048 * 2, 2 * 512 * 128 * 2, 2 * 64 * 64 * 2]  # 4 MiB (full Qwen w1 slab), 256 KiB, 16 KiB


def _size(text: str) -> int:
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "b": 1}
    t = text.strip().lower()
    for unit, scale in units.items():
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * scale)
    return int(t)


def _label(n: int) -> str:
    return format_bytes(n, digits=0)  # every size here is a whole number of its unit


def _repeats(nbytes: int, cap: int) -> int:
    return max(3, min(cap, (256 << 20) // max(nbytes, 1)))


# -- simulator -------------------------------------------------------------------------------


def run_sim(args: argparse.Namespace) -> list[dict]:
    from workbench.machine import CostModel

    cm = CostModel.preset("h200", link=args.link)
    print(f"cost model {cm.name}: modeled GB/s (no GPU timing)")
    rows = []
    print(f"{'size':>10} {'h2d pinned':>11} {'h2d pageable':>13} {'d2h pinned':>11} {'d2h pageable':>13}")
    for n in [s for s in SIZES if s <= args.max_size]:
        r = {"size": n}
        for kind in ("h2d", "d2h"):
            for pinned in (True, False):
                us = cm.copy_time_us(kind, n, pinned=pinned)
                r[f"{kind}_{'pinned' if pinned else 'pageable'}"] = n / (us * 1e3)
        rows.append(r)
        print(f"{_label(n):>10} {r['h2d_pinned']:11.2f} {r['h2d_pageable']:13.2f} {r['d2h_pinned']:11.2f} {r['d2h_pageable']:13.2f}")
    print(f"\ngather of {TOP_K} of {EXPERTS} experts (modeled: one transfer vs {TOP_K} copies, each paying latency)")
    for slab in SLABS:
        one = cm.copy_time_us("h2d", TOP_K * slab)
        loop = TOP_K * cm.copy_time_us("h2d", slab)
        rows.append({"size": slab, "gather_us": one, "loop_us": loop})
        print(f"  slab {_label(slab):>9}: gather {one:9.1f} µs   loop {loop:9.1f} µs")
    return rows


# -- GPU -------------------------------------------------------------------------------------


class Timer:
    """Median milliseconds of ``fn`` between two CUDA events on ``stream``."""

    def __init__(self, cp, stream):
        self.cp, self.stream = cp, stream
        self.start, self.end = cp.cuda.Event(), cp.cuda.Event()

    def median_ms(self, fn, repeats: int, warmup: int = 2) -> float:
        for _ in range(warmup):
            fn()
        self.stream.synchronize()
        times = []
        for _ in range(repeats):
            self.start.record(self.stream)
            fn()
            self.end.record(self.stream)
            self.end.synchronize()
            times.append(self.cp.cuda.get_elapsed_time(self.start, self.end))
        return statistics.median(times)


def run_gpu(args: argparse.Namespace) -> list[dict]:
    import cupy as cp
    import numpy as np
    import torch

    from workbench.kernels import CopyEngine

    stream = cp.cuda.Stream(non_blocking=True)
    tstream = torch.cuda.ExternalStream(stream.ptr)
    engine = CopyEngine(0)
    timer = Timer(cp, stream)
    rows: list[dict] = []
    print(f"GPU: {torch.cuda.get_device_name(0)}; torch {torch.__version__}, CuPy {cp.__version__}; "
          f"staging chunk {_label(engine.chunk_bytes)}; GB/s, median of repeats")
    h2d_cols = ["ours_pinned", "ours_pageable", "cupy_set_pinned", "cupy_set_pageable", "torch_to_pinned", "torch_to_pageable"]
    d2h_cols = ["ours_pinned", "ours_pageable", "cupy_get_pinned", "cupy_get_pageable", "torch_copy_pinned", "torch_copy_pageable"]
    with cp.cuda.Device(0), stream, torch.cuda.stream(tstream):
        for direction, cols in (("h2d", h2d_cols), ("d2h", d2h_cols)):
            print(f"\n{direction:>4} {'size':>9} " + " ".join(f"{c:>19}" for c in cols))
            for n in [s for s in SIZES if s <= args.max_size]:
                pageable = torch.from_numpy(np.ones(n, dtype=np.uint8))  # touched, so no first-use page faults
                pinned = pageable.pin_memory()
                dev = cp.empty(n, dtype=cp.uint8)
                dev_t = torch.from_dlpack(dev)
                pin_np, page_np = pinned.numpy(), pageable.numpy()
                if direction == "h2d":
                    ops = {
                        "ours_pinned": lambda: engine.h2d_pinned(dev.data.ptr, pinned.data_ptr(), n, stream),
                        "ours_pageable": lambda: engine.h2d_pageable(dev.data.ptr, pageable, stream),
                        "cupy_set_pinned": lambda: dev.set(pin_np, stream=stream),
                        "cupy_set_pageable": lambda: dev.set(page_np, stream=stream),
                        "torch_to_pinned": lambda: pinned.to("cuda", non_blocking=True),
                        "torch_to_pageable": lambda: pageable.to("cuda", non_blocking=True),
                    }
                else:
                    ops = {
                        "ours_pinned": lambda: engine.d2h_pinned(pinned.data_ptr(), dev.data.ptr, n, stream),
                        "ours_pageable": lambda: engine.d2h_pageable(pageable, dev.data.ptr, stream),
                        "cupy_get_pinned": lambda: dev.get(stream=stream, out=pin_np),
                        "cupy_get_pageable": lambda: dev.get(stream=stream, out=page_np),
                        "torch_copy_pinned": lambda: pinned.copy_(dev_t, non_blocking=True),
                        "torch_copy_pageable": lambda: pageable.copy_(dev_t, non_blocking=True),
                    }
                row = {"direction": direction, "size": n}
                for name, fn in ops.items():
                    ms = timer.median_ms(fn, _repeats(n, args.repeats))
                    row[name] = n / (ms * 1e6)
                rows.append(row)
                print(f"{'':>4} {_label(n):>9} " + " ".join(f"{row[c]:19.2f}" for c in cols))
                del pageable, pinned, dev, dev_t, pin_np, page_np
        print(f"\ngather {TOP_K} of {EXPERTS} experts from pinned host memory (µs, median)")
        gen = np.random.default_rng(0)
        for slab in SLABS:
            experts = torch.empty(EXPERTS, slab, dtype=torch.uint8, pin_memory=True)
            experts.random_(0, 256)
            idx = sorted(gen.choice(EXPERTS, TOP_K, replace=False).tolist())
            dst = cp.empty(TOP_K * slab, dtype=cp.uint8)
            dst_t = torch.from_dlpack(dst).view(TOP_K, slab)
            idx_t = torch.tensor(idx)
            base = experts.data_ptr()
            idx_dev = cp.asarray(idx, dtype=cp.int64)
            ops = {
                "gather_auto": lambda: engine.gather_rows(dst.data.ptr, experts, idx_t, stream),
                "gather_kernel": lambda: engine.gather_rows(dst.data.ptr, experts, idx_t, stream, method="kernel"),
                "gather_dma": lambda: engine.gather_rows(dst.data.ptr, experts, idx_t, stream, method="dma"),
                "gather_device_ids": lambda: engine.gather_rows(dst.data.ptr, experts, idx_dev, stream),
                "loop_ours": lambda: [
                    engine.h2d_pinned(dst.data.ptr + k * slab, base + e * slab, slab, stream) for k, e in enumerate(idx)
                ],
                "loop_torch": lambda: [dst_t[k].copy_(experts[e], non_blocking=True) for k, e in enumerate(idx)],
            }
            row = {"direction": "gather", "size": slab}
            for name, fn in ops.items():
                row[name] = timer.median_ms(fn, 20) * 1e3
            expected = experts.index_select(0, idx_t).reshape(-1).numpy()
            correct = True
            for method in ("kernel", "dma"):
                dst.fill(0)
                engine.gather_rows(dst.data.ptr, experts, idx_t, stream, method=method)
                stream.synchronize()
                correct = correct and bool(np.array_equal(cp.asnumpy(dst), expected))
            row["gather_correct"] = correct
            rows.append(row)
            print(f"  slab {_label(slab):>9}: auto {row['gather_auto']:8.1f}  kernel {row['gather_kernel']:8.1f}  "
                  f"dma {row['gather_dma']:8.1f}  device ids {row['gather_device_ids']:8.1f}  "
                  f"loop(ours) {row['loop_ours']:8.1f}  loop(torch) {row['loop_torch']:8.1f}  correct={row['gather_correct']}")
            del experts, dst, dst_t, idx_dev
    _targets(rows)
    return rows


def _targets(rows: list[dict]) -> None:
    print("\ntargets")
    for direction, ours, pinned_base, page_base in (
        ("h2d", "ours", ["cupy_set_pinned", "torch_to_pinned"], ["cupy_set_pageable", "torch_to_pageable"]),
        ("d2h", "ours", ["cupy_get_pinned", "torch_copy_pinned"], ["cupy_get_pageable", "torch_copy_pageable"]),
    ):
        big = [r for r in rows if r.get("direction") == direction and r["size"] >= BIG]
        if not big:
            print(f"  {direction}: no sizes >= {_label(BIG)} measured")
            continue
        pinned_ratio = min(r[f"{ours}_pinned"] / max(r[c] for c in pinned_base) for r in big)
        page_ratio = min(r[f"{ours}_pageable"] / max(r[c] for c in page_base) for r in big)
        print(f"  {direction} pinned   >= 0.90 x best pinned baseline (sizes >= 64 MiB): worst {pinned_ratio:.2f}x  "
              f"{'PASS' if pinned_ratio >= 0.9 else 'FAIL'}")
        print(f"  {direction} pageable >= 1.50 x best plain pageable   (sizes >= 64 MiB): worst {page_ratio:.2f}x  "
              f"{'PASS' if page_ratio >= 1.5 else 'FAIL'}")
    for r in (r for r in rows if r.get("direction") == "gather"):
        loop = min(r["loop_ours"], r["loop_torch"])
        need = 2.0 if r["size"] <= 16 << 10 else 1.0
        ok = loop / r["gather_auto"] >= need and r["gather_correct"]
        print(f"  gather {TOP_K}/{EXPERTS}, slab {_label(r['size'])}: {r['gather_auto']:.1f} µs vs best loop "
              f"{loop:.1f} µs ({loop / r['gather_auto']:.2f}x, need >= {need:.1f}x)  {'PASS' if ok else 'FAIL'}")


def _write_csv(path: str, rows: list[dict]) -> None:
    keys: list[str] = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the figures to this CSV file")
    parser.add_argument("--sim", action="store_true", help="print the cost model's figures instead of measuring")
    parser.add_argument("--link", default="pcie_gen5", help="link preset for --sim (pcie_gen4, pcie_gen5, nvlink_c2c)")
    parser.add_argument("--max-size", type=_size, default=1 << 30, help="largest copy size (default 1GiB)")
    parser.add_argument("--repeats", type=int, default=20, help="most repeats per point (at least 3)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.sim:
        rows = run_sim(args)
    else:
        from workbench.runtime import cuda_available, cuda_unavailable_reason

        if not cuda_available():
            print(f"copy_bandwidth: no GPU to measure on ({cuda_unavailable_reason()}); use --sim for modeled figures")
            return 0
        rows = run_gpu(args)
    if args.out:
        _write_csv(args.out, rows)
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
