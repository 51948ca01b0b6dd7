"""The answers to the tutorial notebooks' exercises, computed, never printed by a notebook.

Each exercise of notebook ``NN`` is an ``Exercise``: the function that computes its answer
from the notebook's own objects (the names in ``takes``, passed by keyword), and how close
a prediction must come. ``exercises.check_exercise`` compares a learner's prediction with
it and says only whether it matches; the worked solution — the reasoning and the
derivation from first principles — is the notebook's solution notebook
(``notebooks/solutions/NN_*.ipynb``), which the tests execute.

Rules:
  1. An answer is computed by the same library calls the notebook makes (a placement, a
     plan, a replay, a cost model), never typed in: when the library's figures change, the
     answer changes with them, and the solution notebook (which derives it another way)
     fails if the two part.
  2. An answer is plain data: a number, a bool, a string, or a dict or list of them.
  3. ``takes`` names exactly the notebook objects ``answer`` needs; everything else it
     builds itself from shipped data (presets, examples, committed measurements).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from importlib import import_module
from typing import Any, Callable

from .measured_decode import measured_gathers
from ..capture import capture
from ..devices import CPU, Device
from ..errors import WorkbenchError
from ..machine import CostModel
from ..models import MoEConfig
from ..models.examples import example
from ..moe import POLICIES, replay, replay_all, slab_bytes, synthetic_trace_for
from ..moe.strategies import expert_streaming
from ..place import place
from ..planning.memory_plan import plan
from ..propagate import propagate
from ..runtime import StreamScheduler
from ..runtime.executor import run
from ..runtime.tensors import stage_inputs

__all__ = ["EXERCISES", "Exercise", "ExerciseError", "SOLUTION_NOTEBOOKS"]

#: Each notebook's name; its solutions are ``notebooks/solutions/<name>.ipynb``.
SOLUTION_NOTEBOOKS = {
    "01": "01_device_propagation",
    "02": "02_memory_planning",
    "03": "03_copy_kernels",
    "04": "04_moe_walkthrough",
    "05": "05_bring_your_own_model",
    "06": "06_capacity_planning",
    "07": "07_plan_your_machine",
}


class ExerciseError(WorkbenchError, ValueError):
    """An exercise that does not exist, called with the wrong objects, or whose answer
    cannot be computed here."""


@dataclass(frozen=True)
class Exercise:
    """One exercise: what computes its answer, and how near a prediction must come."""

    notebook: str  # the notebook's two-digit number, "03"
    number: int  # the exercise's number within the notebook, from 1
    answer: Callable[..., Any]  # computes the answer from the objects named in `takes`
    takes: tuple[str, ...] = ()  # the notebook's objects `answer` takes, by keyword
    rel_tol: float = 0.0  # a number within this fraction of the answer matches
    abs_tol: float = 0.0  # ... or within this much of it


# 01 · device propagation ----------------------------------------------------------------


def _gelu_only_copies(prog: Any) -> dict[str, int]:
    counts = propagate(place(prog, {"cuda:1": ["aten.gelu"]})).copy_counts()
    return {"d2d": counts["d2d"], "h2d": counts["h2d"]}


def _copies_removed_by_skips(placed: Any, dg: Any) -> int:
    skipped = propagate(placed, skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True)
    return sum(dg.copy_counts().values()) - sum(skipped.copy_counts().values())


# 02 · memory planning --------------------------------------------------------------------


def _host_arena_growth(dg: Any) -> dict[int, int]:
    base = plan(dg, algorithm="best", alignment=16).arena_bytes[CPU]
    return {a: plan(dg, algorithm="best", alignment=a).arena_bytes[CPU] - base for a in (64, 1024)}


def _softmax_only_lower_bound() -> int:
    model, inputs = example("attention")
    placed = place(capture(model, inputs), {"cuda:0": ["aten.softmax"]})
    return int(plan(propagate(placed), algorithm="best").lower_bound[Device.parse("cuda:0")])


# 03 · copy kernels -----------------------------------------------------------------------


def _c2c_overlapped_span(weight_bytes: int, compute_us: float) -> float:
    copy_us = CostModel.preset("h200", link="nvlink_c2c").copy_time_us("h2d", weight_bytes)
    s = StreamScheduler()
    last = None
    for layer in range(4):
        copied = s.schedule("h2d", f"weights {layer}", "cuda:0", "copy", copy_us, nbytes=weight_bytes)
        deps = [copied] + ([last] if last is not None else [])
        last = s.schedule("compute", f"layer {layer}", "cuda:0", "compute", compute_us, deps=deps)
    return s.timeline().span_us


def _pipelined_loop(top_k: int = 8) -> dict[str, float]:
    """A loop of ``top_k`` copies priced as one gather plus ``c`` µs per copy (the copy engine
    pipelines the copies' latency); ``c`` fitted to the measured 16 KiB ratio, then the
    ratio that model gives at 256 KiB."""
    gathers = measured_gathers("h200")
    if gathers is None:
        raise ExerciseError("exercise 2 of notebook 03 needs the committed H200 gather measurement (h200_copy_bandwidth.csv)")
    fitted = CostModel.preset("measured:h200")
    measured = gathers.loc[16 << 10, "loop_ours"] / gathers.loc[16 << 10, "gather_kernel"]
    c = (measured - 1) * fitted.copy_time_us("h2d", top_k * (16 << 10)) / top_k
    return {"c_us": float(c), "ratio_256KiB": float(1 + top_k * c / fitted.copy_time_us("h2d", top_k * (256 << 10)))}


# 04 · the MoE walkthrough ----------------------------------------------------------------


def _hiding_batch() -> int:
    full = MoEConfig.full()
    walkthrough = import_module("workbench.app.walkthrough")  # the sweeps and timer: notebook 04's exercise only
    per_expert = walkthrough.streaming_breakeven(full).set_index("link").loc["pcie_gen5", "breakeven_tokens_per_expert"]
    return math.ceil(per_expert * full.num_experts / full.num_experts_per_tok)


def _streaming_ceiling() -> float:
    full = MoEConfig.full()
    slab = 3 * full.moe_intermediate_size * full.hidden_size * 2  # gate, up and down of one expert, bf16
    return CostModel.preset("h200", link="pcie_gen5").h2d_bandwidth / (full.num_experts_per_tok * full.num_hidden_layers * slab)


# 05 · bring your own model ---------------------------------------------------------------


def _streamed(step: Any) -> Any:
    dg = expert_streaming().apply(step.program)
    return run(plan(dg), *stage_inputs(dg, step.inputs, "sim"), backend="sim")


def _top4_link_kib(model: Any) -> float:
    hf = import_module("workbench.hf")  # transformers is needed by notebook 05's exercises only
    config = copy.deepcopy(model.config)
    config.num_experts_per_tok = 4
    top4 = hf.load_model(config, seed=0)
    done = _streamed(hf.capture_decode(top4, "static", past=8, max_cache_len=16))
    return sum(r.link_bytes for r in done.routed) / 2**10


def _prefill_slots(model: Any) -> int:
    hf = import_module("workbench.hf")
    (slots,) = {r.slots for r in _streamed(hf.capture_prefill(model, tokens=3)).routed}
    return int(slots)


# 06 · capacity planning ------------------------------------------------------------------


def _cache_that_holds_everything(real: Any, tiny: Any) -> dict[str, Any]:
    by_policy = {r.policy: r for r in replay_all(real, POLICIES, 8, slab_bytes(tiny))}
    lru = by_policy["lru"]
    return {"static_hot hit rate": by_policy["static_hot"].hit_rate(), "lru evictions": int(lru.evictions.sum()),
            "lru misses": int(lru.misses.sum())}


def _pinned_on_another_seed() -> dict[int, float]:
    full = MoEConfig.full()
    scored = synthetic_trace_for(full, 1000, zipf=1.2, reuse=0.3, seed=0)
    pinned = synthetic_trace_for(full, 1000, zipf=1.2, reuse=0.3, seed=1).counts()
    return {slots: round(replay(scored, "static_hot", slots, slab_bytes(full), popularity=pinned).hit_rate(), 3)
            for slots in (32, 64)}


# 07 · plan your machine ------------------------------------------------------------------


def _best_n_cpu_moe(model: Any, my_parts: Any, context: int, gpus: tuple[str, ...] = ("rtx_4060",)) -> int:
    search = import_module("workbench.machine_plan.search")  # the planner: notebook 07's exercises only
    best = search.plan_machine(model, gpus=list(gpus), host="my_desktop", parts=my_parts, context=context).plans[0]
    return int(dict(best.settings)["n_cpu_moe"])


def _more_host_layers(model: Any, my_parts: Any) -> int:
    return _best_n_cpu_moe(model, my_parts, 32768) - _best_n_cpu_moe(model, my_parts, 8192)


def _two_cards(model: Any, my_parts: Any) -> int:
    return _best_n_cpu_moe(model, my_parts, 8192, ("rtx_4060", "rtx_4060"))


EXERCISES: dict[tuple[str, int], Exercise] = {
    (e.notebook, e.number): e
    for e in (
        Exercise("01", 1, _gelu_only_copies, ("prog",)),
        Exercise("01", 2, _copies_removed_by_skips, ("placed", "dg")),
        Exercise("02", 1, _host_arena_growth, ("dg",)),
        Exercise("02", 2, _softmax_only_lower_bound),
        Exercise("03", 1, _c2c_overlapped_span, ("weight_bytes", "compute_us"), rel_tol=0.01),
        Exercise("03", 2, _pipelined_loop, rel_tol=0.05),
        Exercise("04", 1, _hiding_batch, rel_tol=0.02),
        Exercise("04", 2, _streaming_ceiling, rel_tol=0.02),
        Exercise("05", 1, _top4_link_kib, ("model",)),
        Exercise("05", 2, _prefill_slots, ("model",)),
        Exercise("06", 1, _cache_that_holds_everything, ("real", "tiny"), abs_tol=0.005),
        Exercise("06", 2, _pinned_on_another_seed, abs_tol=0.03),
        Exercise("07", 1, _more_host_layers, ("model", "my_parts"), abs_tol=1),
        Exercise("07", 2, _two_cards, ("model", "my_parts"), abs_tol=1),
    )
}
