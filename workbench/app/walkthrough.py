"""The MoE walkthrough: placement strategies compared on a Qwen-3.5-MoE-shaped decoder.

Two analyses, both computed from the model, never written in:

- ``tiny_results``: the ``tiny`` configuration (seeded weights) — every strategy is
  captured, placed, propagated, planned, and **run** (on ``sim``, or measured on
  ``cuda``); outputs are compared with eager PyTorch.
- ``full_size_results``: the published 35B-A3B configuration, captured shape-only (no
  weights allocated) — every strategy is placed, propagated and planned, and its decode
  step is timed by the cost model under each host↔device link.

``streaming_breakeven`` answers: how many tokens must each streamed expert process
before its weight copy hides behind its compute?

``anchors_table`` (from ``workbench.app.anchors``) sets the modeled all-on-device decode step
beside published measurements of the same model (ExecuTorch on an A100, per-kernel
launches and CUDA-graph replay).

``capacity_sweep`` asks the capacity-planning question of the full-size model: the best
strategy per device-memory budget and link (``workbench.sweeps``: by default the settings
of ``quick_grid``, in this process, on the program ``full_size_results`` captured);
``answer_table`` prints it, ties named.

Expert prefetch (``expert_streaming+prefetch``) runs on a model built with
``expert_prefetch=True`` (same weights, same outputs, routing hints in the graph).

``measured_hit_rate`` measures on the tiny model how many routed experts the previous
layer predicts; the tiny table reports each run's own hits and the bytes that really
crossed the link; ``prefetch_sensitivity`` times the full-size prefetch plan at hit
rates 0 (nothing predicted), the measured one, and 1 (everything predicted).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

import pandas as pd
import torch

from .anchors import ANCHOR_FORMATS, anchors_table, full_size_plan
from ..arguments import check_flag
from ..capture import capture
from ..errors import ArgumentValueError
from ..moe.discovery import find_experts
from ..models import MoEConfig, QwenMoEDecoder
from ..planning.memory_plan import MemoryPlan, plan
from ..devices import CPU, Device
from ..propagate import DeviceGraph
from ..machine import costs
from ..machine.cost_model import CostModel, dtype_class, op_cost
from ..speed.timer import DecodeTime, time_decode
from ..machine.default_model import default_device_preset
from ..runtime.executor import RunResult, run
from ..runtime.tensors import stage_inputs, to_host
from ..moe.strategies import Strategy, expert_streaming, strategy_variants
from ..sweeps import InlineExecutor, ConfigSource, SweepResult, default_grid, quick_grid, sweep
from ..sweeps.reuse import laid_out, planned
from ..speed.evidence import EarnedInterval
from ..speed.layout import PLACEMENT_REGIMES
from ..speed.regime_model import regime_model, runtime_profile

__all__ = [
    "ANCHOR_FORMATS",
    "DEPLOYMENT_RUNTIME",
    "LINKS",
    "StrategyResult",
    "anchors_table",
    "STRATEGY_REGIMES",
    "answer_table",
    "capacity_sweep",
    "deployment_cost_model",
    "full_size_hit_rate",
    "full_size_plan",
    "full_size_results",
    "full_size_table",
    "measured_hit_rate",
    "prefetch_sensitivity",
    "stage_inputs",
    "strategy_regime",
    "streaming_breakeven",
    "strategy_table",
    "tiny_results",
]

#: The host↔device links compared for the full-size model (CostModel link presets).
LINKS = ("pcie_gen4", "pcie_gen5", "nvlink_c2c")
#: The runtime profile the full-size answers deploy the planned graph on (data/runtimes).
DEPLOYMENT_RUNTIME = "workbench_graph"

Progress = Optional[Callable[[Iterable, str], Iterable]]


@dataclass(frozen=True, eq=False)
class StrategyResult:
    """One strategy applied to one model: its graph, plan and (tiny) run or (full) token times."""

    strategy: Strategy
    plan: MemoryPlan  # plan.device_graph is the DeviceGraph
    run: Optional[RunResult] = None  # tiny model: the executed decode step
    matches_eager: Optional[bool] = None  # tiny model: outputs equal eager PyTorch
    tokens: Optional[dict[str, DecodeTime]] = None  # full size: link → the decode token's time (time_decode)
    prefetch_hit_rate: Optional[float] = None  # prefetch variants: measured (tiny) or assumed (full size)
    cost_model: Optional[str] = None  # full size: the name of the cost model ``tokens`` were timed on

    @property
    def device_graph(self) -> DeviceGraph:
        return self.plan.device_graph


def _quiet(items: Iterable, desc: str) -> Iterable:
    return items


def _same(got: Any, want: Any) -> bool:
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    return len(got) == len(want) and all(
        torch.allclose(to_host(g).to(w.dtype), w, atol=1e-4, rtol=1e-4) for g, w in zip(got, want)
    )


class _Programs:
    """The captured program of a config, with and without routing hints, each captured
    once on first use (a prefetching strategy needs the hinted one)."""

    def __init__(self, make: Callable[[bool], tuple[torch.nn.Module, tuple]], shape_only: bool) -> None:
        self._make, self._shape_only = make, shape_only
        self._programs: dict[bool, Any] = {}

    def __call__(self, strategy: Strategy):
        hinted = strategy.prefetch
        if hinted not in self._programs:
            model, inputs = self._make(hinted)
            self._programs[hinted] = capture(model, inputs, shape_only=self._shape_only)
        return self._programs[hinted]


def tiny_results(
    config: Optional[MoEConfig] = None,
    *,
    backend: str = "sim",
    cost_model: Optional[CostModel] = None,
    algorithm: str = "best",
    strategies: Optional[Sequence[Strategy]] = None,
    seed: int = 0,
    progress: Progress = None,
    captured: Any = None,
) -> list[StrategyResult]:
    """Capture, place, propagate, plan and run every strategy on a small MoE model.

    Default strategies: ``strategy_variants(prefetch=True)``; the prefetching ones run on
    the model built with ``expert_prefetch=True`` (same weights) and are compared with the
    same eager outputs.

    ``captured``: a step captured elsewhere (``workbench.hf.capture_decode``: anything with
    ``program``, ``inputs`` and ``eager()``) to run instead of the built-in decoder; its
    default strategies are ``strategy_variants()`` (no routing hints to prefetch from).
    """
    progress = progress or _quiet
    if captured is not None:
        inputs, expected = captured.inputs, captured.eager()

        def programs(strategy: Strategy) -> Any:
            return captured.program

        strategies = strategies or strategy_variants()
    else:
        config = config or MoEConfig.tiny()
        model = QwenMoEDecoder(config, seed=seed).eval()
        inputs = model.example_inputs()
        with torch.no_grad():
            expected = model(*inputs)

        def make(hinted: bool):
            return (QwenMoEDecoder(config, seed=seed, expert_prefetch=True).eval() if hinted else model), inputs

        programs = _Programs(make, shape_only=False)
    results = []
    for strategy in progress(strategies or strategy_variants(prefetch=True), "tiny model: strategies"):
        dg = strategy.apply(programs(strategy))
        memory = plan(dg, algorithm)
        res = run(memory, *stage_inputs(dg, inputs, backend), backend=backend, cost_model=cost_model)
        rate = res.prefetch_hit_rate if strategy.prefetch else None
        results.append(StrategyResult(strategy, memory, res, _same(res.outputs, expected), prefetch_hit_rate=rate))
    return results


def measured_hit_rate(config: Optional[MoEConfig] = None, *, tokens: int = 256, seed: int = 0) -> float:
    """Share of routed experts that the previous layer's prediction got right, measured on
    ``tokens`` random tokens (one decode step of a batch, eager) of the model built with
    ``expert_prefetch=True``: for each token and each layer with a hint, |chosen ∩
    predicted| / k, averaged. Per token, so it is what a batch-1 decode step sees."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise ArgumentValueError(f"tokens must be a positive integer, got {tokens!r}")
    config = config or MoEConfig.tiny()
    model = QwenMoEDecoder(config, seed=seed, expert_prefetch=True).eval()
    k = config.num_experts_per_tok
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def record(module, args, output):
        if len(args) > 2 and args[2] is not None:  # Experts.forward(x, expert_idx, hint)
            seen.append((args[1].reshape(-1, k), args[2].reshape(-1, k)))  # (B, k) chosen, predicted

    hooks = [model.get_submodule(module).register_forward_hook(record) for module in find_experts(model).modules]
    try:
        gen = torch.Generator().manual_seed(seed)
        ids = torch.randint(config.vocab_size, (tokens, 1), generator=gen)
        with torch.no_grad():
            model(ids, torch.tensor([0]), *model.init_caches(tokens))
    finally:
        for h in hooks:
            h.remove()
    if not seen:
        raise ArgumentValueError("the model has a single layer: no layer is predicted by another, so there is no hit rate to measure")
    hits = sum(int((chosen[:, :, None] == predicted[:, None, :]).any(-1).sum()) for chosen, predicted in seen)
    return hits / (len(seen) * tokens * k)


