"""The one registry of cross-check cases: a model, its inputs and a placement, by a unique name.

A case is a model (one of ``workbench.models.examples``, under the same name, or one of the
small models of ``workbench.compare.models``) and a placement; ``checks`` says which
cross-checks run it: ``"copies"`` (``compare_case``: the copies each system inserts) and
``"arenas"`` (``compare_arena_case``: the memory each system plans).

Rules:
1. Names are unique. A case placed on devices is named after its model; the same model
   kept on the host is ``<model>_cpu``. An example's name means the same model here as
   in ``workbench.models.examples`` (``residual`` is its ``ResidualBlock``).
2. Device ops in the cases are weight-free on purpose (a parameter feeding a device
   delegate crashes ExecuTorch 1.5.1's memory planning), except ``param_on_device``,
   which does so on purpose and is therefore a copy case only.

The copy cases, each built to show one difference:

- ``two_delegates`` — an MLP whose two device delegates are separated by a host linear.
  Every crossing is needed once: both systems should insert the same copies.
- ``shared_value`` — a host value (a linear's output) feeds two delegates on one device.
  ExecuTorch copies it once per delegate argument; the workbench once.
- ``shared_input`` — the graph input feeds two delegates. Same as above for an input; with
  skip-h2d on, ExecuTorch refuses (the input has two users).
- ``residual_stack`` — the stream ``h`` is updated on the device while each block's
  linear runs on the host, so the stream crosses back and forth every block.
- ``two_devices`` — a value computed on ``cuda:0`` is read on ``cuda:1``: ExecuTorch goes
  through the host (``d2h`` + ``h2d``); the workbench makes one direct ``d2d`` copy.
- ``param_on_device`` — the linear layers' ``addmm`` on the device, their weight
  transposes on the host, so parameters (and a host-computed view of one) are delegate
  arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Optional, Sequence

import torch
from torch import nn

from ..errors import WorkbenchError
from ..models.examples import example
from .models import (
    ParamOnDevice,
    ResidualStack,
    SharedInput,
    SharedValueMLP,
    TwoDelegateMLP,
    TwoDevices,
    seeded,
)

__all__ = [
    "ARENA_CASES",
    "CASES",
    "COPY_CASES",
    "Case",
    "UnknownCaseError",
    "case",
    "case_names",
]

#: The cross-checks a case can be part of.
CHECKS = ("copies", "arenas")


class UnknownCaseError(WorkbenchError, KeyError):
    """No built-in case has the name asked for."""


@dataclass(frozen=True)
class Case:
    """A model, its example inputs and a placement, with what the case is meant to show."""

    name: str  # unique in CASES
    build: Callable[[], tuple[nn.Module, tuple]]  # a fresh seeded (model in eval mode, inputs)
    rules: Optional[Mapping[str, Sequence[str]]]  # {device: [op patterns]}; None: all on the host
    shows: str  # one line: the difference this case exhibits
    checks: tuple[str, ...]  # the cross-checks that run it, of CHECKS

    def model(self) -> nn.Module:
        """A fresh seeded model."""
        return self.build()[0]

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        """Fresh seeded example inputs."""
        return self.build()[1]


def _example(name: str) -> Callable[[], tuple[nn.Module, tuple]]:
    def build() -> tuple[nn.Module, tuple]:
        model, inputs = example(name)
        return model.eval(), inputs

    return build


_COPIES = ("copies",)
_ARENAS = ("arenas",)
_BOTH = ("copies", "arenas")

CASES: tuple[Case, ...] = (
    Case("mlp_cpu", _example("mlp"), None, "linear/relu chain on the host", _ARENAS),
    Case("mlp", _example("mlp"), {"cuda:0": ["aten.relu"]}, "each relu a one-op delegate", _ARENAS),
    Case("residual_cpu", _example("residual"), None,
         "pre-norm residual blocks (layer norm has unread outputs)", _ARENAS),
    Case("residual", _example("residual"), {"cuda:0": ["aten.gelu"]},
         "gelu on the device between host linears", _ARENAS),
    Case("fanout_cpu", _example("fanout"), None, "one value read by three branches", _ARENAS),
    Case("fanout", _example("fanout"), {"cuda:0": ["aten.mul"]}, "both graph inputs cross to the device",
         _ARENAS),
    Case("attention_cpu", _example("attention"), None,
         "split into q/k/v views, topk with an unread output", _ARENAS),
    Case("attention", _example("attention"), {"cuda:0": ["aten._softmax"]}, "softmax on the device",
         _ARENAS),
    Case("two_delegates", seeded(TwoDelegateMLP), {"cuda:0": ["aten.relu"]},
         "two delegates separated by a host op: every crossing needed, same copies", _COPIES),
    Case("shared_value", seeded(SharedValueMLP), {"cuda:0": ["aten.relu", "aten.add"]},
         "a host value feeds two delegates on one device: ExecuTorch copies it twice", _BOTH),
    Case("shared_input", seeded(SharedInput), {"cuda:0": ["aten.relu", "aten.add"]},
         "the graph input feeds two delegates: copied twice; skip-h2d refused by ExecuTorch", _COPIES),
    Case("residual_stack", seeded(ResidualStack), {"cuda:0": ["aten.relu", "aten.add"]},
         "a residual stream on the device, its blocks' linears on the host", _BOTH),
    Case("two_devices", seeded(TwoDevices), {"cuda:0": ["aten.relu"], "cuda:1": ["aten.mul"]},
         "cuda:0 → cuda:1: ExecuTorch goes through the host (d2h + h2d), the workbench one d2d", _BOTH),
    Case("param_on_device", seeded(ParamOnDevice), {"cuda:0": ["aten.addmm"]},
         "parameters feed device delegates: resident in the workbench; ExecuTorch crashes, or copies "
         "weights per call", _COPIES),
)  # fmt: skip

#: The cases of the copy cross-check (``compare_case``), in table order.
COPY_CASES: tuple[Case, ...] = tuple(c for c in CASES if "copies" in c.checks)

#: The cases of the memory-planning cross-check (``compare_arena_case``), in table order.
ARENA_CASES: tuple[Case, ...] = tuple(c for c in CASES if "arenas" in c.checks)


def case_names() -> tuple[str, ...]:
    """Names of the built-in cases, in order."""
    return tuple(c.name for c in CASES)


def case(name: str) -> Case:
    """The built-in case called ``name``."""
    for c in CASES:
        if c.name == name:
            return c
    raise UnknownCaseError(f"no cross-check case named {name!r}; valid names are {', '.join(case_names())}")
