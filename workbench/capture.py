"""Capture: a PyTorch model → a ``Program`` (a ``torch.export.ExportedProgram`` inside).

With ``shape_only=True`` the model is exported over meta tensors: every value keeps its
shape and dtype, no weight or activation memory is allocated, so a model of tens of
billions of parameters can be placed, propagated and planned on a laptop.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from .errors import WorkbenchError
from .json_fields import JsonObject

__all__ = ["CaptureError", "InputSignatureError", "Program", "capture"]


class CaptureError(WorkbenchError, ValueError):
    """The model or its example inputs cannot be captured."""


class InputSignatureError(WorkbenchError, TypeError):
    """Inputs that do not have the structure the program was captured with."""


#: Graph-signature input kinds that hold weights or state rather than per-call data.
_CONSTANT_KINDS = {InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR}


@dataclass(frozen=True, eq=False)
class Program:
    """An exported model: the graph, its signature, and where its constants come from.

    Names are node names of ``graph_module``; they key every later stage.
    """

    exported: ExportedProgram  # the torch.export result; its graph is never modified
    shape_only: bool  # True when captured over meta tensors (no real weights)
    user_inputs: tuple[str, ...] = field(init=False)  # placeholders the caller supplies, in order
    user_outputs: tuple[str, ...] = field(init=False)  # nodes returned to the caller, in order
    constants: Mapping[str, str] = field(init=False)  # placeholder → parameter/buffer/constant FQN
    constant_kinds: Mapping[str, str] = field(init=False)  # placeholder → "parameter"|"buffer"|"constant"

    def __post_init__(self) -> None:
        sig = self.exported.graph_signature
        user_inputs, constants, kinds = [], {}, {}
        for spec in sig.input_specs:
            name = spec.arg.name
            if spec.kind == InputKind.USER_INPUT:
                user_inputs.append(name)
            elif spec.kind in _CONSTANT_KINDS:
                constants[name] = spec.target
                kinds[name] = spec.kind.name.lower().replace("constant_tensor", "constant")
            else:
                raise CaptureError(
                    f"input {name!r} has kind {spec.kind.name}, which the workbench does not "
                    f"handle (it handles user inputs, parameters, buffers and constant tensors)"
                )
        outputs = [
            spec.arg.name
            for spec in sig.output_specs
            if spec.kind == OutputKind.USER_OUTPUT and hasattr(spec.arg, "name")
        ]
        object.__setattr__(self, "user_inputs", tuple(user_inputs))
        object.__setattr__(self, "user_outputs", tuple(outputs))
        object.__setattr__(self, "constants", constants)
        object.__setattr__(self, "constant_kinds", kinds)

    @classmethod
    def from_exported(cls, exported: ExportedProgram, shape_only: bool | None = None) -> "Program":
        """Wrap an ``ExportedProgram`` made elsewhere."""
        if not isinstance(exported, ExportedProgram):
            raise CaptureError(
                f"expected a torch.export.ExportedProgram, got {type(exported).__name__}"
            )
        if shape_only is None:
            shape_only = any(
                isinstance(v, torch.Tensor) and v.is_meta for v in exported.state_dict.values()
            )
        return cls(exported, shape_only)

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self.exported.graph_module

    @property
    def graph(self) -> torch.fx.Graph:
        return self.exported.graph

    def constant_tensor(self, placeholder: str) -> torch.Tensor:
        """The tensor behind a constant placeholder (meta for shape-only programs)."""
        target = self.constants[placeholder]
        if target in self.exported.state_dict:
            return self.exported.state_dict[target]
        return self.exported.constants[target]

    def flatten_inputs(self, args: tuple, kwargs: Mapping[str, Any] | None = None) -> list:
        """The call's inputs as the flat list the user-input placeholders take, in order;
        a structure other than the captured one is an ``InputSignatureError``."""
        flat, got = pytree.tree_flatten((tuple(args), dict(kwargs or {})))
        spec = self.exported.call_spec.in_spec
        if spec is not None and got != spec:
            raise InputSignatureError(
                f"inputs do not match the captured signature: expected {spec.num_leaves} inputs "
                f"({', '.join(self.user_inputs)}) structured as {spec}, got {got}"
            )
        return flat

    def num_ops(self) -> int:
        """Number of ``call_function`` nodes."""
        return sum(1 for n in self.graph.nodes if n.op == "call_function")

    def to_json(self) -> dict[str, Any]:
        """What a saved program needs besides its ``torch.export`` archive."""
        return {"shape_only": self.shape_only}

    @classmethod
    def from_json(cls, data: Any, exported: ExportedProgram, path: str = "program") -> "Program":
        """The program ``to_json`` described, around ``exported`` (read back with ``torch.export.load``)."""
        return cls(exported, JsonObject(data, path).flag("shape_only"))


def capture(
    model: torch.nn.Module,
    example_inputs: Any,
    kwargs: Mapping[str, Any] | None = None,
    *,
    shape_only: bool = False,
    dynamic_shapes: Any = None,
    decompose: bool = False,
    strict: bool = False,
) -> Program:
    """Export ``model`` with ``torch.export`` and wrap the result.

    Args:
        model: the module to capture (it is not modified).
        example_inputs: a tuple of positional inputs (a single tensor is accepted).
        kwargs: keyword inputs, passed to ``torch.export.export`` as its ``kwargs``
            (``{"use_cache": False}``, an attention mask…); they become graph inputs
            after the positional ones, and a non-tensor value is specialised (the graph
            holds for that value only).
        shape_only: export over meta tensors so no weight or activation memory is
            allocated; inputs become meta tensors of the same shape and dtype, and a model
            with real weights is cloned onto meta without copying them.
        dynamic_shapes: passed to ``torch.export.export``; bound every dynamic size
            (``Dim(..., max=...)``) if the program is to be memory-planned.
        decompose: run the core-ATen decompositions (``aten.linear`` → ``aten.addmm`` …),
            as ExecuTorch's ``to_edge`` does.
        strict: passed to ``torch.export.export``.
    """
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"capture expects a torch.nn.Module, got {type(model).__name__}")
    inputs = _as_tuple(example_inputs)
    keywords = _as_kwargs(kwargs)
    if shape_only:
        model = _meta_clone(model)
        inputs = tuple(_to_meta(x) for x in inputs)
        keywords = _to_meta(keywords)
    try:
        exported = torch.export.export(
            model, inputs, keywords, dynamic_shapes=dynamic_shapes, strict=strict
        )
        if decompose:
            exported = exported.run_decompositions()
    except Exception as exc:  # torch.export raises many types; keep its message
        raise CaptureError(
            f"torch.export could not capture {type(model).__name__}: {type(exc).__name__}: {exc}"
            + _what_to_do(exc)
        ) from exc
    return Program(exported, shape_only)


#: torch's pytree error for a value it cannot flatten: "Found <class 'pkg.Type'> in output, …".
_UNFLATTENABLE = re.compile(r"Found <class '(?P<type>[\w.]+)'> in (?P<where>input|output)")


def _what_to_do(exc: Exception) -> str:
    """A hint for export failures whose fix is known: a model that takes or returns an
    object torch.export cannot flatten (a transformers cache, most often)."""
    found = _UNFLATTENABLE.search(str(exc))
    if found is None:
        return ""
    kind, where = found["type"].rsplit(".", 1)[-1], found["where"]
    hint = (
        f"\nWhat to do: the model's {where} holds a {kind}, which is not a tensor (nor a "
        "tuple, list or dict of tensors); the workbench captures plain tensors in and out."
    )
    if kind.endswith("Cache"):
        hint += (
            " For a transformers model, capture the prefill without a cache "
            "(kwargs={'use_cache': False}, or workbench.hf.capture_prefill), or a decode step "
            "whose cache is passed and returned as plain tensors (workbench.hf.capture_decode)."
        )
    else:
        hint += f" Wrap the model in a module whose forward {'takes' if where == 'input' else 'returns'} tensors."
    return hint


def _as_kwargs(kwargs: Any) -> dict[str, Any]:
    if kwargs is None:
        return {}
    if isinstance(kwargs, bool):  # capture(m, x, True) meant shape_only, which is keyword-only
        raise CaptureError(
            f"capture's third argument is kwargs (a dict of keyword inputs), got {kwargs!r}; "
            "shape-only capture is capture(model, inputs, shape_only=True)"
        )
    if not isinstance(kwargs, Mapping) or not all(isinstance(k, str) for k in kwargs):
        raise CaptureError(
            f"kwargs must be a dict of keyword inputs {{name: value}}, got {type(kwargs).__name__}"
        )
    return dict(kwargs)


def _as_tuple(example_inputs: Any) -> tuple:
    if isinstance(example_inputs, torch.Tensor):
        return (example_inputs,)
    if isinstance(example_inputs, list):
        return tuple(example_inputs)
    if not isinstance(example_inputs, tuple):
        raise CaptureError(
            "example_inputs must be a tuple of inputs (or a single tensor), got "
            f"{type(example_inputs).__name__}"
        )
    return example_inputs


def _to_meta(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (tuple, list)):
        return type(x)(_to_meta(v) for v in x)
    if isinstance(x, Mapping):
        return {k: _to_meta(v) for k, v in x.items()}
    return x


def _meta_clone(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of ``model`` whose parameters and buffers are meta tensors.

    The deepcopy memo maps every real tensor to its meta twin before copying, so the
    weights are never duplicated in memory; a model already on meta is returned as is.
    """
    tensors = list(model.parameters()) + list(model.buffers())
    if all(t.is_meta for t in tensors):
        return model
    memo: dict[int, Any] = {}
    for t in tensors:
        meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        if isinstance(t, torch.nn.Parameter):
            meta = torch.nn.Parameter(meta, requires_grad=t.requires_grad)
        memo[id(t)] = meta
    return copy.deepcopy(model, memo)
