"""The expert-cache ops: admit a step's experts, look them up, order a read after a compute.

- ``expert_cache_admit(index, rows, slabs, slots, keys, requests, clock, policy,
  requested) -> Tensor`` admits one step's experts into one layer's cache, in place, and
  returns a copy of the slot table it leaves (what a later read of the cache looks up);
- ``expert_cache_hits(index, slots) -> Tensor`` ``(N,)`` bool: which rows' experts the
  cache holds; ``expert_cache_positions(index, slots) -> Tensor`` ``(N,)`` int64: the slot
  holding each (0 for a miss, whose row is then computed elsewhere);
- ``ordered_after(x, after) -> Tensor``: a copy of ``x`` made once every tensor of
  ``after`` exists — an explicit graph edge that keeps a read (an admission) behind the
  computation it must follow.

Arguments of the admit:

- ``index`` ``(N,)`` or ``(B, k)``: the experts chosen (or predicted) this step;
- ``rows``: one tensor per expert weight (``w1``, ``w2``), row ``n`` the weights of
  expert ``index[n]`` (``(N, *row)``, or ``index.shape + row``); ``slabs``: the cache's slabs of the same weights,
  ``(S, *row)`` each;
- ``slots`` ``(S,)``: which expert each slot holds (-1 empty); ``keys`` ``(S,)``: each
  slot's eviction key (-1 empty); ``requests`` ``(E,)``: how often each expert was
  requested so far; ``clock`` ``(1,)``: the admits seen so far;
- ``requested``: the experts were requested by the router (False: predicted, a prefetch).

Rules (the admitting policies of ``cache_policies``, rule 3, step by step):
  1. The step's experts are the distinct ids of ``index`` in order of first appearance
     (``K`` = ``index.numel()``); with ``requested``, each one's ``requests`` count goes
     up by one (a prediction is no request: LFU counts what the router asked for).
  2. An expert already in a slot is a hit. Each other expert, in order, takes the slot
     with the smallest key among the slots the step does not use yet (ties, i.e.
     empties, to the lower slot).
  3. Every expert of the step then gets the key ``w * requests + t * K + j`` (``j`` its
     position, ``t`` the clock; ``w`` 0 for ``lru``, ``LFU_COUNT_WEIGHT`` for ``lfu``);
     the clock advances by one.
  4. ``slabs[i][s]`` equals expert ``slots[s]``'s weights for every filled slot, before
     and after: a cache hit reads exactly the bytes a miss would fetch, so the model's
     outputs never depend on the cache state.
  5. Shapes are static and nothing is read back to the host: every row of ``rows`` is
     written into its expert's slot (a hit or a repeated expert rewrites the bytes the
     slot holds, rule 4), so one implementation runs as the same few kernels on the
     host, the simulated device and a CUDA device. In a graph the admit is a copy-stream
     op (``workbench.node_facts``): on a CUDA device it runs on the copy stream
     after its inputs (the reads or prefetches that brought the rows), so it never races
     the copies that fill or read the slabs.
  6. ``expert_cache_hits``/``expert_cache_positions`` look ``index`` up in ``slots``
     (``copy_ops.reuse_sources``: a hit's position is the first slot holding it).
"""

from __future__ import annotations

import torch

from ..copy_ops import reuse_sources
from ..errors import WorkbenchError
from .cache_policies import LFU_COUNT_WEIGHT

__all__ = [
    "ADMIT",
    "HITS",
    "ORDERED_AFTER",
    "POSITIONS",
    "ExpertCacheError",
    "expert_cache_admit",
    "expert_cache_hits",
    "expert_cache_positions",
    "ordered_after",
]

_WEIGHTS = {"lru": 0, "lfu": LFU_COUNT_WEIGHT}
_FREE_LAST = torch.iinfo(torch.int64).max  # the sort key of a slot the step uses already


class ExpertCacheError(WorkbenchError, ValueError):
    """An expert cache used in a way it does not support."""


def _check(index: torch.Tensor, rows: list[torch.Tensor], slabs: list[torch.Tensor], slots: torch.Tensor,
           keys: torch.Tensor, requests: torch.Tensor, clock: torch.Tensor, policy: str) -> None:  # fmt: skip
    if policy not in _WEIGHTS:
        raise ExpertCacheError(f"expert_cache_admit: policy must be one of {', '.join(_WEIGHTS)}, got {policy!r}")
    if len(rows) != len(slabs) or not rows:
        raise ExpertCacheError("expert_cache_admit: give one slab tensor per tensor of rows")
    S, N = slots.shape[0], index.numel()
    for r, slab in zip(rows, slabs):
        row = tuple(slab.shape[1:])
        if slab.shape[0] != S or slab.dtype != r.dtype or tuple(r.shape) not in ((N, *row), (*index.shape, *row)):
            raise ExpertCacheError(
                f"expert_cache_admit: rows must be (index size {N}, *row) or (*index shape, *row), and slabs (slots "
                f"{S}, *row), of one dtype: rows {tuple(r.shape)} {r.dtype}, slab {tuple(slab.shape)} {slab.dtype}"
            )
    if keys.shape != slots.shape or requests.dim() != 1 or clock.shape != (1,):
        raise ExpertCacheError("expert_cache_admit: keys (S,), requests (E,) and clock (1,) do not fit the slots")
    if index.numel() > S:
        raise ExpertCacheError(f"expert_cache_admit: a step routes {index.numel()} rows but the cache has {S} slots")


