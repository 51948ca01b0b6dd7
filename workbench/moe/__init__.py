"""Mixture-of-experts capacity planning: routing traces, expert caches, multi-token decode.

- ``routing``: ``RoutingTrace`` (per token, per layer, the chosen experts), recorded from
  real runs of the built-in model or a transformers MoE, or generated with a stated skew
  (always labelled synthetic).
- ``locality``: how often consecutive tokens reuse experts, measured on any trace, published
  for real models (``data/routing/locality.csv``) and reproduced by ``locality_trace``.
- ``cache_policies``: replay a trace through an expert cache (LRU, LFU, static-hot)
  without running the model: hits, misses, evictions and bytes per layer per token.
- ``discovery``: where a model keeps its routed experts, found by what they are
  (``find_experts``), and its MoE layers by index.
- ``expert_ops``: the expert matmul forms of a captured graph (grouped, batched) and the
  router behind an op; ``streaming`` and ``expert_reads`` rewrite them.
- ``strategies``: ``experts_on_host``, ``expert_streaming``, ``partial_offload`` and
  ``expert_cache`` (a miss copied or computed on the host, optionally prefetched into),
  each a ``workbench.strategy.Strategy`` whose passes run after propagation
  (``cache_graph`` builds the cache, ``cache_ops`` updates it).
- ``decode``: ``wb.decode``, N decode steps in one session, caches carried; ``figures``
  draws its hit-rate heat map.
"""

from .cache_policies import POLICIES, CacheReplay, CachePolicyError, replay, replay_all, slab_bytes
from .discovery import ExpertDiscoveryError, ExpertLayer, expert_layers, expert_modules
from .locality import LocalityError, LocalityFit, locality_trace, measure_locality, model_locality, published_locality
from .routing import RoutingRecorder, RoutingTrace, TraceError, TraceWriteError, record_decode, synthetic_trace, synthetic_trace_for

__all__ = [
    "POLICIES",
    "CacheReplay",
    "CachePolicyError",
    "ExpertDiscoveryError",
    "ExpertLayer",
    "LocalityError",
    "LocalityFit",
    "RoutingRecorder",
    "RoutingTrace",
    "TraceError",
    "TraceWriteError",
    "expert_layers",
    "expert_modules",
    "locality_trace",
    "measure_locality",
    "model_locality",
    "published_locality",
    "record_decode",
    "replay",
    "replay_all",
    "slab_bytes",
    "synthetic_trace",
    "synthetic_trace_for",
]
