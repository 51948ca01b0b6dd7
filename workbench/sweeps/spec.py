"""Strategy specs: a strategy named by its factory and keyword arguments, as plain data.

A sweep ships specs to its workers, never ``Strategy`` objects (which hold placement
callables): a spec is small, picklable, hashable and prints as a table row.

Rules:
  1. ``StrategySpec(name, params)``: ``name`` is a key of
     ``workbench.moe.strategies.all_strategies()``, ``params`` the factory's keyword
     arguments as ``(key, value)`` pairs sorted by key; ``build()`` calls the factory.
  2. ``expand(grid)`` turns ``{name: {param: values}}`` into one spec per combination of
     values (the cartesian product, in the order given); a plain value is one value; a
     list of specs passes through. Unknown names are an error listing the valid ones.
  3. ``line`` names a spec without its *axis* parameter (``AXES``: the one a plot draws
     along, e.g. ``n_host_layers`` of ``partial_offload``), so a Pareto plot draws one
     line per strategy setting and one point per axis value.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, Union

from ..errors import WorkbenchError
from ..moe.strategies import all_strategies
from ..strategy import Strategy

__all__ = ["AXES", "SpecError", "StrategySpec", "StrategyGrid", "expand"]

#: Rule 3: the parameter a strategy's line is drawn along.
AXES: dict[str, str] = {"partial_offload": "n_host_layers", "expert_cache": "slots_per_layer"}

StrategyGrid = Union[Mapping[str, Mapping[str, Any]], Iterable["StrategySpec"]]


class SpecError(WorkbenchError, ValueError):
    """A strategy spec or grid names an unknown strategy or parameter."""


@dataclass(frozen=True)
class StrategySpec:
    """A strategy factory and its keyword arguments (rule 1)."""

    name: str  # factory name, e.g. "partial_offload"
    params: tuple[tuple[str, Any], ...] = ()  # keyword arguments, sorted by key

    @classmethod
    def of(cls, name: str, **params: Any) -> "StrategySpec":
        return cls(name, tuple(sorted(params.items())))

    def __post_init__(self) -> None:
        factories = all_strategies()
        if self.name not in factories:
            raise SpecError(f"unknown strategy {self.name!r}; valid: {', '.join(sorted(factories))}")
        keys = [k for k, _ in self.params]
        if keys != sorted(set(keys)):
            raise SpecError(f"params of {self.name!r} must be (key, value) pairs sorted by key, each key once: {keys}")

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.params)

    def build(self) -> Strategy:
        """The strategy (rule 1); a bad argument is the factory's own error."""
        try:
            return all_strategies()[self.name](**self.kwargs)
        except TypeError as exc:
            raise SpecError(f"{self.label}: {exc}") from None

    @property
    def label(self) -> str:
        """``name(key=value, ...)``: one row of a table."""
        return _call(self.name, self.params)

    @property
    def line(self) -> str:
        """The label without the axis parameter (rule 3)."""
        axis = AXES.get(self.name)
        return _call(self.name, tuple(p for p in self.params if p[0] != axis))

    @property
    def axis_value(self) -> Any:
        """The value of the axis parameter, or None for a strategy without one."""
        axis = AXES.get(self.name)
        return self.kwargs.get(axis) if axis is not None else None


def _call(name: str, params: Sequence[tuple[str, Any]]) -> str:
    return f"{name}({', '.join(f'{k}={v}' for k, v in params)})" if params else name


def expand(grid: StrategyGrid) -> list[StrategySpec]:
    """Rule 2."""
    if isinstance(grid, Mapping):
        specs = []
        for name, params in grid.items():
            if not isinstance(params, Mapping):
                raise SpecError(f"grid[{name!r}] must map parameter names to values, got {type(params).__name__}")
            keys = sorted(params)
            values = [_values(params[k]) for k in keys]
            specs += [StrategySpec(name, tuple(zip(keys, combo))) for combo in itertools.product(*values)]
    else:
        specs = list(grid)
        bad = [s for s in specs if not isinstance(s, StrategySpec)]
        if bad:
            raise SpecError(f"a strategy list holds StrategySpec objects, got {type(bad[0]).__name__}")
    if not specs:
        raise SpecError("the strategy grid is empty")
    return list(dict.fromkeys(specs))


def _values(v: Any) -> list[Any]:
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        return [v]
    return list(v)
