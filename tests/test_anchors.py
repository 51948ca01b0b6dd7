"""Published decode anchors against the cost model: computed, never written in."""

import dataclasses
import functools

import pytest

from workbench.anchors import ANCHORS, UNMODELED_ANCHORS, Anchor, AnchorError, anchors_table, full_size_plan
from workbench.models import MoEConfig
from workbench.runtime import CostModel
from workbench.runtime.executor import estimate


@functools.lru_cache(maxsize=None)
def _tiny_plan():
    return full_size_plan(MoEConfig.tiny())


def test_modeled_times_are_the_estimates_of_the_plan():
    """Each modeled ms/token is estimate(plan, preset in the anchor's launch mode, in-place writes).span_us /
    1000, and the ratio is modeled / published: the table computes, it does not copy."""
    plan = _tiny_plan()
    table = anchors_table(plan)
    assert list(table.columns) == ["anchor", "hardware", "published ms/token", "modeled ms/token", "ratio"]
    for anchor, row in zip(ANCHORS, table.to_dict("records")):
        model = CostModel.preset(anchor.preset, link="pcie_gen4").with_launch_mode(anchor.launch_mode)
        assert row["modeled ms/token"] == round(estimate(plan, model, in_place_writes=True).span_us / 1000, 3)
        assert row["published ms/token"] == anchor.published_ms
        assert row["ratio"] == round(estimate(plan, model, in_place_writes=True).span_us / 1000 / anchor.published_ms, 3)


def test_the_launch_mode_changes_the_modeled_time():
    """Graph replay models faster than eager launches of the same plan on the same preset,
    and eager time is at least n_kernels × launch_overhead (the tiny model is issue-bound)."""
    plan = _tiny_plan()
    eager = ANCHORS[0]
    as_graph = dataclasses.replace(eager, launch_mode="graph")
    t_eager, t_graph = anchors_table(plan, anchors=[eager, as_graph])["modeled ms/token"].tolist()
    kernels = sum(1 for e in estimate(plan, CostModel.preset(eager.preset), in_place_writes=True) if e.kind == "compute")
    assert t_graph < t_eager
    assert t_eager * 1000 >= (kernels - 1) * CostModel.preset(eager.preset).launch_overhead * 1e6


def test_unmodeled_anchors_say_why_and_cannot_be_modeled():
    """Anchors the built-in model cannot express carry a reason and are refused by the table."""
    assert all(a.preset is None and a.reason for a in UNMODELED_ANCHORS)
    with pytest.raises(AnchorError, match="RTX 3090|Q4_K_M"):
        anchors_table(_tiny_plan(), anchors=list(UNMODELED_ANCHORS))
    assert isinstance(ANCHORS[0], Anchor) and {a.launch_mode for a in ANCHORS} == {"eager", "graph"}


@pytest.mark.slow
def test_the_35b_decode_on_the_a100_preset_is_within_20_percent_of_executorch():
    """The published 35B-A3B configuration, all on device, shape-only, on the A100 80 GB
    preset: modeled eager and graph-replay decode times are within ±20% of ExecuTorch's
    published 11.5 and 7.6 ms/token, and graph replay is the faster."""
    table = anchors_table()
    assert table["ratio"].between(0.8, 1.2).all(), table.to_string()
    eager, graph = table["modeled ms/token"]
    assert graph < eager


def test_a_plan_quantized_to_int4_holds_its_weights_at_int4_bytes():
    """``full_size_plan(formats=...)`` quantizes before planning: every weight of the int4
    plan is stored at 4.25 bits, so its resident weight bytes are 4.25 over the captured
    dtype's bits of the unquantized plan's, and its modeled graph replay is no slower
    (fewer bytes, the same kernels)."""
    unquantized, int4 = _tiny_plan(), full_size_plan(MoEConfig.tiny(), formats={"int4_g128": ["module:*"]})
    weights = lambda p: sum(p.constant_bytes.values())  # noqa: E731
    bits = 8 * MoEConfig.tiny().torch_dtype.itemsize  # the captured dtype's
    assert weights(int4) == pytest.approx(weights(unquantized) * 4.25 / bits, rel=0.02)
    graph = dataclasses.replace(ANCHORS[0], launch_mode="graph")
    t_full, t_int4 = (anchors_table(p, anchors=[graph])["modeled ms/token"].iloc[0] for p in (unquantized, int4))
    assert t_int4 <= t_full
