"""``plan``: per-device memory plans for a propagated graph; ``MemoryPlan`` files.

Every tensor that owns memory (see ``lifetimes``) gets a device, an arena on it, a byte
offset and a lifetime; host and device tensors never share an arena. Offsets come from the
pure algorithms of ``workbench.planning.algorithms`` run once per device.

Rules:
1. One arena per device (arena 0); tensors of a device are planned together.
2. ``arena_bytes[d] >= lower_bound[d]``, the peak of simultaneously live aligned bytes.
3. Constants are not in the arenas: ``constant_bytes`` counts them per resident device.
4. Graph inputs/outputs are planned unless the caller owns them: by default the caller
   owns inputs when the graph was propagated with ``skip_h2d_for_method_inputs`` and
   outputs with ``skip_d2h_for_method_outputs``.
5. With ``capacity``, a device whose arena plus constants exceed its memory is an error
   that names the device, the bytes needed and available, and the largest tensors.
6. ``MemoryPlan.save`` writes one archive (``planning.archive``) holding the captured
   program, the propagated program and ``plan.json``: the SHA-256 of both programs and
   the JSON forms of the placement, the device graph and the plan; ``plan_file.load_plan``
   reads it back and checks it.
7. The propagated program is saved by ``torch.export.save``, which holds functional
   graphs only: a graph with an op that updates its inputs in place (a cache's
   admission, ``lru``/``lfu``) cannot be saved, and ``save`` refuses it with a
   ``PlanSaveError`` naming those ops before writing anything.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Iterable, Mapping, Optional, Union

import pandas as pd
import torch

from ..devices import Device, DeviceError, DeviceLike, host_first
from ..arguments import check_optional_flag, describe, power_of_two
from ..errors import ArgumentTypeError, WorkbenchError
from ..graph_values import gc_paused, node_nbytes
from ..json_fields import JsonObject
from ..propagate import DeviceGraph
from ..units import format_bytes
from .algorithms import ALGORITHMS, Assignment, assign_offsets
from .archive import write_archive
from .buffers import MAX_ALIGNMENT, Buffer, aligned_size
from .lifetimes import KINDS, TensorLifetime, tensor_lifetimes
from .lower_bound import lower_bound as peak_live_bytes
from .program_archive import program_bytes
from .verify import PlanVerificationError, verify as verify_offsets

__all__ = ["CapacityError", "MemoryPlan", "PlanError", "PlanSaveError", "TensorAllocation", "member_hash", "plan"]


class PlanError(WorkbenchError, ValueError):
    """The graph cannot be planned as asked."""


class CapacityError(PlanError):
    """A device's planned memory does not fit its capacity."""


class PlanSaveError(PlanError):
    """A plan the plan file format cannot hold (rule 7)."""


@dataclass(frozen=True)
class TensorAllocation:
    """Where one storage lives: device, arena, offset, size and lifetime."""

    name: str  # the value that owns the storage
    device: Device  # where the arena is
    arena: int  # arena index on the device
    offset: int  # byte offset in the arena
    size: int  # aligned bytes reserved
    nbytes: int  # bytes of the tensor
    start: int  # first step live (index into MemoryPlan.steps)
    end: int  # last step live, inclusive
    kind: str  # "input" | "output" | "activation" | "copy"
    aliases: tuple[str, ...]  # views / in-place results sharing this storage

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "device": str(self.device), "aliases": list(self.aliases)}

    @classmethod
    def from_json(cls, data: Any, path: str = "allocation") -> "TensorAllocation":
        obj = JsonObject(data, path)
        kind = obj.text("kind")
        if kind not in KINDS:
            raise obj.fail("kind", f"one of {', '.join(KINDS)}")
        return cls(
            name=obj.text("name"),
            device=obj.device("device"),
            arena=obj.count("arena"),
            offset=obj.count("offset"),
            size=obj.count("size"),
            nbytes=obj.count("nbytes"),
            start=obj.count("start"),
            end=obj.count("end"),
            kind=kind,
            aliases=obj.texts("aliases"),
        )


