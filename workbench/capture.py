"""Capture: a PyTorch model → a ``Program`` (a ``torch.export.ExportedProgram`` inside).

With ``shape_only=True`` the model is exported over meta tensors: every value keeps its
shape and dtype, no weight or activation memory is allocated, so a model of tens of
billions of parameters can be placed, propagated and planned on a laptop.

Rules:
1. Weights are not copied: the program shares the model's parameter and buffer tensors.
   In-place edits of their values before a plan is loaded are used; a replaced
   parameter, buffer or submodule is detected at load and run (``model_source``).
2. A model that updates its own buffers in place (``self.count.add_(1)``, BatchNorm's
   running statistics) or writes a user input in place is captured in functional form:
   each write becomes a new value returned as a buffer (or input) mutation of the
   signature, which the executor writes back after every call. A write is found through
   any chain of views, including one element of a multi-output view (``x.split(…)[1]
   .mul_(2)``), which torch.export's default IR leaves unrecorded; a write that is still
   unrecorded after functionalization is refused (``CaptureError``), never run wrong.
3. A model with meta weights captured without ``shape_only`` is an error: it has no
   weights to run.
4. A call's inputs must have the captured structure; a non-tensor input (an ``int``, a
   ``str``…) is baked into the graph, so it must equal the captured value, unless it was
   declared dynamic at capture (``dynamic_shapes``), then any ``int`` in its range.
5. Each op keeps the Python stack that issued it (``node.meta["stack_trace"]``), which an
   execution error quotes, unless the capture is shape-only: such a program never runs,
   and recording the stacks is about a quarter of torch.export's time on a graph of
   thousands of ops. ``stack_traces=`` overrides either default.
6. A region the model runs under ``torch.no_grad()`` or ``torch.autocast`` (which
   torch.export keeps as a higher-order op calling a submodule) is inlined into the main
   graph, so every later stage sees ordinary ops only.
7. A failed export is a ``CaptureError`` of one paragraph: what failed, the model's line
   that did it (from the exception's stack), what to do; torch's whole text is kept on
   ``torch_message`` (and as ``__cause__``), and torch's loggers are silenced while the
   export runs (restored afterwards), so a failure prints no partial graph.
"""

from __future__ import annotations

import contextlib
import copy
import operator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Iterator, Mapping, Optional

import torch
import torch.fx
import torch.fx.config
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.graph_signature import ExportGraphSignature, InputKind, OutputKind

try:  # torch's own switch (torch.compile uses it): a graph module writes its Python code on first use
    from torch.fx._lazy_graph_module import _use_lazy_graph_module
except ImportError:  # a torch without it: the code is written at once, as before
    _use_lazy_graph_module = None  # type: ignore[assignment]

from .arguments import check_flag, check_optional_flag, describe
from .capture_failures import CaptureError, export_failure, quiet_export_logs
from .errors import WorkbenchError
from .graph_values import aliased_input, gc_paused, is_inplace_op, value_of
from .json_fields import JsonObject
from .model_source import ModelChangedError, ModelSource
from .node_facts import StoredFormat

