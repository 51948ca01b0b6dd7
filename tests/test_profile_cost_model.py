"""A cost model of named parts with a published runtime's profile: ``CostModel.compose(...,
runtime=runtime_profile(name))`` (the core knows only the ``RuntimeTerms`` protocol)."""

import dataclasses

import pytest

from workbench.app.decode_model import regime_model, runtime_profile
from workbench.app.runtime_profiles import RuntimeProfileError, runtime_profiles
from workbench.errors import WorkbenchError
from workbench.runtime.cost_model import CostModel, CostModelError, CostModelTypeError, RuntimeTerms
from workbench.runtime.parts import part_facts


def test_the_profiles_per_copy_cost_adds_to_every_copy():
    """A profile's per-copy cost lengthens a copy by exactly that cost on the same link;
    the link's bandwidth is untouched (a large copy's extra time is the fixed cost only)."""
    base = CostModel.compose(gpu="rtx_a5000", link="pcie_gen4")
    offloader = runtime_profile("pytorch_offloaders")
    composed = CostModel.compose(gpu="rtx_a5000", link="pcie_gen4", runtime=offloader)
    per_copy = offloader.values["per_copy_cost"]
    assert per_copy == pytest.approx(regime_model().fits["offloader_per_copy_cost"])
    for nbytes in (4096, 64 << 20):
        extra = composed.copy_time_us("h2d", nbytes) - base.copy_time_us("h2d", nbytes)
        assert extra == pytest.approx(per_copy * 1e6)
    assert composed.h2d_bandwidth == base.h2d_bandwidth
    assert composed.name.endswith("+pytorch_offloaders")


def test_the_profile_sets_launch_kernel_and_bandwidth_terms():
    """Launch mode, per-launch cost (eager), kernel time and the achieved share of the
    GPU's datasheet bandwidth come from the profile; a graph profile differs from the
    eager one of the same runtime only in launch mode and launch cost."""
    eager, graph = runtime_profile("executorch_eager"), runtime_profile("executorch_graph")
    base = CostModel.compose(gpu="a100_80gb")
    e = CostModel.compose(gpu="a100_80gb", runtime=eager)
    g = CostModel.compose(gpu="a100_80gb", runtime=graph)
    assert (e.launch_mode, g.launch_mode) == ("eager", "graph")
    assert e.launch_overhead == eager.values["per_launch_cost"]
    assert e.kernel_gap == g.kernel_gap == regime_model().fits["kernel_time"]
    assert e.device_memory_bandwidth == pytest.approx(base.device_memory_bandwidth * eager.values["gpu_bandwidth_fraction"])
    assert dataclasses.replace(e, launch_mode="graph", launch_overhead=g.launch_overhead, name=g.name) == g


def test_host_bandwidth_is_the_profiles_share_of_the_hosts_dram_peak():
    """A profile that computes experts on the host sets the host's bandwidth to its share
    of the host part's DRAM peak; doubling the share doubles it."""
    profile = runtime_profile("ktransformers")
    share = profile.values["host_bandwidth_fraction"]
    model = CostModel.compose(gpu="rtx_5090", host="epyc_9355", link="pcie_gen5", runtime=profile)
    peak = part_facts("host", "epyc_9355")["dram_peak_bandwidth"]
    assert model.host_memory_bandwidth == pytest.approx(share * peak)
    doubled = runtime_profile("ktransformers", {**regime_model().fits, "ktransformers_host_bandwidth_fraction": 2 * share})
    assert CostModel.compose(gpu="rtx_5090", host="epyc_9355", runtime=doubled).host_memory_bandwidth == pytest.approx(2 * share * peak)


def test_a_bad_profile_name_lists_the_valid_ones():
    """An unknown profile name is a RuntimeProfileError (a WorkbenchError) that names
    every valid profile."""
    with pytest.raises(RuntimeProfileError, match="no runtime profile 'llama_cpp'") as info:
        runtime_profile("llama_cpp")
    assert isinstance(info.value, WorkbenchError)
    assert all(p.name in str(info.value) for p in runtime_profiles())


def test_a_profile_with_unfilled_fitted_terms_or_a_bad_runtime_object_is_refused():
    """compose refuses a profile whose fitted terms are not filled in (saying how to fill
    them), an object that is no RuntimeTerms, and one that sets a figure no cost model has."""
    raw = next(p for p in runtime_profiles() if p.name == "executorch_graph")
    assert isinstance(raw, RuntimeTerms)
    with pytest.raises(RuntimeProfileError, match="kernel_time.*runtime_profile"):
        CostModel.compose(gpu="a100_80gb", runtime=raw)
    with pytest.raises(CostModelTypeError, match="RuntimeTerms"):
        CostModel.compose(runtime=42)  # type: ignore[arg-type]

    class Odd:
        name = "odd"

        def cost_model_figures(self, machine, parts):
            return {"warp_speed": 9.0}

    with pytest.raises(CostModelError, match="warp_speed.*valid"):
        CostModel.compose(runtime=Odd())
