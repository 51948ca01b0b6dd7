"""Small seeded models for the ExecuTorch cross-check, each built to show one difference.

Every case delegates only weight-free ops (``aten.relu``, ``aten.add``, ``aten.mul``) and
keeps the linear layers on the host, so no parameter becomes a device delegate's argument
— except ``param_on_device``, which does so on purpose.

Cases (rules are ``{device: [op patterns]}`` as ``workbench.place`` takes them):
1. ``two_delegates`` — an MLP whose two device delegates are separated by a host linear.
   Every crossing is needed once: both systems should insert the same copies.
2. ``shared_value`` — a host value (a linear's output) feeds two delegates on one device.
   ExecuTorch copies it once per delegate argument; the workbench once.
3. ``shared_input`` — the graph input feeds two delegates. Same as 2 for an input; with
   skip-h2d on, ExecuTorch refuses (the input has two users).
4. ``residual`` — a residual stack: the stream ``h`` is updated on the device while each
   block's linear runs on the host, so the stream crosses back and forth every block.
5. ``two_devices`` — a value computed on ``cuda:0`` is read on ``cuda:1``: ExecuTorch
   goes through the host (``d2h`` + ``h2d``); the workbench makes one direct ``d2d`` copy.
6. ``param_on_device`` — the linear layers' ``addmm`` on the device, their weight
   transposes on the host, so parameters (and a host-computed view of one) are delegate
   arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import torch
from torch import nn

__all__ = ["CASES", "Case", "case", "case_names"]

_SEED = 0
_WIDTH = 16
_BATCH = 4


class _TwoLinears(nn.Module):
    """Two ``width × width`` linear layers, ``fc1`` and ``fc2``; subclasses give ``forward``."""

    def __init__(self, width: int = _WIDTH) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, width)
        self.fc2 = nn.Linear(width, width)


class TwoDelegateMLP(_TwoLinears):
    """relu (device) → linear (host) → relu (device): two delegates, a host op between."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))  # (B, W) on the device
        return torch.relu(self.fc2(h))  # (B, W) fc2 on the host, relu on the device


class SharedValueMLP(_TwoLinears):
    """``h`` (host) is read by relu in one delegate and by add in another."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)  # (B, W) on the host
        return self.fc2(torch.relu(h)) + h  # relu and add are separate device delegates


class SharedInput(nn.Module):
    """The graph input ``x`` is read by relu in one delegate and by add in another."""

    def __init__(self, width: int = _WIDTH) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(x)) + x


class ResidualStack(nn.Module):
    """``h = h + fc_i(relu(h))`` for a few blocks: relu and add on the device, fc on the host."""

    def __init__(self, width: int = _WIDTH, blocks: int = 3) -> None:
        super().__init__()
        self.fcs = nn.ModuleList(nn.Linear(width, width) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x  # (B, W) the residual stream
        for fc in self.fcs:
            h = h + fc(torch.relu(h))
        return h


class TwoDevices(nn.Module):
    """relu on one device, a square of its result on another."""

    def __init__(self, width: int = _WIDTH) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = torch.relu(self.fc(x))  # (B, W) on cuda:0
        return a * a  # on cuda:1


class ParamOnDevice(_TwoLinears):
    """Two linear layers whose matmuls run on the device (their weights are delegate inputs)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


@dataclass(frozen=True)
class Case:
    """A model, its example inputs and a placement, with what the case is meant to show."""

    name: str
    build: Callable[[], nn.Module]  # a fresh seeded model
    inputs: Callable[[], tuple[torch.Tensor, ...]]  # fresh seeded example inputs
    rules: Mapping[str, Sequence[str]]
    shows: str  # one line: the difference this case exhibits

    def model(self) -> nn.Module:
        torch.manual_seed(_SEED)
        return self.build().eval()

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        torch.manual_seed(_SEED + 1)
        return self.inputs()


def _x() -> tuple[torch.Tensor, ...]:
    return (torch.randn(_BATCH, _WIDTH),)  # (B, W)


CASES: tuple[Case, ...] = (
    Case(
        "two_delegates",
        TwoDelegateMLP,
        _x,
        {"cuda:0": ["aten.relu"]},
        "two delegates separated by a host op: every crossing needed, same copies",
    ),
    Case(
        "shared_value",
        SharedValueMLP,
        _x,
        {"cuda:0": ["aten.relu", "aten.add"]},
        "a host value feeds two delegates on one device: ExecuTorch copies it twice",
    ),
    Case(
        "shared_input",
        SharedInput,
        _x,
        {"cuda:0": ["aten.relu", "aten.add"]},
        "the graph input feeds two delegates: copied twice; skip-h2d refused by ExecuTorch",
    ),
    Case(
        "residual",
        ResidualStack,
        _x,
        {"cuda:0": ["aten.relu", "aten.add"]},
        "a residual stream on the device, its blocks' linears on the host",
    ),
    Case(
        "two_devices",
        TwoDevices,
        _x,
        {"cuda:0": ["aten.relu"], "cuda:1": ["aten.mul"]},
        "cuda:0 → cuda:1: ExecuTorch goes through the host (d2h + h2d), the workbench one d2d",
    ),
    Case(
        "param_on_device",
        ParamOnDevice,
        _x,
        {"cuda:0": ["aten.addmm"]},
        "parameters feed device delegates: resident in the workbench; ExecuTorch crashes, or copies weights per call",
    ),
)


def case_names() -> tuple[str, ...]:
    """Names of the built-in cases, in order."""
    return tuple(c.name for c in CASES)


def case(name: str) -> Case:
    """The built-in case called ``name``."""
    for c in CASES:
        if c.name == name:
            return c
    raise KeyError(f"no cross-check case named {name!r}; valid names are {', '.join(case_names())}")
