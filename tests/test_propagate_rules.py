"""Device propagation: one test per rule of workbench/propagate.py."""

import pytest
import torch

import workbench as wb
from workbench import CPU, Device
from workbench.copy_ops import is_copy_node
from workbench.models.examples import example

from conftest import assert_no_cross_device_reads, captured

CUDA0, CUDA1 = Device("cuda", 0), Device("cuda", 1)


def _dg(name, rules, **flags):
    _, _, prog = captured(name)
    return wb.propagate(wb.place(prog, rules), **flags)


def _node(dg, name):
    return next(n for n in dg.graph.nodes if n.name == name)


def _copies_of(dg, value):
    return [c for c in dg.copies if c.value == value]


def test_rule1_no_rules_no_copies():
    """Rule 1: with nothing placed on a device, everything is on cpu and nothing is copied."""
    dg = _dg("residual", {})
    assert dg.copies == ()
    assert set(dg.node_device.values()) == {CPU}


def test_rule2_values_live_where_produced():
    """Rule 2: every op's value is on its placed device; copy outputs are on their target."""
    dg = _dg("residual", {"cuda:0": ["aten.linear", "aten.gelu"]})
    placed = dg.placement.op_device
    for node in dg.graph.nodes:
        if node.op != "call_function":
            continue
        if is_copy_node(node):
            assert dg.node_device[node.name] == Device.parse(node.args[2])
        elif node.name in placed:
            assert dg.node_device[node.name] == placed[node.name]


