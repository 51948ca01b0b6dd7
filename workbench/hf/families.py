"""The mixture-of-experts causal-LM families of the installed transformers, found by what
they are, and a tiny configuration of each built from its own config class.

The workbench ships configurations for a few families (``workbench.hf.configs``); this
module reaches every other one the installed transformers has, so a family added to
transformers can be tried through every stage without a configuration file.

Rules:
1. A family is a ``model_type`` with a causal-LM class (transformers' causal-LM auto
   mapping) whose config class, built with its defaults, declares a routed-expert count
   (``num_experts``, ``num_local_experts``, ``n_routed_experts``, ``moe_num_experts``;
   of its text configuration for a multimodal one), even unset (None: the family is a
   mixture of experts when the count is given). A multimodal type and its text type are
   one family, named by the text type.
2. ``tiny_family_config(model_type)`` starts from the config class's defaults and shrinks
   every size it recognises by key name: width 64, 4 heads of 16, 8 routed experts of
   which 2 are chosen (switched on where a flag turns them off: ``enable_moe_block``,
   ``is_moe``), a vocabulary of 128, a state-space dt rank of 8 and 2 groups, and as few layers as show every kind of each
   of the default's per-layer kind lists (``layer_types``, ``mlp_layer_types``, the
   layers named by ``moe_layers``/``mlp_only_layers``: a dense first layer must not hide
   the sparse ones, nor linear-attention layers the full-attention one): the first two
   layers and the first layer of each kind not yet kept. Per-layer lists of the default's
   length keep the same layers, ``first_k_dense_replace`` counts the leading dense layers
   kept (``num_dense_layers`` leaves at least one sparse layer after them), and kinds set by a period and an offset (``attn_layer_period``/``_offset``) are
   wrapped into the kept layers. Keys it does not recognise keep the default;
   ``overrides`` replace keys last.
3. A tiny model keeps at least one attention layer: a cache reads its length from one
   (a hybrid whose default layers are all linear attention or state-space gets a last
   ``full_attention`` layer).
4. Nothing is downloaded: a configuration is ``AutoConfig.for_model(model_type, …)``.
5. ``tiny_family_model(model_type)`` builds the tiny model with seeded weights. When
   transformers' ``from_config`` fails, the config class's own defaults are built too
   (on the meta device: no memory): if they fail as well, the family cannot be built by
   this transformers at all — a ``TransformersBuildError`` that says so, naming both
   failing lines; otherwise the tiny configuration is at fault — an ``HFError``.
   Both builds fill rule 6's values first, so a family fails only for what no fill mends.
6. Some config classes leave unset (None) in their defaults a value their model reads
   unconditionally, so transformers cannot build them as they stand. Such a value is
   filled, only when the default leaves it unset, with what the model's own code accepts:
   ``head_dim`` is derived, ``hidden_size // num_attention_heads`` (the width the
   attention splits into its heads); ``n_shared_experts`` is 1 (the model multiplies the
   expert width by it to size its shared expert); ``layer_types`` is one kind per layer,
   cycling the kinds the modeling code names besides ``full_attention`` and ending with a
   ``full_attention`` layer (rule 3), so a hybrid keeps both; a token indexer's
   (``indexer_*``) heads are the attention's heads of ``head_dim`` (its key has one head,
   as the model requires), choosing a budget of 4 tokens in blocks of 2 (the budget must
   be a multiple of the block). ``moe_intermediate_size`` and the routing counts unset are
   set by rule 2's sizes. ``unset_fills(model_type)`` names what a family's tiny
   configuration filled.
"""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any

import torch

from ..capture_failures import model_line
from .configs import HFError

__all__ = ["EXPERT_COUNT_KEYS", "TransformersBuildError", "moe_families", "tiny_family_config", "tiny_family_model", "unset_fills"]

#: Config keys that declare the routed-expert count (rule 1).
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TINY_EXPERTS, TINY_TOP_K, TINY_VOCAB, TINY_WIDTH, TINY_HEAD, TINY_DT_RANK = 8, 2, 128, 64, 16, 8

