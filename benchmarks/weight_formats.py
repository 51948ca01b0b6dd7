"""Full-size programs in every weight format, analysed shape-only: how long it takes and what it gives.

    python benchmarks/weight_formats.py [--formats q4_k,mxfp4,...]

Captures the published Qwen3.5-MoE 35B-A3B configuration shape-only once (no weights),
then for each weight format stores the routed experts in it (``quantize``) and times
quantize → place/propagate (all on device) → plan → estimate. Prints, per format, the
seconds of that analysis, the resident device bytes, and the modeled decode step
(eager and CUDA-graph launches on the H200 preset). The capture itself is printed
separately: it is paid once per configuration, not per format.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench import capture, quantize  # noqa: E402
from workbench.weight_formats import weight_formats  # noqa: E402
from workbench.models import MoEConfig, QwenMoEDecoder  # noqa: E402
from workbench.planning.memory_plan import plan  # noqa: E402
from workbench.runtime import estimate
from workbench.machine import CostModel  # noqa: E402
from workbench.moe.strategies import all_on_device  # noqa: E402

EXPERTS = "module:layers.*.mlp.experts"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--formats", default=",".join(weight_formats()), help="comma-separated format names")
    args = parser.parse_args()
    start = time.perf_counter()
    with torch.device("meta"):
        model = QwenMoEDecoder(MoEConfig.full())
        inputs = model.example_inputs()
    program = capture(model, inputs, shape_only=True)
    print(f"shape-only capture of the 35B-A3B decode step: {time.perf_counter() - start:.1f} s (once)")
    eager = CostModel.preset("h200")
    graph = eager.with_launch_mode("graph")
    rows, seconds = [], []
    for name in args.formats.split(","):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            memory = plan(all_on_device(skip_copies=True).apply(quantize(program, {name: [EXPERTS]})))
            eager_ms = estimate(memory, eager).span_us / 1e3
            graph_ms = estimate(memory, graph).span_us / 1e3
        took = time.perf_counter() - t0
        seconds.append(took)
        device = max(memory.constant_bytes, key=lambda d: memory.constant_bytes[d])
        rows.append({"experts format": name, "bits/weight": weight_formats()[name].bits_per_weight,
                     "analysis s": round(took, 2), "resident GiB": round(memory.constant_bytes[device] / 2**30, 2),
                     "eager ms/token": round(eager_ms, 3), "graph ms/token": round(graph_ms, 3)})
    print(pd.DataFrame(rows).to_string(index=False))
    print(f"median analysis per format: {statistics.median(seconds):.2f} s (quantize + place + propagate + plan + 2 estimates)")


if __name__ == "__main__":
    main()
