"""Everything the stages know of a node: one typed, frozen record per node, under one key.

A node's facts live in ``node.meta`` — where ``torch.fx`` keeps what a pass knows of a
node (``val``, ``nn_module_stack``), which ``node_copy`` carries through propagation and
scheduling — as one ``NodeFacts`` record under one key (``FACTS_KEY``). Its placement
facts (the node's device, its copy record with the copy's role and reason, where a
constant is resident, where the caller supplies an input: rule 7) are written by the
``DeviceGraph`` built over the graph, whose tables (``node_device``, ``copies``,
``residency``, ``input_devices``) are read-only views of them (``FactView``). A rewrite
that adds ops of its own (the caches of ``workbench.moe``) records the facts the runtime
needs about them (rules 1, 2) through the functions here; ``runtime.steps`` reads them
back the same way. A package's own facts about a node (the MoE cache's marked reads) are
named ``tags`` of the same record; a value's weight format is rule 6.
``torch.export.save`` keeps no custom ``node.meta`` keys, so a saved ``DeviceGraph``
writes the records of its graph as tables (``records_to_json``: the placement facts and
``facts_to_json``'s) and restores them on the loaded graph.

Rules:
  1. ``CopyStreamOp(nbytes)``: a device op that runs on its device's copy stream (an
     update of device memory that must be ordered with the copies, e.g. writing rows into
     a cache), moving ``nbytes`` within device memory per call. It is a ``d2d`` event of
     its device's copy lane, timed as a memory copy of ``nbytes`` (read and written once).
  2. ``RowShare(mask, where)``: a compute or host op whose tensors have one row per entry
     of the ``(N,)`` boolean value of node ``mask``, of which only the rows where
     ``mask == where`` are needed (the others are computed for static shapes and
     discarded). It is charged that share of its time, bytes and FLOPs: in a run the
     share the mask really selects, in ``estimate`` the expected one
     (``CostModel.prefetch_hit_rate`` selects ``True``).
  3. A node has one ``NodeFacts`` record (``facts_of``; empty when nothing was marked),
     at most one fact of each kind and one value per tag; ``mask`` names a node of the
     same graph.
  4. Saved and loaded, a graph's nodes carry the same facts as before: the table names
     each node with a fact, and a name that is no node of the loaded graph (or a mask
     that is none) is a ``JsonFieldError`` naming the field.
  5. ``mark_tag(node, name, value)``: an integer fact a package names itself (a tag);
     ``tag_of`` reads it back, ``tagged`` lists the nodes that carry it.
  6. ``StoredFormat(name, bits_per_weight, dequant_ops)``: the value is stored in weight
     format ``name`` (``workbench.weight_formats``), ``bits_per_weight`` bits per element
     (block scales included) instead of its dtype's, and an op computing with it does
     ``dequant_ops`` operations per element to turn it back into numbers. ``quantize``
     records it on constants; propagation on every value that holds the same elements
     stored the same way (views, copies and row picks of such a value).
  7. Placement facts: ``device`` (every placeholder and op: the device its value lives
     on), ``copy`` (a copy node: its ``CopyRecord``), ``resident`` (a constant: the
     devices holding it, host first, possibly none) and ``input_device`` (a user input:
     the device the caller supplies it on). ``with_placement`` computes them for a whole
     graph from its tables, keeping every other fact; a table entry naming no node of
     the graph, or two copy records of one node, is a ``NodeFactError``. ``FactView``
     reads one of them back as a read-only mapping, node name → fact, in graph order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Generic, Iterable, Iterator, Mapping, Optional, TypeVar

import torch.fx

from .copy_records import CopyRecord
from .devices import Device
from .errors import WorkbenchError
from .json_fields import JsonFieldError, JsonObject

__all__ = [
    "CopyStreamOp",
    "FactView",
    "NodeFactError",
    "NodeFacts",
    "PlacementTables",
    "RowShare",
    "StoredFormat",
    "copy_stream_op",
    "facts_of",
    "facts_to_json",
    "mark_copy_stream",
    "mark_row_share",
    "mark_stored_format",
    "mark_tag",
    "records_from_json",
    "records_to_json",
    "restore_facts",
    "row_share",
    "stored_format",
    "tag_of",
    "tagged",
    "with_placement",
]

#: The one ``node.meta`` key of a node's ``NodeFacts``.
FACTS_KEY = "workbench_facts"


class NodeFactError(WorkbenchError, ValueError):
    """A node fact that cannot hold (negative bytes, a mask that is no node)."""


@dataclass(frozen=True)
class CopyStreamOp:
    """Rule 1."""

    nbytes: int  # bytes the op moves within device memory per call


@dataclass(frozen=True)
class RowShare:
    """Rule 2."""

    mask: str  # node whose (N,) bool value says which rows are needed
    where: bool  # the op's rows are those where the mask equals this

    def share(self, rows: int, true_rows: int) -> float:
        """The share of ``rows`` this op works on, given how many mask entries are True."""
        if rows <= 0:
            return 0.0
        selected = true_rows if self.where else rows - true_rows
        return selected / rows

    def expected_share(self, true_rate: float) -> float:
        """The share expected when a mask entry is True with probability ``true_rate``."""
        return true_rate if self.where else 1.0 - true_rate


@dataclass(frozen=True)
class StoredFormat:
    """Rule 6."""

    name: str  # the weight format's name
    bits_per_weight: float  # storage bits per element, block scales included
    dequant_ops: float  # operations per element to dequantize it

    def nbytes(self, numel: int) -> int:
        """Bytes ``numel`` elements take in this format (whole bytes, rounded up)."""
        return math.ceil(numel * self.bits_per_weight / 8)


@dataclass(frozen=True)
class NodeFacts:
    """Everything the rewrites recorded on one node (rule 3)."""

    copy_stream: Optional[CopyStreamOp] = None  # rule 1
    row_share: Optional[RowShare] = None  # rule 2
    tags: tuple[tuple[str, int], ...] = ()  # rule 5, sorted by name
    stored: Optional[StoredFormat] = None  # rule 6
    device: Optional[Device] = None  # rule 7: where the value lives
    copy: Optional[CopyRecord] = None  # rule 7: a copy node's record (role, reason, devices, bytes)
    resident: Optional[tuple[Device, ...]] = None  # rule 7: a constant's devices
    input_device: Optional[Device] = None  # rule 7: where the caller supplies a user input

    def tag(self, name: str) -> Optional[int]:
        """The value of tag ``name``, if set."""
        return dict(self.tags).get(name)


_EMPTY = NodeFacts()


def facts_of(node: torch.fx.Node) -> NodeFacts:
    """Rule 3: ``node``'s record (empty when nothing was marked)."""
    facts = node.meta.get(FACTS_KEY)
    return facts if isinstance(facts, NodeFacts) else _EMPTY


