"""Configuration of the Qwen-3.5-MoE-shaped decoder.

Field names are the Hugging Face config keys where such a key exists, so a
published ``config.json`` loads as is. Two fields are ours: ``max_seq_len``
(the length of the KV cache the decode step attends over) and ``dtype``.

Rules:
  1. A ``MoEConfig`` is valid or it does not exist: ``__post_init__`` checks
     every field and raises ``ConfigError`` saying what was wrong and what is
     valid.
  2. Layer ``i`` is full attention when ``(i + 1) % full_attention_interval == 0``,
     else Gated DeltaNet linear attention (``layer_types``).
  3. ``from_json`` reads a flat file or one that nests the text model under
     ``text_config``; unknown keys are ignored, missing required keys are an
     error naming all of them. ``rope_theta`` / ``partial_rotary_factor`` may
     also sit in ``rope_parameters`` (newer Hugging Face files).
  4. The full published configuration has one source of truth:
     ``data/qwen3_5_moe_35b_a3b.json`` at the repository root.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
from ..errors import WorkbenchError
from ..file_reading import parse_json, read_regular_file

FULL_CONFIG_FILE = "qwen3_5_moe_35b_a3b.json"

#: config dtype string -> torch dtype
DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float64": torch.float64,
}

# Keys a JSON file may omit; everything else is required.
_OPTIONAL_DEFAULTS: dict[str, Any] = {"max_seq_len": 4096, "dtype": "float32"}


class ConfigError(WorkbenchError, ValueError):
    """A model configuration that is inconsistent or cannot be read."""


@dataclass(frozen=True)
class MoEConfig:
    """Hyperparameters of a Qwen-3.5-MoE-shaped decoder (HF key names)."""

    vocab_size: int  # tokens in the vocabulary (embedding rows, logits)
    hidden_size: int  # width of the residual stream
    num_hidden_layers: int  # decoder blocks
    num_attention_heads: int  # query heads of a full-attention layer
    num_key_value_heads: int  # K/V heads of a full-attention layer (GQA groups)
    head_dim: int  # width of one full-attention head
    partial_rotary_factor: float  # fraction of head_dim that gets rotary embedding
    rope_theta: float  # rotary base frequency
    rms_norm_eps: float  # epsilon of every RMSNorm
    linear_num_key_heads: int  # q/k heads of a Gated DeltaNet layer
    linear_num_value_heads: int  # v heads (and recurrent states) of a DeltaNet layer
    linear_key_head_dim: int  # width of one DeltaNet q/k head
    linear_value_head_dim: int  # width of one DeltaNet v head
    linear_conv_kernel_dim: int  # taps of the depthwise causal conv1d
    num_experts: int  # routed experts per MoE block
    num_experts_per_tok: int  # experts each token is routed to (top-k)
    moe_intermediate_size: int  # hidden width of one routed expert's SwiGLU
    shared_expert_intermediate_size: int  # hidden width of the shared expert's SwiGLU
    full_attention_interval: int  # every n-th layer is full attention
    max_seq_len: int = 4096  # KV-cache length of the decode step (ours, not HF)
    dtype: str = "float32"  # parameter and cache dtype: one of DTYPES

    def __post_init__(self) -> None:
        _validate(self)

    # -- derived sizes -------------------------------------------------------

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def layer_types(self) -> tuple[str, ...]:
        """Rule 2: ``"full_attention"`` every ``full_attention_interval``-th layer."""
        n = self.full_attention_interval
        return tuple(
            "full_attention" if (i + 1) % n == 0 else "linear_attention"
            for i in range(self.num_hidden_layers)
        )

    @property
    def rotary_dim(self) -> int:
        """Leading dims of each head that are rotated (even)."""
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def linear_key_dim(self) -> int:
        return self.linear_num_key_heads * self.linear_key_head_dim

    @property
    def linear_value_dim(self) -> int:
        return self.linear_num_value_heads * self.linear_value_head_dim

    @property
    def linear_conv_dim(self) -> int:
        """Channels of the DeltaNet conv: q, k and v concatenated."""
        return 2 * self.linear_key_dim + self.linear_value_dim

    # -- constructors --------------------------------------------------------

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "MoEConfig":
        """Build from a Hugging Face style mapping (rule 3)."""
        if not isinstance(raw, Mapping):
            raise ConfigError(f"a config must be a JSON object, got {type(raw).__name__}")
        text = raw.get("text_config", raw)
        if not isinstance(text, Mapping):
            raise ConfigError("'text_config' must be a JSON object")
        merged: dict[str, Any] = dict(text)
        rope = merged.get("rope_parameters") or merged.get("rope_scaling") or {}
        if isinstance(rope, Mapping):
            for key in ("rope_theta", "partial_rotary_factor"):
                if key not in merged and key in rope:
                    merged[key] = rope[key]
        if "dtype" not in merged:
            # HF writes the dtype as "dtype" (new) or "torch_dtype" (old), at
            # either nesting level.
            found = [src[key] for src in (merged, raw) for key in ("dtype", "torch_dtype")
                     if src.get(key) is not None]
            if found:
                merged["dtype"] = found[0]

        names = [f.name for f in dataclasses.fields(cls)]
        missing = [n for n in names if n not in merged and n not in _OPTIONAL_DEFAULTS]
        if missing:
            raise ConfigError(
                f"config is missing required keys: {', '.join(missing)} "
                "(looked at the top level and under 'text_config')"
            )
        values = {n: merged.get(n, _OPTIONAL_DEFAULTS.get(n)) for n in names}
        values = {n: _coerce(n, v) for n, v in values.items()}
        config = cls(**values)  # type: ignore[arg-type]  # _coerce checked each value's type
        _check_layer_types(config, merged.get("layer_types"))
        return config

    @classmethod
    def from_json(cls, path: str | os.PathLike[str]) -> "MoEConfig":
        """Read a Hugging Face style ``config.json`` (rule 3)."""
        if not isinstance(path, (str, os.PathLike)):
            raise ConfigError(f"path must be a path to a JSON config file (a str or os.PathLike), got {type(path).__name__} {path!r}")
        p = Path(path)
        if p.is_dir():
            raise ConfigError(f"config path {p} is a directory; give the path of a JSON file such as {p / 'config.json'}")
        if not p.exists():
            raise ConfigError(f"config file not found: {p}")
        raw = parse_json(read_regular_file(p, "JSON config file", ConfigError), f"config file {p}", ConfigError)
        try:
            return cls.from_dict(raw)
        except ConfigError as e:
            raise ConfigError(f"{p}: {e}") from None

    @classmethod
    def tiny(cls, **overrides: Any) -> "MoEConfig":
        """Same structure as the published model, small enough for a 2-core CPU.

        Four layers so that exactly one (the last) is full attention.
        """
        base = dict(
            vocab_size=512,
            hidden_size=64,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=16,
            partial_rotary_factor=0.25,
            rope_theta=10_000_000.0,
            rms_norm_eps=1e-6,
            linear_num_key_heads=2,
            linear_num_value_heads=4,
            linear_key_head_dim=16,
            linear_value_head_dim=16,
            linear_conv_kernel_dim=4,
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=32,
            full_attention_interval=4,
            max_seq_len=32,
            dtype="float32",
        )
        unknown = sorted(set(overrides) - set(base))
        if unknown:
            raise ConfigError(f"unknown config field(s) {', '.join(unknown)}; valid fields are {', '.join(base)}")
        base.update(overrides)
        return cls(**base)  # type: ignore[arg-type]  # __post_init__ checks every field

    @classmethod
    def full(cls) -> "MoEConfig":
        """The published 35B-A3B configuration (rule 4)."""
        return cls.from_json(full_config_path())


def full_config_path() -> Path:
    """Where the shipped full configuration lives.

    An installed copy under ``workbench/models/data/`` wins (package data); a
    source checkout reads the repository's ``data/`` folder.
    """
    here = Path(__file__).resolve().parent
    candidates = [here / "data" / FULL_CONFIG_FILE, here.parents[1] / "data" / FULL_CONFIG_FILE]
    for c in candidates:
        if c.is_file():
            return c
    raise ConfigError(
        f"cannot find {FULL_CONFIG_FILE}; looked in: " + ", ".join(str(c.parent) for c in candidates)
    )


# -- private helpers ---------------------------------------------------------

_FLOAT_FIELDS = {"partial_rotary_factor", "rope_theta", "rms_norm_eps"}


def _coerce(name: str, value: Any) -> Any:
    """JSON gives ``10000000`` for a float field; accept it, reject real mismatches."""
    if name in _FLOAT_FIELDS and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def _validate(c: MoEConfig) -> None:
    errors: list[str] = []
    for f in dataclasses.fields(c):
        v = getattr(c, f.name)
        if f.name == "dtype":
            if v not in DTYPES:
                errors.append(f"dtype={v!r} is not one of {sorted(DTYPES)}")
        elif f.name in _FLOAT_FIELDS:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                errors.append(f"{f.name}={v!r} must be a finite number")
            elif v <= 0:
                errors.append(f"{f.name}={v!r} must be > 0")
        else:
            if isinstance(v, bool) or not isinstance(v, int):
                errors.append(f"{f.name}={v!r} must be an integer")
            elif v <= 0:
                errors.append(f"{f.name}={v!r} must be a positive integer")
    if errors:  # later checks assume well-typed positive fields
        raise ConfigError("invalid MoEConfig: " + "; ".join(errors))

    def need(ok: bool, msg: str) -> None:
        if not ok:
            errors.append(msg)

    need(
        c.num_attention_heads % c.num_key_value_heads == 0,
        f"num_attention_heads={c.num_attention_heads} must be a multiple of "
        f"num_key_value_heads={c.num_key_value_heads} (grouped-query attention)",
    )
    need(
        c.linear_num_value_heads % c.linear_num_key_heads == 0,
        f"linear_num_value_heads={c.linear_num_value_heads} must be a multiple of "
        f"linear_num_key_heads={c.linear_num_key_heads}",
    )
    need(
        c.num_experts_per_tok <= c.num_experts,
        f"num_experts_per_tok={c.num_experts_per_tok} must be <= num_experts={c.num_experts}",
    )
    need(
        c.partial_rotary_factor <= 1.0,
        f"partial_rotary_factor={c.partial_rotary_factor} must be in (0, 1]",
    )
    rot = c.rotary_dim
    need(
        rot >= 2 and rot % 2 == 0,
        f"head_dim * partial_rotary_factor = {c.head_dim} * {c.partial_rotary_factor} "
        f"gives {rot} rotary dims; it must be an even number >= 2",
    )
    need(
        c.linear_conv_kernel_dim >= 2,
        f"linear_conv_kernel_dim={c.linear_conv_kernel_dim} must be >= 2 "
        "(the conv state keeps kernel-1 columns)",
    )
    if errors:
        raise ConfigError("invalid MoEConfig: " + "; ".join(errors))


def _check_layer_types(config: MoEConfig, layer_types: Any) -> None:
    """A file's explicit ``layer_types`` must match the interval rule we build."""
    if layer_types is None:
        return
    if list(layer_types) != list(config.layer_types):
        raise ConfigError(
            "layer_types in the file does not follow full_attention_interval="
            f"{config.full_attention_interval} (layer i is full attention when "
            "(i+1) % interval == 0); this model supports only that pattern"
        )
