"""Weight formats: the shipped table, ``quantize``'s rules, and bytes, costs and runs that follow."""

import math
import warnings

import pytest
import torch

import workbench as wb
from tests.conftest import assert_matches_eager
from workbench.models import MoEConfig, QwenMoEDecoder
from workbench.node_facts import StoredFormat, facts_of, facts_to_json, restore_facts
from workbench.place import PlacementError, PlacementWarning
from workbench.planning.memory_plan import plan
from workbench.runtime import estimate
from workbench.machine import op_cost
from workbench.runtime.call import ExecutorError
from workbench.machine.op_cost import Stored
from workbench.moe.strategies import all_on_device, expert_streaming
from workbench.weight_formats import (
    FORMAT_COLUMNS,
    WeightFormatError,
    dequantized,
    weight_format,
    weight_formats,
    weight_formats_table,
)
from workbench.json_fields import JsonFieldError


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = QwenMoEDecoder(MoEConfig.tiny())
    return model, wb.capture(model, model.example_inputs())


# ggml's block sizes in bytes (ggml-common.h static_asserts) over weights per block
BLOCK_BYTES = {"q8_0": (2 + 32, 32), "q6_k": (2 + 16 + 192, 256), "q5_k": (4 + 12 + 128 + 32, 256),
               "q4_k": (4 + 12 + 128, 256), "q4_0": (2 + 16, 32), "q3_k": (2 + 64 + 32 + 12, 256),
               "q2_k": (4 + 16 + 64, 256), "mxfp4": (16 + 1, 32)}  # fmt: skip


def test_table_bits_are_the_block_layouts_divided_out():
    """Every ggml row and MXFP4 equals its block's bytes × 8 / weights per block; NF4 is
    QLoRA's 4 + 8/64 + 32/(64·256); every row has a source and the issue's formats are all there."""
    formats = weight_formats()
    for name, (nbytes, weights) in BLOCK_BYTES.items():
        assert formats[name].bits_per_weight == nbytes * 8 / weights, name
        assert formats[name].block_size == weights, name
    assert formats["nf4"].bits_per_weight == 4 + 8 / 64 + 32 / (64 * 256)
    assert {"bf16", "fp16", "fp8_e4m3", "int3_g64", "int2_g64"} <= set(formats)
    assert all(f.source.strip() for f in formats.values())
    assert weight_format("INT8") is formats["q8_0"] and weight_format("fp8").name == "fp8_e4m3"
    assert formats["q4_k"].nbytes(256) == 144 and formats["q6_k"].nbytes(256) == 210


def test_a_bad_table_or_name_is_refused(tmp_path):
    """A malformed row is named; an unknown format lists the valid ones."""
    path = tmp_path / "f.csv"
    good = ",".join(f'"{v}"' for v in ("a", "", "4", "32", "x", "1", "", "somewhere"))
    path.write_text(",".join(FORMAT_COLUMNS) + "\n" + good + "\n" + good.replace('"4"', '"0"') + "\n")
    with pytest.raises(WeightFormatError, match=r"name 'a' is given twice.*bits_per_weight '0'"):
        weight_formats_table(path)
    with pytest.raises(WeightFormatError, match="not a regular file"):
        weight_formats_table(tmp_path)
    with pytest.raises(WeightFormatError, match=r"unknown weight format 'q9_z'; valid: bf16"):
        weight_format("q9_z")


