"""The workbench's own batched form of transformers experts that exist only as a Python
loop, used while a step is captured.

Some families give their experts one form only, a loop over the experts the router chose
whose sizes depend on the routing: LongCat-Flash (``int(expert_idx.item())`` per chosen
expert, with zero-computation experts beside the real ones) and JetMoE (its MLP experts
and its mixture of attention heads split the tokens by the router's per-expert counts,
``expert_size.tolist()``). torch.export refuses the first and captures the second with
sizes no memory plan can hold. ``batched_experts(model)`` replaces those modules'
methods, on the instances, for as long as it is entered, by the form transformers gives
other families as ``batched_mm``: each routed row ``n * k + j`` (token ``n``, its ``j``-th
expert) reads its expert's weights as ``w[ids]`` and runs one batched matmul, so the
graph selects the routed rows by one index (what the expert strategies and caches read).

Rules:
1. The same computation as transformers' loop, in another order: per token the sum
   over its ``k`` chosen experts of gate × expert(x); outputs equal the loop's within
   floating-point rounding (``workbench.hf.try_stages`` checks every stage against the
   model run eagerly, i.e. against transformers' loop).
2. LongCat-Flash's zero-computation experts (ids ``E … E + Z - 1``) compute the identity:
   their rows read expert 0's weights (any real expert: the result is discarded) and
   ``where(id < E, expert(x), x)`` keeps their input, so the ids the weights are read by
   stay below E.
3. JetMoE's attention experts keep transformers' split of the work between ``map``
   (query projections, before attention) and ``reduce`` (output projections, after):
   ``map`` returns the routed ids and gates in place of transformers' sorted topology,
   which only ``reduce`` reads. Both groups compute through their ``input_linear`` and
   ``output_linear`` modules (called with the routed rows and their ids in place of
   sorted rows and counts), so the projections' ops are the experts' in the graph's
   module stacks even where transformers calls ``map`` and ``reduce`` as plain methods.
4. The model is left as it was: only instance attributes are set, and deleted on exit
   (also when the capture fails); weights, config and classes are untouched. Modules
   of other types are not touched.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, Callable, Iterator

import torch
import torch.nn.functional as F

__all__ = ["BATCHED_FORMS", "batched_experts"]


def _routed(x: torch.Tensor, weight: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``(R, out)``: row ``r`` of ``x`` times expert ``ids[r]``'s ``(out, in)`` weight."""
    return torch.bmm(x.unsqueeze(1), weight[ids].transpose(1, 2)).squeeze(1)


def _top_k(router: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """JetMoE's gating (``JetMoeTopKGating``) without its sort: ids ``(N*k,)``, gates
    ``(N*k, 1)`` and the logits it returns."""
    logits = router.layer(x).float()
    top_logits, top_ids = logits.topk(router.top_k, dim=1)
    gates = torch.softmax(top_logits, dim=1).type_as(x)
    return top_ids.reshape(-1), gates.reshape(-1, 1), logits


def _longcat_experts(self: Any, hidden_states: torch.Tensor, top_k_index: torch.Tensor, top_k_weights: torch.Tensor) -> torch.Tensor:
    """Rules 1-2: ``LongcatFlashExperts.forward``, batched."""
    k = top_k_index.shape[-1]
    ids = top_k_index.reshape(-1)
    real = ids < self.num_routed_experts
    safe = torch.where(real, ids, torch.zeros_like(ids))
    x = hidden_states.repeat_interleave(k, dim=0)  # (N*k, H): row n*k+j is token n
    gate, up = _routed(x, self.gate_up_proj, safe).chunk(2, dim=-1)
    out = _routed(self.act_fn(gate) * up, self.down_proj, safe)
    out = torch.where(real.unsqueeze(-1), out, x) * top_k_weights.reshape(-1, 1)
    return out.view(-1, k, out.shape[-1]).sum(dim=1).to(hidden_states.dtype)


def _jetmoe_experts(self: Any, inputs: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Rule 3: ``JetMoeParallelExperts.forward`` on routed rows and their expert ids (in
    place of sorted rows and per-expert counts): a module call, so its ops are the experts'."""
    return _routed(inputs, self.weight, ids)


def _jetmoe_mlp(self: Any, layer_input: torch.Tensor) -> torch.Tensor:
    """Rule 1: ``JetMoeMoE.forward``, batched."""
    bsz, length, width = layer_input.size()
    x = layer_input.reshape(-1, width)
    ids, gates, _ = _top_k(self.router, x)
    k = self.router.top_k
    rows = x.repeat_interleave(k, dim=0)
    hidden = self.input_linear(rows, ids).chunk(2, dim=-1)
    out = self.output_linear(self.activation(hidden[0]) * hidden[1], ids) * gates
    return out.view(-1, k, width).sum(dim=1).view(bsz, length, width) + self.bias


def _jetmoe_attention_map(self: Any, layer_input: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, tuple]:
    """Rule 3: ``JetMoeMoA.map`` (query projections), batched."""
    bsz, length, width = layer_input.size()
    x = layer_input.reshape(-1, width)
    ids, gates, logits = _top_k(self.router, x)
    queries = self.input_linear(x.repeat_interleave(self.top_k, dim=0), ids)
    return queries.view(bsz, length, self.top_k, -1), logits, (ids, gates)


def _jetmoe_attention_reduce(self: Any, layer_input: torch.Tensor, topo_info: tuple) -> torch.Tensor:
    """Rule 3: ``JetMoeMoA.reduce`` (output projections and the merge), batched."""
    bsz, length, k, hidden = layer_input.size()
    ids, gates = topo_info
    out = self.output_linear(layer_input.reshape(-1, hidden), ids) * gates
    return out.view(-1, k, self.input_size).sum(dim=1).view(bsz, length, self.input_size) + self.bias


#: Class (module, qualified name) → the methods its instances get while captured.
BATCHED_FORMS: dict[tuple[str, str], dict[str, Callable[..., Any]]] = {
    ("transformers.models.longcat_flash.modeling_longcat_flash", "LongcatFlashExperts"): {"forward": _longcat_experts},
    ("transformers.models.jetmoe.modeling_jetmoe", "JetMoeParallelExperts"): {"forward": _jetmoe_experts},
    ("transformers.models.jetmoe.modeling_jetmoe", "JetMoeMoE"): {"forward": _jetmoe_mlp},
    ("transformers.models.jetmoe.modeling_jetmoe", "JetMoeMoA"): {
        "map": _jetmoe_attention_map,
        "reduce": _jetmoe_attention_reduce,
    },
}


@contextlib.contextmanager
def batched_experts(model: torch.nn.Module) -> Iterator[tuple[str, ...]]:
    """Rule 4: within the block, every module of ``model`` of a class in ``BATCHED_FORMS``
    runs the batched form; yields the paths of the modules changed."""
    patched: list[tuple[torch.nn.Module, str]] = []
    paths = []
    try:
        for path, module in model.named_modules():
            forms = BATCHED_FORMS.get((type(module).__module__, type(module).__qualname__))
            if not forms:
                continue
            for name, fn in forms.items():
                object.__setattr__(module, name, types.MethodType(fn, module))
                patched.append((module, name))
            paths.append(path)
        yield tuple(paths)
    finally:
        for module, name in patched:
            object.__delattr__(module, name)
