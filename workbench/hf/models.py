"""Build a transformers causal LM from a configuration with seeded random weights.

Rules:
1. Weights are a pure function of (configuration, seed): transformers initialises them
   from torch's global generator, so the build runs inside ``torch.random.fork_rng`` with
   ``torch.manual_seed(seed)``; the caller's random state is left as it was.
2. ``shape_only=True`` builds under ``torch.device("meta")``: no weight memory, for
   published sizes (tens or hundreds of billions of parameters). A build with weights is
   first made on the meta device (no memory, milliseconds) to count its bytes: weights
   that would not fit in the memory of the device they are made on are refused before
   any is allocated, with the bytes needed and the shape-only hint (``memory_limits``).
3. Never from a hub: ``AutoModelForCausalLM.from_config``, never ``from_pretrained``.
4. A model instance given by the caller is used as it is: its weights are the caller's.
5. Whether a model's experts can be captured is decided by capturing them, not by their
   ``experts_implementation``: transformers' ``'eager'`` form is a dense batched matmul in
   some families (Llama 4) and a Python loop in others; a family whose only form is a
   loop is captured in the workbench's batched form where it has one (``expert_forms``:
   LongCat-Flash, JetMoE). When a capture fails, the error says how to switch the form,
   or that the family has no other.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any, Iterator, Optional

import torch

from ..arguments import check_flag
from ..memory_limits import check_weights_fit
from ..moe.discovery import find_experts
from .configs import HFError, load_config

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["EXPERT_IMPLEMENTATIONS", "check_model", "experts_hint", "load_model"]

#: transformers' expert forms that torch.export can capture ("eager" loops over experts
#: with data-dependent shapes and does not export).
EXPERT_IMPLEMENTATIONS = ("grouped_mm", "batched_mm")


@contextlib.contextmanager
def _quiet_optional_parts() -> Iterator[None]:
    """transformers' model classes import torchao (for its quantizers), which reports the
    native parts it cannot load on this machine and torch's deprecation of the way it
    registers its enums: notices about code the workbench never runs, so they are held
    back while that import runs (their errors still show)."""
    loggers = [logging.getLogger(name) for name in ("torchao", "torch.utils._pytree")]
    levels = [log.level for log in loggers]
    for log in loggers:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for log, level in zip(loggers, levels):
            log.setLevel(level)


def load_model(
    source: Any,
    *,
    seed: int = 0,
    shape_only: bool = False,
    dtype: Optional[torch.dtype] = None,
    experts_implementation: Optional[str] = None,
) -> "PreTrainedModel":
    """A causal LM from ``source``, in eval mode.

    Args:
        source: a transformers model instance (used as it is, rule 4), or anything
            ``load_config`` takes: a config object, a mapping, a JSON path, a family name.
        seed: seeds the random weights (rule 1).
        shape_only: build on the meta device, allocating nothing (rule 2).
        dtype: parameter dtype; default: the configuration's ``dtype`` (float32 if unset).
        experts_implementation: ``"grouped_mm"`` (transformers' default) or ``"batched_mm"``.
    """
    with _quiet_optional_parts():
        from transformers import AutoModelForCausalLM, PreTrainedModel

    if isinstance(seed, bool) or not isinstance(seed, int):
        raise HFError(f"seed must be an integer, got {seed!r}")
    check_flag(shape_only, "shape_only")
    if experts_implementation is not None and experts_implementation not in EXPERT_IMPLEMENTATIONS:
        raise HFError(
            f"experts_implementation {experts_implementation!r} cannot be captured; use one of "
            f"{', '.join(EXPERT_IMPLEMENTATIONS)} (transformers' 'eager' loops over experts with "
            "data-dependent shapes, which torch.export refuses)"
        )
    if isinstance(source, PreTrainedModel):
        if experts_implementation is not None and find_experts(source):
            _set_experts_implementation(source, experts_implementation)
        return check_model(source)
    cfg = load_config(source)
    kwargs = {} if dtype is None else {"dtype": dtype}
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(cfg, **kwargs)
    if not shape_only:
        _check_fits(model, cfg)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(cfg, **kwargs)
    if experts_implementation is not None and find_experts(model):
        _set_experts_implementation(model, experts_implementation)
    return model.eval()


def _check_fits(shape_only_model: "PreTrainedModel", cfg: Any) -> None:
    """Rule 2: the weights of ``shape_only_model`` (built on the meta device) fit where
    they would be made, or an ``HFError``."""
    tensors = [*shape_only_model.parameters(), *shape_only_model.buffers()]
    check_weights_fit(
        sum(t.numel() for t in shape_only_model.parameters()),
        sum(t.numel() * t.element_size() for t in tensors),
        f"{type(shape_only_model).__name__} ({getattr(cfg, 'model_type', 'model')})",
        HFError,
        "load it shape-only (hf.load_model(config, shape_only=True): the meta device, no weights) and capture "
        "it shape-only, or give a smaller config",
    )


def _set_experts_implementation(model: "PreTrainedModel", implementation: str) -> None:
    """Switch the experts' form, or an ``HFError`` when the family has no such form
    (transformers then raises, or leaves the model as it was)."""
    try:
        model.set_experts_implementation(implementation)
    except (ValueError, RuntimeError, NotImplementedError) as exc:
        raise HFError(_no_implementation(model, implementation, str(exc).splitlines()[0] if str(exc) else "")) from exc
    if getattr(model.config, "_experts_implementation", None) != implementation:
        raise HFError(_no_implementation(model, implementation, ""))


def _no_implementation(model: "PreTrainedModel", implementation: str, why: str) -> str:
    return (
        f"{type(model).__name__} has no experts_implementation {implementation!r}"
        + (f" ({why})" if why else "")
        + f": transformers gives this family's experts one form only ({getattr(model.config, '_experts_implementation', None)!r}); "
        "load it without experts_implementation — capture then tells whether that form exports"
    )


def check_model(model: Any) -> "PreTrainedModel":
    """Rule 4: a transformers causal LM as given, or a clear error."""
    from transformers import PreTrainedModel

    if not isinstance(model, PreTrainedModel):
        raise HFError(
            f"expected a transformers model (a PreTrainedModel such as Qwen3MoeForCausalLM), got "
            f"{type(model).__name__}; build one with workbench.hf.load_model(config)"
        )
    return model


def experts_hint(model: "PreTrainedModel") -> str:
    """What to do when a model's experts did not export: switch their form when the family
    offers another, else say that it has none (rule 5)."""
    current = getattr(model.config, "_experts_implementation", None)
    if current is None or current in EXPERT_IMPLEMENTATIONS or not find_experts(model):
        return ""
    can_switch = getattr(type(model), "_can_set_experts_implementation", None)
    if can_switch is not None and can_switch():
        return (
            f"this model's experts_implementation is {current!r}, a Python loop over the experts the router chose; "
            f"call model.set_experts_implementation('grouped_mm') (or one of {', '.join(EXPERT_IMPLEMENTATIONS)}) first"
        )
    return (
        f"transformers gives {type(model).__name__}'s experts one form only, a Python loop over the experts the "
        "router chose, whose sizes depend on the routing, which no fixed-size graph can hold; this family cannot be "
        "captured until transformers "
        "offers its experts a batched form (or the model's expert module is replaced by one)"
    )

