"""Where a model keeps its routed experts: container modules and weight names per layer.

Everything in ``workbench.moe`` that needs to know which modules hold the routed experts
asks here, so that a general discovery (for Hugging Face models too) replaces these two
functions and nothing else.

Rules:
  1. The routed experts of MoE layer ``i`` live in the module ``layers.{i}.mlp.experts``
     (the built-in ``QwenMoEDecoder``); their stacked weights are that module's
     parameters, one row per expert along dim 0.
  2. Layers are listed in layer order; a model without such modules is an error naming
     the path looked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Mapping, Optional

import torch

from ..errors import WorkbenchError

__all__ = ["EXPERT_PATH", "ExpertLayer", "ExpertDiscoveryError", "expert_layer_of", "expert_layers", "expert_modules"]

#: Rule 1: the container path pattern, ``{i}`` the layer index.
EXPERT_PATH = "layers.{i}.mlp.experts"
_PATTERN = re.compile(r"^layers\.(\d+)\.mlp\.experts$")


class ExpertDiscoveryError(WorkbenchError, ValueError):
    """The model or program holds no routed experts where they were looked for."""


@dataclass(frozen=True)
class ExpertLayer:
    """One MoE layer's routed experts."""

    layer: int  # index of the decoder layer
    module: str  # container module path, e.g. "layers.3.mlp.experts"
    weights: tuple[str, ...]  # stacked weight FQNs, e.g. ("layers.3.mlp.experts.w1", "...w2")


def expert_layer_of(module_path: str) -> Optional[int]:
    """The layer index when ``module_path`` is a routed-expert container (rule 1), else None."""
    m = _PATTERN.match(module_path)
    return int(m.group(1)) if m is not None else None


def expert_modules(model: torch.nn.Module) -> list[tuple[int, torch.nn.Module]]:
    """``(layer index, experts module)`` for every MoE layer of ``model`` (rules 1, 2)."""
    found = sorted(
        (int(m.group(1)), module)
        for name, module in model.named_modules()
        if (m := _PATTERN.match(name)) is not None
    )
    if not found:
        raise ExpertDiscoveryError(
            f"{type(model).__name__} has no routed-expert modules at {EXPERT_PATH.format(i='<i>')}"
        )
    return found


def expert_layers(constants: Mapping[str, str]) -> tuple[ExpertLayer, ...]:
    """Every MoE layer's experts from a program's constant FQNs (``Program.constants``
    values, or any FQNs), in layer order (rules 1, 2)."""
    by_layer: dict[int, list[str]] = {}
    for fqn in constants.values():
        module, _, _leaf = fqn.rpartition(".")
        m = _PATTERN.match(module)
        if m is not None:
            by_layer.setdefault(int(m.group(1)), []).append(fqn)
    if not by_layer:
        raise ExpertDiscoveryError(
            f"no parameter lies under {EXPERT_PATH.format(i='<i>')}; names look like "
            f"{', '.join(list(constants.values())[:3])}"
        )
    return tuple(
        ExpertLayer(i, EXPERT_PATH.format(i=i), tuple(sorted(weights))) for i, weights in sorted(by_layer.items())
    )
