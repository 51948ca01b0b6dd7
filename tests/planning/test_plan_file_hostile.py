"""Hostile plan files: a plan file is data. Loading a crafted one never runs code from it
(no unrestricted unpickling, no ``eval`` of size expressions, no call of an arbitrary
function), never blocks on a non-regular file, and is refused with a ``PlanFileError``.
Each test plants the hostile member with a matching SHA-256 in ``plan.json``, since the
hashes live in the same archive and detect damage, not an attacker."""

from __future__ import annotations

import io
import json
import os
import pickle
import zipfile
from pathlib import Path
from typing import Optional

import pytest

import workbench as wb
from workbench.planning.memory_plan import member_hash

from conftest import captured

RULES = {"cuda:0": ["aten.linear", "aten.softmax"], "cuda:1": ["aten.topk", "aten.div"]}


class _Planted:
    """Unpickling this creates the marker file: proof that the loader ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    _, _, program = captured("attention")
    path = tmp_path_factory.mktemp("hostile") / "good.wbplan"
    wb.plan(wb.propagate(wb.place(program, RULES), True, False)).save(path)
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def _rewrite_program(program: bytes, replace) -> bytes:
    """``program`` (a ``torch.export.save`` zip) with each member's bytes passed through
    ``replace(name, data)`` (None drops the member)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(program)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = replace(info.filename, source.read(info.filename))
            if data is not None:
                target.writestr(info.filename, data)
    return out.getvalue()


def _plant(members: dict[str, bytes], path: Path, program: bytes) -> Path:
    """A plan file whose ``program.pt2`` is ``program``, with its SHA-256 recorded."""
    document = json.loads(members["plan.json"])
    document["member_sha256"]["program.pt2"] = member_hash(program)
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            if name == "program.pt2":
                data = program
            elif name == "plan.json":
                data = json.dumps(document).encode()
            archive.writestr(name, data)
    return path


def _refused(members: dict[str, bytes], tmp_path: Path, program: bytes, marker: Optional[Path] = None) -> str:
    """Plant ``program`` in a plan file, check ``load_plan`` refuses it with a ``PlanFileError``
    and that the planted code (which would create ``marker``) never ran; the error's text."""
    path = _plant(members, tmp_path / "evil.wbplan", program)
    with pytest.raises(wb.PlanFileError) as refused:
        wb.load_plan(path)
    if marker is not None:
        assert not marker.exists(), "loading the plan file ran the planted code"
    return str(refused.value)


def test_pickled_sample_inputs_never_run(saved, tmp_path):
    """The issue's attack: sample inputs replaced by a pickle whose ``__reduce__`` calls
    ``os.system``. torch's restricted unpickler refuses it and torch would retry without
    restriction; the loader refuses the file first, and the command never runs."""
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Planted(marker))
    program = _rewrite_program(
        saved["program.pt2"], lambda name, data: payload if name.endswith("data/sample_inputs/model.pt") else data
    )
    message = _refused(saved, tmp_path, program, marker)
    assert "sample_inputs" in message and "not plain tensor data" in message


def test_pickled_weight_never_runs(saved, tmp_path):
    """A weight marked ``use_pickle`` (torch unpickles those without restriction) is refused
    and its payload never unpickled."""
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Planted(marker))

    def replace(name, data):
        if name.endswith("model_weights_config.json"):
            config = json.loads(data)
            first = next(iter(config["config"].values()))
            first["use_pickle"] = True
            return json.dumps(config).encode()
        if name.endswith("data/weights/weight_0"):
            return payload
        return data

    message = _refused(saved, tmp_path, _rewrite_program(saved["program.pt2"], replace), marker)
    assert "stored by pickle" in message


