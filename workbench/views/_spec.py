"""The spec of one graph node: what GraphView's panel shows when a node is selected.

Rules:
1. Every node of ``dg.graph`` has a spec; an unknown name is a ``KeyError`` that lists a
   few valid names.
2. With a plan, the lifetime, storage, arena, offset and size are the plan's (a view or
   in-place result reports the storage it shares); a tensor the plan does not place says
   why (``unplanned``). Without a plan, the lifetime is [defining step, last use] in graph
   order and the memory fields are None.
3. A copy node carries what its copy record says: kind, source, destination, consumers,
   the reason recorded when it was inserted, its role (plain, gather, prefetch, reuse)
   and, for row copies, the node holding the row ids.
4. An op names where the model issued it: the innermost module it was traced in (path
   and class) and, when capture recorded the Python stack (runnable programs), the
   innermost frame as ``file.py:line in function: code`` — the file's name only, so the
   text is the same on every machine. A node propagation adds for a model op (a
   rewrite's ops, a gather that replaces the op's row selection) names that op's; a
   plain copy between devices names neither.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, fields
from typing import Any, Iterable, Optional

import pandas as pd
import torch
import torch.fx

from ._inputs import UnknownNameError
from .groups import module_stack
from ._style import format_bytes
from ._upstream import CopyRecord, DeviceGraph, node_nbytes, node_role, op_name, value_of


@dataclass(frozen=True)
class NodeSpec:
    """Everything known about one node of a propagated (and maybe planned) graph."""

    name: str
    op: str  # "aten.linear.default", "workbench.h2d_copy.default", "placeholder", "output"
    role: str  # "input" | "parameter" | "buffer" | "constant" | "op" | "copy" | "output"
    shape: Optional[tuple[int, ...]]
    dtype: Optional[str]
    nbytes: int
    device: Optional[str]
    delegate: Optional[str]
    module: Optional[str]  # innermost module that issued the op: "layers.0.mlp (MoE)" (rule 4)
    source: Optional[str]  # the model line that issued it: "layers.py:403 in forward: …" (rule 4)
    inputs: tuple[str, ...]
    users: tuple[str, ...]
    lifetime: Optional[tuple[int, int]]  # inclusive steps
    lifetime_source: Optional[str]  # "plan" | "graph order"
    storage: Optional[str]  # allocation that holds its bytes (itself unless it aliases)
    arena: Optional[int]
    offset: Optional[int]
    size: Optional[int]  # aligned bytes reserved
    unplanned: Optional[str]  # why the plan gives it no memory
    copy_kind: Optional[str] = None
    copy_src: Optional[str] = None
    copy_dst: Optional[str] = None
    copy_consumers: tuple[str, ...] = ()
    copy_reason: Optional[str] = None
    copy_role: Optional[str] = None  # plain | gather | prefetch | reuse
    copy_index: Optional[str] = None  # the node holding the row ids of a gather, prefetch or reuse

    def rows(self) -> list[tuple[str, str]]:
        """(field, text) pairs for display, empty fields left out."""
        out: list[tuple[str, str]] = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None or value == ():
                continue
            if f.name in ("nbytes", "size"):
                text = f"{value} ({format_bytes(value)})"
            elif f.name == "offset":
                text = f"{value} (0x{value:x})"
            elif f.name == "lifetime":
                text = f"steps {value[0]}..{value[1]} ({self.lifetime_source})"
            elif f.name == "lifetime_source":
                continue
            elif isinstance(value, tuple) and f.name != "shape":
                text = ", ".join(str(v) for v in value)
            else:
                text = str(value)
            out.append((f.name.replace("_", " "), text))
        return out


def node_spec(dg: DeviceGraph, name: str, plan: Any = None) -> NodeSpec:
    """The spec of node ``name`` (see the module rules)."""
    node = find_node(dg, name)
    record = dg.copy_table.get(name)
    return _spec(dg, node, plan, record)


def node_specs(dg: DeviceGraph, names: Iterable[str], plan: Any = None) -> dict[str, NodeSpec]:
    """The specs of many nodes at once (one pass over the graph), by name."""
    wanted = set(names)
    return {n.name: _spec(dg, n, plan, dg.copy_table.get(n.name)) for n in dg.graph.nodes if n.name in wanted}


def specs_dataframe(dg: DeviceGraph, plan: Any = None) -> pd.DataFrame:
    """One row per node of ``dg.graph``, in graph order; columns are the ``NodeSpec`` fields."""
    records = dg.copy_table
    columns = [f.name for f in fields(NodeSpec)]
    specs = (_spec(dg, n, plan, records.get(n.name)) for n in dg.graph.nodes)
    return pd.DataFrame([{c: getattr(s, c) for c in columns} for s in specs], columns=columns)


def find_node(dg: DeviceGraph, name: str) -> torch.fx.Node:
    """Rule 1: the node ``name`` of ``dg.graph``, or a KeyError listing a few names."""
    for node in dg.graph.nodes:
        if node.name == name:
            return node
    some = ", ".join(n.name for n in list(dg.graph.nodes)[:8])
    raise UnknownNameError(f"no node named {name!r} in this graph; nodes are named like {some}, …")


def _role(dg: DeviceGraph, node: torch.fx.Node) -> str:
    """The DeviceGraph table's role, and ``output`` for the output node."""
    return "output" if node.op == "output" else node_role(dg, node)


