"""Runtime-profile ``base`` chains: the time to load a table with a chain of growing depth.

    python benchmarks/profile_chains.py [--depths 750,1500,3000]

Each table is the shipped one with a chain of derived profiles appended (each the next
version of the one before). Chains deeper than the stated limit are refused, so this times
the refusal, which must still read the whole chain: it prints seconds per depth and the
ratio of time per level at the deepest to the shallowest (1 when linear; a quadratic
resolution would give the ratio of the depths, a cubic one its square).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from workbench.machine.runtime_profiles import RuntimeProfileError, runtime_profiles, runtime_profiles_path  # noqa: E402


def _chain(depth: int) -> str:
    return "".join(f"v{i},names,v build {i},t\nv{i},base,{'imp' if i == 1 else f'v{i - 1}'},t\n" for i in range(1, depth + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--depths", default="750,1500,3000", help="chain depths, comma-separated")
    args = parser.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    per_level = []
    with tempfile.TemporaryDirectory() as folder:
        for depth in depths:
            path = Path(folder) / f"profiles_{depth}.csv"
            path.write_text(runtime_profiles_path().read_text() + _chain(depth))
            started = time.perf_counter()
            try:
                runtime_profiles(path)
                outcome = "loaded"
            except RuntimeProfileError as exc:
                outcome = "refused: " + str(exc).split("; ")[0][-70:]
            seconds = time.perf_counter() - started
            per_level.append(seconds / depth)
            print(f"depth {depth:>6}: {seconds:6.3f} s ({outcome})", flush=True)
    print(f"time per level, deepest / shallowest: {per_level[-1] / per_level[0]:.2f} (1 when linear)")


if __name__ == "__main__":
    main()
