"""Parameter and cache sizes computed by hand from a config (no module built).

The formulas, with H = hidden_size, L = num_hidden_layers, V = vocab_size,
E = num_experts, k = num_experts_per_tok, I = moe_intermediate_size,
Is = shared_expert_intermediate_size; full attention: nh heads, kv KV heads,
D = head_dim; Gated DeltaNet: Hk key heads of Dk, Hv value heads of Dv,
key = Hk*Dk, val = Hv*Dv, conv = 2*key + val, K = conv kernel:

  embedding            V*H
  lm_head              V*H                                   (untied)
  attention per layer  H*(2*nh*D + 2*kv*D)   fused q|gate, k, v projection
                       + nh*D*H              output projection
                       + 2*D                 per-head q and k RMSNorm
  deltanet per layer   H*(conv + val + 2*Hv) fused in-projection q|k|v|z|b|a
                       + conv*K              depthwise conv1d, no bias
                       + 2*Hv                dt_bias, A_log
                       + Dv                  gated RMSNorm
                       + val*H               output projection
  router per layer     E*H
  experts per layer    E*(2*I*H + H*I) = 3*E*I*H     (w1 and w2)
  shared per layer     H*2*Is + Is*H + H     SwiGLU and its sigmoid gate
  norms                (2*L + 1)*H           two per block and the final norm

Rules:
  1. ``total`` is the sum of the component totals (the keys without a
     ``_per_layer`` / ``per_expert`` suffix); it equals the parameter count of
     ``QwenMoEDecoder(config)`` exactly.
  2. ``active_per_token`` counts the parameters one decode token reads: one
     embedding row (H, not V*H), the whole LM head, every mixer, router,
     shared expert and norm, and k of the E routed experts in each layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..errors import ArgumentValueError
from .config import MoEConfig


@dataclass(frozen=True)
class CacheTensorSpec:
    """One cache tensor of the decode step: its name, shape and dtype."""

    name: str  # e.g. "layers.3.key_cache", "layers.0.conv_state"
    shape: tuple[int, ...]
    dtype: torch.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def cache_specs(config: MoEConfig, batch: int = 1) -> tuple[CacheTensorSpec, ...]:
    """Every cache tensor of the decode step (``qwen_moe`` rule 2), in the order
    ``QwenMoEDecoder.forward`` takes and returns them."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ArgumentValueError(f"batch must be a positive integer, got {batch!r}")
    c, dt = config, config.torch_dtype
    specs: list[CacheTensorSpec] = []
    for i, kind in enumerate(c.layer_types):
        if kind == "full_attention":
            kv = (batch, c.num_key_value_heads, c.max_seq_len, c.head_dim)
            specs += [CacheTensorSpec(f"layers.{i}.key_cache", kv, dt), CacheTensorSpec(f"layers.{i}.value_cache", kv, dt)]
        else:
            conv = (batch, c.linear_conv_dim, c.linear_conv_kernel_dim - 1)
            rec = (batch, c.linear_num_value_heads, c.linear_key_head_dim, c.linear_value_head_dim)
            specs += [CacheTensorSpec(f"layers.{i}.conv_state", conv, dt), CacheTensorSpec(f"layers.{i}.recurrent_state", rec, dt)]
    return tuple(specs)


def param_count(config: MoEConfig) -> dict[str, int]:
    """Parameters per component, ``total`` and ``active_per_token`` (see module docstring)."""
    c = config
    H, L, V = c.hidden_size, c.num_hidden_layers, c.vocab_size
    n_full = sum(t == "full_attention" for t in c.layer_types)
    n_linear = L - n_full

    nh, kv, D = c.num_attention_heads, c.num_key_value_heads, c.head_dim
    attention = H * (2 * nh * D + 2 * kv * D) + nh * D * H + 2 * D

    hv, val, conv = c.linear_num_value_heads, c.linear_value_dim, c.linear_conv_dim
    deltanet = H * (conv + val + 2 * hv) + conv * c.linear_conv_kernel_dim + 2 * hv + c.linear_value_head_dim + val * H

    per_expert = 3 * c.moe_intermediate_size * H
    router = c.num_experts * H
    experts = c.num_experts * per_expert
    shared = 3 * c.shared_expert_intermediate_size * H + H
    norms = (2 * L + 1) * H

    components = {
        "embedding": V * H,
        "lm_head": V * H,
        "attention": n_full * attention,
        "deltanet": n_linear * deltanet,
        "router": L * router,
        "experts": L * experts,
        "shared_expert": L * shared,
        "norms": norms,
    }
    total = sum(components.values())
    active = (
        total
        - V * H  # all embedding rows but the one looked up
        + H
        - L * (c.num_experts - c.num_experts_per_tok) * per_expert  # experts not routed to
    )
    return {
        **components,
        "attention_per_layer": attention,
        "deltanet_per_layer": deltanet,
        "router_per_layer": router,
        "experts_per_layer": experts,
        "per_expert": per_expert,
        "shared_expert_per_layer": shared,
        "total": total,
        "active_per_token": active,
    }


def cache_bytes(config: MoEConfig, batch: int = 1) -> int:
    """Bytes of all decode-step caches (KV caches, conv and recurrent states) for ``batch``."""
    return sum(s.nbytes for s in cache_specs(config, batch))
