"""Calibrate the cost model on the machine at hand and print what was measured.

    python benchmarks/calibrate.py [--backend cuda] [--out FOLDER] [--name NAME] [--quick]
    python benchmarks/calibrate.py --backend sim --out /tmp/x   # the sim measured by the same code

Runs ``workbench.calibrate`` (copies per path and size, launches, graph replay, kernels
back to back, device copies, matmuls per dtype, host ops), writes the measured preset
``<FOLDER>/<name>.json`` (default folder: the repository's ``data/measured``), and prints
each fit (intercept, rate, residual) and the fitted figures beside the datasheet preset
of the same GPU where one exists. Without a GPU, ``--backend cuda`` prints one line and
exits 0. The default plan takes well under a minute on an H200; ``--quick`` measures
fewer sizes.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.runtime import cuda_available, cuda_unavailable_reason
from workbench.machine import CostModel  # noqa: E402
from workbench.machine.calibration.calibrate import CalibrationPlan, calibration_table, measure  # noqa: E402

QUICK = CalibrationPlan(
    copy_sizes=(64 << 10, 1 << 20, 16 << 20, 64 << 20),
    repeats=5,
    launch_counts=(128, 512),
    graph_kernels=(32, 128),
    kernel_copy_sizes=(64 << 20, 256 << 20),
    matmul_sizes=(2048, 4096),
    host_copy_sizes=(16 << 20, 64 << 20),
)


def _datasheet(gpu_name: str) -> list[CostModel]:
    """The datasheet preset of the measured GPU, where the workbench has one."""
    name = gpu_name.lower()
    for key, preset in (("h200", "h200"), ("a100-sxm4-80gb", "a100_80gb"), ("a100-sxm4-40gb", "a100_40gb")):
        if key in name:
            return [CostModel.preset(preset)]
    return []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["cuda", "sim"], default="cuda")
    parser.add_argument("--out", help="folder for the measured preset (default: the repository's data/measured)")
    parser.add_argument("--name", help="preset name (default: the GPU's, e.g. h200; sim: sim)")
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    args = parser.parse_args(argv)
    if args.backend == "cuda" and not cuda_available():
        print(f"calibrate: no GPU to measure on ({cuda_unavailable_reason()}); try --backend sim")
        return 0
    started = time.perf_counter()
    result = measure(args.backend, plan=QUICK if args.quick else None, name=args.name)
    path = result.save(args.out)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_columns", 30)
    print(f"measured {result.machine.get('gpu', result.backend)} in {time.perf_counter() - started:.1f} s; wrote {path}")
    for key in ("nvidia_smi_csv", "nvidia_smi_max_csv", "cuda_runtime", "cuda_driver", "torch", "cupy"):
        if key in result.machine:
            print(f"{key}: {result.machine[key]}")
    fits = pd.DataFrame(
        [
            {"probe": k, "points": f.points, "intercept µs": round(f.intercept_s * 1e6, 3),
             "rate /s": f"{f.rate:.4g}", "rms rel. residual": round(f.rms_relative_residual, 4)}
            for k, f in result.fits.items()
        ]
    )  # fmt: skip
    print("\n# fits: t = intercept + work / rate (work: bytes, kernels or FLOPs)")
    print(fits.to_string(index=False))
    if result.not_measured:
        print(f"kept from the base model (not measurable here): {', '.join(result.not_measured)}")
    print("\n# measured figures (and the datasheet preset of this GPU, where there is one)")
    print(calibration_table([result], _datasheet(str(result.machine.get("gpu", "")))).T.to_string(header=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
