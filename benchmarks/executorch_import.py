"""Benchmark: how long ``wb.from_executorch`` takes to import an ExecuTorch program.

Programs (each lowered once by ExecuTorch 1.5.1 with device delegates; lowering is timed
once and not part of the import):

- every held-in example of ``workbench.models.examples`` with its placement from the
  cross-check cases (``workbench.compare.ARENA_CASES``); the largest is marked;
- the MoE walkthrough's decoder (``workbench.models``, tiny configuration, one decode
  step) with its matmuls on ``cuda:0``;
- a chain of 200 delegates: ``x = neg(relu(x))`` 200 times, every relu a one-op delegate
  on ``cuda:0``, so 200 h2d and 200 d2h copies.

For each, the import from the in-memory ``ExecutorchProgramManager`` and from the ``.pte``
bytes, median of ``--runs`` runs, split into its stages: ExecuTorch's deserializer (the
``.pte`` path only), reading the schema into plain data, building the ``DeviceGraph``,
building the ``MemoryPlan``.

    python benchmarks/executorch_import.py            # 7 runs each
    python benchmarks/executorch_import.py --runs 3

Needs the optional package ``executorch``; without it the script says how to install it
and exits 0.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from typing import Any, Callable, Sequence

import torch

from workbench.compare import ARENA_CASES, INSTALL_HINT, executorch_available
from workbench.compare.lowering import lower, rule_partitioner
from workbench.models.examples import EXAMPLES
from workbench.executorch import read_program, schema_program
from workbench.executorch.device_graph import to_device_graph
from workbench.executorch.memory import to_memory_plan
from workbench.models import MoEConfig, QwenMoEDecoder

CHAIN_DELEGATES = 200


class DelegateChain(torch.nn.Module):
    """``x = neg(relu(x))`` repeated: with relu on a device, one delegate per repeat."""

    def __init__(self, repeats: int) -> None:
        super().__init__()
        self.repeats = repeats

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, W)
        for _ in range(self.repeats):
            x = torch.neg(torch.relu(x))
        return x


def _programs() -> list[tuple[str, torch.nn.Module, tuple, dict]]:
    out = []
    for c in ARENA_CASES:
        if c.rules and c.name in EXAMPLES:
            model, inputs = c.build()
            out.append((c.name, model, inputs, dict(c.rules)))
    moe = QwenMoEDecoder(MoEConfig.tiny()).eval()
    out.append(("moe_decode (tiny)", moe, moe.example_inputs(), {"cuda:0": ["aten.mm", "aten.bmm", "aten.addmm"]}))
    chain = (f"chain of {CHAIN_DELEGATES} delegates", DelegateChain(CHAIN_DELEGATES), (torch.randn(4, 16),))
    out.append((*chain, {"cuda:0": ["aten.relu"]}))
    return out


def _lowered(model: torch.nn.Module, inputs: tuple, rules: dict) -> Any:
    def failed(exc: BaseException, stage: str, config: Any) -> Any:
        raise RuntimeError(f"ExecuTorch failed in {stage}: {exc}") from exc

    return lower(model, inputs, rule_partitioner(rules), [(False, False)], lambda program, config: program, failed)[0]


def _median_ms(fn: Callable[[], Any], runs: int) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), result


def _stages(source: Any, runs: int) -> dict[str, float]:
    """Median ms of each import stage, and of the whole, for one source."""
    read_ms, (schema, _) = _median_ms(lambda: schema_program(source), runs)
    plain_ms, program = _median_ms(lambda: read_program(schema), runs)
    graph_ms, dg = _median_ms(lambda: to_device_graph(program), runs)
    plan_ms, _ = _median_ms(lambda: to_memory_plan(program, dg), runs)
    return {
        "deserialize": read_ms,
        "read": plain_ms,
        "graph": graph_ms,
        "plan": plan_ms,
        "total": read_ms + plain_ms + graph_ms + plan_ms,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs per measurement (the median is printed)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")  # ExecuTorch's and torch.export's deprecation notices are not results
    if not executorch_available():
        print(f"executorch is not installed; for this benchmark run: {INSTALL_HINT}")
        return 0
    print(f"wb.from_executorch import time, median of {args.runs} runs (ms); lowering timed once (s)\n")
    header = f"{'program':<28}{'calls':>6}{'deleg':>6}{'copies':>7}{'lower s':>9}  {'source':<7}" + "".join(
        f"{k:>12}" for k in ("deserialize", "read", "graph", "plan", "total")
    )
    print(header)
    rows = []
    for name, model, inputs, rules in _programs():
        start = time.perf_counter()
        lowered = _lowered(model, inputs, rules)
        lower_s = time.perf_counter() - start
        program = read_program(schema_program(lowered)[0])
        calls, delegates = len(program.calls), len(program.delegate_calls)
        copies = sum(program.copy_counts().values())
        for label, source in (("memory", lowered), (".pte", lowered.buffer)):
            stages = _stages(source, args.runs)
            rows.append((name, calls, label, stages))
            lead = f"{name:<28}{calls:>6}{delegates:>6}{copies:>7}{lower_s:>9.1f}" if label == "memory" else " " * 56
            print(
                f"{lead}  {label:<7}"
                + "".join(f"{stages[k]:>12.2f}" for k in ("deserialize", "read", "graph", "plan", "total"))
            )
    examples = [r for r in rows if r[0] in EXAMPLES and r[2] == "memory"]
    largest = max(examples, key=lambda r: r[1])
    print("\nSummary:")
    print(f"  largest held-in example: {largest[0]} ({largest[1]} calls), import {largest[3]['total']:.1f} ms")
    for name, calls, label, stages in rows:
        if name not in EXAMPLES:
            print(f"  {name} from {label}: {stages['total']:.1f} ms ({1e3 * stages['total'] / calls:.0f} µs per call)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
