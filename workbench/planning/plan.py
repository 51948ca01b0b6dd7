"""``plan``: per-device memory plans for a propagated graph.

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
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Mapping, Optional

import pandas as pd

from .._tensors import node_nbytes
from .._units import format_bytes
from ..devices import Device, DeviceError
from .algorithms import ALGORITHMS, Assignment, assign_offsets
from .buffers import Buffer, aligned_size, check_alignment
from .lifetimes import TensorLifetime, tensor_lifetimes
from .lower_bound import lower_bound as _lower_bound
from .verify import PlanVerificationError, verify as _verify
from ..errors import WorkbenchError

__all__ = ["CapacityError", "MemoryPlan", "PlanError", "TensorAllocation", "plan"]


class PlanError(WorkbenchError, ValueError):
    """The graph cannot be planned as asked."""


class CapacityError(PlanError):
    """A device's planned memory does not fit its capacity."""


@dataclass(frozen=True)
class TensorAllocation:
    """Where one storage lives: device, arena, offset, size and lifetime."""

    name: str  # the value that owns the storage
    device: str  # "cpu" | "cuda:0" ...
    arena: int  # arena index on the device
    offset: int  # byte offset in the arena
    size: int  # aligned bytes reserved
    nbytes: int  # bytes of the tensor
    start: int  # first step live (index into MemoryPlan.steps)
    end: int  # last step live, inclusive
    kind: str  # "input" | "output" | "activation" | "copy"
    aliases: tuple[str, ...]  # views / in-place results sharing this storage