__all__ = ["CaptureError", "InputSignatureError", "ModelChangedError", "Program", "capture", "export_failure", "writes_state"]


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
    buffer_mutations: Mapping[str, str] = field(init=False)  # mutation output → the buffer placeholder it updates
    source: Optional[ModelSource] = field(default=None, compare=False, repr=False)  # the model captured (rule 1)
    # ``workbench.quantize``: constant placeholder → the weight format it is stored in, and
    # for the formats the executor runs, the quantized-then-dequantized values it computes with.
    stored_formats: Mapping[str, StoredFormat] = field(default_factory=dict, compare=False, repr=False)
    dequantized: Mapping[str, torch.Tensor] = field(default_factory=dict, compare=False, repr=False)

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
        placeholder_of = {fqn: name for name, fqn in constants.items()}
        object.__setattr__(
            self,
            "buffer_mutations",
            {
                spec.arg.name: placeholder_of[spec.target]
                for spec in sig.output_specs
                if spec.kind == OutputKind.BUFFER_MUTATION and spec.target in placeholder_of
            },
        )

    @classmethod
    def from_exported(cls, exported: ExportedProgram, shape_only: bool | None = None) -> "Program":
        """Wrap an ``ExportedProgram`` made elsewhere (``shape_only``: None detects it from
        the weights; ``False`` with meta weights is an error, rule 3)."""
        if not isinstance(exported, ExportedProgram):
            raise CaptureError(f"exported must be a torch.export.ExportedProgram, got {describe(exported)}")
        meta = _meta_weights(exported.state_dict.items())
        if shape_only is None:
            shape_only = bool(meta)
        check_flag(shape_only, "shape_only")
        if meta and not shape_only:
            raise CaptureError(_meta_message(meta))
        return cls(exported, shape_only)

    def with_graph(self, graph: torch.fx.Graph, signature: ExportGraphSignature, state_dict: Mapping[str, Any],
                   formats: Mapping[str, tuple[StoredFormat, Optional[torch.Tensor]]] | None = None) -> "Program":
        """This program rewritten: ``graph`` with its ``signature`` and ``state_dict`` in
        place of its own, everything else of the export kept (ranges, call graph, example
        inputs, constants, its IR's verifiers). Weight formats follow their constants by
        FQN, so a constant that stays keeps its format and its dequantized values;
        ``formats`` gives new constants theirs (FQN → (format, the values a run computes
        with, or None when the state holds them as stored))."""
        ep = self.exported
        exported = ExportedProgram(root=ep.graph_module, graph=graph, graph_signature=signature, state_dict=dict(state_dict),
                                   range_constraints=ep.range_constraints, module_call_graph=ep.module_call_graph,
                                   example_inputs=ep.example_inputs, constants=ep.constants, verifiers=ep.verifiers)
        stored = {self.constants[n]: f for n, f in self.stored_formats.items()}
        values = {self.constants[n]: t for n, t in self.dequantized.items()}
        for fqn, (fmt, dequantized) in (formats or {}).items():
            stored[fqn] = fmt
            if dequantized is not None:
                values[fqn] = dequantized
        rewritten = Program(exported, self.shape_only)
        return replace(
            rewritten,
            stored_formats={n: stored[f] for n, f in rewritten.constants.items() if f in stored},
            dequantized={n: values[f] for n, f in rewritten.constants.items() if f in values},
        )

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        return self.exported.graph_module

    @property
    def graph(self) -> torch.fx.Graph:
        return self.exported.graph

    def constant_tensor(self, placeholder: str) -> torch.Tensor:
        """The tensor behind a constant placeholder (meta for shape-only programs); for a
        constant ``quantize`` stored in a format the executor runs, its dequantized values."""
        found = self.dequantized.get(placeholder)
        return found if found is not None else self.constant_tensor_as_captured(placeholder)

    def constant_tensor_as_captured(self, placeholder: str) -> torch.Tensor:
        """The captured tensor behind a constant placeholder, whatever its stored format."""
        target = self.constants[placeholder]
        if target in self.exported.state_dict:
            return self.exported.state_dict[target]
        return self.exported.constants[target]

    def check_source(self) -> None:
        """Rule 1: a ``ModelChangedError`` if the captured model no longer holds the
        weights this program shares with it (nothing to check without a model)."""
        if self.source is not None:
            self.source.check()

    def flatten_inputs(self, args: tuple, kwargs: Mapping[str, Any] | None = None) -> list:
        """The call's inputs as the flat list the user-input placeholders take, in order
        (rule 4); a structure other than the captured one, or a non-tensor input other
        than the captured value, is an ``InputSignatureError`` naming the input."""
        kwargs = dict(kwargs or {})
        flat, got = pytree.tree_flatten((tuple(args), kwargs))
        spec = self.exported.call_spec.in_spec
        if spec is not None and got != spec:
            raise InputSignatureError(self._structure_message(tuple(args), kwargs, spec))
        for name, value in zip(self.user_inputs, flat):
            problem = _non_tensor_problem(self.input_values[name], value, self.exported.range_constraints)
            if problem:
                raise InputSignatureError(f"input {name!r} {problem}")
        return flat

    @cached_property
    def input_values(self) -> Mapping[str, Any]:
        """User input → the value traced for it: a fake tensor, or the int, str … captured."""
        return {n.name: value_of(n) for n in self.graph.nodes if n.op == "placeholder" and n.name in self.user_inputs}

    def describe_inputs(self) -> str:
        """The inputs a call takes, in words: ``x: tensor (4, 32) float32, n: int 3``."""
        return ", ".join(f"{n}: {_expected(self.input_values[n])}" for n in self.user_inputs) or "none"

    def _structure_message(self, args: tuple, kwargs: dict, spec: pytree.TreeSpec) -> str:
        """Rule 4's message: which argument has the wrong structure, in words (no TreeSpec)."""
        expected = f"the program takes {self.describe_inputs()}"
        args_spec, kwargs_spec = spec.children_specs
        if len(args) != args_spec.num_children:
            return (
                f"expected {args_spec.num_children} inputs ({', '.join(self.user_inputs)}), "
                f"got {len(args)} positional argument(s); {expected}"
            )
        want_keys = list(kwargs_spec.context or [])
        if sorted(kwargs) != sorted(want_keys):
            return f"expected keyword inputs {want_keys or 'none'}, got {sorted(kwargs) or 'none'}; {expected}"
        names = iter(self.user_inputs)
        for i, (arg, child) in enumerate(zip(args, args_spec.children_specs)):
            owned = [next(names, "?") for _ in range(child.num_leaves)]
            if pytree.tree_structure(arg) != child:
                shape = "a tensor or a single value" if child.is_leaf() else f"a {child.type.__name__} of {child.num_leaves} value(s)"
                return (
                    f"input {i} ({', '.join(owned)}) must be {shape}, got {describe(arg)}; {expected}"
                )
        return f"inputs do not have the captured structure; {expected}"

    def num_ops(self) -> int:
        """Number of ``call_function`` nodes."""
        return sum(1 for n in self.graph.nodes if n.op == "call_function")

    def to_json(self) -> dict[str, Any]:
        """What a saved program needs besides its ``torch.export`` archive."""
        return {"shape_only": self.shape_only}

    @classmethod
    def from_json(cls, data: Any, exported: ExportedProgram, path: str = "program") -> "Program":
        """The program ``to_json`` described, around ``exported`` (read back with ``torch.export.load``)."""
        obj = JsonObject(data, path)
        shape_only = obj.flag("shape_only")
        weights = [(n, t) for n, t in exported.state_dict.items() if isinstance(t, torch.Tensor)]
        meta = _meta_weights(weights)
        if not shape_only and meta:
            raise obj.fail("shape_only", "true: the saved program's weights are meta tensors")
        if shape_only and weights and not meta:
            raise obj.fail("shape_only", "false: the saved program has real weights")
        return cls(exported, shape_only)


