"""Expert caches replayed over a routing trace, without running the model.

``replay(trace, policy, slots_per_layer, slab_bytes)`` says, per token and per layer,
how many of the token's experts an expert cache already held (hits), how many it had to
fetch (misses), how many residents it threw out for them (evictions) and how many bytes
crossed the host→device link.

Rules:
  1. Every MoE layer has its own cache of ``slots_per_layer`` slots; a slot is empty or
     holds one expert's weights (its *slab*). Layers never share slots.
  2. Token ``t`` requests the ``k`` experts ``R = trace.experts[t, l]`` in layer ``l``:
     ``hits`` = how many of ``R`` are resident, ``misses = k - hits``.
  3. ``lru`` and ``lfu`` admit every miss: it goes into an empty slot (lowest index
     first), else into the slot of the resident expert *not in* ``R`` with the smallest
     key, which is evicted. Keys order experts by their last request, ``t * k + j`` for
     the ``j``-th expert the router listed (``lru``), or first by how often the layer
     requested them so far — counts survive eviction — then by that (``lfu``: key
     ``LFU_COUNT_WEIGHT * requests + t * k + j``). So a
     token's own experts are never evicted for each other, and ``slots_per_layer >= k``
     is required (a token's k experts are resident together when its layer computes).
     Caches start empty.
  4. ``static_hot`` pins the ``slots_per_layer`` most popular experts of each layer
     (``popularity`` counts, ties to the lower id; default the trace's own counts, i.e.
     the best static choice in hindsight) before the first token and never changes:
     no evictions, ever. A miss is fetched into a transient buffer outside the cache.
  5. ``bytes_moved = misses * slab_bytes``: hits never copy. With
     ``on_miss="host_compute"`` a ``static_hot`` miss is computed on the host, where its
     weights are, and moves no slab; an ``lru``/``lfu`` miss is computed on the host for
     its token and still admitted, its slab copied into the cache off the critical path
     (same bytes, later). ``slab_bytes`` is at most ``MAX_SLAB_BYTES`` and the trace's
     whole traffic (every request a miss) must fit in int64: a size no machine could hold
     is refused up front, never wrapped around.
  6. ``lru``/``lfu`` replay in a compiled loop (numba: one pass per layer, O(1) per
     hit and O(slots) per miss); ``static_hot`` is one vectorised numpy lookup. A plain
     Python implementation of rules 1-5 (the property tests' reference) gives the same
     numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import pandas as pd

from ..errors import ArgumentTypeError, WorkbenchError
from ..models import MoEConfig
from .compiled import njit_cached
from .routing import RoutingTrace

__all__ = ["LFU_COUNT_WEIGHT", "MAX_SLAB_BYTES", "ON_MISS", "POLICIES", "CachePolicyError", "CacheReplay", "replay", "replay_all", "slab_bytes"]

#: The cache policies, in table order.
POLICIES: tuple[str, ...] = ("lru", "lfu", "static_hot")
#: What happens to a missed expert: copied over the link, or computed on the host.
ON_MISS: tuple[str, ...] = ("copy", "host_compute")
_ADMITTING = ("lru", "lfu")
#: An LFU key is ``LFU_COUNT_WEIGHT * requests + t * k + j``: counts first, then recency
#: (``t * k + j`` stays below it for any trace shorter than 2**32 / k tokens).
LFU_COUNT_WEIGHT = 1 << 32


class CachePolicyError(WorkbenchError, ValueError):
    """An expert-cache setting that cannot work (unknown policy, too few or many slots)."""


#: Rule 5: a petabyte per expert, far beyond any accelerator or host memory.
MAX_SLAB_BYTES = 1 << 50


def slab_bytes(config: MoEConfig) -> int:
    """Bytes of one routed expert's weights: ``w1`` ``(2I, H)`` plus ``w2`` ``(H, I)``."""
    if not isinstance(config, MoEConfig):
        raise ArgumentTypeError(f"config must be a MoEConfig (e.g. MoEConfig.tiny() or MoEConfig.full()), got {type(config).__name__}")
    return 3 * config.hidden_size * config.moe_intermediate_size * config.torch_dtype.itemsize


