"""Capturable steps of a transformers causal LM: prefill, and one decode step whose cache
is plain tensors.

How a model is wrapped: ``PrefillStep`` and ``DecodeStep`` are modules that register the
model's own children (``model``, ``lm_head``) as theirs and keep the model itself as a
plain attribute, so parameter names and module paths in the captured graph are exactly
the model's (``model.layers.3.mlp.experts.gate_up_proj``), and no weight is held twice.

- ``PrefillStep(model)(input_ids) -> logits``: the model with ``use_cache=False``.
- ``DecodeStep(model, cache)(input_ids, cache_position, *states) -> (logits, *states)``:
  ``states`` are the cache's state tensors (``workbench.hf.cache``); the forward rebuilds a
  cache object of the template's structure around them, runs the model on it, and returns
  the updated states — so the skip-copy flags act on the cache as they do on the built-in
  decoder's explicit caches, and no transformers cache type ever crosses the graph's
  boundary (no pytree registration, no ``lift_fresh_copy`` of a cache object).

Rules:
1. Example token ids are a pure function of ``seed``; the decode step's cache is filled by
   an eager prefill of ``past`` such tokens (on meta tensors for a shape-only model, whose
   grouped expert matmul has no float32 meta kernel: that prefill runs the experts as
   ``batched_mm``, which leaves every cache shape the same).
2. ``cache="static"`` (default) gives fixed-size caches of ``max_cache_len`` positions —
   inputs and outputs have equal shapes, like the built-in decoder's; ``"dynamic"`` gives
   caches of ``past`` positions that come back with ``past + 1``.
3. A captured decode step never mutates its inputs: a state transformers updates in place
   is cloned inside the step; if the capture still finds an input written in place (an
   in-place op on it or on a view of it, in a layer type not known to be in-place), the
   step is captured again with that state cloned too.
4. Experts that transformers gives one form only, a Python loop over the chosen experts
   (LongCat-Flash, JetMoE), are captured in the workbench's batched form of them
   (``expert_forms``), patched on the instances while the step is captured; the step
   run eagerly is still transformers' loop. A step that does not capture is an
   ``HFCaptureError`` (a ``CaptureError`` and an ``HFError``): one paragraph naming the
   model's line that failed; when the experts' Python loop is the cause, what to do is
   switching their form, or that the family has none (``models`` rule 5). So is a step
   torch.export captures with a size that depends on tensor values (an unbacked symbol):
   no memory plan can size it.
5. A model with a cache class of its own (MiniMax's, which also holds each linear-attention
   layer's state) gets one: a dynamic cache is the one its prefill returns; a static one
   is its class holding a static cache's layers. Every state it holds is carried as a
   tensor (``cache`` rule 1), and the caller's cache is never written (``cache`` rule 3).
6. A model whose layers are all compressed attention (DeepSeek-V4), which transformers
   caches in dynamic form only, gets a static cache of the workbench's
   (``compressed_cache``): filled by a dynamic prefill, then made static, so one captured
   step decodes every position up to ``max_cache_len``.
7. A token indexer that selects keys in a Python loop over rows and queries (Qwen4-Exp's)
   is captured in the workbench's static form of it (``token_indexer``), patched on the
   instances while the step is captured, like rule 4's experts; a static cache's indexer
   positions, which transformers grows by concatenation, are carried at a fixed shape
   (``token_indexer.fixed_positions``, on a copy of the cache).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

import torch
from torch.export.graph_signature import OutputKind

from ..capture import CaptureError, Program, capture
from .cache import CacheSlot, cache_slots, check_carried, read_states, rebuild
from .compressed_cache import is_compressed_kind, static_compressed_cache
from .configs import HFError
from .expert_forms import batched_experts
from .models import check_model, experts_hint
from .token_indexer import fixed_positions, static_indexers

if TYPE_CHECKING:
    from transformers import PreTrainedModel

__all__ = ["CapturedStep", "HFCaptureError", "DecodeStep", "PrefillStep", "capture_decode", "capture_prefill", "example_tokens"]

CACHE_KINDS = ("static", "dynamic")


class HFCaptureError(HFError, CaptureError):
    """A transformers model's step did not capture: the capture's paragraph, with what to
    do about the model's experts when they are the cause (rule 4)."""