def full_size_hit_rate(config: Optional[MoEConfig] = None, *, tokens: int = 256, seed: int = 0) -> float:
    """``measured_hit_rate`` of the tiny model widened to ``config``'s routed experts and
    top-k (default: the published 35B-A3B's 256 and 8): the prefetch hit rate the
    full-size strategies are timed with. Random weights: the previous layer's router says
    nothing of a trained router's choices; this is the rate of chance plus the residual
    stream's carry-over, not a trained model's."""
    config = config or MoEConfig.full()
    wide = dataclasses.replace(MoEConfig.tiny(), num_experts=config.num_experts,
                               num_experts_per_tok=config.num_experts_per_tok)  # fmt: skip
    return measured_hit_rate(wide, tokens=tokens, seed=seed)


def _mib(n: int) -> float:
    return round(n / 2**20, 3)


def _kib(n: int) -> float:
    return round(n / 2**10, 2)


def strategy_table(results: Sequence[StrategyResult]) -> pd.DataFrame:
    """One row per strategy: copies and bytes per token by kind, memory per device, time.

    ``h2d_KiB/token`` sums the graph's copies (a reuse copy counts every selected row, its
    upper bound); ``h2d_moved_KiB/token`` is what crossed the link in the run's timeline
    (a reuse copy's missed rows only); ``prefetch_hit_rate`` the run's hits over rows.
    """
    rows = []
    for r in results:
        dg, memory, res = r.device_graph, r.plan, r.run
        device = Device.parse(r.strategy.device)
        counts, moved = dg.copy_counts(), dg.copy_bytes()
        totals = res.timeline.totals_by_kind() if res is not None else {}
        crossed = res.copy_bytes_by_kind() if res is not None else {}
        rows.append(
            {
                "strategy": r.strategy.variant,
                "skip_copies": r.strategy.skip_copies,
                "h2d": counts["h2d"],
                "d2h": counts["d2h"],
                "d2d": counts["d2d"],
                "h2d_KiB/token": _kib(moved["h2d"]),  # the graph's copies (reuse copies: every row)
                "h2d_moved_KiB/token": _kib(crossed["h2d"]) if res is not None else None,  # the timeline's
                "d2h_KiB/token": _kib(moved["d2h"]),
                "prefetch_hit_rate": round(r.prefetch_hit_rate, 3) if r.prefetch_hit_rate is not None else None,
                "arena_cpu_KiB": _kib(memory.arena_bytes.get(CPU, 0)),
                f"arena_{device}_KiB": _kib(memory.arena_bytes.get(device, 0)),
                "resident_cpu_KiB": _kib(dg.constant_bytes.get(CPU, 0)),
                f"resident_{device}_KiB": _kib(dg.constant_bytes.get(device, 0)),
                "us/token": round(res.time_us, 2) if res is not None else None,
                "copy_us": round(sum(totals.get(k, 0.0) for k in ("h2d", "d2h", "d2d")), 2) if res else None,
                "overlap": round(res.overlap_fraction, 3) if res is not None else None,
                "equals_eager": r.matches_eager,
            }
        )
    return pd.DataFrame(rows)