@dataclass(frozen=True, eq=False)
class CacheReplay:
    """One trace through one cache: per token, per layer counts (module rules)."""

    policy: str  # one of POLICIES
    slots_per_layer: int
    on_miss: str  # one of ON_MISS
    slab_bytes: int  # bytes of one expert's weights
    trace_label: str  # the trace's label ("synthetic ..." for generated traces)
    synthetic: bool  # the trace was generated, not recorded
    hits: np.ndarray  # (T, L) experts found resident
    misses: np.ndarray  # (T, L) experts fetched (or computed on the host)
    evictions: np.ndarray  # (T, L) residents thrown out

    @property
    def top_k(self) -> int:
        return int(self.hits[0, 0] + self.misses[0, 0])

    @property
    def bytes_moved(self) -> np.ndarray:
        """``(T, L)`` slab bytes over the link (rule 5)."""
        if self.policy == "static_hot" and self.on_miss == "host_compute":
            return np.zeros(self.misses.shape, dtype=np.int64)
        return self.misses.astype(np.int64) * self.slab_bytes

    @property
    def label(self) -> str:
        """``policy, slots, on_miss`` plus the trace's label, for tables and plot legends."""
        return f"{self.policy} ×{self.slots_per_layer} ({self.on_miss}) — {self.trace_label}"

    def hit_rate(self) -> float:
        """Hits over requests, all tokens and layers."""
        return float(self.hits.sum() / (self.hits.sum() + self.misses.sum()))

    def hit_rate_per_layer(self) -> np.ndarray:
        """``(L,)`` hits over requests per layer."""
        return self.hits.sum(axis=0) / (self.hits.sum(axis=0) + self.misses.sum(axis=0))

    def bytes_per_token(self) -> float:
        """Mean link bytes per token, all layers together."""
        return float(self.bytes_moved.sum(axis=1).mean())

    def summary(self) -> dict[str, Any]:
        """One table row: the setting, the trace, hit rate, bytes and evictions per token."""
        return {
            "policy": self.policy,
            "slots_per_layer": self.slots_per_layer,
            "on_miss": self.on_miss,
            "trace": self.trace_label,
            "synthetic": self.synthetic,
            "hit_rate": round(self.hit_rate(), 4),
            "MiB/token": round(self.bytes_per_token() / 2**20, 3),
            "evictions/token": round(float(self.evictions.sum(axis=1).mean()), 3),
        }

    def to_dataframe(self) -> pd.DataFrame:
        """One row per (token, layer): hits, misses, evictions, bytes_moved."""
        T, L = self.hits.shape
        return pd.DataFrame(
            {
                "token": np.repeat(np.arange(T), L),
                "layer": np.tile(np.arange(L), T),
                "hits": self.hits.reshape(-1),
                "misses": self.misses.reshape(-1),
                "evictions": self.evictions.reshape(-1),
                "bytes_moved": self.bytes_moved.reshape(-1),
            }
        )


def _check(trace: RoutingTrace, policy: str, slots: Any, on_miss: str) -> int:
    if not isinstance(trace, RoutingTrace):
        raise ArgumentTypeError(
            f"trace must be a RoutingTrace (from RoutingRecorder, record_decode or synthetic_trace), got {type(trace).__name__}"
        )
    if policy not in POLICIES:
        raise CachePolicyError(f"unknown cache policy {policy!r}; valid: {', '.join(POLICIES)}")
    if on_miss not in ON_MISS:
        raise CachePolicyError(f"unknown on_miss {on_miss!r}; valid: {', '.join(ON_MISS)}")
    if isinstance(slots, bool) or not isinstance(slots, (int, np.integer)):
        raise CachePolicyError(f"slots_per_layer must be an integer, got {slots!r}")
    slots = int(slots)
    low = trace.top_k if policy in _ADMITTING else 0
    if not low <= slots <= trace.num_experts:
        why = (
            f"at least k={trace.top_k} (a token's experts are resident together)"
            if policy in _ADMITTING
            else "at least 0"
        )
        raise CachePolicyError(
            f"slots_per_layer={slots} for {policy!r}: it must be {why} and at most num_experts="
            f"{trace.num_experts} (more slots than experts hold nothing)"
        )
    return slots


