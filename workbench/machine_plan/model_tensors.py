"""A model as the tensors a runtime places: from a GGUF file, or from a ``config.json`` and a format.

A ``PlanModel`` is the list of a model's tensors under llama.cpp's names (``blk.3.ffn_up_exps.weight``)
with their bytes, plus the facts a decode token needs (layers, experts, top-k, hidden
size, KV-cache bytes per token per layer). ``model_from_gguf`` reads them from a GGUF
file (``gguf_files``); ``model_from_config`` lays out a Hugging Face ``config.json`` (or a
shipped one, by name: ``shipped_model_names()``) stored in a weight format.

Rules:

1. A routed-expert tensor is one whose name llama.cpp's expert pattern finds
   (``EXPERT_TENSOR_PATTERN``, searched as ``--n-cpu-moe`` searches it); its layer is the
   number after ``blk.``. Every other tensor is "other"; ``token_embd`` stays on the host
   (llama.cpp keeps the input embedding in host memory), and a model without an
   ``output`` tensor reads its output through the embedding (tied), which llama.cpp
   loads a second time on the GPU.
2. Facts come from the file's metadata under its architecture (``{arch}.block_count``,
   ``{arch}.expert_count``, ``{arch}.expert_used_count``, ``{arch}.embedding_length``,
   ``{arch}.leading_dense_block_count``, attention keys); an architecture outside
   ``KNOWN_ARCHITECTURES``, or one without a block count, is refused naming the known ones.
3. KV-cache bytes per token, per layer, at llama.cpp's default f16 cache: K and V heads ×
   their lengths × 2 bytes; a latent-attention (MLA) layer keeps its latent and rope parts
   (``kv_lora_rank + rope dimension``) × 2 bytes; a hybrid model
   (``full_attention_interval``) keeps a cache only in its full-attention layers.
4. A model whose experts are not in every MoE layer, whose declared counts disagree with
   its tensors, or whose sizes are out of range, is refused naming the figure.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Union

from ..file_reading import parse_json, read_regular_file
from ..speed.layout import LayoutError, ModelFacts, WeightBits
from ..weight_formats import weight_formats
from .gguf_files import GgufFile, read_gguf
from .plan_errors import ModelFileError

__all__ = ["EXPERT_TENSOR_PATTERN", "KNOWN_ARCHITECTURES", "PlanModel", "PlanTensor", "model_from_config",
           "model_from_facts", "model_from_gguf", "shipped_model_names", "shipped_config_path"]  # fmt: skip

#: llama.cpp's pattern for the routed-expert tensors of a block (common/common.h,
#: LLM_FFN_EXPS_REGEX), searched in a tensor's name.
EXPERT_TENSOR_PATTERN = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
_EXPERT = re.compile(EXPERT_TENSOR_PATTERN)
_LAYER = re.compile(r"^blk\.(\d+)\.")
#: Architectures whose GGUF keys and tensor names the planner reads (llama.cpp's names).
KNOWN_ARCHITECTURES = ("deepseek2", "dots1", "glm4moe", "gpt-oss", "granitemoe", "llama", "llama4", "olmoe", "qwen2",
                       "qwen2moe", "qwen3", "qwen3moe", "qwen35moe", "qwen3next")  # fmt: skip
_KV_CACHE_BYTES = 2  # llama.cpp's default K and V cache type, f16
_SHIPPED = Path(__file__).resolve().parents[2] / "data"


@dataclass(frozen=True)
class PlanTensor:
    """One tensor a runtime places (rule 1)."""

    name: str  # llama.cpp's name
    layer: Optional[int]  # the block it belongs to; None for token_embd, output, output_norm
    elements: int
    nbytes: int
    type_name: str  # ggml type (Q4_K) or weight format (q4_k) it is stored in
    expert: bool  # a routed-expert tensor (rule 1)


@dataclass(frozen=True)
class PlanModel:
    """A model's tensors and the facts a decode token needs (module doc)."""

    name: str
    architecture: str
    source: str  # the file, or the config and format, it was read from
    layers: int
    first_dense: int  # leading layers without routed experts
    num_experts: int
    top_k: int
    hidden: int
    vocab: int
    kv_bytes_per_token: tuple[float, ...]  # per layer, f16 cache (rule 3)
    tensors: tuple[PlanTensor, ...]

    @property
    def tied_output(self) -> bool:
        """No ``output`` tensor: the output reads the embedding, loaded again on the GPU (rule 1)."""
        return not any(t.name.startswith("output.") for t in self.tensors)

    @property
    def moe_layers(self) -> tuple[int, ...]:
        return tuple(sorted({t.layer for t in self.tensors if t.expert and t.layer is not None}))

    def bytes_where(self, *, expert: Optional[bool] = None, layer: Optional[int] = None) -> int:
        return sum(t.nbytes for t in self.tensors if (expert is None or t.expert == expert)
                   and (layer is None or t.layer == layer))  # fmt: skip

    def facts(self) -> ModelFacts:
        """The model as the decode timer's ``ModelFacts``: elements counted from the
        tensors; the embedding is not read whole per token (one row), so not active."""
        experts = [t for t in self.tensors if t.expert]
        moe = len(self.moe_layers)
        total = float(sum(t.elements for t in self.tensors))
        expert_total = float(sum(t.elements for t in experts))
        expert_params = expert_total / (moe * self.num_experts) if moe and self.num_experts else 0.0
        embedding = float(sum(t.elements for t in self.tensors if t.name.startswith("token_embd.")))
        active = total - expert_total - (0.0 if self.tied_output else embedding) + moe * self.top_k * expert_params
        try:
            return ModelFacts(self.name, self.layers, total, active, self.num_experts if moe else 0,
                              self.top_k if moe else 0, expert_params, self.first_dense, self.hidden,
                              float(sum(self.kv_bytes_per_token)), 2)  # fmt: skip
        except LayoutError as exc:
            raise ModelFileError(f"{self.source}: {exc}") from None

    def bits(self) -> WeightBits:
        """Bits per weight of the experts and of the rest, from the tensors' bytes; the
        experts' format is their most common type when the format table knows it."""
        experts = [t for t in self.tensors if t.expert]
        other = [t for t in self.tensors if not t.expert]
        other_bits = 8 * sum(t.nbytes for t in other) / max(1, sum(t.elements for t in other))
        if not experts:
            return WeightBits(other_bits, other_bits, "", 0.0, f"{self.source}: tensor bytes")
        expert_bits = 8 * sum(t.nbytes for t in experts) / sum(t.elements for t in experts)
        common = Counter(t.type_name.lower() for t in experts).most_common(1)[0][0]
        found = next((f for f in weight_formats().values() if common == f.name or common in f.aliases), None)
        return WeightBits(expert_bits, other_bits, found.name if found else "", found.dequant_ops if found else 0.0,
                          f"{self.source}: experts {expert_bits:.3f} bits/weight ({common}), other {other_bits:.3f}")