def _update(node: torch.fx.Node, **changes: Any) -> None:
    node.meta[FACTS_KEY] = replace(facts_of(node), **changes)


def mark_copy_stream(node: torch.fx.Node, nbytes: int) -> None:
    """Record rule 1 on ``node``."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise NodeFactError(f"a copy-stream op moves a whole number of bytes >= 0, got {nbytes!r}")
    _update(node, copy_stream=CopyStreamOp(nbytes))


def mark_row_share(node: torch.fx.Node, mask: torch.fx.Node, where: bool) -> None:
    """Record rule 2 on ``node``: its rows are those where ``mask``'s value equals ``where``."""
    if not isinstance(mask, torch.fx.Node) or mask.graph is not node.graph:
        raise NodeFactError(f"the mask of {node.name!r} must be a node of its graph, got {mask!r}")
    _update(node, row_share=RowShare(mask.name, bool(where)))


def mark_tag(node: torch.fx.Node, name: str, value: int) -> None:
    """Record rule 5 on ``node``: tag ``name`` is ``value``."""
    if not isinstance(name, str) or not name:
        raise NodeFactError(f"a tag is named by a non-empty string, got {name!r}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise NodeFactError(f"tag {name!r} holds an integer, got {value!r}")
    tags = dict(facts_of(node).tags)
    tags[name] = value
    _update(node, tags=tuple(sorted(tags.items())))


def mark_stored_format(node: torch.fx.Node, stored: StoredFormat) -> None:
    """Record rule 6 on ``node``."""
    if not isinstance(stored, StoredFormat) or not stored.bits_per_weight > 0 or stored.dequant_ops < 0:
        raise NodeFactError(f"a stored format has a name, bits per weight > 0 and dequant ops >= 0, got {stored!r}")
    _update(node, stored=stored)


def stored_format(node: torch.fx.Node) -> Optional[StoredFormat]:
    """Rule 6's fact on ``node``, if recorded."""
    return facts_of(node).stored


def copy_stream_op(node: torch.fx.Node) -> Optional[CopyStreamOp]:
    """Rule 1's fact on ``node``, if recorded."""
    return facts_of(node).copy_stream


def row_share(node: torch.fx.Node) -> Optional[RowShare]:
    """Rule 2's fact on ``node``, if recorded."""
    return facts_of(node).row_share


def tag_of(node: torch.fx.Node, name: str) -> Optional[int]:
    """Rule 5's tag ``name`` on ``node``, if set."""
    return facts_of(node).tag(name)


def tagged(graph: torch.fx.Graph, name: str) -> dict[str, int]:
    """Node name → value, for each node of ``graph`` with tag ``name``."""
    found = {}
    for node in graph.nodes:
        value = tag_of(node, name)
        if value is not None:
            found[node.name] = value
    return found


def facts_to_json(graph: torch.fx.Graph) -> dict[str, Any]:
    """Rule 4: the facts recorded on ``graph``'s nodes as plain JSON data: one table per
    kind of fact (``tags`` only when a node has one, so a graph without tags is written as
    before tags existed)."""
    streams: dict[str, int] = {}
    shares: dict[str, dict[str, Any]] = {}
    tags: dict[str, dict[str, int]] = {}
    stored: dict[str, dict[str, Any]] = {}
    for node in graph.nodes:
        facts = facts_of(node)
        if facts.copy_stream is not None:
            streams[node.name] = facts.copy_stream.nbytes
        if facts.row_share is not None:
            shares[node.name] = {"mask": facts.row_share.mask, "where": facts.row_share.where}
        for name, value in facts.tags:
            tags.setdefault(name, {})[node.name] = value
        if facts.stored is not None:
            stored[node.name] = {"format": facts.stored.name, "bits_per_weight": facts.stored.bits_per_weight,
                                 "dequant_ops": facts.stored.dequant_ops}
    out: dict[str, Any] = {"copy_stream": streams, "row_share": shares}
    if tags:
        out["tags"] = tags
    if stored:
        out["stored"] = stored
    return out


def restore_facts(graph: torch.fx.Graph, data: Any, path: str = "node_facts") -> None:
    """Rule 4: record on ``graph``'s nodes the facts ``facts_to_json`` wrote (``tags`` and
    ``stored`` may be absent). Everything is checked before any node is changed, so a bad table leaves
    the graph as it was."""
    obj = JsonObject(data, path)
    nodes = {n.name: n for n in graph.nodes}

    def node_at(name: str, where: str) -> torch.fx.Node:
        if name not in nodes:
            raise JsonFieldError(f"{where} names {name!r}, which is no node of the saved graph")
        return nodes[name]

    records: dict[torch.fx.Node, dict[str, Any]] = {}
    for name, nbytes in obj.count_map("copy_stream").items():
        records.setdefault(node_at(name, f"{path}.copy_stream"), {})["copy_stream"] = CopyStreamOp(nbytes)
    shares_obj = obj.mapping("row_share")
    for name in shares_obj.keys():
        share = shares_obj.mapping(name)
        mask = node_at(share.text("mask"), f"{share.path}.mask")
        records.setdefault(node_at(name, f"{path}.row_share"), {})["row_share"] = RowShare(mask.name, share.flag("where"))
    if "tags" in obj.data:
        tags_obj = obj.mapping("tags")
        for tag in tags_obj.keys():
            for name, value in tags_obj.count_map(tag).items():
                fields = records.setdefault(node_at(name, f"{path}.tags.{tag}"), {})
                fields["tags"] = tuple(sorted((*fields.get("tags", ()), (tag, value))))
    if "stored" in obj.data:
        stored_obj = obj.mapping("stored")
        for name in stored_obj.keys():
            entry = stored_obj.mapping(name)
            bits, ops = entry.raw("bits_per_weight"), entry.raw("dequant_ops")
            numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in (bits, ops))
            if not numbers or not bits > 0 or ops < 0:
                raise JsonFieldError(f"{entry.path} holds bits_per_weight {bits!r} and dequant_ops {ops!r}; "
                                     "valid: finite numbers, bits > 0, ops >= 0")
            fact = StoredFormat(entry.text("format"), float(bits), float(ops))
            records.setdefault(node_at(name, f"{path}.stored"), {})["stored"] = fact
    for node, fields in records.items():
        _update(node, **{"copy_stream": None, "row_share": None, "tags": (), "stored": None, **fields})



