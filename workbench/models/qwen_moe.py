"""A decoder with the structure of Qwen 3.5 MoE (35B-A3B), as a single-token decode step.

``QwenMoEDecoder(config)(tokens, position, *caches) -> (logits, *new_caches)``

Rules:
  1. One decode step: ``tokens`` ``(B, 1)`` int64, ``position`` ``(1,)`` int64
     (the KV-cache slot written, the same for the whole batch).
  2. Caches are explicit graph inputs and outputs, two per layer, in layer
     order (``cache_specs``): a full-attention layer has a K and a V cache
     ``(B, kv_heads, max_seq_len, head_dim)``; a linear-attention layer has a
     conv state ``(B, conv_dim, kernel-1)`` and a recurrent state
     ``(B, value_heads, key_head_dim, value_head_dim)``. Inputs are never
     written in place; updated caches are returned as new tensors.
  3. Block ``i``: ``h = x + mixer(norm1(x))``; ``x = h + moe(norm2(h))`` where
     the mixer is full attention or Gated DeltaNet by ``config.layer_types``.
     Then final norm and an untied LM head: logits ``(B, vocab)``.
  4. Weights are a pure function of ``(config, seed)``; construction under
     ``torch.device("meta")`` allocates no storage.
  5. ``position`` must be in ``[0, max_seq_len)``; the decode step cannot
     check a tensor's value without breaking export, so an out-of-range
     position fails inside ``index_copy`` in eager mode.
  6. ``expert_prefetch=True``: block ``i < L-1``, right after its own router,
     predicts block ``i+1``'s experts by applying block ``i+1``'s
     post-attention norm, router and top-k to its own post-attention hidden
     state ``h`` (the residual stream changes little between blocks), and
     block ``i+1`` selects its expert weights with ``workbench::select_rows``
     carrying that hint. The outputs are bit-for-bit those without it; the
     graph gains the hint ops, so a streaming strategy can prefetch.
  7. Weights that would not fit in the memory of the device they are made on (the
     parameters ``param_count`` counts, at the config's dtype) are refused before any is
     allocated, with the bytes needed and how to build the model shape-only
     (``memory_limits``); under the meta device nothing is checked.

What is simplified against the published model is listed in ``layers``.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch
from torch import nn

from ..arguments import check_int
from ..errors import ArgumentTypeError, ArgumentValueError, WorkbenchError
from ..memory_limits import check_weights_fit
from .config import MoEConfig
from .counting import CacheTensorSpec, cache_specs, param_count
from .layers import Embedding, FullAttention, GatedDeltaNet, Linear, RMSNorm, SparseMoE, rotary_cos_sin


class ModelInputError(WorkbenchError, ValueError):
    """Decode-step inputs of the wrong shape or dtype (the message says what is expected)."""


class DecoderLayer(nn.Module):
    """Rule 3: pre-norm mixer and pre-norm sparse MoE, each with a residual."""

    def __init__(self, config: MoEConfig, layer_type: str) -> None:
        super().__init__()
        dt = config.torch_dtype
        self.layer_type = layer_type
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dt)
        if layer_type == "full_attention":
            self.self_attn = FullAttention(config)
        else:
            self.linear_attn = GatedDeltaNet(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dt)
        self.mlp = SparseMoE(config)

    @property
    def mixer(self) -> Union[FullAttention, GatedDeltaNet]:
        mixer = self.self_attn if self.layer_type == "full_attention" else self.linear_attn
        assert isinstance(mixer, (FullAttention, GatedDeltaNet))
        return mixer

    def reset_parameters(self, gen: torch.Generator, residual_gain: float) -> None:
        self.input_layernorm.reset_parameters(gen)
        self.mixer.reset_parameters(gen, residual_gain)
        self.post_attention_layernorm.reset_parameters(gen)
        self.mlp.reset_parameters(gen, residual_gain)

    def forward(
        self,
        x: torch.Tensor,  # (B, H)
        position: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        cache_a: torch.Tensor,
        cache_b: torch.Tensor,
        hint: Optional[torch.Tensor] = None,  # (B, k) this block's predicted experts (rule 6)
        next_layer: Optional["DecoderLayer"] = None,  # the block whose experts to predict
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
        """Rule 3; returns ``(x, cache_a, cache_b, next_hint)`` where ``next_hint`` ``(B, k)``
        is ``next_layer``'s predicted experts (rule 6), None without a ``next_layer``."""
        normed = self.input_layernorm(x)
        if self.layer_type == "full_attention":
            mixed, cache_a, cache_b = self.self_attn(normed, position, rope, cache_a, cache_b)
        else:
            mixed, cache_a, cache_b = self.linear_attn(normed, cache_a, cache_b)
        h = x + mixed
        moe_in = self.post_attention_layernorm(h)
        if next_layer is None:
            return h + self.mlp(moe_in, hint), cache_a, cache_b, None
        moe_out, next_hint = self.mlp(moe_in, hint, lambda: next_layer.predict_experts(h))
        return h + moe_out, cache_a, cache_b, next_hint

    def predict_experts(self, h: torch.Tensor) -> torch.Tensor:
        """The experts this block's router would pick for an earlier block's post-attention
        hidden state ``h`` ``(B, H)``: post-attention norm, router, top-k → ``(B, k)`` int64."""
        return self.mlp.route(self.post_attention_layernorm(h))[1]