def capture(
    model: torch.nn.Module,
    example_inputs: Any,
    kwargs: Mapping[str, Any] | None = None,
    *,
    shape_only: bool = False,
    dynamic_shapes: Any = None,
    decompose: bool = False,
    strict: bool = False,
    stack_traces: Optional[bool] = None,
) -> Program:
    """Export ``model`` with ``torch.export`` and wrap the result (see the module rules).

    Args:
        model: the module to capture (it is not modified; its weights are shared, rule 1).
        example_inputs: a tuple of positional inputs (a single tensor is accepted).
        kwargs: keyword inputs, passed to ``torch.export.export`` as its ``kwargs``
            (``{"use_cache": False}``, an attention mask…); they become graph inputs
            after the positional ones, and a non-tensor value is specialised (the graph
            holds for that value only).
        shape_only: export over meta tensors so no weight or activation memory is
            allocated; inputs become meta tensors of the same shape and dtype, and a model
            with real weights is cloned onto meta without copying them. Required for a
            model whose weights are already on meta (rule 3).
        dynamic_shapes: passed to ``torch.export.export``; bound every dynamic size
            (``Dim(..., max=...)``) if the program is to be memory-planned.
        decompose: run the core-ATen decompositions (``aten.linear`` → ``aten.addmm`` …),
            as ExecuTorch's ``to_edge`` does.
        strict: passed to ``torch.export.export``.
        stack_traces: record each op's Python stack (rule 5); None records them unless
            ``shape_only``.
    """
    if not isinstance(model, torch.nn.Module):
        raise CaptureError(f"model must be a torch.nn.Module, got {describe(model)}")
    check_flag(shape_only, "shape_only")
    check_flag(decompose, "decompose")
    check_flag(strict, "strict")
    asked = check_optional_flag(stack_traces, "stack_traces")
    record = not shape_only if asked is None else asked
    inputs = _as_tuple(example_inputs)
    keywords = _as_kwargs(kwargs)
    weights = list(model.named_parameters()) + list(model.named_buffers())
    meta = _meta_weights(weights)
    if meta and not shape_only:
        raise CaptureError(_meta_message(meta))
    if shape_only:
        model = _meta_clone(model)
        inputs = tuple(_to_meta(x) for x in inputs)
        keywords = _to_meta(keywords)
    try:
        with _recording_stack_traces(record), quiet_export_logs(), gc_paused(), _code_on_first_use():
            exported = torch.export.export(
                model, inputs, keywords, dynamic_shapes=dynamic_shapes, strict=strict
            )
        inline_wrapped_regions(exported)
        if decompose:
            exported = exported.run_decompositions()
        elif writes_state(exported):
            exported = _functional(exported)
    except CaptureError:
        raise
    except Exception as exc:  # torch.export raises many types; its text is kept whole on the error
        raise export_failure(type(model).__name__, exc) from exc
    source = None if shape_only else ModelSource(model, _shared_weights(exported))
    return Program(exported, shape_only, source=source)


