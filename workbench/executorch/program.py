"""An ExecuTorch program as the workbench's plain data: tensors, calls, copies, buffers, devices.

``reader.read_program`` builds an ``ExecuTorchProgram`` from ExecuTorch's own schema; the
rules of what each field means are there. This module holds the data and what is derived
from it: copies by kind and bytes, bytes per device, lifetimes, lower bounds, tables.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Optional

import pandas as pd
import torch

from ..devices import CPU, CopyKind, Device, host_first
from ..planning import Buffer, lower_bound

__all__ = ["COPY_OPS", "TARGET_DEVICE_KEY", "ExecuTorchProgram", "ProgramCall", "ProgramTensor", "TensorList"]

#: The CompileSpec key ExecuTorch's device propagation reads a delegate's device from.
TARGET_DEVICE_KEY = "target_device"

#: ExecuTorch's copy operators (``Operator.name``) and the copy kind of each.
COPY_OPS: Mapping[str, CopyKind] = {"et_copy::_h2d_copy": CopyKind.H2D, "et_copy::_d2h_copy": CopyKind.D2H}


@dataclass(frozen=True)
class ProgramTensor:
    """One tensor value of the method: its shape, where it lives, and its planned memory."""

    index: int  # index of the value in the method's value table
    name: str  # the workbench's name: its writer's, "input_<i>" or "constant_<i>"
    shape: tuple[int, ...]
    dtype: torch.dtype
    nbytes: int
    device: Device  # rule 4
    role: str  # "input" | "constant" | "activation" (a call writes it) | "view" | "state" | "unused"
    memory_id: Optional[int]  # its planned buffer (an index of buffer_sizes); None if unplanned
    offset: Optional[int]  # byte offset in that buffer; None if unplanned
    view_of: Optional[int] = None  # a view: the value index of its base (rule 2)


@dataclass(frozen=True)
class TensorList:
    """A list-of-tensors argument: the value indices of its tensors (-1 for a missing optional)."""

    items: tuple[int, ...]


@dataclass(frozen=True)
class ProgramCall:
    """One instruction of the method: a kernel, a delegate call or a copy (rule 3)."""

    index: int  # position in the chain's instruction list
    name: str  # unique among calls and tensors
    kind: str  # "kernel" | "delegate" | "copy"
    op: str  # "aten::addmm.out", "et_copy::_h2d_copy.out", or the delegate's backend id
    device: Device  # where it runs (rule 4)
    arguments: tuple[int, ...]  # every argument, as value indices, as the instruction lists them
    reads: tuple[int, ...]  # tensor values it reads (rule 2), in argument order
    writes: tuple[int, ...]  # tensor values it writes, in argument order
    backend: Optional[str] = None  # delegate: the backend id
    delegate_index: Optional[int] = None  # delegate: index into the method's delegates
    compile_specs: tuple[tuple[str, bytes], ...] = ()  # delegate: its compile specs
    copy_kind: Optional[CopyKind] = None  # copy: h2d | d2h


@dataclass(frozen=True)
class ExecuTorchProgram:
    """One method of an ExecuTorch program, as plain data (see the module's rules)."""

    method: str
    tensors: Mapping[int, ProgramTensor]  # value index → tensor, in index order
    scalars: Mapping[int, Any]  # value index → a non-tensor argument (int, float, list, TensorList, None)
    calls: tuple[ProgramCall, ...]  # in execution order
    inputs: tuple[int, ...]  # value indices of the method's inputs
    outputs: tuple[int, ...]  # value indices of the method's outputs
    buffer_sizes: tuple[int, ...]  # non_const_buffer_sizes, index 0 reserved (rule 6)
    buffer_devices: tuple[Device, ...]  # the device of each buffer index
    schema_version: int  # the program's ``version`` field

    def tensor(self, index: int) -> ProgramTensor:
        """The tensor value ``index``."""
        return self.tensors[index]

    def storage(self, index: int) -> int:
        """The value owning the memory of ``index``: itself, or the base of a view (rule 2)."""
        while self.tensors[index].view_of is not None:
            index = int(self.tensors[index].view_of)  # type: ignore[arg-type]
        return index

    def lifetimes(self) -> dict[int, tuple[int, int]]:
        """Every planned storage → the calls it is live over, ``(first, last)`` inclusive.

        A storage is live from the call that writes it (call 0 for method inputs and
        state) to the last call that reads it or a view of it; method outputs stay live
        to the last call, and a tensor nothing reads lives during its own call only.
        """
        last_call = max(len(self.calls) - 1, 0)
        span: dict[int, tuple[int, int]] = {}

        def touch(index: int, at: int) -> None:
            owner = self.storage(index)
            if self.tensors[owner].memory_id is None:
                return
            first, last = span.get(owner, (at, at))
            span[owner] = (min(first, at), max(last, at))

        for t in self.tensors.values():
            if t.role in ("input", "state") and t.memory_id is not None:
                touch(t.index, 0)
        for k, call in enumerate(self.calls):
            for index in (*call.reads, *call.writes):
                touch(index, k)
        for index in self.outputs:
            if index in self.tensors:
                touch(index, last_call)
        return span

    def lower_bound(self, alignment: int) -> dict[Device, int]:
        """Per device: the most bytes (each tensor rounded up to ``alignment``) live at once
        in its planned buffers — no memory plan of these tensors can be smaller."""
        by_device: dict[Device, list[Buffer]] = {}
        for owner, (first, last) in self.lifetimes().items():
            t = self.tensors[owner]
            by_device.setdefault(t.device, []).append(Buffer(t.name, t.nbytes, first, last))
        return {device: lower_bound(buffers, alignment) for device, buffers in by_device.items()}

    @property
    def copies(self) -> tuple[ProgramCall, ...]:
        """Every ``et_copy`` call, in execution order."""
        return tuple(c for c in self.calls if c.kind == "copy")

    @property
    def delegate_calls(self) -> tuple[ProgramCall, ...]:
        """Every delegate call, in execution order."""
        return tuple(c for c in self.calls if c.kind == "delegate")

    @property
    def devices(self) -> tuple[Device, ...]:
        """Every device a tensor, a buffer or a call is on, host first."""
        found = {t.device for t in self.tensors.values()} | set(self.buffer_devices) | {c.device for c in self.calls}
        return tuple(host_first(found | {CPU}))

    def copy_nbytes(self, call: ProgramCall) -> int:
        """Bytes a copy moves: those of the tensor it writes (rule 5)."""
        return sum(self.tensors[i].nbytes for i in call.writes)

    def copy_source(self, call: ProgramCall) -> Device:
        """The device a copy reads from."""
        return self.tensors[call.reads[0]].device if call.reads else CPU

    def copy_counts(self) -> dict[CopyKind, int]:
        """ExecuTorch's copies per call, by kind (every kind present; ExecuTorch has no d2d)."""
        counts = dict.fromkeys(CopyKind, 0)
        for c in self.copies:
            counts[CopyKind(c.copy_kind)] += 1
        return counts

    def copy_bytes(self) -> dict[CopyKind, int]:
        """Bytes ExecuTorch's copies move per call, by kind (every kind present)."""
        moved = dict.fromkeys(CopyKind, 0)
        for c in self.copies:
            moved[CopyKind(c.copy_kind)] += self.copy_nbytes(c)
        return moved

    @property
    def arena_bytes(self) -> dict[Device, int]:
        """Planned bytes per device: the sum of its buffers' sizes (index 0 left out)."""
        out: dict[Device, int] = {}
        for size, device in list(zip(self.buffer_sizes, self.buffer_devices))[1:]:
            out[device] = out.get(device, 0) + size
        return out

    @property
    def constant_bytes(self) -> dict[Device, int]:
        """Bytes of the program's constants per device."""
        out: dict[Device, int] = {}
        for t in self.tensors.values():
            if t.role == "constant":
                out[t.device] = out.get(t.device, 0) + t.nbytes
        return out

    def tensors_dataframe(self) -> pd.DataFrame:
        """One row per tensor value: name, role, shape, dtype, bytes, device, buffer, offset."""
        columns = [
            "value",
            "name",
            "role",
            "shape",
            "dtype",
            "nbytes",
            "device",
            "buffer",
            "offset",
        ]
        rows = [
            (t.index, t.name, t.role, t.shape, str(t.dtype).removeprefix("torch."), t.nbytes, str(t.device),
             t.memory_id, t.offset)
            for t in self.tensors.values()
        ]  # fmt: skip
        return pd.DataFrame(rows, columns=columns).astype({"buffer": "Int64", "offset": "Int64"})

    def calls_dataframe(self) -> pd.DataFrame:
        """One row per call: index, name, kind, op, device, what it reads and writes."""
        columns = [
            "index",
            "name",
            "kind",
            "op",
            "device",
            "reads",
            "writes",
            "compile_specs",
        ]
        rows = [
            (c.index, c.name, c.kind, c.op, str(c.device), ", ".join(self.tensors[i].name for i in c.reads),
             ", ".join(self.tensors[i].name for i in c.writes), _specs_text(c.compile_specs))
            for c in self.calls
        ]  # fmt: skip
        return pd.DataFrame(rows, columns=columns)

    def copies_dataframe(self) -> pd.DataFrame:
        """One row per ``et_copy``: name, kind, the value copied, source and target devices, bytes."""
        columns = ["name", "kind", "value", "src", "dst", "nbytes"]
        rows = [
            (c.name, str(c.copy_kind), self.tensors[c.reads[0]].name if c.reads else "", str(self.copy_source(c)),
             str(c.device), self.copy_nbytes(c))
            for c in self.copies
        ]  # fmt: skip
        return pd.DataFrame(rows, columns=columns)

    def buffers_dataframe(self) -> pd.DataFrame:
        """One row per planned buffer (index 0 left out): its device, size and tensor count."""
        count = Counter(t.memory_id for t in self.tensors.values() if t.memory_id is not None)
        rows = [
            (i, str(self.buffer_devices[i]), self.buffer_sizes[i], count.get(i, 0))
            for i in range(1, len(self.buffer_sizes))
        ]
        return pd.DataFrame(rows, columns=["buffer", "device", "size", "tensors"])


def _specs_text(specs: tuple[tuple[str, bytes], ...]) -> str:
    return ", ".join(f"{key}={value.decode('utf-8', 'replace')}" for key, value in specs)