def _layer(name: str) -> Optional[int]:
    match = _LAYER.match(name)
    return int(match.group(1)) if match else None


def _plan_tensor(name: str, elements: int, nbytes: int, type_name: str) -> PlanTensor:
    return PlanTensor(name, _layer(name), int(elements), int(nbytes), type_name, _EXPERT.search(name) is not None)


def _known(architecture: str, where: str) -> None:
    if architecture not in KNOWN_ARCHITECTURES:
        raise ModelFileError(f"{where}: architecture {architecture[:60]!r} is not one the planner reads; known: "
                             f"{', '.join(KNOWN_ARCHITECTURES)}")


def _whole(value: Any, what: str, where: str, low: int = 0, high: int = 10_000_000) -> int:
    if isinstance(value, (list, tuple)):
        raise ModelFileError(f"{where}: {what} is an array; a single number was expected")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ModelFileError(f"{where}: {what} is {str(value)[:40]!r}, not a number") from None
    if not math.isfinite(number) or number != int(number) or not low <= number <= high:
        raise ModelFileError(f"{where}: {what} is {value!r}; valid: a whole number in [{low}, {high}]")
    return int(number)


def model_from_gguf(source: Union[str, "os.PathLike[str]", GgufFile]) -> PlanModel:
    """The model in the GGUF file at ``source`` (rules 1-4; a split model from every shard),
    or in a header ``read_gguf`` has read already."""
    file = source if isinstance(source, GgufFile) else read_gguf(source)
    where = str(file.paths[0]) if isinstance(source, GgufFile) else str(source)
    meta = file.metadata
    arch = file.architecture
    if not arch:
        raise ModelFileError(f"{where}: no general.architecture key; a GGUF model names its architecture")
    _known(arch, where)
    if f"{arch}.block_count" not in meta:
        raise ModelFileError(f"{where}: no {arch}.block_count key: the number of layers is not stated")
    layers = _whole(meta[f"{arch}.block_count"], f"{arch}.block_count", where, 1, 10_000)
    experts = _whole(meta.get(f"{arch}.expert_count", 0), f"{arch}.expert_count", where, 0, 100_000)
    top_k = _whole(meta.get(f"{arch}.expert_used_count", 0), f"{arch}.expert_used_count", where, 0, max(experts, 0))
    hidden = _whole(meta.get(f"{arch}.embedding_length", 0), f"{arch}.embedding_length", where, 1, 1_000_000)
    tensors = tuple(_plan_tensor(t.name, math.prod(t.shape), t.nbytes, t.type_name) for t in file.tensors)
    vocab = next((t.shape[1] for t in file.tensors if t.name == "token_embd.weight" and len(t.shape) > 1), 0)
    kv = _kv_from_metadata(meta, arch, layers, hidden, where)
    model = PlanModel(Path(file.paths[0]).name, arch, where, layers, 0, experts, top_k, hidden, vocab, kv, tensors)
    return _checked(model, meta.get(f"{arch}.leading_dense_block_count"))