_PLACEMENT_FIELDS = ("device", "copy", "resident", "input_device")


def with_placement(
    graph: torch.fx.Graph,
    node_device: Mapping[str, Device],
    copies: Iterable[CopyRecord],
    residency: Mapping[str, tuple[Device, ...]],
    input_devices: Mapping[str, Device],
) -> dict[torch.fx.Node, NodeFacts]:
    """Rule 7: every node of ``graph`` → its record with the placement facts of these
    tables (none where a table has no entry), its other facts kept."""
    nodes = {n.name: n for n in graph.nodes}
    fields: dict[str, dict[str, Any]] = {name: dict.fromkeys(_PLACEMENT_FIELDS) for name in nodes}

    def entry(name: str, table: str) -> dict[str, Any]:
        if name not in fields:
            raise NodeFactError(f"{table} names {name!r}, which is no node of the graph")
        return fields[name]

    for name, device in node_device.items():
        entry(name, "node_device")["device"] = device
    for record in copies:
        slot = entry(record.name, "the copy table")
        if slot["copy"] is not None:
            raise NodeFactError(f"the copy table lists copy node {record.name!r} twice")
        slot["copy"] = record
    for name, held in residency.items():
        entry(name, "residency")["resident"] = tuple(held)
    for name, device in input_devices.items():
        entry(name, "input_devices")["input_device"] = device
    return {node: replace(facts_of(node), **fields[name]) for name, node in nodes.items()}


