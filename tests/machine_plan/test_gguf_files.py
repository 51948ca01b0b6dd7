"""Reading a GGUF model for a plan: what the file declares, read with the gguf package;
hostile files refused quickly, with bounded memory, naming what was wrong."""

import math
import os
import struct
import tracemalloc

import gguf
import pytest

from workbench.machine_plan.gguf_writing import moe_tensor_list as moe_tensors, write_shape_gguf as write_gguf
from workbench.machine_plan.gguf_files import read_gguf
from workbench.machine_plan.model_tensors import KNOWN_ARCHITECTURES, model_from_config, model_from_gguf, shipped_config_path
from workbench.machine_plan.plan_errors import ModelFileError

Q = gguf.GGMLQuantizationType


def test_tensors_are_read_with_their_ggml_sizes(tmp_path):
    """Every tensor the file declares is read with the bytes its ggml type's blocks take."""
    path = write_gguf(tmp_path / "m.gguf", layers=3, experts=8, expert_type=Q.Q4_K, other_type=Q.Q8_0)[0]
    declared = moe_tensors(3, 8, 256, 256, 512, 4, 2, 64, Q.Q4_K, Q.Q8_0)
    model = model_from_gguf(path)
    got = {t.name: t.nbytes for t in model.tensors}
    want = {name: math.prod(shape) // gguf.GGML_QUANT_SIZES[kind][0] * gguf.GGML_QUANT_SIZES[kind][1]
            for name, shape, kind in declared}
    assert got == want
    assert (model.layers, model.num_experts, model.top_k, model.architecture) == (3, 8, 2, "qwen3moe")
    assert {t.name for t in model.tensors if t.expert} == {n for n, _, _ in declared if "_exps" in n}


def test_facts_count_experts_from_the_tensors(tmp_path):
    """The decode facts: expert parameters per expert = an expert tensor triple over the
    experts; the KV cache = KV heads x (K + V lengths) x 2 bytes per layer."""
    path = write_gguf(tmp_path / "m.gguf", layers=4, experts=8, top_k=2, hidden=256, expert_ff=512, kv_heads=2,
                      head_dim=64)[0]
    facts = model_from_gguf(path).facts()
    assert facts.expert_params == 3 * 512 * 256
    assert facts.kv_bytes_per_token == 4 * 2 * (64 + 64) * 2
    bits = model_from_gguf(path).bits()
    assert bits.experts == pytest.approx(4.5) and bits.expert_format == "q4_k"


def test_a_split_model_is_read_whole_from_any_shard(tmp_path):
    """Each shard of a split GGUF names the same model: every shard's tensors, once."""
    whole = model_from_gguf(write_gguf(tmp_path / "w.gguf", layers=4)[0])
    shards = write_gguf(tmp_path / "s.gguf", layers=4, split_max_tensors=12)
    assert len(shards) > 2
    for shard in shards:
        split = model_from_gguf(shard)
        assert sorted((t.name, t.nbytes) for t in split.tensors) == sorted((t.name, t.nbytes) for t in whole.tensors)


def test_a_missing_shard_is_named(tmp_path):
    """A split model with a shard gone is refused naming the missing file."""
    shards = write_gguf(tmp_path / "s.gguf", layers=4, split_max_tensors=12)
    shards[1].unlink()
    with pytest.raises(ModelFileError, match=shards[1].name):
        model_from_gguf(shards[0])


def test_leading_dense_layers_hold_no_experts(tmp_path):
    """A model whose first layers are dense starts its MoE layers after them."""
    path = write_gguf(tmp_path / "d.gguf", layers=5, leading_dense=2)[0]
    model = model_from_gguf(path)
    assert model.first_dense == 2 and model.moe_layers == (2, 3, 4)


