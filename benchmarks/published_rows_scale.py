"""Reading a large table of published runs: time against rows, to show it is linear.

    python benchmarks/published_rows_scale.py [--rows 1000,10000,100000]

The shipped table's rows repeated with ids of their own, as a ``DataFrame`` (a file is
capped at 16 MiB, a table in memory is not), read through the one validation path a fit
and a hold-out use: every row checked, its parts read from its text. Prints the seconds
and microseconds per row for each size, and the ratio of the largest size's time per row
to the smallest's (1 when linear). Target: 100,000 rows in at most 10 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.machine.runtime_profiles import runtime_profiles  # noqa: E402
from workbench.speed.published_runs import published_decode_runs, read_runs  # noqa: E402


def _read(table: pd.DataFrame) -> int:
    return len(read_runs(table, profiles=runtime_profiles()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1000,10000,100000", help="table sizes, comma-separated")
    args = parser.parse_args()
    sizes = [int(n) for n in args.rows.split(",")]
    shipped = published_decode_runs().astype(str)
    per_row = []
    for n in sizes:
        table = pd.concat([shipped] * (n // len(shipped) + 1), ignore_index=True).head(n)
        table["id"] = [f"row{i}" for i in range(n)]
        started = time.perf_counter()
        read = _read(table)
        seconds = time.perf_counter() - started
        per_row.append(seconds / n)
        print(f"{n:>8} rows: {seconds:7.2f} s  ({seconds / n * 1e6:6.1f} µs per row, {read} runs)", flush=True)
    print(f"time per row, largest size / smallest: {per_row[-1] / per_row[0]:.2f} (1 when linear)")


if __name__ == "__main__":
    main()
