"""A cost model of named parts with a published runtime's profile: ``CostModel.compose(...,
runtime=runtime_profile(name))`` (the core knows only the ``RuntimeTerms`` protocol)."""

import dataclasses

import pytest

from workbench.speed.regime_model import regime_model, runtime_profile
from workbench.machine.runtime_profiles import RuntimeProfileError, runtime_profiles
from workbench.errors import WorkbenchError
from workbench.machine.cost_model import CostModel, CostModelError, CostModelTypeError, RuntimeTerms
from workbench.machine.parts import part_facts


def test_the_profiles_copy_terms_set_every_copys_cost():
    """A profile's per-copy cost lengthens a copy by exactly that cost on the same link, and
    keeps doing so when the link is swapped; the link's bandwidth is untouched; its copies
    per expert, pageable staging and loading of every visited expert are the cost model's."""
    base = CostModel.compose(gpu="rtx_a5000", link="pcie_gen4")
    streaming = runtime_profile("streaming_engines")
    costly = dataclasses.replace(streaming, values={**streaming.values, "copy_overhead": 1e-4})
    composed = CostModel.compose(gpu="rtx_a5000", link="pcie_gen4", runtime=costly)
    for nbytes in (4096, 64 << 20):
        extra = composed.copy_time_us("h2d", nbytes) - base.copy_time_us("h2d", nbytes)
        assert extra == pytest.approx(100.0)
    swapped = composed.with_link("pcie_gen5")
    assert swapped.copy_time_us("h2d", 4096) - CostModel.compose(gpu="rtx_a5000", link="pcie_gen5").copy_time_us("h2d", 4096) \
        == pytest.approx(100.0)
    assert swapped == CostModel.compose(gpu="rtx_a5000", link="pcie_gen5", runtime=costly).with_link("pcie_gen5")
    assert composed.h2d_bandwidth == base.h2d_bandwidth and composed.name.endswith("+streaming_engines")
    accelerate = CostModel.compose(gpu="rtx_a5000", link="pcie_gen4", runtime=runtime_profile("hf_offloaders"))
    assert (accelerate.copies_per_expert, accelerate.pageable_copies, accelerate.loads_all_experts) == (3.0, 1.0, 1.0)
    moe_infinity = CostModel.compose(gpu="rtx_a5000", link="pcie_gen4", runtime=runtime_profile("moe_infinity"))
    assert (moe_infinity.copies_per_expert, moe_infinity.pageable_copies, moe_infinity.loads_all_experts) == (1.0, 0.0, 0.0)


def test_the_profile_sets_launch_kernel_and_bandwidth_terms():
    """Launch mode, per-launch cost (eager), kernel time and the achieved share of the
    GPU's datasheet bandwidth come from the profile; a graph profile differs from the
    eager one of the same runtime only in launch mode and launch cost."""
    eager, graph = runtime_profile("executorch_eager"), runtime_profile("executorch_graph")
    base = CostModel.compose(gpu="a100_80gb")
    e = CostModel.compose(gpu="a100_80gb", runtime=eager)
    g = CostModel.compose(gpu="a100_80gb", runtime=graph)
    assert (e.launch_mode, g.launch_mode) == ("eager", "graph")
    assert e.launch_overhead == eager.values["launch_overhead"]
    assert e.kernel_gap == g.kernel_gap == regime_model().fits["kernel_time"]
    assert e.device_memory_bandwidth == pytest.approx(base.device_memory_bandwidth * eager.values["gpu_bandwidth_fraction"])
    assert dataclasses.replace(e, launch_mode="graph", launch_overhead=g.launch_overhead, launch_overlap=g.launch_overlap,
                               name=g.name) == g


def test_host_bandwidth_is_the_profiles_share_of_the_sockets_it_uses():
    """A profile that computes experts on the host sets the host's bandwidth to its share
    of the DRAM peak of the sockets its threads use: one socket of two unless the runtime
    is NUMA-aware or the run says how many; doubling the share doubles it."""
    profile = runtime_profile("ktransformers")
    share = profile.values["host_bandwidth_fraction"]
    peak = part_facts("host", "epyc_9355_2s")["dram_peak_bandwidth"]
    one = CostModel.compose(gpu="rtx_5090", host="epyc_9355_2s", link="pcie_gen5", runtime=profile)
    assert one.host_memory_bandwidth == pytest.approx(share * peak / 2)
    both = CostModel.compose(gpu="rtx_5090", host="epyc_9355_2s", runtime=profile.with_settings(sockets=2))
    assert both.host_memory_bandwidth == pytest.approx(share * peak)
    doubled = runtime_profile("ktransformers", {**regime_model().fits, "ggml_host_bandwidth_fraction": 2 * share})
    assert CostModel.compose(gpu="rtx_5090", host="epyc_9355_2s", runtime=doubled).host_memory_bandwidth == pytest.approx(share * peak)


def test_host_matvec_rates_follow_the_cores_threads_and_formats():
    """The host's matvec rate for a format is the runtime's kernels' rate per core, scaled
    by this host's FP32 FLOP rate per core over the core it was measured on, times its
    threads (the host's math cores by default, a run's threads when stated)."""
    from workbench.machine.runtime_profiles import host_matvec
    from workbench.machine.parts import part_figures

    profile = runtime_profile("ggml")
    rates = {f: (r, c) for f, r, c in host_matvec("ggml")}
    model = CostModel.compose(gpu="rtx_4090", host="core_i5_14600kf", runtime=profile)
    core = part_figures("host", "core_i5_14600kf")["host_flops"] / part_facts("host", "core_i5_14600kf")["cores"]
    q4k, measured_on = rates["q4_k"]
    assert dict(model.host_matvec_rates)["q4_k"] == pytest.approx(q4k * core / measured_on * 6)  # 6 performance cores
    four = CostModel.compose(gpu="rtx_4090", host="core_i5_14600kf", runtime=profile.with_settings(threads=4))
    assert dict(four.host_matvec_rates)["q4_k"] == pytest.approx(dict(model.host_matvec_rates)["q4_k"] * 4 / 6)
    assert dict(model.host_matvec_rates)["iq3_s"] < dict(model.host_matvec_rates)["q4_0"]
    with pytest.raises(RuntimeProfileError, match="threads must be a whole number"):
        profile.with_settings(threads=0)


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


@pytest.mark.parametrize("returned", [None, "fast", 42, ["launch_mode"]])
def test_runtime_terms_that_return_no_mapping_are_refused_by_name(returned):
    """A RuntimeTerms whose cost_model_figures returns something other than a mapping of
    figures is a CostModelTypeError naming the runtime, not a raw TypeError."""

    class Broken:
        name = "broken"

        def cost_model_figures(self, machine, parts):
            return returned

    with pytest.raises(CostModelTypeError, match="runtime 'broken': cost_model_figures must return a mapping"):
        CostModel.compose(runtime=Broken())


def test_a_fitted_term_that_is_not_a_number_in_range_is_refused():
    """A NaN, negative or out-of-range value for a fitted term never reaches a prediction:
    resolving the profile names the term and its range."""
    raw = next(p for p in runtime_profiles() if p.name == "ggml")
    for bad in (float("nan"), -1.0, 5.0):
        with pytest.raises(RuntimeProfileError, match="ggml_host_bandwidth_fraction"):
            raw.resolved({**regime_model().fits, "ggml_host_bandwidth_fraction": bad})
