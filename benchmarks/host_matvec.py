"""The host's matvec rate per weight format, and PyTorch's eager host cost per op, measured
here with torch.

    python benchmarks/host_matvec.py [--threads 1] [--size 4096]

Prints, one thread by default (rates are per core, as ``data/runtimes/host_matvec.csv``
holds them):

- weights per second that one token's matvec multiplies against a ``size × size`` weight
  in each format torch has a CPU kernel for: fp32 and bf16 ``linear``, int8 weights with
  a per-row scale (``torch._weight_int8pack_mm``, the rate of q8_0-like formats), 4-bit
  weights in groups of 128 (``torch._weight_int4pack_mm_for_cpu``); median of 20;
- the FP32 FLOP rate of one core (a 1024³ matmul): the ``core_flops`` a rate is scaled by;
- the host time of one tiny eager op (``add`` on 8 elements, in a Python loop): the
  framework's own cost per op, beside the CUDA launch a GPU op adds to it.

The ``torch`` rows of ``data/runtimes/host_matvec.csv`` are this script's figures on the
project's build machine (a 2-core x86 cloud VM); run it on yours and compare.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch


def _median_s(fn: Callable[[], object], repeats: int = 20) -> float:
    fn()
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--size", type=int, default=4096)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n = args.size
    x = torch.randn(1, n)
    rates = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        w, xx = torch.randn(n, n, dtype=dtype), x.to(dtype)
        rates[name] = n * n / _median_s(lambda: torch.nn.functional.linear(xx, w))
    codes, scales = torch.randint(-128, 127, (n, n), dtype=torch.int8), torch.rand(n, dtype=torch.bfloat16)
    xb = x.to(torch.bfloat16)
    rates["q8_0 (int8 per-row scale)"] = n * n / _median_s(lambda: torch._weight_int8pack_mm(xb, codes, scales))
    packed = torch._convert_weight_to_int4pack_for_cpu(torch.randint(0, 16, (n, n), dtype=torch.int32), 2)
    scales_zeros = torch.rand(n // 128, n, 2, dtype=torch.bfloat16)
    rates["int4_g128"] = n * n / _median_s(lambda: torch._weight_int4pack_mm_for_cpu(xb, packed, 128, scales_zeros))
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    flops = 2 * 1024**3 / _median_s(lambda: a @ b, repeats=10)
    tiny = torch.zeros(8)
    per_op = _median_s(lambda: [tiny.add(1) for _ in range(1000)], repeats=11) / 1000
    print(f"threads {args.threads}, weight {n} x {n}, one token")
    for name, rate in rates.items():
        print(f"  {name:<28} {rate / 1e9:8.2f} G weights/s")
    print(f"  one core's fp32 matmul      {flops / 1e9:8.1f} GFLOP/s (core_flops)")
    print(f"  one tiny eager op           {per_op * 1e6:8.1f} us of host time")


if __name__ == "__main__":
    main()