@dataclass(frozen=True, eq=False)
class MemoryPlan:
    """A memory plan: every planned storage placed in its device's arena."""

    device_graph: DeviceGraph  # the propagated graph that was planned
    algorithm: str
    alignment: int
    steps: tuple[str, ...]  # node names in execution order
    allocations: Mapping[str, TensorAllocation]  # storage name → allocation
    storage_of: Mapping[str, str]  # every planned tensor value → its storage
    unplanned: Mapping[str, str]  # tensor values without planned memory → why
    arena_bytes: Mapping[Device, int]  # device → arena size
    lower_bound: Mapping[Device, int]  # device → peak of live aligned bytes
    constant_bytes: Mapping[Device, int]  # device → resident constants
    alloc_graph_inputs: bool
    alloc_graph_outputs: bool
    capacity: Optional[Mapping[Device, int]] = None  # device → bytes it holds, when declared (rule 5)

    @property
    def devices(self) -> tuple[Device, ...]:
        """Every device with an arena (possibly empty), host first."""
        return tuple(self.arena_bytes)

    def total_bytes(self) -> dict[Device, int]:
        """Arena plus resident constants, per device."""
        return {d: self.arena_bytes.get(d, 0) + self.constant_bytes.get(d, 0) for d in self._all_devices()}

    def _all_devices(self) -> list[Device]:
        return list(dict.fromkeys(list(self.arena_bytes) + list(self.constant_bytes)))

    def buffers(self, device: DeviceLike) -> list[Buffer]:
        """The planning input of one device's arena."""
        dev = Device.parse(device)
        return [Buffer(a.name, a.nbytes, a.start, a.end) for a in self.allocations.values() if a.device == dev]

    def verify(self) -> None:
        """Check the plan independently of the algorithm that made it; raises
        ``PlanVerificationError`` listing every problem (overlaps in time and bytes,
        misalignment, tensors outside their arena, aliases across devices)."""
        problems: list[str] = []
        for device in self.arena_bytes:
            buffers = self.buffers(device)
            offsets: dict[Hashable, int] = {a.name: a.offset for a in self.allocations.values() if a.device == device}
            assignment = Assignment(offsets=offsets, arena_bytes=self.arena_bytes[device], algorithm=self.algorithm)
            try:
                verify_offsets(buffers, assignment, self.alignment)
            except PlanVerificationError as exc:
                problems.extend(f"{device}: {p}" for p in exc.problems)
        node_device = self.device_graph.node_device
        for value, owner in self.storage_of.items():
            if owner not in self.allocations:
                problems.append(f"value {value!r} maps to storage {owner!r}, which has no allocation")
            elif node_device[value] != self.allocations[owner].device:
                problems.append(
                    f"value {value!r} on {node_device[value]} shares storage {owner!r} on "
                    f"{self.allocations[owner].device}"
                )
        if problems:
            raise PlanVerificationError(problems)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per planned storage."""
        columns = ["name", "device", "arena", "offset", "size", "nbytes", "start", "end", "kind", "aliases"]
        rows = [{**a.to_json(), "aliases": ", ".join(a.aliases)} for a in self.allocations.values()]
        return pd.DataFrame(rows, columns=columns)

    def summary(self) -> pd.DataFrame:
        """Per device: arena, lower bound, ratio, constants, total."""
        rows = []
        for d in self._all_devices():
            arena, lb = self.arena_bytes.get(d, 0), self.lower_bound.get(d, 0)
            rows.append(
                {
                    "device": str(d),
                    "arena_bytes": arena,
                    "lower_bound": lb,
                    "ratio": round(arena / lb, 4) if lb else 1.0,
                    "constant_bytes": self.constant_bytes.get(d, 0),
                    "total_bytes": arena + self.constant_bytes.get(d, 0),
                }
            )
        return pd.DataFrame(rows)

    def with_algorithm(self, algorithm: str) -> "MemoryPlan":
        """The same storages and lifetimes placed by another algorithm (same alignment,
        flags and capacity); lifetimes are reused, not recomputed."""
        _check_algorithm(algorithm)
        lives = [
            TensorLifetime(a.name, a.device, a.nbytes, a.start, a.end, a.kind, a.aliases)
            for a in self.allocations.values()
        ]
        allocations, arena_bytes, lower = _place(lives, algorithm, self.alignment, self.device_graph.devices)
        result = dataclasses.replace(
            self, algorithm=algorithm, allocations=allocations, arena_bytes=arena_bytes, lower_bound=lower
        )
        if self.capacity:
            _check_capacity(result, self.capacity)
        return result

    def to_json(self) -> dict[str, Any]:
        """The plan's own fields as JSON data (the device graph is saved on its own)."""
        return {
            "algorithm": self.algorithm,
            "alignment": self.alignment,
            "steps": list(self.steps),
            "allocations": [a.to_json() for a in self.allocations.values()],
            "storage_of": dict(self.storage_of),
            "unplanned": dict(self.unplanned),
            "arena_bytes": _device_keys(self.arena_bytes),
            "lower_bound": _device_keys(self.lower_bound),
            "constant_bytes": _device_keys(self.constant_bytes),
            "alloc_graph_inputs": self.alloc_graph_inputs,
            "alloc_graph_outputs": self.alloc_graph_outputs,
            "capacity": _device_keys(self.capacity) if self.capacity is not None else None,
        }

    @classmethod
    def from_json(cls, data: Any, device_graph: DeviceGraph, path: str = "plan") -> "MemoryPlan":
        """The plan ``to_json`` wrote, over ``device_graph``; a missing or mistyped field is a
        ``JsonFieldError`` naming it."""
        obj = JsonObject(data, path)
        algorithm = obj.text("algorithm")
        if algorithm not in ALGORITHMS:
            raise obj.fail("algorithm", f"one of {', '.join(ALGORITHMS)}")
        allocations = [TensorAllocation.from_json(a.data, a.path) for a in obj.elements("allocations")]
        capacity = obj.optional_mapping("capacity")
        return cls(
            device_graph=device_graph,
            algorithm=algorithm,
            alignment=obj.count("alignment", positive=True),
            steps=obj.texts("steps"),
            allocations={a.name: a for a in allocations},
            storage_of=obj.text_map("storage_of"),
            unplanned=obj.text_map("unplanned"),
            arena_bytes=obj.count_by_device("arena_bytes"),
            lower_bound=obj.count_by_device("lower_bound"),
            constant_bytes=obj.count_by_device("constant_bytes"),
            alloc_graph_inputs=obj.flag("alloc_graph_inputs"),
            alloc_graph_outputs=obj.flag("alloc_graph_outputs"),
            capacity=obj.count_by_device("capacity") if capacity is not None else None,
        )

    def save(self, path: Union[str, Path]) -> None:
        """Write the captured program, the propagated program and this plan to one file
        (rule 6; ``load_plan`` reads it). The write is atomic: ``path`` is either the
        complete new file or untouched. A graph with ops that update their inputs in
        place is a ``PlanSaveError`` (rule 7). Threads may save at once: the programs are
        serialized one at a time (``program_archive`` rule 6)."""
        dg = self.device_graph
        in_place = sorted({str(n.target) for n in dg.graph.nodes if _updates_inputs(n)})
        if in_place:
            raise PlanSaveError(
                f"cannot save this plan: its graph runs ops that update their inputs in place ({', '.join(in_place)}), "
                "and a plan file holds functional graphs only (torch.export.save); plans whose ops are all "
                "functional (a cache with the static_hot policy, for one) can be saved"
            )
        programs = {
            PROGRAM_MEMBER: program_bytes(dg.program.exported),
            PROPAGATED_MEMBER: program_bytes(dg.exported_program()),
        }
        document = {
            "member_sha256": {name: member_hash(data) for name, data in programs.items()},
            "program": dg.program.to_json(),
            "placement": dg.placement.to_json(),
            "device_graph": dg.to_json(),
            "plan": self.to_json(),
        }
        write_archive(path, {**programs, PLAN_MEMBER: json.dumps(document, indent=1).encode()})


