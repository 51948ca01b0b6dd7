"""How a program reads each MoE layer's expert weights, put in the one form an expert cache
reads: rows of stacked weights selected by one index.

An expert cache (``cache_graph``) holds expert slabs and reads a layer's experts by row,
``index_select(w, 0, ids)`` over stacked weights ``w [E, ...]``. ``rows_program(program,
layers)`` returns the program with every layer in that form, the layers as it leaves
them, and which of them read every expert each step; ``layer_selections`` finds one
layer's row selections.

Rules:
  1. *Routed reads*: every read of a layer's stacked weights selects rows by one index
     — ``index_select(w, 0, ids)``, ``select_rows(w, ids, hint)`` (the built-in decoder),
     ``w[ids]`` (transformers' ``batched_mm`` experts), or a lookup ``embedding(w, ids)``
     (rows of tables as experts, ``discovery`` rule 1e) — the rows the router chose.
     Such a layer is left as it is, but for its lookups: ``embedding(w, ids)`` with ids
     of any shape becomes ``view(index_select(w, 0, view(ids, [-1])), [*ids.shape, H])``
     (one flat ``ids`` per ids node; the last view keeps the lookup's name), the one
     index an expert cache reads by.
  2. *Dense reads*: every read of a layer's stacked weights takes the whole stack (Llama
     4's batched matmul over all experts: every expert computes every token, the
     unchosen ones on rows the router scaled to zero). A step reads all E experts, so
     the layer reads them as rows ``arange(E)``: one ``arange`` per layer and one
     ``index_select(w, 0, arange(E))`` per weight — equal to ``w`` — in place of ``w``
     for every reader, inserted before the layer's first reader (so the rows live no
     longer than the layer's computation). A grouped expert matmul also takes the whole
     stack but reads only the routed experts' groups (chosen by offsets): reading all E
     through a cache would move what it never reads, so it is a ``CacheGraphError``
     naming ``batched_mm``, the transformers form that selects rows by ids.
  3. *One module per expert* (``layout="modules"``, the hand-written form: a Python loop
     over a module list of experts): the parameters of one name under every expert are
     stacked, in expert order, into one parameter ``{container}.{name}`` ``[E, ...]``,
     which takes the first expert's place in the signature; the per-expert parameters
     leave the program. Each expert's ops read ``select(rows, 0, e)`` of rule 2's rows,
     so the layer is a stacked layer with dense reads. The stack is a copy made when the
     program is rewritten: edit the model's weights before that. It is stored in its
     experts' weight format (``quantize``); experts of one name in different formats are
     a ``CacheGraphError``.
  4. A layer whose reads mix row selections and whole stacks, or select rows by more
     than one index, is a ``CacheGraphError`` naming the read.
  5. Every other node keeps its name, args and metadata; the new nodes carry the module
     stack of the layer's first reader (so they count as the experts' ops); every
     constant that stays keeps its weight format; the program given is not modified.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import Any, Optional

import torch
import torch.fx
from torch.export.graph_signature import ExportGraphSignature, InputKind, InputSpec, TensorArgument

from ..capture import Program
from ..copy_ops import SELECT_ROWS
from ..errors import WorkbenchError
from .expert_ops import is_grouped_mm
from .discovery import ExpertLayer
from ..graph_values import call_node, value_of
from ..node_facts import StoredFormat

__all__ = ["CacheGraphError", "Layers", "dense_layers", "fake_mode_of", "layer_selections", "row_selection", "rows_program"]

_aten = torch.ops.aten
#: ``(index, ExpertLayer)`` per MoE layer, as ``experts.expert_layers`` gives them.
Layers = tuple[tuple[int, ExpertLayer], ...]


class CacheGraphError(WorkbenchError, ValueError):
    """A program whose experts an expert cache cannot hold."""


def row_selection(node: torch.fx.Node, weights: set[str]) -> Optional[tuple[str, torch.fx.Node, Optional[torch.fx.Node]]]:
    """Rule 1: ``(weight, ids, hint)`` when ``node`` selects rows of one of ``weights``
    (placeholder names)."""
    if node.op != "call_function" or not node.args or not isinstance(node.args[0], torch.fx.Node):
        return None
    source = node.args[0].name
    if source not in weights:
        return None
    if node.target is _aten.index_select.default and node.args[1] == 0:
        return source, node.args[2], None  # type: ignore[return-value]
    if node.target is _aten.embedding.default and isinstance(node.args[1], torch.fx.Node):
        return source, node.args[1], None
    if node.target is SELECT_ROWS:
        return source, node.args[1], node.args[2]  # type: ignore[return-value]
    if node.target is _aten.index.Tensor:
        ids = node.args[1]
        if isinstance(ids, (list, tuple)) and len(ids) == 1 and isinstance(ids[0], torch.fx.Node):
            val = value_of(ids[0])
            if isinstance(val, torch.Tensor) and val.dim() == 1 and not val.dtype.is_floating_point:
                return source, ids[0], None
    return None


def layer_selections(
    program: Program, layer: ExpertLayer
) -> tuple[list[torch.fx.Node], torch.fx.Node, Optional[torch.fx.Node]]:
    """Rules 1, 4: a routed layer's selections, its ids and its hint (one of each)."""
    by_fqn = {fqn: name for name, fqn in program.constants.items()}
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    weights = [by_fqn[w] for w in layer.weights]
    found, ids, hints = [], set(), set()
    for name in weights:
        for user in placeholders[name].users:
            chosen = row_selection(user, set(weights))
            if chosen is None:
                raise CacheGraphError(
                    f"{layer.module}'s weight {program.constants[name]!r} is read by rows in some ops and whole by "
                    f"{user.name} ({user.target}); an expert cache reads a layer's experts one way: by the rows the "
                    "router chose, or (dense experts, every expert computing every token) all of them"
                )
            found.append(user)
            ids.add(chosen[1])
            hints.add(chosen[2])
    if len(ids) != 1 or len(hints) != 1:
        raise CacheGraphError(f"{layer.module}'s weights are selected by {len(ids)} indices; a cache needs one")
    return found, ids.pop(), hints.pop()


