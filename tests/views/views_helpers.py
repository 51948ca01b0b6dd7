"""Shared builders for the view tests: real captured, placed, propagated and planned
small models (each built once per session) and modeled timelines.

Timelines come from real runs of the planned graphs on the simulated backend
(``residual_run``).
"""

from __future__ import annotations

import functools

import workbench as wb

from conftest import captured  # noqa: F401  (tests/conftest.py, on sys.path under pytest)


@functools.lru_cache(maxsize=None)
def placed_graph(name: str, rules_items: tuple, skip_h2d: bool = False, skip_d2h: bool = False):
    """(model, inputs, DeviceGraph) for a built-in example; rules as a tuple of items."""
    model, inputs, prog = captured(name)
    rules = {device: list(patterns) for device, patterns in rules_items}
    dg = wb.propagate(
        wb.place(prog, rules), skip_h2d_for_method_inputs=skip_h2d, skip_d2h_for_method_outputs=skip_d2h
    )
    return model, inputs, dg


def residual_two_devices():
    """The residual example with linear on cuda:0 and gelu on cuda:1: h2d, d2h and d2d copies."""
    return placed_graph("residual", (("cuda:0", ("aten.linear",)), ("cuda:1", ("aten.gelu",))))


def residual_fused():
    """The residual example with linear and gelu on cuda:0: multi-op delegates."""
    return placed_graph("residual", (("cuda:0", ("aten.linear", "aten.gelu")),))


@functools.lru_cache(maxsize=None)
def planned(name: str, rules_items: tuple, algorithm: str = "greedy"):
    _, _, dg = placed_graph(name, rules_items)
    return wb.plan(dg, algorithm=algorithm)


def residual_plan(algorithm: str = "greedy"):
    return planned("residual", (("cuda:0", ("aten.linear",)), ("cuda:1", ("aten.gelu",))), algorithm)


@functools.lru_cache(maxsize=None)
def residual_run():
    """(plan, RunResult) of the two-device residual example run once on ``sim``."""
    _, inputs, _ = residual_two_devices()
    plan = residual_plan()
    return plan, wb.run(plan, *inputs, backend="sim")


def click(view, key, focus="same"):
    """What a click in the browser does to the kernel's state: the clicked view sends its
    selected item ``key`` and the linked value ``focus`` (default: ``key``) in one
    message, and every view linked to it by jslink sends the same focus."""
    name = key if focus == "same" else focus
    with view.canvas.hold_trait_notifications():
        view.canvas.selected = key
        view.canvas.focus = name
    for other in view.linked:
        other.canvas.focus = name


@functools.lru_cache(maxsize=None)
def tiny_moe():
    """(model, inputs, Program) of the tiny MoE decoder (capture takes ~10 s: slow tests only)."""
    from workbench.models import MoEConfig, QwenMoEDecoder

    model = QwenMoEDecoder(MoEConfig.tiny())
    inputs = model.example_inputs()
    return model, inputs, wb.capture(model, inputs)


@functools.lru_cache(maxsize=None)
def tiny_streaming():
    """(plan, RunResult) of the tiny MoE under expert_streaming, run once on ``sim``."""
    from workbench.runtime import stage_inputs
    from workbench.moe.strategies import expert_streaming

    _model, inputs, prog = tiny_moe()
    dg = expert_streaming().apply(prog)
    plan = wb.plan(dg)
    return plan, wb.run(plan, *stage_inputs(dg, inputs, "sim"), backend="sim")