def test_rule3_every_crossing_reads_through_a_copy_of_the_right_kind():
    """Rule 3: no op reads a tensor that lives on another device; copies have the kind
    their endpoints imply, and d2d goes directly between devices (no host hop)."""
    dg = _dg("residual", {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu"]})
    kinds = {c.kind for c in dg.copies}
    assert kinds == {"h2d", "d2h", "d2d"}
    for c in dg.copies:
        expected = "h2d" if c.src.is_host else ("d2h" if c.dst.is_host else "d2d")
        assert c.kind == expected
    assert_no_cross_device_reads(dg)
    for c in dg.copies:
        if c.kind == "d2d":
            assert _node(dg, c.name).args[0].name == c.value  # read straight from the device value


def test_rule4_one_copy_per_value_and_device():
    """Rule 4: a value read by several consumers on one device is copied once, shared."""
    dg = _dg("fanout", {"cuda:0": ["aten.linear"]})
    copies = _copies_of(dg, "mul")
    assert len(copies) == 1 and copies[0].kind == "h2d"
    assert set(copies[0].consumers) == {"linear", "linear_1"}
    keys = [(c.value, c.dst) for c in dg.copies]
    assert len(keys) == len(set(keys))


def test_rule4_no_round_trips():
    """Rule 4: consecutive delegates on one device exchange values directly; no copy
    ever brings a value back to the device it came from."""
    dg = _dg("residual", {"cuda:0": ["aten.linear", "aten.gelu", "aten.add"]})
    for c in dg.copies:
        source = _node(dg, c.name).args[0]
        if is_copy_node(source):
            assert Device.parse(source.args[1]) != c.dst
    # residual stream x: the layer_norm on cpu needs it on cpu; the add on cuda:0 needs it there
    assert [c.kind for c in _copies_of(dg, "add")] == ["d2h"]


def test_rule5_skip_h2d_with_several_users():
    """Rule 5: with skip-h2d an input read by several ops on one device is supplied there,
    with no copy — the case ExecuTorch refuses."""
    dg = _dg("fanout", {"cuda:0": ["aten.mul", "aten.add"]}, skip_h2d_for_method_inputs=True)
    assert dg.input_devices == {"x": CUDA0, "y": CUDA0}
    assert not any(c.value in ("x", "y") for c in dg.copies)
    dg_off = _dg("fanout", {"cuda:0": ["aten.mul", "aten.add"]})
    assert dg_off.input_devices == {"x": CPU, "y": CPU}
    assert {c.value for c in dg_off.copies if c.kind == "h2d"} >= {"x", "y"}


def test_rule5_host_consumers_of_a_device_input_share_one_d2h():
    """Rule 5: an input supplied on a device but also read on the host gets one d2h."""
    model, inputs = example("residual")
    prog = wb.capture(model, inputs)
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.add"]}), skip_h2d_for_method_inputs=True)
    assert dg.input_devices["x"] == CUDA0
    copies = _copies_of(dg, "x")
    assert [c.kind for c in copies] == ["d2h"]
    assert copies[0].consumers == ("layer_norm",)


def test_rule5_input_read_on_two_devices():
    """Rule 5: consumers on two devices: the device with most consumers gets the input,
    the other reads it through one direct d2d copy."""
    dg = _dg("fanout", {"cuda:0": ["aten.mul"], "cuda:1": ["aten.sum"]}, skip_h2d_for_method_inputs=True)
    # x and y each have one consumer (mul on cuda:0)
    assert dg.input_devices == {"x": CUDA0, "y": CUDA0}
    model, inputs = example("residual")
    prog = wb.capture(model, inputs)
    # x feeds layer_norm (cuda:1) and add (cuda:0) — a tie, broken by device order
    dg = wb.propagate(
        wb.place(prog, {"cuda:0": ["aten.add"], "cuda:1": ["aten.layer_norm"]}),
        skip_h2d_for_method_inputs=True,
    )
    assert dg.input_devices["x"] == CUDA0
    assert [(c.kind, c.dst) for c in _copies_of(dg, "x")] == [("d2d", CUDA1)]


def test_rule6_outputs_come_back_unless_skip_d2h():
    """Rule 6: a device output gets one d2h; with skip-d2h it is returned on its device."""
    rules = {"cuda:0": ["aten.linear", "aten.relu"]}
    dg = _dg("mlp", rules)
    assert dg.output_devices == (CPU,)
    assert [(c.kind, c.consumers) for c in _copies_of(dg, "linear_2")] == [("d2h", ("output",))]
    dg = _dg("mlp", rules, skip_d2h_for_method_outputs=True)
    assert dg.output_devices == (CUDA0,)
    assert _copies_of(dg, "linear_2") == []


def test_rule6_output_and_host_consumer_share_the_d2h():
    """Rule 6 with rule 4: a device value that is both returned and read on the host is
    copied back once."""

    class ReturnAndReduce(torch.nn.Module):
        def forward(self, x):
            y = x * 2.0
            return y, y.sum()

    prog = wb.capture(ReturnAndReduce(), (torch.randn(3, 4),))
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.mul"]}))
    copies = _copies_of(dg, "mul")
    assert len(copies) == 1 and copies[0].kind == "d2h"
    assert set(copies[0].consumers) == {"sum_1", "output"}
    assert dg.user_outputs[0] == copies[0].name


def test_rule7_parameters_are_resident_never_copied():
    """Rule 7: parameters read on a device are resident there, never copied per call,
    and counted once per device that holds them."""
    dg = _dg("mlp", {"cuda:0": ["aten.linear"]})
    assert not any(c.value.startswith("p_") for c in dg.copies)
    weight = 32 * 32 * 4 + 32 * 4
    assert dg.constant_bytes == {"cpu": 0, "cuda:0": 3 * weight}
    assert all(held == (CUDA0,) for held in dg.residency.values())


def test_rule7_parameter_used_on_two_devices_is_resident_on_both():
    """Rule 7: one resident copy per device that uses the parameter."""

    class Shared(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 8))

        def forward(self, x):
            return torch.relu(x @ self.w) + torch.sigmoid(x @ self.w)

    prog = wb.capture(Shared(), (torch.randn(2, 8),))
    placed = wb.place(prog, lambda n: "cuda:0" if n.name == "matmul" else ("cuda:1" if n.name == "matmul_1" else None))
    dg = wb.propagate(placed)
    assert dg.residency["p_w"] == (CUDA0, CUDA1)
    assert dg.constant_bytes["cuda:0"] == dg.constant_bytes["cuda:1"] == 8 * 8 * 4
    assert not _copies_of(dg, "p_w")


def test_rule7_views_of_weights_are_recomputed_not_copied():
    """Rule 7: permute(weight) left on the host but read on a device is recomputed on the
    device (the weight is resident there), not copied every call."""
    model, inputs = example("mlp")
    prog = wb.capture(model, inputs, decompose=True)
    dg = wb.propagate(wb.place(prog, {"cuda:0": ["aten.addmm"]}))
    assert not any(c.value.startswith("permute") or c.value.startswith("p_") for c in dg.copies)
    for node in dg.graph.nodes:
        if node.op == "call_function" and "permute" in node.name:
            assert dg.node_device[node.name] == CUDA0
    assert dg.constant_bytes["cpu"] == 0
    assert torch.allclose(dg.module()(*inputs), model(*inputs))


def test_rule8_copies_are_torch_library_ops_and_the_graph_runs():
    """Rule 8: copy nodes call workbench:: ops; the graph runs as plain PyTorch and
    survives torch.export save/load with its copies."""
    model, inputs = example("residual")
    dg = _dg("residual", {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu"]})
    targets = {str(n.target) for n in dg.graph.nodes if is_copy_node(n)}
    assert targets == {"workbench.h2d_copy.default", "workbench.d2h_copy.default", "workbench.d2d_copy.default"}
    expected = model(*inputs)
    assert torch.allclose(dg.module()(*inputs), expected, atol=1e-6)
    ep = dg.exported_program()
    assert sum(1 for n in ep.graph.nodes if is_copy_node(n)) == len(dg.copies)
    assert torch.allclose(ep.module()(*inputs), expected, atol=1e-6)


def test_rule8_exported_program_round_trips_through_a_file(tmp_path):
    """Rule 8: torch.export.save/load keeps every copy node and its devices."""
    model, inputs = example("fanout")
    dg = _dg("fanout", {"cuda:0": ["aten.linear"]}, skip_d2h_for_method_outputs=True)
    path = tmp_path / "dg.pt2"
    torch.export.save(dg.exported_program(), path)
    loaded = torch.export.load(path)
    copies = [(n.name, str(n.target), n.args[1], n.args[2]) for n in loaded.graph.nodes if is_copy_node(n)]
    assert copies == [(c.name, f"workbench.{c.kind}_copy.default", str(c.src), str(c.dst)) for c in dg.copies]
    for got, want in zip(loaded.module()(*inputs), model(*inputs)):
        assert torch.allclose(got, want, atol=1e-6)


def test_rule9_every_copy_says_why():
    """Rule 9: a copy's consumers are exactly the nodes that read it, and its reason names
    them, the value and both devices."""
    dg = _dg("residual", {"cuda:0": ["aten.linear"], "cuda:1": ["aten.gelu"]})
    for c in dg.copies:
        node = _node(dg, c.name)
        readers = sorted(u.name for u in node.users)
        assert sorted(set(c.consumers)) == readers
        for name in c.consumers:
            assert name.replace("output", "graph output") in c.reason
        assert repr(c.value) in c.reason and str(c.src) in c.reason and str(c.dst) in c.reason


def test_copy_bytes_and_counts():
    """Copy sizes are the value's bytes; counts and bytes sum per kind."""
    dg = _dg("fanout", {"cuda:0": ["aten.linear"]})
    for c in dg.copies:
        assert c.nbytes == 4 * 16 * 4
    assert sum(dg.copy_counts().values()) == len(dg.copies)
    assert sum(dg.copy_bytes().values()) == sum(c.nbytes for c in dg.copies)
    df = dg.copies_dataframe()
    assert list(df.name) == [c.name for c in dg.copies]


def test_shape_only_propagation_counts_bytes_without_data():
    """Shape-only programs propagate with the same copies and byte counts as real ones."""
    model, inputs = example("residual")
    rules = {"cuda:0": ["aten.linear"]}
    real = wb.propagate(wb.place(wb.capture(model, inputs), rules))
    meta = wb.propagate(wb.place(wb.capture(model, inputs, shape_only=True), rules))
    assert [(c.name, c.kind, c.nbytes) for c in real.copies] == [(c.name, c.kind, c.nbytes) for c in meta.copies]
    assert real.constant_bytes == meta.constant_bytes


def test_propagate_rejects_non_placement():
    """propagate needs a Placement."""
    model, inputs = example("mlp")
    with pytest.raises(wb.PropagationError, match="Placement"):
        wb.propagate(wb.capture(model, inputs))


def test_original_program_is_untouched():
    """Propagation works on a copy: the captured graph has no copy nodes afterwards."""
    model, inputs = example("fanout")
    prog = wb.capture(model, inputs)
    before = str(prog.graph)
    wb.propagate(wb.place(prog, {"cuda:0": ["aten.linear"]}))
    assert str(prog.graph) == before
