"""Expert prefetch: what it buys for the full-size MoE decode step, and what its reuse copy costs.

    python benchmarks/expert_prefetch.py                 # modeled figures (any machine)
    python benchmarks/expert_prefetch.py --kernel        # + the reuse-gather kernel (GPU)

Modeled (shape-only, the published 35B-A3B config, H200 cost model): tokens/s and the
overlap fraction of plain expert streaming and of expert streaming with prefetch at hit
rates 0, the tiny model's measured rate and 1, under PCIe Gen4, Gen5 and NVLink-C2C, with
the ratio prefetch / plain. Target printed with PASS/FAIL: at the measured hit rate,
prefetch beats plain streaming on NVLink-C2C (tokens/s and overlap).

With ``--kernel`` and a GPU: the reuse gather (8 of 256 full-size w1 slabs, 4 MiB each,
from pinned host memory) at hit rates 0, 4/8 and 8/8, against the plain gather kernel,
median µs over repeats timed with CUDA events; each result checked against index_select.
Target: at 8/8 hits the reuse gather is faster than the plain gather (nothing crosses).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

EXPERTS, TOP_K, SLAB = 256, 8, 2 * 512 * 2048 * 2  # full Qwen w1 slab: 4 MiB bf16


def modeled() -> bool:
    from workbench.app import walkthrough as wt
    from workbench.moe.strategies import expert_streaming

    rate = wt.measured_hit_rate()
    results = wt.full_size_results(
        strategies=[expert_streaming(), expert_streaming(prefetch=True)], prefetch_hit_rate=rate
    )
    table = wt.prefetch_sensitivity(results, hit_rates=[0.0, rate, 1.0])
    print(f"full size, shape-only, modeled on an H200; tiny model's measured hit rate {rate:.3f}")
    print(table.to_string(index=False))
    plain, measured = table.iloc[0], table.iloc[2]
    print("\nprefetch (measured hit rate) / plain, tokens/s:")
    for link in wt.LINKS:
        print(f"  {link:>11}: {measured[f'tok/s {link}'] / plain[f'tok/s {link}']:.3f}")
    ok = (
        measured["tok/s nvlink_c2c"] > plain["tok/s nvlink_c2c"]
        and measured["overlap nvlink_c2c"] > plain["overlap nvlink_c2c"]
    )
    print(f"\ntarget: prefetch beats plain streaming on NVLink-C2C at the measured rate: {'PASS' if ok else 'FAIL'}")
    return ok


def kernel(repeats: int) -> bool:
    import torch

    from workbench.runtime import cuda_available, cuda_unavailable_reason

    if not cuda_available():
        print(f"--kernel: no GPU here ({cuda_unavailable_reason()})")
        return True
    import cupy as cp

    from workbench.kernels import CopyEngine

    engine = CopyEngine(0)
    stream = cp.cuda.Stream(non_blocking=True)
    start, end = cp.cuda.Event(), cp.cuda.Event()

    def median_us(fn) -> float:
        for _ in range(2):
            fn()
        stream.synchronize()
        times = []
        for _ in range(repeats):
            start.record(stream)
            fn()
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) * 1e3)
        return statistics.median(times)

    experts = torch.empty(EXPERTS, SLAB, dtype=torch.uint8, pin_memory=True).random_(0, 256)
    chosen = torch.arange(0, 2 * TOP_K, 2)  # (8,) experts the router picked
    dst = torch.empty(TOP_K, SLAB, dtype=torch.uint8, device="cuda")
    want = experts.index_select(0, chosen).cuda()
    chosen_d = chosen.cuda()  # staged once: the timed loops launch kernels only
    plain_us = median_us(lambda: engine.gather_rows(dst.data_ptr(), experts, chosen_d, stream))
    print(f"\nreuse gather, {TOP_K} of {EXPERTS} slabs of {SLAB >> 20} MiB (µs, median of {repeats})")
    print(f"  plain gather          {plain_us:9.1f}")
    rows = {}
    for hits in (0, TOP_K // 2, TOP_K):
        hint = torch.cat([chosen[:hits], torch.arange(1, 2 * (TOP_K - hits), 2)])  # odd ids never chosen
        cached = experts.index_select(0, hint).cuda()
        hint_d = hint.cuda()
        us = median_us(lambda: engine.gather_reuse_rows(dst.data_ptr(), experts, chosen_d, cached, hint_d, stream))
        stream.synchronize()
        correct = bool(torch.equal(dst, want))
        rows[hits] = us
        print(f"  reuse, {hits}/{TOP_K} hits       {us:9.1f}   ratio to plain {us / plain_us:5.2f}   correct={correct}")
    ok = rows[TOP_K] < plain_us
    print(f"target: all hits faster than the plain gather: {'PASS' if ok else 'FAIL'}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", action="store_true", help="also time the reuse-gather kernel (GPU)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    ok = modeled()
    if args.kernel:
        ok = kernel(args.repeats) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