#: Archive members of a saved plan.
PROGRAM_MEMBER = "program.pt2"
PROPAGATED_MEMBER = "propagated.pt2"
PLAN_MEMBER = "plan.json"


def _device_keys(mapping: Mapping[Device, int]) -> dict[str, int]:
    return {str(d): n for d, n in mapping.items()}


def member_hash(data: bytes) -> str:
    """The SHA-256 of an archive member, as ``plan.json`` records it (rule 6)."""
    return hashlib.sha256(data).hexdigest()


def _updates_inputs(node: torch.fx.Node) -> bool:
    """Rule 7: whether ``node`` calls an op whose schema writes one of its arguments."""
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and schema.is_mutable


def plan(
    dg: DeviceGraph,
    algorithm: str = "greedy",
    alignment: int = 16,
    alloc_graph_inputs: Optional[bool] = None,
    alloc_graph_outputs: Optional[bool] = None,
    capacity: Optional[Mapping[DeviceLike, int]] = None,
) -> MemoryPlan:
    """Plan the memory of every device of a propagated graph.

    Args:
        dg: a ``DeviceGraph`` from ``propagate``.
        algorithm: ``naive``, ``greedy``, ``search`` (better), ``best`` … (see ``ALGORITHMS``).
        alignment: byte alignment of every offset and size: a power of two in 1..4096.
        alloc_graph_inputs: plan graph inputs' memory; default: unless propagated with
            ``skip_h2d_for_method_inputs`` (then the caller owns it).
        alloc_graph_outputs: likewise for outputs and ``skip_d2h_for_method_outputs``.
        capacity: ``{"cuda:0": 141 * 2**30, ...}``; exceeding it is a ``CapacityError``.
    """
    if not isinstance(dg, DeviceGraph):
        raise PlanError(f"dg must be a DeviceGraph from workbench.propagate, got {describe(dg)}")
    _check_algorithm(algorithm)
    power_of_two(alignment, "alignment", 1, MAX_ALIGNMENT)
    check_optional_flag(alloc_graph_inputs, "alloc_graph_inputs")
    check_optional_flag(alloc_graph_outputs, "alloc_graph_outputs")
    if alloc_graph_inputs is None:
        alloc_graph_inputs = not dg.skip_h2d_for_method_inputs
    if alloc_graph_outputs is None:
        alloc_graph_outputs = not dg.skip_d2h_for_method_outputs
    caps = _parse_capacity(capacity)
    with gc_paused():
        lifetimes = tensor_lifetimes(dg, alloc_graph_inputs, alloc_graph_outputs)
        allocations, arena_bytes, lower = _place(list(lifetimes.storages.values()), algorithm, alignment, dg.devices)
    result = MemoryPlan(
        device_graph=dg,
        algorithm=algorithm,
        alignment=alignment,
        steps=lifetimes.steps,
        allocations=allocations,
        storage_of=lifetimes.storage_of,
        unplanned=lifetimes.unplanned,
        arena_bytes=arena_bytes,
        lower_bound=lower,
        constant_bytes=dict(dg.constant_bytes),
        alloc_graph_inputs=alloc_graph_inputs,
        alloc_graph_outputs=alloc_graph_outputs,
        capacity=dict(caps) if caps else None,
    )
    if caps:
        _check_capacity(result, caps)
    return result