def _code_on_first_use() -> Any:
    """Export builds several graph modules on the way, each of which writes and compiles
    Python source for every node when made: about a quarter of a full-size export, for
    code a shape-only program never runs. Deferred, the code is written if it is called."""
    return _use_lazy_graph_module(True) if _use_lazy_graph_module is not None else contextlib.nullcontext()


#: Higher-order ops torch.export wraps a region in when the model switches a global mode
#: inside its forward (``torch.no_grad()``, ``torch.autocast``): the region's ops live in a
#: submodule (a ``get_attr``), its results come out through ``getitem``.
WRAPPED_REGION_OPS = ("wrap_with_set_grad_enabled", "wrap_with_autocast")


def inline_wrapped_regions(exported: ExportedProgram) -> int:
    """Rule 6: the regions a model runs under ``torch.no_grad()`` (or autocast) spliced
    into the main graph, in place; returns how many were inlined.

    Inference never records gradients, so a grad-mode switch means nothing to the program;
    the region's ops keep their own metadata (module stack, stack trace), and an output
    the signature names by a ``getitem`` is renamed to the op that now computes it."""
    gm = exported.graph_module
    renamed: dict[str, str] = {}
    count = 0
    while True:
        node = next((n for n in gm.graph.nodes if _is_wrapped_region(n)), None)
        if node is None:
            break
        renamed.update(_inline_region(gm, node))
        count += 1
    if not count:
        return 0
    used = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    for name, child in list(gm.named_children()):
        if isinstance(child, torch.fx.GraphModule) and name not in used:
            gm.delete_submodule(name)
    for spec in exported.graph_signature.output_specs:
        name = getattr(spec.arg, "name", None)
        while name in renamed:
            name = renamed[name]
            spec.arg.name = name
    gm.graph.lint()
    gm.recompile()
    return count


def _is_wrapped_region(node: torch.fx.Node) -> bool:
    return (
        node.op == "call_function"
        and isinstance(node.target, torch._ops.HigherOrderOperator)
        and node.target.name() in WRAPPED_REGION_OPS
    )


def _inline_region(gm: torch.fx.GraphModule, node: torch.fx.Node) -> dict[str, str]:
    """Splice one wrapped region's submodule in before ``node``; returns the renames
    (``getitem`` → the op now computing its value)."""
    assert isinstance(node.target, torch._ops.HigherOrderOperator)
    position = next(i for i, a in enumerate(node.args) if isinstance(a, torch.fx.Node) and a.op == "get_attr")
    holder = node.args[position]
    assert isinstance(holder, torch.fx.Node) and isinstance(holder.target, str)
    sub = getattr(gm, holder.target)
    operands = list(node.args[position + 1 :])
    env: dict[torch.fx.Node, Any] = {}
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    for ph, value in zip(placeholders, operands, strict=True):
        env[ph] = value
    results: Any = ()
    with gm.graph.inserting_before(node):
        for inner in sub.graph.nodes:
            if inner.op == "placeholder":
                continue
            if inner.op == "output":
                results = torch.fx.map_arg(inner.args[0], lambda n: env[n])
                continue
            copied = gm.graph.node_copy(inner, lambda n: env[n])
            if inner.op == "get_attr":  # a nested region's submodule: held by the main module now
                fresh = _fresh_attribute(gm, str(inner.target))
                setattr(gm, fresh, getattr(sub, str(inner.target)))
                copied.target = fresh
            env[inner] = copied
    results = tuple(results) if isinstance(results, (tuple, list)) else (results,)
    renamed = {}
    for user in list(node.users):
        if user.op == "call_function" and user.target is operator.getitem:
            value = results[user.args[1]]
            user.replace_all_uses_with(value)
            if isinstance(value, torch.fx.Node):
                renamed[user.name] = value.name
            gm.graph.erase_node(user)
        else:  # a single-result region used whole
            node.replace_all_uses_with(results[0])
            if isinstance(results[0], torch.fx.Node):
                renamed[node.name] = results[0].name
    gm.graph.erase_node(node)
    if not holder.users:
        gm.graph.erase_node(holder)
    return renamed