def _kv_from_metadata(meta: Mapping[str, Any], arch: str, layers: int, hidden: int, where: str) -> tuple[float, ...]:
    """Rule 3, from GGUF keys."""
    a = f"{arch}.attention"
    heads_kv = meta.get(f"{a}.head_count_kv", meta.get(f"{a}.head_count", 0))
    per_layer = list(heads_kv) if isinstance(heads_kv, list) else [heads_kv] * layers
    if len(per_layer) != layers:
        raise ModelFileError(f"{where}: {a}.head_count_kv lists {len(per_layer)} layers, the model has {layers}")
    heads = meta.get(f"{a}.head_count", 0)
    heads = heads[0] if isinstance(heads, list) and heads else heads
    default_dim = hidden // max(1, _whole(heads, f"{a}.head_count", where, 0, 100_000)) if heads else 0
    if f"{a}.kv_lora_rank" in meta:
        latent = _whole(meta[f"{a}.kv_lora_rank"], f"{a}.kv_lora_rank", where, 1, 1_000_000)
        rope = _whole(meta.get(f"{arch}.rope.dimension_count", 0), f"{arch}.rope.dimension_count", where, 0, 1_000_000)
        return tuple(float((latent + rope) * _KV_CACHE_BYTES) for _ in range(layers))
    k = _whole(meta.get(f"{a}.key_length", default_dim), f"{a}.key_length", where, 0, 1_000_000)
    v = _whole(meta.get(f"{a}.value_length", default_dim), f"{a}.value_length", where, 0, 1_000_000)
    interval = _whole(meta.get(f"{arch}.full_attention_interval", 1), f"{arch}.full_attention_interval", where, 1, 10_000)
    return tuple(float(_whole(h, f"{a}.head_count_kv", where, 0, 100_000) * (k + v) * _KV_CACHE_BYTES)
                 if (i + 1) % interval == 0 else 0.0 for i, h in enumerate(per_layer))  # fmt: skip


