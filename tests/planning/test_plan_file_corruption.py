"""Damaged and hand-edited plan files: each either loads and runs equal to eager PyTorch, or
is refused with a ``PlanFileError`` — never a wrong result, never another exception."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import workbench as wb
from workbench.runtime import stage_inputs

from conftest import assert_matches_eager, captured

RULES = {"cuda:0": ["aten.linear", "aten.softmax"], "cuda:1": ["aten.topk", "aten.div"]}
OTHER_RULES = {"cuda:0": ["aten.*"]}


def _save(plan: wb.MemoryPlan, path: Path) -> dict[str, bytes]:
    plan.save(path)
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A plan of the attention example over two devices (copies of every kind, a
    multi-output op, views), its members, and a plan of the same program placed otherwise."""
    model, inputs, program = captured("attention")
    folder = tmp_path_factory.mktemp("corrupt")
    plan = wb.plan(wb.propagate(wb.place(program, RULES), True, False), "best")
    members = _save(plan, folder / "good.wbplan")
    other = _save(wb.plan(wb.propagate(wb.place(program, OTHER_RULES))), folder / "other.wbplan")
    with torch.no_grad():
        eager = model(*inputs)
    return members, other, inputs, eager


def _write(path: Path, members: dict[str, bytes]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def _leaves(value, path=()):
    """Every (path, value) of a JSON document, containers included."""
    yield path, value
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _leaves(inner, path + (key,))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            yield from _leaves(inner, path + (i,))


def _set(document, path, value):
    target = document
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        if isinstance(target, dict):
            del target[path[-1]]
        else:
            target.pop(path[-1])
    else:
        target[path[-1]] = value


_DELETE = object()


def _replacements(old):
    """Values a careless or hostile edit puts in place of ``old``: nearby numbers, other
    names and devices, other types, or nothing."""
    names = st.sampled_from(["cpu", "cuda:0", "cuda:1", "cuda:7", "tpu", "linear", "x", "output", "getitem", "", "h2d", "d2h", "reuse"])
    anything = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**40), st.floats(allow_nan=False), names, st.just([]), st.just({}))
    if isinstance(old, bool):
        return st.one_of(st.just(not old), anything)
    if isinstance(old, int):
        return st.one_of(st.integers(max(0, old - 64), old + 64), st.just(old * 2), st.just(0), anything)
    if isinstance(old, str):
        return st.one_of(names, st.just(old + "_x"), anything)
    return anything


@st.composite
def corruptions(draw, members: dict[str, bytes], other: dict[str, bytes]):
    """A damaged copy of ``members`` and what was done to it."""
    kind = draw(st.sampled_from(["flip", "truncate", "edit", "delete", "swap", "foreign"]))
    out = dict(members)
    if kind == "edit" or kind == "delete":
        document = json.loads(members["plan.json"])
        paths = [p for p, _ in _leaves(document) if p]
        path = draw(st.sampled_from(paths))
        old = next(v for p, v in _leaves(document) if p == path)
        _set(document, path, _DELETE if kind == "delete" else draw(_replacements(old)))
        out["plan.json"] = json.dumps(document).encode()
        return out, f"{kind} {path}"
    if kind == "swap":
        a, b = draw(st.permutations(sorted(members)))[:2]
        out[a], out[b] = members[b], members[a]
        return out, f"swap {a} {b}"
    if kind == "foreign":
        name = draw(st.sampled_from(sorted(members)))
        out[name] = other[name]
        return out, f"{name} of another plan"
    return out, kind


def _damaged_file(path: Path, members: dict[str, bytes], kind: str, data) -> None:
    """Flip a byte of, or truncate, the archive written from ``members``."""
    _write(path, members)
    raw = bytearray(path.read_bytes())
    if kind == "flip":
        at = data.draw(st.integers(0, len(raw) - 1), label="byte")
        raw[at] ^= data.draw(st.integers(1, 255), label="mask")
    else:
        raw = raw[: data.draw(st.integers(0, len(raw) - 1), label="length")]
    path.write_bytes(bytes(raw))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_a_corrupt_plan_is_refused_or_runs_equal_to_eager(saved, tmp_path, data):
    """Flipped bytes, truncation, edited or deleted JSON fields, swapped members, members
    of another plan: ``load_plan`` raises ``PlanFileError``, or the plan runs and its
    outputs equal eager PyTorch's."""
    members, other, inputs, eager = saved
    damaged, what = data.draw(corruptions(members, other), label="corruption")
    path = tmp_path / "damaged.wbplan"
    if what in ("flip", "truncate"):
        _damaged_file(path, damaged, what, data)
    else:
        _write(path, damaged)
    try:
        plan = wb.load_plan(path)
    except wb.PlanFileError:
        event(f"refused: {what.split()[0]}")
        return
    event(f"loaded and ran: {what.split()[0]}")
    got = wb.run(plan, *stage_inputs(plan.device_graph, inputs, "sim"), backend="sim").outputs
    assert_matches_eager(got, eager, what)


