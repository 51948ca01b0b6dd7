"""Modeled vs published decode times for the Qwen3.5-MoE 35B-A3B anchors.

    python benchmarks/anchors.py [--out anchors.csv]

Captures the published 35B-A3B configuration shape-only (no weights), plans it all on
device, and prints:

- the anchors table (``workbench.app.anchors.anchors_table``): published ms/token, modeled
  ms/token and their ratio, on the A100 80 GB preset the anchors are modeled with, then
  on the A100 40 GB preset (the PR does not say which A100) and on the H200 preset (no
  published H200 figure: what the model predicts);
- the same anchors on the A100 80 GB preset with every weight int4 (group 128), the format
  ExecuTorch ran: what the bf16 match rests on;
- what the modeled step is made of: kernels, bytes touched, FLOPs, and the two terms of
  the usual decode fit, n_kernels × per-kernel cost + bytes / bandwidth;
- the published anchors the built-in model cannot express, with the reason.

Takes about two minutes on a laptop CPU (the two shape-only captures dominate).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.csv_files import write_csv  # noqa: E402
from workbench.app.anchors import ANCHORS, UNMODELED_ANCHORS, anchors_table, full_size_plan  # noqa: E402
from workbench.machine import CostModel  # noqa: E402
from workbench.runtime.executor import estimate  # noqa: E402


#: ExecuTorch's qwen3_5_moe README: linear layers and experts exported 4-bit (``--qlinear 4w``), the
#: prequantized HQQ checkpoint made with ``--qlinear-group-size 128`` (the embedding, 8-bit there,
#: is int4 here too: one row of it is read per token).
INT4 = {"int4_g128": ["module:*"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", help="write the anchors table (A100 80 GB rows) to this CSV file")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    plan = full_size_plan()
    print(f"captured and planned the 35B-A3B decode step shape-only in {time.perf_counter() - started:.1f} s")
    pd.set_option("display.width", 220)
    pd.set_option("display.max_colwidth", 70)

    table = anchors_table(plan)
    print("\n# anchors, modeled on the preset they are checked against")
    print(table.to_string(index=False))
    if args.out:
        write_csv(table, args.out, "an anchors table")
        print(f"wrote {args.out}")
    for preset in ("a100_40gb", "h200"):
        other = anchors_table(plan, anchors=[dataclasses.replace(a, preset=preset) for a in ANCHORS])
        print(f"\n# the same anchors modeled on the {preset} preset")
        print(other[["anchor", "published ms/token", "modeled ms/token", "ratio"]].to_string(index=False))

    quantized = full_size_plan(formats=INT4)
    int4 = anchors_table(quantized)
    print("\n# the same anchors on the int4 weights ExecuTorch ran (every weight int4_g128)")
    print(int4[["anchor", "published ms/token", "modeled ms/token", "ratio"]].to_string(index=False))

    print("\n# what the modeled step is made of (A100 80 GB preset)")
    model = CostModel.preset("a100_80gb", link="pcie_gen4")
    timeline = estimate(plan, model)
    kernels = [e for e in timeline if e.kind == "compute"]
    touched = sum(e.nbytes for e in kernels)
    flops = sum(e.flops for e in kernels)
    memory_ms = touched / model.device_memory_bandwidth * 1e3
    rows = []
    for mode, per_kernel in (("eager", model.launch_overhead), ("graph", model.kernel_gap + model.min_kernel_time)):
        modeled = estimate(plan, model.with_launch_mode(mode)).span_us / 1e3
        two_term = len(kernels) * per_kernel * 1e3 + memory_ms
        rows.append({"launch mode": mode, "per-kernel µs": round(per_kernel * 1e6, 2),
                     "n_kernels × per-kernel ms": round(len(kernels) * per_kernel * 1e3, 3),
                     "bytes / bandwidth ms": round(memory_ms, 3), "two-term sum ms": round(two_term, 3),
                     "scheduled ms": round(modeled, 3)})  # fmt: skip
    print(f"{len(kernels)} kernels, {touched / 1e9:.2f} GB touched, {flops / 1e9:.2f} GFLOP per token")
    print(pd.DataFrame(rows).to_string(index=False))
    print("(eager: the scheduled time sits near max(issue, device) per kernel, below the two-term sum, because the"
          "\n host issues ahead while long kernels run; graph: every kernel pays the floor or its roofline, one after"
          "\n the other)")  # fmt: skip

    print("\n# published anchors not modeled")
    for a in UNMODELED_ANCHORS:
        print(f"- {a.anchor} on {a.hardware}: {a.published_ms:.2f} ms/token ({a.source}). Not modeled: {a.reason}.")
    print(f"\ndone in {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