def deployment_cost_model(link: str = "pcie_gen5", gpu: Optional[str] = None) -> CostModel:
    """The machine the full-size answers time a decode token on: ``gpu`` (default: the
    measured preset of the GPU at hand, else the datasheet H200), ``link`` and its host (the
    x86 server over PCIe; over NVLink-C2C the Grace CPU of a GH200: no x86 host has that
    link), and the runtime profile ``DEPLOYMENT_RUNTIME`` (the planned graph replayed as
    a compiled program) with the terms fitted to published runs (``speed.regime_model``)."""
    return CostModel.compose(gpu=gpu or default_device_preset(), link=link,
                             runtime=runtime_profile(DEPLOYMENT_RUNTIME))  # fmt: skip


def full_size_results(
    config: Optional[MoEConfig] = None,
    *,
    links: Sequence[str] = LINKS,
    cost_model: Optional[CostModel] = None,
    algorithm: str = "greedy",
    strategies: Optional[Sequence[Strategy]] = None,
    prefetch_hit_rate: Optional[float] = None,
    progress: Progress = None,
    captured: Any = None,
) -> list[StrategyResult]:
    """Shape-only analysis of the published configuration: plan every strategy, lay its
    decode token out (``speed.graph_layout.layout_of``) and time it under each link with
    ``speed.timer.time_decode`` — the one decode physics. Allocates no weights.

    ``cost_model``: the machine, its link swapped per column; default
    ``deployment_cost_model()``.

    Prefetching strategies are laid out with ``prefetch_hit_rate`` of their reuse copies'
    rows expected on the device; None means ``full_size_hit_rate(config)`` (the full-size
    weights are not there to measure).

    ``captured``: a shape-only step captured elsewhere (``workbench.hf.capture_decode`` of a
    meta model: anything with a ``program``) to analyse instead of the built-in decoder;
    its default strategies are ``strategy_variants()``.
    """
    progress = progress or _quiet
    base = cost_model if cost_model is not None else deployment_cost_model()
    if captured is not None:
        strategies = strategies or strategy_variants()
    chosen = list(strategies or strategy_variants(prefetch=True))
    rate = None
    if any(s.prefetch for s in chosen):
        rate = full_size_hit_rate(config) if prefetch_hit_rate is None else float(prefetch_hit_rate)

    def programs(strategy: Strategy) -> Any:
        if captured is not None:
            return captured.program
        # the sweep's own capture, cached per process: capacity_sweep reuses it
        return ConfigSource(config or MoEConfig.full()).program(strategy.prefetch)

    results = []
    for strategy in progress(chosen, "full size: strategies"):
        memory = planned(programs(strategy), strategy, algorithm)  # the sweep reuses it (sweeps.reuse)
        own = rate if strategy.prefetch else None
        layout = laid_out(memory, own if own is not None else 0.0)
        tokens = {link: time_decode(layout, base.with_link(link)) for link in links}
        results.append(StrategyResult(strategy, memory, tokens=tokens, prefetch_hit_rate=own, cost_model=base.name))
    return results