@torch.library.custom_op("workbench::expert_cache_admit", mutates_args=("slabs", "slots", "keys", "requests", "clock"))
def expert_cache_admit(
    index: torch.Tensor,
    rows: list[torch.Tensor],
    slabs: list[torch.Tensor],
    slots: torch.Tensor,
    keys: torch.Tensor,
    requests: torch.Tensor,
    clock: torch.Tensor,
    policy: str,
    requested: bool,
) -> torch.Tensor:
    """Admit a step's experts into one layer's cache (module rules); the new slot table."""
    _check(index, rows, slabs, slots, keys, requests, clock, policy)
    ids = index.reshape(-1).to(torch.long)  # (K,)
    K = ids.numel()
    same = ids[:, None] == ids[None, :]  # (K, K)
    earlier = torch.ones((K, K), dtype=torch.bool, device=ids.device).tril(-1)
    first = ~(same & earlier).any(dim=1)  # (K,) the row where its expert first appears (rule 1)
    first_of = same.to(torch.int8).argmax(dim=1)  # (K,) that row, for every row (argmax: the first maximum)
    if requested:
        requests.index_add_(0, ids, first.to(requests.dtype))
    match = ids[:, None] == slots.to(torch.long)[None, :]  # (K, S)
    hit = match.any(dim=1)  # (K,) rule 2
    hit_slot = match.to(torch.int8).argmax(dim=1)  # (K,)
    used = match.any(dim=0)  # (S,) slots the step's hits keep
    admitted = first & ~hit  # (K,) experts to admit, in order
    free = torch.sort(torch.where(used, _FREE_LAST, keys.to(torch.long)), stable=True).indices  # smallest key first
    rank = torch.cumsum(admitted.to(torch.long), 0) - 1  # (K,) the order of each admitted expert
    slot = torch.where(hit, hit_slot, free[rank.clamp(min=0)][first_of])  # (K,) every row's slot
    slots.scatter_(0, slot, ids.to(slots.dtype))
    for r, slab in zip(rows, slabs):  # rule 5: every row into its slot
        slab.index_copy_(0, slot, r.reshape((K,) + tuple(slab.shape[1:])))
    position = (torch.cumsum(first.to(torch.long), 0) - 1)[first_of]  # (K,) j of rule 3
    key = _WEIGHTS[policy] * requests[ids] + clock.to(torch.long) * K + position
    keys.scatter_(0, slot, key.to(keys.dtype))
    clock.add_(1)
    return slots.clone()


@expert_cache_admit.register_fake
def _(index, rows, slabs, slots, keys, requests, clock, policy, requested):  # noqa: ANN001 - schema fixed
    _check(index, rows, slabs, slots, keys, requests, clock, policy)
    return slots.new_empty(slots.shape)


def _check_lookup(index: torch.Tensor, slots: torch.Tensor) -> None:
    if index.dtype.is_floating_point or slots.dtype.is_floating_point or slots.dim() != 1:
        raise ExpertCacheError(
            f"an expert-cache lookup takes integer expert ids and a (S,) integer slot table, got index "
            f"{index.dtype} {tuple(index.shape)} and slots {slots.dtype} {tuple(slots.shape)}"
        )


@torch.library.custom_op("workbench::expert_cache_hits", mutates_args=())
def expert_cache_hits(index: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``(N,)`` bool: row ``n``'s expert ``index[n]`` is in the cache (rule 6)."""
    _check_lookup(index, slots)
    return reuse_sources(index, slots)[0]


@torch.library.custom_op("workbench::expert_cache_positions", mutates_args=())
def expert_cache_positions(index: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
    """``(N,)`` int64: the slot holding ``index[n]`` (0 for a miss, rule 6)."""
    _check_lookup(index, slots)
    return reuse_sources(index, slots)[1].to(torch.long)


@torch.library.custom_op("workbench::ordered_after", mutates_args=())
def ordered_after(x: torch.Tensor, after: list[torch.Tensor]) -> torch.Tensor:
    """A copy of ``x``, made once every tensor of ``after`` exists (its value ignores them)."""
    return x.clone()


@expert_cache_hits.register_fake
def _(index, slots):  # noqa: ANN001 - schema fixed
    _check_lookup(index, slots)
    return index.new_empty((index.numel(),), dtype=torch.bool)


@expert_cache_positions.register_fake
def _(index, slots):  # noqa: ANN001 - schema fixed
    _check_lookup(index, slots)
    return index.new_empty((index.numel(),), dtype=torch.long)


@ordered_after.register_fake
def _(x, after):  # noqa: ANN001 - schema fixed
    return torch.empty_like(x)


#: The OpOverloads as they appear as node targets.
ADMIT = torch.ops.workbench.expert_cache_admit.default
HITS = torch.ops.workbench.expert_cache_hits.default
POSITIONS = torch.ops.workbench.expert_cache_positions.default
ORDERED_AFTER = torch.ops.workbench.ordered_after.default