def _spec(dg: DeviceGraph, node: torch.fx.Node, plan: Any, record: Optional[CopyRecord]) -> NodeSpec:
    val = value_of(node)
    is_tensor = isinstance(val, torch.Tensor)
    device = dg.node_device.get(node.name)
    lifetime, source, storage, arena, offset, size, unplanned = _memory(dg, node, plan)
    return NodeSpec(
        name=node.name,
        op=op_name(node),
        role=_role(dg, node),
        shape=tuple(int(d) if isinstance(d, int) else d for d in val.shape) if is_tensor else None,
        dtype=str(val.dtype).removeprefix("torch.") if is_tensor else None,
        nbytes=node_nbytes(node, unbounded="hint") if node.op != "output" else 0,
        device=str(device) if device is not None else None,
        delegate=dg.placement.node_delegate.get(node.name),
        module=_module(node),
        source=_source(node),
        inputs=tuple(a.name for a in node.all_input_nodes),
        users=tuple(u.name for u in node.users),
        lifetime=lifetime,
        lifetime_source=source,
        storage=storage,
        arena=arena,
        offset=offset,
        size=size,
        unplanned=unplanned,
        copy_kind=record.kind if record else None,
        copy_src=str(record.src) if record else None,
        copy_dst=str(record.dst) if record else None,
        copy_consumers=record.consumers if record else (),
        copy_reason=record.reason if record else None,
        copy_role=str(record.role) if record else None,
        copy_index=record.index if record else None,
    )


#: The innermost frame of a recorded stack: ``File "path", line N, in fn`` then the code line.
_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<fn>\S+)\n(?P<code>[^\n]*)')


def _module(node: torch.fx.Node) -> Optional[str]:
    """Rule 4: the innermost module of the node's stack as ``path (Class)``."""
    stack = module_stack(node)
    return f"{stack[-1][0]} ({stack[-1][1]})" if stack else None


def _source(node: torch.fx.Node) -> Optional[str]:
    """Rule 4: the innermost frame of the recorded stack, or None."""
    stack = node.meta.get("stack_trace")
    if not isinstance(stack, str):
        return None
    last = _FRAME.match(stack, max(stack.rfind('File "'), 0))
    if last is None:
        return None
    return f"{os.path.basename(last['path'])}:{last['line']} in {last['fn']}: {last['code'].strip()}"


def _memory(dg: DeviceGraph, node: torch.fx.Node, plan: Any):
    """(lifetime, source, storage, arena, offset, size, unplanned) — rule 2."""
    if node.op == "output":
        return None, None, None, None, None, None, None
    if plan is None:
        start = dg.order_of(node.name)
        end = max((dg.order_of(u.name) for u in node.users), default=start)
        return (start, end), "graph order", None, None, None, None, None
    owner = plan.storage_of.get(node.name)
    if owner is not None and owner in plan.allocations:
        a = plan.allocations[owner]
        return (a.start, a.end), "plan", owner, a.arena, a.offset, a.size, None
    why = plan.unplanned.get(node.name)
    if why is None:
        val = value_of(node)
        why = (
            "a tuple of values; each tensor item (getitem) is planned on its own"
            if isinstance(val, (tuple, list))
            else "not a tensor"
        )
    return None, None, None, None, None, None, why