def _check_algorithm(algorithm: Any) -> None:
    if not isinstance(algorithm, str):
        raise ArgumentTypeError(
            f"algorithm must be the name of a planning algorithm, one of {', '.join(ALGORITHMS)}; got {describe(algorithm)}"
        )
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown planning algorithm {algorithm!r}; valid ones are {', '.join(ALGORITHMS)}")


def _place(
    lives: list[TensorLifetime], algorithm: str, alignment: int, devices: Iterable[Device]
) -> tuple[dict[str, TensorAllocation], dict[Device, int], dict[Device, int]]:
    """Run the algorithm once per device (rule 1); allocations keep ``lives``' order."""
    by_device: dict[Device, list[TensorLifetime]] = {}
    for life in lives:
        by_device.setdefault(life.device, []).append(life)
    allocations: dict[str, TensorAllocation] = {}
    arena_bytes: dict[Device, int] = {}
    lower: dict[Device, int] = {}
    for device in host_first(list(by_device) + list(devices)):
        group = by_device.get(device, [])
        buffers = [Buffer(life.name, life.nbytes, life.start, life.end) for life in group]
        assignment = assign_offsets(buffers, algorithm=algorithm, alignment=alignment)
        arena_bytes[device] = assignment.arena_bytes
        lower[device] = peak_live_bytes(buffers, alignment)
        for life in group:
            allocations[life.name] = TensorAllocation(
                name=life.name,
                device=device,
                arena=0,
                offset=assignment.offsets[life.name],
                size=aligned_size(life.nbytes, alignment),
                nbytes=life.nbytes,
                start=life.start,
                end=life.end,
                kind=life.kind,
                aliases=life.aliases,
            )
    return {life.name: allocations[life.name] for life in lives}, arena_bytes, lower


def _parse_capacity(capacity: Optional[Mapping[DeviceLike, int]]) -> dict[Device, int]:
    if capacity is None:
        return {}
    if not isinstance(capacity, Mapping):
        raise PlanError(f"capacity must be a mapping such as {{'cuda:0': 141 * 2**30}}, got {type(capacity).__name__}")
    caps = {}
    for key, value in capacity.items():
        try:
            device = Device.parse(key)
        except DeviceError as exc:
            raise PlanError(f"bad device in capacity: {exc}") from None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PlanError(f"capacity[{key!r}] must be a non-negative number of bytes, got {value!r}")
        caps[device] = value
    return caps


def _check_capacity(result: MemoryPlan, caps: Mapping[Device, int]) -> None:
    totals = result.total_bytes()
    dg = result.device_graph
    for device, available in caps.items():
        needed = totals.get(device, 0)
        if needed <= available:
            continue
        sizes = [(a.nbytes, f"{a.name} ({a.kind})") for a in result.allocations.values() if a.device == device]
        placeholders = {n.name: n for n in dg.graph.nodes if n.op == "placeholder"}
        for name, held in dg.residency.items():
            if device in held:
                sizes.append((node_nbytes(placeholders[name]), f"{dg.program.constants[name]} (constant)"))
        largest = ", ".join(f"{label} {format_bytes(n, 2)}" for n, label in sorted(sizes, reverse=True)[:5])
        raise CapacityError(
            f"{device} needs {needed} bytes ({format_bytes(needed, 2)}: arena {format_bytes(result.arena_bytes.get(device, 0), 2)} + "
            f"constants {format_bytes(result.constant_bytes.get(device, 0), 2)}) but has {available} bytes "
            f"({format_bytes(available, 2)}); largest tensors: {largest}"
        )