def _refused_quickly(path, match):
    # memory is bounded here; the time to refuse is a benchmark's figure (benchmarks/plan_machine.py)
    tracemalloc.start()
    with pytest.raises(ModelFileError, match=match):
        model_from_gguf(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20


def test_a_truncated_file_is_refused(tmp_path):
    """A GGUF cut short (its tensor data past the end) is refused as truncated."""
    path = write_gguf(tmp_path / "t.gguf", layers=4)[0]
    os.truncate(path, os.path.getsize(path) // 2)
    _refused_quickly(path, "truncated|ends early|past the end")


def test_a_file_that_is_not_a_gguf_is_refused(tmp_path):
    """Any other file — text, a safetensors header, nothing — is refused by its magic."""
    for name, data in (("a.gguf", b"hello world, this is not a model file at all"), ("b.gguf", b""),
                       ("c.gguf", b"\x08\x00\x00\x00\x00\x00\x00\x00{\"x\":1}" + b" " * 40)):
        (tmp_path / name).write_bytes(data)
        _refused_quickly(tmp_path / name, "GGUF")


def test_absurd_counts_are_refused_without_looping(tmp_path):
    """A file declaring 2^60 tensors or metadata keys (its count field overwritten) is
    refused in well under a second, before the reader could loop on the count."""
    for offset, what in ((8, "tensors"), (16, "metadata keys")):
        path = write_gguf(tmp_path / f"n{offset}.gguf", layers=2)[0]
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(struct.pack("<Q", 1 << 60))
        _refused_quickly(path, what)


def test_an_array_longer_than_the_file_is_refused(tmp_path):
    """A metadata array declaring more items than the file holds is refused."""
    path = write_gguf(tmp_path / "arr.gguf", layers=2, tokens=5)[0]
    data = path.read_bytes()
    key = b"tokenizer.ggml.tokens"
    at = data.index(key) + len(key) + 4 + 4  # value type ARRAY, item type STRING, then the count
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(struct.pack("<Q", 1 << 58))
    _refused_quickly(path, "strings|past the end|more than")


def test_absurd_shapes_are_refused(tmp_path):
    """A tensor declared with 2^40 x 2^40 elements, written by the gguf package, is refused."""
    tensors = moe_tensors(2, 8, 256, 256, 512, 4, 2, 64, Q.Q4_K, Q.Q8_0)
    tensors[0] = ("token_embd.weight", (1 << 40, 1 << 40), Q.F32)
    path = tmp_path / "shape.gguf"
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_block_count(2)
    for name, shape, kind in tensors:
        w.add_tensor_info(name, list(shape), gguf.np.dtype(gguf.np.float32), 4, raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    _refused_quickly(path, "elements")


def test_a_directory_and_a_fifo_are_refused_without_blocking(tmp_path):
    """A folder or a named pipe named as the model is refused before anything is read
    (opening a pipe for reading would otherwise wait for a writer)."""
    folder = tmp_path / "folder.gguf"
    folder.mkdir()
    _refused_quickly(folder, "directory")
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "pipe.gguf"
        os.mkfifo(fifo)
        _refused_quickly(fifo, "not a regular file")


def test_an_unknown_architecture_is_refused_naming_the_known_ones(tmp_path):
    """An architecture the planner does not read is refused with the list it does."""
    path = write_gguf(tmp_path / "u.gguf", arch="mamba9000", layers=2)[0]
    with pytest.raises(ModelFileError, match="mamba9000.*known: " + KNOWN_ARCHITECTURES[0]):
        model_from_gguf(path)


def test_counts_that_disagree_with_the_tensors_are_refused(tmp_path):
    """A file declaring 3 layers whose tensors name block 5 is refused."""
    tensors = moe_tensors(6, 8, 256, 256, 512, 4, 2, 64, Q.Q4_K, Q.Q8_0)
    path = write_gguf(tmp_path / "c.gguf", layers=3, tensors=tensors)[0]
    with pytest.raises(ModelFileError, match="blocks"):
        model_from_gguf(path)


def test_metadata_is_read_with_the_gguf_package(tmp_path):
    """Scalars come back as values; long arrays as their length only."""
    path = write_gguf(tmp_path / "meta.gguf", layers=2, tokens=100)[0]
    meta = read_gguf(path).metadata
    assert meta["qwen3moe.block_count"] == 2 and meta["tokenizer.ggml.tokens"] == ("array", 100)


def test_a_shipped_config_lays_out_llama_cpp_names(tmp_path):
    """A shipped config in q4_k has llama.cpp's expert tensors in every MoE layer, and its
    expert bytes are the experts' parameters at the format's 4.5 bits."""
    model = model_from_config(shipped_config_path("qwen3_moe_15b_a2b"), "q4_k")
    assert model.moe_layers == tuple(range(24)) and model.num_experts == 128
    expert_params = 24 * 128 * 3 * 768 * 2048
    assert model.bytes_where(expert=True) == pytest.approx(expert_params * 4.5 / 8, rel=1e-6)
    with pytest.raises(ModelFileError, match="unknown model"):
        shipped_config_path("no_such_model")


def test_the_walk_reads_what_the_gguf_packages_reader_reads(tmp_path):
    """The planner's bounded header walk and the gguf package's own GGUFReader agree on
    every tensor (name, shape, type, bytes) and every short metadata value."""
    for kwargs in ({"layers": 3, "tokens": 10}, {"layers": 5, "leading_dense": 2, "tied": True, "expert_type": Q.IQ4_XS},
                   {"layers": 2, "other_type": Q.BF16, "expert_type": Q.MXFP4}):
        path = write_gguf(tmp_path / f"o{len(list(tmp_path.iterdir()))}.gguf", **kwargs)[0]
        ours = read_gguf(path)
        theirs = gguf.GGUFReader(path)
        assert [(t.name, t.shape, t.type_name, t.nbytes) for t in ours.tensors] == [
            (t.name, tuple(int(d) for d in t.shape), t.tensor_type.name, int(t.n_bytes)) for t in theirs.tensors]
        for key, field in theirs.fields.items():
            if key.startswith("GGUF."):
                continue
            value = field.contents()
            assert ours.metadata[key] == (("array", len(value)) if isinstance(value, list) and len(value) > 64 else value)