def replay(
    trace: RoutingTrace,
    policy: str,
    slots_per_layer: int,
    slab_bytes: int,
    *,
    on_miss: str = "copy",
    popularity: Optional[np.ndarray] = None,
) -> CacheReplay:
    """Run ``trace`` through one cache (module rules). ``popularity`` ``(L, E)`` picks
    ``static_hot``'s pinned experts (default: the trace's own counts)."""
    return replay_all(trace, [policy], slots_per_layer, slab_bytes, on_miss=on_miss, popularity=popularity)[0]


def replay_all(
    trace: RoutingTrace,
    policies: Sequence[str] = POLICIES,
    slots_per_layer: int = 0,
    slab_bytes: int = 0,
    *,
    on_miss: str = "copy",
    popularity: Optional[np.ndarray] = None,
) -> list[CacheReplay]:
    """Run ``trace`` through several policies at one slot count, in one pass (rule 6)."""
    if isinstance(policies, str):
        policies = [policies]
    policies = list(dict.fromkeys(policies))
    if not policies:
        raise CachePolicyError(f"give at least one policy; valid: {', '.join(POLICIES)}")
    slots = {p: _check(trace, p, slots_per_layer, on_miss) for p in policies}
    if isinstance(slab_bytes, bool) or not isinstance(slab_bytes, (int, np.integer)) or slab_bytes < 0:
        raise CachePolicyError(f"slab_bytes must be an integer >= 0, got {slab_bytes!r}")
    if slab_bytes > MAX_SLAB_BYTES:
        raise CachePolicyError(
            f"slab_bytes={int(slab_bytes)} is more than any machine holds; one expert's weights are at most "
            f"{MAX_SLAB_BYTES} bytes (2**50) here"
        )
    requests = trace.num_tokens * trace.num_layers * trace.top_k
    if requests * int(slab_bytes) > np.iinfo(np.int64).max:
        raise CachePolicyError(
            f"slab_bytes={int(slab_bytes)} times the trace's {requests} expert requests overflows a 64-bit "
            "byte count; give a shorter trace or a smaller slab"
        )
    admitting = [p for p in policies if p in _ADMITTING]
    results: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    if admitting:
        hits, evictions = _replay_admitting(trace.experts, int(slots_per_layer), [p == "lfu" for p in admitting])
        for i, p in enumerate(admitting):
            results[p] = hits[i], evictions[i]
    if "static_hot" in policies:
        results["static_hot"] = _replay_static(trace, int(slots_per_layer), popularity)
    k = trace.top_k
    return [
        CacheReplay(
            policy=p,
            slots_per_layer=slots[p],
            on_miss=on_miss,
            slab_bytes=int(slab_bytes),
            trace_label=trace.label,
            synthetic=trace.synthetic,
            hits=results[p][0],
            misses=(k - results[p][0]).astype(np.int32),
            evictions=results[p][1],
        )
        for p in policies
    ]


def pinned_experts(popularity: np.ndarray, slots: int) -> np.ndarray:
    """Rule 4: the ``slots`` most popular experts per layer ``(L, slots)``, ties to the lower id."""
    order = np.argsort(-np.asarray(popularity), axis=1, kind="stable")  # stable: lower id first on ties
    return order[:, :slots]


