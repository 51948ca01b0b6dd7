"""Shape-true GGUF files without weights: plan a model before downloading it, or test a reader.

``write_shape_gguf(path, layers=, experts=, ...)`` writes, with the ``gguf`` package, a
GGUF whose metadata and tensor infos are a real model's (llama.cpp's names and ggml types
for a Qwen3-MoE-style architecture) and whose data is a hole: the file has its full
length, so every offset checks, but takes a few KiB on a file system with sparse files.
``moe_tensor_list`` is its list of (name, shape, ggml type)."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Optional, Sequence

__all__ = ["moe_tensor_list", "write_shape_gguf"]

import gguf
import numpy as np

Q = gguf.GGMLQuantizationType


def _nbytes(shape: Sequence[int], kind: Q) -> int:
    block, size = gguf.GGML_QUANT_SIZES[kind]
    return math.prod(shape) // block * size


def moe_tensor_list(layers: int, experts: int, hidden: int, expert_ff: int, vocab: int, heads: int, kv_heads: int,
                head_dim: int, expert_type: Q, other_type: Q, leading_dense: int = 0, dense_ff: int = 0,
                tied: bool = False) -> list[tuple[str, tuple[int, ...], Q]]:
    """llama.cpp's qwen3moe tensors: (name, numpy-order shape, ggml type)."""
    t = [("token_embd.weight", (vocab, hidden), other_type), ("output_norm.weight", (hidden,), Q.F32)]
    if not tied:
        t.append(("output.weight", (vocab, hidden), other_type))
    for i in range(layers):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", (hidden,), Q.F32), (p + "ffn_norm.weight", (hidden,), Q.F32),
              (p + "attn_q.weight", (heads * head_dim, hidden), other_type),
              (p + "attn_k.weight", (kv_heads * head_dim, hidden), other_type),
              (p + "attn_v.weight", (kv_heads * head_dim, hidden), other_type),
              (p + "attn_output.weight", (hidden, heads * head_dim), other_type)]
        if i < leading_dense:
            t += [(p + f"ffn_{k}.weight", (dense_ff, hidden) if k != "down" else (hidden, dense_ff), other_type)
                  for k in ("gate", "up", "down")]
        else:
            t += [(p + "ffn_gate_inp.weight", (experts, hidden), Q.F32),
                  (p + "ffn_gate_exps.weight", (experts, expert_ff, hidden), expert_type),
                  (p + "ffn_up_exps.weight", (experts, expert_ff, hidden), expert_type),
                  (p + "ffn_down_exps.weight", (experts, hidden, expert_ff), expert_type)]
    return t


def write_shape_gguf(path: Path, *, arch: str = "qwen3moe", layers: int = 4, experts: int = 8, top_k: int = 2,
               hidden: int = 256, expert_ff: int = 256, vocab: int = 512, heads: int = 4, kv_heads: int = 2,
               head_dim: int = 64, expert_type: Q = Q.Q4_K, other_type: Q = Q.Q8_0, leading_dense: int = 0,
               dense_ff: int = 512, tied: bool = False, split_max_tensors: int = 0, tokens: int = 0,
               tensors: Optional[list[tuple[str, tuple[int, ...], Q]]] = None) -> list[Path]:
    """Write a shape-true GGUF model (sparse data); returns the files written (shards in order)."""
    w = gguf.GGUFWriter(path, arch, split_max_tensors=split_max_tensors)
    w.add_block_count(layers)
    w.add_embedding_length(hidden)
    w.add_head_count(heads)
    w.add_head_count_kv(kv_heads)
    w.add_key_length(head_dim)
    w.add_value_length(head_dim)
    if experts:
        w.add_expert_count(experts)
        w.add_expert_used_count(top_k)
    if leading_dense:
        w.add_leading_dense_block_count(leading_dense)
    if tokens:
        w.add_token_list([f"t{i}" for i in range(tokens)])
    listed = tensors if tensors is not None else moe_tensor_list(layers, experts, hidden, expert_ff, vocab, heads, kv_heads,
                                                             head_dim, expert_type, other_type, leading_dense, dense_ff,
                                                             tied)
    for name, shape, kind in listed:
        w.add_tensor_info(name, list(shape), np.dtype(np.float32), _nbytes(shape, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    shards = sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf")) if split_max_tensors else [path]
    # the data section: each shard's tensors, each padded to the alignment, left as a hole
    per_shard = [list(d.values()) for d in w.tensors]
    for shard, infos in zip(shards, per_shard):
        start = -(-os.path.getsize(shard) // 32) * 32
        size = start + sum(-(-ti.nbytes // 32) * 32 for ti in infos)
        os.truncate(shard, size)
    return shards
