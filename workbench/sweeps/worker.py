"""One sweep task, run where an executor puts it: place, propagate, plan, time a token.

Rules:
  1. A ``SweepTask`` is plain data — a source recipe, a strategy spec, link names, a
     ``CostModel``, the planning algorithm and the expected hit rate of the strategy's
     reuse copies — so it pickles to a few hundred bytes for any executor.
  2. ``evaluate(task)`` applies the strategy to the source's program (captured once per
     process, ``source`` rule 1), plans it and lays its token out once
     (``speed.graph_layout.layout_of``; a plan or layout this process made already is
     reused, ``reuse`` rules 1-2), and times the token once per link with
     ``speed.timer.time_decode`` — the one decode physics; it returns one row per
     link, plus the process id, its peak resident memory so far and the seconds it took,
     so the caller can report memory per worker.
  3. A row's device figures are for ``strategy.device``: ``device_bytes`` = resident
     constants + planned arena there, the memory a budget must hold. Link bytes are the
     bytes over the link per token (a reuse copy counts the rows it is expected to miss);
     ``tok/s`` is one decode token per step; ``overlap`` the share of the host-or-copy
     time hidden beside the GPU.
  4. The same task gives the same rows on every machine and in every process (the cost
     model is deterministic), so sweeps through different executors compare equal.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass
from typing import Any, Optional

from ..devices import CPU, Device
from ..machine import CostModel
from ..speed.timer import time_decode
from .reuse import laid_out, planned
from .source import Source
from .spec import StrategySpec

__all__ = ["SweepTask", "TaskResult", "evaluate"]


@dataclass(frozen=True)
class SweepTask:
    """Rule 1."""

    index: int  # position in the sweep: rows come back in this order
    source: Source  # where the program comes from
    spec: StrategySpec
    links: tuple[str, ...]  # CostModel link presets to estimate under
    cost_model: CostModel  # device and host figures (its link is replaced per row)
    algorithm: str  # planning algorithm
    expected_hit_rate: Optional[float]  # share of reuse-copy rows expected on the device, or None
    hit_rate_source: str  # where that rate comes from ("" when None)


@dataclass(frozen=True)
class TaskResult:
    """Rule 2."""

    index: int
    rows: tuple[dict[str, Any], ...]  # one per link
    pid: int  # the process that ran it
    peak_rss_bytes: int  # that process's peak resident memory when it finished
    seconds: float  # wall time of the task


def _peak_rss_bytes() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak) if sys.platform == "darwin" else int(peak) * 1024  # Linux reports KiB


def evaluate(task: SweepTask) -> TaskResult:
    """Rule 2."""
    start = time.perf_counter()
    strategy = task.spec.build()
    program = task.source.program(strategy.prefetch)
    memory = planned(program, strategy, task.algorithm)  # made once per process (reuse rule 1)
    device = Device.parse(strategy.device)
    resident = int(memory.constant_bytes.get(device, 0))
    arena = int(memory.arena_bytes.get(device, 0))
    host = int(memory.constant_bytes.get(CPU, 0)) + int(memory.arena_bytes.get(CPU, 0))
    layout = laid_out(memory, task.expected_hit_rate if task.expected_hit_rate is not None else 0.0)
    rows = []
    for link in task.links:
        token = time_decode(layout, task.cost_model.with_link(link))
        side = token.host + token.copy
        rows.append(
            {
                "strategy": task.spec.name,
                "line": task.spec.line,
                "label": task.spec.label,
                **{f"param.{k}": v for k, v in task.spec.params},
                "link": link,
                "device_bytes": resident + arena,
                "device_GiB": round((resident + arena) / 2**30, 3),
                "resident_GiB": round(resident / 2**30, 3),
                "arena_MiB": round(arena / 2**20, 3),
                "host_GiB": round(host / 2**30, 3),
                "ms/token": round(token.ms, 4),
                "tok/s": round(token.tok_s, 3),
                "link_MiB/token": round(token.link_bytes / 2**20, 3),
                "overlap": round(token.hidden / side, 4) if side else 0.0,
                "expected_hit_rate": task.expected_hit_rate,
                "hit_rate_source": task.hit_rate_source,
            }
        )
    return TaskResult(task.index, tuple(rows), os.getpid(), _peak_rss_bytes(), time.perf_counter() - start)