def fake_mode_of(program: Program) -> Any:
    """The fake-tensor mode of ``program``'s values (new nodes' values are made in it)."""
    for node in program.graph.nodes:
        mode = getattr(value_of(node), "fake_mode", None)
        if mode is not None:
            return mode
    raise CacheGraphError(
        "the program's graph carries no fake tensors to size the cache buffers with; give a Program from workbench.capture"
    )


@dataclasses.dataclass(eq=False)
class _Dense:
    """Rules 2-3 for one layer: the stacked weights, what each stacks, the readers' replacements."""

    layer: ExpertLayer
    stacks: dict[str, list[str]]  # stacked weight FQN → the program FQNs it stacks (itself, rule 2)
    emitted: bool = False


def _dense_plan(program: Program, layer: ExpertLayer) -> Optional[_Dense]:
    """The layer's rule-2/3 plan, or None for routed reads (rule 1)."""
    prefix = layer.module + "."
    if layer.layout == "modules":
        stacks: dict[str, dict[int, str]] = defaultdict(dict)
        for fqn in layer.weights:
            expert, _, rest = fqn.removeprefix(prefix).partition(".")
            stacks[prefix + rest][int(expert)] = fqn
        return _Dense(layer, {fqn: [by_expert[e] for e in sorted(by_expert)] for fqn, by_expert in stacks.items()})
    by_fqn = {fqn: name for name, fqn in program.constants.items()}
    weights = {by_fqn[w] for w in layer.weights}
    users = [u for n in program.graph.nodes if n.name in weights for u in n.users]
    if not users or any(row_selection(u, weights) is not None for u in users):
        return None  # routed (or mixed: layer_selections names the whole read)
    grouped = next((n for n in _readers(users, 3) if is_grouped_mm(n)), None)
    if grouped is not None:  # rule 2's exception
        raise CacheGraphError(
            f"{layer.module}'s experts are read by a grouped matmul ({grouped.name}, {grouped.target}), which chooses "
            "each expert's rows by offsets; an expert cache reads the routed experts by their ids: transformers "
            "models take experts_implementation='batched_mm' (hf.load_model(..., experts_implementation='batched_mm') "
            "or model.set_experts_implementation('batched_mm'))"
        )
    return _Dense(layer, {w: [w] for w in layer.weights})


def _readers(nodes: list[torch.fx.Node], depth: int) -> list[torch.fx.Node]:
    """``nodes`` and their readers, ``depth`` reads deep (a grouped matmul reads views of ``w``)."""
    found, frontier = list(nodes), list(nodes)
    for _ in range(depth):
        frontier = [u for n in frontier for u in n.users]
        found += frontier
    return found


def dense_layers(program: Program, layers: Layers) -> tuple[str, ...]:
    """The containers of the layers that read every expert each step (rules 2-3)."""
    return tuple(layer.module for _, layer in layers if _dense_plan(program, layer) is not None)