def _fresh_attribute(gm: torch.fx.GraphModule, base: str) -> str:
    name, i = base, 0
    while hasattr(gm, name):
        i += 1
        name = f"{base}_inlined_{i}"
    return name


@contextlib.contextmanager
def _recording_stack_traces(record: bool) -> Iterator[None]:
    """Rule 5: torch.fx's switch for per-node stack capture, restored after the export
    (a torch without the switch always records them)."""
    config = torch.fx.config
    previous = getattr(config, "do_not_emit_stack_traces", None)
    if previous is None:
        yield
        return
    config.do_not_emit_stack_traces = not record
    try:
        yield
    finally:
        config.do_not_emit_stack_traces = previous


def _meta_weights(weights: Any) -> list[str]:
    return [name for name, t in weights if isinstance(t, torch.Tensor) and t.is_meta]


def _meta_message(meta: list[str]) -> str:
    shown = ", ".join(repr(m) for m in meta[:3]) + (f" and {len(meta) - 3} more" if len(meta) > 3 else "")
    return (
        f"the model's weights are meta tensors ({shown}): there are no weights to run, so "
        "capture it with shape_only=True (to place, plan and estimate it), or load real weights first"
    )


def _shared_weights(exported: ExportedProgram) -> list[tuple[str, torch.Tensor]]:
    """The parameters and buffers the program holds, by FQN (rule 1: the model's own tensors)."""
    held = list(exported.state_dict.items())
    held += [(fqn, t) for fqn, t in exported.constants.items() if isinstance(t, torch.Tensor)]
    return held


