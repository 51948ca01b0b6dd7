"""Streaming the experts of grouped and batched expert matmuls (propagate rule 10c, d): only
the distinct routed experts cross the link, and the result equals eager."""

import pytest
import torch

import workbench as wb
from toy_experts import WEIGHTS, ToyMoE, distinct_experts, tokens, toy
from workbench import CPU, Device
from workbench.copy_ops import PRESENT_GROUPS, UNIQUE_IDS
from workbench.moe.streaming import GATHER_ROUTED
from workbench.moe.expert_ops import Routing, expected_distinct_experts
from workbench.runtime import stage_inputs, to_host

from conftest import assert_matches_eager

CUDA = Device("cuda", 0)
FORMS = [("grouped", torch.bfloat16), ("batched", torch.float32), ("batched", torch.bfloat16)]


def _streamed(form, n_tokens, dtype, skip=True, device="cuda:0"):
    model, inputs, prog = toy(form, n_tokens, dtype)
    dg = wb.propagate(wb.place(prog, lambda n: device), skip, skip, stream_constants=WEIGHTS)
    return model, inputs, prog, dg


def _run(dg, inputs):
    plan = wb.plan(dg)
    plan.verify()
    result = wb.run(plan, *stage_inputs(dg, inputs, "sim"), backend="sim")
    return result, to_host(result.outputs)


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("form, dtype", FORMS)
def test_streamed_expert_matmul_equals_eager(form, dtype, skip):
    """Planned execution on sim equals the eager layer (within the suite's tolerance: arena
    addresses may change a CPU kernel's rounding) and the propagated graph run as plain
    PyTorch equals it exactly (padding groups are empty; repeated rows are taken on the
    device), with the skip flags on and off."""
    model, inputs, _prog, dg = _streamed(form, 6, dtype, skip)
    want = model(*inputs)
    _result, got = _run(dg, inputs)
    assert_matches_eager(got, want)
    assert torch.equal(dg.module()(*inputs), want)


@pytest.mark.parametrize("form, dtype", FORMS)
def test_only_routed_copies_of_the_streamed_weights(form, dtype):
    """Every copy of a streamed weight is one routed copy per weight, of U = min(E, T x k)
    slots, reading its ids and count on the device; the weights stay resident on the host
    only, and no copy moves a whole stack."""
    model, _inputs, prog, dg = _streamed(form, 6, dtype)
    streamed = {name for name, fqn in prog.constants.items() if fqn in WEIGHTS}
    weight_copies = [c for c in dg.copies if c.value in streamed]
    assert sorted(prog.constants[c.value] for c in weight_copies) == sorted(WEIGHTS)
    nodes = {n.name: n for n in dg.graph.nodes}
    producer = PRESENT_GROUPS if form == "grouped" else UNIQUE_IDS
    for c in weight_copies:
        assert c.role is wb.CopyRole.ROUTED and nodes[c.name].target is GATHER_ROUTED
        assert c.slots == min(model.num_experts, 6 * model.top_k) == 8
        assert c.routing == Routing(experts=8, tokens=6, top_k=2)
        assert c.nbytes == c.slots * prog.constant_tensor(c.value)[0].numel() * dtype.itemsize
        assert nodes[c.index].args[0].target is producer and nodes[c.count].args[0] is nodes[c.index].args[0]
        assert dg.node_device[c.index] == dg.node_device[c.count] == CUDA
        assert "only those rows cross the link" in c.reason
    for name in streamed:
        assert dg.residency[name] == (CPU,)


