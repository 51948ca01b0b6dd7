"""Building blocks of the Qwen-3.5-MoE-shaped decoder, for one decode token.

Every block works on ``x`` of shape ``(B, H)`` (one new token per sequence)
and is functional in its state: caches come in as arguments and go out as
new tensors; inputs are never written in place and modules hold no buffers.

Parameters are created with ``torch.empty`` so that construction under
``torch.device("meta")`` allocates nothing; values are set by
``reset_parameters(gen, residual_std)``, which draws from a CPU generator
(same weights whatever the target device or dtype) and skips meta tensors.

Simplifications against the published model (shapes and parameter counts
are the published ones):
  * RMSNorm is ``x / rms(x) * w`` with ``w`` initialised to ones; the
    published checkpoints store the norm as ``1 + w`` (Gemma style). Same
    function, different parametrisation.
  * Rotary embedding is plain 1-D RoPE over the first ``rotary_dim`` dims.
    The published model uses interleaved multimodal RoPE; for text, where the
    three position ids coincide, the two agree.
  * Gated DeltaNet: one fused input projection split contiguously into
    q | k | v | z | b | a (the published layout interleaves per key-head
    group, or uses four projections: same parameter count). The recurrence
    is the exact single-step delta rule; it runs in the cache dtype (the
    published kernels keep the recurrent state in float32).
  * The MoE router is softmax over the k kept logits, which equals the
    published "softmax over all experts, keep top-k, renormalise".
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from .config import MoEConfig
from .. import copy_ops  # noqa: F401  (registers workbench::select_rows)


def _normal_(p: torch.Tensor, std: float, gen: torch.Generator) -> None:
    """Seeded fill that leaves meta tensors alone (nothing to fill)."""
    if p.is_meta:
        return
    with torch.no_grad():
        p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * std)


def _const_(p: torch.Tensor, value: float) -> None:
    if p.is_meta:
        return
    with torch.no_grad():
        p.fill_(value)


def _cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x.to(dtype)`` only when it changes something, so float32 graphs carry no no-op casts."""
    return x if x.dtype == dtype else x.to(dtype)


def _param(*shape: int, dtype: torch.dtype) -> nn.Parameter:
    # torch.empty follows an enclosing torch.device(...) context, meta included.
    return nn.Parameter(torch.empty(*shape, dtype=dtype))