#: Rule 2: (key pattern, tiny value); the first pattern that matches a key sets it.
_SIZES: tuple[tuple[str, int], ...] = (
    (r"(num_experts|num_local_experts|n_routed_experts|moe_num_experts)", TINY_EXPERTS),
    (r"zero_expert_num", 2),
    (r"(num_experts_per_tok|num_experts_per_token|top_k_experts|moe_topk|moe_k|top_k|num_selected_experts)", TINY_TOP_K),
    (r"(n_group|topk_group|num_expert_group)", 1),
    (r"n_groups", 2),  # a state-space layer's groups: they must divide its 4 heads
    (r"hidden_size", TINY_WIDTH),
    (r"(moe|expert|shared).*(intermediate_size|ffn_hidden_size)|(intermediate_size|ffn_hidden_size).*(moe|expert|shared)", 32),
    (r".*(intermediate_size|ffn_hidden_size).*", 128),
    (r"num_key_value_heads|num_kv_heads", 2),
    (r"(num_attention_heads|num_heads|.*_num_.*heads|.*_n_heads|n_head)", 4),
    (r"(qk_rope_head_dim|qk_nope_head_dim)", 8),
    (r".*(head_dim|kv_channels|head_size)", TINY_HEAD),
    (r"kv_lora_rank", 16),
    (r"q_lora_rank", 32),
    (r"(unpadded_)?vocab_size", TINY_VOCAB),
    (r"max_position_embeddings", 256),
    (r"(sliding_window|attention_chunk_size|block_size)", 16),
)
#: Keys set even when the default leaves them unset (None): routing needs them.
_SET_WHEN_UNSET = frozenset({"num_experts_per_tok", "num_experts_per_token", "top_k_experts", "moe_intermediate_size", "n_group", "topk_group", *EXPERT_COUNT_KEYS})
_LAYER_COUNT_KEYS = ("num_hidden_layers", "num_layers")
#: Flags that switch a family's routed experts on (rule 2: off by default in Gemma 4, Doge).
_MOE_FLAGS = ("enable_moe_block", "is_moe", "use_moe")
#: Per-layer lists of layer indices rather than kinds (rule 2).
_LAYER_INDEX_KEYS = ("moe_layers", "mlp_only_layers")
#: Layer kinds that keep no keys and values (rule 3).
_RECURRENT_KINDS = frozenset({"linear_attention", "mamba", "conv"})
#: A token indexer's keys, all unset when the family's indexer has no default (rule 6).
_INDEXER_KEYS = ("indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget", "indexer_compress_ratio")


def moe_families() -> tuple[str, ...]:
    """Rule 1: ``model_type`` of every MoE causal-LM family of the installed transformers, sorted."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    found: dict[str, str] = {}
    for model_type in sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES):
        try:
            config = CONFIG_MAPPING[model_type]()
        except Exception:  # a config class whose defaults do not validate has no tiny form here
            continue
        text = _text_config(config)
        if any(hasattr(text, key) for key in EXPERT_COUNT_KEYS):
            # a multimodal type and its text type name one family: keep the text type
            same = type(text).__name__
            if same not in found or model_type == getattr(text, "model_type", None):
                found[same] = model_type
    return tuple(sorted(found.values()))
    return tuple(found)


def tiny_family_config(model_type: str, **overrides: Any) -> Any:
    """Rule 2: a tiny float32 configuration of ``model_type`` (an ``HFError`` for a type the
    installed transformers does not have, or whose config class refuses the sizes)."""
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if not isinstance(model_type, str) or model_type not in CONFIG_MAPPING:
        raise HFError(f"transformers {_version()} has no model type {model_type!r}; workbench.hf.moe_families() lists its MoE families")
    default = _text_config(CONFIG_MAPPING[model_type]()).to_dict()
    keys: dict[str, Any] = {}
    for key, value in default.items():
        unset = value is None and key in _SET_WHEN_UNSET
        if not unset and (isinstance(value, bool) or not isinstance(value, int) or key.startswith("_")):
            continue
        tiny = next((size for pattern, size in _SIZES if re.fullmatch(pattern, key)), None)
        if tiny is not None:
            keys[key] = min(value, tiny) if key in ("num_experts_per_tok", "num_experts_per_token", "zero_expert_num") and value else tiny
    if isinstance(default.get("qk_rope_head_dim"), int):  # latent attention: the head is its rope part
        keys.update(head_dim=8, qk_head_dim=16, num_key_value_heads=keys.get("num_attention_heads", 4))
    for key in [k for k, v in default.items() if k.endswith("dt_rank") and (v == "auto" or isinstance(v, int))]:
        # not "auto" (width / 16 = 4, the convolution's kernel): a (C, 4) projection beside a
        # [C, 1, 4] convolution weight would read as a router and its experts in a program
        keys[key] = TINY_DT_RANK
    keys.update({key: True for key in _MOE_FLAGS if default.get(key) is False})
    keys.update(_tiny_layers(default))
    for i, key in enumerate(("pad_token_id", "bos_token_id", "eos_token_id")):
        value = default.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < TINY_VOCAB:
            keys[key] = i
    keys.update(_unset_fills(model_type, default, keys))
    keys["dtype"] = "float32"
    keys.update(overrides)
    text_type = default.get("model_type", model_type)
    try:
        return AutoConfig.for_model(text_type, **keys)
    except Exception as exc:
        raise HFError(f"transformers cannot build a tiny {model_type!r} configuration: {type(exc).__name__}: {exc}") from None


def unset_fills(model_type: str) -> dict[str, Any]:
    """Rule 6: the values ``tiny_family_config(model_type)`` filled because the config
    class leaves them unset (None) though the model requires them, by key ({} for none)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = tiny_family_config(model_type).to_dict()
    default = _text_config(CONFIG_MAPPING[model_type]()).to_dict()
    return {key: config[key] for key in _unset_fills(model_type, default, default) if key in config}