@pytest.mark.parametrize("form, dtype", FORMS)
def test_run_moves_each_distinct_expert_once(form, dtype):
    """With 6 tokens x top-2 the router picks some experts for several tokens: each routed
    copy moves exactly the distinct experts' slabs (fewer than its slots), its timeline
    event carries those bytes, and the h2d total is theirs."""
    model, inputs, prog, dg = _streamed(form, 6, dtype)
    distinct = distinct_experts(model, inputs[0])
    assert distinct < 6 * model.top_k  # duplicates: the dedup matters
    result, _got = _run(dg, inputs)
    assert [r.rows for r in result.routed] == [distinct, distinct]
    slabs = {c.name: prog.constant_tensor(c.value)[0].numel() * dtype.itemsize for c in dg.copies if c.is_gather}
    for stat in result.routed:
        assert stat.row_bytes == slabs[stat.node] and stat.link_bytes == distinct * stat.row_bytes
        events = [e for e in result.timeline.events if e.node == stat.node]
        assert len(events) == 1 and events[0].nbytes == stat.link_bytes
    assert result.copy_bytes_by_kind()["h2d"] == sum(r.link_bytes for r in result.routed)


def test_one_token_routes_exactly_k_experts():
    """Decode (one token): the slots are k, every one real."""
    model, inputs, _prog, dg = _streamed("batched", 1, torch.float32)
    result, got = _run(dg, inputs)
    assert_matches_eager(got, model(*inputs))
    assert [(r.slots, r.rows) for r in result.routed] == [(2, 2), (2, 2)]


def test_estimate_charges_the_expected_distinct_experts():
    """Shape-only estimate charges each routed copy E(1 - (1 - k/E)^T) slabs (uniform
    routing), never more than its slots; a run charges what the router chose."""
    _model, _inputs, prog, dg = _streamed("grouped", 6, torch.bfloat16)
    timeline = wb.estimate(wb.plan(dg))
    expected = expected_distinct_experts(8, 6, 2)
    assert expected == pytest.approx(8 * (1 - 0.75**6))
    for c in dg.copies:
        if c.role is wb.CopyRole.ROUTED:
            (event,) = [e for e in timeline.events if e.node == c.name]
            assert event.nbytes == round(expected * c.nbytes / c.slots)
            assert c.expected_nbytes() == pytest.approx(expected * c.nbytes / c.slots)


def test_expected_distinct_experts():
    """One token gives exactly k experts; many tokens approach E; bad figures are refused."""
    assert expected_distinct_experts(256, 1, 8) == pytest.approx(8)
    assert expected_distinct_experts(8, 1000, 2) == pytest.approx(8)
    assert 8 < expected_distinct_experts(256, 2, 8) < 16
    with pytest.raises(wb.WorkbenchError, match="top_k"):
        expected_distinct_experts(4, 1, 8)
    with pytest.raises(wb.WorkbenchError, match="tokens"):
        expected_distinct_experts(4, 0, 2)


def test_grouped_op_on_the_host_is_not_rewritten():
    """On the host a streamed weight is just a host weight: the grouped matmul reads it in
    place, and nothing is copied."""
    model, inputs, prog = toy("grouped", 6, torch.bfloat16)
    dg = wb.propagate(wb.place(prog, {}), stream_constants=WEIGHTS)
    assert not dg.copies
    _result, got = _run(dg, inputs)
    assert_matches_eager(got, model(*inputs))


class _SharedView(ToyMoE):
    """The down projection's transposed view is also read by an op that is not an expert matmul."""

    def forward(self, x):
        return super().forward(x) + self.experts.down_proj.transpose(-2, -1).sum()


def test_view_read_elsewhere_is_copied_whole_and_the_matmul_still_routed():
    """A view of a streamed weight that another op reads is computed over the whole weight
    (copied whole, as any other use); the expert matmul still reads only its routed rows."""
    model = _SharedView("grouped", dtype=torch.bfloat16).eval()
    inputs = (tokens(6, dtype=torch.bfloat16),)
    prog = wb.capture(model, inputs)
    dg = wb.propagate(wb.place(prog, lambda n: "cuda:0"), True, True, stream_constants=WEIGHTS)
    roles = sorted(str(c.role) for c in dg.copies)
    assert roles == ["plain", "routed", "routed"]
    (whole,) = [c for c in dg.copies if c.role is wb.CopyRole.PLAIN]
    assert prog.constants[whole.value] == "experts.down_proj" and "streamed host weight" in whole.reason
    _result, got = _run(dg, inputs)
    assert_matches_eager(got, model(*inputs))


