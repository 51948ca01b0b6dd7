"""The expert-cache update op: ``workbench::expert_cache_admit``.

``expert_cache_admit(index, rows, slabs, slots, keys, requests, clock, policy)`` admits
one decode step's routed experts into one layer's cache, in place:

- ``index`` ``(N,)`` or ``(B, k)``: the experts the layer's router chose this step;
- ``rows``: the step's cache reads, one per expert weight (``w1``, ``w2``): ``(N, *row)``,
  row ``n`` the weights of expert ``index[n]``; ``slabs``: the cache's slabs of the same
  weights, ``(S, *row)`` each;
- ``slots`` ``(S,)``: which expert each slot holds (-1 empty); ``keys`` ``(S,)``: each
  slot's eviction key (-1 empty); ``requests`` ``(E,)``: how often each expert was
  requested so far; ``clock`` ``(1,)``: the steps seen so far.

Rules (the admitting policies of ``cache_policies``, rule 3, step by step):
  1. The step's experts are the distinct ids of ``index`` in order of first appearance
     (``K`` = ``index.numel()``); each one's ``requests`` count goes up by one.
  2. An expert already in a slot is a hit. Each other expert, in order, takes the slot
     with the smallest key among the slots the step does not use yet (ties, i.e.
     empties, to the lower slot); its row of ``rows`` is copied into that slot's slabs.
  3. Every expert of the step then gets the key ``w * requests + t * K + j`` (``j`` its
     position, ``t`` the clock; ``w`` 0 for ``lru``, ``LFU_COUNT_WEIGHT`` for ``lfu``);
     the clock advances by one.
  4. ``slabs[i][s]`` equals expert ``slots[s]``'s weights for every filled slot, before
     and after: a cache hit reads exactly the bytes a miss would fetch, so the model's
     outputs never depend on the cache state.
  5. It returns nothing and is not a timeline event: the bytes of a missed expert
     crossed the link in the step's cache read (the reuse copy); writing them into the
     slot is the other end of that copy, not a second transfer.
  6. It runs where its tensors are, on the host or on the simulated device. On a CUDA
     device it refuses: with nothing to wait for, it could race the copy stream.
"""

from __future__ import annotations

import torch

from ..errors import WorkbenchError
from .cache_policies import LFU_COUNT_WEIGHT

__all__ = ["ADMIT", "ExpertCacheError", "expert_cache_admit"]

_WEIGHTS = {"lru": 0, "lfu": LFU_COUNT_WEIGHT}


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
        if tuple(slab.shape) != (S, *r.shape[1:]) or slab.dtype != r.dtype or r.shape[0] != N:
            raise ExpertCacheError(
                f"expert_cache_admit: rows must be (index size {N}, *row) and slabs (slots {S}, *row) of one "
                f"dtype: rows {tuple(r.shape)} {r.dtype}, slab {tuple(slab.shape)} {slab.dtype}"
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
) -> None:
    """Admit a step's routed experts into one layer's cache (module rules)."""
    _check(index, rows, slabs, slots, keys, requests, clock, policy)
    if slots.device.type == "cuda":
        raise ExpertCacheError(
            "an admitting expert cache (lru, lfu) runs on the host or the simulated device only (rule 6); "
            "use policy='static_hot' on a CUDA device"
        )
    K = index.numel()
    step = int(clock[0])
    flat = [int(e) for e in index.reshape(-1).tolist()]
    first = {e: n for n, e in reversed(list(enumerate(flat)))}  # expert -> its first row
    ids = list(dict.fromkeys(flat))  # rule 1
    count = requests.tolist()
    for e in ids:
        count[e] += 1
    held, key = slots.tolist(), keys.tolist()
    where = {e: held.index(e) for e in ids if e in held}  # rule 2: hits
    used = set(where.values())
    for e in ids:
        if e in where:
            continue
        free = [s for s in range(len(held)) if s not in used]
        s = min(free, key=lambda i: (key[i], i))
        held[s], where[e] = e, s
        used.add(s)
        for r, slab in zip(rows, slabs):
            slab[s].copy_(r[first[e]])
    weight = _WEIGHTS[policy]
    for j, e in enumerate(ids):  # rule 3
        key[where[e]] = weight * count[e] + step * K + j
    slots.copy_(torch.tensor(held, dtype=slots.dtype))
    keys.copy_(torch.tensor(key, dtype=keys.dtype))
    requests.copy_(torch.tensor(count, dtype=requests.dtype))
    clock.add_(1)


@expert_cache_admit.register_fake
def _(index, rows, slabs, slots, keys, requests, clock, policy):  # noqa: ANN001 - schema fixed
    _check(index, rows, slabs, slots, keys, requests, clock, policy)


#: The OpOverload as it appears as a node target.
ADMIT = torch.ops.workbench.expert_cache_admit.default
