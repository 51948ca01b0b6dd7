"""Budget sweeps: which strategy gives the most tokens/s within each device-memory budget.

``sweep(model_or_program, budgets=..., links=..., strategies=..., executor=None)``
captures the program once (per worker process), then places, propagates, plans and
estimates every strategy setting under every link, through any
``concurrent.futures.Executor``::

    import workbench as wb
    result = wb.sweep(MoEConfig.full(), budgets=[8, 16, 24, 32, 48, 80])
    result.points        # every (strategy, parameters, link): device GiB, tok/s, link MiB/token, overlap
    result.best          # the best strategy per (budget, link)
    result.pareto_figure()

Rules:
  1. The model is a ``MoEConfig`` (or a ``QwenMoEDecoder``, which stands for its config):
     workers receive the config and capture the shape-only program themselves, once per
     process. A ``Program`` is swept in the caller's process only (``InlineExecutor``).
  2. ``executor=None`` runs on a pool of local processes (``process_pool``) that the sweep
     starts and stops; a given executor (a process pool, ``InlineExecutor``, a Dask
     ``client.get_executor()``) is used as is and left running.
  3. A strategy whose reuse copies depend on a hit rate is estimated with an expected
     rate: prefetching strategies with ``prefetch_hit_rate`` (default 0.0, the
     pessimistic bound of ``CostModel``; ``walkthrough.capacity_sweep`` passes the rate
     measured on the tiny model); expert caches with the hit rate of their policy and slot count
     replayed over ``trace`` (default: a synthetic trace shaped like the config, Zipf
     1.0, reuse 0.3 — labelled synthetic): for ``on_miss="host_compute"`` the same
     rate decides the share of rows the host computes (``cache_graph`` rule 5);
     ``static_hot`` pins the spec's ``popularity`` if it has one (else the trace's own
     counts); a prefetching cache is charged the rate without its prefetch (a trace holds
     no predictions). The row says where the rate comes from.
  4. The same arguments give the same ``points`` and ``best`` on every executor.
  5. A task that fails (it raises, or its worker dies) loses nothing else: the points
     of the tasks that finished are kept and returned, ``failed`` names each failed
     point (its label and the error), and a ``SweepWarning`` says the result is
     partial. With ``out=`` (a ``.csv`` path) the finished points are written there as
     they finish (each write atomic, merged under the file's lock, so sweeps in several
     processes may share one file), and a re-run with the same ``out`` reads them back
     and runs only the points not yet done — only points swept with the same program,
     weights, cost model and grid entry are reused; a file of another sweep is refused,
     naming what differs (``resume`` rules).
  6. ``weights={format: [pattern, ...]}`` stores the swept program's constants in those
     weight formats (``workbench.quantize``): resident bytes, budgets, copy bytes and
     times are those of the stored format; the rules are checked before any work, on the
     program itself (a config's is captured here, once): an unknown format, a bad
     pattern or two equally specific patterns claiming one constant for different
     formats is a ``WeightFormatError`` naming them, raised before any point runs.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from concurrent.futures import Executor, as_completed
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np
import pandas as pd

from ..atomic_files import check_writable_target
from ..capture import Program
from ..errors import WorkbenchWarning
from ..models import MoEConfig, QwenMoEDecoder
from ..moe.cache_policies import replay_all, slab_bytes
from ..moe.routing import RoutingTrace, synthetic_trace_for
from ..machine import CostModel
from ..machine.default_model import default_cost_model
from ..weight_formats import WeightFormatError, check_quantize_rules, quantize
from .checks import SweepError, check_budgets, check_links
from .executors import InlineExecutor, pool_size, process_pool
from .result import SIMPLICITY, TIE_RTOL, WORKER_COLUMNS, SweepResult, best_per_budget
from .resume import PointWriter, done_points, sweep_key
from .source import ConfigSource, ProgramSource, Source
from .spec import AXES, SpecError, StrategyGrid, StrategySpec, expand
from .worker import SweepTask, TaskResult, evaluate

__all__ = [
    "AXES",
    "DEFAULT_BUDGETS_GIB",
    "InlineExecutor",
    "ConfigSource",
    "ProgramSource",
    "SIMPLICITY",
    "SpecError",
    "StrategySpec",
    "SweepError",
    "SweepResult",
    "SweepTask",
    "SweepWarning",
    "TIE_RTOL",
    "best_per_budget",
    "cache_grid",
    "default_grid",
    "evaluate",
    "expand",
    "process_pool",
    "quick_grid",
    "sweep",
]

#: The budgets the capacity-planning question is asked at (GiB of device memory).
DEFAULT_BUDGETS_GIB: tuple[float, ...] = (8, 16, 24, 32, 48, 80)
#: Host↔device links compared by default (CostModel link presets).
DEFAULT_LINKS: tuple[str, ...] = ("pcie_gen4", "pcie_gen5", "nvlink_c2c")


class SweepWarning(WorkbenchWarning):
    """A sweep returned without some of its points (rule 5): they are named in ``failed``."""


def cache_grid(
    config: MoEConfig,
    policies: Sequence[str] = ("lru", "lfu", "static_hot"),
    on_miss: Sequence[str] = ("copy", "host_compute"),
) -> dict[str, dict[str, Any]]:
    """Expert caches of k, E/16, E/8, E/4, E/2 and 3E/4 slots per layer (those in [k, E]),
    each policy, a miss copied over the link or computed on the host."""
    E, k = config.num_experts, config.num_experts_per_tok
    slots = sorted({s for s in (k, E // 16, E // 8, E // 4, E // 2, 3 * E // 4) if k <= s <= E})
    return {"expert_cache": {"slots_per_layer": slots, "policy": list(policies), "on_miss": list(on_miss)}}


def default_grid(config: MoEConfig) -> dict[str, dict[str, Any]]:
    """Every strategy: partial offload at about ten host-layer counts from 0 to all, and
    the expert caches of ``cache_grid``."""
    layers = config.num_hidden_layers
    step = max(1, layers // 10)
    return {
        "all_on_device": {},
        "experts_on_host": {},
        "expert_streaming": {"prefetch": [False, True]},
        "partial_offload": {"n_host_layers": sorted(set(range(0, layers + 1, step)) | {layers})},
        **cache_grid(config),
    }


def quick_grid(config: MoEConfig) -> list[StrategySpec]:
    """A third of ``default_grid`` (a subset of it), chosen so the capacity answer at the default
    budgets stays the one the whole grid gives (the walkthrough's default sweep):

    - ``all_on_device``, ``experts_on_host``, ``expert_streaming`` with and without
      prefetch (with it: the best setting on a fast link at the smallest budget, where the
      predicted experts' copies hide behind the previous layer; without it: what the
      prediction buys);
    - ``partial_offload`` at 30 %, half and 70 % of the layers (the line of the Pareto
      figure; the ends are ``all_on_device`` and ``experts_on_host``; 30 % is the fewest
      host layers of the whole grid that fit the 48 GiB budget on the full-size model);
    - expert caches of k, E/8, E/4 and E/2 slots per layer (each about doubling the
      cache; the default budgets fall between them): ``static_hot`` with a miss copied
      or computed on the host, and ``lfu`` with a miss copied (an admitting cache that
      computes a miss on the host still copies its slab in, the same bytes later).
    """
    E, k = config.num_experts, config.num_experts_per_tok
    layers = config.num_hidden_layers
    slots = sorted({s for s in (k, E // 8, E // 4, E // 2) if k <= s <= E})
    counts = default_grid(config)["partial_offload"]["n_host_layers"]  # every setting is one of the whole grid's
    offload = sorted({min(counts, key=lambda n: abs(n - q * layers)) for q in (0.3, 0.5, 0.7)})
    caches = [("static_hot", "copy"), ("static_hot", "host_compute"), ("lfu", "copy")]
    return [
        StrategySpec.of("all_on_device"),
        StrategySpec.of("experts_on_host"),
        StrategySpec.of("expert_streaming", prefetch=False),
        StrategySpec.of("expert_streaming", prefetch=True),
        *(StrategySpec.of("partial_offload", n_host_layers=n) for n in offload),
        *(
            StrategySpec.of("expert_cache", slots_per_layer=s, policy=policy, on_miss=on_miss)
            for s in slots
            for policy, on_miss in caches
        ),
    ]


def _source(model: Any) -> Source:
    if isinstance(model, MoEConfig):
        return ConfigSource(model)
    if isinstance(model, QwenMoEDecoder):
        return ConfigSource(model.config)
    if isinstance(model, Program):
        return ProgramSource(model)
    raise SweepError(
        f"sweep takes a MoEConfig, a QwenMoEDecoder or a captured Program, got {type(model).__name__}"
    )


def _with_weights(source: Source, weights: Optional[Mapping[str, Sequence[str]]]) -> Source:
    """Rule 6: the source whose program stores its constants as ``weights`` says."""
    if weights is None:
        return source
    if isinstance(source, ProgramSource):
        return ProgramSource(quantize(source.captured, weights))
    check_quantize_rules(weights)
    frozen = tuple((f, (p,) if isinstance(p, str) else tuple(p)) for f, p in weights.items())
    weighted = dataclasses.replace(source, weights=frozen)
    try:
        weighted.program(False)  # rule 6: conflicts are the program's, found here before any point runs
    except WeightFormatError as exc:
        raise WeightFormatError(f"weights= refused for {source.label}, before any point ran: {exc}") from None
    return weighted


def sweep(
    model: Any,
    budgets: Sequence[float] = DEFAULT_BUDGETS_GIB,
    links: Sequence[str] = DEFAULT_LINKS,
    strategies: Optional[StrategyGrid] = None,
    executor: Optional[Executor] = None,
    *,
    cost_model: Optional[CostModel] = None,
    algorithm: str = "greedy",
    prefetch_hit_rate: Optional[float] = None,
    trace: Optional[RoutingTrace] = None,
    workers: Optional[int] = None,
    out: Union[str, Path, None] = None,
    weights: Optional[Mapping[str, Sequence[str]]] = None,
) -> SweepResult:
    """Sweep strategies × links and pick the best per budget (module rules).

    Args:
        model: a ``MoEConfig``, ``QwenMoEDecoder`` or ``Program`` (rule 1).
        budgets: device-memory budgets in GiB.
        links: ``CostModel`` link presets.
        strategies: ``{name: {param: values}}`` or a list of ``StrategySpec``
            (default ``default_grid(config)``).
        executor: any ``concurrent.futures.Executor`` (rule 2).
        cost_model: device and host figures (default ``machine.default_model``'s: the
            measured preset of the GPU at hand, else the datasheet H200); its link is
            replaced by each of ``links``.
        algorithm: memory-planning algorithm.
        prefetch_hit_rate: expected prefetch hit rate (rule 3).
        trace: the routing that expert caches are replayed over (rule 3).
        workers: processes of the default pool.
        out: a ``.csv`` path: finished points are written there as they finish, and
            points already there are not run again (rule 5).
        weights: ``quantize`` rules for the program's constants (rule 6).
    """
    start = time.perf_counter()
    unweighted = _source(model)
    budgets_t, links_t = check_budgets(budgets), check_links(links)
    config = unweighted.config if isinstance(unweighted, ConfigSource) else None
    if strategies is None:
        if config is None:
            raise SweepError("give strategies= when sweeping a Program (the default grid needs the config)")
        strategies = default_grid(config)
    specs = expand(strategies)
    built = {spec: spec.build() for spec in specs}  # bad parameters fail here, before any work
    if isinstance(unweighted, ProgramSource) and executor is not None and not isinstance(executor, InlineExecutor):
        raise SweepError(
            "a captured Program stays in this process; sweep the MoEConfig instead (each worker captures "
            "the shape-only program itself), or pass executor=InlineExecutor()"
        )
    model_costs = cost_model if cost_model is not None else default_cost_model()
    rates = _expected_hit_rates(specs, built, config, prefetch_hit_rate, trace)
    out_path = _check_out(out)
    key = sweep_key(unweighted, weights, model_costs, specs, algorithm, rates)
    done = done_points(out_path, links_t, key)
    source = _with_weights(unweighted, weights)  # last of the checks: it may capture the program
    tasks = [
        SweepTask(
            index=i,
            source=source,
            spec=spec,
            links=links_t,
            cost_model=model_costs,
            algorithm=algorithm,
            expected_hit_rate=rates[spec][0],
            hit_rate_source=rates[spec][1],
        )
        for i, spec in enumerate(specs)
        if spec.label not in done
    ]
    if executor is None and isinstance(source, ProgramSource):
        executor = InlineExecutor()
    saved = [row for spec in specs for row in done.get(spec.label, ())]
    writer = PointWriter(out_path, key, saved)
    results: list[TaskResult] = []
    failed: list[tuple[str, str]] = []
    if tasks and executor is None:
        with process_pool(pool_size(workers, len(tasks))) as pool:
            results, failed = _run(pool, tasks, writer)
    elif tasks and executor is not None:
        results, failed = _run(executor, tasks, writer)
    order = {spec.label: i for i, spec in enumerate(specs)}
    rows = saved + [row for r in results for row in r.rows]
    rows.sort(key=lambda row: order[row["label"]])  # rule 1: the order the specs were given
    points = pd.DataFrame(rows)
    failures = pd.DataFrame(failed, columns=["label", "error"])
    if failed:
        shown = "; ".join(f"{label}: {error}" for label, error in failed[:3])
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        warnings.warn(
            SweepWarning(
                f"{len(failed)} of {len(specs)} sweep points failed ({shown}{more}); the result holds the "
                f"{len(specs) - len(failed)} that finished" + (f" (also in {out_path}; run again to do the rest)" if out_path else "")
            ),
            stacklevel=2,
        )
    return SweepResult(
        points=points,
        best=best_per_budget(points if len(points) else _empty(), budgets_t, links_t),
        workers=_workers(results),
        budgets_GiB=budgets_t,
        links=links_t,
        source=source.label,
        seconds=time.perf_counter() - start,
        failed=failures,
    )


def _expected_hit_rates(
    specs: list[StrategySpec],
    built: dict[StrategySpec, Any],
    config: Optional[MoEConfig],
    prefetch_hit_rate: Optional[float],
    trace: Optional[RoutingTrace],
) -> dict[StrategySpec, tuple[Optional[float], str]]:
    """Rule 3: ``(rate, where it comes from)`` per spec; ``(None, "")`` when none applies."""
    out: dict[StrategySpec, tuple[Optional[float], str]] = {s: (None, "") for s in specs}
    if any(b.prefetch for b in built.values()):
        rate = _prefetch_rate(prefetch_hit_rate)
        out.update({s: rate for s in specs if built[s].prefetch})
    caches = [s for s in specs if s.name == "expert_cache"]
    if caches:
        if trace is None:
            if config is None:
                raise SweepError("give trace= (a RoutingTrace) to sweep expert caches of a Program")
            trace = synthetic_trace_for(config, 2048, zipf=1.0, reuse=0.3, seed=0)
        slab = slab_bytes(config) if config is not None else 0
        # on_miss and prefetch leave the hit rate alone: one replay per slot count and pinned
        # popularity, of all the policies asked for there
        groups: dict[tuple[int, Any], list[StrategySpec]] = {}
        for s in caches:
            cache = built[s].cache
            groups.setdefault((cache.slots_per_layer, cache.popularity), []).append(s)
        for (slots, popularity), members in groups.items():
            pinned = None if popularity is None else np.asarray(popularity)
            policies = [built[s].cache.policy for s in members]
            rates = {r.policy: r.hit_rate() for r in replay_all(trace, policies, slots, slab, popularity=pinned)}
            for s in members:
                # a trace holds routed experts, not predictions: a prefetching cache is charged the rate without them
                where = f"{trace.label}; replayed without the prefetch" if built[s].cache.prefetch else trace.label
                if built[s].cache.policy == "static_hot" and pinned is None:
                    where += "; static_hot pinned on this same trace (in hindsight)"
                out[s] = (round(rates[built[s].cache.policy], 6), where)
    return out


def _prefetch_rate(given: Optional[float]) -> tuple[float, str]:
    if given is not None:
        return float(given), "given"
    return 0.0, "assumed 0: every predicted row crosses (pass prefetch_hit_rate=)"


def _run(executor: Executor, tasks: list[SweepTask], writer: PointWriter) -> tuple[list[TaskResult], list[tuple[str, str]]]:
    """Rule 5: every task's result or its error; finished points are written as they come."""
    futures = {executor.submit(evaluate, task): task for task in tasks}
    results: list[TaskResult] = []
    failed: dict[int, tuple[str, str]] = {}
    for future in as_completed(futures):
        task = futures[future]
        try:
            result = future.result()
        except Exception as exc:  # any task error, a dead worker (BrokenProcessPool), a lost Dask worker
            failed[task.index] = (task.spec.label, f"{type(exc).__name__}: {exc}".strip())
            continue
        results.append(result)
        writer.add(result.rows)
    return sorted(results, key=lambda r: r.index), [failed[i] for i in sorted(failed)]


def _check_out(out: Union[str, Path, None]) -> Optional[Path]:
    if out is None:
        return None
    if not isinstance(out, (str, Path)):
        raise SweepError(f"out must be a path of a .csv file, got {type(out).__name__}")
    path = check_writable_target(out, "sweep points")
    if path.suffix != ".csv":
        raise SweepError(f"out must be a path of a .csv file, got {path.name!r}")
    return path


def _empty() -> pd.DataFrame:
    return pd.DataFrame({"link": pd.Series(dtype=object), "device_bytes": pd.Series(dtype=float), "tok/s": pd.Series(dtype=float)})


def _workers(results: list[TaskResult]) -> pd.DataFrame:
    rows: dict[int, dict[str, Any]] = {}
    for r in results:
        row = rows.setdefault(r.pid, {"pid": r.pid, "tasks": 0, "busy_s": 0.0, "peak_rss_MiB": 0.0})
        row["tasks"] += 1
        row["busy_s"] = round(row["busy_s"] + r.seconds, 3)
        row["peak_rss_MiB"] = max(row["peak_rss_MiB"], round(r.peak_rss_bytes / 2**20, 1))
    return pd.DataFrame(list(rows.values()), columns=list(WORKER_COLUMNS))