def full_size_table(results: Sequence[StrategyResult]) -> pd.DataFrame:
    """One row per strategy: resident and arena GiB per device, MiB over the link per token
    (a prefetching strategy's reuse copies move the share of rows its ``prefetch_hit_rate``
    expects to miss), and tokens/s under each link (``time_decode``)."""
    rows = []
    for r in results:
        dg, memory = r.device_graph, r.plan
        first = next(iter((r.tokens or {}).values()), None)
        dev = Device.parse(r.strategy.device)
        row = {
            "strategy": r.strategy.variant,
            "skip_copies": r.strategy.skip_copies,
            "resident_cpu_GiB": round(dg.constant_bytes.get(CPU, 0) / 2**30, 3),
            f"resident_{dev}_GiB": round(dg.constant_bytes.get(dev, 0) / 2**30, 3),
            f"arena_{dev}_MiB": _mib(memory.arena_bytes.get(dev, 0)),
            "link_MiB/token": _mib(int(first.link_bytes)) if first is not None else None,
            "prefetch_hit_rate": round(r.prefetch_hit_rate, 3) if r.prefetch_hit_rate is not None else None,
        }
        for link, token in (r.tokens or {}).items():
            row[f"tok/s {link}"] = round(token.tok_s, 2)
        rows.append(row)
    return pd.DataFrame(rows)


