"""Discovery: routed experts of a mixture-of-experts model, found by what they are, not by a path.

``find_experts(model_or_program)`` → ``ExpertMap``: per MoE layer, the module that holds
the routed experts, the names of their weights, the number of experts and the router
that scores them. Strategies, the placement explorer and streaming read it, so the same
code works on the built-in decoder (``layers.N.mlp.experts``), on transformers models
(``model.layers.N.mlp.experts``) and on any model shaped like either.

Rules:
1. Routed experts are held one of two ways:
   a. *stacked*: a module's parameters of three or more dims share a leading dimension
      E >= 2, one slab per expert (``w1 [E, 2I, H]``, ``gate_up_proj [E, 2I, H]``);
      its two-dim parameters of leading dimension E (per-expert biases) belong to them;
   b. *one module per expert*: a module list (children ``0 … E-1``, E >= 2) whose
      children hold the same parameter names and shapes (Mixtral-style ``experts.3.w1``);
   c. *with zero-computation experts*: stacked slabs whose leading dimensions are E and
      E + Z (LongCat-Flash's ``gate_up_proj [E+Z, …]``, ``down_proj [E, …]``): the Z
      extra experts compute nothing (identity or zero), so E experts hold weights and the
      router scores E + Z;
   d. *split over sibling modules*: stacked modules in one parent scored by one router
      (JetMoE's ``input_linear`` and ``output_linear``) are one layer's experts, whose
      container is that parent.
   e. *rows of lookup tables*: two-dim tables ``[E, H]`` whose rows the router's top-k
      ids pick (Doge's single-neuron experts, ``down_embed``/``up_embed``: expert ``e``
      is row ``e`` of each table). In a ``Program`` they are found from the graph: a
      row gather (``aten.embedding(w, ids)``, ``index_select(w, 0, ids)``, ``w[ids]``)
      of a two-dim parameter, whose ids come from a ``topk`` and whose block (the
      tables' common parent module) holds a parameter those ids are computed from (the
      router, whatever its shape: Doge's product keys score 2·√E, not E); tables read
      with one ids are one layer, whose container is that block. The block also holds
      what is not an expert (a shared expert, the router), so such a layer names its
      experts' *ops* (``ExpertLayer.ops``): from the gathers on, every op of the block
      that reads them or another expert op and no value computed from the block's other
      parameters (the shared expert's output is where the experts end). In an
      ``nn.Module`` (no graph) they are the tables of the lookup modules
      (``nn.Embedding``) with exactly the declared expert count of rows (rule 3: a
      count must be known), grouped by parent; the router is then not named (""). Their
      layout is ``"stacked"`` (a table is a stack of one-row slabs, read by row). A
      parameter of a layer found by rules 1a-1d (a stacked layer's per-expert bias
      ``[E, I]``, read by the same ids) is not a table.
2. They are routed: a router — a two-dim parameter of shape ``(E, H)`` outside the
   container but inside its parent module — scores the E experts from width-H hidden
   states, H being one of the experts' weight dimensions. The router is what tells
   experts apart from a stack of decoder layers, a depthwise convolution's ``[C, 1, K]``
   weight, or a shared expert (which has no router of its own width).
   a. The router may be the last layer of a small network of its own width D (ZAYA's
      ``gate.router_mlp.out_proj (E+1, D)``): its ``(·, D)`` parameter counts when its
      own module (the parent's child that holds it) also holds a ``(D, H)`` parameter
      that reads the hidden states.
   b. It may score Z more columns than the container holds experts (1 <= Z <= E // 2),
      when no router scores exactly E: columns for experts that hold no weights in the
      container. When the parent holds, outside the container, slabs of leading
      dimension Z, those are shared experts the router weights (Inkling's
      ``shared_experts [Z, …]``, always computed): ``scored_shared``; otherwise they
      compute nothing (ZAYA's skip expert, masked to a zero weight before the experts
      run): ``zero_experts``, as in rule 1c. Strategies and caches move only the E
      experts: the ids that select slabs stay below E (ZAYA masks a skip to expert 0
      with weight 0; Inkling's top-k ranks only the routed columns).
3. When the expert count is known — ``num_experts=``, or the model's config
   (``num_experts``, ``num_local_experts`` or ``n_routed_experts``, also under
   ``text_config``) — E must equal it.
4. Names are those of the object given: an ``nn.Module``'s parameter names, or a
   ``Program``'s (which its graph's module stacks use too), so ``module`` paths match
   ``place``'s ``module:`` patterns and ``weights`` match ``propagate``'s
   ``stream_constants``.
5. One ``ExpertLayer`` per container, in parameter order (layer order); dense layers
   have none, and a dense model gives an empty map.
6. Experts inside an attention module (a path part naming attention: ``attn``,
   ``attention``; JetMoE's mixture of attention heads) are ``kind="attention"``; the rest
   are ``"mlp"``. A decoder layer may hold one of each.
7. ``expert_map`` is ``find_experts`` for the rest of ``workbench.moe``: its MoE layers
   in parameter (so layer) order, a model or program without routed experts an
   ``ExpertDiscoveryError`` saying what was looked for.
8. Each MoE layer has an index: its decoder-layer number (``ExpertLayer.layer``, the last
   number in the container's path), or, for a container whose path holds no number, its
   position among the MoE layers. A decoder layer's two expert groups (rule 6) share its
   index; otherwise indices are distinct. The index names the layer in hit-rate tables
   and traces (a decoder layer's two groups count together there); ``group_name`` names
   the group (``layers.3``, ``layers.3.attention``) in cache buffers.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, Mapping, Optional, Sequence, Union

import pandas as pd
import torch
import torch.fx

from ..capture import Program
from ..errors import WorkbenchError
from ..indexed_names import indices, last_entry
from ..place import module_paths

__all__ = [
    "ExpertLayer",
    "ExpertMap",
    "ExpertDiscoveryError",
    "config_expert_count",
    "config_ints",
    "expert_layers",
    "expert_map",
    "expert_modules",
    "find_experts",
    "group_name",
    "layer_index",
]

#: Config keys that hold the routed-expert count, in the order they are looked up.
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts")

_ATTENTION = re.compile(r"attn|attention", re.IGNORECASE)


class ExpertDiscoveryError(WorkbenchError, ValueError):
    """``find_experts`` was given something it cannot search, or a bad expert count."""


@dataclass(frozen=True)
class ExpertLayer:
    """The routed experts of one MoE layer."""

    layer: Optional[int]  # index of the decoder layer: the last number in the container's path (3), if any
    module: str  # module path of the container, e.g. "model.layers.3.mlp.experts"
    weights: tuple[str, ...]  # names of the experts' parameters (stacked, or every expert's)
    num_experts: int  # E
    router: str  # name of the (E, H) parameter that scores them
    layout: str  # "stacked" (weights [E, ...]) or "modules" (one submodule per expert)
    expert_nbytes: int  # bytes of one expert's weights (what streaming one expert moves)
    kind: str = "mlp"  # "mlp", or "attention" for experts inside an attention module (rule 6)
    zero_experts: int = 0  # experts the router scores that compute nothing (rules 1c, 2b)
    scored_shared: int = 0  # shared experts beside the container that the router also scores (rule 2b)
    ops: frozenset[str] = frozenset()  # rule 1e in a program: the experts' op names (else: the container's ops)

    def owns(self, node: torch.fx.Node) -> bool:
        """True when ``node`` is one of the experts' ops: one of ``ops`` (rule 1e), else
        an op traced in the container or below it."""
        if self.ops:
            return node.name in self.ops
        return any(self.holds(path) for path in module_paths(node))

    @property
    def nbytes(self) -> int:
        """Bytes of all E experts' weights."""
        return self.expert_nbytes * self.num_experts

    def holds(self, path: str) -> bool:
        """True for the container's path and every path below it."""
        return path == self.module or path.startswith(self.module + ".")