def rows_program(program: Program, layers: Layers) -> tuple[Program, Layers, frozenset[str]]:
    """Rules 1-5: ``(program, layers, dense)`` — the program with every layer read by rows,
    its layers (one module per expert now stacked), and the containers of the layers
    that read every expert each step."""
    program, layers = _lookups_as_rows(program, layers)
    plans = {layer.module: p for _, layer in layers if (p := _dense_plan(program, layer)) is not None}
    if not plans:
        return program, layers, frozenset()
    by_fqn = {fqn: name for name, fqn in program.constants.items()}
    owner = {by_fqn[src]: p for p in plans.values() for sources in p.stacks.values() for src in sources}
    fake_mode = fake_mode_of(program)
    stacked = {fqn: _stacked(program, [by_fqn[s] for s in sources]) for p in plans.values() for fqn, sources in p.stacks.items()}
    first_source = {by_fqn[sources[0]]: fqn for p in plans.values() for fqn, sources in p.stacks.items() if sources != [fqn]}
    ep = program.exported
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    reads: dict[str, torch.fx.Node] = {}  # placeholder name of a read weight → what its readers read now
    new_params: dict[str, torch.fx.Node] = {}  # stacked FQN → its placeholder (rule 3) or the weight's own
    renamed: dict[str, InputSpec] = {}  # first source placeholder → the stacked parameter's spec
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in owner:
            if node.name in first_source:  # rule 3: the stack takes the first expert's place
                fqn = first_source[node.name]
                holder = graph.placeholder("p_" + fqn.replace(".", "_"))
                holder.meta["val"] = fake_mode.from_tensor(stacked[fqn], static_shapes=True)
                new_params[fqn] = holder
                renamed[node.name] = InputSpec(InputKind.PARAMETER, TensorArgument(name=holder.name), fqn)
            elif program.constants[node.name] in stacked:  # rule 2: the weight itself
                env[node] = graph.node_copy(node, env.__getitem__)
                new_params[program.constants[node.name]] = env[node]
            continue  # a stacked expert's own parameter leaves the program
        if node.op == "call_function":
            for plan in {owner[a.name] for a in node.all_input_nodes if a.name in owner}:
                if not plan.emitted:
                    reads.update(_emit(graph, plan, new_params, by_fqn, node, fake_mode))
                    plan.emitted = True
        env[node] = graph.node_copy(node, lambda a: reads[a.name] if a.name in reads else env[a])
    graph.lint()
    removed = set(owner) - {n.name for n in graph.nodes}
    specs = [renamed.get(s.arg.name, s) for s in ep.graph_signature.input_specs if s.arg.name not in removed or s.arg.name in renamed]
    gone = {program.constants[name] for name in removed}
    state = {k: v for k, v in ep.state_dict.items() if k not in gone}
    state.update({fqn: torch.nn.Parameter(t, requires_grad=False) for fqn, t in stacked.items() if fqn not in ep.state_dict})
    formats = _stacked_formats(program, plans, by_fqn, stacked)
    new = program.with_graph(graph, ExportGraphSignature(specs, list(ep.graph_signature.output_specs)), state, formats)
    out = tuple((i, dataclasses.replace(layer, weights=tuple(plans[layer.module].stacks), layout="stacked"))
                if layer.module in plans else (i, layer) for i, layer in layers)  # fmt: skip
    return new, out, frozenset(plans)


def _stacked_formats(program: Program, plans: dict[str, _Dense], by_fqn: dict[str, str],
                     stacked: dict[str, torch.Tensor]) -> dict[str, tuple[StoredFormat, Optional[torch.Tensor]]]:  # fmt: skip
    """Rule 3: a stack is stored in its experts' weight format (``quantize``), with the
    stacked values a run computes with where theirs are dequantized; experts of one
    weight stored in different formats cannot be one stack (a ``CacheGraphError``)."""
    formats: dict[str, tuple[StoredFormat, Optional[torch.Tensor]]] = {}
    for plan in plans.values():
        for fqn, sources in plan.stacks.items():
            found = {program.stored_formats.get(by_fqn[s]) for s in sources}
            fmt = next(iter(found))
            if sources == [fqn] or (len(found) == 1 and fmt is None):
                continue
            if len(found) > 1 or fmt is None:
                names = sorted(f.name if f is not None else "as captured" for f in found)
                raise CacheGraphError(f"{plan.layer.module}: the experts' weights stacked as {fqn} are stored in "
                                      f"different formats ({', '.join(names)}); a stack is one tensor in one format: "
                                      "quantize every expert of a layer alike (one pattern for the experts' module)")  # fmt: skip
            executed = all(by_fqn[s] in program.dequantized for s in sources)
            formats[fqn] = (fmt, stacked[fqn] if executed else None)
    return formats


