"""Placement strategies for mixture-of-experts decoding.

Each strategy is a named recipe — placement rules, skip-copy flags and streamed
weights — that turns a captured MoE program into a ``DeviceGraph``:

- ``all_on_device``: every op and every weight on the device; only tokens, caches and
  logits may cross the link.
- ``experts_on_host``: the routed experts' FFNs run on the host, where their weights
  stay (llama.cpp's ``--cpu-moe``); attention, router and the shared expert run on the
  device. Activations cross the link, weights never do.
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

The routed experts are found in the program by ``workbench.experts.find_experts`` (by
what they are: stacked per-expert weights or one module per expert, scored by a router),
so the strategies work unchanged on the built-in decoder (``layers.N.mlp.experts``) and on
transformers models (``model.layers.N.mlp.experts``); a glob or an ``ExpertMap`` may be
given instead. A strategy that finds no experts to move — a dense model, or a glob that
matches nothing — warns (``PlacementWarning``; an error with ``strict=True``) instead of
reporting an all-on-device placement as if it had done its job.

Streaming works on every expert form a captured graph holds: ``index_select`` of the
built-in decoder becomes a gather of the selected slabs, and transformers' grouped
(``aten._grouped_mm``, ``transformers::grouped_mm_fallback``) and batched
(``aten.index.Tensor``) expert matmuls become routed copies of the distinct experts the
router chose (``workbench.moe.streaming``), so a step moves at most min(E, tokens × k)
slabs per weight, never the whole stack.

Each comes with the skip-copy flags on (tokens, caches and logits stay on the device:
the caller stages them, as ExecuTorch's CUDA pipeline does) or off, and is issued in the
``overlap`` order of ``workbench.schedule`` (copies as early as their inputs allow).
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Callable, Optional, Union

import torch.fx

from .capture import Program
from .copy_ops import SELECT_ROWS
from .devices import Device
from .arguments import check_flag
from .errors import WorkbenchError
from .experts import ExpertMap, find_experts
from .graph_values import gc_paused
from .place import module_paths, place, report_no_claim
from .passes import Pass, run_passes, schedule_pass
from .propagate import DeviceGraph, propagate

__all__ = [
    "EXPERT_MODULES",
    "EXPERT_WEIGHTS",
    "ExpertRule",
    "ROUTED_EXPERTS",
    "Recipe",
    "Strategy",
    "StrategyError",
    "all_on_device",
    "experts_on_host",
    "expert_streaming",
    "STRATEGIES",
    "strategy_variants",
]

#: Module path and parameter names of the built-in decoder's routed experts, as globs.
EXPERT_MODULES = "layers.*.mlp.experts"
EXPERT_WEIGHTS = "layers.*.mlp.experts.*"
#: In ``Strategy.stream_constants``: the routed experts' weights, as found in each program.
ROUTED_EXPERTS = "<routed experts>"

#: Where a strategy's experts are: None (found in the program), a glob, or a map.
ExpertsSpec = Union[None, str, ExpertMap]


@dataclass(frozen=True)
class ExpertRule:
    """A placement rule that sends the routed experts' ops to the host and every other op
    to ``device``. Which ops those are depends on the program, so ``Strategy.apply`` binds
    it to each one (``for_program``)."""

    device: str  # where every op outside the experts runs
    experts: ExpertsSpec = None  # None: find_experts(program); a module-path glob; an ExpertMap

    def for_program(self, program: Program) -> Callable[[torch.fx.Node], Optional[str]]:
        """The node → device callable of this rule for ``program``."""
        dev, spec = self.device, self.experts
        if isinstance(spec, str):
            return lambda node: None if any(fnmatch.fnmatchcase(p, spec) for p in module_paths(node)) else dev
        experts = spec if isinstance(spec, ExpertMap) else find_experts(program)
        return lambda node: None if experts.contains(node) else dev

    def __call__(self, node: torch.fx.Node) -> Optional[str]:
        raise StrategyError(
            "an ExpertRule finds the experts in a program: apply the strategy (strategy.apply(program)) "
            "or bind the rule first (rule.for_program(program))"
        )


@dataclass(frozen=True)
class Recipe:
    """What a strategy makes of one program: the program to place (a strategy may rewrite
    it first), its placement rules, the weights it streams, and the passes run on the
    propagated graph, in order (``workbench.passes``)."""

    program: Program
    rules: Callable[[torch.fx.Node], Optional[str]]
    streamed: tuple[str, ...]
    passes: tuple[Pass, ...]


@dataclass(frozen=True)
class Strategy:
    """A placement recipe: rules + flags + streamed weights, then a list of passes."""

    name: str  # "all_on_device", "experts_on_host", "expert_streaming"
    description: str  # one sentence for tables and notebooks
    rules: Callable[[torch.fx.Node], str | None]  # node → device, or None for the host; an ExpertRule is bound per program
    skip_copies: bool  # both skip flags: caller stages inputs on, and takes outputs from, the device
    stream_constants: tuple[str, ...] = ()  # parameter names or globs kept on the host and streamed; ROUTED_EXPERTS: the found ones
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

    def apply(self, program: Program, *, strict: bool = False, check: Optional[bool] = None) -> DeviceGraph:
        """Place, propagate and run the passes of ``program`` under this strategy →
        ``DeviceGraph`` (``check``: the device-graph checks after every pass, see
        ``workbench.passes``).

        A strategy that moves the routed experts but finds none to move warns
        (``PlacementWarning``), or raises ``PlacementError`` with ``strict=True``.
        """
        self._check_program(program)
        with gc_paused():  # rewrites, placement, propagation and passes all build large graphs
            recipe = self.recipe(program)
            if self.stream_constants and not recipe.streamed:
                self._nothing_to_move(program, strict, "parameter")
            if not isinstance(self.rules, ExpertRule):
                placed = place(recipe.program, recipe.rules, strict=strict)
            else:
                rule, host_ops = recipe.rules, []

                def counted(node: torch.fx.Node) -> Optional[str]:
                    answer = rule(node)
                    if answer is None:
                        host_ops.append(node.name)
                    return answer

                placed = place(recipe.program, counted, strict=strict)
                if not host_ops:
                    self._nothing_to_move(program, strict, "op's module path")
            dg = propagate(
                placed,
                skip_h2d_for_method_inputs=self.skip_copies,
                skip_d2h_for_method_outputs=self.skip_copies,
                stream_constants=recipe.streamed,
            )
            return run_passes(dg, recipe.passes, check=check)

    def recipe(self, program: Program) -> Recipe:
        """This strategy's ``Recipe`` for ``program``: its rules (an ``ExpertRule`` bound to
        the program), its streamed weights and its passes (the ``schedule``)."""
        rules = self.rules.for_program(program) if isinstance(self.rules, ExpertRule) else self.rules
        return Recipe(program, rules, self.streamed(program), (schedule_pass(self.schedule),))

    def streamed(self, program: Program) -> tuple[str, ...]:
        """``stream_constants`` for ``program``: ROUTED_EXPERTS replaced by the experts found
        there, and only the names and globs that match a parameter of it."""
        names: list[str] = []
        for pattern in self.stream_constants:
            names += find_experts(program).weights if pattern == ROUTED_EXPERTS else [pattern]
        constants = program.constants.values()
        return tuple(n for n in names if any(fnmatch.fnmatchcase(c, n) for c in constants))

    def _nothing_to_move(self, program: Program, strict: bool, what: str) -> None:
        """The no-claim report: a strategy about experts that found none."""
        spec = self.rules.experts if isinstance(self.rules, ExpertRule) else None
        given = [p for p in self.stream_constants if p != ROUTED_EXPERTS] or ([spec] if isinstance(spec, str) else [])
        where = (
            f"{', '.join(map(repr, given))} {'matches' if len(given) == 1 else 'match'} no {what}"
            if given
            else "no routed experts were found (workbench.experts.find_experts looks for stacked "
            "per-expert weights or one module per expert, scored by a router)"
        )
        report_no_claim(
            f"{self.label} moved no expert in this program of {program.num_ops()} ops: {where}; "
            f"every op stays on {self.device}",
            strict,
            stacklevel=3,
        )

    def _check_program(self, program: Program) -> None:
        """A prefetching strategy needs the hints in the graph; a streaming strategy
        without prefetch must not get them (propagation would prefetch under the wrong
        label): ``hint_problem`` words what is wrong."""
        if not self.reads_hints:
            return
        hinted = any(n.op == "call_function" and n.target is SELECT_ROWS for n in program.graph.nodes)
        if hinted != self.prefetch:
            raise StrategyError(self.hint_problem(hinted))

    @property
    def reads_hints(self) -> bool:
        """Whether routing hints in the program matter to this strategy (it streams or prefetches)."""
        return bool(self.stream_constants) or self.prefetch

    def hint_problem(self, hinted: bool) -> str:
        """Why a program with (``hinted``) or without routing hints does not fit this strategy."""
        if not hinted:
            return (
                f"{self.label} prefetches from routing hints, but this program has none (no "
                "workbench::select_rows node); capture QwenMoEDecoder(config, expert_prefetch=True)"
            )
        return (
            f"{self.label} streams without prefetch, but this program carries routing hints "
            "(captured with expert_prefetch=True), which propagation would prefetch; use "
            f"{self.name}(prefetch=True) or capture the model with expert_prefetch=False"
        )


class StrategyError(WorkbenchError, ValueError):
    """A strategy does not fit the program it is applied to."""


def _check_experts(experts: ExpertsSpec, what: str) -> ExpertsSpec:
    if experts is None or isinstance(experts, ExpertMap) or (isinstance(experts, str) and experts):
        return experts
    raise StrategyError(
        f"{what} must be None (find the routed experts in the program), a non-empty glob, or an "
        f"ExpertMap from workbench.experts.find_experts; got {experts!r}"
    )


def all_on_device(device: str = "cuda:0", skip_copies: bool = True) -> Strategy:
    """Everything on ``device``: weights resident, only inputs/outputs cross."""
    check_flag(skip_copies, "skip_copies")
    dev = str(Device.parse(device))
    return Strategy("all_on_device", f"every op and weight on {dev}", lambda node: dev, skip_copies, device=dev)


def experts_on_host(device: str = "cuda:0", skip_copies: bool = True, experts: ExpertsSpec = None) -> Strategy:
    """Routed experts' FFNs on the host (weights stay there); everything else on ``device``.

    ``experts``: None finds them in the program; a glob over module paths
    (``EXPERT_MODULES``, the built-in decoder's) or an ``ExpertMap`` names them.
    """
    check_flag(skip_copies, "skip_copies")
    dev = str(Device.parse(device))
    return Strategy(
        "experts_on_host",
        f"routed experts run on the host; attention, router, shared expert on {dev}",
        ExpertRule(dev, _check_experts(experts, "experts")),
        skip_copies,
        device=dev,
    )


def expert_streaming(
    device: str = "cuda:0", skip_copies: bool = True, weights: ExpertsSpec = None, prefetch: bool = False
) -> Strategy:
    """Everything on ``device``; routed experts' weights stream from the host per layer.

    ``weights``: None finds them in the program; a glob over parameter names
    (``EXPERT_WEIGHTS``, the built-in decoder's) or an ``ExpertMap`` names them.
    ``prefetch=True`` needs a program of ``QwenMoEDecoder(config, expert_prefetch=True)``:
    each layer's predicted experts are prefetched during the layer before, and only the
    mispredicted ones are copied once the router has chosen.
    """
    check_flag(skip_copies, "skip_copies")
    check_flag(prefetch, "prefetch")
    dev = str(Device.parse(device))
    spec = _check_experts(weights, "weights")
    streamed = (ROUTED_EXPERTS,) if spec is None else (spec,) if isinstance(spec, str) else spec.weights
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
        stream_constants=streamed,
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
