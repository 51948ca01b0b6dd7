"""The main job's wall time, on a quiet machine and with other work running beside it.

    python benchmarks/walkthrough_time.py [--runs 3] [--busy 0 1] [--target 120]

Runs ``python -m workbench walkthrough`` (the default: tiny model on sim, the full-size
analysis, the capacity sweep of ``sweeps.quick_grid``) ``--runs`` times for each count of
busy processes in ``--busy``: each busy process spins one core flat out for as long as
the walkthrough runs, standing in for the other work of a shared machine (a test suite,
a notebook). Prints each run's seconds as the walkthrough reports them (from its first
table to its last file written; the interpreter's start and imports are timed apart),
the median per load, and PASS/FAIL against ``--target`` seconds for the median of the
most loaded setting. The walkthrough's outputs of every run must be byte-identical.
"""

from __future__ import annotations

import argparse
import filecmp
import multiprocessing
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _spin(stop: "multiprocessing.synchronize.Event") -> None:
    x = 0
    while not stop.is_set():
        for _ in range(100_000):
            x = (x * 1103515245 + 12345) & 0xFFFFFFFF


def _run_once(out: Path) -> tuple[float, float]:
    """(walkthrough seconds as it reports them, whole command seconds)."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "workbench", "walkthrough", "--out", str(out), "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )
    whole = time.perf_counter() - start
    found = re.search(r"to \S+ in ([0-9.]+) s", done.stdout)
    if found is None:
        raise SystemExit(f"the walkthrough printed no time:\n{done.stdout[-2000:]}")
    return float(found.group(1)), whole


def _same_outputs(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    if names != sorted(p.name for p in b.iterdir()):
        return False
    match, mismatch, errors = filecmp.cmpfiles(a, b, [n for n in names if not n.endswith(".png")], shallow=False)
    return not mismatch and not errors


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per load setting")
    parser.add_argument("--busy", type=int, nargs="+", default=[0, 1], help="busy processes beside the walkthrough (one: a test suite beside it)")
    parser.add_argument("--target", type=float, default=120.0, help="seconds the most loaded median must stay under")
    args = parser.parse_args()
    medians: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        first: Path | None = None
        for busy in args.busy:
            times = []
            for i in range(args.runs):
                stop = multiprocessing.Event()
                spinners = [multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(busy)]
                for p in spinners:
                    p.start()
                out = Path(tmp) / f"busy{busy}_run{i}"
                try:
                    seconds, whole = _run_once(out)
                finally:
                    stop.set()
                    for p in spinners:
                        p.join()
                if first is None:
                    first = out
                elif not _same_outputs(first, out):
                    print(f"FAIL: run {i} with {busy} busy processes wrote different outputs than the first run")
                    return 1
                times.append(seconds)
                print(f"busy={busy} run {i}: walkthrough {seconds:.1f} s (command {whole:.1f} s)", flush=True)
            medians[busy] = statistics.median(times)
            print(f"busy={busy}: median {medians[busy]:.1f} s over {len(times)} runs")
    if 0 in medians:
        for busy, median in medians.items():
            if busy:
                print(f"busy={busy} / quiet: {median / medians[0]:.2f}x")
    worst = medians[max(medians)]
    verdict = "PASS" if worst <= args.target else "FAIL"
    print(f"{verdict}: median with {max(medians)} busy processes {worst:.1f} s (target <= {args.target:.0f} s)")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