def _base_placeholder(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The placeholder whose storage ``node`` shares through a chain of views or in-place
    ops, an element of a multi-output view (``split``, ``unbind``) included (rule 2)."""
    seen = node
    while seen.op != "placeholder":
        if seen.op == "call_function" and seen.target is operator.getitem and isinstance(seen.args[0], torch.fx.Node):
            source = _list_view_source(seen.args[0])
        else:
            source = aliased_input(seen)
        if source is None:
            return None
        seen = source
    return seen


def _list_view_source(node: torch.fx.Node) -> Optional[torch.fx.Node]:
    """The input a multi-output view op (``Tensor(a -> *) self -> Tensor(a)[]``: ``split``,
    ``unbind``, ``chunk``) returns views of, else None."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or schema is None or not schema.returns:
        return None
    ret = schema.returns[0]
    if ret.alias_info is None or ret.alias_info.is_write or not isinstance(ret.type, torch.ListType):
        return None
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and not arg.alias_info.is_write:
            value = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            return value if isinstance(value, torch.fx.Node) else None
    return None


def _unrecorded_writes(exported: ExportedProgram) -> list[str]:
    """Rule 2's last check: in-place ops that still write a buffer or user input (through
    views) in a program whose signature should record every such write."""
    kinds = {spec.arg.name: spec.kind for spec in exported.graph_signature.input_specs}
    watched = (InputKind.BUFFER, InputKind.USER_INPUT)
    found = []
    for node in exported.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if not (is_inplace_op(node.target) or node.target._schema.is_mutable):
            continue
        for arg in _written_arguments(node):
            base = _base_placeholder(arg)
            if base is not None and kinds.get(base.name) in watched:
                found.append(f"{node.name} ({node.target}) writes {base.name!r}")
    return found


def _written_arguments(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes an op writes: the arguments its schema marks written (``self`` of
    ``x.mul_(scale)``, not ``scale``; every tensor of a written list)."""
    schema = node.target._schema  # type: ignore[union-attr]
    bound = dict(zip((a.name for a in schema.arguments), node.args))
    bound.update(node.kwargs)
    written: list[torch.fx.Node] = []
    for argument in schema.arguments:
        if argument.alias_info is not None and argument.alias_info.is_write:
            value = bound.get(argument.name)
            values = value if isinstance(value, (list, tuple)) else (value,)
            written += [v for v in values if isinstance(v, torch.fx.Node)]
    return written


#: Arguments through which a composite op updates a buffer without its schema saying so:
#: the running statistics of the batch and instance norms.
SILENTLY_UPDATED_ARGUMENTS = frozenset({"running_mean", "running_var"})


def writes_state(exported: ExportedProgram) -> bool:
    """Rule 2's test: does an op of the graph write a buffer or a user input in place?

    An op whose schema writes an argument counts when that argument is (a view of) a
    buffer or user input; so does a composite op handed a buffer as its running
    statistics (``batch_norm`` updates them without saying so in its schema). A buffer
    merely read by a composite op (``inv_freq.to(device)``) does not count: a positive
    answer costs a functionalization, a re-trace of the whole graph (about 20 s for a
    35B MoE decode step)."""
    kinds = {spec.arg.name: spec.kind for spec in exported.graph_signature.input_specs}
    watched = (InputKind.BUFFER, InputKind.USER_INPUT)
    composite = torch._C.DispatchKey.CompositeImplicitAutograd
    for node in exported.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if is_inplace_op(node.target) or node.target._schema.is_mutable:
            for arg in _written_arguments(node):
                base = _base_placeholder(arg)
                if base is not None and kinds.get(base.name) in watched:
                    return True
        if node.target.has_kernel_for_dispatch_key(composite) and _feeds_running_statistics(node, kinds):
            return True
    return False


def _feeds_running_statistics(node: torch.fx.Node, kinds: dict[str, InputKind]) -> bool:
    """Whether a buffer is bound to an argument of ``node`` that its op updates silently."""
    bound = dict(zip((a.name for a in node.target._schema.arguments), node.args))  # type: ignore[union-attr]
    bound.update(node.kwargs)
    return any(
        isinstance(value, torch.fx.Node) and kinds.get(value.name) == InputKind.BUFFER
        for name, value in bound.items()
        if name in SILENTLY_UPDATED_ARGUMENTS
    )


def _functional(exported: ExportedProgram) -> ExportedProgram:
    """Rule 2: the same program with every in-place write of state made a mutation output.

    An empty decomposition table functionalizes without decomposing (``aten.linear``
    stays); a program that turns out to write no state is kept as exported. Either way no
    in-place write of a buffer or user input may remain."""
    functional = exported.run_decompositions({})
    mutates = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION)
    chosen = functional if any(spec.kind in mutates for spec in functional.graph_signature.output_specs) else exported
    left = _unrecorded_writes(chosen)
    if left:
        raise CaptureError(
            f"the model writes its inputs or buffers in place in a way capture cannot record: {'; '.join(left[:3])}"
            f"{'' if len(left) <= 3 else f' and {len(left) - 3} more'}. Clone the tensor before writing it "
            "(x = x.clone()) and return the new value, so the program says what it changes"
        )
    return chosen


def _expected(val: Any) -> str:
    """What a placeholder takes, in words."""
    if isinstance(val, torch.Tensor):
        return f"tensor {tuple(str(d) if not isinstance(d, int) else d for d in val.shape)} {str(val.dtype).removeprefix('torch.')}"
    if isinstance(val, torch.SymInt):
        return "int (dynamic)"
    return f"{type(val).__name__} {val!r}"


def _finite(bound: Any) -> Optional[int]:
    """A sympy range end as an int; None when it is infinite."""
    if getattr(bound, "is_finite", True) is False:
        return None
    try:
        value = int(bound)
    except (TypeError, ValueError, OverflowError, AttributeError):  # an infinity sympy does not call infinite
        return None
    return value if abs(value) < 2**62 else None


def _non_tensor_problem(want: Any, got: Any, ranges: Mapping[Any, Any]) -> str:
    """Rule 4: what is wrong with non-tensor input ``got`` for a placeholder traced as ``want``, or ""."""
    if isinstance(want, torch.Tensor):
        return ""
    if isinstance(want, torch.SymInt):
        if isinstance(got, bool) or not isinstance(got, int):
            return f"was declared a dynamic int at capture; got {describe(got)}"
        bound = ranges.get(want.node.expr)
        low, high = (_finite(bound.lower), _finite(bound.upper)) if bound is not None else (None, None)
        if (low is not None and got < low) or (high is not None and got > high):
            return f"must be an int in [{low}, {high if high is not None else 'inf'}] (its range at capture), got {got}"
        return ""
    if type(got) is not type(want) or got != want:
        return (
            f"was captured as {type(want).__name__} {want!r} and the graph holds that value "
            f"(torch.export specializes non-tensor inputs); got {describe(got)}. Pass {want!r}, "
            "or capture again with this input declared dynamic (dynamic_shapes)"
        )
    return ""


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
        raise CaptureError(f"example_inputs must be a tuple of inputs (or a single tensor), got {describe(example_inputs)}")
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