def _unset_fills(model_type: str, default: dict[str, Any], sized: dict[str, Any]) -> dict[str, Any]:
    """Rule 6's values for the keys ``default`` leaves unset, from the sizes in ``sized``
    (the tiny keys, or the defaults themselves) over the defaults."""
    size = {**default, **sized}
    fills: dict[str, Any] = {}
    heads = size.get("num_attention_heads")
    if "head_dim" in default and default["head_dim"] is None and isinstance(heads, int) and heads > 0:
        fills["head_dim"] = size["hidden_size"] // heads
    if "n_shared_experts" in default and default["n_shared_experts"] is None:
        fills["n_shared_experts"] = 1
    count_key = next((k for k in _LAYER_COUNT_KEYS if isinstance(size.get(k), int)), None)
    if "layer_types" in default and default["layer_types"] is None and count_key is not None:
        kinds = [*_named_layer_kinds(model_type), "full_attention"]
        count = size[count_key]
        # cycled so the last layer is an attention layer (rule 3) and every kind shows
        fills["layer_types"] = [kinds[(i - count) % len(kinds)] for i in range(count)]
    if all(default.get(key, 0) is None for key in _INDEXER_KEYS):
        head = fills.get("head_dim", size.get("head_dim"))
        fills.update(indexer_n_heads=heads, indexer_kv_heads=1, indexer_head_dim=head, indexer_budget=4, indexer_compress_ratio=2)
    return fills


def _named_layer_kinds(model_type: str) -> list[str]:
    """Layer kinds other than ``full_attention`` that the family's modeling code compares a
    layer's ``layer_types`` entry with (its source, read as text)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    module_name = CONFIG_MAPPING[model_type].__module__.replace(".configuration_", ".modeling_")
    try:
        source = inspect.getsource(importlib.import_module(module_name))
    except (ImportError, OSError, TypeError):  # no modeling source to read: attention layers only
        return []
    found = re.findall(r"layer_types?(?:\[[^\]]*\])?\s*[!=]=\s*[\"'](\w+)[\"']", source)
    return sorted(set(found) - {"full_attention"})


class TransformersBuildError(HFError):
    """Rule 5: transformers cannot build this family from its own config class's defaults."""


