"""A transformers MoE model tried through every stage of the workbench, each stage's
outputs compared with the eager model's: what a new user would try, as one table.

``try_stages(model)`` → ``StageReport``: one row per stage — prefill and a static-cache
decode step under ``all_on_device``, ``experts_on_host`` and ``expert_streaming``; a
dynamic-cache decode step under ``all_on_device``; ``partial_offload(1)``; six expert
caches (``lru``, ``lfu``, ``static_hot`` × a miss copied or computed on the host); and
4-token greedy ``workbench.moe.decode`` runs — with its status (``equal``, ``differs``,
or the error's type and first line) and seconds.

Rules:
1. Every run is planned and run on the ``sim`` backend with the skip flags on; a step's
   outputs (logits and every cache state) are compared with the same step run eagerly,
   within ``atol``/``rtol``; multi-token decodes compare every step's logits.
2. The expert caches read the routed rows where the graph selects them: a model whose
   experts are transformers' ``grouped_mm`` is switched to ``batched_mm`` for those stages
   (and switched back after), when the family offers it. A cache holds
   ``CACHE_SLOTS`` experts per layer, but an admitting (``lru``/``lfu``) cache of a model
   whose expert ops read every expert each step (Llama 4's dense batched matmul) holds
   all E: a step's experts are resident together (``workbench.moe.expert_reads``).
3. A stage that fails is a row, never an exception: the table says what failed where; a
   capture that fails fails every stage built on it, each row quoting it. A model whose
   config declares routed experts that ``find_experts`` cannot find fails every stage
   that moves or caches experts with one ``HFError`` saying which parameters hold them
   and why they are not in a form the workbench expresses (``unexpressed_experts``).
4. The model is left as it was: its weights, its experts implementation, its config.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Optional

import pandas as pd
import torch

from ..moe.decode import decode
from ..moe.expert_reads import dense_layers
from ..moe.discovery import config_expert_count, expert_layers, find_experts
from ..moe.strategies import expert_cache, partial_offload
from ..planning.memory_plan import plan as make_plan
from ..runtime import stage_inputs, to_host
from ..runtime.executor import run
from ..moe.strategies import STRATEGIES
from .configs import HFError
from .models import check_model
from .steps import capture_decode, capture_prefill

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["STAGES", "StageReport", "StageResult", "try_stages", "unexpressed_experts"]

STRATEGY_NAMES = ("all_on_device", "experts_on_host", "expert_streaming")
CACHE_VARIANTS = tuple((policy, miss) for policy in ("lru", "lfu", "static_hot") for miss in ("copy", "host_compute"))
#: Every stage ``try_stages`` runs, in order.
STAGES: tuple[str, ...] = (
    *(f"prefill/{s}" for s in STRATEGY_NAMES),
    *(f"decode_static/{s}" for s in STRATEGY_NAMES),
    "decode_dynamic/all_on_device",
    "decode_4_tokens/all_on_device",
    "decode_4_tokens/partial_offload",
    *(f"decode_4_tokens/expert_cache_{p}_{m}" for p, m in CACHE_VARIANTS),
)
DECODE_TOKENS = 4
CACHE_SLOTS = 2


@dataclass(frozen=True)
class StageResult:
    """One stage of one model: ``equal`` (to eager), ``differs``, or the error."""

    stage: str
    status: str  # "equal", "differs", or "error"
    detail: str  # the error's type and first line, or the largest difference
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == "equal"


@dataclass(frozen=True)
class StageReport:
    """Every stage of one model (``name``), in ``STAGES`` order."""

    name: str
    results: tuple[StageResult, ...]

    def __iter__(self) -> Iterator[StageResult]:
        return iter(self.results)

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results)

    def failed(self) -> tuple[StageResult, ...]:
        return tuple(r for r in self.results if not r.ok)

    def to_dataframe(self) -> pd.DataFrame:
        rows = [{"model": self.name, "stage": r.stage, "status": r.status, "detail": r.detail,
                 "seconds": round(r.seconds, 2)} for r in self.results]
        return pd.DataFrame(rows, columns=["model", "stage", "status", "detail", "seconds"])


def try_stages(
    model: "PreTrainedModel",
    *,
    name: Optional[str] = None,
    stages: tuple[str, ...] = STAGES,
    past: int = 4,
    max_cache_len: int = 8,
    atol: float = 1e-4,
    rtol: float = 1e-4,
) -> StageReport:
    """Run ``model`` through ``stages`` (module rules); ``name`` labels the report
    (default: the config's ``model_type``)."""
    check_model(model)
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        raise HFError(f"unknown stages {unknown}; valid: {', '.join(STAGES)}")
    label = name or str(getattr(model.config, "model_type", type(model).__name__))
    captured: dict[str, Any] = {}

    def step_of(kind: str) -> Any:
        """The captured step ``kind`` (cached; a failure is cached and raised again)."""
        if kind not in captured:
            try:
                if kind == "prefill":
                    captured[kind] = capture_prefill(model, tokens=past)
                elif kind == "decode_dynamic":
                    captured[kind] = capture_decode(model, "dynamic", past=past)
                elif kind == "decode_rows":
                    captured[kind] = _with_rows_selected(model, lambda: capture_decode(model, "static", past=past, max_cache_len=max_cache_len))
                else:
                    captured[kind] = capture_decode(model, "static", past=past, max_cache_len=max_cache_len)
            except Exception as exc:  # rule 3: every stage on this step reports it
                captured[kind] = exc
        value = captured[kind]
        if isinstance(value, Exception):
            raise value
        return value

    def one_step(kind: str, strategy_name: str) -> str:
        step = step_of(kind)
        return _compare_step(step, STRATEGIES[strategy_name](), atol, rtol)

    def tokens(strategy: Any, rows: bool) -> str:
        step = step_of("decode_rows" if rows else "decode_static")
        memory = make_plan(strategy.apply(step.program), "greedy")
        result = _with_rows_selected(model, lambda: decode(memory, DECODE_TOKENS, first_token=5, reference=step.module, atol=atol)) if rows \
            else decode(memory, DECODE_TOKENS, first_token=5, reference=step.module, atol=atol)
        matches = result.matches_eager or ()
        return "" if all(matches) else f"steps equal to eager: {list(matches)}"

    runs: dict[str, Callable[[], str]] = {}
    for s in STRATEGY_NAMES:
        runs[f"prefill/{s}"] = functools.partial(one_step, "prefill", s)
        runs[f"decode_static/{s}"] = functools.partial(one_step, "decode_static", s)
    runs["decode_dynamic/all_on_device"] = functools.partial(one_step, "decode_dynamic", "all_on_device")
    runs["decode_4_tokens/all_on_device"] = lambda: tokens(STRATEGIES["all_on_device"](), False)
    runs["decode_4_tokens/partial_offload"] = lambda: tokens(partial_offload(1), False)
    for p, m in CACHE_VARIANTS:
        runs[f"decode_4_tokens/expert_cache_{p}_{m}"] = functools.partial(_cache_stage, step_of, tokens, p, m)
    unexpressed = unexpressed_experts(model)
    results = []
    for stage in stages:
        start = time.perf_counter()
        try:
            if unexpressed and (stage.startswith("decode_4") or not stage.endswith("/all_on_device")):
                raise HFError(unexpressed)
            difference = runs[stage]()
            status, detail = ("equal", "") if not difference else ("differs", difference)
        except Exception as exc:  # rule 3
            status, detail = "error", _first_line(exc)
        results.append(StageResult(stage, status, detail, time.perf_counter() - start))
    return StageReport(label, tuple(results))


def unexpressed_experts(model: "PreTrainedModel") -> str:
    """Rule 3: why the routed experts ``model``'s config declares are not found ("" when
    they are, or when it declares none): the parameters that hold them and what is
    missing — a router of their count (``workbench.moe.discovery`` rule 2), or slabs of
    three or more dims."""
    count = config_expert_count(model.config)
    if not count or find_experts(model):
        return ""
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    stacked = [n for n, shape in shapes.items() if len(shape) >= 3 and shape[0] == count]
    head = f"{type(model).__name__}'s config declares {count} routed experts, but "
    if stacked:
        container = stacked[0].rpartition(".")[0]
        parent = container.rpartition(".")[0] + "."
        near = sorted((n for n in shapes if n.startswith(parent) and not n.startswith(container + ".")
                       and len(shapes[n]) == 2 and shapes[n][0] != count), key=lambda n: abs(shapes[n][0] - count))
        routers = [f"{n} {shapes[n]}" for n in near[:2]]
        return (head + f"no router scores those {count}: {container} stacks them, while its block's "
                f"router-like parameters score another count ({'; '.join(routers) or 'none'}); "
                "workbench.moe.discovery.find_experts takes as router a parameter that scores the experts, plus at most "
                f"{count // 2} more that hold no weights there (zero-computation or shared experts), reading the "
                "hidden state or a layer of its own module that does; without one no strategy can move or cache them, so "
                "run this model with all_on_device")
    rows = [f"{n} {shapes[n]}" for n, shape in shapes.items() if len(shape) == 2 and shape[0] == count][:2]
    return (head + "none is a stacked slab or module: " + (f"{'; '.join(rows)} hold one vector per expert, but not as "
            "the table of a lookup module (nn.Embedding) whose rows the router's ids pick, " if rows else "") +
            "a kind of expert workbench.moe.discovery.find_experts does not express, so no strategy can move or cache them")


def _cache_stage(step_of: Callable[[str], Any], tokens: Callable[[Any, bool], str], policy: str, on_miss: str) -> str:
    """Rule 2: a 4-token decode through ``CACHE_SLOTS`` slots, or all E for an admitting
    cache of experts read whole."""
    slots = CACHE_SLOTS
    if policy != "static_hot":
        layers = expert_layers(step_of("decode_rows").program)
        if dense_layers(step_of("decode_rows").program, layers):
            slots = max(layer.num_experts for _, layer in layers)
    return tokens(expert_cache(slots, policy, on_miss=on_miss), True)


def _compare_step(step: Any, strategy: Any, atol: float, rtol: float) -> str:
    """Rule 1: plan and run ``step`` under ``strategy``; "" when every output equals eager."""
    dg = strategy.apply(step.program)
    memory = make_plan(dg, "greedy")
    result = run(memory, *stage_inputs(dg, step.inputs, "sim"), backend="sim")
    got = result.outputs if isinstance(result.outputs, (tuple, list)) else (result.outputs,)
    want = step.eager()
    want = want if isinstance(want, tuple) else (want,)
    if len(got) != len(want):
        return f"{len(got)} outputs, eager has {len(want)}"
    worst = 0.0
    for g, w in zip(got, want):
        g = to_host(g)
        if g.shape != w.shape or g.dtype != w.dtype:
            return f"an output is {tuple(g.shape)} {g.dtype}, eager's {tuple(w.shape)} {w.dtype}"
        if not torch.allclose(g.float(), w.float(), atol=atol, rtol=rtol):
            worst = max(worst, float((g.float() - w.float()).abs().max()))
    return f"largest difference {worst:.3g}" if worst else ""


def _with_rows_selected(model: "PreTrainedModel", fn: Callable[[], Any]) -> Any:
    """Rule 2: ``fn()`` with the model's grouped experts switched to ``batched_mm`` (then back)."""
    previous = getattr(model.config, "_experts_implementation", None)
    if previous != "grouped_mm":
        return fn()
    model.set_experts_implementation("batched_mm")
    try:
        return fn()
    finally:
        model.set_experts_implementation(previous)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:400]