def test_every_offset_zero_is_refused(saved, tmp_path):
    """The hand edit of the issue: every offset set to 0 loads no more (it ran and gave
    wrong outputs before load checked plans)."""
    members, *_ = saved
    document = json.loads(members["plan.json"])
    for allocation in document["plan"]["allocations"]:
        allocation["offset"] = 0
    path = tmp_path / "zero.wbplan"
    _write(path, {**members, "plan.json": json.dumps(document).encode()})
    with pytest.raises(wb.PlanFileError, match=r"plan\.(arena_bytes|allocations)"):
        wb.load_plan(path)


_OTHER_KIND = {"h2d": "d2h", "d2h": "h2d", "d2d": "h2d"}


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda d: d["plan"]["arena_bytes"].update({"cuda:0": 16}), r"plan\.arena_bytes\['cuda:0'\]"),
        (lambda d: d["plan"]["allocations"][0].update({"offset": "0"}), r"plan\.allocations\[0\]\.offset"),
        (lambda d: d["device_graph"]["node_device"].update({"linear": "cuda:5"}), r"node_device\['linear'\]"),
        (lambda d: d["plan"].update({"alignment": 2**40}), r"plan\.alignment"),
        (lambda d: d["device_graph"]["copies"][0].update({"kind": _OTHER_KIND[d["device_graph"]["copies"][0]["kind"]]}), r"device_graph\.copies\[0\]"),
        (lambda d: d["device_graph"].update({"skip_h2d_for_method_inputs": "false"}), "skip_h2d_for_method_inputs"),
        (lambda d: d["member_sha256"].update({"program.pt2": "0" * 64}), r"program\.pt2"),
        (lambda d: d.update({"placement": []}), "placement"),
    ],
    ids=["arena-size", "string-offset", "absent-device", "huge-alignment", "copy-kind", "string-flag", "hash", "placement-list"],
)
def test_each_hand_edit_of_the_issue_names_its_field(saved, tmp_path, edit, field):
    """A wrong arena size, a string offset, a node moved to an absent device, a huge
    alignment, a copy of the wrong kind, a flag as a string, a wrong program hash, a
    section of the wrong type: each is a PlanFileError naming the field."""
    members, *_ = saved
    document = json.loads(members["plan.json"])
    edit(document)
    path = tmp_path / "edited.wbplan"
    _write(path, {**members, "plan.json": json.dumps(document).encode()})
    with pytest.raises(wb.PlanFileError, match=field):
        wb.load_plan(path)


def test_a_program_swapped_for_another_models_is_refused(saved, tmp_path):
    """The captured program of another model (the MLP) in place of this plan's: its hash
    does not match, so it is refused before anything is loaded from it."""
    members, *_ = saved
    _, _, mlp = captured("mlp")
    mlp_members = _save(wb.plan(wb.propagate(wb.place(mlp, {}))), tmp_path / "mlp.wbplan")
    path = tmp_path / "swapped.wbplan"
    _write(path, {**members, "program.pt2": mlp_members["program.pt2"]})
    with pytest.raises(wb.PlanFileError, match="program.pt2 is not the program this plan was made for"):
        wb.load_plan(path)


def test_a_plan_of_real_weights_marked_shape_only_is_refused(saved, tmp_path):
    """A plan whose program has real weights but whose JSON says shape_only (an edit the
    hashes of the archives do not cover) loads no more: it would refuse to run, or a
    shape-only plan would claim weights it has not."""
    members, *_ = saved
    document = json.loads(members["plan.json"])
    document["program"]["shape_only"] = True
    path = tmp_path / "shape_only.wbplan"
    _write(path, {**members, "plan.json": json.dumps(document).encode()})
    with pytest.raises(wb.PlanFileError, match=r"shape_only"):
        wb.load_plan(path)
