"""Placement strategies for mixture-of-experts decoding.

Each strategy is a named recipe — placement rules, skip-copy flags and streamed
weights — that turns a captured MoE program into a ``DeviceGraph``:

- ``all_on_device``: every op and every weight on the device; only tokens, caches and
  logits may cross the link.
- ``experts_on_host``: the routed experts' FFNs (``layers.*.mlp.experts``) run on the
  host, where their weights stay (llama.cpp's ``--cpu-moe``); attention, router and the
  shared expert run on the device. Activations cross the link, weights never do.
- ``expert_streaming``: every op runs on the device, but the routed experts' weights live
  on the host; each layer gathers just its routed experts' slabs into device memory with
  one gather copy, issued as soon as the router has chosen, so the copy overlaps the
  shared expert's compute on the copy stream.
- ``expert_streaming(prefetch=True)`` (label ``expert_streaming+prefetch``), for a model
  built with ``QwenMoEDecoder(config, expert_prefetch=True)``: layer i predicts layer
  i+1's experts (layer i+1's norm and router on layer i's hidden state); the predicted
  slabs are prefetched during layer i (``…_prefetch`` gathers), and at layer i+1 a reuse
  copy moves only the experts the prediction missed. The prefetch overlaps layer i's
  remaining compute and layer i+1's attention; mispredicted slabs cost link bytes.

Each comes with the skip-copy flags on (tokens, caches and logits stay on the device:
the caller stages them, as ExecuTorch's CUDA pipeline does) or off, and is issued in the
``overlap`` order of ``workbench.schedule`` (copies as early as their inputs allow).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Callable

import torch.fx

from .copy_ops import SELECT_ROWS
from .devices import Device
from .place import module_paths, place
from .capture import Program
from .propagate import DeviceGraph, propagate
from .schedule import schedule
from .errors import WorkbenchError

__all__ = [
    "Strategy",
    "StrategyError",
    "all_on_device",
    "experts_on_host",
    "expert_streaming",
    "STRATEGIES",
    "strategy_variants",
]

#: Module path of the routed experts in the MoE models of ``workbench.models``.
EXPERT_MODULES = "layers.*.mlp.experts"
#: Parameter names of the routed experts' stacked weights.
EXPERT_WEIGHTS = "layers.*.mlp.experts.*"


@dataclass(frozen=True)
class Strategy:
    """A placement recipe: rules + flags + streamed weights."""

    name: str  # "all_on_device", "experts_on_host", "expert_streaming"
    description: str  # one sentence for tables and notebooks
    rules: Callable[[torch.fx.Node], str | None]  # node → device, or None for the host
    skip_copies: bool  # both skip flags: caller stages inputs on, and takes outputs from, the device
    stream_constants: tuple[str, ...] = ()  # parameter globs kept on the host and streamed
    device: str = "cuda:0"  # the accelerator
    schedule: str = "overlap"  # issue order: "overlap" (copies early, compute around them) or "captured"
    prefetch: bool = False  # streamed experts are prefetched from the previous layer's prediction

    @property
    def variant(self) -> str:
        """``name`` plus ``+prefetch`` for the prefetching variant: what tables list."""
        return f"{self.name}{'+prefetch' if self.prefetch else ''}"

    @property
    def label(self) -> str:
        """``variant`` plus the flag setting, e.g. ``expert_streaming+prefetch+skip``."""
        return f"{self.variant}{'+skip' if self.skip_copies else ''}"

    def with_schedule(self, order: str) -> "Strategy":
        """This strategy issued in another order (``"captured"`` or ``"overlap"``)."""
        return replace(self, schedule=order)

    def apply(self, program: Program, *, strict: bool = False) -> DeviceGraph:
        """Place, propagate and schedule ``program`` under this strategy → ``DeviceGraph``."""
        self._check_program(program)
        placed = place(program, self.rules, strict=strict)
        dg = propagate(
            placed,
            skip_h2d_for_method_inputs=self.skip_copies,
            skip_d2h_for_method_outputs=self.skip_copies,
            stream_constants=self.stream_constants,
        )
        return schedule(dg, self.schedule)

    def _check_program(self, program) -> None:
        """A prefetching strategy needs the hints in the graph; a plain streaming strategy
        must not get them (propagation would prefetch under the wrong label)."""
        if not self.stream_constants and not self.prefetch:
            return
        hinted = any(n.op == "call_function" and n.target is SELECT_ROWS for n in program.graph.nodes)
        if self.prefetch and not hinted:
            raise StrategyError(
                f"{self.label} prefetches from routing hints, but this program has none (no "
                "workbench::select_rows node); capture QwenMoEDecoder(config, expert_prefetch=True)"
            )
        if not self.prefetch and hinted:
            raise StrategyError(
                f"{self.label} streams without prefetch, but this program carries routing hints "
                "(captured with expert_prefetch=True), which propagation would prefetch; use "
                f"{self.name}(prefetch=True) or capture the model with expert_prefetch=False"
            )


class StrategyError(WorkbenchError, ValueError):
    """A strategy does not fit the program it is applied to."""


def _in_modules(node: torch.fx.Node, glob: str) -> bool:
    return any(fnmatch.fnmatchcase(path, glob) for path in module_paths(node))


def all_on_device(device: str = "cuda:0", skip_copies: bool = True) -> Strategy:
    """Everything on ``device``: weights resident, only inputs/outputs cross."""
    dev = str(Device.parse(device))
    return Strategy(
        "all_on_device",
        f"every op and weight on {dev}",
        lambda node: dev,
        skip_copies,
        device=dev,
    )


def experts_on_host(device: str = "cuda:0", skip_copies: bool = True, experts: str = EXPERT_MODULES) -> Strategy:
    """Routed experts' FFNs on the host (weights stay there); everything else on ``device``."""
    dev = str(Device.parse(device))
    return Strategy(
        "experts_on_host",
        f"routed experts run on the host; attention, router, shared expert on {dev}",
        lambda node: None if _in_modules(node, experts) else dev,
        skip_copies,
        device=dev,
    )


