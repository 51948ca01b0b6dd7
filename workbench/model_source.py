"""Whether a captured model still holds the weights its program was captured with.

``capture`` copies no weight: the program shares the model's parameter and buffer
tensors. What that means for a model changed after capture:

1. In-place edits of a weight's values (``model.lin.weight.mul_(2)``) before a plan is
   loaded are used: ``load`` (and ``run``, which loads) copies the values it finds.
2. Replacing a parameter, a buffer or a whole submodule after capture
   (``model.lin = nn.Linear(...)``), deleting one, or giving one another shape or dtype
   (through ``.data``) is detected when a plan of the program is loaded or run: a
   ``ModelChangedError`` names the weight; capture the model again to use it.
3. A loaded session holds copies of the weights made at load. An in-place edit after
   load is detected at the next call (the tensor's version counter moved) and refused:
   load the plan again to use the new values. (Edits through ``.data`` bypass the version
   counter and are not seen.)
4. Buffers the program itself updates (running statistics, counters) are written by the
   workbench, which then re-reads their versions: its own writes are no change.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Iterable, Optional

import torch

from .errors import WorkbenchError

__all__ = ["ModelChangedError", "ModelSource"]


class ModelChangedError(WorkbenchError, RuntimeError):
    """The captured model was changed in a way its program (or a loaded session) cannot follow."""


@dataclass(frozen=True)
class _Weight:
    fqn: str  # "layers.0.weight"
    path: tuple[str, ...]  # the fqn split at dots
    tensor: torch.Tensor  # the tensor captured (shared with the model)
    shape: tuple[int, ...]
    dtype: torch.dtype


def _version(t: torch.Tensor) -> Optional[int]:
    try:
        return int(t._version)
    except RuntimeError:  # inference-mode tensors keep no version counter
        return None


def _lookup(model: torch.nn.Module, path: tuple[str, ...]) -> object:
    """The object at ``path`` in ``model`` (through the module dicts, not ``__getattr__``), or None."""
    module: object = model
    for name in path[:-1]:
        modules = getattr(module, "_modules", None)
        module = modules.get(name) if isinstance(modules, dict) else getattr(module, name, None)
        if module is None:
            return None
    last = path[-1]
    for table in ("_parameters", "_buffers"):
        held = getattr(module, table, None)
        if isinstance(held, dict) and last in held:
            return held[last]
    return getattr(module, last, None)


class ModelSource:
    """The model a program was captured from, and the weights it held then (see module rules)."""

    def __init__(self, model: torch.nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """``weights``: the program's tensors by FQN; those the model holds (its parameters and
        buffers, not constants the exporter lifted out of ``forward``) are watched."""
        self._model = weakref.ref(model)
        self._weights = tuple(
            _Weight(fqn, path, t, tuple(t.shape), t.dtype)
            for fqn, t in weights
            if _lookup(model, path := tuple(fqn.split("."))) is t
        )

    @property
    def model(self) -> Optional[torch.nn.Module]:
        """The model, while it is alive."""
        return self._model()

    def changes(self) -> list[str]:
        """Rule 2: every captured weight the model no longer holds as captured, in words."""
        model = self._model()
        if model is None:  # nothing left to compare with: the program's tensors are all there is
            return []
        found = []
        for w in self._weights:
            now = _lookup(model, w.path)
            if now is w.tensor:
                if tuple(now.shape) != w.shape or now.dtype != w.dtype:
                    found.append(
                        f"{w.fqn!r} now has shape {tuple(now.shape)} {now.dtype}; it was captured as {w.shape} {w.dtype}"
                    )
            elif now is None:
                found.append(f"{w.fqn!r} is no longer in the model")
            else:
                found.append(f"{w.fqn!r} was replaced after capture (the model holds another {type(now).__name__})")
        return found

    def check(self) -> None:
        """Raise ``ModelChangedError`` listing rule 2's changes, if any."""
        found = self.changes()
        if found:
            shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
            raise ModelChangedError(
                f"the model changed after capture: {shown}. The program still holds the captured "
                "weights; capture the model again to use the new ones"
            )

    def versions(self) -> tuple[Optional[int], ...]:
        """The version counter of every captured weight (rule 3)."""
        return tuple(_version(w.tensor) for w in self._weights)

    def edited_since(self, versions: tuple[Optional[int], ...]) -> list[str]:
        """Weights whose version moved since ``versions`` was read (rule 3)."""
        return [w.fqn for w, then in zip(self._weights, versions) if then is not None and _version(w.tensor) != then]