def test_most_specific_pattern_decides_and_conflicts_are_errors(tiny):
    """A deeper module pattern beats a shallower one and an op pattern; equally specific
    patterns for two formats are an error; a pattern deciding nothing warns (or raises when strict)."""
    _model, program = tiny
    q = wb.quantize(program, {"q4_k": ["module:layers"], "q8_0": ["module:layers.*.mlp.experts"], "nf4": ["aten.embedding"]})
    fqn = program.constants
    formats = {fqn[n]: f.name for n, f in q.stored_formats.items()}
    assert formats["layers.1.mlp.experts.w1"] == "q8_0"
    assert formats["layers.1.linear_attn.in_proj.weight"] == "q4_k"
    assert formats["embed_tokens.weight"] == "nf4" and "lm_head.weight" not in formats
    assert not program.stored_formats  # the input program is unchanged
    with pytest.raises(WeightFormatError, match="equally specific"):
        wb.quantize(program, {"q4_k": ["module:layers.*.mlp"], "q8_0": ["module:layers.?.mlp"]})
    with pytest.warns(PlacementWarning, match="'module:nowhere'"):
        wb.quantize(program, {"q4_k": ["module:layers", "module:nowhere"]})
    with pytest.raises(PlacementError, match="'module:nowhere'"):
        wb.quantize(program, {"q4_k": ["module:nowhere"]}, strict=True)
    with pytest.raises(WeightFormatError, match="unknown prefix 'mod'"):
        wb.quantize(program, {"q4_k": ["mod:layers"]})
    with pytest.raises(WeightFormatError, match="unknown weight format"):
        wb.quantize(program, {"q13": ["*"]})
    with pytest.raises(WeightFormatError, match="non-empty mapping"):
        wb.quantize(program, {})


def _stored_bytes(program, formats):
    """Constant bytes computed from the state dict and the table, independently of the planner."""
    total = 0
    for name in program.constants:
        t = program.constant_tensor_as_captured(name)
        fmt = formats.get(program.constants[name])
        total += math.ceil(t.numel() * fmt.bits_per_weight / 8) if fmt else t.numel() * t.element_size()
    return total


