"""Reading a plan file back: ``load_plan``, which checks everything it reads.

Rules:
1. The archive is read by ``archive.read_archive`` (a zip of this format and version,
   with every member present).
2. ``plan.json`` records the SHA-256 of both saved programs; a program whose bytes do
   not match (damaged, or swapped for another model's) is refused before it is loaded.
3. Every JSON field is read by its type (``json_fields``): a missing or mistyped field
   is an error naming it.
4. The facts read are then checked against the saved graph (``plan_checks``): devices,
   copies, residency, storages, lifetimes, sizes, arenas, then ``MemoryPlan.verify``.
5. Any problem is a ``PlanFileError`` naming the file and the field; nothing half-read
   is returned, so a plan that loads runs like the one that was saved.
6. ``torch.export.save`` gives the unused elements of a multi-output op (``topk``'s
   indices) ``getitem`` nodes of their own; they are dropped on load, so the graphs read
   back have the nodes that were saved.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Union

import torch

from ..capture import Program
from ..file_reading import parse_json
from ..json_fields import JsonFieldError, JsonObject
from ..place import Placement
from ..propagate import DeviceGraph
from .archive import PlanFileError, read_archive
from .memory_plan import PLAN_MEMBER, PROGRAM_MEMBER, PROPAGATED_MEMBER, MemoryPlan, member_hash
from .plan_checks import plan_problems
from .program_archive import load_program

__all__ = ["load_plan"]


def _document(path: Union[str, Path], data: bytes) -> JsonObject:
    value = parse_json(data, f"{path} is corrupt: {PLAN_MEMBER}", PlanFileError)
    try:
        return JsonObject(value, "")
    except JsonFieldError as exc:
        raise PlanFileError(f"{path} is corrupt: {PLAN_MEMBER} is not a JSON object ({exc})") from None


def _check_hashes(path: Union[str, Path], document: JsonObject, members: dict[str, bytes]) -> None:
    """Rule 2."""
    try:
        recorded = document.text_map("member_sha256")
    except JsonFieldError as exc:
        raise PlanFileError(f"{path} is corrupt: {PLAN_MEMBER}: {exc}") from None
    for name in (PROGRAM_MEMBER, PROPAGATED_MEMBER):
        if name not in recorded:
            raise PlanFileError(f"{path} is corrupt: {PLAN_MEMBER}: member_sha256.{name} is missing")
        if member_hash(members[name]) != recorded[name]:
            raise PlanFileError(
                f"{path} is corrupt: {name} is not the program this plan was made for (its SHA-256 "
                f"differs from member_sha256.{name} in {PLAN_MEMBER}); the member was damaged or replaced"
            )


def _drop_unused_getitems(ep: torch.export.ExportedProgram, known: set[str]) -> None:
    """Rule 6: remove the ``getitem`` nodes ``torch.export.save`` adds for unused elements of
    a multi-output op (``topk_unused_0``): unused, and unknown to the saved facts."""
    graph = ep.graph_module.graph
    added = [n for n in graph.nodes if n.target is operator.getitem and not n.users and n.name not in known]
    for node in added:
        graph.erase_node(node)
    if added:
        ep.graph_module.recompile()


def _saved_names(document: JsonObject, section: str, field: str) -> set[str]:
    """The node names a section of ``plan.json`` knows (empty when it is malformed: the
    field checks then report it)."""
    try:
        return set(document.mapping(section).mapping(field).keys())
    except JsonFieldError:
        return set()


def load_plan(path: Union[str, Path]) -> MemoryPlan:
    """Read a file written by ``MemoryPlan.save``: the ``MemoryPlan`` with its
    ``DeviceGraph``, ``Placement`` and ``Program``, checked (module rules). A file that is
    not a complete, consistent plan of this format version is a ``PlanFileError`` that
    names the problem."""
    if not isinstance(path, (str, Path)):
        raise PlanFileError(f"path must be a str or pathlib.Path of a plan file, got {type(path).__name__}")
    members = read_archive(path, (PROGRAM_MEMBER, PROPAGATED_MEMBER, PLAN_MEMBER))
    document = _document(path, members[PLAN_MEMBER])
    _check_hashes(path, document, members)
    original = load_program(members[PROGRAM_MEMBER], f"{path}: {PROGRAM_MEMBER}")
    propagated = load_program(members[PROPAGATED_MEMBER], f"{path}: {PROPAGATED_MEMBER}")
    _drop_unused_getitems(original, _saved_names(document, "placement", "op_device"))
    _drop_unused_getitems(propagated, _saved_names(document, "device_graph", "node_device"))
    try:
        program = Program.from_json(document.raw("program"), original, "program")
        placement = Placement.from_json(document.raw("placement"), program, "placement")
        dg = DeviceGraph.from_json(document.raw("device_graph"), placement, propagated, "device_graph")
        plan_ = MemoryPlan.from_json(document.raw("plan"), dg, "plan")
    except (JsonFieldError, ValueError, KeyError, TypeError) as exc:
        raise PlanFileError(f"{path} is corrupt: {PLAN_MEMBER}: {exc}") from None
    if plan_.steps != tuple(n.name for n in dg.graph.nodes):
        raise PlanFileError(f"{path} is corrupt: plan.steps do not match the saved graph's node order")
    problems = plan_problems(plan_)
    if problems:
        shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
        raise PlanFileError(f"{path} is corrupt: {PLAN_MEMBER}: {shown}")
    return plan_
