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
   which 2 are chosen, a vocabulary of 128, and as few layers (2 to 4) as show every
   kind of each of the default's per-layer kind lists (``layer_types``, ``mlp_layer_types``:
   a dense first layer must not hide the sparse ones); per-layer lists of the default's
   length are cut to the same layers, and ``first_k_dense_replace`` counts the leading
   dense layers kept. Keys it does not recognise keep the default; ``overrides`` replace
   keys last.
3. Nothing is downloaded: a configuration is ``AutoConfig.for_model(model_type, …)``.
"""

from __future__ import annotations

import re
from typing import Any

from .configs import HFError

__all__ = ["EXPERT_COUNT_KEYS", "moe_families", "tiny_family_config"]

#: Config keys that declare the routed-expert count (rule 1).
EXPERT_COUNT_KEYS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
TINY_EXPERTS, TINY_TOP_K, TINY_VOCAB, TINY_WIDTH, TINY_HEAD = 8, 2, 128, 64, 16

#: Rule 2: (key pattern, tiny value); the first pattern that matches a key sets it.
_SIZES: tuple[tuple[str, int], ...] = (
    (r"(num_experts|num_local_experts|n_routed_experts|moe_num_experts)", TINY_EXPERTS),
    (r"zero_expert_num", 2),
    (r"(num_experts_per_tok|moe_topk|moe_k|top_k|num_selected_experts)", TINY_TOP_K),
    (r"(n_group|topk_group|num_expert_group)", 1),
    (r"hidden_size", TINY_WIDTH),
    (r"(moe|expert|shared).*(intermediate_size|ffn_hidden_size)|(intermediate_size|ffn_hidden_size).*(moe|expert|shared)", 32),
    (r".*(intermediate_size|ffn_hidden_size).*", 128),
    (r"num_key_value_heads|num_kv_heads", 2),
    (r"(num_attention_heads|num_heads|.*_num_.*heads|.*_n_heads|n_head)", 4),
    (r"(qk_rope_head_dim|qk_nope_head_dim)", 8),
    (r".*(head_dim|kv_channels|head_size)", TINY_HEAD),
    (r"kv_lora_rank", 16),
    (r"q_lora_rank", 32),
    (r"vocab_size", TINY_VOCAB),
    (r"max_position_embeddings", 256),
    (r"(sliding_window|attention_chunk_size|block_size)", 16),
)
#: Keys set even when the default leaves them unset (None): routing needs them.
_SET_WHEN_UNSET = frozenset({"num_experts_per_tok", "n_group", "topk_group", *EXPERT_COUNT_KEYS})
_LAYER_COUNT_KEYS = ("num_hidden_layers", "num_layers")


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
            keys[key] = min(value, tiny) if key in ("num_experts_per_tok", "zero_expert_num") and value else tiny
    if isinstance(default.get("qk_rope_head_dim"), int):  # latent attention: the head is its rope part
        keys.update(head_dim=8, qk_head_dim=16, num_key_value_heads=keys.get("num_attention_heads", 4))
    keys.update(_tiny_layers(default))
    for i, key in enumerate(("pad_token_id", "bos_token_id", "eos_token_id")):
        value = default.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value < TINY_VOCAB:
            keys[key] = i
    keys["dtype"] = "float32"
    keys.update(overrides)
    text_type = default.get("model_type", model_type)
    try:
        return AutoConfig.for_model(text_type, **keys)
    except Exception as exc:
        raise HFError(f"transformers cannot build a tiny {model_type!r} configuration: {type(exc).__name__}: {exc}") from None


def _tiny_layers(default: dict[str, Any]) -> dict[str, Any]:
    """Rule 2's layers: the shortest prefix (2 to 4 layers) that shows every layer kind,
    and every per-layer list cut to it."""
    key = next((k for k in _LAYER_COUNT_KEYS if isinstance(default.get(k), int)), None)
    if key is None:
        return {}
    total = default[key]
    kinds = [v for k, v in default.items() if k.endswith("layer_types") and isinstance(v, list) and v]
    count = 2
    while any(count < min(4, len(v)) and set(v[:count]) != set(v) for v in kinds):
        count += 1
    count = min(count, total) if total > 0 else count
    keys: dict[str, Any] = {key: count}
    for name, value in default.items():
        if isinstance(value, list) and len(value) == total and name != "architectures":
            keys[name] = value[:count]
        elif name in ("moe_layers", "mlp_only_layers") and isinstance(value, list):
            keys[name] = [i for i in value if isinstance(i, int) and i < count]
        elif name == "first_k_dense_replace" and isinstance(value, int):
            keys[name] = min(value, 1)
    mlp_kinds = keys.get("mlp_layer_types")
    if isinstance(mlp_kinds, list) and isinstance(default.get("first_k_dense_replace"), int):
        # the two must agree: the leading dense layers of the kept kinds
        keys["first_k_dense_replace"] = next((i for i, k in enumerate(mlp_kinds) if k != "dense"), len(mlp_kinds))
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