def expert_streaming(
    device: str = "cuda:0", skip_copies: bool = True, weights: str = EXPERT_WEIGHTS, prefetch: bool = False
) -> Strategy:
    """Everything on ``device``; routed experts' weights stream from the host per layer.

    ``prefetch=True`` needs a program of ``QwenMoEDecoder(config, expert_prefetch=True)``:
    each layer's predicted experts are prefetched during the layer before, and only the
    mispredicted ones are copied once the router has chosen.
    """
    if not isinstance(prefetch, bool):
        raise TypeError(f"prefetch must be True or False, got {prefetch!r}")
    dev = str(Device.parse(device))
    what = (
        "prefetches each layer's predicted experts during the layer before, then copies the missed ones"
        if prefetch
        else "each layer gathers its routed experts' weights from the host"
    )
    return Strategy(
        "expert_streaming",
        f"every op on {dev}; {what}",
        lambda node: dev,
        skip_copies,
        stream_constants=(weights,),
        device=dev,
        prefetch=prefetch,
    )


STRATEGIES: dict[str, Callable[..., Strategy]] = {
    "all_on_device": all_on_device,
    "experts_on_host": experts_on_host,
    "expert_streaming": expert_streaming,
}


def strategy_variants(device: str = "cuda:0", prefetch: bool = False) -> list[Strategy]:
    """Every strategy with the skip flags off and on, in table order; with ``prefetch``,
    also ``expert_streaming+prefetch`` (whose program must carry routing hints, so it
    cannot share a program with plain ``expert_streaming``)."""
    variants = [make(device, skip_copies=skip) for make in STRATEGIES.values() for skip in (False, True)]
    if prefetch:
        variants += [expert_streaming(device, skip_copies=skip, prefetch=True) for skip in (False, True)]
    return variants
