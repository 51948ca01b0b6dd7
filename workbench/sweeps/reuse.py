"""Plans and layouts a process made already, handed to whoever asks for the same again.

A capacity sweep plans the strategies an analysis of the same program planned a moment
before (the walkthrough's full-size table holds ``all_on_device``, ``experts_on_host`` and
``expert_streaming`` exactly as the sweep's grid does), and times them under the same links.

Rules:
  1. ``planned(program, strategy, algorithm)`` is ``plan(strategy.apply(program), algorithm)``,
     made once per (program object, strategy, algorithm). Strategies compare by value
     (their placement rules are values, ``strategy.EveryOpOn``), so two built alike share
     one plan; a strategy that cannot be hashed is planned every time.
  2. ``laid_out(plan, prefetch_hit_rate)`` is ``speed.graph_layout.layout_of(plan,
     prefetch_hit_rate=...)``, made once per (plan object, rate): every link and cost model
     times the same layout.
  3. Plans and layouts are never changed after they are made, so sharing them is safe.
     At most ``KEEP`` plans are remembered (the least recently asked for is forgotten
     first, with its layouts), so a long sweep holds no more than a short one; a program
     that is gone takes its plans with it.
  4. The cache is per process and thread-safe; a worker process starts with its own.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any

from ..capture import Program
from ..planning.memory_plan import MemoryPlan, plan
from ..speed.graph_layout import layout_of
from ..speed.layout import DecodeLayout
from ..strategy import Strategy

__all__ = ["KEEP", "forget", "laid_out", "planned"]

#: Plans remembered per process (rule 3): the walkthrough's eight full-size strategies.
KEEP = 8

_PLANS: "OrderedDict[tuple[int, Strategy, str], tuple[weakref.ref, MemoryPlan]]" = OrderedDict()
_LAYOUTS: "weakref.WeakKeyDictionary[MemoryPlan, dict[float, DecodeLayout]]" = weakref.WeakKeyDictionary()
_LOCK = threading.RLock()


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


def planned(program: Program, strategy: Strategy, algorithm: str) -> MemoryPlan:
    """Rule 1."""
    if not _hashable(strategy):
        return plan(strategy.apply(program), algorithm)
    key = (id(program), strategy, algorithm)
    with _LOCK:
        found = _PLANS.get(key)
        if found is not None and found[0]() is program:
            _PLANS.move_to_end(key)
            return found[1]
    made = plan(strategy.apply(program), algorithm)
    with _LOCK:
        _PLANS[key] = (weakref.ref(program), made)
        _PLANS.move_to_end(key)
        while len(_PLANS) > KEEP:
            _PLANS.popitem(last=False)
    return made


def laid_out(memory: MemoryPlan, prefetch_hit_rate: float = 0.0) -> DecodeLayout:
    """Rule 2."""
    with _LOCK:
        known = _LAYOUTS.get(memory, {}).get(prefetch_hit_rate)
    if known is not None:
        return known
    layout = layout_of(memory, prefetch_hit_rate=prefetch_hit_rate)
    with _LOCK:
        if any(p is memory for _, p in _PLANS.values()):  # rule 3: only remembered plans keep layouts
            _LAYOUTS.setdefault(memory, {})[prefetch_hit_rate] = layout
    return layout


def forget() -> None:
    """Drop every remembered plan and layout (e.g. to time a sweep from scratch)."""
    with _LOCK:
        _PLANS.clear()
        _LAYOUTS.clear()