def test_routed_copies_survive_a_plan_file(tmp_path):
    """A saved plan with routed copies loads with the same copy table (count, routing,
    slots) and runs the same."""
    model, inputs, _prog, dg = _streamed("batched", 6, torch.float32)
    plan = wb.plan(dg)
    path = tmp_path / "routed.wbplan"
    plan.save(path)
    loaded = wb.load_plan(path)
    assert loaded.device_graph.copies == dg.copies
    result = wb.run(loaded, *stage_inputs(loaded.device_graph, inputs, "sim"), backend="sim")
    assert_matches_eager(result.outputs, model(*inputs))


def test_copy_record_json_round_trip_and_old_records():
    """A routed record survives to_json/from_json; a record written before routed copies
    existed (no count, routing or slots) still reads, as a record without them."""
    _model, _inputs, _prog, dg = _streamed("grouped", 6, torch.bfloat16)
    for c in dg.copies:
        assert wb.CopyRecord.from_json(c.to_json()) == c
    old = {k: v for k, v in dg.copies[0].to_json().items() if k not in ("count", "routing", "slots")}
    old.update(role="gather", index="some_ids")
    record = wb.CopyRecord.from_json(old)
    assert record.count is None and record.routing is None and record.slots == 0
    bad = dict(dg.copies[0].to_json(), routing={"experts": 8, "tokens": 0, "top_k": 2})
    with pytest.raises(wb.WorkbenchError, match="routing"):
        wb.CopyRecord.from_json(bad)


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("slots", 4, "slots is 4"),
        ("count", None, "says it copies"),
        ("routing", {"experts": 8, "tokens": 5, "top_k": 2}, "routing is"),
        ("role", "gather", "role is gather"),
    ],
)
def test_a_hand_edited_routed_copy_is_refused(tmp_path, field, value, says):
    """A plan file whose routed copy says other slots, no count, another router or another
    role than its graph node is refused on load, naming the field."""
    import json
    import zipfile

    _model, _inputs, _prog, dg = _streamed("batched", 6, torch.float32)
    path = tmp_path / "routed.wbplan"
    wb.plan(dg).save(path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    document = json.loads(members["plan.json"])
    copies = document["device_graph"]["copies"]
    routed = next(c for c in copies if c["role"] == "routed")
    routed[field] = value
    members["plan.json"] = json.dumps(document).encode()
    edited = tmp_path / "edited.wbplan"
    with zipfile.ZipFile(edited, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    with pytest.raises(wb.PlanFileError, match=rf"device_graph\.copies\[\d+\].*{says}"):
        wb.load_plan(edited)


@pytest.mark.parametrize("form, dtype", FORMS)
def test_rewritten_nodes_keep_the_model_source_of_the_op_they_compute_for(form, dtype):
    """Every node the rewrite adds (distinct ids, the routed copy, replayed views, offsets)
    carries a captured op's module and source stack, so views group it with that op and an
    error in it names the model line; a captured op keeps its own; plain copies between
    devices carry no source."""
    _model, _inputs, prog, dg = _streamed(form, 6, dtype)
    captured = {n.name: n for n in prog.graph.nodes if n.op == "call_function"}
    stacks = {n.meta["stack_trace"] for n in captured.values()}
    plain = {c.name for c in dg.copies if c.role is wb.CopyRole.PLAIN}
    added = 0
    for node in dg.graph.nodes:
        if node.op != "call_function" or node.name in plain:
            continue
        if node.name in captured:
            assert node.meta.get("stack_trace") == captured[node.name].meta["stack_trace"]
        else:
            added += 1
            assert node.meta.get("stack_trace") in stacks and node.meta.get("nn_module_stack"), node.name
    assert added >= 3  # ids, count and the routed copy at least
    for name in plain:
        assert not next(n for n in dg.graph.nodes if n.name == name).meta.get("stack_trace")