def _replay_static(trace: RoutingTrace, slots: int, popularity: Optional[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    L, E = trace.num_layers, trace.num_experts
    counts = trace.counts() if popularity is None else np.asarray(popularity)
    if counts.shape != (L, E):
        raise CachePolicyError(f"popularity must have shape (layers, experts) = {(L, E)}, got {counts.shape}")
    pinned = np.zeros((L, E), dtype=bool)
    np.put_along_axis(pinned, pinned_experts(counts, slots), True, axis=1)
    hits = pinned[np.arange(L)[None, :, None], trace.experts].sum(axis=2, dtype=np.int32)  # (T, L)
    return hits, np.zeros_like(hits)


def _replay_admitting(experts: np.ndarray, slots: int, lfu: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    """Rule 3 for several admitting policies: ``(P, T, L)`` hits and evictions."""
    T, L, k = experts.shape
    E = int(experts.max()) + 1
    hits = np.empty((len(lfu), T, L), dtype=np.int32)
    evictions = np.empty((len(lfu), T, L), dtype=np.int32)
    ids = np.ascontiguousarray(experts.transpose(1, 0, 2))  # (L, T, k): one layer's tokens contiguous
    for i, by_count in enumerate(lfu):
        h, ev = _admitting_kernel(ids, slots, E, LFU_COUNT_WEIGHT if by_count else 0)
        hits[i], evictions[i] = h.T, ev.T
    return hits, evictions


@njit_cached(nogil=True)
def _admitting_kernel(ids: np.ndarray, slots: int, num_experts: int, count_weight: int) -> tuple[np.ndarray, np.ndarray]:
    """Rule 3, one layer at a time: ``ids`` ``(L, T, k)`` → hits and evictions ``(L, T)``.

    Per layer: ``slot_expert`` (S,) which expert a slot holds (-1 empty), ``slot_key``
    (S,) its key (-1 empty, so empties are taken first), ``slot_of`` (E,) the slot of a
    resident expert (-1 when not resident), ``requested`` (E,) requests so far. Key =
    ``count_weight * requests + t * k + j`` (weight 0: LRU). The j-th miss of a token
    takes the smallest key among the slots its token does not use yet, scanning slots in
    index order (strict ``<``: ties, i.e. empties, go to the lower slot).
    """
    L, T, k = ids.shape
    hits = np.zeros((L, T), dtype=np.int32)
    evictions = np.zeros((L, T), dtype=np.int32)
    for layer in range(L):
        slot_expert = np.full(slots, -1, dtype=np.int64)
        slot_key = np.full(slots, -1, dtype=np.int64)
        slot_of = np.full(num_experts, -1, dtype=np.int64)
        requested = np.zeros(num_experts, dtype=np.int64)
        taken = np.zeros(slots, dtype=np.int64)  # == t + 1: the slot serves token t already
        for t in range(T):
            for j in range(k):
                e = ids[layer, t, j]
                requested[e] += 1
                s = slot_of[e]
                if s >= 0:
                    hits[layer, t] += 1
                    taken[s] = t + 1
            for j in range(k):
                e = ids[layer, t, j]
                if slot_of[e] >= 0:
                    continue
                best, best_key = -1, 0
                for s in range(slots):
                    if taken[s] != t + 1 and (best < 0 or slot_key[s] < best_key):
                        best, best_key = s, slot_key[s]
                old = slot_expert[best]
                if old >= 0:
                    slot_of[old] = -1
                    evictions[layer, t] += 1
                slot_expert[best] = e
                slot_of[e] = best
                taken[best] = t + 1
            for j in range(k):
                e = ids[layer, t, j]
                slot_key[slot_of[e]] = count_weight * requested[e] + t * k + j
    return hits, evictions


def replay_table(replays: Iterable[CacheReplay]) -> pd.DataFrame:
    """One row per replay (``CacheReplay.summary``)."""
    return pd.DataFrame([r.summary() for r in replays])
