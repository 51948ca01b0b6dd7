"""What an ExecuTorch program spends that the workbench's rules avoid, found in its plain data.

``find_patterns(program)`` lists every occurrence, each with the calls and tensors it
concerns, its device, the copies it adds per call and its bytes, and one sentence in
plain words. ``workbench.compare.with_executorch`` puts them next to the workbench's plan.

Rules (each ``et_copy`` call falls under at most one copy pattern, tried in this order):
1. ``through_host`` — an h2d copy that reads a d2h copy's result coming from another
   device: the value crossed device → host → device. The d2h is part of the pattern when
   only such h2d copies read its result (otherwise the host needed it anyway).
2. ``weight_copy`` — an h2d copy of a constant, or of a value computed from constants
   only (a transposed weight): a parameter copied to the device on every call.
3. ``per_edge_copy`` — an h2d copy of a value already copied to the same device by an
   earlier call: ExecuTorch copies once per delegate argument, not once per device.
4. ``materialised_view`` — a kernel that writes a view op's result into new memory
   (``permute_copy`` …); ``of a weight`` when its input comes from constants only.
5. ``unread_output`` — a tensor a call writes that nothing reads and the method does not
   return (a multi-output op's extra results).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..devices import CopyKind, Device
from .operators import is_view_copy
from .program import ExecuTorchProgram, ProgramCall

__all__ = ["PATTERNS", "Pattern", "find_patterns"]

#: Each pattern's key and its name in plain words.
PATTERNS: Mapping[str, str] = {
    "through_host": "copies through the host",
    "weight_copy": "parameters copied to a device",
    "per_edge_copy": "per-edge copies",
    "materialised_view": "materialised views",
    "unread_output": "unread outputs",
}


@dataclass(frozen=True)
class Pattern:
    """One occurrence of a pattern (see the module's rules)."""

    key: str  # a key of PATTERNS
    calls: tuple[str, ...]  # names of the calls it concerns, in execution order
    tensors: tuple[str, ...]  # names of the tensors it plans
    device: Device  # where its tensors live (a copy's destination)
    copies: Mapping[CopyKind, int]  # copies it adds per call, by kind ({} for memory patterns)
    nbytes: int  # bytes of its tensors (for copies: bytes moved per call)
    detail: str  # one sentence in plain words


def find_patterns(program: ExecuTorchProgram) -> tuple[Pattern, ...]:
    """Every pattern occurrence in ``program``, copies first, then memory (rules 1-5)."""
    derived = _constant_derived(program)
    writer = {index: call for call in program.calls for index in call.writes}
    readers: dict[int, list[ProgramCall]] = {}
    for call in program.calls:
        for index in call.reads:
            readers.setdefault(program.storage(index), []).append(call)
    found: list[Pattern] = []
    seen: set[tuple[int, Device]] = set()
    for call in program.copies:
        if call.copy_kind != "h2d" or not call.reads:
            continue
        source = program.storage(call.reads[0])
        upstream = writer.get(source)
        key = (source, call.device)
        if upstream is not None and upstream.copy_kind == "d2h" and program.copy_source(upstream) != call.device:
            found.append(_through_host(program, upstream, call, readers.get(source, [])))
        elif source in derived:
            found.append(_copy_pattern(program, "weight_copy", call, _weight_detail(program, call, source)))
        elif key in seen:
            found.append(
                _copy_pattern(
                    program,
                    "per_edge_copy",
                    call,
                    _per_edge_detail(program, call, source),
                )
            )
        seen.add(key)
    for call in program.calls:
        op = call.op.split("::")[-1].split(".")[0]
        if call.kind == "kernel" and is_view_copy(op):
            found.append(
                _view_pattern(
                    program,
                    call,
                    op,
                    all(program.storage(i) in derived for i in call.reads),
                )
            )
    found.extend(_unread_outputs(program, readers))
    return tuple(found)


def _constant_derived(program: ExecuTorchProgram) -> set[int]:
    """Constants, and every value computed from constants only (rule 2)."""
    derived = {t.index for t in program.tensors.values() if t.role == "constant"}
    for call in program.calls:
        if call.kind == "kernel" and call.reads and all(program.storage(i) in derived for i in call.reads):
            derived.update(call.writes)
    return derived


def _copy_pattern(program: ExecuTorchProgram, key: str, call: ProgramCall, detail: str) -> Pattern:
    nbytes = program.copy_nbytes(call)
    names = tuple(program.tensors[i].name for i in call.writes)
    return Pattern(key, (call.name,), names, call.device, {CopyKind.H2D: 1}, nbytes, detail)


def _through_host(
    program: ExecuTorchProgram,
    d2h: ProgramCall,
    h2d: ProgramCall,
    host_readers: list[ProgramCall],
) -> Pattern:
    """Rule 1: the h2d, and the d2h when nothing but such h2d copies reads its result."""
    value = program.tensors[program.storage(d2h.reads[0])].name if d2h.reads else d2h.name
    src = program.copy_source(d2h)
    only_copies = all(r.copy_kind == "h2d" and r.device != src for r in host_readers)
    # the d2h is counted with the first h2d that reads it, so it is counted once
    first = next((r for r in host_readers if r.copy_kind == "h2d"), h2d) is h2d
    with_d2h = only_copies and first
    calls = (d2h.name, h2d.name) if with_d2h else (h2d.name,)
    copies = {CopyKind.D2H: 1, CopyKind.H2D: 1} if with_d2h else {CopyKind.H2D: 1}
    nbytes = program.copy_nbytes(h2d) * (2 if with_d2h else 1)
    tensors = tuple(program.tensors[i].name for c in ((d2h, h2d) if with_d2h else (h2d,)) for i in c.writes)
    detail = (
        f"{value} goes {src} → cpu → {h2d.device} ({' + '.join(calls)}); the workbench copies it directly with one d2d"
    )
    return Pattern("through_host", calls, tensors, h2d.device, copies, nbytes, detail)


def _weight_detail(program: ExecuTorchProgram, call: ProgramCall, source: int) -> str:
    what = program.tensors[source]
    kind = "the weight" if what.role == "constant" else "a value computed from weights only,"
    return (
        f"{call.name} copies {kind} {what.name} ({program.copy_nbytes(call):,} B) to {call.device} on every "
        "call; the workbench keeps parameters resident on the device that uses them (loaded once)"
    )


def _per_edge_detail(program: ExecuTorchProgram, call: ProgramCall, source: int) -> str:
    return (
        f"{call.name} copies {program.tensors[source].name} to {call.device} again, for another delegate "
        "argument; the workbench copies a value once per device and its consumers there share it"
    )


def _view_pattern(program: ExecuTorchProgram, call: ProgramCall, op: str, of_weight: bool) -> Pattern:
    written = [program.tensors[i] for i in call.writes]
    nbytes = sum(t.nbytes for t in written)
    device = written[0].device if written else call.device
    what = "of a weight " if of_weight else ""
    tail = (
        "the workbench reads the view of the resident weight in place" if of_weight else
        "the workbench's views share their base's storage"
    )  # fmt: skip
    detail = f"{call.name} ({op}) writes a view {what}into {nbytes:,} B of new memory on {device}; {tail}"
    return Pattern(
        "materialised_view",
        (call.name,),
        tuple(t.name for t in written),
        device,
        {},
        nbytes,
        detail,
    )


def _unread_outputs(program: ExecuTorchProgram, readers: Mapping[int, list[ProgramCall]]) -> list[Pattern]:
    """Rule 5."""
    returned = {program.storage(i) for i in program.outputs if i in program.tensors}
    viewed = {program.storage(t.index) for t in program.tensors.values() if t.view_of is not None}
    found = []
    for call in program.calls:
        for index in call.writes:
            t = program.tensors[index]
            if index in readers or index in returned or index in viewed or t.memory_id is None:
                continue
            detail = (
                f"{call.name} writes {t.name} ({t.nbytes:,} B on {t.device}), which nothing reads; the "
                "workbench plans no memory for an output nothing uses"
            )
            found.append(
                Pattern(
                    "unread_output",
                    (call.name,),
                    (t.name,),
                    t.device,
                    {},
                    t.nbytes,
                    detail,
                )
            )
    return found
