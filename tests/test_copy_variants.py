"""The registry of copy variants: a variant declared once serves every stage."""

import pytest
import torch
from torch import nn

import workbench as wb
from conftest import assert_matches_eager
from workbench.builtin_copies import copy_handler
from workbench.copy_variants import (
    CopyVariant,
    CopyVariantError,
    copy_event_labels,
    copy_variant,
    copy_variants,
    register_copy_variant,
    unregister_copy_variant,
)
from workbench.devices import CPU, CopyKind
from workbench.graph_values import node_arg
from workbench.planning.plan_checks import plan_problems
from workbench.propagate import CopyFacts
from workbench.runtime.executor import estimate, run
from workbench.runtime.sim_timing import copy_cost

ROLE = "toy_flip"


@torch.library.custom_op("workbench_toy::flip_h2d_copy", mutates_args=())
def flip_h2d_copy(x: torch.Tensor, src: str, dst: str) -> torch.Tensor:
    """The host (cpu) handler: the rows of ``x`` in reverse order, in fresh memory."""
    return torch.flip(x, [0]).contiguous()


@flip_h2d_copy.register_fake
def _(x, src, dst):  # noqa: ANN001
    return torch.empty_like(x)


FLIP = torch.ops.workbench_toy.flip_h2d_copy.default


def _rewrite(context, old, target):
    """A device ``flip(w, [0])`` of a streamed weight becomes one copy of the flipped rows."""
    if old.target is not torch.ops.aten.flip.default or not context.is_streamed(old.args[0]) or list(old.args[1]) != [0]:
        return None
    source = context.new_node(node_arg(old, 0))
    new = context.emit_copy(
        FLIP, (source, str(CPU), str(target)), context.fresh_name(f"{old.name}_flipped"),
        CopyFacts(CopyKind.H2D, CPU, target, source, ROLE, serves=[old.name]),
    )  # fmt: skip
    return context.with_meta_of(new, old)


def _sim_flip(run, dst, x, index, stream):
    dst.copy_(torch.flip(x, [0]))


def _cost(model, step, node, record, workload):  # the workload (expected hit rates) moves no rows here
    return lambda: copy_cost(model, step, record.nbytes)


TOY = CopyVariant(
    role=ROLE,
    ops={FLIP: CopyKind.H2D},
    inputs=("value",),
    handlers={"sim": copy_handler(_sim_flip)},
    cost=_cost,
    render=lambda record: f"{record.value} flipped on its way to {record.dst}",
    rewrite=_rewrite,
    reason=lambda context, facts, readers: f"{', '.join(readers)} on {facts.dst} read {facts.value.name!r} flipped",
)


class _Flipper(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(6, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ torch.flip(self.w, [0]).T)


@pytest.fixture
def toy():
    register_copy_variant(TOY)
    yield TOY
    unregister_copy_variant(ROLE)


def test_a_toy_variant_registered_in_one_place_runs_end_to_end(toy):
    """A variant declared once (its rewrite, facts, sim handler, cost and rendering) is
    used by propagation, the plan checks, a sim run that matches eager, the estimate and
    the timeline's words: no stage names it."""
    torch.manual_seed(0)
    model, x = _Flipper(), torch.randn(3, 4)
    program = wb.capture(model, (x,))
    dg = wb.propagate(wb.place(program, lambda n: "cuda:0"), stream_constants=["w"])
    (record,) = [c for c in dg.copies if c.role == ROLE]
    assert record.kind == CopyKind.H2D and record.src == CPU and record.nbytes == 6 * 4 * 4
    assert dg.residency[record.value] == (CPU,)  # streamed: never placed on the device
    assert "flipped" in record.reason
    planned = wb.plan(dg)
    assert plan_problems(planned) == []
    result = run(planned, x, backend="sim")
    assert_matches_eager(result.outputs, model(x))
    modeled = estimate(planned)
    flip_events = [e for e in modeled if e.node == record.name]
    assert [e.nbytes for e in flip_events] == [record.nbytes]
    labels = copy_event_labels(result.timeline, dg)
    assert labels[next(e.id for e in result.timeline if e.node == record.name)] == f"{record.value} flipped on its way to cuda:0"


def test_without_the_variant_the_weight_is_copied_whole():
    """The toy's rewrite is what changed the graph: unregistered, the streamed weight
    crosses whole through a plain copy and the flip runs on the device."""
    assert ROLE not in {v.role for v in copy_variants()}
    model, x = _Flipper(), torch.randn(3, 4)
    dg = wb.propagate(wb.place(wb.capture(model, (x,)), lambda n: "cuda:0"), stream_constants=["w"])
    assert [c.role for c in dg.copies if c.value == "p_w"] == ["plain"]


def test_registry_refuses_what_cannot_hold(toy):
    """A taken role, a variant without a sim handler, inputs that are no record fields and
    an unknown role are each a CopyVariantError naming the problem."""
    with pytest.raises(CopyVariantError, match="registered already"):
        register_copy_variant(TOY)
    with pytest.raises(CopyVariantError, match="no handler for the 'sim' backend"):
        CopyVariant(ROLE, {FLIP: CopyKind.H2D}, ("value",), {"cuda": TOY.handlers["sim"]}, _cost, TOY.render)
    with pytest.raises(CopyVariantError, match="inputs must start with 'value'"):
        CopyVariant(ROLE, {FLIP: CopyKind.H2D}, ("rows",), TOY.handlers, _cost, TOY.render)
    with pytest.raises(CopyVariantError, match="no copy variant has role 'nope'; registered: plain, gather"):
        copy_variant("nope")
    with pytest.raises(CopyVariantError, match="cannot run on the 'cuda' backend"):
        TOY.handler("cuda")


def test_the_shipped_variants_are_registered_once_each():
    """Plain, gather, prefetch, reuse and routed are each one registry entry, with a
    handler for both backends."""
    roles = [v.role for v in copy_variants()]
    assert roles[:5] == ["plain", "gather", "prefetch", "reuse", "routed"]
    assert all(set(copy_variant(r).handlers) == {"sim", "cuda"} for r in roles[:5])


@pytest.mark.parametrize("first", ["workbench.builtin_copies", "workbench.moe.streaming", "workbench.propagate",
                                   "workbench.copy_variants", "workbench.runtime.executor"])
def test_shipped_variants_do_not_depend_on_which_module_is_imported_first(first):
    """Rule 4: whichever module a script imports first, the registry holds the shipped
    variants in one order (gather before the routed copy's rewrite) on its first read."""
    import subprocess
    import sys
    probe = (f"import importlib; importlib.import_module({first!r})\n"
             "from workbench.copy_variants import copy_variants\n"
             "print(' '.join(v.role for v in copy_variants()))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["plain", "gather", "prefetch", "reuse", "routed"], done.stderr[-2000:]