def test_constant_arena_and_copy_bytes_follow_the_format(tiny):
    """Resident constant bytes are numel × bits / 8 per quantized constant; the experts'
    picked rows shrink the arena; a streamed expert copy moves the format's bytes."""
    _model, program = tiny
    rules = {"q4_k": ["module:layers.*.mlp.experts"]}
    q = wb.quantize(program, rules)
    base, quant = plan(all_on_device().apply(program)), plan(all_on_device().apply(q))
    q4k = weight_format("q4_k")
    expected = _stored_bytes(program, {program.constants[n]: q4k for n in q.stored_formats})
    assert quant.constant_bytes[wb.Device.parse("cuda:0")] == expected
    assert quant.arena_bytes[wb.Device.parse("cuda:0")] < base.arena_bytes[wb.Device.parse("cuda:0")]
    streamed = wb.propagate(wb.place(q, {"cuda:0": ["*"]}), stream_constants=["*.mlp.experts.*"])
    plain = wb.propagate(wb.place(program, {"cuda:0": ["*"]}), stream_constants=["*.mlp.experts.*"])
    gathers = [c for c in streamed.copies if c.value in q.stored_formats]
    assert gathers
    before = {c.name: c.nbytes for c in plain.copies}
    for c in gathers:
        node = next(n for n in streamed.graph.nodes if n.name == c.name)
        assert facts_of(node).stored.name == "q4_k"
        assert c.nbytes == math.ceil(before[c.name] // 4 * q4k.bits_per_weight / 8)  # fp32 elements → q4_k


def test_cost_reads_stored_bytes_and_adds_dequant_work():
    """A matmul on a stored weight reads the format's bytes and does its dequant ops per
    weight on top of the matmul FLOPs; a row pick of it moves codes (no dequant work)."""
    x, w = torch.empty(4, 256, device="meta"), torch.empty(512, 256, device="meta")
    plain = op_cost(torch.ops.aten.linear.default, (x, w))
    q4k = weight_format("q4_k")
    spec = (q4k.bits_per_weight, q4k.dequant_ops)
    quant = op_cost(torch.ops.aten.linear.default, (x, w), stored=Stored((None, spec)))
    assert quant.bytes_touched == plain.bytes_touched - w.numel() * 4 + q4k.nbytes(w.numel())
    assert quant.flops == plain.flops + int(w.numel() * q4k.dequant_ops)
    ids = torch.zeros(2, dtype=torch.long, device="meta")
    pick = op_cost(torch.ops.aten.index_select.default, (w, 0, ids), stored=Stored((spec, None), q4k.bits_per_weight))
    assert pick.flops == 0 and pick.bytes_touched == 2 * q4k.nbytes(256) + 16 + 2 * q4k.nbytes(256)


def test_executable_format_runs_equal_to_its_dequantized_reference(tiny):
    """int8 (Q8_0) weights read by linear layers run on sim equal to the eager model given
    their dequantized values, which differ measurably from the original weights."""
    model, program = tiny
    q = wb.quantize(program, {"int8": ["aten.linear"]})
    got = wb.run(plan(all_on_device(skip_copies=False).apply(q)), *model.example_inputs(), backend="sim").outputs
    reference = QwenMoEDecoder(MoEConfig.tiny())
    reference.load_state_dict(model.state_dict())
    reference.load_state_dict(dequantized(q), strict=False)
    with torch.no_grad():
        want, original = reference(*model.example_inputs()), model(*model.example_inputs())
    assert_matches_eager(got, want, "q8_0 run")
    assert not torch.allclose(want[0], original[0], atol=1e-5, rtol=1e-5)  # the quantization is really there


def test_shape_only_formats_refuse_to_run(tiny):
    """A format the executor cannot compute with is planned and estimated, but a run
    refuses it by name; so does an executable format whose rows are picked into an arena."""
    model, program = tiny
    q = wb.quantize(program, {"q4_k": ["aten.linear"]})
    memory = plan(all_on_device(skip_copies=False).apply(q))
    assert estimate(memory).span_us > 0
    with pytest.raises(ExecutorError, match="q4_k.*shape-only"):
        wb.run(memory, *model.example_inputs(), backend="sim")
    picked = plan(all_on_device(skip_copies=False).apply(wb.quantize(program, {"int8": ["module:layers.*.mlp.experts"]})))
    with pytest.raises(ExecutorError, match="pick rows"):
        wb.run(picked, *model.example_inputs(), backend="sim")
    with pytest.raises(WeightFormatError, match="shape-only"):
        weight_format("mxfp4").round_trip(torch.ones(4))


def test_stored_facts_survive_save_and_load(tiny):
    """The stored format of every node is written with the graph's facts and restored; a
    bad entry is a JsonFieldError naming it."""
    _model, program = tiny
    dg = all_on_device().apply(wb.quantize(program, {"mxfp4": ["module:layers.*.mlp.experts"]}))
    data = facts_to_json(dg.graph)
    assert data["stored"] and all(v["format"] == "mxfp4" for v in data["stored"].values())
    fresh = all_on_device().apply(program).graph
    restore_facts(fresh, data)
    assert {n.name: facts_of(n).stored for n in fresh.nodes if facts_of(n).stored} == {
        n.name: StoredFormat("mxfp4", 4.25, weight_format("mxfp4").dequant_ops) for n in dg.graph.nodes if facts_of(n).stored
    }
    name = next(iter(data["stored"]))
    data["stored"][name]["bits_per_weight"] = -1
    with pytest.raises(JsonFieldError, match="bits_per_weight"):
        restore_facts(all_on_device().apply(program).graph, data)


def test_full_size_shape_only_quantized_plan():
    """The published 35B-A3B, shape-only, with Q4_K experts: resident bytes drop by the
    expert bytes × (2 - 4.5/8) from bf16, and a graph-replayed decode step (memory-bound,
    not launch-bound) is modeled faster: fewer bytes read."""
    from workbench.capture import capture
    from workbench.machine import CostModel

    config = MoEConfig.full()
    with torch.device("meta"):
        model = QwenMoEDecoder(config)
        inputs = model.example_inputs()
    program = capture(model, inputs, shape_only=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quant = plan(all_on_device(skip_copies=True).apply(wb.quantize(program, {"q4_k": ["module:layers.*.mlp.experts"]})))
        base = plan(all_on_device(skip_copies=True).apply(program))
    experts = sum(
        program.constant_tensor(n).numel() for n, f in program.constants.items() if ".mlp.experts." in f
    )
    cuda = wb.Device.parse("cuda:0")
    assert base.constant_bytes[cuda] - quant.constant_bytes[cuda] == pytest.approx(experts * (2 - 4.5 / 8), rel=1e-6)
    replay = CostModel.preset("h200").with_launch_mode("graph")
    assert estimate(quant, replay).span_us < estimate(base, replay).span_us
