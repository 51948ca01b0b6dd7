"""What a cross-check is run under: the skip-flag settings, the placement rules, the inputs.

Rules:
1. A flag setting is a pair of bools ``(skip_h2d, skip_d2h)``; a list of settings is
   never empty.
2. Placement rules are a mapping ``{device: [op patterns]}`` as ``workbench.place`` takes
   them. ``node:`` patterns are refused: node names differ between the workbench's graph
   and ExecuTorch's edge graph.
3. Example inputs are a tuple (a single tensor is wrapped into one).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import torch

from ..devices import Device
from ..errors import WorkbenchError
from ..place import PlacementError, parse_rules

__all__ = [
    "CrossCheckInputError",
    "CrossCheckTypeError",
    "FLAG_LABELS",
    "FLAG_SETTINGS",
    "FrozenRules",
    "as_input_tuple",
    "check_settings",
    "freeze_rules",
    "parse_edge_rules",
    "rules_text",
]


class CrossCheckInputError(WorkbenchError, ValueError):
    """A cross-check was asked for with a value it cannot use (a flag setting, a case)."""


class CrossCheckTypeError(WorkbenchError, TypeError):
    """A cross-check function was given the wrong kind of object."""


#: Every (skip_h2d, skip_d2h) setting, in the order tables show them, with its short label.
FLAG_LABELS: Mapping[tuple[bool, bool], str] = {
    (False, False): "none",
    (True, False): "skip-h2d",
    (False, True): "skip-d2h",
    (True, True): "both",
}
FLAG_SETTINGS: tuple[tuple[bool, bool], ...] = tuple(FLAG_LABELS)

#: Placement rules as results keep them: ``((device, (pattern, ...)), ...)``, devices normalized.
FrozenRules = tuple[tuple[str, tuple[str, ...]], ...]


def check_settings(settings: Iterable[Any]) -> tuple[tuple[bool, bool], ...]:
    """The settings as a tuple of ``(skip_h2d, skip_d2h)`` pairs (rule 1); ``ValueError`` otherwise."""
    out = []
    for item in settings:
        if not (isinstance(item, tuple) and len(item) == 2 and all(isinstance(f, bool) for f in item)):
            raise CrossCheckInputError(
                f"a flag setting is a pair of bools (skip_h2d, skip_d2h), such as (True, False); got {item!r}"
            )
        out.append(item)
    if not out:
        raise CrossCheckInputError("settings is empty; give at least one (skip_h2d, skip_d2h) pair")
    return tuple(out)


def parse_edge_rules(rules: Any) -> list[tuple[Device, str, str, str]]:
    """``workbench.place.parse_rules`` of ``rules``, refusing what cannot be cross-checked (rule 2)."""
    if not isinstance(rules, Mapping):
        raise PlacementError(
            "the ExecuTorch cross-check takes rules as a mapping {device: [op patterns]}, such as "
            f"{{'cuda:0': ['aten.add']}}; got {type(rules).__name__}"
        )
    parsed = parse_rules(rules)
    for _device, kind, _glob, original in parsed:
        if kind == "node":
            raise PlacementError(
                f"pattern {original!r}: 'node:' patterns cannot be cross-checked, because node "
                "names differ between the workbench's graph and ExecuTorch's edge graph; use op "
                "patterns ('aten.add') or module patterns ('module:layers.*')"
            )
    return parsed


def freeze_rules(parsed: Sequence[tuple[Device, str, str, str]]) -> FrozenRules:
    """Parsed rules as ``((device, (pattern, ...)), ...)``, in the order given."""
    out: dict[str, list[str]] = {}
    for device, _kind, _glob, original in parsed:
        out.setdefault(str(device), []).append(original)
    return tuple((dev, tuple(pats)) for dev, pats in out.items())


def rules_text(rules: Iterable[tuple[str, Sequence[str]]]) -> str:
    """``"cuda:0: aten.relu, aten.add; cuda:1: aten.mul"``."""
    return "; ".join(f"{dev}: {', '.join(pats)}" for dev, pats in rules)


def as_input_tuple(example_inputs: Any) -> tuple:
    """The example inputs as a tuple (rule 3); ``TypeError`` for anything else."""
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, (list, tuple)):
        return tuple(example_inputs)
    raise CrossCheckTypeError(
        f"example_inputs must be a tuple of inputs (or a single tensor), got {type(example_inputs).__name__}"
    )
