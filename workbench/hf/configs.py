"""The transformers model families the workbench ships configurations for, and loading
configurations from a family name, a JSON file, a mapping or a config object.

Rules:
1. Every family has a tiny random-weight configuration (hidden 64, 2-4 layers, 8 experts,
   top-2, vocabulary 128, float32: runs in well under a second on a CPU) and a published
   one (full size, for shape-only analysis), both JSON files under the repository's
   ``data/hf/`` folder; Qwen3.5-MoE's published one is the built-in model's
   ``data/qwen3_5_moe_35b_a3b.json``, so both models read one source of truth.
2. A JSON file is a Hugging Face ``config.json``: flat, or nesting the text model under
   ``text_config`` (then that part is read); ``model_type`` names the architecture; keys
   that start with ``_`` (our ``_comment``) are notes, never passed on.
3. Loading never reaches a hub: a configuration is built with transformers'
   ``AutoConfig.for_model(model_type, **keys)``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import WorkbenchError
from ..file_reading import parse_json, read_regular_file

__all__ = ["FAMILIES", "Family", "HFError", "config_file", "family", "load_config", "published_config", "tiny_config"]


class HFError(WorkbenchError, ValueError):
    """A transformers model, configuration or cache the workbench cannot take as given."""


@dataclass(frozen=True)
class Family:
    """A transformers architecture with its shipped configurations."""

    name: str  # the workbench's name: "qwen3_5_moe", also what --model hf:NAME takes
    title: str  # how people write it: "Qwen3.5-MoE"
    tiny_file: str  # file under data/hf/ (rule 1)
    published_file: str  # file under data/hf/, or "../name.json" for one in data/
    moe: bool  # has routed experts


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family("qwen3_moe", "Qwen3-MoE", "qwen3_moe_tiny.json", "qwen3_moe_15b_a2b.json", True),
        Family("qwen3_5_moe", "Qwen3.5-MoE", "qwen3_5_moe_tiny.json", "../qwen3_5_moe_35b_a3b.json", True),
        Family("qwen3_next", "Qwen3-Next", "qwen3_next_tiny.json", "qwen3_next_80b_a3b.json", True),
        Family("mixtral", "Mixtral", "mixtral_tiny.json", "mixtral_8x7b.json", True),
        Family("deepseek_v3", "DeepSeek-V3", "deepseek_v3_tiny.json", "deepseek_v3_671b.json", True),
        Family("deepseek_v2", "DeepSeek-V2", "deepseek_v2_tiny.json", "deepseek_v2_39b_a7b.json", True),
        Family("gpt_oss", "GPT-OSS", "gpt_oss_tiny.json", "gpt_oss_120b.json", True),
        Family("olmoe", "OLMoE", "olmoe_tiny.json", "olmoe_13b_a2b.json", True),
        Family("qwen3", "Qwen3 (dense)", "qwen3_tiny.json", "qwen3_dense_12b.json", False),
        Family("llama", "Llama (dense)", "llama_tiny.json", "llama_2_7b.json", False),
    )
}


def family(name: str) -> Family:
    """The family called ``name`` (an ``hf:`` prefix is accepted)."""
    key = name.removeprefix("hf:") if isinstance(name, str) else name
    if key not in FAMILIES:
        raise HFError(f"unknown transformers family {name!r}; the workbench ships {', '.join(FAMILIES)}")
    return FAMILIES[key]


def config_file(name: str, size: str = "tiny") -> Path:
    """Path of a family's shipped configuration; ``size`` is ``"tiny"`` or ``"published"``."""
    if size not in ("tiny", "published"):
        raise HFError(f"size must be 'tiny' or 'published', got {size!r}")
    fam = family(name)
    relative = fam.tiny_file if size == "tiny" else fam.published_file
    here = Path(__file__).resolve().parent
    candidates = [here / "data" / relative, here.parents[1] / "data" / "hf" / relative]
    for path in candidates:
        if path.is_file():
            return path.resolve()
    raise HFError(f"cannot find {relative} of {fam.title}; looked in " + ", ".join(str(c.parent) for c in candidates))


def tiny_config(name: str, **overrides: Any) -> Any:
    """The tiny random-weight configuration of a family (rule 1), as a transformers config."""
    return load_config(config_file(name, "tiny"), **overrides)


def published_config(name: str, **overrides: Any) -> Any:
    """The published full-size configuration of a family (rule 1): analyse it shape-only."""
    return load_config(config_file(name, "published"), **overrides)


def load_config(source: Any, **overrides: Any) -> Any:
    """A transformers config from ``source``: a config object (copied), a mapping, a JSON
    file path, or a family name (its tiny configuration); ``overrides`` replace keys."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(source, PretrainedConfig):
        config = source.__class__.from_dict(source.to_dict())
        for key, value in overrides.items():
            setattr(config, key, value)
        return config
    if isinstance(source, str) and source.removeprefix("hf:") in FAMILIES:
        return tiny_config(source, **overrides)
    if isinstance(source, (str, os.PathLike)):
        raw = _read_json(Path(source))
    elif isinstance(source, Mapping):
        raw = dict(source)
    else:
        raise HFError(
            "a configuration is a transformers config object, a mapping, a JSON file path or a family name "
            f"({', '.join(FAMILIES)}); got {type(source).__name__}"
        )
    text = raw.get("text_config", raw)
    if not isinstance(text, Mapping):
        raise HFError("'text_config' must be a JSON object")
    keys = {k: v for k, v in text.items() if not k.startswith("_")}
    if "dtype" not in keys and isinstance(raw.get("dtype"), str):
        keys["dtype"] = raw["dtype"]
    keys.update(overrides)
    model_type = keys.pop("model_type", None)
    if not isinstance(model_type, str):
        raise HFError("the configuration has no 'model_type' (e.g. 'qwen3_moe'); it names the architecture")
    try:
        return AutoConfig.for_model(model_type, **keys)
    except ValueError as exc:
        raise HFError(f"transformers cannot build a {model_type!r} configuration: {exc}") from None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise HFError(f"config file not found: {path}; give a JSON path or a family name ({', '.join(FAMILIES)})")
    raw = parse_json(read_regular_file(path, "JSON config file", HFError), f"config file {path}", HFError)
    if not isinstance(raw, dict):
        raise HFError(f"config file {path} must hold a JSON object, got {type(raw).__name__}")
    return raw
