"""A caller's ``run_node``, checked: every result it returns must be able to stand for the
node's traced value (a tensor of the traced dtype and rank, and of its shape where that is
static; a sequence of the same length; a number for a number), else the call fails with an
``ExecutorError`` naming the node and what its target returns."""

from __future__ import annotations

from typing import Any

import torch

from ..arguments import describe
from ..graph_values import value_of
from .call import ExecutorError, RunNode

__all__ = ["checked_run_node"]


def _expected_result(val: Any) -> str:
    if isinstance(val, torch.Tensor):
        return f"a torch.Tensor of dtype {val.dtype} and shape {tuple(val.shape)}"
    if isinstance(val, (tuple, list)):
        return f"a tuple or list of {len(val)} values"
    return f"a {type(val).__name__}"


def _result_problem(val: Any, result: Any) -> str:
    """why ``result`` cannot stand for the traced value ``val``, or ""."""
    if val is None:
        return ""
    if isinstance(val, torch.Tensor):
        if not isinstance(result, torch.Tensor):
            return "not a tensor"
        if result.dtype != val.dtype:
            return f"dtype {result.dtype}"
        static = all(isinstance(d, int) for d in val.shape)
        if (static and tuple(result.shape) != tuple(val.shape)) or result.dim() != val.dim():
            return f"shape {tuple(result.shape)}"
        return ""
    if isinstance(val, (tuple, list)):
        if not isinstance(result, (tuple, list)) or len(result) != len(val):
            return "not a sequence of that length"
        for i, (v, r) in enumerate(zip(val, result)):
            inner = _result_problem(v, r)
            if inner:
                return f"element {i} has {inner}" if not inner.startswith("not") else f"element {i} is {inner}"
        return ""
    if isinstance(val, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool)):
        ok = isinstance(result, (bool, int, float, torch.SymInt, torch.SymFloat, torch.SymBool)) or (
            isinstance(result, torch.Tensor) and result.dim() == 0
        )
        return "" if ok else "not a number"
    return ""


def checked_run_node(run_node: RunNode) -> RunNode:
    """``run_node`` with every result checked against the node's traced value."""

    def checked(node: torch.fx.Node, args: tuple, kwargs: dict) -> Any:
        result = run_node(node, args, kwargs)
        val = value_of(node)
        problem = _result_problem(val, result)
        if problem:
            raise ExecutorError(
                f"run_node returned {describe(result)} for node {node.name!r} ({node.target}): {problem}; "
                f"it must return what the node's target returns: {_expected_result(val)}"
            )
        return result

    return checked
