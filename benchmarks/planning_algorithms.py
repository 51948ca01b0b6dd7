"""Benchmark: offset-assignment algorithms on synthetic lifetime sets.

Prints, for a suite of synthetic single-arena problems, the lower bound and the
arena of every algorithm (bytes and ratio to the lower bound), the mean ratio
over the suite, and planning times (median of 3) for 1,000 / 10,000 / 50,000
buffers on typical and on skip-heavy DAGs, with the verifier's time.

Targets: ``best`` within 1.01x of the lower bound on average and never above
``greedy``; 10,000 buffers planned in under 1 s by the default (``greedy``).

    python benchmarks/planning_algorithms.py            # suite + timings
    python benchmarks/planning_algorithms.py --quick    # suite + 1,000 / 10,000 only

Other benchmarks import ``suite()`` (the named cases), ``rows(cases)`` (one dict
per case, every plan verified), ``timing_rows(...)`` with ``print_timing``, ``clock``
and the generators.

Generators model what planned tensors of an inference graph look like: most
values die within a few steps of their definition, a few live long (graph
inputs, outputs, skip connections, caches). All are seeded, so every run plans
the same inputs.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable, Sequence

from workbench.planning import ALGORITHMS, Buffer, assign_offsets, lower_bound, verify

KB, MB = 1 << 10, 1 << 20

# CPU seconds of this process: planning is single-threaded Python, so on an idle
# machine this equals wall time, and on a shared one it leaves out the waiting.
clock = time.process_time


def _activation(rng: random.Random) -> int:
    """An activation-like size: a few common shapes, sometimes an odd one."""
    if rng.random() < 0.7:
        return rng.choice([64 * KB, 256 * KB, 512 * KB, 1 * MB, 4 * MB])
    return int(2 ** rng.uniform(10, 22)) + rng.randrange(4) * 3  # odd sizes exercise alignment


def random_dag(n: int, seed: int = 0, skip_rate: float = 0.05, skip_span: int = 30,
               n_inputs: int = 4) -> list[Buffer]:
    """A random DAG in execution order: node i defines value i and reads 1-2 earlier values.

    Reads mostly come from the last few nodes; with ``skip_rate`` from further
    back (a skip connection, ~``skip_span`` steps on average), and sometimes
    from a graph input. Graph inputs are defined at step 0 and live to their
    last reader; the last 2 values are graph outputs (live to the end).
    """
    rng = random.Random(seed)
    inputs = n_inputs
    last_use = list(range(n + inputs))  # value v's last reader so far (its own step at first)
    step_of = [0] * inputs + list(range(n))
    for node in range(n):
        for _ in range(rng.choice((1, 1, 2))):
            if node and rng.random() >= skip_rate:
                src = inputs + max(0, node - 1 - int(rng.expovariate(0.9)))
            elif rng.random() < 0.1:
                src = rng.randrange(inputs)
            else:
                src = inputs + max(0, node - 1 - int(rng.expovariate(1 / skip_span)))
            if step_of[src] < node:
                last_use[src] = max(last_use[src], node)
    buffers = []
    for v in range(n + inputs):
        start = step_of[v]
        end = max(start, last_use[v] if v < inputs else max(last_use[v] - inputs, start))
        if v >= n + inputs - 2:
            end = n - 1
        name = f"in{v}" if v < inputs else f"v{v - inputs}"
        buffers.append(Buffer(name, _activation(rng), start, end))
    return buffers


def chain(n: int, seed: int = 0) -> list[Buffer]:
    """A pure chain: value i is made at step i and read at step i + 1."""
    rng = random.Random(seed)
    return [Buffer(f"v{i}", _activation(rng), i, i + 1) for i in range(n)]


def long_lived_mix(n: int, seed: int = 0, n_long: int = 40) -> list[Buffer]:
    """Short-lived values plus long ones: inputs read until a random step, caches live
    throughout, outputs from a random step to the end, and nested skip connections
    (as in a U-Net: the k-th value down is read by the k-th value up)."""
    rng = random.Random(seed)
    buffers = [
        Buffer(f"v{i}", _activation(rng), i, min(n - 1, i + 1 + int(rng.expovariate(0.7))))
        for i in range(n)
    ]
    for k in range(n_long):
        kind = k % 4
        if kind == 0:
            start, end = 0, rng.randrange(n)
        elif kind == 1:
            start, end = 0, n - 1
        elif kind == 2:
            start, end = rng.randrange(n), n - 1
        else:
            depth = rng.randrange(1, n // 2)
            start, end = n // 2 - depth, n // 2 + depth
        buffers.append(Buffer(f"long{k}", _activation(rng), start, end))
    return buffers


def random_long(n: int, seed: int = 0, n_long: int | None = None) -> list[Buffer]:
    """A stress case: short values plus long ones that start and end at random steps.

    Unlike real graphs, the long lifetimes neither share a start nor nest, so
    the lower bound is often out of reach for any plan.
    """
    rng = random.Random(seed)
    n_long = max(2, n // 500) if n_long is None else n_long
    longs = set(rng.sample(range(n), n_long))
    buffers = []
    for i in range(n):
        if i in longs:
            end = min(n - 1, i + rng.randint(n // 10 + 1, n))
        else:
            end = i + min(int(rng.expovariate(0.5)) + 1, 20)
        buffers.append(Buffer(f"v{i}", int(2 ** rng.uniform(8, 22)), i, end))
    return buffers


def transformer(layers: int, seed: int = 0, tokens: int = 128, hidden: int = 1024,
                heads: int = 16, kv_heads: int = 4, ffn: int = 4096) -> list[Buffer]:
    """Repeating decoder blocks with fp32 activations and a KV cache per layer.

    Each block: norm, q/k/v projections, rotary, scores, softmax, attention
    output, projection, residual add, norm, gated MLP, residual add. The
    residual stream value of a block is read by its attention and by its add;
    each layer's K and V cache (graph inputs) live from step 0 to their last read.
    """
    rng = random.Random(seed)
    head_dim = hidden // heads
    f32 = 4
    act = tokens * hidden * f32
    kv = tokens * kv_heads * head_dim * f32
    cache = 2048 * kv_heads * head_dim * f32
    scores = heads * tokens * (tokens + rng.randrange(1, 4) * 64) * f32
    mlp = tokens * ffn * f32
    buffers: list[Buffer] = []
    born: dict[str, tuple[int, int]] = {}
    step = 0

    def define(name: str, size: int) -> None:
        nonlocal step
        born[name] = (size, step)
        step += 1

    def last_read(*names: str) -> None:  # by the node about to be defined
        for name in names:
            size, start = born.pop(name)
            buffers.append(Buffer(name, size, start, step))

    define("x", act)
    x = "x"
    for layer in range(layers):
        p = f"l{layer}."
        define(p + "norm1", act)
        define(p + "q", act)
        define(p + "k", kv)
        last_read(p + "norm1")
        define(p + "v", kv)
        last_read(p + "q")
        define(p + "q_rot", act)
        last_read(p + "k", p + "v")  # the cache update reads both
        buffers.append(Buffer(p + "k_cache", cache, 0, step + 1))
        buffers.append(Buffer(p + "v_cache", cache, 0, step + 2))
        define(p + "cache_update", 0)  # in place: no new bytes
        last_read(p + "q_rot")
        define(p + "scores", scores)
        last_read(p + "scores")
        define(p + "probs", scores)
        last_read(p + "probs", p + "cache_update")
        define(p + "attn", act)
        last_read(p + "attn")
        define(p + "proj", act)
        last_read(p + "proj", x)
        define(p + "x1", act)
        define(p + "norm2", act)
        define(p + "gate", mlp)
        last_read(p + "norm2")
        define(p + "up", mlp)
        last_read(p + "gate", p + "up")
        define(p + "act", mlp)
        last_read(p + "act")
        define(p + "down", act)
        last_read(p + "down", p + "x1")
        define(p + "x2", act)
        x = p + "x2"
    last_read(x)
    define("logits", tokens * 32_000 * f32)
    last_read("logits")  # a graph output: live to the end
    return buffers


def suite() -> list[tuple[str, list[Buffer]]]:
    """The named cases of the quality table (sizes up to 10k buffers)."""
    return [
        ("dag-1k", random_dag(1_000, seed=1)),
        ("dag-5k", random_dag(5_000, seed=2)),
        ("dag-skippy-2k", random_dag(2_000, seed=3, skip_rate=0.2, skip_span=100)),
        ("dag-skippy-10k", random_dag(10_000, seed=4, skip_rate=0.2, skip_span=100)),
        ("chain-1k", chain(1_000, seed=4)),
        ("long-mix-2k", long_lived_mix(2_000, seed=5)),
        ("long-mix-10k", long_lived_mix(10_000, seed=6, n_long=200)),
        ("random-long-2k", random_long(2_000, seed=1, n_long=40)),
        ("random-long-5k", random_long(5_000, seed=7, n_long=100)),
        ("transformer-12", transformer(12, seed=8)),
        ("transformer-48", transformer(48, seed=9, tokens=32, hidden=2048, ffn=5632)),
    ]


#: Timing inputs: a typical graph (greedy often already at the lower bound, so
#: ``search`` stops early) and a skip-heavy one (every start and the local
#: search run: the worst case for ``search``'s time).
TIMING_CASES: dict[str, Callable[[int, int], list[Buffer]]] = {
    "random DAGs": lambda n, seed: random_dag(n, seed),
    "skip-heavy DAGs (worst case for search)": lambda n, seed: random_dag(
        n, seed, skip_rate=0.2, skip_span=100
    ),
}


def rows(cases: Sequence[tuple[str, Sequence[Buffer]]], alignment: int = 16,
         algorithms: Sequence[str] | None = None) -> list[dict]:
    """One dict per case: n, lower bound, each algorithm's arena bytes, ratio and seconds.

    Every assignment is checked with ``verify``: a figure from a wrong plan is
    never printed.
    """
    names = list(algorithms or ALGORITHMS)
    out = []
    for case, buffers in cases:
        lb = lower_bound(buffers, alignment)
        row: dict = {"case": case, "n": len(buffers), "lower_bound": lb}
        for name in names:
            t0 = clock()
            assignment = assign_offsets(buffers, name, alignment)
            row[f"{name}_s"] = clock() - t0
            verify(buffers, assignment, alignment)
            row[name] = assignment.arena_bytes
            row[f"{name}_ratio"] = assignment.arena_bytes / lb if lb else 1.0
        out.append(row)
    return out


def timing_rows(sizes: Sequence[int] = (1_000, 10_000, 50_000), repeats: int = 3,
                algorithms: Sequence[str] | None = None,
                make: Callable[[int, int], list[Buffer]] = random_dag) -> list[dict]:
    """Median planning seconds per algorithm for ``make(n, seed)`` at each size, and the
    verifier's median seconds on the last algorithm's plan."""
    names = list(algorithms or ALGORITHMS)
    out = []
    for n in sizes:
        buffers = make(n, 100 + n)
        lb = max(lower_bound(buffers), 1)
        row: dict = {"n": len(buffers)}
        for name in names:
            times = []
            for _ in range(repeats):
                t0 = clock()
                assignment = assign_offsets(buffers, name)
                times.append(clock() - t0)
            row[name] = statistics.median(times)
            row[f"{name}_ratio"] = assignment.arena_bytes / lb
        times = []
        for _ in range(repeats):
            t0 = clock()
            verify(buffers, assignment)
            times.append(clock() - t0)
        row["verify"] = statistics.median(times)
        out.append(row)
    return out


def _print_quality(table: list[dict], names: Sequence[str]) -> None:
    print(f"{'case':<16}{'n':>7}{'lower bound':>15}" + "".join(f"{n:>25}" for n in names))
    for row in table:
        cells = "".join(f"{row[n]:>15,} {row[n + '_ratio']:>8.4f}x" for n in names)
        print(f"{row['case']:<16}{row['n']:>7}{row['lower_bound']:>15,}{cells}")
    for n in names:
        ratios = [row[n + "_ratio"] for row in table]
        print(f"mean {n}/LB = {statistics.mean(ratios):.4f}   max = {max(ratios):.4f}   "
              f"at LB: {sum(r == 1.0 for r in ratios)}/{len(ratios)}   "
              f"time: {sum(row[n + '_s'] for row in table):.2f} s")
    if "best" in names and "greedy" in names:
        worse = [row["case"] for row in table if row["best"] > row["greedy"]]
        print(f"best above greedy: {', '.join(worse) if worse else 'never'}")


def print_timing(table: list[dict], names: Sequence[str]) -> None:
    """Print ``timing_rows``: per size, each algorithm's seconds and ratio to the lower bound."""
    print(f"{'n':>7}" + "".join(f"{n:>19}" for n in names) + f"{'verify':>10}")
    for row in table:
        cells = "".join(f"{row[n]:>9.3f}s {row[n + '_ratio']:>7.3f}x" for n in names)
        print(f"{row['n']:>7}{cells}{row['verify']:>9.3f}s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="time 1,000 and 10,000 buffers only")
    args = parser.parse_args(argv)
    names = list(ALGORITHMS)
    print("== arena bytes and ratio to the lower bound (alignment 16) ==")
    _print_quality(rows(suite()), names)
    sizes = (1_000, 10_000) if args.quick else (1_000, 10_000, 50_000)
    for title, make in TIMING_CASES.items():
        print()
        print(f"== planning time: {title} (median of 3, CPU seconds, ratio to LB) ==")
        print_timing(timing_rows(sizes, make=make), names)


if __name__ == "__main__":
    main()