@dataclass(frozen=True)
class ExpertMap:
    """Every MoE layer's routed experts, in layer order (empty for a dense model)."""

    layers: tuple[ExpertLayer, ...]

    def __len__(self) -> int:
        return len(self.layers)

    def __iter__(self) -> Iterator[ExpertLayer]:
        return iter(self.layers)

    def __bool__(self) -> bool:
        return bool(self.layers)

    @property
    def modules(self) -> tuple[str, ...]:
        """Module paths of the containers, one per MoE layer."""
        return tuple(layer.module for layer in self.layers)

    @property
    def weights(self) -> tuple[str, ...]:
        """Names of every routed expert's parameters, all layers."""
        return tuple(w for layer in self.layers for w in layer.weights)

    @property
    def num_experts(self) -> Optional[int]:
        """E when every layer has the same count (None for an empty map)."""
        counts = {layer.num_experts for layer in self.layers}
        if len(counts) > 1:
            raise ExpertDiscoveryError(f"layers have different expert counts {sorted(counts)}; read layers[i].num_experts")
        return counts.pop() if counts else None

    @property
    def nbytes(self) -> int:
        """Bytes of all routed experts' weights."""
        return sum(layer.nbytes for layer in self.layers)

    def layer_of(self, node: torch.fx.Node) -> Optional[ExpertLayer]:
        """The layer whose experts' ops ``node`` is one of (rule 1e), else whose container
        ``node`` was traced in (None if outside every one)."""
        by_op = self._by_op.get(node.name)
        if by_op is not None:
            return by_op
        by_module = self._by_module
        for path in reversed(module_paths(node)):  # innermost first
            prefix = path
            while prefix:  # the path, then each enclosing module's
                if prefix in by_module:
                    return by_module[prefix]
                prefix = prefix.rpartition(".")[0]
        return None

    @cached_property
    def _by_module(self) -> dict[str, ExpertLayer]:
        return {layer.module: layer for layer in self.layers if not layer.ops}

    @cached_property
    def _by_op(self) -> dict[str, ExpertLayer]:
        return {op: layer for layer in self.layers for op in layer.ops}

    def contains(self, node: torch.fx.Node) -> bool:
        """True when ``node`` is one of the routed experts' ops (``layer_of``)."""
        return self.layer_of(node) is not None

    def to_dataframe(self) -> pd.DataFrame:
        """One row per MoE layer: container, layout, experts, router, weights, bytes."""
        rows = [
            {
                "layer": layer.layer,
                "module": layer.module,
                "kind": layer.kind,
                "layout": layer.layout,
                "num_experts": layer.num_experts,
                "zero_experts": layer.zero_experts,
                "scored_shared": layer.scored_shared,
                "router": layer.router,
                "weights": ", ".join(w.removeprefix(layer.module + ".") for w in layer.weights),
                "KiB_per_expert": round(layer.expert_nbytes / 2**10, 2),
                "MiB_all_experts": round(layer.nbytes / 2**20, 3),
            }
            for layer in self.layers
        ]
        columns = ["layer", "module", "kind", "layout", "num_experts", "zero_experts", "scored_shared", "router", "weights", "KiB_per_expert", "MiB_all_experts"]
        return pd.DataFrame(rows, columns=columns)