class QwenMoEDecoder(nn.Module):
    """Qwen-3.5-MoE-shaped decoder; ``forward`` is one decode step (see module rules)."""

    def __init__(self, config: MoEConfig, seed: int = 0, expert_prefetch: bool = False) -> None:
        super().__init__()
        if not isinstance(config, MoEConfig):
            raise ArgumentTypeError(f"config must be a MoEConfig, got {type(config).__name__}")
        if not isinstance(expert_prefetch, bool):
            raise ArgumentTypeError(f"expert_prefetch must be True or False, got {expert_prefetch!r}")
        check_int(seed, "seed", 0)
        params = param_count(config)["total"]
        check_weights_fit(  # rule 7
            params,
            params * config.torch_dtype.itemsize,
            f"QwenMoEDecoder({config.num_hidden_layers} layers, {config.num_experts} experts, hidden {config.hidden_size})",
            ArgumentValueError,
            "build it on the meta device (with torch.device('meta'): QwenMoEDecoder(config)) and capture it "
            "shape-only (capture(model, inputs, shape_only=True)), or give a smaller config",
        )
        self.config = config
        # A constructor flag, not a config field: it changes the captured graph (rule 6),
        # never the architecture, the weights or the outputs, and a config is the
        # published model's hyperparameters.
        self.expert_prefetch = expert_prefetch
        dt = config.torch_dtype
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size, dt)
        self.layers = nn.ModuleList(DecoderLayer(config, t) for t in config.layer_types)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dt)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, dt)  # untied
        self.reset_parameters(seed)

    def reset_parameters(self, seed: int = 0) -> None:
        """Rule 4: seeded from a private generator, so the global RNG is untouched."""
        gen = torch.Generator(device="cpu").manual_seed(seed)
        # Scale what each block writes into the residual stream by 1/sqrt(2L)
        # (GPT-2 style) so the stream stays O(1) however deep the model.
        residual_gain = 1.0 / math.sqrt(2 * self.config.num_hidden_layers)
        self.embed_tokens.reset_parameters(gen)
        for layer in self.decoder_layers():
            layer.reset_parameters(gen, residual_gain)
        self.norm.reset_parameters(gen)
        self.lm_head.reset_parameters(gen)  # 1/sqrt(H) on a unit-RMS input: logits ~ N(0, 1)

    def decoder_layers(self) -> list[DecoderLayer]:
        """The decoder layers, in order (typed: ``self.layers`` is an ``nn.ModuleList``)."""
        return [layer for layer in self.layers if isinstance(layer, DecoderLayer)]

    # -- inputs --------------------------------------------------------------

    def cache_specs(self, batch: int = 1) -> tuple[CacheTensorSpec, ...]:
        return cache_specs(self.config, batch)

    def init_caches(self, batch: int = 1) -> tuple[torch.Tensor, ...]:
        """Zero caches on the model's device and dtype, in ``forward`` order."""
        ref = self.embed_tokens.weight
        return tuple(torch.zeros(s.shape, dtype=ref.dtype, device=ref.device) for s in self.cache_specs(batch))

    def example_inputs(self, batch: int = 1, position: int = 0) -> tuple[torch.Tensor, ...]:
        """``(tokens, position, *caches)`` for one decode step; tokens are seeded random."""
        c = self.config
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position < c.max_seq_len:
            raise ArgumentValueError(f"position must be an integer in [0, max_seq_len={c.max_seq_len}), got {position!r}")
        caches = self.init_caches(batch)  # validates batch
        device = self.embed_tokens.weight.device
        gen = torch.Generator(device="cpu").manual_seed(0)
        tokens = torch.randint(c.vocab_size, (batch, 1), generator=gen, dtype=torch.int64).to(device)
        pos = torch.tensor([position], dtype=torch.int64).to(device)
        return (tokens, pos, *caches)

    # -- decode step ---------------------------------------------------------

    def forward(
        self, tokens: torch.Tensor, position: torch.Tensor, *caches: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        self._check_inputs(tokens, position, caches)
        x = self.embed_tokens(tokens[:, 0])  # (B, H)
        rope = rotary_cos_sin(position, self.config.rotary_dim, self.config.rope_theta, x.dtype)
        new_caches: list[torch.Tensor] = []
        hint: Optional[torch.Tensor] = None  # (B, k) experts predicted for layer i (rule 6)
        layers = list(self.layers)
        for i, layer in enumerate(layers):
            nxt = layers[i + 1] if self.expert_prefetch and i + 1 < len(layers) else None
            x, a, b, hint = layer(x, position, rope, caches[2 * i], caches[2 * i + 1], hint, nxt)
            new_caches += [a, b]
        logits = self.lm_head(self.norm(x))  # (B, V)
        return (logits, *new_caches)

    def _check_inputs(self, tokens: torch.Tensor, position: torch.Tensor, caches: tuple[torch.Tensor, ...]) -> None:
        # Shape checks only: they are static under export, value checks are not.
        if tokens.dim() != 2 or tokens.shape[1] != 1 or tokens.dtype != torch.int64:
            raise ModelInputError(
                f"tokens must be (B, 1) int64 (one decode token per sequence), got "
                f"{tuple(tokens.shape)} {tokens.dtype}"
            )
        if tuple(position.shape) != (1,) or position.dtype != torch.int64:
            raise ModelInputError(f"position must be a (1,) int64 tensor, got {tuple(position.shape)} {position.dtype}")
        specs = self.cache_specs(int(tokens.shape[0]))
        if len(caches) != len(specs):
            raise ModelInputError(
                f"expected {len(specs)} cache tensors (two per layer: "
                f"{', '.join(s.name for s in specs[:4])}, ...), got {len(caches)}; "
                "use model.init_caches(batch)"
            )
        for spec, t in zip(specs, caches):
            if tuple(t.shape) != spec.shape:
                raise ModelInputError(f"cache {spec.name} must have shape {spec.shape}, got {tuple(t.shape)}")