def test_size_expression_is_never_evaluated(saved, tmp_path):
    """A size expression is parsed by sympy's ``eval``; one holding code is refused before
    torch sees it."""
    marker = tmp_path / "ran"
    code = f"__import__('os').system('touch {marker}')"

    def replace(name, data):
        if name.endswith("models/model.json"):
            text = data.decode()
            # the first static size becomes an expression of code
            text = text.replace('{"as_int": 48}', json.dumps({"as_expr": {"expr_str": code, "hint": None}}), 1)
            return text.encode()
        return data

    message = _refused(saved, tmp_path, _rewrite_program(saved["program.pt2"], replace), marker)
    assert "size expression" in message


def test_arbitrary_call_target_is_refused(saved, tmp_path):
    """A node whose target names an arbitrary torch attribute (here ``torch.load``) is refused:
    only operators may run."""

    def replace(name, data):
        if name.endswith("models/model.json"):
            document = json.loads(data)
            for node in document["graph_module"]["graph"]["nodes"]:
                if node["target"].startswith("torch.ops.aten.linear"):
                    node["target"] = "torch.load"
                    break
            return json.dumps(document).encode()
        return data

    _refused(saved, tmp_path, _rewrite_program(saved["program.pt2"], replace))


def test_compiled_code_member_is_refused(saved, tmp_path):
    """A program carrying a compiled (AOTInductor) member is refused: loading it would load a
    shared library."""
    program = saved["program.pt2"]
    with zipfile.ZipFile(io.BytesIO(program)) as source:
        root = source.namelist()[0].split("/")[0]
    out = io.BytesIO(program)
    with zipfile.ZipFile(out, "a") as archive:
        archive.writestr(f"{root}/data/aotinductor/model/model.so", b"\x7fELF")
    assert "compiled code" in _refused(saved, tmp_path, out.getvalue())


def test_unmodified_plan_still_loads(saved, tmp_path):
    """The checks refuse nothing a plan file written by ``MemoryPlan.save`` holds."""
    path = _plant(saved, tmp_path / "good.wbplan", saved["program.pt2"])
    assert wb.load_plan(path).steps


def test_a_decompression_bomb_member_is_refused_while_inflating(saved, tmp_path):
    """A member that inflates to 128 MiB from a file of a few hundred KiB is refused once it
    passes the cap (the inflated size is counted, not the declared one)."""
    bomb = b" " * (128 << 20)
    path = tmp_path / "bomb.wbplan"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in saved.items():
            archive.writestr(name, bomb if name == "plan.json" else data)
    assert path.stat().st_size < 2 << 20
    with pytest.raises(wb.PlanFileError, match="inflates to more than"):
        wb.load_plan(path)


def test_flipped_bytes_are_plan_file_errors(saved, tmp_path):
    """Flipping any one byte of a saved plan gives a PlanFileError or a plan that loads;
    never a raw zlib, zip or other error."""
    good = tmp_path / "good.wbplan"
    with zipfile.ZipFile(good, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in saved.items():
            archive.writestr(name, data)
    data = good.read_bytes()
    others = []
    for i in range(0, len(data), max(1, len(data) // 150)):
        damaged = bytearray(data)
        damaged[i] ^= 0x55
        path = tmp_path / "flipped.wbplan"
        path.write_bytes(bytes(damaged))
        try:
            wb.load_plan(path)
        except wb.PlanFileError:
            pass
        except Exception as exc:  # noqa: BLE001 - collected for the assertion
            others.append((i, type(exc).__name__, str(exc)[:80]))
    assert not others, others[:5]


def test_guard_code_is_refused(saved, tmp_path):
    """Guard code in a saved program is Python that ``ExportedProgram.module()`` executes;
    a plan file holding any is refused (the workbench's captures leave it empty)."""

    def replace(name, data):
        if name.endswith("models/model.json"):
            document = json.loads(data)
            document["guards_code"] = ["__import__('os').system('true') == 0"]
            return json.dumps(document).encode()
        return data

    assert "guard code" in _refused(saved, tmp_path, _rewrite_program(saved["program.pt2"], replace))