def _capture_step(model: "PreTrainedModel", step: torch.nn.Module, inputs: tuple, **options: Any) -> Program:
    """``workbench.capture`` of a step; a failure names the family's way out (rule 4)."""
    try:
        with batched_experts(model), static_indexers(model):  # rules 4 and 7: static forms of Python loops
            program = capture(step, inputs, **options)
    except CaptureError as exc:
        if isinstance(exc.__cause__, HFError):  # the step's own refusal (an uncarried cache state), already one paragraph
            raise exc.__cause__ from None
        data_dependent = "data-dependent" in exc.torch_message.lower() or "DataDependent" in exc.torch_message
        hint = experts_hint(model) if data_dependent else ""
        text = str(exc) if not hint else str(exc).split(" What to do: ")[0] + f" What to do: {hint}."
        raise HFCaptureError(text, exc.torch_message) from exc.__cause__ or exc
    sized = _value_sized(program)
    if sized is not None:
        node, where = sized
        hint = experts_hint(model) or "compute that line with fixed shapes (every expert as one batched matmul, weighted by the router's mask)"
        raise HFCaptureError(
            f"torch.export captured {type(model).__name__}, but {node.name} ({node.target}) at {where or 'an unknown line'} "
            f"has a size that depends on tensor values ({_unbacked(node)}), so no memory plan can hold it. What to do: {hint}.",
        )
    return program


def _unbacked(node: torch.fx.Node) -> str:
    val = node.meta.get("val")
    shape = getattr(val, "shape", ())
    return ", ".join(str(d) for d in shape if isinstance(d, torch.SymInt) and d.node.expr.free_symbols) or "?"


def _value_sized(program: Program) -> Optional[tuple[torch.fx.Node, str]]:
    """Rule 4: the first op whose result's size is an unbacked symbol (it depends on
    tensor values: torch.export traced it, but no plan can size it), with its model line."""
    for node in program.graph.nodes:
        val = node.meta.get("val")
        shape = getattr(val, "shape", None)
        if node.op != "call_function" or shape is None:
            continue
        if any(isinstance(d, torch.SymInt) and any(str(sym).startswith("u") for sym in d.node.expr.free_symbols) for d in shape):
            return node, _model_line(node.meta.get("stack_trace") or "")
    return None


def _model_line(stack: str) -> str:
    """The innermost ``File "…", line N`` of a node's stack trace outside torch, shortened."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', stack)
    frames = [(f, n) for f, n in frames if "/torch/" not in f and "/workbench/" not in f]
    if not frames:
        return ""
    path, line = frames[-1]
    parts = path.split("site-packages/")
    return f"{parts[-1]}:{line}"


class _ModelStep(torch.nn.Module):
    """A module that owns the model's children under their own names (see module docstring)."""

    hf_model: "PreTrainedModel"  # the wrapped model, a plain attribute

    def __init__(self, model: "PreTrainedModel") -> None:
        super().__init__()
        for name, child in model.named_children():
            self.add_module(name, child)
        for name, param in model.named_parameters(recurse=False):
            self.register_parameter(name, param)
        for name, buf in model.named_buffers(recurse=False):
            self.register_buffer(name, buf)
        object.__setattr__(self, "hf_model", check_model(model))  # not a submodule: no second copy


class PrefillStep(_ModelStep):
    """``(input_ids) -> logits`` of the whole sequence, without a cache."""

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, V)
        return self.hf_model(input_ids=input_ids, use_cache=False).logits


class DecodeStep(_ModelStep):
    """``(input_ids, cache_position, *states) -> (logits, *states)`` for one new token."""

    def __init__(self, model: "PreTrainedModel", cache: Any, in_place: tuple[str, ...] = ()) -> None:
        super().__init__(model)
        self.template = cache  # structure and configuration of the cache; its tensors are not read
        self.slots: tuple[CacheSlot, ...] = cache_slots(cache, in_place)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor, *states: torch.Tensor) -> tuple:
        if len(states) != len(self.slots):
            raise HFError(
                f"expected {len(self.slots)} cache states ({', '.join(s.name for s in self.slots[:3])}, ...), "
                f"got {len(states)}; use DecodeStep.example_states()"
            )
        cache = rebuild(self.template, self.slots, states)
        out = self.hf_model(input_ids=input_ids, cache=cache, use_cache=True, cache_position=cache_position)
        check_carried(cache, self.slots)
        return (out.logits, *read_states(cache, self.slots))  # (B, 1, V), states

    def example_states(self) -> tuple[torch.Tensor, ...]:
        """Copies of the template cache's states: inputs of this step."""
        return tuple(t.clone() for t in read_states(self.template, self.slots))

    @property
    def state_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.slots)


@dataclass(frozen=True, eq=False)
class CapturedStep:
    """A captured prefill or decode step: its program, the module captured, its inputs."""

    kind: str  # "prefill" or "decode"
    program: Program
    module: torch.nn.Module  # the PrefillStep or DecodeStep that was captured
    inputs: tuple[torch.Tensor, ...]  # example inputs (meta tensors when shape-only)
    state_names: tuple[str, ...] = ()  # decode: the cache state of each input after the first two

    def eager(self) -> Any:
        """The step run eagerly on its inputs: what planned execution must equal."""
        if self.program.shape_only:
            raise HFError("a shape-only step has no weights to run")
        with torch.no_grad():
            return self.module(*self.inputs)


