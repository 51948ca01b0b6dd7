"""Where a model keeps its routed experts, as ``workbench.moe`` needs it: MoE layers by index.

Everything in ``workbench.moe`` that needs to know which modules hold the routed experts
asks here, and this module asks ``workbench.experts.find_experts`` (experts found by what
they are: stacked per-expert weights or one module per expert, scored by a router), so
the capacity-planning code works unchanged on the built-in decoder
(``layers.N.mlp.experts``) and on transformers models (``model.layers.N.mlp.experts``).

Rules:
  1. The MoE layers are ``find_experts``'s layers, in its (parameter, so layer) order.
  2. Each one has an index: its decoder-layer number (``ExpertLayer.layer``, the last
     number in the container's path), or, for a container whose path holds no number, its
     position among the MoE layers. A decoder layer may hold two expert groups — its MLP
     experts and a mixture of attention heads (JetMoE; ``ExpertLayer.kind`` ``"mlp"`` and
     ``"attention"``) — which share its index; otherwise indices are distinct. The index
     names the layer in hit-rate tables and traces (a decoder layer's two groups count
     together there); ``group_name`` names the group (``layers.3``, ``layers.3.attention``)
     in cache buffers.
  3. A model or program without routed experts is an ``ExpertDiscoveryError`` saying
     what was looked for.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from ..capture import Program
from ..experts import ExpertDiscoveryError, ExpertLayer, ExpertMap, find_experts

__all__ = ["ExpertDiscoveryError", "ExpertLayer", "expert_layers", "expert_map", "expert_modules", "group_name", "layer_index"]


def expert_map(model: Union[torch.nn.Module, Program]) -> ExpertMap:
    """The routed experts of ``model`` (rules 1, 3): a non-empty ``ExpertMap``."""
    found = find_experts(model)
    if not found:
        what = "program" if isinstance(model, Program) else type(model).__name__
        raise ExpertDiscoveryError(
            f"this {what} has no routed experts (workbench.experts.find_experts looks for stacked per-expert "
            "weights or one module per expert, scored by a router in the same block)"
        )
    groups = [group_name(layer_index(found, i), layer) for i, layer in enumerate(found.layers)]
    if len(set(groups)) != len(groups):
        raise ExpertDiscoveryError(
            f"expert groups share a name {groups}: a decoder layer holds at most one group of MLP experts and one of "
            "attention experts; name containers by layer (layers.N....)"
        )
    return found


def group_name(index: int, layer: ExpertLayer) -> str:
    """Rule 2: ``layers.{index}``, and ``layers.{index}.attention`` for attention experts."""
    return f"layers.{index}" + (".attention" if layer.kind == "attention" else "")


def layer_index(experts: ExpertMap, position: int) -> int:
    """Rule 2: the index of the ``position``-th MoE layer of ``experts``."""
    layer = experts.layers[position].layer
    return position if layer is None else layer


def expert_layers(model: Union[torch.nn.Module, Program]) -> tuple[tuple[int, ExpertLayer], ...]:
    """``(index, ExpertLayer)`` for every MoE layer of ``model``, in layer order (rules 1-3)."""
    return _indexed(expert_map(model))


def _indexed(found: ExpertMap) -> tuple[tuple[int, ExpertLayer], ...]:
    return tuple((layer_index(found, i), layer) for i, layer in enumerate(found.layers))


def expert_modules(model: torch.nn.Module, found: Optional[ExpertMap] = None) -> list[tuple[int, torch.nn.Module]]:
    """``(index, experts container)`` for every MoE layer of ``model`` (rules 1-3);
    ``found``: ``expert_map(model)``, when the caller has it already."""
    if not isinstance(model, torch.nn.Module):
        raise ExpertDiscoveryError(f"expert_modules takes an nn.Module, got {type(model).__name__}")
    found = expert_map(model) if found is None else found
    return [(index, model.get_submodule(layer.module)) for index, layer in _indexed(found)]