V = TypeVar("V")


class FactView(Mapping[str, V], Generic[V]):
    """Rule 7: one placement fact of a graph's records as a read-only mapping, node name →
    fact, in graph order (the nodes that have it)."""

    def __init__(self, graph: torch.fx.Graph, fact: str) -> None:
        if fact not in _PLACEMENT_FIELDS:
            raise NodeFactError(f"no placement fact {fact!r}; valid: {', '.join(_PLACEMENT_FIELDS)}")
        self._fact = fact
        self._nodes = {n.name: n for n in graph.nodes if self._read(n) is not None}

    def _read(self, node: torch.fx.Node) -> Any:
        return getattr(facts_of(node), self._fact)

    def __getitem__(self, name: str) -> V:
        value: V = self._read(self._nodes[name])  # records are frozen: a node listed has its fact
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return f"FactView({dict(self)!r})"


def records_to_json(graph: torch.fx.Graph) -> dict[str, Any]:
    """Rules 4 and 7: every record of ``graph`` as plain JSON data, one table per fact:
    ``node_device``, ``copies`` (in graph order), ``node_facts`` (``facts_to_json``),
    ``residency`` and ``input_devices``."""
    tables: dict[str, Any] = {"node_device": {}, "copies": [], "node_facts": facts_to_json(graph), "residency": {},
                              "input_devices": {}}
    for node in graph.nodes:
        facts = facts_of(node)
        if facts.device is not None:
            tables["node_device"][node.name] = str(facts.device)
        if facts.copy is not None:
            tables["copies"].append(facts.copy.to_json())
        if facts.resident is not None:
            tables["residency"][node.name] = [str(d) for d in facts.resident]
        if facts.input_device is not None:
            tables["input_devices"][node.name] = str(facts.input_device)
    return tables


@dataclass(frozen=True)
class PlacementTables:
    """The placement facts ``records_from_json`` read, as the tables a ``DeviceGraph`` takes."""

    node_device: dict[str, Device]
    copies: tuple[CopyRecord, ...]
    residency: dict[str, tuple[Device, ...]]
    input_devices: dict[str, Device]


def records_from_json(graph: torch.fx.Graph, obj: JsonObject) -> PlacementTables:
    """Rules 4 and 7: the tables ``records_to_json`` wrote, read from ``obj``; the facts of
    its ``node_facts`` table (absent from files written before it existed: none) are
    restored on ``graph``'s nodes, the placement facts returned for the ``DeviceGraph``
    to record. A table naming a node ``graph`` lacks is a ``JsonFieldError`` naming it."""
    names = {n.name for n in graph.nodes}
    node_device = obj.device_map("node_device")
    residency_obj = obj.mapping("residency")
    tables = PlacementTables(
        node_device=node_device,
        copies=tuple(CopyRecord.from_json(c.data, c.path) for c in obj.elements("copies")),
        residency={k: residency_obj.devices(k) for k in residency_obj.keys()},
        input_devices=obj.device_map("input_devices"),
    )
    for table, keys in (("node_device", list(node_device)), ("copies", [c.name for c in tables.copies]),
                        ("residency", list(tables.residency)), ("input_devices", list(tables.input_devices))):
        missing = sorted(set(keys) - names)
        if missing:
            raise JsonFieldError(f"{obj.path}.{table} names nodes the saved graph lacks: {missing[:5]}")
    if "node_facts" in obj.data:
        restore_facts(graph, obj.raw("node_facts"), f"{obj.path}.node_facts")
    return tables