def _checked(model: PlanModel, leading_dense: Any) -> PlanModel:
    """Rule 4: the declared counts against the tensors."""
    where = model.source
    bad = sorted({t.layer for t in model.tensors if t.layer is not None and not 0 <= t.layer < model.layers})
    if bad:
        raise ModelFileError(f"{where}: tensors name blocks {bad[:5]} of a model declared with {model.layers} layers")
    moe = model.moe_layers
    if model.num_experts and not moe:
        raise ModelFileError(f"{where}: it declares {model.num_experts} experts but no tensor matches llama.cpp's "
                             f"expert pattern {EXPERT_TENSOR_PATTERN!r}")
    if moe and not (model.num_experts and model.top_k):
        raise ModelFileError(f"{where}: it has expert tensors but declares no expert count or experts used per token")
    first_dense = moe[0] if moe else 0
    if moe and list(moe) != list(range(first_dense, model.layers)):
        missing = sorted(set(range(first_dense, model.layers)) - set(moe))[:5]
        raise ModelFileError(f"{where}: MoE layers {missing} have no expert tensors: experts in every layer after the "
                             f"leading dense ones are expected")
    if leading_dense is not None and moe and _whole(leading_dense, "leading_dense_block_count", where) != first_dense:
        raise ModelFileError(f"{where}: it declares {leading_dense} leading dense layers; its tensors start the experts "
                             f"at layer {first_dense}")
    if not any(t.name.startswith("token_embd.") for t in model.tensors):
        raise ModelFileError(f"{where}: no token_embd tensor: not a whole language model")
    return PlanModel(model.name, model.architecture, model.source, model.layers, first_dense, model.num_experts,
                     model.top_k, model.hidden, model.vocab, model.kv_bytes_per_token, model.tensors)  # fmt: skip


# --- from a config.json (a Hugging Face configuration) and a weight format ---

#: transformers' model_type -> llama.cpp's architecture name.
_ARCH_OF = {"qwen3_moe": "qwen3moe", "qwen2_moe": "qwen2moe", "qwen3_next": "qwen3next", "qwen3_5_moe": "qwen35moe",
            "qwen3_5_moe_text": "qwen35moe", "deepseek_v3": "deepseek2", "deepseek_v2": "deepseek2", "gpt_oss": "gpt-oss",
            "olmoe": "olmoe", "mixtral": "llama", "llama": "llama", "qwen3": "qwen3", "qwen2": "qwen2",
            "glm4_moe": "glm4moe", "granitemoe": "granitemoe", "dots1": "dots1"}  # fmt: skip


def shipped_config_path(name: str) -> Path:
    """The shipped published-size ``config.json`` called ``name`` (``shipped_model_names()``)."""
    names = shipped_model_names()
    if name not in names:
        raise ModelFileError(f"unknown model {name[:80]!r}: give a .gguf file, a config.json (with --format), or one "
                             f"of the shipped models: {', '.join(names)}")
    return _SHIPPED / f"{name}.json" if (_SHIPPED / f"{name}.json").exists() else _SHIPPED / "hf" / f"{name}.json"


def shipped_model_names() -> tuple[str, ...]:
    """The shipped published-size configurations (not the tiny ones)."""
    found = [p.stem for p in (_SHIPPED / "hf").glob("*.json") if "tiny" not in p.stem]
    return tuple(sorted(found + ["qwen3_5_moe_35b_a3b"]))


