"""Small built-in models for demos, tests and benchmarks (seeded, CPU-fast).

Each entry of ``EXAMPLES`` builds ``(model, example_inputs)``; ``example(name)`` looks
one up. They are chosen to exercise placement: a chain, a residual stream that crosses
devices, a value with several consumers, an attention block, a multi-output op.
"""

from __future__ import annotations

import random
from typing import Callable

import torch
from torch import nn
from torch.export import ExportedProgram
from torch.export.graph_signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    OutputKind,
    OutputSpec,
    TensorArgument,
)

from ..arguments import check_int, describe
from ..capture import Program
from ..errors import ArgumentTypeError, WorkbenchError

__all__ = ["EXAMPLES", "UnknownExampleError", "example"]


class MLP(nn.Module):
    """Linear → ReLU → Linear → ReLU → Linear."""

    def __init__(self, width: int = 32, depth: int = 3) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, W)
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x


class ResidualBlock(nn.Module):
    """Two pre-norm residual MLP blocks: the residual stream is read by many ops."""

    def __init__(self, width: int = 32, blocks: int = 2) -> None:
        super().__init__()
        self.norms = nn.ModuleList(nn.LayerNorm(width) for _ in range(blocks))
        self.ups = nn.ModuleList(nn.Linear(width, 2 * width) for _ in range(blocks))
        self.downs = nn.ModuleList(nn.Linear(2 * width, width) for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, W)
        for norm, up, down in zip(self.norms, self.ups, self.downs):
            x = x + down(torch.nn.functional.gelu(up(norm(x))))
        return x


class FanOut(nn.Module):
    """One input feeds three branches; the branches meet again."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = x * y  # (B, W), read by three consumers
        left = torch.relu(self.a(s))
        right = torch.sigmoid(self.b(s))
        both = left + right + s
        return both, s.sum(dim=-1)


class TinyAttention(nn.Module):
    """Single-head attention with a top-k over the scores (a multi-output op)."""

    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # (T, W)
        q, k, v = self.qkv(x).chunk(3, dim=-1)  # (T, W) each
        scores = q @ k.transpose(0, 1) / q.shape[-1] ** 0.5  # (T, T)
        top = torch.topk(scores, 2, dim=-1)
        attn = torch.softmax(scores, dim=-1)
        return self.out(attn @ v), top.indices


def _mlp() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    return MLP(), (torch.randn(4, 32),)


def _residual() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    return ResidualBlock(), (torch.randn(4, 32),)


def _fanout() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    return FanOut(), (torch.randn(4, 16), torch.randn(4, 16))


def _attention() -> tuple[nn.Module, tuple]:
    torch.manual_seed(0)
    return TinyAttention(), (torch.randn(6, 16),)


EXAMPLES: dict[str, Callable[[], tuple[nn.Module, tuple]]] = {
    "mlp": _mlp,
    "residual": _residual,
    "fanout": _fanout,
    "attention": _attention,
}


class UnknownExampleError(WorkbenchError, KeyError):
    """A name that is not one of the built-in examples."""

    def __str__(self) -> str:  # KeyError would quote the message like a key
        return str(self.args[0]) if self.args else ""


def example(name: str) -> tuple[nn.Module, tuple]:
    """Build a built-in example: ``model, inputs = example("mlp")``."""
    valid = ", ".join(EXAMPLES)
    if not isinstance(name, str):
        raise ArgumentTypeError(f"name must be the name of an example, one of {valid}; got {describe(name)}")
    if name not in EXAMPLES:
        raise UnknownExampleError(f"unknown example {name!r}; valid ones are {valid}")
    return EXAMPLES[name]()


def synthetic_program(
    num_ops: int, seed: int = 0, width: int = 64, batch: int = 8, fan_in_window: int = 6
) -> Program:
    """A random DAG of ``num_ops`` elementwise and matmul ops as a ``Program``, built
    directly as an fx graph over meta tensors (exporting a 10,000-op module would time
    the exporter, not the workbench). Each op reads one or two of the last
    ``fan_in_window`` values, so lifetimes are short with some long-lived values, like
    real inference graphs; one in eight ops is a matmul with its own weight."""
    check_int(num_ops, "num_ops", 1)
    check_int(seed, "seed", 0)
    check_int(width, "width", 1)
    check_int(batch, "batch", 1)
    check_int(fan_in_window, "fan_in_window", 1)
    rng = random.Random(seed)
    aten = torch.ops.aten
    graph = torch.fx.Graph()
    weights = []
    num_weights = max(1, num_ops // 8)
    for i in range(num_weights):
        node = graph.placeholder(f"p_w{i}")
        node.meta["val"] = torch.empty(width, width, device="meta")
        weights.append(node)
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(batch, width, device="meta")
    values = [x]
    for i in range(num_ops):
        a = rng.choice(values[-fan_in_window:])
        roll = rng.random()
        args: tuple[torch.fx.Node, ...]
        if roll < 0.125:
            op, args = aten.mm.default, (a, weights[i % num_weights])
        elif roll < 0.45:
            op, args = aten.add.Tensor, (a, rng.choice(values[-fan_in_window:]))
        elif roll < 0.7:
            op, args = aten.mul.Tensor, (a, rng.choice(values[-fan_in_window:]))
        elif roll < 0.85:
            op, args = aten.relu.default, (a,)
        else:
            op, args = aten.sigmoid.default, (a,)
        node = graph.call_function(op, args)
        node.meta["val"] = op(*(arg.meta["val"] for arg in args))
        values.append(node)
    graph.output((values[-1],))
    module = torch.nn.Module()
    gm = torch.fx.GraphModule(module, graph)
    state = {f"w{i}": torch.nn.Parameter(torch.empty(width, width, device="meta")) for i in range(num_weights)}
    signature = ExportGraphSignature(
        input_specs=[
            InputSpec(InputKind.PARAMETER, TensorArgument(name=f"p_w{i}"), target=f"w{i}")
            for i in range(num_weights)
        ]
        + [InputSpec(InputKind.USER_INPUT, TensorArgument(name="x"), target=None)],
        output_specs=[OutputSpec(OutputKind.USER_OUTPUT, TensorArgument(name=values[-1].name), target=None)],
    )
    exported = ExportedProgram(
        root=gm,
        graph=gm.graph,
        graph_signature=signature,
        state_dict=dict(state),
        range_constraints={},
        module_call_graph=[],
        verifiers=None,
    )
    return Program(exported, shape_only=True)
