"""Hugging Face transformers models through every stage of the workbench.

Build a model from a configuration with seeded random weights (never from a hub), capture
its prefill or one decode step with the cache as plain tensors, and apply the same
strategies as to the built-in decoder — its routed experts are found by
``workbench.moe.discovery.find_experts``::

    from workbench import hf
    model = hf.load_model("qwen3_5_moe")                  # the tiny shipped config, seeded
    step = hf.capture_decode(model, past=8)               # cache in, cache out, as tensors
    dg = experts_on_host().apply(step.program)

    full = hf.load_model(hf.published_config("qwen3_5_moe"), shape_only=True)
    prog = hf.capture_decode(full).program                # shape-only: no weights allocated

transformers is an optional dependency (the ``hf`` extra): importing this package does not
import it; the functions do.
"""

from .cache import CacheSlot, cache_slots
from .configs import FAMILIES, Family, HFError, config_file, family, load_config, published_config, tiny_config
from .families import TransformersBuildError, moe_families, tiny_family_config, tiny_family_model, unset_fills
from .models import EXPERT_IMPLEMENTATIONS, load_model
from .stages import STAGES, StageReport, StageResult, try_stages, unexpressed_experts
from .steps import CapturedStep, DecodeStep, HFCaptureError, PrefillStep, capture_decode, capture_prefill, prefill_cache

__all__ = [
    "CacheSlot",
    "CapturedStep",
    "DecodeStep",
    "EXPERT_IMPLEMENTATIONS",
    "FAMILIES",
    "Family",
    "HFCaptureError",
    "HFError",
    "PrefillStep",
    "STAGES",
    "StageReport",
    "StageResult",
    "TransformersBuildError",
    "cache_slots",
    "capture_decode",
    "capture_prefill",
    "config_file",
    "family",
    "load_config",
    "load_model",
    "moe_families",
    "prefill_cache",
    "published_config",
    "tiny_config",
    "tiny_family_config",
    "tiny_family_model",
    "try_stages",
    "unexpressed_experts",
    "unset_fills",
]