def config_ints(config: Any, keys: Sequence[str]) -> Iterator[int]:
    """The integer values (bools are not) of ``keys`` in a model config (an object or a
    mapping), then in its ``text_config`` (where multimodal configs keep the text model's),
    in that order."""
    for source in (config, getattr(config, "text_config", None)):
        if source is None:
            continue
        for key in keys:
            value = source.get(key) if isinstance(source, Mapping) else getattr(source, key, None)
            if isinstance(value, int) and not isinstance(value, bool):
                yield value


def config_expert_count(config: Any) -> Optional[int]:
    """The routed-expert count a model config declares (rule 3), or None."""
    return next((value for value in config_ints(config, EXPERT_COUNT_KEYS) if value > 0), None)


def find_experts(model: torch.nn.Module | Program, num_experts: Optional[int] = None) -> ExpertMap:
    """The routed experts of ``model`` (an ``nn.Module`` or a captured ``Program``).

    Args:
        model: the model, or its captured program (names are then the program's).
        num_experts: the expected expert count; default: the model's config, if any.
    """
    if num_experts is not None and (isinstance(num_experts, bool) or not isinstance(num_experts, int) or num_experts < 2):
        raise ExpertDiscoveryError(f"num_experts must be an integer >= 2, got {num_experts!r}")
    if isinstance(model, Program):
        shapes = {fqn: _shape_of(model.constant_tensor(name)) for name, fqn in model.constants.items()
                  if model.constant_kinds[name] == "parameter"}
    elif isinstance(model, torch.nn.Module):
        shapes = {fqn: _shape_of(p) for fqn, p in model.named_parameters()}
        if num_experts is None:
            num_experts = config_expert_count(getattr(model, "config", None))
    else:
        raise ExpertDiscoveryError(
            f"find_experts takes an nn.Module or a Program from workbench.capture, got {type(model).__name__}"
        )
    shaped = _shaped_layers(shapes, num_experts)
    taken = {w for layer in shaped for w in layer.weights}  # a stacked layer's per-expert biases are no tables
    tables = _program_tables(model, shapes, num_experts, taken) if isinstance(model, Program) else \
        _module_tables(model, shapes, num_experts, taken)
    found_layers = shaped + tables
    order = {fqn: i for i, fqn in enumerate(shapes)}
    found_layers.sort(key=lambda layer: order[layer.weights[0]])
    return ExpertMap(tuple(found_layers))