def example_tokens(vocab_size: int, batch: int, length: int, seed: int = 0, device: Any = "cpu") -> torch.Tensor:
    """Rule 1: seeded token ids ``(batch, length)``."""
    for name, value in (("batch", batch), ("length", length)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise HFError(f"{name} must be a positive integer, got {value!r}")
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(vocab_size, (batch, length), generator=gen).to(device)


def capture_prefill(
    model: "PreTrainedModel",
    *,
    tokens: int = 8,
    batch: int = 1,
    seed: int = 0,
    stack_traces: Optional[bool] = None,
) -> CapturedStep:
    """Capture ``PrefillStep(model)`` on ``tokens`` seeded token ids (shape-only when the
    model lives on the meta device; ``stack_traces`` as for ``workbench.capture``)."""
    step = PrefillStep(model)
    ids = example_tokens(_vocab(model), batch, tokens, seed, _device(model))
    program = _capture_step(model, step, (ids,), shape_only=_device(model).type == "meta", stack_traces=stack_traces)
    return CapturedStep("prefill", program, step, (ids,))


def capture_decode(
    model: "PreTrainedModel",
    cache: Any = "static",
    *,
    past: int = 8,
    batch: int = 1,
    max_cache_len: Optional[int] = None,
    seed: int = 0,
    stack_traces: Optional[bool] = None,
) -> CapturedStep:
    """Capture one decode step at position ``past`` (shape-only for a meta model).

    Args:
        model: a transformers causal LM (``workbench.hf.load_model``).
        cache: ``"static"`` or ``"dynamic"`` (rule 2) — filled by a prefill of ``past``
            seeded tokens — or a populated transformers cache, whose structure and
            contents are used (``past`` is then its length).
        past: tokens already in the cache (a given cache's own length, unless it is a
            shape-only static cache, whose length is a meta tensor).
        batch: sequences decoded together.
        max_cache_len: positions of a static cache (default ``past + 1``).
        seed: seeds the prefill and the new token.
        stack_traces: as for ``workbench.capture`` (by default recorded unless shape-only).
    """
    check_model(model)
    device = _device(model)
    built = isinstance(cache, str)
    if built:
        cache = prefill_cache(model, cache, past=past, batch=batch, max_cache_len=max_cache_len, seed=seed)
    cache = fixed_positions(cache, model)  # rule 7
    step = DecodeStep(model, cache)  # checks the cache
    if not built:
        length = cache.get_seq_length()  # a meta tensor in a shape-only static cache: `past` stands
        past = past if isinstance(length, torch.Tensor) and length.is_meta else int(length)
    states = step.example_states()
    rows = next((t.shape[0] for t in states if t.dim() > 0), batch)  # a given cache sets the batch
    token = example_tokens(_vocab(model), rows, 1, seed + 1, device)
    inputs = (token, torch.tensor([past], device=device), *states)
    shape_only = device.type == "meta"
    program = _capture_step(model, step, inputs, shape_only=shape_only, stack_traces=stack_traces)
    written = _inputs_written_in_place(program)
    if written:  # rule 3: capture again, cloning those states too
        names = [step.slots[i - 2].name for i in written]
        step = DecodeStep(model, cache, in_place=tuple(names))
        program = _capture_step(model, step, inputs, shape_only=shape_only, stack_traces=stack_traces)
        if _inputs_written_in_place(program):
            raise HFError(f"the decode step still writes its inputs in place after cloning {names}")
    return CapturedStep("decode", program, step, inputs, step.state_names)


def _static_cache(config: Any, length: int) -> Any:
    """transformers' ``StaticCache`` for ``config``; None when its layer kinds are
    compressed attention, which transformers keeps dynamic only (rule 6); an ``HFError``
    naming another layer kind it has no static layer for."""
    from transformers import StaticCache
    from transformers.cache_utils import DYNAMIC_LAYER_TYPE_MAPPING, STATIC_LAYER_TYPE_MAPPING

    try:
        return StaticCache(config=config, max_cache_len=length)
    except KeyError as exc:
        kind = exc.args[0] if exc.args else None
        if not isinstance(kind, str) or kind in STATIC_LAYER_TYPE_MAPPING:
            raise
        kinds = set(getattr(config, "layer_types", None) or ())
        if kinds and all(is_compressed_kind(DYNAMIC_LAYER_TYPE_MAPPING.get(k)) for k in kinds):
            return None
        raise HFError(
            f"transformers' StaticCache has no static layer for this model's layer kind {kind!r} (it has "
            f"{', '.join(sorted(STATIC_LAYER_TYPE_MAPPING))}); decode with a dynamic cache (cache='dynamic')"
        ) from None


def prefill_cache(
    model: "PreTrainedModel",
    kind: str = "static",
    *,
    past: int = 8,
    batch: int = 1,
    max_cache_len: Optional[int] = None,
    seed: int = 0,
) -> Any:
    """Rule 1: a ``kind`` cache filled by an eager prefill of ``past`` seeded tokens (of
    the model's own cache class when it has one, rule 5)."""
    from transformers import DynamicCache

    if kind not in CACHE_KINDS:
        raise HFError(f"cache must be one of {', '.join(CACHE_KINDS)} or a transformers Cache, got {kind!r}")
    length = past + 1 if max_cache_len is None else max_cache_len
    if kind == "static" and (isinstance(length, bool) or not isinstance(length, int) or length <= past):
        raise HFError(f"max_cache_len must be an integer > past={past} (room for the new token), got {max_cache_len!r}")
    config = model.config
    ids = example_tokens(_vocab(model), batch, past, seed, _device(model))
    meta = _device(model).type == "meta"
    previous = config._experts_implementation
    try:
        if meta and previous == "grouped_mm":
            model.set_experts_implementation("batched_mm")
        cache = _static_cache(config, length) if kind == "static" else DynamicCache(config=config)
        if cache is None:  # rule 6: filled in transformers' dynamic form, then made static
            filled = DynamicCache(config=config)
            _fill(model, ids, filled)
            return static_compressed_cache(filled, length)
        try:
            _fill(model, ids, cache)
        except Exception as exc:  # a model with a cache class of its own refuses these (rule 5)
            cache = _own_cache(model, ids, kind, length, exc)
    finally:
        if meta and previous == "grouped_mm":
            model.set_experts_implementation(previous)
    return cache


def _fill(model: "PreTrainedModel", ids: torch.Tensor, cache: Any) -> Any:
    with torch.no_grad():
        return model(input_ids=ids, cache=cache, use_cache=True)


def _own_cache(model: "PreTrainedModel", ids: torch.Tensor, kind: str, length: int, refusal: Exception) -> Any:
    """Rule 5: a ``kind`` cache of the model's own cache class, filled by the prefill; an
    ``HFError`` naming transformers' refusal when the model has no class of its own, or a
    static one cannot be made of it."""
    from transformers import DynamicCache, StaticCache

    why = f"{type(refusal).__name__}: {str(refusal).splitlines()[0] if str(refusal) else ''}"
    out = _fill(model, ids, None)
    own = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
    if own is None or type(own) in (DynamicCache, StaticCache):
        raise HFError(f"{type(model).__name__} cannot fill a {kind} cache: transformers says {why}") from refusal
    if kind == "dynamic":
        return own
    try:
        static = type(own)()
        static.layers = StaticCache(config=model.config, max_cache_len=length).layers
        for key, value in vars(own).items():  # per-layer lists start empty (None), as the model starts them
            if key != "layers" and isinstance(value, list):
                setattr(static, key, [None] * len(value))
        _fill(model, ids, static)
    except Exception as exc:
        raise HFError(
            f"{type(model).__name__} keeps a cache of its own ({type(own).__name__}), which cannot be made static "
            f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); capture its decode step with "
            "cache='dynamic'"
        ) from exc
    return static