@dataclass(frozen=True, eq=False)
class MemoryPlan:
    """A memory plan: every planned storage placed in its device's arena."""

    graph: "object"  # the DeviceGraph that was planned
    algorithm: str
    alignment: int
    steps: tuple[str, ...]  # node names in execution order
    allocations: Mapping[str, TensorAllocation]  # storage name → allocation
    storage_of: Mapping[str, str]  # every planned tensor value → its storage
    unplanned: Mapping[str, str]  # tensor values without planned memory → why
    arena_bytes: Mapping[str, int]  # device → arena size
    lower_bound: Mapping[str, int]  # device → peak of live aligned bytes
    constant_bytes: Mapping[str, int]  # device → resident constants
    alloc_graph_inputs: bool
    alloc_graph_outputs: bool
    _capacity: Optional[Mapping[str, int]] = field(default=None, repr=False)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(self.arena_bytes)

    def total_bytes(self) -> dict[str, int]:
        """Arena plus resident constants, per device."""
        return {d: self.arena_bytes.get(d, 0) + self.constant_bytes.get(d, 0) for d in self._all_devices()}

    def _all_devices(self) -> list[str]:
        return list(dict.fromkeys(list(self.arena_bytes) + list(self.constant_bytes)))

    def ratio_to_lower_bound(self) -> dict[str, float]:
        """arena / lower bound per device (1.0 is optimal)."""
        return {d: (self.arena_bytes[d] / lb if lb else 1.0) for d, lb in self.lower_bound.items()}

    def buffers(self, device: str) -> list[Buffer]:
        """The planning input of one device's arena."""
        return [
            Buffer(a.name, a.nbytes, a.start, a.end) for a in self.allocations.values() if a.device == device
        ]

    def verify(self) -> None:
        """Check the plan independently of the algorithm that made it; raises
        ``PlanVerificationError`` listing every problem (overlaps in time and bytes,
        misalignment, tensors outside their arena, aliases across devices)."""
        problems: list[str] = []
        for device in self.arena_bytes:
            buffers = self.buffers(device)
            offsets = {a.name: a.offset for a in self.allocations.values() if a.device == device}
            assignment = Assignment(offsets=offsets, arena_bytes=self.arena_bytes[device], algorithm=self.algorithm)
            try:
                _verify(buffers, assignment, self.alignment)
            except PlanVerificationError as exc:
                problems.extend(f"{device}: {p}" for p in exc.problems)
        node_device = self.graph.node_device
        for value, owner in self.storage_of.items():
            if owner not in self.allocations:
                problems.append(f"value {value!r} maps to storage {owner!r}, which has no allocation")
            elif str(node_device[value]) != self.allocations[owner].device:
                problems.append(
                    f"value {value!r} on {node_device[value]} shares storage {owner!r} on "
                    f"{self.allocations[owner].device}"
                )
        if problems:
            raise PlanVerificationError(problems)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per planned storage."""
        columns = ["name", "device", "arena", "offset", "size", "nbytes", "start", "end", "kind", "aliases"]
        rows = [
            {**a.__dict__, "aliases": ", ".join(a.aliases)} for a in self.allocations.values()
        ]
        return pd.DataFrame(rows, columns=columns)

    def summary(self) -> pd.DataFrame:
        """Per device: arena, lower bound, ratio, constants, total."""
        rows = []
        for d in self._all_devices():
            arena, lb = self.arena_bytes.get(d, 0), self.lower_bound.get(d, 0)
            rows.append(
                {
                    "device": d,
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
        if algorithm not in ALGORITHMS:
            raise PlanError(f"unknown planning algorithm {algorithm!r}; valid ones are {', '.join(ALGORITHMS)}")
        lives = [
            TensorLifetime(a.name, Device.parse(a.device), a.nbytes, a.start, a.end, a.kind, a.aliases)
            for a in self.allocations.values()
        ]
        allocations, arena_bytes, lower = _place(lives, algorithm, self.alignment, self.graph)
        result = dataclasses.replace(
            self, algorithm=algorithm, allocations=allocations, arena_bytes=arena_bytes, lower_bound=lower
        )
        if self._capacity:
            _check_capacity(result, self._capacity)
        return result

    def save(self, path) -> None:
        """Write the propagated program and this plan to one file (``load_plan`` reads it)."""
        from .serialize import save_plan

        save_plan(self, path)


def plan(
    dg,
    algorithm: str = "greedy",
    alignment: int = 16,
    alloc_graph_inputs: Optional[bool] = None,
    alloc_graph_outputs: Optional[bool] = None,
    capacity: Optional[Mapping[str, int]] = None,
) -> MemoryPlan:
    """Plan the memory of every device of a propagated graph.

    Args:
        dg: a ``DeviceGraph`` from ``propagate``.
        algorithm: ``naive``, ``greedy``, ``search`` (better), ``best`` … (see ``ALGORITHMS``).
        alignment: byte alignment of every offset and size (a power of two).
        alloc_graph_inputs: plan graph inputs' memory; default: unless propagated with
            ``skip_h2d_for_method_inputs`` (then the caller owns it).
        alloc_graph_outputs: likewise for outputs and ``skip_d2h_for_method_outputs``.
        capacity: ``{"cuda:0": 141 * 2**30, ...}``; exceeding it is a ``CapacityError``.
    """
    from ..propagate import DeviceGraph

    if not isinstance(dg, DeviceGraph):
        raise PlanError(f"plan expects a DeviceGraph from workbench.propagate, got {type(dg).__name__}")
    if algorithm not in ALGORITHMS:
        raise PlanError(f"unknown planning algorithm {algorithm!r}; valid ones are {', '.join(ALGORITHMS)}")
    alignment = check_alignment(alignment)
    if alloc_graph_inputs is None:
        alloc_graph_inputs = not dg.skip_h2d_for_method_inputs
    if alloc_graph_outputs is None:
        alloc_graph_outputs = not dg.skip_d2h_for_method_outputs
    caps = _parse_capacity(capacity)
    lifetimes = tensor_lifetimes(dg, bool(alloc_graph_inputs), bool(alloc_graph_outputs))
    allocations, arena_bytes, lower = _place(list(lifetimes.storages.values()), algorithm, alignment, dg)
    result = MemoryPlan(
        graph=dg,
        algorithm=algorithm,
        alignment=alignment,
        steps=lifetimes.steps,
        allocations=allocations,
        storage_of=lifetimes.storage_of,
        unplanned=lifetimes.unplanned,
        arena_bytes=arena_bytes,
        lower_bound=lower,
        constant_bytes=dict(dg.constant_bytes),
        alloc_graph_inputs=bool(alloc_graph_inputs),
        alloc_graph_outputs=bool(alloc_graph_outputs),
        _capacity=dict(caps) if caps else None,
    )
    if caps:
        _check_capacity(result, caps)
    return result


def _device_order(devices) -> list[Device]:
    return sorted(set(devices), key=lambda d: (not d.is_host, d))


def _place(lives: list[TensorLifetime], algorithm: str, alignment: int, dg):
    """Run the algorithm once per device (rule 1); allocations keep ``lives``' order."""
    by_device: dict[Device, list[TensorLifetime]] = {}
    for life in lives:
        by_device.setdefault(life.device, []).append(life)
    allocations: dict[str, TensorAllocation] = {}
    arena_bytes: dict[str, int] = {}
    lower: dict[str, int] = {}
    for device in _device_order(list(by_device) + list(dg.devices)):
        group = by_device.get(device, [])
        buffers = [Buffer(life.name, life.nbytes, life.start, life.end) for life in group]
        assignment = assign_offsets(buffers, algorithm=algorithm, alignment=alignment)
        key = str(device)
        arena_bytes[key] = assignment.arena_bytes
        lower[key] = _lower_bound(buffers, alignment)
        for life in group:
            allocations[life.name] = TensorAllocation(
                name=life.name,
                device=key,
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


def _parse_capacity(capacity: Optional[Mapping[str, int]]) -> dict[str, int]:
    if capacity is None:
        return {}
    if not hasattr(capacity, "items"):
        raise PlanError(f"capacity must be a mapping such as {{'cuda:0': 141 * 2**30}}, got {type(capacity).__name__}")
    caps = {}
    for key, value in capacity.items():
        try:
            device = str(Device.parse(key))
        except DeviceError as exc:
            raise PlanError(f"bad device in capacity: {exc}") from None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise PlanError(f"capacity[{key!r}] must be a non-negative number of bytes, got {value!r}")
        caps[device] = value
    return caps


def _check_capacity(result: MemoryPlan, caps: Mapping[str, int]) -> None:
    totals = result.total_bytes()
    dg = result.graph
    for device, available in caps.items():
        needed = totals.get(device, 0)
        if needed <= available:
            continue
        sizes = [(a.nbytes, f"{a.name} ({a.kind})") for a in result.allocations.values() if a.device == device]
        placeholders = {n.name: n for n in dg.graph.nodes if n.op == "placeholder"}
        for name, held in dg.residency.items():
            if any(str(d) == device for d in held):
                sizes.append((node_nbytes(placeholders[name]), f"{dg.program.constants[name]} (constant)"))
        largest = ", ".join(f"{label} {format_bytes(n, 2)}" for n, label in sorted(sizes, reverse=True)[:5])
        raise CapacityError(
            f"{device} needs {needed} bytes ({format_bytes(needed, 2)}: arena {format_bytes(result.arena_bytes.get(device, 0), 2)} + "
            f"constants {format_bytes(result.constant_bytes.get(device, 0), 2)}) but has {available} bytes "
            f"({format_bytes(available, 2)}); largest tensors: {largest}"
        )