class Linear(nn.Module):
    """``y = x @ W^T`` without bias; ``weight`` is ``(out, in)`` like ``nn.Linear``.

    Own class so construction does not draw from the global RNG.
    """

    def __init__(self, in_features: int, out_features: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = _param(out_features, in_features, dtype=dtype)

    def reset_parameters(self, gen: torch.Generator, gain: float = 1.0) -> None:
        # 1/sqrt(fan_in) keeps activations O(1) through the matmul.
        _normal_(self.weight, gain / math.sqrt(self.in_features), gen)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class Embedding(nn.Module):
    """Token embedding table ``(vocab, H)``."""

    def __init__(self, num_embeddings: int, dim: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = _param(num_embeddings, dim, dtype=dtype)

    def reset_parameters(self, gen: torch.Generator, gain: float = 1.0) -> None:
        _normal_(self.weight, gain, gen)  # the residual stream starts at RMS ~1

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.weight)


class RMSNorm(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last dim."""

    def __init__(self, dim: int, eps: float, dtype: torch.dtype) -> None:
        super().__init__()
        self.eps = eps
        self.weight = _param(dim, dtype=dtype)

    def reset_parameters(self, gen: torch.Generator, gain: float = 1.0) -> None:
        _const_(self.weight, 1.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class GatedRMSNorm(RMSNorm):
    """RMSNorm of ``x`` times ``silu(z)``: the DeltaNet output gate."""

    def forward(self, x: torch.Tensor, z: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return super().forward(x) * F.silu(z)


def rotary_cos_sin(
    position: torch.Tensor, rotary_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables ``(1, rotary_dim)`` for the token at ``position`` ``(1,)``.

    Built in the graph from ``position`` (no buffers), in float32 for accuracy.
    """
    half = torch.arange(0, rotary_dim, 2, dtype=torch.float32, device=position.device)
    inv_freq = 1.0 / (theta ** (half / rotary_dim))  # (rot/2,)
    angles = position.to(torch.float32)[:, None] * inv_freq[None, :]  # (1, rot/2)
    angles = torch.cat([angles, angles], dim=-1)  # (1, rot)
    return _cast(angles.cos(), dtype), _cast(angles.sin(), dtype)


def apply_partial_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate-half RoPE on the first ``cos.shape[-1]`` dims of ``x`` ``(B, heads, D)``."""
    rot = cos.shape[-1]
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    x1, x2 = x_rot[..., : rot // 2], x_rot[..., rot // 2 :]
    rotated = torch.cat([-x2, x1], dim=-1)
    return torch.cat([x_rot * cos + rotated * sin, x_pass], dim=-1)


class FullAttention(nn.Module):
    """Gated grouped-query attention over a KV cache, one token.

    Rules:
      1. The fused projection gives, per query head, ``head_dim`` query dims
         followed by ``head_dim`` gate dims, then K and V for the KV heads.
      2. q and k get a per-head RMSNorm, then partial RoPE.
      3. The new K/V are written at ``position`` with ``index_copy`` (a new
         tensor, not in place); attention covers cache slots ``<= position``.
      4. The attention output is multiplied by ``sigmoid(gate)`` before the
         output projection.
    """

    def __init__(self, c: MoEConfig) -> None:
        super().__init__()
        dt = c.torch_dtype
        self.heads, self.kv_heads, self.head_dim = (
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
        )
        self.rotary_dim, self.rope_theta = c.rotary_dim, c.rope_theta
        q_out = 2 * self.heads * self.head_dim
        kv_out = self.kv_heads * self.head_dim
        self.qkv_proj = Linear(c.hidden_size, q_out + 2 * kv_out, dt)
        self.o_proj = Linear(self.heads * self.head_dim, c.hidden_size, dt)
        self.q_norm = RMSNorm(self.head_dim, c.rms_norm_eps, dt)
        self.k_norm = RMSNorm(self.head_dim, c.rms_norm_eps, dt)

    def reset_parameters(self, gen: torch.Generator, residual_gain: float) -> None:
        self.qkv_proj.reset_parameters(gen)
        self.o_proj.reset_parameters(gen, residual_gain)
        self.q_norm.reset_parameters(gen)
        self.k_norm.reset_parameters(gen)

    def forward(
        self,
        x: torch.Tensor,  # (B, H)
        position: torch.Tensor,  # (1,) int64
        rope: tuple[torch.Tensor, torch.Tensor],  # cos, sin (1, rot)
        k_cache: torch.Tensor,  # (B, KV, S, D)
        v_cache: torch.Tensor,  # (B, KV, S, D)
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B = x.shape[0]
        nh, kvh, D = self.heads, self.kv_heads, self.head_dim
        qkv = self.qkv_proj(x)
        q_gate, k, v = qkv.split([2 * nh * D, kvh * D, kvh * D], dim=-1)
        q, gate = q_gate.view(B, nh, 2 * D).chunk(2, dim=-1)  # (B, nh, D) each
        k = k.view(B, kvh, D)
        v = v.view(B, kvh, D)

        cos, sin = rope
        q = apply_partial_rotary(self.q_norm(q), cos, sin)
        k = apply_partial_rotary(self.k_norm(k), cos, sin)

        k_cache = k_cache.index_copy(2, position, k[:, :, None, :])  # (B, KV, S, D)
        v_cache = v_cache.index_copy(2, position, v[:, :, None, :])

        S = k_cache.shape[2]
        qg = q.view(B, kvh, nh // kvh, D)  # (B, KV, G, D): query heads grouped by KV head
        scores = torch.matmul(qg, k_cache.transpose(-1, -2)) / math.sqrt(D)  # (B, KV, G, S)
        visible = torch.arange(S, device=position.device) <= position  # (S,)
        scores = scores.masked_fill(~visible, float("-inf"))
        probs = _cast(torch.softmax(_cast(scores, torch.float32), dim=-1), v_cache.dtype)
        out = torch.matmul(probs, v_cache).reshape(B, nh, D)  # (B, nh, D)
        out = out * torch.sigmoid(gate)
        return self.o_proj(out.reshape(B, nh * D)), k_cache, v_cache


class GatedDeltaNet(nn.Module):
    """Gated DeltaNet linear attention, one recurrent step.

    Rules (per value head, S is ``(Dk, Dv)``):
      1. ``in_proj(x)`` splits into q | k | v (the conv channels) | z | b | a.
      2. The conv window is ``[conv_state, new column]`` ``(B, C, K)``; a
         depthwise conv1d over it, then SiLU; the new conv state drops the
         oldest column.
      3. q, k are L2-normalised (q also scaled by ``Dk**-0.5``) and repeated
         from key heads to value heads.
      4. ``g = -exp(A_log) * softplus(a + dt_bias)``, ``beta = sigmoid(b)``.
      5. ``S' = exp(g) S``; ``S_new = S' + k (x) beta (v - S'^T k)``;
         ``o = S_new^T q``.
      6. ``o`` goes through RMSNorm gated by ``silu(z)``, then ``out_proj``.
    """

    def __init__(self, c: MoEConfig) -> None:
        super().__init__()
        dt = c.torch_dtype
        self.kh, self.vh = c.linear_num_key_heads, c.linear_num_value_heads
        self.dk, self.dv = c.linear_key_head_dim, c.linear_value_head_dim
        self.key_dim, self.value_dim = c.linear_key_dim, c.linear_value_dim
        self.conv_dim, self.kernel = c.linear_conv_dim, c.linear_conv_kernel_dim
        self.in_proj = Linear(c.hidden_size, self.conv_dim + self.value_dim + 2 * self.vh, dt)
        self.conv_weight = _param(self.conv_dim, 1, self.kernel, dtype=dt)  # depthwise, no bias
        self.dt_bias = _param(self.vh, dtype=dt)
        self.A_log = _param(self.vh, dtype=dt)
        self.norm = GatedRMSNorm(self.dv, c.rms_norm_eps, dt)
        self.out_proj = Linear(self.value_dim, c.hidden_size, dt)

    def reset_parameters(self, gen: torch.Generator, residual_gain: float) -> None:
        self.in_proj.reset_parameters(gen)
        _normal_(self.conv_weight, 1.0 / math.sqrt(self.kernel), gen)
        _const_(self.dt_bias, 1.0)
        if not self.A_log.is_meta:
            # A in [1, 16) as in the published initialisation: decay rates
            # from slow to fast across heads.
            a = 1.0 + 15.0 * torch.rand(self.vh, generator=gen)
            with torch.no_grad():
                self.A_log.copy_(a.log())
        self.norm.reset_parameters(gen)
        self.out_proj.reset_parameters(gen, residual_gain)

    def forward(
        self,
        x: torch.Tensor,  # (B, H)
        conv_state: torch.Tensor,  # (B, C, K-1)
        rec_state: torch.Tensor,  # (B, Hv, Dk, Dv)
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B = x.shape[0]
        proj = self.in_proj(x)
        mixed, z, b, a = proj.split([self.conv_dim, self.value_dim, self.vh, self.vh], dim=-1)

        window = torch.cat([conv_state, mixed[:, :, None]], dim=-1)  # (B, C, K)
        new_conv_state = window[:, :, 1:]  # (B, C, K-1)
        mixed = F.silu(F.conv1d(window, self.conv_weight, groups=self.conv_dim)[:, :, 0])  # (B, C)

        q, k, v = mixed.split([self.key_dim, self.key_dim, self.value_dim], dim=-1)
        q = _l2norm(q.view(B, self.kh, self.dk)) * (self.dk**-0.5)  # (B, Hk, Dk)
        k = _l2norm(k.view(B, self.kh, self.dk))
        v = v.view(B, self.vh, self.dv)  # (B, Hv, Dv)
        if self.vh != self.kh:
            q = q.repeat_interleave(self.vh // self.kh, dim=1)  # (B, Hv, Dk)
            k = k.repeat_interleave(self.vh // self.kh, dim=1)

        beta = torch.sigmoid(b)  # (B, Hv)
        g = -torch.exp(self.A_log) * F.softplus(a + self.dt_bias)  # (B, Hv), <= 0

        state = rec_state * torch.exp(g)[:, :, None, None]  # (B, Hv, Dk, Dv)
        recalled = torch.matmul(k[:, :, None, :], state)[:, :, 0]  # S^T k: (B, Hv, Dv)
        delta = (v - recalled) * beta[:, :, None]  # (B, Hv, Dv)
        state = state + k[:, :, :, None] * delta[:, :, None, :]  # + k (x) delta
        o = torch.matmul(q[:, :, None, :], state)[:, :, 0]  # S^T q: (B, Hv, Dv)

        o = self.norm(o, z.view(B, self.vh, self.dv))
        return self.out_proj(o.reshape(B, self.value_dim)), new_conv_state, state


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


class Experts(nn.Module):
    """The routed experts' weights, stacked; FQNs end in ``experts.w1`` / ``experts.w2``.

    ``w1`` is ``(E, 2I, H)`` (gate rows then up rows), ``w2`` is ``(E, H, I)``.
    """

    def __init__(self, c: MoEConfig) -> None:
        super().__init__()
        E, I, H = c.num_experts, c.moe_intermediate_size, c.hidden_size
        self.hidden, self.inter = H, I
        self.w1 = _param(E, 2 * I, H, dtype=c.torch_dtype)
        self.w2 = _param(E, H, I, dtype=c.torch_dtype)

    def reset_parameters(self, gen: torch.Generator, residual_gain: float) -> None:
        _normal_(self.w1, 1.0 / math.sqrt(self.hidden), gen)
        _normal_(self.w2, residual_gain / math.sqrt(self.inter), gen)

    def forward(
        self, x: torch.Tensor, expert_idx: torch.Tensor, hint: Optional[torch.Tensor] = None
    ) -> torch.Tensor:
        """SwiGLU of each row of ``x`` ``(N, H)`` through expert ``expert_idx[n]``.

        Gather-then-compute: only the routed experts' rows are read, so a
        placement strategy can stream exactly these gathered weights. With a
        ``hint`` (the experts predicted before the router ran) the rows are
        selected by ``workbench::select_rows``, whose value is the same
        ``index_select``: the hint only lets a streaming strategy prefetch.
        """
        if hint is None:
            w1 = torch.index_select(self.w1, 0, expert_idx)  # (N, 2I, H)
            w2 = torch.index_select(self.w2, 0, expert_idx)  # (N, H, I)
        else:
            w1 = torch.ops.workbench.select_rows(self.w1, expert_idx, hint)  # (N, 2I, H)
            w2 = torch.ops.workbench.select_rows(self.w2, expert_idx, hint)  # (N, H, I)
        h = torch.bmm(w1, x[:, :, None])[:, :, 0]  # (N, 2I)
        gate, up = h.chunk(2, dim=-1)  # (N, I) each
        act = F.silu(gate) * up
        return torch.bmm(w2, act[:, :, None])[:, :, 0]  # (N, H)


class SharedExpert(nn.Module):
    """A dense SwiGLU FFN every token goes through: H -> 2*Is (gate|up) -> H."""

    def __init__(self, c: MoEConfig) -> None:
        super().__init__()
        dt = c.torch_dtype
        self.gate_up_proj = Linear(c.hidden_size, 2 * c.shared_expert_intermediate_size, dt)
        self.down_proj = Linear(c.shared_expert_intermediate_size, c.hidden_size, dt)

    def reset_parameters(self, gen: torch.Generator, residual_gain: float) -> None:
        self.gate_up_proj.reset_parameters(gen)
        self.down_proj.reset_parameters(gen, residual_gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class SparseMoE(nn.Module):
    """Router + top-k routed SwiGLU experts + sigmoid-gated shared expert.

    Rules:
      1. ``logits = x @ gate.weight^T`` ``(B, E)``; keep the top-k; their
         weights are the softmax over the k kept logits.
      2. Routed output = sum over the k of ``weight * expert(x)``, computed by
         gathering the k experts' weights (``Experts.forward``).
      3. Output = routed + ``sigmoid(x @ shared_expert_gate^T) * shared_expert(x)``.
      4. Experts not in a token's top-k are never read for that token.
      5. A ``hint`` (experts predicted for this block before its router ran)
         selects the same rows through ``workbench::select_rows``: the output
         is bit-for-bit the one without a hint.
    """

    def __init__(self, c: MoEConfig) -> None:
        super().__init__()
        self.top_k = c.num_experts_per_tok
        self.gate = Linear(c.hidden_size, c.num_experts, c.torch_dtype)  # the router
        self.experts = Experts(c)
        self.shared_expert = SharedExpert(c)
        self.shared_expert_gate = Linear(c.hidden_size, 1, c.torch_dtype)

    def reset_parameters(self, gen: torch.Generator, residual_gain: float) -> None:
        self.gate.reset_parameters(gen)
        self.experts.reset_parameters(gen, residual_gain)
        self.shared_expert.reset_parameters(gen, residual_gain)
        self.shared_expert_gate.reset_parameters(gen)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rule 1: routing weights ``(B, k)`` and expert indices ``(B, k)`` int64."""
        logits = self.gate(x)  # (B, E)
        top_logits, top_idx = torch.topk(logits, self.top_k, dim=-1)  # (B, k)
        weights = _cast(torch.softmax(_cast(top_logits, torch.float32), dim=-1), x.dtype)
        return weights, top_idx

    def forward(
        self,
        x: torch.Tensor,  # (B, H)
        hint: Optional[torch.Tensor] = None,  # (B, k) experts predicted for this block
        predict: Optional[Callable[[], torch.Tensor]] = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """``(B, H) -> (B, H)``; with ``predict`` (a later block's expert prediction),
        ``(output, predict())`` where ``predict`` runs right after this block's router.

        Running it there puts it after the router in captured order, which the overlap
        schedule keeps among ready ops: this block's expert copy (on the critical path)
        is then issued on the serial copy stream before the next block's prefetch.
        """
        weights, idx = self.route(x)  # (B, k)
        predicted = flat_idx = None
        if predict is not None:
            # The rows to gather first, so that in captured order everything this block's
            # expert copy needs comes before the prediction (without one, the captured
            # graph stays exactly as it always was).
            flat_idx = idx.reshape(-1)  # (B*k,)
            predicted = predict()
        B, H = x.shape
        x_rep = x[:, None, :].expand(B, self.top_k, H).reshape(B * self.top_k, H)  # (B*k, H)
        flat_idx = idx.reshape(-1) if flat_idx is None else flat_idx  # (B*k,)
        y = self.experts(x_rep, flat_idx, hint).view(B, self.top_k, H)  # (B, k, H)
        routed = (y * weights[:, :, None]).sum(dim=1)  # (B, H)
        shared = self.shared_expert(x) * torch.sigmoid(self.shared_expert_gate(x))  # (B, H)
        out = routed + shared
        return out if predict is None else (out, predicted)  # type: ignore[return-value]  # predict() gives a tensor