def tiny_family_model(model_type: str, *, seed: int = 0, **overrides: Any) -> Any:
    """Rule 5: the tiny ``model_type`` model (``tiny_family_config``), weights seeded
    with ``seed``, in eval mode; the global random state is left as it was."""
    from transformers import AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    config = tiny_family_config(model_type, **overrides)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            return AutoModelForCausalLM.from_config(config).eval()
    except Exception as exc:  # noqa: BLE001 - transformers' own failure, judged below
        failure = f"{type(exc).__name__}: {_first_line(exc)} at {model_line(exc) or 'an unknown line'}"
    fills: dict[str, Any] = {}
    try:
        with torch.device("meta"):
            defaults = _text_config(CONFIG_MAPPING[model_type]())
            fills = _unset_fills(model_type, defaults.to_dict(), {})
            for key, value in fills.items():
                setattr(defaults, key, value)
            AutoModelForCausalLM.from_config(defaults)
    except Exception as exc:  # noqa: BLE001
        default = f"{type(exc).__name__}: {_first_line(exc)} at {model_line(exc) or 'an unknown line'}"
        unset = " (it leaves unset, None, a value the model requires)" if "NoneType" in failure + default else ""
        filled = f" even with {', '.join(fills)} filled as it leaves them unset" if fills else ""
        raise TransformersBuildError(
            f"transformers {_version()} cannot build {model_type!r} at this version: from_config fails with its "
            f"config class's own defaults{unset}{filled}, " + (f"as with the tiny configuration: {failure}" if default == failure
            else f"{default}; with the tiny configuration, {failure}") + "; give the missing values with "
            "overrides=, or use a transformers version that builds this family"
        ) from None
    raise HFError(
        f"the tiny {model_type!r} configuration does not build ({failure}), though the config class's defaults "
        "do: give the key that line reads with overrides="
    )


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:200] if lines else ""


def _tiny_layers(default: dict[str, Any]) -> dict[str, Any]:
    """Rule 2's layers: the first two layers and the first layer of every kind not yet
    kept, every per-layer list cut to the kept layers, and (rule 3) one attention layer."""
    key = next((k for k in _LAYER_COUNT_KEYS if isinstance(default.get(k), int)), None)
    if key is None:
        return {}
    total = default[key]
    per_layer = {k: v for k, v in default.items() if isinstance(v, list) and len(v) == total and k != "architectures"}
    indexed = {k: v for k, v in default.items() if k in _LAYER_INDEX_KEYS and isinstance(v, list)}
    kinds = [v for k, v in per_layer.items() if k.endswith("layer_types") and v]
    kinds += [[i in v for i in range(total)] for v in indexed.values()]
    kept = list(range(min(2, total) if total > 0 else 2))
    for kind in kinds:
        for i, value in enumerate(kind):
            if value not in {kind[j] for j in kept}:
                kept.append(i)
    kept.sort()
    keys: dict[str, Any] = {key: len(kept)}
    keys.update({name: [value[i] for i in kept] for name, value in per_layer.items()})
    keys.update({name: [kept.index(i) for i in value if i in kept] for name, value in indexed.items()})
    layer_types = keys.get("layer_types")
    if isinstance(layer_types, list) and layer_types and all(k in _RECURRENT_KINDS for k in layer_types):
        keys["layer_types"] = [*layer_types[:-1], "full_attention"]  # rule 3
    if isinstance(default.get("num_dense_layers"), int):  # leading dense layers must not hide the sparse ones
        keys["num_dense_layers"] = min(default["num_dense_layers"], len(kept) - 1)
    if isinstance(default.get("first_k_dense_replace"), int):
        mlp_kinds = keys.get("mlp_layer_types")
        # the two must agree: the leading dense layers of the kept kinds
        keys["first_k_dense_replace"] = next((i for i, k in enumerate(mlp_kinds) if k != "dense"), len(mlp_kinds)) \
            if isinstance(mlp_kinds, list) else min(default["first_k_dense_replace"], 1)
    count = len(kept)
    for name, value in default.items():  # layer kinds set by a period and an offset (Jamba's)
        match = re.fullmatch(r"(\w+)_layer_period", name)
        offset = f"{match.group(1)}_layer_offset" if match else ""
        if match and isinstance(value, int) and isinstance(default.get(offset), int) and default[offset] >= count:
            keys[name] = count
            keys[offset] = default[offset] % count
    return keys


def _text_config(config: Any) -> Any:
    """The text model's configuration of a multimodal config, else the config itself."""
    try:
        return config.get_text_config()
    except Exception:  # several text configurations (an encoder and a decoder): not a causal LM's
        return config


def _version() -> str:
    import transformers

    return str(transformers.__version__)
