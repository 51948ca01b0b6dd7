"""Shared test helpers: captured examples are cached (export is the slow step, and a
Program is never modified by later stages)."""

import functools

import workbench as wb
from workbench.examples import example


@functools.lru_cache(maxsize=None)
def captured(name: str, decompose: bool = False, shape_only: bool = False):
    """(model, inputs, program) for a built-in example, exported once per session."""
    model, inputs = example(name)
    return model, inputs, wb.capture(model, inputs, decompose=decompose, shape_only=shape_only)
