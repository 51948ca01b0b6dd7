"""Compiled loops (numba), cached per user, never beside the source.

numba's ``cache=True`` writes its index and object files next to the module
(``__pycache__/*.nbi``, ``*.nbc``) whenever that folder is writable, i.e. into the
installed package or a checkout. ``njit_cached`` compiles the same way but keeps the
cache in the platform's user cache directory.

Rules:
  1. The cache directory is ``NUMBA_CACHE_DIR`` when the user set one (numba's own
     setting wins), else ``<user cache dir>/workbench/numba``: ``$XDG_CACHE_HOME`` or
     ``~/.cache`` on Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows.
     Where that folder cannot be made, the function compiles uncached (once per process).
  2. Only the decorated function's cache is redirected: numba's global setting is set
     while the decorator runs (numba picks a function's cache location then) and put
     back after, so other numba code in the process is untouched.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

import numba
import numba.core.config

__all__ = ["cache_dir", "njit_cached"]


def cache_dir() -> Path:
    """Rule 1: where compiled functions are cached."""
    given = getattr(numba.core.config, "CACHE_DIR", "")  # set from the environment when numba loads
    if given:
        return Path(given)
    home = Path.home()
    if sys.platform == "darwin":
        base = home / "Library" / "Caches"
    elif sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or home / ".cache")
    return base / "workbench" / "numba"


def njit_cached(**options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``numba.njit(cache=True, **options)`` with the cache in ``cache_dir()`` (rules 1-2)."""

    def decorate(fn: Callable[..., Any]) -> Any:
        config = numba.core.config
        saved = getattr(config, "CACHE_DIR", "")
        where = cache_dir()
        try:
            where.mkdir(parents=True, exist_ok=True)
        except OSError:  # rule 1: nowhere to cache, so nothing is written anywhere
            return numba.njit(**options)(fn)
        setattr(config, "CACHE_DIR", str(where))
        try:
            return numba.njit(cache=True, **options)(fn)
        finally:
            setattr(config, "CACHE_DIR", saved)

    return decorate
