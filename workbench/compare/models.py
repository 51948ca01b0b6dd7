"""Small models for the ExecuTorch cross-checks, each built to show one difference.

``workbench.compare.cases`` pairs each with a placement; ``seeded`` builds one with
seeded weights and a seeded ``(batch, width)`` input, so every run compares the same
numbers."""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

__all__ = [
    "ParamOnDevice",
    "ResidualStack",
    "SharedInput",
    "SharedValueMLP",
    "TwoDelegateMLP",
    "TwoDevices",
    "seeded",
]

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


def seeded(
    build: Callable[[], nn.Module],
) -> Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]:
    """A builder of ``(model, inputs)``: the model seeded and in eval mode, then a seeded
    ``(batch, width)`` float32 input."""

    def model_and_inputs() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
        torch.manual_seed(_SEED)
        model = build().eval()
        torch.manual_seed(_SEED + 1)
        return model, (torch.randn(_BATCH, _WIDTH),)  # (B, W)

    return model_and_inputs