def _inputs_written_in_place(program: Program) -> list[int]:
    """Indices of user inputs the program writes: recorded as input mutations, or (in
    torch.export's default, non-functional IR) the target of an in-place op, directly or
    through views of it."""
    position = {name: i for i, name in enumerate(program.user_inputs)}
    written = {
        position[spec.target]
        for spec in program.exported.graph_signature.output_specs
        if spec.kind == OutputKind.USER_INPUT_MUTATION and spec.target in position
    }
    for node in program.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        for i, arg in enumerate(node.target._schema.arguments):
            if arg.alias_info is not None and arg.alias_info.is_write:
                value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
                base = _aliased_base(value)
                if isinstance(base, torch.fx.Node) and base.name in position:
                    written.add(position[base.name])
    return sorted(written)


def _aliased_base(value: Any) -> Any:
    """The value a view (or an in-place result) aliases, followed back to its base."""
    while (
        isinstance(value, torch.fx.Node)
        and value.op == "call_function"
        and isinstance(value.target, torch._ops.OpOverload)
        and value.target._schema.returns
        and value.target._schema.returns[0].alias_info is not None
    ):
        value = value.args[0]
    return value


def _vocab(model: "PreTrainedModel") -> int:
    return int(model.get_output_embeddings().weight.shape[0])


def _device(model: torch.nn.Module) -> torch.device:
    return next(model.parameters()).device