def model_from_config(path: Union[str, "os.PathLike[str]"], weight_format: Union[str, float]) -> PlanModel:
    """The model a Hugging Face ``config.json`` describes, every weight stored in
    ``weight_format`` (a format of the format table, or bits per weight), norms in f32,
    under llama.cpp's tensor names."""
    where = str(path)
    raw = parse_json(read_regular_file(path, "config.json", ModelFileError, 1 << 20), "config.json", ModelFileError)
    if not isinstance(raw, dict):
        raise ModelFileError(f"{where}: a config.json is a JSON object")
    cfg = raw.get("text_config", raw) if isinstance(raw.get("text_config"), dict) else raw
    model_type = str(cfg.get("model_type", raw.get("model_type", "")))
    arch = _ARCH_OF.get(model_type)
    if arch is None:
        raise ModelFileError(f"{where}: model_type {model_type[:60]!r} is not one the planner lays out; known: "
                             f"{', '.join(sorted(_ARCH_OF))}")
    try:
        bits = WeightBits.of(weight_format)
    except LayoutError as exc:
        raise ModelFileError(f"--format: {exc}") from None

    def get(key: str, default: Any = None, low: int = 0, high: int = 10_000_000) -> int:
        value = cfg.get(key, default)
        if value is None:
            raise ModelFileError(f"{where}: no {key}; a {model_type} config states it")
        return _whole(value, key, where, low, high)

    layers, hidden = get("num_hidden_layers", low=1), get("hidden_size", low=1)
    vocab, heads = get("vocab_size", low=1), get("num_attention_heads", low=1)
    kv_heads = get("num_key_value_heads", heads)
    head_dim = get("head_dim", hidden // heads) if cfg.get("head_dim") is not None else hidden // heads
    experts = get("num_local_experts", cfg.get("num_experts", cfg.get("n_routed_experts", 0)))
    top_k = get("num_experts_per_tok", 0) if experts else 0
    expert_ff = get("moe_intermediate_size", cfg.get("intermediate_size")) if experts else 0
    dense_ff = get("intermediate_size", 0)
    first_dense = get("first_k_dense_replace", 0) if experts else 0
    shared_ff = get("shared_expert_intermediate_size", 0) or get("n_shared_experts", 0) * expert_ff
    kinds = cfg.get("layer_types") if isinstance(cfg.get("layer_types"), list) else None
    fmt_name = bits.expert_format or f"{bits.experts:g}-bit"
    tensors: list[PlanTensor] = []

    def add(name: str, *shape: int, norm: bool = False) -> None:
        elements = math.prod(shape)
        b = 32.0 if norm else bits.other if ".ffn_" not in name or "_exps" not in name else bits.experts
        tensors.append(_plan_tensor(name, elements, math.ceil(elements * b / 8), "f32" if norm else fmt_name))

    add("token_embd.weight", vocab, hidden)
    add("output_norm.weight", hidden, norm=True)
    if not cfg.get("tie_word_embeddings", raw.get("tie_word_embeddings", False)):
        add("output.weight", vocab, hidden)
    kv_per_layer = []
    for i in range(layers):
        p = f"blk.{i}."
        add(p + "attn_norm.weight", hidden, norm=True)
        add(p + "ffn_norm.weight", hidden, norm=True)
        linear = kinds is not None and i < len(kinds) and str(kinds[i]) == "linear_attention"
        if linear:
            nk, nv = get("linear_num_key_heads", 16), get("linear_num_value_heads", 32)
            dk, dv = get("linear_key_head_dim", 128), get("linear_value_head_dim", 128)
            add(p + "ssm_in.weight", hidden, 2 * nk * dk + 2 * nv * dv)
            add(p + "ssm_out.weight", nv * dv, hidden)
            kv_per_layer.append(0.0)
        elif cfg.get("kv_lora_rank"):
            rank, rope = get("kv_lora_rank", low=1), get("qk_rope_head_dim", 64)
            nope, v_dim = get("qk_nope_head_dim", 128), get("v_head_dim", 128)
            q_rank = cfg.get("q_lora_rank")
            if q_rank:
                add(p + "attn_q_a.weight", hidden, get("q_lora_rank"))
                add(p + "attn_q_b.weight", get("q_lora_rank"), heads * (nope + rope))
            else:
                add(p + "attn_q.weight", hidden, heads * (nope + rope))
            add(p + "attn_kv_a_mqa.weight", hidden, rank + rope)
            add(p + "attn_kv_b.weight", rank, heads * (nope + v_dim))
            add(p + "attn_output.weight", heads * v_dim, hidden)
            kv_per_layer.append(float((rank + rope) * _KV_CACHE_BYTES))
        else:
            add(p + "attn_q.weight", hidden, heads * head_dim)
            add(p + "attn_k.weight", hidden, kv_heads * head_dim)
            add(p + "attn_v.weight", hidden, kv_heads * head_dim)
            add(p + "attn_output.weight", heads * head_dim, hidden)
            kv_per_layer.append(float(kv_heads * 2 * head_dim * _KV_CACHE_BYTES))
        if experts and i >= first_dense:
            add(p + "ffn_gate_inp.weight", hidden, experts)
            for kind in ("gate", "up", "down"):
                add(p + f"ffn_{kind}_exps.weight", experts, expert_ff, hidden)
            if shared_ff:
                for kind in ("gate", "up", "down"):
                    add(p + f"ffn_{kind}_shexp.weight", shared_ff, hidden)
        else:
            for kind in ("gate", "up", "down"):
                add(p + f"ffn_{kind}.weight", dense_ff, hidden)
    name = Path(path).stem if Path(path).name != "config.json" else Path(path).parent.name or "config"
    model = PlanModel(name, arch, f"{where} in {bits.how or fmt_name}", layers, first_dense, experts, top_k, hidden,
                      vocab, tuple(kv_per_layer), tuple(tensors))  # fmt: skip
    return _checked(model, first_dense if experts else None)


def model_from_facts(facts: ModelFacts, bits: WeightBits, architecture: str = "") -> PlanModel:
    """A model known only by its sizes (a published run's ``ModelFacts`` and bits): each
    layer's non-expert weights as one tensor (``blk.N.attn_and_norms``: what a token reads
    of the layer), its experts as llama.cpp's three expert tensors, and the parameters a
    token does not read whole (total less active, the embedding) as ``token_embd`` (on
    the host, as llama.cpp keeps it). Its bytes are exact in total and per device to
    within how the facts split the non-expert part."""
    moe_first = facts.first_dense
    per_expert = facts.expert_params
    expert_layers = range(moe_first, facts.layers) if facts.num_experts else range(0)
    layer_other = facts.other_active / facts.layers  # what one token reads per layer besides experts
    rest = max(0.0, facts.other_total - layer_other * facts.layers)
    tensors = [_plan_tensor("token_embd.weight", int(rest), math.ceil(rest * bits.other / 8), f"{bits.other:g}-bit"),
               _plan_tensor("output.weight", 0, 0, f"{bits.other:g}-bit")]
    fmt = bits.expert_format or f"{bits.experts:g}-bit"
    for i in range(facts.layers):
        elements = int(layer_other)
        tensors.append(_plan_tensor(f"blk.{i}.attn_and_norms.weight", elements, math.ceil(elements * bits.other / 8),
                                    f"{bits.other:g}-bit"))  # fmt: skip
        if i in expert_layers:
            for kind in ("gate", "up", "down"):
                elements = int(facts.num_experts * per_expert / 3)
                tensors.append(_plan_tensor(f"blk.{i}.ffn_{kind}_exps.weight", elements,
                                            math.ceil(elements * bits.experts / 8), fmt))  # fmt: skip
    kv = tuple(facts.kv_bytes_per_token / facts.layers for _ in range(facts.layers))
    return PlanModel(facts.name, architecture or "facts", f"{facts.name} facts ({bits.how})", facts.layers, moe_first,
                     facts.num_experts, facts.top_k, facts.hidden, 0, kv, tuple(tensors))  # fmt: skip