def prefetch_sensitivity(
    results: Sequence[StrategyResult],
    *,
    hit_rates: Optional[Sequence[float]] = None,
    links: Sequence[str] = LINKS,
    cost_model: Optional[CostModel] = None,
    skip_copies: bool = True,
) -> pd.DataFrame:
    """Full-size expert streaming without prefetch, then with prefetch at each hit rate:
    MiB per token over the link, tokens/s and the share of the copy time hidden beside
    compute under each link (``time_decode``).

    ``results`` come from ``full_size_results`` and hold both ``expert_streaming`` and
    ``expert_streaming+prefetch`` with ``skip_copies``. Default hit rates: 0 (every slab
    is fetched twice), the rate the prefetching result was laid out with, and 1.
    """
    base = cost_model if cost_model is not None else deployment_cost_model()

    def find(prefetch: bool) -> StrategyResult:
        for r in results:
            s = r.strategy
            if s.name == "expert_streaming" and s.prefetch == prefetch and s.skip_copies == skip_copies:
                return r
        want = expert_streaming(skip_copies=skip_copies, prefetch=prefetch).label
        raise ArgumentValueError(f"results hold no {want!r}; run full_size_results with that strategy")

    plain, hinted = find(False), find(True)
    if hit_rates is None:
        timed = hinted.prefetch_hit_rate
        hit_rates = [0.0, full_size_hit_rate() if timed is None else timed, 1.0]
    rows = []
    for label, result, rate in [("expert_streaming", plain, None)] + [
        ("expert_streaming+prefetch", hinted, float(h)) for h in hit_rates
    ]:
        layout = laid_out(result.plan, 0.0 if rate is None else rate)
        row: dict[str, Any] = {"strategy": label, "prefetch_hit_rate": None if rate is None else round(rate, 3)}
        for link in links:
            token = time_decode(layout, base.with_link(link))
            side = token.host + token.copy
            row.setdefault("link_MiB/token", _mib(int(token.link_bytes)))
            row[f"tok/s {link}"] = round(token.tok_s, 2)
            row[f"hidden {link}"] = round(token.hidden / side, 3) if side else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def capacity_sweep(
    config: Optional[MoEConfig] = None,
    *,
    budgets: Sequence[float] = (8, 16, 24, 32, 48, 80),
    links: Sequence[str] = LINKS,
    strategies: Optional[Any] = None,
    executor: Any = None,
    prefetch_hit_rate: Optional[float] = None,
    workers: Optional[int] = None,
    full_grid: bool = False,
    cost_model: Optional[CostModel] = None,
) -> SweepResult:
    """The capacity-planning question for ``config`` (default: the published 35B-A3B,
    shape-only): every strategy setting of ``sweeps.quick_grid`` (``full_grid=True``:
    ``sweeps.default_grid``, three times the settings, the same answers at the default
    budgets) under every link, and the best per budget (``workbench.sweeps.sweep``;
    expert-cache hit rates from a synthetic trace, labelled so).

    Without ``executor`` and ``workers`` the sweep runs in this process and reuses the
    program ``full_size_results`` captured (a worker process captures its own); with
    ``workers`` it runs on that many local processes. ``cost_model``: the machine, its link
    swapped per column (default ``deployment_cost_model()``)."""
    config = config or MoEConfig.full()
    check_flag(full_grid, "full_grid")
    rate = full_size_hit_rate(config) if prefetch_hit_rate is None else prefetch_hit_rate
    if executor is None and workers is None:
        executor = InlineExecutor()
    return sweep(
        config,
        budgets,
        links,
        strategies or (default_grid(config) if full_grid else quick_grid(config)),
        executor,
        prefetch_hit_rate=rate,
        workers=workers,
        cost_model=cost_model if cost_model is not None else deployment_cost_model(),
    )


#: The regime of published runs a sweep strategy's tokens/s are judged by (its interval).
STRATEGY_REGIMES = {"all_on_device": "all_on_gpu", "experts_on_host": "experts_on_host_compute",
                    "expert_streaming": "experts_copied", "expert_cache": "experts_copied",
                    "partial_offload": "partial_offload"}  # fmt: skip


def strategy_regime(strategy: str, on_miss: Any = None) -> str:
    """The published regime whose out-of-sample errors judge ``strategy``'s tokens/s: an
    expert cache whose misses the host computes is ``experts_on_host_compute``."""
    if strategy == "expert_cache" and on_miss == "host_compute":
        return "experts_on_host_compute"
    return STRATEGY_REGIMES.get(strategy, "")


