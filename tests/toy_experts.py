"""A small mixture-of-experts layer written the ways transformers writes its experts, without
transformers: routed rows sorted by expert into a grouped matmul (``torch._grouped_mm``
with cumulative offsets from ``histc``), or a slab gathered per routed row
(``weight[ids]``) into ``bmm``. The streaming tests (CPU and GPU) capture it."""

from __future__ import annotations

import functools

import torch

import workbench as wb

WEIGHTS = ["experts.gate_up_proj", "experts.down_proj"]


class ToyExperts(torch.nn.Module):
    """Stacked experts: ``gate_up_proj [E, 2I, H]``, ``down_proj [E, H, I]``."""

    def __init__(self, experts: int, hidden: int, inner: int, dtype: torch.dtype) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.gate_up_proj = torch.nn.Parameter(torch.randn(experts, 2 * inner, hidden, generator=gen).to(dtype) / hidden**0.5)
        self.down_proj = torch.nn.Parameter(torch.randn(experts, hidden, inner, generator=gen).to(dtype) / inner**0.5)


class ToyMoE(torch.nn.Module):
    """``(T, H) -> (T, H)``: a router picks k of E experts per token; ``form`` is
    ``"grouped"`` (transformers' default) or ``"batched"`` (its ``batched_mm``)."""

    def __init__(self, form: str = "grouped", experts: int = 8, hidden: int = 32, inner: int = 16, top_k: int = 2,
                 dtype: torch.dtype = torch.float32) -> None:  # fmt: skip
        super().__init__()
        self.form, self.top_k, self.num_experts = form, top_k, experts
        gen = torch.Generator().manual_seed(0)
        self.router = torch.nn.Parameter(torch.randn(experts, hidden, generator=gen).to(dtype))
        self.experts = ToyExperts(experts, hidden, inner, dtype)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scores = torch.nn.functional.linear(x, self.router).softmax(-1)
        return scores.topk(self.top_k, dim=-1)  # (T, k) weights, ids

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (T, H)
        weights, ids = self.route(x)
        flat = ids.reshape(-1)  # (S,) S = T * k
        w = self.experts
        if self.form == "grouped":
            sorted_ids, perm = flat.sort()
            rows = x[perm // self.top_k]  # (S, H), sorted by expert
            offs = torch.histc(sorted_ids.float(), bins=self.num_experts, min=0, max=self.num_experts - 1)
            offs = offs.cumsum(0, dtype=torch.int32)  # (E,)
            h = torch._grouped_mm(rows, w.gate_up_proj.transpose(-2, -1), offs=offs)  # (S, 2I)
            gate, up = h.chunk(2, dim=-1)
            out = torch._grouped_mm(torch.nn.functional.silu(gate) * up, w.down_proj.transpose(-2, -1), offs=offs)
            inverse = torch.empty_like(perm)
            inverse[perm] = torch.arange(perm.numel())
            out = out[inverse]  # (S, H), token order
        else:
            rows = x.repeat_interleave(self.top_k, dim=0)  # (S, H)
            h = torch.bmm(rows.unsqueeze(1), w.gate_up_proj[flat].transpose(-2, -1)).squeeze(1)  # (S, 2I)
            gate, up = h.chunk(2, dim=-1)
            act = (torch.nn.functional.silu(gate) * up).unsqueeze(1)
            out = torch.bmm(act, w.down_proj.transpose(-2, -1)[flat]).squeeze(1)  # (S, H)
        return (out.view(-1, self.top_k, out.shape[-1]) * weights.unsqueeze(-1).to(out.dtype)).sum(1)


def tokens(n: int, hidden: int = 32, dtype: torch.dtype = torch.float32, seed: int = 3) -> torch.Tensor:
    return torch.randn(n, hidden, generator=torch.Generator().manual_seed(seed)).to(dtype)


@functools.lru_cache(maxsize=None)
def toy(form: str, n_tokens: int, dtype: torch.dtype = torch.float32):
    """(model, inputs, program) of the toy layer on ``n_tokens`` tokens, captured once."""
    model = ToyMoE(form, dtype=dtype).eval()
    inputs = (tokens(n_tokens, dtype=dtype),)
    return model, inputs, wb.capture(model, inputs)


def distinct_experts(model: ToyMoE, x: torch.Tensor) -> int:
    """How many distinct experts the router picks for the tokens ``x``."""
    with torch.no_grad():
        return int(model.route(x)[1].unique().numel())
