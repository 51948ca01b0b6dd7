"""The free text of a published run, read once into structured facts.

A published run says what it ran in words (``NVIDIA GeForce RTX 4090``, ``Q4_K_M (21 GB
file)``, ``--n-cpu-moe 14``, ``-t 16``). The loader (``published_runs``) calls these
readers once per row and keeps only what they return; no model reads prose.

Rules:

1. A name is found by its phrases, literally (``name_phrases`` rule 1).
2. Every text read is at most ``MAX_CELL_CHARS`` characters (the loader refuses longer
   cells); the few patterns here are fixed and linear in the text's length.
3. Each reader returns a value and how it was found, or None and why not.
"""

from __future__ import annotations

import re
from typing import Optional

from ..name_phrases import MAX_CELL_CHARS, find_name, words

__all__ = ["ALL_SOCKETS", "MAX_CELL_CHARS", "cache_text", "copy_rate_text", "find_name", "gpu_experts_text",
           "hit_rate_text", "host_layers_text", "pageable_text", "sockets_text", "stated_file_bytes", "storage_text",
           "threads_text", "words"]  # fmt: skip


def _text(value: object) -> str:
    return value[:MAX_CELL_CHARS] if isinstance(value, str) else ""


_FILE = re.compile(r"\(~?(\d+(?:\.\d+)?)\s*(GiB|GB) file\)")


def stated_file_bytes(value: object) -> Optional[tuple[float, str]]:
    """The file size a weight-format text states (``Q4_K_M (21 GB file)``) in bytes, and
    the phrase; None when none is stated."""
    found = _FILE.search(_text(value))
    if not found:
        return None
    return float(found.group(1)) * (2**30 if found.group(2) == "GiB" else 1e9), found.group(0)[1:-1]


# Both flags mean the routed experts of the first N MoE layers: llama.cpp's --n-cpu-moe, and
# exllamav3's -mcl ("run the routed experts of the first N block-sparse MoE layers on the
# CPU", turboderp-org/exllamav3 exllamav3/model_init.py).
_HOST_LAYERS = re.compile(r"(?<![\w-])(--n-cpu-moe|-ncmoe|ncmoe|-mcl|--moe_cpu_offload)[ =](\d{1,6})")


def host_layers_text(value: object) -> tuple[Optional[int], str]:
    """The first layers whose experts a run keeps on the host (llama.cpp's
    ``--n-cpu-moe N``, exllamav3's ``-mcl N``), or None and why it is not known."""
    text = _text(value)
    found = _HOST_LAYERS.search(text)
    if not found or "not stated" in text or "N is in" in text:
        return None, "which layers' experts are on the host is not stated"
    flag = "-mcl" if found.group(1) in ("-mcl", "--moe_cpu_offload") else "--n-cpu-moe"
    return int(found.group(2)), f"{flag} {found.group(2)}"


_GPU_EXPERTS = re.compile(r"(\d{1,6}) GPU experts|--kt-num-gpu-experts (\d{1,6})")


def gpu_experts_text(value: object) -> int:
    """Experts per layer a host-compute run keeps on the GPU (KTransformers'
    ``--kt-num-gpu-experts N``); 0 when none is stated."""
    found = _GPU_EXPERTS.search(_text(value))
    return int(found.group(1) or found.group(2)) if found else 0


_THREADS = re.compile(r"(?:^|[\s(])(?:-t|--threads|--kt-cpuinfer)[ =](\d{1,4})\b|(\d{1,4}) (?:CPU-infer |CPU )?threads\b")


def threads_text(value: object) -> Optional[int]:
    """Host threads a run states (``-t 16``, ``--kt-cpuinfer 96``, ``16 CPU-infer
    threads``), or None."""
    found = _THREADS.search(_text(value))
    return int(found.group(1) or found.group(2)) if found else None


_POOLS = re.compile(r"--kt-threadpool-count (\d)|(\d) threadpools?\b")


#: ``sockets_text``'s answer for "every socket" (a runtime built NUMA-aware): capped by the host's sockets.
ALL_SOCKETS = 64


def sockets_text(value: object) -> Optional[int]:
    """Sockets whose memory a run's host threads use, when it states them
    (KTransformers' ``--kt-threadpool-count N``, one pool per NUMA node; a build with
    ``USE_NUMA=1``, every socket: ``ALL_SOCKETS``), or None."""
    text = _text(value)
    found = _POOLS.search(text)
    if found:
        return int(found.group(1) or found.group(2))
    if "without USE_NUMA" in text:  # "built without USE_NUMA=1" says the opposite
        return None
    return ALL_SOCKETS if "USE_NUMA=1" in text else None


_INTERLEAVE = re.compile(r"--interleave[= ]all|numactl --interleave")


def numa_text(value: object) -> Optional[str]:
    """How a run places its host weights over NUMA nodes when it says (``machine.numa``):
    ``interleave`` for ``numactl --interleave=all``, ``per_node`` where its threads use
    their own node's memory (``sockets_text``), else None (its runtime's policy)."""
    text = _text(value)
    if _INTERLEAVE.search(text):
        return "interleave"
    return "per_node" if sockets_text(text) is not None else None


_RESIDENT = re.compile(r"(\d+(?:\.\d+)?) GB of experts resident")


def cache_text(value: object) -> tuple[bool, Optional[float]]:
    """(whether a copying run keeps an expert cache, the bytes of experts it states
    resident or None)."""
    text = _text(value)
    if "no expert cache" in text or "re-uploads all selected experts" in text:
        return False, None
    found = _RESIDENT.search(text)
    return True, float(found.group(1)) * 1e9 if found else None


def storage_text(value: object) -> bool:
    """True when a run reads its experts from storage (an NVMe or SSD tier)."""
    lowered = _text(value).lower()
    return "nvme" in lowered or "ssd" in lowered


_HIT = re.compile(r"hit rate (?:of )?~?(\d{1,3}(?:\.\d+)?) ?%|~?(\d{1,3}(?:\.\d+)?) ?% hit rate")


def hit_rate_text(value: object) -> Optional[float]:
    """The expert cache's hit rate a run states (``hit rate 88.7 %``), as a share, or None."""
    found = _HIT.search(_text(value))
    if not found:
        return None
    share = float(found.group(1) or found.group(2)) / 100
    return share if 0 <= share <= 1 else None


_COPY_RATE = re.compile(r"(?:CPU→GPU copy|CPU->GPU copy|copies at|PCIe measured|linear H2D|pcie_linear_h2d|of the) "
                        r"~?(\d{1,4}(?:\.\d+)?) GB/s(?! averaged)(?: the box reaches)?")


def copy_rate_text(value: object) -> Optional[float]:
    """The host-to-device copy rate a run measured and states (``CPU→GPU copy ~8 GB/s``,
    ``PCIe measured 12.3 GB/s``), in bytes/s, or None."""
    found = _COPY_RATE.search(_text(value))
    return float(found.group(1)) * 1e9 if found and float(found.group(1)) > 0 else None


def pageable_text(value: object) -> Optional[bool]:
    """Whether a run states its copied experts sit in pageable (True) or pinned, page-locked
    (False) host memory; None when it does not say."""
    lowered = _text(value).lower()
    if "pageable" in lowered:
        return True
    if "pinned" in lowered or "page-locked" in lowered:
        return False
    return None
