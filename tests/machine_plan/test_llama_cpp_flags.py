"""llama.cpp's placement flags mean what llama.cpp makes of them, checked on the tensor
names of GGUF files: ``--n-cpu-moe N`` moves the first N layers' expert tensors, an
emitted ``-ot`` rule moves exactly the same tensors, the first matching override wins."""

import re
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workbench.machine_plan.gguf_writing import write_shape_gguf as write_gguf
from workbench.machine_plan.llama_cpp import (LlamaCppPlacement, cpu_moe_overrides, layers_pattern, override_devices,
                                              placement_memory, tensor_devices)
from workbench.machine_plan.model_tensors import model_from_gguf


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A 12-layer model with 2 leading dense layers: blocks 10 and 11 test that 1 never means 10."""
    path = write_gguf(tmp_path_factory.mktemp("m") / "m.gguf", layers=12, leading_dense=2)[0]
    return model_from_gguf(path)


def _expert_names(model, layers):
    return {t.name for t in model.tensors if t.expert and t.layer in layers}


def test_n_cpu_moe_moves_the_first_n_layers_experts(model):
    """--n-cpu-moe N: exactly the expert tensors of blocks 0..N-1 go to the CPU (leading
    dense blocks count and hold none), for every N."""
    names = [t.name for t in model.tensors]
    for n in range(model.layers + 2):
        moved = override_devices(cpu_moe_overrides(n), names)
        assert set(moved) == _expert_names(model, range(n))
        assert set(moved.values()) <= {"CPU"}


def test_the_ot_rule_moves_the_same_tensors_as_n_cpu_moe(model):
    """The emitted -ot alternative, parsed the way llama.cpp splits PATTERN=DEVICE, moves
    the same tensors as the --n-cpu-moe form of the same placement."""
    names = [t.name for t in model.tensors]
    for n in range(model.layers + 1):
        placement = LlamaCppPlacement(n, (model.layers,))
        args = placement.override_args(model, 4096)
        rules = [tuple(a.rsplit("=", 1)) for a, flag in zip(args[1:], args) if flag == "-ot"]
        assert set(override_devices(rules, names)) == set(override_devices(cpu_moe_overrides(n), names))
        assert shlex.split(shlex.join(args)) == args  # survives a shell


def test_the_first_matching_override_wins():
    """Overrides are tried in order and the first whose pattern is found decides."""
    names = ["blk.1.ffn_up_exps.weight", "blk.1.attn_q.weight", "blk.10.ffn_up_exps.weight"]
    got = override_devices([(r"exps", "CUDA0"), (r"blk\.1\.", "CPU")], names)
    assert got == {"blk.1.ffn_up_exps.weight": "CUDA0", "blk.1.attn_q.weight": "CPU", "blk.10.ffn_up_exps.weight": "CUDA0"}


@settings(max_examples=200, deadline=None)
@given(st.sets(st.integers(0, 199), min_size=1, max_size=60))
def test_a_layer_pattern_matches_exactly_its_blocks(layers):
    """``layers_pattern`` + the expert pattern, searched in every block's expert name,
    matches exactly the blocks asked for (never 1 for 10 or 100)."""
    regex = re.compile(layers_pattern(sorted(layers)) + r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")
    hit = {i for i in range(200) if regex.search(f"blk.{i}.ffn_down_exps.weight")}
    assert hit == layers


def test_memory_counted_by_kind_equals_memory_by_name(model):
    """placement_memory (counted from each tensor's layer and kind) equals the bytes of
    tensor_devices (the override patterns matched by name), on one and on two GPUs."""
    for split in ((12,), (7, 5), (3, 9)):
        for n in range(model.layers + 1):
            placement = LlamaCppPlacement(n, split)
            devices = tensor_devices(model, placement)
            by_name = {}
            for t in model.tensors:
                by_name[devices[t.name]] = by_name.get(devices[t.name], 0) + t.nbytes
            memory = placement_memory(model, placement, context=0)
            for device, nbytes in by_name.items():
                buffers = memory[device] - nbytes
                assert 0 < buffers < 2**30, (split, n, device)


def test_tensor_split_counts_put_each_layer_where_llama_cpp_does(model):
    """-ts counts, read as llama.cpp reads proportions over the layers and the output,
    put layer i on the GPU the placement says."""
    for split in ((7, 5), (3, 4, 5), (12, 0)):
        args = LlamaCppPlacement(0, split).args(model, 4096)
        counts = [float(c) for c in args[args.index("-ts") + 1].split(",")]
        total = sum(counts)
        cumulative = [sum(counts[: g + 1]) / total for g in range(len(counts))]
        layout = [next(g for g, c in enumerate(cumulative) if c > i / total) for i in range(model.layers + 1)]
        want = [g for g, c in enumerate(split) for _ in range(c)] + [len(split) - 1]
        assert layout == want


def test_the_embedding_stays_on_the_cpu_and_the_output_on_the_last_gpu(model):
    """Rule 2: token_embd on the CPU, output and output_norm on the last GPU."""
    devices = tensor_devices(model, LlamaCppPlacement(3, (6, 6)))
    assert devices["token_embd.weight"] == "CPU"
    assert devices["output.weight"] == devices["output_norm.weight"] == "CUDA1"
    assert devices["blk.2.attn_q.weight"] == "CUDA0" and devices["blk.2.ffn_up_exps.weight"] == "CPU"