def _lookups_as_rows(program: Program, layers: Layers) -> tuple[Program, Layers]:
    """Rule 1's lookups as row selections by flat ids; the layers' ops (``discovery`` rule
    1e) gain the new nodes."""
    by_fqn = {fqn: name for name, fqn in program.constants.items()}
    owner = {by_fqn[w]: layer.module for _, layer in layers for w in layer.weights}
    lookups = {n for n in program.graph.nodes if n.target is _aten.embedding.default and n.args
               and isinstance(n.args[0], torch.fx.Node) and n.args[0].name in owner}  # fmt: skip
    if not lookups:
        return program, layers
    ep = program.exported
    fake_mode = fake_mode_of(program)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    flat: dict[torch.fx.Node, torch.fx.Node] = {}
    added: dict[str, set[str]] = defaultdict(set)  # container → names of the new nodes

    def call(target: Any, args: tuple, name: str, like: torch.fx.Node) -> torch.fx.Node:
        node = call_node(graph, target, args, name, fake_mode=fake_mode)
        node.meta.update({k: like.meta[k] for k in ("nn_module_stack", "stack_trace") if k in like.meta})
        return node

    for node in ep.graph.nodes:
        if node not in lookups:
            env[node] = graph.node_copy(node, env.__getitem__)
            continue
        weight, ids = node.args[0], node.args[1]
        assert isinstance(weight, torch.fx.Node) and isinstance(ids, torch.fx.Node)  # lookups and row_selection check
        module = owner[weight.name]
        if ids not in flat:
            flat[ids] = call(_aten.view.default, (env[ids], [-1]), f"{ids.name}_flat", node)
        rows = call(_aten.index_select.default, (env[weight], 0, flat[ids]), f"{node.name}_rows", node)
        shape = [*value_of(ids).shape, value_of(weight).shape[1]]
        env[node] = call(_aten.view.default, (rows, shape), node.name, node)
        env[node].meta = {**node.meta, "val": env[node].meta["val"]}
        added[module] |= {flat[ids].name, rows.name}
    graph.lint()
    out = tuple((i, dataclasses.replace(layer, ops=layer.ops | added[layer.module]) if layer.ops else layer)
                for i, layer in layers)  # fmt: skip
    return program.with_graph(graph, ep.graph_signature, ep.state_dict), out


def _stacked(program: Program, placeholders: list[str]) -> torch.Tensor:
    """Rule 3: the experts' tensors stacked in expert order (a weight read whole: itself)."""
    tensors = [program.constant_tensor(p).detach() for p in placeholders]
    return tensors[0] if len(tensors) == 1 else torch.stack(tensors)


def _emit(graph: torch.fx.Graph, plan: _Dense, params: dict[str, torch.fx.Node], by_fqn: dict[str, str],
          reader: torch.fx.Node, fake_mode: Any) -> dict[str, torch.fx.Node]:  # fmt: skip
    """Rules 2-3 at the layer's first reader: ``arange(E)``, each weight's rows, and each
    expert's slice of them; placeholder name → the node that now stands for it."""
    E = plan.layer.num_experts
    meta: dict[str, Any] = {k: reader.meta[k] for k in ("nn_module_stack", "stack_trace") if k in reader.meta}
    base = plan.layer.module.replace(".", "_")
    stands: dict[str, torch.fx.Node] = {}

    def call(target: Any, args: tuple, kwargs: dict, name: str) -> torch.fx.Node:
        node = call_node(graph, target, args, name, kwargs, fake_mode)
        node.meta.update(meta)
        return node

    ids = call(_aten.arange.default, (E,), {"dtype": torch.int64, "device": torch.device("cpu")}, f"{base}_every_expert")
    for fqn, sources in plan.stacks.items():
        rows = call(_aten.index_select.default, (params[fqn], 0, ids), {}, f"{fqn.replace('.', '_')}_rows")
        if sources == [fqn]:
            stands[by_fqn[fqn]] = rows
            continue
        for e, source in enumerate(sources):
            stands[by_fqn[source]] = call(_aten.select.int, (rows, 0, e), {}, f"{by_fqn[source]}_of_rows")
    return stands
