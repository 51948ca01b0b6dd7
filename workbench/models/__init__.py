"""The Qwen-3.5-MoE-shaped decoder used by the MoE walkthrough.

``MoEConfig.tiny()`` runs fast on a laptop CPU; ``MoEConfig.full()`` is the
published 35B-A3B configuration (build it under ``torch.device("meta")`` for
shape-only analysis). ``QwenMoEDecoder`` is one decode step with explicit
caches (``expert_prefetch=True`` adds the next layer's routing hints to the graph, for
prefetching streamed experts; outputs unchanged); ``param_count`` and ``cache_bytes``
size a config without building it.
"""

from .config import ConfigError, MoEConfig
from .counting import CacheTensorSpec, cache_bytes, cache_specs, param_count
from .qwen_moe import ModelInputError, QwenMoEDecoder

__all__ = [
    "MoEConfig",
    "QwenMoEDecoder",
    "param_count",
    "cache_bytes",
    "cache_specs",
    "CacheTensorSpec",
    "ConfigError",
    "ModelInputError",
]