def _shaped_layers(shapes: Mapping[str, tuple[tuple[int, ...], int]], num_experts: Optional[int]) -> list[ExpertLayer]:
    """Rules 1a-1d, 2, 3: the layers found from parameter shapes alone."""
    candidates = _stacked(shapes) + _module_lists(shapes)
    found: list[_Found] = []
    for module, count, weights, dims, layout, zero in candidates:
        if num_experts is not None and count != num_experts:
            continue
        scored = _router(shapes, module, count, zero, dims)
        if scored is not None:
            router, extra = scored
            shared = extra if extra and _holds_slabs(shapes, module, extra) else 0
            found.append(_Found(module, count, weights, router, layout, zero + extra - shared, shared))
    layers = []
    for f in _merge_siblings(found):
        nbytes = sum(shapes[w][1] // shapes[w][0][0] for w in f.weights) if f.layout == "stacked" else \
            sum(shapes[w][1] for w in f.weights) // f.count
        index = indices(f.module)
        layer = index[-1] if index else None
        layers.append(ExpertLayer(layer, f.module, tuple(f.weights), f.count, f.router, f.layout, nbytes, _kind(f.module), f.zero, f.shared))
    return layers


def _kind(module: str) -> str:
    """Rule 6."""
    return "attention" if any(_ATTENTION.search(part) for part in module.split(".")) else "mlp"


def _table_layer(module: str, tables: list[str], router: str, shapes: Mapping[str, tuple[tuple[int, ...], int]],
                 ops: frozenset[str] = frozenset()) -> ExpertLayer:  # fmt: skip
    """Rule 1e: the layer of ``tables`` (``[E, H]`` each) in block ``module``."""
    index = indices(module)
    count = shapes[tables[0]][0][0]
    nbytes = sum(shapes[t][1] // shapes[t][0][0] for t in tables)
    return ExpertLayer(index[-1] if index else None, module, tuple(tables), count, router, "stacked", nbytes,
                       _kind(module), ops=ops)  # fmt: skip


def _module_tables(model: torch.nn.Module, shapes: Mapping[str, tuple[tuple[int, ...], int]],
                   num_experts: Optional[int], taken: set[str]) -> list[ExpertLayer]:  # fmt: skip
    """Rule 1e in a module: lookup tables of exactly ``num_experts`` rows, by parent."""
    if num_experts is None:
        return []
    by_parent: dict[str, list[str]] = defaultdict(list)
    for path, module in model.named_modules():
        if isinstance(module, torch.nn.Embedding) and path and module.weight.shape[0] == num_experts \
                and f"{path}.weight" not in taken:
            by_parent[_parent(path)].append(f"{path}.weight")
    return [_table_layer(parent, names, "", shapes) for parent, names in by_parent.items() if parent and all(n in shapes for n in names)]


_TOPK = torch.ops.aten.topk.default


def _row_gather(node: torch.fx.Node) -> Optional[tuple[torch.fx.Node, torch.fx.Node]]:
    """Rule 1e: ``(table, ids)`` when ``node`` gathers rows of a placeholder by integer ids."""
    if node.op != "call_function" or len(node.args) < 2 or not isinstance(node.args[0], torch.fx.Node):
        return None
    aten = torch.ops.aten
    ids: Any = None
    if node.target is aten.embedding.default:
        ids = node.args[1]
    elif node.target is aten.index_select.default and node.args[1] == 0 and len(node.args) > 2:
        ids = node.args[2]
    elif node.target is aten.index.Tensor and isinstance(node.args[1], (list, tuple)) and len(node.args[1]) == 1:
        ids = node.args[1][0]
    if not isinstance(ids, torch.fx.Node) or node.args[0].op != "placeholder":
        return None
    val = ids.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dtype.is_floating_point or val.dtype is torch.bool:
        return None
    return node.args[0], ids


def _ancestors(node: torch.fx.Node) -> set[torch.fx.Node]:
    seen: set[torch.fx.Node] = set()
    frontier = [node]
    while frontier:
        for arg in frontier.pop().all_input_nodes:
            if arg not in seen:
                seen.add(arg)
                frontier.append(arg)
    return seen


def _program_tables(program: Program, shapes: Mapping[str, tuple[tuple[int, ...], int]],
                    num_experts: Optional[int], taken: set[str]) -> list[ExpertLayer]:  # fmt: skip
    """Rule 1e in a program: tables gathered by ids a ``topk`` chose, by ids, with their ops."""
    params = {name: fqn for name, fqn in program.constants.items() if program.constant_kinds[name] == "parameter"}
    reads: dict[torch.fx.Node, list[tuple[torch.fx.Node, str]]] = defaultdict(list)  # ids → (gather, table FQN)
    for node in program.graph.nodes:
        gathered = _row_gather(node)
        if gathered is None or gathered[0].name not in params:
            continue
        fqn = params[gathered[0].name]
        if fqn in taken:
            continue
        shape = shapes[fqn][0]
        if len(shape) == 2 and shape[0] >= 2 and (num_experts is None or shape[0] == num_experts):
            reads[gathered[1]].append((node, fqn))
    found = []
    for ids, gathers in reads.items():
        tables = list(dict.fromkeys(fqn for _, fqn in gathers))
        if len({shapes[t][0][0] for t in tables}) != 1:
            continue
        ancestry = _ancestors(ids)
        if not any(n.target is _TOPK for n in ancestry):
            continue  # a token embedding: ids from the input, not a router's choice
        parents = [_parent(_parent(t)) for t in tables]  # table FQN → its module → the block
        block = parents[0]
        while block and not all(p == block or p.startswith(block + ".") for p in parents):
            block = _parent(block)
        scope = block + "."
        router = [params[n.name] for n in ancestry if n.op == "placeholder" and params.get(n.name, "").startswith(scope)]
        if not block or not router:
            continue  # rule 2: the ids are chosen by a router of the block
        ops = _table_ops(program, [g for g, _ in gathers], scope, set(tables) | set(router), params)
        found.append(_table_layer(block, tables, sorted(router)[0], shapes, ops))
    return found


def _table_ops(program: Program, gathers: list[torch.fx.Node], scope: str, own: set[str], params: Mapping[str, str]) -> frozenset[str]:
    """Rule 1e: the experts' ops — the gathers, then every op of the block reading them or
    another expert op, and nothing computed from the block's other parameters."""
    tainted: set[torch.fx.Node] = set()  # values computed from the block's other parameters
    ops = set(gathers)
    for node in program.graph.nodes:
        fqn = params.get(node.name, "") if node.op == "placeholder" else ""
        if fqn.startswith(scope) and fqn not in own:
            tainted.add(node)
            continue
        inputs = node.all_input_nodes
        foreign = any(a in tainted and a not in ops for a in inputs)
        if foreign:
            tainted.add(node)
        if node in ops or node.op != "call_function" or foreign or not any(a in ops for a in inputs):
            continue
        if any((path + ".").startswith(scope) for path in module_paths(node)):
            ops.add(node)
    return frozenset(n.name for n in ops)


@dataclass(frozen=True)
class _Found:
    """One container with its router, before siblings merge (rule 1d)."""

    module: str
    count: int
    weights: list[str]
    router: str
    layout: str
    zero: int
    shared: int


def _merge_siblings(found: list[_Found]) -> list[_Found]:
    """Rule 1d: stacked containers that share a parent and a router, as one container (the parent)."""
    groups: dict[tuple[str, str], list[_Found]] = defaultdict(list)
    for item in found:
        groups[(_parent(item.module), item.router)].append(item)
    merged = []
    for (parent, router), items in groups.items():
        if len(items) == 1 or any(item.layout != "stacked" or item.count != items[0].count for item in items) or not parent:
            merged += items
            continue
        weights = [w for item in items for w in item.weights]
        merged.append(_Found(parent, items[0].count, weights, router, "stacked",
                             max(item.zero for item in items), max(item.shared for item in items)))
    return merged


# --- helpers ----------------------------------------------------------------------------


def _shape_of(t: torch.Tensor) -> tuple[tuple[int, ...], int]:
    return tuple(t.shape), t.numel() * t.element_size()


def _parent(path: str) -> str:
    return path.rpartition(".")[0]


def _stacked(shapes: Mapping[str, tuple[tuple[int, ...], int]]) -> list[tuple[str, int, list[str], set[int], str, int]]:
    """Rules 1a and 1c: (module, E, weights, weight dims, "stacked", Z) per module holding stacked slabs."""
    by_module: dict[str, list[str]] = defaultdict(list)
    for fqn in shapes:
        by_module[_parent(fqn)].append(fqn)
    found = []
    for module, names in by_module.items():
        slabs = [n for n in names if len(shapes[n][0]) >= 3]
        leading = {shapes[n][0][0] for n in slabs}
        if not 1 <= len(leading) <= 2:
            continue
        count, scored = min(leading), max(leading)
        if count < 2:
            continue
        weights = [n for n in names if len(shapes[n][0]) >= 2 and shapes[n][0][0] in leading]
        dims = {d for n in slabs for d in shapes[n][0][1:]}
        found.append((module, count, weights, dims, "stacked", scored - count))
    return found


def _module_lists(shapes: Mapping[str, tuple[tuple[int, ...], int]]) -> list[tuple[str, int, list[str], set[int], str, int]]:
    """Rule 1b: (module, E, weights, weight dims, "modules") per list of identical experts."""
    members: dict[str, dict[int, dict[str, tuple[int, ...]]]] = defaultdict(lambda: defaultdict(dict))
    for fqn, (shape, _nbytes) in shapes.items():
        entry = last_entry(fqn)
        if entry is not None:
            members[entry[0]][entry[1]][entry[2]] = shape
    found = []
    for module, experts in members.items():
        count = len(experts)
        if count < 2 or set(experts) != set(range(count)):
            continue
        first = experts[0]
        if any(e != first for e in experts.values()) or not any(len(s) >= 2 for s in first.values()):
            continue
        prefix = module + "."
        weights = [fqn for fqn in shapes if fqn.startswith(prefix)]
        dims = {d for s in first.values() if len(s) >= 2 for d in s}
        found.append((module, count, weights, dims, "modules", 0))
    return found


def _router(shapes: Mapping[str, tuple[tuple[int, ...], int]], module: str, count: int, zero: int,
            dims: set[int]) -> Optional[tuple[str, int]]:
    """Rule 2: ``(router, Z)``: the parameter in the container's parent, outside the
    container, that scores its ``count`` experts and ``zero`` zero-computation ones
    (rule 1c), or else (rule 2b) the fewest more, Z."""
    scope = _parent(module) + "." if _parent(module) else ""
    near = {fqn: shape for fqn, shape in _beside(shapes, module).items() if len(shape) == 2}
    extras = range(1, count // 2 + 1) if not zero else ()
    for extra in (0, *extras):
        for fqn, shape in near.items():
            if shape[0] == count + zero + extra and shape[1] in _router_widths(near, scope, dims, fqn):
                return fqn, extra
    return None


def _router_widths(near: Mapping[str, tuple[int, ...]], scope: str, dims: set[int], fqn: str) -> set[int]:
    """Rule 2a: the widths a router at ``fqn`` may read: the experts' dims, and D for each
    ``(D, H)`` parameter (H one of those dims) in its own module (the parent's child)."""
    own = scope + fqn[len(scope):].split(".", 1)[0] + "."
    return dims | {shape[0] for name, shape in near.items() if name != fqn and name.startswith(own) and shape[1] in dims}


def _holds_slabs(shapes: Mapping[str, tuple[tuple[int, ...], int]], module: str, count: int) -> bool:
    """Rule 2b: the container's parent holds, outside it, slabs of leading dimension ``count``."""
    return any(len(shape) >= 3 and shape[0] == count for shape in _beside(shapes, module).values())


def _beside(shapes: Mapping[str, tuple[tuple[int, ...], int]], module: str) -> dict[str, tuple[int, ...]]:
    """Shapes of the parameters in the container's parent module, outside the container."""
    parent, inside = _parent(module), module + "."
    scope = parent + "." if parent else ""
    return {fqn: shape for fqn, (shape, _nbytes) in shapes.items() if fqn.startswith(scope) and not fqn.startswith(inside)}


# --- MoE layers by index, as the rest of workbench.moe names them ---------------------


def expert_map(model: Union[torch.nn.Module, Program]) -> ExpertMap:
    """Rule 7: the routed experts of ``model``, a non-empty ``ExpertMap``."""
    found = find_experts(model)
    if not found:
        what = "program" if isinstance(model, Program) else type(model).__name__
        raise ExpertDiscoveryError(
            f"this {what} has no routed experts (workbench.moe.discovery.find_experts looks for stacked per-expert "
            "weights or one module per expert, scored by a router in the same block)"
        )
    groups = [group_name(layer_index(found, i), layer) for i, layer in enumerate(found.layers)]
    if len(set(groups)) != len(groups):
        raise ExpertDiscoveryError(
            f"expert groups share a name {groups}: a decoder layer holds at most one group of MLP experts and one of "
            "attention experts; name containers by layer (layers.N....)"
        )
    return found


def group_name(index: int, layer: ExpertLayer) -> str:
    """Rule 8: ``layers.{index}``, and ``layers.{index}.attention`` for attention experts."""
    return f"layers.{index}" + (".attention" if layer.kind == "attention" else "")


def layer_index(experts: ExpertMap, position: int) -> int:
    """Rule 8: the index of the ``position``-th MoE layer of ``experts``."""
    layer = experts.layers[position].layer
    return position if layer is None else layer


def expert_layers(model: Union[torch.nn.Module, Program]) -> tuple[tuple[int, ExpertLayer], ...]:
    """``(index, ExpertLayer)`` for every MoE layer of ``model``, in layer order (rules 7, 8)."""
    return _indexed(expert_map(model))


def _indexed(found: ExpertMap) -> tuple[tuple[int, ExpertLayer], ...]:
    return tuple((layer_index(found, i), layer) for i, layer in enumerate(found.layers))


def expert_modules(model: torch.nn.Module, found: Optional[ExpertMap] = None) -> list[tuple[int, torch.nn.Module]]:
    """``(index, experts container)`` for every MoE layer of ``model`` (rules 7, 8);
    ``found``: ``expert_map(model)``, when the caller has it already."""
    if not isinstance(model, torch.nn.Module):
        raise ExpertDiscoveryError(f"expert_modules takes an nn.Module, got {type(model).__name__}")
    found = expert_map(model) if found is None else found
    return [(index, model.get_submodule(layer.module)) for index, layer in _indexed(found)]
