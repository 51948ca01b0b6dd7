"""Shared cases for the transformers tests: each family's tiny model and its captured
prefill and decode steps, built once per session (capture is the slow step, and a
captured step is never modified by later stages)."""

from __future__ import annotations

import functools

import pytest
import torch

pytest.importorskip("transformers")

import workbench as wb  # noqa: E402
from workbench import hf  # noqa: E402
from workbench.runtime import stage_inputs, to_host  # noqa: E402

FAMILIES = tuple(hf.FAMILIES)
MOE_FAMILIES = tuple(name for name, family in hf.FAMILIES.items() if family.moe)
DENSE_FAMILIES = tuple(name for name, family in hf.FAMILIES.items() if not family.moe)
KINDS = ("prefill", "decode")


@functools.lru_cache(maxsize=None)
def tiny_model(family: str, *, experts_implementation: str | None = None, dtype: torch.dtype | None = None):
    """The family's tiny shipped configuration with seed-0 weights."""
    return hf.load_model(family, experts_implementation=experts_implementation, dtype=dtype)


@functools.lru_cache(maxsize=None)
def captured(family: str, kind: str, experts_implementation: str | None = None, dtype: torch.dtype | None = None):
    """A prefill of 4 tokens, or one decode step after 4 tokens in a static cache of 8."""
    options = {"experts_implementation": experts_implementation, "dtype": dtype}
    model = tiny_model(family, **{k: v for k, v in options.items() if v is not None})  # one cache key per model
    if kind == "prefill":
        return hf.capture_prefill(model, tokens=4)
    return hf.capture_decode(model, "static", past=4, max_cache_len=8)


@functools.lru_cache(maxsize=None)
def eager(step) -> tuple[torch.Tensor, ...]:
    out = step.eager()
    return out if isinstance(out, tuple) else (out,)


def run_on_sim(step, strategy):
    """capture → strategy → plan → wb.run on ``sim``: (DeviceGraph, RunResult, outputs on the host)."""
    dg = strategy.apply(step.program)
    memory = wb.plan(dg, "greedy")
    memory.verify()
    result = wb.run(memory, *stage_inputs(dg, step.inputs, "sim"), backend="sim")
    outputs = result.outputs if isinstance(result.outputs, (tuple, list)) else (result.outputs,)
    return dg, result, tuple(to_host(t) for t in outputs)


def assert_equal_to_eager(step, outputs, atol: float = 1e-5) -> None:
    want = eager(step)
    assert len(outputs) == len(want)
    for got, expected in zip(outputs, want):
        assert got.shape == expected.shape and got.dtype == expected.dtype
        assert torch.allclose(got.float(), expected.float(), atol=atol, rtol=atol), (got - expected).abs().max()
