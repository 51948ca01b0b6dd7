"""Save and load a propagated, planned program: one file, nothing lost.

The file is a zip archive:

- ``format.json``: format name and version (a mismatch is refused, not guessed at);
- ``program.pt2``: the captured program, by ``torch.export.save``;
- ``propagated.pt2``: the propagated graph with its copy nodes, by ``torch.export.save``
  (the ``workbench::`` copy ops are registered on import, so it loads as a normal program);
- ``plan.json``: placement, devices, copies, residency, flags and every allocation.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any, Union

import torch

from ..devices import Device
from ..errors import WorkbenchError

FORMAT = "workbench-plan"
VERSION = 1

__all__ = ["PlanFileError", "load_plan", "save_plan", "FORMAT", "VERSION"]


class PlanFileError(WorkbenchError, ValueError):
    """A plan file that cannot be read: corrupt, of another format, or another version."""


def _export_bytes(ep) -> bytes:
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    return buffer.getvalue()


def save_plan(plan, path: Union[str, Path]) -> None:
    """Write ``plan`` (and the program and graph it was made from) to ``path``."""
    dg = plan.graph
    placement = dg.placement
    document = {
        "program": {"shape_only": dg.program.shape_only},
        "placement": {
            "node_device": {k: str(v) for k, v in placement.node_device.items()},
            "delegates": [
                {"name": d.name, "device": str(d.device), "nodes": list(d.nodes)} for d in placement.delegates
            ],
            "unmatched": list(placement.unmatched),
        },
        "device_graph": {
            "node_device": {k: str(v) for k, v in dg.node_device.items()},
            "copies": [c.to_dict() for c in dg.copies],
            "residency": {k: [str(d) for d in v] for k, v in dg.residency.items()},
            "input_devices": {k: str(v) for k, v in dg.input_devices.items()},
            "user_outputs": list(dg.user_outputs),
            "skip_h2d_for_method_inputs": dg.skip_h2d_for_method_inputs,
            "skip_d2h_for_method_outputs": dg.skip_d2h_for_method_outputs,
        },
        "plan": {
            "algorithm": plan.algorithm,
            "alignment": plan.alignment,
            "steps": list(plan.steps),
            "allocations": [{**a.__dict__, "aliases": list(a.aliases)} for a in plan.allocations.values()],
            "storage_of": dict(plan.storage_of),
            "unplanned": dict(plan.unplanned),
            "arena_bytes": dict(plan.arena_bytes),
            "lower_bound": dict(plan.lower_bound),
            "constant_bytes": dict(plan.constant_bytes),
            "alloc_graph_inputs": plan.alloc_graph_inputs,
            "alloc_graph_outputs": plan.alloc_graph_outputs,
            "capacity": plan._capacity,
        },
    }
    program_bytes = _export_bytes(dg.program.exported)
    propagated_bytes = _export_bytes(dg.exported_program())
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    # write then rename, so a failure never leaves a half-written plan at ``path``
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("format.json", json.dumps({"format": FORMAT, "version": VERSION, "torch": torch.__version__}))
        archive.writestr("program.pt2", program_bytes)
        archive.writestr("propagated.pt2", propagated_bytes)
        archive.writestr("plan.json", json.dumps(document, indent=1))
    tmp.replace(path)


def _read(archive: zipfile.ZipFile, name: str, path: Path) -> bytes:
    try:
        return archive.read(name)
    except KeyError:
        raise PlanFileError(f"{path} is not a complete workbench plan: it has no {name!r}") from None


def load_plan(path: Union[str, Path]):
    """Read a file written by ``MemoryPlan.save``; returns the ``MemoryPlan`` with its
    ``DeviceGraph``, ``Placement`` and ``Program``."""
    path = Path(path)
    if not path.exists():
        raise PlanFileError(f"no plan file at {path}")
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise PlanFileError(f"{path} is not a workbench plan file (not a zip archive; corrupt or another format)") from None
    with archive:
        try:
            header = json.loads(_read(archive, "format.json", path))
            document = json.loads(_read(archive, "plan.json", path))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise PlanFileError(f"{path} is corrupt: {exc}") from None
        if header.get("format") != FORMAT:
            raise PlanFileError(f"{path} has format {header.get('format')!r}, expected {FORMAT!r}")
        if header.get("version") != VERSION:
            raise PlanFileError(
                f"{path} is plan format version {header.get('version')!r}; this workbench reads version "
                f"{VERSION} (written by torch {header.get('torch')}); re-create the plan with this version"
            )
        try:
            original = torch.export.load(io.BytesIO(_read(archive, "program.pt2", path)))
            propagated = torch.export.load(io.BytesIO(_read(archive, "propagated.pt2", path)))
        except PlanFileError:
            raise
        except Exception as exc:
            raise PlanFileError(f"{path}: the saved programs cannot be loaded: {type(exc).__name__}: {exc}") from None
    try:
        return _rebuild(document, original, propagated)
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanFileError(f"{path} is corrupt: plan.json is missing or has a bad field ({type(exc).__name__}: {exc})") from None


def _rebuild(doc: dict, original, propagated) -> Any:
    from ..capture import Program
    from ..place import Delegate, Placement
    from ..propagate import CopyRecord, DeviceGraph
    from .plan import MemoryPlan, TensorAllocation

    program = Program(original, bool(doc["program"]["shape_only"]))
    p = doc["placement"]
    node_device = {k: Device.parse(v) for k, v in p["node_device"].items()}
    delegates = tuple(Delegate(d["name"], Device.parse(d["device"]), tuple(d["nodes"])) for d in p["delegates"])
    placement = Placement(
        program, node_device, delegates, {n: d.name for d in delegates for n in d.nodes}, tuple(p["unmatched"])
    )
    g = doc["device_graph"]
    graph = propagated.graph_module.graph
    names = {n.name for n in graph.nodes}
    missing = sorted(set(g["node_device"]) - names)
    if missing:
        raise ValueError(f"the saved graph lacks nodes named in plan.json: {missing[:5]}")
    copies = tuple(
        CopyRecord(c["name"], c["kind"], c["value"], Device.parse(c["src"]), Device.parse(c["dst"]),
                   int(c["nbytes"]), tuple(c["consumers"]), c["reason"])
        for c in g["copies"]
    )
    dg = DeviceGraph(
        placement=placement,
        graph=graph,
        node_device={k: Device.parse(v) for k, v in g["node_device"].items()},
        copies=copies,
        residency={k: tuple(Device.parse(d) for d in v) for k, v in g["residency"].items()},
        input_devices={k: Device.parse(v) for k, v in g["input_devices"].items()},
        user_outputs=tuple(g["user_outputs"]),
        output_specs=tuple(propagated.graph_signature.output_specs),
        skip_h2d_for_method_inputs=bool(g["skip_h2d_for_method_inputs"]),
        skip_d2h_for_method_outputs=bool(g["skip_d2h_for_method_outputs"]),
        _order={n.name: i for i, n in enumerate(graph.nodes)},
    )
    q = doc["plan"]
    allocations = {
        a["name"]: TensorAllocation(**{**a, "aliases": tuple(a["aliases"])}) for a in q["allocations"]
    }
    if tuple(q["steps"]) != tuple(n.name for n in graph.nodes):
        raise ValueError("the saved steps do not match the saved graph's node order")
    return MemoryPlan(
        graph=dg,
        algorithm=q["algorithm"],
        alignment=int(q["alignment"]),
        steps=tuple(q["steps"]),
        allocations=allocations,
        storage_of=dict(q["storage_of"]),
        unplanned=dict(q["unplanned"]),
        arena_bytes=dict(q["arena_bytes"]),
        lower_bound=dict(q["lower_bound"]),
        constant_bytes=dict(q["constant_bytes"]),
        alloc_graph_inputs=bool(q["alloc_graph_inputs"]),
        alloc_graph_outputs=bool(q["alloc_graph_outputs"]),
        _capacity=q.get("capacity"),
    )