def answer_table(result: SweepResult, intervals: Optional[Mapping[str, EarnedInterval]] = None) -> pd.DataFrame:
    """One row per (budget, link) of a ``capacity_sweep``: the best strategy, its
    parameters, tokens/s and its interval (``×/÷`` at the nominal level, and the
    ``evidence`` it is earned on: ``intervals`` by regime, default what the shipped decode
    model gives the deployment runtime, ``DEPLOYMENT_RUNTIME``), MiB over the link per
    token, device GiB used, where its hit rate comes from ("" when it has none), and the
    strategies it ties with (tokens/s within ``sweeps.TIE_RTOL``; a tie goes to the
    simpler strategy, ``sweeps.SIMPLICITY``)."""
    if intervals is None:
        model = regime_model()
        earned = {r: model.interval(DEPLOYMENT_RUNTIME, r) for r in PLACEMENT_REGIMES}
        intervals = {r: e for r, e in earned.items() if e is not None}
    best = result.best
    params = [c for c in best.columns if c.startswith("param.")]

    def parameters(row: pd.Series) -> str:
        def text(v: Any) -> str:  # a column with gaps holds floats: 16.0 was 16
            return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)

        return ", ".join(f"{c.removeprefix('param.')}={text(row[c])}" for c in params if pd.notna(row[c]))

    on_miss = best.get("param.on_miss", pd.Series(dtype=object))
    earned_rows = [intervals.get(strategy_regime(st, on_miss.get(i))) if fit else None
                   for i, st, fit in zip(best.index, best["strategy"], best["fits"])]  # fmt: skip

    return pd.DataFrame(
        {
            "budget_GiB": best["budget_GiB"],
            "link": best["link"],
            "best": best["strategy"].where(best["fits"], "(nothing fits)"),
            "parameters": best.apply(parameters, axis=1).where(best["fits"], ""),
            "tok/s": best["tok/s"],
            "×/÷": [round(e.factor, 2) if e is not None else float("nan") for e in earned_rows],
            "evidence": [e.evidence if e is not None else "" for e in earned_rows],
            "MiB/token": best["link_MiB/token"],
            "device_GiB": best["device_GiB"],
            "hit_rate": best["expected_hit_rate"].round(3),
            "hit_rate_from": best["hit_rate_source"].fillna(""),
            "tied_with": best["tied_with"].fillna(""),
        }
    )


def streaming_breakeven(
    config: Optional[MoEConfig] = None,
    *,
    links: Sequence[str] = LINKS,
    device_preset: Optional[str] = None,
) -> pd.DataFrame:
    """Tokens per expert at which a streamed expert's compute (its SwiGLU FFN, FLOPs counted
    by ``FlopCounterMode``) lasts as long as copying its weights over the link; above it,
    streaming hides behind compute. Timed on the machine the walkthrough's tokens are timed
    on (``deployment_cost_model``) with the cost functions every modeled time comes from
    (``machine.costs``: a kernel's roofline, a copy)."""
    config = config or MoEConfig.full()
    H, I = config.hidden_size, config.moe_intermediate_size
    dtype = config.torch_dtype
    slab_bytes = 3 * H * I * torch.empty((), dtype=dtype).element_size()  # w1 (2I×H) + w2 (H×I)

    def expert_us(model: CostModel, tokens: int) -> float:
        total = 0.0
        with torch.device("meta"):
            x = torch.empty(tokens, H, dtype=dtype)
            w1 = torch.empty(2 * I, H, dtype=dtype)
            w2 = torch.empty(H, I, dtype=dtype)
            h = torch.empty(tokens, I, dtype=dtype)
        for fn, args in ((torch.nn.functional.linear, (x, w1)), (torch.nn.functional.linear, (h, w2))):
            cost = op_cost(fn, args)
            total += costs.kernel_seconds(model, cost.flops, cost.bytes_touched, dtype_class(dtype)) * 1e6
        return total

    rows = []
    for link in links:
        model = deployment_cost_model(link, gpu=device_preset)
        copy_us = costs.copy_seconds(model, "h2d", slab_bytes) * 1e6
        lo, hi = 1, 1
        while expert_us(model, hi) < copy_us:
            lo, hi = hi, hi * 2
        while lo < hi:  # smallest token count whose compute covers the copy
            mid = (lo + hi) // 2
            lo, hi = (mid + 1, hi) if expert_us(model, mid) < copy_us else (lo, mid)
        flops_per_byte = getattr(model, f"device_flops_{dtype_class(dtype)}") / model.h2d_bandwidth
        rows.append(
            {
                "link": link,
                "h2d_GB/s": model.h2d_bandwidth / 1e9,
                "expert_slab_MiB": _mib(slab_bytes),
                "copy_us": round(copy_us, 2),
                "breakeven_tokens_per_expert": lo,
                "device_FLOPs_per_link_byte": round(flops_per_byte),
            }
        )
    return pd.DataFrame(rows)
